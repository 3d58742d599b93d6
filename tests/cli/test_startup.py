"""The command line's start-up: a bad flag is refused before anything heavy is imported, the
parser's number types refuse what the retriever refuses, and a command that writes nothing
ends its process without Python's teardown (docs/benchmarks.md, "Start-up of the command
line"). Each check that needs a fresh interpreter runs in a subprocess; no time is asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from window_retriever import ConfigurationError, ContextWindowRetriever, MemoryWindowStore
from window_retriever.cli._parser import build_parser

ROOT = Path(__file__).parents[2]

HEAVY = {
    "chromadb",
    "langchain_chroma",
    "langchain_core",
    "langchain_text_splitters",
    "numpy",
    "onnxruntime",
    "pydantic",
    "tantivy",
    "tokenizers",
}
"""What no refusal of the command line's arguments may import: each costs 0.1 to 0.6 s."""

REFUSED = [
    ["query", "q", "--total-budget", "-5"],
    ["query", "q", "-k", "0"],
    ["query", "q", "--keyword-weight", "nan"],
    ["query", "q", "--window-budget", "0"],
    ["ingest", "x.txt", "--chunk-size", "0"],
    ["ingest", "x.txt", "--timeout", "-1"],
    ["demo", "--total-budget", "0"],
    ["query", "q", "--filter", "[1]"],  # the command's own checks, before the store
    ["query", "  "],
    ["query", "q", "--expansion", "adaptive", "--total-budget", "none"],
    ["query", "q", "--budget", "300"],
    ["query", "--help"],
]


def test_refusing_a_bad_flag_imports_nothing_heavy() -> None:
    script = textwrap.dedent(
        """
        import json, sys
        import window_retriever.cli._main  # the entry point's imports too
        from window_retriever.cli._parser import main  # _main.main would end the process

        statuses = []
        for argv in json.loads(sys.argv[1]):
            try:
                statuses.append(main(argv))
            except SystemExit as exit_:  # a usage error, or --help
                statuses.append(exit_.code)
        print(json.dumps({"statuses": statuses, "modules": sorted(sys.modules)}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(REFUSED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["statuses"] == [2] * (len(REFUSED) - 1) + [0]
    assert {name.split(".")[0] for name in seen["modules"]} & HEAVY == set()


def _retriever_takes(option: str, value: Any) -> bool:
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=8))
    try:
        ContextWindowRetriever(store, **{option: value})
    except ConfigurationError:
        return False
    return True


def _parser_takes(flag: str, text: str) -> bool:
    try:
        build_parser().parse_args(["query", "q", flag, text])
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize(
    ("flag", "option", "values"),
    [
        ("-k", "k", [-3, 0, 1, 2, 40]),
        ("--window-budget", "window_budget", [-1, 0, 1, 1200]),
        ("--total-budget", "total_budget", [-5, 0, 1, 2000, None]),
        ("--keyword-weight", "keyword_weight", [-1.0, 0.0, 0.5, 1, 100, 100.5, math.inf, math.nan]),
    ],
)
def test_the_parser_refuses_what_the_retriever_refuses(
    flag: str, option: str, values: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The flags' types repeat the retriever's rules so that no store need open first."""
    for value in values:
        text = "none" if value is None else str(value)
        assert _parser_takes(flag, text) == _retriever_takes(option, value), (flag, value)
    capsys.readouterr()


END = textwrap.dedent(
    """
    import atexit, sys
    import window_retriever.cli._parser as parser


    class Teardown:
        def __del__(self):
            print("teardown", flush=True)


    kept = Teardown()  # finalised by Python's teardown, if it runs


    def command(args):
        atexit.register(print, " exit handler")
        sys.stdout.write("output")  # no newline: still in the buffer at the end
        return 3


    parser.run_query = parser.run_ingest = command
    from window_retriever.cli._main import main

    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize(
    ("argv", "teardown"),
    [(["query", "q"], False), (["ingest", "x.txt"], True)],
)
def test_a_command_that_writes_nothing_ends_without_pythons_teardown(
    argv: list[str], teardown: bool
) -> None:
    """``query`` ends at once, its output flushed and exit handlers run; ``ingest`` does not."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", END, *argv],
        cwd=ROOT,
        env=buffered,  # output held in buffers, as in a user's pipe
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "output exit handler\n" + ("teardown\n" if teardown else "")


def test_query_starts_the_model_before_it_opens_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session is made on a second thread while Chroma and LangChain import."""
    import window_retriever._embeddings as embeddings
    import window_retriever.stores._open as opening
    from window_retriever.cli._parser import main

    note = tmp_path / "note.txt"
    note.write_text("A short note about bees.", encoding="utf-8")
    assert main(["ingest", str(note), "--db", str(tmp_path / "db")]) == 0
    capsys.readouterr()
    events: list[str] = []
    warm, open_store = embeddings.warm_default_model, opening.open_store

    def warming() -> None:
        events.append("warm")
        warm()

    def opening_store(*args: Any, **kwargs: Any) -> Any:
        events.append("open")
        return open_store(*args, **kwargs)

    monkeypatch.setattr(embeddings, "warm_default_model", warming)
    monkeypatch.setattr(opening, "open_store", opening_store)
    assert main(["query", "bees", "--db", str(tmp_path / "db")]) == 0
    assert events == ["warm", "open"]
    assert capsys.readouterr().out.startswith(f"[1] {note}  ")
