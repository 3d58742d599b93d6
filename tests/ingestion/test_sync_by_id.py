"""sync_file checks a file by its chunk ids; the first chunk, written last, marks a whole write."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from tests.helpers.stores import StoreSpy
from window_retriever import OwnershipError, WindowSplitter, add_chunks, sync_file
from window_retriever.ingestion import _write as ingest_module
from window_retriever.ingestion._prune import prune_missing
from window_retriever.ingestion._write import FILE_CHUNKS, INGEST_ORIGIN

SPLITTER = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=10))


def page(version: str, sentences: int, **metadata: Any) -> list[Document]:
    text = " ".join(f"Version {version} sentence {i:02d} of the page." for i in range(sentences))
    document = Document(page_content=text, metadata={"source": "/docs/page.txt", **metadata})
    return SPLITTER.split_documents([document])


def read_here(chunks: list[Document], origin: str = "here") -> list[Document]:
    """The chunks as a directory ingest stamps them: read from this copy of the directory."""
    for chunk in chunks:
        chunk.metadata[INGEST_ORIGIN] = origin
    return chunks


def stored(store: Chroma) -> dict[str, dict[str, Any]]:
    result = store.get(include=["metadatas"])
    return dict(zip(result["ids"], result["metadatas"], strict=True))


def assert_holds_exactly(store: Chroma, chunks: list[Document]) -> None:
    records = stored(store)
    assert set(records) == {c.metadata["chunk_id"] for c in chunks}
    assert {m["file_version"] for m in records.values()} == {chunks[0].metadata["file_version"]}
    marks = {i: m[FILE_CHUNKS] for i, m in records.items() if FILE_CHUNKS in m}
    assert marks == {chunks[0].metadata["chunk_id"]: len(chunks)}  # on the first chunk only


def test_an_unchanged_file_costs_one_read_by_id_and_no_metadata_query(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store()
    chunks = page("a", 20)
    assert sync_file(store, chunks, replace_source_copies=True).status == "added"
    spy = spy_on(store)
    outcome = sync_file(store, page("a", 20), replace_source_copies=True)
    assert (outcome.status, outcome.written, outcome.removed) == ("unchanged", 0, 0)
    assert spy.calls == Counter({"get": 1})
    ((_, kwargs, _),) = spy.log
    assert sorted(kwargs["ids"]) == sorted(c.metadata["chunk_id"] for c in chunks)
    assert kwargs.get("where") is None


def test_the_first_chunk_is_written_last_with_the_files_chunk_count(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store()
    sync_file(store, page("old", 30))
    spy = spy_on(store)
    new = page("new", 12)  # shorter: a tail to delete
    old_count = len(stored(store))
    outcome = sync_file(store, new, batch_size=5)
    assert (outcome.status, outcome.written, outcome.removed) == (
        "updated",
        len(new),
        old_count - len(new),
    )
    writes = [(name, kw) for name, kw, _ in spy.log if name in ("upsert", "delete")]
    body_batches = -(-(len(new) - 1) // 5)
    assert [name for name, _ in writes] == ["upsert"] * body_batches + ["delete", "upsert"]
    assert writes[-1][1]["ids"] == [new[0].metadata["chunk_id"]]
    assert writes[-1][1]["metadatas"][0][FILE_CHUNKS] == len(new)
    assert_holds_exactly(store, new)


@pytest.mark.parametrize("lost", [0, 7, -1])
def test_a_chunk_deleted_by_hand_is_written_again(
    make_store: Callable[..., Chroma], lost: int
) -> None:
    store = make_store()
    chunks = page("a", 20)
    sync_file(store, chunks)
    store.delete(ids=[chunks[lost].metadata["chunk_id"]])
    outcome = sync_file(store, chunks)
    assert (outcome.status, outcome.written, outcome.removed) == ("updated", 1, 0)
    assert_holds_exactly(store, chunks)
    assert sync_file(store, chunks).status == "unchanged"


@pytest.mark.parametrize("dies_in", ["the first chunk", "the delete"])
def test_a_write_killed_before_its_first_chunk_is_finished_by_the_next_run(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch, dies_in: str
) -> None:
    store = make_store()
    old, new = page("old", 30), page("new", 12)
    sync_file(store, old)
    head = new[0].metadata["chunk_id"]
    original_add, original_delete = store.add_documents, store.delete

    def add(documents: list[Document], **kwargs: Any) -> list[str]:
        if dies_in == "the first chunk" and head in kwargs["ids"]:
            raise KeyboardInterrupt
        return original_add(documents, **kwargs)

    def delete(ids: list[str] | None = None, **kwargs: Any) -> None:
        if dies_in == "the delete":
            original_delete(ids=(ids or [])[:3])  # killed part-way
            raise KeyboardInterrupt
        original_delete(ids=ids, **kwargs)

    monkeypatch.setattr(store, "add_documents", add)
    monkeypatch.setattr(store, "delete", delete)
    with pytest.raises(KeyboardInterrupt):
        sync_file(store, new)
    monkeypatch.undo()
    assert stored(store)[head]["file_version"] == old[0].metadata["file_version"]

    outcome = sync_file(store, new)
    removed = 0 if dies_in == "the first chunk" else len(old) - len(new) - 3
    assert (outcome.status, outcome.written, outcome.removed) == ("updated", 1, removed)
    assert_holds_exactly(store, new)
    assert sync_file(store, new).status == "unchanged"


def test_a_store_written_without_the_mark_is_checked_once_and_brought_up_to_date(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store()
    old, new = page("old", 30), page("new", 12)
    # an earlier release: chunks upserted without the mark, killed before it deleted the tail
    add_chunks(store, old)
    add_chunks(store, new)
    outcome = sync_file(store, new)
    assert (outcome.status, outcome.written, outcome.removed) == ("updated", 1, len(old) - len(new))
    assert_holds_exactly(store, new)
    spy = spy_on(store)
    assert sync_file(store, new).status == "unchanged"
    assert spy.calls == Counter({"get": 1})


def test_another_owners_file_is_refused_even_when_its_chunks_are_all_there(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    sync_file(store, page("a", 10, tenant="a"))
    before = stored(store)
    with pytest.raises(OwnershipError, match=r"tenant='a'.*tenant='b'"):
        sync_file(store, page("a", 10, tenant="b"))
    assert stored(store) == before


def test_no_call_carries_more_ids_than_the_cap(
    make_store: Callable[..., Chroma],
    spy_on: Callable[[Chroma], StoreSpy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every path, at a cap of 7: reads by id and by file, writes, tail, copies and prune."""
    monkeypatch.setattr(ingest_module, "MAX_IDS_PER_CALL", 7)
    store = make_store()
    spy = spy_on(store)
    seen: set[str] = set()

    def capped(result: Any) -> Any:
        assert spy.log, "no store call was seen"
        assert max(carried for _, _, carried in spy.log) <= 7
        seen.update(name for name, _, _ in spy.log)
        spy.reset()
        return result

    long = read_here(page("old", 40))
    assert capped(sync_file(store, long, replace_source_copies=True)).written == len(long)
    assert capped(sync_file(store, long, replace_source_copies=True)).status == "unchanged"
    restamped = capped(sync_file(store, read_here(page("old", 40), "there")))
    assert (restamped.status, restamped.written) == ("unchanged", 0)
    assert {m[INGEST_ORIGIN] for m in stored(store).values()} == {"there"}
    spy.reset()
    short = read_here(page("new", 25))
    outcome = capped(sync_file(store, short, replace_source_copies=True))
    assert (outcome.written, outcome.removed) == (len(short), len(long) - len(short))
    assert_holds_exactly(store, short)
    spy.reset()
    # the same source under another file id, as the same run read it: every chunk of the old
    # one is a copy to remove
    text = "Another split of the same page, stored under another file id. " * 12
    renamed = read_here(
        SPLITTER.split_documents(
            [
                Document(
                    page_content=text, metadata={"source": "/docs/page.txt", "file_id": "renamed"}
                )
            ]
        )
    )
    outcome = capped(sync_file(store, renamed, replace_source_copies=True))
    assert outcome.removed == len(short)
    assert_holds_exactly(store, renamed)
    spy.reset()
    gone = capped(prune_missing(store, "/docs", keep=[], origin="here"))
    assert [(p.source, p.chunks) for p in gone] == [("/docs/page.txt", len(renamed))]
    assert stored(store) == {}
    assert seen >= {"get", "upsert", "delete", "update"}
