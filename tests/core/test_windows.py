"""The pure window algorithm: growth, gaps, merging, ranking, planning, overlap trimming."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.helpers.windows import EVERYWHERE, by_position, make_file
from window_retriever.core._assembly import assemble, plan_needs
from window_retriever.core._windows import (
    Chunk,
    Hit,
    Mode,
    Position,
    Window,
    fit_total,
    join_texts,
    plan_fetch,
)


def run(
    hits: Sequence[Hit],
    chunks: dict[Position, Chunk],
    *,
    k: int = 4,
    budget: int = 100,
    mode: Mode = "both",
    fetched: set[Position] | None = None,
) -> list[Window]:
    assembly = assemble(
        hits,
        chunks,
        EVERYWHERE if fetched is None else fetched,
        k=k,
        budget=budget,
        mode=mode,
        length_function=len,
    )
    assert assembly.complete
    return assembly.windows


def indexes(window: Window) -> list[int | None]:
    return [c.index for c in window.chunks]


# ---- growth -------------------------------------------------------------------------------


def test_both_alternates_after_then_before() -> None:
    _, chunks = make_file("f", [10] * 9)
    hit = Hit(chunks[4], 0.1)
    # 30 characters: the hit, then i+1, then i-1
    assert indexes(run([hit], by_position(chunks), budget=30)[0]) == [3, 4, 5]
    # 40 characters: then i+2
    assert indexes(run([hit], by_position(chunks), budget=40)[0]) == [3, 4, 5, 6]
    assert indexes(run([hit], by_position(chunks), budget=20)[0]) == [4, 5]


@pytest.mark.parametrize(("mode", "expected"), [("next", [4, 5, 6]), ("prev", [2, 3, 4])])
def test_one_sided_modes(mode: Mode, expected: list[int]) -> None:
    _, chunks = make_file("f", [10] * 9)
    assert (
        indexes(run([Hit(chunks[4], 0.1)], by_position(chunks), budget=30, mode=mode)[0])
        == expected
    )


def test_edge_of_file_lets_the_other_direction_take_the_budget() -> None:
    _, chunks = make_file("f", [10] * 9)
    assert indexes(run([Hit(chunks[0], 0.1)], by_position(chunks), budget=40)[0]) == [0, 1, 2, 3]
    assert indexes(run([Hit(chunks[8], 0.1)], by_position(chunks), budget=40)[0]) == [5, 6, 7, 8]


def test_a_gap_stops_one_direction_and_is_never_joined_across() -> None:
    _, chunks = make_file("f", [10] * 9)
    visible = by_position(chunks)
    del visible[("f", 5)]  # filtered out or missing: asked of the store, not returned
    window = run([Hit(chunks[4], 0.1)], visible, budget=50)[0]
    assert indexes(window) == [0, 1, 2, 3, 4]


def test_first_neighbour_that_does_not_fit_stops_its_direction() -> None:
    # i+1 is long, i+2 short: i+2 must not be taken past i+1; the before side goes on.
    _, chunks = make_file("f", [10, 10, 10, 10, 50, 5, 10])
    window = run([Hit(chunks[3], 0.1)], by_position(chunks), budget=35)[0]
    # i+2 (5 characters) would still fit in 35, but growth never skips a chunk
    assert indexes(window) == [1, 2, 3]


def test_hit_longer_than_budget_comes_back_alone_and_whole() -> None:
    _, chunks = make_file("f", [10, 80, 10])
    window = run([Hit(chunks[1], 0.1)], by_position(chunks), budget=30)[0]
    assert indexes(window) == [1]
    assert window.text == chunks[1].text


def test_other_version_of_the_file_is_a_gap() -> None:
    _, old = make_file("f", [10] * 5, version="old")
    _, new = make_file("f", [10] * 5, version="new")
    mixed = by_position(new[:3], old[3:])  # a re-ingest killed half-way
    window = run([Hit(new[2], 0.1)], mixed, budget=100)[0]
    assert indexes(window) == [0, 1, 2]
    assert {c.version for c in window.chunks} == {"new"}


# ---- merging, absorbing, ranking ----------------------------------------------------------


def test_overlapping_windows_merge_with_overlap_trimmed_and_min_score() -> None:
    source, chunks = make_file("f", [20] * 10, overlap=5)
    hits = [Hit(chunks[2], 0.5), Hit(chunks[5], 0.2)]
    windows = run(hits, by_position(chunks), budget=50)
    assert len(windows) == 1
    (window,) = windows
    assert window.score == 0.2
    assert [h.chunk.id for h in window.hits] == ["f:2", "f:5"]
    assert window.text == source[window.start_index : window.end_index]


def test_touching_windows_merge() -> None:
    _, chunks = make_file("f", [10] * 10)
    # each hit grows by one chunk on each side: [1..3] and [4..6] touch
    windows = run([Hit(chunks[2], 0.3), Hit(chunks[5], 0.4)], by_position(chunks), budget=30)
    assert [indexes(w) for w in windows] == [[1, 2, 3, 4, 5, 6]]


def test_windows_never_cross_files() -> None:
    _, a = make_file("a", [10] * 3)
    _, b = make_file("b", [10] * 3)
    windows = run([Hit(a[2], 0.1), Hit(b[0], 0.2)], by_position(a, b), budget=100)
    assert [{c.file_id for c in w.chunks} for w in windows] == [{"a"}, {"b"}]


def test_covered_hits_are_absorbed_and_more_candidates_fill_k() -> None:
    _, a = make_file("a", [10] * 10)
    _, b = make_file("b", [10] * 10)
    hits = [Hit(a[4], 0.1), Hit(a[5], 0.2), Hit(a[3], 0.3), Hit(b[7], 0.4)]
    windows = run(hits, by_position(a, b), k=2, budget=30)
    assert len(windows) == 2
    assert [h.chunk.id for h in windows[0].hits] == ["a:4", "a:5", "a:3"]
    assert windows[1].hits[0].chunk.id == "b:7"


def test_windows_are_ranked_by_their_best_hit() -> None:
    _, a = make_file("a", [10] * 10)
    _, b = make_file("b", [10] * 10)
    # b's window holds the best hit (absorbed later), so it must come first
    hits = [Hit(a[1], 0.3), Hit(b[5], 0.4), Hit(b[5], 0.1)]
    windows = run(hits, by_position(a, b), budget=30)
    assert [w.chunks[0].file_id for w in windows] == ["b", "a"]
    assert [w.score for w in windows] == [0.1, 0.3]


def test_at_most_k_windows() -> None:
    _, a = make_file("a", [10] * 40)
    hits = [Hit(a[i], i / 100) for i in range(0, 40, 5)]
    assert len(run(hits, by_position(a), k=3, budget=20)) == 3


def test_chunk_without_window_metadata_is_returned_alone() -> None:
    _, a = make_file("a", [10] * 5)
    loose = Chunk(id="x", text="loose text")
    windows = run([Hit(loose, 0.1), Hit(a[2], 0.2)], by_position(a), budget=30)
    assert windows[0].chunks == (loose,)
    assert windows[0].text == "loose text"


# ---- the total budget, measured whole -----------------------------------------------------


def window(chunks: Sequence[Chunk], *hit_indexes: int) -> Window:
    hits = tuple(Hit(chunks[i], 0.1 * (i + 1)) for i in hit_indexes)
    return Window(chunks=tuple(chunks), hits=hits, text=join_texts(chunks))


def windows_for_fit() -> list[Window]:
    """Three windows of 10, 30 and 10 characters, best first; the middle one's hit is in
    the middle (its outer chunks hold no hit), the last one is its hit alone."""
    _, a = make_file("a", [10])
    _, b = make_file("b", [10] * 3)
    _, f = make_file("f", [10])
    return [window(a, 0), window(b, 1), window(f, 0)]


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (50, [["a:0"], ["b:0", "b:1", "b:2"], ["f:0"]]),  # fits: untouched
        (49, [["a:0"], ["b:0", "b:1", "b:2"]]),  # one over: the last window goes
        (39, [["a:0"], ["b:1"]]),  # the next one keeps only its hit
        (19, [["a:0"]]),
        (5, [["a:0"]]),  # the best window stays even alone over the total
    ],
)
def test_fit_total_drops_and_cuts_the_lowest_ranked_windows_until_the_sum_fits(
    total: int, expected: list[list[str]]
) -> None:
    kept = fit_total(windows_for_fit(), total, len)
    assert [[c.id for c in w.chunks] for w in kept] == expected
    for w in kept:
        assert w.text == join_texts(w.chunks)
    if len(kept) > 1:
        assert sum(len(w.text) for w in kept) <= total


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (40, ["w:0", "w:1", "w:2", "w:3"]),  # fits
        (39, ["w:1", "w:2", "w:3"]),  # first its ends that hold no hit
        (20, ["w:1", "w:2"]),  # then the end farther from the best hit (w:1), with its hit
        (10, ["w:1"]),  # then down to the best hit
        (5, ["w:1"]),  # which comes back alone, over the total
    ],
)
def test_fit_total_cuts_the_one_window_left_toward_its_best_hit(
    total: int, expected: list[str]
) -> None:
    """Measured whole, the one window left may be over the total (a token counter is not
    additive over joins): it is cut, never returned over the total whole."""
    _, chunks = make_file("w", [10] * 4)
    only = window(chunks, 1, 3)  # hits at w:1 (best) and w:3
    (kept,) = fit_total([only], total, len)
    assert [c.id for c in kept.chunks] == expected
    assert kept.text == join_texts(kept.chunks)
    assert {h.chunk.id for h in kept.hits} == {"w:1", "w:3"} & set(expected)


def rare_word_tokens(text: str) -> int:
    """A token-like count: a word of more than 8 letters is rare and costs 3 tokens, so two
    halves of a word cut at a seam cost less apart than joined (not additive over joins)."""
    return sum(3 if len(word) > 8 else 1 for word in text.split())


def test_fit_total_measures_each_window_whole_where_pieces_undercount() -> None:
    # chunks cut inside words: "...worldw" + "ide..." are 2 tokens apart, 3 joined
    source = "hello worldwide greetings to everyone here " * 4
    cuts = list(range(0, len(source), 12))
    chunks = [
        Chunk(f"f:{i}", source[s : s + 12], file_id="f", index=i, start=s, version="v1")
        for i, s in enumerate(cuts)
    ]
    other = [
        Chunk(f"a:{i}", c.text, file_id="a", index=i, start=c.start, version="v1")
        for i, c in enumerate(chunks)
    ]
    hits = [Hit(chunks[4], 0.1), Hit(other[8], 0.2)]
    fetched = {c.position for c in chunks + other if c.position is not None}
    total = 30
    windows = assemble(
        hits,
        by_position(chunks, other),
        fetched,
        k=2,
        budget=20,
        mode="both",
        length_function=rare_word_tokens,
        total_budget=total,
    ).windows
    # measured in pieces the windows fit; measured whole they do not
    assert len(windows) == 2
    assert sum(rare_word_tokens(w.text) for w in windows) > total
    kept = fit_total(windows, total, rare_word_tokens)
    assert sum(rare_word_tokens(w.text) for w in kept) <= total
    assert [w.hits for w in kept] == [w.hits for w in windows]


# ---- incomplete fetches -------------------------------------------------------------------


def test_growth_into_an_unfetched_position_reports_a_need() -> None:
    _, chunks = make_file("f", [10] * 20)
    known = by_position(chunks[8:13])
    assembly = assemble(
        [Hit(chunks[10], 0.1)], known, set(known), k=1, budget=90, mode="both", length_function=len
    )
    assert not assembly.complete
    assert {(n.position, n.direction) for n in assembly.needs} == {
        (("f", 13), "next"),
        (("f", 7), "prev"),
    }
    wanted = plan_needs(assembly.needs)
    assert ("f", 13) in wanted
    assert ("f", 7) in wanted
    # fetch them, and the window completes
    assembly = assemble(
        [Hit(chunks[10], 0.1)],
        by_position(chunks),
        EVERYWHERE,
        k=1,
        budget=90,
        mode="both",
        length_function=len,
    )
    assert assembly.complete
    assert len(assembly.windows[0].chunks) == 9


def test_plan_is_sized_from_the_budget() -> None:
    _, chunks = make_file("f", [100] * 50)
    plan = plan_fetch([Hit(chunks[25], 0.1)], k=1, budget=300, mode="both", length_function=len)
    # 200 characters left at about 80 per chunk: 2 neighbours + 1 to learn the next does not fit
    assert sorted(i for _, i in plan) == [22, 23, 24, 26, 27, 28]
    assert (
        plan_fetch([Hit(chunks[25], 0.1)], k=1, budget=100, mode="both", length_function=len) == []
    )
    nexts = plan_fetch([Hit(chunks[25], 0.1)], k=1, budget=300, mode="next", length_function=len)
    assert sorted(i for _, i in nexts) == [26, 27, 28]


def test_plan_covers_hits_until_k_can_no_longer_merge() -> None:
    _, chunks = make_file("f", [100] * 100)
    hits = [Hit(chunks[i], 0.1) for i in (10, 12, 50, 90)]
    plan = plan_fetch(hits, k=2, budget=300, mode="both", length_function=len)
    planned = {i for _, i in plan}
    # 10 and 12 may merge, so 50 is needed too; 90 is not
    assert {9, 11, 13, 49, 51} <= planned
    assert not planned & {89, 91}


# ---- joining ------------------------------------------------------------------------------


def test_join_trims_overlap_by_start_offsets() -> None:
    a = Chunk("a", "The cat sat", file_id="f", index=0, start=0)
    b = Chunk("b", "sat on the mat.", file_id="f", index=1, start=8)
    assert join_texts([a, b]) == "The cat sat on the mat."


def test_join_restores_dropped_whitespace() -> None:
    a = Chunk("a", "One.", file_id="f", index=0, start=0)
    b = Chunk("b", "Two.", file_id="f", index=1, start=5)
    c = Chunk("c", "Three.", file_id="f", index=2, start=11)
    assert join_texts([a, b, c]) == "One. Two.\nThree."


def test_join_without_offsets_uses_newlines() -> None:
    a = Chunk("a", "One.", file_id="f", index=0)
    b = Chunk("b", "Two.", file_id="f", index=1)
    assert join_texts([a, b]) == "One.\nTwo."
