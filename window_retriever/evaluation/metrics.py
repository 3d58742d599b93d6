"""Contexts and metrics (pure): what a model would see at a budget, and how it serves a question.

- evidence coverage: the share of gold characters inside the context (and the rate of
  questions whose gold is fully covered);
- precision: the share of context characters that are gold;
- answer hit: the normalised answer string appears in the context;
- a paired bootstrap over questions of one configuration's scores against another's.
"""

from __future__ import annotations

import math
import re
import statistics
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from window_retriever.evaluation.questions import Question, Span

_BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True, slots=True)
class Piece:
    """A returned document: its text and where it comes from in its source, if known."""

    text: str
    source: str | None = None
    file_id: str | None = None
    start: int | None = None
    end: int | None = None
    """Where the piece ends in its source, when that is not ``start + len(text)`` (a window
    whose text stands for whitespace the splitter dropped with one character)."""


@dataclass(frozen=True, slots=True)
class Context:
    """The context a model would see: pieces joined in rank order, cut at the budget."""

    text: str
    spans: tuple[tuple[str | None, str | None, int, int], ...]
    """(source, file_id, start, end) of the source characters inside the context."""
    characters: int
    """Characters of the pieces inside the context (separators not counted)."""

    def covered(self, question: Question) -> list[Span]:
        """The spans of the question's own file inside the context."""
        if question.file_id is not None:
            return [(s, e) for _, file_id, s, e in self.spans if file_id == question.file_id]
        return [(s, e) for source, _, s, e in self.spans if source == question.source]


SEPARATOR = "\n\n"


def build_context(pieces: Iterable[Piece], budget: int) -> Context:
    """Join pieces in rank order with a blank line between them and cut at ``budget`` characters.

    A piece cut short contributes only its first characters; the separators count too.
    """
    parts: list[str] = []
    spans: list[tuple[str | None, str | None, int, int]] = []
    used = 0
    for piece in pieces:
        room = budget - used - (len(SEPARATOR) if parts else 0)
        if room <= 0:
            break
        taken = piece.text[:room]
        parts.append(taken)
        used += len(taken) + (len(SEPARATOR) if len(parts) > 1 else 0)
        if piece.start is not None and piece.start >= 0:
            whole = len(taken) == len(piece.text) and piece.end is not None
            end = piece.end if whole else piece.start + len(taken)
            spans.append((piece.source, piece.file_id, piece.start, end))  # type: ignore[arg-type]
    return Context(SEPARATOR.join(parts), tuple(spans), sum(len(part) for part in parts))


def merge_spans(spans: Iterable[Span]) -> list[Span]:
    """Sort and merge overlapping or touching spans."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def overlap(spans: Iterable[Span], others: Iterable[Span]) -> int:
    """Characters that two sets of spans share (each set merged first)."""
    a, b = merge_spans(spans), merge_spans(others)
    total = i = j = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def span_length(spans: Iterable[Span]) -> int:
    """Characters covered by spans, overlaps counted once."""
    return sum(end - start for start, end in merge_spans(spans))


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace (as SQuAD scoring does)."""
    text = text.lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class Score:
    """How one context serves one question."""

    coverage: float | None
    full: bool | None
    precision: float | None
    answer_hit: bool | None
    characters: int


def score(question: Question, context: Context) -> Score:
    """Score a context against a question's gold spans and answer (``None`` where not given)."""
    coverage = full = precision = None
    if question.gold_spans:
        gold = span_length(question.gold_spans)
        shared = overlap(question.gold_spans, context.covered(question))
        coverage = shared / gold
        full = shared == gold
        precision = shared / context.characters if context.characters else 0.0
    answer_hit = None
    if question.answer:
        needle = normalize_answer(question.answer)
        answer_hit = bool(needle) and needle in normalize_answer(context.text)
    return Score(coverage, full, precision, answer_hit, len(context.text))


def paired_bootstrap(
    differences: Sequence[float], *, samples: int = _BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of paired differences and its 95% bootstrap interval (resampling questions)."""
    if not differences:
        return (math.nan, math.nan, math.nan)
    values = np.asarray(differences, dtype=np.float64)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), size=(samples, len(values)))
    means = np.sort(values[picks].mean(axis=1))
    low, high = means[int(0.025 * samples)], means[int(0.975 * samples) - 1]
    return (float(values.mean()), float(low), float(high))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation (``statistics.quantiles``, inclusive)."""
    if not values:
        return math.nan
    if len(values) == 1 or q <= 0:
        return float(min(values))
    if q >= 1:
        return float(max(values))
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return float(cuts[min(998, max(0, round(q * 1000) - 1))])


def _paired(
    base: Sequence[Score], mine: Sequence[Score], metric: str
) -> tuple[float, float, float] | None:
    pairs = [
        (float(getattr(b, metric)), float(getattr(m, metric)))
        for b, m in zip(base, mine, strict=True)
        if getattr(b, metric) is not None and getattr(m, metric) is not None
    ]
    if not pairs:
        return None
    return paired_bootstrap([m - b for b, m in pairs])


def _mean(values: Sequence[float | bool | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.fmean(present) if present else None
