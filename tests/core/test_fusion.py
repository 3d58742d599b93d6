"""Reciprocal rank fusion on hand-made rankings: weights, ties, repeats and limits."""

from __future__ import annotations

from typing import Any

import pytest

from window_retriever.core._fusion import fuse


def ids(fused: list[Any]) -> list[str]:
    return [item.id for item in fused]


def test_a_leg_of_weight_zero_is_off_and_the_other_leg_is_reproduced() -> None:
    rankings = {"vector": ["a", "b", "c", "d"], "keyword": ["d", "x", "a", "y"]}
    assert ids(fuse(rankings, {"vector": 1.0, "keyword": 0.0})) == ["a", "b", "c", "d"]
    assert ids(fuse(rankings, {"vector": 0.0, "keyword": 1.0})) == ["d", "x", "a", "y"]


def test_scores_are_weighted_reciprocal_ranks_summed_over_legs() -> None:
    fused = fuse({"vector": ["a", "b"], "keyword": ["b", "c"]}, {"vector": 2.0, "keyword": 1.0})
    by_id = {item.id: item for item in fused}
    assert by_id["b"].score == pytest.approx(2 / 62 + 1 / 61)
    assert by_id["a"].score == pytest.approx(2 / 61)
    assert by_id["c"].score == pytest.approx(1 / 62)
    assert ids(fused) == ["b", "a", "c"]
    assert by_id["b"].ranks == (("keyword", 1), ("vector", 2))


def test_ties_go_to_the_heavier_legs_rank_then_the_id_whatever_the_input_order() -> None:
    # equal weights: a (vector 1) and b (keyword 1) tie exactly
    one = fuse({"vector": ["a"], "keyword": ["b"]}, {"vector": 1.0, "keyword": 1.0})
    two = fuse({"keyword": ["b"], "vector": ["a"]}, {"vector": 1.0, "keyword": 1.0})
    assert ids(one) == ids(two)  # legs of equal weight: by name, never by the input order
    heavier = fuse({"vector": ["a", "z"], "keyword": ["z", "b"]}, {"vector": 1.0, "keyword": 1.0})
    assert ids(heavier)[0] == "z"


@pytest.mark.parametrize(("heavy", "light"), [("vector", "keyword"), ("keyword", "vector")])
def test_an_exact_tie_goes_to_the_heavier_legs_chunk(heavy: str, light: str) -> None:
    # weights 2 and 1: rank 62 in the heavy leg scores 2 / 122, rank 1 in the light 1 / 61
    filler = [f"f{i:02d}" for i in range(61)]
    rankings = {heavy: [*filler, "z"], light: ["a"]}
    *_, z, a = fuse(rankings, {heavy: 2.0, light: 1.0})
    assert (z.id, a.id) == ("z", "a")  # the heavier leg's chunk first, though "a" sorts first
    assert z.score == a.score  # the same float: a true tie


def test_a_repeated_id_counts_once_at_its_best_rank() -> None:
    fused = fuse({"vector": ["a", "b", "a", "a"], "keyword": ["b", "a"]})
    by_id = {item.id: item for item in fused}
    assert by_id["a"].score == pytest.approx(1 / 61 + 1 / 62)
    assert by_id["a"].ranks == (("keyword", 2), ("vector", 1))
    assert by_id["b"].score == pytest.approx(1 / 62 + 1 / 61)
    # counted once, a ties b; legs of equal weight break it by name: the keyword leg's b
    repeated = fuse({"vector": ["a", "a"], "keyword": ["b"]})
    assert [(item.id, item.score) for item in repeated] == [
        ("b", pytest.approx(1 / 61)),
        ("a", pytest.approx(1 / 61)),
    ]


def test_a_limit_gives_the_head_of_the_whole_fused_ranking() -> None:
    rankings = {"vector": ["a", "b", "c", "d"], "keyword": ["d", "x", "a", "y"]}
    whole = fuse(rankings)
    assert len(whole) == 6
    for limit in (0, 1, 3, 6, 9):
        assert fuse(rankings, limit=limit) == whole[:limit]


def test_pools_of_different_sizes_and_repeats() -> None:
    fused = fuse({"vector": ["a", "a", "b"], "keyword": []})
    assert ids(fused) == ["a", "b"]
    assert dict(fused[1].ranks) == {"vector": 3}  # a repeat still takes its rank
    assert fuse({"vector": [], "keyword": []}) == []
    with pytest.raises(ValueError, match="must not be negative"):
        fuse({"vector": ["a"]}, {"vector": -1.0})
