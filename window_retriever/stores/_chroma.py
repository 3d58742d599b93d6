"""The Chroma adapter: the only module that speaks to chromadb and langchain-chroma directly.

:class:`ChromaWindowStore` implements the store protocol (``window_retriever.stores._protocol``) for
a ``langchain_chroma.Chroma``, embedded or client/server, reads and writes; what the keyword
index reads and writes of the collection (``ChromaKeywordSource``, ``keyword_index``,
``invalidate_keywords``) is in ``window_retriever.stores._chroma_keywords``. Every call runs inside
:func:`~window_retriever.stores._chroma_errors.store_errors`, so a failure is one clear
``StoreError``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from window_retriever._errors import ConfigurationError
from window_retriever.stores._chroma_errors import store_errors
from window_retriever.stores._chroma_http import AsyncServer
from window_retriever.stores._chroma_keywords import ChromaKeywordSource
from window_retriever.stores._protocol import (
    AsyncWindowStore,
    Fetch,
    Found,
    IdHits,
    IdsRefused,
    Record,
    Search,
    SearchIds,
    SearchVectors,
    Space,
    VectorHits,
    Where,
    WindowStore,
    aquery_vector,
    in_thread,
    query_vector,
)

if TYPE_CHECKING:
    from window_retriever.keywords._index import KeywordIndex

_KEYWORD_MODULE = "window_retriever.keywords._index"
"""Imported at the first keyword search or write: before it, no process has a keyword index."""


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
        self._async_server: AsyncServer | Literal[False] | None = None
        self._keyword_source: ChromaKeywordSource | None = None
        self._changed = False
        """A write was tried since the last :meth:`written` (set before the write: a failed
        write may have changed the collection part-way)."""
        self._touched: set[str] = set()
        """The ids of the writes tried since the last :meth:`written` (for the change feed)."""
        self._intents: list[str] = []
        """The tokens of the pending feed entries recorded since the last :meth:`written`."""

    # ---- reads -----------------------------------------------------------------------------

    def search(self, request: Search) -> Found:
        """Embed the query with the store's model and query the collection by that vector."""
        vector = self._query_vector(request.query)
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.query(**_query_arguments(request, vector))
        return _hits(result, vector, self.space(), request)

    def fetch(self, request: Fetch) -> Found:
        """Get chunks by id in one call, filtered by Chroma (``where``, ``where_document``)."""
        if not request.ids:
            return Found(documents=[], space=self.space())
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.get(**_get_arguments(request))
        return _chunks(result, request.embeddings, self.space())

    def search_ids(self, request: SearchIds) -> IdHits:
        """Search by the query's vector for ids and distances only.

        Among ``request.ids`` in place of the filter where given (the ids the keyword index
        passes): the same hits at a fraction of the cost, since Chroma's ``where`` scans
        (docs/benchmarks.md#chroma-reads-by-ids-against-a-where). Chroma refuses ids it no
        longer holds: that raises :class:`IdsRefused`, and the retriever asks again under the
        filter (and tells the index, ``KeywordIndex.distrust``).
        """
        result = self._lean_query(request)
        return _id_hits(result) if result is not None else []

    def search_vectors(self, request: SearchVectors) -> VectorHits:
        """``search_ids`` with each hit's stored vector (``include=["embeddings"]``)."""
        result = self._lean_query(request)
        return _vector_hits(result, self.space())

    def _lean_query(self, request: SearchIds | SearchVectors) -> Any | None:
        """Chroma's answer to a search without texts; ``None`` where the filter passes none."""
        if request.ids is not None and not request.ids:
            return None  # the filter passes no chunk: nothing to embed the query for
        vector = self._query_vector(request.query)
        query = self.vectorstore._collection.query
        with store_errors(self.vectorstore):
            try:
                return query(**_ids_query_arguments(request, vector))
            except Exception as error:
                if request.ids is None or not _refused(error):
                    raise
                raise IdsRefused(str(error)) from error  # an id deleted since the index's build

    def keyword_search(
        self, query: str, k: int, where: Where | None, where_document: Where | None
    ) -> IdHits:
        """BM25 over the collection's chunks (``keywords._index``, built on first use)."""
        from window_retriever.keywords._index import KeywordIndex

        return KeywordIndex.for_source(self._keywords()).search(
            query, k, where=where, where_document=where_document
        )

    def keyword_search_building(self) -> bool:
        """Whether this process's keyword index of the collection holds no snapshot yet."""
        if type(self).keyword_search is not ChromaWindowStore.keyword_search:
            return False
        index = self._index()
        return index is not None and index.building

    def held(self) -> KeywordIndex | None:
        """The collection's keyword index in this process, once one was made (never makes one).

        A filtered search asks it for the ids the filter passes, adaptive selection chooses
        by its lengths and metadata, and every read by id corrects it (see ``Held``).
        """
        return self._index()

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
        vector = await self._aquery_vector(request.query)
        result = await server.call("query", _query_arguments(request, vector))
        return _hits(result, vector, self.space(), request)

    async def afetch(self, request: Fetch) -> Found:
        """``fetch`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await in_thread(self.fetch, request)
        if not request.ids:
            return Found(documents=[], space=self.space())
        result = await server.call("get", _get_arguments(request))
        return _chunks(result, request.embeddings, self.space())

    async def asearch_ids(self, request: SearchIds) -> IdHits:
        """``search_ids`` over async HTTP on a server; in a thread otherwise."""
        if self._server() is None:
            return await in_thread(self.search_ids, request)
        result = await self._alean_query(request)
        return _id_hits(result) if result is not None else []

    async def asearch_vectors(self, request: SearchVectors) -> VectorHits:
        """``search_vectors`` over async HTTP on a server; in a thread otherwise."""
        if self._server() is None:
            return await in_thread(self.search_vectors, request)
        result = await self._alean_query(request)
        return _vector_hits(result, self.space())

    async def _alean_query(self, request: SearchIds | SearchVectors) -> Any | None:
        """:meth:`_lean_query` over async HTTP on a server."""
        server = self._server()
        assert server is not None  # noqa: S101 - the callers checked
        if request.ids is not None and not request.ids:
            return None
        vector = await self._aquery_vector(request.query)
        try:
            among = request.ids is not None
            return await server.call("query", _ids_query_arguments(request, vector), among=among)
        except Exception as error:
            if request.ids is None or not _refused(error):
                raise
            raise IdsRefused(str(error)) from error

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
        self._intend([record.id for record in records])
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
            self._intend(ids)
            with store_errors(self.vectorstore):
                self.vectorstore._collection.update(
                    ids=list(ids), metadatas=[dict(metadata) for _ in ids]
                )

    def delete(self, ids: Sequence[str]) -> None:
        """``Chroma.delete`` by ids."""
        if ids:
            self._intend(ids)
            with store_errors(self.vectorstore):
                self.vectorstore.delete(ids=list(ids))

    def written(self) -> None:
        """Invalidate the collection's keyword index in every process, if this adapter wrote.

        One ``KeywordIndex.invalidate`` with the ids written since the last call (an entry in
        the change feed that completes the pending ones each write recorded before it began,
        and a new generation token in the collection's metadata) when a write was tried since
        then; nothing otherwise, so an ingest that found every file unchanged makes no process
        look again.
        """
        if not self._changed:
            return
        from window_retriever.keywords._index import KeywordIndex  # loaded on first use only

        self._changed = False  # before: a write racing this call sets it again
        touched, self._touched = self._touched, set()
        intents, self._intents = self._intents, []
        try:
            KeywordIndex.invalidate(self._keywords(), touched, completes=intents)
        except BaseException:
            self._changed = True
            self._touched |= touched
            self._intents = intents + self._intents
            raise

    def _intend(self, ids: Sequence[str]) -> None:
        """Before a write of ``ids``: record it in the change feed as pending (a new token).

        So that a writer killed between its write and :meth:`written` still leaves a trace
        every reader acts on (docs/how-it-works.md, how the index learns of a change).
        """
        from window_retriever.keywords._index import KeywordIndex

        self._changed = True
        self._touched.update(ids)
        token = KeywordIndex.intend(self._keywords(), ids)
        if token is not None:
            self._intents.append(token)

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

    def _server(self) -> AsyncServer | None:
        """Async HTTP to the store's server, or None for an embedded store (threads)."""
        if self._async_server is None:
            self._async_server = AsyncServer.of(self.vectorstore) or False
        return self._async_server or None

    def _index(self) -> KeywordIndex | None:
        """The process's keyword index of this collection, if one was made; never makes one."""
        if _KEYWORD_MODULE not in sys.modules:  # never imported: no index in this process
            return None
        # Imported, or being imported by another thread (in ``sys.modules`` half-run): the
        # import statement waits until the module has run, as reading it from ``sys.modules``
        # would not (an index is only made once it has).
        from window_retriever.keywords._index import KeywordIndex

        return KeywordIndex.existing(self._keywords())

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
        """The query's vector by the store's model, once within a retrieval (``one_retrieval``)."""
        return query_vector(self._embedder(), query)

    async def _aquery_vector(self, query: str) -> list[float]:
        return await aquery_vector(self._embedder(), query)


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


def _filters(request: Search | SearchIds | SearchVectors | Fetch) -> dict[str, Any]:
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


def _refused(error: BaseException) -> bool:
    """Chroma refused a search by ids: it names one it no longer holds ("Error finding id")."""
    from chromadb.errors import InternalError

    return isinstance(error, InternalError)


def _ids_query_arguments(
    request: SearchIds | SearchVectors, vector: Sequence[float]
) -> dict[str, Any]:
    """The query of ``request``: among its ids in place of its filter, where it has them."""
    filters = _filters(request)
    if request.ids is not None:
        filters = {**filters, "ids": list(request.ids), "where": None}
    embeddings = ["embeddings"] if isinstance(request, SearchVectors) else []
    return {
        "query_embeddings": [list(vector)],
        "n_results": request.k,
        **filters,
        "include": ["distances", *embeddings],
    }


def _id_hits(result: Any) -> IdHits:
    return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))


def _vector_hits(result: Any | None, space: Space) -> VectorHits:
    if result is None:
        return VectorHits([], [], space)
    return VectorHits(_id_hits(result), list(result["embeddings"][0]), space)


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
