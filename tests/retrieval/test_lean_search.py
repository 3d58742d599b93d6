"""The lean search: ids and distances only, then one fetch of the hits it uses and their
neighbours. It must give exactly what the full search gives, and fall back where it cannot."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from tests.helpers.corpora import TOPICS, KeywordEmbeddings, split, turns
from tests.helpers.stores import StoreSpy, add_file_f
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.core._ids import make_chunk_id
from window_retriever.retrieval._pool import position_of


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
    from window_retriever import ChromaWindowStore, Fetch, Found, Search, WindowStore
    from window_retriever.evaluation import CountingStore

    class Minimal(WindowStore):  # a WindowStore with the two required methods only
        def __init__(self) -> None:
            self.inner = ChromaWindowStore(conversations)

        def search(self, request: Search) -> Found:
            return self.inner.search(request)

        def fetch(self, request: Fetch) -> Found:
            return self.inner.fetch(request)

    counting = CountingStore(Minimal())
    retriever = ContextWindowRetriever(vectorstore=counting, k=3, window_budget=300)
    direct = ContextWindowRetriever(vectorstore=conversations, k=3, window_budget=300)
    for topic in TOPICS:
        before = counting.calls
        assert retriever.invoke(topic) == direct.invoke(topic)
        assert counting.calls - before >= 2
    assert retriever._lengths.typical() is not None  # the later calls took the lean path


class RankEmbeddings(Embeddings):
    """``[rN]`` in a text puts it at angle 0.01 * N from the query; other texts lie far off."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]

    @staticmethod
    def _vector(text: str) -> list[float]:
        found = re.search(r"\[r(\d+)\]", text)
        if found:
            angle = 0.01 * int(found.group(1))
        else:  # far off, and apart from each other (identical vectors upset the HNSW graph)
            number = re.search(r"(\d+)", text)
            angle = 0.5 + 0.01 * int(number.group(1) if number else 0) + 0.3 * text.startswith("l")
        return [math.cos(angle), math.sin(angle)]


@pytest.mark.parametrize("floor", [None, 0.5])
def test_a_candidate_the_lean_fetch_left_unread_is_never_skipped(
    make_store: Callable[..., Chroma], floor: float | None
) -> None:
    """Lengths learned on long chunks, then a query into a file of short ones.

    The two best hits merge into one window (s:1-34, a hidden chunk at s:37 ends it); the
    third best sits in another file and was not read; the fourth was read as a neighbour (of
    the window after the gap). It must not take the third's place. A floor that drops the
    fourth (0.5) still leaves the third to read: the hits it kept are not all windows yet.
    """
    store = make_store(RankEmbeddings())
    ranks = {("s", 10): 0, ("s", 25): 1, ("long", 5): 2, ("s", 43): 3}
    documents, ids = [], []
    for file_id, count, size in (("long", 10, 400), ("s", 60, 20)):
        for i in range(count):
            tag = f"[r{ranks[(file_id, i)]}]" if (file_id, i) in ranks else ""
            text = (tag + f"{file_id}{i}" + "." * size)[:size]
            metadata = {"file_id": file_id, "chunk_index": i, "start_index": i * (size + 1)}
            metadata["tenant"] = "b" if (file_id, i) == ("s", 37) else "a"  # a gap at s:37
            documents.append(Document(text, metadata={**metadata, "chunk_id": f"{file_id}:{i}"}))
            ids.append(f"{file_id}:{i}")
    store.add_documents(documents, ids=ids)
    options: dict[str, Any] = {"k": 2, "window_budget": 400, "fetch_k": 4, "floor": floor}
    options["filter"] = {"tenant": "a"}
    warm = ContextWindowRetriever(vectorstore=store, **options)
    warm.invoke("warm up", filter={"file_id": "long"})
    assert warm._lengths.typical() == 400
    lean = warm.invoke("q")
    assert lean == ContextWindowRetriever(vectorstore=store, **options).invoke("q")
    assert [d.id for d in lean] == ["s:1-34", "long:5-5"]  # the third best, not the fourth


@pytest.mark.parametrize(
    ("chunk_id", "position"),
    [
        ("f:3", ("f", 3)),
        ("f:0", ("f", 0)),
        ("a:b:12", ("a:b", 12)),  # the file id may hold a colon: the last one splits
        ("f:03", None),  # not the id of chunk 3 ("f:3" is): make_chunk_id never writes it
        ("f:00", None),
        ("f:\u00b2", None),  # a superscript two: a digit to str.isdigit, not to int()
        ("f:\u0663", None),  # an Arabic-Indic three: int() reads it, make_chunk_id never writes it
        ("f:-3", None),
        ("f:+3", None),
        ("f: 3", None),
        ("f:3 ", None),
        (":3", None),
        ("f:", None),
        ("f3", None),
    ],
)
def test_an_id_names_a_position_only_as_make_chunk_id_writes_it(
    chunk_id: str, position: tuple[str, int] | None
) -> None:
    """Only the canonical ``file_id:chunk_index`` is read as a position: an id that reads as
    the same numbers in another spelling is some other record's, read by its own id."""
    assert position_of(chunk_id) == position
    if position is not None:
        assert make_chunk_id(*position) == chunk_id


@pytest.mark.parametrize("odd_id", ["f:03", "f:\u00b2"])
def test_ids_that_only_look_like_chunk_ids_are_read_the_usual_way(
    make_store: Callable[..., Chroma], odd_id: str
) -> None:
    store = make_store()
    add_file_f(store)  # chunks f:0 to f:5, 50 characters each
    extra = Document("chunk 3 " + "x" * 40 + " odd", metadata={"file_id": "f", "chunk_index": 3})
    store.add_documents([extra], ids=[odd_id])
    options: dict[str, Any] = {"k": 2, "window_budget": 200, "fetch_k": 8}
    warm = ContextWindowRetriever(vectorstore=store, **options)
    warm.invoke("chunk 0 " + "x" * 40)
    for query in ("chunk 3 " + "x" * 40 + " odd", "chunk 2 " + "x" * 40):
        assert warm.invoke(query) == ContextWindowRetriever(vectorstore=store, **options).invoke(
            query
        )
