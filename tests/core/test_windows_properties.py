"""Invariants of the window algorithm, checked on random files, filters, hits and budgets."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.windows import EVERYWHERE, by_position, make_file
from window_retriever.core._assembly import assemble
from window_retriever.core._windows import (
    Chunk,
    Hit,
    Mode,
    Position,
    Window,
    chunk_spans,
    join_texts,
)


@dataclass
class Case:
    sources: dict[str, str]
    chunks: dict[Position, Chunk]  # everything stored
    visible: dict[Position, Chunk]  # what the caller's filter lets through
    hits: list[Hit]
    k: int
    budget: int
    mode: Mode


@st.composite
def cases(draw: st.DrawFn) -> Case:
    sources: dict[str, str] = {}
    files = []
    for file_id in draw(st.sampled_from([["a"], ["a", "b"], ["a", "b", "f"]])):
        sizes = draw(st.lists(st.integers(1, 30), min_size=1, max_size=12))
        overlap = draw(st.integers(0, 8))
        sources[file_id], chunks = make_file(file_id, sizes, overlap)
        files.append(chunks)
    everything = by_position(*files)
    hidden = draw(st.sets(st.sampled_from(sorted(everything)), max_size=len(everything) // 2))
    visible = {p: c for p, c in everything.items() if p not in hidden}
    hit_positions = draw(st.lists(st.sampled_from(sorted(visible)), min_size=1, max_size=8))
    distances = draw(
        st.lists(
            st.floats(0, 2, allow_nan=False),
            min_size=len(hit_positions),
            max_size=len(hit_positions),
        )
    )
    hits = [Hit(visible[p], d) for p, d in zip(hit_positions, sorted(distances), strict=True)]
    return Case(
        sources=sources,
        chunks=everything,
        visible=visible,
        hits=hits,
        k=draw(st.integers(1, 5)),
        budget=draw(st.integers(1, 150)),
        mode=draw(st.sampled_from(["both", "next", "prev"])),
    )


def windows_of(case: Case, visible: dict[Position, Chunk] | None = None) -> list[Window]:
    assembly = assemble(
        case.hits,
        case.visible if visible is None else visible,
        EVERYWHERE,
        k=case.k,
        budget=case.budget,
        mode=case.mode,
        length_function=len,
    )
    assert assembly.complete
    return assembly.windows


PROPERTY = settings(max_examples=200, deadline=None)


@PROPERTY
@given(case=cases())
def test_windows_are_contiguous_runs_of_one_file_without_hidden_chunks(case: Case) -> None:
    for window in windows_of(case):
        assert len({c.file_id for c in window.chunks}) == 1
        positions = [c.position for c in window.chunks]
        indexes = [c.index for c in window.chunks]
        assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))  # type: ignore[arg-type]
        assert all(p in case.visible for p in positions)


@PROPERTY
@given(case=cases())
def test_window_text_is_exactly_the_source_span(case: Case) -> None:
    for window in windows_of(case):
        source = case.sources[window.chunks[0].file_id]  # type: ignore[index]
        assert window.text == source[window.start_index : window.end_index]
        assert window.text == join_texts(window.chunks)
        for chunk, (start, end) in zip(window.chunks, chunk_spans(window.chunks), strict=True):
            assert window.text[start:end] == chunk.text


@PROPERTY
@given(case=cases())
def test_windows_respect_the_budget_unless_a_hit_alone_exceeds_it(case: Case) -> None:
    for window in windows_of(case):
        if len(window.hits) == 1:
            assert len(window.text) <= case.budget or len(window.chunks) == 1
        else:  # merged windows: each hit grew at most to the budget (or its own length)
            longest = max(len(c.text) for c in window.chunks)
            assert len(window.text) <= len(window.hits) * max(case.budget, longest)


@PROPERTY
@given(case=cases())
def test_windows_claim_their_hits_and_carry_the_best_score(case: Case) -> None:
    windows = windows_of(case)
    claimed = [hit.chunk.id for window in windows for hit in window.hits]
    for window in windows:
        ids = {c.id for c in window.chunks}
        assert all(hit.chunk.id in ids for hit in window.hits)
        assert window.score == min(hit.distance for hit in window.hits)
    assert [w.score for w in windows] == sorted(w.score for w in windows)
    # every hit lies in at most one window, and fewer than k windows means all hits were used
    assert len(claimed) <= len(case.hits)
    assert len(windows) <= case.k
    if len(windows) < case.k:
        assert len(claimed) == len(case.hits)


@PROPERTY
@given(case=cases())
def test_windows_of_one_file_neither_overlap_nor_touch(case: Case) -> None:
    spans = sorted(
        (w.chunks[0].file_id, w.chunks[0].index, w.chunks[-1].index) for w in windows_of(case)
    )
    for (f1, _, hi1), (f2, lo2, _) in itertools.pairwise(spans):
        if f1 == f2:
            assert lo2 > hi1 + 1  # type: ignore[operator]


@PROPERTY
@given(case=cases())
def test_single_hit_windows_grew_as_far_as_the_budget_allows(case: Case) -> None:
    for window in windows_of(case):
        if len(window.hits) != 1:
            continue
        first, last = window.chunks[0], window.chunks[-1]
        sides = {"both": ("next", "prev"), "next": ("next",), "prev": ("prev",)}[case.mode]
        for side in sides:
            edge = last if side == "next" else first
            step = 1 if side == "next" else -1
            neighbour = case.visible.get((edge.file_id, edge.index + step))  # type: ignore[arg-type,operator]
            if neighbour is None:
                continue
            run = [*window.chunks, neighbour] if side == "next" else [neighbour, *window.chunks]
            assert len(join_texts(run)) > case.budget


@PROPERTY
@given(case=cases(), seed=st.integers(0, 2**32 - 1))
def test_result_does_not_depend_on_the_order_the_store_returns_chunks(
    case: Case, seed: int
) -> None:
    items = list(case.visible.items())
    random.Random(seed).shuffle(items)
    assert windows_of(case, dict(items)) == windows_of(case)


@PROPERTY
@given(case=cases())
def test_one_sided_modes_never_reach_past_the_hits(case: Case) -> None:
    for window in windows_of(case):
        hit_indexes = [h.chunk.index for h in window.hits]
        if case.mode == "next":
            assert window.chunks[0].index == min(hit_indexes)  # type: ignore[type-var]
        if case.mode == "prev":
            assert window.chunks[-1].index == max(hit_indexes)  # type: ignore[type-var]
