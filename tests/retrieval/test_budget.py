"""total_budget on a real (in-memory) Chroma: one search, one fetch, never over the budget."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

import window_retriever.retrieval._params
from tests.helpers.corpora import (
    TOPICS,
    KeywordEmbeddings,
    ModernStore,
    TieFreeEmbeddings,
    UntiedKeywordEmbeddings,
    distinct_conversations,
    split,
    turns,
)
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    Fetch,
    Found,
    Search,
    WindowSplitter,
    WindowStore,
    add_chunks,
)
from window_retriever.keywords._lifecycle import COUNT_EVERY
from window_retriever.retrieval._candidates import SURVEY_WIDTH
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._chroma_keywords import keyword_index
from window_retriever.stores._protocol import execute


@pytest.fixture
def conversations(make_store: Callable[..., Chroma]) -> tuple[Chroma, list[Document]]:
    return conversations_in(make_store(KeywordEmbeddings()))


@pytest.fixture
def untied_conversations(make_store: Callable[..., Chroma]) -> tuple[Chroma, list[Document]]:
    """:func:`conversations` without ties: each search returns the same chunks every run."""
    return conversations_in(make_store(UntiedKeywordEmbeddings()))


def conversations_in(store: Chroma) -> tuple[Chroma, list[Document]]:
    documents = [
        Document(page_content=turns(80, seed), metadata={"source": f"conv-{seed}"})
        for seed in range(3)
    ]
    chunks = split(documents)
    add_chunks(store, chunks)
    return store, chunks


@pytest.mark.parametrize("expansion", ["adaptive", "static"])
def test_hybrid_costs_one_search_and_one_fetch_once_its_index_is_built(
    conversations: tuple[Chroma, list[Document]],
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
    expansion: str,
) -> None:
    """Every call the store receives is counted, the keyword index's own included: between
    two checks of the collection a query costs one search and one fetch; a check adds one
    ``get_collection`` (the generation token) once ``check_interval`` has passed since the
    last, and a ``count`` with it once ``COUNT_EVERY`` intervals have."""
    store, _ = conversations
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=800, expansion=expansion)
    retriever.invoke("warm the keyword index")
    clock = held_still(store)
    spy = spy_on(store)
    keyword_only = 0
    for topic in TOPICS:
        spy.reset()
        docs = retriever.invoke(f"what about {topic} and {TOPICS[0]}?")
        # the keyword leg's own hits come with the neighbours; the index asks nothing
        assert spy.calls == {"query": 1, "get": 1}, topic
        assert sum(len(d.page_content) for d in docs) <= 800
        ranks = [legs for d in docs for legs in d.metadata["hit_ranks"]]
        assert any("keyword" in legs for legs in ranks)
        keyword_only += sum(set(legs) == {"keyword"} for legs in ranks)
        scores = [score for d in docs for score in d.metadata["hit_scores"]]
        assert all(math.isfinite(score) and score >= 0 for score in scores)  # true distances
    assert keyword_only  # hits only the keyword leg found were read, windowed and returned
    interval = keyword_index(store).check_interval
    clock.now += interval  # a check is due: the token alone
    spy.reset()
    retriever.invoke(f"what about {TOPICS[1]}?")
    assert spy.calls == {"get_collection": 1, "query": 1, "get": 1}
    clock.now += COUNT_EVERY * interval  # the count is due too: the whole fingerprint
    spy.reset()
    retriever.invoke(f"what about {TOPICS[2]}?")
    assert spy.calls == {"get_collection": 1, "count": 1, "query": 1, "get": 1}


@pytest.mark.parametrize("expansion", ["static", "adaptive"])
@pytest.mark.parametrize("total", [300, 800, 2000])
def test_one_search_one_fetch_and_never_over_budget_where_hits_merge(
    untied_conversations: tuple[Chroma, list[Document]],
    spy_on: Callable[[Chroma], StoreSpy],
    expansion: str,
    total: int,
) -> None:
    store, _ = untied_conversations
    retriever = ContextWindowRetriever(
        vectorstore=store, k=12, total_budget=total, expansion=expansion, candidates="vector"
    )
    spy = spy_on(store)
    merged = 0
    for topic in TOPICS:
        spy.reset()
        docs = retriever.invoke(f"what about {topic}?")
        assert spy.calls == {"query": 1, "get": 1}, topic
        assert sum(len(d.page_content) for d in docs) <= total
        assert 1 <= len(docs) <= 12
        merged += sum(len(d.metadata["hit_chunk_ids"]) > 1 for d in docs)
        scores = [d.metadata["score"] for d in docs]
        assert scores == sorted(scores)
    assert merged > 0  # the data made hits merge, so the one-fetch rule was really tested


@pytest.mark.parametrize("candidates", ["vector", "hybrid"])
def test_adaptive_reads_no_neighbour_vector_and_the_hits_only_with_diversity(
    conversations: tuple[Chroma, list[Document]],
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
    candidates: str,
) -> None:
    """The search asks for ids and distances of a wider pool, the one fetch for texts and
    metadata: no vector on the wire. Diversity compares hits only: the same search brings
    the pool's vectors, and the fetch of the neighbours still none."""
    store, _ = conversations
    spy = spy_on(store)
    for diversity in (0.0, 0.5):
        retriever = ContextWindowRetriever(
            vectorstore=store, total_budget=800, candidates=candidates, diversity=diversity
        )
        retriever.invoke("warm the keyword index")
        if candidates == "hybrid":
            held_still(store)  # no check of the collection due (see held_still)
        spy.reset()
        docs = retriever.invoke(f"what about {TOPICS[2]}?")
        assert docs
        assert spy.calls == {"query": 1, "get": 1}
        (search,) = [kwargs for name, kwargs, _ in spy.log if name == "query"]
        (fetch,) = [kwargs for name, kwargs, _ in spy.log if name == "get"]
        if diversity == 0:
            assert search["include"] == ["distances"]
            assert search["n_results"] == SURVEY_WIDTH
            assert "embeddings" not in fetch["include"]
        else:
            assert search["include"] == ["distances", "embeddings"]
            assert search["n_results"] == SURVEY_WIDTH
            assert "embeddings" not in fetch["include"]  # no neighbour's vector


@pytest.mark.parametrize("candidates", ["vector", "hybrid"])
@pytest.mark.parametrize("mode", ["both", "next"])
@pytest.mark.parametrize(("total", "window_budget"), [(300, 1200), (800, 300), (2000, 1200)])
def test_a_survey_holding_every_chunk_gives_the_windows_vectors_give(
    make_store: Callable[..., Chroma],
    monkeypatch: pytest.MonkeyPatch,
    candidates: str,
    mode: str,
    total: int,
    window_budget: int,
) -> None:
    """With a pool as wide as the store, every chunk is measured by its own distance: the
    survey's windows are then exactly those of a store whose neighbours are measured by their
    vectors (so the plan fetched every hit and neighbour the selection could take)."""
    store = make_store(TieFreeEmbeddings(), exhaustive=True)
    # no two chunks alike (turns of one number and topic are in each conversation)
    chunks = split(distinct_conversations(80))
    add_chunks(store, chunks)
    monkeypatch.setattr("window_retriever.retrieval._candidates.SURVEY_WIDTH", len(chunks))
    options: dict[str, Any] = {
        "total_budget": total,
        "window_budget": window_budget,
        "mode": mode,
        "candidates": candidates,
    }
    surveyed = ContextWindowRetriever(vectorstore=store, **options)
    measured = ContextWindowRetriever(vectorstore=ModernStore(store), **options)
    surveyed.invoke("warm: learn the typical chunk length")
    for question in [*TOPICS, "camping and guitar", "pottery in the garden library"]:
        got = surveyed.invoke(question)
        want = measured.invoke(question)
        assert [d.metadata["chunk_ids"] for d in got] == [d.metadata["chunk_ids"] for d in want]
        # a fresh retriever knows no length yet: it reads far more, and uses only what it needs
        first = ContextWindowRetriever(vectorstore=store, **options).invoke(question)
        assert [d.metadata["chunk_ids"] for d in first] == [d.metadata["chunk_ids"] for d in want]
        assert [d.metadata["hit_chunk_ids"] for d in got] == [
            d.metadata["hit_chunk_ids"] for d in want
        ], question


def test_a_chunk_outside_the_survey_is_measured_at_its_farthest_distance(
    conversations: tuple[Chroma, list[Document]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pool chunks keep their own distance; any other is measured at the pool's farthest."""
    store, _ = conversations
    monkeypatch.setattr("window_retriever.retrieval._candidates.SURVEY_WIDTH", 12)
    seen: list[tuple[list[Any], dict[str, Any], dict[str, float]]] = []
    select = window_retriever.retrieval._params.select_adaptive

    def spy(hits: Any, pooled: Any, relevance: Any, **options: Any) -> Any:
        seen.append((hits, pooled, dict(relevance)))
        return select(hits, pooled, relevance, **options)

    monkeypatch.setattr("window_retriever.retrieval._params.select_adaptive", spy)
    retriever = ContextWindowRetriever(
        vectorstore=store, total_budget=1500, candidates="vector", k=4, fetch_k=4
    )
    retriever.invoke("camping")
    ((hits, pooled, relevance),) = seen
    pool = dict(
        store._collection.query(
            query_embeddings=[KeywordEmbeddings().embed_query("camping")],
            n_results=12,
            include=["distances"],
        ).items()
    )
    distances = dict(zip(pool["ids"][0], pool["distances"][0], strict=True))
    bound = max(distances.values())
    outside = [chunk.id for chunk in pooled.values() if chunk.id not in distances]
    assert outside  # the plan reached past the pool: the bound was really used
    for chunk in pooled.values():
        assert relevance[chunk.id] == pytest.approx(-distances.get(chunk.id, bound))
    assert len(hits) == 4


def test_a_keyword_hit_outside_the_survey_is_measured_at_its_farthest_distance(
    conversations: tuple[Chroma, list[Document]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hit only the keyword leg found, beyond the vector pool, has no distance of its own
    in a survey: it is at least as far as the pool's farthest, and is measured there (not at
    0, the distance of a chunk equal to the query)."""
    store, _ = conversations
    monkeypatch.setattr("window_retriever.retrieval._candidates.SURVEY_WIDTH", 12)
    retriever = ContextWindowRetriever(
        vectorstore=store, total_budget=1500, candidates="hybrid", k=4, fetch_k=8
    )
    question = "camping and guitar, turn 41 and turn 77?"  # the turn numbers: keyword only
    docs = retriever.invoke(question)
    pool = store._collection.query(
        query_embeddings=[KeywordEmbeddings().embed_query(question)],
        n_results=12,
        include=["distances"],
    )
    distances = dict(zip(pool["ids"][0], pool["distances"][0], strict=True))
    bound = max(distances.values())
    beyond = [
        score
        for d in docs
        for chunk_id, score, legs in zip(
            d.metadata["hit_chunk_ids"],
            d.metadata["hit_scores"],
            d.metadata["hit_ranks"],
            strict=True,
        )
        if chunk_id not in distances and set(legs) == {"keyword"}
    ]
    assert beyond  # the keyword leg found a hit the pool did not hold: the bound was used
    assert beyond == pytest.approx([bound] * len(beyond))


def test_adaptive_grows_toward_relevant_neighbours_and_static_grows_blindly(
    make_store: Callable[..., Chroma],
) -> None:
    # a run of turns about camping (one of them the best hit) among turns about pottery
    lines = [f"Caroline: turn {i} about pottery and more pottery." for i in range(20)]
    lines[8:14] = [f"Melanie: turn {i} camping and pottery." for i in range(8, 14)]
    lines[12] = "Melanie: turn 12 camping, camping at the lake."
    store = make_store(KeywordEmbeddings())
    chunks = split([Document(page_content="\n".join(lines), metadata={"source": "c"})], 60, 0)
    add_chunks(store, chunks)
    camping = [c for c in chunks if "camping" in c.page_content]
    run_length = len("\n".join(c.page_content for c in camping))

    # the search finds one hit; the rest of the run can only come from growth
    adaptive = ContextWindowRetriever(
        vectorstore=store, k=1, fetch_k=1, total_budget=run_length + 10
    )
    docs = adaptive.invoke("camping")
    whole = [
        d.metadata["chunk_ids"][: -1 if d.metadata.get("cut") == "end" else None] for d in docs
    ]
    assert whole == [[c.metadata["chunk_id"] for c in camping]]  # the last 10 filled in part

    static = ContextWindowRetriever(
        vectorstore=store, k=1, fetch_k=1, total_budget=run_length + 10, expansion="static"
    )
    blind = static.invoke("camping")[0]
    assert "pottery and more pottery" in blind.page_content  # blind growth spends budget on it


def test_a_hidden_chunk_never_comes_back_through_adaptive_growth(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store(KeywordEmbeddings())
    text = "\n".join(f"Melanie: turn {i} we went camping by the lake." for i in range(30))
    chunks = split([Document(page_content=text, metadata={"source": "c"})], 60, 0)
    for c in chunks:
        c.metadata["level"] = "secret" if c.metadata["chunk_index"] % 5 == 2 else "public"
    add_chunks(store, chunks)
    secret = {c.metadata["chunk_id"] for c in chunks if c.metadata["level"] == "secret"}
    for coherence in (0.5, 1.0):
        retriever = ContextWindowRetriever(
            vectorstore=store,
            k=6,
            total_budget=1500,
            coherence=coherence,
            filter={"level": "public"},
        )
        docs = retriever.invoke("camping")
        for doc in docs:
            ids = doc.metadata["chunk_ids"]
            assert not secret & set(ids)
            indexes = [int(i.rsplit(":", 1)[1]) for i in ids]
            assert indexes == list(range(indexes[0], indexes[-1] + 1))


def test_where_document_applies_to_adaptive_neighbours(make_store: Callable[..., Chroma]) -> None:
    store = make_store(KeywordEmbeddings())
    lines = [f"Melanie: turn {i} we went camping by the lake." for i in range(12)]
    lines[5] = "Melanie: turn 5 we went camping, FORBIDDEN words here by the lake."
    chunks = split([Document(page_content="\n".join(lines), metadata={"source": "c"})], 60, 0)
    add_chunks(store, chunks)
    retriever = ContextWindowRetriever(
        vectorstore=store,
        k=4,
        total_budget=2000,
        coherence=1.0,
        where_document={"$not_contains": "FORBIDDEN"},
    )
    docs = retriever.invoke("camping")
    assert docs
    assert all("FORBIDDEN" not in d.page_content for d in docs)
    for doc in docs:
        indexes = [int(i.rsplit(":", 1)[1]) for i in doc.metadata["chunk_ids"]]
        assert not (min(indexes) < 5 < max(indexes))


def test_a_best_hit_longer_than_the_whole_budget_comes_back_alone(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    for expansion in ("static", "adaptive"):
        docs = ContextWindowRetriever(
            vectorstore=store, total_budget=20, expansion=expansion
        ).invoke("pottery")
        assert len(docs) == 1
        assert docs[0].metadata["over_budget"] is True
        assert len(docs[0].metadata["chunk_ids"]) == 1
        assert len(docs[0].page_content) > 20


def test_token_budgets_hold_with_any_length_function(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations

    def words(text: str) -> int:
        return len(text.split())

    for expansion in ("static", "adaptive"):
        retriever = ContextWindowRetriever(
            vectorstore=store,
            k=10,
            total_budget=120,
            window_budget=60,
            expansion=expansion,
            length_function=words,
        )
        for topic in TOPICS:
            docs = retriever.invoke(topic)
            assert sum(words(d.page_content) for d in docs) <= 120


def rare_word_tokens(text: str) -> int:
    """A token-like count that is not additive over joins: a word of more than 8 letters is
    rare and costs 10 tokens, so a word cut at a seam costs less in two pieces than whole."""
    return sum(10 if len(word) > 8 else 1 for word in text.split())


def test_the_total_holds_when_windows_cost_more_whole_than_in_pieces(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store(KeywordEmbeddings())
    documents = [
        Document(
            page_content=turns(80, seed).replace("about", "aboutwardly"),
            metadata={"source": f"conv-{seed}"},
        )
        for seed in range(3)
    ]
    # cut every 40 characters, inside words: "Caro" + "line:" is 2 tokens, "Caroline:" 10
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=40, chunk_overlap=0, separators=[""], add_start_index=True
    )
    add_chunks(store, WindowSplitter(splitter).split_documents(documents))
    for expansion in ("static", "adaptive"):
        for total in (90, 150):
            retriever = ContextWindowRetriever(
                vectorstore=store,
                k=8,
                total_budget=total,
                window_budget=total // 2,
                expansion=expansion,
                length_function=rare_word_tokens,
            )
            for topic in TOPICS:
                docs = retriever.invoke(topic)
                assert sum(rare_word_tokens(d.page_content) for d in docs) <= total, topic


def test_total_budget_per_call_and_without_it_nothing_changes(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    retriever = ContextWindowRetriever(vectorstore=store, k=3, window_budget=300)
    plain_windows = retriever.invoke("garden")
    assert len(plain_windows) == 3
    assert "over_budget" not in plain_windows[0].metadata
    budgeted = retriever.invoke("garden", total_budget=250)
    assert sum(len(d.page_content) for d in budgeted) <= 250
    assert retriever.invoke("garden") == plain_windows


async def test_async_gives_the_same_budgeted_windows(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    retriever = ContextWindowRetriever(vectorstore=store, k=8, total_budget=900)
    for topic in TOPICS[:3]:
        assert await retriever.ainvoke(topic) == retriever.invoke(topic)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"expansion": "adaptive"}, r"expansion='adaptive' shares one budget.*total_budget"),
        ({"total_budget": 0}, r"total_budget \(the most all windows.*\) must be a positive"),
        ({"total_budget": 100, "coherence": 1.5}, r"coherence must be a number from 0 to 1"),
        ({"total_budget": 100, "expansion": "wide"}, r"expansion.*'static'.*'adaptive'"),
    ],
)
def test_bad_budget_arguments_are_named(
    conversations: tuple[Chroma, list[Document]], arguments: dict[str, Any], message: str
) -> None:
    store, _ = conversations
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store, **arguments)
    retriever = ContextWindowRetriever(vectorstore=store)
    with pytest.raises(ConfigurationError, match=message):
        retriever.invoke("pottery", **arguments)


class SearchAndFetchOnly(WindowStore):
    """A custom store with no embeddings to give: static works, adaptive says why not."""

    def __init__(self, store: Chroma) -> None:
        self.store = store

    def search(self, request: Search) -> Found:
        pairs = self.store.similarity_search_with_score(request.query, k=request.k)
        return Found([d for d, _ in pairs], [s for _, s in pairs])

    def fetch(self, request: Fetch) -> Found:
        return Found(self.store.get_by_ids(list(request.ids)))


def test_a_store_without_embeddings_serves_static_and_names_the_fix_for_adaptive(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    custom = SearchAndFetchOnly(store)
    static = ContextWindowRetriever(vectorstore=custom, total_budget=500, expansion="static")
    docs = static.invoke("camping")
    assert docs and sum(len(d.page_content) for d in docs) <= 500
    adaptive = ContextWindowRetriever(vectorstore=custom, total_budget=500)
    with pytest.raises(
        ConfigurationError, match=r"SearchAndFetchOnly does not \(supports_embeddings"
    ):
        adaptive.invoke("camping")


class OlderStore(WindowStore):
    """A custom store written before ``Search.query_embedding``: the query's vector comes only
    with ``embeddings=True`` (with the hits' vectors), as rule 5 first said."""

    supports_embeddings: ClassVar[bool] = True

    def __init__(self, store: Chroma) -> None:
        self.inner = store_adapter(store)
        self.searches: list[Search] = []

    def search(self, request: Search) -> Found:
        self.searches.append(request)
        return execute(self.inner, replace(request, query_embedding=False))

    def fetch(self, request: Fetch) -> Found:
        return execute(self.inner, request)


def test_a_store_that_predates_query_embedding_is_asked_for_embeddings(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    older = OlderStore(store)
    question = f"what about {TOPICS[1]}?"
    modern = ModernStore(store)  # the same path (vectors measure neighbours), asked the new way
    expected = ContextWindowRetriever(vectorstore=modern, total_budget=800, candidates="vector")
    retriever = ContextWindowRetriever(vectorstore=older, total_budget=800, candidates="vector")
    docs = retriever.invoke(question)
    assert all(request.embeddings for request in older.searches)  # the query's vector came too
    assert [d.metadata["chunk_ids"] for d in docs] == [
        d.metadata["chunk_ids"] for d in expected.invoke(question)
    ]
    assert not any(request.embeddings for request in modern.searches)


# ---- bad input, one clear error ------------------------------------------------------------------


def test_bad_queries_filters_and_length_functions_are_named(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, _ = conversations
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    with pytest.raises(ConfigurationError, match="the query must be a string, got NoneType"):
        retriever.invoke(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"unknown operator '\$foo' on 'tenant'"):
        retriever.invoke("pottery", filter={"tenant": {"$foo": 1}})
    with pytest.raises(ConfigurationError, match=r"\$and takes a list of two or more"):
        ContextWindowRetriever(vectorstore=store, filter={"$and": [{"a": 1}]})
    assert retriever.invoke("pottery", filter={}) == retriever.invoke("pottery")
    halves = ContextWindowRetriever(vectorstore=store, length_function=lambda t: len(t) / 3)
    with pytest.raises(TypeError, match=r"length_function must return an int.*got \d"):
        halves.invoke("pottery")


def test_a_window_budget_in_the_millions_asks_chroma_for_what_can_exist(
    conversations: tuple[Chroma, list[Document]], spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    store, chunks = conversations
    spy = spy_on(store)
    docs = ContextWindowRetriever(vectorstore=store, k=2, window_budget=10**9).invoke("garden")
    assert docs
    fetched = [len(kwargs["ids"]) for name, kwargs, _ in spy.log if name == "get"]
    assert fetched and max(fetched) <= 30_000
    longest = max(len(d.metadata["chunk_ids"]) for d in docs)
    assert longest == max(
        sum(1 for c in chunks if c.metadata["file_id"] == d.metadata["file_id"]) for d in docs
    )  # the whole file: the budget was never the limit


class FixedEmbeddings(Embeddings):
    """Vectors that are not unit-length: an L2 store ranks them otherwise than cosine."""

    VECTORS: ClassVar[dict[str, list[float]]] = {
        "question": [1.0, 0.0],
        "short": [0.9, 0.5],
        "LONG": [3.0, 0.0],
    }

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return next(v for key, v in self.VECTORS.items() if text.startswith(key))


def test_adaptive_ranks_by_the_stores_own_distance(make_store: Callable[..., Chroma]) -> None:
    store = make_store(FixedEmbeddings())  # Chroma's default space: squared L2
    documents = [
        Document(page_content="short relevant answer", metadata={"source": "s"}),
        Document(page_content="LONG " + "x" * 300, metadata={"source": "l"}),
    ]
    add_chunks(store, split(documents, size=400, overlap=0))
    for expansion in ("static", "adaptive"):
        docs = ContextWindowRetriever(
            vectorstore=store, total_budget=100, expansion=expansion
        ).invoke("question")
        assert docs[0].page_content == "short relevant answer", expansion
        assert all(d.metadata.get("cut") == "end" for d in docs[1:])  # the rest, in part
        assert "over_budget" not in docs[0].metadata
    # room for one of two short chunks: the nearer by L2 wins, though the other's cosine is 1
    add_chunks(store, split([Document(page_content="LONG tiny one", metadata={"source": "t"})]))
    docs = ContextWindowRetriever(vectorstore=store, total_budget=25).invoke("question")
    assert docs[0].page_content == "short relevant answer"
    assert all(d.metadata.get("cut") == "end" for d in docs[1:])


def test_hits_without_ids_or_metadata_stay_apart_and_duplicates_count_once(
    conversations: tuple[Chroma, list[Document]],
) -> None:
    store, chunks = conversations

    class Bare(WindowStore):
        def search(self, request: Search) -> Found:
            twice = chunks[4]
            return Found(
                [
                    Document(page_content="first answer"),
                    Document(page_content="second, different answer"),
                    twice,
                    twice,
                    Document(page_content="third"),
                ],
                [0.1, 0.2, 0.25, 0.25, 0.3],
            )

        def fetch(self, request: Fetch) -> Found:
            return Found(store.get_by_ids(list(request.ids)))

    for arguments in ({"k": 4}, {"k": 4, "total_budget": 2000, "expansion": "static"}):
        docs = ContextWindowRetriever(vectorstore=Bare(), **arguments).invoke("q")
        texts = [d.page_content for d in docs]
        assert "first answer" in texts and "second, different answer" in texts, arguments
        counted = [i for d in docs for i in d.metadata["hit_chunk_ids"]]
        assert counted.count(chunks[4].metadata["chunk_id"]) == 1
