"""The rows a keyword index holds: each chunk's id, text length, metadata and words, compactly.

One row per chunk, in id order, kept in a few numpy arrays rather than a Python object per
chunk: the ids as one fixed-width byte array (found by binary search), the lengths as int32,
a digest of each record's text and metadata as uint64 (what a check compares with the store:
:func:`digest`),
the metadata (orjson) and the words (each chunk's stems joined by spaces) as bytes laid end to
end with the offset where each row ends. Saved, the arrays are files that a process maps into
memory (``numpy.load(mmap_mode="r")``): a new process decodes none of them, holds no
copy of its own, and every process on the machine shares the pages.

Filters are decided per *column* where they can be: a metadata key that takes few distinct
values (at most :data:`COLUMN_VALUES`: tenants, sources, access levels) is also kept as a code
per row into the list of its values, so a test of that key is decided once per distinct value
and spread to the rows by the codes (:meth:`Rows.mask`). A key with more values than that is
decided row by row on the decoded metadata. Either way each test is the very predicate
:func:`~window_retriever.core._filters.compile_where` uses, so the answer is Chroma's.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Mapping, Sequence
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
    def merged(held: Blob, rows: np.ndarray, added: Blob, from_added: np.ndarray) -> Blob:
        """``held``'s ``rows`` and every row of ``added``, placed where ``from_added`` says.

        Copied in runs of rows that lie end to end in one blob (few: one more each row
        removed or added), not row by row.
        """
        total = len(from_added)
        if not total:
            return Blob(np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.int64))
        starts = np.empty(total, dtype=np.int64)
        ends = np.empty(total, dtype=np.int64)
        starts[~from_added], ends[~from_added] = held.starts(rows), held.ends[rows]
        every = np.arange(len(added.ends))
        starts[from_added], ends[from_added] = added.starts(every), added.ends
        breaks = (from_added[1:] != from_added[:-1]) | (starts[1:] != ends[:-1])
        firsts = np.flatnonzero(np.concatenate([[True], breaks]))
        lasts = np.append(firsts[1:] - 1, total - 1)
        pieces = [
            (added if from_added[first] else held).data[starts[first] : ends[last]]
            for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True)
        ]
        return Blob(np.concatenate(pieces), np.cumsum(ends - starts))


class Rows:
    """Every chunk an index holds, a row each in id order (see the module docstring).

    Args:
        ids: Each row's id as UTF-8 and :data:`_END`, sorted (a fixed-width byte array).
        lengths: Each row's text length in characters.
        digests: Each row's :func:`digest` of its text and metadata.
        metadata: Each row's metadata as orjson.
        words: Each row's stems joined by spaces, UTF-8 (empty for a text without a word).
        columns: For each metadata key with few values: a code per row (-1: the row has no
            such key) and the values the codes name.
        wide: The keys with too many values for a column (decided row by row).
        slots: Each row's key in the keyword engine (``keywords._engine``): it stays with
            its chunk while rows come and go around it, so the engine is updated in place;
            None for ``0 .. len - 1``.
    """

    __slots__ = (
        "_by_slot",
        "columns",
        "digests",
        "ids",
        "lengths",
        "metadata",
        "slots",
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
        slots: np.ndarray | None = None,
    ) -> None:
        self.ids = ids
        self.slots = np.arange(len(ids), dtype=np.int64) if slots is None else slots
        self._by_slot: np.ndarray | None = None
        self.lengths = lengths
        self.digests = digests
        self.metadata = metadata
        self.words = words
        self.columns = dict(columns)
        self.wide = wide

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def next_slot(self) -> int:
        """The first slot no row holds past every one that does."""
        return int(self.slots.max()) + 1 if len(self.slots) else 0

    def by_slot(self) -> np.ndarray:
        """Each slot's row, -1 for a slot no row holds (made once, on first use)."""
        if self._by_slot is None:
            by_slot = np.full(self.next_slot, -1, dtype=np.int64)
            by_slot[self.slots] = np.arange(len(self.slots))
            self._by_slot = by_slot
        return self._by_slot

    def id(self, row: int) -> str:
        return _decode_id(self.ids[row])

    def ids_at(self, rows: Iterable[int]) -> list[str]:
        ids = self.ids
        return [_decode_id(ids[row]) for row in rows]

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """Each id's row, or -1 for an id not held (one binary search for all of them)."""
        if not ids or not len(self.ids):
            return np.full(len(ids), -1, dtype=np.int64)
        wanted = np.array([_encode_id(chunk_id) for chunk_id in ids])
        found = np.searchsorted(self.ids, wanted).astype(np.int64)
        inside = found < len(self.ids)
        found[~inside] = -1
        held = found >= 0
        held[held] = self.ids[found[held]] == wanted[held]
        found[~held] = -1
        return found

    def metadata_at(self, row: int) -> dict[str, Any]:
        stored = self.metadata[row]
        metadata: dict[str, Any] = orjson.loads(stored)
        if metadata.__class__ is not dict:  # a file rewritten under the map: rows_damaged
            msg = "not a JSON object"
            raise orjson.JSONDecodeError(msg, stored.decode(errors="replace"), 0)
        return metadata

    def words_at(self, row: int) -> str:
        return self.words[row].decode()

    def merged(self, kept: np.ndarray, added: Rows, first_slot: int | None = None) -> Rows:
        """The rows ``kept`` passes and every row of ``added`` (other ids), in id order.

        What a catch-up holds: array operations, no loop over the rows kept. ``first_slot``:
        the rows kept keep their slots and those added take slots from it on (an engine
        updated in place); None: every row's slot is its row (an engine indexed anew).
        """
        rows = np.flatnonzero(kept)
        held_ids = self.ids[rows]
        total = len(rows) + len(added)
        from_added = np.zeros(total, dtype=bool)
        from_added[np.searchsorted(held_ids, added.ids) + np.arange(len(added))] = True
        size = max(self.ids.dtype.itemsize, added.ids.dtype.itemsize)
        ids = np.empty(total, dtype=f"S{size}")
        ids[~from_added], ids[from_added] = held_ids, added.ids
        lengths = np.empty(total, dtype=np.int32)
        lengths[~from_added], lengths[from_added] = self.lengths[rows], added.lengths
        digests = np.empty(total, dtype=np.uint64)
        digests[~from_added], digests[from_added] = self.digests[rows], added.digests
        slots = None
        if first_slot is not None:
            slots = np.empty(total, dtype=np.int64)
            slots[~from_added] = self.slots[rows]
            slots[from_added] = first_slot + np.arange(len(added), dtype=np.int64)
        wide = self.wide | added.wide
        columns = {}
        for key in sorted((self.columns.keys() | added.columns.keys()) - wide):
            codes = np.full(total, _MISSING_CODE, dtype=np.int32)
            values: list[Any] = []
            if key in self.columns:
                held_codes, held_values = self.columns[key]
                codes[~from_added], values = held_codes[rows], list(held_values)
            if key in added.columns:
                added_codes, added_values = added.columns[key]
                code_of = {_value_key(value): code for code, value in enumerate(values)}
                renamed = np.full(len(added_values) + 1, _MISSING_CODE, dtype=np.int32)
                for code, value in enumerate(added_values):
                    held = _value_key(value)
                    if held not in code_of:
                        code_of[held] = len(values)
                        values.append(value)
                    renamed[code] = code_of[held]
                codes[from_added] = renamed[added_codes]
            if len(values) > COLUMN_VALUES:
                wide |= {key}
            else:
                columns[key] = (codes, values)
        return Rows(
            ids,
            lengths,
            digests,
            Blob.merged(self.metadata, rows, added.metadata, from_added),
            Blob.merged(self.words, rows, added.words, from_added),
            columns,
            wide,
            slots,
        )

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

    # ---- saved as files -----------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write the arrays under ``folder`` (files of their own; ``columns.json`` names them)."""
        np.save(folder / "ids.npy", self.ids)
        np.save(folder / "lengths.npy", self.lengths)
        np.save(folder / "digests.npy", self.digests)
        np.save(folder / "slots.npy", self.slots)
        for name, blob in (("metadata", self.metadata), ("words", self.words)):
            np.save(folder / f"{name}.npy", blob.data)
            np.save(folder / f"{name}-ends.npy", blob.ends)
        described = []
        for number, (key, (codes, values)) in enumerate(sorted(self.columns.items())):
            np.save(folder / f"column-{number}.npy", codes)
            described.append({"key": key, "values": values})
        columns = {"columns": described, "wide": sorted(self.wide)}
        (folder / "columns.json").write_bytes(orjson.dumps(columns))

    @classmethod
    def load(cls, folder: Path) -> Rows:
        """The arrays saved under ``folder``, mapped into memory (nothing is read in full)."""

        def mapped(name: str) -> np.ndarray:
            array: np.ndarray = np.load(folder / name, mmap_mode="r", allow_pickle=False)
            return array

        described = orjson.loads((folder / "columns.json").read_bytes())
        columns = {
            column["key"]: (mapped(f"column-{number}.npy"), column["values"])
            for number, column in enumerate(described["columns"])
        }
        rows = cls(
            mapped("ids.npy"),
            mapped("lengths.npy"),
            mapped("digests.npy"),
            Blob(mapped("metadata.npy"), mapped("metadata-ends.npy")),
            Blob(mapped("words.npy"), mapped("words-ends.npy")),
            columns,
            frozenset(described["wide"]),
            mapped("slots.npy"),
        )
        sizes = {
            len(rows.lengths),
            len(rows.digests),
            len(rows.slots),
            len(rows.metadata.ends),
            len(rows.words.ends),
        }
        sizes |= {len(codes) for codes, _ in columns.values()}
        if sizes - {len(rows.ids)}:
            msg = f"the saved rows at {folder} do not agree in length"
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
        return Rows(ids[order], lengths, digests, metadata, words, columns, wide)


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
