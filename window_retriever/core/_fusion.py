"""Reciprocal rank fusion: one ranking from several, by rank alone (plain data, no I/O).

Each leg (vector search, keyword search) ranks the chunks it found; a chunk's fused score is
the sum over the legs that found it of ``weight / (k + rank)``, ranks counted from 1
(Cormack, Clarke and Buettcher, 2009). Only ranks are used, never the legs' scores, so no
normalisation across queries or pools is needed (or possible to get wrong).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RRF_K = 60
"""The constant of reciprocal rank fusion: larger flattens the advantage of the top ranks."""

DEFAULT_KEYWORD_WEIGHT = 1.0
"""The keyword leg's weight against the vector leg's 1: equal weights. Which leg is stronger
depends on the data, so the weight is the one of 0.5, 1 and 2 that did well on both dev sets
(docs/benchmarks.md#hybrid-candidates-and-the-default)."""

DEFAULT_WEIGHTS: Mapping[str, float] = {"vector": 1.0, "keyword": DEFAULT_KEYWORD_WEIGHT}


@dataclass(frozen=True, slots=True)
class Fused:
    """One chunk of the fused ranking: its id, fused score, and its rank in each leg."""

    id: str
    score: float
    ranks: tuple[tuple[str, int], ...]


def fuse(
    rankings: Mapping[str, Sequence[str]],
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    *,
    k: int = RRF_K,
    limit: int | None = None,
) -> list[Fused]:
    """Fuse ``rankings`` (ids best first, per leg) into one ranking, best first.

    A leg's repeated id counts once, at its best rank; a chunk found only by legs of weight 0
    is left out, so a weight of 0 turns a leg off. Ties go to the chunk ranked best by the
    heaviest leg that found it, then to the id (so the order never depends on the input's).
    ``limit``: only the first ``limit`` of the ranking (all of it when ``None``).
    """
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for leg, ids in rankings.items():
        weight = weights.get(leg, 1.0)
        if weight < 0:
            msg = f"the weight of {leg!r} must not be negative, got {weight}"
            raise ValueError(msg)
        for rank, chunk_id in enumerate(ids, 1):
            found = ranks.setdefault(chunk_id, {})
            if leg in found:
                continue
            found[leg] = rank
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    order = sorted(legs for legs in rankings)
    heaviest = sorted(order, key=lambda leg: -weights.get(leg, 1.0))

    def tie(chunk_id: str) -> tuple[int, ...]:
        return tuple(ranks[chunk_id].get(leg, 1 << 30) for leg in heaviest)

    kept = [chunk_id for chunk_id, score in scores.items() if score > 0]  # a weight-0 leg alone
    best = sorted(kept, key=lambda chunk_id: (-scores[chunk_id], tie(chunk_id), chunk_id))
    if limit is not None:
        best = best[:limit]
    return [
        Fused(chunk_id, scores[chunk_id], tuple(sorted(ranks[chunk_id].items())))
        for chunk_id in best
    ]
