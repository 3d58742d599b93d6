"""window_retriever: retrieval that returns whole, readable windows instead of torn chunks.

Open a Chroma store (a directory or a server) with :func:`open_store`, split with
:class:`WindowSplitter`, store with :func:`add_chunks` (with the offline
:func:`default_embeddings`), retrieve with
:class:`ContextWindowRetriever`, a drop-in LangChain retriever. Cite in a chain with
:func:`format_with_citations`, :func:`citation_sources` and :func:`answer_with_sources`, and
draw what was retrieved with :func:`plot_window_map`.
"""

from window_retriever import citations, evaluation, plotting
from window_retriever._embeddings import MiniLMEmbeddings, default_embeddings
from window_retriever._errors import (
    ConfigurationError,
    MissingWindowMetadataError,
    OwnershipError,
    StoreError,
    WindowRetrieverError,
)
from window_retriever._ingest import add_chunks, sync_file
from window_retriever._loaders import LoadOptions, load_file
from window_retriever._open import open_store
from window_retriever._retriever import ContextWindowRetriever
from window_retriever._splitter import WindowSplitter
from window_retriever._stores import (
    ChromaWindowStore,
    Embedded,
    EmbeddingWindowStore,
    Fetch,
    IdSearchStore,
    Search,
    SearchIds,
    WindowStore,
)
from window_retriever._version import __version__
from window_retriever.citations import (
    CITATION_PROMPT,
    answer_with_sources,
    citation_sources,
    format_with_citations,
)
from window_retriever.evaluation import evaluate, read_questions
from window_retriever.plotting import plot_window_map

__all__ = [
    "CITATION_PROMPT",
    "ChromaWindowStore",
    "ConfigurationError",
    "ContextWindowRetriever",
    "Embedded",
    "EmbeddingWindowStore",
    "Fetch",
    "IdSearchStore",
    "LoadOptions",
    "MiniLMEmbeddings",
    "MissingWindowMetadataError",
    "OwnershipError",
    "Search",
    "SearchIds",
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
    "load_file",
    "open_store",
    "plot_window_map",
    "plotting",
    "read_questions",
    "sync_file",
]
