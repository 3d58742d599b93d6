"""Why a dev set gains little: windows against plain chunks, question by question (issue 42).

Usage::

    python benchmarks/budget_questions.py --sets kerneldocs --budgets 1000,2000

For each question: where the first chunk overlapping its gold quotes ranks in the search (top 20,
inside the question's own file, as every configuration searches), and the coverage of each
configuration at each budget. Prints the coverage by whether the top hit is gold, and by the
gold quotes' spread (first start to last end) and the file's size. Uses the Chroma cache of
``budget.py`` (same collections, no new embedding when it is warm).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import chromadb
from budget import load_set
from langchain_text_splitters import RecursiveCharacterTextSplitter
from locomo import build_store

from window_retriever import WindowSplitter
from window_retriever.evaluation import (
    build_context,
    make_retrieve,
    parse_configs,
    read_questions,
    score,
)

SEARCHED = 20


def dev_store(
    name: str,
    documents: list[Any],
    rows: list[dict[str, Any]],
    chunking: tuple[int, int],
    cache: Path,
) -> tuple[list[Any], Any]:
    """One dev set's questions and its store under ``cache`` (built once, then reused)."""
    size, overlap = chunking
    cache.mkdir(parents=True, exist_ok=True)
    questions_file = cache / f"{name}-questions.jsonl"
    questions_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    questions, _ = read_questions(questions_file)
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap, add_start_index=True)
    )
    client = chromadb.PersistentClient(path=str(cache))
    store, _ = build_store(client, f"{name}-{size}-{overlap}", documents, splitter)
    return questions, store


def run_set(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One record per question of one dev set."""
    documents, rows, (size, overlap) = load_set(name)
    lengths = {d.metadata["source"]: len(d.page_content) for d in documents}
    questions, store = dev_store(name, documents, rows, (size, overlap), Path(args.cache))
    configs = {c.name: make_retrieve(c, store) for c in parse_configs(args.configs)}
    records = []
    for question in questions:
        gold = question.gold_spans
        hits = store.similarity_search(question.question, k=SEARCHED, filter=question.where)
        ranks = [
            rank
            for rank, hit in enumerate(hits)
            if any(
                hit.metadata["start_index"] < end
                and start < hit.metadata["start_index"] + len(hit.page_content)
                for start, end in gold
            )
        ]
        record: dict[str, Any] = {
            "line": question.line,
            "gold_rank": ranks[0] if ranks else None,
            "spread": max(e for _, e in gold) - min(s for s, _ in gold),
            "file": lengths.get(question.source or "", 0),
        }
        for budget in args.budgets:
            for config, retrieve in configs.items():
                pieces = retrieve(question, budget)
                record[f"{config}@{budget}"] = score(
                    question, build_context(pieces, budget)
                ).coverage
        records.append(record)
    return records


def summary(name: str, records: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Print mean coverage per configuration by group of questions."""
    groups: dict[str, Callable[[dict[str, Any]], bool]] = {
        "all": lambda r: True,
        "top hit gold": lambda r: r["gold_rank"] == 0,
        "top hit not gold": lambda r: r["gold_rank"] != 0,
        "spread <= 400": lambda r: r["spread"] <= 400,
        "spread 401-1000": lambda r: 400 < r["spread"] <= 1000,
        "spread > 1000": lambda r: r["spread"] > 1000,
        "file <= 8000": lambda r: r["file"] <= 8000,
    }
    configs = [c.name for c in parse_configs(args.configs)]
    print(
        f"\n## {name}: median file {statistics.median(r['file'] for r in records):.0f} characters"
    )
    print("| budget | questions | n | " + " | ".join(configs) + " |")
    print("|---|---|---|" + "---|" * len(configs))
    for budget in args.budgets:
        for label, keep in groups.items():
            chosen = [r for r in records if keep(r)]
            if not chosen:
                continue
            means = [statistics.fmean(r[f"{c}@{budget}"] for r in chosen) for c in configs]
            print(
                f"| {budget:,} | {label} | {len(chosen)} | "
                + " | ".join(f"{m:.3f}" for m in means)
                + " |"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="kerneldocs")
    parser.add_argument("--budgets", default="1000,2000")
    parser.add_argument("--configs", default="plain,window")
    parser.add_argument(
        "--cache", default=str(Path(tempfile.gettempdir()) / "window-retriever-budget")
    )
    parser.add_argument("--out", help="write the per-question records as JSON here")
    args = parser.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    results = {}
    for name in args.sets.split(","):
        results[name] = run_set(name, args)
        summary(name, results[name], args)
    if args.out:
        Path(args.out).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
