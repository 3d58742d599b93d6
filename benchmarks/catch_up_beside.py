"""What a catch-up of a large keyword index costs the queries that run beside it (issue 39).

Usage: ``python benchmarks/catch_up_beside.py --store DIR --collection NAME [--added 1000]
[--json OUT]``, on a store another run filled (``keyword_cost.py --scale 1000000 --corpus
realistic --keep-store DIR --fill-only`` fills ``keywords-realistic-1000000``); hold the
lock on a shared machine (``flock /tmp/bench.lock``).

In one process, embedded: the collection's keyword index is made ready (loaded if saved
beside the store, else built and saved), and a default retriever (``total_budget=2000``)
answers one query. Then another process writes ``--added`` chunks through ``add_chunks``;
this process's queries (a default query every 50 ms on a second thread) notice the write,
and the catch-up runs on the index's background thread while they go on. Reported:

- each step of the catch-up (the change feed, the records read, the rows changed and saved,
  the engine updated, the saved files' checksums), its seconds and the longest the
  interpreter lock kept a third thread (which wakes every millisecond) from running;
- the queries' latencies while the catch-up ran, and after it; when the added chunks were
  first found by a keyword search (``found_after_seconds``), and when the catch-up ended.

The added chunks are left in the store (tenant ``added-beside-<time>``): deleting 1,000
records of a 1M embedded collection and ending the process at once left Chroma 1.5.9's
vector index naming ids it no longer held (``Error finding id`` at ``n_results=100``, both
embedded and on a server) in one run here, so this script writes only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from lifecycle import new_word

import window_retriever.keywords._engine as engine
import window_retriever.keywords._lifecycle as lifecycle
import window_retriever.keywords._rows as rows
from window_retriever import ContextWindowRetriever
from window_retriever.stores import keyword_index
from window_retriever.stores._chroma_keywords import ChromaKeywordSource

QUERY = "how do I configure the socket timeout"


WRITER = """
import sys
import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from window_retriever import WindowSplitter, add_chunks
path, name, added, tenant, word = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:]
store = Chroma(collection_name=name, client=chromadb.PersistentClient(path=path),
               embedding_function=DeterministicFakeEmbedding(size=64))
pages = [Document(f"Added note {n}: the {word} setting is documented here, part {n}.",
                  metadata={"source": f"{tenant}-{n}", "tenant": tenant}) for n in range(added)]
add_chunks(store, WindowSplitter().split_documents(pages))
"""

STEPS = [
    (ChromaKeywordSource, "changes", "the change feed read"),
    (ChromaKeywordSource, "records", "the changed records read"),
    (lifecycle, "add_records", "their words"),
    (rows.Rows, "changed", "the rows changed (a part added; joined while smaller)"),
    (lifecycle, "updated", "the engine updated and saved"),
    (rows.Rows, "save", "... of which the rows saved (parts held are linked)"),
    (engine, "checksums", "... of which the new files' checksums"),
    (lifecycle.KeptIndex, "_caught_up", "the whole catch-up"),
]


def timed(owner: Any, name: str, log: list[tuple[str, float, float]]) -> None:
    """Wrap ``owner.name`` so each call logs its name, start and end."""
    function: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            log.append((name, started, time.perf_counter()))

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--added", type=int, default=1000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    client = chromadb.PersistentClient(path=str(args.store))
    store = Chroma(
        collection_name=args.collection,
        client=client,
        embedding_function=DeterministicFakeEmbedding(size=64),
    )
    index = keyword_index(store)
    started = time.perf_counter()
    index.refresh()
    row: dict[str, Any] = {"chunks": len(index), "ready_seconds": time.perf_counter() - started}
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000)
    retriever.invoke(QUERY)

    log: list[tuple[str, float, float]] = []
    for owner, name, _ in STEPS:
        timed(owner, name, log)
    gaps: list[tuple[float, float]] = []
    queries: list[tuple[float, float]] = []
    stop = threading.Event()

    def beat() -> None:  # how long the interpreter lock keeps a thread from waking
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append((last, now - last))
            last = now

    found: list[float] = []
    added = new_word()

    def ask() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            retriever.invoke(QUERY)
            queries.append((began, time.perf_counter() - began))
            if not found and index.search(added, k=1):  # the added chunks searchable
                found.append(time.perf_counter())
            time.sleep(0.05)

    threading.Thread(target=beat, daemon=True).start()
    tenant = f"added-beside-{int(time.time())}"
    began = time.perf_counter()
    script = [sys.executable, "-c", textwrap.dedent(WRITER), str(args.store)]
    script += [args.collection, str(args.added), tenant, added]
    subprocess.run(script, check=True)  # noqa: S603 - this interpreter, our own script
    written = time.perf_counter()
    row["write_seconds"] = written - began
    threading.Thread(target=ask, daemon=True).start()
    deadline = written + 300
    while time.perf_counter() < deadline and not (index.catch_ups or index.builds > 1):
        time.sleep(0.05)
    while index._refreshing and time.perf_counter() < deadline:
        time.sleep(0.05)
    done = time.perf_counter()
    time.sleep(1.0)
    stop.set()
    row |= {"catch_ups": index.catch_ups, "builds": index.builds}
    row["caught_up_after_seconds"] = done - written
    row["found_after_seconds"] = found[0] - written if found else None
    steps = {}
    for _, name, label in STEPS:
        calls = [(a, b) for called, a, b in log if called == name and a >= written]
        if calls:
            stalls = [gap for at, gap in gaps if any(a <= at <= b for a, b in calls)]
            steps[label] = {
                "seconds": sum(b - a for a, b in calls),
                "longest_stall_ms": 1000 * max(stalls, default=0.0),
            }
    row["steps"] = steps
    during = [seconds for at, seconds in queries if at <= done]
    after = [seconds for at, seconds in queries if at > done]
    for name, found in (("during", during), ("after", after)):
        if found:
            row[f"queries_{name}"] = {
                "count": len(found),
                "p50_ms": 1000 * statistics.median(found),
                "max_ms": 1000 * max(found),
            }
    print(json.dumps(row, indent=2))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
