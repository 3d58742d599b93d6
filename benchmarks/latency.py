"""Latency of windowed retrieval against plain retrieval on the same Chroma store.

Usage: ``python benchmarks/latency.py [--chunks 20000] [--queries 200] [--k 4] [--budget 1200]
[--real-embeddings]``.

Builds a store of synthetic chunks (files of 50 chunks of about 400 characters, split and
stamped by WindowSplitter), then runs the same queries through ``vectorstore.as_retriever()``
and through ``ContextWindowRetriever``, interleaved, and reports medians and their ratio.
With the default fake embedding the query embedding costs almost nothing, so the ratio shows
the whole overhead of windowing (the worst case); ``--real-embeddings`` uses the packaged
model for queries and chunks (slow to build: keep ``--chunks`` small).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from synthetic import synthetic_files

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks, default_embeddings


def build(chunks: int, embeddings: Embeddings, directory: str) -> tuple[Chroma, list[str]]:
    """Ingest synthetic files of 50 chunks; return the store and sample chunk texts."""
    rng = random.Random(7)
    documents = synthetic_files(rng, chunks, 50, lambda number: {"source": f"doc-{number}"})
    split = WindowSplitter().split_documents(documents)
    store = Chroma(
        collection_name="bench", embedding_function=embeddings, persist_directory=directory
    )
    add_chunks(store, split)
    return store, [c.page_content for c in rng.sample(split, min(len(split), 1000))]


def main() -> None:
    """Build the store, time both retrievers on the same queries, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--budget", type=int, default=1200)
    parser.add_argument("--real-embeddings", action="store_true")
    args = parser.parse_args()

    embeddings = (
        default_embeddings() if args.real_embeddings else DeterministicFakeEmbedding(size=384)
    )
    with tempfile.TemporaryDirectory() as directory:
        began = time.perf_counter()
        store, texts = build(args.chunks, embeddings, directory)
        count = len(store.get(include=[])["ids"])
        print(f"store: {count} chunks, built in {time.perf_counter() - began:.1f} s")
        queries = [" ".join(t.split()[3:12]) for t in texts[: args.queries]]
        plain = store.as_retriever(search_kwargs={"k": args.k})
        windowed = ContextWindowRetriever(vectorstore=store, k=args.k, window_budget=args.budget)
        for q in queries[:10]:  # warm up both paths
            plain.invoke(q)
            windowed.invoke(q)
        timings: dict[str, list[float]] = {"plain": [], "window": []}
        sizes: dict[str, list[int]] = {"plain": [], "window": []}
        for q in queries:
            for name, retriever in (("plain", plain), ("window", windowed)):
                start = time.perf_counter()
                docs = retriever.invoke(q)
                timings[name].append(time.perf_counter() - start)
                sizes[name].append(sum(len(d.page_content) for d in docs))
    p50 = {name: statistics.median(values) * 1000 for name, values in timings.items()}
    p95 = {name: statistics.quantiles(values, n=20)[18] * 1000 for name, values in timings.items()}
    print(f"queries: {len(queries)}, k={args.k}, window_budget={args.budget}")
    print("| retriever | p50 ms | p95 ms | context characters (median) |")
    print("|---|---|---|---|")
    for name in ("plain", "window"):
        print(
            f"| {name} | {p50[name]:.2f} | {p95[name]:.2f} | {statistics.median(sizes[name]):.0f} |"
        )
    ratio50, ratio95 = p50["window"] / p50["plain"], p95["window"] / p95["plain"]
    print(f"ratio window/plain: p50 {ratio50:.2f}x, p95 {ratio95:.2f}x")


if __name__ == "__main__":
    main()
