"""A BM25 keyword index over exactly the chunks of a Chroma collection, kept in sync with it.

Dense vectors miss exact terms (option names, commands, error codes); BM25 finds them. Chroma
1.x offers keyword ranking only in Chroma Cloud (its ``Search`` API raises "Search is not
implemented for Local Chroma" on the embedded client and the single-node server), so this
module ranks with tantivy (tantivy-py: Lucene's BM25, k1 1.2, b 0.75) beside the store; Chroma
stays the source of truth:

- it reaches the collection only through a :class:`KeywordSource` (fingerprint, generation
  token, pages of records, ids a filter passes, where to save); the Chroma adapter implements
  it (``window_retriever.stores._chroma.ChromaKeywordSource``), and this module imports no Chroma;
- one shared :class:`KeywordIndex` per collection per process (:meth:`KeywordIndex.for_source`);
- built from the collection's own documents, read in pages: lower-cased words of two
  characters or more, Lucene's English stop words out, Snowball English stems in (the
  tokenisation this index has always had), each row's stems indexed by tantivy's whitespace
  tokenizer, and each chunk's id, text length, metadata and stems kept beside it as a few
  arrays, not a Python object per chunk (``keywords._rows``; :meth:`KeywordIndex.indexed`:
  adaptive selection chooses by the lengths and metadata before it reads, see
  ``_adaptive_strategy.Adaptive``);
- saved (written in a temporary folder, then renamed into place) so that a new process maps
  it into memory instead of rebuilding while the collection has not changed: beside an
  embedded store under ``<persist_directory>/window_retriever_keyword/<collection id>/``,
  and for a store on a server in this machine's cache (:func:`cache_directory`), one folder
  per server, tenant and database, shared by every process on the machine.

Why tantivy, and what it costs against ``bm25s`` and SQLite FTS5:
docs/benchmarks.md#keyword-engines-side-by-side-issue-28.

How the index learns that the collection changed
-------------------------------------------------
A *fingerprint* of the collection is three values: the collection's id (a deleted and
re-created collection gets a new one), its number of records, and a *generation* token kept in
the collection's metadata under :data:`GENERATION_KEY`. Every write operation of this library
(``add_chunks``, ``sync_file``, ``remove_file``, ``prune_missing``, ``ingest``) ends by
telling its store (``WindowStore.written``, in a ``finally``); the Chroma adapter then calls
:meth:`KeywordIndex.invalidate` with the ids it wrote, once per operation and only if it
wrote. That records the ids in the collection's *change feed* under a new random token, then
stores the token (so every process sees a change, even an in-place re-ingest that keeps the
count), and makes this process's index check at its next search. A search checks the
collection at most every ``check_interval`` seconds (default :data:`DEFAULT_CHECK_INTERVAL`).
When the token changed, the index *catches up*: it follows the feed from its own token to
the collection's (:meth:`KeywordSource.changes`), reads those records again, and re-indexes
the words it keeps for every other row with theirs, so it ranks exactly as a build would,
without reading or tokenising the rest; a new process does the same from the saved copy.
It rebuilds from every record instead when the feed cannot say what changed (an entry pruned
or never written, two writers after one token, a write told without its ids), when more than
a quarter of the rows changed, and when the result does not hold as many records as the
collection (a writer that bypassed the library). Most checks read the id and token alone (one
cheap call); the count is a scan of the collection, so it is read only once every
:data:`COUNT_EVERY` intervals, after this process's own writes and by
:meth:`KeywordIndex.refresh`. So:

- in the process that wrote: the next search sees the write (no staleness; a check another
  thread began before the write does not count for it);
- in any other process or machine: a write finished at time *t* is seen by every search that
  starts after *t* + ``check_interval`` (that search also pays the catch-up or rebuild);
- a writer that bypasses this library (a bare ``add_documents``) is seen when it changes the
  count, within ``COUNT_EVERY * check_interval`` (30 s by default; at once by a
  :meth:`KeywordIndex.refresh`); one that only rewrites a chunk's text or metadata in place,
  keeping the count, is seen at the next :meth:`KeywordIndex.invalidate`
  (:meth:`KeywordIndex.refresh` does not help: the fingerprint it reads has not changed).

How Chroma keeps the token (``modify`` replaces the metadata and refuses ``hnsw:space``) is
told by ``ChromaKeywordSource``.

Filters
-------
``where`` is decided exactly as Chroma decides it: by the tests of
:func:`~window_retriever.core._filters.compile_tree` over the metadata held with the index (a key
of few values once per value, see ``keywords._rows``), once per filter and snapshot (a mask of
the rows it passes, the last :data:`_PASSING_KEPT` filters kept); a filter it cannot decide, and
any ``where_document`` (Chroma's ``$contains`` / ``$regex`` are case-sensitive and its regex
dialect is Rust's), is given to Chroma itself, which returns the ids that pass
(:meth:`KeywordSource.allowed_ids`, on Chroma ``get(include=[])``); the index masks the rest.
The engine then searches within the rows of a mask that passes few (a set of rows), or
fetches more hits than asked and keeps the passing ones, until no row past the last one
fetched could tie or beat the k-th: either way the answer is the head of the whole ranking
restricted to the filter. The same mask gives a filtered vector search its ids
(:meth:`KeywordIndex.passing`): Chroma searches a list of ids faster than it applies its own
``where``.

A chunk deleted by another process can come back from a stale index for at most the bound
above; the retriever fetches every candidate by id afterwards, so such an id finds nothing.
The lengths and metadata :meth:`KeywordIndex.indexed` gives adaptive selection are as stale as
the index: every chunk chosen is read and checked, so a stale entry costs a fetch (and is then
corrected by :meth:`KeywordIndex.correct`), never an old text or a hidden chunk; an entry of a
chunk not chosen can only change which neighbours a window takes. After a write that keeps the
count and bypasses this library, that lasts until the next :meth:`KeywordIndex.invalidate`.

A saved index that cannot be read, or whose engine fails at a search (a damaged or truncated
file), is dropped and rebuilt from the collection, never served.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from window_retriever._errors import ConfigurationError
from window_retriever.core._filters import Predicate, Tree, compile_tree, predicate_of
from window_retriever.keywords._engine import (
    Built,
    Engine,
    Fingerprint,
    add_records,
    build,
    engine_failed,
    load,
    stems,
)
from window_retriever.keywords._rows import Rows, RowsBuilder

logger = logging.getLogger(__name__)

GENERATION_KEY = "window_retriever:generation"
"""The collection metadata key whose value changes with every write made through this library."""

DEFAULT_CHECK_INTERVAL = 1.0
"""Seconds between two checks of one index's collection: the staleness bound across processes."""

COUNT_EVERY = 30
"""A check reads the collection's record count (a scan of the collection) only once this many
``check_interval`` s have passed since it last read it; the other checks read the collection's
id and generation token alone (one cheap call; see the check in
docs/benchmarks.md#results). Only a writer that bypasses this library is seen by its count."""

FOLDER = "window_retriever_keyword"
"""The folder under an embedded store's persist directory that holds the saved indexes."""

CACHE_VARIABLE = "WINDOW_RETRIEVER_CACHE"
"""The environment variable naming this machine's cache folder (see :func:`cache_directory`)."""

PAGE_SIZE = 5000
"""Records read per ``get`` while building (Chroma caps a batch at 5,461 on this machine)."""

_MASKS_KEPT = 16
_CATCH_UP_ROWS = 1000
"""A catch-up that reads at most this many records (or a quarter of the rows) goes ahead."""
_PASSING_KEPT = 64
_DISTRUST_SECONDS = 60.0
_READ_KEPT = 65_536


class KeywordSource(Protocol):
    """The reads and writes a :class:`KeywordIndex` makes of one collection: its only way in.

    The Chroma adapter implements it (``window_retriever.stores._chroma.ChromaKeywordSource``, which
    imports this module only when it is used: a retriever that never searches by keyword never
    loads it, hence a protocol and not a base class). A source is cheap to make (no call to
    the store until a method asks); one index keeps the source it was made with. Every method
    that calls the store turns the store's failures into the library's errors (a
    ``StoreError`` that names the fix) or lets others pass.

    The index calls :meth:`fingerprint` and :meth:`pages` under its own lock, one thread at a
    time, so :meth:`pages` may read the very collection the last :meth:`fingerprint` found;
    :meth:`allowed_ids` and :meth:`bump_generation` may be called from any thread at any time.
    """

    @property
    def key(self) -> tuple[str, ...]:
        """Which collection: equal keys share one index in a process (where, tenant, name)."""

    @property
    def index_directory(self) -> Path | None:
        """The folder where the indexes of this store's collections are saved, or None.

        Beside an embedded store (``<persist_directory>/window_retriever_keyword``); for a
        store on a server, this machine's cache folder of that server, tenant and database
        (:func:`server_cache`), shared by every process on the machine; None for a store in
        memory (nothing outlives the process).
        """

    def fingerprint(self) -> Fingerprint:
        """The collection's state now: its id, its number of records, its generation token.

        The token is the value the last :meth:`bump_generation` stored (as a string), or None.
        """

    def generation(self) -> tuple[str, str | None]:
        """The collection's id and generation token now: :meth:`fingerprint` without the count.

        The check most searches make (see :data:`COUNT_EVERY`), so it should cost one cheap
        call; it need not change what :meth:`pages` reads.
        """

    def bump_generation(self, changed: Collection[str] | None = None) -> None:
        """Store a new random generation token, keeping everything else about the collection.

        ``changed``: the ids the write touched (added, rewritten or deleted), recorded in the
        collection's change feed under the new token, so that :meth:`changes` can tell other
        processes what to read again; None when they are not known (readers then rebuild).
        A collection that no longer exists is left alone (nothing is raised).
        """

    def changes(self, since: str, until: str) -> set[str] | None:
        """The ids written from generation ``since`` to ``until``, as the change feed holds them.

        None when the feed cannot say for sure: an entry missing (pruned, or a write whose
        entry failed), two writes that followed the same token (concurrent writers), or a
        write recorded without its ids. The index then rebuilds from every record.
        """

    def records(self, ids: Sequence[str]) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
        """``(ids, documents, metadatas)`` of those of ``ids`` that are stored now."""

    def pages(self, size: int) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
        """Every record once, ``size`` at a time: ``(ids, documents, metadatas)`` per page.

        A record without text gives ``""``, one without metadata ``{}``; the pages are read
        from the collection the last :meth:`fingerprint` found.
        """

    def allowed_ids(
        self,
        where: Mapping[str, Any] | None,
        where_document: Mapping[str, Any] | None,
        size: int,
    ) -> list[str]:
        """The ids of every record the filters pass, as the store itself decides them.

        Read ``size`` at a time; ``None`` (or an empty filter) passes every record.
        """


@dataclass(slots=True)
class _Snapshot:
    """One immutable build of the index: its rows in id order, the engine's index over them."""

    fingerprint: Fingerprint
    rows: Rows
    engine: Engine | None  # over the rows that hold at least one word; None if none does
    read: dict[str, tuple[int, Mapping[str, Any]]] = field(default_factory=dict)
    """Chunks read since the build that differed from it (``KeywordIndex.correct``)."""
    masks: OrderedDict[bytes, np.ndarray] = field(default_factory=OrderedDict)
    passing: OrderedDict[str, _Passing] = field(default_factory=OrderedDict)
    distrusted_at: float = -math.inf
    """When Chroma last refused a search by its ids (:meth:`KeywordIndex.distrust`)."""

    @classmethod
    def of(cls, built: Built) -> _Snapshot:
        return cls(built.fingerprint, built.rows, built.engine)


@dataclass(slots=True)
class _Passing:
    """The rows a filter passes in one snapshot (decided in the process), and their ids."""

    mask: np.ndarray
    predicate: Predicate
    """The filter's test of one chunk's metadata (for what :meth:`KeywordIndex.correct` holds)."""
    ids: list[str] | None = None
    changes: int = 0
    """How many rows :meth:`KeywordIndex.correct` turned (an ``ids`` made meanwhile is not kept)."""


class KeywordIndex:
    """BM25 over the chunks of one collection, refreshed when the collection changes.

    Get the process's shared index of a collection with :meth:`for_source`; call
    :meth:`invalidate` after writing to it (the library's write paths do). The collection is
    reached only through its :class:`KeywordSource`. Thread-safe: a search reads one
    immutable snapshot; one thread at a time checks and rebuilds.

    Example:
        .. code-block:: python

            from window_retriever.stores._chroma import ChromaKeywordSource

            index = KeywordIndex.for_source(ChromaKeywordSource(chroma))
            index.search("max_retries", k=20, where={"tenant": "acme"})
            # [("docs/config.html:12", 7.31), ...]
    """

    _shared: ClassVar[dict[tuple[str, ...], KeywordIndex]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self, source: KeywordSource, *, check_interval: float = DEFAULT_CHECK_INTERVAL
    ) -> None:
        """Build nothing yet; the first search reads (or loads) the index.

        Args:
            source: The collection's reads and writes (for Chroma: ``ChromaKeywordSource``).
            check_interval: Seconds between two checks of the collection's fingerprint.
        """
        _check_interval(check_interval)
        self._source = source
        self.check_interval = float(check_interval)
        self.directory = source.index_directory
        """Where this index is saved (one folder per collection id under it), or None."""
        self.builds = 0
        """How many times this index was built from the collection's documents."""
        self.loads = 0
        """How many times this index was loaded from its saved copy."""
        self.catch_ups = 0
        """How many times this index applied the change feed instead of rebuilding."""
        self._snapshot: _Snapshot | None = None
        self._checked_at = self._counted_at = -math.inf
        """When the last check began, and the last that read the count (the whole fingerprint)."""
        self._epochs = itertools.count(1)
        self._epoch = self._checked_epoch = self._counted_epoch = 0
        """:meth:`invalidate` and :meth:`refresh` start a new epoch; a check counts only in the
        epoch it began in (one that began before a write, and read the token before it, does
        not stand in for the check the write asks for)."""
        self._lock = threading.Lock()
        """Held while checking the fingerprint and building (a build takes seconds)."""
        self._masks_lock = threading.Lock()
        """Held while reading or changing a kept filter mask (never while building)."""
        self._stale: _Snapshot | None = None
        """The snapshot a check found the collection changed from (until it is replaced)."""
        self._clock: Callable[[], float] = time.monotonic

    # ---- the shared index of a store ----------------------------------------------------

    @classmethod
    def for_source(
        cls, source: KeywordSource, *, check_interval: float | None = None
    ) -> KeywordIndex:
        """The index of ``source``'s collection, shared by every caller in this process.

        Args:
            source: The collection's reads and writes; sources of equal ``key`` share one
                index (the first one given is the one it keeps).
            check_interval: Seconds between fingerprint checks (the staleness bound across
                processes). Callers asking for different values share the smallest.
        """
        if check_interval is not None:
            _check_interval(check_interval)
        key = source.key
        with cls._shared_lock:
            index = cls._shared.get(key)
            if index is None:
                interval = DEFAULT_CHECK_INTERVAL if check_interval is None else check_interval
                index = cls(source, check_interval=interval)
                cls._shared[key] = index
            elif check_interval is not None:
                index.check_interval = min(index.check_interval, float(check_interval))
            return index

    @classmethod
    def existing(cls, source: KeywordSource) -> KeywordIndex | None:
        """The shared index of ``source``'s collection if this process made one; never makes one."""
        with cls._shared_lock:
            return cls._shared.get(source.key)

    @classmethod
    def invalidate(cls, source: KeywordSource, changed: Collection[str] | None = None) -> None:
        """Tell every index of this collection, in every process, that it was written to.

        Call it after a write has finished (add, upsert, update, delete): it stores a new
        generation token (:meth:`KeywordSource.bump_generation`; on Chroma two calls,
        ``get_collection`` and ``modify``) and makes this process's index check at its next
        search. A collection that no longer exists is left alone.

        ``changed``: the ids the write touched, if known; another process's index then reads
        those records again instead of every record (:meth:`KeywordSource.changes`).
        """
        source.bump_generation(changed)
        with cls._shared_lock:
            index = cls._shared.get(source.key)
        if index is not None:
            index._epoch = next(index._epochs)  # the next search checks, the count too

    # ---- search -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int,
        *,
        where: Mapping[str, Any] | None = None,
        where_document: Mapping[str, Any] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` best chunks for ``query`` by BM25, best first, among those the filters pass.

        Args:
            query: Free text; tokenised like the chunks (stop words out, stems in).
            k: How many ids at most. Fewer come back when fewer chunks hold a query term.
            where: A Chroma metadata filter, applied exactly as Chroma applies it.
            where_document: A Chroma document filter (``$contains``, ``$regex``, ...),
                evaluated by Chroma itself.

        Returns:
            ``(chunk id, BM25 score)`` pairs, highest score first (ties by id); only chunks
            that hold at least one query term (score above 0).
        """
        if k <= 0:
            return []
        words = stems(query)
        for _attempt in range(2):
            snapshot = self._current()
            if snapshot.engine is None or not words:
                return []
            mask = None
            tree = compile_tree(where) if where_document is None else None
            if tree is None:  # Chroma decides: keep the rows it returns
                mask = self._allowed(snapshot, where, where_document)
            elif where is not None:
                mask = self._passing(snapshot, where, tree).mask
            try:
                hits = snapshot.engine.top(words, k, mask)
                break
            except BaseException as error:
                if not engine_failed(error):
                    raise
                self._discard(snapshot, error)  # a damaged file the open did not read
        else:
            msg = "the keyword index failed twice, also when rebuilt from the collection"
            raise RuntimeError(msg)
        rows = snapshot.rows
        return [(rows.id(row), score) for row, score in hits]

    async def asearch(
        self,
        query: str,
        k: int,
        *,
        where: Mapping[str, Any] | None = None,
        where_document: Mapping[str, Any] | None = None,
    ) -> list[tuple[str, float]]:
        """:meth:`search` in LangChain's executor: it never blocks the event loop."""
        from langchain_core.runnables.config import run_in_executor

        return await run_in_executor(
            None, self.search, query, k, where=where, where_document=where_document
        )

    def ready(self) -> bool:
        """Whether a search would now answer from memory: built, and no check of the collection due.

        Then a search reads no store and builds nothing (a filter Chroma must decide, such
        as ``where_document``, still asks it); it may run beside other calls on a worker.
        """
        return self._snapshot is not None and self._fresh(self._clock())

    def refresh(self) -> None:
        """Check the collection now, its count too, and rebuild if it changed."""
        self._epoch = next(self._epochs)
        self._current()

    def indexed(self, ids: Sequence[str]) -> dict[str, tuple[int, Mapping[str, Any]]] | None:
        """Each id's text length (characters) and metadata, as this index holds them.

        Read from the current snapshot with no call to the store and no check (so as stale as
        the last check: see the module docstring), with what :meth:`correct` corrected since
        it was built; ids it does not hold are left out. ``None`` before the first search.
        """
        return _held(self._snapshot, ids)

    def passing(self, where: Mapping[str, Any]) -> list[str] | None:
        """The ids of every chunk ``where`` passes, decided on the metadata this index holds.

        For a filtered vector search by ids (``ChromaWindowStore.search_ids``): Chroma's
        ``ids=`` costs a fraction of its ``where`` over the same chunks, for the same hits
        (docs/benchmarks.md#chroma-reads-by-ids-against-a-where). Kept per filter (the last
        :data:`_PASSING_KEPT`); the first time a filter is seen, every chunk's metadata is read
        (still less than Chroma's ``where``).

        As current as the index (the module docstring): a chunk a bare write moved into the
        filter is missed until the next invalidation, one it moved out is still listed until
        it is read (:meth:`correct`), so a caller applies the filter to every chunk it reads,
        and one deleted since makes Chroma refuse the search (:meth:`distrust`). ``None``, and
        the caller lets Chroma apply the filter, before the first build, while another thread
        checks or builds, when a check found the collection changed since the build (until a
        keyword search or :meth:`refresh` rebuilds; no call to the store meanwhile), for a
        while after :meth:`distrust`, and when ``_filters`` cannot decide ``where``. It never
        waits for another thread; when a check is due it makes it (one call, the count's too
        every :data:`COUNT_EVERY` intervals).
        """
        tree = compile_tree(where)
        if tree is None:
            return None
        snapshot = self._checked()
        if snapshot is None or self._clock() - snapshot.distrusted_at < _DISTRUST_SECONDS:
            return None
        passing = self._passing(snapshot, where, tree)
        ids = passing.ids
        if ids is None:
            with self._masks_lock:  # numpy reads the mask without the GIL: not while it turns
                mask, changes = passing.mask.copy(), passing.changes
            ids = snapshot.rows.ids_at(np.flatnonzero(mask).tolist())
            with self._masks_lock:
                if passing.changes == changes:  # no row turned while the list was made
                    passing.ids = ids
        return ids

    def distrust(self) -> None:
        """Chroma refused a search by the ids :meth:`passing` gave: stop giving them.

        Chroma refuses ``query(ids=...)`` naming an id it no longer holds, so a chunk deleted
        since the build (by another process within ``check_interval``, by a bare delete that
        kept the count, or by the library's own write still under way) would fail every
        filtered search. For :data:`_DISTRUST_SECONDS`, or until the next build (the
        collection's next change), the filter goes to Chroma instead: a refusal of another
        cause (Chroma reports both as an internal error) costs no more than that.
        """
        snapshot = self._snapshot
        if snapshot is not None:
            snapshot.distrusted_at = self._clock()

    def build(self) -> object | None:
        """The current build, as a token for :meth:`correct` (None before the first)."""
        return self._snapshot

    def correct(
        self, read: Mapping[str, tuple[int, Mapping[str, Any]]], build: object | None
    ) -> None:
        """Hold the chunks of ``read`` (just read from the store) that differ here as read.

        Their length and metadata, until the next build: for a chunk rewritten in place
        without :meth:`invalidate` (the fingerprint does not change, so no check rebuilds),
        :meth:`indexed` then answers what the store holds, adaptive selection stops reading it
        twice, and the filters kept pass or hide it by the metadata read. The BM25 ranking is
        not changed (its terms are the build's). At most :data:`_READ_KEPT` chunks are held
        so. Only while the index holds ``build`` (:meth:`build`, taken before the read): one
        built since may hold a newer state than the read.
        """
        snapshot = self._snapshot
        if snapshot is None or snapshot is not build:
            return
        held = _held(snapshot, list(read))
        if held:
            differs = {i: e for i, e in read.items() if held.get(i, e) != e}
            if differs:
                self._reindex(snapshot, differs)

    def _reindex(
        self, snapshot: _Snapshot | None, read: Mapping[str, tuple[int, Mapping[str, Any]]]
    ) -> None:
        if snapshot is None or snapshot is not self._snapshot:
            return
        rows = snapshot.rows.rows_of(list(read)).tolist()
        with self._masks_lock:
            for (chunk_id, entry), row in zip(read.items(), rows, strict=True):
                if len(snapshot.read) >= _READ_KEPT and chunk_id not in snapshot.read:
                    continue
                snapshot.read[chunk_id] = entry
                if row < 0:
                    continue  # not in this build: the next one indexes it
                for passing in snapshot.passing.values():
                    passes = passing.predicate(entry[1])
                    if bool(passing.mask[row]) != passes:
                        passing.mask[row] = passes
                        passing.ids = None
                        passing.changes += 1

    def _discard(self, snapshot: _Snapshot, error: BaseException) -> None:
        """Drop a snapshot whose engine failed (and its saved copy): the next search rebuilds."""
        logger.warning("the keyword index failed (%s); it is rebuilt from the collection", error)
        with self._lock:
            if self._snapshot is snapshot:
                self._snapshot = None
                if self.directory is not None:
                    target = self.directory / snapshot.fingerprint.collection_id
                    shutil.rmtree(target, ignore_errors=True)

    def __len__(self) -> int:
        """How many chunks the current snapshot holds (checks the collection if due)."""
        return len(self._current().rows)

    # ---- keeping the snapshot current ------------------------------------------------------

    def _current(self) -> _Snapshot:
        snapshot = self._snapshot
        if snapshot is not None and self._fresh(self._clock()):
            return snapshot
        with self._lock:
            snapshot, started, epoch = self._snapshot, self._clock(), self._epoch
            if snapshot is not None and self._fresh(started):
                return snapshot  # another thread checked while this one waited
            if snapshot is None:
                snapshot = self._made(self._whole(started, epoch))
            elif (changed := self._changed(snapshot, started, epoch)) is not None:
                snapshot = self._made(changed)
            self._checked_at, self._checked_epoch = started, epoch
            return snapshot

    def _fresh(self, now: float) -> bool:
        """Whether the last check still holds (no check is due).

        It began in this epoch, less than ``check_interval`` ago, and the count was read less
        than :data:`COUNT_EVERY` intervals ago.
        """
        interval = self.check_interval
        return (
            self._checked_epoch == self._epoch
            and now - self._checked_at < interval
            and now - self._counted_at < COUNT_EVERY * interval
        )

    def _changed(self, snapshot: _Snapshot, started: float, epoch: int) -> Fingerprint | None:
        """The collection's fingerprint if it changed since ``snapshot`` was built; else None.

        Under the lock. The id and generation token alone while the count was read in this
        epoch, less than :data:`COUNT_EVERY` intervals ago, and they are unchanged; else the
        whole fingerprint (read once: a rebuild starts from it). A snapshot found changed is
        marked (:meth:`_checked` then asks nothing until it is replaced).
        """
        held = snapshot.fingerprint
        if self._stale is not snapshot:
            counted = self._counted_epoch == epoch
            counted = counted and started - self._counted_at < COUNT_EVERY * self.check_interval
            if counted and self._source.generation() == (held.collection_id, held.generation):
                return None
        fingerprint = self._whole(started, epoch)
        if fingerprint == held:
            self._stale = None  # as it was (a write undone)
            return None
        self._stale = snapshot
        return fingerprint

    def _whole(self, started: float, epoch: int) -> Fingerprint:
        """The whole fingerprint, count included (under the lock)."""
        fingerprint = self._source.fingerprint()
        self._counted_at, self._counted_epoch = started, epoch
        return fingerprint

    def _made(self, fingerprint: Fingerprint) -> _Snapshot:
        """The snapshot of the collection at ``fingerprint``: loaded if saved, else built.

        The snapshot it replaces is no longer held (nor its mark: :meth:`_changed`).
        """
        held, self._stale = self._snapshot, None
        snapshot = self._load(fingerprint)
        if snapshot is None:
            loaded = held is None or held.fingerprint.collection_id != fingerprint.collection_id
            if loaded:
                held = self._load(fingerprint, exact=False)  # a saved copy, caught up below
            snapshot = None if held is None else self._caught_up(held, fingerprint)
            self.loads += bool(loaded and snapshot is not None)
        self._snapshot = snapshot or self._build(fingerprint)
        return self._snapshot

    def _caught_up(self, held: _Snapshot, fingerprint: Fingerprint) -> _Snapshot | None:
        """``held`` with the records the change feed names read again; None if it cannot say.

        The engine is re-indexed from the words ``held`` keeps and those of the records read
        (no other record is read or tokenised again), so it ranks exactly as a build of the
        same records would. None, and the caller rebuilds, when the feed cannot say what
        changed, when more than a quarter of the rows did (a build reads less), and when the
        result does not hold as many records as the collection (a writer that bypassed the
        library).
        """
        since, until = held.fingerprint.generation, fingerprint.generation
        if held.fingerprint.collection_id != fingerprint.collection_id:
            return None
        if since is None or until is None:  # written before the feed, or by another tool
            return None
        rows = held.rows
        changed = self._source.changes(since, until)
        if changed is None or len(changed) > max(_CATCH_UP_ROWS, len(rows) // 4):
            return None
        ids, documents, metadatas = self._source.records(sorted(changed))
        kept = np.ones(len(rows), dtype=bool)
        found = rows.rows_of(sorted(changed))
        kept[found[found >= 0]] = False
        if int(np.count_nonzero(kept)) + len(ids) != fingerprint.count:
            return None
        builder = RowsBuilder()
        add_records(builder, ids, documents, metadatas)
        merged = rows.merged(kept, builder.rows())
        snapshot = _Snapshot.of(build(fingerprint, merged, self.directory))
        self.catch_ups += 1
        return snapshot

    def _checked(self) -> _Snapshot | None:
        """The snapshot if it is the collection's as last checked (checked now if due); or None.

        Never waits: ``None`` while another thread holds the lock (checking or building), and
        when the collection changed since the build (the next :meth:`search` rebuilds).
        """
        snapshot, now = self._snapshot, self._clock()
        if snapshot is None or self._fresh(now):
            return snapshot
        if self._stale is snapshot or not self._lock.acquire(blocking=False):
            return None  # known changed (asks nothing until rebuilt), or being checked
        try:
            snapshot, started, epoch = self._snapshot, self._clock(), self._epoch
            if snapshot is None or self._stale is snapshot:
                return None
            if self._changed(snapshot, started, epoch) is not None:
                return None  # not rebuilt here
            self._checked_at, self._checked_epoch = started, epoch
            return snapshot
        finally:
            self._lock.release()

    def _build(self, fingerprint: Fingerprint) -> _Snapshot:
        """Read every chunk, page by page, and index it; again if the collection changed.

        After three reads that each saw a write, the last is kept with the fingerprint read
        before it (older than its rows), marked changed so that the next check rebuilds, and
        not saved (a new process would load it as current).
        """
        settled = False
        for attempt in range(3):
            rows = self._read_all()
            after = self._source.fingerprint()
            settled = after == fingerprint
            if settled or attempt == 2:
                break
            fingerprint = after  # written to while read: read again
        self.builds += 1
        target = None if not settled or self.directory is None else self.directory
        snapshot = _Snapshot.of(build(fingerprint, rows, target))
        if not settled:
            self._stale = snapshot
        return snapshot

    def _load(self, fingerprint: Fingerprint, *, exact: bool = True) -> _Snapshot | None:
        """The saved copy of this collection: at ``fingerprint``, or (not ``exact``) at any."""
        if self.directory is None:
            return None
        built = load(self.directory / fingerprint.collection_id, fingerprint, exact=exact)
        if built is not None and exact:
            self.loads += 1
        return None if built is None else _Snapshot.of(built)

    def _allowed(
        self,
        snapshot: _Snapshot,
        where: Mapping[str, Any] | None,
        where_document: Mapping[str, Any] | None,
    ) -> np.ndarray:
        """The rows whose ids the source passes for the filters (kept for this snapshot)."""
        import orjson

        key = orjson.dumps([where, where_document], option=orjson.OPT_SORT_KEYS)
        with self._masks_lock:
            mask = snapshot.masks.get(key)
            if mask is not None:
                snapshot.masks.move_to_end(key)
                return mask
        mask = np.zeros(len(snapshot.rows), dtype=bool)
        allowed = snapshot.rows.rows_of(self._source.allowed_ids(where, where_document, PAGE_SIZE))
        mask[allowed[allowed >= 0]] = True
        with self._masks_lock:
            snapshot.masks[key] = mask
            while len(snapshot.masks) > _MASKS_KEPT:
                snapshot.masks.popitem(last=False)
        return mask

    def _passing(self, snapshot: _Snapshot, where: Mapping[str, Any], tree: Tree) -> _Passing:
        """The rows ``tree`` (``where`` compiled) passes, on the metadata held (kept).

        Kept by ``repr``: exact for what ``compile_where`` decides (plain values: a 1, a 1.0
        and a True differ), and a filter written in another key order is only a miss.
        """
        key = repr(where)
        with self._masks_lock:
            passing = snapshot.passing.get(key)
            if passing is not None:
                snapshot.passing.move_to_end(key)
                return passing
        mask = snapshot.rows.mask(tree)
        predicate = predicate_of(tree)
        passing = _Passing(mask, predicate)
        with self._masks_lock:  # corrected since the build (none can be added meanwhile)
            read = snapshot.read
            for (_, metadata), row in zip(
                read.values(), snapshot.rows.rows_of(list(read)), strict=True
            ):
                if row >= 0:
                    mask[row] = predicate(metadata)
            snapshot.passing[key] = passing
            while len(snapshot.passing) > _PASSING_KEPT:
                snapshot.passing.popitem(last=False)
        return passing

    def _read_all(self) -> Rows:
        """Every record, ``PAGE_SIZE`` at a time, tokenised as it comes (no page is kept)."""
        builder = RowsBuilder()
        for ids, documents, metadatas in self._source.pages(PAGE_SIZE):
            add_records(builder, ids, documents, metadatas)
        return builder.rows()


def _held(
    snapshot: _Snapshot | None, ids: Sequence[str]
) -> dict[str, tuple[int, Mapping[str, Any]]] | None:
    """:meth:`KeywordIndex.indexed` of one snapshot."""
    if snapshot is None:
        return None
    rows, corrected = snapshot.rows, snapshot.read
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for chunk_id, row in zip(ids, rows.rows_of(ids).tolist(), strict=True):
        entry = corrected.get(chunk_id) if corrected else None
        if entry is not None:
            found[chunk_id] = entry
        elif row >= 0:
            found[chunk_id] = (int(rows.lengths[row]), rows.metadata_at(row))
    return found


def cache_directory() -> Path:
    """This machine's cache folder: where the indexes of collections on a server are saved.

    ``$WINDOW_RETRIEVER_CACHE`` if set, else ``$XDG_CACHE_HOME/window_retriever``, else
    ``~/.cache/window_retriever``. Deleting it is safe: each index is rebuilt when next used.
    """
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "window_retriever"


def server_cache(server: str, tenant: str, database: str) -> Path:
    """The cache folder of one server's tenant and database (a hash of the three: no secrets).

    Every process on this machine that reaches the same server, tenant and database saves and
    loads its indexes there (one folder per collection id under it).
    """
    digest = hashlib.sha256("\0".join((server, tenant, database)).encode()).hexdigest()[:20]
    return cache_directory() / "keyword" / digest


def _check_interval(value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
        msg = (
            f"check_interval must be a number of seconds, 0 or more, got {value!r}; "
            f"use e.g. {DEFAULT_CHECK_INTERVAL}"
        )
        raise ConfigurationError(msg)
    if math.isinf(value):
        msg = "check_interval must be finite: an index that never checks misses other writers"
        raise ConfigurationError(msg + f"; use e.g. {DEFAULT_CHECK_INTERVAL}")
