"""Adaptive windows: hits and neighbours compete for one total budget by relevance.

The default with ``total_budget``. :class:`Adaptive` runs one flow: the hits, the plan of the
neighbours they may grow to, those neighbours, the selection (``_adaptive.select_adaptive``,
each chunk worth minus its distance to the query), and the windows as documents. The route
(``_plan``: chosen before the first store call) says only how much is known before the read:

- ``stand-ins`` and ``survey``: a survey (ids and distances only, ``_pool.Survey``) measures
  each chunk by its distance in a wide pool. With ``stand-ins`` the keyword index's lengths
  and metadata (``_stand_ins``) are selected among before anything is read, and only the
  chosen are read and checked; with ``survey`` the hits are read with their planned
  neighbours. With ``diversity`` the survey's search brings the hits' stored vectors too
  (what it compares), nothing else;
- ``read``: the search reads the hits and the fetch the neighbours with their stored vectors,
  which measure them (``_strategies._Budgeted``).

Every route gives the same windows (``benchmarks/replay.py --against-reading-all`` checks it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from langchain_core.documents import Document

from window_retriever.core._adaptive import cut_windows
from window_retriever.core._ids import make_chunk_id
from window_retriever.core._windows import Chunk, Hit, Measure, Position, Window
from window_retriever.retrieval._candidates import CandidateSource
from window_retriever.retrieval._params import Params
from window_retriever.retrieval._plan import Route
from window_retriever.retrieval._pool import (
    Flow,
    Neighbours,
    Pool,
    Survey,
    TypicalLength,
    above_floor,
    to_query,
)
from window_retriever.retrieval._records import by_position
from window_retriever.retrieval._stand_ins import StandIns, read_windows
from window_retriever.retrieval._strategies import _Budgeted, documents_of


class Adaptive(_Budgeted):
    """Hits and neighbours compete for the budget by their relevance to the query.

    Where the source can :meth:`~CandidateSource.survey` (a store that searches ids alone,
    ids that name positions), the search returns ids and distances only (and the hits'
    vectors where ``diversity`` compares them), of a pool wider than the hits, and a chunk is
    measured by its distance in the pool, or at the pool's farthest distance when it is not
    among them (:class:`~window_retriever.retrieval._pool.Survey`); one fetch reads texts and
    metadata, no vectors. Otherwise each neighbour is measured by its stored vector, read
    with the fetch.
    """

    embeddings = True

    def __init__(self, lengths: TypicalLength | None = None) -> None:
        self.lengths = lengths or TypicalLength()

    def run(self, query: str, params: Params, source: CandidateSource, route: Route) -> Flow:
        """The route's flow: a survey, then stand-ins or a read of the hits; or the read.

        ``stand-ins`` selects among the keyword index's stand-ins and reads only the chunks
        chosen (:class:`~window_retriever.retrieval._stand_ins.StandIns`); where one was wrong
        it re-plans to ``survey`` on the same survey, which reads the hits and their planned
        neighbours. A survey that cannot measure (ids that do not name positions, keyword hits
        only) re-plans to ``read``, the budgeted read of
        :class:`~window_retriever.retrieval._strategies._Budgeted` (hits and neighbours with
        their vectors). Every route gives the same windows.
        """
        if route.name in ("stand-ins", "survey"):
            survey: Survey | None = yield from source.survey(query, params.fetch_k, params)
            if survey is None:
                self.lengths.disable()  # the lean search never again for this retriever
                route.replan("read", "a hit's id does not name its position")
            elif survey.hits and math.isinf(survey.bound):
                route.replan("read", "keyword hits only: no vector distance to measure by")
            else:
                neighbours = Neighbours(params, held=route.held)
                if route.name == "stand-ins":
                    # the plan chose stand-ins only with an index held and a filter decided here
                    assert route.held is not None  # noqa: S101
                    assert neighbours.predicate is not None  # noqa: S101
                    stand_ins = StandIns(route.held, neighbours.predicate)
                    documents: list[Document] | None = yield from self._from_survey(
                        survey, params, neighbours, stand_ins
                    )
                    if documents is not None:
                        return documents
                    route.replan("survey", "a stand-in differed from the chunk read")
                documents = yield from self._from_survey(survey, params, neighbours, None)
                assert documents is not None  # noqa: S101 - without stand-ins it reads
                return documents
        return (yield from super().run(query, params, source, route))

    def _from_survey(
        self, survey: Survey, params: Params, neighbours: Neighbours, stand_ins: StandIns | None
    ) -> Flow:
        """The hits, the plan, the neighbours, the selection and the check, from a survey.

        With ``stand_ins`` the hits and the neighbours are their stand-ins and the check reads
        the chunks chosen (one fetch); without, the hits are read with the neighbours an
        estimate plans (one fetch), and what the plan made from the hits' own lengths needs
        beyond the estimate is read then (rarely one fetch more). Return the documents, or
        ``None`` where a stand-in was wrong (never without stand-ins).
        """
        measure = Measure(params.length_function)
        pool: Pool | None = yield from self._hits(survey, params, measure, neighbours, stand_ins)
        if pool is None:
            return None
        needed = self.plan(pool, params, measure)  # as where the search reads the hits
        if stand_ins is not None:
            stand_ins.add_neighbours(pool, needed)
        else:
            yield from neighbours.fetch(pool, needed)  # only what the estimate missed
            kept = {*needed, *(hit.chunk.position for hit in pool.hits)}
            pool.chunks = {position: c for position, c in pool.chunks.items() if position in kept}
        windows, over = self._select_surveyed(pool, survey, params, measure)
        if stand_ins is not None:
            read: dict[str, Chunk] | None = yield from stand_ins.check(windows, neighbours)
            if read is None:
                return None
            self.lengths.learn(measure, read.values())
            windows = read_windows(windows, read)
        windows = cut_windows(windows, params.length_function)  # on the texts read
        # every way here reads through ``neighbours`` before there is a window to return
        return documents_of(windows, over, params, neighbours.space or pool.space)

    def _hits(
        self,
        survey: Survey,
        params: Params,
        measure: Measure,
        neighbours: Neighbours,
        stand_ins: StandIns | None,
    ) -> Flow:
        """The pool of the survey's hits: their stand-ins, or read with an estimate's neighbours.

        The estimate is planned from the lengths earlier calls read (a notch shorter than
        typical: see ``TypicalLength.low``); what it reads beyond what the plan from the
        hits' own lengths needs is put aside by the caller, so the windows never depend on
        earlier calls. ``None`` where a stand-in is not held, or not where its id says.
        """
        if stand_ins is not None:
            hits = stand_ins.hits(survey.hits)
            if hits is None:
                return None
            stood = Pool(*by_position(hits), vectors=dict(survey.vectors), fused=survey.fused)
            stood.space = survey.space or stood.space  # known before a read with diversity only
            return stood
        estimate = params.plan_adaptive(survey.hits, measure, self.lengths.low(), read=False)
        ids = {make_chunk_id(*position): position for position in estimate}
        pool: Pool = yield from neighbours.read_located(survey.hits, ids, params)
        pool.fused = survey.fused
        pool.vectors = dict(survey.vectors)  # the hits', for diversity (none without it)
        self.lengths.learn(measure, pool.chunks.values())
        return pool

    def _select_surveyed(
        self, pool: Pool, survey: Survey, params: Params, measure: Measure
    ) -> tuple[list[Window], bool]:
        """The relevance floor, then adaptive selection, each chunk measured by the survey."""
        pool.hits = _floor_surveyed(pool.hits, params.floor, survey)
        values = {hit.chunk.id: -hit.distance for hit in pool.hits}
        for chunk in pool.chunks.values():
            values.setdefault(chunk.id, -survey.distance(chunk.id))
        values = _fused_order(values, pool.hits) if pool.fused else values
        return self._choose(pool, values, params, measure)

    def plan(self, pool: Pool, params: Params, measure: Measure) -> list[Position]:
        return params.plan_adaptive(pool.hits, measure)

    def select(self, pool: Pool, params: Params, measure: Measure) -> tuple[list[Window], bool]:
        windows, over = self._choose(pool, relevance(pool), params, measure)
        return cut_windows(windows, params.length_function), over

    @staticmethod
    def _choose(
        pool: Pool, values: Mapping[str, float], params: Params, measure: Measure
    ) -> tuple[list[Window], bool]:
        """Adaptive selection over the pool, each chunk worth ``values`` (minus distances)."""
        unit = _COSINE_UNIT[pool.space]
        similarity = cosines(pool) if params.diversity > 0 else None
        return params.select_adaptive(pool.hits, pool.chunks, values, measure, unit, similarity)


def _floor_surveyed(hits: list[Hit], floor: float | None, survey: Survey) -> list[Hit]:
    """The relevance floor over the hits the vector leg surveyed; the others are kept.

    A keyword hit beyond the pool has no distance of its own (only the pool's farthest, the
    nearest it can be), so the floor does not judge it: its fused rank made it a hit.
    """
    measured = [hit for hit in hits if hit.chunk.id in survey.distances]
    kept = {hit.chunk.id for hit in above_floor(measured, floor)}
    return [hit for hit in hits if hit.chunk.id in kept or hit.chunk.id not in survey.distances]


# One unit of cosine similarity in each space's distance, for unit vectors: the diversity
# discount is then on the scale of the relevance it is taken from.
_COSINE_UNIT = {"l2": 2.0, "cosine": 1.0, "ip": 1.0}


def relevance(pool: Pool) -> dict[str, float]:
    """Minus each chunk's distance to the query (higher is better), for adaptive selection.

    A hit is measured by the distance the search gave it (whether or not its stored vector
    came too, so every store gives the same windows), every other chunk from its stored
    vector, in the same measure.

    Fused hits come in fused order, not by distance; each then takes at least the relevance
    of the hit at its rank in the vector order, so the fused ranking decides which hits are
    best while neighbours are still measured against hits on the vector scale.
    """
    values = {h.chunk.id: -h.distance for h in pool.hits if math.isfinite(h.distance)}
    ids = [*(c.id for c in pool.chunks.values()), *(h.chunk.id for h in pool.hits)]
    measured = to_query(
        pool.query_embedding, pool.space, pool.vectors, (i for i in ids if i not in values)
    )
    values |= {chunk_id: -distance for chunk_id, distance in measured.items()}
    return _fused_order(values, pool.hits) if pool.fused else values


def _fused_order(values: dict[str, float], hits: Sequence[Hit]) -> dict[str, float]:
    """Fused hits keep their order: each takes at least the value at its rank (see above)."""
    ranked = sorted((values[h.chunk.id] for h in hits if h.chunk.id in values), reverse=True)
    for hit, value in zip(hits, ranked, strict=False):
        if hit.chunk.id in values:
            values[hit.chunk.id] = max(values[hit.chunk.id], value)
    return values


def cosines(pool: Pool) -> Callable[[str], list[float] | None]:
    """For diversity: a hit's id -> the cosine similarity of every hit to it.

    Only the hits' stored vectors are compared (a window's likeness to a hit is the highest
    of the hits it holds), so only theirs are read: with the survey's search
    (``SearchVectors``), or with the search where there is no survey. ``None`` for a chunk
    that is no hit, or a hit without a vector (a keyword hit the vector leg did not find);
    such a hit is 0 like every other.
    """
    import numpy as np  # only with diversity: importing the retriever should not cost numpy

    rows = [pool.vectors.get(hit.chunk.id, ()) for hit in pool.hits]
    width = next((len(row) for row in rows if len(row) > 0), 0)
    matrix = np.asarray(
        [row if len(row) == width else [0.0] * width for row in rows], dtype=np.float64
    ).reshape(len(rows), width)
    matrix /= np.clip(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12, None)
    row_of = {
        hit.chunk.id: r
        for r, (hit, row) in enumerate(zip(pool.hits, rows, strict=True))
        if width and len(row) == width
    }

    def similarity(chunk_id: str) -> list[float] | None:
        r = row_of.get(chunk_id)
        # A row at a time, for the hits taken only, and multiplied out rather than by ``@``:
        # BLAS would wake its threads for so small a product, which on a busy machine cost
        # up to 14 ms a query where this costs tens of microseconds.
        return None if r is None else (matrix * matrix[r]).sum(axis=1).tolist()

    return similarity
