"""The window algorithm: plain data in, plain data out, no I/O and no LangChain.

A retrieval runs in three steps, and only the middle one touches the store:

1. :func:`plan_fetch` decides which neighbour positions the hits may need, sized from the
   budget, so that one batched store call brings them all;
2. the caller fetches those positions (by computed chunk id) and filters them;
3. ``_assembly.assemble`` grows each hit into a window, merges windows that overlap or touch,
   and returns at most ``k`` windows, best first. If unusually short chunks exhaust the fetch
   before a budget is spent, it says which positions it still needs (``Assembly.needs``)
   and the caller fetches those and assembles again.

Growth of one hit alternates after / before (``i+1, i-1, i+2, i-2, ...``) in mode ``"both"``,
goes only after in ``"next"`` and only before in ``"prev"``, and adds a neighbour while
``length_function(window text) <= budget``. A direction stops at the file's edge, at a gap
(a position the store does not have, or that the caller's filter hides), at a chunk of
another version of the file, or at the first neighbour that does not fit; the other direction
goes on. A hit longer than the budget comes back alone, whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["both", "next", "prev"]
Direction = Literal["next", "prev"]
LengthFunction = Callable[[str], int]
Position = tuple[str, int]
"""A chunk's place: ``(file_id, chunk_index)``."""

MODES: tuple[Mode, ...] = ("both", "next", "prev")

DEFAULT_WINDOW_BUDGET = 1200
"""Characters: about three chunks of the ingest command's default 400."""

_DIRECTIONS: dict[Mode, tuple[Direction, ...]] = {
    "both": ("next", "prev"),
    "next": ("next",),
    "prev": ("prev",),
}
# Chroma refuses a call with more than 32,762 ids; no plan asks for more than this many.
MAX_PLANNED = 30_000
# Chunks are usually a little shorter than the hit that stands for them once the splitter's
# overlap is trimmed; plan with 4/5 of the typical length so one fetch nearly always suffices.
_STEP_FACTOR = 0.8


@dataclass(frozen=True, slots=True)
class Chunk:
    """One stored chunk.

    ``file_id`` and ``index`` are ``None`` for a chunk that lacks window metadata: such a
    chunk is returned alone and never grows or merges.
    """

    id: str
    text: str
    file_id: str | None = None
    index: int | None = None
    start: int | None = None
    version: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def position(self) -> Position | None:
        """``(file_id, index)``, or ``None`` for a chunk without window metadata."""
        if self.file_id is None or self.index is None:
            return None
        return (self.file_id, self.index)


@dataclass(frozen=True, slots=True)
class Hit:
    """A chunk returned by the similarity search, with its distance (lower is better)."""

    chunk: Chunk
    distance: float
    ranks: tuple[tuple[str, int], ...] = ()
    """Fused candidates only: each leg that found the chunk, with its rank there (from 1)."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Part of a window's end chunk, where the budget left room for part of it only.

    ``side`` is the end of the window the chunk is at: ``"next"``, its last chunk, which keeps
    its head; ``"prev"``, its first chunk, which keeps its tail. The window measures at most
    ``room`` with the part, which ends (or starts) at a sentence's end where it can (see
    ``_adaptive.cut_windows``).
    """

    side: Direction
    room: int


@dataclass(frozen=True, slots=True)
class Window:
    """Contiguous chunks of one file (in order), the hits inside them, and the joined text."""

    chunks: tuple[Chunk, ...]
    hits: tuple[Hit, ...]
    text: str
    cut: Cut | None = None
    """The chunk at ``cut.side`` is to be kept, or was kept, in part (see :class:`Cut`)."""

    @property
    def score(self) -> float:
        """The best (minimum) distance of the hits inside the window."""
        return min(hit.distance for hit in self.hits)

    @property
    def start_index(self) -> int | None:
        """Character offset of the window in its source, when the chunks carry it."""
        return self.chunks[0].start

    @property
    def end_index(self) -> int | None:
        """Character offset just past the window's last character in its source."""
        last = self.chunks[-1]
        return None if last.start is None else last.start + len(last.text)


class Measure:
    """Lengths of chunk texts and of the pieces that join them, each measured once.

    A window's length is the length of its first chunk plus, for every later chunk, the
    length of what that chunk adds (separator and text, the shared overlap trimmed), so that
    growing a window by one chunk costs one measurement of one piece instead of the whole
    text again. With ``len`` this is exact; with a token counter the pieces may tokenise a
    word cut at a seam a little differently, so the final windows are measured whole once
    (:func:`fit_total`).
    """

    __slots__ = ("_pieces", "_texts", "length_function")

    def __init__(self, length_function: LengthFunction) -> None:
        self.length_function = length_function
        self._texts: dict[tuple[str, str | None], int] = {}
        self._pieces: dict[tuple[str, str, str | None], int] = {}

    def text(self, chunk: Chunk) -> int:
        """The length of ``chunk``'s whole text."""
        key = (chunk.id, chunk.version)
        if key not in self._texts:
            self._texts[key] = _length(self.length_function, chunk.text)
        return self._texts[key]

    def piece(self, before: Chunk, after: Chunk) -> int:
        """The length that ``after`` adds when it follows ``before`` in a window."""
        key = (before.id, after.id, after.version)
        if key not in self._pieces:
            overlap, separator = _seam(before, after)
            text = separator + after.text[overlap:]
            self._pieces[key] = _length(self.length_function, text) if text else 0
        return self._pieces[key]

    def run(self, chunks: Sequence[Chunk]) -> int:
        """The length of ``join_texts(chunks)``, from cached pieces."""
        if not chunks:
            return 0
        return self.text(chunks[0]) + sum(
            self.piece(before, after) for before, after in itertools.pairwise(chunks)
        )

    def join(self, chunks: Sequence[Chunk]) -> str:
        """The window text of ``chunks`` (see :func:`join_texts`)."""
        return join_texts(chunks)


def _length(length_function: LengthFunction, text: str) -> int:
    value: Any = length_function(text)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = (
            f"length_function must return an int (a count of characters or tokens), "
            f"got {value!r} of type {type(value).__name__}"
        )
        raise TypeError(msg)
    return value


def fit_total(
    windows: Sequence[Window], total_budget: int, length_function: LengthFunction
) -> list[Window]:
    """Measure each window whole, once, and trim the result to ``total_budget``.

    Incremental measures are exact for ``len``; a token counter may count a window a token
    or two longer whole than in pieces. Then chunks that hold no hit are dropped from the
    far end of the lowest-ranked windows, and windows after that, until the sum fits. The
    one window left is cut toward its best hit, chunk by chunk from the end farther from it:
    only a best hit that alone is over the total comes back over it.
    """
    kept = list(windows)
    lengths = [_length(length_function, window.text) for window in kept]
    while sum(lengths) > total_budget:
        smaller = _smaller(kept[-1], alone=len(kept) == 1)
        if smaller is not None:
            kept[-1], lengths[-1] = smaller, _length(length_function, smaller.text)
        elif len(kept) > 1:
            kept.pop()
            lengths.pop()
        else:
            break  # its best hit alone, over the total
    return kept


def _smaller(window: Window, *, alone: bool) -> Window | None:
    """``window`` one step smaller, or None when it cannot be.

    A step drops the chunks at its ends that hold no hit; when it has none such and is the one
    window left, its end chunk farther from its best hit (with the hit that chunk holds).
    None: its hits must stay (not alone), or only its best hit's chunk is left.
    """
    hit_ids = {hit.chunk.id for hit in window.hits}
    chunks = list(window.chunks)
    while chunks and chunks[-1].id not in hit_ids:
        chunks.pop()
    while chunks and chunks[0].id not in hit_ids:
        chunks.pop(0)
    if not chunks or len(chunks) == len(window.chunks):
        if not alone or len(window.chunks) < 2:
            return None
        best = min(window.hits, key=lambda hit: hit.distance).chunk.id
        at = next(n for n, chunk in enumerate(chunks) if chunk.id == best)
        chunks = chunks[:-1] if len(chunks) - 1 - at >= at else chunks[1:]
    kept = {chunk.id for chunk in chunks}
    hits = tuple(hit for hit in window.hits if hit.chunk.id in kept)
    cut = window.cut
    if cut is not None and _end(chunks, cut.side) is not _end(window.chunks, cut.side):
        cut = None  # the chunk kept in part was dropped
    return Window(chunks=tuple(chunks), hits=hits, text=join_texts(chunks), cut=cut)


def _end(chunks: Sequence[Chunk], side: Direction) -> Chunk:
    return chunks[-1] if side == "next" else chunks[0]


def plan_fetch(
    hits: Sequence[Hit],
    *,
    k: int,
    budget: int,
    mode: Mode,
    length_function: LengthFunction,
    total_budget: int | None = None,
    measure: Measure | None = None,
) -> list[Position]:
    """Return the neighbour positions that the top hits may need, in one batch.

    Each hit may reach as many neighbours per direction as the budget left after the hit
    holds, at the typical chunk length, plus one (to learn that the next one does not fit).
    Hits are planned in rank order until ``k`` of them are far enough apart that their windows
    cannot merge: those are the ones that will become the ``k`` windows; the hits near them
    may be absorbed or merged, and are planned too. With a ``total_budget``, planning also
    stops once the planned windows would fill it, and no hit reaches further than it allows.
    """
    measure = measure or Measure(length_function)
    windowable = [hit for hit in hits if hit.chunk.position is not None]
    lengths = {hit.chunk.id: measure.text(hit.chunk) for hit in windowable}
    read = sorted(lengths[hit.chunk.id] for hit in windowable if hit.chunk.text)
    for hit in windowable:  # a hit not read yet (known by id) plans at the typical length
        if not hit.chunk.text:
            lengths[hit.chunk.id] = read[len(read) // 2] if read else 1
    return plan_positions(
        windowable, lengths, k=k, budget=budget, mode=mode, total_budget=total_budget
    )[0]


def plan_positions(
    hits: Sequence[Hit],
    lengths: Mapping[str, int],
    *,
    k: int,
    budget: int,
    mode: Mode,
    total_budget: int | None = None,
    known: Set[Position] | None = None,
) -> tuple[list[Position], list[Hit]]:
    """:func:`plan_fetch` for hits whose lengths are given (known, or expected).

    Returns the neighbour positions to fetch and the hits that the plan covered, in rank
    order: the hits that can become or join the ``k`` windows. A search that returned only
    ids (positions) and distances fetches exactly these hits' texts with their neighbours.
    """
    windowable = [hit for hit in hits if hit.chunk.position is not None]
    if not windowable:
        return [], []
    if total_budget is not None:
        budget = min(budget, total_budget)
    typical = sorted(lengths[hit.chunk.id] for hit in windowable)[len(windowable) // 2]
    step = max(1, int(typical * _STEP_FACTOR))
    directions = _DIRECTIONS[mode]
    if known is None:
        known = {hit.chunk.position for hit in windowable}  # type: ignore[misc]
    reaches: dict[str, list[tuple[int, int]]] = {}
    planned: dict[Position, None] = {}
    covered: list[Hit] = []
    distinct = 0
    filled = 0
    for hit in windowable:
        covered.append(hit)
        file_id, index = hit.chunk.position  # type: ignore[misc]
        left = max(0, budget - lengths[hit.chunk.id])
        reach = min(left // step + 1, MAX_PLANNED) if left else 0
        lo = index - reach if "prev" in directions else index
        hi = index + reach if "next" in directions else index
        ranges = reaches.setdefault(file_id, [])
        if not any(lo <= other_hi + 1 and other_lo <= hi + 1 for other_lo, other_hi in ranges):
            distinct += 1
            filled += max(lengths[hit.chunk.id], budget)
        ranges.append((lo, hi))
        for position in range(max(0, lo), hi + 1):
            if (file_id, position) not in known:
                planned[(file_id, position)] = None
            if len(planned) >= MAX_PLANNED:
                return list(planned), covered
        if distinct >= k or (total_budget is not None and 2 * filled >= 3 * total_budget):
            break
    return list(planned), covered


def join_texts(chunks: Sequence[Chunk]) -> str:
    """Join consecutive chunks of one file, dropping the text that neighbours share.

    Overlap is measured by ``start`` offsets: if a chunk starts before the text joined so far
    ends, the shared characters are kept once (a chunk wholly inside that text adds nothing).
    Where the splitter dropped whitespace between two chunks, one space (a one-character gap)
    or a newline (a longer gap) stands in for it. Chunks without ``start`` are joined with a
    newline.
    """
    return _layout(chunks)[0]


def chunk_spans(chunks: Sequence[Chunk]) -> list[tuple[int, int]]:
    """Return where each chunk's full text stands in ``join_texts(chunks)``, as (start, end)."""
    return _layout(chunks)[1]


def _layout(chunks: Sequence[Chunk]) -> tuple[str, list[tuple[int, int]]]:
    """The joined text and each chunk's span in it.

    ``reach`` is the offset in the source just past the text joined so far (the furthest end
    of any chunk yet, which is not always the previous chunk's: a splitter may emit a short
    chunk inside the one before it), and ``length`` the joined text's length at that point.
    """
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    reach: int | None = None
    for number, chunk in enumerate(chunks):
        size = len(chunk.text)
        if number == 0 or reach is None or chunk.start is None:
            separator = "" if number == 0 else "\n"
            parts.append(separator + chunk.text)
            begin = length + len(separator)
            length = begin + size
            reach = None if chunk.start is None else chunk.start + size
        elif chunk.start + size <= reach:  # wholly inside the text joined so far
            begin = length - (reach - chunk.start)
        elif chunk.start < reach:  # overlaps it: the shared characters once
            shared = reach - chunk.start
            parts.append(chunk.text[shared:])
            begin = length - shared
            length += size - shared
            reach = chunk.start + size
        else:
            gap = chunk.start - reach
            separator = "" if gap == 0 else " " if gap == 1 else "\n"
            parts.append(separator + chunk.text)
            begin = length + len(separator)
            length = begin + size
            reach = chunk.start + size
        spans.append((begin, begin + size))
    return "".join(parts), spans


def _seam(before: Chunk, after: Chunk) -> tuple[int, str]:
    """How many leading characters of ``after`` repeat ``before``, and the separator.

    Pairwise, as :class:`Measure` grows a window one chunk at a time; :func:`join_texts` also
    looks past a chunk nested in the one before it, so where a splitter emits one, a measured
    length can only be the longer (the budget is still kept).
    """
    if before.start is None or after.start is None:
        return 0, "\n"
    gap = after.start - (before.start + len(before.text))
    if gap < 0:
        return min(-gap, len(after.text)), ""
    if gap == 0:
        return 0, ""
    return 0, " " if gap == 1 else "\n"
