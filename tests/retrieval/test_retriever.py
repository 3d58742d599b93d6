"""ContextWindowRetriever on a real (in-memory) Chroma with fake embeddings: fast, offline."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from tests.helpers.stores import StoreSpy, longest_pause
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    Fetch,
    Found,
    MissingWindowMetadataError,
    Search,
    WindowSplitter,
    WindowStore,
    add_chunks,
)


def sentences(name: str, count: int) -> str:
    return " ".join(
        f"{name.title()} sentence {i:02d} says a thing about {name}." for i in range(count)
    )


SOURCES = {name: sentences(name, 30) for name in ("alpha", "beta", "gamma")}


def split(
    documents: list[Document], size: int = 120, overlap: int = 30, **kwargs: Any
) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    )
    return WindowSplitter(splitter, **kwargs).split_documents(documents)


@pytest.fixture
def corpus(make_store: Callable[..., Chroma]) -> tuple[Chroma, list[Document]]:
    store = make_store()
    chunks = split(
        [Document(page_content=text, metadata={"source": name}) for name, text in SOURCES.items()]
    )
    add_chunks(store, chunks)
    return store, chunks


def twice(retriever: ContextWindowRetriever, query: str) -> list[Document]:
    """Ask twice: first with a full search, then (lengths now known) with the lean one.

    Filters must hold on both paths, and both must give the same windows.
    """
    first = retriever.invoke(query)
    assert retriever._lengths.typical() is not None or not first
    second = retriever.invoke(query)
    assert second == first
    return second


def chunk(chunks: list[Document], source: str, index: int) -> Document:
    return next(
        c for c in chunks if c.metadata["source"] == source and c.metadata["chunk_index"] == index
    )


def test_a_hit_grows_into_the_exact_source_span_with_provenance(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    store, chunks = corpus
    target = chunk(chunks, "beta", 6)
    retriever = ContextWindowRetriever(vectorstore=store, k=2, window_budget=400)
    docs = retriever.invoke(target.page_content)
    assert len(docs) == 2
    best = docs[0]
    meta = best.metadata
    assert meta["hit_chunk_ids"][0] == target.metadata["chunk_id"]
    assert meta["source"] == "beta"
    assert meta["file_id"] == target.metadata["file_id"]
    assert target.metadata["chunk_id"] in meta["chunk_ids"]
    assert len(meta["chunk_ids"]) > 1
    assert len(best.page_content) <= 400
    assert best.page_content == SOURCES["beta"][meta["start_index"] : meta["end_index"]]
    assert meta["score"] == min(meta["hit_scores"]) == pytest.approx(0.0, abs=1e-6)
    assert docs[0].metadata["score"] <= docs[1].metadata["score"]
    assert "chunk_index" not in meta
    assert "chunk_id" not in meta


def test_one_search_and_one_batched_fetch_per_query(
    corpus: tuple[Chroma, list[Document]], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store, chunks = corpus
    spy = spy_on(store)
    retriever = ContextWindowRetriever(vectorstore=store, k=4, window_budget=600)
    for source, index in [("alpha", 0), ("beta", 10), ("gamma", 12)]:
        spy.reset()
        docs = retriever.invoke(chunk(chunks, source, index).page_content)
        assert len(docs) == 4
        assert spy.calls == {"query": 1, "get": 1}
        ((_, fetch, _),) = [entry for entry in spy.log if entry[0] == "get"]
        assert fetch["where"] is None  # the fast path: ids only, filter applied in Python
        # sized from the budget, not the file (and, once lengths are known, the hits it reads)
        assert len(fetch["ids"]) <= 4 * (2 * 6 + 1) + 16


def test_no_fetch_when_no_window_can_grow(
    corpus: tuple[Chroma, list[Document]], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store, _chunks = corpus
    spy = spy_on(store)
    docs = ContextWindowRetriever(vectorstore=store, k=3, window_budget=10).invoke("alpha")
    assert len(docs) == 3
    assert all(len(d.metadata["chunk_ids"]) == 1 for d in docs)
    assert spy.calls == {"query": 1}


def test_short_neighbours_cost_one_more_fetch_and_the_window_still_fills(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    # One long chunk among many short ones: the plan (sized from the long hit) falls short.
    # (distinct short chunks: many identical vectors make Chroma's HNSW index unreliable)
    words = [f"w{i:03d}." for i in range(80)]
    text = " ".join(words[:40]) + " " + "L" * 300 + " " + " ".join(words[40:])
    store = make_store()
    chunks = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=6, chunk_overlap=0, separators=[" "])
    ).split_documents([Document(page_content=text, metadata={"source": "s"})])
    long_hit = next(c for c in chunks if "LLL" in c.page_content)
    add_chunks(store, chunks)
    spy = spy_on(store)
    docs = ContextWindowRetriever(vectorstore=store, k=1, window_budget=450, fetch_k=1).invoke(
        long_hit.page_content
    )
    assert spy.calls == {"query": 1, "get": 2}
    (doc,) = docs
    assert 440 <= len(doc.page_content) <= 450  # grew until the next short chunk did not fit
    assert doc.page_content == text[doc.metadata["start_index"] : doc.metadata["end_index"]]


class TwoHits(WindowStore):
    """A custom WindowStore: the search always finds gamma's chunks 5 and 7, the fetch is
    Chroma's own. It proves a store of one's own works end to end."""

    def __init__(self, store: Chroma, chunks: list[Document]) -> None:
        self.store = store
        self.hits = [(chunk(chunks, "gamma", 5), 0.1), (chunk(chunks, "gamma", 7), 0.3)]

    def search(self, request: Search) -> Found:
        hits = self.hits[: request.k]
        return Found([d for d, _ in hits], [s for _, s in hits])

    def fetch(self, request: Fetch) -> Found:
        return Found(self.store.get_by_ids(list(request.ids)))


def test_adjacent_hits_merge_into_one_document_with_the_best_score(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    store, chunks = corpus
    size = len(chunk(chunks, "gamma", 5).page_content)
    # each hit grows to about three chunks: 4..6 and 6..8 overlap, so they must merge
    retriever = ContextWindowRetriever(
        vectorstore=TwoHits(store, chunks), k=2, window_budget=3 * size
    )
    (doc,) = retriever.invoke("anything")
    assert doc.metadata["hit_chunk_ids"] == [
        chunk(chunks, "gamma", 5).metadata["chunk_id"],
        chunk(chunks, "gamma", 7).metadata["chunk_id"],
    ]
    indexes = [int(i.rsplit(":", 1)[1]) for i in doc.metadata["chunk_ids"]]
    assert indexes == list(range(min(indexes), max(indexes) + 1))
    assert min(indexes) < 5 and max(indexes) > 7
    assert doc.metadata["score"] == 0.1 == min(doc.metadata["hit_scores"])
    text = SOURCES["gamma"]
    assert doc.page_content == text[doc.metadata["start_index"] : doc.metadata["end_index"]]


@pytest.mark.parametrize("floor", [None, 0.0])
def test_k_windows_even_when_candidates_merge(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy], floor: float | None
) -> None:
    """A floor that drops no hit (0 keeps every one) does not stop the wider search."""
    store = make_store()
    documents = [Document(page_content=SOURCES["alpha"], metadata={"source": "alpha"})]
    documents += [
        Document(page_content=f"Note {i} on nothing.", metadata={"source": f"n{i}"})
        for i in range(2)
    ]
    chunks = split(documents)
    add_chunks(store, chunks)
    spy = spy_on(store)
    # fetch_k == k and a budget that holds all of alpha: the first candidates (alpha's, as
    # alpha has most chunks) merge into one window, so the search must widen to find k = 3
    retriever = ContextWindowRetriever(
        vectorstore=store, k=3, window_budget=5000, fetch_k=3, floor=floor
    )
    docs = retriever.invoke(chunk(chunks, "alpha", 3).page_content)
    assert len(docs) == 3
    assert len({d.metadata["file_id"] for d in docs}) == 3
    assert spy.calls["query"] >= 2


def test_fewer_documents_only_when_the_store_has_fewer(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    add_chunks(
        store, split([Document(page_content="Just one short text.", metadata={"source": "x"})])
    )
    assert len(ContextWindowRetriever(vectorstore=store, k=4).invoke("short")) == 1


@pytest.mark.parametrize(("mode", "side"), [("next", "after"), ("prev", "before")])
def test_one_sided_modes(corpus: tuple[Chroma, list[Document]], mode: str, side: str) -> None:
    store, chunks = corpus
    target = chunk(chunks, "alpha", 10)
    doc = ContextWindowRetriever(vectorstore=store, k=1, window_budget=500, mode=mode).invoke(
        target.page_content
    )[0]
    ids = doc.metadata["chunk_ids"]
    assert len(ids) > 1
    assert (ids[0] if side == "after" else ids[-1]) == target.metadata["chunk_id"]


# ---- security: what the filter hides never comes back through expansion ------------------


def test_a_hidden_chunk_never_appears_and_is_never_joined_across(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    chunks = split([Document(page_content=SOURCES["alpha"], metadata={"source": "alpha"})])
    for c in chunks:
        c.metadata["level"] = "secret" if c.metadata["chunk_index"] == 6 else "public"
    add_chunks(store, chunks)
    secret = chunk(chunks, "alpha", 6)
    retriever = ContextWindowRetriever(
        vectorstore=store, k=3, window_budget=2000, filter={"level": {"$ne": "secret"}}
    )
    docs = twice(retriever, chunk(chunks, "alpha", 5).page_content)
    for doc in docs:
        assert secret.metadata["chunk_id"] not in doc.metadata["chunk_ids"]
        indexes = [int(i.rsplit(":", 1)[1]) for i in doc.metadata["chunk_ids"]]
        assert not (min(indexes) < 6 < max(indexes))
    # what is behind the hidden chunk (7, 8, ...) is a window of its own, not joined to 5
    unique_to_secret = SOURCES["alpha"][
        secret.metadata["start_index"] + 30 : secret.metadata["start_index"] + 60
    ]
    assert all(unique_to_secret not in doc.page_content for doc in docs)


def test_tenants_never_see_each_other(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    text = SOURCES["beta"]
    documents = [
        Document(page_content=text, metadata={"source": "shared.txt", "tenant": "a"}),
        Document(
            page_content=text.replace("thing", "SECRET"),
            metadata={"source": "shared.txt", "tenant": "b"},
        ),
    ]
    chunks = split(documents, file_id_keys=("tenant", "source"))
    add_chunks(store, chunks)
    retriever = ContextWindowRetriever(
        vectorstore=store, k=4, window_budget=800, filter={"tenant": "a"}
    )
    # ask with tenant b's own words: the search must still only see tenant a
    docs = twice(retriever, next(c for c in chunks if c.metadata["tenant"] == "b").page_content)
    assert docs
    assert all(d.metadata["tenant"] == "a" and "SECRET" not in d.page_content for d in docs)


def test_each_chunks_own_access_metadata_is_respected(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    chunks = split([Document(page_content=SOURCES["gamma"], metadata={"source": "gamma"})])
    for c in chunks:  # alternate access levels inside one file
        c.metadata["access"] = c.metadata["chunk_index"] % 2
    add_chunks(store, chunks)
    retriever = ContextWindowRetriever(
        vectorstore=store, k=4, window_budget=3000, filter={"access": 0}
    )
    docs = twice(retriever, chunk(chunks, "gamma", 4).page_content)
    assert len(docs) == 4
    for doc in docs:  # every neighbour is hidden, so every window is its hit alone
        assert len(doc.metadata["chunk_ids"]) == 1
        assert int(doc.metadata["chunk_ids"][0].rsplit(":", 1)[1]) % 2 == 0


def test_a_filter_the_evaluator_cannot_decide_goes_to_the_store(
    make_store: Callable[..., Chroma], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store = make_store()
    chunks = split([Document(page_content=SOURCES["alpha"], metadata={"source": "alpha"})])
    for c in chunks:
        c.metadata["groups"] = ["staff"] if c.metadata["chunk_index"] != 6 else ["board"]
    add_chunks(store, chunks)
    spy = spy_on(store)
    where = {"groups": {"$contains": "staff"}}
    docs = twice(
        ContextWindowRetriever(vectorstore=store, k=2, window_budget=2000, filter=where),
        chunk(chunks, "alpha", 5).page_content,
    )
    assert all(
        chunk(chunks, "alpha", 6).metadata["chunk_id"] not in d.metadata["chunk_ids"] for d in docs
    )
    fetches = [kwargs for name, kwargs, _ in spy.log if name == "get"]
    assert fetches
    assert all(kwargs["where"] == where for kwargs in fetches)


def test_where_document_applies_to_neighbours(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    chunks = split([Document(page_content=SOURCES["alpha"], metadata={"source": "a"})])
    add_chunks(store, chunks)
    allowed = {c.metadata["chunk_id"] for c in chunks if "sentence 1" in c.page_content}
    assert 0 < len(allowed) < len(chunks)
    docs = twice(
        ContextWindowRetriever(
            vectorstore=store, k=2, window_budget=2000, where_document={"$contains": "sentence 1"}
        ),
        "alpha sentence 12",
    )
    assert docs
    for doc in docs:  # every chunk of every window contains "sentence 1", not just the hit
        assert set(doc.metadata["chunk_ids"]) <= allowed
    assert any(len(doc.metadata["chunk_ids"]) > 1 for doc in docs)  # neighbours did join


# ---- chunks without window metadata --------------------------------------------------------


def test_a_hit_without_window_metadata_is_returned_as_is_with_a_warning(
    make_store: Callable[..., Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store()
    store.add_texts(["a loose note about alpha"], metadatas=[{"source": "note"}], ids=["note-1"])
    retriever = ContextWindowRetriever(vectorstore=store, k=1)
    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        (doc,) = retriever.invoke("a loose note about alpha")
    assert doc.page_content == "a loose note about alpha"
    assert doc.metadata["source"] == "note"
    assert doc.metadata["chunk_ids"] == ["note-1"]
    assert "no integer 'chunk_index'" in caplog.text
    with pytest.raises(MissingWindowMetadataError, match="note-1"):
        ContextWindowRetriever(vectorstore=store, k=1, strict=True).invoke("a loose note")


def test_chunks_stored_under_other_ids_say_how_to_fix_it(
    make_store: Callable[..., Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store()
    chunks = split([Document(page_content=SOURCES["alpha"], metadata={"source": "a"})])
    # added without ids: Chroma gives them random uuids, so neighbours cannot be computed
    store.add_texts([c.page_content for c in chunks], metadatas=[c.metadata for c in chunks])
    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        docs = ContextWindowRetriever(vectorstore=store, k=2).invoke("alpha")
    assert len(docs) == 2
    assert "not stored under its chunk_id" in caplog.text
    assert "add_chunks" in caplog.text


# ---- sync and async, overrides, batch ------------------------------------------------------


async def test_async_never_holds_the_event_loop_for_a_store_call(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    import time

    store, chunks = corpus

    class SlowStore(WindowStore):
        """A blocking store: every call sleeps 0.2 s, as a slow network would."""

        def search(self, request: Search) -> Found:
            time.sleep(0.2)
            pairs = store.similarity_search_with_score(request.query, k=request.k)
            return Found([d for d, _ in pairs], [s for _, s in pairs])

        def fetch(self, request: Fetch) -> Found:
            time.sleep(0.2)
            return Found(store.get_by_ids(list(request.ids)))

    retriever = ContextWindowRetriever(vectorstore=SlowStore(), k=2, window_budget=400)
    pause, docs = await longest_pause(*(retriever.ainvoke(c.page_content) for c in chunks[:4]))
    assert all(docs)
    assert pause < 0.15  # a store call on the loop would stall it for 0.2 s


async def test_async_gives_the_same_windows_as_sync(corpus: tuple[Chroma, list[Document]]) -> None:
    store, chunks = corpus
    retriever = ContextWindowRetriever(vectorstore=store, k=3, window_budget=500)
    for c in chunks[::7]:
        sync = retriever.invoke(c.page_content)
        assert await retriever.ainvoke(c.page_content) == sync


def test_invoke_overrides_and_batch(corpus: tuple[Chroma, list[Document]]) -> None:
    store, _chunks = corpus
    retriever = ContextWindowRetriever(vectorstore=store, k=3)
    assert len(retriever.invoke("alpha", k=1)) == 1
    only_beta = retriever.invoke("alpha", filter={"source": "beta"})
    assert {d.metadata["source"] for d in only_beta} == {"beta"}
    assert [len(r) for r in retriever.batch(["alpha", "beta"])] == [3, 3]
    with pytest.raises(ConfigurationError, match=r"unknown argument.*'top_k'"):
        retriever.invoke("alpha", top_k=2)
    with pytest.raises(ConfigurationError, match=r"k .*must be a positive integer, got 0"):
        retriever.invoke("alpha", k=0)


# ---- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"k": 0}, r"k \(the number of windows to return\) must be a positive integer, got 0"),
        ({"window_budget": 0}, r"window_budget .* must be a positive integer, got 0"),
        ({"fetch_k": 2, "k": 4}, r"fetch_k must be at least k \(4\), got 2"),
        ({"mode": "around"}, r"argument 'mode': Input should be 'both', 'next' or 'prev'"),
        ({"filter": "tenant=a"}, r"argument 'filter'"),
        ({"length_function": 3}, r"argument 'length_function'"),
        ({"k": True}, r"argument 'k': Input should be a valid integer"),
        ({"budget": 500}, r"argument 'budget' is now 'window_budget'; pass window_budget="),
        ({"totl_budget": 500}, r"unknown argument 'totl_budget'.*did you mean 'total_budget'"),
    ],
)
def test_bad_arguments_raise_at_construction(
    corpus: tuple[Chroma, list[Document]], arguments: dict[str, Any], message: str
) -> None:
    store, _ = corpus
    with pytest.raises(ValueError, match=message) as caught:
        ContextWindowRetriever(vectorstore=store, **arguments)
    assert isinstance(caught.value, ConfigurationError)


def test_a_reassigned_vectorstore_is_the_one_queried(
    corpus: tuple[Chroma, list[Document]], make_store: Callable[..., Chroma]
) -> None:
    store, chunks = corpus
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    assert retriever.invoke(chunks[3].page_content)
    retriever.invoke(chunks[3].page_content)  # the lean search knows this store's chunks now
    empty = make_store()
    retriever.vectorstore = empty
    assert retriever.invoke(chunks[3].page_content) == []
    retriever.vectorstore = store
    assert retriever.invoke(chunks[3].page_content)


def test_an_unsupported_store_is_named() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    with pytest.raises(
        ConfigurationError, match=r"langchain_chroma.Chroma .*got InMemoryVectorStore"
    ):
        ContextWindowRetriever(vectorstore=InMemoryVectorStore(DeterministicFakeEmbedding(size=8)))


def test_a_chroma_subclass_with_a_fetch_method_is_still_chroma(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    from window_retriever import ChromaWindowStore

    store, chunks = corpus

    class MyChroma(Chroma):
        def fetch(self, *args: Any, **kwargs: Any) -> Any:  # an unrelated method of the user's
            raise AssertionError("never called by the retriever")

    mine = MyChroma(
        collection_name=store._collection.name,
        embedding_function=store.embeddings,
        client=store._client,
    )
    retriever = ContextWindowRetriever(vectorstore=mine, k=2)
    assert isinstance(retriever._store(), ChromaWindowStore)
    assert retriever.invoke(chunks[3].page_content)


# ---- what a LangChain user reaches for first (issue 41) ------------------------------------


def test_the_vectorstore_may_come_first_by_position(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    """``ContextWindowRetriever(vectorstore, **options)``, as the docs write it."""
    store, chunks = corpus
    query = chunks[3].page_content
    by_keyword = ContextWindowRetriever(vectorstore=store, k=2).invoke(query)
    assert ContextWindowRetriever(store, k=2).invoke(query) == by_keyword
    assert ContextWindowRetriever(store, total_budget=600).total_budget == 600
    with pytest.raises(ConfigurationError, match="vectorstore given twice"):
        ContextWindowRetriever(store, vectorstore=store)
    with pytest.raises(ConfigurationError, match="argument 'vectorstore': Field required"):
        ContextWindowRetriever(k=2)


@pytest.mark.parametrize("query", ["", " ", "\n\t "])
async def test_an_empty_query_is_refused_clearly(
    corpus: tuple[Chroma, list[Document]], query: str
) -> None:
    store, _ = corpus
    for options in ({"k": 2}, {"total_budget": 600}):
        retriever = ContextWindowRetriever(store, **options)
        with pytest.raises(ConfigurationError, match=r"^the query is empty \("):
            retriever.invoke(query)
        with pytest.raises(ConfigurationError, match=r"^the query is empty \("):
            await retriever.ainvoke(query)
        with pytest.raises(ConfigurationError, match=r"^the query is empty \("):
            retriever.hits(query)


def test_a_budget_error_carries_its_option_as_data(corpus: tuple[Chroma, list[Document]]) -> None:
    """So that a front end can say it its own way (the CLI: ``--total-budget``)."""
    store, _ = corpus
    for arguments, option in (
        ({"total_budget": -5}, "total_budget"),
        ({"window_budget": 0}, "window_budget"),
        ({"k": 0}, "k"),
        ({"keyword_weight": 500.0}, "keyword_weight"),
    ):
        with pytest.raises(ConfigurationError) as raised:
            ContextWindowRetriever(store, **arguments)
        assert raised.value.options == (option,)
        assert str(raised.value).startswith(f"{option} ")
    retriever = ContextWindowRetriever(store)
    with pytest.raises(ConfigurationError) as raised:
        retriever.invoke("alpha", total_budget=0)
    assert raised.value.options == ("total_budget",)


class UnitEmbeddings(DeterministicFakeEmbedding):
    """``DeterministicFakeEmbedding`` scaled to unit length, as real sentence embeddings are."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = super().embed_query(text)
        norm = sum(v * v for v in vector) ** 0.5
        return [v / norm for v in vector]


@pytest.mark.parametrize(
    "options",
    [{"k": 3}, {"total_budget": 700}, {"total_budget": 700, "expansion": "static"}],
    ids=["static", "adaptive", "budgeted-static"],
)
def test_relevance_score_is_higher_is_better_and_the_same_in_every_space(
    options: dict[str, Any],
) -> None:
    """LangChain's convention beside the distance: 0 to 1, from the space the store reports.

    For unit vectors the three spaces rank alike and the score is the cosine similarity in
    each, so one window has one ``relevance_score`` whatever the space; asked twice, the
    second time on the lean path (ids and distances first).
    """
    from window_retriever import MemoryWindowStore

    chunks = split(
        [Document(page_content=text, metadata={"source": name}) for name, text in SOURCES.items()]
    )
    found: dict[str, list[tuple[list[str], float]]] = {}
    for space in ("l2", "cosine", "ip"):
        store = MemoryWindowStore(UnitEmbeddings(size=16), space=space)
        add_chunks(store, chunks)
        retriever = ContextWindowRetriever(store, **options)
        docs = retriever.invoke("gamma sentence 07 says a thing")
        assert docs and retriever.invoke("gamma sentence 07 says a thing") == docs
        scale = 2.0 if space == "l2" else 1.0
        for doc in docs:
            relevance = doc.metadata["relevance_score"]
            assert 0.0 <= relevance <= 1.0
            assert relevance == pytest.approx(max(0.0, 1.0 - doc.metadata["score"] / scale))
        scores = [doc.metadata["relevance_score"] for doc in docs]
        assert scores == sorted(scores, reverse=True) or "total_budget" in options
        found[space] = [(d.metadata["chunk_ids"], d.metadata["relevance_score"]) for d in docs]
        for hit in retriever.hits("gamma sentence 07 says a thing"):
            assert hit.metadata["relevance_score"] == pytest.approx(
                max(0.0, 1.0 - hit.metadata["score"] / scale)
            )
    for space in ("cosine", "ip"):
        assert [ids for ids, _ in found[space]] == [ids for ids, _ in found["l2"]]
        assert [r for _, r in found[space]] == pytest.approx([r for _, r in found["l2"]])


def test_relevance_score_follows_a_cosine_chroma_collection_on_every_path(
    chroma_client: Any,
) -> None:
    """The default (hybrid, adaptive, the keyword index's stand-ins) and the plain path."""
    import uuid

    from tests.helpers.stores import drop_collection
    from window_retriever.stores._chroma_keywords import FEED_PREFIX

    name = f"test-cosine-{uuid.uuid4().hex[:8]}"
    store = Chroma(
        collection_name=name,
        embedding_function=UnitEmbeddings(size=16),
        client=chroma_client,
        collection_metadata={"hnsw:space": "cosine"},
    )
    try:
        add_chunks(store, split([Document(SOURCES["beta"], metadata={"source": "beta"})]))
        for options in ({"total_budget": 700}, {"k": 2}):
            retriever = ContextWindowRetriever(store, **options)
            docs = twice(retriever, "beta sentence 11 says a thing")
            assert docs
            for doc in docs:
                expected = max(0.0, 1.0 - doc.metadata["score"])  # cosine: 1 - d, as LangChain's
                assert doc.metadata["relevance_score"] == pytest.approx(expected)
    finally:
        feed = FEED_PREFIX + str(store._collection.id)
        drop_collection(chroma_client, name)
        drop_collection(chroma_client, feed)


def test_relevance_scores_of_each_space() -> None:
    from window_retriever.retrieval._records import relevance_score

    assert relevance_score(0.0, "l2") == 1.0
    assert relevance_score(1.0, "l2") == 0.5  # squared L2 of unit vectors at cosine 0.5
    assert relevance_score(4.0, "l2") == 0.0  # opposite: LangChain's 1 - d / sqrt(2) is -1.83
    assert relevance_score(0.25, "cosine") == 0.75
    assert relevance_score(1.5, "cosine") == 0.0
    assert relevance_score(0.25, "ip") == 0.75
    assert relevance_score(-0.5, "ip") == 1.0  # an inner product above 1: not a unit vector
    assert relevance_score(float("nan"), "l2") == 0.0


def test_a_window_id_names_its_chunk_range_and_its_chunk_ids_are_store_ids(
    corpus: tuple[Chroma, list[Document]],
) -> None:
    """What docs/api.md says of ``Document.id``: not a store id; ``chunk_ids`` are."""
    store, chunks = corpus
    for options in ({"k": 2}, {"total_budget": 800}):
        for doc in ContextWindowRetriever(store, **options).invoke(chunks[5].page_content):
            meta = doc.metadata
            assert (
                doc.id
                == f"{meta['file_id']}:{meta['first_chunk_index']}-{meta['last_chunk_index']}"
            )
            stored = store.get_by_ids(meta["chunk_ids"])
            assert sorted(d.id or "" for d in stored) == sorted(meta["chunk_ids"])
            assert store.get_by_ids([doc.id or ""]) == []


def test_a_collection_not_made_by_window_splitter_warns_once_per_retriever(
    make_store: Callable[..., Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store()
    notes = [f"a loose note {i} about alpha" for i in range(5)]
    store.add_texts(notes, metadatas=[{"source": "notes"}] * 5, ids=[f"n{i}" for i in range(5)])
    retriever = ContextWindowRetriever(store, k=5)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "window_retriever"]

    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        for _ in range(3):
            assert len(retriever.invoke("a loose note about alpha")) == 5
        (warning,) = warnings()
        assert "re-ingest the collection through WindowSplitter" in warning
        assert "stamp it in place with window_retriever.stamp_collection(vectorstore)" in warning
        assert "once" in warning
        caplog.clear()
        retriever.invoke("a loose note about alpha", total_budget=500)  # another path
        assert warnings() == []
        ContextWindowRetriever(store, k=5).invoke("a loose note about alpha")
        assert len(warnings()) == 1  # another retriever says so again
