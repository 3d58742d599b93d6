"""The splitter hook: wrap any LangChain text splitter and stamp the metadata windows need."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_text_splitters import RecursiveCharacterTextSplitter, TextSplitter

from window_retriever._errors import ConfigurationError
from window_retriever._ids import (
    CHUNK_ID,
    CHUNK_INDEX,
    FILE_ID,
    FILE_VERSION,
    START_INDEX,
    content_version,
    make_chunk_id,
    make_file_id,
)

#: The default splitter's chunk size and overlap, in characters.
DEFAULT_CHUNK_SIZE = 400
DEFAULT_CHUNK_OVERLAP = 40


class WindowSplitter(BaseDocumentTransformer):
    """Split documents into chunks that carry their position, for windowed retrieval.

    Every chunk gets ``file_id`` (stable for the same source), ``chunk_index`` (0-based
    position in its file), ``chunk_id`` (deterministic, unique: use it as the store id, so
    re-ingesting a source upserts instead of duplicating), ``start_index`` (character offset
    in the source text) and ``file_version`` (a hash of the source text, its metadata and
    how it was split). Metadata values that Chroma cannot store are made storable: ``None``
    is dropped, dicts and mixed or nested lists become JSON strings, other objects become
    strings.

    Setup:
        .. code-block:: python

            from langchain_text_splitters import RecursiveCharacterTextSplitter
            from window_retriever import WindowSplitter

    Instantiate:
        .. code-block:: python

            splitter = WindowSplitter(
                RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=40),
                file_id_keys=("tenant", "source"),
            )

    Split:
        .. code-block:: python

            chunks = splitter.split_documents(docs)
            ids = [chunk.metadata["chunk_id"] for chunk in chunks]

    Args:
        splitter: Any LangChain ``TextSplitter``. Default: a ``RecursiveCharacterTextSplitter``
            of 400 characters with 40 characters of overlap.
        file_id_keys: The metadata keys whose values make the file id of a document that does
            not carry an explicit ``file_id``. Add a tenant or access key here to keep the same
            source ingested for two tenants apart; add ``"page"`` when a loader yields one
            document per page of the same source.
    """

    def __init__(
        self,
        splitter: TextSplitter | None = None,
        *,
        file_id_keys: Sequence[str] = ("source",),
    ) -> None:
        if splitter is None:
            splitter = RecursiveCharacterTextSplitter(
                chunk_size=DEFAULT_CHUNK_SIZE,
                chunk_overlap=DEFAULT_CHUNK_OVERLAP,
                add_start_index=True,
            )
        if not isinstance(splitter, TextSplitter):
            msg = (
                f"splitter must be a langchain_text_splitters.TextSplitter, got "
                f"{type(splitter).__name__}; pass e.g. RecursiveCharacterTextSplitter(...)"
            )
            raise ConfigurationError(msg)
        if isinstance(file_id_keys, str) or not file_id_keys:
            msg = (
                f"file_id_keys must be a non-empty sequence of metadata keys, got "
                f"{file_id_keys!r}; pass e.g. ('source',) or ('tenant', 'source')"
            )
            raise ConfigurationError(msg)
        self.splitter = splitter
        self.file_id_keys = tuple(file_id_keys)

    def split_documents(self, documents: Iterable[Document]) -> list[Document]:
        """Split each document and stamp every chunk with its window metadata.

        Raises:
            ConfigurationError: A document has neither ``file_id`` nor any of
                ``file_id_keys`` in its metadata, or two documents map to the same file id.
        """
        chunks: list[Document] = []
        owners: dict[str, int] = {}
        for number, document in enumerate(documents):
            file_id = self._file_id(number, document)
            if file_id in owners:
                msg = (
                    f"documents {owners[file_id]} and {number} have the same file_id "
                    f"{file_id!r} (same {', '.join(self.file_id_keys)}), so their chunks "
                    "would overwrite each other; give each an explicit metadata['file_id'] "
                    "or add a distinguishing key, e.g. file_id_keys=('source', 'page')"
                )
                raise ConfigurationError(msg)
            owners[file_id] = number
            chunks.extend(self._split_one(document, file_id))
        return chunks

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> list[Document]:
        """Split documents (the ``BaseDocumentTransformer`` interface)."""
        return self.split_documents(documents)

    def _file_id(self, number: int, document: Document) -> str:
        explicit = document.metadata.get(FILE_ID)
        if explicit is not None and explicit != "":
            return str(explicit)
        if not any(document.metadata.get(key) is not None for key in self.file_id_keys):
            msg = (
                f"document {number} has no metadata['file_id'] and none of "
                f"{list(self.file_id_keys)} to derive one from; set metadata['source'] "
                "(or an explicit metadata['file_id']) so that re-ingesting it replaces its "
                "chunks instead of duplicating them"
            )
            raise ConfigurationError(msg)
        return make_file_id(document.metadata, self.file_id_keys)

    def _split_one(self, document: Document, file_id: str) -> list[Document]:
        text = document.page_content
        pieces = self.splitter.split_text(text)
        overlap = getattr(self.splitter, "_chunk_overlap", 0)
        starts = _start_indexes(text, pieces, overlap if isinstance(overlap, int) else 0)
        stamped = (FILE_ID, CHUNK_INDEX, CHUNK_ID, START_INDEX, FILE_VERSION)
        own = {k: v for k, v in sanitize_metadata(document.metadata).items() if k not in stamped}
        # The version covers how the text was cut too: the same text split another way puts
        # other text at every position, so no stored chunk of the old split may be kept.
        layout = [[start, len(piece)] for piece, start in zip(pieces, starts, strict=True)]
        version = content_version(text, {"metadata": own, "layout": layout})
        chunks = []
        for index, (piece, start) in enumerate(zip(pieces, starts, strict=True)):
            chunk_id = make_chunk_id(file_id, index)
            metadata = sanitize_metadata(document.metadata)
            metadata.update(
                {
                    FILE_ID: file_id,
                    CHUNK_INDEX: index,
                    CHUNK_ID: chunk_id,
                    START_INDEX: start,
                    FILE_VERSION: version,
                }
            )
            chunks.append(Document(page_content=piece, metadata=metadata, id=chunk_id))
        return chunks


def _start_indexes(text: str, pieces: Sequence[str], overlap: int) -> list[int]:
    """Locate each piece in ``text``, searching forward from where the previous one ended.

    The same rule as LangChain's ``add_start_index``: the next piece cannot start before the
    previous piece's end less the splitter's overlap. A piece that cannot be found verbatim
    (a splitter that rewrites text) gets ``-1``, and the retriever joins it to its neighbours
    without trimming overlap.
    """
    starts = []
    cursor = 0
    for piece in pieces:
        found = text.find(piece, cursor)
        starts.append(found)
        if found != -1:
            cursor = max(found, found + len(piece) - overlap)
    return starts


def sanitize_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``metadata`` that Chroma can store.

    Chroma accepts str, int, float and bool values, and non-empty lists of one of those
    types. ``None`` values are dropped; dicts, empty, mixed or nested lists become JSON
    strings; any other object becomes its ``str``.
    """
    clean: dict[str, Any] = {}
    for key, value in metadata.items():
        if value is None:
            continue
        if isinstance(value, str | int | float | bool):
            clean[str(key)] = value
        elif isinstance(value, list | tuple) and _is_uniform_scalar_list(value):
            clean[str(key)] = list(value)
        elif isinstance(value, Mapping | list | tuple):
            clean[str(key)] = json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
        else:
            clean[str(key)] = str(value)
    return clean


def _is_uniform_scalar_list(values: Sequence[Any]) -> bool:
    if not values:
        return False
    kinds = {bool if isinstance(v, bool) else type(v) for v in values}
    return len(kinds) == 1 and kinds <= {str, int, float, bool}
