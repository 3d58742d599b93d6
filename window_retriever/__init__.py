"""window_retriever: retrieval that returns whole, readable windows instead of torn chunks.

Split with :class:`WindowSplitter`, store with :func:`add_chunks` (Chroma, embedded or
server, with the offline :func:`default_embeddings`), retrieve with
:class:`ContextWindowRetriever`, a drop-in LangChain retriever.
"""

from window_retriever import evaluation
from window_retriever._embeddings import MiniLMEmbeddings, default_embeddings
from window_retriever._errors import (
    ConfigurationError,
    MissingWindowMetadataError,
    OwnershipError,
    WindowRetrieverError,
)
from window_retriever._ingest import add_chunks, sync_file
from window_retriever._retriever import ContextWindowRetriever
from window_retriever._splitter import WindowSplitter
from window_retriever._stores import (
    ChromaWindowStore,
    Embedded,
    EmbeddingWindowStore,
    Fetch,
    Search,
    WindowStore,
)
from window_retriever._version import __version__
from window_retriever.evaluation import evaluate, read_questions

__all__ = [
    "ChromaWindowStore",
    "ConfigurationError",
    "ContextWindowRetriever",
    "Embedded",
    "EmbeddingWindowStore",
    "Fetch",
    "MiniLMEmbeddings",
    "MissingWindowMetadataError",
    "OwnershipError",
    "Search",
    "WindowRetrieverError",
    "WindowSplitter",
    "WindowStore",
    "__version__",
    "add_chunks",
    "default_embeddings",
    "evaluate",
    "evaluation",
    "read_questions",
    "sync_file",
]
