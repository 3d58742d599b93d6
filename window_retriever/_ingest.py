"""Writing chunks to a store: under their own ids, in batches, replacing old versions safely."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError, OwnershipError
from window_retriever._ids import CHUNK_ID, CHUNK_INDEX, FILE_ID, FILE_VERSION
from window_retriever._loaders import LoadOptions
from window_retriever._splitter import WindowSplitter

_FALLBACK_BATCH_SIZE = 5000
MAX_IDS_PER_CALL = 32_762
"""Chroma (SQLite) fails above this many ids in one call ("too many SQL variables"), and so
does a ``get`` that would return more records: every read and delete is cut below it."""
FILE_CHUNKS = "file_chunks"
"""Metadata that :func:`sync_file` stamps on a file's first chunk, which it writes last: how
many chunks the file has. It says the write of that version finished: with every chunk of
the version stored, the file is unchanged without a metadata query."""

OWNER_KEYS = (
    "tenant",
    "tenant_id",
    "owner",
    "owner_id",
    "user",
    "user_id",
    "namespace",
    "org",
    "org_id",
    "organization",
)
"""Metadata keys that say whose a file is. :func:`sync_file` never replaces or deletes the
chunks of a file whose stored value of one of these differs from the new chunks' value."""


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
    ids = _chunk_ids(chunks)
    store_chunks(vectorstore, chunks, batch_size_for(vectorstore, batch_size))
    return ids


def _chunk_ids(chunks: Sequence[Document]) -> list[str]:
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
    return ids


def batch_size_for(vectorstore: Any, batch_size: int | None) -> int:
    """Records a write may carry: ``batch_size``, checked, or what the store allows."""
    size = _id_batch_size(vectorstore) if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        msg = f"batch_size must be a whole number, at least 1, got {size!r}"
        raise ConfigurationError(msg)
    return size


def store_chunks(
    vectorstore: Any,
    chunks: Sequence[Document],
    size: int,
    vectors: Sequence[Sequence[float]] | None = None,
) -> None:
    """Upsert ``chunks`` under their ids, ``size`` a call; embedded by the store, or ``vectors``."""
    for begin in range(0, len(chunks), size):
        part = list(chunks[begin : begin + size])
        ids = [chunk.metadata[CHUNK_ID] for chunk in part]
        if vectors is None:
            vectorstore.add_documents(part, ids=ids)
        else:  # what langchain's Chroma.add_texts does once it has the vectors
            vectorstore._collection.upsert(
                ids=ids,
                embeddings=[list(vector) for vector in vectors[begin : begin + size]],
                metadatas=[chunk.metadata for chunk in part],
                documents=[chunk.page_content for chunk in part],
            )


def _max_batch_size(vectorstore: Any) -> int:
    client = getattr(vectorstore, "_client", None)
    getter = getattr(client, "get_max_batch_size", None)
    if callable(getter):
        return int(getter())
    return _FALLBACK_BATCH_SIZE


def _id_batch_size(vectorstore: Any) -> int:
    """The most ids (or records read) one call may carry: Chroma's SQL variables run out above."""
    return max(1, min(_max_batch_size(vectorstore), MAX_IDS_PER_CALL))


def _get_by_ids(vectorstore: Any, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored metadata of those of ``ids`` that are stored, read in batches."""
    found: dict[str, dict[str, Any]] = {}
    size = _id_batch_size(vectorstore)
    for begin in range(0, len(ids), size):
        page = vectorstore.get(ids=list(ids[begin : begin + size]), include=["metadatas"])
        for chunk_id, metadata in zip(page["ids"], page["metadatas"], strict=True):
            found[chunk_id] = metadata or {}
    return found


def _get_where(vectorstore: Any, where: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ids and metadata of every stored chunk that ``where`` matches, page by page."""
    found: list[tuple[str, dict[str, Any]]] = []
    size = _id_batch_size(vectorstore)
    while True:
        page = vectorstore.get(where=where, include=["metadatas"], limit=size, offset=len(found))
        found += [(i, m or {}) for i, m in zip(page["ids"], page["metadatas"], strict=True)]
        if len(page["ids"]) < size:
            return found


def _delete(vectorstore: Any, ids: Sequence[str]) -> None:
    size = _id_batch_size(vectorstore)
    for begin in range(0, len(ids), size):
        vectorstore.delete(ids=list(ids[begin : begin + size]))


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
    vectorstore: Any,
    chunks: Sequence[Document],
    *,
    batch_size: int | None = None,
    owner_keys: Sequence[str] = OWNER_KEYS,
    replace_source_copies: bool = False,
) -> FileOutcome:
    """Make the store hold exactly ``chunks`` for their file, embedding only what changed.

    ``chunks`` are all the chunks of one file, from ``WindowSplitter`` (one ``file_id``, one
    ``file_version``). First the chunks' own ids are read (metadata only, no embeddings): when
    every one is stored with this version and the file's first chunk says its write finished,
    the file is unchanged and that is all. Otherwise the store's chunks of that file are read
    by ``file_id``, and with ``replace_source_copies`` also those stored under the same
    ``source`` with another file id. Then:

    - chunks already stored with this version are left alone (an unchanged file, or one whose
      earlier ingest was killed half-way, costs no embedding for them). The version hashes
      the text *and* the metadata, so a changed ``access`` level is a new version;
    - the others but the first chunk are upserted under the same ids, so every position holds
      the old or the new version at every moment and the file is never missing (windows join
      only chunks of the hit's version, so a half-written file never yields a mixed window);
    - chunks at positions the new version no longer has are deleted; with
      ``replace_source_copies`` (what the ingest command passes, one file per source and
      owner) so are copies of the same ``source`` under another file id with the same owner,
      e.g. from an ingest that put other metadata into the file id. Leave it off when one
      source holds several files (``file_id_keys=("source", "page")``);
    - last, the first chunk is written, stamped with the file's chunk count
      (``metadata["file_chunks"]``): the mark that this version was written whole (with
      nothing to delete, it goes in the last batch of the others). A file stored without it
      (by an earlier release, or by a write that was killed) is checked by ``file_id`` and,
      when it is otherwise complete, only its first chunk is written again.

    Every read and delete carries at most 32,762 ids and every write at most the client's
    batch size, so a file of any length fits Chroma's limits. A run killed at any point and
    run again converges to the same store, without duplicates.

    Raises:
        OwnershipError: The stored chunks of this file id have another value for one of
            ``owner_keys`` (another tenant's copy of the same source): nothing is written.
            Namespace the file id with ``WindowSplitter(file_id_keys=("tenant", "source"))``.
    """
    if not chunks:
        return FileOutcome("unchanged", 0, 0, 0)
    size = batch_size_for(vectorstore, batch_size)
    plan = plan_file(vectorstore, chunks, owner_keys, replace_source_copies)
    return apply_plan(vectorstore, plan, size)


@dataclass(frozen=True, slots=True)
class Plan:
    """What syncing one file writes, found by reading the store before anything is embedded."""

    body: list[Document]
    """Chunks to upsert first, in order."""
    head: Document | None
    """The first chunk, stamped with the file's chunk count, upserted last (or not at all)."""
    stale: list[str]
    """Ids to delete between the two: a shrunk file's tail, copies under older file ids."""
    chunks: int
    existed: bool

    def documents(self) -> list[Document]:
        """Every chunk to embed and write, in the order they are written."""
        return [*self.body, *([self.head] if self.head is not None else [])]


def plan_file(
    vectorstore: Any,
    chunks: Sequence[Document],
    owner_keys: Sequence[str],
    replace_source_copies: bool,
) -> Plan:
    """Read what the store holds of a file and decide what syncing it writes (nothing yet)."""
    file_ids = {chunk.metadata.get(FILE_ID) for chunk in chunks}
    versions = {chunk.metadata.get(FILE_VERSION) for chunk in chunks}
    if len(file_ids) != 1 or len(versions) != 1:
        msg = (
            "sync_file takes the chunks of exactly one file version (one file_id, one file_version)"
        )
        raise ConfigurationError(msg)
    (file_id,) = file_ids
    (version,) = versions
    ids = _chunk_ids(chunks)
    # The file's first chunk (chunk_index 0) is written last: the mark of a whole write.
    head = next((n for n, c in enumerate(chunks) if c.metadata.get(CHUNK_INDEX) == 0), 0)
    first = chunks[head].metadata
    owner = {key: first.get(key) for key in owner_keys}
    mark = {FILE_ID: file_id, FILE_VERSION: version, **owner}
    found = _get_by_ids(vectorstore, ids)
    if (
        len(found) == len(ids)
        and all(_matches(metadata, mark) for metadata in found.values())
        and found[ids[head]].get(FILE_CHUNKS) == len(chunks)
    ):
        return Plan([], None, [], len(chunks), existed=True)

    source = first.get("source")
    where: dict[str, Any] = {FILE_ID: file_id}
    if (
        replace_source_copies
        and isinstance(source, str | int | float)
        and not isinstance(source, bool)
    ):
        where = {"$or": [{FILE_ID: file_id}, {"source": source}]}
    stored: dict[str, dict[str, Any]] = {}
    copies: list[str] = []
    for chunk_id, metadata in _get_where(vectorstore, where):
        same_owner = all(metadata.get(key) == value for key, value in owner.items())
        if metadata.get(FILE_ID) == file_id:
            if not same_owner:
                raise OwnershipError(_owner_message(str(file_id), source, metadata, owner))
            stored[chunk_id] = metadata
        elif same_owner:
            copies.append(chunk_id)  # the same source of the same owner under an old file id
    todo = [
        number
        for number, chunk_id in enumerate(ids)
        if number != head and stored.get(chunk_id, {}).get(FILE_VERSION) != version
    ]
    stale = sorted(set(stored) - set(ids)) + sorted(copies)
    stored_head = stored.get(ids[head], {})
    whole = stored_head.get(FILE_VERSION) == version and stored_head.get(FILE_CHUNKS) == len(ids)
    marked = Document(
        page_content=chunks[head].page_content,
        metadata={**first, FILE_CHUNKS: len(chunks)},
        id=ids[head],
    )
    return Plan(
        body=[chunks[n] for n in todo],
        head=None if whole else marked,
        stale=stale,
        chunks=len(chunks),
        existed=bool(stored or copies),
    )


def apply_plan(
    vectorstore: Any,
    plan: Plan,
    size: int,
    vectors: Sequence[Sequence[float]] | None = None,
) -> FileOutcome:
    """Write a plan: its body, its deletes, then its first chunk (``vectors``: theirs).

    The first chunk's mark must not come before the deletes (a file marked whole would not be
    read again, so a tail left by a killed run would stay); with nothing to delete it goes
    last in the body's writes, in one embedding call with them.
    """
    if not plan.stale:
        store_chunks(vectorstore, plan.documents(), size, vectors)
    else:
        body = head = None
        if vectors is not None:
            body, head = vectors[: len(plan.body)], vectors[len(plan.body) :]
        if plan.body:
            store_chunks(vectorstore, plan.body, size, body)
        _delete(vectorstore, plan.stale)
        if plan.head is not None:
            store_chunks(vectorstore, [plan.head], size, head)
    return outcome_of(plan)


def outcome_of(plan: Plan) -> FileOutcome:
    """What writing ``plan`` did."""
    written = len(plan.documents())
    if not written and not plan.stale:
        status: Literal["added", "updated", "unchanged"] = "unchanged"
    else:
        status = "updated" if plan.existed else "added"
    return FileOutcome(status, plan.chunks, written, len(plan.stale))


def _matches(metadata: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    return all(metadata.get(key) == value for key, value in expected.items())


def _owner_message(
    file_id: str, source: Any, stored: Mapping[str, Any], owner: Mapping[str, Any]
) -> str:
    differing = [key for key, value in owner.items() if stored.get(key) != value]
    was = ", ".join(f"{key}={stored.get(key)!r}" for key in differing)
    now = ", ".join(f"{key}={owner[key]!r}" for key in differing)
    what = f"source {source!r}" if source is not None else f"file {file_id!r}"
    return (
        f"{what} is stored with {was}; syncing it with {now} would replace the other "
        f"owner's chunks, so nothing was written. Keep one file per owner with "
        f"WindowSplitter(file_id_keys=({', '.join(repr(k) for k in differing)}, 'source')) "
        "or delete the stored file first"
    )


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
    """Load, split and :func:`sync_file` each source (URL or file); outcomes in source order.

    The stages overlap. A loader thread fetches, parses and splits sources, one at a time (so
    ``requests_per_second`` holds), up to a few ahead. This thread reads the store for each
    source (what to write, as :func:`sync_file` decides it). An embedding thread embeds what
    changed, the chunks of all the sources that are ready in one call (full batches across
    small pages). A writer thread writes each source whole, in order, while the next ones
    embed (the sources waiting for it together, in one upsert). Two sources of the same file
    or ``source`` are never in flight together. A store other than LangChain's Chroma is
    synced source by source with :func:`sync_file` (loading still runs ahead).

    A source that cannot be loaded, or whose chunks may not be written (another owner's
    file), is yielded with its error and the others go on; any other error is raised in its
    place, after the sources before it. When the caller stops or is interrupted, the sources
    being written are finished and no other starts. ``metadata`` is stamped on every chunk.
    """
    from window_retriever._pipeline import AHEAD, Ahead, pipelined, split_sources, writes_vectors

    ahead = Ahead(split_sources(sources, splitter, options, metadata), AHEAD)
    try:
        embeddings = writes_vectors(vectorstore)
        if embeddings is None:
            for name, chunks, error in ahead:
                yield _sync_source(vectorstore, name, chunks, error)
        else:
            yield from pipelined(vectorstore, embeddings, ahead)
    finally:
        ahead.close()


def _sync_source(
    vectorstore: Any, name: str, chunks: list[Document] | None, error: str | None
) -> SourceOutcome:
    if chunks is None:
        return SourceOutcome(name, error=error)
    try:
        outcome = sync_file(vectorstore, chunks, replace_source_copies=True)
    except OwnershipError as failure:
        return SourceOutcome(name, error=str(failure))
    return SourceOutcome(name, outcome=outcome)


@dataclass(frozen=True, slots=True)
class Pruned:
    """A file that :func:`prune_missing` removed from the store."""

    source: str
    chunks: int


def prune_missing(
    vectorstore: Any,
    directory: str | Path,
    keep: Iterable[str],
    *,
    owner: Mapping[str, Any] | None = None,
    owner_keys: Sequence[str] = OWNER_KEYS,
    skip: Iterable[str] = (),
    listed: Iterable[str] | None = None,
    page_size: int = 5000,
) -> list[Pruned]:
    """Delete the stored files below ``directory`` whose source is not in ``keep``.

    After a directory is ingested again, ``keep`` holds the sources that are still there (and
    not empty): what else the store holds below the directory was deleted or emptied since,
    and would otherwise go on answering queries. Only the files of ``owner`` are pruned: a
    stored file whose value of any of ``owner_keys`` differs (a missing key is ``None``) is
    another owner's and never touched. Nothing below a folder in ``skip`` (one that could
    not be listed) is pruned. Metadata is read page by page (no embeddings).

    ``listed`` (the sources this run found in the directory) guards against another writer:
    a stored file this run never listed that exists now was added after the listing, and is
    the other writer's to keep.
    """
    prefix = os.path.abspath(directory).rstrip(os.sep) + os.sep
    kept = set(keep)
    owner = dict(owner or {})
    unlisted = [os.path.abspath(folder).rstrip(os.sep) + os.sep for folder in skip]
    seen = None if listed is None else {os.path.abspath(source) for source in listed}
    doomed: dict[str, list[str]] = {}
    page_size = max(1, min(page_size, _id_batch_size(vectorstore)))
    offset = 0
    while True:
        page = vectorstore.get(include=["metadatas"], limit=page_size, offset=offset)
        for chunk_id, metadata in zip(page["ids"], page["metadatas"], strict=True):
            metadata = metadata or {}
            source = metadata.get("source")
            if not isinstance(source, str) or not source.startswith(prefix) or source in kept:
                continue
            if any(metadata.get(key) != owner.get(key) for key in owner_keys):
                continue  # another owner's file
            if any(source.startswith(folder) for folder in unlisted):
                continue  # below a folder that could not be read: not known to be gone
            if seen is not None and source not in seen and os.path.lexists(source):
                continue  # appeared after this run listed the folder: not gone
            doomed.setdefault(source, []).append(chunk_id)
        if len(page["ids"]) < page_size:
            break
        offset += page_size
    _delete(vectorstore, [chunk_id for chunk_ids in doomed.values() for chunk_id in chunk_ids])
    return [Pruned(source, len(chunk_ids)) for source, chunk_ids in sorted(doomed.items())]
