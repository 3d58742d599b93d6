"""Hybrid candidates: keyword + vector hits fused by rank, and any retriever's hits.

Real (in-memory) Chroma with fake embeddings, so the vector leg ranks at random: what the
keyword leg finds is then plainly its doing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from langchain_chroma import Chroma
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_text_splitters import RecursiveCharacterTextSplitter

from tests.helpers.stores import add_file_f
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    MemoryWindowStore,
    WindowSplitter,
    add_chunks,
)

# ---- hybrid candidates through the retriever -----------------------------------------------

TOPICS = {
    "tenant-a": "Apples and pears grow in the orchard. " * 20,
    "tenant-b": "Pears and plums ripen late. " * 20,
}


def pages(store: Chroma, texts: dict[str, str]) -> list[Document]:
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=20, add_start_index=True)
    )
    chunks = splitter.split_documents(
        [
            Document(page_content=text, metadata={"source": name, "tenant": name.split("/")[0]})
            for name, text in texts.items()
        ]
    )
    add_chunks(store, chunks)
    return chunks


def with_term(text: str, term: str, at: int) -> str:
    """``text`` with ``term`` written once, near character ``at``."""
    cut = text.index(". ", at) + 2
    return f"{text[:cut]}Set {term} to retry. {text[cut:]}"


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    store = make_store()
    pages(
        store,
        {
            "tenant-a/guide": with_term(TOPICS["tenant-a"], "max_retries_xq", 700),
            "tenant-b/guide": with_term(TOPICS["tenant-b"], "secret_flag_zz", 300),
            "tenant-a/other": TOPICS["tenant-b"],
        },
    )
    return store


def test_a_chunk_both_legs_find_comes_first_and_grows_into_a_window(store: Chroma) -> None:
    # fetch_k above the store's size: the vector leg ranks every chunk (at random, with fake
    # embeddings); the keyword leg's first place lifts the one holding the term above them all
    for arguments in (
        {"k": 2, "fetch_k": 60},
        {"total_budget": 600, "fetch_k": 60},
        {"total_budget": 600, "fetch_k": 60, "expansion": "static"},
    ):
        hybrid = ContextWindowRetriever(vectorstore=store, candidates="hybrid", **arguments)
        docs = hybrid.invoke("max_retries_xq")
        found = [d for d in docs if "max_retries_xq" in d.page_content]
        assert found, arguments
        legs = dict(
            zip(found[0].metadata["hit_chunk_ids"], found[0].metadata["hit_ranks"], strict=True)
        )
        assert any(ranks.get("keyword") == 1 and "vector" in ranks for ranks in legs.values())
    vector = ContextWindowRetriever(vectorstore=store, candidates="vector", k=1, fetch_k=60)
    assert "hit_ranks" not in vector.invoke("max_retries_xq")[0].metadata


def test_a_keyword_hit_the_filter_hides_never_comes_back(store: Chroma) -> None:
    hybrid = ContextWindowRetriever(vectorstore=store, candidates="hybrid", total_budget=2000)
    for where in (
        {"tenant": "tenant-a"},
        {"tenant": {"$ne": "tenant-b"}},
        {"$or": [{"tenant": "tenant-a"}, {"tenant": "none"}]},
    ):
        docs = hybrid.invoke("secret_flag_zz", filter=where)
        assert docs
        assert all(d.metadata["tenant"] == "tenant-a" for d in docs), where
        assert not any("secret_flag_zz" in d.page_content for d in docs)
    docs = hybrid.invoke("secret_flag_zz", filter={"tenant": "tenant-b"})
    assert any("secret_flag_zz" in d.page_content for d in docs)


def test_a_fused_windows_score_is_the_true_minimum_distance_of_its_hits(store: Chroma) -> None:
    embeddings = store.embeddings
    assert embeddings is not None
    query = "max_retries_xq"
    q = np.asarray(embeddings.embed_query(query))
    docs = ContextWindowRetriever(vectorstore=store, candidates="hybrid", k=3).invoke(query)
    stored = store.get(
        ids=[i for d in docs for i in d.metadata["hit_chunk_ids"]], include=["embeddings"]
    )
    vectors = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    for doc in docs:
        distances = [
            float(((np.asarray(vectors[i]) - q) ** 2).sum()) for i in doc.metadata["hit_chunk_ids"]
        ]
        assert doc.metadata["hit_scores"] == pytest.approx(distances, rel=1e-4)
        assert doc.metadata["score"] == pytest.approx(min(distances), rel=1e-4)


async def test_hybrid_async_gives_the_sync_windows(store: Chroma) -> None:
    hybrid = ContextWindowRetriever(vectorstore=store, candidates="hybrid", total_budget=800)
    assert await hybrid.ainvoke("max_retries_xq") == hybrid.invoke("max_retries_xq")


def test_hybrid_needs_a_chroma_store_and_candidates_are_checked(store: Chroma) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    memory = MemoryWindowStore(DeterministicFakeEmbedding(size=8))
    with pytest.raises(
        ConfigurationError,
        match=r"candidates='hybrid' needs a store with a keyword search.*MemoryWindowStore has none",
    ):
        ContextWindowRetriever(vectorstore=memory, candidates="hybrid").invoke("x")
    with pytest.raises(ConfigurationError, match=r"candidates must be one of 'vector', 'hybrid'"):
        ContextWindowRetriever(vectorstore=store, candidates="bm25")
    with pytest.raises(ConfigurationError, match=r"a LangChain retriever .*got int"):
        ContextWindowRetriever(vectorstore=store, candidates=3)


# ---- windows from any retriever's hits -----------------------------------------------------


class Everything(BaseRetriever):
    """A retriever that ignores filters: returns the chunks holding the query's words."""

    chunks: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [c for c in self.chunks if query in c.page_content]


@pytest.fixture
def two_tenants(make_store: Callable[..., Chroma]) -> tuple[Chroma, Everything]:
    """Two tenants' guides holding one term, and a retriever that ignores filters over them."""
    store = make_store()
    chunks = pages(
        store,
        {
            "tenant-a/guide": with_term(TOPICS["tenant-a"], "shared_term", 400),
            "tenant-b/guide": with_term(TOPICS["tenant-b"], "shared_term", 400),
        },
    )
    return store, Everything(chunks=[Document(c.page_content, metadata=c.metadata) for c in chunks])


def test_windows_grow_from_another_retrievers_hits_under_the_callers_filter(
    two_tenants: tuple[Chroma, Everything],
) -> None:
    store, other = two_tenants
    retriever = ContextWindowRetriever(vectorstore=store, candidates=other, total_budget=1000)
    docs = retriever.invoke("shared_term")
    assert {d.metadata["tenant"] for d in docs} == {"tenant-a", "tenant-b"}
    assert all(len(d.metadata["chunk_ids"]) >= 1 for d in docs)
    assert any(len(d.metadata["chunk_ids"]) > 1 for d in docs)  # grown beyond the hit
    only_a = retriever.invoke("shared_term", filter={"tenant": "tenant-a"})
    assert only_a and {d.metadata["tenant"] for d in only_a} == {"tenant-a"}
    static = ContextWindowRetriever(vectorstore=store, candidates=other, k=2)
    assert all("shared_term" in d.page_content for d in static.invoke("shared_term"))


def test_another_retrievers_hit_the_filter_hides_never_comes_back_without_a_total_budget(
    two_tenants: tuple[Chroma, Everything],
) -> None:
    """Without ``total_budget`` the hits are read on their own (not with the neighbours):
    that read must apply the caller's filter too, the other retriever applied none."""
    store, other = two_tenants
    assert {d.metadata["tenant"] for d in other.invoke("shared_term")} == {
        "tenant-a",
        "tenant-b",
    }
    retriever = ContextWindowRetriever(vectorstore=store, candidates=other, k=4)
    for where in ({"tenant": "tenant-a"}, {"tenant": {"$ne": "tenant-b"}}):
        docs = retriever.invoke("shared_term", filter=where)
        assert docs and {d.metadata["tenant"] for d in docs} == {"tenant-a"}, where
        hits = retriever.hits("shared_term", filter=where)
        assert hits and {d.metadata["tenant"] for d in hits} == {"tenant-a"}, where
    assert {d.metadata["tenant"] for d in retriever.invoke("shared_term")} == {
        "tenant-a",
        "tenant-b",
    }


def test_another_retrievers_hit_whose_id_only_looks_like_a_chunk_id_is_read_by_its_id(
    make_store: Callable[..., Chroma],
) -> None:
    """An id "f:03" does not name chunk 3 of file f ("f:3" does): a hit stored under it is
    read by its own id, never replaced by what is stored where the id seems to point."""
    store = make_store()
    add_file_f(store)  # chunks f:0 to f:5, 50 characters each
    odd = Document("chunk 3, stored apart " + "y" * 30, metadata={"file_id": "f", "chunk_index": 3})
    store.add_documents([odd], ids=["f:03"])
    other = Everything(chunks=[Document(odd.page_content, metadata=odd.metadata, id="f:03")])
    for budget in ({"total_budget": 600}, {"k": 1}):
        docs = ContextWindowRetriever(vectorstore=store, candidates=other, **budget).invoke(
            "stored apart"
        )
        assert [d.metadata["hit_chunk_ids"] for d in docs] == [["f:03"]], budget
        assert "stored apart" in docs[0].page_content, budget


def test_windows_from_an_ensemble_retriever(store: Chroma) -> None:
    from langchain_classic.retrievers import EnsembleRetriever

    ensemble = EnsembleRetriever(
        retrievers=[
            store.as_retriever(search_kwargs={"k": 4}),
            store.as_retriever(search_type="mmr", search_kwargs={"k": 4, "fetch_k": 10}),
        ]
    )
    docs = ContextWindowRetriever(vectorstore=store, candidates=ensemble, total_budget=900).invoke(
        "pears"
    )
    assert docs
    assert sum(len(d.page_content) for d in docs) <= 900
    assert all(math.isfinite(d.metadata["score"]) for d in docs)


@pytest.mark.parametrize("outer", [{"k": 2}, {"total_budget": 900}])
def test_another_context_window_retrievers_windows_give_their_hits(
    store: Chroma, outer: dict[str, Any]
) -> None:
    """A window is no chunk: its hits are (``hit_chunk_ids``), alone or in an ensemble."""
    inner = ContextWindowRetriever(store, k=3)
    found = [hit for window in inner.invoke("pears") for hit in window.metadata["hit_chunk_ids"]]
    docs = ContextWindowRetriever(store, candidates=inner, **outer).invoke("pears")
    assert docs
    hits = [hit for d in docs for hit in d.metadata["hit_chunk_ids"]]
    assert set(hits) <= set(found)
    assert hits[0] == found[0]  # the inner retriever's best hit leads


def test_k_defaults_to_one_window_per_200_of_a_total_budget(store: Chroma) -> None:
    assert ContextWindowRetriever(vectorstore=store)._params({}).k == 4
    assert ContextWindowRetriever(vectorstore=store, total_budget=4000)._params({}).k == 20
    assert ContextWindowRetriever(vectorstore=store, total_budget=500)._params({}).k == 4
    assert ContextWindowRetriever(vectorstore=store, total_budget=4000, k=3)._params({}).k == 3


# ---- duplicates ------------------------------------------------------------------------------


def test_windows_of_the_same_text_come_back_once_with_every_copy_listed(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    page = "The limit is 40 requests a minute. Retries wait ten seconds. " * 6
    pages(
        store,
        {
            "tenant-a/copy-1": page,
            "tenant-a/copy-2": page.replace("  ", " "),  # the same text, spaced differently
            "tenant-a/last-year": page.replace("40", "30"),  # differs in a number: kept
        },
    )
    for arguments in ({"k": 3, "fetch_k": 30}, {"total_budget": 3000, "candidates": "vector"}):
        docs = ContextWindowRetriever(vectorstore=store, **arguments).invoke(page[:60])
        texts = [" ".join(d.page_content.split()) for d in docs]
        assert len(texts) == len(set(texts)), arguments
        copies = [d for d in docs if d.metadata.get("also_in")]
        assert copies, arguments
        listed = {place["source"] for d in copies for place in d.metadata["also_in"]}
        assert listed <= {"tenant-a/copy-1", "tenant-a/copy-2"}
        assert any("30 requests" in d.page_content for d in docs)


def test_texts_equal_but_for_unicode_forms_or_spacing_come_back_once(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    pages(
        store,
        {
            "tenant-a/plain": "The limit is 40 requests a minute for the file API.",
            "tenant-a/spaced": "The  limit is 40\nrequests a minute for the file API.",
            "tenant-a/compatible": "The limit is \uff14\uff10 requests a minute for the \ufb01le API.",
            "tenant-a/last-year": "The limit is 30 requests a minute for the file API.",
        },
    )
    copies = {"tenant-a/plain", "tenant-a/spaced", "tenant-a/compatible"}
    for arguments in ({"k": 4, "fetch_k": 10}, {"total_budget": 3000, "candidates": "vector"}):
        docs = ContextWindowRetriever(vectorstore=store, **arguments).invoke("limit")
        assert len(docs) == 2, arguments  # one of the three copies, and last year's text
        (kept,) = [d for d in docs if d.metadata["source"] in copies]
        listed = {place["source"] for place in kept.metadata["also_in"]}
        assert listed | {kept.metadata["source"]} == copies, arguments


def test_another_retrievers_hits_come_with_the_neighbours_in_one_fetch(
    two_tenants: tuple[Chroma, Everything], spy_on: Callable[[Chroma], Any]
) -> None:
    store, other = two_tenants
    retriever = ContextWindowRetriever(vectorstore=store, candidates=other, total_budget=1000)
    spy = spy_on(store)
    docs = retriever.invoke("shared_term", filter={"tenant": "tenant-a"})
    assert spy.calls == {"get": 1}  # the other retriever's hits, read with their neighbours
    assert docs and {d.metadata["tenant"] for d in docs} == {"tenant-a"}
    assert all(math.isfinite(score) for d in docs for score in d.metadata["hit_scores"])
    assert any(len(d.metadata["chunk_ids"]) > 1 for d in docs)
