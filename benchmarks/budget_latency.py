"""Two configurations' latency on the dev sets, timed question by question in turn (issue 42).

Usage::

    python benchmarks/budget_latency.py --configs window,window:diversity=0.1

``budget.py`` times each configuration over all the questions before the next, so on a
shared machine a burst of other work lands on one of them; here the two run on each question
in turn (the order alternating from one question to the next), and the ratio of their median
latencies is given per set and budget, with the geometric mean of those ratios. Run it from
two checkouts (``PYTHONPATH=<checkout>``) to compare one configuration before and after a
change. Uses the Chroma cache of ``budget.py`` (same collections, no new embedding when it is
warm).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budget import SETS, load_set
from budget_questions import dev_store

from window_retriever.evaluation import make_retrieve, parse_configs


def run_set(name: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The two configurations' median latencies (ms) and their ratio, by budget."""
    documents, rows, (size, overlap) = load_set(name)
    questions, store = dev_store(name, documents, rows, (size, overlap), Path(args.cache))
    configs = parse_configs(args.configs)
    if len(configs) != 2:
        sys.exit("--configs takes two configurations: a baseline and the one to time against it")
    retrieves = [make_retrieve(config, store) for config in configs]
    for retrieve in retrieves:  # warm up (model load, caches) outside the timings
        retrieve(questions[0], args.budgets[0])
    result: dict[str, dict[str, float]] = {}
    for budget in args.budgets:
        timings: list[list[float]] = [[], []]
        for number, question in enumerate(questions):
            for side in (0, 1) if number % 2 == 0 else (1, 0):
                began = time.perf_counter()
                retrieves[side](question, budget)
                timings[side].append((time.perf_counter() - began) * 1000)
        base, other = (statistics.median(t) for t in timings)
        result[str(budget)] = {"base_p50_ms": base, "p50_ms": other, "ratio": other / base}
        print(
            f"{name} {budget}: {configs[0].name} {base:.2f} ms, {configs[1].name} {other:.2f} ms, "
            f"{other / base:.2f}x",
            flush=True,
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--budgets", default="500,1000,2000,4000")
    parser.add_argument("--configs", default="window,window:diversity=0.1")
    parser.add_argument(
        "--cache",
        default=str(Path(tempfile.gettempdir()) / "window-retriever-budget"),
        help="Chroma directory reused between runs (budget.py's)",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    results: dict[str, Any] = {name: run_set(name, args) for name in args.sets.split(",")}
    ratios = [cell["ratio"] for cells in results.values() for cell in cells.values()]
    results["geometric_mean_ratio"] = math.exp(statistics.fmean(map(math.log, ratios)))
    print(
        f"geometric mean of the ratios {results['geometric_mean_ratio']:.2f}x "
        f"(cells {min(ratios):.2f}x to {max(ratios):.2f}x)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
