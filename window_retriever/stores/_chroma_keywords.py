"""What the keyword index reads and writes of a Chroma collection, and its change feed.

:class:`ChromaKeywordSource` implements ``window_retriever.keywords._lifecycle.KeywordSource``
for a ``langchain_chroma.Chroma`` store's collection: its fingerprint and generation token, the
change feed other processes read to catch up, and its records page by page;
:func:`keyword_index` and :func:`invalidate_keywords` are the public ways in. Kept apart from
the Chroma adapter (``window_retriever.stores._chroma``, which imports this module, never the
other way) so that each module does one job. Every call runs inside
:func:`~window_retriever.stores._chroma_errors.store_errors`.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from window_retriever._errors import ConfigurationError
from window_retriever.stores._chroma_errors import server_address, store_errors

if TYPE_CHECKING:
    from window_retriever.keywords._engine import Fingerprint
    from window_retriever.keywords._index import KeywordIndex

logger = logging.getLogger(__name__)

FEED_PREFIX = "window_retriever_changes-"
"""The change feed of collection C is the collection ``window_retriever_changes-<C's id>``:
one entry per write of this library (its new generation token, the token it follows, the ids
it wrote), so that other processes read those records again instead of every record."""

FEED_IDS = 20_000
"""A write of more ids than this is recorded as unknown (a reader rebuilds: it reads less)."""

FEED_SECONDS = 7 * 24 * 3600.0
"""Entries older than this are deleted; a reader further behind rebuilds."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """One entry of the change feed, as a writer records it."""

    previous: Any
    """The token it follows (the collection's token when it was recorded), or None."""
    changed: Collection[str] | None
    """The ids written, or None when they are not known."""
    pending: bool
    """A write about to be made (``intend``), not one finished."""
    completes: Collection[str]
    """The tokens of the pending entries this one finishes."""


class ChromaKeywordSource:
    """The keyword index's reads and writes of a ``langchain_chroma.Chroma`` store's collection.

    It implements ``window_retriever.keywords._lifecycle.KeywordSource`` (a protocol: this module
    imports the keyword index only when a keyword search or a write uses it).

    The fingerprint is two calls (``get_collection``, ``count``); the generation token lives in
    the collection's metadata under ``GENERATION_KEY``. Chroma's ``modify(metadata=...)``
    *replaces* the collection's metadata (chromadb 1.5.9), so the token is merged into the
    metadata that is there; it refuses any metadata holding ``hnsw:space`` (even unchanged), so
    that key is dropped: the distance lives in the collection's configuration, which ``modify``
    leaves as it is (checked: the space, the HNSW settings and query distances are unchanged,
    also after reopening).

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` store (embedded, in memory or a server).

    Raises:
        ConfigurationError: ``vectorstore`` is not a Chroma store.
    """

    def __init__(self, vectorstore: Any) -> None:
        self.vectorstore = vectorstore
        self._client, self.name = _client_and_name(vectorstore)
        self._collection: Any = None
        """The collection the last :meth:`fingerprint` found: :meth:`pages` reads it."""

    @functools.cached_property
    def key(self) -> tuple[str, ...]:
        """Where the store lives (server, path or this client in memory), tenant, database, name."""
        server = server_address(self.vectorstore)
        if server is not None:
            location = f"server:{server}"
        else:
            settings = self._client.get_settings()
            if settings.is_persistent and settings.persist_directory:
                location = f"path:{os.path.realpath(settings.persist_directory)}"
            else:  # in memory: this client only
                location = f"memory:{id(self._client)}"
        tenant = str(getattr(self._client, "tenant", ""))
        database = str(getattr(self._client, "database", ""))
        return (location, tenant, database, self.name)

    @property
    def index_directory(self) -> Path | None:
        """Where the keyword indexes of this store's collections are saved; None in memory.

        Beside an embedded store, or in this machine's cache for a store on a server (one
        folder per server, tenant and database: ``keywords._lifecycle.server_cache``).
        """
        from window_retriever.keywords._lifecycle import FOLDER, server_cache

        location, tenant, database, _ = self.key
        if location.startswith("server:"):
            return server_cache(location.removeprefix("server:"), tenant, database)
        if location.startswith("path:"):
            return Path(location.removeprefix("path:")) / FOLDER
        return None

    def fingerprint(self) -> Fingerprint:
        """``get_collection`` (its id and generation token) and ``count``."""
        from window_retriever.keywords._engine import Fingerprint
        from window_retriever.keywords._lifecycle import GENERATION_KEY

        with store_errors(self.vectorstore):
            collection = self._client.get_collection(self.name)
            generation = (collection.metadata or {}).get(GENERATION_KEY)
            fingerprint = Fingerprint(
                str(collection.id),
                int(collection.count()),
                None if generation is None else str(generation),
            )
        self._collection = collection
        return fingerprint

    def generation(self) -> tuple[str, str | None]:
        """``get_collection`` alone: its id and generation token (no ``count``)."""
        from window_retriever.keywords._lifecycle import GENERATION_KEY

        with store_errors(self.vectorstore):
            collection = self._client.get_collection(self.name)
        generation = (collection.metadata or {}).get(GENERATION_KEY)
        return str(collection.id), None if generation is None else str(generation)

    def intend(self, ids: Collection[str]) -> str | None:
        """Record a write about to be made of ``ids``: a pending entry and a new token.

        ``get_collection``, the entry in the change feed (pending: not yet written), then
        ``modify``; the token, or None for a collection that no longer exists. Every reader
        that sees the token reads those records again at each check until an entry
        completes this one (:meth:`bump_generation`) or :data:`PENDING_SECONDS` pass.
        """
        return self._advance(ids, pending=True, completes=())

    def bump_generation(
        self, changed: Collection[str] | None = None, completes: Collection[str] = ()
    ) -> None:
        """``get_collection``, an entry in the change feed, then ``modify``: a new token.

        The entry (in the collection ``window_retriever_changes-<collection id>``, see
        :data:`FEED_PREFIX`) is the new token, the token it follows, the ids written (more
        than :data:`FEED_IDS` are recorded as unknown: a reader rebuilds) and the tokens of
        the pending entries (:meth:`intend`) it completes; it is written before the token,
        so a reader that sees the token finds it. Entries older than :data:`FEED_SECONDS`
        are deleted. If the feed cannot be written (logged), the token is still stored:
        readers then rebuild. The metadata keeps everything but ``hnsw:space`` (``modify``
        refuses it; the configuration keeps it).
        """
        self._advance(changed, pending=False, completes=completes)

    def _advance(
        self, changed: Collection[str] | None, *, pending: bool, completes: Collection[str]
    ) -> str | None:
        from chromadb.errors import NotFoundError

        from window_retriever.keywords._lifecycle import GENERATION_KEY

        with store_errors(self.vectorstore):
            try:
                collection = self._client.get_collection(self.name)
            except NotFoundError:
                return None
            metadata = dict(collection.metadata or {})
            token = uuid.uuid4().hex
            entry = _Entry(metadata.get(GENERATION_KEY), changed, pending, completes)
            self._record(collection, token, entry)
            metadata.pop("hnsw:space", None)
            metadata[GENERATION_KEY] = token
            collection.modify(metadata=metadata)
        return token

    def _record(self, collection: Any, token: str, entry: _Entry) -> None:
        import orjson

        changed = entry.changed
        unknown = changed is None or (not entry.pending and len(changed) > FEED_IDS)
        try:
            feed = self._client.get_or_create_collection(
                FEED_PREFIX + str(collection.id), embedding_function=None
            )
            now = time.time()
            metadata: dict[str, Any] = {
                "prev": "" if entry.previous is None else str(entry.previous),
                "at": now,
                "pending": entry.pending,
                "completes": " ".join(sorted(entry.completes)),
            }
            feed.add(
                ids=[token],
                documents=["*" if unknown else orjson.dumps(sorted(changed or ())).decode()],
                metadatas=[metadata],
                embeddings=[[0.0]],
            )
            if not entry.pending:
                feed.delete(where={"at": {"$lt": now - FEED_SECONDS}})
        except Exception as error:  # readers rebuild: the chain has a gap
            logger.warning("the keyword change feed of %r was not written: %s", self.name, error)

    def changes(self, since: str, until: str) -> set[str] | None:
        """The ids of every entry written after ``since``, or None (a gap, or one unknown).

        Every entry that follows ``since``, directly or through others: the chain to
        ``until``, and beside it the entries of writers that followed the same token (their
        token was replaced by another's, their write was made all the same) or that were
        killed before storing their token. Reading their records again costs a little more
        and is never wrong. None when ``until`` cannot be reached from ``since`` (pruned, or
        never written) or an entry holds unknown ids.
        """
        import orjson

        feed = self._feed()
        if feed is None:
            return None
        with store_errors(self.vectorstore):
            entries = feed.get(include=["metadatas"])
            following: dict[str, list[str]] = {}
            for token, metadata in zip(entries["ids"], entries["metadatas"] or [], strict=True):
                following.setdefault(str((metadata or {}).get("prev", "")), []).append(token)
            reached: list[str] = []
            frontier = [since]
            while frontier:
                for after in following.get(frontier.pop(), ()):
                    if after not in reached:
                        reached.append(after)
                        frontier.append(after)
            if until != since and until not in reached:
                return None
            if not reached:
                return set()
            found = feed.get(ids=reached, include=["documents"])
        changed: set[str] = set()
        for text in found["documents"] or []:
            if not text or text == "*":
                return None
            changed.update(orjson.loads(text))
        return changed if len(found["ids"]) == len(reached) else None

    def pending(self) -> dict[str, tuple[float, frozenset[str]]]:
        """The feed's pending entries that no entry completes: token -> (recorded at, ids)."""
        import orjson

        feed = self._feed()
        if feed is None:
            return {}
        with store_errors(self.vectorstore):
            entries = feed.get(include=["metadatas"])
            completed: set[str] = set()
            begun: dict[str, float] = {}
            for token, metadata in zip(entries["ids"], entries["metadatas"] or [], strict=True):
                metadata = metadata or {}
                completed.update(str(metadata.get("completes") or "").split())
                if metadata.get("pending") is True:
                    begun[token] = float(metadata.get("at") or 0.0)
            open_ = sorted(set(begun) - completed)
            if not open_:
                return {}
            found = feed.get(ids=open_, include=["documents"])
        return {
            token: (begun[token], frozenset(orjson.loads(text or "[]")))
            for token, text in zip(found["ids"], found["documents"] or [], strict=True)
        }

    def _feed(self) -> Any:
        """The collection's change feed, or None when there is none."""
        from chromadb.errors import NotFoundError

        with store_errors(self.vectorstore):
            collection = self._collection or self._client.get_collection(self.name)
            try:
                return self._client.get_collection(FEED_PREFIX + str(collection.id))
            except (NotFoundError, ValueError):
                return None

    def records(self, ids: Sequence[str]) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
        """``get`` by ids (documents and metadatas), from the collection the last check found."""
        from window_retriever.keywords._lifecycle import PAGE_SIZE

        found_ids: list[str] = []
        documents: list[str] = []
        metadatas: list[Mapping[str, Any]] = []
        with store_errors(self.vectorstore):
            collection = self._collection or self._client.get_collection(self.name)
            for page_ids, page_documents, page_metadatas in _by_id(collection, ids, PAGE_SIZE):
                found_ids += page_ids
                documents += page_documents
                metadatas += page_metadatas
        return found_ids, documents, metadatas

    def pages(self, size: int) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
        """Every id in one ``get(include=[])``, then their records by id, ``size`` at a time.

        From the collection the last check found. Not ``limit`` / ``offset`` pages: Chroma
        scans past the offset on every page, so a read of every record would cost the square
        of their number (docs/benchmarks.md#the-keyword-indexs-lifecycle-issue-28).
        """
        collection = self._collection
        with store_errors(self.vectorstore):
            if collection is None:
                collection = self._client.get_collection(self.name)
            for page in _by_id(collection, collection.get(include=[])["ids"], size):
                yield page
                # Chroma's HTTP client leaves each response in a reference cycle (httpx's
                # Request and Response), which only a full collection frees and Python runs
                # one rarely: without this, a read of a large collection from a server holds
                # every spent page (docs/benchmarks.md#the-keyword-indexs-lifecycle-issue-28).
                gc.collect()

    def allowed_ids(
        self,
        where: Mapping[str, Any] | None,
        where_document: Mapping[str, Any] | None,
        size: int,
    ) -> list[str]:
        """``get_collection``, then ``get(include=[])`` with the filters, ``size`` at a time."""
        allowed: list[str] = []
        with store_errors(self.vectorstore):
            collection = self._client.get_collection(self.name)
            while True:
                page = collection.get(
                    where=dict(where) if where else None,
                    where_document=dict(where_document) if where_document else None,
                    include=[],
                    limit=size,
                    offset=len(allowed),
                )
                allowed += page["ids"]
                if len(page["ids"]) < size:
                    break
        return allowed


def _by_id(
    collection: Any, ids: Sequence[str], size: int
) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
    """The records of ``ids`` that are stored, ``size`` ids a ``get`` (:func:`_records`)."""
    for start in range(0, len(ids), size):
        page = collection.get(
            ids=list(ids[start : start + size]), include=["documents", "metadatas"]
        )
        yield _records(page)


def _records(page: Mapping[str, Any]) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
    """A ``get``'s ids, documents and metadatas: ``""`` for no text, ``{}`` for no metadata."""
    ids = list(page["ids"])
    documents = [text or "" for text in page["documents"] or [""] * len(ids)]
    metadatas = [m or {} for m in page["metadatas"] or [{}] * len(ids)]
    return ids, documents, metadatas


def invalidate_keywords(vectorstore: Any, ids: Collection[str] | None = None) -> None:
    """Tell every process's keyword index of this store's collection that it was written to.

    For a writer outside the library (a bare ``add_documents``, ``delete`` or
    ``collection.update``): call it once after writing, with the ids written (added, changed
    or deleted) if you know them, so that other processes read those records again instead of
    every record. The library's own writes do it themselves (:meth:`ChromaWindowStore.written`).
    """
    from window_retriever.keywords._index import KeywordIndex

    KeywordIndex.invalidate(ChromaKeywordSource(vectorstore), ids)


def keyword_index(
    vectorstore: Any,
    *,
    check_interval: float | None = None,
    reconcile_interval: float | None = None,
) -> KeywordIndex:
    """The process's shared keyword index of a ``langchain_chroma.Chroma`` store's collection.

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` store (embedded, in memory or a server).
        check_interval: Seconds between fingerprint checks (see ``KeywordIndex.for_source``).
        reconcile_interval: Seconds between reconciliations in the background, which find
            writes that bypassed the library (``math.inf``: never; see
            ``KeywordIndex.for_source``).
    """
    from window_retriever.keywords._index import KeywordIndex

    source = ChromaKeywordSource(vectorstore)
    return KeywordIndex.for_source(
        source, check_interval=check_interval, reconcile_interval=reconcile_interval
    )


def reindex_keywords(vectorstore: Any) -> set[str]:
    """Bring every process's keyword index of this collection in line with it, now.

    For those who wrote around the library (a bare ``collection.update``, a restore from a
    backup): every record is read and compared with the index; those that differ (added,
    deleted, rewritten in place, even where the record count balances) are told to every
    process, which reads them again at its next check. Without it, the background
    reconciliation finds them within ``reconcile_interval``
    (docs/how-it-works.md#writes-that-bypass-the-library).

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` store (embedded, in memory or a server).

    Returns:
        The ids found to differ (empty when the index held the collection as it is).
    """
    return keyword_index(vectorstore).reconcile()


def _client_and_name(vectorstore: Any) -> tuple[Any, str]:
    client = getattr(vectorstore, "_client", None)
    collection = getattr(vectorstore, "_collection", None)
    if client is None or collection is None:
        msg = (
            f"vectorstore must be a langchain_chroma.Chroma store for keyword search, got "
            f"{type(vectorstore).__name__}; open the store with open_store() or Chroma(...)"
        )
        raise ConfigurationError(msg)
    return client, str(collection.name)
