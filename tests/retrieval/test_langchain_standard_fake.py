"""LangChain's standard retriever tests in the fast set: a fake embedding, a real Chroma.

The standard contract (``k`` in the constructor and in ``invoke``, documents from ``invoke``
and ``ainvoke``) is checked on every fast run, not only with the real packaged model in
``tests/retrieval/test_langchain_standard.py``. ``DeterministicFakeEmbedding`` ranks chunks
at random but always alike, which is all the contract needs; the store is a real in-memory
Chroma (``make_store``), filled with ``add_chunks``.

Each test runs in two configurations, each with the corpus that makes the standard tests'
"exactly ``k``" hold by design, not by the luck of the ranking:

- ``[static]``, the default (as in the integration file): files of several chunks, so windows
  grow and merge; the retriever still returns exactly ``k`` (it searches again if needed).
- ``[total_budget]``, hybrid candidates and adaptive windows by default: it returns *at most*
  ``k`` (hits in one stretch of a file merge into one window), so here every file is one
  chunk and nothing can merge; the budget fits them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks

TOPICS = ("exception", "file", "loop", "class", "module", "string")


def files(sentences: int) -> list[Document]:
    """One file a topic, of ``sentences`` sentences of about 45 characters."""
    return [
        Document(
            " ".join(f"Note {i:02d}: how to handle a {topic} in Python." for i in range(sentences)),
            metadata={"source": f"{topic}.txt"},
        )
        for topic in TOPICS
    ]


CONFIGURATIONS: dict[str, tuple[dict[str, Any], list[Document]]] = {
    "static": ({"window_budget": 300}, files(12)),  # about 6 chunks a file
    "total_budget": ({"window_budget": 300, "total_budget": 2000}, files(1)),  # 1 chunk a file
}


class TestContextWindowRetrieverStandardFake(RetrieversIntegrationTests):
    """The standard tests, each once per configuration (``[static]``, ``[total_budget]``)."""

    store: Chroma
    options: dict[str, Any]

    @pytest.fixture(autouse=True, params=list(CONFIGURATIONS))
    def corpus(self, request: pytest.FixtureRequest, make_store: Callable[..., Chroma]) -> None:
        """A fresh store of the configuration's chunked files per test (removed after it)."""
        self.options, documents = CONFIGURATIONS[request.param]
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=120, chunk_overlap=30, add_start_index=True
        )
        self.store = make_store()
        add_chunks(self.store, WindowSplitter(splitter).split_documents(documents))

    @property
    def retriever_constructor(self) -> type[ContextWindowRetriever]:
        return ContextWindowRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": self.store, **self.options}

    @property
    def retriever_query_example(self) -> str:
        return "How do I handle an exception?"  # as in the integration file

    def test_each_configuration_takes_its_path(self) -> None:
        """Not a standard test: a guard that ``[total_budget]`` really runs hybrid (its hits
        carry the legs that found them) and ``[static]`` plain vector search."""
        retriever = self.retriever_constructor(**self.retriever_constructor_params)
        legs = {
            leg
            for doc in retriever.invoke(self.retriever_query_example)
            for ranks in doc.metadata.get("hit_ranks", [])
            for leg in ranks
        }
        assert legs == ({"keyword", "vector"} if "total_budget" in self.options else set())
