"""The keyword index's lifecycle against issue 28's targets, embedded and on a Chroma server.

Usage: ``python benchmarks/lifecycle.py [--chunks 100000] [--added 1000]
[--places embedded,server] [--warm 200] [--keep-store DIR] [--corpus synthetic|realistic]
[--json OUT]`` (about 4 minutes at
100k chunks a place; on a shared machine hold a lock: ``flock /tmp/bench.lock python
benchmarks/lifecycle.py``). ``--keep-store DIR`` fills the store in ``DIR`` once and reuses
it after, opened embedded or by the ``chroma run`` of each run (at 1M chunks the fill alone
takes about 16 minutes); each run still builds its keyword index from scratch, and adds its
``--added`` chunks to the store.

For each place (a store on disk in a temporary folder, and a ``chroma run`` on loopback with
its own machine cache, ``$WINDOW_RETRIEVER_CACHE``):

1. *fill*: ``--chunks`` synthetic chunks (``scale.corpus``; with ``--corpus realistic``,
   real documentation resampled and its real questions, ``realistic.corpus``) written with
   ``add_chunks``;
   ``DeterministicFakeEmbedding`` embeds them and the queries (no model: what is timed is
   the store and the keyword leg);
2. *first process*: a new process's first default query (``ContextWindowRetriever(
   vectorstore=..., total_budget=2000)``), which builds the keyword index from the collection;
3. *next process*: another new process's first default query, with the index saved by the
   first (beside the store, or in the machine cache for the server); then ``--warm`` queries
   through the default and through static windows (``ContextWindowRetriever(k=4)``),
   interleaved: the warm p50 of each and their ratio, and the process's RSS after them; the
   same in a process that runs static windows alone (*static process*: no keyword index, the
   baseline of the RSS);
4. *another writer*: a reader process queries in a loop (the default, about ten a second)
   while this process adds ``--added`` chunks through ``add_chunks``, each holding a word no
   other chunk holds. Reported: the seconds from the end of the write until the reader's
   answer first holds one of them, and the slowest of the reader's queries meanwhile: while
   the write ran (what the store's own work costs a reader) and after it until found (what
   the catch-up costs). Then the control: the same write beside a reader of static windows
   (no keyword index), its slowest query while the write ran and for as long after.

Each new process also reports its peak RSS (VmHWM) and its RSS after its first query (VmRSS:
the model-free process: Python, Chroma's client, and embedded Chroma's own index, the
keyword index).

The targets (issue 28): at 100k chunks, the next process's first query <= 1 s; the added
chunks found within 3 s, and no query meanwhile over 1 s.

The synthetic corpus is the keyword search's worst case (its 22 words are each in nine
chunks of ten), not what a documentation store holds: its warm p50s are an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
embeddings = DeterministicFakeEmbedding(size=64)
if config.get("query_model") == "minilm":  # the packaged model embeds each query
    from langchain_core.embeddings import Embeddings
    from window_retriever._embeddings import default_embeddings

    class PackagedQueries(Embeddings):  # its query vector cut to the store's 64 dimensions

        model = default_embeddings()

        def embed_documents(self, texts):
            return embeddings.embed_documents(texts)

        def embed_query(self, text):
            return self.model.embed_query(text)[:64]

    embeddings = PackagedQueries()
store = Chroma(collection_name=config["collection"], client=client,
               embedding_function=embeddings)
retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000)
"""

FIRST = """
def memory(field):
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec (the parent's peak at the fork)
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0]) / 1024

if config.get("static_only"):  # the baseline: a process that never makes a keyword index
    retriever = ContextWindowRetriever(vectorstore=store, k=4)
started = time.perf_counter()
first = retriever.invoke(config["query"])
seconds = time.perf_counter() - started
row = {"seconds": seconds, "peak_rss_mib": memory("VmHWM"), "rss_mib": memory("VmRSS")}
if not config.get("static_only"):
    from window_retriever.stores import keyword_index
    index = keyword_index(store)
    row["keyword_leg_at_first_query"] = first[0].metadata.get("keyword_leg", "ready") if first else None
    if config.get("build"):  # wait for the index (built in the background) and save it
        started = time.perf_counter()
        index.refresh()
        row["ready_after_seconds"] = seconds + time.perf_counter() - started
if config.get("warm"):
    import statistics
    static = ContextWindowRetriever(vectorstore=store, k=4)
    filters = {"none": None, **config.get("filters", {})}
    times = {(name, where): [] for name in ("default", "static") for where in filters}
    for query in config["warm"]:
        for where, value in filters.items():
            for name, each in (("default", retriever), ("static", static)):
                started = time.perf_counter()
                each.invoke(query, filter=value)
                times[name, where].append(time.perf_counter() - started)
    for where in filters:
        p50 = {name: statistics.median(times[name, where]) * 1000 for name in ("default", "static")}
        suffix = "" if where == "none" else f"_{where}"
        row["warm_p50_ms" + suffix] = p50
        row["warm_ratio" + suffix] = p50["default"] / p50["static"]
    row["rss_mib_after_warm"] = memory("VmRSS")
    row["peak_rss_mib_after_warm"] = memory("VmHWM")
    # of the RSS: the process's own memory, and pages of files it maps (the saved index's,
    # shared by every process of the machine and dropped by the kernel first)
    row["anon_mib_after_warm"] = memory("RssAnon")
    row["file_mib_after_warm"] = memory("RssFile")
print(json.dumps(row))
"""

READER = """
if config.get("static_only"):  # the control: a reader that never makes a keyword index
    retriever = ContextWindowRetriever(vectorstore=store, k=4)
retriever.invoke(config["query"])
print(json.dumps({"ready": True}), flush=True)
while True:
    started = time.perf_counter()
    found = any(config["word"] in d.page_content for d in retriever.invoke(config["word"]))
    print(json.dumps({"at": time.time(), "latency": time.perf_counter() - started,
                      "found": found}), flush=True)
    time.sleep(0.1)
"""


def new_word() -> str:
    """A word of letters that only the added chunks hold, new each run.

    A kept store keeps what other scripts added (``catch_up_beside.py`` leaves its chunks).
    """
    import random

    return "zymurgy" + "".join(random.choices("bcdfghjklmnpqrstvwxz", k=12))


ADDED_TENANT = "added-by-lifecycle"
"""The added chunks' tenant, no other chunk's: they are deleted by it after the run."""


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
    store: Chroma, config: dict[str, Any], env: dict[str, str], added: int, *, tag: str = ""
) -> dict[str, Any]:
    """The seconds until a reader finds ``added`` chunks another process wrote; its slowest.

    Its slowest query while the write runs (the store's own work: a control reader without a
    keyword index is slowed as much) and after it, until it finds them (the catch-up's). With
    ``config["static_only"]``, the control: the same write beside a static-windows reader,
    which never finds the chunks (no keyword leg) and is watched as long as the first took.
    """
    word = new_word()
    reader = child(READER, {**config, "word": word}, env)
    if reader.stdout is None or not json.loads(reader.stdout.readline()).get("ready"):
        raise SystemExit("the reader process did not start")
    control = bool(config.get("static_only"))
    try:
        time.sleep(1.0)
        pages = [
            Document(
                f"Added note {n}{tag}: the {word} setting is documented here, part {n}.",
                metadata={"source": f"added-{n}{tag}", "tenant": ADDED_TENANT},
            )
            for n in range(added)
        ]
        write_started = time.time()
        add_chunks(store, WindowSplitter().split_documents(pages))
        written = time.time()
        during = after = 0.0
        deadline = written + (config.get("watch_seconds") or 300)
        found_after = None
        for line in reader.stdout:
            row = json.loads(line)
            began = row["at"] - row["latency"]
            if row["at"] >= write_started and began < written:
                during = max(during, row["latency"])
            elif began >= written:
                after = max(after, row["latency"])
            if not control and row["found"] and began >= written:
                found_after = row["at"] - written
                break
            if row["at"] > deadline:
                break
        return {
            "write_seconds": written - write_started,
            "found_after_seconds": found_after,
            "slowest_query_seconds": max(during, after),
            "slowest_during_write_seconds": during,
            "slowest_after_write_seconds": after,
        }
    finally:
        reader.kill()
        reader.wait()


def run_place(
    place: str,
    chunks: int,
    added: int,
    folder: Path,
    warm: int,
    kept: Path | None = None,
    text: str = "synthetic",
    collection: str = "lifecycle",
    query_model: str = "fake",
) -> dict[str, Any]:
    env = {**os.environ, "WINDOW_RETRIEVER_CACHE": str(folder / "cache")}
    server = None
    if place == "server":
        server, url = start_server(kept or folder / "server")
        config: dict[str, Any] = {"url": url}
        host, port = url.rsplit("//", 1)[1].split(":")
        client: Any = chromadb.HttpClient(host=host, port=int(port))
    else:
        config = {"path": str(kept or folder / "store")}
        client = chromadb.PersistentClient(path=config["path"])
    try:
        if text == "realistic":
            from realistic import corpus as realistic_corpus

            split, queries = realistic_corpus(chunks)
        else:
            split, queries = corpus(chunks)
        config |= {
            "query": queries[0],
            "collection": collection,
            "query_model": query_model,
            # 1% of the chunks (realistic: 100 tenants), 10% (synthetic: 10 tenants)
            "filters": {"tenant": {"tenant": "t37" if text == "realistic" else "t3"}},
        }
        store = Chroma(
            collection_name=collection,
            client=client,
            embedding_function=DeterministicFakeEmbedding(size=64),
        )
        started = time.perf_counter()
        row: dict[str, Any] = {"place": place, "corpus": text, "chunks": len(split)}
        if kept is not None and store._collection.count() >= len(split):
            row["fill_seconds"] = None  # filled by an earlier run
        else:
            add_chunks(store, split)
            row["fill_seconds"] = time.perf_counter() - started
        if kept is not None:  # a build of its own, not an earlier run's saved index
            shutil.rmtree(kept / "window_retriever_keyword", ignore_errors=True)
        row["first_process"] = first_query({**config, "build": True}, env)
        row["next_process"] = first_query({**config, "warm": queries[1 : 1 + warm]}, env)
        static = {**config, "warm": queries[1 : 1 + warm], "static_only": True}
        row["static_process"] = first_query(static, env)
        try:
            row |= another_writer(store, config, env, added)
            watch = max(3.0, (row["found_after_seconds"] or 0) + 2)
            control = {**config, "static_only": True, "watch_seconds": watch}
            row["control_reader"] = another_writer(store, control, env, added, tag="-control")
        finally:  # a kept store stays as it was filled, for the next run
            store.delete(where={"tenant": ADDED_TENANT})
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
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--keep-store", type=Path, default=None)
    parser.add_argument(
        "--corpus",
        choices=["synthetic", "realistic"],
        default="synthetic",
        help="synthetic chunks (the keyword search's worst case) or real documentation",
    )
    parser.add_argument(
        "--collection",
        default="lifecycle",
        help="the collection (keyword_cost.py --keep-store fills keywords-realistic-N)",
    )
    parser.add_argument(
        "--query-model",
        choices=["fake", "minilm"],
        default="fake",
        help="what embeds each query: the fake embedding, or the packaged model (its vector "
        "cut to the store's 64 dimensions)",
    )
    args = parser.parse_args()
    rows = []
    for place in args.places.split(","):
        with tempfile.TemporaryDirectory() as folder:
            row = run_place(
                place,
                args.chunks,
                args.added,
                Path(folder),
                args.warm,
                args.keep_store,
                args.corpus,
                args.collection,
                args.query_model,
            )
            rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
