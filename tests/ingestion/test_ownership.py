"""A new version carries exactly its own metadata; a directory run removes only what it owns."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks, sync_file
from window_retriever.ingestion._pipeline import Piece, Write, Writer
from window_retriever.ingestion._prune import directory_origin, origins_of, prune_missing
from window_retriever.ingestion._write import INGEST_ORIGIN, plan_file

SPLITTER = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=10))
TEXT = " ".join(f"Sentence {i:02d} of the public notes." for i in range(12))


def chunks_of(text: str = TEXT, origin: str | None = None, **metadata: Any) -> list[Document]:
    document = Document(page_content=text, metadata={"source": "/docs/notes.txt", **metadata})
    chunks = SPLITTER.split_documents([document])
    if origin is not None:
        for chunk in chunks:
            chunk.metadata[INGEST_ORIGIN] = origin
    return chunks


def metadatas(store: Chroma, where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return list(store.get(where=where, include=["metadatas"])["metadatas"])  # type: ignore[arg-type]


# ---- 1. a removed key is removed --------------------------------------------------------------


@pytest.mark.parametrize("write", ["sync_file", "add_chunks"])
def test_a_key_the_new_version_drops_is_gone_from_every_chunk(
    make_store: Callable[..., Chroma], write: str
) -> None:
    store = make_store()
    put: Callable[[Chroma, list[Document]], Any] = sync_file if write == "sync_file" else add_chunks
    put(store, chunks_of(public=True, team="docs"))
    assert len(metadatas(store, {"public": True})) == len(chunks_of())
    put(store, chunks_of(team="docs"))  # the same text, without the key
    assert metadatas(store, {"public": True}) == []
    assert all("public" not in m and m["team"] == "docs" for m in metadatas(store))
    retriever = ContextWindowRetriever(vectorstore=store, k=2, filter={"public": True})
    assert retriever.invoke("Sentence 03 of the public notes.") == []


def test_a_kept_chunk_of_the_same_version_is_not_rewritten(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    sync_file(store, chunks_of(public=True))
    outcome = sync_file(store, chunks_of(public=True))
    assert (outcome.status, outcome.written) == ("unchanged", 0)


# ---- 2 and 3. pruning and copies: only what this run's directory wrote -------------------------


def test_pruning_leaves_chunks_written_through_the_api(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    api = Document(
        page_content="Minutes of the 2024 meeting.",
        metadata={"source": "/docs/notes/meeting-2024"},  # not a file: written by the API
    )
    add_chunks(store, SPLITTER.split_documents([api]))
    sync_file(store, chunks_of(origin="here"))
    gone = prune_missing(store, "/docs", keep=[], origin="here")
    assert [p.source for p in gone] == ["/docs/notes.txt"]
    assert {m["source"] for m in metadatas(store)} == {"/docs/notes/meeting-2024"}


def test_pruning_leaves_another_origins_copy_of_the_same_path(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    sync_file(store, chunks_of(origin="machine-b"))
    assert prune_missing(store, "/docs", keep=[], origin="machine-a") == []
    assert len(metadatas(store)) == len(chunks_of())
    assert [p.source for p in prune_missing(store, "/docs", keep=[], origin="machine-b")] == [
        "/docs/notes.txt"
    ]


def test_pruning_removes_only_the_runs_owners_files(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    owners = {
        "/docs/acme.txt": {"tenant": "acme"},
        "/docs/acme-bob.txt": {"tenant": "acme", "user": "bob"},  # a second key differs
        "/docs/globex.txt": {"tenant": "globex"},
        "/docs/nobody.txt": {},  # no owner key: the owner None
    }
    for source, owner in owners.items():
        document = Document(page_content=TEXT, metadata={"source": source, **owner})
        chunks = SPLITTER.split_documents([document])
        for chunk in chunks:
            chunk.metadata[INGEST_ORIGIN] = "here"
        sync_file(store, chunks)
    per_file = len(chunks_of())

    gone = prune_missing(store, "/docs", keep=[], origin="here", owner={"tenant": "acme"})
    assert [(p.source, p.chunks) for p in gone] == [("/docs/acme.txt", per_file)]
    left = {m["source"] for m in metadatas(store)}
    assert left == {"/docs/acme-bob.txt", "/docs/globex.txt", "/docs/nobody.txt"}

    gone = prune_missing(store, "/docs", keep=[], origin="here")  # a run with no owner
    assert [p.source for p in gone] == ["/docs/nobody.txt"]
    assert {m["source"] for m in metadatas(store)} == {"/docs/acme-bob.txt", "/docs/globex.txt"}


def test_a_directory_run_replaces_only_its_own_copies_of_a_source(
    make_store: Callable[..., Chroma],
) -> None:
    """The same source under another file id is replaced only when this run wrote it."""
    store = make_store()
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=10),
        file_id_keys=("source", "page"),
    )
    api_copy = splitter.split_documents(
        [Document(page_content=TEXT, metadata={"source": "/docs/notes.txt", "page": 1})]
    )
    add_chunks(store, api_copy)
    own_copy = chunks_of("An older split of the notes. " * 8, origin="here", file_id="older")
    sync_file(store, own_copy)
    outcome = sync_file(store, chunks_of(origin="here"), replace_source_copies=True)
    assert outcome.removed == len(own_copy)
    ids = set(store.get()["ids"])
    assert {c.metadata["chunk_id"] for c in api_copy} <= ids
    assert not {c.metadata["chunk_id"] for c in own_copy} & ids


def test_an_unchanged_file_read_from_another_copy_is_restamped_without_embedding(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    sync_file(store, chunks_of(origin="old"))
    plan = plan_file(store, chunks_of(origin="new"), (), replace_source_copies=True)
    assert plan.documents() == [] and len(plan.restamp) == len(chunks_of())
    outcome = sync_file(store, chunks_of(origin="new"))
    assert (outcome.status, outcome.written) == ("unchanged", 0)
    assert {m[INGEST_ORIGIN] for m in metadatas(store)} == {"new"}


def test_a_directory_origin_is_this_directory_on_this_machine(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert directory_origin(one) == directory_origin(str(one) + "/")
    assert directory_origin(one) != directory_origin(two)
    inner = one / "inner"
    inner.mkdir()
    sources = [str(one / "a.txt"), str(inner / "b.txt"), str(tmp_path / "c.txt")]
    origins = origins_of(sources, [str(one), str(inner)])
    assert origins == {sources[0]: directory_origin(one), sources[1]: directory_origin(inner)}
    assert origins_of(sources, [str(one)], origin="named") == {
        sources[0]: "named",
        sources[1]: "named",
    }
    assert os.path.isdir(one)


# ---- 6. an interrupted writer never hangs -----------------------------------------------------


def test_the_writer_ends_when_a_write_waits_on_cancelled_vectors(
    make_store: Callable[..., Chroma],
) -> None:
    """An interrupt shuts the embedding down with ``cancel_futures=True``: the writer must not
    wait forever for vectors that will never come (``concurrent.futures.wait`` does)."""
    store = make_store()
    plan = plan_file(store, chunks_of(), (), replace_source_copies=False)
    cancelled: Future[Any] = Future()
    assert cancelled.cancel()
    writer = Writer(store, 100)
    source: Future[Any] = Future()
    writer.put(Write(source, "notes", plan, [Piece(cancelled, 0, len(plan.documents()))]))
    closing = threading.Thread(target=writer.close, daemon=True)
    closing.start()
    closing.join(20)
    assert not closing.is_alive(), "the writer hangs on a cancelled future"
    assert source.done()
    assert store.get()["ids"] == []
