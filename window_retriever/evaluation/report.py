"""The report of a run: a row per configuration and budget, as a table, JSON or a plot."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from window_retriever._errors import ConfigurationError
from window_retriever.evaluation.metrics import Score


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
