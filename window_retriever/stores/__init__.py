"""Stores: the contract a store keeps, the stores that keep it, and their keyword index.

The public names a store's implementer needs are here: :class:`WindowStore` (and
:class:`AsyncWindowStore` for a store that can wait without a thread), the requests the
retriever sends (:class:`Search`, :class:`SearchIds`, :class:`SearchVectors`, :class:`Fetch`)
and what comes back (:class:`Found`, ``IdHits``, :class:`VectorHits`; :class:`IdsRefused` when a
search among stale ids is refused), :class:`Held` with
``Indexed`` (what a process holds beside the store), :class:`Record` for writes, and the two
stores the library ships (:class:`ChromaWindowStore`, :class:`MemoryWindowStore`), and
:func:`query_vector` / :func:`aquery_vector` (a query embedded once a retrieval). Beside them, the
keyword index of a Chroma collection: :func:`keyword_index` (the process's shared
:class:`KeywordIndex`), :func:`invalidate_keywords` and :func:`reindex_keywords` (for
writers outside the library).
See docs/api.md. The modules below are private; each name is imported on first use.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma import ChromaWindowStore
    from window_retriever.stores._chroma_keywords import (
        invalidate_keywords,
        keyword_index,
        reindex_keywords,
    )
    from window_retriever.stores._memory import MemoryWindowStore
    from window_retriever.stores._protocol import (
        AsyncWindowStore,
        Fetch,
        Found,
        Held,
        IdHits,
        IdsRefused,
        Indexed,
        Record,
        Search,
        SearchIds,
        SearchVectors,
        Space,
        VectorHits,
        Where,
        WindowStore,
        aquery_vector,
        query_vector,
    )

_WHERE = {
    "AsyncWindowStore": "window_retriever.stores._protocol",
    "ChromaWindowStore": "window_retriever.stores._chroma",
    "Fetch": "window_retriever.stores._protocol",
    "Found": "window_retriever.stores._protocol",
    "Held": "window_retriever.stores._protocol",
    "IdHits": "window_retriever.stores._protocol",
    "IdsRefused": "window_retriever.stores._protocol",
    "Indexed": "window_retriever.stores._protocol",
    "KeywordIndex": "window_retriever.keywords._index",
    "MemoryWindowStore": "window_retriever.stores._memory",
    "Record": "window_retriever.stores._protocol",
    "Search": "window_retriever.stores._protocol",
    "SearchIds": "window_retriever.stores._protocol",
    "SearchVectors": "window_retriever.stores._protocol",
    "Space": "window_retriever.stores._protocol",
    "VectorHits": "window_retriever.stores._protocol",
    "Where": "window_retriever.stores._protocol",
    "WindowStore": "window_retriever.stores._protocol",
    "aquery_vector": "window_retriever.stores._protocol",
    "query_vector": "window_retriever.stores._protocol",
    "invalidate_keywords": "window_retriever.stores._chroma_keywords",
    "keyword_index": "window_retriever.stores._chroma_keywords",
    "reindex_keywords": "window_retriever.stores._chroma_keywords",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'window_retriever.stores' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


__all__ = [
    "AsyncWindowStore",
    "ChromaWindowStore",
    "Fetch",
    "Found",
    "Held",
    "IdHits",
    "IdsRefused",
    "Indexed",
    "KeywordIndex",
    "MemoryWindowStore",
    "Record",
    "Search",
    "SearchIds",
    "SearchVectors",
    "Space",
    "VectorHits",
    "Where",
    "WindowStore",
    "aquery_vector",
    "invalidate_keywords",
    "keyword_index",
    "query_vector",
    "reindex_keywords",
]
