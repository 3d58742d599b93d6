"""Owners' origins and pruning: which copy of a directory a file was read from, what is gone.

:func:`directory_origin` and :func:`origins_of` name the copy of a directory (this machine's)
that files were read from; :func:`remove_file` and :func:`prune_missing` delete the stored
files that are gone from it, never another owner's or another copy's. Split from ``_write``
(which it imports, never the reverse) to keep each module short.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from window_retriever.core._ids import FILE_ID
from window_retriever.ingestion._write import (
    INGEST_ORIGIN,
    OWNER_KEYS,
    _delete,
    _get_where,
    _id_batch_size,
    operation,
)
from window_retriever.stores._adapters import store_adapter


def directory_origin(directory: str | os.PathLike[str]) -> str:
    """This machine's copy of ``directory``: the ``ingest_origin`` of the files read below it.

    A hash of the machine (``/etc/machine-id`` and the host name) and of the directory itself
    (its device and inode): another machine, or another directory mounted at the same path,
    has another origin, so a run there never prunes what was read here. A directory that is
    re-created, moved to another disk or read on a renamed host gets a new origin: the next
    run stamps the files it finds with it (no embedding), and files deleted before that run
    are no longer pruned by it (they stay until deleted by hand).
    """
    status = os.stat(directory)
    payload = f"{_machine()}\0{status.st_dev}\0{status.st_ino}"
    return hashlib.sha256(payload.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _machine() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            machine = Path(path).read_text(encoding="ascii", errors="replace").strip()
            if machine:
                return f"{machine}@{socket.gethostname()}"
    return socket.gethostname()


def origins_of(
    sources: Sequence[str], directories: Sequence[str], origin: str | None = None
) -> dict[str, str]:
    """The ``ingest_origin`` of each of ``sources`` found below one of ``directories``.

    A source below several (nested) directories belongs to the innermost. ``origin`` names
    every directory's copy explicitly instead of :func:`directory_origin` (for machines that
    are rebuilt, where the directory's identity changes but its files are the same).
    """
    roots = sorted(
        ((os.path.abspath(d).rstrip(os.sep) + os.sep, origin or directory_origin(d)))
        for d in directories
    )
    found: dict[str, str] = {}
    for source in sources:
        path = os.path.abspath(source)
        for prefix, stamp in reversed(roots):  # the innermost directory first
            if path.startswith(prefix):
                found[source] = stamp
                break
    return found


def remove_file(vectorstore: Any, file_id: str) -> int:
    """Delete every stored chunk of ``file_id`` (a file now empty); return how many."""
    store = store_adapter(vectorstore)
    ids = [chunk_id for chunk_id, _ in _get_where(store, {FILE_ID: file_id})]
    if ids:
        with operation(store):
            _delete(store, ids)
    return len(ids)


@dataclass(frozen=True, slots=True)
class Pruned:
    """A file that :func:`prune_missing` removed from the store."""

    source: str
    chunks: int


def prune_missing(
    vectorstore: Any,
    directory: str | os.PathLike[str],
    keep: Iterable[str],
    *,
    origin: str | None = None,
    owner: Mapping[str, Any] | None = None,
    owner_keys: Sequence[str] = OWNER_KEYS,
    skip: Iterable[str] = (),
    listed: Iterable[str] | None = None,
    page_size: int = 5000,
) -> list[Pruned]:
    """Delete the stored files below ``directory`` whose source is not in ``keep``.

    After a directory is ingested again, ``keep`` holds the sources that are still there (and
    not empty): what else the store holds below the directory was deleted or emptied since,
    and would otherwise go on answering queries. Only what a run of this directory wrote is
    pruned: chunks whose ``ingest_origin`` is ``origin`` (default: :func:`directory_origin`
    of ``directory``). Chunks written through the API (no origin), from another machine or
    another directory mounted at the same path are never touched. Only the files of
    ``owner`` are pruned: a stored file whose value of any of ``owner_keys`` differs (a
    missing key is ``None``) is another owner's and never touched. Nothing below a folder in
    ``skip`` (one that could not be listed) is pruned. Metadata is read page by page (no
    embeddings).

    ``listed`` (the sources this run found in the directory) guards against another writer:
    a stored file this run never listed that exists now was added after the listing, and is
    the other writer's to keep.
    """
    prefix = os.path.abspath(directory).rstrip(os.sep) + os.sep
    origin = origin or directory_origin(directory)
    kept = set(keep)
    owner = dict(owner or {})
    unlisted = [os.path.abspath(folder).rstrip(os.sep) + os.sep for folder in skip]
    seen = None if listed is None else {os.path.abspath(source) for source in listed}
    doomed: dict[str, list[str]] = {}
    store = store_adapter(vectorstore)
    page_size = max(1, min(page_size, _id_batch_size(store)))
    offset = 0
    while True:
        page = store.list_metadata(None, limit=page_size, offset=offset)
        for chunk_id, metadata in page:
            source = metadata.get("source")
            if not isinstance(source, str) or not source.startswith(prefix) or source in kept:
                continue
            if metadata.get(INGEST_ORIGIN) != origin:
                continue  # not read from this copy of the directory: not this run's to remove
            if any(metadata.get(key) != owner.get(key) for key in owner_keys):
                continue  # another owner's file
            if any(source.startswith(folder) for folder in unlisted):
                continue  # below a folder that could not be read: not known to be gone
            if seen is not None and source not in seen and os.path.lexists(source):
                continue  # appeared after this run listed the folder: not gone
            doomed.setdefault(source, []).append(chunk_id)
        if len(page) < page_size:
            break
        offset += page_size
    if doomed:
        with operation(store):
            _delete(store, [chunk_id for chunk_ids in doomed.values() for chunk_id in chunk_ids])
    return [Pruned(source, len(chunk_ids)) for source, chunk_ids in sorted(doomed.items())]
