"""Latency at scale: windowed against plain retrieval, embedded and on a Chroma server.

Usage: ``python benchmarks/scale.py [--chunks 10000 100000] [--queries 200] [--text docs]
[--corpus synthetic|realistic] [--embeddings fake|packaged] [--out FILE]``.

For each corpus size it builds one store of synthetic chunks (files of 50 chunks of about 400
characters, ten tenants, split and stamped by WindowSplitter, the fake embedding so that the
query embedding costs nothing: the worst case for the ratio; ``--embeddings packaged`` for the
packaged model, which every query then pays for, as a user's does) on local disk, and the same
corpus on a ``chroma run`` server on loopback. The synthetic corpus is the worst case of the
keyword search, not a benchmark of it: its 22 words are each in nine chunks of ten. With
``--text docs`` the chunks are the Python documentation's instead (``apt-get install
python3.11-doc``: 37k chunks, repeated under other sources beyond that), real text's
vocabulary. With ``--corpus realistic`` they are ``realistic.corpus``'s (Python, kernel and
Perl documentation and man pages, resampled; the queries its 459 real questions, and the
filter ``shard``, 10% of the chunks, as ten tenants make ``tenant`` here). Then, on each store, with and without a tenant filter, it times the same
queries (nine words of a chunk each), interleaved, through:

- ``plain``: ``vectorstore.as_retriever(search_kwargs={"k": 4, "filter": ...})``;
- ``window``: ``ContextWindowRetriever(k=4)`` (static windows of up to 1,200 characters);
- ``budget``: ``ContextWindowRetriever(total_budget=2000, candidates="vector")``
  (adaptive windows from vector hits, ``k`` at its default for the budget, 10);
- ``hybrid``: ``ContextWindowRetriever(total_budget=2000)``, every other option at its
  default: vector + BM25 keyword hits (its keyword index is built before the timing starts);
- ``get``: one ``collection.get(ids=...)`` of exactly the ids the window retriever fetched for
  that query: the second round trip, the floor of any windowing that reads neighbours;
- ``window_where``: ``window`` as in a process that holds no keyword index (a static-windows
  user's): Chroma applies the filter to the search. The others search the ids the hybrid
  retriever's index passes (``KeywordIndex.passing``), as every retriever of a process that
  runs the default does;
- ``hybrid_given``: ``hybrid`` with each query's keyword hits found before the clock starts
  (the same hits): what the default costs beyond its keyword search, to tell the keyword
  leg's share of ``hybrid`` from the rest.

Then ``--spaced`` more queries (default 10), each after a pause longer than the keyword
index's ``check_interval``, through ``window`` and ``hybrid`` in turn: a service that answers
less than one query a second, where every search of the default finds the index's check due.

It reports p50 and p95 of each, the ratios to plain in the same run, the windowed time above
plain in units of that one get, store calls a query, and the spaced p50s. Numbers are ratios
side by side: these machines are noisy, so compare within one run, never across runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from models import add_embeddings_option, embeddings_named
from synthetic import synthetic_files

from window_retriever import (
    ContextWindowRetriever,
    Fetch,
    Found,
    WindowSplitter,
    add_chunks,
    load_file,
    open_store,
)
from window_retriever.evaluation import CountingStore
from window_retriever.keywords._lifecycle import DEFAULT_CHECK_INTERVAL
from window_retriever.stores._chroma import ChromaWindowStore

PER_FILE = 50
TENANTS = 10


class Recorder(CountingStore):
    """The evaluation's store-call counter, keeping the ids of the last fetch too."""

    def __init__(self, vectorstore: Any) -> None:
        super().__init__(vectorstore)
        self.last_ids: list[str] = []

    def fetch(self, request: Fetch) -> Found:  # noqa: D102
        self.last_ids = list(request.ids)
        return super().fetch(request)


class WhereFiltered(ChromaWindowStore):
    """The store with Chroma applying every filter to the search: no keyword index used."""

    def held(self) -> None:  # noqa: D102
        return None


class KeywordsGiven(ChromaWindowStore):
    """The store with every keyword search answered from what it returned the first time."""

    def __init__(self, vectorstore: Any) -> None:
        super().__init__(vectorstore)
        self.found: dict[tuple[Any, ...], Any] = {}

    def keyword_search(self, query: str, k: int, where: Any, where_document: Any) -> Any:  # noqa: D102
        key = (query, k, repr(where), repr(where_document))
        if key not in self.found:
            self.found[key] = super().keyword_search(query, k, where, where_document)
        return self.found[key]


def corpus(chunks: int) -> tuple[list[Document], list[str]]:
    """Synthetic files of PER_FILE chunks, a tenant each; and query texts drawn from them."""
    rng = random.Random(7)
    documents = synthetic_files(
        rng,
        chunks,
        PER_FILE,
        lambda number: {"source": f"doc-{number}", "tenant": f"t{number % TENANTS}"},
    )
    split = WindowSplitter().split_documents(documents)
    return split, queries_from(rng, split)


def queries_from(rng: random.Random, split: Sequence[Document]) -> list[str]:
    """Query texts: nine words (the fourth to the twelfth) of each of 2,000 sampled chunks.

    A chunk of three words or fewer gives no query (the Python docs at 20k hold one).
    """
    texts = [c.page_content for c in rng.sample(list(split), min(len(split), 2000))]
    return [query for query in (" ".join(t.split()[3:12]) for t in texts) if query]


def docs_corpus(chunks: int) -> tuple[list[Document], list[str]]:
    """The Python documentation's pages as files of ten tenants; and query texts from them.

    Pages in a seeded order until there are ``chunks``, again under other sources once all
    were used. Real technical text: most words are in few chunks, where each of the synthetic
    corpus's 22 is in nine chunks of ten.
    """
    from pydocs import DOCS_ROOT

    if not DOCS_ROOT.is_dir():
        msg = f"{DOCS_ROOT} not found: install it with `apt-get install python3.11-doc`"
        raise SystemExit(msg)
    rng = random.Random(7)
    pages = sorted(
        path
        for path in DOCS_ROOT.rglob("*.html")
        if not any(part.startswith("_") for part in path.relative_to(DOCS_ROOT).parts)
        and not path.name.startswith(("genindex", "search", "py-modindex"))
    )
    rng.shuffle(pages)
    splitter = WindowSplitter()
    texts: dict[Path, str] = {}
    split: list[Document] = []
    for number in itertools.count():
        page = pages[number % len(pages)]
        if page not in texts:
            loaded = load_file(page)
            texts[page] = loaded.document.page_content if loaded.document else ""
        source = f"copy{number // len(pages)}/{page.relative_to(DOCS_ROOT)}"
        metadata = {"source": source, "tenant": f"t{number % TENANTS}"}
        split += splitter.split_documents([Document(texts[page], metadata=metadata)])
        if len(split) >= chunks:
            break
    return split, queries_from(rng, split)


def start_server(path: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    import chromadb

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    executable = Path(sys.executable).parent / "chroma"
    process = subprocess.Popen(  # noqa: S603 - this environment's own chroma
        [str(executable), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
            return process, f"http://127.0.0.1:{port}"
        except Exception:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.2)


def p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def measure(
    store: Any, queries: Sequence[str], where: dict[str, str] | None, spaced_queries: int = 0
) -> dict[str, Any]:
    """Time plain, the windowed retrievers and the floor get on the same queries, interleaved."""
    recorder = Recorder(store)
    plain = store.as_retriever(search_kwargs={"k": 4, **({"filter": where} if where else {})})
    window = ContextWindowRetriever(vectorstore=recorder, k=4, filter=where)
    budget = ContextWindowRetriever(
        vectorstore=recorder, total_budget=2000, filter=where, candidates="vector"
    )
    hybrid = ContextWindowRetriever(vectorstore=recorder, total_budget=2000, filter=where)
    unindexed = Recorder(WhereFiltered(store))
    window_where = ContextWindowRetriever(vectorstore=unindexed, k=4, filter=where)
    given = Recorder(KeywordsGiven(store))
    hybrid_given = ContextWindowRetriever(vectorstore=given, total_budget=2000, filter=where)
    recorders = {"window": recorder, "budget": recorder, "hybrid": recorder}
    recorders |= {"window_where": unindexed, "hybrid_given": given}
    retrievers = {
        "window": window,
        "budget": budget,
        "hybrid": hybrid,
        "window_where": window_where,
        "hybrid_given": hybrid_given,
    }
    collection = store._collection
    names = ("plain", *retrievers, "get")
    times: dict[str, list[float]] = {name: [] for name in names}
    calls: dict[str, list[int]] = {name: [] for name in retrievers}

    def timed(name: str, run: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        result = run()
        times[name].append(time.perf_counter() - began)
        return result

    for warm in queries[:20]:
        plain.invoke(warm)
        for retriever in retrievers.values():
            retriever.invoke(warm)
    for query in queries:  # every keyword search hybrid_given will ask, asked once now
        hybrid_given.invoke(query)
    for times_list in times.values():
        times_list.clear()
    for number, query in enumerate(queries):
        order = ["plain", *retrievers]
        order = order[number % len(order) :] + order[: number % len(order)]  # no position bias
        for name in order:
            if name == "plain":
                timed("plain", partial(plain.invoke, query))
                continue
            before = recorders[name].calls
            recorder.last_ids = []
            timed(name, partial(retrievers[name].invoke, query))
            calls[name].append(recorders[name].calls - before)
            if name == "window":
                include = ["documents", "metadatas"]
                timed("get", partial(collection.get, ids=recorder.last_ids, include=include))
    spaced: dict[str, list[float]] = {"window": [], "hybrid": []}
    for query in queries[-spaced_queries:] if spaced_queries else []:
        for name in spaced:
            time.sleep(DEFAULT_CHECK_INTERVAL + 0.1)
            began = time.perf_counter()
            retrievers[name].invoke(query)
            spaced[name].append(time.perf_counter() - began)
    result: dict[str, Any] = {}
    if spaced_queries:
        result["spaced"] = {name: p(values, 0.5) for name, values in spaced.items()}
    for name, values in times.items():
        result[name] = {"p50": p(values, 0.5), "p95": p(values, 0.95)}
    result["hybrid"]["over_budget_p50"] = result["hybrid"]["p50"] / result["budget"]["p50"]
    result["budget"]["over_window_p50"] = result["budget"]["p50"] / result["window"]["p50"]
    result["hybrid"]["over_window_p50"] = result["hybrid"]["p50"] / result["window"]["p50"]
    result["hybrid_given"]["over_window_p50"] = (
        result["hybrid_given"]["p50"] / result["window"]["p50"]
    )
    for name in retrievers:
        result[name]["ratio_p50"] = result[name]["p50"] / result["plain"]["p50"]
        result[name]["ratio_p95"] = result[name]["p95"] / result["plain"]["p95"]
        result[name]["calls"] = statistics.mean(calls[name])
        result[name]["over_plain_in_gets"] = (result[name]["p50"] - result["plain"]["p50"]) / (
            result["get"]["p50"]
        )
    result["floor_ratio_p50"] = (result["plain"]["p50"] + result["get"]["p50"]) / result["plain"][
        "p50"
    ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", nargs="+", default=["embedded", "server"])
    parser.add_argument("--spaced", type=int, default=10)
    parser.add_argument(
        "--text",
        choices=["synthetic", "docs"],
        default="synthetic",
        help="the synthetic corpus, or the Python documentation's pages (python3.11-doc)",
    )
    parser.add_argument(
        "--corpus",
        choices=["synthetic", "realistic"],
        default="synthetic",
        help="--text's corpus, or real documentation resampled (realistic.py); synthetic is "
        "the keyword search's worst case",
    )
    add_embeddings_option(parser)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    embeddings = embeddings_named(args.embeddings)
    rows: list[dict[str, Any]] = []
    for size in args.chunks:
        if args.corpus == "realistic":
            from realistic import corpus as realistic_corpus

            split, queries = realistic_corpus(size)
        else:
            split, queries = corpus(size) if args.text == "synthetic" else docs_corpus(size)
        queries = queries[: args.queries]
        text = "realistic" if args.corpus == "realistic" else args.text
        filtered = {"shard": "s3"} if args.corpus == "realistic" else {"tenant": "t3"}
        for kind in args.kinds:
            with tempfile.TemporaryDirectory() as directory:
                server = None
                if kind == "server":
                    server, url = start_server(Path(directory))
                    store = open_store(
                        url=url, collection="bench", create=True, embeddings=embeddings
                    )
                else:
                    store = open_store(
                        directory, collection="bench", create=True, embeddings=embeddings
                    )
                try:
                    began = time.perf_counter()
                    add_chunks(store, split)
                    built = time.perf_counter() - began
                    for where in (None, filtered):
                        row = {
                            "text": text,
                            "chunks": len(split),
                            "store": kind,
                            "filter": next(iter(where)) if where else "none",
                            "embeddings": args.embeddings,
                            "build_s": round(built, 1),
                            **measure(store, queries, where, args.spaced),
                        }
                        rows.append(row)
                        print(_line(row), flush=True)
                finally:
                    if server is not None:
                        server.terminate()
                        server.wait(timeout=10)
    print()
    print(_table(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row.get('text', 'synthetic')} {row['chunks']} {row['store']} filter={row['filter']}: plain {row['plain']['p50']:.2f} "
        f"ms, window {row['window']['p50']:.2f} ({row['window']['ratio_p50']:.2f}x), budget "
        f"{row['budget']['p50']:.2f} ({row['budget']['ratio_p50']:.2f}x plain, "
        f"{row['budget']['over_window_p50']:.2f}x window), hybrid "
        f"{row['hybrid']['p50']:.2f} ({row['hybrid']['over_budget_p50']:.2f}x budget, "
        f"{row['hybrid']['over_window_p50']:.2f}x window), window_where "
        f"{row['window_where']['p50']:.2f}, hybrid_given {row['hybrid_given']['p50']:.2f} "
        f"({row['hybrid_given']['over_window_p50']:.2f}x window), get {row['get']['p50']:.2f}, "
        f"floor {row['floor_ratio_p50']:.2f}x" + _spaced(row)
    )


def _pair(spaced: dict[str, float] | None) -> str:
    return "-" if not spaced else f"{spaced['window']:.2f}, {spaced['hybrid']:.2f}"


def _spaced(row: dict[str, Any]) -> str:
    spaced = row.get("spaced")
    if not spaced:
        return ""
    window, hybrid = spaced["window"], spaced["hybrid"]
    return f"; spaced: window {window:.2f}, hybrid {hybrid:.2f} ({hybrid / window:.2f}x)"


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| text | chunks | store | filter | plain p50 / p95 ms | window p50 / p95 ms | ratio p50 / p95 "
        "| budget p50 / p95 ms | ratio p50 / p95 | one get p50 ms | floor (plain + get) "
        "| above plain, in gets (window, budget, hybrid) | hybrid p50 / p95 ms "
        "| budget / window p50 | hybrid / budget p50 | store calls (window, budget, hybrid) "
        "| window_where / plain p50, above plain in gets | hybrid_given / window p50 "
        "| spaced p50 ms (window, hybrid) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        w, b, h, ww = r["window"], r["budget"], r["hybrid"], r["window_where"]
        hg = r["hybrid_given"]
        lines.append(
            f"| {r.get('text', 'synthetic')} | {r['chunks']:,} | {r['store']} | {r['filter']} "
            f"| {r['plain']['p50']:.2f} / {r['plain']['p95']:.2f} "
            f"| {w['p50']:.2f} / {w['p95']:.2f} | {w['ratio_p50']:.2f}x / {w['ratio_p95']:.2f}x "
            f"| {b['p50']:.2f} / {b['p95']:.2f} | {b['ratio_p50']:.2f}x / {b['ratio_p95']:.2f}x "
            f"| {r['get']['p50']:.2f} | {r['floor_ratio_p50']:.2f}x "
            f"| {w['over_plain_in_gets']:.2f}, {b['over_plain_in_gets']:.2f}, "
            f"{h['over_plain_in_gets']:.2f} | {h['p50']:.2f} / {h['p95']:.2f} "
            f"| {b['over_window_p50']:.2f}x | {h['over_budget_p50']:.2f}x "
            f"| {w['calls']:.2f}, {b['calls']:.2f}, {h['calls']:.2f} "
            f"| {ww['ratio_p50']:.2f}x, {ww['over_plain_in_gets']:.2f} "
            f"| {hg['over_window_p50']:.2f}x "
            f"| {_pair(r.get('spaced'))} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
