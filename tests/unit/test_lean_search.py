"""The lean search: ids and distances only, then one fetch of the hits it uses and their
neighbours. It must give exactly what the full search gives, and fall back where it cannot."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.conftest import StoreSpy
from tests.unit.test_budget import TOPICS, KeywordEmbeddings, split, turns
from window_retriever import ContextWindowRetriever, add_chunks


@pytest.fixture
def conversations(make_store: Callable[..., Chroma]) -> Chroma:
    """Short turns on few topics: hits sit next to each other, merge and are absorbed."""
    store = make_store(KeywordEmbeddings())
    documents = [
        Document(page_content=turns(80, seed), metadata={"source": f"conv-{seed}"})
        for seed in range(3)
    ]
    add_chunks(store, split(documents))
    return store


@pytest.mark.parametrize(("k", "window_budget"), [(1, 500), (3, 300), (4, 600), (8, 400)])
@pytest.mark.parametrize("mode", ["both", "next", "prev"])
def test_lean_searches_give_exactly_what_full_searches_give(
    conversations: Chroma,
    spy_on: Callable[[Chroma], StoreSpy],
    k: int,
    window_budget: int,
    mode: str,
) -> None:
    options = {"k": k, "window_budget": window_budget, "mode": mode}
    warm = ContextWindowRetriever(vectorstore=conversations, **options)
    warm.invoke("pottery")  # learns the typical chunk length
    spy = spy_on(conversations)
    absorbed = 0
    for topic in TOPICS:
        full = ContextWindowRetriever(vectorstore=conversations, **options).invoke(topic)
        spy.reset()
        lean = warm.invoke(topic)
        assert lean == full  # texts, spans, scores, provenance: all of it
        searches = [entry[1] for entry in spy.log if entry[0] == "query"]
        assert searches[0]["include"] == ["distances"]  # ids only (a rare miss reads all)
        absorbed += sum(len(d.metadata["hit_chunk_ids"]) > 1 for d in lean)
    assert absorbed or k == 1  # hits were absorbed into windows: the case that needs care


def test_a_store_with_other_ids_is_searched_the_usual_way(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store(KeywordEmbeddings())
    chunks = split([Document(page_content=turns(30, 1), metadata={"source": "conv"})])
    store.add_documents(chunks, ids=[f"uuid-{i}" for i in range(len(chunks))])
    retriever = ContextWindowRetriever(vectorstore=store, k=2, window_budget=300)
    first = retriever.invoke("garden")
    retriever._lengths.learn_from([400])  # as if lengths were known: the lean search is tried
    spy = spy_on(store)
    assert retriever.invoke("garden") == first
    includes = [entry[1].get("include") for entry in spy.log if entry[0] == "query"]
    assert includes[0] == ["distances"] and includes[-1] != ["distances"]  # then the full one


def test_counting_store_searches_ids_even_around_a_store_without_them(
    conversations: Chroma,
) -> None:
    from window_retriever import ChromaWindowStore, Fetch, Search
    from window_retriever.evaluation import CountingStore

    class Minimal:  # a WindowStore with the two required methods only
        def __init__(self) -> None:
            self.inner = ChromaWindowStore(conversations)

        def search(self, request: Search) -> list[tuple[Document, float]]:
            return self.inner.search(request)

        def fetch(self, request: Fetch) -> list[Document]:
            return self.inner.fetch(request)

    counting = CountingStore(Minimal())
    retriever = ContextWindowRetriever(vectorstore=counting, k=3, window_budget=300)
    direct = ContextWindowRetriever(vectorstore=conversations, k=3, window_budget=300)
    for topic in TOPICS:
        before = counting.calls
        assert retriever.invoke(topic) == direct.invoke(topic)
        assert counting.calls - before >= 2
    assert retriever._lengths.typical() is not None  # the later calls took the lean path
