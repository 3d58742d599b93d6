"""The keyword index's lifecycle against issue 28's targets, embedded and on a Chroma server.

Usage: ``python benchmarks/lifecycle.py [--chunks 100000] [--added 1000]
[--places embedded,server] [--json OUT]`` (about 4 minutes at 100k chunks a place; on a shared
machine hold a lock: ``flock /tmp/bench.lock python benchmarks/lifecycle.py``).

For each place (a store on disk in a temporary folder, and a ``chroma run`` on loopback with
its own machine cache, ``$WINDOW_RETRIEVER_CACHE``):

1. *fill*: ``--chunks`` synthetic chunks (``scale.corpus``) written with ``add_chunks``;
   ``DeterministicFakeEmbedding`` embeds them and the queries (no model: what is timed is
   the store and the keyword leg);
2. *first process*: a new process's first default query (``ContextWindowRetriever(
   vectorstore=..., total_budget=2000)``), which builds the keyword index from the collection;
3. *next process*: another new process's first default query, with the index saved by the
   first (beside the store, or in the machine cache for the server);
4. *another writer*: a reader process queries in a loop (the default, about ten a second)
   while this process adds ``--added`` chunks through ``add_chunks``, each holding a word no
   other chunk holds. Reported: the seconds from the end of the write until the reader's
   answer first holds one of them, and the slowest of the reader's queries meanwhile.

Each new process also reports its peak RSS (the model-free process: Python, Chroma's client,
the index).

The targets (issue 28): at 100k chunks, the next process's first query <= 1 s; the added
chunks found within 3 s, and no query meanwhile over 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from scale import corpus, start_server

from window_retriever import WindowSplitter, add_chunks

OPEN = """
import json, sys, time
config = json.loads(sys.argv[1])
import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from window_retriever import ContextWindowRetriever
if "url" in config:
    host, port = config["url"].rsplit("//", 1)[1].split(":")
    client = chromadb.HttpClient(host=host, port=int(port))
else:
    client = chromadb.PersistentClient(path=config["path"])
store = Chroma(collection_name="lifecycle", client=client,
               embedding_function=DeterministicFakeEmbedding(size=64))
retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000)
"""

FIRST = """
started = time.perf_counter()
retriever.invoke(config["query"])
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec (the parent's peak at the fork)
status = open("/proc/self/status").read().split("VmHWM:")[1]
peak = int(status.split()[0]) / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mib": peak}))
"""

READER = """
retriever.invoke(config["query"])
print(json.dumps({"ready": True}), flush=True)
while True:
    started = time.perf_counter()
    found = any(config["word"] in d.page_content for d in retriever.invoke(config["word"]))
    print(json.dumps({"at": time.time(), "latency": time.perf_counter() - started,
                      "found": found}), flush=True)
    time.sleep(0.1)
"""

WORD = "zymurgyword"
"""The word only the added chunks hold."""


def child(script: str, config: dict[str, Any], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - this interpreter, our own script
        [sys.executable, "-c", textwrap.dedent(OPEN + script), json.dumps(config)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parent,
    )


def first_query(config: dict[str, Any], env: dict[str, str]) -> dict[str, float]:
    """A new process's first default query: its seconds and the process's peak RSS."""
    process = child(FIRST, config, env)
    out, _ = process.communicate(timeout=1800)
    if process.returncode:
        raise SystemExit(f"the query process failed ({process.returncode})")
    found: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return found


def another_writer(
    store: Chroma, config: dict[str, Any], env: dict[str, str], added: int
) -> dict[str, Any]:
    reader = child(READER, {**config, "word": WORD}, env)
    if reader.stdout is None or not json.loads(reader.stdout.readline()).get("ready"):
        raise SystemExit("the reader process did not start")
    try:
        time.sleep(1.0)
        pages = [
            Document(
                f"Added note {n}: the {WORD} setting is documented here, part {n}.",
                metadata={"source": f"added-{n}", "tenant": "t0"},
            )
            for n in range(added)
        ]
        write_started = time.time()
        add_chunks(store, WindowSplitter().split_documents(pages))
        written = time.time()
        slowest, deadline = 0.0, written + 300
        for line in reader.stdout:
            row = json.loads(line)
            if row["at"] >= write_started:
                slowest = max(slowest, row["latency"])
            if row["found"] and row["at"] - row["latency"] >= written:
                return {
                    "write_seconds": written - write_started,
                    "found_after_seconds": row["at"] - written,
                    "slowest_query_seconds": slowest,
                }
            if row["at"] > deadline:
                break
        return {"write_seconds": written - write_started, "found_after_seconds": None}
    finally:
        reader.kill()
        reader.wait()


def run_place(place: str, chunks: int, added: int, folder: Path) -> dict[str, Any]:
    env = {**os.environ, "WINDOW_RETRIEVER_CACHE": str(folder / "cache")}
    server = None
    if place == "server":
        server, url = start_server(folder / "server")
        config: dict[str, Any] = {"url": url}
        host, port = url.rsplit("//", 1)[1].split(":")
        client: Any = chromadb.HttpClient(host=host, port=int(port))
    else:
        config = {"path": str(folder / "store")}
        client = chromadb.PersistentClient(path=config["path"])
    try:
        split, queries = corpus(chunks)
        config["query"] = queries[0]
        store = Chroma(
            collection_name="lifecycle",
            client=client,
            embedding_function=DeterministicFakeEmbedding(size=64),
        )
        started = time.perf_counter()
        add_chunks(store, split)
        row: dict[str, Any] = {"place": place, "chunks": len(split)}
        row["fill_seconds"] = time.perf_counter() - started
        row["first_process"] = first_query(config, env)
        row["next_process"] = first_query(config, env)
        row |= another_writer(store, config, env, added)
        print(json.dumps(row), flush=True)
        return row
    finally:
        if server is not None:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--added", type=int, default=1000)
    parser.add_argument("--places", default="embedded,server")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for place in args.places.split(","):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(run_place(place, args.chunks, args.added, Path(folder)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
