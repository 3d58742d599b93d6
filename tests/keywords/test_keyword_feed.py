"""The change feed: another index applies the library's writes without reading every record.

Each index here is compared with one built from scratch over the same collection (no saved
copy, no feed): a catch-up re-indexes the words it keeps and those of the records the feed
names, so the two must give the same hits with the same scores.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

import window_retriever.stores._chroma_keywords as chroma_module
from window_retriever import WindowSplitter, add_chunks, sync_file
from window_retriever.ingestion._prune import remove_file
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores._chroma_keywords import (
    FEED_PREFIX,
    ChromaKeywordSource,
    invalidate_keywords,
    keyword_index,
)

WORDS = ["window", "chunk", "budget", "merge", "store", "query", "answer", "table", "sentence"]
QUERIES = ["window budget", "merge table index", "rare0 rare1", "sentence"]


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()


class Unsaved(ChromaKeywordSource):
    """The same collection, indexed from scratch: no saved copy, its own registry key."""

    @property
    def key(self) -> tuple[str, ...]:
        return ("scratch", *super().key)

    @property
    def index_directory(self) -> Path | None:
        return None

    def changes(self, since: str, until: str) -> set[str] | None:
        return None


def scratch(store: Chroma, **filters: Any) -> list[list[tuple[str, float]]]:
    index = KeywordIndex(Unsaved(store))
    return [index.search(query, k=8, **filters) for query in QUERIES]


def searched(index: KeywordIndex, **filters: Any) -> list[list[tuple[str, float]]]:
    index.refresh()
    return [index.search(query, k=8, **filters) for query in QUERIES]


def page(rng: random.Random, source: str) -> Document:
    words = [rng.choice(WORDS) for _ in range(rng.randint(20, 120))]
    words += [f"rare{rng.randint(0, 30)}" for _ in range(rng.randint(0, 3))]
    tenant = "ab"[sum(map(ord, source)) % 2]  # one owner per source
    return Document(" ".join(words), metadata={"source": source, "tenant": tenant})


def small() -> WindowSplitter:
    """Chunks of 200 characters: a page of words is several chunks."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=200, chunk_overlap=20, add_start_index=True)
    )


def new_store(kind: str, tmp_path: Path) -> Chroma:
    if kind == "disk":
        client: Any = chromadb.PersistentClient(path=str(tmp_path / "store"))
    else:
        client = chromadb.EphemeralClient()
    return Chroma(
        collection_name=f"feed-{random.getrandbits(32):08x}",
        client=client,
        embedding_function=DeterministicFakeEmbedding(size=8),
    )


@pytest.mark.parametrize("kind", ["disk", "memory"])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_library_write_is_caught_up_exactly_as_a_build_would_index_it(
    tmp_path: Path, kind: str, seed: int
) -> None:
    rng = random.Random(seed)
    store = new_store(kind, tmp_path)
    sources = [f"p{i}" for i in range(12)]
    add_chunks(store, small().split_documents([page(rng, s) for s in sources]))
    index = keyword_index(store, check_interval=0)
    assert searched(index) == scratch(store)
    splitter = small()
    for step in range(12):
        operation = rng.choice(["add", "rewrite", "remove", "add"])
        if operation == "add" or len(sources) < 3:
            sources.append(f"n{step}")
            add_chunks(store, splitter.split_documents([page(rng, sources[-1])]))
        elif operation == "rewrite":
            source = rng.choice(sources)
            sync_file(store, splitter.split_documents([page(rng, source)]))
        else:
            gone = splitter.split_documents([page(rng, sources.pop(rng.randrange(len(sources))))])
            remove_file(store, gone[0].metadata["file_id"])
        assert searched(index) == scratch(store), (step, operation)
        assert searched(index, where={"tenant": "a"}) == scratch(store, where={"tenant": "a"})
    assert index.builds == 1
    assert index.catch_ups == 12


def test_a_new_process_loads_the_older_saved_copy_and_catches_up(tmp_path: Path) -> None:
    rng = random.Random(3)
    store = new_store("disk", tmp_path)
    add_chunks(store, WindowSplitter().split_documents([page(rng, f"p{i}") for i in range(8)]))
    keyword_index(store).search("window", k=3)  # saved at this state
    KeywordIndex._shared.clear()  # that process ends; another one writes
    add_chunks(store, WindowSplitter().split_documents([page(rng, "late")]))

    index = keyword_index(store)  # a new process

    assert searched(index) == scratch(store)
    assert (index.builds, index.loads, index.catch_ups) == (0, 1, 1)


def test_a_write_the_feed_cannot_name_means_one_rebuild(tmp_path: Path) -> None:
    """A bare write told through ``invalidate_keywords`` (ids unknown); a bare add beside a
    library write (the count does not add up); an entry pruned (the reader is too far behind)."""
    rng = random.Random(4)
    store = new_store("disk", tmp_path)
    add_chunks(store, WindowSplitter().split_documents([page(rng, f"p{i}") for i in range(6)]))
    index = keyword_index(store, check_interval=0)
    index.search("window", k=3)

    store._collection.add(ids=["bare:1"], documents=["rare99 bare"], embeddings=[[0.1] * 8])
    invalidate_keywords(store)
    assert searched(index) == scratch(store)
    assert (index.builds, index.catch_ups) == (2, 0)

    store._collection.add(ids=["bare:2"], documents=["rare98 bare"], embeddings=[[0.1] * 8])
    add_chunks(store, WindowSplitter().split_documents([page(rng, "q")]))
    assert searched(index) == scratch(store)
    assert index.search("rare98", k=3)[0][0] == "bare:2"
    assert (index.builds, index.catch_ups) == (3, 0)

    add_chunks(store, WindowSplitter().split_documents([page(rng, "r")]))
    assert searched(index) == scratch(store)
    assert (index.builds, index.catch_ups) == (3, 1)  # the feed goes on

    store._collection.add(ids=["bare:3"], documents=["rare97 bare"], embeddings=[[0.1] * 8])
    invalidate_keywords(store, ["bare:3"])  # a bare write that names its ids
    assert searched(index) == scratch(store)
    assert (index.builds, index.catch_ups) == (3, 2)


def test_entries_past_the_retention_are_pruned_and_a_reader_behind_them_rebuilds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(5)
    store = new_store("disk", tmp_path)
    add_chunks(store, WindowSplitter().split_documents([page(rng, f"p{i}") for i in range(6)]))
    index = keyword_index(store, check_interval=0)
    index.search("window", k=3)
    add_chunks(store, WindowSplitter().split_documents([page(rng, "a")]))
    feed = store._client.get_collection(FEED_PREFIX + str(store._collection.id))
    assert feed.count() == 4  # each write: its pending entry, then the one that completes it
    later = chroma_module.time.time() + chroma_module.FEED_SECONDS + 60
    monkeypatch.setattr(chroma_module.time, "time", lambda: later)
    KeywordIndex._shared.clear()  # a reader that saw the first write only ...
    behind = keyword_index(store)
    behind.search("window", k=3)
    KeywordIndex._shared.clear()
    add_chunks(store, WindowSplitter().split_documents([page(rng, "b")]))  # ... a week ago
    assert feed.count() == 2  # the four older entries pruned
    KeywordIndex._shared.clear()

    reader = keyword_index(store)

    assert searched(reader) == scratch(store)
    assert (reader.builds, reader.loads, reader.catch_ups) == (0, 1, 1)  # the last entry
    source = ChromaKeywordSource(store)
    source.fingerprint()
    first = index._snapshot.fingerprint.generation if index._snapshot else None
    assert first is not None and source.changes(first, source.generation()[1] or "") is None


def test_two_writes_after_one_token_are_both_read_again(make_store: Callable[..., Chroma]) -> None:
    """Two writers that read the same token before storing theirs: the token kept is one
    writer's, the other's write was made all the same, so a reader reads both again."""
    store = make_store()
    store.add_texts(["window budget"], ids=["a"])
    source = ChromaKeywordSource(store)
    source.bump_generation({"a"})
    _, start = source.generation()
    assert start is not None
    collection = store._client.get_collection(store._collection.name)
    source._record(collection, "writer-one", chroma_module._Entry(start, {"a"}, False, ()))
    source._record(collection, "writer-two", chroma_module._Entry(start, {"b"}, False, ()))
    source._record(collection, "after-two", chroma_module._Entry("writer-two", {"c"}, False, ()))
    assert source.changes(start, "writer-one") == {"a", "b", "c"}
    assert source.changes(start, "after-two") == {"a", "b", "c"}
    assert source.changes("writer-two", "after-two") == {"c"}
    assert source.changes(start, "never-written") is None


class Losing(ChromaKeywordSource):
    """Its feed loses entry ``lost`` between the two reads of :meth:`changes` (the chain, then
    the entries' ids): another process's write pruned it meanwhile."""

    lost = ""

    def _feed(self) -> Any:
        feed = super()._feed()
        lost = self.lost

        class Feed:
            def get(self, ids: list[str] | None = None, **kwargs: Any) -> Any:
                if ids is not None:
                    ids = [token for token in ids if token != lost]
                return feed.get(ids=ids, **kwargs)

        return None if feed is None else Feed()


def test_an_entry_missing_when_its_ids_are_read_means_a_rebuild(
    make_store: Callable[..., Chroma],
) -> None:
    """The chain reaches ``until``, but one of its entries is gone when the ids are read: the
    feed cannot name every write since ``since``, so ``changes`` says None (the index rebuilds)
    rather than the ids of the entries left."""
    store = make_store()
    store.add_texts(["window budget"], ids=["a"])
    source = Losing(store)
    source.bump_generation({"a"})
    _, start = source.generation()
    assert start is not None
    collection = store._client.get_collection(store._collection.name)
    source._record(collection, "one", chroma_module._Entry(start, {"b"}, False, ()))
    source._record(collection, "two", chroma_module._Entry("one", {"c"}, False, ()))
    assert source.changes(start, "two") == {"b", "c"}

    source.lost = "one"
    assert source.changes(start, "two") is None


def test_an_entry_without_its_ids_means_a_rebuild(make_store: Callable[..., Chroma]) -> None:
    """An entry whose ids are missing (no document: not one this library wrote whole) cannot
    say which records to read again: ``changes`` says None, as for ids recorded as unknown."""
    store = make_store()
    store.add_texts(["window budget"], ids=["a"])
    source = ChromaKeywordSource(store)
    source.bump_generation({"a"})
    _, start = source.generation()
    assert start is not None
    collection = store._client.get_collection(store._collection.name)
    source._record(collection, "one", chroma_module._Entry(start, {"b"}, False, ()))
    assert source.changes(start, "one") == {"b"}

    feed = store._client.get_collection(FEED_PREFIX + str(collection.id))
    metadata = {"prev": "one", "at": chroma_module.time.time(), "pending": False, "completes": ""}
    feed.add(ids=["bare"], metadatas=[metadata], embeddings=[[0.0]])  # no document
    assert feed.get(ids=["bare"], include=["documents"])["documents"] == [None]
    assert source.changes(start, "bare") is None
