"""window_retriever: retrieval that returns whole, readable windows instead of torn chunks.

Open a Chroma store (a directory or a server) with :func:`open_store`; ingest URLs, files and
directories with :func:`ingest`, or split with :class:`WindowSplitter` and store with
:func:`add_chunks` (with the offline :func:`default_embeddings`); retrieve with
:class:`ContextWindowRetriever`, a drop-in LangChain retriever. Cite in a chain with
:func:`format_with_citations`, :func:`citation_sources` and :func:`answer_with_sources`, and
draw what was retrieved with :func:`plot_window_map`.
"""

from typing import TYPE_CHECKING

from window_retriever._version import __version__

if TYPE_CHECKING:  # what the names are; at run time each is imported on first use
    from window_retriever import citations, evaluation, ingestion, plotting
    from window_retriever._embeddings import MiniLMEmbeddings, default_embeddings
    from window_retriever._errors import (
        ConfigurationError,
        MissingWindowMetadataError,
        OwnershipError,
        StoreError,
        WindowRetrieverError,
    )
    from window_retriever.citations import (
        CITATION_PROMPT,
        answer_with_sources,
        citation_sources,
        format_with_citations,
    )
    from window_retriever.evaluation import evaluate, read_questions
    from window_retriever.ingestion import ingest
    from window_retriever.ingestion._loaders import load_file
    from window_retriever.ingestion._splitter import WindowSplitter
    from window_retriever.ingestion._stamp import stamp_collection
    from window_retriever.ingestion._web import LoadOptions
    from window_retriever.ingestion._write import add_chunks, sync_file
    from window_retriever.plotting import plot_window_map
    from window_retriever.retrieval._retriever import ContextWindowRetriever
    from window_retriever.stores._chroma import ChromaWindowStore
    from window_retriever.stores._chroma_keywords import invalidate_keywords, reindex_keywords
    from window_retriever.stores._memory import MemoryWindowStore
    from window_retriever.stores._open import open_store
    from window_retriever.stores._protocol import (
        AsyncWindowStore,
        Fetch,
        Found,
        Record,
        Search,
        SearchIds,
        SearchVectors,
        WindowStore,
    )

_WHERE = {
    "AsyncWindowStore": "window_retriever.stores._protocol",
    "CITATION_PROMPT": "window_retriever.citations",
    "ChromaWindowStore": "window_retriever.stores._chroma",
    "ConfigurationError": "window_retriever._errors",
    "ContextWindowRetriever": "window_retriever.retrieval._retriever",
    "Fetch": "window_retriever.stores._protocol",
    "Found": "window_retriever.stores._protocol",
    "LoadOptions": "window_retriever.ingestion._web",
    "MemoryWindowStore": "window_retriever.stores._memory",
    "MiniLMEmbeddings": "window_retriever._embeddings",
    "MissingWindowMetadataError": "window_retriever._errors",
    "OwnershipError": "window_retriever._errors",
    "Record": "window_retriever.stores._protocol",
    "Search": "window_retriever.stores._protocol",
    "SearchIds": "window_retriever.stores._protocol",
    "SearchVectors": "window_retriever.stores._protocol",
    "StoreError": "window_retriever._errors",
    "WindowRetrieverError": "window_retriever._errors",
    "WindowSplitter": "window_retriever.ingestion._splitter",
    "WindowStore": "window_retriever.stores._protocol",
    "add_chunks": "window_retriever.ingestion._write",
    "answer_with_sources": "window_retriever.citations",
    "citation_sources": "window_retriever.citations",
    "citations": "window_retriever.citations",
    "default_embeddings": "window_retriever._embeddings",
    "evaluate": "window_retriever.evaluation",
    "evaluation": "window_retriever.evaluation",
    "format_with_citations": "window_retriever.citations",
    "ingest": "window_retriever.ingestion",
    "ingestion": "window_retriever.ingestion",
    "invalidate_keywords": "window_retriever.stores._chroma_keywords",
    "load_file": "window_retriever.ingestion._loaders",
    "open_store": "window_retriever.stores._open",
    "plot_window_map": "window_retriever.plotting",
    "plotting": "window_retriever.plotting",
    "read_questions": "window_retriever.evaluation",
    "reindex_keywords": "window_retriever.stores._chroma_keywords",
    "stamp_collection": "window_retriever.ingestion._stamp",
    "sync_file": "window_retriever.ingestion._write",
}
"""Where each public name lives: ``import window_retriever`` imports none of them (the command
line starts at once, and a retriever does not pay for plotting or evaluation)."""


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'window_retriever' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    found = importlib.import_module(module)
    value = found if module == f"window_retriever.{name}" else getattr(found, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


__all__ = [  # noqa: RUF022 - sorted as Python sorts (a test checks it), not isort's way
    "AsyncWindowStore",
    "CITATION_PROMPT",
    "ChromaWindowStore",
    "ConfigurationError",
    "ContextWindowRetriever",
    "Fetch",
    "Found",
    "LoadOptions",
    "MemoryWindowStore",
    "MiniLMEmbeddings",
    "MissingWindowMetadataError",
    "OwnershipError",
    "Record",
    "Search",
    "SearchIds",
    "SearchVectors",
    "StoreError",
    "WindowRetrieverError",
    "WindowSplitter",
    "WindowStore",
    "__version__",
    "add_chunks",
    "answer_with_sources",
    "citation_sources",
    "citations",
    "default_embeddings",
    "evaluate",
    "evaluation",
    "format_with_citations",
    "ingest",
    "ingestion",
    "invalidate_keywords",
    "load_file",
    "open_store",
    "plot_window_map",
    "plotting",
    "read_questions",
    "reindex_keywords",
    "stamp_collection",
    "sync_file",
]
