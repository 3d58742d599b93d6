"""Keeping one keyword index current with its collection: what it reads, when, and what it keeps.

``keywords._index`` answers searches from one immutable snapshot of the collection; this
module makes that snapshot and keeps it current. :class:`KeptIndex` (the base of
``KeywordIndex``) holds the current snapshot and the lock under which one thread at a time
checks the collection's fingerprint (its id, record count and generation token) at most every
``check_interval`` seconds, and replaces the snapshot when it changed: loaded from the saved
copy, caught up from the collection's change feed, or built from every record. Here too: the
:class:`KeywordSource` protocol (the index's only way to the collection), the saved folders
(:func:`cache_directory`, :func:`server_cache`) and the constants of the staleness bounds.
The design (how a write is told, the bounds, a writer that bypasses the library):
docs/how-it-works.md#the-keyword-index-how-it-stays-current.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from window_retriever._errors import ConfigurationError
from window_retriever.core._filters import Predicate
from window_retriever.keywords._engine import (
    Built,
    Engine,
    Fingerprint,
    Unsettled,
    add_records,
    build,
    load,
    updated,
)
from window_retriever.keywords._rows import Rows, RowsBuilder, digest

logger = logging.getLogger("window_retriever.keywords._index")

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


PENDING_SECONDS = 600.0
"""How long after a write was recorded as pending (``KeywordSource.intend``) readers keep
reading its records again while no entry completes it: the bound on a write whose writer was
killed after it reached the store and before it was told. A write still under way after this
is seen when its writer tells (its finishing entry names the ids again)."""

DEFAULT_RECONCILE_INTERVAL = 600.0
"""Seconds between two reconciliations of an index with its collection (:meth:`KeptIndex.
reconcile`): the bound on a write that bypassed this library and kept the record count."""

RECONCILE_SHARE = 0.05
"""The most of one core reconciliations in the background may take: the next one starts no
sooner than its interval, nor than the last one's duration divided by this after it (a pass of
90 s at 1M chunks: the next 30 minutes later, not 10). The bound above grows as much."""

INLINE_ROWS = 10_000
"""A refresh (build or catch-up) of an index of at most this many rows runs in the search that
found it due: under about a second (a build reads and indexes about 10k chunks a second on 2
cores, docs/benchmarks.md). A larger one runs on a background thread while searches answer
from the snapshot they have."""

REINDEX_ROWS = 10_000
"""A catch-up of an index of at most this many rows indexes them all anew (exact BM25
statistics, under a second); a larger index's engine is updated in place, by the documents of
the rows that changed (tantivy, like Lucene, counts a deleted document in its statistics until
its segment is merged: docs/how-it-works.md)."""

_DELETED_SHARE = 0.25
"""An engine updated in place is indexed anew once the documents deleted from it since pass
this share of its rows (tantivy merges most of them away before: a bound on the drift of its
BM25 statistics from a fresh build's)."""

_CATCH_UP_ROWS = 1000
"""A catch-up that reads at most this many records (or a quarter of the rows) goes ahead."""


class KeywordSource(Protocol):
    """The reads and writes a :class:`KeywordIndex` makes of one collection: its only way in.

    The Chroma adapter implements it (``ChromaKeywordSource`` in
    ``window_retriever.stores._chroma_keywords``, which imports this module only when it is
    used: a retriever that never searches by keyword never loads it, hence a protocol and not a
    base class). A source is cheap to make (no call to the store until a method asks); one index
    keeps the source it was made with. Every method
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

    def intend(self, ids: Collection[str]) -> str | None:
        """Before a write of ``ids``: record it in the change feed as pending, under a new token.

        Returns the token (for :meth:`bump_generation`'s ``completes``), or None for a
        collection that no longer exists. Readers read those records again at every check
        until an entry completes it or :data:`PENDING_SECONDS` pass (:meth:`pending`).
        """

    def bump_generation(
        self, changed: Collection[str] | None = None, completes: Collection[str] = ()
    ) -> None:
        """Store a new random generation token, keeping everything else about the collection.

        ``changed``: the ids the write touched (added, rewritten or deleted), recorded in the
        collection's change feed under the new token, so that :meth:`changes` can tell other
        processes what to read again; None when they are not known (readers then rebuild).
        ``completes``: the tokens of the pending entries (:meth:`intend`) this write finishes.
        A collection that no longer exists is left alone (nothing is raised).
        """

    def changes(self, since: str, until: str) -> set[str] | None:
        """The ids written after generation ``since``, ``until`` among them, as the feed holds them.

        Every entry that follows ``since`` (more ids than the chain to ``until`` is never
        wrong: they are read again). None when the feed cannot say for sure: ``until`` not
        reached (an entry pruned, or a write whose entry failed), or a write recorded without
        its ids. The index then rebuilds from every record.
        """

    def pending(self) -> Mapping[str, tuple[float, frozenset[str]]]:
        """The feed's pending entries that no entry completes.

        Each one's token -> (when it was recorded, as ``time.time()``; the ids it writes).
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
    """One immutable state of the index: its rows (by slot), the engine's index over them."""

    fingerprint: Fingerprint
    rows: Rows
    engine: Engine | None  # over the rows that hold at least one word; None if none does
    corrected: dict[str, tuple[int, Mapping[str, Any]]] = field(default_factory=dict)
    """Chunks read since the build that differed from it (``KeywordIndex.correct``)."""
    masks: OrderedDict[bytes, np.ndarray] = field(default_factory=OrderedDict)
    passing: OrderedDict[str, _Passing] = field(default_factory=OrderedDict)
    distrusted_at: float = -math.inf
    """When Chroma last refused a search by its ids (:meth:`KeywordIndex.distrust`)."""
    unsettled: Unsettled = field(default_factory=dict)
    """Writes begun but not finished when its rows were read: read again at every check."""
    files: Mapping[str, list[int]] = field(default_factory=dict)
    """Its saved files' checksums (``keywords._engine.checksums``); empty in memory."""
    deleted: int = 0
    """Documents deleted from its engine since it was indexed anew."""

    @classmethod
    def of(cls, built: Built) -> _Snapshot:
        return cls(
            built.fingerprint,
            built.rows,
            built.engine,
            unsettled=built.unsettled,
            files=built.files,
            deleted=built.deleted,
        )


UNMADE: Any = object()
"""A :class:`_Passing`'s query not made yet."""


@dataclass(slots=True)
class _Passing:
    """The rows a filter passes in one snapshot (decided in the process), and their ids."""

    mask: np.ndarray
    predicate: Predicate
    """The filter's test of one chunk's metadata (for what :meth:`KeywordIndex.correct` holds)."""
    ids: list[str] | None = None
    changes: int = 0
    """How many rows :meth:`KeywordIndex.correct` turned (an ``ids`` made meanwhile is not kept)."""
    query: Any = UNMADE
    """The filter as a query of the engine (``Engine.filtered``), once made."""


class KeptIndex:
    """An index of one collection kept current with it: the base of ``KeywordIndex``.

    It holds the current snapshot, and the lock under which one thread at a time checks the
    collection's fingerprint and replaces the snapshot (loaded if saved, caught up from the
    change feed, else built); a search reads the snapshot it was given, never waiting.
    """

    _shared: ClassVar[Mapping[tuple[str, ...], KeptIndex]]
    """The shared index of each collection (``KeywordIndex.for_source`` keeps it)."""
    _shared_lock: ClassVar[threading.Lock]

    def __init__(
        self,
        source: KeywordSource,
        *,
        check_interval: float,
        reconcile_interval: float | None = DEFAULT_RECONCILE_INTERVAL,
    ) -> None:
        """Nothing read yet: the first :meth:`_current` reads (or loads) the collection."""
        _check_interval(check_interval)
        _check_interval(reconcile_interval, "reconcile_interval")
        self._source = source
        self.check_interval = float(check_interval)
        self.reconcile_interval = None if reconcile_interval is None else float(reconcile_interval)
        """Seconds between reconciliations in the background (:meth:`reconcile`), or None."""
        self.reconciliations = 0
        """How many reconciliations ran (:meth:`reconcile` returns what each one found)."""
        self.directory = source.index_directory
        """Where this index is saved (one folder per collection id under it), or None."""
        self.builds = 0
        """How many times this index was built from the collection's documents."""
        self.loads = 0
        """How many times this index was loaded from its saved copy."""
        self.catch_ups = 0
        """How many times this index applied the change feed instead of rebuilding."""
        self.engine_adds = self.engine_deletes = 0
        """Documents the engine was given and had deleted by updates in place."""
        self._snapshot: _Snapshot | None = None
        self._checked_at = self._counted_at = -math.inf
        """When the last check began, and the last that read the count (the whole fingerprint)."""
        self._epochs = itertools.count(1)
        self._epoch = self._checked_epoch = self._counted_epoch = 0
        """:meth:`invalidate` and ``KeywordIndex.refresh`` start a new epoch; a check counts
        only in the epoch it began in (one that began before a write, and read the token
        before it, does not stand in for the check the write asks for)."""
        self._lock = threading.Lock()
        """Held while checking the fingerprint and building (a build takes seconds)."""
        self._stale: _Snapshot | None = None
        """The snapshot a check found the collection changed from (until it is replaced)."""
        self._refreshing = False
        """A refresh runs on a background thread (:meth:`_later`)."""
        self._clock: Callable[[], float] = time.monotonic

    @classmethod
    def intend(cls, source: KeywordSource, ids: Collection[str]) -> str | None:
        """Before a write of ``ids``: record it as pending in every process (a new token).

        A writer calls it before each write and :meth:`invalidate` once done, with the tokens
        it got as ``completes``: a reader that sees the pending entry reads those records
        again at every check until it is completed or :data:`PENDING_SECONDS` pass, so a
        writer killed between its write and :meth:`invalidate` leaves no reader stale.
        """
        token = source.intend(ids)
        cls._touch(source)
        return token

    @classmethod
    def _touch(cls, source: KeywordSource) -> None:
        """Make this process's index of ``source``'s collection check at its next search."""
        with cls._shared_lock:
            index = cls._shared.get(source.key)
        if index is not None:
            index._epoch = next(index._epochs)  # the next search checks, the count too

    @classmethod
    def invalidate(
        cls,
        source: KeywordSource,
        changed: Collection[str] | None = None,
        *,
        completes: Collection[str] = (),
    ) -> None:
        """Tell every index of this collection, in every process, that it was written to.

        Call it after a write has finished (add, upsert, update, delete): it stores a new
        generation token (:meth:`KeywordSource.bump_generation`; on Chroma two calls,
        ``get_collection`` and ``modify``) and makes this process's index check at its next
        search. A collection that no longer exists is left alone.

        ``changed``: the ids the write touched, if known; another process's index then reads
        those records again instead of every record (:meth:`KeywordSource.changes`).
        ``completes``: the tokens :meth:`intend` gave this write.
        """
        source.bump_generation(changed, completes)
        cls._touch(source)

    # ---- keeping the snapshot current ------------------------------------------------------

    def _current(self, *, wait: bool = False) -> _Snapshot | None:
        """The snapshot to answer from, checked if a check is due; None while none is held.

        A check is one cheap call, made here. What it finds to do, a refresh (load, catch-up,
        build), runs here too while it is small (an index of at most :data:`INLINE_ROWS`
        rows: under about a second); a larger one runs on a background thread and this call
        answers from the snapshot it has, stale by that refresh's duration (None, before the
        first build: the keyword leg then finds nothing, logged once). Never waits for a
        refresh another thread runs. ``wait``: run whatever is due here, waiting for other
        threads (``refresh``, ``reconcile``, ``len``).
        """
        snapshot = self._snapshot
        if snapshot is not None and self._fresh(self._clock()):
            return snapshot
        if not wait and not self._enter():
            return snapshot  # a refresh under way elsewhere: answer from what is held
        if wait:
            self._lock.acquire()
        try:
            snapshot, started, epoch = self._snapshot, self._clock(), self._epoch
            if snapshot is not None and self._fresh(started):
                return snapshot  # another thread checked while this one waited
            if snapshot is None:
                fingerprint = self._read_fingerprint(started, epoch)
                if wait or fingerprint.count <= INLINE_ROWS:
                    snapshot = self._switch_to(fingerprint)
                else:
                    # a saved copy as the collection is, loaded here (a load is quick), and
                    # held; else one of any state, or a build, in the background
                    snapshot = self._snapshot = self._load(fingerprint) or self._first_later(
                        fingerprint
                    )
            elif (changed := self._changed(snapshot, started, epoch)) is not None:
                if wait or max(len(snapshot.rows), changed.count) <= INLINE_ROWS:
                    snapshot = self._switch_to(changed)
                else:
                    self._later()  # answered from the snapshot held, marked changed
            elif snapshot.unsettled:
                snapshot = self._settle(snapshot)
            if snapshot is not None:
                self._checked_at, self._checked_epoch = started, epoch
                _reconciler.schedule(self)
            return snapshot
        finally:
            self._lock.release()

    @property
    def building(self) -> bool:
        """Whether no snapshot is held yet: searches find nothing until the first build ends.

        Before the first build of a large collection, which runs in the background
        (:meth:`_current`), and after a failed one, until the next check builds it.
        """
        return self._snapshot is None

    def _enter(self) -> bool:
        """Take the lock unless a refresh runs in the background (then False, at once)."""
        while not self._lock.acquire(timeout=0.05):
            if self._refreshing:
                return False
        if self._refreshing:  # queued behind the lock: the refresh holds or will hold it
            self._lock.release()
            return False
        return True

    def _first_later(self, fingerprint: Fingerprint) -> _Snapshot | None:
        """Before the first build of a large collection: a saved copy of any state, or None.

        Under the lock. A saved copy behind the collection is served (stale) while the
        background thread catches it up; with none, searches find nothing until the build.
        """
        held = self._load(fingerprint, exact=False)
        if held is not None:
            self.loads += 1
            self._snapshot = self._stale = held
        else:
            logger.warning(
                "the keyword index of %r (%d chunks) is being built in the background; until "
                "it is ready keyword search finds nothing and hybrid retrieval uses the vector "
                "leg alone",
                self._source.key[-1],
                fingerprint.count,
            )
        self._later()
        return held

    def _later(self) -> None:
        """Start the refresh a check found due on a background thread (under the lock)."""
        if self._refreshing:
            return
        self._refreshing = True
        _in_background(self._refresh_in_background, "window-retriever-keywords")

    def _refresh_in_background(self) -> None:
        try:
            with self._lock:
                started, epoch = self._clock(), self._epoch
                fingerprint = self._read_fingerprint(started, epoch)
                snapshot = self._snapshot
                if snapshot is None or snapshot.fingerprint != fingerprint:
                    self._switch_to(fingerprint)
                self._checked_at, self._checked_epoch = started, epoch
        except _Exiting:  # the interpreter exits: no index to serve
            return
        except Exception as error:  # the next due check tries again
            logger.warning("the keyword index could not be refreshed: %s", error)
        finally:
            self._refreshing = False
        _reconciler.schedule(self)

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
        fingerprint = self._read_fingerprint(started, epoch)
        if fingerprint == held:
            self._stale = None  # as it was (a write undone)
            return None
        self._stale = snapshot
        return fingerprint

    def _read_fingerprint(self, started: float, epoch: int) -> Fingerprint:
        """The whole fingerprint, count included, read now (under the lock); notes when."""
        fingerprint = self._source.fingerprint()
        self._counted_at, self._counted_epoch = started, epoch
        return fingerprint

    def _switch_to(self, fingerprint: Fingerprint) -> _Snapshot:
        """Make the collection's snapshot at ``fingerprint`` current: loaded if saved, else built.

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
        library). The writes still pending then are read again at every check
        (:meth:`_settle`).
        """
        since, until = held.fingerprint.generation, fingerprint.generation
        if held.fingerprint.collection_id != fingerprint.collection_id:
            return None
        if since is None or until is None:  # written before the feed, or by another tool
            return None
        changed = self._source.changes(since, until)
        if changed is None or len(changed) > max(_CATCH_UP_ROWS, len(held.rows) // 4):
            return None
        started = time.time()
        ids = sorted(changed)
        records = self._source.records(ids)
        unsettled = self._unsettled(held.unsettled, started)
        snapshot = self._applied(held, fingerprint, ids, records, unsettled, count=True)
        self.catch_ups += snapshot is not None
        return snapshot

    def _applied(
        self,
        held: _Snapshot,
        fingerprint: Fingerprint,
        ids: Sequence[str],
        records: tuple[list[str], list[str], list[Mapping[str, Any]]],
        unsettled: Unsettled,
        *,
        count: bool,
    ) -> _Snapshot | None:
        """``held`` with every row of ``ids`` replaced by its record as read (or dropped).

        Over :data:`REINDEX_ROWS` rows the rows read are added as a part and those they
        replace marked dead (``Rows.changed``), and the engine is updated in place by their
        documents alone (``keywords._engine.updated``); else the rows are compacted and
        indexed anew (exact BM25 statistics, under a second). ``count``: None when the
        result would not hold as many records as ``fingerprint`` (a writer that bypassed the
        library: the caller rebuilds).
        """
        rows = held.rows
        found_ids, documents, metadatas = records
        found = rows.rows_of(ids)
        gone = found[found >= 0]
        if count and len(rows) - len(gone) + len(found_ids) != fingerprint.count:
            return None
        builder = RowsBuilder()
        add_records(builder, found_ids, documents, metadatas)
        added = builder.rows()
        engine = held.engine if len(rows) > REINDEX_ROWS else None
        if engine is not None and held.deleted + len(gone) <= len(rows) * _DELETED_SHARE:
            changed = rows.changed(gone, added)
            removed = gone.tolist()
            new = list(range(rows.span, changed.span))
            built = updated(
                engine,
                held.files,
                fingerprint,
                changed,
                removed,
                new,
                self.directory,
                unsettled,
                held.deleted,
                serve=self._serve,
            )
            if built is not None:
                self.engine_deletes += len(removed)
                self.engine_adds += len(new)
                return _Snapshot.of(built)
        compacted = rows.compacted(gone, added)
        return _Snapshot.of(build(fingerprint, compacted, self.directory, unsettled))

    def _serve(self, built: Built) -> None:
        """Answer searches from ``built`` while it is saved (under the lock, in a refresh).

        Never saved itself: the saved one replaces it when its save ends.
        """
        self._snapshot = _Snapshot.of(built)

    def _unsettled(self, held: Unsettled, started: float) -> Unsettled:
        """The pending writes to read again, from the feed.

        Those recorded less than :data:`PENDING_SECONDS` before ``started`` (when the rows
        were read), and those ``held`` still pending (read once more, then dropped).
        """
        return {
            token: entry
            for token, entry in self._source.pending().items()
            if token in held or entry[0] + PENDING_SECONDS > started
        }

    def _settle(self, snapshot: _Snapshot) -> _Snapshot:
        """Read the records of the writes still pending again; the snapshot as they are now.

        Under the lock, at a check that found the token unchanged. The rows whose record
        differs (by :func:`~window_retriever.keywords._rows.digest`) are replaced, as a
        catch-up would; writes recorded :data:`PENDING_SECONDS` before this read are read for
        the last time.
        """
        started = time.time()
        ids = sorted(set().union(*(ids for _, ids in snapshot.unsettled.values())))
        records = self._source.records(ids)
        remaining = {
            t: e for t, e in snapshot.unsettled.items() if e[0] + PENDING_SECONDS > started
        }
        differing = _differing(snapshot.rows, ids, records)
        if not differing:
            snapshot.unsettled = remaining
            return snapshot
        ids = sorted(differing)
        found_ids, documents, metadatas = records
        keep = [i for i, chunk_id in enumerate(found_ids) if chunk_id in differing]
        read = (
            [found_ids[i] for i in keep],
            [documents[i] for i in keep],
            [metadatas[i] for i in keep],
        )
        settled = self._applied(snapshot, snapshot.fingerprint, ids, read, remaining, count=False)
        assert settled is not None  # noqa: S101 - no count to disagree with
        self._snapshot = settled
        self.catch_ups += 1
        return settled

    def _checked(self) -> _Snapshot | None:
        """The snapshot if it is the collection's as last checked (checked now if due); or None.

        Never waits: ``None`` while another thread holds the lock (checking or building), and
        when the collection changed since the build (the next ``KeywordIndex.search`` rebuilds).
        """
        snapshot, now = self._snapshot, self._clock()
        if snapshot is not None and snapshot.unsettled:
            return None  # a write under way (or killed): its records are read at each check
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
            started = time.time()
            rows = self._read_all()
            after = self._source.fingerprint()
            settled = after == fingerprint
            if settled or attempt == 2:
                break
            fingerprint = after  # written to while read: read again
        self.builds += 1
        target = None if not settled or self.directory is None else self.directory
        unsettled = self._unsettled({}, started)
        snapshot = _Snapshot.of(build(fingerprint, rows, target, unsettled))
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

    def _read_all(self) -> Rows:
        """Every record, ``PAGE_SIZE`` at a time, tokenised as it comes (no page is kept)."""
        builder = RowsBuilder()
        for ids, documents, metadatas in _pages(self._source):
            add_records(builder, ids, documents, metadatas)
        return builder.rows()

    # ---- reconciliation: the writes this library was not told of ---------------------------

    def reconcile(self) -> set[str]:
        """Compare every record of the collection with the index; publish those that differ.

        Reads every record, page by page, without the lock (searches go on), and compares
        each with its row by :func:`~window_retriever.keywords._rows.digest`: a record added,
        deleted, or rewritten in place by a writer that bypassed this library (even one that
        kept the count) differs. Those ids are then told as a write is
        (:meth:`invalidate`): every process's index, this one included, reads them again at
        its next check. A write of this library made during the read may be named too
        (read again, never wrong). It runs every :attr:`reconcile_interval` seconds in the
        background, and on demand (``reindex_keywords``, ``window-retriever reindex``).

        Returns:
            The ids found to differ (empty when the index held the collection as it is).
        """
        held = self._current(wait=True)
        assert held is not None  # noqa: S101 - a waited check always holds a snapshot
        rows = held.rows
        seen = np.ones(rows.span, dtype=bool)
        seen[rows.live()] = False  # a dead slot holds no row
        differing: set[str] = set()
        for ids, documents, metadatas in _pages(self._source):
            found = rows.rows_of(ids).tolist()
            for chunk_id, text, metadata, row in zip(ids, documents, metadatas, found, strict=True):
                if row >= 0 and rows.digest(row) == digest(text, metadata):
                    seen[row] = True
                else:
                    differing.add(chunk_id)
        differing.update(rows.ids_at(np.flatnonzero(~seen).tolist()))
        if differing:
            logger.warning(
                "the keyword index of %r missed %d changed chunks (a write that bypassed "
                "window_retriever); every process now reads them again",
                self._source.key[-1],
                len(differing),
            )
            type(self).invalidate(self._source, differing)
            self._current()
        self.reconciliations += 1
        return differing


def _differing(
    rows: Rows, ids: Sequence[str], records: tuple[list[str], list[str], list[Mapping[str, Any]]]
) -> set[str]:
    """Those of ``ids`` whose record (``records``: those of them stored) differs from its row."""
    found_ids, documents, metadatas = records
    held = dict(zip(ids, rows.rows_of(ids).tolist(), strict=True))
    differing = {chunk_id for chunk_id, row in held.items() if row >= 0}  # until found alike
    for chunk_id, text, metadata in zip(found_ids, documents, metadatas, strict=True):
        row = held.get(chunk_id, -1)
        if row >= 0 and rows.digest(row) == digest(text, metadata):
            differing.discard(chunk_id)
        else:
            differing.add(chunk_id)
    return differing


class _Reconciler:
    """One daemon thread per process that reconciles each index every reconcile_interval.

    After a pass that took more than ``RECONCILE_SHARE`` of that, the next waits longer. An
    index is scheduled at each check of its (:meth:`schedule`, which costs a dict lookup); an
    index no longer referenced is forgotten (weak references). A reconciliation that fails
    is logged and tried again an interval later.
    """

    def __init__(self) -> None:
        self._due: dict[int, tuple[float, weakref.ref[KeptIndex]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, index: KeptIndex) -> None:
        interval = index.reconcile_interval
        if interval is None or math.isinf(interval) or id(index) in self._due or self._stopped:
            return
        with self._lock:
            if id(index) in self._due:
                return
            self._due[id(index)] = (time.monotonic() + interval, weakref.ref(index))
            if self._thread is None:
                self._thread = _in_background(self._run, "window-retriever-reconcile")
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            now = time.monotonic()
            with self._lock:
                due = [(key, ref) for key, (at, ref) in self._due.items() if at <= now]
                waits = [at - now for at, _ in self._due.values() if at > now]
            for key, ref in due:
                index = ref()
                if index is None or self._stopped:
                    with self._lock:
                        self._due.pop(key, None)
                    continue
                started = time.monotonic()
                try:
                    index.reconcile()
                except _Exiting:
                    return
                except Exception as error:
                    logger.warning("the keyword index could not be reconciled: %s", error)
                interval, took = index.reconcile_interval, time.monotonic() - started
                with self._lock:
                    if interval is None or math.isinf(interval):
                        self._due.pop(key, None)
                    else:  # no more than RECONCILE_SHARE of a core, however large the index
                        later = max(interval, took / RECONCILE_SHARE)
                        self._due[key] = (time.monotonic() + later, ref)
                del index
            self._wake.wait(min(waits, default=60.0) if not due else 0)
            self._wake.clear()


_reconciler = _Reconciler()

_exiting = threading.Event()
"""Set when the interpreter exits: a read in the background stops at its next page."""
_background: list[threading.Thread] = []
_background_lock = threading.Lock()
EXIT_WAIT = 60.0
"""The longest the interpreter's exit waits for a build or reconciliation in the background
(it stops at its next page of records; indexing what it read may take seconds more)."""


class _Exiting(Exception):  # noqa: N818 - not an error: the interpreter exits
    """Raised in a background read once the interpreter exits."""


def _pages(source: KeywordSource) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
    """Every record, ``PAGE_SIZE`` at a time; :class:`_Exiting` once the interpreter exits."""
    for page in source.pages(PAGE_SIZE):
        if _exiting.is_set():
            raise _Exiting
        yield page


def _in_background(target: Callable[[], None], name: str) -> threading.Thread:
    """Start ``target`` on a daemon thread that the interpreter's exit stops and waits for.

    A daemon thread still reading Chroma or writing tantivy's files while the interpreter
    tears its modules down crashed the process (a segmentation fault on exit, seen after
    asking one question of 20,000 new chunks): the exit now stops it at its next page and
    waits for it (:func:`_wait_for_background`).
    """
    thread = threading.Thread(target=target, name=name, daemon=True)
    with _background_lock:
        if not _background:
            atexit.register(_wait_for_background)
        _background[:] = [alive for alive in _background if alive.is_alive()]
        _background.append(thread)
    thread.start()
    return thread


def _wait_for_background() -> None:
    """At exit: stop the reads in the background, and wait for their threads to end."""
    _exiting.set()
    _reconciler.stop()
    deadline = time.monotonic() + EXIT_WAIT
    with _background_lock:
        threads = list(_background)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _held(
    snapshot: _Snapshot | None, ids: Sequence[str]
) -> dict[str, tuple[int, Mapping[str, Any]]] | None:
    """:meth:`KeywordIndex.indexed` of one snapshot."""
    if snapshot is None:
        return None
    rows, corrected = snapshot.rows, snapshot.corrected
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for chunk_id, row in zip(ids, rows.rows_of(ids).tolist(), strict=True):
        entry = corrected.get(chunk_id) if corrected else None
        if entry is not None:
            found[chunk_id] = entry
        elif row >= 0:
            found[chunk_id] = (rows.length(row), rows.metadata_at(row))
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


def _check_interval(value: float | None, name: str = "check_interval") -> None:
    """Refuse an interval that is not a number of seconds.

    ``check_interval`` may be 0 and must be finite; ``reconcile_interval`` must be above 0,
    infinity meaning never, or None (no reconciliation).
    """
    checking = name == "check_interval"
    default = DEFAULT_CHECK_INTERVAL if checking else DEFAULT_RECONCILE_INTERVAL
    if value is None and not checking:
        return
    least = "0 or more" if checking else "above 0 (math.inf: never)"
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (value >= 0 if checking else value > 0)
    ):
        msg = f"{name} must be a number of seconds, {least}, got {value!r}; use e.g. {default}"
        raise ConfigurationError(msg)
    if checking and math.isinf(value):
        msg = f"{name} must be finite: an index that never checks misses other writers"
        raise ConfigurationError(msg + f"; use e.g. {default}")
