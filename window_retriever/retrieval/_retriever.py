"""ContextWindowRetriever: a LangChain retriever that returns whole windows, not fragments.

The class holds the options and drives one retrieval; the steps are elsewhere, each in a small
module: the options are checked in ``_params``, hits come from a candidate source
(``_candidates.source_for``), a strategy (``_strategies``) plans the neighbour fetch and
chooses the windows with the pure algorithm of ``_windows`` and ``_adaptive``, and
``_records`` turns them into documents. A retrieval is written once, as a generator of
requests (``Flow``); ``_run`` and ``_arun`` drive it and differ by one ``await``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from window_retriever._errors import ConfigurationError
from window_retriever.core._adaptive import DEFAULT_COHERENCE
from window_retriever.core._fusion import DEFAULT_KEYWORD_WEIGHT
from window_retriever.core._windows import DEFAULT_WINDOW_BUDGET, Mode
from window_retriever.retrieval._adaptive_strategy import Adaptive
from window_retriever.retrieval._candidates import CandidateSource, HybridSearch, source_for
from window_retriever.retrieval._params import OVERRIDABLE, Expansion, Params, refused, resolve
from window_retriever.retrieval._plan import Route, logger, plan, snapshot_of
from window_retriever.retrieval._pool import Call, Flow, TypicalLength, above_floor
from window_retriever.retrieval._records import Unexpandable, to_plain_document
from window_retriever.retrieval._strategies import BudgetedStatic, StaticWindows, Strategy
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import (
    IdsRefused,
    WindowStore,
    aexecute,
    execute,
    one_retrieval,
)

__all__ = ["OVERRIDABLE", "ContextWindowRetriever"]

_NO_STORE: Any = object()
"""No ``vectorstore`` given by position."""


class ContextWindowRetriever(BaseRetriever):
    """Retrieve chunks by similarity, then grow them into readable windows of their files.

    With ``total_budget``, the retriever fills one budget for the whole result: the lengths
    of the returned documents (by ``length_function``) add up to at most ``total_budget``,
    in at most ``k`` windows. With ``expansion="adaptive"`` (the default then) hits and their
    neighbours compete for that budget by their similarity to the query, so windows grow
    where the neighbours are relevant and stay one chunk where they are not; with
    ``"static"`` each hit grows blindly up to ``window_budget`` while the total lasts. Either
    way it costs one search and one neighbour fetch (the route, chosen before the first store
    call and logged at DEBUG level: docs/how-it-works.md#routes); the keyword index adds a
    cheap check of the collection (one call) to a query that comes a ``check_interval`` (1 s)
    after the last, a count every 30 of them, and the catch-up of a write it finds
    (docs/scaling.md).

    Without ``total_budget`` each hit grows outward, one neighbouring chunk at a time, while
    the window stays within ``window_budget``, and exactly ``k`` documents come back (fewer
    only when the store has fewer). In every mode, windows of the same file that overlap or
    touch merge into one document with the splitter's overlap trimmed, best first.

    Scores are distances, as the store reports them: **lower is better**. A window's
    ``score`` is the minimum distance of the hits inside it; its ``relevance_score`` is the
    same in LangChain's convention, **higher is better**, from 0 to 1.

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
            retriever = ContextWindowRetriever(store, total_budget=2000)

    Invoke:
        .. code-block:: python

            docs = retriever.invoke("How do I close a file?")
            docs = retriever.invoke("How do I close a file?", k=2, filter={"tenant": "a"})

    Async:
        .. code-block:: python

            docs = await retriever.ainvoke("How do I close a file?")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    vectorstore: Any
    """A ``langchain_chroma.Chroma`` holding chunks from ``WindowSplitter``, or any object that
    implements ``window_retriever.WindowStore``."""

    candidates: Any = None
    """Where the hits come from: ``"vector"`` (the store's similarity search), ``"hybrid"``
    (vector and BM25 keyword search fused by reciprocal rank, equal weights; Chroma
    stores), or any LangChain retriever over the same store (an ensemble, a reranker, MMR,
    multi-query) whose documents carry ``WindowSplitter``'s metadata; of another
    ``ContextWindowRetriever``, its windows' hits. ``None`` (the default): hybrid with
    ``total_budget`` where the store has a keyword search (it won on both dev sets at every
    budget), vector otherwise. Under hybrid a window's ``score`` is still the
    minimum vector distance of its hits (for a keyword hit beyond the adaptive search's pool
    of 100, the pool's farthest distance, the nearest it can be); ``hit_ranks`` says which
    legs found each hit."""

    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT
    """Hybrid only: the weight of the keyword leg in reciprocal rank fusion, the vector leg's
    being 1 (0 turns it off). The default was chosen on the two dev sets."""

    k: int | None = Field(default=None, strict=True)
    """How many windows to return: 4 by default. With ``total_budget``, the most windows to
    return: by default one per 200 of the budget (at least 4), so the budget binds first."""

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
    without a total budget. Adaptive measures chunks by their distances in one search of ids
    and distances (Chroma); a store that cannot search ids alone must return embeddings."""

    coherence: float = DEFAULT_COHERENCE
    """Adaptive only: how much of its anchor's relevance a neighbour borrows (0 to 1). 0
    gives plain top chunks; 1, blind growth. The default was chosen on two dev sets."""

    floor: float | None = Field(default=None, strict=True)
    """A relevance floor relative to the best hit, 0 to 1, so that a weak hit never starts a
    window; ``None`` (the default) is off. A hit is kept when its distance lies within
    ``1 - floor`` of the candidates' spread from the best one's: ``distance - best <=
    (1 - floor) * (worst - best)`` (0 keeps all, 1 only the best, 0.5 those nearer the best
    than the weakest). Relative to the candidates searched, and unchanged by any increasing
    affine rescaling of distances, so one value carries across distance spaces and embedding
    models. Every strategy and candidate source (fused hits by their vector distance; a keyword
    hit beyond the adaptive search's pool, whose distance is not known, is kept). A
    hit under the floor may still come back as a neighbour of a stronger window."""

    diversity: float = Field(default=0.0, strict=True)
    """Adaptive only: maximal marginal relevance between windows, 0 (off, the default) to 1.
    A hit that would open a new window loses ``diversity`` times its highest cosine
    similarity to the hits the chosen windows hold (their stored embeddings), so a near-copy
    of a chosen window gives way to a hit on another topic; 1 weighs relevance and redundancy
    equally (classic MMR with lambda 0.5). Static expansion ignores it. With it, the search
    also returns the hits' vectors (no neighbour's: neighbours are measured as without it)."""

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
    leaves fewer than ``k`` windows (each time at the cost of another search and fetch).
    Adaptive windows search the ids and distances of ``max(fetch_k, 100)`` chunks: the first
    ``fetch_k`` are the hits, and the rest measure neighbours."""

    strict: bool = False
    """Raise ``MissingWindowMetadataError`` for a hit without window metadata, instead of
    returning it unexpanded with a warning."""

    _adapted: tuple[Any, WindowStore] | None = PrivateAttr(default=None)
    _lengths: TypicalLength = PrivateAttr(default_factory=TypicalLength)
    _unexpandable: Unexpandable | None = PrivateAttr(default=None)

    def __init__(self, vectorstore: Any = _NO_STORE, /, **kwargs: Any) -> None:
        """Validate the arguments; a bad or unknown one raises ``ConfigurationError``.

        The store may come first, by position, as LangChain's ``Document(page_content)``
        takes its text: ``ContextWindowRetriever(store, total_budget=2000)``; every other
        option is a keyword.
        """
        if vectorstore is not _NO_STORE:
            if "vectorstore" in kwargs:
                msg = "vectorstore given twice (by position and as vectorstore=); pass it once"
                raise ConfigurationError(msg)
            kwargs["vectorstore"] = vectorstore
        try:
            super().__init__(**kwargs)
        except ValidationError as error:
            raise refused(error, sorted(type(self).model_fields)) from None

    @model_validator(mode="after")
    def _check(self) -> ContextWindowRetriever:
        self._params({})
        self._store()
        return self

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        store, params = self._store(), self._params(kwargs)
        source, route = self._plan(params, store)
        documents: list[Document] = _run(self._flow(query, params, source, route), store, route)
        return _finished(documents, route, building=_building(source, store))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        store, params = self._store(), self._params(kwargs)
        source, route = self._plan(params, store)
        documents: list[Document] = await _arun(
            self._flow(query, params, source, route), store, route
        )
        return _finished(documents, route, building=_building(source, store))

    def hits(self, query: str, **kwargs: Any) -> list[Document]:
        """The ``k`` hits windows would grow from, as plain chunks, best first; no neighbours.

        What the candidate step finds (vector, hybrid or another retriever's hits) under the
        same options and filters (``floor`` relative to these ``k``), each with its ``score``
        and, fused, its ``hit_ranks``: to inspect retrieval, or as a top-chunks baseline.
        """
        store = self._store()
        params = self._params(kwargs)
        source = source_for(params, store, snapshot_of(store.held()))
        pool = _run(source.find(_checked(query), params.k, params, embeddings=False), store)
        hits = above_floor(pool.hits, params.floor)[: params.k]
        return [to_plain_document(hit, pool.space) for hit in hits]

    def _plan(self, params: Params, store: WindowStore) -> tuple[CandidateSource, Route]:
        """Where the hits come from, and the route: chosen once, before any store call.

        From what is declared or known now: the store's capabilities, the keyword index this
        process holds (taken here, once: the one way it reaches the retrieval), the options,
        and whether earlier calls found ids that do not name positions.
        """
        held = snapshot_of(store.held())
        source = source_for(params, store, held)
        lengths = self._lengths
        route = plan(
            params,
            held,
            surveys=source.surveys,
            locates=source.locates,
            positions=not lengths.disabled,
            typical=lengths.typical() is not None,
            keyword_leg=source.keyword_leg,
        )
        logger.debug("route planned: %s (%s)", route.name, "; ".join(route.reasons))
        return source, route

    def _flow(self, query: str, params: Params, source: CandidateSource, route: Route) -> Flow:
        """The whole retrieval along ``route``: the strategy's search, fetch and selection."""
        documents: list[Document] = yield from strategy_for(params, self._lengths).run(
            _checked(query), params, source, route
        )
        return documents

    def _params(self, overrides: dict[str, Any]) -> Params:
        fields = {name: getattr(self, name) for name in OVERRIDABLE}
        return resolve(
            fields,
            overrides,
            length_function=self.length_function,
            unexpandable=self._unexpandable_hits(),
        )

    def _unexpandable_hits(self) -> Unexpandable:
        """What to do with a hit that cannot grow: one policy (one warning) per retriever."""
        policy = self._unexpandable
        if policy is None or policy.strict != self.strict:
            policy = self._unexpandable = Unexpandable(strict=self.strict)
        return policy

    def _store(self) -> WindowStore:
        """The adapter of ``vectorstore``; a new one (and a fresh start) when it is reassigned."""
        adapted = self._adapted
        if adapted is None or adapted[0] is not self.vectorstore:
            adapted = (self.vectorstore, store_adapter(self.vectorstore))
            self._adapted = adapted
            self._lengths = TypicalLength()
            self._unexpandable = None  # another store: warn of its chunks afresh
        return adapted[1]


def strategy_for(params: Params, lengths: TypicalLength) -> Strategy:
    """The strategy the options ask for."""
    if params.total_budget is None:
        return StaticWindows(lengths)
    return Adaptive(lengths) if params.adaptive else BudgetedStatic()


def _checked(query: Any) -> str:
    if not isinstance(query, str):
        msg = f"the query must be a string, got {type(query).__name__}"
        raise ConfigurationError(msg)
    if not query.strip():
        msg = (
            f"the query is empty ({query!r}); ask a question, e.g. "
            "retriever.invoke('How do I close a file?')"
        )
        raise ConfigurationError(msg)
    return query


def _building(source: CandidateSource, store: WindowStore) -> bool:
    """The keyword leg found nothing: its index is not built yet (a first build runs)."""
    return isinstance(source, HybridSearch) and store.keyword_search_building()


def _finished(documents: list[Document], route: Route, *, building: bool) -> list[Document]:
    """``documents``, once their route is logged (docs/how-it-works.md#routes)."""
    logger.debug("%s", route)
    if building:
        for document in documents:  # the keyword leg found nothing: its index is not built
            document.metadata["keyword_leg"] = "building"
    return documents


def _run(flow: Flow, store: WindowStore, route: Route | None = None) -> Any:
    """Drive a flow of requests to its end, synchronously; return what it returns.

    A store's :class:`IdsRefused` is thrown into the flow, which asks again (the one error a
    flow answers); ``route`` counts the store requests.
    """
    response: Any = None
    refused: IdsRefused | None = None
    with one_retrieval():  # the query embedded once, however often it is searched
        while True:
            try:
                request = flow.throw(refused) if refused is not None else flow.send(response)
            except StopIteration as done:
                return done.value
            refused = None
            if isinstance(request, Call):
                response = request.run()
            else:
                if route is not None:
                    route.store_calls += 1
                try:
                    response = execute(store, request)
                except IdsRefused as error:
                    refused = error


async def _arun(flow: Flow, store: WindowStore, route: Route | None = None) -> Any:
    """Drive a flow of requests to its end, awaiting each; return what it returns (see _run)."""
    response: Any = None
    refused: IdsRefused | None = None
    with one_retrieval():  # as in _run
        while True:
            try:
                request = flow.throw(refused) if refused is not None else flow.send(response)
            except StopIteration as done:
                return done.value
            refused = None
            if isinstance(request, Call):
                response = await request.arun()
            else:
                if route is not None:
                    route.store_calls += 1
                try:
                    response = await aexecute(store, request)
                except IdsRefused as error:
                    refused = error
