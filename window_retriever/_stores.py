"""Store adapters: the two calls a windowed retrieval makes, behind a small protocol.

The retriever speaks to a store only through :class:`Search` and :class:`Fetch` requests, so
the sync and async paths share one body, and another store needs only another adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from window_retriever._errors import ConfigurationError

Where = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Search:
    """A similarity search: ``k`` nearest chunks to ``query`` with their distances."""

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None


@dataclass(frozen=True, slots=True)
class Fetch:
    """A batched fetch of chunks by store id, optionally filtered by the store itself."""

    ids: Sequence[str]
    where: Where | None = None
    where_document: Where | None = None


Request = Search | Fetch


@runtime_checkable
class WindowStore(Protocol):
    """What the retriever needs of a store: a scored search and a fetch by ids."""

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Return ``(document, distance)`` pairs, best (lowest distance) first."""
        ...

    def fetch(self, request: Fetch) -> list[Document]:
        """Return the stored documents among ``request.ids`` (any order, ``id`` set)."""
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
        if not request.ids:
            return []
        result = self.vectorstore.get(
            ids=list(request.ids),
            where=dict(request.where) if request.where is not None else None,
            where_document=dict(request.where_document) if request.where_document else None,
            include=["documents", "metadatas"],
        )
        return [
            Document(page_content=text, metadata=metadata or {}, id=chunk_id)
            for chunk_id, text, metadata in zip(
                result["ids"], result["documents"], result["metadatas"], strict=True
            )
            if text is not None
        ]


def execute(store: WindowStore, request: Request) -> Any:
    """Run one request against ``store``."""
    if isinstance(request, Search):
        return store.search(request)
    return store.fetch(request)


async def aexecute(store: WindowStore, request: Request) -> Any:
    """Run one request against ``store`` without blocking the event loop.

    A store with native ``asearch`` / ``afetch`` coroutines is awaited directly; otherwise the
    sync call runs in LangChain's executor (as langchain-chroma's own ``a*`` methods do).
    """
    native = getattr(store, "asearch" if isinstance(request, Search) else "afetch", None)
    if native is not None:
        return await native(request)
    return await run_in_executor(None, execute, store, request)


def store_adapter(vectorstore: Any) -> WindowStore:
    """Wrap ``vectorstore`` in its adapter, or explain which stores are supported."""
    if isinstance(vectorstore, WindowStore):
        return vectorstore
    try:
        from langchain_chroma import Chroma
    except ImportError:  # pragma: no cover - langchain-chroma is a dependency
        Chroma = None  # type: ignore[assignment,misc]  # noqa: N806
    if Chroma is not None and isinstance(vectorstore, Chroma):
        return ChromaWindowStore(vectorstore)
    msg = (
        f"vectorstore must be a langchain_chroma.Chroma (or implement "
        f"window_retriever.WindowStore), got {type(vectorstore).__name__}"
    )
    raise ConfigurationError(msg)
