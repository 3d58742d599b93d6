"""sync_file: versioned replacement without a missing moment, resumable after a kill."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ConfigurationError, ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.ingestion._write import sync_file

SPLITTER = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=10))


def page(version: str, sentences: int) -> list[Document]:
    text = " ".join(f"Version {version} sentence {i:02d} of the page." for i in range(sentences))
    return SPLITTER.split_documents([Document(page_content=text, metadata={"source": "page"})])


def stored(store: Chroma) -> dict[str, dict[str, Any]]:
    result = store.get(include=["metadatas"])
    return dict(zip(result["ids"], result["metadatas"], strict=True))


def test_added_unchanged_updated(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    old = page("old", 20)
    assert sync_file(store, old).status == "added"
    again = sync_file(store, page("old", 20))
    assert (again.status, again.written, again.removed) == ("unchanged", 0, 0)
    new = page("new", 12)  # shorter: the tail of the old version must go
    outcome = sync_file(store, new)
    assert (outcome.status, outcome.written, outcome.removed) == (
        "updated",
        len(new),
        len(old) - len(new),
    )
    records = stored(store)
    assert set(records) == {c.metadata["chunk_id"] for c in new}
    assert {m["file_version"] for m in records.values()} == {new[0].metadata["file_version"]}


def test_a_killed_update_never_mixes_versions_and_resumes_without_duplicates(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    sync_file(store, page("old", 20))
    new = page("new", 30)
    calls = {"n": 0}
    original = store.add_documents

    def dies_on_the_third_batch(documents: list[Document], **kwargs: Any) -> list[str]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the process is killed mid-ingest
        return original(documents, **kwargs)

    monkeypatch.setattr(store, "add_documents", dies_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        sync_file(store, new, batch_size=5)
    monkeypatch.setattr(store, "add_documents", original)

    # half-written: both versions are stored, but no window joins them
    versions = {m["file_version"] for m in stored(store).values()}
    assert len(versions) == 2
    retriever = ContextWindowRetriever(vectorstore=store, k=4, window_budget=10_000)
    for doc in retriever.invoke("Version old sentence 12 of the page."):
        assert ("Version old" in doc.page_content) != ("Version new" in doc.page_content)

    resumed = sync_file(store, new, batch_size=5)
    assert resumed.written == len(new) - 10  # the two batches already written are not redone
    records = stored(store)
    assert set(records) == {c.metadata["chunk_id"] for c in new}
    assert {m["file_version"] for m in records.values()} == {new[0].metadata["file_version"]}
    assert sync_file(store, new).status == "unchanged"


def test_sync_file_takes_one_file_version(make_store: Callable[..., Chroma]) -> None:
    from window_retriever import ConfigurationError

    with pytest.raises(ConfigurationError, match="exactly one file version"):
        sync_file(make_store(), page("a", 5) + page("b", 5))


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_a_bad_batch_size_is_refused_before_anything_is_written(
    make_store: Callable[..., Chroma], size: object
) -> None:
    store = make_store()
    text = "A sentence about bees. " * 10
    chunks = SPLITTER.split_documents([Document(page_content=text, metadata={"source": "a"})])
    with pytest.raises(ConfigurationError, match="batch_size must be a whole number, at least 1"):
        add_chunks(store, chunks, batch_size=size)  # type: ignore[arg-type]
    assert store.get()["ids"] == []
