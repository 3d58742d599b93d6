"""The examples run as they stand: scripts as subprocesses, the notebook in a fresh kernel.

Each builds its own store of the bundled pages with the packaged model (a few seconds each),
offline and without an OpenAI key.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
NOTEBOOK = EXAMPLES / "demo.ipynb"


def run_example(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | env
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ingest_and_query_prints_windows_within_the_budget_and_draws_the_map(
    tmp_path: Path,
) -> None:
    image = tmp_path / "map.png"
    done = run_example(
        "examples/ingest_and_query.py",
        "How do I make sure a file is closed after reading it?",
        "--total-budget",
        "1000",
        "--window-map",
        str(image),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"^stored 21\d chunks of the pages in ", out, re.MULTILINE)
    summary = re.search(r"^(\d+) windows, (\d+) of 1000 characters$", out, re.MULTILINE)
    assert summary is not None
    count, used = int(summary[1]), int(summary[2])
    headers = re.findall(
        r"^\[(\d)\] (.+), chunks? \d+(?:-\d+)?, characters \d+-\d+, score \d\.\d{3}, \d+ hit",
        out,
        re.MULTILINE,
    )
    assert 1 <= count == len(headers) and [int(h[0]) for h in headers] == list(range(1, count + 1))
    assert 0 < used <= 1000
    assert "7. Input and Output" in {h[1] for h in headers}  # the page about files
    assert "f.close()" in out
    assert image.read_bytes().startswith(b"\x89PNG")
    assert out.rstrip().endswith(f"window map: {image}")


def test_chain_without_an_api_key_prints_the_prompt_and_how_to_get_an_answer() -> None:
    done = run_example("examples/chain.py", "What does the else clause of a try statement do?")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    system = out.split("--- system ---\n", 1)[1].split("\n--- human ---\n")[0]
    human = out.split("--- human ---\n", 1)[1].split("\n\nIts sources, by label:\n")[0]
    assert human == "What does the else clause of a try statement do?"
    assert "Cite the sources each statement comes from by their labels" in system
    labels = re.findall(
        r"^\[(S\d+)\] [^\n]+ \(https://docs\.python\.org/3\.11/tutorial/"
        r"\w+\.html\), chunks? \d+(?:-\d+)?, characters \d+-\d+$",
        system,
        re.MULTILINE,
    )
    assert labels[:2] == ["S1", "S2"]
    assert system.count("8. Errors and Exceptions (https://docs.python.org/3.11/tutorial/") >= 2
    assert "The use of the else clause is better" in system  # the passage that answers it
    *sources, blank, how_to = out.split("Its sources, by label:\n", 1)[1].strip().split("\n")
    assert [line.split("]")[0][1:] for line in sources] == labels
    assert blank == ""
    for line in sources:
        assert re.fullmatch(
            r"\[S\d+\] https://docs\.python\.org/3\.11/tutorial/\w+\.html#:~:text=[\w.~%]+",
            line,
        )
    assert how_to == (
        "To get an answer: pip install 'window-retriever[openai]' and set OPENAI_API_KEY."
    )


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_openai") is not None,
    reason="langchain-openai is installed: with a key the example would call OpenAI",
)
def test_chain_with_a_key_but_without_the_openai_extra_says_what_to_install() -> None:
    done = run_example("examples/chain.py", OPENAI_API_KEY="sk-test")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "OPENAI_API_KEY is set, but langchain-openai is not installed: "
        "pip install 'window-retriever[openai]'"
    )


def outputs(notebook: Any) -> list[tuple[int, str, tuple[str, ...]]]:
    """Each code cell's outputs, as (cell, output type, MIME types)."""
    return [
        (number, output["output_type"], tuple(sorted(output.get("data", {}))))
        for number, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
    ]


def test_the_notebook_runs_from_a_clean_kernel_and_is_stored_with_its_outputs() -> None:
    reason = "needs nbclient, nbformat and ipykernel (the test extra)"
    nbformat = pytest.importorskip("nbformat", reason=reason)
    nbclient = pytest.importorskip("nbclient", reason=reason)
    pytest.importorskip("ipykernel", reason=reason)

    stored = nbformat.read(NOTEBOOK, as_version=4)
    fresh = copy.deepcopy(stored)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(
        fresh, timeout=120, kernel_name="python3", resources={"metadata": {"path": EXAMPLES}}
    )
    client.execute()  # raises CellExecutionError, with the traceback, if a cell fails

    found = outputs(fresh)
    assert found == outputs(stored), "examples/demo.ipynb is stale: execute and save it again"
    kinds = [mime for _, _, mime in found]
    assert kinds.count(("text/html", "text/plain")) == 3  # plain against windows, 3 questions
    assert kinds.count(("image/png", "text/plain")) == 4  # 3 window maps and the budget plot
    text = "".join(
        "".join(output.get("text", ""))
        for cell in fresh.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert re.search(r"^\[S1\] 8\. Errors and Exceptions \(https://", text, re.MULTILINE)
    markdown = "".join(
        output["data"].get("text/markdown", "")
        for cell in fresh.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "data" in output
    )
    assert "[open at the passage](https://docs.python.org/3.11/tutorial/errors.html#:~:text=" in (
        markdown
    )
    assert re.search(r"^\| window \| 2000 \| ", markdown, re.MULTILINE)
