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

The metric functions are pure; :func:`evaluate` runs the retrievals. One job a module:
``questions`` (the questions file), ``metrics`` (pure), ``configs`` (the configuration
language), ``runner`` (a retrieval function per configuration, and :func:`evaluate`),
``report`` (table, JSON, plot) and ``counting`` (:class:`CountingStore`).
"""

from window_retriever.evaluation.configs import (
    DEFAULT_CONFIGS,
    WINDOW_OPTIONS,
    Config,
    parse_configs,
)
from window_retriever.evaluation.counting import CountingStore
from window_retriever.evaluation.metrics import (
    SEPARATOR,
    Context,
    Piece,
    Score,
    build_context,
    merge_spans,
    normalize_answer,
    overlap,
    paired_bootstrap,
    percentile,
    score,
    span_length,
)
from window_retriever.evaluation.metrics import (
    _paired as _paired,  # private; tests and mutation runs name it here
)
from window_retriever.evaluation.questions import (
    Question,
    Span,
    parse_question,
    read_questions,
    resolve_sources,
)
from window_retriever.evaluation.report import Report, Row
from window_retriever.evaluation.runner import (
    DEFAULT_BUDGETS,
    Retrieve,
    evaluate,
    k_for,
    make_retrieve,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_CONFIGS",
    "SEPARATOR",
    "WINDOW_OPTIONS",
    "Config",
    "Context",
    "CountingStore",
    "Piece",
    "Question",
    "Report",
    "Retrieve",
    "Row",
    "Score",
    "Span",
    "build_context",
    "evaluate",
    "k_for",
    "make_retrieve",
    "merge_spans",
    "normalize_answer",
    "overlap",
    "paired_bootstrap",
    "parse_configs",
    "parse_question",
    "percentile",
    "read_questions",
    "resolve_sources",
    "score",
    "span_length",
]
