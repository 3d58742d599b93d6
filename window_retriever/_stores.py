"""Store adapters: the two calls a windowed retrieval makes, behind a small protocol.

The retriever speaks to a store only through :class:`Search` and :class:`Fetch` requests, so
the sync and async paths share one body, and another store needs only another adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from window_retriever._errors import ConfigurationError

Where = Mapping[str, Any]
Space = Literal["l2", "cosine", "ip"]


@dataclass(frozen=True, slots=True)
class Search:
    """A similarity search: ``k`` nearest chunks to ``query`` with their distances."""

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None
    embeddings: bool = False
    """Also return the query's and every hit's embedding (an :class:`Embedded`)."""


@dataclass(frozen=True, slots=True)
class Fetch:
    """A batched fetch of chunks by store id, optionally filtered by the store itself."""

    ids: Sequence[str]
    where: Where | None = None
    where_document: Where | None = None
    embeddings: bool = False
    """Also return every chunk's stored embedding (an :class:`Embedded`)."""


@dataclass(frozen=True, slots=True)
class SearchIds:
    """A similarity search that returns only ``(id, distance)`` pairs, best first.

    The cheapest search Chroma has: no text, no metadata. The retriever asks for it once it
    knows the store's typical chunk length, reads each hit's position from its id, and fetches
    the texts of the hits it will use together with their neighbours, in one ``get``.
    """

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None


Request = Search | SearchIds | Fetch


@dataclass(frozen=True, slots=True)
class Embedded:
    """Documents with the embeddings the store holds for them.

    The answer to a :class:`Search` or :class:`Fetch` that asked for ``embeddings``:
    ``distances`` is empty for a fetch, ``query_embedding`` is ``None`` for a fetch.
    """

    documents: Sequence[Document]
    embeddings: Sequence[Sequence[float]]
    distances: Sequence[float] = ()
    query_embedding: Sequence[float] | None = None
    space: Space = "l2"
    """The distance the store ranks by: ``"l2"`` (squared), ``"cosine"`` or ``"ip"``."""


@runtime_checkable
class WindowStore(Protocol):
    """What the retriever needs of a store: a scored search and a fetch by ids."""

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Return ``(document, distance)`` pairs, best (lowest distance) first."""
        ...

    def fetch(self, request: Fetch) -> list[Document]:
        """Return the stored documents among ``request.ids`` (any order, ``id`` set)."""
        ...


@runtime_checkable
class EmbeddingWindowStore(WindowStore, Protocol):
    """A store that can also return stored embeddings, as adaptive windows need."""

    def search_embedded(self, request: Search) -> Embedded:
        """Embed the query once, search by that vector; return hits, distances, vectors."""
        ...

    def fetch_embedded(self, request: Fetch) -> Embedded:
        """Like ``fetch``, with each document's stored embedding."""
        ...


@runtime_checkable
class IdSearchStore(WindowStore, Protocol):
    """A store that can search for ids and distances alone (see :class:`SearchIds`)."""

    def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """Return ``(id, distance)`` pairs, best (lowest distance) first."""
        ...


class ChromaWindowStore:
    """Adapter for ``langchain_chroma.Chroma`` (embedded or client/server).

    On a Chroma server the async methods use Chroma's ``AsyncHttpClient`` (same address,
    headers, tenant and database as the store's own client), so many concurrent ``ainvoke``
    calls wait on the network without a thread each; an embedded store runs its calls in
    LangChain's executor, as langchain-chroma's own async methods do.
    """

    def __init__(self, vectorstore: Any) -> None:
        self.vectorstore = vectorstore
        self._async_collection: Any = None

    # ---- sync ------------------------------------------------------------------------------

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Run ``similarity_search_with_score`` (Chroma distances: lower is better)."""
        return self.vectorstore.similarity_search_with_score(  # type: ignore[no-any-return]
            request.query,
            k=request.k,
            filter=dict(request.where) if request.where is not None else None,
            where_document=dict(request.where_document) if request.where_document else None,
        )

    def fetch(self, request: Fetch) -> list[Document]:
        """Get chunks by id in one call; ``where`` only when the caller could not decide it."""
        return list(self.fetch_embedded(request, embeddings=False).documents)

    def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """Search by the query's vector for ids and distances only."""
        vector = self._embedder().embed_query(request.query)
        result = self.vectorstore._collection.query(**_ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    def search_embedded(self, request: Search) -> Embedded:
        """Embed the query with the store's embedding function and search by that vector."""
        vector = list(self._embedder().embed_query(request.query))
        result = self.vectorstore._collection.query(**_query_arguments(request, vector))
        return _embedded_hits(result, vector, self.space())

    def fetch_embedded(self, request: Fetch, *, embeddings: bool = True) -> Embedded:
        """Get chunks by id in one call, with their stored embeddings."""
        if not request.ids:
            return Embedded(documents=[], embeddings=[])
        result = self.vectorstore._collection.get(**_get_arguments(request, embeddings))
        return _embedded_chunks(result, embeddings)

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

    # ---- async -----------------------------------------------------------------------------

    async def asearch(self, request: Search) -> list[tuple[Document, float]]:
        """``search`` over Chroma's async HTTP client on a server; in a thread otherwise."""
        collection = await self._server_collection()
        if collection is None:
            return await run_in_executor(None, self.search, request)
        vector = list(await self._embedder().aembed_query(request.query))
        arguments = _query_arguments(request, vector, embeddings=False)
        found = _embedded_hits(await collection.query(**arguments), vector, "l2")
        return list(zip(found.documents, found.distances, strict=True))

    async def asearch_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """``search_ids`` over Chroma's async HTTP client on a server; in a thread otherwise."""
        collection = await self._server_collection()
        if collection is None:
            return await run_in_executor(None, self.search_ids, request)
        vector = await self._embedder().aembed_query(request.query)
        result = await collection.query(**_ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    async def afetch(self, request: Fetch) -> list[Document]:
        """``fetch`` over Chroma's async HTTP client on a server; in a thread otherwise."""
        return list((await self._aget(request, embeddings=False)).documents)

    async def asearch_embedded(self, request: Search) -> Embedded:
        """``search_embedded`` over Chroma's async HTTP client on a server."""
        collection = await self._server_collection()
        if collection is None:
            return await run_in_executor(None, self.search_embedded, request)
        vector = list(await self._embedder().aembed_query(request.query))
        result = await collection.query(**_query_arguments(request, vector))
        return _embedded_hits(result, vector, self.space())

    async def afetch_embedded(self, request: Fetch) -> Embedded:
        """``fetch_embedded`` over Chroma's async HTTP client on a server."""
        return await self._aget(request, embeddings=True)

    async def _aget(self, request: Fetch, *, embeddings: bool) -> Embedded:
        collection = await self._server_collection()
        if collection is None:
            return await run_in_executor(None, self.fetch_embedded, request, embeddings=embeddings)
        if not request.ids:
            return Embedded(documents=[], embeddings=[])
        return _embedded_chunks(
            await collection.get(**_get_arguments(request, embeddings)), embeddings
        )

    async def _server_collection(self) -> Any:
        """The collection through ``AsyncHttpClient`` when the store is on a server, else None."""
        if self._async_collection is None:
            client: Any = getattr(self.vectorstore, "_client", None)
            settings = client.get_settings() if client is not None else None
            if settings is None or settings.chroma_api_impl != "chromadb.api.fastapi.FastAPI":
                self._async_collection = False  # embedded (or unknown): threads
            else:
                self._async_collection = await _async_collection(
                    settings, client.tenant, client.database, self.vectorstore._collection.name
                )
        return self._async_collection or None

    def _embedder(self) -> Any:
        embedder = getattr(self.vectorstore, "embeddings", None)
        if embedder is None:
            msg = (
                "window_retriever needs the Chroma store's embedding_function to embed the "
                "query; create the store with Chroma(..., embedding_function=...)"
            )
            raise ConfigurationError(msg)
        return embedder


async def _async_collection(settings: Any, tenant: str, database: str, name: str) -> Any:
    """Open ``name`` through Chroma's ``AsyncHttpClient`` with the sync client's settings."""
    import chromadb

    fields = settings.model_dump() if hasattr(settings, "model_dump") else settings.dict()
    for key in ("chroma_api_impl", "chroma_server_host", "chroma_server_http_port"):
        fields.pop(key, None)  # AsyncHttpClient sets these itself
    copied = chromadb.config.Settings(**fields)
    client = await chromadb.AsyncHttpClient(
        host=settings.chroma_server_host,
        port=settings.chroma_server_http_port,
        ssl=bool(settings.chroma_server_ssl_enabled),
        headers=settings.chroma_server_headers,
        settings=copied,
        tenant=tenant,
        database=database,
    )
    return await client.get_collection(name, embedding_function=None)


def _query_arguments(
    request: Search, vector: Sequence[float], *, embeddings: bool = True
) -> dict[str, Any]:
    return {
        "query_embeddings": [list(vector)],
        "n_results": request.k,
        "where": dict(request.where) if request.where is not None else None,
        "where_document": dict(request.where_document) if request.where_document else None,
        "include": ["documents", "metadatas", "distances", *(["embeddings"] if embeddings else [])],
    }


def _ids_query_arguments(request: SearchIds, vector: Sequence[float]) -> dict[str, Any]:
    return {
        "query_embeddings": [list(vector)],
        "n_results": request.k,
        "where": dict(request.where) if request.where is not None else None,
        "where_document": dict(request.where_document) if request.where_document else None,
        "include": ["distances"],
    }


def _get_arguments(request: Fetch, embeddings: bool) -> dict[str, Any]:
    return {
        "ids": list(request.ids),
        "where": dict(request.where) if request.where is not None else None,
        "where_document": dict(request.where_document) if request.where_document else None,
        "include": ["documents", "metadatas", *(["embeddings"] if embeddings else [])],
    }


def _embedded_hits(result: Any, vector: Sequence[float], space: Space) -> Embedded:
    """Chroma's answer to one query as hits, best first (chunks without text left out)."""
    vectors = result.get("embeddings")
    count = len(result["ids"][0])
    rows = [
        (Document(page_content=text, metadata=metadata or {}, id=chunk_id), distance, emb)
        for chunk_id, text, metadata, distance, emb in zip(
            result["ids"][0],
            result["documents"][0],
            result["metadatas"][0],
            result["distances"][0],
            vectors[0] if vectors is not None else [()] * count,
            strict=True,
        )
        if text is not None
    ]
    return Embedded(
        documents=[row[0] for row in rows],
        distances=[float(row[1]) for row in rows],
        embeddings=[row[2] for row in rows],
        query_embedding=list(vector),
        space=space,
    )


def _embedded_chunks(result: Any, embeddings: bool) -> Embedded:
    """Chroma's answer to one ``get`` as documents (chunks without text left out)."""
    vectors = result["embeddings"] if embeddings else [()] * len(result["ids"])
    rows = [
        (Document(page_content=text, metadata=metadata or {}, id=chunk_id), vector)
        for chunk_id, text, metadata, vector in zip(
            result["ids"], result["documents"], result["metadatas"], vectors, strict=True
        )
        if text is not None
    ]
    return Embedded(documents=[row[0] for row in rows], embeddings=[row[1] for row in rows])


def execute(store: WindowStore, request: Request) -> Any:
    """Run one request against ``store``."""
    if isinstance(request, SearchIds):
        if not isinstance(store, IdSearchStore):
            msg = f"{type(store).__name__} has no search_ids; the retriever should not ask it"
            raise ConfigurationError(msg)
        return store.search_ids(request)
    if request.embeddings:
        if not isinstance(store, EmbeddingWindowStore):
            msg = (
                f"expansion='adaptive' needs a store that returns embeddings; "
                f"{type(store).__name__} has no search_embedded / fetch_embedded "
                "(use langchain_chroma.Chroma, or expansion='static')"
            )
            raise ConfigurationError(msg)
        if isinstance(request, Search):
            return store.search_embedded(request)
        return store.fetch_embedded(request)
    if isinstance(request, Search):
        return store.search(request)
    return store.fetch(request)


async def aexecute(store: WindowStore, request: Request) -> Any:
    """Run one request against ``store`` without blocking the event loop.

    A store with native ``asearch`` / ``afetch`` (``asearch_embedded`` / ``afetch_embedded``)
    coroutines is awaited directly; otherwise the sync call runs in LangChain's executor (as
    langchain-chroma's own ``a*`` methods do).
    """
    name = "afetch" if isinstance(request, Fetch) else "asearch"
    if isinstance(request, SearchIds):
        name = "asearch_ids"
    elif request.embeddings:
        name = f"{name}_embedded"  # asearch_embedded / afetch_embedded
    native = getattr(store, name, None)
    if native is not None:
        return await native(request)
    return await run_in_executor(None, execute, store, request)


def store_adapter(vectorstore: Any) -> WindowStore:
    """Wrap ``vectorstore`` in its adapter, or explain which stores are supported.

    A ``langchain_chroma.Chroma`` (a subclass too, whatever methods it adds) gets the Chroma
    adapter; anything else must implement :class:`WindowStore` itself.
    """
    try:
        from langchain_chroma import Chroma
    except ImportError:  # pragma: no cover - langchain-chroma is a dependency
        Chroma = None  # type: ignore[assignment,misc]  # noqa: N806
    if Chroma is not None and isinstance(vectorstore, Chroma):
        return ChromaWindowStore(vectorstore)
    if isinstance(vectorstore, WindowStore):
        return vectorstore
    msg = (
        f"vectorstore must be a langchain_chroma.Chroma (or implement "
        f"window_retriever.WindowStore), got {type(vectorstore).__name__}"
    )
    raise ConfigurationError(msg)
