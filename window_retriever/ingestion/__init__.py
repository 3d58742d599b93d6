"""Ingesting URLs, files and directories into a store: what the ``ingest`` command does.

The command line is a thin shell over :func:`ingest`; a program gets the same behaviour, and
the same events to report::

    from window_retriever import ingest, open_store

    summary = ingest(open_store("chroma-db", create=True), ["docs/"], metadata={"tenant": "a"})
    print(summary.added, summary.updated, summary.gone)

The public names are below, each imported on first use. The modules are private:
``_ingest`` (:func:`ingest`: expand directories, namespace each owner's files, ingest, prune),
``_pipeline`` (load, split, embed and write many sources at once), ``_loaders`` (files and web
pages to text), ``_splitter`` (``WindowSplitter``), ``_headers`` (contextual chunk headers)
and ``_write`` (writing, re-ingesting and removing one file's chunks: ``add_chunks``,
``sync_file``).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from window_retriever.ingestion._ingest import (
        RESERVED_METADATA,
        IngestEvent,
        IngestSummary,
        Listed,
        Repeated,
        Unlistable,
        ingest,
    )
    from window_retriever.ingestion._pipeline import IngestProgress, SourceOutcome
    from window_retriever.ingestion._write import (
        OWNER_KEYS,
        FileOutcome,
        Pruned,
        directory_origin,
    )


def __getattr__(name: str) -> object:
    if name not in __all__:
        msg = f"module 'window_retriever.ingestion' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module("window_retriever.ingestion._ingest"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


__all__ = [
    "OWNER_KEYS",
    "RESERVED_METADATA",
    "FileOutcome",
    "IngestEvent",
    "IngestProgress",
    "IngestSummary",
    "Listed",
    "Pruned",
    "Repeated",
    "SourceOutcome",
    "Unlistable",
    "directory_origin",
    "ingest",
]
