"""The relevance floor and diversity between windows, on hand-made embeddings in a real Chroma."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ConfigurationError, ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.evaluation import parse_configs
from window_retriever.evaluation.questions import Question
from window_retriever.evaluation.runner import make_retrieve


class TaggedEmbeddings(Embeddings):
    """A text's vector is chosen by its first word (its tag), normalised to unit length."""

    VECTORS: ClassVar[dict[str, list[float]]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = self.VECTORS[text.split()[0]]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]


def store_of(
    make_store: Callable[..., Chroma], embeddings: Embeddings, texts: dict[str, str]
) -> Chroma:
    """One file per text (``source`` its key), each text one chunk."""
    store = make_store(embeddings)
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=0, add_start_index=True)
    )
    documents = [Document(page_content=text, metadata={"source": s}) for s, text in texts.items()]
    add_chunks(store, splitter.split_documents(documents))
    return store


def sources(documents: list[Document]) -> set[str]:
    return {document.metadata["source"] for document in documents}


class FloorEmbeddings(TaggedEmbeddings):
    VECTORS: ClassVar[dict[str, list[float]]] = {
        "Q": [1.0, 0.0, 0.0],  # the query
        "A": [1.0, 0.1, 0.0],  # strong hits: cosine 0.995 and 0.98 to the query
        "B": [1.0, 0.2, 0.0],
        "W": [0.2, 1.0, 0.0],  # weak: cosine 0.2
        "X": [0.0, 0.0, 1.0],  # weakest: cosine 0
    }


FLOOR_TEXTS = {
    "a": "A the strong answer about the river crossing",
    "b": "B another strong answer about the river crossing",
    # the keyword leg ranks the weak chunk first: it alone holds the query's word, twice
    "w": "W zebra zebra stripes in a weak passage",
    "x": "X nothing to see here at all",
}

STRATEGIES = [
    pytest.param({}, id="static"),
    pytest.param({"total_budget": 2000, "expansion": "static"}, id="budgeted-static"),
    pytest.param({"total_budget": 2000}, id="adaptive"),
]


@pytest.mark.parametrize("candidates", ["vector", "hybrid"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_floor_drops_a_weak_hit_and_keeps_the_strong_ones(
    make_store: Callable[..., Chroma], strategy: dict[str, Any], candidates: str
) -> None:
    store = store_of(make_store, FloorEmbeddings(), FLOOR_TEXTS)
    query = "Q zebra"
    everything = ContextWindowRetriever(vectorstore=store, candidates=candidates, **strategy)
    assert sources(everything.invoke(query)) == {"a", "b", "w", "x"}
    if candidates == "hybrid":  # fused, the weak hit ranks above a strong one
        first = everything.hits(query)[0]
        assert first.metadata["source"] == "w" and first.metadata["hit_ranks"]["keyword"] == 1
    floored = ContextWindowRetriever(
        vectorstore=store, candidates=candidates, floor=0.5, **strategy
    )
    for _ in range(2):  # the second call of a static retriever searches for ids alone
        assert sources(floored.invoke(query)) == {"a", "b"}
    assert sources(floored.hits(query)) == {"a", "b"}
    # 0 keeps every hit; 1 keeps only the best; a per-call value overrides the retriever's
    assert sources(floored.invoke(query, floor=0.0)) == {"a", "b", "w", "x"}
    assert sources(floored.invoke(query, floor=1.0)) == {"a"}
    assert sources(everything.invoke(query, floor=0.5)) == {"a", "b"}


def test_a_hit_under_the_floor_still_joins_a_stronger_window_as_its_neighbour(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store(FloorEmbeddings())
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=0, add_start_index=True)
    )
    text = "A the strong answer about the river crossing.\nW zebra zebra stripes in a weak bit."
    chunks = splitter.split_documents([Document(page_content=text, metadata={"source": "f"})])
    assert len(chunks) == 2
    add_chunks(store, chunks)
    add_chunks(
        store, splitter.split_documents([Document(FLOOR_TEXTS["x"], metadata={"source": "x"})])
    )
    docs = ContextWindowRetriever(vectorstore=store, k=1, floor=0.6).invoke("Q")
    (window,) = docs
    assert "zebra" in window.page_content  # grown over the weak chunk, as a neighbour
    assert window.metadata["hit_chunk_ids"] == [chunks[0].metadata["chunk_id"]]  # not a hit


class TopicEmbeddings(TaggedEmbeddings):
    VECTORS: ClassVar[dict[str, list[float]]] = {
        "Q": [1.0, 0.0, 0.0],
        "A": [0.95, 0.3122, 0.0],  # the best hit: cosine 0.95 to the query
        "C": [0.94, 0.3412, 0.0],  # a near-copy of A: 0.9995 to it, 0.94 to the query
        "D": [0.93, -0.35, 0.11],  # another topic: 0.77 to A, 0.93 to the query
    }


TOPIC_TEXTS = {
    "a": "A the ferry leaves the north pier at nine each morning.",
    "c": "C the ferry leaves the north pier at nine every morning",
    "d": "D tickets are sold at the kiosk next to the harbour gate",
}


@pytest.mark.parametrize("candidates", ["vector", "hybrid"])
def test_diversity_opens_a_window_on_another_topic_before_a_near_copy(
    make_store: Callable[..., Chroma],
    candidates: str,
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
) -> None:
    store = store_of(make_store, TopicEmbeddings(), TOPIC_TEXTS)
    budget = 2 * max(len(text) for text in TOPIC_TEXTS.values())  # room for two windows
    plain = ContextWindowRetriever(vectorstore=store, total_budget=budget, candidates=candidates)
    assert [d.metadata["source"] for d in plain.invoke("Q")] == ["a", "c"]
    assert [d.metadata["source"] for d in plain.invoke("Q", diversity=0.0)] == ["a", "c"]
    diverse = ContextWindowRetriever(
        vectorstore=store, total_budget=budget, candidates=candidates, diversity=0.5
    )
    if candidates == "hybrid":
        held_still(store)  # no check of the collection due: the query's own calls
    spy = spy_on(store)
    assert [d.metadata["source"] for d in diverse.invoke("Q")] == ["a", "d"]
    assert spy.calls["query"] == 1  # no store call more: the stored vectors came back already
    assert spy.calls["get"] <= (1 if candidates == "vector" else 2)
    assert set(spy.calls) <= {"query", "get"}, spy.calls
    # C leads D by 0.02 of squared L2 distance; D is 0.23 cosine less like A: the choice
    # turns at diversity 0.02 / (2 * 0.23), about 0.044
    assert [d.metadata["source"] for d in diverse.invoke("Q", diversity=0.03)] == ["a", "c"]
    assert [d.metadata["source"] for d in diverse.invoke("Q", diversity=0.06)] == ["a", "d"]


def test_diversity_zero_is_the_selection_without_it(make_store: Callable[..., Chroma]) -> None:
    """Many files of several chunks each: windows grow, merge and compete; 0 changes nothing."""

    class Words(TaggedEmbeddings):
        def embed_query(self, text: str) -> list[float]:
            words = ("ferry", "ticket", "harbour", "morning", "kiosk", "gate", "pier", "nine")
            vector = [float(text.count(word)) + 0.05 * len(text) % 1 for word in words] + [0.1]
            norm = math.sqrt(sum(v * v for v in vector))
            return [v / norm for v in vector]

    store = make_store(Words())
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=80, chunk_overlap=10, add_start_index=True)
    )
    words = ("ferry", "ticket", "harbour", "morning", "kiosk", "gate", "pier", "nine")
    documents = [
        Document(
            page_content=" ".join(
                f"{words[(f * 3 + i) % 8]} and {words[(f + i * i) % 8]} line {i}."
                for i in range(12)
            ),
            metadata={"source": f"file-{f}"},
        )
        for f in range(6)
    ]
    add_chunks(store, splitter.split_documents(documents))
    changed = 0
    for query in ("ferry pier", "ticket kiosk gate", "harbour morning nine", "gate"):
        for budget in (200, 500):
            today = ContextWindowRetriever(vectorstore=store, total_budget=budget).invoke(query)
            zero = ContextWindowRetriever(vectorstore=store, total_budget=budget, diversity=0)
            assert zero.invoke(query) == today, (query, budget)
            diverse = ContextWindowRetriever(vectorstore=store, total_budget=budget, diversity=1)
            windows = diverse.invoke(query)
            assert sum(len(d.page_content) for d in windows) <= budget
            changed += windows != today
    assert changed >= 4  # the corpus is one where diversity matters


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("floor", -0.1, r"floor must be a number from 0 to 1 .*got -0\.1"),
        ("floor", 1.5, r"floor must be a number from 0 to 1 .*None to keep every hit, got 1\.5"),
        ("floor", "0.5", r"floor.* (a|valid) number"),
        ("floor", True, r"floor.* (a|valid) number"),
        ("floor", math.nan, r"floor must be a number .*got nan"),
        ("diversity", -0.5, r"diversity must be a number from 0 \(off\) to 1, got -0\.5"),
        ("diversity", 2, r"diversity must be a number from 0 \(off\) to 1, got 2"),
        ("diversity", None, r"diversity.* (a|valid) number"),
        ("diversity", False, r"diversity.* (a|valid) number"),
    ],
)
def test_out_of_range_options_are_refused(
    make_store: Callable[..., Chroma], option: str, value: Any, message: str
) -> None:
    store = make_store()
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store, **{option: value})
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=500)
    with pytest.raises(ConfigurationError, match=message):
        retriever.invoke("q", **{option: value})


def test_the_evaluation_takes_floor_and_diversity_as_numbers(
    make_store: Callable[..., Chroma],
) -> None:
    store = store_of(make_store, FloorEmbeddings(), FLOOR_TEXTS)
    configs = parse_configs("window:floor=0.5,window:diversity=0.3,window:floor=none")
    assert [c.options for c in configs] == [
        {"floor": "0.5"},
        {"diversity": "0.3"},
        {"floor": "none"},
    ]
    question = Question(line=1, question="Q zebra")
    texts = {c.name: [p.text for p in make_retrieve(c, store)(question, 2000)] for c in configs}
    assert len(texts["window:floor=0.5"]) == 2 and len(texts["window:floor=none"]) == 4
    assert len(texts["window:diversity=0.3"]) == 4
    with pytest.raises(ConfigurationError, match=r"option floor='high' .* must be a number"):
        parse_configs("window:floor=high")
    with pytest.raises(ConfigurationError, match=r"option diversity='x' .* must be a number"):
        parse_configs("window:diversity=x")


def test_diversity_compares_hits_only_a_neighbours_vector_never() -> None:
    """A window's likeness to a hit is that of the hits it holds: a neighbour's stored vector
    (read where there is no survey, to measure it against the query) is never compared."""
    from window_retriever.core._windows import Chunk, Hit
    from window_retriever.retrieval._adaptive_strategy import cosines
    from window_retriever.retrieval._pool import Pool

    hits = [Hit(Chunk("f:0", "a", "f", 0), 0.1), Hit(Chunk("g:0", "b", "g", 0), 0.2)]
    neighbour = Chunk("f:1", "c", "f", 1)
    pool = Pool(
        hits,
        {("f", 0): hits[0].chunk, ("g", 0): hits[1].chunk, ("f", 1): neighbour},
        vectors={"f:0": [1.0, 0.0], "g:0": [0.6, 0.8], "f:1": [0.0, 1.0]},
    )
    similarity = cosines(pool)
    assert similarity("f:1") is None  # a neighbour: not compared, though its vector is held
    assert similarity("f:0") == pytest.approx([1.0, 0.6])
    assert similarity("g:0") == pytest.approx([0.6, 1.0])
