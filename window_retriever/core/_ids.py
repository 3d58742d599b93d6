"""Stable identifiers: the file id of a source and the chunk id of a position in it.

The chunk id is a pure function of ``(file_id, chunk_index)``, so the retriever can compute
the store ids of a hit's neighbours without asking the store where they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

#: Metadata keys that the splitter stamps and the retriever reads.
FILE_ID = "file_id"
CHUNK_INDEX = "chunk_index"
CHUNK_ID = "chunk_id"
START_INDEX = "start_index"
FILE_VERSION = "file_version"

_FILE_ID_LENGTH = 20  # hex characters of sha256: 80 bits, no collision in practice


def make_file_id(metadata: Mapping[str, Any], keys: Sequence[str]) -> str:
    """Derive a stable file id from the values of ``keys`` in ``metadata``.

    The same values always give the same id; any other value of any key gives another id,
    which is how one source ingested for two tenants stays two files.
    """
    values = [[key, metadata.get(key)] for key in keys]
    payload = json.dumps(values, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:_FILE_ID_LENGTH]


def make_chunk_id(file_id: str, chunk_index: int) -> str:
    """Return the store id of chunk ``chunk_index`` of file ``file_id``."""
    return f"{file_id}:{chunk_index}"


def content_version(text: str, metadata: Mapping[str, Any] | None = None) -> str:
    """Return a short hash of a source's text and metadata, stamped as ``file_version``.

    The metadata is part of the version so that a change of it alone (an ``access`` level
    going from public to secret) is a new version: re-ingesting replaces the stored chunks
    instead of reporting the file unchanged and leaving the old metadata in force.
    """
    digest = hashlib.sha256(text.encode("utf-8"))
    if metadata:
        payload = json.dumps(dict(metadata), sort_keys=True, default=str, ensure_ascii=False)
        digest.update(b"\0" + payload.encode("utf-8"))
    return digest.hexdigest()[:16]
