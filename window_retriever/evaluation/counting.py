"""A ``WindowStore`` that counts the store calls it passes on (the evaluation's calls a query)."""

from __future__ import annotations

from typing import Any, ClassVar

from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import (
    Fetch,
    Found,
    Held,
    IdHits,
    Search,
    SearchIds,
    SearchVectors,
    VectorHits,
    Where,
    WindowStore,
    execute,
)


class CountingStore(WindowStore):
    """A ``WindowStore`` that counts the calls it passes on to the store it wraps.

    Wraps a ``langchain_chroma.Chroma`` (or any ``WindowStore``) through the public adapter,
    so nothing private is patched; ``calls`` is the number of searches and fetches so far.
    It always offers the lean search: around a store without one, it runs a full search and
    keeps the ids (one call either way).
    """

    supports_search_ids: ClassVar[bool] = True
    supports_embeddings: ClassVar[bool] = True
    """As the wrapped store: a request it cannot answer is refused by it, by name."""

    def __init__(self, vectorstore: Any) -> None:
        self.store = store_adapter(vectorstore)
        self.calls = 0
        self.supports_keyword_search = self.store.supports_keyword_search  # type: ignore[misc]
        self.supports_query_embedding = self.store.supports_query_embedding  # type: ignore[misc]

    def keyword_search(
        self, query: str, k: int, where: Where | None, where_document: Where | None
    ) -> IdHits:
        """Search the wrapped store's keyword index (not a store call: not counted)."""
        return self.store.keyword_search(query, k, where, where_document)

    def keyword_search_building(self) -> bool:
        """As the wrapped store."""
        return self.store.keyword_search_building()

    def held(self) -> Held | None:
        """What the wrapped store holds in this process (not a store call: not counted)."""
        return self.store.held()

    def count(self) -> int:
        """The calls so far."""
        return self.calls

    def search(self, request: Search) -> Found:
        """Count, then search."""
        self.calls += 1
        return execute(self.store, request)

    def fetch(self, request: Fetch) -> Found:
        """Count, then fetch."""
        self.calls += 1
        return execute(self.store, request)

    def search_vectors(self, request: SearchVectors) -> VectorHits:
        """Count, then search for ids, distances and vectors."""
        self.calls += 1
        return execute(self.store, request)

    def search_ids(self, request: SearchIds) -> IdHits:
        """Count, then search for ids and distances (a full search where the store has none)."""
        self.calls += 1
        if self.store.supports_search_ids:
            return execute(self.store, request)
        full = Search(request.query, request.k, request.where, request.where_document)
        return [
            (document.id or "", distance) for document, distance in self.store.search(full).pairs()
        ]
