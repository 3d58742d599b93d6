"""The wheel carries what the installed command needs: `window-retriever demo` runs from it.

The wheel is built offline from a copy of the package (no build isolation: the environment's
setuptools), unpacked into a folder, and run from a directory outside the source tree with
that folder first on ``sys.path``: what an installed wheel sees, without a second venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PAGES = ("README.md", "datastructures.html", "errors.html", "inputoutput.html")


def build_wheel(work: Path) -> Path:
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "window_retriever",
        source / "window_retriever",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("--no-index", "--quiet", "-w", str(work / "dist"), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (work / "dist").glob("window_retriever-*.whl")
    return wheel


def test_the_demo_runs_from_the_wheel_alone(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for page in PAGES:
        assert f"window_retriever/_data/pages/{page}" in names, page

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"  # not the source tree, not its parent
    elsewhere.mkdir()
    program = (
        "import sys; sys.path.insert(0, sys.argv[1]); import window_retriever; "
        "assert window_retriever.__file__.startswith(sys.argv[1]), window_retriever.__file__; "
        "from window_retriever.cli._parser import main; sys.exit(main(['demo', '--db', 'demo-db']))"
    )
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [sys.executable, "-c", program, str(site)],
        cwd=elsewhere,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pages = site / "window_retriever" / "_data" / "pages"
    assert f" chunks of the pages in {pages} are in demo-db/, collection 'documents' (" in (
        done.stdout
    )
    assert "\n--- windows: " in done.stdout
    assert (elsewhere / "demo-db" / "chroma.sqlite3").is_file()
