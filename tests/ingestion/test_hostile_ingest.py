"""Hostile ingestion on real parts: removed metadata, a second machine, interrupts.

Real ``window-retriever`` processes, real Chroma (embedded and a loopback server), a second
"machine" made with a mount namespace (``unshare``, as root), and real SIGINTs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import chromadb
import pytest

from window_retriever.cli._parser import main

pytestmark = pytest.mark.integration

COMMAND = [sys.executable, "-m", "window_retriever"]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def store_args(kind: str, tmp_path: Path, chroma_server: str) -> list[str]:
    if kind == "embedded":
        return ["--db", str(tmp_path / "db")]
    return ["--chroma-url", chroma_server, "--collection", f"c-{uuid.uuid4().hex[:10]}"]


def server_collection(url: str, name: str) -> Any:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return chromadb.HttpClient(host=host, port=int(port)).get_collection(name)


def sources_in(collection: Any) -> dict[str, int]:
    found: dict[str, int] = {}
    for metadata in collection.get(include=["metadatas"])["metadatas"]:
        found[metadata["source"]] = found.get(metadata["source"], 0) + 1
    return found


@pytest.mark.parametrize("kind", ["embedded", "server"])
def test_a_metadata_key_removed_on_re_ingest_no_longer_matches_a_filter(
    kind: str, tmp_path: Path, chroma_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "plan.txt").write_text("The launch plan of the new product. " * 30, "utf-8")
    where = store_args(kind, tmp_path, chroma_server)
    assert main(["ingest", str(folder), *where, "--metadata", "public=yes"]) == 0
    assert main(["ingest", str(folder), *where]) == 0
    assert "1 ingested (0 added, 1 updated)" in capsys.readouterr().out
    query = ["query", "launch plan", *where, "--json", "--filter", '{"public": "yes"}']
    assert main(query) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["query", "launch plan", *where, "--json"]) == 0
    windows = json.loads(capsys.readouterr().out)
    assert windows and all("public" not in window["metadata"] for window in windows)


def test_a_second_machine_at_the_same_path_prunes_nothing_of_the_first(
    tmp_path: Path, chroma_server: str
) -> None:
    """Two machines ingest /…/docs into one server collection. The second is this machine in
    a mount namespace of its own, with another folder bind-mounted at the same path."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("this test needs util-linux's unshare (and root) for a second machine")
    docs, other = tmp_path / "docs", tmp_path / "machine-b"
    docs.mkdir()
    other.mkdir()
    for name in ("a1", "a2"):
        (docs / f"{name}.txt").write_text(f"Machine A's file {name} about bees. " * 20, "utf-8")
    (other / "b1.txt").write_text("Machine B's only file, about snails. " * 20, "utf-8")
    collection = f"c-{uuid.uuid4().hex[:10]}"
    where = ["--chroma-url", chroma_server, "--collection", collection]
    assert run("ingest", str(docs), *where).returncode == 0

    python = " ".join(COMMAND)
    machine_b = subprocess.run(
        [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount --bind "{other}" "{docs}" && ls "{docs}" && '
            f'{python} ingest "{docs}" {" ".join(where)}',
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert machine_b.returncode == 0, machine_b.stderr
    assert machine_b.stdout.splitlines()[0] == "b1.txt"  # it really saw the other folder
    assert not [line for line in machine_b.stdout.splitlines() if line.startswith("removed")]
    assert ", 0 gone (removed)" in machine_b.stdout
    stored = sources_in(server_collection(chroma_server, collection))
    assert set(stored) == {str(docs / "a1.txt"), str(docs / "a2.txt"), str(docs / "b1.txt")}

    (docs / "a1.txt").unlink()  # A deletes a file: A's run removes it, and only it
    again = run("ingest", str(docs), *where)
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if line.startswith("removed")] == [
        f"removed   {docs / 'a1.txt'}: gone ({stored[str(docs / 'a1.txt')]} chunks)"
    ]
    assert set(sources_in(server_collection(chroma_server, collection))) == {
        str(docs / "a2.txt"),
        str(docs / "b1.txt"),
    }


def folder_of_pages(root: Path, long_chunks: int = 700) -> Path:
    """Small pages and one long file (about ``long_chunks`` chunks of 400 characters)."""
    folder = root / "pages"
    folder.mkdir()
    for i in range(12):
        (folder / f"note{i:02d}.txt").write_text(f"Note {i} about topic {i}. " * 60, "utf-8")
    line = "A line of the long manual, number {0:05d}, explains one more option in detail.\n"
    (folder / "long.txt").write_text(
        "".join(line.format(i) for i in range(long_chunks * 5)), "utf-8"
    )
    return folder


def running(process: subprocess.Popen[str], after: float) -> None:
    """Wait ``after`` seconds, and at least until the command runs its own code.

    Python's own start comes first (its ``site`` import): a Ctrl-C there is Python's to
    report, not the command's, and on a busy machine it can last longer than ``after``. The
    command's imports map numpy's extension: it has started by then.
    """
    started = time.monotonic()
    maps = Path(f"/proc/{process.pid}/maps")
    while process.poll() is None and "_multiarray_umath" not in maps.read_text("utf-8", "replace"):
        if time.monotonic() - started > 60:
            pytest.fail("the ingest did not start within 60 s")
        time.sleep(0.005)
    time.sleep(max(0.0, after - (time.monotonic() - started)))


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the ingest did not end within 60 s of Ctrl-C: it hangs")
    return process.returncode, stderr


@pytest.mark.parametrize("after", [0.3, 2.0, 6.0])
def test_ctrl_c_ends_the_ingest_without_a_traceback_and_frees_the_store(
    after: float, tmp_path: Path
) -> None:
    folder = folder_of_pages(tmp_path, long_chunks=600)  # still embedding at 6 s
    db = str(tmp_path / "db")
    process = subprocess.Popen(
        [*COMMAND, "ingest", str(folder), "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    running(process, after)
    if process.poll() is not None:
        pytest.fail(f"the ingest ended before the interrupt at {after} s; give it more work")
    status, stderr = interrupt(process)
    if status == 0:
        pytest.fail(f"the ingest finished before the interrupt at {after} s; give it more work")
    assert "Traceback" not in stderr
    assert (status, stderr.strip().splitlines()[-1:]) == (130, ["window-retriever: interrupted"])
    finished = run("ingest", str(folder), "--db", db)  # no --wait: the lock must be free
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines()[-1].startswith("13 sources: ")


def test_an_interrupted_long_file_keeps_what_was_written(
    tmp_path: Path, chroma_server: str
) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    long = folder_of_pages(tmp_path) / "long.txt"
    shutil.move(long, folder / "long.txt")
    collection = f"c-{uuid.uuid4().hex[:10]}"
    where = ["--chroma-url", chroma_server, "--collection", collection]
    process = subprocess.Popen(
        [*COMMAND, "ingest", str(folder), *where],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    written = 0
    while written == 0:  # interrupt once the first part of the long file is in the store
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no part of the long file was written first: {process.stderr}")
        time.sleep(0.2)
        try:
            written = server_collection(chroma_server, collection).count()
        except Exception:  # the collection is not created yet
            written = 0
    status, stderr = interrupt(process)
    assert (status, "Traceback" in stderr) == (130, False)
    kept = server_collection(chroma_server, collection).count()
    assert kept >= written > 0
    again = run("ingest", str(folder), *where)
    assert again.returncode == 0, again.stderr
    line = next(line for line in again.stdout.splitlines() if "long.txt" in line)
    total = int(line.split(": ")[1].split(" chunks")[0])
    assert kept < total  # it was interrupted part-way
    assert f"{total - kept} written, 0 removed" in line  # only the rest is embedded
    assert server_collection(chroma_server, collection).count() == total
    assert os.path.exists(folder / "long.txt")
