"""What keeping the keyword index true costs an ingest (issue 17's target: at most +10%).

Usage: ``python benchmarks/keyword_cost.py [PAGES] [--repeats 3] [--changed 0.1]
[--embeddings minilm|fake] [--url http://127.0.0.1:8000] [--corpus synthetic|realistic]
[--json OUT]`` (on a shared machine, hold a lock: ``flock /tmp/bench.lock python
benchmarks/keyword_cost.py``).

``--corpus``: ``synthetic`` (the default) writes pages of random words of a made-up
vocabulary of 20,000; ``realistic`` writes pages of real documentation (``realistic.py``:
eight consecutive chunks of a page each). The synthetic text is not what a documentation
store holds: ``realistic`` is the benchmark.

``PAGES`` text pages (default 1,250: about 10,000 chunks of 400 characters) are
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

``--scale N [N ...]``: instead, the keyword index of a store of ``N`` chunks
(``realistic.corpus`` with ``--corpus realistic``, else ``scale.corpus``: synthetic chunks,
every query word in nine chunks of ten, the worst case of a keyword search), written with
``add_chunks`` under a cheap fake embedding (64 dimensions: what is timed is the keyword
index alone), in a store on disk (``--keep-store DIR``: filled once, reused after;
``--fill-only`` stops there). Timed, each in this process with no other index of the
collection held and no reconciliation in the background:

- *build*: a new index's ``refresh()`` with nothing saved (read every record, tokenise,
  index, save), and beside it reading every record alone (``KeywordSource.pages``) and
  tokenising every text alone (``stems``): the rest is the rows and tantivy;
- *load*: a new index's ``refresh()`` with the copy the build saved;
- *reconcile*: ``reconcile()`` of an index that holds the collection as it is (it reads and
  compares every record, finds nothing), ``--reconciles`` times;
- *search*: ``search(query, k)`` with the ``k`` of the default (``total_budget=2000``: 10),
  for each query (the realistic corpus's 459 real questions; nine words of a chunk each on
  the synthetic one), unfiltered and with each filter, interleaved: p50, p90, p99. Filters on
  the realistic corpus: ``shard`` (10% of the chunks), ``tenant`` (1%), and a ``tenant``
  that changes at every query (each of the 100 in turn: more filters than the index keeps
  masks for); on the synthetic corpus ``tenant`` (10%). ``--profile`` adds, for each filter,
  the functions where 100 of those searches spent their time.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from window_retriever import ChromaWindowStore, add_chunks, default_embeddings, ingest, open_store
from window_retriever.keywords._engine import stems
from window_retriever.keywords._index import KeywordIndex  # not public yet: the retriever wires it
from window_retriever.keywords._lifecycle import PAGE_SIZE
from window_retriever.retrieval._params import default_k
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index

CHUNKS_PER_PAGE = 8
"""A page of about 3,000 characters splits into about 8 chunks of 400 (overlap 40)."""


class Untold(ChromaWindowStore):
    """The Chroma adapter without the keyword index's invalidation (the baseline)."""

    def written(self) -> None:
        """Tell nobody."""


def make_pages(folder: Path, count: int, seed: int = 7, corpus: str = "synthetic") -> list[Path]:
    """``count`` pages of about 3,000 characters: made-up words, or real documentation."""
    if corpus == "realistic":
        from realistic import page_texts

        texts: Iterable[str] = page_texts(count, seed=seed)
    else:
        texts = synthetic_texts(count, seed)
    paths = []
    for number, text in enumerate(texts):
        path = folder / f"page{number:06d}.txt"
        path.write_text(text + f" marker{number}\n")
        paths.append(path)
    return paths


def synthetic_texts(count: int, seed: int = 7) -> Iterable[str]:
    """``count`` texts of about 3,000 characters of words from a vocabulary of 20,000."""
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "ne", "mo", "su", "la", "pe", "di", "vo", "zu", "ha"]
    vocabulary = [
        "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(20_000)
    ]
    for _ in range(count):
        words: list[str] = []
        while sum(len(word) + 1 for word in words) < 3000:
            words.append(rng.choice(vocabulary))
        yield " ".join(words)


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


K = default_k(2000)
"""The ``k`` the default's keyword leg asks for: ``total_budget=2000`` gives 10."""

FILTERS: dict[str, dict[str, dict[str, str] | None]] = {
    "realistic": {"none": None, "10%": {"shard": "s3"}, "1%": {"tenant": "t37"}},
    "synthetic": {"none": None, "10%": {"tenant": "t3"}},
}


def memory(field: str) -> float:
    """This process's ``VmRSS`` or ``VmHWM``, MiB."""
    status = Path("/proc/self/status").read_text()
    return int(status.split(field + ":")[1].split()[0]) / 1024


def scale_store(arguments: argparse.Namespace, n: int) -> tuple[Any, Path, list[str], list[str]]:
    """The store of ``n`` chunks, filled unless ``--keep-store`` holds it; its texts, queries."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    if arguments.corpus == "realistic":
        from realistic import chunks, questions

        texts, metadatas = chunks(n)
        queries = questions()
    else:
        from scale import corpus

        documents, queries = corpus(n)
        texts = [document.page_content for document in documents]
        metadatas = [document.metadata for document in documents]
    folder = arguments.keep_store or Path(tempfile.mkdtemp(prefix="keyword-scale-"))
    name = f"keywords-{arguments.corpus}-{n}"
    embeddings = DeterministicFakeEmbedding(size=64)  # cheap: the vectors are not searched
    store = open_store(folder, collection=name, embeddings=embeddings, create=True)
    if store._collection.count() != len(texts):
        from langchain_core.documents import Document

        started = time.perf_counter()
        documents = [
            Document(page_content=text, metadata=metadata, id=metadata["chunk_id"])
            for text, metadata in zip(texts, metadatas, strict=True)
        ]
        add_chunks(store, documents)
        del documents
        print(f"filled {n} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return store, folder, texts, queries


def timed_searches(
    index: KeywordIndex, queries: list[str], filters: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Each query through each filter, interleaved (the order turns), after a warm-up."""
    rotating = {"1% rotating": None} if "1%" in filters else {}
    names = [*filters, *rotating]

    def where(name: str, number: int) -> Any:
        return {"tenant": f"t{number % 100}"} if name == "1% rotating" else filters[name]

    for number, query in enumerate(queries[:20]):
        for name in names:
            index.search(query, K, where=where(name, number))
    times: dict[str, list[float]] = {name: [] for name in names}
    hits: dict[str, list[int]] = {name: [] for name in names}
    for number, query in enumerate(queries):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            began = time.perf_counter()
            found = index.search(query, K, where=where(name, number))
            times[name].append(time.perf_counter() - began)
            hits[name].append(len(found))

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        name: {
            "p50_ms": p(values, 0.5),
            "p90_ms": p(values, 0.9),
            "p99_ms": p(values, 0.99),
            "mean_ms": round(statistics.mean(values) * 1000, 3),
            "mean_hits": round(statistics.mean(hits[name]), 2),
            "queries": len(values),
        }
        for name, values in times.items()
    }


def profiled(index: KeywordIndex, queries: list[str], where: Any) -> list[list[Any]]:
    """Where 100 searches spend their time: the heaviest functions, ms a search (own, all)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    for query in queries[:100]:
        index.search(query, K, where=where)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    heaviest = sorted(stats.items(), key=lambda item: -item[1][2])[:8]
    count = min(100, len(queries))
    return [
        [
            f"{Path(file).name}:{line}({function})",
            round(own / count * 1000, 3),
            round(whole / count * 1000, 3),
        ]
        for (file, line, function), (_, _, own, whole, _) in heaviest
    ]


def run_scale(arguments: argparse.Namespace, n: int) -> dict[str, Any]:
    """The keyword index's costs over a store of ``n`` chunks (``--scale``)."""
    started = time.perf_counter()
    store, folder, texts, queries = scale_store(arguments, n)
    row: dict[str, Any] = {"corpus": arguments.corpus, "chunks": len(texts), "k": K}
    row["corpus_and_fill_s"] = round(time.perf_counter() - started, 1)
    if arguments.fill_only:
        return row
    shutil.rmtree(folder / "window_retriever_keyword", ignore_errors=True)  # build, not load
    KeywordIndex._shared.clear()  # as a new process: nothing built or loaded yet
    index = keyword_index(store, reconcile_interval=math.inf)
    began = time.perf_counter()
    index.refresh()
    row["build_s"] = round(time.perf_counter() - began, 2)
    row["builds"], row["rows"] = index.builds, len(index)
    row["rss_mib_after_build"] = round(memory("VmRSS"))
    source = ChromaKeywordSource(store)
    began = time.perf_counter()
    read = sum(len(ids) for ids, _, _ in source.pages(PAGE_SIZE))
    row["read_alone_s"] = round(time.perf_counter() - began, 2)
    began = time.perf_counter()
    for text in texts:
        stems(text)
    row["tokenise_alone_s"] = round(time.perf_counter() - began, 2)
    row["read_records"] = read
    reconciles = []
    for _ in range(arguments.reconciles):
        began = time.perf_counter()
        differing = index.reconcile()
        reconciles.append(round(time.perf_counter() - began, 2))
        if differing:
            row.setdefault("reconcile_found", []).append(len(differing))
    row["reconcile_s"] = reconciles
    KeywordIndex._shared.clear()
    del index
    index = keyword_index(store, reconcile_interval=math.inf)
    began = time.perf_counter()
    index.refresh()
    row["load_s"] = round(time.perf_counter() - began, 3)
    row["loads"], row["builds_at_load"] = index.loads, index.builds
    filters = FILTERS[arguments.corpus]
    row["filter_share"] = {
        name: round(len(index.passing(where) or []) / len(index), 4)
        for name, where in filters.items()
        if where is not None
    }
    row["filters"] = {name: where for name, where in filters.items()}
    row["search"] = timed_searches(index, queries, filters)
    if arguments.profile:
        row["profile"] = {name: profiled(index, queries, where) for name, where in filters.items()}
    row["rss_mib"] = round(memory("VmRSS"))
    return row


def main_scale(arguments: argparse.Namespace) -> int:
    rows = []
    for n in arguments.scale:
        row = run_scale(arguments, n)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if arguments.json is not None:
        found = rows[0] if len(rows) == 1 else rows
        arguments.json.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="?", type=int, default=10_000 // CHUNKS_PER_PAGE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--changed", type=float, default=0.1)
    parser.add_argument("--embeddings", choices=["minilm", "fake"], default="minilm")
    parser.add_argument("--url", default=None, help="a Chroma server (default: embedded)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--corpus",
        choices=["synthetic", "realistic"],
        default="synthetic",
        help="made-up words (the worst case of a keyword search) or real documentation",
    )
    parser.add_argument("--scale", type=int, nargs="+", default=None, metavar="N")
    parser.add_argument("--keep-store", type=Path, default=None)
    parser.add_argument("--fill-only", action="store_true")
    parser.add_argument("--reconciles", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    arguments = parser.parse_args(argv)
    if arguments.scale:
        return main_scale(arguments)
    if arguments.embeddings == "fake":
        from langchain_core.embeddings import DeterministicFakeEmbedding

        embeddings: Any = DeterministicFakeEmbedding(size=384)
    else:
        embeddings = default_embeddings()
    rows: dict[str, list[dict[str, float]]] = {"told": [], "untold": []}
    with tempfile.TemporaryDirectory(prefix="keyword-cost-pages-") as directory:
        warm = Path(directory) / "warm-up"  # imports, the model's session, Chroma's start
        warm.mkdir()
        make_pages(warm, 4, corpus=arguments.corpus)
        store = open_fresh(arguments, embeddings, "cost-warm-up")
        ingest(store, [str(warm)])
        keyword_index(store).search("marker0", k=1)
        store.delete_collection()
        for repeat in range(arguments.repeats):
            for told in (repeat % 2 == 0, repeat % 2 == 1):  # alternate which goes first
                folder = Path(directory) / f"r{repeat}-{told}"
                folder.mkdir()
                make_pages(folder, arguments.pages, corpus=arguments.corpus)
                row = run_variant(arguments, embeddings, folder, told, repeat)
                rows["told" if told else "untold"].append(row)
                print(f"repeat {repeat} {'told' if told else 'untold'}: {row}", file=sys.stderr)

    def median(variant: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[variant])

    summary: dict[str, Any] = {
        "pages": arguments.pages,
        "corpus": arguments.corpus,
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
