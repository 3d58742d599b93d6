"""Start-up of the command line: one ``window-retriever query`` in a fresh process, in parts.

Usage: ``python benchmarks/startup.py [--repeats 9] [--package LABEL=DIR ...] [--out FILE]``.

It makes the demo store in a temporary folder (``window-retriever demo --db DIR``, what
``make demo`` makes), copies it for a ``chroma run`` server on loopback, asks each one query
with each package to build its keyword index and warm the disk cache (not timed), and then,
``--repeats`` times each, interleaved (every package in every round, so that they share the
machine's load):

- ``whole``: the wall time of ``window-retriever query QUESTION --db DIR`` (or
  ``--chroma-url URL``), the console script as a user runs it, from the fork to the exit;
- the same command in a process that times its parts (by wrapping the import machinery and
  a few functions, which costs about a millisecond): ``python`` (the interpreter's start-up
  before the first line of the program), ``import`` (every module loaded), ``model``
  (verifying the model file, the tokenizer and the onnxruntime sessions, or waiting for them:
  ``_embeddings._load`` and ``_Model``), ``store`` (``open_store``: the client and the
  collection), ``query`` (the rest: parsing, the retrieval with the query's embedding,
  printing) and ``exit`` (from the exit handlers to the process's end). Each part is the main
  thread's and exclusive: an import inside ``open_store`` counts as import. ``model beside``
  is the time another thread spent on the model meanwhile (the command line makes the
  query's session on a second thread while Chroma imports), not part of ``total``;
- ``refusal``: ``window-retriever query QUESTION --total-budget -5 --db DIR``, a bad flag;
- ``floor``: processes that only import what any ``query`` must (each ends by ``os._exit``,
  as ``query`` does): ``chromadb`` alone, then with ``langchain_chroma``, then with the
  packaged model's libraries (``onnxruntime``, ``tokenizers``, ``numpy``) too.

It prints the median and the range (min to max) of each and writes them as JSON. Each
``--package LABEL=DIR`` is a checkout whose ``window_retriever`` the children import
(``PYTHONPATH=DIR``); without one, the package this Python imports. To measure a commit
before a change beside the working tree: ``git archive COMMIT | tar -x -C /tmp/before``,
then ``--package before=/tmp/before --package after=.``. The console script is the one next
to this Python. Run it alone on a quiet machine: ``nice -n 10 flock /tmp/bench.lock python
benchmarks/startup.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scale import start_server

QUESTION = "How do I make sure a file is closed after reading it?"
PARTS = ("python", "import", "model", "store", "query", "exit")
BESIDE = "model beside"

CHILD = r"""
import json, sys, threading, time
first = time.time()
_now = time.perf_counter
import _frozen_importlib as _bootstrap

out_path = sys.argv.pop(1)
main_thread = threading.main_thread()
spent = {}
beside = [0.0]  # seconds other threads spent in the model
stacks = threading.local()  # each thread's [part, started, time of the parts inside it]


def stack():
    if not hasattr(stacks, "items"):
        stacks.items = []
    return stacks.items


def enter(part):
    stack().append([part, _now(), 0.0])


def leave():
    items = stack()
    part, started, inner = items.pop()
    total = _now() - started
    if threading.current_thread() is main_thread:
        spent[part] = spent.get(part, 0.0) + total - inner
    elif part == "model":
        beside[0] += total - inner
    if items:
        items[-1][2] += total


def timed(owner, name, part):
    function = getattr(owner, name)  # an AttributeError here: the benchmark needs updating

    def wrapper(*args, **kwargs):
        enter(part)
        try:
            return function(*args, **kwargs)
        finally:
            leave()

    setattr(owner, name, wrapper)


def patch(name):
    module = sys.modules[name]
    if name == "window_retriever._embeddings":
        timed(module, "_load", "model")
        for method in ("__init__", "_session", "_wide_session"):
            if hasattr(module._Model, method):  # _wide_session: not in every version
                timed(module._Model, method, "model")
    elif name == "window_retriever.stores._open":
        timed(module, "open_store", "store")


_find_and_load = _bootstrap._find_and_load


def find_and_load(name, import_):
    if name in sys.modules:
        return _find_and_load(name, import_)
    enter("import")
    try:
        return _find_and_load(name, import_)
    finally:
        leave()
        if name in sys.modules:
            patch(name)


_bootstrap._find_and_load = find_and_load


def report():
    end = time.time()
    while stack():
        leave()
    with open(out_path, "w") as file:
        json.dump({"first": first, "end": end, "spent": spent, "beside": beside[0]}, file)


import atexit

atexit.register(report)  # the first registered runs last, at the normal exit and at end_now
enter("query")
from window_retriever.cli._main import main

sys.exit(main(sys.argv[1:]))
"""


def command() -> list[str]:
    """The ``window-retriever`` console script of this Python's environment."""
    script = Path(sys.executable).parent / "window-retriever"
    return [str(script)] if script.exists() else [sys.executable, "-m", "window_retriever"]


def environment(cache: Path, package: str | None) -> dict[str, str]:
    """The children's environment: ``package``'s checkout first on the path, if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDOW_RETRIEVER_")}
    env["WINDOW_RETRIEVER_CACHE"] = str(cache)  # a server store's keyword index: not ~/.cache
    if package is not None:
        env["PYTHONPATH"] = package
    return env


def run(argv: Sequence[str], env: dict[str, str], cwd: Path, status: int = 0) -> float:
    """Wall seconds of one process; its exit status must be ``status``."""
    began = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - this environment's own command
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    seconds = time.perf_counter() - began
    if done.returncode != status:
        msg = f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-2000:]}"
        raise RuntimeError(msg)
    return seconds


def parts(where: Sequence[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """The parts of one ``query`` process (seconds), measured from inside it."""
    child, out = cwd / "startup_child.py", cwd / "startup_parts.json"
    child.write_text(CHILD, encoding="utf-8")
    began = time.time()
    argv = [sys.executable, str(child), str(out), "query", QUESTION, *where]
    run(argv, env, cwd)
    ended = time.time()
    seen = json.loads(out.read_text(encoding="utf-8"))
    spent = seen["spent"]
    return {
        "python": seen["first"] - began,
        "import": spent.get("import", 0.0),
        "model": spent.get("model", 0.0),
        "store": spent.get("store", 0.0),
        "query": spent.get("query", 0.0),
        "exit": ended - seen["end"],
        "total": ended - began,
        BESIDE: seen["beside"],
    }


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": [round(v, 4) for v in values],
    }


def measure_once(where: Sequence[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """One round of ``query`` on one store with one package: whole, parts and refusal."""
    cli = command()
    seconds = {"whole": run([*cli, "query", QUESTION, *where], env, cwd)}
    seconds.update(parts(where, env, cwd))
    bad = [*cli, "query", QUESTION, "--total-budget", "-5", *where]
    seconds["refusal"] = run(bad, env, cwd, status=2)
    return seconds


FLOOR = {
    "chromadb": "import chromadb",
    "chromadb + langchain_chroma": "import chromadb, langchain_chroma",
    "chromadb + langchain_chroma + model libraries": (
        "import chromadb, langchain_chroma, onnxruntime, tokenizers, numpy"
    ),
}
"""What every ``query`` imports, whatever this package does: Chroma's client, LangChain's
``VectorStore`` and retriever classes (the store and the retriever are LangChain's), and the
libraries the packaged model runs on."""


def floor(env: dict[str, str], cwd: Path, repeats: int) -> dict[str, Any]:
    """Wall seconds of a fresh process that imports each of FLOOR and ends by ``os._exit``."""
    seen: dict[str, list[float]] = {name: [] for name in FLOOR}
    for _ in range(repeats):
        for name, code in FLOOR.items():
            program = f"{code}\nimport os, sys\nsys.stdout.flush()\nos._exit(0)"
            seen[name].append(run([sys.executable, "-c", program], env, cwd))
    return {name: summary(values) for name, values in seen.items()}


def table(results: dict[str, Any], labels: Sequence[str]) -> str:
    rows = ["whole", *PARTS, "total", BESIDE, "refusal"]
    columns = [
        (place, label) for place in ("embedded", "server") if place in results for label in labels
    ]
    lines = [
        "| seconds, median (min-max) | "
        + " | ".join(f"{place}, {label}" for place, label in columns)
        + " |",
        "|---|" + "---|" * len(columns),
    ]
    for row in rows:
        cells = [results[place][label][row] for place, label in columns]
        text = [f"{c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f})" for c in cells]
        lines.append(f"| {row} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def packages(given: Sequence[str]) -> dict[str, str | None]:
    """``LABEL=DIR`` pairs as a dict; none given: this Python's own package, as ``current``."""
    if not given:
        return {"current": None}
    chosen: dict[str, str | None] = {}
    for pair in given:
        label, _, folder = pair.partition("=")
        if not label or not (Path(folder) / "window_retriever" / "__init__.py").is_file():
            msg = f"--package takes LABEL=DIR, DIR a checkout holding window_retriever: {pair!r}"
            raise SystemExit(msg)
        chosen[label] = str(Path(folder).resolve())
    return chosen


def main() -> None:
    """Make the demo store, time ``query`` on it embedded and on a server, print and save."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a checkout to measure, e.g. before=/tmp/before (repeatable; interleaved)",
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--no-server", action="store_true", help="the embedded store only")
    args = parser.parse_args()
    chosen = packages(args.package)

    with tempfile.TemporaryDirectory(prefix="startup-") as folder:
        cwd = Path(folder)
        envs = {label: environment(cwd / "cache", path) for label, path in chosen.items()}
        db = cwd / "demo-db"
        run([*command(), "demo", "--db", str(db)], envs[list(chosen)[-1]], cwd)
        places: dict[str, list[str]] = {"embedded": ["--db", str(db)]}
        server = None
        if not args.no_server:
            shutil.copytree(db, cwd / "server-db", ignore=shutil.ignore_patterns("*.lock"))
            server, url = start_server(cwd / "server-db")
            places["server"] = ["--chroma-url", url]
        try:
            seen: dict[str, dict[str, dict[str, list[float]]]] = {}
            for where in places.values():
                for env in envs.values():  # builds the keyword index, compiles the modules
                    run([*command(), "query", QUESTION, *where], env, cwd)
            for _ in range(args.repeats):
                for place, where in places.items():
                    for label, env in envs.items():
                        for name, seconds in measure_once(where, env, cwd).items():
                            row = seen.setdefault(place, {}).setdefault(label, {})
                            row.setdefault(name, []).append(seconds)
            results: dict[str, Any] = {
                place: {
                    label: {name: summary(values) for name, values in rows.items()}
                    for label, rows in labels.items()
                }
                for place, labels in seen.items()
            }
            results["floor"] = floor(envs[list(chosen)[-1]], cwd, args.repeats)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
    print(table(results, list(chosen)))
    for name, seconds in results["floor"].items():
        print(
            f"floor, {name}: {seconds['median']:.2f} s ({seconds['min']:.2f}-{seconds['max']:.2f})"
        )
    if args.out:
        record = {
            "packages": chosen,
            "question": QUESTION,
            "repeats": args.repeats,
            "machine": {
                "cpus": len(os.sched_getaffinity(0)),
                "python": platform.python_version(),
                "load_average_at_end": os.getloadavg(),
            },
            **results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
