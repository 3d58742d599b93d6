"""The store matches its sources: replaced, removed, refused and bounded, on real parts.

A loopback HTTP server that redirects, drips, serves gzip bombs, Latin-1, binary bytes and
XML; local trees with deleted, emptied and special files; the real model and Chroma on disk.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import OwnershipError, WindowSplitter, sync_file
from window_retriever.cli._parser import main

pytestmark = pytest.mark.integration

PAGE = (
    "<html><head><title>Garden notes</title></head><body><h1>Garden notes</h1>"
    + "".join(f"<p>Tomato note {i}: water the tomatoes at dawn, not at noon.</p>" for i in range(8))
    + "</body></html>"
)


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/html"})
    body: bytes = PAGE.encode()
    drip: float = 0.0  # seconds between single bytes


@dataclass
class Server:
    port: int = 0
    routes: dict[str, Response] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            response = state.routes.get(self.path.split("#")[0], Response(404, body=b"no"))
            self.send_response(response.status)
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                if response.drip:
                    for i in range(len(response.body)):
                        self.wfile.write(response.body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(response.drip)
                else:
                    self.wfile.write(response.body)

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    state.port = http.server_address[1]
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield state
    http.shutdown()
    http.server_close()


def ingest(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    status = main(["ingest", *argv])
    out = capsys.readouterr().out
    return status, out.strip().splitlines()


def stored(db: Path) -> dict[str, Any]:
    client = chromadb.PersistentClient(path=str(db))
    return client.get_collection("documents").get(include=["documents", "metadatas"])


def sources(db: Path) -> dict[str, set[Any]]:
    """Stored source -> the set of (access, tenant) values its chunks carry."""
    found: dict[str, set[Any]] = {}
    for metadata in stored(db)["metadatas"]:
        found.setdefault(metadata["source"], set()).add(
            (metadata.get("access"), metadata.get("tenant"))
        )
    return found


# ---- metadata and owners -------------------------------------------------------------------------


def test_a_metadata_change_alone_replaces_the_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = tmp_path / "plan.txt"
    note.write_text("The launch plan moves to May. " * 30, encoding="utf-8")
    db = str(tmp_path / "db")
    assert ingest(capsys, str(note), "--db", db, "--metadata", "access=public")[0] == 0
    status, lines = ingest(capsys, str(note), "--db", db, "--metadata", "access=secret")
    assert status == 0
    assert lines[-1].startswith("1 source: 1 ingested (0 added, 1 updated)")
    assert sources(tmp_path / "db") == {str(note.resolve()): {("secret", None)}}  # no public copy


def test_the_library_refuses_to_overwrite_another_tenants_file(make_real_store: Any) -> None:
    store = make_real_store()
    splitter = WindowSplitter()  # default file id keys: the source only
    text = "Quarterly numbers for the board. " * 40

    def chunks(tenant: str) -> list[Document]:
        document = Document(page_content=text, metadata={"source": "q.txt", "tenant": tenant})
        return splitter.split_documents([document])

    sync_file(store, chunks("a"))
    before = store.get()["ids"]
    with pytest.raises(OwnershipError, match=r"tenant='a'.*tenant='b'.*file_id_keys=\('tenant'"):
        sync_file(store, chunks("b"))
    after = store.get(include=["metadatas"])
    assert sorted(after["ids"]) == sorted(before)
    assert {m["tenant"] for m in after["metadatas"]} == {"a"}
    # the fix the message names: one file per tenant
    namespaced = WindowSplitter(file_id_keys=("tenant", "source"))
    for tenant in ("a", "b"):
        document = Document(page_content=text, metadata={"source": "q.txt", "tenant": tenant})
        sync_file(store, namespaced.split_documents([document]))
    assert {m["tenant"] for m in store.get(include=["metadatas"])["metadatas"]} == {"a", "b"}


def test_tenants_through_the_cli_keep_one_copy_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = tmp_path / "memo.txt"
    note.write_text("The memo says the office closes early on Friday. " * 20, encoding="utf-8")
    db = str(tmp_path / "db")
    for tenant in ("a", "b"):
        assert ingest(capsys, str(note), "--db", db, "--metadata", f"tenant={tenant}")[0] == 0
    assert sources(tmp_path / "db")[str(note.resolve())] == {(None, "a"), (None, "b")}


# ---- what the sources say, and what they no longer say --------------------------------------------


def test_an_empty_source_is_refused_and_nothing_is_ingested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "private.txt").write_text("my passwords", encoding="utf-8")
    assert main(["ingest", "", "--db", "db"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("window-retriever: error: a source is an empty string")
    assert "\n" not in err
    assert not (tmp_path / "db" / "chroma.sqlite3").exists()


def test_re_ingesting_a_directory_removes_deleted_and_emptied_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("keep", "delete", "empty"):
        (docs / f"{name}.txt").write_text(f"The {name} file talks about {name}. " * 20, "utf-8")
    other = tmp_path / "other.txt"  # outside the directory: never pruned by it
    other.write_text("Another file entirely. " * 20, encoding="utf-8")
    db = str(tmp_path / "db")
    assert ingest(capsys, str(docs), str(other), "--db", db)[0] == 0
    (docs / "delete.txt").unlink()
    (docs / "empty.txt").write_text("   \n", encoding="utf-8")

    status, lines = ingest(capsys, str(docs), "--db", db, "--keep-missing")
    assert status == 0  # the emptied file is skipped, not a failure
    assert f"skipped   {docs / 'empty.txt'}: empty (no text)" in lines
    assert len(sources(tmp_path / "db")) == 4  # kept, as asked
    per_source: dict[str, int] = {}
    for metadata in stored(tmp_path / "db")["metadatas"]:
        per_source[metadata["source"]] = per_source.get(metadata["source"], 0) + 1
    gone = [str((docs / name).resolve()) for name in ("delete.txt", "empty.txt")]

    status, lines = ingest(capsys, str(docs), "--db", db)
    assert status == 0
    removed = [line for line in lines if line.startswith("removed ")]
    assert removed == [f"removed   {name}: gone ({per_source[name]} chunks)" for name in gone]
    total = sum(per_source[name] for name in gone)
    assert f", 2 gone (removed); 0 chunks written, {total} removed" in lines[-1]
    assert set(sources(tmp_path / "db")) == {
        str((docs / "keep.txt").resolve()),
        str(other.resolve()),
    }


def test_pruning_never_touches_another_tenants_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Tenant a writes about apples. " * 20, encoding="utf-8")
    db = str(tmp_path / "db")
    assert ingest(capsys, str(docs), "--db", db, "--metadata", "tenant=a")[0] == 0
    (docs / "a.txt").unlink()
    (docs / "b.txt").write_text("Tenant b writes about bananas. " * 20, encoding="utf-8")
    assert ingest(capsys, str(docs), "--db", db, "--metadata", "tenant=b")[0] == 0
    assert {t for values in sources(tmp_path / "db").values() for _, t in values} == {"a", "b"}


def test_only_regular_files_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "x.html"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    good = tmp_path / "good.txt"
    good.write_text("A good file about owls. " * 10, encoding="utf-8")
    began = time.monotonic()
    status, lines = ingest(capsys, str(fifo), str(loop), str(good), "--db", str(tmp_path / "db"))
    assert time.monotonic() - began < 60
    assert status == 1
    assert f"failed    {fifo}: not a regular file (a pipe, device or socket is not read)" in lines
    assert f"failed    {loop}: a symbolic link loop" in lines
    assert lines[-1].startswith("3 sources: 1 ingested")


def test_markdown_front_matter_and_a_byte_order_mark_are_not_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "post.md"
    page.write_text("\ufeff---\ntitle: Owls\ndraft: true\n---\nOwls hunt at night.\n", "utf-8")
    assert ingest(capsys, str(page), "--db", str(tmp_path / "db"))[0] == 0
    assert stored(tmp_path / "db")["documents"] == ["Owls hunt at night."]


# ---- the web, hostile ---------------------------------------------------------------------------


def test_one_bad_source_stays_that_sources_failure(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/feed.xml"] = Response(body=b"<rss><item>feed</item></rss>")
    server.routes["/good.html"] = Response()
    status, lines = ingest(
        capsys, server.url("/feed.xml"), server.url("/good.html"), "--db", str(tmp_path / "db")
    )
    assert status in (0, 1)
    assert lines[-1].startswith("2 sources: ")
    assert any(line.startswith(f"added     {server.url('/good.html')}") for line in lines)


def test_redirects_are_followed_and_the_final_address_is_the_source(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/page.html"] = Response()
    server.routes["/old"] = Response(302, {"Location": "/page.html"}, b"")
    server.routes["/older"] = Response(
        301, {"Location": "/page.html", "Content-Type": "text/plain"}, b"moved"
    )
    db = tmp_path / "db"
    status, lines = ingest(
        capsys,
        server.url("/old"),
        server.url("/older"),
        server.url("/page.html#section"),
        "--db",
        str(db),
    )
    assert status == 0, lines
    assert lines[-1].startswith("3 sources: 1 ingested (1 added, 0 updated), 2 skipped")
    assert set(sources(db)) == {server.url("/page.html")}


def test_a_dripping_server_is_cut_at_the_page_deadline(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/drip.html"] = Response(body=PAGE.encode(), drip=0.05)  # 30 s in all
    began = time.monotonic()
    status, lines = ingest(
        capsys, server.url("/drip.html"), "--db", str(tmp_path / "db"), "--timeout", "1"
    )
    assert time.monotonic() - began < 5
    assert status == 1
    assert f"failed    {server.url('/drip.html')}: timed out after 1 s" in lines


def test_a_gzip_bomb_is_refused_at_the_size_cap(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = gzip.compress(b"<html><body>" + b"a" * (64 * 1024 * 1024), compresslevel=9)
    server.routes["/bomb.html"] = Response(
        headers={"Content-Type": "text/html", "Content-Encoding": "gzip"}, body=bomb
    )
    status, lines = ingest(
        capsys, server.url("/bomb.html"), "--db", str(tmp_path / "db"), "--max-size-mb", "1"
    )
    assert status == 1
    assert any("larger than 1 MiB; raise --max-size-mb to ingest it" in line for line in lines)


def test_the_declared_charset_wins_and_binary_bytes_are_refused(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    latin = "<html><body><p>Un café crème à la terrasse, s'il vous plaît.</p></body></html>"
    server.routes["/latin.html"] = Response(
        headers={"Content-Type": "text/html; charset=iso-8859-1"}, body=latin.encode("latin-1")
    )
    server.routes["/binary.html"] = Response(body=bytes(range(256)) * 64)
    db = tmp_path / "db"
    status, lines = ingest(
        capsys, server.url("/latin.html"), server.url("/binary.html"), "--db", str(db)
    )
    assert status == 1
    assert f"failed    {server.url('/binary.html')}: binary content, not text" in lines
    assert stored(db)["documents"] == ["Un café crème à la terrasse, s'il vous plaît."]


def test_the_title_is_metadata_not_the_first_words(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/garden.html"] = Response()
    db = tmp_path / "db"
    assert ingest(capsys, server.url("/garden.html"), "--db", str(db))[0] == 0
    result = stored(db)
    first = min(
        zip(result["documents"], result["metadatas"], strict=True),
        key=lambda p: p[1]["chunk_index"],
    )
    assert first[1]["title"] == "Garden notes"
    assert first[0].startswith("Garden notes\nTomato note 0")  # the <h1>, once


def test_a_reader_never_creates_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    assert main(["query", "anything", "--db", str(empty)]) == 2
    assert "no store at" in capsys.readouterr().err
    assert list(empty.iterdir()) == []


@pytest.fixture
def make_real_store(tmp_path: Path) -> Callable[[], Chroma]:
    from window_retriever import default_embeddings

    def factory() -> Chroma:
        return Chroma(
            collection_name="files",
            embedding_function=default_embeddings(),
            client=chromadb.PersistentClient(path=str(tmp_path / "lib-db")),
        )

    return factory


# ---- found in review ------------------------------------------------------------------------------


def test_a_new_chunk_size_replaces_every_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = tmp_path / "a.txt"
    text = " ".join(f"Sentence {i} of the long note." for i in range(120))
    note.write_text(text, encoding="utf-8")
    db = str(tmp_path / "db")
    for size, overlap in (("200", "20"), ("400", "40"), ("200", "20")):
        status, _ = ingest(
            capsys, str(note), "--db", db, "--chunk-size", size, "--chunk-overlap", overlap
        )
        assert status == 0
        result = stored(tmp_path / "db")
        by_index = sorted(
            zip(result["metadatas"], result["documents"], strict=True),
            key=lambda p: p[0]["chunk_index"],
        )
        assert len({m["file_version"] for m, _ in by_index}) == 1
        for metadata, chunk in by_index:
            start = metadata["start_index"]
            assert text[start : start + len(chunk)] == chunk
            assert len(chunk) <= int(size)
        last = by_index[-1]
        assert last[0]["start_index"] + len(last[1]) == len(text)  # the whole file, to its end


def test_pages_of_one_source_are_files_of_their_own(make_real_store: Any) -> None:
    store = make_real_store()
    splitter = WindowSplitter(file_id_keys=("source", "page"))
    for page in range(3):
        document = Document(
            page_content=f"Page {page} of the manual explains part {page}. " * 5,
            metadata={"source": "manual.pdf", "page": page},
        )
        assert sync_file(store, splitter.split_documents([document])).removed == 0
    assert {m["page"] for m in store.get(include=["metadatas"])["metadatas"]} == {0, 1, 2}


def test_pruning_keeps_every_other_owners_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("one", "two"):
        (docs / f"{name}.txt").write_text(f"File {name} says {name}. " * 10, encoding="utf-8")
    db = str(tmp_path / "db")
    assert ingest(capsys, str(docs), "--db", db, "--metadata", "tenant=a")[0] == 0
    assert (
        ingest(capsys, str(docs), "--db", db, "--metadata", "tenant=a", "--metadata", "user=bob")[0]
        == 0
    )
    assert ingest(capsys, str(docs), "--db", db)[0] == 0
    (docs / "one.txt").unlink()
    status, lines = ingest(capsys, str(docs), "--db", db, "--metadata", "tenant=a")
    assert status == 0
    assert [line for line in lines if line.startswith("removed ")] == [
        f"removed   {docs / 'one.txt'}: gone (1 chunk)"
    ]
    owners = {
        (m.get("tenant"), m.get("user"))
        for m in stored(tmp_path / "db")["metadatas"]
        if m["source"] == str(docs / "one.txt")
    }
    assert owners == {("a", "bob"), (None, None)}  # only tenant a's own copy went


def test_a_linked_file_inside_a_directory_is_pruned_when_the_link_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (outside / "o.txt").write_text("Outside text about otters. " * 10, encoding="utf-8")
    (docs / "link.txt").symlink_to(outside / "o.txt")
    db = str(tmp_path / "db")
    assert ingest(capsys, str(docs), "--db", db)[0] == 0
    assert set(sources(tmp_path / "db")) == {str(docs / "link.txt")}
    (docs / "link.txt").unlink()
    assert ingest(capsys, str(docs), "--db", db)[0] == 0
    assert sources(tmp_path / "db") == {}


def test_local_html_never_glues_blocks_and_the_title_comes_from_the_head(
    tmp_path: Path,
) -> None:
    from window_retriever import load_file

    page = tmp_path / "p.html"
    page.write_text(
        "<html><head><title>Errors</title></head><body><svg><title>icon</title></svg>"
        "<h1>Errors</h1><p>First para.</p><p>Second para.</p><ul><li>one</li><li>two</li></ul>"
        "<noscript>enable JS</noscript><script>var x;</script></body></html>",
        encoding="utf-8",
    )
    loaded = load_file(page)
    assert loaded.document is not None
    assert loaded.document.metadata["title"] == "Errors"
    assert loaded.document.page_content == "Errors\nFirst para.\nSecond para.\none\ntwo"


def test_slowly_sent_headers_are_cut_at_the_page_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with contextlib.suppress(OSError):
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.is_set():  # a header line every 0.2 s, forever
                connection.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.2)
        connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    began = time.monotonic()
    status, lines = ingest(
        capsys, f"http://127.0.0.1:{port}/slow.html", "--db", str(tmp_path / "db"), "--timeout", "1"
    )
    elapsed = time.monotonic() - began
    stop.set()
    listener.close()
    assert status == 1
    assert elapsed < 5
    assert f"failed    http://127.0.0.1:{port}/slow.html: timed out after 1 s" in lines


def test_a_file_added_after_the_listing_is_not_pruned_by_an_older_run(
    make_real_store: Any, tmp_path: Path
) -> None:
    """Two ingests of one folder: A lists it, then b.txt appears and B ingests it, then A
    prunes. b.txt is there: it must stay (it is B's, not gone)."""
    from window_retriever import LoadOptions, WindowSplitter
    from window_retriever.ingestion._loaders import expand
    from window_retriever.ingestion._pipeline import ingest_sources
    from window_retriever.ingestion._prune import origins_of, prune_missing

    folder = tmp_path / "pages"
    folder.mkdir()
    (folder / "a.txt").write_text("Page a about honey bees. " * 40, encoding="utf-8")
    store = make_real_store()

    def run(specs: list[str]) -> list[str]:
        present = {
            os.path.abspath(result.name)
            for result in ingest_sources(
                store,
                specs,
                splitter=WindowSplitter(),
                options=LoadOptions(),
                origins=origins_of(specs, [str(folder)]),
            )
            if result.outcome is not None
        }
        return [p.source for p in prune_missing(store, folder, present, listed=specs)]

    listed_by_a = expand([str(folder)])
    (folder / "b.txt").write_text("Page b about garden snails. " * 40, encoding="utf-8")
    assert run(expand([str(folder)])) == []  # B
    assert run(listed_by_a) == []  # A, with its older listing
    sources = {m["source"] for m in store.get(include=["metadatas"])["metadatas"]}
    assert sources == {str(folder / "a.txt"), str(folder / "b.txt")}
    (folder / "b.txt").unlink()  # and a file really gone still goes
    assert run(expand([str(folder)])) == [str(folder / "b.txt")]
