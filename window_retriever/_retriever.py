"""ContextWindowRetriever: a LangChain retriever that returns whole windows, not fragments.

The retriever is a thin I/O shell around the pure algorithm in ``_windows``: one search, one
batched fetch of neighbours by computed id (a second only when unusually short chunks exhaust
the first), and assembly. The flow is written once, as a generator of store requests; the sync
and async paths drive it and differ by one ``await``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from window_retriever._errors import ConfigurationError, MissingWindowMetadataError
from window_retriever._filters import Predicate, compile_where
from window_retriever._ids import (
    CHUNK_ID,
    CHUNK_INDEX,
    FILE_ID,
    FILE_VERSION,
    START_INDEX,
    make_chunk_id,
)
from window_retriever._stores import (
    Fetch,
    Request,
    Search,
    WindowStore,
    aexecute,
    execute,
    store_adapter,
)
from window_retriever._windows import (
    MODES,
    Assembly,
    Chunk,
    Hit,
    Mode,
    Position,
    Window,
    assemble,
    chunk_spans,
    plan_fetch,
    plan_needs,
)

logger = logging.getLogger("window_retriever")

_OVERRIDABLE = ("k", "fetch_k", "window_budget", "mode", "filter", "where_document")
# Fetch rounds per search: the first fetch nearly always suffices; each further round at
# least extends every unfinished window, so this bound is never reached on real data.
_MAX_FETCH_ROUNDS = 8
# Keys of a chunk's own metadata that do not describe a window.
_CHUNK_KEYS = (CHUNK_ID, CHUNK_INDEX, START_INDEX)


@dataclass(frozen=True, slots=True)
class _Params:
    k: int
    fetch_k: int
    window_budget: int
    mode: Mode
    filter: Mapping[str, Any] | None
    where_document: Mapping[str, Any] | None


class ContextWindowRetriever(BaseRetriever):
    """Retrieve chunks by similarity, then grow each into a readable window of its file.

    Each hit grows outward, one neighbouring chunk at a time, while the window stays within
    ``window_budget`` (measured by ``length_function``); windows of the same file that overlap
    or touch merge into one document with the splitter's overlap trimmed. Exactly ``k``
    documents come back (fewer only when the store has fewer), best first.

    Scores are distances, as the store reports them: **lower is better**. A window's
    ``score`` is the minimum distance of the hits inside it.

    Chunks must carry the metadata that ``WindowSplitter`` stamps and be stored under their
    ``chunk_id`` (``window_retriever.add_chunks`` does both right).

    Setup:
        .. code-block:: bash

            pip install window-retriever

    Instantiate:
        .. code-block:: python

            from langchain_chroma import Chroma
            from window_retriever import ContextWindowRetriever, default_embeddings

            store = Chroma("docs", embedding_function=default_embeddings(), persist_directory="db")
            retriever = ContextWindowRetriever(vectorstore=store, k=4, window_budget=1200)

    Invoke:
        .. code-block:: python

            docs = retriever.invoke("How do I close a file?")
            docs = retriever.invoke("How do I close a file?", k=2, filter={"tenant": "a"})

    Async:
        .. code-block:: python

            docs = await retriever.ainvoke("How do I close a file?")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: Any
    """A ``langchain_chroma.Chroma`` holding chunks from ``WindowSplitter``, or any object that
    implements ``window_retriever.WindowStore``."""

    k: int = Field(default=4, strict=True)
    """How many windows to return."""

    window_budget: int = Field(default=1200, strict=True)
    """The largest ``length_function`` of one grown window (characters by default). A hit
    longer than this comes back alone, whole; windows that merge may together exceed it."""

    mode: Mode = "both"
    """Which way windows grow: ``"both"`` (after, before, after, ...), ``"next"`` or ``"prev"``."""

    filter: dict[str, Any] | None = None
    """A Chroma metadata filter applied to the hits *and* to every neighbour: a chunk it
    hides never appears in a window, and no window joins across it."""

    where_document: dict[str, Any] | None = None
    """A Chroma document-content filter, applied like ``filter`` (by the store)."""

    length_function: Callable[[str], int] = Field(default=len)
    """The measure of text that ``window_budget`` limits: ``len`` for characters, or a token
    counter such as ``default_embeddings().count_tokens``."""

    fetch_k: int | None = Field(default=None, strict=True)
    """How many candidates the similarity search returns; default ``4 * k``. More are taken
    automatically when merging leaves fewer than ``k`` windows (each time at the cost of
    another search and fetch: on real pages, nearby chunks often hit together)."""

    strict: bool = False
    """Raise ``MissingWindowMetadataError`` for a hit without window metadata, instead of
    returning it unexpanded with a warning."""

    _store: WindowStore = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        """Validate the arguments; a bad one raises ``ConfigurationError`` (a ValueError)."""
        try:
            super().__init__(**kwargs)
        except ValidationError as error:
            raise ConfigurationError(_describe(error)) from None

    @model_validator(mode="after")
    def _check(self) -> ContextWindowRetriever:
        self._params({})
        self._store = store_adapter(self.vectorstore)
        return self

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        flow = self._flow(query, self._params(kwargs))
        response: Any = None
        while True:
            try:
                request = flow.send(response)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            response = execute(self._store, request)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        flow = self._flow(query, self._params(kwargs))
        response: Any = None
        while True:
            try:
                request = flow.send(response)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            response = await aexecute(self._store, request)

    def _flow(self, query: str, params: _Params) -> Generator[Request, Any, list[Document]]:
        """The whole retrieval, as a generator of store requests (see the module docstring)."""
        predicate = compile_where(params.filter) if params.where_document is None else None
        # A filter the evaluator cannot decide goes to the store with the fetch (slow, exact).
        fetch_where = None if predicate is not None else params.filter
        fetch_k = params.fetch_k
        while True:
            results = yield Search(query, fetch_k, params.filter, params.where_document)
            hits = [self._hit(document, distance) for document, distance in results]
            chunks: dict[Position, Chunk] = {}
            for hit in hits:
                if hit.chunk.position is not None:
                    chunks.setdefault(hit.chunk.position, hit.chunk)
            fetched = set(chunks)
            wanted = plan_fetch(
                hits,
                k=params.k,
                budget=params.window_budget,
                mode=params.mode,
                length_function=self.length_function,
            )
            assembly: Assembly | None = None
            for _ in range(_MAX_FETCH_ROUNDS):
                missing = [position for position in wanted if position not in fetched]
                if missing:
                    ids = {make_chunk_id(*position): position for position in missing}
                    documents = yield Fetch(list(ids), fetch_where, params.where_document)
                    fetched.update(missing)
                    _admit(documents, ids, predicate, chunks)
                assembly = assemble(
                    hits,
                    chunks,
                    fetched,
                    k=params.k,
                    budget=params.window_budget,
                    mode=params.mode,
                    length_function=self.length_function,
                )
                if assembly.complete:
                    break
                wanted = plan_needs(assembly.needs)
            assert assembly is not None  # noqa: S101 - the loop runs at least once
            if len(assembly.windows) >= params.k or len(results) < fetch_k:
                return [_document(window) for window in assembly.windows]
            fetch_k *= 2  # candidates merged into fewer than k windows: search wider

    def _params(self, overrides: Mapping[str, Any]) -> _Params:
        unknown = sorted(set(overrides) - set(_OVERRIDABLE))
        if unknown:
            msg = (
                f"unknown argument(s) {', '.join(map(repr, unknown))} for "
                f"ContextWindowRetriever.invoke; allowed: {', '.join(_OVERRIDABLE)}"
            )
            raise ConfigurationError(msg)
        values = {name: getattr(self, name) for name in _OVERRIDABLE} | dict(overrides)
        k = _positive_int("k", values["k"], "the number of windows to return")
        budget = _positive_int(
            "window_budget", values["window_budget"], "the largest length of one window"
        )
        fetch_k = values["fetch_k"]
        if fetch_k is None:
            fetch_k = 4 * k
        elif _positive_int("fetch_k", fetch_k, "the number of search candidates") < k:
            msg = f"fetch_k must be at least k ({k}), got {fetch_k}; raise fetch_k or omit it"
            raise ConfigurationError(msg)
        mode = values["mode"]
        if mode not in MODES:
            msg = f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}"
            raise ConfigurationError(msg)
        for name in ("filter", "where_document"):
            if values[name] is not None and not isinstance(values[name], Mapping):
                msg = f"{name} must be a dict (a Chroma filter) or None, got {values[name]!r}"
                raise ConfigurationError(msg)
        if not callable(self.length_function):
            msg = "length_function must be callable, e.g. len or a token counter"
            raise ConfigurationError(msg)
        return _Params(
            k=k,
            fetch_k=fetch_k,
            window_budget=budget,
            mode=mode,
            filter=values["filter"],
            where_document=values["where_document"],
        )

    def _hit(self, document: Document, distance: float) -> Hit:
        chunk, problem = _chunk(document)
        if problem is not None:
            if self.strict:
                raise MissingWindowMetadataError(problem)
            logger.warning("%s; returning it unexpanded", problem)
        return Hit(chunk=chunk, distance=float(distance))


def _chunk(document: Document) -> tuple[Chunk, str | None]:
    """Read a stored document as a chunk; say what is wrong if it cannot grow into a window."""
    metadata = document.metadata
    store_id = document.id or metadata.get(CHUNK_ID) or ""
    file_id, index = metadata.get(FILE_ID), metadata.get(CHUNK_INDEX)
    start = metadata.get(START_INDEX)
    version = metadata.get(FILE_VERSION)
    problem = None
    if not isinstance(file_id, str) or isinstance(index, bool) or not isinstance(index, int):
        problem = (
            f"chunk {store_id!r} has no integer 'chunk_index' and string 'file_id' metadata "
            "(was it split by WindowSplitter?)"
        )
    elif document.id is not None and document.id != make_chunk_id(file_id, index):
        problem = (
            f"chunk {document.id!r} is not stored under its chunk_id "
            f"{make_chunk_id(file_id, index)!r}, so its neighbours cannot be found; add chunks "
            "with ids=[c.metadata['chunk_id'] for c in chunks] or window_retriever.add_chunks"
        )
    if problem is not None or not isinstance(file_id, str) or not isinstance(index, int):
        return Chunk(id=store_id, text=document.page_content, metadata=metadata), problem
    return (
        Chunk(
            id=make_chunk_id(file_id, index),
            text=document.page_content,
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


def _admit(
    documents: list[Document],
    ids: Mapping[str, Position],
    predicate: Predicate | None,
    chunks: dict[Position, Chunk],
) -> None:
    """Add fetched neighbours that pass the caller's filter and are what their id promises."""
    for document in documents:
        position = ids.get(document.id or "")
        if position is None:
            continue
        if predicate is not None and not predicate(document.metadata):
            continue  # hidden by the caller's filter: a gap, never part of a window
        chunk, problem = _chunk(document)
        if problem is not None or chunk.position != position:
            logger.warning("stored chunk %r does not match its id; treated as a gap", document.id)
            continue
        chunks[position] = chunk


def _document(window: Window) -> Document:
    """Turn a window into a Document with full provenance."""
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
        }
    )
    if first.file_id is not None:
        metadata[FILE_ID] = first.file_id
        metadata["first_chunk_index"] = first.index
        metadata["last_chunk_index"] = last.index
    if window.start_index is not None:
        metadata[START_INDEX] = window.start_index
        metadata["end_index"] = window.end_index
    document_id = (
        f"{first.file_id}:{first.index}-{last.index}" if first.file_id is not None else first.id
    )
    return Document(page_content=window.text, metadata=metadata, id=document_id)


def _positive_int(name: str, value: Any, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{name} ({meaning}) must be a positive integer, got {value!r}"
        raise ConfigurationError(msg)
    return value


def _describe(error: ValidationError) -> str:
    parts = []
    for detail in error.errors():
        location = ".".join(str(part) for part in detail["loc"])
        message = str(detail["msg"]).removeprefix("Value error, ")
        parts.append(f"argument {location!r}: {message}" if location else message)
    return "; ".join(parts)
