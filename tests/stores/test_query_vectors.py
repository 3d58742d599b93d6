"""A query is embedded once, however often its retrieval searches; and again by the next call.

Static windows whose hits merge search again, twice as wide; with the packaged model each
embedding costs about 10 ms, more than the search it serves. The drivers run each retrieval's
requests in ``one_retrieval()``, within which a store embeds each query once.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from tests.helpers.corpora import TOPICS, KeywordEmbeddings, split, turns
from tests.helpers.servers import unique
from tests.helpers.stores import StoreSpy
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.stores._protocol import one_retrieval, query_vector


class CountingEmbeddings(KeywordEmbeddings):
    """:class:`KeywordEmbeddings` that remembers every query it embedded, sync or async."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [super(CountingEmbeddings, self).embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return super().embed_query(text)


@pytest.fixture(params=["embedded", "server"])
def counted(
    request: pytest.FixtureRequest, make_store: Callable[..., Chroma]
) -> tuple[Chroma, CountingEmbeddings]:
    """A store of short conversation turns (hits sit side by side and merge), and its model."""
    embeddings = CountingEmbeddings()
    if request.param == "embedded":
        store = make_store(embeddings)
    else:
        address = urlsplit(request.getfixturevalue("chroma_server"))
        store = Chroma(
            collection_name=unique("query-vectors"),
            embedding_function=embeddings,
            client=chromadb.HttpClient(host=address.hostname, port=address.port),
        )
    documents = [
        Document(page_content=turns(80, seed), metadata={"source": f"conv-{seed}"})
        for seed in range(3)
    ]
    add_chunks(store, split(documents))
    return store, embeddings


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_query_is_embedded_once_however_often_its_retrieval_searches(
    counted: tuple[Chroma, CountingEmbeddings], spy_on: Callable[[Chroma], StoreSpy], run: str
) -> None:
    store, embeddings = counted
    retriever = ContextWindowRetriever(store, k=10, window_budget=1200)
    retriever.invoke("pottery")  # learns the typical chunk length: lean searches from here
    spy = spy_on(store)
    searched_again = 0
    for topic in TOPICS:
        question = f"{topic} and {topic} once more"  # not asked before
        embeddings.queries.clear()
        spy.reset()
        if run == "invoke":
            retriever.invoke(question)
        else:
            asyncio.run(retriever.ainvoke(question))
        searched_again += sum(entry[0] == "query" for entry in spy.log) > 1
        assert embeddings.queries == [question]
    assert searched_again  # some retrieval searched twice: the case this holds


def test_another_call_of_the_same_query_embeds_it_again(
    counted: tuple[Chroma, CountingEmbeddings],
) -> None:
    """Only within one retrieval: no call is faster for what an earlier one asked (a benchmark
    or ``eval`` comparing configurations on the same questions stays fair)."""
    store, embeddings = counted
    retriever = ContextWindowRetriever(store, k=10, window_budget=1200)
    retriever.invoke("pottery")
    retriever.invoke("pottery")
    asyncio.run(retriever.ainvoke("pottery"))
    assert embeddings.queries == ["pottery"] * 3


def test_another_retrievers_hits_are_measured_with_one_embedding(
    counted: tuple[Chroma, CountingEmbeddings],
) -> None:
    """``candidates=`` a retriever: the query is embedded to measure its hits, once a call,
    though static windows whose hits merge ask that retriever again, wider."""
    store, embeddings = counted
    stored = store.get(include=["documents", "metadatas"])
    chunks = sorted(
        (
            Document(page_content=text, metadata=metadata, id=chunk_id)
            for chunk_id, text, metadata in zip(
                stored["ids"], stored["documents"], stored["metadatas"], strict=True
            )
        ),
        key=lambda chunk: (chunk.metadata["source"], chunk.metadata["chunk_index"]),
    )

    class Consecutive(BaseRetriever):
        """Chunks side by side, which merge: static windows ask again, wider."""

        def _get_relevant_documents(self, query: str, **_: Any) -> list[Document]:
            return chunks[:120]

    retriever = ContextWindowRetriever(store, k=10, window_budget=1200, candidates=Consecutive())
    retriever.invoke("pottery at last")
    asyncio.run(retriever.ainvoke("pottery once again"))
    assert embeddings.queries == ["pottery at last", "pottery once again"]


class NumpyEmbeddings(KeywordEmbeddings):
    """A model that gives numpy's float32 vectors, as many do; Chroma takes plain floats."""

    def embed_query(self, text: str) -> Any:
        import numpy as np

        return np.asarray(super().embed_query(text), dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [KeywordEmbeddings.embed_query(self, text) for text in texts]


def test_a_model_that_gives_numpy_vectors_is_searched(make_store: Callable[..., Chroma]) -> None:
    store = make_store(NumpyEmbeddings())
    add_chunks(store, split([Document(page_content=turns(30, 1), metadata={"source": "c"})]))
    for options in ({"k": 2}, {"total_budget": 800}):
        retriever = ContextWindowRetriever(store, **options)
        assert retriever.invoke("pottery") == asyncio.run(retriever.ainvoke("pottery"))
        assert retriever.invoke("pottery")


def test_a_retrieval_closed_from_another_context_ends_quietly() -> None:
    """An abandoned task's coroutine is closed where it was not started (garbage collected
    after its loop closed): leaving the retrieval's scope there must not raise."""
    scope = one_retrieval()
    contextvars.copy_context().run(scope.__enter__)
    scope.__exit__(None, None, None)  # here, not in the context it was entered in


def test_a_retrieval_within_another_shares_its_vectors() -> None:
    """``candidates=`` a retriever that retrieves through the library: one embedding for both;
    the next retrieval embeds again."""
    model = CountingEmbeddings()
    with one_retrieval():
        with one_retrieval():  # the inner retrieval, before the outer embedded anything
            first = query_vector(model, "pottery")
        assert query_vector(model, "pottery") == first
        other = CountingEmbeddings()
        query_vector(other, "pottery")
        assert other.queries == ["pottery"]  # another model embeds with itself
    with one_retrieval():
        query_vector(model, "pottery")
    assert model.queries == ["pottery", "pottery"]


def test_a_search_among_no_ids_embeds_nothing(counted: tuple[Chroma, CountingEmbeddings]) -> None:
    """The adapter answers a search among no ids (a filter that passes none) without the model."""
    from window_retriever.stores import ChromaWindowStore, SearchIds, SearchVectors

    store, embeddings = counted
    adapter = ChromaWindowStore(store)
    assert adapter.search_ids(SearchIds("pottery", 2, ids=[])) == []
    assert asyncio.run(adapter.asearch_vectors(SearchVectors("pottery", 2, ids=[]))).hits == []
    assert embeddings.queries == []
