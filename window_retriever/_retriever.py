"""ContextWindowRetriever: a LangChain retriever that returns whole windows, not fragments.

The retriever is a thin I/O shell around the pure algorithm in ``_windows``: one search, one
batched fetch of neighbours by computed id (a second only when unusually short chunks exhaust
the first), and assembly. The flow is written once, as a generator of store requests; the sync
and async paths drive it and differ by one ``await``.
"""

from __future__ import annotations

import itertools
import logging
import statistics
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from window_retriever._adaptive import DEFAULT_COHERENCE, plan_adaptive_fetch, select_adaptive
from window_retriever._errors import ConfigurationError, MissingWindowMetadataError
from window_retriever._filters import Predicate, check_where, compile_where
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
    SearchIds,
    WindowStore,
    aexecute,
    execute,
    store_adapter,
)
from window_retriever._windows import (
    DEFAULT_WINDOW_BUDGET,
    MODES,
    Assembly,
    Chunk,
    Hit,
    Measure,
    Mode,
    Position,
    Window,
    assemble,
    chunk_spans,
    fit_total,
    plan_fetch,
    plan_needs,
    plan_positions,
)

logger = logging.getLogger("window_retriever")

Expansion = Literal["static", "adaptive"]
EXPANSIONS: tuple[Expansion, ...] = ("static", "adaptive")

OVERRIDABLE = (
    "k",
    "fetch_k",
    "window_budget",
    "total_budget",
    "expansion",
    "coherence",
    "mode",
    "filter",
    "where_document",
)
# Fetch rounds per search: the first fetch nearly always suffices; each further round at
# least extends every unfinished window, so this bound is never reached on real data.
_MAX_FETCH_ROUNDS = 8
# Keys of a chunk's own metadata that do not describe a window.
_CHUNK_KEYS = (CHUNK_ID, CHUNK_INDEX, START_INDEX, "file_chunks")  # per chunk, not per window


@dataclass(frozen=True, slots=True)
class _Params:
    k: int
    fetch_k: int
    window_budget: int
    total_budget: int | None
    expansion: Expansion
    coherence: float
    mode: Mode
    filter: Mapping[str, Any] | None
    where_document: Mapping[str, Any] | None


class ContextWindowRetriever(BaseRetriever):
    """Retrieve chunks by similarity, then grow them into readable windows of their files.

    With ``total_budget``, the retriever fills one budget for the whole result: the lengths
    of the returned documents (by ``length_function``) add up to at most ``total_budget``,
    in at most ``k`` windows. With ``expansion="adaptive"`` (the default then) hits and their
    neighbours compete for that budget by their similarity to the query, so windows grow
    where the neighbours are relevant and stay one chunk where they are not; with
    ``"static"`` each hit grows blindly up to ``window_budget`` while the total lasts. Either
    way it costs exactly one search and one neighbour fetch.

    Without ``total_budget`` each hit grows outward, one neighbouring chunk at a time, while
    the window stays within ``window_budget``, and exactly ``k`` documents come back (fewer
    only when the store has fewer). In every mode, windows of the same file that overlap or
    touch merge into one document with the splitter's overlap trimmed, best first.

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
            retriever = ContextWindowRetriever(vectorstore=store, k=8, total_budget=2000)

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
    """How many windows to return; with ``total_budget``, the most windows to return."""

    window_budget: int = Field(default=DEFAULT_WINDOW_BUDGET, strict=True)
    """The largest ``length_function`` of one grown window (characters by default). A hit
    longer than this comes back alone, whole; windows that merge may together exceed it."""

    total_budget: int | None = Field(default=None, strict=True)
    """The most that all returned windows may measure together, in the units of
    ``length_function``. ``None`` (the default) returns ``k`` windows of up to
    ``window_budget`` each. The one exception: when the best hit alone is longer than the
    whole budget, it comes back alone and whole, with ``metadata["over_budget"] = True``."""

    expansion: Expansion | None = None
    """How windows grow within ``total_budget``: ``"adaptive"`` (the default with a total
    budget) takes a neighbour only where its relevance to the query beats what the same
    budget buys elsewhere; ``"static"`` grows each hit blindly to ``window_budget``, as
    without a total budget. Adaptive needs a store that returns embeddings (Chroma does)."""

    coherence: float = DEFAULT_COHERENCE
    """Adaptive only: how much of its anchor's relevance a neighbour borrows (0 to 1). 0
    gives plain top chunks; 1, blind growth. The default was chosen on two dev sets."""

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
    """How many candidates the similarity search returns; default ``4 * k`` (``2 * k`` with
    ``total_budget``). Without ``total_budget``, more are taken automatically when merging
    leaves fewer than ``k`` windows (each time at the cost of another search and fetch)."""

    strict: bool = False
    """Raise ``MissingWindowMetadataError`` for a hit without window metadata, instead of
    returning it unexpanded with a warning."""

    _store: WindowStore = PrivateAttr()
    _lengths: _TypicalLength = PrivateAttr(default_factory=lambda: _TypicalLength())

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
        if not isinstance(query, str):
            msg = f"the query must be a string, got {type(query).__name__}"
            raise ConfigurationError(msg)
        if params.total_budget is not None:
            return (yield from self._budget_flow(query, params))
        return (yield from self._window_flow(query, params))

    def _budget_flow(self, query: str, params: _Params) -> Generator[Request, Any, list[Document]]:
        """One search, one neighbour fetch, one budget for the whole result."""
        total = params.total_budget
        assert total is not None  # noqa: S101 - the caller checked
        adaptive = params.expansion == "adaptive"
        predicate, fetch_where = _neighbour_filter(params)
        found = yield Search(
            query, params.fetch_k, params.filter, params.where_document, embeddings=adaptive
        )
        vectors: dict[str, Sequence[float]] = {}
        pairs = found.pairs()
        if adaptive:
            for document, vector in zip(found.documents, found.embeddings, strict=True):
                vectors[document.id or ""] = vector
        hits, chunks = self._hits(pairs)
        measure = Measure(self.length_function)
        if adaptive:
            wanted = plan_adaptive_fetch(
                hits,
                total_budget=total,
                mode=params.mode,
                length_function=self.length_function,
                measure=measure,
            )
        else:
            wanted = plan_fetch(
                hits,
                k=params.k,
                budget=params.window_budget,
                mode=params.mode,
                length_function=self.length_function,
                total_budget=total,
                measure=measure,
            )
        wanted = [position for position in wanted if position not in chunks]
        if wanted:
            ids = {make_chunk_id(*position): position for position in wanted}
            fetched = yield Fetch(
                list(ids), fetch_where, params.where_document, embeddings=adaptive
            )
            documents = list(fetched.documents)
            if adaptive:
                for document, vector in zip(documents, fetched.embeddings, strict=True):
                    vectors[document.id or ""] = vector
            _admit(documents, ids, predicate, chunks)
        if adaptive:
            relevance = _relevance(found.query_embedding, found.space, chunks, hits, vectors)
            windows, over = select_adaptive(
                hits,
                chunks,
                relevance,
                k=params.k,
                total_budget=total,
                window_budget=params.window_budget,
                mode=params.mode,
                length_function=self.length_function,
                coherence=params.coherence,
                measure=measure,
            )
        else:
            windows = assemble(
                hits,
                chunks,
                set(chunks) | set(wanted),
                k=params.k,
                budget=params.window_budget,
                mode=params.mode,
                length_function=self.length_function,
                total_budget=total,
                measure=measure,
            ).windows
            over = len(windows) == 1 and measure.run(windows[0].chunks) > total
        if not over:
            windows = fit_total(windows, total, self.length_function)
        return [_document(window, over_budget=over) for window in windows]

    def _window_flow(self, query: str, params: _Params) -> Generator[Request, Any, list[Document]]:
        """``k`` windows of up to ``window_budget`` each (no total budget).

        Once the typical chunk length is known (from earlier calls), the search asks for ids
        and distances only and the one fetch brings the texts of the hits the plan covers
        with their neighbours: Chroma's cheapest search, and nothing read twice.
        """
        predicate, fetch_where = _neighbour_filter(params)
        fetch_k = params.fetch_k
        typical = self._lengths.typical()
        lean = typical is not None and self._store.supports_search_ids
        while True:
            measure = Measure(self.length_function)
            beyond: list[Hit] = []  # lean: candidates the plan did not cover
            if lean and typical is not None:
                found = yield SearchIds(query, fetch_k, params.filter, params.where_document)
                located = _located(found)
                if located is None:  # ids not made by WindowSplitter: never ask again
                    self._lengths.disable()
                    lean = False
                    continue
                wanted, covered = plan_positions(
                    located,
                    dict.fromkeys((hit.chunk.id for hit in located), typical),
                    k=params.k,
                    budget=params.window_budget,
                    mode=params.mode,
                    known=set(),
                )
                ids = {make_chunk_id(*position): position for position in wanted}
                ids |= {hit.chunk.id: hit.chunk.position for hit in covered}  # type: ignore[misc]
                documents = (yield Fetch(list(ids), fetch_where, params.where_document)).documents
                beyond = located[len(covered) :]
                read = self._located_hits(covered, documents, predicate)
                if read is None:  # a hit is not where its id says: read it the usual way
                    lean = False
                    continue
                hits, chunks = read
                _admit(documents, ids, predicate, chunks)
                fetched = set(ids.values())
                returned = len(found)
            else:
                results = (
                    yield Search(query, fetch_k, params.filter, params.where_document)
                ).pairs()
                hits, chunks = self._hits(results)
                fetched = set(chunks)
                wanted = plan_fetch(
                    hits,
                    k=params.k,
                    budget=params.window_budget,
                    mode=params.mode,
                    length_function=self.length_function,
                    measure=measure,
                )
                returned = len(results)
            assembly: Assembly | None = None
            for _ in range(_MAX_FETCH_ROUNDS):
                missing = [position for position in wanted if position not in fetched]
                if missing:
                    more = {make_chunk_id(*position): position for position in missing}
                    documents = (
                        yield Fetch(list(more), fetch_where, params.where_document)
                    ).documents
                    fetched.update(missing)
                    _admit(documents, more, predicate, chunks)
                assembly = assemble(
                    [*hits, *_absorbed(beyond, chunks, until_unread=True)],
                    chunks,
                    fetched,
                    k=params.k,
                    budget=params.window_budget,
                    mode=params.mode,
                    length_function=self.length_function,
                    measure=measure,
                )
                if assembly.complete:
                    break
                wanted = plan_needs(assembly.needs)
            assert assembly is not None  # noqa: S101 - the loop runs at least once
            self._lengths.learn(measure, chunks.values())
            unread = any(hit.chunk.position not in chunks for hit in beyond)
            if unread and len(assembly.windows) >= params.k:  # later candidates: absorbed only
                assembly = assemble(
                    [*hits, *_absorbed(beyond, chunks)],
                    chunks,
                    fetched,
                    k=params.k,
                    budget=params.window_budget,
                    mode=params.mode,
                    length_function=self.length_function,
                    measure=measure,
                )
            if len(assembly.windows) >= params.k or (returned < fetch_k and not unread):
                return [_document(window) for window in assembly.windows]
            if unread:
                lean = False  # fewer windows than planned: read every candidate
                continue
            fetch_k *= 2  # candidates merged into fewer than k windows: search wider

    def _located_hits(
        self, covered: Sequence[Hit], documents: Sequence[Document], predicate: Predicate | None
    ) -> tuple[list[Hit], dict[Position, Chunk]] | None:
        """The covered hits, read from the fetched documents (a hit gone since is left out)."""
        by_id = {document.id: document for document in documents}
        hits: list[Hit] = []
        for located in covered:
            document = by_id.get(located.chunk.id)
            if document is None or (predicate is not None and not predicate(document.metadata)):
                continue
            hit = self._hit(document, located.distance)
            if hit.chunk.position not in (None, located.chunk.position):
                return None
            hits.append(hit)
        return self._hits_and_chunks(_unique(hits))

    def _params(self, overrides: Mapping[str, Any]) -> _Params:
        unknown = sorted(set(overrides) - set(OVERRIDABLE))
        if unknown:
            msg = (
                f"unknown argument(s) {', '.join(map(repr, unknown))} for "
                f"ContextWindowRetriever.invoke; allowed: {', '.join(OVERRIDABLE)}"
            )
            raise ConfigurationError(msg)
        values = {name: getattr(self, name) for name in OVERRIDABLE} | dict(overrides)
        k = _positive_int("k", values["k"], "the number of windows to return")
        budget = _positive_int(
            "window_budget", values["window_budget"], "the largest length of one window"
        )
        total_budget = values["total_budget"]
        if total_budget is not None:
            total_budget = _positive_int(
                "total_budget", total_budget, "the most all windows may measure together"
            )
        expansion = values["expansion"]
        if expansion is None:
            expansion = "adaptive" if total_budget is not None else "static"
        if expansion not in EXPANSIONS:
            msg = f"expansion must be one of {', '.join(map(repr, EXPANSIONS))}, got {expansion!r}"
            raise ConfigurationError(msg)
        if expansion == "adaptive" and total_budget is None:
            msg = (
                "expansion='adaptive' shares one budget between windows: give total_budget "
                "(e.g. total_budget=2000), or use expansion='static'"
            )
            raise ConfigurationError(msg)
        coherence = values["coherence"]
        if (
            isinstance(coherence, bool)
            or not isinstance(coherence, int | float)
            or not 0.0 <= coherence <= 1.0
        ):
            msg = f"coherence must be a number from 0 to 1, got {coherence!r}"
            raise ConfigurationError(msg)
        fetch_k = values["fetch_k"]
        if fetch_k is None:
            fetch_k = 2 * k if total_budget is not None else 4 * k
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
            if values[name] is not None and not values[name]:
                values[name] = None  # {} filters nothing, as None does
        if values["filter"] is not None:
            try:
                check_where(values["filter"])
            except ValueError as error:
                raise ConfigurationError(str(error)) from None
        if not callable(self.length_function):
            msg = "length_function must be callable, e.g. len or a token counter"
            raise ConfigurationError(msg)
        return _Params(
            k=k,
            fetch_k=fetch_k,
            window_budget=budget,
            total_budget=total_budget,
            expansion=expansion,
            coherence=float(coherence),
            mode=mode,
            filter=values["filter"],
            where_document=values["where_document"],
        )

    def _hits(
        self, results: Sequence[tuple[Document, float]]
    ) -> tuple[list[Hit], dict[Position, Chunk]]:
        """The search results as hits (each chunk once), and the chunks they put in place."""
        return self._hits_and_chunks(
            _unique([self._hit(document, distance) for document, distance in results])
        )

    @staticmethod
    def _hits_and_chunks(hits: list[Hit]) -> tuple[list[Hit], dict[Position, Chunk]]:
        chunks: dict[Position, Chunk] = {}
        for hit in hits:
            if hit.chunk.position is not None:
                chunks.setdefault(hit.chunk.position, hit.chunk)
        return hits, chunks

    def _hit(self, document: Document, distance: float) -> Hit:
        chunk, problem = _chunk(document)
        if problem is not None:
            if self.strict:
                raise MissingWindowMetadataError(problem)
            logger.warning("%s; returning it unexpanded", problem)
        return Hit(chunk=chunk, distance=float(distance))


def _neighbour_filter(params: _Params) -> tuple[Predicate | None, Mapping[str, Any] | None]:
    """How neighbours are filtered: a predicate applied here, or a ``where`` for the store.

    A filter the evaluator cannot decide goes to the store with the fetch (slow, exact).
    """
    predicate = compile_where(params.filter) if params.where_document is None else None
    return predicate, None if predicate is not None else params.filter


class _TypicalLength:
    """The median length of recently read chunks: what a search that returns no text plans by.

    Learned from the chunks each call reads (a few per call, the last 256 kept). A plan made
    with it may fetch a neighbour too many (cheap) or too few (one more fetch); never a
    different result.
    """

    __slots__ = ("_median", "_recent")

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=256)
        self._median: int | None = None

    def typical(self) -> int | None:
        return self._median

    def disable(self) -> None:
        """The store's ids do not tell positions: no lean search for this retriever."""
        self._median = None
        self._recent = deque(maxlen=0)

    def learn(self, measure: Measure, chunks: Iterable[Chunk]) -> None:
        self.learn_from(measure.text(chunk) for chunk in itertools.islice(chunks, 8))

    def learn_from(self, lengths: Iterable[int]) -> None:
        self._recent.extend(lengths)
        if self._recent:
            self._median = max(1, int(statistics.median_low(self._recent)))


def _located(found: Sequence[tuple[str, float]]) -> list[Hit] | None:
    """Hits known by id alone: ``file_id:chunk_index`` ids give their positions, no text.

    ``None`` when an id has another form (the caller then reads the hits the usual way).
    """
    hits: list[Hit] = []
    seen: set[str] = set()
    for chunk_id, distance in found:
        file_id, _, index = chunk_id.rpartition(":")
        if not (file_id and index.isascii() and index.isdigit()):
            return None
        if make_chunk_id(file_id, int(index)) != chunk_id:  # "f:03" is not chunk 3
            return None
        if chunk_id not in seen:
            seen.add(chunk_id)
            chunk = Chunk(id=chunk_id, text="", file_id=file_id, index=int(index))
            hits.append(Hit(chunk, float(distance)))
    return hits


def _absorbed(
    beyond: Sequence[Hit], chunks: Mapping[Position, Chunk], *, until_unread: bool = False
) -> list[Hit]:
    """Candidates beyond the plan that were fetched as neighbours, as hits, in rank order.

    A search that returned texts would have them all, so they must count: absorbed into a
    window, each adds its id and score. ``until_unread`` stops at the first candidate that was
    not fetched: one after it must never open a window in its place (the caller reads all
    candidates when the ``k`` windows are not there by then).
    """
    found: list[Hit] = []
    for hit in beyond:
        if hit.chunk.position not in chunks:
            if until_unread:
                break
            continue
        found.append(Hit(chunks[hit.chunk.position], hit.distance))  # type: ignore[index]
    return found


def _unique(hits: Sequence[Hit]) -> list[Hit]:
    """Each chunk once (a store may return one twice).

    A hit that has neither an id nor window metadata gets a key of its own, so two such hits
    never pass for one chunk.
    """
    seen: set[str] = set()
    unique: list[Hit] = []
    for rank, hit in enumerate(hits):
        if not hit.chunk.id:
            hit = Hit(replace(hit.chunk, id=f"#hit-{rank}"), hit.distance)
        if hit.chunk.id not in seen:
            seen.add(hit.chunk.id)
            unique.append(hit)
    return unique


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


def _relevance(
    query: Sequence[float] | None,
    space: str,
    chunks: Mapping[Position, Chunk],
    hits: Sequence[Hit],
    vectors: Mapping[str, Sequence[float]],
) -> dict[str, float]:
    """Minus the store's own distance to the query, for every chunk whose embedding came back.

    The same measure the search ranked by (squared L2, cosine or inner product), so hits keep
    the search's order and neighbours are measured on the same scale.
    """
    if query is None:
        return {}
    ids = list(dict.fromkeys([*(c.id for c in chunks.values()), *(h.chunk.id for h in hits)]))
    ids = [chunk_id for chunk_id in ids if len(vectors.get(chunk_id, ())) > 0]
    if not ids:
        return {}
    matrix = np.asarray([vectors[chunk_id] for chunk_id in ids], dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    if space == "l2":
        distances = ((matrix - q) ** 2).sum(axis=1)
    elif space == "ip":
        distances = 1.0 - matrix @ q
    else:
        norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
        distances = 1.0 - matrix @ q / np.clip(norms, 1e-12, None)
    return {chunk_id: -float(value) for chunk_id, value in zip(ids, distances, strict=True)}


def _document(window: Window, *, over_budget: bool = False) -> Document:
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
    if over_budget:
        metadata["over_budget"] = True
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
