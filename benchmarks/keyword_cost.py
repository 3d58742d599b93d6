"""What keeping the keyword index true costs an ingest (issue 17's target: at most +10%).

Usage: ``python benchmarks/keyword_cost.py [PAGES] [--repeats 3] [--changed 0.1]
[--embeddings minilm|fake] [--url http://127.0.0.1:8000] [--json OUT]`` (on a shared
machine, hold a lock: ``flock /tmp/bench.lock python benchmarks/keyword_cost.py``).

``PAGES`` synthetic text pages (default 1,250: about 10,000 chunks of 400 characters) are
written to a folder and ingested with :func:`window_retriever.ingest` into a fresh collection
(embedded, or on the server at ``--url``), twice a repeat, interleaved:

- *told*: the library as it is: the ingest ends with one ``KeywordIndex.invalidate`` (a new
  generation token in the collection's metadata);
- *untold*: the same ingest into a ``ChromaWindowStore`` whose ``written()`` does nothing.

Each variant runs a first ingest (every page new), then a re-ingest after ``--changed`` of
the pages were rewritten (an update: only those re-embedded). After the told variant's
re-ingest, the first keyword search is timed: it rebuilds the index from the collection
(read, tokenise, index; saved beside an embedded store), what the first query of every
process pays after a write; then a second search (the index in memory).

Reported: medians over the repeats, and the ratios told / untold (the cost of telling) and
(told + first search) / untold (telling and the rebuild it causes, as if paid at ingest).
``--embeddings fake`` embeds with ``DeterministicFakeEmbedding`` (no model: the ingest is
the store's writes alone, the harshest ratio); the default is the packaged MiniLM model.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from window_retriever import ChromaWindowStore, default_embeddings, ingest, open_store
from window_retriever.keywords._index import KeywordIndex  # not public yet: the retriever wires it
from window_retriever.stores._chroma_keywords import keyword_index

CHUNKS_PER_PAGE = 8
"""A page of about 3,000 characters splits into about 8 chunks of 400 (overlap 40)."""


class Untold(ChromaWindowStore):
    """The Chroma adapter without the keyword index's invalidation (the baseline)."""

    def written(self) -> None:
        """Tell nobody."""


def make_pages(folder: Path, count: int, seed: int = 7) -> list[Path]:
    """``count`` pages of about 3,000 characters of words from a vocabulary of 20,000."""
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "ne", "mo", "su", "la", "pe", "di", "vo", "zu", "ha"]
    vocabulary = [
        "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(20_000)
    ]
    paths = []
    for number in range(count):
        words: list[str] = []
        while sum(len(word) + 1 for word in words) < 3000:
            words.append(rng.choice(vocabulary))
        path = folder / f"page{number:06d}.txt"
        path.write_text(" ".join(words) + f" marker{number}\n")
        paths.append(path)
    return paths


def rewrite(paths: list[Path], share: float, round_: int) -> int:
    """Change one word of ``share`` of the pages (same length, new text: an update)."""
    chosen = paths[:: max(1, round(1 / share))] if share > 0 else []
    for path in chosen:
        text = path.read_text()
        path.write_text(text.replace(" ", f" edit{round_} ", 1))
    return len(chosen)


def open_fresh(arguments: argparse.Namespace, embeddings: Any, name: str) -> Any:
    if arguments.url:
        return open_store(url=arguments.url, collection=name, embeddings=embeddings, create=True)
    directory = tempfile.mkdtemp(prefix="keyword-cost-")
    return open_store(directory, collection=name, embeddings=embeddings, create=True)


def run_variant(
    arguments: argparse.Namespace, embeddings: Any, folder: Path, told: bool, repeat: int
) -> dict[str, float]:
    pages = sorted(folder.glob("*.txt"))
    store = open_fresh(arguments, embeddings, f"cost-{repeat}-{'told' if told else 'untold'}")
    target = store if told else Untold(store)
    started = time.perf_counter()
    first = ingest(target, [str(folder)])
    first_s = time.perf_counter() - started
    rewrite(pages, arguments.changed, repeat * 2 + told)
    started = time.perf_counter()
    second = ingest(target, [str(folder)])
    second_s = time.perf_counter() - started
    row = {
        "chunks": float(first.written),
        "ingest_s": first_s,
        "reingest_s": second_s,
        "rewritten_chunks": float(second.written),
    }
    if told:
        KeywordIndex._shared.clear()  # as a new process: nothing built or loaded yet
        index = keyword_index(store)
        started = time.perf_counter()
        index.search("marker0 kato", k=40)
        row["first_search_s"] = time.perf_counter() - started
        started = time.perf_counter()
        index.search("marker1 rine", k=40)
        row["second_search_s"] = time.perf_counter() - started
        row["builds"] = float(index.builds)
    store.delete_collection()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="?", type=int, default=10_000 // CHUNKS_PER_PAGE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--changed", type=float, default=0.1)
    parser.add_argument("--embeddings", choices=["minilm", "fake"], default="minilm")
    parser.add_argument("--url", default=None, help="a Chroma server (default: embedded)")
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args(argv)
    if arguments.embeddings == "fake":
        from langchain_core.embeddings import DeterministicFakeEmbedding

        embeddings: Any = DeterministicFakeEmbedding(size=384)
    else:
        embeddings = default_embeddings()
    rows: dict[str, list[dict[str, float]]] = {"told": [], "untold": []}
    with tempfile.TemporaryDirectory(prefix="keyword-cost-pages-") as directory:
        warm = Path(directory) / "warm-up"  # imports, the model's session, Chroma's start
        warm.mkdir()
        make_pages(warm, 4)
        store = open_fresh(arguments, embeddings, "cost-warm-up")
        ingest(store, [str(warm)])
        keyword_index(store).search("marker0", k=1)
        store.delete_collection()
        for repeat in range(arguments.repeats):
            for told in (repeat % 2 == 0, repeat % 2 == 1):  # alternate which goes first
                folder = Path(directory) / f"r{repeat}-{told}"
                folder.mkdir()
                make_pages(folder, arguments.pages)
                row = run_variant(arguments, embeddings, folder, told, repeat)
                rows["told" if told else "untold"].append(row)
                print(f"repeat {repeat} {'told' if told else 'untold'}: {row}", file=sys.stderr)

    def median(variant: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[variant])

    summary: dict[str, Any] = {
        "pages": arguments.pages,
        "chunks": median("told", "chunks"),
        "embeddings": arguments.embeddings,
        "store": arguments.url or "embedded",
        "repeats": arguments.repeats,
        "ingest_s": {v: median(v, "ingest_s") for v in rows},
        "reingest_s": {v: median(v, "reingest_s") for v in rows},
        "first_search_s": median("told", "first_search_s"),
        "second_search_s": median("told", "second_search_s"),
    }
    for key in ("ingest_s", "reingest_s"):
        told, untold = summary[key]["told"], summary[key]["untold"]
        summary[key.replace("_s", "_ratio")] = told / untold
        summary[key.replace("_s", "_with_rebuild_ratio")] = (
            told + summary["first_search_s"]
        ) / untold
    print(json.dumps(summary, indent=2))
    print(
        f"\n{summary['chunks']:.0f} chunks, {arguments.embeddings} embeddings, "
        f"{summary['store']}: ingest told/untold {summary['ingest_ratio']:.3f} "
        f"(with the first search's rebuild {summary['ingest_with_rebuild_ratio']:.3f}); "
        f"re-ingest of {arguments.changed:.0%} {summary['reingest_ratio']:.3f} "
        f"({summary['reingest_with_rebuild_ratio']:.3f}); first search "
        f"{summary['first_search_s']:.2f} s, second {summary['second_search_s'] * 1000:.1f} ms"
    )
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
