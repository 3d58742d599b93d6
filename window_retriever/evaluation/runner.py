"""The run: a retrieval function per configuration, and :func:`evaluate` over every budget.

Every configuration answers every question; its documents are joined in rank order and cut at
the same total budget (characters), then scored (see :mod:`window_retriever.evaluation.metrics`),
with context length (characters and tokens), latency p50 / p95 and store calls per query.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever.core._ids import FILE_ID, START_INDEX
from window_retriever.core._query_weight import keyword_weight_for
from window_retriever.core._windows import DEFAULT_WINDOW_BUDGET
from window_retriever.evaluation.configs import (
    DEFAULT_CONFIGS,
    Config,
    _int_option,
    _number_option,
    keyword_weight_base,
    parse_configs,
)
from window_retriever.evaluation.counting import CountingStore
from window_retriever.evaluation.metrics import (
    Piece,
    Score,
    _mean,
    _paired,
    build_context,
    percentile,
    score,
)
from window_retriever.evaluation.questions import Question
from window_retriever.evaluation.report import Report, Row
from window_retriever.retrieval._retriever import ContextWindowRetriever

DEFAULT_BUDGETS = (1000, 2000, 4000)

Retrieve = Callable[[Question, int], list[Piece]]
"""A configuration: (question, total budget) -> pieces in rank order."""


def make_retrieve(
    config: Config, vectorstore: Any, counter: CountingStore | None = None
) -> Retrieve:
    """Build the retrieval function of a configuration over ``vectorstore``.

    With a ``counter`` (a :class:`CountingStore` around the same store), the windowed
    configurations make their store calls through it, and ``plain`` counts its one search.
    """
    if config.kind == "plain" and config.options.get("candidates", "vector") != "vector":
        hits = ContextWindowRetriever(
            vectorstore=counter if counter is not None else vectorstore,
            candidates=config.options["candidates"],
        )

        def fused(question: Question, budget: int) -> list[Piece]:
            k = int(config.options.get("k", max(4, budget // 100)))
            return [_piece(doc) for doc in hits.hits(question.question, k=k, filter=question.where)]

        return fused
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
    by_query: float | None = None  # keyword_weight=auto: the base weight, chosen per question
    for key, value in options.items():
        if key == "keyword_weight" and (base := keyword_weight_base(config, value)) is not None:
            by_query = base
        elif key in ("k", "fetch_k", "window_budget"):
            arguments[key] = _int_option(config, key, value)
        elif key in ("coherence", "keyword_weight", "diversity"):
            arguments[key] = _number_option(config, key, value)
        elif key == "floor":
            arguments[key] = None if value.lower() == "none" else _number_option(config, key, value)
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
            if "k" not in own and own.get("total_budget") is None:
                own["k"] = k_for(budget, own)  # with a total budget: the retriever's default
            retriever = retrievers[budget] = ContextWindowRetriever(
                vectorstore=counter if counter is not None else vectorstore, **own
            )
        per_question: dict[str, Any] = {}
        if by_query is not None:
            per_question["keyword_weight"] = keyword_weight_for(question.question, by_query)
        docs = retriever.invoke(question.question, filter=question.where, **per_question)
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
