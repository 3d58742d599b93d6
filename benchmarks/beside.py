"""The keyword leg beside the vector search, or after it: the default's cost, side by side.

Usage: ``python benchmarks/beside.py [--chunks 10000 100000] [--queries 600]
[--embeddings fake packaged] [--corpus synthetic|realistic] [--out FILE]``.

For each corpus size it builds one embedded store of ``scale.py``'s synthetic chunks (or,
with ``--corpus realistic``, ``realistic.py``'s chunks of real documentation and its
questions; the fake embedding), then times the same queries, interleaved, in one process, through:

- ``window``: ``ContextWindowRetriever(k=4)`` (static windows);
- ``after``: ``ContextWindowRetriever(total_budget=2000)`` with its keyword search run after
  the vector search in the caller's thread (as before the keyword leg could start ahead);
- ``beside``: the same retriever as it runs: its keyword search on a worker thread while the
  query is embedded and Chroma searches, once the keyword index is ready.

With ``--embeddings fake`` the query embedding costs nothing (the worst case: only Chroma's
search runs beside the keyword leg); with ``packaged`` the queries are embedded by the
packaged local model, as a user without an API key runs it (their vectors search the fake
ones' store: the same cost). It checks that both give the same windows on every query, and
reports p50 and p95 of each and the ratios to ``window``. Compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import realistic
import scale
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from window_retriever import ContextWindowRetriever, add_chunks, default_embeddings, open_store
from window_retriever.retrieval import _beside as beside_module
from window_retriever.stores import keyword_index

_start_beside = beside_module.Beside.start


def _after(self: beside_module.Beside) -> beside_module.Call:
    """The call itself: the driver runs it where it is awaited, after the vector search."""
    return self.call


def run(
    directory: Path, chunks: int, queries: int, query_embeddings: Embeddings, source: str
) -> dict[str, Any]:
    split, texts = (realistic if source == "realistic" else scale).corpus(chunks)
    path = directory / f"store-{source}-{chunks}"
    if not path.exists():
        built = open_store(
            path, collection="bench", create=True, embeddings=DeterministicFakeEmbedding(size=384)
        )
        add_chunks(built, split)
    store = open_store(path, collection="bench", embeddings=query_embeddings)
    keyword_index(store).refresh()  # ready before the first query: no query runs without it
    retrievers: dict[str, tuple[ContextWindowRetriever, Callable[..., Any]]] = {
        "window": (ContextWindowRetriever(vectorstore=store, k=4), _start_beside),
        "after": (ContextWindowRetriever(vectorstore=store, total_budget=2000), _after),
        "beside": (ContextWindowRetriever(vectorstore=store, total_budget=2000), _start_beside),
    }

    def invoke(name: str, text: str) -> list[str]:
        retriever, start = retrievers[name]
        beside_module.Beside.start = start  # type: ignore[method-assign]
        try:
            return [document.page_content for document in retriever.invoke(text)]
        finally:
            beside_module.Beside.start = _start_beside  # type: ignore[method-assign]

    texts = texts[:queries]
    for text in texts[:20]:  # warm: the keyword index is built, the chunk length learnt
        for name in retrievers:
            invoke(name, text)
    differ = sum(invoke("after", text) != invoke("beside", text) for text in texts)
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    names = list(retrievers)
    for number, text in enumerate(texts):
        for name in names[number % 3 :] + names[: number % 3]:
            started = time.perf_counter()
            invoke(name, text)
            times[name].append((time.perf_counter() - started) * 1000)
    result: dict[str, Any] = {"chunks": len(split), "queries": len(texts), "differ": differ}
    for name, values in times.items():
        ordered = sorted(values)
        result[name] = {
            "p50": statistics.median(values),
            "p95": ordered[int(0.95 * (len(ordered) - 1))],
        }
    for name in ("after", "beside"):
        result[f"{name}_window_p50"] = result[name]["p50"] / result["window"]["p50"]
        result[f"{name}_window_p95"] = result[name]["p95"] / result["window"]["p95"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument(
        "--embeddings", nargs="+", choices=["fake", "packaged"], default=["fake", "packaged"]
    )
    parser.add_argument("--corpus", choices=["synthetic", "realistic"], default="synthetic")
    parser.add_argument("--store", type=Path, help="keep the built stores here (else temporary)")
    parser.add_argument("--out", type=Path)
    arguments = parser.parse_args()
    models = {"fake": DeterministicFakeEmbedding(size=384), "packaged": default_embeddings()}
    results = []
    with tempfile.TemporaryDirectory() as temporary:
        directory = arguments.store or Path(temporary)
        for chunks in arguments.chunks:
            for name in arguments.embeddings:
                result = {
                    "embeddings": name,
                    "corpus": arguments.corpus,
                    **run(directory, chunks, arguments.queries, models[name], arguments.corpus),
                }
                results.append(result)
                print(
                    f"{result['chunks']} chunks, {name} query embeddings: window "
                    f"{result['window']['p50']:.2f} ms; default / window p50 (p95): after "
                    f"{result['after_window_p50']:.3f}x ({result['after_window_p95']:.3f}x), "
                    f"beside {result['beside_window_p50']:.3f}x "
                    f"({result['beside_window_p95']:.3f}x); windows differ on "
                    f"{result['differ']} of {result['queries']} queries",
                    file=sys.stderr,
                )
    if arguments.out:
        arguments.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
