"""Adaptive windows: hits and neighbours compete for one total budget by relevance.

The default with ``total_budget``. :class:`Adaptive` plans the fetch from the hits, reads the
chunks it may choose in one fetch, and selects with ``_adaptive.select_adaptive``, each chunk
worth minus its distance to the query. Where the candidate source surveys (ids and distances
only, see ``_pool.Survey``) it measures chunks by the survey, and where the process holds
the chunks' lengths and metadata (the keyword index, ``Survey.held``) it selects before it
reads and reads only the chosen (:meth:`Adaptive._chosen_first`). Each shortcut returns
``None`` where it cannot answer exactly, and the next, more general one runs: every way gives
the same windows (``benchmarks/replay.py --against-reading-all`` checks it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from langchain_core.documents import Document

from window_retriever.core._adaptive import plan_adaptive_fetch, select_adaptive
from window_retriever.core._ids import make_chunk_id
from window_retriever.core._windows import (
    Chunk,
    Hit,
    Measure,
    Position,
    Window,
    join_texts,
)
from window_retriever.retrieval._candidates import CandidateSource
from window_retriever.retrieval._params import Params
from window_retriever.retrieval._pool import (
    Flow,
    Neighbours,
    Pool,
    Read,
    Survey,
    TypicalLength,
    above_floor,
    to_query,
)
from window_retriever.retrieval._records import (
    by_position,
    read_chunk,
    read_record,
)
from window_retriever.retrieval._strategies import _Budgeted, documents_of
from window_retriever.stores._protocol import Indexed


class Adaptive(_Budgeted):
    """Hits and neighbours compete for the budget by their relevance to the query.

    Where the source can :meth:`~CandidateSource.survey` (a store that searches ids alone,
    ids that name positions) and ``diversity`` is off, the search returns ids and distances
    only, of a pool wider than the hits, and one fetch reads the hits that can be chosen with
    the neighbours they can grow to: texts and metadata, no vectors. A chunk is measured by
    its distance in the pool, or at the pool's farthest distance when it is not among them
    (:class:`~window_retriever.retrieval._pool.Survey`). Otherwise each neighbour is
    measured by its stored vector, read with the fetch.
    """

    embeddings = True

    def __init__(self, lengths: TypicalLength | None = None) -> None:
        self.lengths = lengths or TypicalLength()

    def run(self, query: str, params: Params, source: CandidateSource) -> Flow:
        """The survey's two readings, most specific first, then the full read (one exit).

        Each reading returns ``None`` where it cannot answer exactly, and the next runs:
        :meth:`_chosen_first` (select on the lengths the process holds, read only the chosen),
        :meth:`_surveyed` (read every chunk the selection may measure, then select), and the
        budgeted read of :class:`~window_retriever.retrieval._strategies._Budgeted` (hits and
        neighbours with their vectors). All give the same windows.
        """
        survey = yield from self._survey(query, params, source)
        if survey is not None:
            for reading in (self._chosen_first, self._surveyed):
                documents: list[Document] | None = yield from reading(survey, params)
                if documents is not None:
                    return documents
        return (yield from super().run(query, params, source))

    def _survey(self, query: str, params: Params, source: CandidateSource) -> Flow:
        """The survey to select by, or ``None`` where there is none to measure chunks by."""
        if params.diversity > 0 or not source.surveys or self.lengths.disabled:
            return None  # diversity compares vectors; the source cannot search ids alone
        survey: Survey | None = yield from source.survey(query, params.fetch_k, params)
        if survey is None:  # ids that do not name positions: the usual search, from now on
            self.lengths.disable()
            return None
        if survey.hits and math.isinf(survey.bound):  # keyword hits only: nothing to measure by
            return None
        return survey

    def _chosen_first(self, survey: Survey, params: Params) -> Flow:
        """Select on the lengths the process holds (``Survey.held``); read only the chosen.

        The keyword index holds every chunk's length and metadata, so the hits and the
        neighbours :meth:`_surveyed` would read stand in for themselves (a text of the same
        length: the budgets measure characters; the caller's filter applied to the metadata)
        and the selection is made before the fetch, exactly as it would be made after it. The
        one fetch reads the chunks chosen (about five, where :meth:`_surveyed` reads every one
        the selection might measure, nearly fifty) and the planned positions the index holds
        no chunk for, or one the filter hides (gaps: few, at file ends). Each chunk chosen is
        checked against its stand-in (position, offset, version, length, and the filter on
        the metadata just read); where one differs or a gap is filled (written since the
        index was checked), ``None`` is returned and the caller reads the usual way; a store
        that holds an index learns from its own fetch what was read, so it costs one fetch
        more once. A stale index so never brings back an old text or a hidden chunk; a neighbour
        left unchosen whose length changed unseen is still valued at its old length.

        Return the documents, or ``None`` (nothing held, a length function other than ``len``,
        a filter only the store can decide, a hit the index does not hold, or a changed chunk).
        """
        neighbours = Neighbours(params)
        predicate = neighbours.predicate
        index = survey.held
        if index is None or params.length_function is not len or predicate is None:
            return None
        known = index.indexed([hit.chunk.id for hit in survey.hits])
        if known is None:
            return None
        hits: list[Hit] = []
        for hit in survey.hits:
            stand_in = _stand_in(hit.chunk.id, known)
            if stand_in is None or stand_in.position != hit.chunk.position:
                return None  # not indexed yet, or not where its id says: read it
            # no filter here: the search applied it (the keyword leg to the index's metadata,
            # which the check after the read corrects)
            hits.append(replace(hit, chunk=stand_in))
        total = params.total_budget
        assert total is not None  # noqa: S101 - strategy_for checked
        measure = Measure(params.length_function)
        hits, chunks = by_position(hits)
        pool = Pool(hits, chunks, fused=survey.fused)
        planned = {
            make_chunk_id(*position): position
            for position in self.plan(pool, params, measure)
            if position not in chunks
        }
        known = {**known, **(index.indexed(list(planned)) or {})}
        gaps: dict[str, Position] = {}
        for chunk_id, position in planned.items():
            stand_in = _stand_in(chunk_id, known)
            if (
                stand_in is not None
                and stand_in.position == position
                and predicate(stand_in.metadata)
            ):
                chunks[position] = stand_in
            else:
                gaps[chunk_id] = position  # none held there, or hidden as far as the index knows
        windows, over = self._select_surveyed(pool, survey, params, measure)
        chosen = {chunk.id: chunk for window in windows for chunk in window.chunks}
        if not chosen:
            return []
        found: Read = yield from neighbours.read([*chosen, *gaps])
        read: dict[str, Chunk] = {}
        filled = False
        for document in found.documents:
            chunk_id = document.id or ""
            stand_in = chosen.get(chunk_id)
            if stand_in is None and chunk_id not in gaps:
                continue
            chunk, problem = read_chunk(document)
            if problem is not None:
                continue
            if stand_in is None:
                filled = filled or chunk.position == gaps[chunk_id]
            elif _same_shape(chunk, stand_in):
                read[chunk_id] = chunk
        if filled or len(read) < len(chosen):
            return None  # written since the index was checked: read the usual way
        self.lengths.learn(measure, read.values())
        return documents_of([_read_window(window, read) for window in windows], over, total, params)

    def _surveyed(self, survey: Survey, params: Params) -> Flow:
        """Read every hit with the neighbours it may grow to, in one fetch; select.

        The fetch is planned from the lengths earlier calls read (a notch shorter than
        typical: see ``TypicalLength.low``). Once the hits are read, the plan is made again
        from their own lengths, exactly as where the search reads them: what it needs that
        was not read is read then (one fetch more, rarely), and what it does not need is put
        aside, so the windows never depend on earlier calls.
        """
        total = params.total_budget
        assert total is not None  # noqa: S101 - strategy_for checked
        measure = Measure(params.length_function)
        estimate = plan_adaptive_fetch(
            survey.hits,
            total_budget=total,
            mode=params.mode,
            length_function=params.length_function,
            window_budget=params.window_budget,
            measure=measure,
            typical=self.lengths.low(),
            read=False,
        )
        neighbours = Neighbours(params)
        ids = {make_chunk_id(*position): position for position in estimate}
        pool = yield from neighbours.read_located(survey.hits, ids, params)
        if pool is None:
            return None
        pool.fused = survey.fused
        self.lengths.learn(measure, pool.chunks.values())
        needed = self.plan(pool, params, measure)  # as where the search reads the hits
        yield from neighbours.fetch(pool, needed)  # only what the estimate missed
        kept = {*needed, *(hit.chunk.position for hit in pool.hits)}
        pool.chunks = {position: c for position, c in pool.chunks.items() if position in kept}
        return documents_of(*self._select_surveyed(pool, survey, params, measure), total, params)

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
        return plan_adaptive_fetch(
            pool.hits,
            total_budget=params.total_budget or 0,
            mode=params.mode,
            length_function=params.length_function,
            window_budget=params.window_budget,
            measure=measure,
        )

    def select(self, pool: Pool, params: Params, measure: Measure) -> tuple[list[Window], bool]:
        return self._choose(pool, relevance(pool), params, measure)

    @staticmethod
    def _choose(
        pool: Pool, values: Mapping[str, float], params: Params, measure: Measure
    ) -> tuple[list[Window], bool]:
        """Adaptive selection over the pool, each chunk worth ``values`` (minus distances)."""
        return select_adaptive(
            pool.hits,
            pool.chunks,
            values,
            k=params.k,
            total_budget=params.total_budget or 0,
            window_budget=params.window_budget,
            mode=params.mode,
            length_function=params.length_function,
            coherence=params.coherence,
            diversity=params.diversity * _COSINE_UNIT[pool.space],
            similarity=cosines(pool) if params.diversity > 0 else None,
            measure=measure,
        )


def _stand_in(chunk_id: str, held: Indexed) -> Chunk | None:
    """The chunk the index holds under ``chunk_id``, with a blank text of its length; or None."""
    entry = held.get(chunk_id)
    if entry is None:
        return None
    length, metadata = entry
    chunk, problem = read_record(chunk_id, " " * length, metadata)
    return chunk if problem is None else None


def _same_shape(chunk: Chunk, stand_in: Chunk) -> bool:
    """A chunk read is what stood in for it: the same place, offset, version and length."""
    return (
        chunk.position == stand_in.position
        and chunk.start == stand_in.start
        and chunk.version == stand_in.version
        and len(chunk.text) == len(stand_in.text)
    )


def _read_window(window: Window, read: Mapping[str, Chunk]) -> Window:
    """``window`` with the chunks read in place of their stand-ins."""
    chunks = tuple(read[chunk.id] for chunk in window.chunks)
    hits = tuple(replace(hit, chunk=read[hit.chunk.id]) for hit in window.hits)
    return Window(chunks=chunks, hits=hits, text=join_texts(chunks))


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
    """For diversity: a chunk id -> the cosine similarity of every hit to it.

    From the stored embeddings (0 for a hit without one); ``None`` for a chunk without one.
    """
    import numpy as np  # only with diversity: importing the retriever should not cost numpy

    rows = [pool.vectors.get(hit.chunk.id, ()) for hit in pool.hits]
    width = next((len(row) for row in rows if len(row) > 0), 0)
    matrix = np.asarray(
        [row if len(row) == width else [0.0] * width for row in rows], dtype=np.float64
    ).reshape(len(rows), width)
    matrix /= np.clip(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12, None)

    def similarity(chunk_id: str) -> list[float] | None:
        vector = pool.vectors.get(chunk_id)
        if vector is None or width == 0 or len(vector) != width:
            return None
        v = np.asarray(vector, dtype=np.float64)
        return [float(x) for x in matrix @ (v / max(float(np.linalg.norm(v)), 1e-12))]

    return similarity
