"""What a filter costs the keyword search of a large index, narrow against wide (issue 39).

Usage: ``python benchmarks/keyword_filters.py --store DIR --collection NAME [--repeats 2]
[--json OUT]``, on a store another run filled (``keyword_cost.py --scale 1000000 --corpus
realistic --keep-store DIR --fill-only`` fills ``keywords-realistic-1000000``); hold the lock
on a shared machine (``flock /tmp/bench.lock``).

In one process, embedded: the collection's keyword index is made ready (loaded if saved
beside the store, else built and saved), then each of the realistic corpus's real questions
is searched (``k=10``, the default's) unfiltered, under a 10% filter (``shard``) and under a
1% filter (``tenant``), interleaved; the first pass warms the caches and is not counted.
Reported: p50 and p90 in milliseconds for each filter. Unlike ``keyword_cost.py --scale``,
no build and no reconciliation are timed: a run on a store whose index is saved takes a
minute.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from realistic import questions

from window_retriever.stores import keyword_index

FILTERS = {"none": None, "10%": {"shard": "s3"}, "1%": {"tenant": "t37"}}
K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    store = Chroma(
        collection_name=arguments.collection,
        client=chromadb.PersistentClient(path=str(arguments.store)),
        embedding_function=DeterministicFakeEmbedding(size=64),
    )
    index = keyword_index(store, reconcile_interval=float("inf"))
    began = time.perf_counter()
    index.refresh()
    ready = time.perf_counter() - began
    asked = questions()
    times: dict[str, list[float]] = {name: [] for name in FILTERS}
    for repeat in range(arguments.repeats + 1):
        for query in asked:
            for name, where in FILTERS.items():
                began = time.perf_counter()
                index.search(query, K, where=where)
                if repeat:  # the first pass warms the caches
                    times[name].append((time.perf_counter() - began) * 1000)
    result = {
        "chunks": len(index),
        "ready_seconds": round(ready, 2),
        "questions": len(asked),
        "k": K,
        "ms": {
            name: {
                "p50": round(statistics.median(found), 2),
                "p90": round(statistics.quantiles(found, n=10)[-1], 2),
            }
            for name, found in times.items()
        },
    }
    print(json.dumps(result, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
