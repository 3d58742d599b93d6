"""Assembly: hits grown into windows over the chunks fetched, merged, best first (pure).

Step 3 of the window algorithm (see ``_windows``): :func:`assemble` grows each hit outward
(after, before, after, ... in mode ``"both"``) while the window stays within the budget,
merges windows of one file that overlap or touch, and returns at most ``k`` windows. Where
a growth stops at a position nobody fetched while budget is left, it says so
(:class:`Need`), and :func:`plan_needs` turns that into the next fetch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from window_retriever.core._windows import (
    _DIRECTIONS,
    MAX_PLANNED,
    Chunk,
    Direction,
    Hit,
    LengthFunction,
    Measure,
    Mode,
    Position,
    Window,
    join_texts,
)


@dataclass(frozen=True, slots=True)
class Need:
    """A growth that stopped at a position nobody fetched while budget was left."""

    position: Position
    direction: Direction
    count: int
    """How many positions from ``position`` onward, in ``direction``, are worth fetching."""


@dataclass(frozen=True, slots=True)
class Assembly:
    """What :func:`assemble` returns: the windows, and what it still needs, if anything."""

    windows: list[Window]
    needs: list[Need]

    @property
    def complete(self) -> bool:
        """True when no growth stopped for want of a fetch."""
        return not self.needs


def plan_needs(needs: Iterable[Need]) -> list[Position]:
    """Return the positions that a second fetch must bring for ``needs``."""
    planned: dict[Position, None] = {}
    for need in needs:
        file_id, index = need.position
        sign = 1 if need.direction == "next" else -1
        for offset in range(min(need.count, MAX_PLANNED)):
            position = index + sign * offset
            if position < 0 or len(planned) >= MAX_PLANNED:
                break
            planned[(file_id, position)] = None
    return list(planned)


def assemble(
    hits: Sequence[Hit],
    chunks: Mapping[Position, Chunk],
    fetched: Set[Position],
    *,
    k: int,
    budget: int,
    mode: Mode,
    length_function: LengthFunction,
    total_budget: int | None = None,
    measure: Measure | None = None,
) -> Assembly:
    """Grow hits into at most ``k`` windows, merge those that touch, and rank them best first.

    Args:
        hits: The search results in rank order (best first).
        chunks: Every chunk available for windows, by position: the hits and the fetched
            neighbours that passed the caller's filter. The order of this mapping does not
            matter.
        fetched: Positions that were asked of the store: a position here but not in
            ``chunks`` is a gap (missing or filtered out). A position in neither is unknown:
            growth stops there and the answer's ``needs`` asks for it.
        k: How many windows to return at most.
        budget: The largest ``length_function`` of a grown window.
        mode: ``"both"``, ``"next"`` or ``"prev"``.
        length_function: The measure of a text that ``budget`` limits.
        total_budget: The most the windows may measure together. Each hit then grows within
            what is left of it, a hit that no longer fits is passed over, and growth never
            waits for another fetch (an unknown position is a gap). The best hit alone
            comes back whole even when it is longer than the whole budget.
        measure: A cache of lengths to share with the caller.

    Returns:
        The windows, best (minimum distance) first, and any positions still needed.
    """
    measure = measure or Measure(length_function)
    windows: list[_Draft] = []
    needs: list[Need] = []
    for rank, hit in enumerate(hits):
        holder = next((draft for draft in windows if draft.contains(hit.chunk)), None)
        if holder is not None:
            holder.hits.append((rank, hit))
            continue
        if len(windows) >= k:
            continue
        limit = budget
        if total_budget is not None:
            left = total_budget - sum(draft.length for draft in windows)
            if windows and measure.text(hit.chunk) > left:
                continue
            limit = min(budget, left)
        draft = _grow(
            rank, hit, chunks, fetched, limit, mode, measure, None if total_budget else needs
        )
        touching = [w for w in windows if w.touches(draft)]
        for other in touching:
            draft = draft.merged(other, measure)
        if total_budget is not None and windows:
            kept = sum(w.length for w in windows if w not in touching)
            if kept + draft.length > total_budget:
                continue  # a merge that a token count makes longer: pass the hit over
        for other in touching:
            windows.remove(other)
        windows.append(draft)
    ordered = sorted(windows, key=lambda draft: (draft.score, draft.first_rank))
    return Assembly(windows=[draft.freeze() for draft in ordered], needs=needs)


@dataclass(slots=True)
class _Draft:
    """A window under construction: a contiguous run of chunks of one file version."""

    run: list[Chunk]
    hits: list[tuple[int, Hit]]
    length: int

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        first = self.run[0]
        # A chunk without window metadata is a file of its own: key it by its id.
        return (first.file_id, first.version, None if first.file_id else first.id)

    @property
    def lo(self) -> int:
        return self.run[0].index or 0

    @property
    def hi(self) -> int:
        return self.run[-1].index or 0

    @property
    def score(self) -> float:
        return min(hit.distance for _, hit in self.hits)

    @property
    def first_rank(self) -> int:
        return min(rank for rank, _ in self.hits)

    def contains(self, chunk: Chunk) -> bool:
        if chunk.position is None:
            return any(c.id == chunk.id for c in self.run)
        return (
            self.key == (chunk.file_id, chunk.version, None)
            and self.lo <= (chunk.index or 0) <= self.hi
        )

    def touches(self, other: _Draft) -> bool:
        if self.key != other.key or self.run[0].position is None:
            return False
        return self.lo <= other.hi + 1 and other.lo <= self.hi + 1

    def merged(self, other: _Draft, measure: Measure) -> _Draft:
        by_index = {chunk.index: chunk for chunk in [*self.run, *other.run]}
        run = [by_index[index] for index in sorted(by_index)]  # type: ignore[type-var]
        return _Draft(run=run, hits=self.hits + other.hits, length=measure.run(run))

    def freeze(self) -> Window:
        hits = tuple(hit for _, hit in sorted(self.hits, key=lambda pair: pair[0]))
        return Window(chunks=tuple(self.run), hits=hits, text=join_texts(self.run))


def _grow(
    rank: int,
    hit: Hit,
    chunks: Mapping[Position, Chunk],
    fetched: Set[Position],
    budget: int,
    mode: Mode,
    measure: Measure,
    needs: list[Need] | None,
) -> _Draft:
    start = hit.chunk
    draft = _Draft(run=[start], hits=[(rank, hit)], length=measure.text(start))
    if start.position is None:
        return draft
    file_id = start.file_id
    assert file_id is not None  # narrowed by position  # noqa: S101
    active = list(_DIRECTIONS[mode])
    while active:
        for direction in tuple(active):
            edge = draft.run[-1] if direction == "next" else draft.run[0]
            index = (edge.index or 0) + (1 if direction == "next" else -1)
            position = (file_id, index)
            neighbour = chunks.get(position)
            if index < 0 or neighbour is None or neighbour.version != start.version:
                unknown = index >= 0 and neighbour is None and position not in fetched
                if needs is not None and unknown:
                    left = budget - draft.length
                    shortest = min(measure.text(c) for c in draft.run)
                    needs.append(Need(position, direction, left // max(1, shortest) + 1))
                active.remove(direction)
                continue
            if direction == "next":
                length = draft.length + measure.piece(edge, neighbour)
            else:
                length = draft.length - measure.text(edge)
                length += measure.text(neighbour) + measure.piece(neighbour, edge)
            if length > budget:
                active.remove(direction)
                continue
            if direction == "next":
                draft.run.append(neighbour)
            else:
                draft.run.insert(0, neighbour)
            draft.length = length
    return draft
