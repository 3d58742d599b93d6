"""Store adapters: the two calls a windowed retrieval makes, behind a small protocol.

The retriever speaks to a store only through :class:`Search` and :class:`Fetch` requests, so
the sync and async paths share one body, and another store needs only another adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import quote, urlsplit

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from window_retriever._errors import ConfigurationError, Option, StoreError, WindowRetrieverError
from window_retriever._open import ENV_TOKEN, timeout_message

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

    On a Chroma server the async methods speak async HTTP (same address, headers, tenant and
    database as the store's own client), so many concurrent ``ainvoke`` calls wait on the
    network without a thread each; an embedded store runs its calls in LangChain's executor,
    as langchain-chroma's own async methods do.
    """

    def __init__(self, vectorstore: Any) -> None:
        self.vectorstore = vectorstore
        self._async_server: _AsyncServer | Literal[False] | None = None

    # ---- sync ------------------------------------------------------------------------------

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Run ``similarity_search_with_score`` (Chroma distances: lower is better)."""
        with store_errors(self.vectorstore):
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
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.query(**_ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    def search_embedded(self, request: Search) -> Embedded:
        """Embed the query with the store's embedding function and search by that vector."""
        vector = list(self._embedder().embed_query(request.query))
        with store_errors(self.vectorstore):
            result = self.vectorstore._collection.query(**_query_arguments(request, vector))
        return _embedded_hits(result, vector, self.space())

    def fetch_embedded(self, request: Fetch, *, embeddings: bool = True) -> Embedded:
        """Get chunks by id in one call, with their stored embeddings."""
        if not request.ids:
            return Embedded(documents=[], embeddings=[])
        with store_errors(self.vectorstore):
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
        """``search`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await run_in_executor(None, self.search, request)
        vector = list(await self._embedder().aembed_query(request.query))
        arguments = _query_arguments(request, vector, embeddings=False)
        found = _embedded_hits(await server.call("query", arguments), vector, "l2")
        return list(zip(found.documents, found.distances, strict=True))

    async def asearch_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """``search_ids`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await run_in_executor(None, self.search_ids, request)
        vector = await self._embedder().aembed_query(request.query)
        result = await server.call("query", _ids_query_arguments(request, vector))
        return list(zip(result["ids"][0], map(float, result["distances"][0]), strict=True))

    async def afetch(self, request: Fetch) -> list[Document]:
        """``fetch`` over async HTTP on a server; in a thread otherwise."""
        return list((await self._aget(request, embeddings=False)).documents)

    async def asearch_embedded(self, request: Search) -> Embedded:
        """``search_embedded`` over async HTTP on a server; in a thread otherwise."""
        server = self._server()
        if server is None:
            return await run_in_executor(None, self.search_embedded, request)
        vector = list(await self._embedder().aembed_query(request.query))
        result = await server.call("query", _query_arguments(request, vector))
        return _embedded_hits(result, vector, self.space())

    async def afetch_embedded(self, request: Fetch) -> Embedded:
        """``fetch_embedded`` over async HTTP on a server; in a thread otherwise."""
        return await self._aget(request, embeddings=True)

    async def _aget(self, request: Fetch, *, embeddings: bool) -> Embedded:
        server = self._server()
        if server is None:
            return await run_in_executor(None, self.fetch_embedded, request, embeddings=embeddings)
        if not request.ids:
            return Embedded(documents=[], embeddings=[])
        result = await server.call("get", _get_arguments(request, embeddings))
        return _embedded_chunks(result, embeddings)

    def _server(self) -> _AsyncServer | None:
        """Async HTTP to the store's server, or None for an embedded store (threads)."""
        if self._async_server is None:
            self._async_server = _AsyncServer.of(self.vectorstore) or False
        return self._async_server or None

    def _embedder(self) -> Any:
        embedder = getattr(self.vectorstore, "embeddings", None)
        if embedder is None:
            msg = (
                "window_retriever needs the Chroma store's embedding_function to embed the "
                "query; create the store with Chroma(..., embedding_function=...)"
            )
            raise ConfigurationError(msg)
        return embedder


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


# ---- failures ---------------------------------------------------------------------------------


@contextlib.contextmanager
def store_errors(vectorstore: Any) -> Iterator[None]:
    """Turn a failed Chroma call in the block into a one-line ``StoreError`` that names the fix.

    The one place where Chroma's and httpx's failures are read: a server that cannot be
    reached, does not answer in time or refuses the credentials (named by its URL, never with
    its credentials), and a collection that holds vectors of another dimension than the
    embedding model gives. Any other error passes as it is. The retriever's Chroma adapter
    runs every call in it; ingestion wraps its reads and writes in it::

        with store_errors(vectorstore):
            vectorstore._collection.upsert(...)
    """
    try:
        yield
    except WindowRetrieverError:
        raise
    except Exception as error:
        failure = store_failure(error, server_address(vectorstore), vectorstore=vectorstore)
        if failure is None:
            raise
        raise failure from None


def store_failure(
    error: BaseException, server: str | None, *, vectorstore: Any = None
) -> StoreError | None:
    """What ``error`` of a Chroma call means, as a ``StoreError``; None when it is no such failure.

    Args:
        error: An exception raised by chromadb or httpx (or anything else: then None).
        server: The server's URL for the message (no credentials), or None if unknown.
        vectorstore: The store the call was made on, to tell a dimension mismatch apart.
    """
    import httpx
    from chromadb.errors import ChromaError

    named = f"the Chroma server at {server}" if server else "the Chroma server"
    for cause in _causes(error):
        if isinstance(cause, httpx.TimeoutException):
            return StoreError(timeout_message(named, cause))
        status = _refusal(cause)
        if status:
            return StoreError(
                f"{named} refused the credentials (HTTP {status}); check the token "
                f"({ENV_TOKEN}) or the user:password of the URL: it may have been revoked"
            )
        if isinstance(cause, httpx.ConnectError):
            return StoreError(f"cannot reach {named} ({_reason(cause)}); is it running?")
        if isinstance(cause, httpx.TransportError):
            return StoreError(f"{named} broke the connection ({_reason(cause)}); is it running?")
    if vectorstore is not None and isinstance(error, ChromaError):
        return _dimension_failure(vectorstore, server)
    return None


def server_address(vectorstore: Any) -> str | None:
    """The URL of the Chroma server behind ``vectorstore`` (no credentials); None if embedded."""
    client: Any = getattr(vectorstore, "_client", None)
    try:
        if client.get_settings().chroma_api_impl != "chromadb.api.fastapi.FastAPI":
            return None
        parts = urlsplit(client._server.get_api_url())
    except Exception:  # not a Chroma HTTP client
        return None
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what it was raised from or during, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _refusal(error: BaseException) -> int:
    """401 or 403 when ``error`` is a server's refusal of the credentials, else 0.

    Chroma's client raises a refusal as a bare ``Exception`` of the body, raised while
    handling httpx's ``HTTPStatusError`` (found as its context), or as one of its own errors
    when the body names one.
    """
    import httpx
    from chromadb.errors import ChromaError

    if isinstance(error, httpx.HTTPStatusError):
        status = error.response.status_code
    elif isinstance(error, ChromaError):
        status = error.code()
    else:
        return 0
    return status if status in (401, 403) else 0


def _reason(error: BaseException) -> str:
    """Why a connection failed, in a few words: the system's reason when there is one."""
    for cause in _causes(error):
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):
            reason = os.strerror(cause.errno) if cause.errno else str(cause.strerror)
            return reason[:1].lower() + reason[1:]
    reason = " ".join(str(error).split())[:120].rstrip(".") or type(error).__name__
    return reason[:1].lower() + reason[1:]


def _dimension_failure(vectorstore: Any, server: str | None) -> StoreError | None:
    """A StoreError if the collection holds vectors of another dimension than the model's.

    Asked only after Chroma refused a call: one stored vector is read and one text embedded.
    """
    try:
        collection = vectorstore._collection
        stored = collection.get(limit=1, include=["embeddings"])["embeddings"]
        held = len(stored[0]) if stored is not None and len(stored) else 0
        given = len(vectorstore.embeddings.embed_query("dimension"))
        where = server or f"{collection._client.get_settings().persist_directory}/"
    except Exception:
        return None
    if not held or held == given:
        return None
    return StoreError(
        f"the collection {collection.name!r} at {where} holds vectors of dimension {held}, but "
        f"the embedding model gives {given}; use the model the collection was built with, "
        "or pass another ",
        Option("collection"),
    )
