"""The CLI end to end: real HTTP on loopback, the real model, Chroma on disk and as a server."""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import chromadb
import pytest

from window_retriever._embeddings import MiniLMEmbeddings
from window_retriever.cli._parser import main

pytestmark = pytest.mark.integration


def html(title: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title></head><body>"
        f'<div class="nav">NAVIGATION JUNK</div>'
        f'<h1 class="post-title">{title}</h1><div class="post-content">{body}</div>'
        f'<div class="footer">FOOTER JUNK</div></body></html>'
    ).encode()


def article(topic: str, count: int = 12) -> list[str]:
    return [
        f"{topic.title()} fact number {i}: the {topic} paragraph {i} explains one detail."
        for i in range(count)
    ]


@dataclass
class Site:
    port: int
    pages: dict[str, tuple[int, str, bytes, float]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def site() -> Iterator[Site]:
    """A real HTTP server on a free loopback port, serving pages the test can change."""
    state = Site(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            state.times.append(time.monotonic())
            status, kind, body, delay = state.pages.get(
                self.path, (404, "text/html", b"not found", 0.0)
            )
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (the timeout test)
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    state.pages.update(
        {
            "/bees.html": (200, "text/html; charset=utf-8", html("Bees", article("bees")), 0.0),
            "/rivers.html": (200, "text/html", html("Rivers", article("rivers")), 0.0),
            "/stars.html": (200, "text/html", html("Stars", article("stars")), 0.0),
            "/slow.html": (200, "text/html", html("Slow", article("slow")), 3.0),
            "/paper.pdf": (200, "application/pdf", b"%PDF-1.4 not html", 0.0),
            "/nav-only.html": (
                200,
                "text/html",
                b'<html><body><div class="nav">only nav</div></body></html>',
                0.0,
            ),
        }
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the texts the real embedding model embeds (a list of batch sizes)."""
    batches: list[int] = []
    original = MiniLMEmbeddings.embed_documents

    def counting(self: MiniLMEmbeddings, texts: list[str]) -> list[list[float]]:
        batches.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(MiniLMEmbeddings, "embed_documents", counting)
    return batches


def stored(db: Path, collection: str = "documents") -> dict[str, Any]:
    client = chromadb.PersistentClient(path=str(db))
    return client.get_collection(collection).get(include=["documents", "metadatas"])


GOOD = ["/bees.html", "/rivers.html", "/stars.html"]
BAD = {
    "/missing.html": "HTTP 404 Not Found",
    "/slow.html": "timed out after 1 s",
    "/paper.pdf": "not HTML (content type application/pdf)",
    "/nav-only.html": "no text in the elements of --selector post-content post-title",
}


def ingest(site: Site, db: Path, paths: list[str], *extra: str) -> int:
    urls = [site.url(p) for p in paths]
    return main(
        [
            "ingest",
            *urls,
            "--db",
            str(db),
            "--selector",
            "post-content",
            "post-title",
            "--timeout",
            "1",
            "--rate",
            "50",
            *extra,
        ]
    )


def test_ingest_over_http_reports_each_bad_source_and_stores_the_good(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    assert ingest(site, db, [*GOOD, *BAD]) == 1
    out = capsys.readouterr().out.splitlines()
    for path, reason in BAD.items():
        assert f"failed    {site.url(path)}: {reason}" in out
    for path in GOOD:
        assert any(line.startswith(f"added     {site.url(path)}: ") for line in out)
    assert out[-1].startswith(
        "7 sources: 3 ingested (3 added, 0 updated), 0 skipped (unchanged), 0 skipped (empty), 4 failed, 0 gone (removed);"
    )
    records = stored(db)
    sources = {m["source"] for m in records["metadatas"]}
    assert sources == {site.url(p) for p in GOOD}
    text = "\n".join(records["documents"])
    assert (
        "NAVIGATION JUNK" not in text and "FOOTER JUNK" not in text and "bees paragraph 3" in text
    )
    assert {m["title"] for m in records["metadatas"]} == {"Bees", "Rivers", "Stars"}
    assert len(set(records["ids"])) == len(records["ids"])


def test_reingest_is_idempotent_and_embeds_nothing(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedded: list[int]
) -> None:
    db = tmp_path / "db"
    assert ingest(site, db, GOOD) == 0
    first = stored(db)
    embedded.clear()
    capsys.readouterr()
    assert ingest(site, db, GOOD) == 0
    assert sum(embedded) == 0
    out = capsys.readouterr().out
    assert "3 skipped (unchanged)" in out and "0 chunks written" in out
    assert sorted(stored(db)["ids"]) == sorted(first["ids"])


def test_a_changed_page_replaces_its_old_chunks(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedded: list[int]
) -> None:
    db = tmp_path / "db"
    assert ingest(site, db, GOOD) == 0
    before = stored(db)
    old_bees = [
        i for i, m in zip(before["ids"], before["metadatas"], strict=True) if "bees" in m["source"]
    ]
    site.pages["/bees.html"] = (
        200,
        "text/html",
        html("Bees", ["Bees now dance the waggle dance.", *article("bees", 3)]),
        0.0,
    )
    embedded.clear()
    assert ingest(site, db, GOOD) == 0
    assert "updated   " in capsys.readouterr().out
    after = stored(db)
    bees = [
        (i, d, m)
        for i, d, m in zip(after["ids"], after["documents"], after["metadatas"], strict=True)
        if "bees" in m["source"]
    ]
    assert len(bees) < len(old_bees)
    assert sum(embedded) == len(bees)  # only the changed page was embedded
    assert len({m["file_version"] for _, _, m in bees}) == 1
    assert "waggle" in " ".join(d for _, d, _ in bees) and "paragraph 10" not in " ".join(
        d for _, d, _ in bees
    )
    assert len(after["ids"]) == len(before["ids"]) - len(old_bees) + len(bees)


def test_query_prints_windows_and_json_under_a_tenant_filter(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    assert ingest(site, db, ["/bees.html"], "--metadata", "tenant=a") == 0
    site.pages["/bees.html"] = (200, "text/html", html("Bees", article("wasps")), 0.0)
    assert ingest(site, db, ["/bees.html"], "--metadata", "tenant=b") == 0
    capsys.readouterr()
    question = "What does the bees paragraph 5 explain?"

    def query(budget: str, tenant: str, *extra: str) -> int:
        where = json.dumps({"tenant": tenant})
        window = ["-k", "2", "--window-budget", budget, "--filter", where]
        return main(["query", question, "--db", str(db), *window, *extra])

    assert query("300", "a") == 0
    text = capsys.readouterr().out
    assert text.startswith("[1] ") and "score " in text and "»" in text and "wasps" not in text
    assert query("200", "b", "--json") == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1))
    for result in results:
        meta = result["metadata"]
        assert meta["tenant"] == "b" and "bees" not in result["text"]
        assert {
            "chunk_ids",
            "hit_chunk_ids",
            "hit_spans",
            "score",
            "start_index",
            "end_index",
        } <= set(meta)


def test_a_second_writer_is_stopped_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom window_retriever.cli._lock import writer_lock\n"
            "with writer_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(60)\n",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        note = tmp_path / "note.txt"
        note.write_text("A note.")
        assert main(["ingest", str(note), "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"window-retriever: error: another process is writing to the store in {db}; wait for it "
            "to finish (or pass --wait), or use a Chroma server (--chroma-url) for several writers"
        )
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_demo_runs_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--db", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "--- plain: the top " in out and " of 2000 characters" in out
    assert "--- windows: " in out
    assert "with open" in out


def test_ingest_and_query_against_a_chroma_server(
    site: Site, chroma_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = [site.url(p) for p in GOOD]
    args = ["--chroma-url", chroma_server, "--collection", "server-test"]
    assert main(["ingest", *urls, *args, "--selector", "post-content"]) == 0
    capsys.readouterr()
    assert (
        main(["query", "Which rivers paragraph explains detail 7?", *args, "--json", "-k", "2"])
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 2 and any("rivers" in r["text"] for r in results)


def test_a_terminal_gets_a_progress_bar_and_a_pipe_plain_lines(tmp_path: Path) -> None:
    import fcntl
    import os
    import pty
    import struct
    import termios

    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"{i}.txt").write_text(f"Note {i} about bees and honey.", encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "window_retriever",
        "ingest",
        str(notes),
        "--db",
        str(tmp_path / "db"),
    ]
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100x24 screen
    try:
        result = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=terminal, text=True, check=True, timeout=120
        )
        os.close(terminal)
        screen = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(controller, 65536):
                screen += chunk
    finally:
        os.close(controller)
    assert b"3/3 sources" in screen and b"chunk/s" in screen
    assert result.stdout.splitlines()[-1].startswith("3 sources: 3 ingested")
    # not on a terminal: no bar, only the lines
    piped = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    assert piped.stderr == ""
    assert piped.stdout.splitlines()[-1].startswith("3 sources: 0 ingested")


def test_eval_command_on_a_small_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "facts.txt"
    sentences = [
        f"Fact {i}: the {word} is item number {i}."
        for i, word in enumerate(["kettle", "lamp", "chair", "door", "rug", "sink"] * 5)
    ]
    text = " ".join(sentences)
    source.write_text(text, encoding="utf-8")
    db = tmp_path / "db"
    assert (
        main(
            ["ingest", str(source), "--db", str(db), "--chunk-size", "120", "--chunk-overlap", "20"]
        )
        == 0
    )
    needle = "Fact 13: the lamp is item number 13."
    start = text.index(needle)
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps(
            {
                "question": "Which item number is fact 13 the lamp?",
                "source": str(source.resolve()),
                "answer": "item number 13",
                "gold_spans": [[start, start + len(needle)]],
            }
        )
        + "\n{broken\n"
        + json.dumps(
            {"question": "What is fact 4?", "source": str(source.resolve()), "answer": "rug"}
        )
        + "\n",
        encoding="utf-8",
    )
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    capsys.readouterr()
    status = main(
        [
            "eval",
            str(questions),
            "--db",
            str(db),
            "--total-budgets",
            "300,600",
            "--configs",
            "plain,window:window_budget=250;expansion=static",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ]
    )
    assert status == 0
    captured = capsys.readouterr()
    assert (
        captured.err.strip()
        == "skipped line 2: not JSON (Expecting property name enclosed in double quotes)"
    )
    lines = captured.out.splitlines()
    assert lines[0] == "2 questions, 1 line skipped"
    assert lines[1].startswith("| config | budget | coverage |")
    assert any(
        line.startswith("| window:window_budget=250;expansion=static | 600 | ") for line in lines
    )
    result = json.loads(out_json.read_text())
    assert {(r["config"], r["budget"]) for r in result["rows"]} == {
        ("plain", 300),
        ("plain", 600),
        ("window:window_budget=250;expansion=static", 300),
        ("window:window_budget=250;expansion=static", 600),
    }
    assert all(r["store_calls"] >= 1 for r in result["rows"])
    assert out_png.read_bytes()[:4] == b"\x89PNG"


def test_the_locomo_benchmark_runs_on_a_small_subset(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "benchmarks" / "locomo.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            "--conversations",
            "1",
            "--questions",
            "6",
            "--budgets",
            "1000",
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "| plain | 1000 |" in result.stdout
        and "| parent-doc (300 / 1200) | 1000 |" in result.stdout
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["questions"] == 6 and results["throughput"]["chunks"] > 0


def test_rate_keeps_requests_to_one_host_apart(site: Site, tmp_path: Path) -> None:
    urls = [site.url(p) for p in GOOD]
    assert main(["ingest", *urls, "--db", str(tmp_path / "db"), "--rate", "1"]) == 0
    assert len(site.times) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(site.times)]
    assert min(gaps) >= 0.9  # one request a second; without the limit, embedding time only


def test_query_into_a_closed_pipe_is_not_an_error(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    assert ingest(site, db, GOOD) == 0
    capsys.readouterr()
    process = subprocess.Popen(
        [sys.executable, "-m", "window_retriever", "query", "bees", "--db", str(db), "-k", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(1)
    process.stdout.close()  # `| head -c 1`
    error = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == 0
    assert "Error" not in error and "Traceback" not in error


def test_a_second_install_of_the_demo_replaces_the_first_ones_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo from another install (its pages at another path) into the same store: the
    first install's pages go, so a query does not return every window twice."""
    import shutil

    from window_retriever.cli._commands import bundled_pages

    other = tmp_path / "other-install" / "pages"
    shutil.copytree(bundled_pages(), other)
    db = str(tmp_path / "demo")
    assert main(["demo", "--db", db, "--pages", str(other)]) == 0
    assert main(["demo", "--db", db]) == 0
    capsys.readouterr()
    client = chromadb.PersistentClient(path=db)
    sources = {m["source"] for m in client.get_collection("documents").get()["metadatas"]}
    assert sources and all(s.startswith(str(bundled_pages())) for s in sources)


def test_headers_are_embedded_not_stored_and_switching_them_re_embeds(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    texts: list[str] = []
    original = MiniLMEmbeddings.embed_documents

    def spying(self: MiniLMEmbeddings, batch: list[str]) -> list[list[float]]:
        texts.extend(batch)
        return original(self, batch)

    monkeypatch.setattr(MiniLMEmbeddings, "embed_documents", spying)
    body = "".join(f"<p>{p}</p>" for p in article("hives", 8))
    site.pages["/guide.html"] = (
        200,
        "text/html",
        (
            "<html><head><title>Beekeeping Guide</title></head><body>"
            '<h1 class="post-title">Beekeeping Guide</h1><div class="post-content">'
            f"<p>Intro.</p><h2>Hive care</h2>{body}</div></body></html>"
        ).encode(),
        0.0,
    )
    pages = ["/bees.html", "/guide.html"]
    db = tmp_path / "db"
    assert ingest(site, db, pages) == 0  # headers off by default
    plain = stored(db)
    assert sorted(texts) == sorted(plain["documents"])
    texts.clear()
    capsys.readouterr()
    assert ingest(site, db, pages, "--headers") == 0  # every page is embedded again
    assert "2 updated" in capsys.readouterr().out
    headed = stored(db)
    assert sorted(headed["documents"]) == sorted(plain["documents"])  # the same text stored
    by_id = dict(zip(headed["ids"], headed["metadatas"], strict=True))
    documents = dict(zip(headed["ids"], headed["documents"], strict=True))
    expected = {f"{m['context_header']}\n\n{documents[i]}" for i, m in by_id.items()}
    assert set(texts) == expected
    assert {m["context_header"] for m in by_id.values()} == {
        "Bees",
        "Beekeeping Guide",
        "Beekeeping Guide > Hive care",
    }
    texts.clear()
    assert ingest(site, db, pages, "--headers") == 0
    assert texts == [] and "2 skipped (unchanged)" in capsys.readouterr().out
    assert ingest(site, db, pages, "--no-headers") == 0  # and back: embedded again
    assert sorted(texts) == sorted(plain["documents"])
    assert "2 updated" in capsys.readouterr().out
