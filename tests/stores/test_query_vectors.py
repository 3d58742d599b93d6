"""A query is embedded once, however often its retrieval searches; and again by the next call.

Static windows whose hits merge search again, twice as wide; with the packaged model each
embedding costs about 10 ms, more than the search it serves. The drivers run each retrieval's
requests in ``one_retrieval()``, within which a store embeds each query once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers.corpora import TOPICS, KeywordEmbeddings, split, turns
from tests.helpers.servers import unique
from tests.helpers.stores import StoreSpy
from window_retriever import ContextWindowRetriever, add_chunks


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
