"""Ingesting ordinary folders through the real CLI: links, loops, odd names, old encodings.

Every test runs ``python -m window_retriever`` in a process of its own, with the packaged
model and an embedded Chroma store on disk, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import chromadb
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "window_retriever", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def stored_sources(db: Path) -> list[str]:
    client = chromadb.PersistentClient(path=str(db))
    metadatas = client.get_collection("documents").get(include=["metadatas"])["metadatas"]
    return sorted({str(m["source"]) for m in metadatas if m})


def stored(db: Path) -> list[dict[str, Any]]:
    client = chromadb.PersistentClient(path=str(db))
    found = client.get_collection("documents").get(include=["documents", "metadatas"])
    return [
        {"text": text, **(metadata or {})}
        for text, metadata in zip(found["documents"], found["metadatas"], strict=True)
    ]


def top_source(db: Path, question: str) -> str:
    result = cli("query", question, "--db", str(db), "--json", "-k", "1")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)[0]["metadata"]["source"])


def test_a_linked_folder_whose_target_moved_is_reported_and_its_files_kept(
    tmp_path: Path,
) -> None:
    docs, ext = tmp_path / "docs", tmp_path / "ext"
    docs.mkdir()
    ext.mkdir()
    (docs / "own.txt").write_text("Granite quarries and the stone masons. " * 5, "utf-8")
    (ext / "s1.txt").write_text("The saffron harvest in autumn, crocus by crocus. " * 5, "utf-8")
    (docs / "shared").symlink_to(Path("..") / "ext")
    db = tmp_path / "db"
    first = cli("ingest", str(docs), "--db", str(db))
    assert first.returncode == 0, first.stdout + first.stderr
    shared = str(docs / "shared" / "s1.txt")
    assert stored_sources(db) == sorted([str(docs / "own.txt"), shared])

    ext.rename(tmp_path / "ext-moved")  # the link now points nowhere
    second = cli("ingest", str(docs), "--db", str(db))
    lines = second.stdout.splitlines()
    assert second.returncode == 1
    assert f"failed    {docs / 'shared'}: cannot list this folder (kept as stored)" in lines
    assert not any(line.startswith("removed ") for line in lines), lines
    assert shared in stored_sources(db)
    assert top_source(db, "saffron harvest crocus") == shared


def test_a_dangling_link_to_a_text_file_is_a_gone_file(tmp_path: Path) -> None:
    """A link named x.txt whose file is gone is the file gone: reported, its chunks pruned."""
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (docs / "own.txt").write_text("Granite quarries and the stone masons. " * 5, "utf-8")
    (outside / "o.txt").write_text("Otters in the river at dusk. " * 5, "utf-8")
    (docs / "link.txt").symlink_to(outside / "o.txt")
    db = tmp_path / "db"
    assert cli("ingest", str(docs), "--db", str(db)).returncode == 0
    (outside / "o.txt").unlink()
    result = cli("ingest", str(docs), "--db", str(db))
    lines = result.stdout.splitlines()
    assert f"failed    {docs / 'link.txt'}: no such file or directory" in lines
    assert any(line.startswith(f"removed   {docs / 'link.txt'}: gone") for line in lines)
    assert stored_sources(db) == [str(docs / "own.txt")]


def test_symbolic_link_loops_are_walked_once(tmp_path: Path) -> None:
    top = tmp_path / "L1"
    (top / "L2").mkdir(parents=True)
    (top / "a.txt").write_text("The lighthouse keeper trims the wick at dusk. " * 5, "utf-8")
    (top / "L2" / "b.txt").write_text("Barnacles on the harbour wall. " * 5, "utf-8")
    (top / "self").symlink_to(".")  # a loop through one link
    (top / "L2" / "back").symlink_to("..")  # and a loop through two
    (top / "L2" / "again").symlink_to(Path("..") / "L2")
    db = tmp_path / "db"
    result = cli("ingest", str(top), "--db", str(db))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("2 sources: 2 ingested")
    assert stored_sources(db) == [str(top / "L2" / "b.txt"), str(top / "a.txt")]


def test_a_file_name_that_is_not_utf8_fails_alone_and_named(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.txt").write_text("Tea kettles and the art of steeping. " * 5, "utf-8")
    bad = os.path.join(os.fsencode(folder), b"caf\xe9.txt")
    with open(bad, "wb") as file:
        file.write(b"Espresso and crema. " * 5)
    db = tmp_path / "db"
    result = cli("ingest", str(folder), "--db", str(db))
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"failed    {folder}/caf\\xe9.txt: its name is not valid UTF-8; rename it" in lines
    assert lines[-1].startswith("2 sources: 1 ingested")
    assert stored_sources(db) == [str(folder / "good.txt")]


def test_text_in_old_encodings_is_read_and_binary_refused(tmp_path: Path) -> None:
    folder = tmp_path / "legacy"
    folder.mkdir()
    latin = "Un café crème à la terrasse, la naïveté du résumé. " * 8
    texts = {
        "latin1.txt": (latin, "latin-1"),
        "short.txt": ("café naïve résumé", "latin-1"),
        "utf16.txt": ("Kettles “whistle” when the water boils. " * 4, "utf-16"),
        "quotes.txt": ("He said “hello” – then ‘goodbye’… and paid 5€. " * 3, "cp1252"),  # noqa: RUF001
    }
    for name, (text, encoding) in texts.items():
        (folder / name).write_bytes(text.encode(encoding))
    (folder / "blob.txt").write_bytes(bytes(range(256)) * 8)
    (folder / "nul.txt").write_bytes(b"Readable words\x00then a NUL byte and more words. " * 4)
    db = tmp_path / "db"
    result = cli("ingest", str(folder), "--db", str(db), "--chunk-size", "2000")
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert f"failed    {folder / 'blob.txt'}: binary content, not text" in lines
    assert f"failed    {folder / 'nul.txt'}: binary content, not text" in lines
    assert lines[-1].startswith("6 sources: 4 ingested")
    by_source = {chunk["source"]: chunk for chunk in stored(db)}
    for name, (text, _) in texts.items():
        assert by_source[str(folder / name)]["text"] == text.strip()
    assert by_source[str(folder / "utf16.txt")]["encoding"] == "utf-16"
    # the detector may name cp1250 or cp1252: both read these bytes as the same text (above)
    assert by_source[str(folder / "quotes.txt")]["encoding"] in ("cp1250", "cp1252")
