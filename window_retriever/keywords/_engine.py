"""The keyword index's engine: the words of a text, tantivy's BM25 over them, the saved folder.

``keywords._index`` keeps an index current with its collection; this module makes one state
of it (:class:`Built`): the rows (``keywords._rows``) and a tantivy index over their words,
saved whole in a folder or held in memory, and loaded back only when every saved file is as
it was written.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from window_retriever.core._filters import Branch, Tree
from window_retriever.keywords._rows import Rows, RowsBuilder, digest, token, value_token

logger = logging.getLogger("window_retriever.keywords._index")

FORMAT = 8
"""The saved index's layout; another value (or other tokenizer settings) means rebuild (4: the
rows as arrays, ``keywords._rows``; 5: each row's digest, and the writes not yet settled; 6:
the engine keys its documents by slot, updated in place; 7: the rows in parts, a catch-up's
added beside those held; 8: the engine holds each row's filter tokens)."""

NOTHING: Any = object()
"""A filter no row passes (:meth:`Engine.filtered`)."""

_EVERY: Any = object()

TOKENIZER = {"stopwords": "en", "stemmer": "english", "lower": True, "pattern": r"(?u)\b\w\w+\b"}
ENGINE = {"name": "tantivy", "version": "0.27", "k1": 1.2, "b": 0.75}


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What tells one state of a collection from another, cheaply."""

    collection_id: str
    count: int
    generation: str | None

    def as_json(self) -> dict[str, Any]:
        return {"collection_id": self.collection_id, "count": self.count, "gen": self.generation}


Unsettled = Mapping[str, tuple[float, frozenset[str]]]
"""Writes begun but not yet finished when a state was read: each one's token -> (when it was
recorded, the ids it writes). Their records are read again until they settle
(docs/how-it-works.md#how-the-index-learns-that-the-collection-changed)."""


@dataclass(frozen=True, slots=True)
class Built:
    """One state of the collection, indexed: its rows (by slot) and the engine over them."""

    fingerprint: Fingerprint
    rows: Rows
    engine: Engine | None  # over the rows that hold at least one word; None if none does
    unsettled: Unsettled = field(default_factory=dict)
    files: Mapping[str, list[int]] = field(default_factory=dict)
    """Each saved file's size and CRC-32 (:func:`checksums`); empty for one in memory."""
    deleted: int = 0
    """Documents deleted from the engine since it was indexed anew (:func:`updated`)."""


# ---- the words of a text ---------------------------------------------------------------------

_STOPWORDS = frozenset(
    (  # noqa: SIM905 - one list to read against Lucene's
        "a an and are as at be but by for if in into is it no not of on or such that the their "
        "then there these they this to was will with"
    ).split()
)
"""Lucene's English stop words (the set ``bm25s`` calls ``"en"``, which the index used before)."""

_words = re.compile(str(TOKENIZER["pattern"])).findall


class _Stemmers(threading.local):
    """One Snowball stemmer per thread (PyStemmer's objects are not thread-safe)."""

    stemmer: Any = None


_stemmers = _Stemmers()


def stems(text: str) -> list[str]:
    """Lower-cased words of two characters or more, stop words out, Snowball stems, in order."""
    if _stemmers.stemmer is None:
        import Stemmer

        _stemmers.stemmer = Stemmer.Stemmer(TOKENIZER["stemmer"])
    words = [word for word in _words(text.lower()) if word not in _STOPWORDS]
    stems: list[str] = _stemmers.stemmer.stemWords(words)
    return stems


@functools.cache
def _tantivy() -> Any:
    import tantivy

    return tantivy


_WRITER_HEAP = 128 * 2**20
"""The writer's memory while indexing (tantivy flushes a segment when it is full)."""

_GROWTH = 4
"""How many times more hits a filtered search asks for when too few of them pass."""

_SMALL_FILTER = 4096
"""A filter that passes at most this many rows is searched within them (a set of rows)."""


class Engine:
    """A tantivy index of the rows that hold a word, and its searcher.

    Three fields: ``words`` (the row's stems, ranked by tantivy's BM25: k1 1.2, b 0.75),
    ``slot`` (the row's slot, ``keywords._rows.Rows``: indexed, so a catch-up deletes by
    it, and a fast field, read back as the row) and ``filters`` (the row's filter tokens,
    ``Part.tokens``: the keys it holds and their values, so that the engine decides a filter
    on them, :meth:`filtered`). ``path``: the folder it was opened from, None in memory.
    """

    def __init__(
        self,
        index: Any,
        rows: Rows,
        path: Path | None = None,
        held: Mapping[str, int] | None = None,
    ) -> None:
        self.index = index
        self.path = path
        self.held = dict(held or {})
        """Each file of ``path`` as opened, by its inode: another process may replace them."""
        self.rows = rows
        index.reload()  # the reader sees the last commit now, not after tantivy's delay
        self.searcher = index.searcher()

    @staticmethod
    def schema() -> Any:
        tantivy = _tantivy()
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("words", tokenizer_name="whitespace", index_option="freq")
        builder.add_unsigned_field("slot", indexed=True, fast=True)
        builder.add_text_field("filters", tokenizer_name="raw", index_option="basic")
        return builder.build()

    def filtered(self, tree: Tree) -> Any:
        """``tree`` as a query of the filter tokens, :data:`NOTHING`, or None if it cannot be.

        A leaf on a key becomes the set of the tokens of the values it passes (each value
        tested by its predicate, as on the rows), and the rows without the key if it passes
        those; None where a part decides the key row by row, or a value it passes has no
        token (too long).
        """
        tantivy = _tantivy()
        schema, occur = self.index.schema, tantivy.Occur

        def query(node: Tree) -> Any:
            if isinstance(node, Branch):
                parts = [query(part) for part in node.parts]
                if any(part is None for part in parts):
                    return None
                if node.every:
                    if any(part is NOTHING for part in parts):
                        return NOTHING
                    clauses = [(occur.Must, part) for part in parts if part is not _EVERY]
                    return tantivy.Query.boolean_query(clauses) if clauses else _EVERY
                if any(part is _EVERY for part in parts):
                    return _EVERY
                clauses = [(occur.Should, part) for part in parts if part is not NOTHING]
                return tantivy.Query.boolean_query(clauses) if clauses else NOTHING
            values = self.rows.values(node.key)
            if values is None:
                return None
            tokens = [value_token(node.key, v) for v in values if node.predicate({node.key: v})]
            if None in tokens:
                return None
            clauses = []
            if tokens:
                held = tantivy.Query.term_set_query(schema, "filters", tokens)
                clauses.append((occur.Should, held))
            if node.predicate({}):  # the rows without the key pass
                has = tantivy.Query.term_query(schema, "filters", token(node.key))
                every = [(occur.Must, tantivy.Query.all_query()), (occur.MustNot, has)]
                clauses.append((occur.Should, tantivy.Query.boolean_query(every)))
            return tantivy.Query.boolean_query(clauses) if clauses else NOTHING

        found = query(tree)
        return tantivy.Query.all_query() if found is _EVERY else found

    def top(
        self, stems: list[str], k: int, mask: np.ndarray | None, filtered: Any = None
    ) -> list[tuple[int, float]]:
        """The ``k`` best rows (``mask`` passes, if given) and their scores; ties by id.

        ``filtered``: the filter as a query of the engine (:meth:`filtered`), which then
        finds the rows ``mask`` passes itself, and is asked for as many hits as without a
        filter (else, for as many more as the filter is narrow). Tantivy allocates for the
        hits it is asked for, so it is never asked for more than the documents it holds:
        any ``k`` costs what the index holds at most.
        """
        tantivy = _tantivy()
        schema, should = self.index.schema, tantivy.Occur.Should
        clauses = [(should, tantivy.Query.term_query(schema, "words", stem)) for stem in stems]
        query = tantivy.Query.boolean_query(clauses)  # a repeated word counts once per repeat
        passing = None if mask is None else int(np.count_nonzero(mask))
        if passing == 0 or filtered is NOTHING:
            return []
        if filtered is not None:
            within = tantivy.Query.const_score_query(filtered, 0.0)  # adds nothing to the score
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query), (tantivy.Occur.Must, within)]
            )
            passing = None  # the engine finds the rows that pass: no more hits asked for
        elif mask is not None and passing is not None and passing <= _SMALL_FILTER:
            slots = np.flatnonzero(mask).tolist()
            rows = tantivy.Query.term_set_query(schema, "slot", slots)
            within = tantivy.Query.const_score_query(rows, 0.0)  # adds nothing to the score
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query), (tantivy.Occur.Must, within)]
            )
            mask = None
        held = int(self.searcher.num_docs)
        if held == 0:
            return []
        limit = min(k + 8, held)
        if mask is not None and passing is not None:
            limit = min(int(limit * len(self.rows) / passing * 1.5), held)
        while True:
            found = self.searcher.search(query, limit, count=False).hits
            rows = self.searcher.fast_field_values("slot", [address for _, address in found])
            hits = list(zip(rows, (score for score, _ in found), strict=True))
            if mask is not None:
                hits = [hit for hit in hits if mask[hit[0]]]
            key = self.rows.key
            hits.sort(key=lambda hit: (-hit[1], key(hit[0])))
            if len(found) < limit or limit == held:  # every matching row was seen
                return hits[:k]
            if len(hits) > k and hits[k - 1][1] > found[-1][0]:
                return hits[:k]  # no row past the limit can tie or beat the k-th
            limit = min(limit * _GROWTH, held)


def engine_failed(error: BaseException) -> bool:
    """Whether tantivy failed: its errors, and pyo3's ``PanicException`` (a ``BaseException``)."""
    return isinstance(error, ValueError | OSError) or type(error).__name__ == "PanicException"


def rows_damaged(error: BaseException) -> bool:
    """Whether reading the saved rows failed: a file of theirs rewritten since it was loaded.

    The rows are mapped from their files (``keywords._rows``), checked only when loaded: a
    file overwritten under a process that holds it (``cp backup/* index/``) gives an id that is
    not UTF-8, metadata that is not a JSON object, a column code past its values.
    """
    import orjson

    return isinstance(error, UnicodeDecodeError | orjson.JSONDecodeError | IndexError)


def index_records(
    fingerprint: Fingerprint,
    ids: list[str],
    documents: list[str],
    metadatas: list[Mapping[str, Any]],
    directory: Path | None,
) -> Built:
    """Tokenise the records and index them (:func:`build`)."""
    builder = RowsBuilder()
    add_records(builder, ids, documents, metadatas)
    return build(fingerprint, builder.rows(), directory)


def add_records(
    builder: RowsBuilder,
    ids: Sequence[str],
    documents: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]],
) -> None:
    """Add each record as a row: its id, text length, words (its stems), metadata and digest."""
    for chunk_id, text, metadata in zip(ids, documents, metadatas, strict=True):
        builder.add(chunk_id, len(text), " ".join(stems(text)), metadata, digest(text, metadata))


def build(
    fingerprint: Fingerprint,
    rows: Rows,
    directory: Path | None,
    unsettled: Unsettled | None = None,
) -> Built:
    """Index the rows (those without a word stay out of the engine); saved under ``directory``.

    Saved, the snapshot serves the saved files (mapped into memory), not the arrays given,
    and ``unsettled`` is saved with them.
    """
    unsettled = dict(unsettled or {})
    tantivy = _tantivy()
    target = None if directory is None else directory / fingerprint.collection_id
    temporary = None if target is None else target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    if temporary is not None and target is not None:
        try:
            temporary.mkdir(parents=True)
            _sweep(target, temporary)
        except OSError as error:
            logger.warning("the keyword index could not be saved at %s: %s", target, error)
            temporary = target = None
    index = tantivy.Index(Engine.schema(), path=None if temporary is None else str(temporary))
    writer = index.writer(_WRITER_HEAP, 1)
    indexed = _add(writer, rows, rows.live().tolist())
    writer.commit()
    writer.wait_merging_threads()
    if temporary is not None and target is not None:
        saved = _saved(temporary, target, fingerprint, rows, indexed, unsettled)
        if saved is None:  # not saved (logged): the same rows in memory
            return build(fingerprint, rows, None, unsettled)
        return saved
    return Built(fingerprint, rows, Engine(index, rows) if indexed else None, unsettled)


def _add(writer: Any, rows: Rows, which: Iterable[int]) -> int:
    """Add each of the rows ``which`` that holds a word as a document; how many were added."""
    tantivy = _tantivy()
    added = 0
    for row in which:
        text = rows.words_at(row)
        if text:
            document = tantivy.Document()
            document.add_text("words", text)
            document.add_unsigned("slot", row)
            for held in rows.tokens(row):
                document.add_text("filters", held)
            writer.add_document(document)
            added += 1
    return added


def updated(
    engine: Engine,
    files: Mapping[str, list[int]],
    fingerprint: Fingerprint,
    rows: Rows,
    removed: Sequence[int],
    added: Sequence[int],
    directory: Path | None,
    unsettled: Unsettled | None = None,
    deleted: int = 0,
    serve: Callable[[Built], None] | None = None,
) -> Built | None:
    """``engine`` with slots ``removed`` deleted and rows ``added`` of ``rows`` added.

    The work of the change, not of the index; the result holds ``rows``.

    Like Lucene's, tantivy's BM25 statistics count a deleted document until its segment is
    merged, so the ranking can differ a little from a build of the same rows. A saved
    engine is updated in a new folder whose unchanged files are hard links to the held
    one's (tantivy never rewrites a file, nor ``keywords._rows`` a part; ``files``: their
    checksums, not read again), then saved as :func:`build` saves (the held folder, which
    other processes may have mapped, is never written); one in memory is updated in place
    (the held snapshot's searcher keeps seeing its own state). None, and the caller builds,
    where that cannot be done (a folder that cannot be linked, one saved that is to be held
    in memory or the reverse).

    ``serve``: given the updated index before it is saved (its rows in memory, its engine in
    the new folder), so that searches see the change while it is saved (found 0.90 s after
    the write at a million chunks, 1.08 s without); the saved index returned replaces it.
    """
    tantivy = _tantivy()
    unsettled = dict(unsettled or {})
    target = None if directory is None else directory / fingerprint.collection_id
    temporary = None
    if engine.path is not None and target is not None:
        temporary = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
        try:
            temporary.mkdir(parents=True)
            _link_held(engine.path, temporary, engine.held, _ours, invert=True)
            index = tantivy.Index.open(str(temporary))
        except BaseException as error:
            shutil.rmtree(temporary, ignore_errors=True)
            if not engine_failed(error):
                raise
            logger.warning("the keyword index could not be updated in place: %s", error)
            return None
    elif engine.path is None and target is None:
        index = engine.index
    else:
        return None
    writer = index.writer(_WRITER_HEAP, 1)
    if removed:
        gone = tantivy.Query.term_set_query(index.schema, "slot", [int(s) for s in removed])
        writer.delete_documents_by_query(gone)
    _add(writer, rows, added)
    writer.commit()
    writer.wait_merging_threads()
    indexed = rows.worded()
    deleted += len(removed)
    if temporary is not None and target is not None:
        if serve is not None and indexed:
            serve(Built(fingerprint, rows, Engine(index, rows), unsettled, deleted=deleted))
        return _saved(
            temporary, target, fingerprint, rows, indexed, unsettled, files, deleted, engine
        )
    fresh = Engine(index, rows) if indexed else None
    return Built(fingerprint, rows, fresh, unsettled, deleted=deleted)


_OWN_FILES = ("state.json", "stamps.json")


def _ours(name: str) -> bool:
    """A file of the rows' (``rows*``) or of the saved state, not of tantivy's (not linked)."""
    return name in _OWN_FILES or name.startswith("rows") or name.endswith(".lock")


class ReplacedError(OSError):
    """A file held was replaced in its folder: another process saved the index since."""


def _link_held(
    source: Path,
    folder: Path,
    held: Mapping[str, int],
    which: Callable[[str], bool],
    *,
    invert: bool = False,
) -> int:
    """Hard-link the files held that ``which`` names (``invert``: does not) into ``folder``.

    From ``source``; :class:`ReplacedError` if one is no longer the very file held. Another
    process that caught up the same index saves into the same folder: linking its files would
    mix its engine or rows (its slots) with this process's. The link is checked, not the
    source before it, so a file replaced in between is caught too. Returns how many.
    """
    linked = 0
    for name, inode in held.items():
        if which(name) == invert:
            continue
        os.link(source / name, folder / name)  # FileNotFoundError: an OSError too
        if os.stat(folder / name).st_ino != inode:
            msg = f"{name} in {source} is no longer the file this process holds"
            raise ReplacedError(msg)
        linked += 1
    return linked


# ---- saved beside an embedded store, or in the machine's cache for a server -------------------


def _saved(
    temporary: Path,
    target: Path,
    fingerprint: Fingerprint,
    rows: Rows,
    indexed: int,
    unsettled: Unsettled,
    known: Mapping[str, list[int]] | None = None,
    deleted: int = 0,
    beside: Engine | None = None,
) -> Built | None:
    """Move the index built in ``temporary`` to ``target`` whole or not at all; open it there.

    A reader never sees a half-written index: it finds the old one, the new one, or none (and
    builds). A failure to write (a read-only directory) is logged and gives None. ``beside``:
    the engine of the saved folder the rows were loaded from (the parts held there are
    linked, if still the files it holds); ``known``: the checksums of the files it holds,
    taken as they are for those linked (the very files: the same inode), not read again.
    """
    import orjson

    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
    saved = False
    try:
        source = None if beside is None else beside.path
        if beside is None or source is None:
            rows.save(temporary)
        else:

            def link(part: str) -> None:
                if not _link_held(source, temporary, beside.held, lambda n: n.startswith(part)):
                    msg = f"the rows {part} are not held in {source}"
                    raise ReplacedError(msg)

            rows.save(temporary, link)
            known = {
                name: sums
                for name, sums in (known or {}).items()
                if (temporary / name).exists()
                and os.stat(temporary / name).st_ino == beside.held.get(name)
            }
        state = {"format": FORMAT, "tokenizer": TOKENIZER, "engine": ENGINE, "indexed": indexed}
        state["fingerprint"] = fingerprint.as_json()
        state["unsettled"] = {t: [at, sorted(ids)] for t, (at, ids) in unsettled.items()}
        state["deleted"] = deleted
        state["files"] = files = checksums(temporary, known)
        (temporary / "state.json").write_bytes(orjson.dumps(state))  # last: marks it complete
        # opened before it is moved: another process may save over the target at once
        opened = _opened(temporary, fingerprint, indexed, unsettled, files, deleted, target)
        if opened is None:
            return None
        with contextlib.suppress(FileNotFoundError):
            target.rename(old)
        temporary.rename(target)
        saved = True
        return opened
    except BaseException as error:
        if not engine_failed(error):
            raise
        logger.warning("the keyword index could not be saved at %s: %s", target, error)
        return None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        if saved:  # after the old folder is gone: its removal changed the linked files' ctime
            _stamp(target)


def _opened(
    target: Path,
    fingerprint: Fingerprint,
    indexed: int,
    unsettled: Unsettled,
    files: Mapping[str, list[int]],
    deleted: int = 0,
    at: Path | None = None,
) -> Built | None:
    """The rows and engine saved at ``target`` (checked already), or None if they disagree.

    None too if another process replaced the folder's files while they were opened. ``at``:
    where the folder is moved once open (a save's), the engine's path.
    """
    before = _inodes(target)
    rows = Rows.load(target)
    engine = None
    if indexed:
        index = _tantivy().Index.open(str(target))
        engine = Engine(index, rows, at or target, before)
        if engine.searcher.num_docs != indexed:
            return None
    if _inodes(target) != before:
        return None
    return Built(fingerprint, rows, engine, unsettled, files, deleted)


def _inodes(folder: Path) -> dict[str, int]:
    """Each file of ``folder`` (but the stamps and locks), by its inode."""
    return {path.name: path.stat().st_ino for path in _files(folder)}


def load(target: Path, fingerprint: Fingerprint, *, exact: bool = True) -> Built | None:
    """The index saved at ``target`` if it was built from this very state, else None.

    Not ``exact``: from any state of the same collection (its own fingerprint kept), for a
    catch-up through the change feed.
    """
    import orjson

    try:
        state = orjson.loads((target / "state.json").read_bytes())
        expected = {"format": FORMAT, "tokenizer": TOKENIZER, "engine": ENGINE}
        if any(state.get(key) != value for key, value in expected.items()):
            return None
        held = state.get("fingerprint")
        if exact and held != fingerprint.as_json():
            return None
        if held.get("collection_id") != fingerprint.collection_id:
            return None
        if not _intact(target, state.get("files")):
            logger.warning("the saved keyword index at %s is damaged; it is rebuilt", target)
            return None
        found = Fingerprint(held["collection_id"], int(held["count"]), held["gen"])
        unsettled = {
            str(token): (float(at), frozenset(map(str, ids)))
            for token, (at, ids) in state["unsettled"].items()
        }
        files, deleted = state["files"], int(state["deleted"])
        return _opened(target, found, int(state["indexed"]), unsettled, files, deleted)
    except BaseException as error:  # none, damaged, or replaced
        if not (engine_failed(error) or isinstance(error, KeyError | TypeError | AttributeError)):
            raise
        logger.debug("no saved keyword index at %s: %s", target, error)
        return None


_ABANDONED_SECONDS = 3600.0
"""A temporary folder of a save untouched this long was left by a killed process."""


def _sweep(target: Path, own: Path) -> None:
    """Remove the temporary folders of saves of ``target`` that a killed process left behind.

    Only those untouched for :data:`_ABANDONED_SECONDS`: a build still running in another
    process writes to its own folder as it goes.
    """
    now = time.time()
    for left in target.parent.glob(f".{target.name}.*-*"):
        if left == own:
            continue
        with contextlib.suppress(OSError):
            if now - left.stat().st_mtime > _ABANDONED_SECONDS:
                shutil.rmtree(left, ignore_errors=True)


STAMPS = "stamps.json"
"""The file, written after a save, of each saved file's stamp as it left them (:func:`stamps`)."""


def _files(folder: Path, but: Collection[str] = (STAMPS,)) -> Iterator[Path]:
    """The files of ``folder`` by name, but those named in ``but`` and tantivy's locks.

    Each is checked as it is taken, not when the folder is listed, so a file removed
    meanwhile (another process saving) is passed over rather than read.
    """
    for path in sorted(folder.iterdir()):
        if path.name not in but and not path.name.endswith(".lock") and path.is_file():
            yield path


def stamps(folder: Path) -> dict[str, list[int]]:
    """Each saved file's size, inode, modification and change times: read by ``stat`` alone.

    Every file :func:`checksums` reads, and ``state.json``. Writing a file, replacing it
    (``cp``, ``rsync``, a restore from a backup, even one that puts its modification time
    back) or linking it gives it another change time, which no program can set: a stamp
    that still holds says the file was not written since it was taken.
    """
    found: dict[str, list[int]] = {}
    for path in _files(folder):
        stat = path.stat()
        found[path.name] = [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns]
    return found


def _stamp(folder: Path) -> None:
    """Write the stamps of ``folder``'s files as they are now (best effort: it only saves time)."""
    import orjson

    temporary = folder.parent / f".{folder.name}.stamps-{uuid.uuid4().hex}"  # not in the folder
    try:
        temporary.write_bytes(orjson.dumps(stamps(folder)))
        temporary.replace(folder / STAMPS)
    except OSError as error:
        logger.debug("the keyword index's stamps could not be written at %s: %s", folder, error)
        temporary.unlink(missing_ok=True)


def _intact(folder: Path, files: Any) -> bool:
    """Whether the files saved in ``folder`` are as their save's checksums (``files``) say.

    Without reading them where the stamps written after the save still hold (:func:`stamps`:
    a ``stat`` of each file; at a million chunks a load then skips reading 400 MB); else by
    their CRC-32s (:func:`checksums`: a save linked into a newer one, a copy from another
    machine, a damaged file).
    """
    import orjson

    try:
        stamped = orjson.loads((folder / STAMPS).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        stamped = None
    if (
        isinstance(stamped, dict)
        and isinstance(files, dict)
        and set(stamped) == {*files, "state.json"}
        and stamped == stamps(folder)
    ):
        return True
    return bool(files == checksums(folder))


def checksums(folder: Path, known: Mapping[str, list[int]] | None = None) -> dict[str, list[int]]:
    """Each saved file's size and CRC-32 (tantivy checks no checksum when it opens an index).

    Every file but ``state.json`` (which holds these), ``stamps.json`` and tantivy's empty
    lock files; a file damaged, truncated, missing or added since the save gives other
    values. Read a block at a time (a large index is never held whole in memory).
    ``known``: files already checked (the links of an update in place), taken as they are.
    """
    found: dict[str, list[int]] = {}
    for path in _files(folder, but=_OWN_FILES):
        if known and path.name in known:
            found[path.name] = list(known[path.name])
            continue
        size = crc = 0
        with path.open("rb") as file:
            while block := file.read(_CHECKSUM_BLOCK):
                size += len(block)
                crc = zlib.crc32(block, crc)
        found[path.name] = [size, crc]
    return found


_CHECKSUM_BLOCK = 2**22
