"""stamp_collection: a collection split without WindowSplitter gets window metadata in place.

On a real Chroma on disk (tmp_path) with deterministic fake embeddings: chunks from LangChain's
splitter with ``start_index``, added under Chroma's random ids in shuffled order, are ordered by
``start_index``, stored under their chunk ids with their stored vectors, and then grow into
windows. A run killed before any of its writes loses nothing and the next run finishes it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import (
    ChromaWindowStore,
    ConfigurationError,
    ContextWindowRetriever,
    WindowSplitter,
    add_chunks,
    stamp_collection,
)
from window_retriever.core._ids import make_file_id
from window_retriever.ingestion import Stamped
from window_retriever.stores._protocol import Record

TEXTS = {
    "notes/bees.txt": " ".join(f"Bee fact {i}: bees make honey from nectar." for i in range(40)),
    "notes/ants.txt": " ".join(f"Ant fact {i}: ants farm aphids for honeydew." for i in range(30)),
}


class CountingEmbeddings(DeterministicFakeEmbedding):
    """Fake embeddings that count the documents they embed."""

    embedded: int = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super().embed_documents(texts)


def split(texts: dict[str, str], **extra: Any) -> list[Document]:
    """Chunks as LangChain's splitter alone makes them: ``source`` and ``start_index`` only."""
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=120, chunk_overlap=20, add_start_index=True
    )
    docs = [Document(text, metadata={"source": source, **extra}) for source, text in texts.items()]
    return splitter.split_documents(docs)


@pytest.fixture
def new_store(tmp_path: Path) -> Callable[[], Chroma]:
    """Fresh collections in one embedded Chroma on disk."""
    made = iter(range(1000))

    def make() -> Chroma:
        return Chroma(
            collection_name=f"docs-{next(made)}",
            embedding_function=CountingEmbeddings(size=32),
            persist_directory=str(tmp_path / "db"),
        )

    return make


def loose(store: Chroma, chunks: Sequence[Document], seed: int = 7) -> None:
    """Add ``chunks`` as a plain LangChain user does: shuffled, under Chroma's random ids."""
    shuffled = list(chunks)
    random.Random(seed).shuffle(shuffled)
    store.add_documents(shuffled)


def everything(store: Chroma) -> dict[str, tuple[str, dict[str, Any], list[float]]]:
    got = store.get(include=["documents", "metadatas", "embeddings"])
    return {
        i: (text, metadata, [round(float(x), 6) for x in vector])
        for i, text, metadata, vector in zip(
            got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True
        )
    }


def stamped(store: Chroma) -> dict[str, tuple[str, dict[str, Any], list[float]]]:
    """Each record by id, without ``original_id`` (Chroma's random ids differ from run to run)."""
    return {
        i: (text, {k: v for k, v in m.items() if k != "original_id"}, vector)
        for i, (text, m, vector) in everything(store).items()
    }


def by_content(store: Chroma) -> set[tuple[str, str, int]]:
    """Each stored chunk as (source, text, start_index): what must never be lost."""
    return {(m["source"], text, m["start_index"]) for text, m, _ in everything(store).values()}


def test_chunks_are_ordered_by_start_index_and_stored_under_their_chunk_ids(
    new_store: Callable[[], Chroma],
) -> None:
    store = new_store()
    chunks = split(TEXTS)
    loose(store, chunks)
    before = {(text, m["start_index"]): vector for text, m, vector in everything(store).values()}
    embedded = store.embeddings.embedded  # type: ignore[union-attr]

    summary = stamp_collection(store)

    assert summary == Stamped(files=2, chunks=len(chunks), removed=len(chunks))
    assert store.embeddings.embedded == embedded  # type: ignore[union-attr]  # no re-embedding
    stored = everything(store)
    assert len(stored) == len(chunks)
    for source, text in TEXTS.items():
        file_id = make_file_id({"source": source}, ("source",))  # as WindowSplitter makes it
        mine = sorted(
            (m["chunk_index"], i, t, m) for i, (t, m, _) in stored.items() if m["source"] == source
        )
        assert [index for index, *_ in mine] == list(range(len(mine)))
        assert [m["start_index"] for *_, m in mine] == sorted(m["start_index"] for *_, m in mine)
        for index, chunk_id, chunk_text, m in mine:
            assert chunk_id == m["chunk_id"] == f"{file_id}:{index}"
            assert m["file_id"] == file_id
            assert text[m["start_index"] :].startswith(chunk_text)
            assert isinstance(m["original_id"], str) and m["original_id"] not in stored
        assert len({m["file_version"] for *_, m in mine}) == 1
    for text, m, vector in stored.values():  # each chunk keeps the vector it was stored with
        assert vector == before[(text, m["start_index"])]


def test_a_stamped_collection_grows_windows_without_a_warning_and_stamps_once(
    new_store: Callable[[], Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    store = new_store()
    chunks = split(TEXTS)
    loose(store, chunks)
    question = chunks[10].page_content  # the fake embeddings find a chunk by its own text
    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        (plain,) = ContextWindowRetriever(store, k=1, window_budget=400).invoke(question)
        assert "first_chunk_index" not in plain.metadata and "has no integer" in caplog.text
        caplog.clear()
        stamp_collection(store)
        (window,) = ContextWindowRetriever(store, k=1, window_budget=400).invoke(question)
        assert caplog.text == ""
    assert window.metadata["last_chunk_index"] > window.metadata["first_chunk_index"]
    assert len(window.page_content) > len(plain.page_content)
    assert question in window.page_content
    text = TEXTS[window.metadata["source"]]
    assert text.find(window.page_content) == window.metadata["start_index"]
    again = stamp_collection(store)
    assert again == Stamped(kept=len(everything(store)))


def test_a_chunk_without_start_index_is_refused_before_anything_is_written(
    new_store: Callable[[], Chroma],
) -> None:
    store = new_store()
    chunks = split(TEXTS)
    del chunks[3].metadata["start_index"]
    loose(store, chunks)
    before = everything(store)
    with pytest.raises(
        ConfigurationError,
        match=r"^1 chunks without window metadata have no start_index, e\.g\. '[^']+' of source "
        r"'notes/.*', so their order in their file cannot be recovered; re-ingest the sources "
        r"through WindowSplitter .*add_start_index=True.*nothing was written$",
    ):
        stamp_collection(store)
    assert everything(store) == before


def test_a_chunk_stored_twice_is_kept_once(new_store: Callable[[], Chroma]) -> None:
    store = new_store()
    chunks = split(TEXTS)
    loose(store, chunks, seed=1)
    loose(store, chunks, seed=2)  # add_documents run twice: every chunk twice, other ids
    summary = stamp_collection(store)
    assert summary.duplicates == len(chunks) and summary.removed == 2 * len(chunks)
    assert len(everything(store)) == len(chunks)
    assert by_content(store) == {
        (c.metadata["source"], c.page_content, c.metadata["start_index"]) for c in chunks
    }


def test_two_owners_copies_of_one_source_are_refused_until_the_owner_key_tells_them_apart(
    new_store: Callable[[], Chroma],
) -> None:
    store = new_store()
    both = [*split(TEXTS, tenant="acme"), *split(TEXTS, tenant="globex")]
    loose(store, both)
    before = everything(store)
    with pytest.raises(
        ConfigurationError,
        match=r"whose metadata differs \(tenant: .*file_id_keys=\('source', 'tenant'\)",
    ) as caught:
        stamp_collection(store)
    assert caught.value.options == ("file_id_keys",)
    assert everything(store) == before
    assert stamp_collection(store, file_id_keys=("source", "tenant")).files == 4
    for _, m, _ in everything(store).values():
        key = make_file_id(m, ("source", "tenant"))
        assert m["file_id"] == key


def test_two_versions_of_one_source_are_refused(new_store: Callable[[], Chroma]) -> None:
    store = new_store()
    loose(store, split(TEXTS))
    loose(store, split({"notes/bees.txt": "Bees sleep at night. " * 30}))
    with pytest.raises(ConfigurationError, match="two versions or two splits of it"):
        stamp_collection(store)


def test_a_source_also_stored_through_window_splitter_is_refused(
    new_store: Callable[[], Chroma],
) -> None:
    store = new_store()
    loose(store, split(TEXTS))
    docs = [Document(TEXTS["notes/ants.txt"], metadata={"source": "notes/ants.txt"})]
    add_chunks(store, WindowSplitter().split_documents(docs))
    before = everything(store)
    with pytest.raises(ConfigurationError, match=r"'notes/ants.txt' .* is stored both with window"):
        stamp_collection(store)
    assert everything(store) == before


class KilledError(Exception):
    """The process died here."""


class Dying(ChromaWindowStore):
    """The Chroma adapter, killed before its ``calls``-th write; with small id batches.

    ``in_part``: a batch upsert that is cut applies some of its records first, the last ones
    (a store whose batches are not atomic, the worst order for what the batch overwrites).
    """

    def __init__(self, vectorstore: Chroma, calls: int, *, in_part: bool = False) -> None:
        super().__init__(vectorstore)
        self.left = calls
        self.in_part = in_part

    @property
    def batch_size(self) -> int | None:
        return 3

    def _tick(self) -> None:
        if self.left == 0:
            raise KilledError
        self.left -= 1

    def upsert(self, records: Sequence[Record]) -> None:
        if self.left == 0 and self.in_part and len(records) > 1:
            super().upsert(list(records)[len(records) // 2 :])
        self._tick()
        super().upsert(records)

    def delete(self, ids: Sequence[str]) -> None:
        self._tick()
        super().delete(ids)


SMALL = {source: text[:800] for source, text in TEXTS.items()}
"""Two files of 8 chunks each: a few batches of 3 each, so a run has many kill points."""


@pytest.mark.parametrize("in_part", [False, True])
def test_a_run_killed_at_any_write_loses_nothing_and_the_next_run_finishes(
    new_store: Callable[[], Chroma], in_part: bool
) -> None:
    chunks = split(SMALL)
    reference = new_store()
    loose(reference, chunks)
    counted = Dying(reference, 10**6)
    stamp_collection(counted)
    points = 10**6 - counted.left  # the write calls of a whole run: where it can be killed
    assert points >= 8
    expected = stamped(reference)
    content = by_content(reference)
    for calls in range(points):
        store = new_store()
        loose(store, chunks)
        with pytest.raises(KilledError):
            stamp_collection(Dying(store, calls, in_part=in_part))
        assert by_content(store) == content, calls  # nothing lost, wherever it stopped
        stamp_collection(store)
        assert stamped(store) == expected, calls


def test_a_file_renumbered_after_a_run_killed_in_its_deletes_keeps_every_chunk(
    new_store: Callable[[], Chroma],
) -> None:
    """Killed after its writes, then a chunk added in the middle: the copies must move up."""
    texts = {"notes/bees.txt": SMALL["notes/bees.txt"]}
    chunks = split(texts)
    late = chunks.pop(len(chunks) // 2)
    writes = -(-len(chunks) // 3)  # upserts of 3 (Dying's batch size)
    for kill_second in range(40):
        store = new_store()
        loose(store, chunks)
        with pytest.raises(KilledError):  # the writes done, killed after two deletes
            stamp_collection(Dying(store, writes + 2))
        loose(store, [late])
        content = by_content(store)
        try:
            stamp_collection(Dying(store, kill_second, in_part=True))
            finished = True
        except KilledError:
            finished = False
        assert by_content(store) == content
        stamp_collection(store)
        stored = everything(store)
        assert len(stored) == len(chunks) + 1
        order = sorted(stored.values(), key=lambda row: row[1]["chunk_index"])
        assert [m["start_index"] for _, m, _ in order] == sorted(
            c.metadata["start_index"] for c in [*chunks, late]
        )
        assert all(i == m["chunk_id"] for i, (_, m, _) in stored.items())
        if finished:
            break
    else:
        pytest.fail("the second run never finished")
