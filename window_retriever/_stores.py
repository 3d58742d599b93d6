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


Request = Search | Fetch


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


class ChromaWindowStore:
    """Adapter for ``langchain_chroma.Chroma`` (embedded or client/server)."""

    def __init__(self, vectorstore: Any) -> None:
        self.vectorstore = vectorstore

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
        return list(self._get(request, embeddings=False).documents)

    def search_embedded(self, request: Search) -> Embedded:
        """Embed the query with the store's embedding function and search by that vector."""
        embedder = getattr(self.vectorstore, "embeddings", None)
        if embedder is None:
            msg = (
                "expansion='adaptive' needs the Chroma store's embedding_function to embed "
                "the query; create the store with Chroma(..., embedding_function=...)"
            )
            raise ConfigurationError(msg)
        vector = list(embedder.embed_query(request.query))
        result = self.vectorstore._collection.query(
            query_embeddings=[vector],
            n_results=request.k,
            where=dict(request.where) if request.where is not None else None,
            where_document=dict(request.where_document) if request.where_document else None,
            include=["documents", "metadatas", "distances", "embeddings"],
        )
        rows = [
            (Document(page_content=text, metadata=metadata or {}, id=chunk_id), distance, emb)
            for chunk_id, text, metadata, distance, emb in zip(
                result["ids"][0],
                result["documents"][0],
                result["metadatas"][0],
                result["distances"][0],
                result["embeddings"][0],
                strict=True,
            )
            if text is not None
        ]
        return Embedded(
            documents=[row[0] for row in rows],
            distances=[float(row[1]) for row in rows],
            embeddings=[row[2] for row in rows],
            query_embedding=vector,
            space=self.space(),
        )

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

    def fetch_embedded(self, request: Fetch) -> Embedded:
        """Get chunks by id in one call, with their stored embeddings."""
        return self._get(request, embeddings=True)

    def _get(self, request: Fetch, *, embeddings: bool) -> Embedded:
        if not request.ids:
            return Embedded(documents=[], embeddings=[])
        include = ["documents", "metadatas", *(["embeddings"] if embeddings else [])]
        result = self.vectorstore.get(
            ids=list(request.ids),
            where=dict(request.where) if request.where is not None else None,
            where_document=dict(request.where_document) if request.where_document else None,
            include=include,
        )
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
    name = "asearch" if isinstance(request, Search) else "afetch"
    if request.embeddings:
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
