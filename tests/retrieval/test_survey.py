"""Adaptive windows from a survey (ids and distances only): the cases off the common path.

The common path (one search, one fetch, no vector read, the same windows as vectors give when
the pool holds every chunk) is tested in ``test_budget``; here: what the survey falls back on,
what it must not remember between calls, and hits it cannot measure.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers.corpora import (
    TOPICS,
    KeywordEmbeddings,
    ModernStore,
    TieFreeEmbeddings,
    split,
    turns,
)
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ContextWindowRetriever, MissingWindowMetadataError, add_chunks


def _conversation_store(make_store: Callable[..., Chroma], count: int = 3) -> Chroma:
    """Conversations on few topics; no two chunks alike, none at the same distance."""
    store = make_store(TieFreeEmbeddings())
    documents = [
        Document(
            page_content=turns(80, seed).replace(" turn ", f" conversation {seed}, turn "),
            metadata={"source": f"conv-{seed}"},
        )
        for seed in range(count)
    ]
    add_chunks(store, split(documents))
    return store


def test_windows_do_not_depend_on_the_lengths_earlier_calls_read(
    make_store: Callable[..., Chroma],
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
) -> None:
    """A retriever that learned long chunks plans too little for short ones: once it reads the
    hits it plans again from their lengths and reads the rest, so its windows are a fresh
    retriever's (one fetch more, that once)."""
    store = make_store(KeywordEmbeddings())
    long = split([Document(turns(200, 1), metadata={"source": "long", "kind": "long"})], 1500, 0)
    short = split([Document(turns(60, 2), metadata={"source": "short", "kind": "short"})], 100, 0)
    add_chunks(store, [*long, *short])
    options: dict[str, Any] = {"total_budget": 2000, "window_budget": 1200}
    warmed = ContextWindowRetriever(vectorstore=store, **options)
    for topic in TOPICS[:3]:
        warmed.invoke(topic, filter={"kind": "long"})
    assert warmed._lengths.low()[0] > 500  # type: ignore[index]  # learned: long chunks only
    held_still(store)  # no check of the collection due: each query's own calls
    spy = spy_on(store)
    for topic in TOPICS:
        fresh = ContextWindowRetriever(vectorstore=store, **options)
        expected = fresh.invoke(topic, filter={"kind": "short"})
        spy.reset()
        got = warmed.invoke(topic, filter={"kind": "short"})
        assert [d.metadata["chunk_ids"] for d in got] == [
            d.metadata["chunk_ids"] for d in expected
        ], topic
        assert spy.calls["query"] == 1 and spy.calls["get"] <= 2
        assert set(spy.calls) <= {"query", "get"}, spy.calls


def test_a_survey_of_ids_that_do_not_name_positions_searches_the_usual_way_from_then_on(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store(KeywordEmbeddings())
    chunks = split([Document(page_content=turns(30, 1), metadata={"source": "conv"})])
    store.add_documents(chunks, ids=[f"uuid-{i}" for i in range(len(chunks))])
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800, candidates="vector")
    spy = spy_on(store)
    first = retriever.invoke("garden")
    assert first
    includes = [entry[1]["include"] for entry in spy.log if entry[0] == "query"]
    assert includes[0] == ["distances"] and includes[-1] != ["distances"]
    assert retriever._lengths.disabled
    spy.reset()
    assert retriever.invoke("garden") == first
    assert spy.calls["query"] == 1  # no survey tried again


def test_a_surveyed_hit_without_window_metadata_comes_back_alone_or_raises_when_strict(
    make_store: Callable[..., Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    """An id of the form ``file:index`` is no promise: a hit whose metadata does not say so is
    returned as it is, with a warning, as on every other path (and ``strict`` raises)."""
    store = _conversation_store(make_store, 1)
    store.add_texts(["pottery pottery pottery"], metadatas=[{"source": "note"}], ids=["note:0"])
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800, candidates="vector")
    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        docs = retriever.invoke("pottery pottery pottery")
    (note,) = [d for d in docs if d.metadata["chunk_ids"] == ["note:0"]]
    assert note.page_content == "pottery pottery pottery"
    assert "no integer 'chunk_index'" in caplog.text
    strict = ContextWindowRetriever(
        vectorstore=store, total_budget=800, candidates="vector", strict=True
    )
    with pytest.raises(MissingWindowMetadataError, match="note:0"):
        strict.invoke("pottery pottery pottery")


def test_the_floor_judges_only_hits_the_vector_leg_measured(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword hit beyond the survey's pool has no distance of its own: the floor keeps it
    (its fused rank made it a hit) and still drops weak hits the vector leg did measure."""
    monkeypatch.setattr("window_retriever.retrieval._candidates.SURVEY_WIDTH", 5)
    store = _conversation_store(make_store, 6)
    options: dict[str, Any] = {"total_budget": 4000, "k": 8, "fetch_k": 8}
    retriever = ContextWindowRetriever(vectorstore=store, **options)
    hits = retriever.hits("garden turn 12", floor=None)
    outside = [h for h in hits if "vector" not in h.metadata["hit_ranks"]]
    assert outside  # keyword hits the vector leg did not find: the case
    docs = retriever.invoke("garden turn 12", floor=0.5)
    returned = {i for d in docs for i in d.metadata["hit_chunk_ids"]}
    assert {h.id for h in outside} <= returned


def test_keyword_hits_alone_are_read_the_usual_way(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A survey that found nothing while the keyword leg did (an index that lags behind) has
    nothing to measure by: the hits are read with their vectors, and scores stay finite."""
    store = _conversation_store(make_store, 1)
    monkeypatch.setattr(
        "window_retriever.stores._chroma.ChromaWindowStore.search_ids", lambda self, request: []
    )
    docs = ContextWindowRetriever(vectorstore=store, total_budget=800).invoke("garden")
    assert docs
    assert all(math.isfinite(d.metadata["score"]) for d in docs)


@pytest.mark.parametrize("candidates", ["vector", "hybrid"])
def test_async_surveys_give_the_sync_windows(
    make_store: Callable[..., Chroma], candidates: str
) -> None:
    store = _conversation_store(make_store)
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800, candidates=candidates)
    retriever.invoke("warm: learn the chunk length")
    for topic in TOPICS:
        sync = retriever.invoke(topic, filter={"source": "conv-1"})
        concurrent = asyncio.run(retriever.ainvoke(topic, filter={"source": "conv-1"}))
        assert [d.metadata for d in concurrent] == [d.metadata for d in sync]
        assert all(d.metadata["source"] == "conv-1" for d in sync)


def test_a_fresh_retriever_reads_widely_but_uses_only_what_the_hits_plan_needs(
    make_store: Callable[..., Chroma],
) -> None:
    """Knowing no length yet, the survey reads every hit's widest reach; it must still grow no
    further than the plan of the hits it read allows, as the usual search would (here long hits
    between short chunks: a third step fits ``window_budget`` but lies past the plan, which
    steps by the hits' length)."""
    store = make_store(TieFreeEmbeddings(), exhaustive=True)
    lines = []
    for i in range(40):
        topic = TOPICS[i % 3]
        lines.append((f"turn {i}: " + f"{topic} and more {topic} " * 3).ljust(112, "."))
        lines.append(f"{i}: so it was.")
    chunks = split([Document("\n".join(lines), metadata={"source": "alternating"})], 120, 0)
    lengths = [len(c.page_content) for c in chunks]
    assert min(lengths) < 20 < 100 < max(lengths)
    add_chunks(store, chunks)
    options: dict[str, Any] = {
        "total_budget": 600,
        "window_budget": 300,
        "candidates": "vector",
        "coherence": 1.0,  # neighbours as good as their hit: windows grow as far as they fit
    }
    measured = ContextWindowRetriever(vectorstore=ModernStore(store), **options)
    grew = 0
    for topic in TOPICS[:3]:
        fresh = ContextWindowRetriever(vectorstore=store, **options)
        got = fresh.invoke(f"{topic} and more {topic}")
        want = measured.invoke(f"{topic} and more {topic}")
        assert [d.metadata["chunk_ids"] for d in got] == [d.metadata["chunk_ids"] for d in want]
        grew += sum(len(d.metadata["chunk_ids"]) > 1 for d in got)
    assert grew  # windows grew: the reach was really tested
