"""How windows are chosen: one object per strategy, each a plan, a fetch and a selection.

- :class:`StaticWindows`: no total budget; ``k`` windows, each hit grown to ``window_budget``.
- :class:`BudgetedStatic`: one ``total_budget``; hits grown blindly while it lasts.
- :class:`~window_retriever.retrieval._adaptive_strategy.Adaptive`: one ``total_budget``; hits and
  neighbours compete by relevance.

Every strategy is a generator of requests (``run``), fed by a
:class:`~window_retriever.retrieval._candidates.CandidateSource` for its hits and
:class:`~window_retriever.retrieval._pool.Neighbours` for the chunks around them, and returns the
windows as documents. The pure work (plans, growth, merging, selection) is in ``_windows`` and
``_adaptive``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from langchain_core.documents import Document

from window_retriever.core._assembly import Assembly, plan_needs
from window_retriever.core._ids import make_chunk_id
from window_retriever.core._windows import Hit, Measure, Position, Window, fit_total
from window_retriever.retrieval._candidates import CandidateSource
from window_retriever.retrieval._params import Params
from window_retriever.retrieval._plan import Route
from window_retriever.retrieval._pool import (
    Flow,
    Neighbours,
    Pool,
    TypicalLength,
    above_floor,
    absorbed,
)
from window_retriever.retrieval._records import (
    to_document,
    without_repeated_texts,
)
from window_retriever.stores._protocol import Space

# Fetch rounds per search: the first fetch nearly always suffices; each further round at
# least extends every unfinished window, so this bound is never reached on real data.
_MAX_FETCH_ROUNDS = 8


class Strategy(ABC):
    """Chooses the windows of one retrieval."""

    @abstractmethod
    def run(self, query: str, params: Params, source: CandidateSource, route: Route) -> Flow:
        """Yield store requests along ``route``; return the windows as documents, best first."""


class _Budgeted(Strategy):
    """One search, one neighbour fetch, one budget for the whole result."""

    embeddings = False

    def run(self, query: str, params: Params, source: CandidateSource, route: Route) -> Flow:
        pool = yield from source.find(
            query, params.fetch_k, params, embeddings=self.embeddings, defer=True
        )
        measure = Measure(params.length_function)
        # hits known by id only come with the neighbours, with their vectors (for distances)
        neighbours = Neighbours(
            params, embeddings=self.embeddings or bool(pool.unread), held=route.held
        )
        planned = self.plan(pool, params, measure)
        yield from neighbours.fetch(pool, [*pool.unread.values(), *planned])
        pool.settle()  # hits known by id only were read with the neighbours
        pool.hits = above_floor(pool.hits, params.floor)  # the weaker stay known as neighbours
        return documents_of(*self.select(pool, params, measure), params, pool.space)

    @abstractmethod
    def plan(self, pool: Pool, params: Params, measure: Measure) -> list[Position]:
        """The neighbours worth fetching."""

    @abstractmethod
    def select(self, pool: Pool, params: Params, measure: Measure) -> tuple[list[Window], bool]:
        """The windows, and whether the one window is over the budget (then kept whole)."""


class BudgetedStatic(_Budgeted):
    """Each hit grown blindly to ``window_budget`` while the total budget lasts."""

    def plan(self, pool: Pool, params: Params, measure: Measure) -> list[Position]:
        return params.plan_fetch(pool.hits, measure)

    def select(self, pool: Pool, params: Params, measure: Measure) -> tuple[list[Window], bool]:
        windows = params.assemble(pool.hits, pool.chunks, pool.fetched, measure).windows
        total = params.total_budget or 0
        return windows, len(windows) == 1 and measure.run(windows[0].chunks) > total


def documents_of(windows: list[Window], over: bool, params: Params, space: Space) -> list[Document]:
    """The chosen windows as documents, cut to the total budget unless the one is over it.

    ``space``: the distance space of the hits' scores (for ``relevance_score``).
    """
    total = params.total_budget
    assert total is not None  # noqa: S101 - strategy_for checked
    if not over:
        windows = fit_total(windows, total, params.length_function)
    documents = [to_document(window, space, over_budget=over) for window in windows]
    return without_repeated_texts(documents)


class StaticWindows(Strategy):
    """``k`` windows of up to ``window_budget`` each (no total budget).

    Once the typical chunk length is known (from earlier calls), a vector search asks for ids
    and distances only and the one fetch brings the texts of the hits the plan covers with
    their neighbours: Chroma's cheapest search, and nothing read twice. When merging leaves
    fewer than ``k`` windows, it searches again, twice as wide, unless the relevance floor
    dropped a hit (the floor is relative to the pool searched: the hits it left are the
    windows). ``diversity`` does not apply: windows follow the hits' order.
    """

    def __init__(self, lengths: TypicalLength) -> None:
        self.lengths = lengths
        self.floored = False
        """The relevance floor dropped a hit of the last search."""

    def run(self, query: str, params: Params, source: CandidateSource, route: Route) -> Flow:
        """One flow: the hits, the fetch rounds that grow them, then wider if windows merged.

        The hits come from the lean search on the ``lean`` route (:meth:`_lean`: ids only,
        the planned neighbours read with them; where an id does not name a position,
        re-planned to ``search``), else from the source's search, which reads them; either way
        :meth:`_assemble` fetches and grows the windows.
        """
        neighbours = Neighbours(params, held=route.held)
        fetch_k = params.fetch_k
        typical = self.lengths.typical()
        while True:
            pool: Pool | None = None
            wanted: list[Position] | None = None
            if route.name == "lean" and typical is not None:
                pool, wanted = yield from self._lean(
                    query, fetch_k, typical, params, source, neighbours
                )
                if pool is None:
                    route.replan("search", "a hit's id does not name its position")
            if pool is None:
                pool = yield from source.find(query, fetch_k, params, embeddings=False)
                pool.hits = self._floor(pool.hits, params)
                wanted = None  # planned from the texts read
            assembly = yield from self._assemble(pool, wanted, params, neighbours)
            unread = any(hit.chunk.position not in pool.chunks for hit in pool.beyond)
            if (
                len(assembly.windows) >= params.k
                or (pool.returned < fetch_k and not unread)
                or (self.floored and not unread)
            ):
                documents = [to_document(window, pool.space) for window in assembly.windows]
                return without_repeated_texts(documents)
            if unread:  # fewer windows than planned: read every candidate
                route.replan("search", "fewer windows than planned: every candidate is read")
            else:
                fetch_k *= 2  # candidates merged into fewer than k windows: search wider

    def _lean(
        self,
        query: str,
        fetch_k: int,
        typical: int,
        params: Params,
        source: CandidateSource,
        neighbours: Neighbours,
    ) -> Flow:
        """Search for ids alone and read the hits with their planned neighbours, in one fetch.

        Return ``(pool, planned positions)``, or ``(None, [])`` where an id does not name a
        position (the usual search, from then on).
        """
        found, returned = yield from source.locate(query, fetch_k, params)
        if found is None:  # ids not made by WindowSplitter: never again
            self.lengths.disable()
            return None, []
        found = self._floor(found, params)
        wanted, covered = params.plan_lean(found, typical)
        ids = {make_chunk_id(*position): position for position in wanted}
        ids |= {hit.chunk.id: hit.chunk.position for hit in covered}  # type: ignore[misc]
        pool: Pool = yield from neighbours.read_located(covered, ids, params)
        pool.beyond = found[len(covered) :]
        pool.returned = returned
        return pool, wanted

    def _floor(self, hits: list[Hit], params: Params) -> list[Hit]:
        kept = above_floor(hits, params.floor)
        self.floored = len(kept) < len(hits)
        return kept

    def _assemble(
        self,
        pool: Pool,
        wanted: list[Position] | None,
        params: Params,
        neighbours: Neighbours,
    ) -> Flow:
        """Fetch rounds until every window is complete; return the assembly."""
        measure = Measure(params.length_function)
        if wanted is None:
            wanted = params.plan_fetch(pool.hits, measure)
        assembly: Assembly | None = None
        for _ in range(_MAX_FETCH_ROUNDS):
            yield from neighbours.fetch(pool, wanted)
            assembly = self._windows(pool, params, measure, until_unread=True)
            if assembly.complete:
                break
            wanted = plan_needs(assembly.needs)
        assert assembly is not None  # noqa: S101 - the loop runs at least once
        self.lengths.learn(measure, pool.chunks.values())
        unread = any(hit.chunk.position not in pool.chunks for hit in pool.beyond)
        if unread and len(assembly.windows) >= params.k:  # later candidates: absorbed only
            assembly = self._windows(pool, params, measure, until_unread=False)
        return assembly

    @staticmethod
    def _windows(pool: Pool, params: Params, measure: Measure, *, until_unread: bool) -> Assembly:
        hits = [*pool.hits, *absorbed(pool.beyond, pool.chunks, until_unread=until_unread)]
        return params.assemble(hits, pool.chunks, pool.fetched, measure)
