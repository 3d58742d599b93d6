"""Adaptive windows: hits and their neighbours compete for one budget by relevance.

Plain data in, plain data out, no I/O and no LangChain, like ``_windows``.

Every chunk that could be returned (the search hits and the fetched neighbours that passed the
caller's filter) carries a *relevance* (higher is better): minus its distance to the query in
the store's own space: a hit's as the search measured it, a neighbour's as a wider search
measured it (or, beyond that pool, the pool's farthest distance), or computed from the
embedding the store holds (see ``_adaptive_strategy.Adaptive``). Selection is
greedy over one shared budget. At each step the candidates are

- an unused hit, which would open a new window (or join the window it touches), worth its own
  relevance; and
- the next chunk outward from each window edge, worth its own relevance pulled toward the
  value of the chunk it would join::

      value(neighbour) = relevance(neighbour) + coherence * (value(edge) - relevance(neighbour))

  (only when the edge is the stronger of the two), so a neighbour borrows part of its
  anchor's lead, and a chain of neighbours fades geometrically back to their own relevance.
  A chunk that would join a window to another window (or to an unused hit) is pulled from
  both sides, never above the stronger one, so one weak chunk between two strong ones is
  bridged before a weak chunk on one side is taken.

The candidate of highest value that still fits the budget is taken; one that no longer fits
is dropped for good (the budget only shrinks). When no whole chunk fits, the best candidate
left fills what the budget has left, in part (a hit's head, or the side of a neighbour next to
its window), so the budget is spent as plain top chunks spend it; the part is cut at a
sentence's end once the texts are read (:func:`cut_windows`), and its window says so
(``Window.cut``).

``coherence = 0`` reproduces plain top-k (no neighbour beats the hit the search ranked above
it); ``coherence = 1`` makes every neighbour as good as its hit (blind growth). Because the
rule only compares values, it is unchanged by any increasing affine rescaling of the
relevance: one setting carries across embedding models whose similarities sit on different
scales, and across distance spaces (for unit vectors, squared L2 is affine in cosine).

With ``diversity`` (maximal marginal relevance over the hits' stored embeddings), an unused
hit that would open a *new* window is worth its relevance minus ``diversity`` times its
highest cosine similarity to a hit already chosen (clipped at 0; a window is as like a hit as
the likest of the hits it holds, its neighbours are not compared), that similarity expressed
in the relevance's units::

    value(new hit) = relevance(hit) - diversity * max(0, max cosine(hit, chosen hits))

so a near-copy of a chosen window loses about ``diversity`` and a hit on another topic next to
nothing. It is the classic MMR, ``l * relevance - (1 - l) * redundancy`` with
``l = 1 / (1 + diversity)``: ``diversity = 1`` weighs the two equally, 0 is off (today's
selection, exactly). A hit that touches a window (it would join it) and a neighbour are never
discounted: diversity is between windows, not within one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from window_retriever.core._windows import (
    _DIRECTIONS,
    MAX_PLANNED,
    Chunk,
    Cut,
    Direction,
    Hit,
    LengthFunction,
    Measure,
    Mode,
    Position,
    Window,
    _length,
    join_texts,
)

Similarity = Callable[[str], Sequence[float] | None]
"""A chunk id -> the cosine similarity of every hit to that chunk (``None``: not compared)."""

DEFAULT_COHERENCE = 0.6
"""How far a neighbour's worth is pulled toward the window it would join. Chosen on the two dev
sets (LoCoMo and the Python documentation questions) as the value that did well on both:
docs/benchmarks.md#one-context-budget-spent-where-it-buys-evidence-total_budget-adaptive-windows."""

# How far a window may grow on one side, in chunks, at most; the neighbour fetch asks for no
# more. A neighbour this far out keeps coherence ** 4 of its anchor's lead: next to nothing.
_MAX_REACH = 4


def plan_adaptive_fetch(
    hits: Sequence[Hit],
    *,
    total_budget: int,
    mode: Mode,
    length_function: LengthFunction,
    window_budget: int | None = None,
    measure: Measure | None = None,
    typical: tuple[int, int] | None = None,
    read: bool = True,
) -> list[Position]:
    """Return the neighbour positions that adaptive selection may take, in one batch.

    The budget holds about ``n = total_budget / typical chunk length`` chunks (the hits'
    median length). Only the first ``n + 2`` hits can be chosen (hits are taken in order of
    relevance, and each costs at least one chunk), and no window grows more than
    ``min(n - 1, 4)`` chunks on one side. Nor does a window grow past ``window_budget`` (only
    a merge may): a hit reaches ``(window_budget - s) / (3/4 s)`` chunks on one side, ``s``
    the hits' lower-quartile length (neighbours are chunks like the hits; the quarter allows
    for shorter ones and for the overlap a join trims; one short hit, such as a file's last
    chunk, does not widen every hit's reach). One chunk past each reach is planned too: the
    budget's last step may take it in part (see :class:`~window_retriever.core._windows.Cut`),
    and it joins two windows whose reaches meet there. The plan so depends on two lengths, the
    hits' lower quartile and median: a plan made before the hits are read, from lengths read
    before, nearly always holds it.

    Hits not read yet (known by id, text empty) are planned like the read ones. With
    ``read=False`` no hit is read yet: the plan then holds every hit (a short
    hit far down the ranking may still fill what the budget has left at the end), and is
    made with ``typical``, a short and a median length to plan by, or at length 1 without it
    (the widest plan).
    """
    measure = measure or Measure(length_function)
    windowable = [hit for hit in hits if hit.chunk.position is not None]
    if not windowable:
        return []
    lengths = sorted(measure.text(hit.chunk) for hit in windowable if hit.chunk.text)
    if read:
        short = max(1, lengths[len(lengths) // 4]) if lengths else 1
        middle = max(1, lengths[len(lengths) // 2]) if lengths else 1
    else:
        short, middle = (max(1, length) for length in typical or (1, 1))
    fits = max(1, total_budget // middle)
    reach = min(_MAX_REACH, fits - 1)
    known = {hit.chunk.position for hit in windowable} if read else set()
    planned: dict[Position, None] = {}
    if not read:
        planned |= {hit.chunk.position: None for hit in windowable}  # type: ignore[misc]
    own = reach
    if window_budget is not None:  # the same for every hit, so the plan depends on two lengths
        room = window_budget - short  # any neighbour at all may fit while room is left
        own = min(reach, max(int(room > 0), room // max(1, short * 3 // 4)))
    # ``own`` whole chunks on a side, and one more: the chunk taken in part, or the one that
    # joins two windows whose reaches meet there
    for hit in windowable[: fits + 2]:
        file_id, index = hit.chunk.position  # type: ignore[misc]
        for direction in _DIRECTIONS[mode]:
            sign = 1 if direction == "next" else -1
            for step in range(1, own + 2):
                position = (file_id, index + sign * step)
                if position[1] < 0:
                    break
                if position not in known:
                    planned[position] = None
                if len(planned) >= MAX_PLANNED:
                    return list(planned)
    return list(planned)


@dataclass(slots=True)
class _Run:
    """A window being selected: contiguous chunks of one file version, with their values."""

    chunks: list[Chunk]
    values: list[float]
    length: int
    order: int
    """When the window was opened: ties go to the older window."""
    cut: Cut | None = None
    """Its end chunk on ``cut.side`` is taken in part (the budget's last step)."""

    @property
    def key(self) -> tuple[str | None, str | None]:
        return (self.chunks[0].file_id, self.chunks[0].version)

    @property
    def lo(self) -> int:
        return self.chunks[0].index or 0

    @property
    def hi(self) -> int:
        return self.chunks[-1].index or 0


@dataclass(slots=True)
class _Candidate:
    sort_key: tuple[float, int, int, int]
    """Best first: the highest value, then a hit before a growth, then rank and position."""
    kind: str  # "hit" or "grow"
    chunk: Chunk
    value: float
    run: _Run | None = None
    direction: Direction = "next"


_sort_key = attrgetter("sort_key")


def select_adaptive(
    hits: Sequence[Hit],
    chunks: Mapping[Position, Chunk],
    relevance: Mapping[str, float],
    *,
    k: int,
    total_budget: int,
    window_budget: int,
    mode: Mode,
    length_function: LengthFunction,
    coherence: float = DEFAULT_COHERENCE,
    diversity: float = 0.0,
    similarity: Similarity | None = None,
    measure: Measure | None = None,
) -> tuple[list[Window], bool]:
    """Choose at most ``k`` windows whose lengths add up to at most ``total_budget``.

    Args:
        hits: The search results in rank order (best first), with their distances.
        chunks: Every chunk available, by position: the hits and the fetched neighbours that
            passed the caller's filter. A position not here is a gap.
        relevance: Similarity to the query (higher is better) by chunk id. A chunk without a
            value is never taken as a neighbour.
        k: The most windows to return.
        total_budget: The most that the windows' lengths may add up to.
        window_budget: The largest length one window may grow to (merges may exceed it).
        mode: Which way windows grow: ``"both"``, ``"next"`` or ``"prev"``.
        length_function: The measure of text that both budgets limit.
        coherence: How much of its anchor's value a neighbour borrows, from 0 to 1.
        diversity: What a hit that would open a new window loses per unit of its highest
            cosine similarity to a chosen chunk, in the units of ``relevance`` (0: off).
        similarity: For ``diversity``: given a chunk id, the cosine similarity of every hit
            (in the order of ``hits``) to that chunk, or ``None`` when it is compared to
            nothing (a neighbour, or a hit without a stored embedding: it then discounts
            nothing).
        measure: A cache of lengths to share with the caller.

    Returns:
        The windows, best (minimum distance) first, and whether the result is a single hit
        longer than the whole budget, returned alone and whole.
    """
    measure = measure or Measure(length_function)
    ranked = sorted(range(len(hits)), key=lambda r: (-_relevance(hits[r], relevance), r))
    if not ranked:
        return [], False
    best = hits[0]  # the search's best, by the store's own distance
    if measure.text(best.chunk) > total_budget:
        return [_freeze_single(best)], True

    runs: list[_Run] = []
    taken: dict[Position, _Run] = {}
    taken_ids: set[str] = set()
    dropped: set[tuple[str, str | int]] = set()
    spent = 0
    opened = 0
    rank_of = {hit.chunk.id: r for r, hit in enumerate(hits)}
    redundancy = (
        _Redundancy(len(hits), similarity) if diversity > 0 and similarity is not None else None
    )

    # Without diversity a hit is worth the same at every step: its candidate is made once.
    opening = [
        _Candidate((-value, 0, r, 0), "hit", hits[r].chunk, value)
        for r in ranked
        for value in [_relevance(hits[r], relevance)]
    ]

    def offers() -> list[_Candidate]:
        """Every candidate now, best first: the unused hits and each window's next chunks."""
        found: list[_Candidate] = []
        for r, opener in zip(ranked, opening, strict=True):
            chunk = opener.chunk
            if chunk.id in taken_ids:
                continue
            if redundancy is not None and not _touching(chunk, taken):
                value = opener.value - diversity * redundancy.of(r)
                opener = _Candidate((-value, 0, r, 0), "hit", chunk, value)
            found.append(opener)
        for run in runs:
            if run.chunks[0].position is None:
                continue
            for direction in _DIRECTIONS[mode]:
                grown = _growth(run, direction, chunks, relevance, taken, hits, rank_of, coherence)
                if grown is not None:
                    found.append(grown)
        return sorted(found, key=_sort_key)

    while True:
        chosen = None
        for candidate in offers():
            if (candidate.kind, candidate.chunk.id) in dropped:
                continue
            cost, allowed = _cost(candidate, runs, taken, measure, window_budget, k)
            if allowed and spent + cost <= total_budget:
                chosen = candidate
                break
            dropped.add((candidate.kind, candidate.chunk.id))
        if chosen is None:
            break
        spent = _apply(chosen, runs, taken, taken_ids, measure, opened)
        opened += 1
        if redundancy is not None:
            redundancy.take(chosen.chunk.id)
    # No whole chunk fits any more: the best candidate fills what is left, in part.
    part = _part(
        offers(), runs, taken, measure, left=total_budget - spent, window_budget=window_budget, k=k
    )
    if part is not None:
        candidate, cut = part
        _apply(candidate, runs, taken, taken_ids, measure, opened)
        holder = _holder(candidate.chunk, runs, taken)
        assert holder is not None  # noqa: S101 - just taken
        holder.cut = cut

    hits_by_run: dict[int, list[Hit]] = {id(run): [] for run in runs}
    for hit in hits:
        holder = _holder(hit.chunk, runs, taken)
        if holder is not None:
            hits_by_run[id(holder)].append(hit)
    windows = [
        Window(
            chunks=tuple(run.chunks),
            hits=tuple(hits_by_run[id(run)]),
            text=measure.join(run.chunks),
            cut=run.cut,
        )
        for run in runs
        if hits_by_run[id(run)]
    ]
    first_rank = {id(w): min(rank_of[h.chunk.id] for h in w.hits) for w in windows}
    windows.sort(key=lambda w: (w.score, first_rank[id(w)]))
    return windows, False


class _Redundancy:
    """Each hit's highest cosine similarity (at least 0) to the compared chunks chosen so far.

    Compared: those ``similarity`` answers for (the hits, in the retrieval).
    """

    def __init__(self, count: int, similarity: Similarity) -> None:
        self._similarity = similarity
        self._best = [0.0] * count

    def of(self, rank: int) -> float:
        return self._best[rank]

    def take(self, chunk_id: str) -> None:
        row = self._similarity(chunk_id)
        if row is not None:
            self._best = [max(old, new) for old, new in zip(self._best, row, strict=True)]


def _relevance(hit: Hit, relevance: Mapping[str, float]) -> float:
    # A hit without a relevance (no finite distance either): rank it below all others.
    value = relevance.get(hit.chunk.id)
    return value if value is not None else -1e9 - hit.distance


def _holder(chunk: Chunk, runs: Sequence[_Run], taken: Mapping[Position, _Run]) -> _Run | None:
    if chunk.position is None:
        return next((run for run in runs if run.chunks[0].id == chunk.id), None)
    run = taken.get(chunk.position)
    if run is not None and run.key == (chunk.file_id, chunk.version):
        return run
    return None


def _growth(
    run: _Run,
    direction: Direction,
    chunks: Mapping[Position, Chunk],
    relevance: Mapping[str, float],
    taken: Mapping[Position, _Run],
    hits: Sequence[Hit],
    rank_of: Mapping[str, int],
    coherence: float,
) -> _Candidate | None:
    """The next chunk outward from ``run`` in ``direction``, valued, or None at an edge."""
    sign = 1 if direction == "next" else -1
    edge = run.hi if direction == "next" else run.lo
    file_id, version = run.key
    assert file_id is not None  # noqa: S101 - runs without positions never grow
    position = (file_id, edge + sign)
    neighbour = chunks.get(position)
    if position[1] < 0 or neighbour is None or neighbour.version != version:
        return None
    if position in taken:
        return None  # another window already holds it: the two merged when it was taken
    own = relevance.get(neighbour.id)
    if own is None:
        return None
    anchors = [run.values[-1] if direction == "next" else run.values[0]]
    beyond_position = (file_id, edge + 2 * sign)
    beyond = taken.get(beyond_position)
    if beyond is not None and beyond.key == run.key:
        anchors.append(beyond.values[0] if direction == "next" else beyond.values[-1])
    else:
        after = chunks.get(beyond_position)
        if after is not None and after.version == version and after.id in rank_of:
            anchors.append(relevance.get(after.id, own))  # the chunk between two hits
    # Each stronger side pulls the chunk toward itself; a bridge is pulled from both sides
    # (with coherence 0.5, to the mean of its two anchors), never above the stronger one.
    pulled = own + sum(coherence * (anchor - own) for anchor in anchors if anchor > own)
    value = min(pulled, max(own, *anchors))
    rank = rank_of.get(neighbour.id, len(hits))
    return _Candidate((-value, 1, rank, position[1]), "grow", neighbour, value, run, direction)


def _cost(
    candidate: _Candidate,
    runs: Sequence[_Run],
    taken: Mapping[Position, _Run],
    measure: Measure,
    window_budget: int,
    k: int,
) -> tuple[int, bool]:
    """What taking ``candidate`` adds to the total, and whether it is allowed at all."""
    chunk = candidate.chunk
    touching = _touching(chunk, taken)
    if candidate.kind == "hit":
        if not touching and len(runs) >= k:
            return 0, False  # k windows already: a new one is not allowed
        if not touching:
            return measure.text(chunk), True
    before = sum(run.length for run in touching)
    if candidate.run is not None and candidate.run not in touching:
        touching.insert(0, candidate.run)
        before += candidate.run.length
    joined = sorted([*(c for run in touching for c in run.chunks), chunk], key=_index)
    after = measure.run(joined)
    grown = candidate.kind == "grow" and len(touching) == 1
    if grown and after > window_budget:
        return 0, False
    return after - before, True


def _touching(chunk: Chunk, taken: Mapping[Position, _Run]) -> list[_Run]:
    """The windows that end just before or start just after ``chunk``, of its version."""
    if chunk.position is None:
        return []
    file_id, index = chunk.position
    found: list[_Run] = []
    for neighbour in (index - 1, index + 1):
        run = taken.get((file_id, neighbour))
        if run is not None and run.key == (file_id, chunk.version) and run not in found:
            found.append(run)
    return found


def _index(chunk: Chunk) -> int:
    return chunk.index or 0


def _apply(
    candidate: _Candidate,
    runs: list[_Run],
    taken: dict[Position, _Run],
    taken_ids: set[str],
    measure: Measure,
    opened: int,
) -> int:
    """Take ``candidate``: open, grow or merge windows; return the new total length."""
    chunk = candidate.chunk
    touching = _touching(chunk, taken)
    if candidate.run is not None and candidate.run not in touching:
        touching.insert(0, candidate.run)
    pairs = sorted(
        [
            *((c, v) for run in touching for c, v in zip(run.chunks, run.values, strict=True)),
            (chunk, candidate.value),
        ],
        key=lambda pair: _index(pair[0]),
    )
    for run in touching:
        runs.remove(run)
    order = min((run.order for run in touching), default=opened)
    merged = _Run(
        chunks=[c for c, _ in pairs],
        values=[v for _, v in pairs],
        length=measure.run([c for c, _ in pairs]),
        order=order,
    )
    runs.append(merged)
    runs.sort(key=lambda run: run.order)
    for c in merged.chunks:
        if c.position is not None:
            taken[c.position] = merged
        taken_ids.add(c.id)
    return sum(run.length for run in runs)


def _part(
    candidates: Sequence[_Candidate],
    runs: Sequence[_Run],
    taken: Mapping[Position, _Run],
    measure: Measure,
    *,
    left: int,
    window_budget: int,
    k: int,
) -> tuple[_Candidate, Cut] | None:
    """The best candidate to take in part, with the room it is cut to; ``None`` if none.

    A hit that opens a window keeps its head (as plain top chunks' last one does); a chunk that
    grows a window keeps the part next to it. A part must add at least :data:`_LEAST_PART` of
    what its whole chunk would. A chunk that would join two windows is not cut (its part would
    join neither), nor one that would join a hit to a window.
    """
    for candidate in candidates:
        touching = _touching(candidate.chunk, taken)
        if candidate.kind == "hit":
            whole = measure.text(candidate.chunk)
            if not touching and len(runs) < k and left >= _LEAST_PART * whole:
                return candidate, Cut("next", left)
            continue
        run = candidate.run
        assert run is not None  # noqa: S101 - a growth has its window
        whole = measure.run(sorted([*run.chunks, candidate.chunk], key=_index)) - run.length
        room = min(left, window_budget - run.length)
        if touching == [run] and room > 0 and room >= _LEAST_PART * whole:
            return candidate, Cut(candidate.direction, run.length + room)
    return None


_LEAST_PART = 0.1
"""A part under a tenth of its chunk is not worth a seam (nor the read of the chunk)."""


def cut_windows(windows: Sequence[Window], length_function: LengthFunction) -> list[Window]:
    """Cut each window's part-taken chunk (see :class:`Cut`) to its room, on the texts as read.

    Selection chooses by lengths alone (on stand-ins too); where the part ends depends on the
    text, so the cut is made here, once the chunks are read. The part ends (or, for a window's
    first chunk, starts) at a sentence's end where that keeps at least half of what the room
    holds, else at a line's end, else at a word's end, else where the room ends
    (:func:`_cut_chunk`). Selection takes a part only where the room holds something past
    what the window already holds (the splitter's overlap); should none be left, the chunk is
    left out (and its window, if it held nothing else).
    """
    kept: list[Window] = []
    for window in windows:
        cut = window.cut
        if cut is None:
            kept.append(window)
            continue
        whole = window.chunks[-1] if cut.side == "next" else window.chunks[0]
        rest = window.chunks[:-1] if cut.side == "next" else window.chunks[1:]
        part = _cut_chunk(whole, rest, cut, length_function)
        chunks = rest if part is None else ((*rest, part) if cut.side == "next" else (part, *rest))
        by_id = {chunk.id: chunk for chunk in chunks}
        hits = tuple(
            replace(hit, chunk=by_id[hit.chunk.id]) for hit in window.hits if hit.chunk.id in by_id
        )
        if hits:
            cut_off = part is not None and part is not whole
            kept.append(Window(chunks, hits, join_texts(chunks), cut if cut_off else None))
    return kept


# Where a part may end (or start): after a sentence's closing mark (and any closing quote or
# bracket) before a space, or at a blank line; at a line's end; at a word's end.
_BOUNDARIES = (
    re.compile(r"[.!?][\"')\]]*(?=\s)|(?=\n[ \t]*\n)"),
    re.compile(r"(?=\n)"),
    re.compile(r"(?=\s)"),
)


def _cut_chunk(
    chunk: Chunk, rest: Sequence[Chunk], cut: Cut, length_function: LengthFunction
) -> Chunk | None:
    """The part of ``chunk`` kept in the window, or ``None`` when no part adds anything.

    The room holds at most so many characters of the chunk (its head, or its tail). The part
    ends (or starts) at the first kind of boundary, a sentence's end, a line's end, a word's
    end, where it still adds at least half of what the room holds; else where the room ends.
    """
    text = chunk.text
    before = _length(length_function, join_texts(rest)) if rest else 0

    def part(size: int) -> Chunk:
        if cut.side == "next":
            return replace(chunk, text=text[:size])
        return replace(
            chunk, text=text[len(text) - size :], start=_moved(chunk.start, len(text) - size)
        )

    def added(size: int) -> int:
        joined = (*rest, part(size)) if cut.side == "next" else (part(size), *rest)
        return _length(length_function, join_texts(joined)) - before

    room = cut.room - before
    low, high = 0, len(text)  # the most characters that fit: added(low) <= room
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if added(middle) <= room else (low, middle - 1)
    most = added(low) if low else 0
    if most <= 0:
        return None
    if low == len(text):
        return chunk  # it fits whole after all (a join can be shorter than its measure)
    for pattern in _BOUNDARIES:
        if cut.side == "next":
            sizes = [match.end() for match in pattern.finditer(text)]
        else:
            sizes = [len(text) - _skip_space(text, match.end()) for match in pattern.finditer(text)]
        fitting = [size for size in sizes if 0 < size <= low]
        if fitting and 2 * added(max(fitting)) >= most:
            return part(max(fitting))
    return part(low)


def _moved(start: int | None, by: int) -> int | None:
    return None if start is None else start + by


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _freeze_single(hit: Hit) -> Window:
    return Window(chunks=(hit.chunk,), hits=(hit,), text=hit.chunk.text)
