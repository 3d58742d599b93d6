"""Stored documents read as chunks and hits, and windows written back as documents.

The boundary between LangChain's ``Document`` and the pure algorithm's ``Chunk`` / ``Hit`` /
``Window``: what makes a stored document a chunk that can grow (the splitter's metadata and an
id equal to its ``chunk_id``), and the provenance a window carries back for citations.
"""

from __future__ import annotations

import logging
import math
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.documents import Document

from window_retriever._errors import MissingWindowMetadataError
from window_retriever.core._ids import (
    CHUNK_ID,
    CHUNK_INDEX,
    FILE_ID,
    FILE_VERSION,
    START_INDEX,
    make_chunk_id,
)
from window_retriever.core._windows import Chunk, Hit, Position, Window, chunk_spans
from window_retriever.stores._protocol import Space

logger = logging.getLogger("window_retriever")

# Keys of a chunk's own metadata that do not describe a window.
_CHUNK_KEYS = (CHUNK_ID, CHUNK_INDEX, START_INDEX, "file_chunks")


class Unexpandable:
    """What one retriever does with a hit that cannot grow into a window.

    ``strict``: raise ``MissingWindowMetadataError``. Otherwise the hit comes back as it is,
    and the first such hit of the retriever logs one warning that names the fix: a
    collection not made by ``WindowSplitter`` holds nothing but such hits, and a warning per
    hit would say the same thing several times a query.
    """

    __slots__ = ("_lock", "_warned", "strict")

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._warned = False
        self._lock = threading.Lock()  # batch() runs one retriever in several threads

    def found(self, problem: str) -> None:
        """A hit cannot grow, for the reason ``problem`` says: raise, or warn the first time."""
        if self.strict:
            raise MissingWindowMetadataError(problem)
        with self._lock:
            if self._warned:
                return
            self._warned = True
        logger.warning(
            "%s; such chunks are returned unexpanded (this retriever says so once)", problem
        )


def read_hit(document: Document, distance: float, unexpandable: Unexpandable) -> Hit:
    """A search result as a hit; one that cannot grow is kept whole (see :class:`Unexpandable`)."""
    chunk, problem = read_chunk(document)
    if problem is not None:
        unexpandable.found(problem)
    return Hit(chunk=chunk, distance=float(distance))


def read_hits(
    results: Sequence[tuple[Document, float]], unexpandable: Unexpandable
) -> tuple[list[Hit], dict[Position, Chunk]]:
    """Search results as hits (each chunk once), and the chunks they put in place."""
    return by_position(
        unique([read_hit(document, distance, unexpandable) for document, distance in results])
    )


def by_position(hits: list[Hit]) -> tuple[list[Hit], dict[Position, Chunk]]:
    """``hits`` with the chunks they put in place, by position."""
    chunks: dict[Position, Chunk] = {}
    for hit in hits:
        if hit.chunk.position is not None:
            chunks.setdefault(hit.chunk.position, hit.chunk)
    return hits, chunks


def unique(hits: Sequence[Hit]) -> list[Hit]:
    """Each chunk once (a store may return one twice).

    A hit that has neither an id nor window metadata gets a key of its own, so two such hits
    never pass for one chunk.
    """
    seen: set[str] = set()
    kept: list[Hit] = []
    for rank, hit in enumerate(hits):
        if not hit.chunk.id:
            hit = replace(hit, chunk=replace(hit.chunk, id=f"#hit-{rank}"))
        if hit.chunk.id not in seen:
            seen.add(hit.chunk.id)
            kept.append(hit)
    return kept


def read_chunk(document: Document) -> tuple[Chunk, str | None]:
    """Read a stored document as a chunk; say what is wrong if it cannot grow into a window."""
    return read_record(document.id, document.page_content, document.metadata)


def read_record(
    document_id: str | None, text: str, metadata: Mapping[str, Any]
) -> tuple[Chunk, str | None]:
    """:func:`read_chunk` of a document's three parts: its id, its text and its metadata."""
    store_id = document_id or metadata.get(CHUNK_ID) or ""
    file_id, index = metadata.get(FILE_ID), metadata.get(CHUNK_INDEX)
    if not isinstance(file_id, str) or isinstance(index, bool) or not isinstance(index, int):
        problem = (
            f"chunk {store_id!r} has no integer 'chunk_index' and string 'file_id' metadata: "
            "it was not split by WindowSplitter; re-ingest the collection through WindowSplitter "
            "(window_retriever.ingest, or WindowSplitter(...).split_documents then add_chunks), "
            "or, if its chunks carry start_index, stamp it in place with "
            "window_retriever.stamp_collection(vectorstore)"
        )
        return Chunk(id=store_id, text=text, metadata=metadata), problem
    chunk_id = make_chunk_id(file_id, index)
    if document_id is not None and document_id != chunk_id:
        problem = (
            f"chunk {document_id!r} is not stored under its chunk_id {chunk_id!r}, so its "
            "neighbours cannot be found; add chunks with "
            "ids=[c.metadata['chunk_id'] for c in chunks] or window_retriever.add_chunks"
        )
        return Chunk(id=store_id, text=text, metadata=metadata), problem
    start = metadata.get(START_INDEX)
    version = metadata.get(FILE_VERSION)
    return (
        Chunk(
            id=chunk_id,
            text=text,
            file_id=file_id,
            index=index,
            start=start if _is_offset(start) else None,
            version=version if isinstance(version, str) else None,
            metadata=metadata,
        ),
        None,
    )


def _is_offset(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def add_neighbours(
    documents: Sequence[Document], ids: Mapping[str, Position], chunks: dict[Position, Chunk]
) -> None:
    """Add fetched neighbours (the caller's filter passed them) that are what their id promises."""
    for document in documents:
        position = ids.get(document.id or "")
        if position is None or position in chunks:  # not asked, or read already (a hit)
            continue
        chunk, problem = read_chunk(document)
        if problem is not None or chunk.position != position:
            logger.warning("stored chunk %r does not match its id; treated as a gap", document.id)
            continue
        chunks[position] = chunk


def relevance_score(distance: float, space: Space) -> float:
    """A distance as a relevance score: higher is better, from 0 to 1 (LangChain's convention).

    The cosine similarity, clipped at 0, for unit vectors (the packaged model's, and most
    others') whatever the space: ``1 - d`` for ``"cosine"`` and ``"ip"`` (LangChain's Chroma
    does the same), ``1 - d / 2`` for ``"l2"``, which Chroma reports *squared* (LangChain's
    ``1 - d / sqrt(2)`` takes it for a plain distance and goes below 0 for a distant chunk).
    """
    similarity = 1.0 - distance / 2.0 if space == "l2" else 1.0 - distance
    return 0.0 if math.isnan(similarity) else min(1.0, max(0.0, similarity))


def to_document(window: Window, space: Space, *, over_budget: bool = False) -> Document:
    """Turn a window into a Document with full provenance; ``space``: the distances' space."""
    best = min(window.hits, key=lambda hit: hit.distance)
    metadata = {key: value for key, value in best.chunk.metadata.items() if key not in _CHUNK_KEYS}
    first, last = window.chunks[0], window.chunks[-1]
    spans = dict(
        zip((chunk.id for chunk in window.chunks), chunk_spans(window.chunks), strict=True)
    )
    metadata.update(
        {
            "chunk_ids": [chunk.id for chunk in window.chunks],
            "hit_chunk_ids": [hit.chunk.id for hit in window.hits],
            "hit_scores": [hit.distance for hit in window.hits],
            "hit_spans": [list(spans[hit.chunk.id]) for hit in window.hits],
            "score": window.score,
            "relevance_score": relevance_score(window.score, space),
        }
    )
    if first.file_id is not None:
        metadata[FILE_ID] = first.file_id
        metadata["first_chunk_index"] = first.index
        metadata["last_chunk_index"] = last.index
    if window.start_index is not None:
        metadata[START_INDEX] = window.start_index
        metadata["end_index"] = window.end_index
    if any(hit.ranks for hit in window.hits):
        metadata["hit_ranks"] = [dict(hit.ranks) for hit in window.hits]
    if window.cut is not None:  # its end chunk is in it in part; end_index says how far
        metadata["cut"] = "end" if window.cut.side == "next" else "start"
    if over_budget:
        metadata["over_budget"] = True
    document_id = (
        f"{first.file_id}:{first.index}-{last.index}" if first.file_id is not None else first.id
    )
    return Document(page_content=window.text, metadata=metadata, id=document_id)


def to_plain_document(hit: Hit, space: Space) -> Document:
    """A hit as the plain chunk it is, with its scores and, fused, its ``hit_ranks``."""
    metadata = {
        **hit.chunk.metadata,
        "score": hit.distance,
        "relevance_score": relevance_score(hit.distance, space),
    }
    if hit.ranks:
        metadata["hit_ranks"] = dict(hit.ranks)
    return Document(page_content=hit.chunk.text, metadata=metadata, id=hit.chunk.id)


_PLACE_KEYS = ("source", FILE_ID, "first_chunk_index", "last_chunk_index", START_INDEX, "end_index")


def without_repeated_texts(documents: list[Document]) -> list[Document]:
    """Each text once: a window whose text equals a better window's is left out.

    Texts are compared after Unicode (NFKC) and whitespace normalisation only, so windows that
    differ in a number, a date, a name or a "not" are different texts and both stay: such
    near-duplicates are often the answer (this year's limit against last year's). The window
    kept lists where else its text is stored under ``also_in`` (source, file, chunks, span), so
    a citation can name every copy.
    """
    kept: dict[str, Document] = {}
    result: list[Document] = []
    for document in documents:
        key = " ".join(unicodedata.normalize("NFKC", document.page_content).split())
        first = kept.get(key)
        if first is None:
            kept[key] = document
            result.append(document)
            continue
        place = {k: document.metadata[k] for k in _PLACE_KEYS if k in document.metadata}
        first.metadata.setdefault("also_in", []).append(place)
    return result
