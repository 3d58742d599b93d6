"""The rows a keyword index holds: each chunk's id, text length, metadata and words, compactly.

One row per chunk, numbered by its *slot* (its key in the keyword engine), kept in a few
numpy arrays rather than a Python object per chunk: the ids as one fixed-width byte array
(found by binary search), the lengths as int32, a digest of each record's text and metadata
as uint64 (what a check compares with the store: :func:`digest`), the metadata (orjson) and
the words (each chunk's stems joined by spaces) as bytes laid end to end with the offset
where each row ends. Saved, the arrays are files that a process maps into memory
(``numpy.load(mmap_mode="r")``): a new process decodes none of them, holds no copy of its
own, and every process on the machine shares the pages.

The rows are kept in parts, as a search engine keeps its segments (:class:`Rows`): a build
is one part in id order; a catch-up adds a part of the rows it read and marks those it
replaced dead, so its work is its change's, not the collection's.

Filters are decided per *column* where they can be: a metadata key that takes few distinct
values (at most :data:`COLUMN_VALUES`: tenants, sources, access levels) is also kept as a code
per row into the list of its values, so a test of that key is decided once per distinct value
and spread to the rows by the codes (:meth:`Part.mask`). A key with more values than that is
decided row by row on the decoded metadata. Either way each test is the very predicate
:func:`~window_retriever.core._filters.compile_where` uses, so the answer is Chroma's.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from window_retriever.core._filters import Branch, Leaf, Tree

COLUMN_VALUES = 65_536
"""A metadata key with at most this many distinct values is kept as a column of codes."""

_END = b"\x01"
"""Ends every stored id: numpy's fixed-width bytes drop trailing NULs, and Chroma accepts
``"a"`` and ``"a\\x00"`` as two ids. Rows are in the order of these bytes (the ids' UTF-8,
which is code point order, but for ids that differ only by NUL characters)."""

_MISSING_CODE = -1


class Blob:
    """Byte strings laid end to end: row ``i`` is ``data[ends[i - 1]:ends[i]]``."""

    __slots__ = ("data", "ends")

    def __init__(self, data: np.ndarray, ends: np.ndarray) -> None:
        self.data = data
        self.ends = ends

    @classmethod
    def of(cls, items: Sequence[bytes]) -> Blob:
        ends = np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)))
        return cls(np.frombuffer(b"".join(items), dtype=np.uint8), ends)

    def __getitem__(self, row: int) -> bytes:
        start = int(self.ends[row - 1]) if row else 0
        return self.data[start : int(self.ends[row])].tobytes()

    def starts(self, rows: np.ndarray) -> np.ndarray:
        """Where each of ``rows`` starts in ``data``."""
        starts: np.ndarray = np.where(rows > 0, self.ends[rows - 1], 0)
        return starts

    @staticmethod
    def gathered(blobs: Sequence[Blob], which: np.ndarray, rows: np.ndarray) -> Blob:
        """Row ``rows[i]`` of ``blobs[which[i]]``, for every ``i``, as one blob.

        Copied in runs of rows that lie end to end in one blob (few where the rows come in
        order: one more each row left out or taken from another blob), not row by row.
        """
        total = len(rows)
        if not total:
            return Blob(np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.int64))
        starts = np.empty(total, dtype=np.int64)
        ends = np.empty(total, dtype=np.int64)
        for number, blob in enumerate(blobs):
            mine = which == number
            starts[mine], ends[mine] = blob.starts(rows[mine]), blob.ends[rows[mine]]
        breaks = (which[1:] != which[:-1]) | (starts[1:] != ends[:-1])
        firsts = np.flatnonzero(np.concatenate([[True], breaks]))
        lasts = np.append(firsts[1:] - 1, total - 1)
        pieces = [
            blobs[which[first]].data[starts[first] : ends[last]]
            for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True)
        ]
        return Blob(np.concatenate(pieces), np.cumsum(ends - starts))


class Part:
    """Rows stored together, one for each slot from ``start`` on (see :class:`Rows`).

    Args:
        ids: Each row's id as UTF-8 and :data:`_END` (a fixed-width byte array).
        lengths: Each row's text length in characters.
        digests: Each row's :func:`digest` of its text and metadata.
        metadata: Each row's metadata as orjson.
        words: Each row's stems joined by spaces, UTF-8 (empty for a text without a word).
        columns: For each metadata key with few values: a code per row (-1: the row has no
            such key) and the values the codes name.
        wide: The keys with too many values for a column (decided row by row).
        order: The rows in id order, for the binary search of an id; None: they are.
        start: The slot of the first row.
        origin: The folder it was loaded from (None: built in memory): a catch-up's save
            links its files, as the engine holds them, rather than write them.
    """

    __slots__ = (
        "_sorted",
        "_tokens",
        "columns",
        "digests",
        "ids",
        "lengths",
        "metadata",
        "order",
        "origin",
        "start",
        "wide",
        "words",
    )

    def __init__(
        self,
        ids: np.ndarray,
        lengths: np.ndarray,
        digests: np.ndarray,
        metadata: Blob,
        words: Blob,
        columns: Mapping[str, tuple[np.ndarray, list[Any]]],
        wide: frozenset[str],
        order: np.ndarray | None = None,
        start: int = 0,
        origin: Path | None = None,
    ) -> None:
        self.ids = ids
        self.lengths = lengths
        self.digests = digests
        self.metadata = metadata
        self.words = words
        self.columns = dict(columns)
        self.wide = wide
        self.order = order
        self.start = start
        self.origin = origin
        self._sorted: np.ndarray | None = None
        self._tokens: dict[str, tuple[str, list[str | None]]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def end(self) -> int:
        return self.start + len(self.ids)

    @property
    def name(self) -> str:
        """What its saved files' names begin with: its slots."""
        return f"rows-{self.start}-{self.end}"

    def at(self, start: int) -> Part:
        """The same rows from slot ``start`` on."""
        arrays = (self.ids, self.lengths, self.digests, self.metadata, self.words)
        return Part(*arrays, self.columns, self.wide, self.order, start)

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """Each of the ``wanted`` ids' last row in this part, or -1 (one binary search for all).

        An id is held more than once in a part joined of others (``order`` keeps them in
        slot order): the last is the newest, the only one that can be alive.
        """
        if self.order is None:
            held = self.ids
        elif self._sorted is None:
            held = self._sorted = self.ids[self.order]
        else:
            held = self._sorted
        found = np.searchsorted(held, wanted, side="right").astype(np.int64) - 1
        inside = found >= 0
        matched = np.zeros(len(wanted), dtype=bool)
        matched[inside] = held[found[inside]] == wanted[inside]
        if self.order is not None:
            found[matched] = self.order[found[matched]]
        found[~matched] = -1
        return found

    def mask(self, tree: Tree) -> np.ndarray:
        """The rows ``tree`` passes, as a boolean array."""
        decoded: list[dict[str, Any]] = []

        def rows_decoded() -> list[dict[str, Any]]:
            if not decoded:
                decoded.extend(self.metadata_at(row) for row in range(len(self)))
            return decoded

        def passing(node: Tree) -> np.ndarray:
            if isinstance(node, Branch):
                if not node.parts:
                    return np.ones(len(self), dtype=bool)
                masks = [passing(part) for part in node.parts]
                reduce = np.logical_and if node.every else np.logical_or
                combined: np.ndarray = reduce.reduce(masks)
                return combined
            return self._leaf(node, rows_decoded)

        return passing(tree)

    def _leaf(self, leaf: Leaf, decoded: Any) -> np.ndarray:
        test, key = leaf.predicate, leaf.key
        if key in self.wide:
            rows = decoded()
            return np.fromiter(map(test, rows), dtype=bool, count=len(rows))
        column = self.columns.get(key)
        if column is None:  # no row holds the key
            return np.full(len(self), test({}), dtype=bool)
        codes, values = column
        table = np.fromiter((test({key: value}) for value in values), bool, len(values))
        passing: np.ndarray = np.append(table, test({}))[codes]  # code -1: no such key
        return passing

    def tokens(self, row: int) -> list[str]:
        """The row's filter tokens: for each key of a column, the key held, and its value.

        What the engine indexes so that it decides a filter itself (``keywords._engine``).
        """
        if self._tokens is None:
            self._tokens = {
                key: (token(key), [value_token(key, value) for value in values])
                for key, (_, values) in self.columns.items()
            }
        found = []
        for key, (held, of_value) in self._tokens.items():
            code = int(self.columns[key][0][row])
            if code >= 0:
                found.append(held)
                if (value := of_value[code]) is not None:
                    found.append(value)
        return found

    def metadata_at(self, row: int) -> dict[str, Any]:
        stored = self.metadata[row]
        metadata: dict[str, Any] = orjson.loads(stored)
        if metadata.__class__ is not dict:  # a file rewritten under the map: rows_damaged
            msg = "not a JSON object"
            raise orjson.JSONDecodeError(msg, stored.decode(errors="replace"), 0)
        return metadata

    # ---- saved as files -----------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write the arrays in ``folder``, as files whose names begin with :attr:`name`."""
        prefix = self.name
        np.save(folder / f"{prefix}.ids.npy", self.ids)
        np.save(folder / f"{prefix}.lengths.npy", self.lengths)
        np.save(folder / f"{prefix}.digests.npy", self.digests)
        if self.order is not None:
            np.save(folder / f"{prefix}.order.npy", self.order)
        for blob_name, blob in (("metadata", self.metadata), ("words", self.words)):
            np.save(folder / f"{prefix}.{blob_name}.npy", blob.data)
            np.save(folder / f"{prefix}.{blob_name}-ends.npy", blob.ends)
        described = []
        for number, (key, (codes, values)) in enumerate(sorted(self.columns.items())):
            np.save(folder / f"{prefix}.column-{number}.npy", codes)
            described.append({"key": key, "values": values})
        columns = {"columns": described, "wide": sorted(self.wide), "order": self.order is not None}
        (folder / f"{prefix}.columns.json").write_bytes(orjson.dumps(columns))

    @classmethod
    def load(cls, folder: Path, start: int, end: int) -> Part:
        """The part of slots ``start`` to ``end`` saved in ``folder``, mapped into memory."""
        prefix = f"rows-{start}-{end}"

        def mapped(name: str) -> np.ndarray:
            path = folder / f"{prefix}.{name}.npy"
            array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
            return array

        described = orjson.loads((folder / f"{prefix}.columns.json").read_bytes())
        columns = {
            column["key"]: (mapped(f"column-{number}"), column["values"])
            for number, column in enumerate(described["columns"])
        }
        part = cls(
            mapped("ids"),
            mapped("lengths"),
            mapped("digests"),
            Blob(mapped("metadata"), mapped("metadata-ends")),
            Blob(mapped("words"), mapped("words-ends")),
            columns,
            frozenset(described["wide"]),
            mapped("order") if described["order"] else None,
            start,
            folder,
        )
        sizes = {len(part.lengths), len(part.digests), len(part.metadata.ends)}
        sizes |= {len(part.words.ends)} | {len(codes) for codes, _ in columns.values()}
        if part.order is not None:
            sizes.add(len(part.order))
        if sizes - {len(part.ids)} or len(part.ids) != end - start:
            msg = f"the saved rows {prefix} at {folder} do not agree in length"
            raise ValueError(msg)
        return part


def _gathered(parts: Sequence[Part], which: np.ndarray, rows: np.ndarray, start: int) -> Part:
    """Row ``rows[i]`` of ``parts[which[i]]``, for every ``i``, as one part from ``start`` on."""
    total = len(rows)
    size = max((part.ids.dtype.itemsize for part in parts), default=1)
    ids = np.empty(total, dtype=f"S{size}")
    lengths = np.empty(total, dtype=np.int32)
    digests = np.empty(total, dtype=np.uint64)
    for number, part in enumerate(parts):
        mine = which == number
        ids[mine] = part.ids[rows[mine]]
        lengths[mine] = part.lengths[rows[mine]]
        digests[mine] = part.digests[rows[mine]]
    wide = frozenset().union(*(part.wide for part in parts))
    columns = {}
    for key in sorted(set().union(*(part.columns for part in parts)) - wide):
        codes = np.full(total, _MISSING_CODE, dtype=np.int32)
        values: list[Any] = []
        code_of: dict[tuple[type, Any], int] = {}
        for number, part in enumerate(parts):
            if key not in part.columns:
                continue
            part_codes, part_values = part.columns[key]
            renamed = np.full(len(part_values) + 1, _MISSING_CODE, dtype=np.int32)
            for code, value in enumerate(part_values):
                held = _value_key(value)
                if held not in code_of:
                    code_of[held] = len(values)
                    values.append(value)
                renamed[code] = code_of[held]
            mine = which == number
            codes[mine] = renamed[part_codes[rows[mine]]]  # code -1: the last, no such key
        used = np.unique(codes[codes >= 0])
        if len(used) < len(values):  # only values the rows gathered hold (not a dead one's)
            kept = np.full(len(values) + 1, _MISSING_CODE, dtype=np.int32)
            kept[used] = np.arange(len(used), dtype=np.int32)
            codes, values = kept[codes], [values[code] for code in used.tolist()]
        if not values:
            continue  # no row gathered holds the key
        if len(values) > COLUMN_VALUES:
            wide |= {key}
        else:
            columns[key] = (codes, values)
    metadata = Blob.gathered([part.metadata for part in parts], which, rows)
    words = Blob.gathered([part.words for part in parts], which, rows)
    return Part(ids, lengths, digests, metadata, words, columns, wide, None, start)


def _join_parts(first: Part, second: Part) -> Part:
    """Two parts of neighbouring slots as one (the slots kept; its ``order`` made)."""
    which = np.repeat(np.array([0, 1], dtype=np.int64), [len(first), len(second)])
    rows = np.concatenate([np.arange(len(first)), np.arange(len(second))])
    joined = _gathered([first, second], which, rows, first.start)
    if len(joined.ids) > 1 and bool(np.any(joined.ids[1:] < joined.ids[:-1])):
        joined.order = np.argsort(joined.ids, kind="stable")  # sorted runs: merged, not sorted
    return joined


_JOIN = 2
"""A part is joined with the part before it while that one holds fewer than this many times
its rows: as in a binary counter, parts grow in size toward the first, a row is copied into a
larger part about log2(rows / rows a write adds) times, and a write of ``n`` rows costs
``n`` times that, amortised, however many rows are held."""


class Rows:
    """Every chunk an index holds, a row each, numbered by its *slot* (see the module docstring).

    The rows are kept in parts (:class:`Part`), each a run of slots and the files it is saved
    in. An index built from every record is one part, in id order. A catch-up adds a part of
    the rows it read at the slots after the last one and marks those it replaced or removed
    ``dead``: the rows held are neither copied nor rewritten, and a saved part's files are
    hard-linked into the next save (a catch-up's work is its change's, however many rows are
    held). A new part is joined with the one before it while that one is less than
    :data:`_JOIN` times larger (amortised, a few copies of each row); dead rows leave with a
    build anew. The slot is the row's key in the keyword engine (``keywords._engine``), so
    the engine is updated in place as well.

    Args:
        parts: Runs of slots, in order, each starting where the one before ends.
        dead: The slots whose rows are no longer held, sorted.
    """

    __slots__ = ("_starts", "dead", "parts")

    def __init__(self, parts: Sequence[Part] = (), dead: np.ndarray | None = None) -> None:
        self.parts = tuple(part for part in parts if len(part))
        self.dead = np.empty(0, dtype=np.int64) if dead is None else dead
        self._starts = np.array([part.start for part in self.parts], dtype=np.int64)

    @property
    def span(self) -> int:
        """The slots held, dead or not: the length of a mask over the rows."""
        return self.parts[-1].end if self.parts else 0

    def __len__(self) -> int:
        """The rows held (dead slots not counted)."""
        return self.span - len(self.dead)

    def _located(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's part (its number) and row in it."""
        which = np.searchsorted(self._starts, slots, side="right") - 1
        return which, slots - self._starts[which]

    def _part(self, row: int) -> tuple[Part, int]:
        part = self.parts[int(np.searchsorted(self._starts, row, side="right")) - 1]
        return part, row - part.start

    def id(self, row: int) -> str:
        part, local = self._part(row)
        return _decode_id(part.ids[local])

    def key(self, row: int) -> bytes:
        """The row's id as stored: what orders rows by id."""
        if len(self.parts) == 1:
            return bytes(self.parts[0].ids[row])
        part, local = self._part(row)
        return bytes(part.ids[local])

    def ids_at(self, rows: Iterable[int]) -> list[str]:
        if len(self.parts) == 1:
            ids = self.parts[0].ids
            return [_decode_id(ids[row]) for row in rows]
        return [self.id(row) for row in rows]

    def length(self, row: int) -> int:
        part, local = self._part(row)
        return int(part.lengths[local])

    def digest(self, row: int) -> int:
        part, local = self._part(row)
        return int(part.digests[local])

    def metadata_at(self, row: int) -> dict[str, Any]:
        part, local = self._part(row)
        return part.metadata_at(local)

    def words_at(self, row: int) -> str:
        part, local = self._part(row)
        return part.words[local].decode()

    def tokens(self, row: int) -> list[str]:
        part, local = self._part(row)
        return part.tokens(local)

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """Each id's row, or -1 for an id not held (a binary search in each part)."""
        found = np.full(len(ids), -1, dtype=np.int64)
        if not ids or not self.parts:
            return found
        wanted = np.array([_encode_id(chunk_id) for chunk_id in ids])
        for part in self.parts:
            local = part.find(wanted)
            held = np.flatnonzero(local >= 0)
            slots = local[held] + part.start
            alive = ~self._dead(slots)
            found[held[alive]] = slots[alive]
        return found

    def _dead(self, slots: np.ndarray) -> np.ndarray:
        dead = self.dead
        if not len(dead):
            return np.zeros(len(slots), dtype=bool)
        at = np.minimum(np.searchsorted(dead, slots), len(dead) - 1)
        found: np.ndarray = dead[at] == slots
        return found

    def live(self) -> np.ndarray:
        """The slots of the rows held, in order."""
        alive = np.ones(self.span, dtype=bool)
        alive[self.dead] = False
        return np.flatnonzero(alive)

    def worded(self) -> int:
        """How many rows held have a word (each a document of the engine)."""
        worded = sum(int(np.count_nonzero(np.diff(p.words.ends, prepend=0))) for p in self.parts)
        which, rows = self._located(self.dead)
        for number, part in enumerate(self.parts):
            mine = rows[which == number]
            worded -= int(np.count_nonzero(part.words.ends[mine] - part.words.starts(mine)))
        return worded

    def mask(self, tree: Tree) -> np.ndarray:
        """The rows ``tree`` passes, as a boolean array over the slots (a dead one never)."""
        if not self.parts:
            return np.zeros(0, dtype=bool)
        mask = np.concatenate([part.mask(tree) for part in self.parts])
        mask[self.dead] = False
        return mask

    def values(self, key: str) -> list[Any] | None:
        """Every value of ``key`` a row holds (and some a dead one held), once each.

        None where a part decides the key row by row (too many values for a column).
        """
        if any(key in part.wide for part in self.parts):
            return None
        found: dict[tuple[type, Any], Any] = {}
        for part in self.parts:
            if key in part.columns:
                for value in part.columns[key][1]:
                    found.setdefault(_value_key(value), value)
        return list(found.values())

    def changed(self, gone: np.ndarray, added: Rows) -> Rows:
        """These rows with the slots ``gone`` dead and ``added``'s rows at the slots after.

        What a catch-up holds (the class docstring): the rows held are not copied.
        """
        dead = np.union1d(self.dead, np.asarray(gone, dtype=np.int64))
        parts = [*self.parts, *(part.at(self.span + part.start) for part in added.parts)]
        while len(parts) > 1 and len(parts[-2]) < _JOIN * len(parts[-1]):
            last = parts.pop()
            parts.append(_join_parts(parts.pop(), last))
        return Rows(parts, dead)

    def compacted(self, gone: np.ndarray, added: Rows) -> Rows:
        """The rows held but ``gone`` and every row of ``added``, one part in id order.

        What a build from the same records holds: the slots are the rows' in id order.
        """
        every = Rows([*self.parts, *(part.at(self.span + part.start) for part in added.parts)])
        live = np.setdiff1d(self.live(), np.asarray(gone, dtype=np.int64), assume_unique=True)
        live = np.concatenate([live, np.arange(self.span, every.span)])
        which, rows = every._located(live)
        size = max((part.ids.dtype.itemsize for part in every.parts), default=1)
        ids = np.empty(len(live), dtype=f"S{size}")
        for number, part in enumerate(every.parts):
            mine = which == number
            ids[mine] = part.ids[rows[mine]]
        order = np.argsort(ids, kind="stable")
        return Rows([_gathered(every.parts, which[order], rows[order], 0)])

    # ---- saved as files -----------------------------------------------------------------

    def save(self, folder: Path, link: Callable[[str], None] | None = None) -> None:
        """Write the parts in ``folder`` (``rows.json`` names them, ``rows.dead.npy``).

        ``link``: given the name of each part loaded from a saved folder followed by a dot,
        it links that part's files into ``folder`` (not written again).
        """
        for part in self.parts:
            if link is not None and part.origin is not None:
                link(f"{part.name}.")
            else:
                part.save(folder)
        np.save(folder / "rows.dead.npy", self.dead)
        described = {"parts": [[part.start, part.end] for part in self.parts]}
        (folder / "rows.json").write_bytes(orjson.dumps(described))

    @classmethod
    def load(cls, folder: Path) -> Rows:
        """The parts saved in ``folder``, mapped into memory (nothing is read in full)."""
        described = orjson.loads((folder / "rows.json").read_bytes())
        parts = [Part.load(folder, int(start), int(end)) for start, end in described["parts"]]
        dead = np.load(folder / "rows.dead.npy", allow_pickle=False)  # small: read whole
        rows = cls(parts, dead)
        ends = [0, *(part.end for part in rows.parts)]
        if any(part.start != end for part, end in zip(rows.parts, ends, strict=False)) or (
            len(dead) and not 0 <= int(dead[0]) <= int(dead[-1]) < rows.span
        ):
            msg = f"the saved rows at {folder} do not follow each other"
            raise ValueError(msg)
        return rows


class _Coding:
    """One metadata key's column while rows are added: a code per value, the rows that hold it."""

    __slots__ = ("codes", "row_codes", "rows", "values")

    def __init__(self) -> None:
        self.codes: dict[tuple[type, Any], int] = {}
        self.values: list[Any] = []
        self.rows = array("q")
        self.row_codes = array("i")


class RowsBuilder:
    """Rows added in any order, encoded as they come; :meth:`rows` sorts them by id."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._lengths = array("i")
        self._digests = array("Q")
        self._metadata: list[bytes] = []
        self._words: list[bytes] = []
        self._columns: dict[str, _Coding | None] = {}
        """Per key: its coding, or None once it has too many values for a column."""

    def add(
        self,
        chunk_id: str,
        length: int,
        words: str,
        metadata: Mapping[str, Any],
        digest: int = 0,
    ) -> None:
        """One row: its id, text length, words (stems joined by spaces), metadata and digest."""
        row = len(self._ids)
        self._ids.append(chunk_id)
        self._lengths.append(length)
        self._digests.append(digest)
        # a copy: the bytes orjson returns keep its whole output buffer, many times a row's size
        # (docs/benchmarks.md#the-keyword-indexs-lifecycle-issue-28)
        self._metadata.append(memoryview(orjson.dumps(metadata)).tobytes())
        self._words.append(words.encode())
        columns = self._columns
        for key, value in metadata.items():
            coding = columns.get(key, _NEW)
            if coding is None:
                continue  # too many values: decided row by row
            if coding is _NEW:
                coding = columns[key] = _Coding()
            held = _value_key(value)
            code = coding.codes.get(held)
            if code is None:
                if len(coding.values) >= COLUMN_VALUES:
                    columns[key] = None
                    continue
                code = coding.codes[held] = len(coding.values)  # 1, 1.0 and True: three values
                coding.values.append(value)
            coding.rows.append(row)
            coding.row_codes.append(code)

    def rows(self) -> Rows:
        """The rows added, in id order; the builder is left empty.

        Each list of encoded rows is dropped once its blob is joined, so a build holds one
        copy of the words at a time.
        """
        ids = np.array([_encode_id(chunk_id) for chunk_id in self._ids] or [_END])
        ids = ids[: len(self._ids)]
        order = np.argsort(ids, kind="stable")
        columns = {}
        for key, coding in self._columns.items():
            if coding is not None:
                full = np.full(len(ids), _MISSING_CODE, dtype=np.int32)
                full[np.frombuffer(coding.rows, dtype=np.int64)] = np.frombuffer(
                    coding.row_codes, dtype=np.int32
                )
                columns[key] = (full[order], coding.values)
        wide = frozenset(key for key, coding in self._columns.items() if coding is None)
        lengths = np.frombuffer(self._lengths, dtype=np.int32)[order]
        digests = np.frombuffer(self._digests, dtype=np.uint64)[order]
        ordered = order.tolist()
        metadata = _joined(self._metadata, ordered)
        words = _joined(self._words, ordered)
        self._ids.clear()
        self._columns.clear()
        del self._lengths[:]
        del self._digests[:]
        return Rows([Part(ids[order], lengths, digests, metadata, words, columns, wide)])


def _joined(encoded: list[bytes], order: list[int]) -> Blob:
    """The rows of ``encoded`` in ``order`` as one blob; ``encoded`` is emptied on the way."""
    ordered = [encoded[row] for row in order]
    encoded.clear()
    blob = Blob.of(ordered)
    ordered.clear()
    return blob


_NEW: Any = object()


def _value_key(value: Any) -> tuple[type, Any]:
    """A value as a dict key that keeps its type: ``1``, ``1.0`` and ``True`` stay three."""
    return (value.__class__, orjson.dumps(value) if value.__class__ is list else value)


TOKEN_BYTES = 1024
"""A value whose filter token is longer is not indexed: a filter that passes it is decided on
the rows (tantivy refuses a term of 64 KiB or more)."""


def token(key: str) -> str:
    """The filter token of a row that holds ``key``."""
    return orjson.dumps([key]).decode()


def value_token(key: str, value: Any) -> str | None:
    """The filter token of a row whose ``key`` holds ``value``, or None if too long.

    Its type kept: ``1``, ``1.0`` and ``True`` are three. Longer than :data:`TOKEN_BYTES`:
    None, not indexed.
    """
    found = orjson.dumps([key, value.__class__.__name__, value]).decode()
    return found if len(found) <= TOKEN_BYTES else None


def digest(text: str, metadata: Mapping[str, Any]) -> int:
    """A record's text and metadata as 64 bits: equal records give equal digests.

    The metadata with its keys sorted (a store may return them in any order), types kept
    (``1``, ``1.0`` and ``True`` differ). What a check compares with the store to find a
    record written without the index being told (docs/how-it-works.md).
    """
    hashed = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8)
    hashed.update(b"\0")
    hashed.update(orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS))
    return int.from_bytes(hashed.digest(), "little")


def _encode_id(chunk_id: str) -> bytes:
    return chunk_id.encode("utf-8", "surrogatepass") + _END


def _decode_id(stored: bytes) -> str:
    raw = bytes(stored)
    if not raw.endswith(_END):  # a file rewritten under the map (zeros past a shorter one's end)
        raise UnicodeDecodeError("utf-8", raw, 0, len(raw), "a stored id ends with \\x01")
    return raw[:-1].decode("utf-8", "surrogatepass")
