"""Replay the dev-set queries and record (or compare) exactly what the retriever returns.

A change of structure must not change behaviour: this records, for every question of both dev
sets and a spread of configurations (static and adaptive, both directions, a filter, a token
length function, the lean search of a reused retriever, async), the windows each query
returns: their ids, chunk ids, hit ids, scores and over-budget flags. Run it before a change
with ``--record`` and after it with ``--check``; any difference is printed and fails.

Usage::

    python benchmarks/replay.py --record /tmp/replay.json     # before the change, twice
    python benchmarks/replay.py --record /tmp/replay.json
    python benchmarks/replay.py --check /tmp/replay.json      # after it (exit 1 on a change)
    python benchmarks/replay.py --against-reading-all         # windows chosen before the read

Recording into an existing record marks the questions whose windows differ from it as
unstable; ``--check`` reports them apart and does not fail on them. Windows differ between
processes of the same code: Chroma's approximate search does (a bare ``collection.query`` of
the 100 nearest ids for 80 Python-docs questions gave another answer in each of three
processes, 2026-12-02; LoCoMo's the same), and the adaptive windows measure neighbours by that
wider pool, so 14 to 19 pydocs answers differed between two processes, with one hash seed or
two. Record twice, or compare in one process (``--against-reading-all``). The stores are those
of ``budget.py`` (same cache directory, built once).

``--against-reading-all`` checks one change without a record: for every configuration, in one
process, the windows chosen before the read (on the keyword index's lengths, the default with
a total budget) and searched by the ids the index passes (with a filter) against those of
reading every chunk the selection might measure under Chroma's own filter (a store that holds
nothing in the process); it prints the store calls a question and fails on a difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import chromadb
from budget import load_set
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter
from locomo import build_store

from window_retriever import ContextWindowRetriever, WindowSplitter, default_embeddings
from window_retriever.evaluation import CountingStore
from window_retriever.stores import ChromaWindowStore

VECTOR = {"candidates": "vector", "k": 4}
"""0.2.0's defaults with a total budget, pinned so that its records still compare."""


def configurations(sources: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Named retriever arguments; one retriever per name serves every question (lean search)."""
    half = sorted(sources)[: max(1, len(sources) // 2)]
    tokens = default_embeddings().count_tokens
    return {
        "static-k4": {},
        "static-k2-next": {"k": 2, "mode": "next"},
        "static-k3-prev": {"k": 3, "mode": "prev", "window_budget": 900},
        "total-1000": {"total_budget": 1000, **VECTOR},
        "total-2000": {"total_budget": 2000, **VECTOR},
        "total-4000-k12": {"total_budget": 4000, "k": 12, "candidates": "vector"},
        "total-2000-static": {
            "total_budget": 2000,
            "expansion": "static",
            "window_budget": 600,
            **VECTOR,
        },
        "filtered-static": {"filter": {"source": {"$in": half}}},
        "filtered-total-2000": {
            "filter": {"source": {"$in": half}},
            "total_budget": 2000,
            **VECTOR,
        },
        "tokens-total-400": {
            "total_budget": 400,
            "window_budget": 120,
            "length_function": tokens,
            **VECTOR,
        },
        "default-1000": {"total_budget": 1000},
        "default-2000": {"total_budget": 2000},
        "default-4000": {"total_budget": 4000},
        "filtered-default-2000": {"filter": {"source": {"$in": half}}, "total_budget": 2000},
        "next-default-2000": {"total_budget": 2000, "mode": "next"},
    }


def windows(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """What a result is, for comparison: everything but the text, and the text's length."""
    return [
        {
            "id": document.id,
            "chunks": document.metadata.get("chunk_ids"),
            "hits": document.metadata.get("hit_chunk_ids"),
            "score": round(float(document.metadata.get("score", 0.0)), 6),
            "over": document.metadata.get("over_budget", False),
            "length": len(document.page_content),
        }
        for document in documents
    ]


def dev_set(name: str, cache: Path) -> tuple[Any, list[str], list[str]]:
    """The dev set's store (``budget.py``'s, built once in ``cache``), questions and sources."""
    documents, rows, (size, overlap) = load_set(name)
    client = chromadb.PersistentClient(path=str(cache))
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap, add_start_index=True)
    )
    store, _ = build_store(client, f"{name}-{size}-{overlap}", documents, splitter)
    questions = [row["question"] for row in rows]
    return store, questions, [document.metadata["source"] for document in documents]


def replay(name: str, cache: Path) -> dict[str, Any]:
    store, questions, sources = dev_set(name, cache)
    record: dict[str, Any] = {}
    for label, arguments in configurations(sources).items():
        retriever = ContextWindowRetriever(vectorstore=store, **arguments)
        record[label] = [windows(retriever.invoke(question)) for question in questions]
        print(f"{name} {label}: {len(questions)} questions", file=sys.stderr)
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000, **VECTOR)

    async def run_async() -> list[list[dict[str, Any]]]:
        return [windows(await retriever.ainvoke(question)) for question in questions[:40]]

    record["async-total-2000"] = asyncio.run(run_async())
    return record


class ReadingAll(ChromaWindowStore):
    """The same collection with nothing held in the process (no choosing before the read).

    Adaptive windows then read every chunk the selection might measure, and Chroma applies
    the filter to the search (no ids from the keyword index).
    """

    def held(self) -> None:  # noqa: D102
        return None


def against_reading_all(name: str, cache: Path) -> list[str]:
    """Every configuration's windows, chosen before the read against reading everything.

    In one process, so both see the same survey (its pool of 100 distances can differ a little
    between processes); returns the differences, and prints the store calls a question.
    """
    store, questions, sources = dev_set(name, cache)
    differences: list[str] = []
    for label, arguments in configurations(sources).items():
        counting = CountingStore(store)
        chosen = ContextWindowRetriever(vectorstore=counting, **arguments)
        reading = ContextWindowRetriever(vectorstore=ReadingAll(store), **arguments)
        calls = 0
        for number, question in enumerate(questions):
            before = counting.calls
            got = windows(chosen.invoke(question))
            calls += counting.calls - before
            if got != windows(reading.invoke(question)):
                differences.append(f"{name} {label}[{number}]")
        print(
            f"{name} {label}: {calls / len(questions):.3f} store calls a question",
            file=sys.stderr,
        )
    return differences


def compare(old: Any, new: Any, where: str, report: Callable[[str], None]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            compare(old.get(key), new.get(key), f"{where}.{key}", report)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for number, (a, b) in enumerate(zip(old, new, strict=True)):
            compare(a, b, f"{where}[{number}]", report)
    elif old != new:
        report(f"{where}: {old!r} -> {new!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", help="write what the retriever returns to this JSON file")
    action.add_argument("--check", help="compare with a record written by --record")
    action.add_argument(
        "--against-reading-all",
        action="store_true",
        help="compare windows chosen before the read with reading everything, in one process",
    )
    parser.add_argument("--sets", default="locomo,pydocs")
    parser.add_argument(
        "--cache", default=str(Path(tempfile.gettempdir()) / "window-retriever-budget")
    )
    args = parser.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.against_reading_all:
        found = [line for name in args.sets.split(",") for line in against_reading_all(name, cache)]
        print("\n".join(found[:40]))
        print(f"{len(found)} question(s) whose windows differ from reading everything")
        return 1 if found else 0
    result = {name: replay(name, cache) for name in args.sets.split(",")}
    path = Path(args.record or args.check)  # one of the two: the group is required
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    differences: list[str] = []
    if old is not None:
        compare(old["results"], result, "", differences.append)
    unstable = set(old["unstable"]) if old is not None else set()
    if args.record:
        unstable |= {_question(line) for line in differences}
        record = {"results": old["results"] if old else result, "unstable": sorted(unstable)}
        path.write_text(json.dumps(record), encoding="utf-8")
        print(f"recorded {path}; {len(unstable)} unstable question(s): {sorted(unstable)}")
        return 0
    real = [line for line in differences if _question(line) not in unstable]
    for line in real[:40]:
        print(line)
    by_configuration = Counter(".".join(line.split(".", 3)[1:3]).split("[")[0] for line in real)
    for label, count in sorted(by_configuration.items()):
        print(f"{label}: {count} difference(s)")
    print(f"{len(real)} difference(s); {len(differences) - len(real)} in unstable questions")
    return 1 if real else 0


def _question(line: str) -> str:
    """The question a difference is in, whatever the configuration: ``set[number]``."""
    _, name, rest = line.split(".", 2)
    return f"{name}[{rest.split('[', 1)[1].split(']', 1)[0]}]"


if __name__ == "__main__":
    sys.exit(main())
