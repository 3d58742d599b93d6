"""The splitter hook: wrap any LangChain text splitter and stamp the metadata windows need."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_text_splitters import RecursiveCharacterTextSplitter, TextSplitter

from window_retriever._errors import ConfigurationError
from window_retriever.core._ids import (
    CHUNK_ID,
    CHUNK_INDEX,
    FILE_ID,
    FILE_VERSION,
    START_INDEX,
    content_version,
    make_chunk_id,
    make_file_id,
)
from window_retriever.ingestion._headers import (
    CONTEXT_HEADER,
    DEFAULT_HEADERS,
    HEADER_SCHEME,
    SECTION_HEADINGS,
    heading_paths,
    headings_of,
    make_header,
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
    how it was split and headed). With ``headers=True``, a chunk also gets
    ``context_header``: its document's ``title`` and the path of section headings above it
    (``"Errors and Exceptions > Handling Exceptions"``), which is embedded before its text
    while the text stored and returned stays the chunk's own. Metadata values that Chroma
    cannot store are made storable: ``None`` is dropped, dicts and mixed or nested lists
    become JSON strings, other objects become strings.

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
        headers: Embed each chunk with its context header (default ``False``): its
            document's ``metadata["title"]``, then the headings of
            ``metadata["section_headings"]`` above it, which the loaders record for HTML
            ``h1``-``h3`` and Markdown ``#``-``###``. Part of each file's version: turning it
            on or off embeds the files that have a title or headings again.
    """

    def __init__(
        self,
        splitter: TextSplitter | None = None,
        *,
        file_id_keys: Sequence[str] = ("source",),
        headers: bool = DEFAULT_HEADERS,
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
        if not isinstance(headers, bool):
            msg = f"headers must be True or False, got {headers!r}"
            raise ConfigurationError(msg)
        self.splitter = splitter
        self.file_id_keys = tuple(file_id_keys)
        self.headers = headers

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
        headings = headings_of(document.metadata, len(text))
        pieces = self.splitter.split_text(text)
        overlap = getattr(self.splitter, "_chunk_overlap", 0)
        starts = _start_indexes(text, pieces, overlap if isinstance(overlap, int) else 0)
        source = {k: v for k, v in document.metadata.items() if k != SECTION_HEADINGS}
        stamped = (FILE_ID, CHUNK_INDEX, CHUNK_ID, START_INDEX, FILE_VERSION, CONTEXT_HEADER)
        own = {k: v for k, v in sanitize_metadata(source).items() if k not in stamped}
        # The version covers how the text was cut too: the same text split another way puts
        # other text at every position, so no stored chunk of the old split may be kept.
        layout = [[start, len(piece)] for piece, start in zip(pieces, starts, strict=True)]
        extra: dict[str, Any] = {"metadata": own, "layout": layout}
        headers = [""] * len(pieces)
        if self.headers:
            paths = heading_paths(headings, [max(start, 0) for start in starts])
            headers = [make_header(own.get("title"), path) for path in paths]
        if any(headers):
            # And what is embedded: turning headers on or off, or changing how they are made,
            # re-embeds a file that has any (a file without a title or headings keeps its).
            extra["headers"] = [HEADER_SCHEME, headers]
        version = content_version(text, extra)
        chunks = []
        for index, (piece, start) in enumerate(zip(pieces, starts, strict=True)):
            chunk_id = make_chunk_id(file_id, index)
            metadata = {k: v for k, v in sanitize_metadata(source).items() if k != CONTEXT_HEADER}
            metadata.update(
                {
                    FILE_ID: file_id,
                    CHUNK_INDEX: index,
                    CHUNK_ID: chunk_id,
                    START_INDEX: start,
                    FILE_VERSION: version,
                }
            )
            if headers[index]:
                metadata[CONTEXT_HEADER] = headers[index]
            chunks.append(Document(page_content=piece, metadata=metadata, id=chunk_id))
        return chunks


class _Placement(NamedTuple):
    """One way of placing the pieces so far: its cost and where the last one went."""

    cost: int
    start: int  # where this piece starts, -1 if it is not in the text verbatim
    low: int  # the start of the last piece placed: no later piece starts before it
    end: int  # the end of the last piece placed
    covered: int  # the end of the text covered so far
    parent: _Placement | None


# A piece normally starts within this many characters (after blanks) of the text covered so
# far: the splitter drops at most a separator between two pieces.
_SLACK = 32
# The most placements kept per piece: only repetitive text has more than one or two.
_PLACEMENTS = 8
# The costs, in thousandths of a character: text left uncovered (blanks cost almost nothing,
# splitters drop them), and a piece that is not in the text verbatim.
_SKIPPED, _BLANK, _MISSING = 1000, 1, 1000
# A piece that adds nothing to the text covered (a repeated word put back inside the piece
# before) costs a little more than the blank it would otherwise skip: otherwise, counted only
# at the end, its gap lets such placements crowd out the one that keeps up.
_LAG = 2


def _start_indexes(text: str, pieces: Sequence[str], overlap: int) -> list[int]:
    """Locate each piece in ``text``: where the splitter cut it, not merely where it appears.

    A short piece that repeats (``"end"`` twice) appears inside the previous piece and again
    after it; taking the first place found after the previous piece's start, as LangChain's
    ``add_start_index`` does, can put it inside the previous piece and leave the text it
    really came from uncovered, so a window built on those offsets drops that text. Pieces
    are cut in order, and together they cover the text except for what the splitter drops
    between them (blanks, a separator); so every piece starts at or after the previous one,
    and no earlier than the previous piece's end less ``overlap``, and the placement chosen
    is the one that leaves the least text uncovered (blanks counting for almost nothing).
    It is found by a search over the few places each piece may start (a Viterbi pass, with
    back pointers); ties go to the later place. A piece that is not in the text verbatim (a
    splitter that rewrites text) gets ``-1``, and the retriever joins it to its neighbours
    without trimming overlap.

    Splitters do emit the same region twice (a split larger than the chunk, then the chunk
    that starts with it): two equal starts are allowed.
    """
    placements = [_Placement(0, 0, 0, 0, 0, None)]
    for number, piece in enumerate(pieces):
        best: dict[tuple[int, int, int], _Placement] = {}
        for placed in placements:
            for start in _candidates(text, piece, placed, overlap if number else 0):
                if start == -1:
                    cost = placed.cost + _MISSING * max(1, len(piece))
                    # Rewritten, it most likely stands for the text that follows.
                    end = min(len(text), _after_blanks(text, placed.covered) + len(piece))
                    new = _Placement(cost, -1, placed.low, end, max(placed.covered, end), placed)
                else:
                    end = start + len(piece)
                    cost = placed.cost + _uncovered(text, placed.covered, start)
                    if number and start < placed.end - overlap:  # only when nothing else fits
                        cost += _SKIPPED * (placed.end - overlap - start)
                    if number and end <= placed.covered:  # inside text already covered
                        cost += _LAG
                    new = _Placement(cost, start, start, end, max(placed.covered, end), placed)
                key = (new.start, new.low, new.covered)
                old = best.get(key)
                if old is None or (cost, placed.start) < (old.cost, _parent_start(old)):
                    best[key] = new
        ranked = sorted(best.values(), key=lambda p: (p.cost, p.low))[:_PLACEMENTS]
        # A placement far costlier than the best cannot catch up within a piece or two.
        margin = ranked[0].cost + 2 * _SKIPPED * max(len(piece), _SLACK)
        placements = [p for p in ranked if p.cost <= margin]
    final = min(placements, key=lambda p: (p.cost + _uncovered(text, p.covered, len(text)), p.low))
    starts: list[int] = []
    node: _Placement | None = final
    while node is not None and node.parent is not None:
        starts.append(node.start)
        node = node.parent
    return starts[::-1]


def _candidates(text: str, piece: str, placed: _Placement, overlap: int) -> list[int]:
    """Where ``piece`` may start after ``placed``: near the covered text, else farther on."""
    earliest = max(placed.low, placed.end - overlap)
    latest = _after_blanks(text, placed.covered) + _SLACK
    found: list[int] = []
    bound = latest + len(piece)
    at = text.find(piece, earliest, bound)
    while at != -1:
        found.append(at)
        at = text.find(piece, at + 1, bound)
    if any(_uncovered(text, placed.covered, start) < _SKIPPED for start in found):
        return found  # one of them follows on from the text covered so far
    if found:
        return [*found, -1]  # or the piece is rewritten, and only looks like text further on
    # Nothing near: the splitter dropped more than a separator, rewrote the piece, or
    # overlaps by more characters than ``overlap`` says (a splitter counting tokens).
    options = [-1]
    at = text.find(piece, latest + 1)
    if at != -1:
        options.append(at)
    before = text.find(piece, placed.low, earliest + len(piece) - 1)
    if before != -1:
        options.append(before)
    return options


def _after_blanks(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _parent_start(placement: _Placement) -> int:
    return placement.parent.start if placement.parent is not None else 0


def _uncovered(text: str, begin: int, end: int) -> int:
    """The cost of leaving ``text[begin:end]`` uncovered."""
    if end <= begin:
        return 0
    gap = text[begin:end]
    printed = len("".join(gap.split()))
    return printed * _SKIPPED + (len(gap) - printed) * _BLANK


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
