"""BM25 keyword search over exactly the chunks of a Chroma collection, beside the store.

Dense vectors miss exact terms (option names, commands, error codes); BM25 finds them. Chroma
1.x offers keyword ranking only in Chroma Cloud, so this module ranks with tantivy
(``keywords._engine``) beside the store, which stays the source of truth: one shared
:class:`KeywordIndex` per collection per process (:meth:`KeywordIndex.for_source`), reaching
the collection only through a :class:`KeywordSource` (the Chroma adapter implements it). This
module answers the questions: a search under a filter (``where`` decided on the metadata the
index holds when it can, by Chroma otherwise), the ids a filter passes for a filtered vector
search, and each chunk's length and metadata for adaptive selection. Keeping the index current
with the collection (fingerprints, the change feed, the saved copy) is ``keywords._lifecycle``.
The design, the staleness bounds and how filters are decided:
docs/how-it-works.md#the-keyword-index-how-it-stays-current.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from window_retriever._errors import ConfigurationError, StoreError
from window_retriever.core._filters import Tree, check_where, compile_tree, predicate_of
from window_retriever.keywords._engine import engine_failed, rows_damaged, stems
from window_retriever.keywords._lifecycle import (
    DEFAULT_CHECK_INTERVAL,
    DEFAULT_RECONCILE_INTERVAL,
    PAGE_SIZE,
    UNMADE,
    KeptIndex,
    KeywordSource,
    _check_interval,
    _held,
    _Passing,
    _Snapshot,
)

logger = logging.getLogger(__name__)

_MASKS_KEPT = 16
_PASSING_KEPT = 64
_DISTRUST_SECONDS = 60.0
_READ_KEPT = 65_536


class KeywordIndex(KeptIndex):
    """BM25 over the chunks of one collection, refreshed when the collection changes.

    Get the process's shared index of a collection with :meth:`for_source`; call
    :meth:`invalidate` after writing to it (the library's write paths do). The collection is
    reached only through its :class:`KeywordSource`. Thread-safe: a search reads one
    immutable snapshot; one thread at a time checks and rebuilds.

    Example:
        .. code-block:: python

            from window_retriever.stores._chroma_keywords import ChromaKeywordSource

            index = KeywordIndex.for_source(ChromaKeywordSource(chroma))
            index.search("max_retries", k=20, where={"tenant": "acme"})
            # [("docs/config.html:12", 7.31), ...]
    """

    _shared: ClassVar[dict[tuple[str, ...], KeywordIndex]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        source: KeywordSource,
        *,
        check_interval: float = DEFAULT_CHECK_INTERVAL,
        reconcile_interval: float | None = DEFAULT_RECONCILE_INTERVAL,
    ) -> None:
        """Build nothing yet; the first search reads (or loads) the index.

        Args:
            source: The collection's reads and writes (for Chroma: ``ChromaKeywordSource``).
            check_interval: Seconds between two checks of the collection's fingerprint.
            reconcile_interval: Seconds between two reconciliations in the background
                (:meth:`reconcile`), or None for none.
        """
        super().__init__(
            source, check_interval=check_interval, reconcile_interval=reconcile_interval
        )
        self._masks_lock = threading.Lock()
        """Held while reading or changing a kept filter mask (never while building)."""

    # ---- the shared index of a store ----------------------------------------------------

    @classmethod
    def for_source(
        cls,
        source: KeywordSource,
        *,
        check_interval: float | None = None,
        reconcile_interval: float | None = None,
    ) -> KeywordIndex:
        """The index of ``source``'s collection, shared by every caller in this process.

        Args:
            source: The collection's reads and writes; sources of equal ``key`` share one
                index (the first one given is the one it keeps).
            check_interval: Seconds between fingerprint checks (the staleness bound across
                processes). Callers asking for different values share the smallest.
            reconcile_interval: Seconds between reconciliations with the collection (the
                bound on writes that bypass the library; default
                :data:`DEFAULT_RECONCILE_INTERVAL`). Callers share the smallest given.
        """
        if check_interval is not None:
            _check_interval(check_interval)
        _check_interval(reconcile_interval, "reconcile_interval")
        key = source.key
        with cls._shared_lock:
            index = cls._shared.get(key)
            if index is None:
                interval = DEFAULT_CHECK_INTERVAL if check_interval is None else check_interval
                every = (
                    DEFAULT_RECONCILE_INTERVAL if reconcile_interval is None else reconcile_interval
                )
                index = cls(source, check_interval=interval, reconcile_interval=every)
                cls._shared[key] = index
            else:
                if check_interval is not None:
                    index.check_interval = min(index.check_interval, float(check_interval))
                if reconcile_interval is not None:
                    held = index.reconcile_interval or math.inf
                    index.reconcile_interval = min(held, float(reconcile_interval))
            return index

    @classmethod
    def existing(cls, source: KeywordSource) -> KeywordIndex | None:
        """The shared index of ``source``'s collection if this process made one; never makes one."""
        with cls._shared_lock:
            return cls._shared.get(source.key)

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
            k: How many ids at most. Fewer come back when fewer chunks hold a query term;
                any ``k`` costs no more than the chunks the index holds.
            where: A Chroma metadata filter, applied exactly as Chroma applies it.
            where_document: A Chroma document filter (``$contains``, ``$regex``, ...),
                evaluated by Chroma itself.

        Returns:
            ``(chunk id, BM25 score)`` pairs, highest score first (ties by id); only chunks
            that hold at least one query term (score above 0).

        Raises:
            StoreError: The index failed (its engine, or a saved file changed under the
                process) and failed again when rebuilt from the collection. After one
                failure it is rebuilt, with a logged warning, and the search answers.
        """
        if where is not None:
            try:
                check_where(where, "where")
            except ValueError as error:
                raise ConfigurationError(str(error)) from None
        if k <= 0:
            return []
        words = stems(query)
        failure: BaseException | None = None
        for _attempt in range(2):
            snapshot = self._current()
            if snapshot is None or snapshot.engine is None or not words:
                return []
            mask = filtered = None
            tree = compile_tree(where) if where_document is None else None
            if tree is None:  # Chroma decides: keep the rows it returns
                mask = self._allowed(snapshot, where, where_document)
            try:
                if tree is not None and where is not None:
                    passing = self._passing(snapshot, where, tree)
                    mask = passing.mask
                    if passing.query is UNMADE:
                        passing.query = snapshot.engine.filtered(tree)
                    if not snapshot.corrected:  # the engine holds each row's metadata as read
                        filtered = passing.query
                hits = snapshot.engine.top(words, k, mask, filtered)
                rows = snapshot.rows
                return [(rows.id(row), score) for row, score in hits]
            except BaseException as error:
                if not (engine_failed(error) or rows_damaged(error)):
                    raise
                self._discard(snapshot, error)  # a damaged file the open did not read
                failure = error
        where_saved = "" if self.directory is None else f" (saved under {self.directory})"
        msg = (
            f"the keyword index{where_saved} failed twice, also when rebuilt from the "
            f"collection: {failure}; check that nothing else writes to its folder, or search "
            f"with candidates='vector'"
        )
        raise StoreError(msg) from failure

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

    def refresh(self) -> None:
        """Check the collection now, its count too, and rebuild if it changed."""
        self._epoch = next(self._epochs)
        self._current(wait=True)

    def indexed(self, ids: Sequence[str]) -> dict[str, tuple[int, Mapping[str, Any]]] | None:
        """Each id's text length (characters) and metadata, as this index holds them.

        Read from the current snapshot with no call to the store and no check (so as stale as
        the last check: see
        docs/how-it-works.md#how-the-index-learns-that-the-collection-changed), with what
        :meth:`correct` corrected since it was built; ids it does not hold are left out.
        ``None`` before the first search, and when a saved file of its rows was damaged since
        it was loaded (the index is then dropped: the next search rebuilds it).
        """
        snapshot = self._snapshot
        if snapshot is None:
            return None
        with self._dropped_if_damaged(snapshot):
            return _held(snapshot, ids)
        return None

    def passing(self, where: Mapping[str, Any]) -> list[str] | None:
        """The ids of every chunk ``where`` passes, decided on the metadata this index holds.

        For a filtered vector search by ids (``retrieval._candidates.search_ids`` sends them in
        ``SearchIds.ids``): Chroma's
        ``ids=`` costs a fraction of its ``where`` over the same chunks, for the same hits
        (docs/benchmarks.md#chroma-reads-by-ids-against-a-where). Kept per filter (the last
        :data:`_PASSING_KEPT`); the first time a filter is seen, every chunk's metadata is read
        (still less than Chroma's ``where``).

        As current as the index (docs/how-it-works.md#the-keyword-index-how-it-stays-current): a
        chunk a bare write moved into the filter is missed until the next invalidation, one it moved
        out is still listed until it is read (:meth:`correct`), so a caller applies the filter to
        every chunk it reads, and one deleted since makes Chroma refuse the search
        (:meth:`distrust`). ``None``, and the caller lets Chroma apply the filter, before the first
        build, while another thread checks or builds, when a check found the collection changed
        since the build (until a keyword search or :meth:`refresh` rebuilds; no call to the store
        meanwhile), for a while after :meth:`distrust`, and when ``_filters`` cannot decide
        ``where``, and when a saved file of its rows was damaged since it was loaded (the index
        is then dropped: the next search rebuilds it). It never waits for another thread; when a
        check is due it makes it (one call, the count's too every :data:`COUNT_EVERY` intervals).
        """
        tree = compile_tree(where)
        if tree is None:
            return None
        snapshot = self._checked()
        if snapshot is None or self._clock() - snapshot.distrusted_at < _DISTRUST_SECONDS:
            return None
        with self._dropped_if_damaged(snapshot):
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
        return None

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
        held = None
        with self._dropped_if_damaged(snapshot):
            held = _held(snapshot, list(read))
        differs = {i: e for i, e in read.items() if held.get(i, e) != e} if held else {}
        if not differs or snapshot is not self._snapshot:  # none, or replaced while read
            return
        rows = snapshot.rows.rows_of(list(differs)).tolist()
        with self._masks_lock:
            for (chunk_id, entry), row in zip(differs.items(), rows, strict=True):
                if len(snapshot.corrected) >= _READ_KEPT and chunk_id not in snapshot.corrected:
                    continue
                snapshot.corrected[chunk_id] = entry
                if row < 0:
                    continue  # not in this build: the next one indexes it
                for passing in snapshot.passing.values():
                    passes = passing.predicate(entry[1])
                    if bool(passing.mask[row]) != passes:
                        passing.mask[row] = passes
                        passing.ids = None
                        passing.changes += 1

    @contextlib.contextmanager
    def _dropped_if_damaged(self, snapshot: _Snapshot) -> Iterator[None]:
        """Run the block; if it finds ``snapshot``'s rows damaged (:func:`rows_damaged`), drop it.

        The error is then swallowed (the code after the block answers "nothing") and the
        snapshot discarded without waiting for the lock (:meth:`_discard`); any other error
        is raised.
        """
        try:
            yield
        except Exception as error:
            if not rows_damaged(error):
                raise
            self._discard(snapshot, error, wait=False)

    def _discard(self, snapshot: _Snapshot, error: BaseException, *, wait: bool = True) -> None:
        """Drop a snapshot that failed (and its saved copy): the next search rebuilds.

        It failed by its engine (:func:`engine_failed`) or by its rows (:func:`rows_damaged`): a
        saved file changed under the process since it was loaded. Not ``wait``: left as it is
        while another thread holds the lock (checking or building; a later call drops it).
        """
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if self._snapshot is not snapshot:
                return  # dropped or replaced already
            self._snapshot = None
            if self.directory is not None:
                target = self.directory / snapshot.fingerprint.collection_id
                shutil.rmtree(target, ignore_errors=True)
        finally:
            self._lock.release()
        cause = f"a saved file changed since it was loaded: {error}"
        logger.warning(
            "the keyword index failed (%s); it is rebuilt from the collection",
            cause if rows_damaged(error) else error,
        )

    def __len__(self) -> int:
        """How many chunks the current snapshot holds (checks the collection if due)."""
        snapshot = self._current(wait=True)
        return 0 if snapshot is None else len(snapshot.rows)

    def _allowed(
        self,
        snapshot: _Snapshot,
        where: Mapping[str, Any] | None,
        where_document: Mapping[str, Any] | None,
    ) -> np.ndarray:
        """The rows whose ids the source passes for the filters (kept for this snapshot)."""
        import orjson

        filters = [_plain(where), _plain(where_document)]
        key = orjson.dumps(filters, option=orjson.OPT_SORT_KEYS)
        with self._masks_lock:
            mask = snapshot.masks.get(key)
            if mask is not None:
                snapshot.masks.move_to_end(key)
                return mask
        mask = np.zeros(snapshot.rows.span, dtype=bool)
        allowed = snapshot.rows.rows_of(self._source.allowed_ids(where, where_document, PAGE_SIZE))
        mask[allowed[allowed >= 0]] = True
        with self._masks_lock:
            snapshot.masks[key] = mask
            while len(snapshot.masks) > _MASKS_KEPT:
                snapshot.masks.popitem(last=False)
        return mask

    def _passing(self, snapshot: _Snapshot, where: Mapping[str, Any], tree: Tree) -> _Passing:
        """The rows ``tree`` (``where`` compiled) passes, on the metadata held (kept).

        Kept by the ``repr`` of its plain dicts and lists (:func:`_plain`): exact for what
        ``compile_where`` decides (a 1, a 1.0 and a True differ), and a filter written in
        another key order is only a miss.
        """
        key = repr(_plain(where))
        with self._masks_lock:
            passing = snapshot.passing.get(key)
            if passing is not None:
                snapshot.passing.move_to_end(key)
                return passing
        mask = snapshot.rows.mask(tree)
        predicate = predicate_of(tree)
        passing = _Passing(mask, predicate)
        with self._masks_lock:  # corrected since the build (none can be added meanwhile)
            read = snapshot.corrected
            for (_, metadata), row in zip(
                read.values(), snapshot.rows.rows_of(list(read)), strict=True
            ):
                if row >= 0:
                    mask[row] = predicate(metadata)
            snapshot.passing[key] = passing
            while len(snapshot.passing) > _PASSING_KEPT:
                snapshot.passing.popitem(last=False)
        return passing


def _plain(value: Any) -> Any:
    """A filter with every ``Mapping`` in it a dict, as the key of what is kept for it.

    A ``Mapping`` of another type may have no ``repr`` but its address (one freed, the next
    made there would take its key: another filter's answer), and orjson takes none.
    """
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    return value
