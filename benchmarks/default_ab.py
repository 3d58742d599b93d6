r"""The default call over static windows, one checkout against another, in alternating processes.

Usage::

    git archive COMMIT | tar -x -C /tmp/before          # the package before a change
    nice -n 10 flock /tmp/bench.lock python benchmarks/default_ab.py --rounds 4 \
        --package before=/tmp/before --package after=. --out FILE

It builds one embedded store of ``realistic.corpus`` chunks (``--chunks``, 20,000 by default;
the fake embedding, so that embedding the query costs nothing: the worst case for the ratio;
``--embeddings packaged`` for the packaged model, what a user runs)
and its keyword index, once, in a temporary folder. Then, ``--rounds`` times, each checkout in
turn runs a fresh process (``PYTHONPATH`` = its folder) that opens the store, warms both
retrievers on 30 queries, and times ``--queries`` queries through static windows
(``ContextWindowRetriever(k=4)``) and the default (``total_budget=2000``), interleaved query by
query. Each process reports both p50s and their ratio: compare the ratios of the checkouts,
which share the machine's load round by round, never the milliseconds of two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from models import add_embeddings_option

HERE = Path(__file__).resolve().parent


def child(store: str, chunks: int, queries: int, build: bool, model: str) -> dict[str, float]:
    """In a process of one checkout: build the store, or time both retrievers on it."""
    sys.path.insert(0, str(HERE))
    from models import embeddings_named
    from realistic import corpus

    from window_retriever import ContextWindowRetriever, add_chunks, open_store
    from window_retriever.stores import keyword_index

    embeddings = embeddings_named(model)
    split, asked = corpus(chunks)
    asked = asked[:queries]
    if build:
        built = open_store(store, collection="bench", create=True, embeddings=embeddings)
        add_chunks(built, split)
        keyword_index(built).refresh()  # built here, and saved beside the store
        return {}
    opened = open_store(store, collection="bench", embeddings=embeddings)
    default = ContextWindowRetriever(opened, total_budget=2000)
    static = ContextWindowRetriever(opened, k=4)
    for question in asked[:30]:
        default.invoke(question)
        static.invoke(question)
    times: dict[str, list[float]] = {"static": [], "default": []}
    for question in asked:
        for name, retriever in (("static", static), ("default", default)):
            began = time.perf_counter()
            retriever.invoke(question)
            times[name].append(time.perf_counter() - began)
    found = {name: 1000 * statistics.median(values) for name, values in times.items()}
    found["ratio"] = found["default"] / found["static"]
    return found


def run(package: str, arguments: list[str]) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": package}
    done = subprocess.run(  # noqa: S603 - this script, in the checkout's environment
        [sys.executable, __file__, "--child", *arguments],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", default=[], metavar="LABEL=DIR")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=300)
    add_embeddings_option(parser)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.store, args.chunks, args.queries, args.build, args.embeddings)))
        return
    packages = dict(item.split("=", 1) for item in args.package) or {"current": ""}
    packages = {
        label: str(Path(folder).resolve()) if folder else "" for label, folder in packages.items()
    }
    with tempfile.TemporaryDirectory() as folder:
        common = [
            *("--store", folder, "--chunks", str(args.chunks), "--queries", str(args.queries)),
            *("--embeddings", args.embeddings),
        ]
        run(next(iter(packages.values())), [*common, "--build"])
        time.sleep(2)  # the keyword index saved beside the store
        rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in packages}
        for number in range(args.rounds):
            for label, package in packages.items():
                found = run(package, common)
                rounds[label].append(found)
                print(
                    f"round {number + 1} {label}: static {found['static']:.2f} ms, "
                    f"default {found['default']:.2f} ms, {found['ratio']:.3f}x",
                    flush=True,
                )
    summary = {
        label: {
            "ratio_median": statistics.median(found["ratio"] for found in runs),
            "default_median_ms": statistics.median(found["default"] for found in runs),
            "static_median_ms": statistics.median(found["static"] for found in runs),
            "rounds": runs,
        }
        for label, runs in rounds.items()
    }
    for label, found in summary.items():
        print(
            f"{label}: default / static {found['ratio_median']:.3f}x "
            f"(default {found['default_median_ms']:.2f} ms p50, median of the rounds)"
        )
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
