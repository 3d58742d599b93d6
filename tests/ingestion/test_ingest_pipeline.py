"""The ingest pipeline: loading ahead, embedding across pages, writing while the next embeds.

Real Chroma (in memory) with fake embeddings; the loader is a plain list of split pages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter
from pydantic import Field

from window_retriever import LoadOptions, MemoryWindowStore, WindowSplitter
from window_retriever.ingestion import _pipeline as pipeline
from window_retriever.ingestion._pipeline import ingest_sources
from window_retriever.ingestion._write import FILE_CHUNKS

SPLITTER = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=0))


class Embeddings(DeterministicFakeEmbedding):
    """Fake embeddings that record each call's size, with hooks before and after a call."""

    calls: list[int] = Field(default_factory=list)
    hook: Any = None
    after: Any = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        if self.hook is not None:
            self.hook(texts)
        vectors = super().embed_documents(texts)
        if self.after is not None:
            self.after(texts)
        return vectors


def page(name: str, sentences: int) -> tuple[str, list[Document], None]:
    text = " ".join(f"Page {name} says thing {i}." for i in range(sentences))
    return name, SPLITTER.split_documents([Document(text, metadata={"source": name})]), None


class Ready:
    """A loader whose pages are all ready at once (as a fast local loader's are)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        for item in self.items:
            if isinstance(item, BaseException):
                raise item
            yield item

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    return make_store(Embeddings(size=16))


def run(store: Chroma, items: list[Any]) -> list[Any]:
    return list(pipeline.pipelined(store, store.embeddings, Ready(items)))


def collect(store: Chroma, items: list[Any], seen: list[str]) -> None:
    """Run the pipeline, noting each source's name as its outcome comes."""
    for outcome in pipeline.pipelined(store, store.embeddings, Ready(items)):
        seen.append(outcome.name)


def files(store: Chroma) -> dict[str, list[dict[str, Any]]]:
    result = store.get(include=["metadatas"])
    found: dict[str, list[dict[str, Any]]] = {}
    for metadata in result["metadatas"]:
        found.setdefault(metadata["source"], []).append(metadata)
    return found


def assert_whole_or_absent(
    store: Chroma, pages: list[tuple[str, list[Document], None]]
) -> set[str]:
    """Every page is stored whole (every chunk, the first one marked) or not at all."""
    stored = files(store)
    for name, chunks, _ in pages:
        if name in stored:
            assert sorted(m["chunk_index"] for m in stored[name]) == list(range(len(chunks)))
            assert [m.get(FILE_CHUNKS) for m in stored[name] if m["chunk_index"] == 0] == [
                len(chunks)
            ]
    return set(stored)


def test_small_pages_are_embedded_together_and_written_each_whole(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = [page(f"p{i}", 3) for i in range(12)]
    store.embeddings.hook = lambda texts: time.sleep(0.1)  # the pages reach the writer meanwhile
    collection = store._collection
    upsert = collection.upsert
    upserts: list[int] = []

    def counted(**kwargs: Any) -> Any:
        upserts.append(len(kwargs["ids"]))
        return upsert(**kwargs)

    monkeypatch.setattr(collection, "upsert", counted)
    outcomes = run(store, pages)
    assert [o.name for o in outcomes] == [name for name, _, _ in pages]
    assert all(o.outcome.status == "added" for o in outcomes)
    total = sum(len(chunks) for _, chunks, _ in pages)
    assert sum(store.embeddings.calls) == total
    assert len(store.embeddings.calls) < len(pages)  # full batches across pages
    assert upserts == [total]  # and one write for all of them
    assert assert_whole_or_absent(store, pages) == {name for name, _, _ in pages}
    again = run(store, pages)
    assert {o.outcome.status for o in again} == {"unchanged"}
    assert sum(store.embeddings.calls) == total  # nothing embedded the second time


def test_a_page_is_written_while_the_next_one_embeds(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "GROUP", 1)  # one page a group
    pages = [page("first", 5), page("second", 5)]
    second_embedding = threading.Event()
    store.embeddings.hook = lambda texts: (
        second_embedding.set() if "Page second" in texts[0] else None
    )
    collection = store._collection
    upsert = collection.upsert
    overlapped: list[bool] = []

    def slow_upsert(**kwargs: Any) -> Any:
        if "Page first" in kwargs["documents"][0]:
            overlapped.append(second_embedding.wait(timeout=5))
        return upsert(**kwargs)

    monkeypatch.setattr(collection, "upsert", slow_upsert)
    outcomes = run(store, pages)
    assert [o.outcome.status for o in outcomes] == ["added", "added"]
    assert overlapped and all(
        overlapped
    )  # the first page's write waited for the second's embedding


def test_the_same_file_twice_is_planned_after_its_first_write(store: Chroma) -> None:
    first = page("same", 6)
    outcomes = run(store, [first, page("other", 4), first])
    assert [o.outcome.status for o in outcomes] == ["added", "added", "unchanged"]
    assert sum(store.embeddings.calls) == len(first[1]) + len(page("other", 4)[1])


def test_an_error_is_raised_in_its_place_after_the_pages_before_it(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = [page("a", 4), page("b", 4), page("bad", 4), page("c", 4)]
    collection = store._collection
    get = collection.get

    def failing_get(**kwargs: Any) -> Any:
        if any(i.startswith(pages[2][1][0].metadata["file_id"]) for i in kwargs.get("ids") or []):
            raise RuntimeError("the store is down")
        return get(**kwargs)

    monkeypatch.setattr(collection, "get", failing_get)
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="the store is down"):
        collect(store, pages, seen)
    assert seen == ["a", "b"]
    assert assert_whole_or_absent(store, pages) == {"a", "b"}  # c never started


def test_a_loader_error_is_raised_in_its_place(store: Chroma) -> None:
    pages: list[Any] = [page("a", 4), ValueError("cannot split"), page("c", 4)]
    seen: list[str] = []
    with pytest.raises(ValueError, match="cannot split"):
        collect(store, pages, seen)
    assert seen == ["a"]
    assert set(files(store)) == {"a"}


def test_an_interrupt_finishes_the_page_being_written_and_starts_no_other(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while planning p2: p0 is being written (finished whole), p1 waits (dropped)."""
    monkeypatch.setattr(pipeline, "GROUP", 1)
    pages = [page(f"p{i}", 30) for i in range(4)]
    stopping, p1_embedded = threading.Event(), threading.Event()
    store.embeddings.after = lambda texts: p1_embedded.set() if "Page p1" in texts[0] else None
    close = pipeline.Writer.close

    def noting_close(self: Any) -> None:
        self._stopping.set()
        stopping.set()
        close(self)

    monkeypatch.setattr(pipeline.Writer, "close", noting_close)
    collection = store._collection
    upsert = collection.upsert

    p0_writing = threading.Event()

    def held_upsert(**kwargs: Any) -> Any:
        if "Page p0" in kwargs["documents"][0]:
            p0_writing.set()
            assert stopping.wait(timeout=5)  # still writing p0 when the interrupt comes
            time.sleep(0.2)  # and for a while after: the interrupt must wait for it
        return upsert(**kwargs)

    monkeypatch.setattr(collection, "upsert", held_upsert)
    put = pipeline.Writer.put

    def queued_behind_p0(self: Any, write: Any) -> None:
        if write.name == "p1":  # queued once the writer took p0 alone (not batched with it)
            assert p0_writing.wait(timeout=5)
        put(self, write)

    monkeypatch.setattr(pipeline.Writer, "put", queued_behind_p0)
    plan = pipeline.plan_file

    def interrupted_plan(vectorstore: Any, chunks: list[Document], *args: Any, **kw: Any) -> Any:
        if chunks[0].metadata["source"] == "p2":
            assert p1_embedded.wait(timeout=5)  # p1 is ready for the writer, behind p0
            raise KeyboardInterrupt  # Ctrl-C lands in the main thread
        return plan(vectorstore, chunks, *args, **kw)

    monkeypatch.setattr(pipeline, "plan_file", interrupted_plan)
    with pytest.raises(KeyboardInterrupt):
        run(store, pages)
    assert assert_whole_or_absent(store, pages) == {"p0"}


def test_a_store_that_embeds_itself_is_synced_page_by_page(tmp_path: Path) -> None:
    model = Embeddings(size=16)

    class SelfEmbedding(MemoryWindowStore):
        """A store that embeds what it is given: ingestion hands it texts, not vectors."""

        @property
        def embeddings(self) -> None:  # type: ignore[override]
            return None

    store = SelfEmbedding(model)
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text(f"Note {i} about owls. " * 10, encoding="utf-8")
    sources = sorted(str(p) for p in tmp_path.glob("*.txt"))
    outcomes = list(ingest_sources(store, sources, splitter=SPLITTER, options=LoadOptions()))
    assert [o.outcome.status for o in outcomes] == ["added"] * 3
    # the store embeds, one page a call (its first chunk last, nothing to delete)
    assert model.calls == [o.outcome.chunks for o in outcomes]
    listed = store.list_metadata(None, limit=1000)
    assert len({m["source"] for _, m in listed}) == 3


def test_a_shrunk_page_among_small_ones_loses_its_tail(store: Chroma) -> None:
    run(store, [page("a", 30), page("b", 3), page("c", 3)])
    shrunk = [page("a", 8), page("b", 4), page("c", 3)]
    outcomes = run(store, shrunk)
    assert [(o.outcome.status, o.outcome.removed > 0) for o in outcomes] == [
        ("updated", True),
        ("updated", False),
        ("unchanged", False),
    ]
    assert assert_whole_or_absent(store, shrunk) == {"a", "b", "c"}
    assert {name: len(chunks) for name, chunks in files(store).items()} == {
        name: len(chunks) for name, chunks, _ in shrunk
    }


def test_a_failed_write_stops_the_ingest_without_embedding_the_rest(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails while a long file is written part by part: the error is raised after
    the pages before it, and the parts still waiting are not embedded (a server gone
    mid-ingest used to be reported only once the whole file was embedded)."""
    embeddings = store.embeddings
    assert isinstance(embeddings, Embeddings)
    embeddings.after = lambda texts: time.sleep(0.05)  # an embedding that takes time
    upsert = store._collection.upsert
    writes = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        writes["n"] += 1
        if writes["n"] == 2:  # the first part of the long file
            raise ConnectionError("the store went away")
        return upsert(*args, **kwargs)

    monkeypatch.setattr(store._collection, "upsert", failing)
    long = page("long", 40 * pipeline.PART)  # 40 parts
    seen: list[str] = []
    with pytest.raises(ConnectionError, match="went away"):
        collect(store, [page("first", 3), long, page("after", 3)], seen)
    assert seen == ["first"]
    parts = [size for size in embeddings.calls if size == pipeline.PART]
    assert len(parts) < 10, f"{len(parts)} of 40 parts embedded after the store failed"
