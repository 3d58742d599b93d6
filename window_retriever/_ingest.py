"""Writing chunks to a store: under their own ids, in batches the store accepts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever._ids import CHUNK_ID

_FALLBACK_BATCH_SIZE = 5000


def add_chunks(
    vectorstore: Any, chunks: Sequence[Document], *, batch_size: int | None = None
) -> list[str]:
    """Upsert chunks from ``WindowSplitter`` under their ``chunk_id``, in batches.

    Re-adding the same chunks replaces them (same ids), so ingestion can be re-run safely.
    Batches never exceed the client's maximum batch size (Chroma: about 5,461 records).

    Args:
        vectorstore: A LangChain vector store, e.g. ``langchain_chroma.Chroma``.
        chunks: Chunks that carry ``metadata["chunk_id"]``.
        batch_size: Records per call; default: the client's maximum.

    Returns:
        The ids written, in the order of ``chunks``.

    Raises:
        ConfigurationError: A chunk has no ``chunk_id``, or two chunks share one. Nothing is
            written then.
    """
    ids: list[str] = []
    seen: set[str] = set()
    for number, chunk in enumerate(chunks):
        chunk_id = chunk.metadata.get(CHUNK_ID)
        if not isinstance(chunk_id, str) or not chunk_id:
            msg = (
                f"chunk {number} has no metadata['chunk_id']; split documents with "
                "WindowSplitter before adding them"
            )
            raise ConfigurationError(msg)
        if chunk_id in seen:
            msg = (
                f"chunk {number} repeats chunk_id {chunk_id!r}; two source documents share "
                "a file_id (see WindowSplitter's file_id_keys)"
            )
            raise ConfigurationError(msg)
        seen.add(chunk_id)
        ids.append(chunk_id)
    size = batch_size or _max_batch_size(vectorstore)
    if size < 1:
        msg = f"batch_size must be at least 1, got {size}"
        raise ConfigurationError(msg)
    for begin in range(0, len(chunks), size):
        vectorstore.add_documents(list(chunks[begin : begin + size]), ids=ids[begin : begin + size])
    return ids


def _max_batch_size(vectorstore: Any) -> int:
    client = getattr(vectorstore, "_client", None)
    getter = getattr(client, "get_max_batch_size", None)
    if callable(getter):
        return int(getter())
    return _FALLBACK_BATCH_SIZE
