"""Ingesting URLs, files and directories into a store: what the ``ingest`` command does.

The command line is a thin shell over :func:`ingest`; a program gets the same behaviour, and
the same events to report::

    from window_retriever import ingest, open_store

    summary = ingest(open_store("chroma-db", create=True), ["docs/"], metadata={"tenant": "a"})
    print(summary.added, summary.updated, summary.gone)

The public names are below, each imported on first use. The modules are private:
``_ingest`` (:func:`ingest`: expand directories, namespace each owner's files, ingest, prune),
``_pipeline`` (load, split, embed and write many sources at once), ``_loaders`` and ``_web``
(files and web pages to text), ``_splitter`` (``WindowSplitter``), ``_headers`` (contextual
chunk headers), ``_write`` (writing and re-ingesting one file's chunks: ``add_chunks``,
``sync_file``), ``_prune`` (origins, ``remove_file``, ``prune_missing``) and ``_stamp``
(:func:`stamp_collection`: window metadata for a collection split without ``WindowSplitter``).
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
    from window_retriever.ingestion._prune import Pruned, directory_origin
    from window_retriever.ingestion._stamp import Stamped, stamp_collection
    from window_retriever.ingestion._write import OWNER_KEYS, FileOutcome


_WHERE = {
    **dict.fromkeys(
        (
            "IngestEvent",
            "IngestSummary",
            "Listed",
            "RESERVED_METADATA",
            "Repeated",
            "Unlistable",
            "ingest",
        ),
        "window_retriever.ingestion._ingest",
    ),
    **dict.fromkeys(("IngestProgress", "SourceOutcome"), "window_retriever.ingestion._pipeline"),
    **dict.fromkeys(("Pruned", "directory_origin"), "window_retriever.ingestion._prune"),
    **dict.fromkeys(("Stamped", "stamp_collection"), "window_retriever.ingestion._stamp"),
    **dict.fromkeys(("FileOutcome", "OWNER_KEYS"), "window_retriever.ingestion._write"),
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'window_retriever.ingestion' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


__all__ = [  # noqa: RUF022 - sorted as Python sorts, as in the package's own __init__
    "FileOutcome",
    "IngestEvent",
    "IngestProgress",
    "IngestSummary",
    "Listed",
    "OWNER_KEYS",
    "Pruned",
    "RESERVED_METADATA",
    "Repeated",
    "SourceOutcome",
    "Stamped",
    "Unlistable",
    "directory_origin",
    "ingest",
    "stamp_collection",
]
