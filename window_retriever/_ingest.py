"""Writing chunks to a store: under their own ids, in batches, replacing old versions safely."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever._ids import CHUNK_ID, FILE_ID, FILE_VERSION
from window_retriever._loaders import LoadOptions, load_sources
from window_retriever._splitter import WindowSplitter

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


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What syncing one file's chunks did to the store."""

    status: Literal["added", "updated", "unchanged"]
    chunks: int
    """Chunks the file has now."""
    written: int
    """Chunks embedded and written (0 for an unchanged file)."""
    removed: int
    """Chunks of an older version that were deleted."""


def sync_file(
    vectorstore: Any, chunks: Sequence[Document], *, batch_size: int | None = None
) -> FileOutcome:
    """Make the store hold exactly ``chunks`` for their file, embedding only what changed.

    ``chunks`` are all the chunks of one file, from ``WindowSplitter`` (one ``file_id``, one
    ``file_version``). The store's chunks of that file are read first (ids and metadata, no
    embeddings). Then:

    - chunks already stored with this version are left alone (an unchanged file, or one whose
      earlier ingest was killed half-way, costs no embedding for them);
    - the others are upserted under the same ids, so every position holds the old or the new
      version at every moment and the file is never missing (windows join only chunks of the
      hit's version, so a half-written file never yields a mixed window);
    - last, chunks at positions the new version no longer has are deleted.

    A run killed at any point and run again converges to the same store, without duplicates.
    """
    if not chunks:
        return FileOutcome("unchanged", 0, 0, 0)
    file_ids = {chunk.metadata.get(FILE_ID) for chunk in chunks}
    versions = {chunk.metadata.get(FILE_VERSION) for chunk in chunks}
    if len(file_ids) != 1 or len(versions) != 1:
        msg = (
            "sync_file takes the chunks of exactly one file version (one file_id, one file_version)"
        )
        raise ConfigurationError(msg)
    (file_id,) = file_ids
    (version,) = versions
    stored = vectorstore.get(where={FILE_ID: file_id}, include=["metadatas"])
    stored_versions = {
        chunk_id: (metadata or {}).get(FILE_VERSION)
        for chunk_id, metadata in zip(stored["ids"], stored["metadatas"], strict=True)
    }
    wanted = {chunk.metadata[CHUNK_ID] for chunk in chunks}
    todo = [chunk for chunk in chunks if stored_versions.get(chunk.metadata[CHUNK_ID]) != version]
    stale = sorted(set(stored_versions) - wanted)
    if todo:
        add_chunks(vectorstore, todo, batch_size=batch_size)
    if stale:
        vectorstore.delete(ids=stale)
    if not todo and not stale:
        status: Literal["added", "updated", "unchanged"] = "unchanged"
    else:
        status = "updated" if stored_versions else "added"
    return FileOutcome(status, len(chunks), len(todo), len(stale))


@dataclass(frozen=True, slots=True)
class SourceOutcome:
    """One source of :func:`ingest_sources`: what syncing it did, or why it failed to load."""

    name: str
    outcome: FileOutcome | None = None
    error: str | None = None


def ingest_sources(
    vectorstore: Any,
    sources: Sequence[str],
    *,
    splitter: WindowSplitter,
    options: LoadOptions,
    metadata: Mapping[str, Any] | None = None,
) -> Iterator[SourceOutcome]:
    """Load, split and :func:`sync_file` each source (URL or file) in turn.

    A source that cannot be loaded is yielded with its error and the others go on; ``metadata``
    is stamped on every chunk.
    """
    for loaded in load_sources(sources, options):
        if loaded.document is None:
            yield SourceOutcome(loaded.name, error=loaded.error)
            continue
        loaded.document.metadata.update(metadata or {})
        chunks = splitter.split_documents([loaded.document])
        yield SourceOutcome(loaded.name, outcome=sync_file(vectorstore, chunks))
