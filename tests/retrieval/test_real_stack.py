"""ContextWindowRetriever with the packaged embedding model and Chroma on disk."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers.pages import example_store_directory
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ContextWindowRetriever, default_embeddings

pytestmark = pytest.mark.integration

Pages = tuple[Chroma, tuple[Document, ...], dict[str, str]]
QUESTION = "How do I make sure a file is closed after reading it, even if an exception is raised?"


def test_the_packaged_model_embeds_meaning() -> None:
    model = default_embeddings()
    query = np.array(model.embed_query("How do I open a file for reading?"))
    related, unrelated = np.array(
        model.embed_documents(["open() returns a file object", "lists have an append method"])
    )
    assert query.shape == (384,)
    assert abs(np.linalg.norm(related) - 1) < 1e-4
    assert query @ related > query @ unrelated + 0.2


def test_windows_bring_the_context_around_the_hit(pages: Pages) -> None:
    store, chunks, texts = pages
    plain = store.similarity_search(QUESTION, k=1)[0]
    docs = ContextWindowRetriever(vectorstore=store, k=3, window_budget=1200).invoke(QUESTION)
    assert len(docs) == 3
    best = docs[0]
    assert plain.metadata["chunk_id"] in best.metadata["hit_chunk_ids"]
    assert len(best.page_content) > len(plain.page_content)
    source = texts[best.metadata["source"]]
    by_id = {c.metadata["chunk_id"]: c for c in chunks}
    for chunk_id in best.metadata["chunk_ids"]:  # every chunk of the window, in order, once
        assert by_id[chunk_id].page_content in best.page_content
    start, end = best.metadata["start_index"], best.metadata["end_index"]
    assert best.page_content.split() == source[start:end].split()  # same words, same order


def test_one_search_and_one_fetch_on_disk(
    pages: Pages, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store, _, _ = pages
    spy = spy_on(store)
    for question in [
        QUESTION,
        "What is a list comprehension?",
        "How do I format numbers in strings?",
    ]:
        spy.reset()
        assert len(ContextWindowRetriever(vectorstore=store, k=4).invoke(question)) == 4
        assert spy.calls == {"query": 1, "get": 1}


async def test_async_matches_sync(pages: Pages) -> None:
    store, _, _ = pages
    retriever = ContextWindowRetriever(vectorstore=store, k=4, window_budget=900, mode="both")
    for question in [
        QUESTION,
        "What does the else clause of try do?",
        "How do I delete an item from a list?",
    ]:
        assert await retriever.ainvoke(question) == retriever.invoke(question)


def test_reopened_store_gives_the_same_windows(pages: Pages) -> None:
    store, _, _ = pages
    directory = example_store_directory()
    reopened = Chroma(
        collection_name="pages",
        embedding_function=default_embeddings(),
        persist_directory=directory,
    )
    first = ContextWindowRetriever(vectorstore=store, k=2).invoke(QUESTION)
    again = ContextWindowRetriever(vectorstore=reopened, k=2).invoke(QUESTION)
    assert first == again


def test_token_budgets(pages: Pages) -> None:
    store, _, _ = pages
    count = default_embeddings().count_tokens
    retriever = ContextWindowRetriever(
        vectorstore=store, k=4, window_budget=200, length_function=count
    )
    docs = retriever.invoke("What is the difference between a tuple and a list?")
    assert len(docs) == 4
    for doc in docs:
        if len(doc.metadata["hit_chunk_ids"]) == 1 and len(doc.metadata["chunk_ids"]) > 1:
            assert count(doc.page_content) <= 200
    assert any(len(d.metadata["chunk_ids"]) > 1 for d in docs)


def test_token_counts_are_not_truncated_at_the_models_limit() -> None:
    count = default_embeddings().count_tokens
    assert count("word " * 1000) == 1000


def test_a_total_budget_on_the_real_model_costs_one_search_and_one_fetch(
    pages: Pages,
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
) -> None:
    store, _, texts = pages
    count = default_embeddings().count_tokens
    ContextWindowRetriever(vectorstore=store, total_budget=500).invoke(QUESTION)  # builds the
    held_still(store)  # keyword index once a process (its reads are not a query's); no check
    spy = spy_on(store)  # of the collection falls due among the queries (see held_still)
    for expansion in ("adaptive", "static"):
        for length_function, total in ((len, 1500), (count, 300)):
            spy.reset()
            docs = ContextWindowRetriever(
                vectorstore=store,
                k=12,
                total_budget=total,
                expansion=expansion,
                length_function=length_function,
            ).invoke(QUESTION)
            assert spy.calls == {"query": 1, "get": 1}
            assert sum(length_function(d.page_content) for d in docs) <= total
            for doc in docs:  # every window is the exact text of its source span
                source = texts[doc.metadata["source"]]
                start, end = doc.metadata["start_index"], doc.metadata["end_index"]
                assert " ".join(source[start:end].split()) == " ".join(doc.page_content.split())
