"""Several processes on one Chroma server: two writers and a reader at once (issue 11).

Teams run several web workers and several writers against one Chroma server. Here: the real
server on loopback (the session's ``chroma_server``), the real packaged model, the real command
line. Two ``ingest`` processes update folders of generated pages (pages grow, shrink, stay,
go and appear) while a reader process queries the same collection, sync and async, and
snapshots it, the whole time. Afterwards every page must be whole; and at no moment may the
reader have seen a page that was stored before go missing, a page half written or one that
is neither an old nor a new version, a chunk of unknown text, or a window that is not a span
of a known page with that page's provenance.

The reader is this module run as a script (``python -m tests.ingestion.test_processes
CONFIG OUT``). Processes coordinate by pipes, never by sleeps: the reader prints "ready" after
its first round, and stops after one more round once its stdin closes, which the test does
when both writers have exited. Times are ``time.monotonic()``: on Linux one clock
(CLOCK_MONOTONIC) for every process on the machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import (
    ContextWindowRetriever,
    LoadOptions,
    WindowSplitter,
    default_embeddings,
    load_file,
)
from window_retriever.cli._parser import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
TIMEOUT = 120  # seconds any one process may take before the test gives up on it

# Each page: paragraphs in version 1 and in version 2 (0: no such file then). One paragraph is
# about one 400-character chunk, so the store holds each version at other positions.
PLAN = {"grows": (3, 8), "shrinks": (7, 2), "same": (3, 3), "removed": (3, 0), "new": (0, 7)}
TOPICS = {
    "txt": {
        "grows": ("glacier", "moraine crevasse firn icefall serac meltwater"),
        "shrinks": ("beekeeping", "hive queen drone honeycomb pollen smoker"),
        "same": ("clockmaking", "escapement pendulum mainspring balance pinion dial"),
        "removed": ("lighthouse", "lantern keeper beacon foghorn lens gallery"),
        "new": ("sourdough", "starter levain crumb proofing rye flour"),
    },
    "html": {
        "grows": ("volcano", "magma caldera lava ash fumarole eruption"),
        "shrinks": ("origami", "crease fold valley mountain paper crane"),
        "same": ("falconry", "falcon jess hood lure mews austringer"),
        "removed": ("typewriter", "platen ribbon carriage typebar keys margin"),
        "new": ("saffron", "crocus stigma threads harvest paella spice"),
    },
}
FILLER = [
    "the",
    "of",
    "and",
    "with",
    "in",
    "notes",
    "careful",
    "then",
    "every",
    "small",
    "old",
    "record",
]


# ---- pages and what the store must hold for them ----------------------------------------------


@dataclass(frozen=True)
class Version:
    """One version of one page as the command line stores it."""

    source: str
    text: str
    title: str | None
    chunks: tuple[Document, ...]

    @property
    def version(self) -> str:
        return str(self.chunks[0].metadata["file_version"])


def paragraphs(topic: str, words: str, version: int, count: int) -> list[str]:
    """Distinctive text: a topic's own words, seeded by topic and version (stable across runs)."""
    vocabulary = words.split() + FILLER
    out = []
    for number in range(count):
        rng = random.Random(f"{topic}/{version}/{number}")
        body = " ".join(rng.choice(vocabulary) for _ in range(40))
        out.append(f"{topic.title()} record {version}.{number}: {body}.")
    return out


def write_pages(folder: Path, suffix: str, version: int) -> dict[str, Version]:
    """Make ``folder`` hold the pages of ``version`` (1 or 2); return what each must store as."""
    folder.mkdir(exist_ok=True)
    pages = {}
    for name, counts in PLAN.items():
        path = folder / f"{name}.{suffix}"
        count = counts[version - 1]
        if not count:
            path.unlink(missing_ok=True)
            continue
        topic, words = TOPICS[suffix][name]
        text = paragraphs(topic, words, 1 if name == "same" else version, count)
        if suffix == "html":
            body = "".join(f"<p>{p}</p>" for p in text)
            title = f"{topic.title()} notes"
            path.write_text(f"<html><head><title>{title}</title></head><body>{body}</body></html>")
        else:
            path.write_text("\n\n".join(text) + "\n")
        page = expect(path)
        pages[page.source] = page
    return pages


def expect(path: Path) -> Version:
    """What the ingest command stores for ``path``: its defaults, 400 / 40 characters."""
    loaded = load_file(path, LoadOptions())
    assert loaded.document is not None, loaded.error
    chunks = WindowSplitter().split_documents([loaded.document])
    assert len(chunks) >= 2, "a page must span several chunks to be written in parts"
    metadata = loaded.document.metadata
    return Version(
        metadata["source"], loaded.document.page_content, metadata.get("title"), tuple(chunks)
    )


Known = dict[str, dict[str, Version]]  # source -> file_version -> that version


def known(*states: Mapping[str, Version]) -> Known:
    out: Known = {}
    for state in states:
        for source, page in state.items():
            out.setdefault(source, {})[page.version] = page
    return out


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def assert_covers(text: str, chunks: Sequence[Mapping[str, Any]]) -> None:
    """Chunks ``{"metadata", "text"}`` are positions 0..n-1 whose spans cover ``text``.

    Checked from the stored ``start_index`` alone, not against the splitter: consecutive
    chunks overlap or touch across whitespace only, the first starts the page and the last
    ends it.
    """
    ordered = sorted(chunks, key=lambda chunk: chunk["metadata"]["chunk_index"])
    assert [c["metadata"]["chunk_index"] for c in ordered] == list(range(len(ordered)))
    end = 0
    for chunk in ordered:
        start = chunk["metadata"]["start_index"]
        assert text[start : start + len(chunk["text"])] == chunk["text"]
        assert start <= end or text[end:start].isspace(), f"text {end}..{start} is in no chunk"
        end = max(end, start + len(chunk["text"]))
    assert ordered[0]["metadata"]["start_index"] == 0 and end == len(text)


def stored(url: str, collection: str) -> list[dict[str, Any]]:
    """Every record of the collection: ``{"id", "metadata", "text"}``."""
    address = urlsplit(url)
    client = chromadb.HttpClient(host=address.hostname, port=address.port)
    records = client.get_collection(collection).get(include=["metadatas", "documents"])
    return [
        {"id": i, "metadata": m, "text": t}
        for i, m, t in zip(records["ids"], records["metadatas"], records["documents"], strict=True)
    ]


def assert_store_holds_exactly(records: list[dict[str, Any]], pages: Mapping[str, Version]) -> None:
    """The store holds each page whole, in its final version, once, and nothing else."""
    ids = [record["id"] for record in records]
    assert len(ids) == len(set(ids)), "a chunk id is stored twice"
    by_source: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_source.setdefault(record["metadata"]["source"], []).append(record)
    assert sorted(by_source) == sorted(pages), "pages missing, or pages that should be gone"
    for source, page in pages.items():
        got = sorted(by_source[source], key=lambda r: r["metadata"]["chunk_index"])
        assert len(got) == len(page.chunks), f"{source}: {len(got)} chunks, not {len(page.chunks)}"
        assert_covers(page.text, got)
        for record, chunk in zip(got, page.chunks, strict=True):
            assert record["id"] == chunk.id
            head = {"file_chunks": len(page.chunks)} if chunk.metadata["chunk_index"] == 0 else {}
            origin = record["metadata"].pop("ingest_origin")  # read from this folder, here
            assert isinstance(origin, str) and len(origin) == 16
            assert record["metadata"] == {**chunk.metadata, **head}  # chunk 0 marks a whole write
            assert record["text"] == chunk.page_content


def state_problems(
    state: Sequence[Sequence[Any]], pages: Known, never_missing: Iterable[str]
) -> list[str]:
    """What is wrong with one snapshot ``[[id, metadata, digest], ...]`` taken mid-write.

    Every chunk must be a chunk of a known version of a known page; every page stored at all
    must have one version whole (an update puts the whole new version over the old one, then
    trims the old tail); pages stored before the writes began must never be missing.
    """
    problems = []
    ids = [chunk_id for chunk_id, _, _ in state]
    if len(ids) != len(set(ids)):
        problems.append("a chunk id twice in one read")
    present: dict[str, dict[str, set[int]]] = {}  # source -> version -> positions
    for chunk_id, metadata, text_digest in state:
        page = pages.get(metadata.get("source"), {}).get(metadata.get("file_version"))
        index = metadata.get("chunk_index")
        if page is None or not isinstance(index, int) or not 0 <= index < len(page.chunks):
            problems.append(f"unknown chunk {chunk_id}: {metadata}")
            continue
        chunk = page.chunks[index]
        head = {"file_chunks": len(page.chunks)} if index == 0 else {}  # marks a whole write
        metadata = {k: v for k, v in metadata.items() if k != "ingest_origin"}  # the folder's
        if (chunk_id, metadata, text_digest) != (
            chunk.id,
            {**chunk.metadata, **head},
            digest(chunk.page_content),
        ):
            problems.append(f"chunk {chunk_id} differs from its version's chunk {index}")
            continue
        present.setdefault(page.source, {}).setdefault(page.version, set()).add(index)
    for source in never_missing:
        if source not in present:
            problems.append(f"{source} missing while it was being updated")
    # A page being rewritten may show some chunks of each version for a moment (the first
    # chunk, the mark of a whole write, goes last); windows join one version only.
    return problems


def window_problems(document: Mapping[str, Any], pages: Known) -> list[str]:
    """What is wrong with one returned window: it must be a span of a known page, traceable."""
    meta = document["metadata"]
    page = pages.get(meta.get("source"), {}).get(meta.get("file_version"))
    if page is None:
        return [f"window {document['id']} of no known page version: {meta}"]
    chunks = page.chunks
    first, last = meta["first_chunk_index"], meta["last_chunk_index"]
    if not 0 <= first <= last < len(chunks):
        return [f"window {document['id']}: chunks {first}-{last} of {len(chunks)}"]
    start, end = meta["start_index"], meta["end_index"]
    hits = meta["hit_chunk_ids"]
    whole = (
        chunks[first].metadata["start_index"],
        chunks[last].metadata["start_index"] + len(chunks[last].page_content),
    )
    cut = meta.get("cut")  # the budget's last chunk in part: the span ends (starts) inside it
    span = {
        None: (start, end) == whole,
        "end": start == whole[0] and chunks[last].metadata["start_index"] < end <= whole[1],
        "start": end == whole[1] and whole[0] <= start < whole[1],
    }.get(cut, False)
    checks = {
        "file id": meta["file_id"] == chunks[0].metadata["file_id"],
        "document id": document["id"] == f"{meta['file_id']}:{first}-{last}",
        "chunk ids": meta["chunk_ids"] == [c.id for c in chunks[first : last + 1]],
        "span": span,
        "text": document["text"].split() == page.text[start:end].split(),
        "hits": bool(hits) and set(hits) <= set(meta["chunk_ids"]),
        "score": meta["score"] == min(meta["hit_scores"]),
        "title": meta.get("title") == page.title,
    }
    return [f"window {document['id']}: wrong {name}" for name, ok in checks.items() if not ok]


# ---- processes ---------------------------------------------------------------------------------


def environment() -> dict[str, str]:
    """This checkout first on the path, so subprocesses import the code under test."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@dataclass
class Finished:
    """A process that ran to its end: exit status, stdout lines with their times, stderr."""

    code: int
    lines: list[tuple[float, str]]
    errors: str

    @property
    def text(self) -> list[str]:
        return [line for _, line in self.lines]


def run_at_once(commands: Sequence[Sequence[str]], folder: Path) -> tuple[float, list[Finished]]:
    """Start every command at once; wait for all; return when they started, and how they ended."""
    started = time.monotonic()
    runs = []
    for number, command in enumerate(commands):
        errors = (folder / f"stderr-{number}.txt").open("w+")
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, env=environment(), cwd=ROOT
        )
        runs.append((process, errors, []))
    threads = [threading.Thread(target=_timestamp, args=(p, lines)) for p, _, lines in runs]
    for thread in threads:
        thread.start()
    finished = []
    try:
        for (process, errors, lines), thread in zip(runs, threads, strict=True):
            code = process.wait(timeout=TIMEOUT)
            thread.join()
            errors.seek(0)
            finished.append(Finished(code, lines, errors.read()))
    finally:
        for process, errors, _ in runs:
            if process.poll() is None:
                process.kill()
                process.wait()
            errors.close()
    return started, finished


def _timestamp(process: subprocess.Popen[str], lines: list[tuple[float, str]]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    process.stdout.close()


def ingest(folder: Path, url: str, collection: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "window_retriever",
        "ingest",
        str(folder),
        "--chroma-url",
        url,
        "--collection",
        collection,
    ]


class Reader:
    """The reader process: started, then ready (one round done), then stopped; its records."""

    def __init__(self, folder: Path, url: str, collection: str, questions: list[str]) -> None:
        config = folder / "reader.json"
        config.write_text(
            json.dumps({"url": url, "collection": collection, "questions": questions})
        )
        self.out = folder / "reader.jsonl"
        self.errors = (folder / "reader-stderr.txt").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.ingestion.test_processes", str(config), str(self.out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=environment(),
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline().strip()
        assert ready == "ready", self.stderr()

    def stop(self) -> list[dict[str, Any]]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=TIMEOUT) == 0, self.stderr()
        return [json.loads(line) for line in self.out.read_text().splitlines()]

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.errors):
            if stream is not None:
                stream.close()


@pytest.fixture
def reader_of() -> Iterator[Any]:
    readers: list[Reader] = []

    def start(*args: Any) -> Reader:
        readers.append(Reader(*args))
        return readers[-1]

    yield start
    for reader in readers:
        reader.close()


def questions() -> list[str]:
    return [
        f"What do the {topic} notes say about {' and '.join(words.split()[:2])}?"
        for topics in TOPICS.values()
        for topic, words in topics.values()
    ]


def report(before: Mapping[str, Version], after: Mapping[str, Version]) -> list[str]:
    """What ``ingest FOLDER`` prints when the folder went from ``before`` to ``after``."""
    lines, counts = [], {"added": 0, "updated": 0, "unchanged": 0, "written": 0, "removed": 0}
    for source in sorted(after):
        page, old = after[source], before.get(source)
        chunks = len(page.chunks)
        if old is None:
            status, written, removed = "added", chunks, 0
        elif old.version == page.version:
            status, written, removed = "unchanged", 0, 0
        else:
            status, written, removed = "updated", chunks, max(0, len(old.chunks) - chunks)
        detail = f"{chunks} chunks"
        if status == "unchanged":
            detail += ", nothing embedded"
        elif removed:
            detail += f", {written} written, {removed} removed"
        lines.append(f"{status:<9} {source}: {detail}")
        counts[status] += 1
        counts["written"] += written
        counts["removed"] += removed
    gone = sorted(set(before) - set(after))
    for source in gone:
        chunks = len(before[source].chunks)
        lines.append(f"removed   {source}: gone ({chunks} chunk{'s' * (chunks != 1)})")
        counts["removed"] += len(before[source].chunks)
    lines.append(
        f"{len(after)} sources: {counts['added'] + counts['updated']} ingested "
        f"({counts['added']} added, {counts['updated']} updated), {counts['unchanged']} skipped "
        f"(unchanged), 0 skipped (empty), 0 failed, {len(gone)} gone (removed); {counts['written']} chunk{'s' * (counts['written'] != 1)} written, "
        f"{counts['removed']} removed"
    )
    return lines


# ---- the tests ---------------------------------------------------------------------------------


def test_two_writers_and_a_reader_on_one_server(
    chroma_server: str, tmp_path: Path, reader_of: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two folders updated by two ingest processes while a third process reads throughout."""
    collection = "processes-two-folders"
    folders = {suffix: tmp_path / suffix for suffix in TOPICS}
    before = {suffix: write_pages(folder, suffix, 1) for suffix, folder in folders.items()}
    for folder in folders.values():
        assert (
            main(["ingest", str(folder), "--chroma-url", chroma_server, "--collection", collection])
            == 0
        )
    capsys.readouterr()
    after = {suffix: write_pages(folder, suffix, 2) for suffix, folder in folders.items()}
    pages = known(*before.values(), *after.values())
    kept = [s for suffix in TOPICS for s in before[suffix] if s in after[suffix]]

    reader = reader_of(tmp_path, chroma_server, collection, questions())
    started, writers = run_at_once(
        [ingest(folders[s], chroma_server, collection) for s in TOPICS], tmp_path
    )
    ended = time.monotonic()
    records = reader.stop()

    # Both writers succeeded, cleanly, and said exactly what they wrote.
    for suffix, writer in zip(TOPICS, writers, strict=True):
        assert (writer.code, writer.errors) == (0, "")
        assert writer.text == report(before[suffix], after[suffix])
    # Every page landed whole, once, in its new version; the removed pages are gone.
    final = {source: page for state in after.values() for source, page in state.items()}
    assert_store_holds_exactly(stored(chroma_server, collection), final)

    # The reader ran the whole time, and many rounds while the writers ran.
    queries = [r for r in records if r["kind"] in ("sync", "async")]
    snapshots = [r for r in records if r["kind"] == "snapshot"]
    assert {r["kind"] for r in queries} == {"sync", "async"}
    for kind in (queries, snapshots):
        assert min(r["t1"] for r in kind) < started and max(r["t0"] for r in kind) > ended
    during = [r for r in queries if started < r["t0"] and r["t1"] < ended]
    assert len(during) >= 20, f"only {len(during)} queries while the writers ran"
    states = [r["state"] for r in snapshots if r["state"] is not None]
    assert len(states) >= 3, "the reader saw no state between the old store and the new one"
    # None failed, and nothing it saw was ever wrong.
    failed = [r["error"] for r in records if r.get("error")]
    assert not failed, failed[0]
    problems = [p for state in states for p in state_problems(state, pages, kept)]
    problems += [p for r in queries for d in r["documents"] for p in window_problems(d, pages)]
    assert not problems, problems[:5]
    # Pages stored before the writes were never missing, so every query found something.
    assert all(r["documents"] for r in queries), "a query found nothing, yet pages were stored"


def test_two_writers_of_the_same_folder_leave_each_page_whole_once(
    chroma_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two cron jobs ingesting one folder at once (a realistic mistake) still converge.

    Both read the old version of a page, or one reads what the other just wrote; both upsert
    the same ids, both trim the same tail, both prune the same removed page (one of them may
    find it gone already). Whatever the interleaving: each page once, whole, in its new
    version, and the removed page gone.
    """
    collection = "processes-same-folder"
    folder = tmp_path / "txt"
    before = write_pages(folder, "txt", 1)
    assert (
        main(["ingest", str(folder), "--chroma-url", chroma_server, "--collection", collection])
        == 0
    )
    capsys.readouterr()
    after = write_pages(folder, "txt", 2)

    _, writers = run_at_once([ingest(folder, chroma_server, collection)] * 2, tmp_path)

    # Which writer got to a page first varies; each reports every page, with its chunks.
    for writer in writers:
        assert (writer.code, writer.errors) == (0, "")
        lines = [
            re.fullmatch(r"(added|updated|unchanged) +(\S+): (\d+) chunks.*", t)
            for t in writer.text
        ]
        assert {m[2]: int(m[3]) for m in lines if m} == {s: len(p.chunks) for s, p in after.items()}
        assert writer.text[-1].startswith(f"{len(after)} sources: ")
        assert ", 0 failed, " in writer.text[-1]
    (gone,) = set(before) - set(after)
    assert any(f"removed   {gone}: gone (3 chunks)" in w.text for w in writers)
    assert_store_holds_exactly(stored(chroma_server, collection), after)


# ---- the reader process ------------------------------------------------------------------------


def _read(config_path: str, out_path: str) -> None:
    """Watch and query the collection until stdin closes, then once more each."""
    with Path(out_path).open("w") as out:
        _read_into(out, json.loads(Path(config_path).read_text()))


def _read_into(out: TextIO, config: dict[str, Any]) -> None:
    """A watcher thread reads the whole collection again and again and records each state it
    has not just seen; the main thread runs a sync query, then two async ones at once.
    """
    address = urlsplit(config["url"])
    client = chromadb.HttpClient(host=address.hostname, port=address.port)
    store = Chroma(
        collection_name=config["collection"], embedding_function=default_embeddings(), client=client
    )
    collection = client.get_collection(config["collection"])
    retriever = ContextWindowRetriever(vectorstore=store, k=4)
    rounds = _rounds(config["questions"])
    stop = threading.Event()
    lock = threading.Lock()

    def record(kind: str, t0: float, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "t0": t0, "t1": time.monotonic(), **fields})
        with lock:
            out.write(line + "\n")

    previous: list[Any] = []

    def snapshot() -> None:
        t0 = time.monotonic()
        try:
            got = collection.get(include=["metadatas", "documents"])
        except Exception as error:
            record("snapshot", t0, state=None, error=repr(error))
            return
        rows = zip(got["ids"], got["metadatas"], got["documents"], strict=True)
        state = sorted([chunk_id, metadata, digest(text)] for chunk_id, metadata, text in rows)
        record("snapshot", t0, state=None if state == previous else state)
        previous[:] = state

    def wait_for_eof() -> None:
        sys.stdin.read()  # the test closes the pipe once the writers have ended
        stop.set()

    def watch() -> None:
        while not stop.is_set():
            snapshot()
        snapshot()  # begun after the writers ended

    async def query(questions: list[str]) -> None:
        t0 = time.monotonic()
        try:
            record("sync", t0, documents=_as_json(retriever.invoke(questions[0])))
        except Exception as error:
            record("sync", t0, documents=[], error=repr(error))
        t0 = time.monotonic()
        try:
            both = await asyncio.gather(
                retriever.ainvoke(questions[1]),
                retriever.ainvoke(questions[2], total_budget=1500),
            )
            record("async", t0, documents=_as_json([d for docs in both for d in docs]))
        except Exception as error:
            record("async", t0, documents=[], error=repr(error))

    async def run() -> None:
        snapshot()
        await query(next(rounds))
        watcher = threading.Thread(target=watch)
        watcher.start()
        threading.Thread(target=wait_for_eof, daemon=True).start()
        print("ready", flush=True)
        while not stop.is_set():
            await query(next(rounds))
        await query(next(rounds))  # begun after the writers ended
        watcher.join()

    asyncio.run(run())


def _rounds(questions: list[str]) -> Iterator[list[str]]:
    number = 0
    while True:
        yield [questions[(number + i) % len(questions)] for i in range(3)]
        number += 1


def _as_json(documents: Iterable[Document]) -> list[dict[str, Any]]:
    return [{"id": d.id, "text": d.page_content, "metadata": d.metadata} for d in documents]


if __name__ == "__main__":
    _read(*sys.argv[1:3])
