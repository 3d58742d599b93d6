"""Ingesting URLs, files and directories into a store: :func:`ingest`, what the command does.

The orchestration above the pipeline: expand directories, namespace the files of each owner,
stamp what a directory run owns, ingest, then prune what is gone. The command line is a thin
shell over :func:`ingest`; a program gets the same behaviour, and the same events to report::

    from window_retriever import ingest, open_store

    summary = ingest(open_store("chroma-db", create=True), ["docs/"], metadata={"tenant": "a"})
    print(summary.added, summary.updated, summary.gone)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_text_splitters import TextSplitter

from window_retriever._errors import ConfigurationError
from window_retriever.core._ids import make_file_id
from window_retriever.ingestion._headers import DEFAULT_HEADERS
from window_retriever.ingestion._loaders import GONE, expand, is_url
from window_retriever.ingestion._pipeline import IngestProgress, SourceOutcome, ingest_sources
from window_retriever.ingestion._prune import Pruned, origins_of, prune_missing, remove_file
from window_retriever.ingestion._splitter import WindowSplitter
from window_retriever.ingestion._web import EMPTY, LoadOptions
from window_retriever.ingestion._write import OWNER_KEYS, operation
from window_retriever.stores._adapters import store_adapter

RESERVED_METADATA = frozenset(
    {
        "source",
        "file_id",
        "chunk_id",
        "chunk_index",
        "start_index",
        "file_version",
        "file_chunks",
        "ingest_origin",
        "original_id",
    }
)
"""Metadata that ingestion stamps itself: ``metadata`` may not set it."""


@dataclass(frozen=True, slots=True)
class Listed:
    """The sources are listed (directories expanded): how many will be loaded."""

    sources: int


@dataclass(frozen=True, slots=True)
class Unlistable:
    """A folder below a directory that could not be listed: what is stored below it is kept."""

    folder: str


@dataclass(frozen=True, slots=True)
class Repeated:
    """A folder or file reached a second time through a link (a loop): walked once, as ``first``."""

    path: str
    first: str


IngestEvent = Listed | Unlistable | Repeated | SourceOutcome | Pruned
"""What :func:`ingest` reports as it goes, in order: how many sources it listed, the folders
it cannot list and the links it passes over, each source's outcome as it is written, then
each file pruned."""


@dataclass(slots=True)
class IngestSummary:
    """What one :func:`ingest` did, in counts."""

    sources: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    empty: int = 0
    """Sources with no text (an empty file): skipped, not failures."""
    failed: int = 0
    """Sources that failed, and folders that could not be listed."""
    gone: int = 0
    """Files pruned: gone from (or emptied in) a directory given again."""
    written: int = 0
    """Chunks embedded and written."""
    removed: int = 0
    """Chunks deleted: old versions' tails and pruned files."""
    events: list[IngestEvent] = field(default_factory=list)


def ingest(
    vectorstore: Any,
    sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    splitter: TextSplitter | None = None,
    headers: bool = DEFAULT_HEADERS,
    metadata: Mapping[str, Any] | None = None,
    options: LoadOptions | None = None,
    keep_missing: bool = False,
    origin: str | None = None,
    progress: IngestProgress | None = None,
    on_event: Callable[[IngestEvent], None] | None = None,
) -> IngestSummary:
    """Load, split and store web pages (URLs), files and directories; prune what is gone.

    Re-running is idempotent: unchanged sources cost no embedding, changed ones replace their
    chunks (see :func:`window_retriever.sync_file`). ``metadata`` is stamped on every chunk;
    its owner keys (``tenant``, ``user``, ...: ``OWNER_KEYS``) also take part in the file id,
    so one source ingested for two owners is two files.

    What a directory run owns, and so may prune when it is gone: the files that an ingest of
    that directory on this machine read (``ingest_origin``, see :func:`directory_origin`;
    ``origin`` names it instead). Chunks written through the API and another machine's files
    are never removed. ``keep_missing`` prunes nothing.

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` (``open_store(...)``), or any
            ``WindowStore`` (``MemoryWindowStore`` in tests).
        sources: URLs, files and directories (``str`` or ``pathlib.Path``); one of them
            alone is one source.
        splitter: The text splitter (default: 400 characters with 40 of overlap).
        headers: Embed each chunk with its context header: the page's title and the path
            of section headings above it (see ``WindowSplitter``). Turning it on or off
            embeds the files that have a title or headings again on their next ingest.
        metadata: Stamped on every chunk, e.g. ``{"tenant": "acme"}``.
        options: How sources are fetched and parsed.
        keep_missing: Keep the stored files that are gone from a directory given again.
        origin: Names this machine's copy of the directories (default: derived from the
            machine and the directory).
        progress: Told of chunks planned and written (from the ingest threads).
        on_event: Told of each event as it happens (also kept in the summary).

    Returns:
        The counts, and the events in order.

    Raises:
        ConfigurationError: An empty source, an empty ``origin``, or a reserved metadata key.
    """
    store = store_adapter(vectorstore)
    names = _source_list(sources)
    if origin is not None and not origin.strip():
        msg = "origin must be a name, e.g. origin='build-server-docs', or None"
        raise ConfigurationError(msg)
    metadata = dict(metadata or {})
    reserved = sorted(RESERVED_METADATA & set(metadata))
    if reserved:
        msg = f"metadata cannot set {', '.join(reserved)}: ingestion stamps it"
        raise ConfigurationError(msg)
    owners = sorted(key for key in metadata if key in OWNER_KEYS)
    window_splitter = WindowSplitter(splitter, file_id_keys=("source", *owners), headers=headers)
    unreadable: list[str] = []
    repeated: list[tuple[str, str]] = []
    try:
        specs = expand(names, unreadable, repeated)
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    files = [spec for spec in specs if not is_url(spec)]
    directories = [spec for spec in names if not is_url(spec) and _is_directory(spec)]
    summary = IngestSummary(sources=len(specs))

    def report(event: IngestEvent) -> None:
        summary.events.append(event)
        if on_event is not None:
            on_event(event)

    report(Listed(len(specs)))
    for folder in unreadable:
        summary.failed += 1
        report(Unlistable(folder))
    for path, first in repeated:
        report(Repeated(path, first))
    present: set[str] = set()
    outcomes = ingest_sources(
        store,
        specs,
        splitter=window_splitter,
        options=options or LoadOptions(),
        metadata=metadata,
        origins=origins_of(files, directories, origin),
        progress=progress,
    )
    # The store is told once, at the end, also of a failed run: after the pipeline is closed
    # (its writer thread finished), so no write comes after the telling.
    with operation(store), contextlib.closing(outcomes):
        named = {spec for spec in files if not any(_below(spec, d) for d in directories)}
        emptied: list[Pruned] = []
        for result in outcomes:
            if result.outcome is None:
                if result.error not in (GONE, EMPTY):
                    present.add(result.source)  # failed now, kept as it was
                if result.error == EMPTY:  # an empty file; "no text" after a selector fails
                    summary.empty += 1
                    if result.name in named:  # emptied since: its old text must not answer
                        source = result.source
                        file_id = make_file_id({**metadata, "source": source}, ("source", *owners))
                        chunks = remove_file(store, file_id)
                        if chunks:
                            emptied.append(Pruned(source, chunks))
                else:
                    summary.failed += 1
            else:
                present.add(result.source)
                status = result.outcome.status
                setattr(summary, status, getattr(summary, status) + 1)
                summary.written += result.outcome.written
                summary.removed += result.outcome.removed
            report(result)
        for gone in emptied:  # a file named on its own, emptied: as a folder's file, it goes
            summary.gone += 1
            summary.removed += gone.chunks
            report(gone)
        if not keep_missing:
            owner = {key: metadata[key] for key in owners}
            for directory in directories:
                pruned = prune_missing(
                    store,
                    directory,
                    present,
                    origin=origin,
                    owner=owner,
                    skip=unreadable,
                    listed=files,
                )
                for gone in pruned:
                    summary.gone += 1
                    summary.removed += gone.chunks
                    report(gone)
    return summary


def _below(path: str, directory: str) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(directory).rstrip(os.sep) + os.sep)


def _is_directory(spec: str) -> bool:
    try:
        return os.path.isdir(spec)
    except (OSError, ValueError):
        return False


def _source_list(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The sources as strings: a ``str`` or a path alone is one source, not its characters."""
    if isinstance(sources, str | os.PathLike):
        sources = [sources]
    names: list[str] = []
    for source in sources:
        if not isinstance(source, str | os.PathLike):
            msg = f"a source is a URL, a file or a directory (str or path), got {source!r}"
            raise ConfigurationError(msg)
        names.append(os.fspath(source))
    return names
