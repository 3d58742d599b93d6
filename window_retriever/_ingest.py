"""Writing chunks to a store: under their own ids, in batches, replacing old versions safely."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError, OwnershipError
from window_retriever._ids import CHUNK_ID, CHUNK_INDEX, FILE_ID, FILE_VERSION
from window_retriever._loaders import LoadOptions, load_sources
from window_retriever._splitter import WindowSplitter

_T = TypeVar("_T")
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
    _write(vectorstore, chunks, ids, _batch_size(vectorstore, batch_size))
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


def _batch_size(vectorstore: Any, batch_size: int | None) -> int:
    size = _id_batch_size(vectorstore) if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        msg = f"batch_size must be a whole number, at least 1, got {size!r}"
        raise ConfigurationError(msg)
    return size


def _write(vectorstore: Any, chunks: Sequence[Document], ids: Sequence[str], size: int) -> None:
    for begin in range(0, len(chunks), size):
        vectorstore.add_documents(list(chunks[begin : begin + size]), ids=ids[begin : begin + size])


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
      (``metadata["file_chunks"]``): the mark that this version was written whole. A file
      stored without it (by an earlier release, or by a write that was killed) is checked by
      ``file_id`` and, when it is otherwise complete, only its first chunk is written again.

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
    size = _batch_size(vectorstore, batch_size)
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
        return FileOutcome("unchanged", len(chunks), 0, 0)

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
    rewrite_head = not whole
    if todo:
        _write(vectorstore, [chunks[n] for n in todo], [ids[n] for n in todo], size)
    if stale:
        _delete(vectorstore, stale)
    if rewrite_head:
        marked = Document(
            page_content=chunks[head].page_content,
            metadata={**first, FILE_CHUNKS: len(chunks)},
            id=chunks[head].id,
        )
        _write(vectorstore, [marked], [ids[head]], size)
    written = len(todo) + int(rewrite_head)
    if not written and not stale:
        status: Literal["added", "updated", "unchanged"] = "unchanged"
    else:
        status = "updated" if stored or copies else "added"
    return FileOutcome(status, len(chunks), written, len(stale))


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
    """Load, split and :func:`sync_file` each source (URL or file), in the order given.

    Sources are fetched, parsed and split on a background thread, up to a few ahead of the
    one being embedded and written, so that waiting for a page and parsing it overlap with
    embedding (with ``requests_per_second`` kept, as the thread loads one source at a time).
    Only this thread writes, one whole source after another. A source that cannot be
    loaded, or whose chunks may not be written (another owner's file), is yielded with its
    error and the others go on; ``metadata`` is stamped on every chunk.
    """
    for name, chunks, error in _ahead(_split(sources, splitter, options, metadata), _AHEAD):
        if chunks is None:
            yield SourceOutcome(name, error=error)
            continue
        try:
            outcome = sync_file(vectorstore, chunks, replace_source_copies=True)
        except OwnershipError as failure:
            yield SourceOutcome(name, error=str(failure))
            continue
        yield SourceOutcome(name, outcome=outcome)


_AHEAD = 4
"""Sources loaded and split ahead of the one being written."""


def _split(
    sources: Sequence[str],
    splitter: WindowSplitter,
    options: LoadOptions,
    metadata: Mapping[str, Any] | None,
) -> Iterator[tuple[str, list[Document] | None, str | None]]:
    for loaded in load_sources(sources, options):
        if loaded.document is None:
            yield loaded.name, None, loaded.error
            continue
        loaded.document.metadata.update(metadata or {})
        yield loaded.name, splitter.split_documents([loaded.document]), None


def _ahead(items: Iterator[_T], size: int) -> Iterator[_T]:
    """Yield ``items`` in order, produced on a background thread up to ``size`` ahead.

    An exception of the producer is raised here, in its place. When the consumer stops
    (done, failed or interrupted), the producer stops at its next item.
    """
    produced: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=size)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                produced.put(entry, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
        except BaseException as error:  # handed to the consumer, whatever it is
            put((False, error))
            return
        put((False, None))

    thread = threading.Thread(target=produce, name="window-retriever-load", daemon=True)
    thread.start()
    try:
        while True:
            ok, value = produced.get()
            if ok:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()


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
    page_size: int = 5000,
) -> list[Pruned]:
    """Delete the stored files below ``directory`` whose source is not in ``keep``.

    After a directory is ingested again, ``keep`` holds the sources that are still there (and
    not empty): what else the store holds below the directory was deleted or emptied since,
    and would otherwise go on answering queries. Only the files of ``owner`` are pruned: a
    stored file whose value of any of ``owner_keys`` differs (a missing key is ``None``) is
    another owner's and never touched. Nothing below a folder in ``skip`` (one that could
    not be listed) is pruned. Metadata is read page by page (no embeddings).
    """
    prefix = os.path.abspath(directory).rstrip(os.sep) + os.sep
    kept = set(keep)
    owner = dict(owner or {})
    unlisted = [os.path.abspath(folder).rstrip(os.sep) + os.sep for folder in skip]
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
            doomed.setdefault(source, []).append(chunk_id)
        if len(page["ids"]) < page_size:
            break
        offset += page_size
    _delete(vectorstore, [chunk_id for chunk_ids in doomed.values() for chunk_id in chunk_ids])
    return [Pruned(source, len(chunk_ids)) for source, chunk_ids in sorted(doomed.items())]
