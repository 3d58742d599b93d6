"""Adaptive selection on hand-made relevance values: growth follows relevance, within budget."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from window_retriever.core._adaptive import cut_windows, plan_adaptive_fetch, select_adaptive
from window_retriever.core._windows import Chunk, Hit, Position, Window

SIZE = 100  # every chunk is 100 characters: budgets below count chunks


def make_chunk(file_id: str, index: int, version: str = "v1", size: int = SIZE) -> Chunk:
    body = f"{file_id}{index:03d}".ljust(size, ".")
    return Chunk(
        id=f"{file_id}:{index}",
        text=body,
        file_id=file_id,
        index=index,
        start=index * size,
        version=version,
    )


def corpus(files: dict[str, int]) -> dict[Position, Chunk]:
    return {
        (file_id, index): make_chunk(file_id, index)
        for file_id, count in files.items()
        for index in range(count)
    }


def hits_of(
    chunks: dict[Position, Chunk], relevance: dict[str, float], hit_ids: list[str]
) -> list[Hit]:
    """The hits named by ``hit_ids``, in that order, their distance 1 - relevance."""
    by_id = {chunk.id: chunk for chunk in chunks.values()}
    return [Hit(by_id[i], 1.0 - relevance[i]) for i in hit_ids]


def select_over(
    chunks: dict[Position, Chunk],
    relevance: dict[str, float],
    hit_ids: list[str],
    *,
    total: int,
    k: int = 10,
    window_budget: int = 10_000,
    coherence: float = 0.5,
    mode: str = "both",
) -> tuple[list[Window], bool]:
    """``select_adaptive`` on the hits named by ``hit_ids``, characters counted with ``len``,
    its part-taken chunk cut as the retriever cuts it."""
    windows, over = select_adaptive(
        hits_of(chunks, relevance, hit_ids),
        chunks,
        relevance,
        k=k,
        total_budget=total,
        window_budget=window_budget,
        mode=mode,
        length_function=len,
        coherence=coherence,  # type: ignore[arg-type]
    )
    return cut_windows(windows, len), over


def select(
    chunks: dict[Position, Chunk],
    relevance: dict[str, float],
    hit_ids: list[str],
    *,
    total: int,
    **options: Any,
) -> list[Window]:
    """The windows of :func:`select_over`, which must fit ``total``."""
    windows, over = select_over(chunks, relevance, hit_ids, total=total, **options)
    assert not over
    return windows


def extents(windows: list[Window]) -> list[tuple[str | None, int | None, int | None]]:
    return [(w.chunks[0].file_id, w.chunks[0].index, w.chunks[-1].index) for w in windows]


def background(chunks: dict[Position, Chunk], value: float = 0.1) -> dict[str, float]:
    return {chunk.id: value for chunk in chunks.values()}


def test_a_relevant_run_grows_and_an_isolated_hit_stays_one_chunk() -> None:
    chunks = corpus({"a": 10, "b": 10})
    relevance = background(chunks) | {"a:5": 0.8, "a:4": 0.7, "a:6": 0.7, "b:3": 0.6}
    windows = select(chunks, relevance, ["a:5", "b:3"], total=3 * SIZE)
    assert extents(windows) == [("a", 4, 6)]  # the run beats the weaker, isolated hit
    windows = select(chunks, relevance, ["a:5", "b:3"], total=4 * SIZE)
    assert extents(windows) == [("a", 4, 6), ("b", 3, 3)]  # the hit before a weak neighbour


def test_irrelevant_neighbours_lose_to_the_next_hit() -> None:
    chunks = corpus({"a": 10, "b": 10, "c": 10})
    relevance = background(chunks) | {"a:5": 0.8, "b:5": 0.6, "c:5": 0.55}
    windows = select(chunks, relevance, ["a:5", "b:5", "c:5"], total=3 * SIZE)
    assert extents(windows) == [("a", 5, 5), ("b", 5, 5), ("c", 5, 5)]


def test_one_weak_chunk_between_two_strong_ones_is_bridged() -> None:
    chunks = corpus({"a": 10, "d": 10})
    relevance = background(chunks, 0.2) | {"a:3": 0.8, "a:5": 0.75, "d:5": 0.52}
    windows = select(chunks, relevance, ["a:3", "a:5", "d:5"], total=3 * SIZE)
    assert extents(windows) == [("a", 3, 5)]  # one window, the weak a:4 joining the two hits
    assert [hit.chunk.id for hit in windows[0].hits] == ["a:3", "a:5"]


def test_a_bridge_is_never_worth_more_than_its_stronger_side() -> None:
    """Pulled from both sides at coherence 0.75, the weak a:4 would be worth 1.2, above both
    hits (0.8): capped at 0.8, the run it joins lends its neighbours no more than a hit's
    lead, so the next hit (b:5, 0.7) beats a:6 (0.75 * 0.8 = 0.6) to the last chunk."""
    chunks = corpus({"a": 10, "b": 10})
    relevance = background(chunks, 0.0) | {"a:3": 0.8, "a:5": 0.8, "b:5": 0.7}
    windows = select(chunks, relevance, ["a:3", "a:5", "b:5"], total=4 * SIZE, coherence=0.75)
    assert extents(windows) == [("a", 3, 5), ("b", 5, 5)]


def test_coherence_zero_is_plain_top_k() -> None:
    chunks = corpus({"a": 20})
    relevance = background(chunks, 0.3) | {"a:2": 0.9, "a:9": 0.8, "a:15": 0.7}
    relevance |= {"a:3": 0.69, "a:10": 0.68}  # strong neighbours, still below every hit
    windows = select(chunks, relevance, ["a:2", "a:9", "a:15"], total=3 * SIZE, coherence=0.0)
    assert extents(windows) == [("a", 2, 2), ("a", 9, 9), ("a", 15, 15)]


def test_a_filtered_or_missing_chunk_is_a_gap_never_crossed() -> None:
    chunks = corpus({"a": 10})
    relevance = background(chunks, 0.7) | {"a:5": 0.8}
    del chunks[("a", 6)]  # hidden by the caller's filter
    windows = select(chunks, relevance, ["a:5"], total=6 * SIZE, window_budget=6 * SIZE)
    assert all(w.chunks[-1].index is not None and w.chunks[-1].index <= 5 for w in windows)
    assert extents(windows) == [("a", 0, 5)]


def test_another_version_of_the_file_is_a_gap() -> None:
    chunks = corpus({"a": 10})
    chunks[("a", 4)] = make_chunk("a", 4, version="v2")
    relevance = background(chunks, 0.7) | {"a:5": 0.8}
    windows = select(chunks, relevance, ["a:5"], total=8 * SIZE)
    assert extents(windows) == [("a", 5, 9)]


def test_at_most_k_windows_and_never_over_budget() -> None:
    chunks = corpus({"a": 30})
    relevance = background(chunks, 0.0) | {f"a:{i}": 0.9 - i / 100 for i in range(0, 30, 3)}
    hits = [f"a:{i}" for i in range(0, 30, 3)]
    windows = select(chunks, relevance, hits, total=7 * SIZE + 50, k=4)
    assert len(windows) <= 4
    assert sum(len(w.text) for w in windows) <= 7 * SIZE + 50


def test_window_budget_caps_one_window() -> None:
    chunks = corpus({"a": 20})
    relevance = background(chunks, 0.79) | {"a:10": 0.8}
    windows = select(chunks, relevance, ["a:10"], total=20 * SIZE, window_budget=3 * SIZE)
    assert [len(w.chunks) for w in windows] == [3]


def test_a_best_hit_longer_than_the_whole_budget_comes_back_alone_and_whole() -> None:
    big = Chunk(id="a:0", text="x" * 500, file_id="a", index=0, start=0)
    small = make_chunk("a", 1)
    windows, over = select_adaptive(
        [Hit(big, 0.1), Hit(small, 0.2)],
        {("a", 0): big, ("a", 1): small},
        {"a:0": 0.9, "a:1": 0.8},
        k=4,
        total_budget=200,
        window_budget=1000,
        mode="both",
        length_function=len,
    )
    assert over
    assert [w.text for w in windows] == ["x" * 500]


def test_windows_are_ranked_by_their_best_distance() -> None:
    chunks = corpus({"a": 10, "b": 10})
    relevance = background(chunks) | {"a:5": 0.6, "b:5": 0.9}
    windows = select(chunks, relevance, ["b:5", "a:5"], total=2 * SIZE)
    assert [w.chunks[0].file_id for w in windows] == ["b", "a"]
    assert windows[0].score < windows[1].score


def test_plan_stays_inside_the_budget_reach() -> None:
    chunks = corpus({"a": 50})
    hits = [Hit(chunks[("a", i)], 0.1) for i in (10, 30)]
    # two whole chunks a side, and the third, which the budget's last step may take in part
    planned = plan_adaptive_fetch(hits, total_budget=3 * SIZE, mode="both", length_function=len)
    assert sorted(planned) == [("a", i) for i in (7, 8, 9, 11, 12, 13, 27, 28, 29, 31, 32, 33)]
    one = plan_adaptive_fetch(hits, total_budget=SIZE, mode="both", length_function=len)
    assert sorted(one) == [("a", i) for i in (9, 11, 29, 31)]
    only_next = plan_adaptive_fetch(hits, total_budget=3 * SIZE, mode="next", length_function=len)
    assert sorted(only_next) == [("a", i) for i in (11, 12, 13, 31, 32, 33)]


# ---- properties ----------------------------------------------------------------------------------


@st.composite
def scenes(draw: st.DrawFn) -> tuple[dict[Position, Chunk], dict[str, float], list[str], int, int]:
    files = draw(st.dictionaries(st.sampled_from("abc"), st.integers(1, 12), min_size=1))
    chunks: dict[Position, Chunk] = {}
    for file_id, count in files.items():
        for index in range(count):
            if draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()):
                continue  # a gap: filtered out or missing
            size = draw(st.integers(20, 150))
            version = draw(st.sampled_from(["v1", "v1", "v1", "v2"]))
            chunks[(file_id, index)] = make_chunk(file_id, index, version, size)
    if not chunks:
        chunks[("a", 0)] = make_chunk("a", 0)
    relevance = {chunk.id: draw(st.floats(-1, 1, allow_nan=False)) for chunk in chunks.values()}
    ids = sorted(relevance)
    hit_ids = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=8, unique=True))
    hit_ids.sort(key=lambda i: -relevance[i])
    total = draw(st.integers(1, 900))
    k = draw(st.integers(1, 6))
    return chunks, relevance, hit_ids, total, k


@settings(max_examples=300, deadline=None)
@given(scenes(), st.sampled_from([0.0, 0.3, 0.5, 1.0]), st.sampled_from(["both", "next", "prev"]))
def test_budget_contiguity_and_provenance_hold_for_any_input(
    scene: tuple[dict[Position, Chunk], dict[str, float], list[str], int, int],
    coherence: float,
    mode: str,
) -> None:
    chunks, relevance, hit_ids, total, k = scene
    windows, over = select_over(
        chunks,
        relevance,
        hit_ids,
        total=total,
        k=k,
        window_budget=400,
        coherence=coherence,
        mode=mode,
    )
    if over:
        assert len(windows) == 1 and len(windows[0].chunks) == 1
        assert len(windows[0].text) > total
        return
    assert sum(len(w.text) for w in windows) <= total
    assert len(windows) <= k
    seen: set[str] = set()
    hit_set = set(hit_ids)
    for window in windows:
        indexes = [c.index for c in window.chunks]
        assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))  # type: ignore[operator]
        assert len({(c.file_id, c.version) for c in window.chunks}) == 1
        for chunk in window.chunks:  # each is the stored chunk, or a part of it at a cut end
            stored = chunks[(chunk.file_id, chunk.index)]  # type: ignore[index]
            if chunk is not stored:
                assert window.cut is not None
                assert chunk is window.chunks[-1 if window.cut.side == "next" else 0]
                offset = chunk.start - stored.start  # type: ignore[operator]
                assert offset >= 0 and len(chunk.text) < len(stored.text)
                assert stored.text[offset : offset + len(chunk.text)] == chunk.text
        assert window.hits and {h.chunk.id for h in window.hits} <= hit_set
        assert not seen & {c.id for c in window.chunks}
        seen |= {c.id for c in window.chunks}
        if mode == "next":
            assert window.chunks[0].id in hit_set
        if mode == "prev":
            assert window.chunks[-1].id in hit_set
    scores = [w.score for w in windows]
    assert scores == sorted(scores)


@settings(max_examples=100, deadline=None)
@given(scenes(), st.randoms(use_true_random=False))
def test_the_result_does_not_depend_on_the_store_order(
    scene: tuple[dict[Position, Chunk], dict[str, float], list[str], int, int],
    rng: random.Random,
) -> None:
    chunks, relevance, hit_ids, total, k = scene
    hits = hits_of(chunks, relevance, hit_ids)
    items = list(chunks.items())
    rng.shuffle(items)
    arguments = {
        "k": k,
        "total_budget": total,
        "window_budget": 400,
        "mode": "both",
        "length_function": len,
    }
    first = select_adaptive(hits, chunks, relevance, **arguments)  # type: ignore[arg-type]
    second = select_adaptive(hits, dict(items), relevance, **arguments)  # type: ignore[arg-type]
    assert first == second


@pytest.mark.parametrize("coherence", [0.0, 0.5, 1.0])
def test_selection_is_unchanged_by_rescaling_similarities(coherence: float) -> None:
    chunks = corpus({"a": 15, "b": 15})
    rng = random.Random(7)
    relevance = {chunk.id: rng.uniform(0, 0.5) for chunk in chunks.values()}
    hit_ids = sorted(relevance, key=lambda i: -relevance[i])[:6]
    base = select(chunks, relevance, hit_ids, total=6 * SIZE, coherence=coherence)
    scaled = {key: 3.0 * value - 0.7 for key, value in relevance.items()}
    assert extents(select(chunks, scaled, hit_ids, total=6 * SIZE, coherence=coherence)) == (
        extents(base)
    )


@st.composite
def even_scenes(draw: st.DrawFn) -> tuple[dict[Position, Chunk], dict[str, float], list[str]]:
    """Files of chunks of one length (what the plan assumes), hits anywhere, any relevance."""
    files = draw(st.dictionaries(st.sampled_from("ab"), st.integers(1, 30), min_size=1))
    chunks = corpus(files)
    relevance = {chunk.id: draw(st.floats(-1, 1, allow_nan=False)) for chunk in chunks.values()}
    hit_ids = draw(
        st.lists(st.sampled_from(sorted(relevance)), min_size=1, max_size=10, unique=True)
    )
    hit_ids.sort(key=lambda i: -relevance[i])
    return chunks, relevance, hit_ids


@settings(max_examples=300, deadline=None)
@given(
    even_scenes(),
    st.integers(1, 12),
    st.integers(1, 4),  # windows of up to 4 chunks: growth stays within the plan's cap of 4
    st.integers(1, 8),
    st.sampled_from([0.0, 0.3, 0.6, 1.0]),
    st.sampled_from(["both", "next", "prev"]),
)
def test_the_plan_fetches_every_chunk_the_selection_could_take(
    scene: tuple[dict[Position, Chunk], dict[str, float], list[str]],
    total_chunks: int,
    window_chunks: int,
    k: int,
    coherence: float,
    mode: str,
) -> None:
    """Selecting from the hits and the planned neighbours alone gives the windows that
    selecting from every chunk gives: the plan leaves out only chunks that cannot be taken
    (the budget's reach, the window budget's, and the chunk that bridges two windows)."""
    chunks, relevance, hit_ids = scene
    hits = hits_of(chunks, relevance, hit_ids)
    total, window_budget = total_chunks * SIZE, window_chunks * SIZE
    planned = plan_adaptive_fetch(
        hits, total_budget=total, mode=mode, length_function=len, window_budget=window_budget
    )
    known = {hit.chunk.position for hit in hits} | set(planned)
    fetched = {position: chunk for position, chunk in chunks.items() if position in known}
    arguments: dict[str, Any] = {
        "k": k,
        "total_budget": total,
        "window_budget": window_budget,
        "mode": mode,
        "length_function": len,
        "coherence": coherence,
    }
    assert select_adaptive(hits, fetched, relevance, **arguments) == (
        select_adaptive(hits, chunks, relevance, **arguments)
    )


@settings(max_examples=300, deadline=None)
@given(
    even_scenes(),
    st.integers(1, 12),
    st.integers(1, 4),
    st.sampled_from(["both", "next", "prev"]),
)
def test_a_survey_plan_at_the_chunks_length_holds_the_plan_of_its_read_hits(
    scene: tuple[dict[Position, Chunk], dict[str, float], list[str]],
    total_chunks: int,
    window_chunks: int,
    mode: str,
) -> None:
    """Before any hit is read, a plan made at the chunks' own length asks for every hit and
    for everything the plan of the hits, once read, needs: one fetch, no second."""
    chunks, relevance, hit_ids = scene
    hits = hits_of(chunks, relevance, hit_ids)
    unread = [replace(hit, chunk=replace(hit.chunk, text="")) for hit in hits]
    options: dict[str, Any] = {
        "total_budget": total_chunks * SIZE,
        "mode": mode,
        "length_function": len,
        "window_budget": window_chunks * SIZE,
    }
    estimate = plan_adaptive_fetch(unread, typical=(SIZE, SIZE), read=False, **options)
    needed = plan_adaptive_fetch(hits, **options)
    assert {hit.chunk.position for hit in hits} | set(needed) <= set(estimate)
