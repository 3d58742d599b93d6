"""The Chroma adapter: the only module that speaks to chromadb and langchain-chroma directly.

:class:`ChromaWindowStore` implements the store protocol (``window_retriever.stores._protocol``) for
a ``langchain_chroma.Chroma``, embedded or client/server, reads and writes;
:class:`ChromaKeywordSource` implements what the keyword index reads and writes of the
collection (``window_retriever.keywords._index.KeywordSource``). Every call runs inside
:func:`~window_retriever.stores._chroma_errors.store_errors`, so a failure is one clear
``StoreError``.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import sys
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from urllib.parse import quote

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from window_retriever._errors import ConfigurationError
from window_retriever.stores._chroma_errors import server_address, store_errors
from window_retriever.stores._protocol import (
    AsyncWindowStore,
    Fetch,
    Found,
    IdHits,
    Indexed,
    Record,
    Search,
    SearchIds,
    Space,
    Where,
    WindowStore,
    in_thread,
)

if TYPE_CHECKING:
    from window_retriever.keywords._engine import Fingerprint
    from window_retriever.keywords._index import KeywordIndex

logger = logging.getLogger(__name__)

_KEYWORD_MODULE = "window_retriever.keywords._index"
"""Imported at the first keyword search or write: before it, no process has a keyword index."""

FEED_PREFIX = "window_retriever_changes-"
"""The change feed of collection C is the collection ``window_retriever_changes-<C's id>``:
one entry per write of this library (its new generation token, the token it follows, the ids
it wrote), so that other processes read those records again instead of every record."""

FEED_IDS = 20_000
"""A write of more ids than this is recorded as unknown (a reader rebuilds: it reads less)."""

FEED_SECONDS = 7 * 24 * 3600.0
"""Entries older than this are deleted; a reader further behind rebuilds."""


class ChromaWindowStore(WindowStore, AsyncWindowStore):
    """The store protocol for ``langchain_chroma.Chroma`` (embedded or client/server).

    On a Chroma server the async methods speak async HTTP (same address, headers, tenant and
    database as the store's own client), so many concurrent ``ainvoke`` calls wait on the
    network without a thread each; on an embedded store they run the sync call in a thread.
    Chroma's upsert merges metadata, so :meth:`upsert` reads the stored keys first and removes
    those the new record lacks (rule 6).
    """

    supports_search_ids: ClassVar[bool] = True
    supports_embeddings: ClassVar[bool] = True
    supports_keyword_search: ClassVar[bool] = True
    supports_query_embedding: ClassVar[bool] = True

    def __init__(self, vectorstore: Any) -> None:
        self.vectorstore = vectorstore
        self._async_server: _AsyncServer | Literal[False] | None = None
        self._keyword_source: ChromaKeywordSource | None = None
        self._changed = False
        """A write was tried since the last :meth:`written` (set before the write: a failed
        write may have changed the collection part-way)."""
        self._touched: set[str] = set()
        """The ids of the writes tried since the last :meth:`written` (for the change feed)."""

    # ---- reads -----------------------------------------------------------------------------

    def search(self, request: Search) -> Found:
        """Embed the query with the store's model and query the collection by that vector."""
        vector = self._query_vector(request.query)
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.query(**_query_arguments(request, vector))
        return _hits(result, vector, self.space(), request)

    def fetch(self, request: Fetch) -> Found:
        """Get chunks by id in one call, filtered by Chroma (``where``, ``where_document``).

        The process's keyword index, if there is one, is told what was read
        (``KeywordIndex.correct``): a chunk rewritten behind its back is held as read.
        """
        if not request.ids:
            return Found(documents=[], space=self.space())
        index = self._index()
        build = None if index is None else index.build()
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.get(**_get_arguments(request))
        found = _chunks(result, request.embeddings, self.space())
        _correct(index, build, found.documents)
        return found

    def search_ids(self, request: SearchIds) -> IdHits:
        """Search by the query's vector for ids and distances only.

        Under a ``where`` the process's keyword index can decide, once the index is built,
        Chroma searches the ids it passes (:meth:`KeywordIndex.passing`) instead of applying
        the filter: the same hits at a fraction of the cost, since Chroma's ``where`` scans
        (docs/benchmarks.md#chroma-reads-by-ids-against-a-where). As current as the index, so
        every caller applies the filter to each chunk it reads (``Neighbours``).
        """
        vector = self._query_vector(request.query)
        passing = self._passing(request)
        if passing is not None and not passing:
            return []  # the filter passes no chunk
        query = self.vectorstore._collection.query
        with store_errors(self.vectorstore):
            try:
                result = query(**_ids_query_arguments(request, vector, passing))
            except Exception as error:
                if passing is None or not _refused(error):
                    raise
                self._distrust()  # an id deleted since the index was built: Chroma decides
                result = query(**_ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    def keyword_search(
        self, query: str, k: int, where: Where | None, where_document: Where | None
    ) -> IdHits:
        """BM25 over the collection's chunks (``keywords._index``, built on first use)."""
        from window_retriever.keywords._index import KeywordIndex

        return KeywordIndex.for_source(self._keywords()).search(
            query, k, where=where, where_document=where_document
        )

    def keyword_search_ready(self) -> bool:
        """Whether this process's keyword index of the collection is built and no check is due.

        ``False`` in a subclass that overrides :meth:`keyword_search` (this says nothing of
        its search); it may override this too.
        """
        if type(self).keyword_search is not ChromaWindowStore.keyword_search:
            return False
        index = self._index()
        return index is not None and index.ready()

    def indexed(self, ids: Sequence[str]) -> Indexed | None:
        """Lengths and metadata from the collection's keyword index, once it was built or loaded."""
        if self._keyword_source is None:  # no keyword search yet: no index to ask
            return None
        from window_retriever.keywords._index import KeywordIndex

        return KeywordIndex.for_source(self._keyword_source).indexed(ids)

    def space(self) -> Space:
        """The collection's distance space, as Chroma configures it (``"l2"`` by default)."""
        try:
            configuration = self.vectorstore._collection.configuration
            for index in ("hnsw", "spann"):
                found = (configuration.get(index) or {}).get("space")
                if found in ("l2", "cosine", "ip"):
                    return found  # type: ignore[no-any-return]
        except Exception:  # noqa: S110 - an older Chroma: fall back to its default
            pass
        return "l2"

    # ---- async reads -----------------------------------------------------------------------

    async def asearch(self, request: Search) -> Found:
        """``search`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await in_thread(self.search, request)
        vector = list(await self._embedder().aembed_query(request.query))
        result = await server.call("query", _query_arguments(request, vector))
        return _hits(result, vector, self.space(), request)

    async def afetch(self, request: Fetch) -> Found:
        """``fetch`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await in_thread(self.fetch, request)
        if not request.ids:
            return Found(documents=[], space=self.space())
        index = self._index()
        build = None if index is None else index.build()
        result = await server.call("get", _get_arguments(request))
        found = _chunks(result, request.embeddings, self.space())
        _correct(index, build, found.documents)
        return found

    async def asearch_ids(self, request: SearchIds) -> IdHits:
        """``search_ids`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await in_thread(self.search_ids, request)
        vector = await self._embedder().aembed_query(request.query)
        passing = None
        if request.where is not None and _KEYWORD_MODULE in sys.modules:
            passing = await in_thread(self._passing, request)  # may check the fingerprint
        if passing is not None and not passing:
            return []
        try:
            result = await server.call("query", _ids_query_arguments(request, vector, passing))
        except Exception as error:
            if passing is None or not _refused(error):
                raise
            self._distrust()
            result = await server.call("query", _ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    # ---- writes ----------------------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings | None:
        """The store's ``embedding_function``."""
        found = getattr(self.vectorstore, "embeddings", None)
        return found if isinstance(found, Embeddings) else None

    @property
    def batch_size(self) -> int | None:
        """The client's maximum batch size (about 5,461 records), when it says one."""
        getter = getattr(getattr(self.vectorstore, "_client", None), "get_max_batch_size", None)
        return int(getter()) if callable(getter) else None

    def upsert(self, records: Sequence[Record]) -> None:
        """Write ``records`` whole: keys their stored versions have and they lack are removed.

        Records without a vector go through ``Chroma.add_documents`` (the store embeds them);
        those with one straight to the collection, as ``add_documents`` would once embedded. A
        record with an ``embed_text`` (a context header) is embedded here, by the store's
        ``embedding_function`` (or the collection's own), and written with its vector.
        """
        if not records:
            return
        self._changed = True
        self._touched.update(record.id for record in records)
        with store_errors(self.vectorstore):
            stored = self.get_metadata([record.id for record in records])
            exact = [_exactly(record, stored.get(record.id)) for record in records]
            exact = self._embed_headed(exact)
            to_embed = [record for record in exact if record.embedding is None]
            if to_embed:
                self.vectorstore.add_documents(
                    [Document(r.text, metadata=dict(r.metadata), id=r.id) for r in to_embed],
                    ids=[r.id for r in to_embed],
                )
            given = [record for record in exact if record.embedding is not None]
            if given:
                self.vectorstore._collection.upsert(
                    ids=[r.id for r in given],
                    embeddings=[list(r.embedding or ()) for r in given],
                    metadatas=[dict(r.metadata) for r in given],
                    documents=[r.text for r in given],
                )

    def _embed_headed(self, records: list[Record]) -> list[Record]:
        """``records``, those to embed with an ``embed_text`` given the vector of that text."""
        headed = [r for r in records if r.embedding is None and r.embed_text is not None]
        if not headed:
            return records
        texts = [r.to_embed for r in headed]
        model = self.embeddings
        if model is not None:
            vectors: Sequence[Any] = model.embed_documents(texts)
        else:  # no LangChain model: the collection's own embedding function, as Chroma would
            vectors = self.vectorstore._collection._embed(input=texts)
        made = {r.id: [float(x) for x in v] for r, v in zip(headed, vectors, strict=True)}
        return [replace(r, embedding=made[r.id]) if r.id in made else r for r in records]

    def update_metadata(self, ids: Sequence[str], metadata: Mapping[str, Any]) -> None:
        """Chroma's ``update``, which merges ``metadata`` into each stored record."""
        if ids:
            self._changed = True
            self._touched.update(ids)
            with store_errors(self.vectorstore):
                self.vectorstore._collection.update(
                    ids=list(ids), metadatas=[dict(metadata) for _ in ids]
                )

    def delete(self, ids: Sequence[str]) -> None:
        """``Chroma.delete`` by ids."""
        if ids:
            self._changed = True
            self._touched.update(ids)
            with store_errors(self.vectorstore):
                self.vectorstore.delete(ids=list(ids))

    def written(self) -> None:
        """Invalidate the collection's keyword index in every process, if this adapter wrote.

        One ``KeywordIndex.invalidate`` with the ids written since the last call (an entry in
        the change feed and a new generation token in the collection's metadata) when a write
        was tried since then; nothing otherwise, so an ingest that found every file unchanged
        makes no process look again.
        """
        if not self._changed:
            return
        from window_retriever.keywords._index import KeywordIndex  # loaded on first use only

        self._changed = False  # before: a write racing this call sets it again
        touched, self._touched = self._touched, set()
        try:
            KeywordIndex.invalidate(self._keywords(), touched)
        except BaseException:
            self._changed = True
            self._touched |= touched
            raise

    def get_metadata(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``Chroma.get`` by ids, metadata only."""
        if not ids:
            return {}
        with store_errors(self.vectorstore):
            page = self.vectorstore.get(ids=list(ids), include=["metadatas"])
        return {i: m or {} for i, m in zip(page["ids"], page["metadatas"], strict=True)}

    def list_metadata(
        self, where: Where | None, *, limit: int, offset: int = 0
    ) -> list[tuple[str, dict[str, Any]]]:
        """``Chroma.get`` by ``where``, metadata only, one page."""
        with store_errors(self.vectorstore):
            page = self.vectorstore.get(
                where=dict(where) if where is not None else None,
                include=["metadatas"],
                limit=limit,
                offset=offset,
            )
        return [(i, m or {}) for i, m in zip(page["ids"], page["metadatas"], strict=True)]

    # ---- helpers ---------------------------------------------------------------------------

    def _server(self) -> _AsyncServer | None:
        """Async HTTP to the store's server, or None for an embedded store (threads)."""
        if self._async_server is None:
            self._async_server = _AsyncServer.of(self.vectorstore) or False
        return self._async_server or None

    def _passing(self, request: SearchIds) -> list[str] | None:
        """The ids the keyword index passes for the request's filter, where it can say."""
        if request.where is None or request.where_document is not None:
            return None  # no filter, or one only Chroma decides
        index = self._index()
        return None if index is None else index.passing(request.where)

    def _index(self) -> KeywordIndex | None:
        """The process's keyword index of this collection, if one was made; never makes one."""
        if _KEYWORD_MODULE not in sys.modules:  # never imported: no index in this process
            return None
        # Imported, or being imported by another thread (in ``sys.modules`` half-run): the
        # import statement waits until the module has run, as reading it from ``sys.modules``
        # would not (an index is only made once it has).
        from window_retriever.keywords._index import KeywordIndex

        return KeywordIndex.existing(self._keywords())

    def _distrust(self) -> None:
        index = self._index()
        if index is not None:
            index.distrust()

    def _keywords(self) -> ChromaKeywordSource:
        """What the keyword index reads and writes of this store's collection (made once)."""
        if self._keyword_source is None:
            self._keyword_source = ChromaKeywordSource(self.vectorstore)
        return self._keyword_source

    def _embedder(self) -> Any:
        embedder = getattr(self.vectorstore, "embeddings", None)
        if embedder is None:
            msg = (
                "window_retriever needs the Chroma store's embedding_function to embed the "
                "query; create the store with Chroma(..., embedding_function=...)"
            )
            raise ConfigurationError(msg)
        return embedder

    def _query_vector(self, query: str) -> list[float]:
        return list(self._embedder().embed_query(query))


class ChromaKeywordSource:
    """The keyword index's reads and writes of a ``langchain_chroma.Chroma`` store's collection.

    It implements ``window_retriever.keywords._index.KeywordSource`` (a protocol: this module
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
        folder per server, tenant and database: ``window_retriever.keywords._index.server_cache``).
        """
        from window_retriever.keywords._index import FOLDER, server_cache

        location, tenant, database, _ = self.key
        if location.startswith("server:"):
            return server_cache(location.removeprefix("server:"), tenant, database)
        if location.startswith("path:"):
            return Path(location.removeprefix("path:")) / FOLDER
        return None

    def fingerprint(self) -> Fingerprint:
        """``get_collection`` (its id and generation token) and ``count``."""
        from window_retriever.keywords._engine import Fingerprint
        from window_retriever.keywords._index import GENERATION_KEY

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
        from window_retriever.keywords._index import GENERATION_KEY

        with store_errors(self.vectorstore):
            collection = self._client.get_collection(self.name)
        generation = (collection.metadata or {}).get(GENERATION_KEY)
        return str(collection.id), None if generation is None else str(generation)

    def bump_generation(self, changed: Collection[str] | None = None) -> None:
        """``get_collection``, an entry in the change feed, then ``modify``: a new token.

        The entry (in the collection ``window_retriever_changes-<collection id>``, see
        :data:`FEED_PREFIX`) is the new token, the token it follows and the ids written (more
        than :data:`FEED_IDS` are recorded as unknown: a reader rebuilds); it is written
        before the token, so a reader that sees the token finds it. Entries older than
        :data:`FEED_SECONDS` are deleted. If the feed cannot be written (logged), the token
        is still stored: readers then rebuild. The metadata keeps everything but
        ``hnsw:space`` (``modify`` refuses it; the configuration keeps it).
        """
        from chromadb.errors import NotFoundError

        from window_retriever.keywords._index import GENERATION_KEY

        with store_errors(self.vectorstore):
            try:
                collection = self._client.get_collection(self.name)
            except NotFoundError:
                return
            metadata = dict(collection.metadata or {})
            token = uuid.uuid4().hex
            self._record(collection, metadata.get(GENERATION_KEY), token, changed)
            metadata.pop("hnsw:space", None)
            metadata[GENERATION_KEY] = token
            collection.modify(metadata=metadata)

    def _record(
        self, collection: Any, previous: Any, token: str, changed: Collection[str] | None
    ) -> None:
        import orjson

        written = "*" if changed is None or len(changed) > FEED_IDS else None
        try:
            feed = self._client.get_or_create_collection(
                FEED_PREFIX + str(collection.id), embedding_function=None
            )
            now = time.time()
            feed.add(
                ids=[token],
                documents=[written or orjson.dumps(sorted(changed or ())).decode()],
                metadatas=[{"prev": "" if previous is None else str(previous), "at": now}],
                embeddings=[[0.0]],
            )
            feed.delete(where={"at": {"$lt": now - FEED_SECONDS}})
        except Exception as error:  # readers rebuild: the chain has a gap
            logger.warning("the keyword change feed of %r was not written: %s", self.name, error)

    def changes(self, since: str, until: str) -> set[str] | None:
        """The ids the feed's entries from ``since`` to ``until`` name, or None (a gap)."""
        import orjson
        from chromadb.errors import NotFoundError

        with store_errors(self.vectorstore):
            collection = self._collection or self._client.get_collection(self.name)
            try:
                feed = self._client.get_collection(FEED_PREFIX + str(collection.id))
            except (NotFoundError, ValueError):
                return None
            entries = feed.get(include=["metadatas"])
            following: dict[str, list[str]] = {}
            for token, metadata in zip(entries["ids"], entries["metadatas"] or [], strict=True):
                following.setdefault(str((metadata or {}).get("prev", "")), []).append(token)
            chain: list[str] = []
            current = since
            while current != until:
                after = following.get(current, [])
                if len(after) != 1 or len(chain) > len(entries["ids"]):
                    return None  # pruned, never written, or two writers after one token
                current = after[0]
                chain.append(current)
            if not chain:
                return set()
            found = feed.get(ids=chain, include=["documents"])
        changed: set[str] = set()
        for text in found["documents"] or []:
            if not text or text == "*":
                return None
            changed.update(orjson.loads(text))
        return changed if len(found["ids"]) == len(chain) else None

    def records(self, ids: Sequence[str]) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
        """``get`` by ids (documents and metadatas), from the collection the last check found."""
        from window_retriever.keywords._index import PAGE_SIZE

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


def keyword_index(vectorstore: Any, *, check_interval: float | None = None) -> KeywordIndex:
    """The process's shared keyword index of a ``langchain_chroma.Chroma`` store's collection.

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` store (embedded, in memory or a server).
        check_interval: Seconds between fingerprint checks (see ``KeywordIndex.for_source``).
    """
    from window_retriever.keywords._index import KeywordIndex

    source = ChromaKeywordSource(vectorstore)
    return KeywordIndex.for_source(source, check_interval=check_interval)


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


def _exactly(record: Record, stored: Mapping[str, Any] | None) -> Record:
    """``record``, with ``None`` for every key its stored version has and it lacks.

    Chroma's upsert merges metadata: a key the new version no longer carries would stay on the
    stored record (a removed ``public=yes`` would go on matching a filter). An upsert with the
    key set to ``None`` removes it, in the same write as the rest of the new version.
    """
    gone = [key for key in stored or {} if key not in record.metadata]
    if not gone:
        return record
    metadata = {**record.metadata, **dict.fromkeys(gone)}
    return replace(record, metadata=metadata)


class _AsyncServer:
    """The store's own Chroma server, spoken to with one ``httpx.AsyncClient`` per event loop.

    The address, the headers (credentials included, whether given as headers or through
    Chroma's auth provider), the timeout, the tenant and the database are those the store's
    sync client sends, read from it; the collection id is read on every call, so a reset
    collection is followed. Chroma's own ``AsyncHttpClient`` is not used: it shares its
    connections between every client of one event loop, so two stores with two tokens would
    send one token.
    """

    def __init__(
        self, vectorstore: Any, url: str, headers: dict[str, str], verify: Any, timeout: Any
    ) -> None:
        self._vectorstore = vectorstore
        self._url = url
        self._headers = headers
        self._verify = verify
        self._timeout = timeout
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Any, AsyncIterator[None]]
        ] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, vectorstore: Any) -> _AsyncServer | None:
        """For a store on a Chroma server; None for an embedded (or unknown) one."""
        client: Any = getattr(vectorstore, "_client", None)
        server: Any = getattr(client, "_server", None)
        try:
            settings = client.get_settings()
            if settings.chroma_api_impl != "chromadb.api.fastapi.FastAPI":
                return None
            url = (
                f"{server.get_api_url()}/tenants/{quote(client.tenant, safe='')}"
                f"/databases/{quote(client.database, safe='')}/collections/"
            )
            headers = dict(server.get_request_headers())
        except Exception:  # not a Chroma HTTP client: the thread path
            return None
        verify = settings.chroma_server_ssl_verify
        # The sync client's waits (open_store gives it a timeout; Chroma's own has none).
        timeout = getattr(getattr(server, "_session", None), "timeout", None)
        return cls(vectorstore, url, headers, True if verify is None else verify, timeout)

    async def call(self, endpoint: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` to the collection's ``endpoint`` (``query`` or ``get``)."""
        import orjson
        from chromadb.api.base_http_client import BaseHTTPClient

        collection = str(self._vectorstore._collection.id)
        with store_errors(self._vectorstore):
            response = await (await self._client()).post(
                f"{self._url}{quote(collection, safe='')}/{endpoint}",
                content=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
            )
            BaseHTTPClient._raise_chroma_error(response)  # Chroma's errors, as sync raises them
        return orjson.loads(response.content)

    async def _client(self) -> Any:
        import httpx

        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None:
            return entry[0]
        verify = self._verify if self._url.startswith("https:") else False
        client = httpx.AsyncClient(headers=self._headers, timeout=self._timeout, verify=verify)
        closer = _close_when_the_loop_ends(client)
        self._clients[loop] = (client, closer)  # before any await: one client per loop
        await anext(closer)
        return client


async def _close_when_the_loop_ends(client: Any) -> AsyncIterator[None]:
    """Hold ``client`` open until its event loop shuts down, then close its connections.

    ``asyncio.run`` (and any loop that calls ``shutdown_asyncgens``) finalises the async
    generators still alive, so an application that runs one loop per request leaves no
    sockets behind.
    """
    try:
        yield
    finally:
        await client.aclose()


def _filters(request: Search | SearchIds | Fetch) -> dict[str, Any]:
    return {
        "where": dict(request.where) if request.where is not None else None,
        "where_document": dict(request.where_document) if request.where_document else None,
    }


def _query_arguments(request: Search, vector: Sequence[float]) -> dict[str, Any]:
    embeddings = ["embeddings"] if request.embeddings else []
    return {
        "query_embeddings": [list(vector)],
        "n_results": request.k,
        **_filters(request),
        "include": ["documents", "metadatas", "distances", *embeddings],
    }


def _correct(index: KeywordIndex | None, build: object | None, read: Sequence[Document]) -> None:
    """Tell the keyword index, if there is one, what was just read (``KeywordIndex.correct``)."""
    if index is not None and read:
        index.correct({d.id: (len(d.page_content), d.metadata) for d in read if d.id}, build)


def _refused(error: BaseException) -> bool:
    """Chroma refused a search by ids: it names one it no longer holds ("Error finding id")."""
    from chromadb.errors import InternalError

    return isinstance(error, InternalError)


def _ids_query_arguments(
    request: SearchIds, vector: Sequence[float], passing: list[str] | None = None
) -> dict[str, Any]:
    """The query of ``request``; among the ``passing`` ids in place of its filter, if given."""
    filters = _filters(request)
    if passing is not None:
        filters = {"ids": passing, "where": None, "where_document": None}
    return {
        "query_embeddings": [list(vector)],
        "n_results": request.k,
        **filters,
        "include": ["distances"],
    }


def _get_arguments(request: Fetch) -> dict[str, Any]:
    embeddings = ["embeddings"] if request.embeddings else []
    return {
        "ids": list(request.ids),
        **_filters(request),
        "include": ["documents", "metadatas", *embeddings],
    }


def _hits(result: Any, vector: Sequence[float], space: Space, request: Search) -> Found:
    """Chroma's answer to one query as hits, best first (chunks without text left out)."""
    embeddings = request.embeddings
    count = len(result["ids"][0])
    vectors = result["embeddings"][0] if embeddings else [()] * count
    rows = [
        (Document(page_content=text, metadata=metadata or {}, id=chunk_id), distance, emb)
        for chunk_id, text, metadata, distance, emb in zip(
            result["ids"][0],
            result["documents"][0],
            result["metadatas"][0],
            result["distances"][0],
            vectors,
            strict=True,
        )
        if text is not None
    ]
    return Found(
        documents=[row[0] for row in rows],
        distances=[float(row[1]) for row in rows],
        embeddings=[row[2] for row in rows] if embeddings else (),
        query_embedding=list(vector) if embeddings or request.query_embedding else None,
        space=space,
    )


def _chunks(result: Any, embeddings: bool, space: Space) -> Found:
    """Chroma's answer to one ``get`` as documents (chunks without text left out)."""
    vectors = result["embeddings"] if embeddings else [()] * len(result["ids"])
    rows = [
        (Document(page_content=text, metadata=metadata or {}, id=chunk_id), vector)
        for chunk_id, text, metadata, vector in zip(
            result["ids"], result["documents"], result["metadatas"], vectors, strict=True
        )
        if text is not None
    ]
    return Found(
        documents=[row[0] for row in rows],
        embeddings=[row[1] for row in rows] if embeddings else (),
        space=space,
    )
