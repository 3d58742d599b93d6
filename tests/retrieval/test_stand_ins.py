"""Adaptive windows chosen before the read, on the lengths the keyword index holds.

With ``total_budget`` and hybrid candidates (the default), the keyword index already holds
every chunk's length and metadata: the selection is made on them and the one fetch reads only
the chunks chosen. These tests hold it to the windows of reading every chunk the selection
might measure (a store that holds nothing in the process), and to what a stale index must
never do: return a chunk's old text, or a chunk the caller's filter hides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers.corpora import (
    TOPICS,
    TieFreeEmbeddings,
    distinct_conversations,
    split,
    turns,
)
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.stores import ChromaWindowStore
from window_retriever.stores._chroma_keywords import invalidate_keywords

QUESTIONS = [*TOPICS, "camping and guitar", "pottery in the garden library", "turn 12 running"]


class Unindexed(ChromaWindowStore):
    """The same Chroma collection, with nothing held in the process: every path reads, and
    Chroma applies the caller's filter to the search."""

    def held(self) -> None:
        return None


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    """Three conversations in two tenants; chunks of varied length, none alike."""
    chroma = make_store(TieFreeEmbeddings())
    add_chunks(chroma, split(distinct_conversations(60, tenants=True), 140, 30))
    return chroma


def _windows(documents: Sequence[Document]) -> list[tuple[str, dict[str, Any]]]:
    return [(document.page_content, document.metadata) for document in documents]


def _visible(store: Chroma, chunk_id: str, where: dict[str, Any] | None) -> bool:
    """The chunk is stored and the filter passes it (as Chroma decides)."""
    return bool(store._collection.get(ids=[chunk_id], where=where)["ids"])  # type: ignore[arg-type]


def _read_ids(spy: StoreSpy) -> list[str]:
    return [i for name, arguments, _ in spy.log if name == "get" for i in arguments["ids"]]


@pytest.mark.parametrize(
    "options",
    [
        {"total_budget": 300},
        {"total_budget": 800},
        {"total_budget": 2000},
        {"total_budget": 800, "window_budget": 300, "mode": "next"},
        {"total_budget": 2000, "k": 3, "mode": "prev"},
        {"total_budget": 800, "floor": 0.5},
        {"total_budget": 800, "filter": {"tenant": "a"}},
        {"total_budget": 2000, "filter": {"source": {"$in": ["conv-0", "conv-2"]}}},
        {"total_budget": 2000, "filter": {"chunk_index": {"$nin": [2, 5, 6, 9, 13, 14]}}},
    ],
)
def test_the_windows_are_those_of_reading_everything_and_only_they_are_read(
    store: Chroma,
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
    options: dict[str, Any],
) -> None:
    chosen_first = ContextWindowRetriever(vectorstore=store, **options)
    reading_all = ContextWindowRetriever(vectorstore=Unindexed(store), **options)
    chosen_first.invoke("warm: build the keyword index")
    held_still(store)  # no check of the collection due: each query's own calls
    spy = spy_on(store)
    for question in QUESTIONS:
        spy.reset()
        got = chosen_first.invoke(question)
        assert spy.calls == {"query": 1, "get": 1}, question  # one search, one fetch
        windowed = {i for d in got for i in d.metadata["chunk_ids"]}
        others = set(_read_ids(spy)) - windowed  # only the gaps the plan reaches (file ends)
        assert windowed <= set(_read_ids(spy))
        assert all(not _visible(store, i, options.get("filter")) for i in others), question
        assert _windows(got) == _windows(reading_all.invoke(question)), question


def test_async_chooses_first_too(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    import asyncio

    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800)
    retriever.invoke("warm")
    held_still(store)
    spy = spy_on(store)
    got = asyncio.run(retriever.ainvoke("pottery in the garden library"))
    assert spy.calls == {"query": 1, "get": 1}
    windowed = {i for d in got for i in d.metadata["chunk_ids"]}
    assert windowed <= set(_read_ids(spy))
    assert not any(_visible(store, i, None) for i in set(_read_ids(spy)) - windowed)
    assert _windows(got) == _windows(retriever.invoke("pottery in the garden library"))


def test_a_chunk_rewritten_behind_the_index_s_back_comes_back_as_it_is_now(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    """A bare ``update`` keeps the count and tells no index: the index still holds the old
    length. The chunk read differs from its stand-in, so the windows are read the usual way
    (one fetch more) and carry the new text."""
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800)
    question = "pottery in the garden library"
    target = retriever.invoke(question)[0].metadata["hit_chunk_ids"][0]
    held_still(store)  # the update below keeps the count: no check would see it anyway
    old = store._collection.get(ids=[target])["documents"][0]
    new = old + " (corrected later: the pottery class moved to Tuesday)"
    vector = TieFreeEmbeddings().embed_documents([new])
    store._collection.update(ids=[target], documents=[new], embeddings=vector)  # type: ignore[arg-type]
    spy = spy_on(store)

    got = retriever.invoke(question)

    assert spy.calls == {"query": 1, "get": 2}  # the chosen chunk differed: read again
    (window,) = [d for d in got if target in d.metadata["chunk_ids"]]
    assert "moved to Tuesday" in window.page_content
    assert _windows(got) == _windows(
        ContextWindowRetriever(vectorstore=Unindexed(store), total_budget=800).invoke(question)
    )


def test_a_chunk_moved_to_another_tenant_behind_the_index_s_back_never_comes_back(
    store: Chroma,
) -> None:
    """The index still says the chunk is tenant "a"; the store says "b". The caller's filter is
    applied to what is read, so the chunk is never returned: not as a hit, not as a neighbour."""
    options: dict[str, Any] = {"total_budget": 2000, "filter": {"tenant": "a"}}
    retriever = ContextWindowRetriever(vectorstore=store, **options)
    question = "camping and guitar"
    before = retriever.invoke(question)
    moved = [i for d in before for i in d.metadata["chunk_ids"]]
    record = store._collection.get(ids=moved, include=["metadatas", "documents"])
    metadatas = [{**m, "tenant": "b"} for m in record["metadatas"]]
    store._collection.update(ids=record["ids"], metadatas=metadatas)

    got = retriever.invoke(question)

    assert not {i for d in got for i in d.metadata["chunk_ids"]} & set(moved)
    texts = " ".join(d.page_content for d in got)
    assert not any(text in texts for text in record["documents"])


def test_a_hit_the_index_does_not_hold_yet_is_read_the_usual_way(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    """A chunk written by a bare ``add_documents`` is found by the vector search before the
    index's next check: with no length to choose it by, the windows are read as before."""
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800)
    retriever.invoke("warm")
    held_still(store)  # before the index's next check, however slow the machine
    late = split([Document(page_content=turns(6, 9), metadata={"source": "late"})], 140, 30)
    store.add_documents(late, ids=[c.metadata["chunk_id"] for c in late])
    spy = spy_on(store)

    got = retriever.invoke(late[0].page_content)

    assert late[0].metadata["chunk_id"] in got[0].metadata["hit_chunk_ids"]
    assert late[0].page_content in got[0].page_content
    assert spy.calls["query"] == 1 and spy.calls["get"] >= 1


def test_a_token_budget_reads_the_usual_way_with_the_same_windows(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    """Lengths in the index are characters: another length function does not choose by them."""

    def words(text: str) -> int:
        return len(text.split())

    options: dict[str, Any] = {"total_budget": 120, "window_budget": 60, "length_function": words}
    retriever = ContextWindowRetriever(vectorstore=store, **options)
    retriever.invoke("warm")
    spy = spy_on(store)
    for question in QUESTIONS[:4]:
        got = retriever.invoke(question)
        assert sum(words(d.page_content) for d in got) <= 120
        assert _windows(got) == _windows(
            ContextWindowRetriever(vectorstore=Unindexed(store), **options).invoke(question)
        )
    read = _read_ids(spy)
    assert len(read) > sum(  # the usual way reads the neighbours it might measure
        len(d.metadata["chunk_ids"]) for d in retriever.invoke(QUESTIONS[3])
    )


def _set_tenant(store: Chroma, chunk_id: str, tenant: str) -> None:
    record = store._collection.get(ids=[chunk_id], include=["metadatas"])
    metadata = {**record["metadatas"][0], "tenant": tenant}  # type: ignore[index]
    store._collection.update(ids=[chunk_id], metadatas=[metadata])


def test_a_gap_the_store_has_filled_since_is_read_then_held(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    """The index holds a window's middle chunk as hidden (another tenant's); a bare update
    shows it again. The gap is read with the chosen chunks: found filled, the windows are read
    the usual way (one fetch more), and the index holds the chunk as read from then on: the
    next query gives the windows of reading everything (the search too now passes the chunk),
    in one fetch."""
    options: dict[str, Any] = {"total_budget": 2000, "filter": {"tenant": "a"}}
    retriever = ContextWindowRetriever(vectorstore=store, **options)
    reading_all = ContextWindowRetriever(vectorstore=Unindexed(store), **options)
    question = "pottery in the garden library"
    window = next(
        d
        for d in reading_all.invoke(question)
        if set(d.metadata["chunk_ids"][1:-1]) - set(d.metadata["hit_chunk_ids"])
    )
    middle = next(
        i for i in window.metadata["chunk_ids"][1:-1] if i not in window.metadata["hit_chunk_ids"]
    )
    _set_tenant(store, middle, "b")
    invalidate_keywords(store)  # the index learns it is hidden
    assert not any(middle in d.metadata["chunk_ids"] for d in retriever.invoke(question))
    held_still(store)
    _set_tenant(store, middle, "a")  # shown again behind the index's back
    spy = spy_on(store)

    got = retriever.invoke(question)

    assert spy.calls == {"query": 1, "get": 2}
    assert any(middle in d.metadata["chunk_ids"] for d in got)
    spy.reset()
    again = retriever.invoke(question)
    assert spy.calls == {"query": 1, "get": 1}  # held as read: no fetch more
    assert _windows(again) == _windows(reading_all.invoke(question))


def test_a_chunk_rewritten_in_place_costs_one_fetch_more_once(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800)
    question = "camping and guitar"
    target = retriever.invoke(question)[0].metadata["hit_chunk_ids"][0]
    held_still(store)
    old = store._collection.get(ids=[target])["documents"][0]  # type: ignore[index]
    new = old[: len(old) // 2]
    vector = TieFreeEmbeddings().embed_documents([new])
    store._collection.update(ids=[target], documents=[new], embeddings=vector)  # type: ignore[arg-type]
    spy = spy_on(store)
    calls = []
    for _ in range(3):
        spy.reset()
        got = retriever.invoke(question)
        calls.append(spy.calls["get"])
        assert new in " ".join(d.page_content for d in got) or all(
            target not in d.metadata["chunk_ids"] for d in got
        )
        assert old not in " ".join(d.page_content for d in got)
    assert calls[1:] == [1, 1], calls  # the first read told the index


def test_a_chunk_appended_behind_the_index_s_back_is_read_where_a_window_reaches_it(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], held_still: Callable[[Chroma], FakeClock]
) -> None:
    """Within the index's check interval it does not know a chunk just added to a file's end:
    the plan reaches the position, the fetch finds it, and the windows are read as reading
    everything reads them."""
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=2000)
    reading_all = ContextWindowRetriever(vectorstore=Unindexed(store), total_budget=2000)
    record = store._collection.get(where={"source": "conv-1"}, include=["documents", "metadatas"])
    last = max(record["metadatas"], key=lambda m: m["chunk_index"])  # type: ignore[arg-type,return-value]
    text = record["documents"][record["metadatas"].index(last)]  # type: ignore[index,union-attr]
    retriever.invoke(text)
    held_still(store)  # the index is checked now: the addition comes within its interval
    index = int(last["chunk_index"]) + 1
    added = f"{last['file_id']}:{index}"
    words = "Melanie: and then the garden library pottery, later that evening."
    metadata = {
        **last,
        "chunk_index": index,
        "chunk_id": added,
        "start_index": int(last["start_index"]) + len(text) + 1,
    }
    vector = TieFreeEmbeddings().embed_documents([words])
    store._collection.add(ids=[added], documents=[words], metadatas=[metadata], embeddings=vector)  # type: ignore[arg-type]
    spy = spy_on(store)

    got = retriever.invoke(text)

    assert spy.calls == {"query": 1, "get": 2}  # found filled: read the usual way
    assert any(added in d.metadata["chunk_ids"] for d in got)
    assert _windows(got) == _windows(reading_all.invoke(text))
