"""A ``WindowStore`` that counts the store calls it passes on (the evaluation's calls a query)."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

from window_retriever._stores import (
    Embedded,
    Fetch,
    IdSearchStore,
    Search,
    SearchIds,
    execute,
    store_adapter,
)


class CountingStore:
    """A ``WindowStore`` that counts the calls it passes on to the store it wraps.

    Wraps a ``langchain_chroma.Chroma`` (or any ``WindowStore``) through the public adapter,
    so nothing private is patched; ``calls`` is the number of searches and fetches so far.
    """

    def __init__(self, vectorstore: Any) -> None:
        self.store = store_adapter(vectorstore)
        self.calls = 0

    def count(self) -> int:
        """The calls so far."""
        return self.calls

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Count, then search."""
        self.calls += 1
        return list(execute(self.store, request))

    def fetch(self, request: Fetch) -> list[Document]:
        """Count, then fetch."""
        self.calls += 1
        return list(execute(self.store, request))

    def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """Count, then search for ids and distances (a full search where the store has none)."""
        self.calls += 1
        if isinstance(self.store, IdSearchStore):
            return list(execute(self.store, request))
        full = Search(request.query, request.k, request.where, request.where_document)
        return [(document.id or "", distance) for document, distance in execute(self.store, full)]

    def search_embedded(self, request: Search) -> Embedded:
        """Count, then search with embeddings (a store without them says so)."""
        self.calls += 1
        return execute(self.store, request)  # type: ignore[no-any-return]

    def fetch_embedded(self, request: Fetch) -> Embedded:
        """Count, then fetch with embeddings."""
        self.calls += 1
        return execute(self.store, request)  # type: ignore[no-any-return]
