"""Evaluation: do windows give a model more of the evidence than plain chunks, at one budget?

Every configuration answers every question; its documents are joined in rank order and cut at
the same total budget ``B`` (characters). Then, against the question's gold spans (character
offsets in its source text) and its answer:

- evidence coverage: the share of gold characters inside the context (and the rate of
  questions whose gold is fully covered);
- precision: the share of context characters that are gold;
- answer hit: the normalised answer string appears in the context;
- context length (characters and tokens), latency p50 / p95, store calls per query;
- a paired bootstrap over questions of each configuration's coverage against ``plain``.

The metric functions are pure; :func:`evaluate` runs the retrievals.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import statistics
import string
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever._ids import FILE_ID, START_INDEX
from window_retriever._retriever import OVERRIDABLE, ContextWindowRetriever
from window_retriever._stores import (
    Embedded,
    Fetch,
    IdSearchStore,
    Search,
    SearchIds,
    execute,
    store_adapter,
)
from window_retriever._windows import DEFAULT_WINDOW_BUDGET

Span = tuple[int, int]

DEFAULT_BUDGETS = (1000, 2000, 4000)
DEFAULT_CONFIGS = "plain,window"
_BOOTSTRAP_SAMPLES = 2000


# ---- questions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    """One line of a questions file."""

    line: int
    question: str
    source: str | None = None
    file_id: str | None = None
    answer: str | None = None
    gold_spans: tuple[Span, ...] = ()

    @property
    def where(self) -> dict[str, str] | None:
        """The filter that keeps the search inside the question's own file, if it names one."""
        if self.file_id is not None:
            return {FILE_ID: self.file_id}
        if self.source is not None:
            return {"source": self.source}
        return None


def read_questions(path: str | Path) -> tuple[list[Question], list[str]]:
    """Read a JSONL questions file; return the questions and one message per bad line."""
    questions: list[Question] = []
    problems: list[str] = []
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(f"line {number}: not UTF-8 (byte {error.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                questions.append(parse_question(number, json.loads(line)))
            except json.JSONDecodeError as error:
                problems.append(f"line {number}: not JSON ({error.msg})")
            except ValueError as error:
                problems.append(f"line {number}: {error}")
    return questions, problems


def parse_question(number: int, data: Any) -> Question:
    """Validate one decoded line."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('"question" must be a non-empty string')
    for key in ("source", "file_id", "answer"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f'"{key}" must be a string')
    spans = data.get("gold_spans") or []
    if not isinstance(spans, list) or not all(
        isinstance(s, list | tuple)
        and len(s) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
        and 0 <= s[0] < s[1]
        for s in spans
    ):
        raise ValueError('"gold_spans" must be a list of [start, end] with 0 <= start < end')
    if not spans and not data.get("answer"):
        raise ValueError('needs "gold_spans" or "answer" to score against')
    if spans and data.get("source") is None and data.get("file_id") is None:
        raise ValueError('"gold_spans" need the "source" or "file_id" they point into')
    return Question(
        line=number,
        question=question,
        source=data.get("source"),
        file_id=data.get("file_id"),
        answer=data.get("answer") or None,
        gold_spans=tuple((int(s[0]), int(s[1])) for s in spans),
    )


def resolve_sources(
    vectorstore: Any, questions: Sequence[Question], *, cwd: str | Path | None = None
) -> tuple[list[Question], list[str]]:
    """Match each question's ``source`` to a stored source; return the questions and warnings.

    A question's ``source`` must equal the ``source`` its chunks were stored under, or it
    scores as a miss: local files are stored under their absolute paths (as ``ingest`` stores
    them), web pages under their final address. A relative path is made absolute against
    ``cwd`` (default: the current directory), as ``ingest`` does, when that absolute path is a
    stored source. Any other unknown source gets one warning naming the closest stored source.
    Questions with a ``file_id`` are left as they are; so is every question when the store
    cannot be listed (it has no ``get``, as ``langchain_chroma.Chroma`` has).
    """
    named = sorted({q.source for q in questions if q.source is not None and q.file_id is None})
    if not named or not callable(getattr(vectorstore, "get", None)):
        return list(questions), []
    missing = [source for source in named if not _stored(vectorstore, source)]
    resolved: dict[str, str] = {}
    for source in missing:
        if "://" not in source and not os.path.isabs(source):
            absolute = os.path.abspath(os.path.join(cwd or os.getcwd(), source))
            if _stored(vectorstore, absolute):
                resolved[source] = absolute
    unknown = {source for source in missing if source not in resolved}
    stored = _stored_sources(vectorstore) if unknown else []
    out: list[Question] = []
    warnings: list[str] = []
    for question in questions:
        source = question.source or ""
        if question.file_id is None and source in resolved:
            question = dataclasses.replace(question, source=resolved[source])
        elif question.file_id is None and source in unknown:
            closest = difflib.get_close_matches(source, stored, n=1, cutoff=0.0)
            hint = f"the closest is {closest[0]!r}" if closest else "the store has none"
            warnings.append(
                f"line {question.line}: source {source!r} is not a stored source, so the "
                f"question scores as a miss ({hint}; local files are stored under their "
                "absolute paths)"
            )
        out.append(question)
    return out, warnings


def _stored(vectorstore: Any, source: str) -> bool:
    found = vectorstore.get(where={"source": source}, limit=1, include=["metadatas"])
    return bool(found.get("ids"))


def _stored_sources(vectorstore: Any, page: int = 5000) -> list[str]:
    """Every stored source, read from each file's first chunk (``chunk_index`` 0)."""
    sources: set[str] = set()
    for where in ({"chunk_index": 0}, None):  # chunks not from WindowSplitter have no index
        offset = 0
        while True:
            found = vectorstore.get(where=where, limit=page, offset=offset, include=["metadatas"])
            metadatas = found.get("metadatas") or []
            sources.update(str(meta["source"]) for meta in metadatas if meta and meta.get("source"))
            if len(metadatas) < page:
                break
            offset += page
        if sources:
            break
    return sorted(sources)


# ---- contexts and metrics (pure) ---------------------------------------------------------------


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


# ---- configurations -----------------------------------------------------------------------------

Retrieve = Callable[[Question, int], list[Piece]]
"""A configuration: (question, total budget) -> pieces in rank order."""


@dataclass(frozen=True, slots=True)
class Config:
    """A named configuration, e.g. ``plain`` or ``window:expansion=static;window_budget=600``."""

    name: str
    kind: str
    options: Mapping[str, str] = field(default_factory=dict)


# The retriever's own per-call argument names (filters come from each question);
# ``total_budget`` defaults to the evaluation budget.
WINDOW_OPTIONS = tuple(name for name in OVERRIDABLE if name not in ("filter", "where_document"))
_WINDOW_HELP = (
    "window[:total_budget=N|none;expansion=adaptive|static;window_budget=N;"
    "mode=both|prev|next;k=N;fetch_k=N;coherence=X]"
)


def parse_configs(text: str | Sequence[str]) -> list[Config]:
    """Parse ``"plain,window,window:expansion=static;window_budget=600"``.

    Options follow ``:`` and are separated by ``;``. A ``window`` configuration takes the
    retriever's own argument names; ``total_budget`` defaults to each evaluation budget
    (``total_budget=none`` gives ``k`` windows of ``window_budget`` each, cut at the budget).
    """
    items = [t for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    configs = []
    for item in items:
        kind, _, rest = item.strip().partition(":")
        if kind not in ("plain", "window"):
            msg = f"unknown configuration {kind!r}; use plain[:k=N] or {_WINDOW_HELP}"
            raise ConfigurationError(msg)
        allowed = ("k",) if kind == "plain" else WINDOW_OPTIONS
        options: dict[str, str] = {}
        for pair in filter(None, rest.split(";")):
            key, sep, value = pair.partition("=")
            if not sep or key not in allowed:
                hint = " (budget= is now window_budget=)" if key == "budget" else ""
                msg = (
                    f"bad option {pair!r} in configuration {item!r}{hint}; "
                    f"options: {', '.join(f'{name}=...' for name in allowed)}"
                )
                raise ConfigurationError(msg)
            if key in ("k", "fetch_k", "window_budget") or (
                key == "total_budget" and value.lower() != "none"
            ):
                number = _int_option(Config(item.strip(), kind), key, value)
                if number < 1:
                    msg = (
                        f"option {key}={value} in configuration {item.strip()!r} must be at least 1"
                    )
                    raise ConfigurationError(msg)
            choices = {"mode": ("both", "next", "prev"), "expansion": ("adaptive", "static")}
            if key in choices and value not in choices[key]:
                msg = (
                    f"option {key}={value} in configuration {item.strip()!r} must be one of "
                    f"{', '.join(choices[key])}"
                )
                raise ConfigurationError(msg)
            options[key] = value
        configs.append(Config(name=item.strip(), kind=kind, options=options))
    if not configs:
        raise ConfigurationError("no configurations given; e.g. plain,window")
    return configs


def make_retrieve(
    config: Config, vectorstore: Any, counter: CountingStore | None = None
) -> Retrieve:
    """Build the retrieval function of a configuration over ``vectorstore``.

    With a ``counter`` (a :class:`CountingStore` around the same store), the windowed
    configurations make their store calls through it, and ``plain`` counts its one search.
    """
    if config.kind == "plain":

        def plain(question: Question, budget: int) -> list[Piece]:
            k = int(config.options.get("k", max(4, budget // 100)))
            docs = vectorstore.similarity_search(question.question, k=k, filter=question.where)
            if counter is not None:
                counter.calls += 1
            return [_piece(doc) for doc in docs]

        return plain

    options = dict(config.options)
    fixed_total = options.pop("total_budget", None)
    arguments: dict[str, Any] = {}
    for key, value in options.items():
        if key in ("k", "fetch_k", "window_budget"):
            arguments[key] = _int_option(config, key, value)
        elif key == "coherence":
            arguments[key] = _number_option(config, key, value)
        else:
            arguments[key] = value
    if fixed_total is not None and fixed_total.lower() != "none":
        arguments["total_budget"] = _int_option(config, "total_budget", fixed_total)
    retrievers: dict[int, ContextWindowRetriever] = {}

    def window(question: Question, budget: int) -> list[Piece]:
        retriever = retrievers.get(budget)
        if retriever is None:
            own = dict(arguments)
            if fixed_total is None:
                own["total_budget"] = budget
            if "k" not in own:
                own["k"] = k_for(budget, own)
            retriever = retrievers[budget] = ContextWindowRetriever(
                vectorstore=counter if counter is not None else vectorstore, **own
            )
        docs = retriever.invoke(question.question, filter=question.where)
        return [_piece(doc) for doc in docs]

    return window


def k_for(budget: int, arguments: Mapping[str, Any]) -> int:
    """How many windows a configuration asks for at one evaluation budget, unless it says."""
    if arguments.get("total_budget") is not None:
        return max(4, budget // 200)  # the total budget binds, not k
    # Windows often stop short of their budget and merge: ask for enough of them to fill
    # the evaluation budget; the context is cut at it anyway.
    window_budget = int(arguments.get("window_budget", DEFAULT_WINDOW_BUDGET))
    return math.ceil(2 * budget / window_budget) + 1


def _int_option(config: Config, key: str, value: str) -> int:
    return int(_number_option(config, key, value, whole=True))


def _number_option(config: Config, key: str, value: str, *, whole: bool = False) -> float:
    try:
        return int(value) if whole else float(value)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        msg = f"option {key}={value!r} in configuration {config.name!r} must be {kind}"
        raise ConfigurationError(msg) from None


def _piece(document: Document) -> Piece:
    meta = document.metadata
    start, end = meta.get(START_INDEX), meta.get("end_index")
    return Piece(
        text=document.page_content,
        source=meta.get("source"),
        file_id=meta.get(FILE_ID),
        start=start if isinstance(start, int) and not isinstance(start, bool) else None,
        end=end if isinstance(end, int) and not isinstance(end, bool) else None,
    )


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Row:
    """Aggregates of one configuration at one budget."""

    config: str
    budget: int
    questions: int
    coverage: float | None
    full_coverage: float | None
    precision: float | None
    answer_hit: float | None
    characters: float
    tokens: float | None
    latency_p50_ms: float
    latency_p95_ms: float
    store_calls: float | None
    coverage_vs_plain: tuple[float, float, float] | None = None
    answer_hit_vs_plain: tuple[float, float, float] | None = None


@dataclass
class Report:
    """Rows for every configuration and budget, and the per-question scores behind them."""

    rows: list[Row]
    skipped: list[str]
    per_question: dict[str, list[Score]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the rows and skipped lines."""
        return {"rows": [asdict(row) for row in self.rows], "skipped": self.skipped}

    def table(self) -> str:
        """A Markdown table of the rows."""
        header = (
            "| config | budget | coverage | vs plain (95% CI) | full | precision | answer hit "
            "| chars | tokens | p50 ms | p95 ms | store calls |"
        )
        lines = [header, "|" + "---|" * 12]
        for r in self.rows:
            # "vs plain" compares coverage, or answer hits where the questions have no spans
            versus = r.coverage_vs_plain if r.coverage is not None else r.answer_hit_vs_plain
            lines.append(
                f"| {r.config} | {r.budget} | {_f(r.coverage)} | {_ci(versus)} | "
                f"{_f(r.full_coverage)} | {_f(r.precision)} | {_f(r.answer_hit)} | "
                f"{r.characters:.0f} | {_f(r.tokens, 0)} | {r.latency_p50_ms:.1f} | "
                f"{r.latency_p95_ms:.1f} | {_f(r.store_calls, 1)} |"
            )
        return "\n".join(lines)

    def plot(self, path: str | Path) -> None:
        """Coverage (or answer hits, without spans) against budget, a line per configuration."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            msg = "Report.plot needs matplotlib: pip install 'window-retriever[eval]'"
            raise ConfigurationError(msg) from None
        metric = "coverage" if any(r.coverage is not None for r in self.rows) else "answer_hit"
        figure, axes = plt.subplots(figsize=(9, 4.5))
        for name in dict.fromkeys(r.config for r in self.rows):
            points = [(r.budget, getattr(r, metric)) for r in self.rows if r.config == name]
            axes.plot([b for b, _ in points], [v for _, v in points], marker="o", label=name)
        axes.set_xlabel("context budget (characters)")
        axes.set_ylabel("evidence coverage" if metric == "coverage" else "answer hit rate")
        axes.set_xscale("log")
        axes.set_xticks(sorted({r.budget for r in self.rows}))
        axes.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axes.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
        axes.grid(alpha=0.3)
        axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)


def _f(value: float | None, digits: int = 3) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def _ci(value: tuple[float, float, float] | None) -> str:
    if value is None:
        return "-"
    mean, low, high = value
    return f"{mean:+.3f} ({low:+.3f}, {high:+.3f})"


def evaluate(
    vectorstore: Any,
    questions: Sequence[Question],
    *,
    configs: Sequence[Config] | str = DEFAULT_CONFIGS,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    count_tokens: Callable[[str], int] | None = None,
    retrievers: Mapping[str, Retrieve] | None = None,
    call_counter: Callable[[], int] | None = None,
    skipped: Sequence[str] = (),
) -> Report:
    """Run every configuration on every question at every budget.

    Args:
        vectorstore: The store the configurations search (chunks from ``WindowSplitter``).
        questions: From :func:`read_questions`.
        configs: Configurations (see :func:`parse_configs`); ``plain`` is the baseline.
        budgets: Total context budgets, in characters.
        count_tokens: A token counter for the context length in tokens.
        retrievers: Extra configurations by name: functions (question, budget) -> pieces.
        call_counter: Returns the number of store calls so far (for calls per query); by
            default the calls are counted by a :class:`CountingStore` around ``vectorstore``.
        skipped: Messages of questions-file lines that were skipped, carried into the report.
    """
    if isinstance(configs, str):
        configs = parse_configs(configs)
    if not budgets:
        raise ConfigurationError("no budgets to evaluate at; e.g. budgets=[1000, 2000]")
    try:
        counter: CountingStore | None = CountingStore(vectorstore)
    except ConfigurationError:  # not a store windows can use: fine for plain-only runs
        counter = None
    functions: dict[str, Retrieve] = {
        c.name: make_retrieve(c, vectorstore, counter) for c in configs
    }
    if call_counter is None:
        call_counter = counter.count if counter is not None else (lambda: 0)
    functions.update(retrievers or {})
    counted = {c.name for c in configs}  # extra retrievers use stores of their own
    if not questions:
        raise ConfigurationError("no questions to evaluate")
    if any(b < 1 for b in budgets):
        raise ConfigurationError(f"budgets must be positive, got {list(budgets)}")
    rows: list[Row] = []
    per_question: dict[str, list[Score]] = {}
    for retrieve in functions.values():  # warm up (model load, caches) outside the timings
        retrieve(questions[0], budgets[0])
    for budget in budgets:
        for name, retrieve in functions.items():
            scores, latencies, tokens, calls = [], [], [], []
            for question in questions:
                before = call_counter()
                began = time.perf_counter()
                pieces = retrieve(question, budget)
                latencies.append((time.perf_counter() - began) * 1000)
                if name in counted:
                    calls.append(call_counter() - before)
                context = build_context(pieces, budget)
                scores.append(score(question, context))
                if count_tokens:
                    tokens.append(count_tokens(context.text))
            per_question[f"{name}@{budget}"] = scores
            rows.append(
                Row(
                    config=name,
                    budget=budget,
                    questions=len(questions),
                    coverage=_mean([s.coverage for s in scores]),
                    full_coverage=_mean([s.full for s in scores]),
                    precision=_mean([s.precision for s in scores]),
                    answer_hit=_mean([s.answer_hit for s in scores]),
                    characters=statistics.fmean(s.characters for s in scores),
                    tokens=statistics.fmean(tokens) if tokens else None,
                    latency_p50_ms=percentile(latencies, 0.5),
                    latency_p95_ms=percentile(latencies, 0.95),
                    store_calls=statistics.fmean(calls) if calls else None,
                )
            )
    baseline = next((name for name in functions if name == "plain"), None)
    for row in rows:
        if baseline is None or row.config == baseline:
            continue
        base = per_question[f"{baseline}@{row.budget}"]
        mine = per_question[f"{row.config}@{row.budget}"]
        row.coverage_vs_plain = _paired(base, mine, "coverage")
        row.answer_hit_vs_plain = _paired(base, mine, "answer_hit")
    return Report(rows=rows, skipped=list(skipped), per_question=per_question)


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


class CountingStore:
    """A ``WindowStore`` that counts the calls it passes on to the store it wraps.

    Wraps a ``langchain_chroma.Chroma`` (or any ``WindowStore``) through the public adapter,
    so nothing private is patched; ``calls`` is the number of searches and fetches so far.
    """

    def __init__(self, vectorstore: Any) -> None:
        self.store = store_adapter(vectorstore)
        self.calls = 0

    def count(self) -> int:
        """The calls so far."""
        return self.calls

    def search(self, request: Search) -> list[tuple[Document, float]]:
        """Count, then search."""
        self.calls += 1
        return list(execute(self.store, request))

    def fetch(self, request: Fetch) -> list[Document]:
        """Count, then fetch."""
        self.calls += 1
        return list(execute(self.store, request))

    def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
        """Count, then search for ids and distances (a full search where the store has none)."""
        self.calls += 1
        if isinstance(self.store, IdSearchStore):
            return list(execute(self.store, request))
        full = Search(request.query, request.k, request.where, request.where_document)
        return [(document.id or "", distance) for document, distance in execute(self.store, full)]

    def search_embedded(self, request: Search) -> Embedded:
        """Count, then search with embeddings (a store without them says so)."""
        self.calls += 1
        return execute(self.store, request)  # type: ignore[no-any-return]

    def fetch_embedded(self, request: Fetch) -> Embedded:
        """Count, then fetch with embeddings."""
        self.calls += 1
        return execute(self.store, request)  # type: ignore[no-any-return]
