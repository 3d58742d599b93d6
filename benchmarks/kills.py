"""Writers killed at random moments: does a reader serve a state it does not hold (issue 39)?

Usage: ``python benchmarks/kills.py [--kills 50] [--kinds library,cli] [--in-place] [--json
OUT]`` (about
10 minutes; on a shared machine hold the lock: ``flock /tmp/bench.lock python
benchmarks/kills.py``).

A ``chroma run`` on loopback holds two collections. For each kind of writer, ``--kills``
times: a writer process starts, writes in a loop, and is killed (``SIGKILL``) after a random
0.2 to 4 s (the CLI: 1 to 12 s, its start included), wherever it is: between a write and
telling the index of it, between two batches, inside a save. Then two readers check:

- a long-lived reader (one ``KeywordIndex`` for the whole run, in this process) makes its
  next check (a search), and
- a new reader (a new ``KeywordIndex`` over the same machine cache: it loads what was saved),

and each reader's rows are compared with every record of the collection by their digests
(``keywords._rows.digest``): a record missing, added or different is a state the reader does
not hold. Reported: the kills after which a reader differed (the target is 0), and how many
writes were pending (recorded, never completed) when the readers looked.

Writers: *library*, a Python process that rewrites pages (``sync_file``: new words, often the
same number of chunks, so the count tells nothing), adds pages (``add_chunks``) and removes
them (``remove_file``) with fake embeddings; *cli*, ``window-retriever ingest`` of a folder
whose files are rewritten before each run, with the packaged model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
WORDS = [
    "window",
    "chunk",
    "budget",
    "merge",
    "store",
    "query",
    "answer",
    "table",
    "sentence",
    "neighbour",
    "filter",
    "tenant",
    "search",
    "vector",
    "keyword",
    "index",
    "engine",
    "record",
    "feed",
    "token",
    "writer",
    "reader",
    "process",
]

WRITER = """
import json, random, sys
import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter
from window_retriever import WindowSplitter, add_chunks, sync_file
from window_retriever.ingestion._prune import remove_file

config = json.loads(sys.argv[1])
store = Chroma(
    collection_name=config["name"],
    client=chromadb.HttpClient(host="127.0.0.1", port=config["port"]),
    embedding_function=DeterministicFakeEmbedding(size=16),
)
rng = random.Random(config["seed"])
words = config["words"]
splitter = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=200, chunk_overlap=0))

def page(source):
    text = " ".join(rng.choice(words) for _ in range(rng.randint(100, 160)))
    return Document(text + f" w{rng.randint(0, 10**6)}", metadata={"source": source})

while True:
    action = rng.random()
    if action < 0.7:
        sync_file(store, splitter.split_documents([page(f"p{rng.randrange(20)}")]))
    elif action < 0.85:
        add_chunks(store, splitter.split_documents([page(f"n{rng.randrange(40)}")]))
    else:
        chunks = splitter.split_documents([page(f"n{rng.randrange(40)}")])
        remove_file(store, chunks[0].metadata["file_id"])
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(path: Path) -> tuple[subprocess.Popen[bytes], int]:
    import chromadb

    port = free_port()
    chroma = Path(sys.executable).parent / "chroma"
    process = subprocess.Popen(  # noqa: S603 - this environment's chroma
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
            return process, port
        except Exception:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.2)


def differences(index: Any, collection: Any) -> int:
    """Records the index's rows do not hold as they are (missing, added, or different)."""
    from window_retriever.keywords._rows import digest

    snapshot = index._snapshot
    if snapshot is None:
        return -1
    stored = collection.get(include=["documents", "metadatas"])
    rows = snapshot.rows
    held = {rows.id(row): rows.digest(row) for row in rows.live().tolist()}
    differ = 0
    for chunk_id, text, metadata in zip(
        stored["ids"], stored["documents"], stored["metadatas"], strict=True
    ):
        if held.pop(chunk_id, None) != digest(text or "", metadata or {}):
            differ += 1
    return differ + len(held)


def write_pages(folder: Path, rng: random.Random) -> None:
    """Rewrite some of the CLI's files: new words, mostly the same number of chunks."""
    for number in range(12):
        path = folder / f"page{number}.txt"
        if path.exists() and rng.random() < 0.5:
            continue
        paragraphs = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 70))) for _ in range(4)
        ]
        path.write_text("\n\n".join(paragraphs) + f" w{rng.randint(0, 10**6)}\n")


def run(kind: str, kills: int, port: int, cache: Path, rng: random.Random) -> dict[str, Any]:
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    name = f"kills-{kind}"
    client = chromadb.HttpClient(host="127.0.0.1", port=port)
    folder = Path(tempfile.mkdtemp(prefix="kills-pages-"))
    environment = dict(os.environ, WINDOW_RETRIEVER_CACHE=str(cache))
    url = f"http://127.0.0.1:{port}"
    if kind == "cli":
        write_pages(folder, rng)
        command = [sys.executable, "-m", "window_retriever", "ingest", str(folder)]
        subprocess.run(  # noqa: S603 - this interpreter
            [*command, "--chroma-url", url, "--collection", name],
            env=environment,
            check=True,
            capture_output=True,
        )
        store = Chroma(collection_name=name, client=client)
    else:
        store = Chroma(
            collection_name=name,
            client=client,
            embedding_function=DeterministicFakeEmbedding(size=16),
        )
    reader: KeywordIndex | None = None
    outcome: dict[str, Any] = {"kills": 0, "stale_long_lived": 0, "stale_new": 0, "pending": []}
    for kill in range(kills):
        if kind == "cli":
            write_pages(folder, rng)
            argv = [*command, "--chroma-url", url, "--collection", name]
            delay = rng.uniform(1.0, 12.0)
        else:
            config = {"name": name, "port": port, "seed": rng.randrange(2**32), "words": WORDS}
            argv = [sys.executable, "-c", WRITER, json.dumps(config)]
            delay = rng.uniform(0.2, 4.0)
        writer = subprocess.Popen(  # noqa: S603 - this interpreter
            argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT
        )
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        if writer.returncode != -signal.SIGKILL and kind != "cli":
            message = (writer.stderr.read() if writer.stderr else b"").decode()[-2000:]
            raise SystemExit(f"the writer ended by itself ({writer.returncode}): {message}")
        outcome["kills"] += 1
        source = ChromaKeywordSource(store)
        if reader is None:
            reader = KeywordIndex(source, check_interval=0, reconcile_interval=None)
        reader.search("window budget", k=5)  # its next check
        fresh = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
        fresh.search("window budget", k=5)
        collection = client.get_collection(name)
        stale = differences(reader, collection), differences(fresh, collection)
        outcome["stale_long_lived"] += stale[0] != 0
        outcome["stale_new"] += stale[1] != 0
        outcome["pending"].append(len(source.pending()))
        print(f"{kind} kill {kill + 1}: after {delay:.1f} s, differing {stale}", flush=True)
    outcome["kills_with_pending_writes"] = sum(1 for p in outcome["pending"] if p)
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--kinds", default="library,cli")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="readers catch up as past REINDEX_ROWS rows: the engine updated in place, the "
        "rows kept in parts (the collections here are smaller)",
    )
    args = parser.parse_args()
    if args.in_place:
        import window_retriever.keywords._lifecycle as lifecycle

        lifecycle.REINDEX_ROWS = 0
    rng = random.Random(args.seed)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        server, port = start_server(Path(folder) / "chroma")
        try:
            for kind in args.kinds.split(","):
                results[kind] = run(kind, args.kills, port, Path(folder) / "cache", rng)
        finally:
            server.terminate()
            server.wait()
    print(
        json.dumps({k: {x: y for x, y in v.items() if x != "pending"} for k, v in results.items()})
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
