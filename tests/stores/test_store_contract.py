"""The store protocol's rules, checked against each implementation: Chroma and in memory.

The same behavioural tests run against ``ChromaWindowStore`` (a real embedded Chroma) and
``MemoryWindowStore``: what the retriever and ingestion rely on (ids, distances, filters on a
fetch, exact upserts, metadata-only updates, deletes, paged listing, embeddings when asked,
the async twin) holds for both, which is what shows the protocol is complete.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from pydantic import PrivateAttr

from window_retriever import (
    ChromaWindowStore,
    ConfigurationError,
    ContextWindowRetriever,
    Fetch,
    Found,
    MemoryWindowStore,
    Record,
    Search,
    SearchIds,
    SearchVectors,
    WindowSplitter,
    WindowStore,
    add_chunks,
)
from window_retriever.stores import IdsRefused
from window_retriever.stores._protocol import aexecute, execute


class GatedEmbedding(DeterministicFakeEmbedding):
    """Fake embeddings whose ``embed_query`` can be made to wait until a coroutine opens it."""

    _gate: threading.Event | None = PrivateAttr(default=None)
    _entered: threading.Event = PrivateAttr(default_factory=threading.Event)

    def embed_query(self, text: str) -> list[float]:
        gate = self._gate
        if gate is not None:
            self._entered.set()
            if not gate.wait(10):  # a guard against hanging, not a measure
                raise RuntimeError("the event loop never ran: a store call blocked it")
        return super().embed_query(text)


@pytest.fixture(params=["chroma", "memory"])
def store(request: pytest.FixtureRequest, make_store: Callable[..., Chroma]) -> WindowStore:
    embeddings = GatedEmbedding(size=16)
    if request.param == "chroma":
        return ChromaWindowStore(make_store(embeddings))
    return MemoryWindowStore(embeddings)


def write(store: WindowStore, *records: tuple[str, str, dict[str, Any]]) -> None:
    store.upsert([Record(i, text, metadata) for i, text, metadata in records])


ANIMALS = [
    ("a", "the owl hunts at night", {"tenant": "x", "n": 1}),
    ("b", "the hawk hunts by day", {"tenant": "x", "n": 2}),
    ("c", "the owl sleeps by day", {"tenant": "y", "n": 3}),
    ("d", "a fish swims", {"tenant": "y", "n": 4}),
]


def squared_l2(a: Any, b: Any) -> float:
    return math.fsum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True))


def test_search_is_best_first_with_lower_is_better_distances(store: WindowStore) -> None:
    write(store, *ANIMALS)
    found = execute(store, Search("the hawk hunts by day", k=3, embeddings=True))
    best = found.documents[0]
    assert (best.id, best.metadata) == ("b", {"tenant": "x", "n": 2})  # the same text
    assert found.distances[0] == pytest.approx(0.0, abs=1e-4)
    assert list(found.distances) == sorted(found.distances)
    assert found.space == "l2" and found.query_embedding is not None
    for vector, distance in zip(found.embeddings, found.distances, strict=True):
        assert distance == pytest.approx(squared_l2(found.query_embedding, vector), rel=1e-3)
    ids = execute(store, SearchIds("the hawk hunts by day", k=3))
    assert [i for i, _ in ids] == [d.id for d in found.documents]
    assert [d for _, d in ids] == pytest.approx(list(found.distances), rel=1e-4, abs=1e-6)
    with_vectors = execute(store, SearchVectors("the hawk hunts by day", k=3, where=None))
    assert [i for i, _ in with_vectors.hits] == [i for i, _ in ids]
    assert [d for _, d in with_vectors.hits] == pytest.approx([d for _, d in ids], rel=1e-4)
    assert with_vectors.space == "l2"
    for vector, stored in zip(with_vectors.vectors, found.embeddings, strict=True):
        assert list(vector) == pytest.approx(list(stored))


@pytest.mark.parametrize(
    ("given", "allowed"),
    [
        (["c"], {"c", "d"}),  # a stale list: d passes the filter but is not in it
        (["a", "c"], {"a", "c", "d"}),  # a stale list: a no longer passes the filter
        (["c", "gone"], {"c", "d"}),  # an id no longer stored: refused, or the filter decides
    ],
)
def test_a_search_given_ids_searches_among_them_or_under_the_filter(
    store: WindowStore, given: list[str], allowed: set[str]
) -> None:
    """``SearchIds.ids`` may stand in for the filter (Chroma) or be ignored (the memory
    store): either way no other chunk comes back. An id no longer stored may be refused
    (``IdsRefused``: Chroma), never anything else, and only then."""
    write(store, *ANIMALS)
    request = SearchIds("the owl", k=4, where={"tenant": "y"}, ids=given)
    try:
        found = execute(store, request)
    except IdsRefused:
        assert "gone" in given  # refused for the id no longer stored, not for a stale one
        found = execute(store, replace(request, ids=None))
    assert found and {i for i, _ in found} <= allowed
    assert [d for _, d in found] == sorted(d for _, d in found)


def test_ids_given_never_stand_in_for_the_document_filter(store: WindowStore) -> None:
    write(store, *ANIMALS)
    request = SearchIds(
        "the owl", k=4, where={"tenant": "y"}, where_document={"$contains": "owl"}, ids=["c", "d"]
    )
    assert [i for i, _ in execute(store, request)] == ["c"]


def test_search_applies_both_filters(store: WindowStore) -> None:
    write(store, *ANIMALS)
    found = execute(store, Search("the owl", k=4, where={"tenant": "y"}))
    assert {d.id for d in found.documents} == {"c", "d"}
    found = execute(store, Search("the owl", k=4, where_document={"$contains": "owl"}))
    assert {d.id for d in found.documents} == {"a", "c"}


@pytest.mark.parametrize(
    ("where", "where_document", "kept"),
    [
        ({"tenant": "x"}, None, {"a", "b"}),
        ({"$and": [{"tenant": "y"}, {"n": {"$gte": 4}}]}, None, {"d"}),
        (None, {"$contains": "owl"}, {"a", "c"}),
        (None, {"$not_contains": "owl"}, {"b", "d"}),
        ({"tenant": "x"}, {"$or": [{"$contains": "owl"}, {"$contains": "fish"}]}, {"a"}),
    ],
)
def test_a_fetch_never_returns_a_chunk_its_filters_hide(
    store: WindowStore, where: Any, where_document: Any, kept: set[str]
) -> None:
    write(store, *ANIMALS)
    found = execute(store, Fetch(["a", "b", "c", "d"], where, where_document))
    assert {d.id for d in found.documents} == kept


def test_missing_ids_are_simply_absent(store: WindowStore) -> None:
    write(store, *ANIMALS[:2])
    found = execute(store, Fetch(["nope", "a", "gone"]))
    assert [(d.id, d.page_content) for d in found.documents] == [("a", "the owl hunts at night")]
    assert execute(store, Fetch([])).documents == []
    assert store.get_metadata(["nope", "b"]) == {"b": {"tenant": "x", "n": 2}}


@pytest.mark.parametrize("vectors", ["given", "embedded by the store"])
def test_an_upsert_replaces_the_metadata_exactly(store: WindowStore, vectors: str) -> None:
    model = store.embeddings
    assert model is not None

    def record(text: str, metadata: dict[str, Any]) -> Record:
        vector = model.embed_documents([text])[0] if vectors == "given" else None
        return Record("p", text, metadata, vector)

    store.upsert([record("old text", {"public": "yes", "v": 1})])
    store.upsert([record("new text", {"v": 2})])
    assert store.get_metadata(["p"]) == {"p": {"v": 2}}  # "public" is gone, not merged
    assert execute(store, Fetch(["p"], where={"public": "yes"})).documents == []
    (document,) = execute(store, Fetch(["p"])).documents
    assert (document.page_content, document.metadata) == ("new text", {"v": 2})


def test_update_metadata_sets_keys_and_leaves_the_rest(store: WindowStore) -> None:
    write(store, *ANIMALS[:2])
    before = execute(store, Fetch(["a"], embeddings=True))
    store.update_metadata(["a", "missing"], {"origin": "here", "n": 10})
    after = execute(store, Fetch(["a", "b"], embeddings=True))
    by_id = {d.id: d for d in after.documents}
    assert by_id["a"].metadata == {"tenant": "x", "n": 10, "origin": "here"}
    assert by_id["a"].page_content == "the owl hunts at night"
    assert by_id["b"].metadata == {"tenant": "x", "n": 2}
    vector = dict(zip([d.id for d in after.documents], after.embeddings, strict=True))["a"]
    assert list(vector) == pytest.approx(list(before.embeddings[0]))
    assert store.get_metadata(["missing"]) == {}


def test_delete_removes_only_those_ids(store: WindowStore) -> None:
    write(store, *ANIMALS)
    store.delete(["a", "c", "never-stored"])
    assert sorted(store.get_metadata(["a", "b", "c", "d"])) == ["b", "d"]
    assert {d.id for d in execute(store, Search("the owl", k=4)).documents} == {"b", "d"}


def test_listing_pages_through_every_match_once(store: WindowStore) -> None:
    write(store, *[(f"r{i}", f"record {i}", {"even": i % 2 == 0, "i": i}) for i in range(7)])
    pages = [store.list_metadata(None, limit=3, offset=offset) for offset in (0, 3, 6)]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert sorted(i for page in pages for i, _ in page) == [f"r{i}" for i in range(7)]
    even = store.list_metadata({"even": True}, limit=10)
    assert sorted(i for i, _ in even) == ["r0", "r2", "r4", "r6"]
    assert all(metadata["i"] % 2 == 0 for _, metadata in even)


def test_embeddings_come_back_when_asked_and_only_then(store: WindowStore) -> None:
    write(store, *ANIMALS)
    plain = execute(store, Search("owl", k=2))
    assert plain.embeddings == () and plain.query_embedding is None
    assert execute(store, Fetch(["a", "b"])).embeddings == ()
    measured = execute(store, Search("owl", k=2, query_embedding=True))
    assert measured.embeddings == () and measured.query_embedding is not None
    assert len(measured.query_embedding) == 16
    asked = execute(store, Search("owl", k=2, embeddings=True))
    assert len(asked.embeddings) == 2 and all(len(v) == 16 for v in asked.embeddings)
    assert asked.query_embedding is not None and len(asked.query_embedding) == 16
    fetched = execute(store, Fetch(["a", "b", "x"], embeddings=True))
    assert len(fetched.embeddings) == len(fetched.documents) == 2


async def test_the_async_twin_answers_as_the_sync_store(store: WindowStore) -> None:
    write(store, *ANIMALS)
    requests: list[Any] = [
        Search("the owl", k=3, where={"tenant": "x"}),
        Search("the owl", k=3, embeddings=True),
        SearchIds("a fish", k=2),
        Fetch(["a", "c", "missing"], where={"n": {"$gt": 1}}),
        Fetch(["b"], embeddings=True),
    ]
    for request in requests:
        assert _plain(await aexecute(store, request)) == _plain(execute(store, request))


def _plain(answer: Found | list[tuple[str, float]]) -> Any:
    if isinstance(answer, Found):
        return (
            sorted((d.id, d.page_content, sorted(d.metadata.items())) for d in answer.documents),
            [round(x, 5) for x in answer.distances],
            sorted([round(float(x), 5) for x in v] for v in answer.embeddings),
        )
    return [(i, round(d, 5)) for i, d in answer]


async def test_a_blocked_store_call_leaves_the_event_loop_running(store: WindowStore) -> None:
    """The sync call waits until a coroutine on the loop opens it: it can only finish if it
    runs off the loop (in a thread, or over async HTTP)."""
    write(store, *ANIMALS)
    model = store.embeddings
    assert isinstance(model, GatedEmbedding)
    model._gate = threading.Event()

    async def open_the_gate() -> None:
        while not model._entered.is_set():
            await asyncio.sleep(0.001)
        assert model._gate is not None
        model._gate.set()

    for request in (Search("owl", k=2), SearchIds("owl", k=2)):
        model._entered.clear()
        model._gate.clear()
        answer, _ = await asyncio.gather(aexecute(store, request), open_the_gate())
        assert answer


def test_a_retriever_and_add_chunks_run_on_either_store(store: WindowStore) -> None:
    from langchain_core.documents import Document
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    text = " ".join(f"Sentence {i:02d} tells of the lighthouse keeper." for i in range(30))
    splitter = RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=0)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "keeper"})]
    )
    add_chunks(store, chunks)
    (window,) = ContextWindowRetriever(vectorstore=store, k=1, window_budget=400).invoke(
        chunks[10].page_content
    )
    assert chunks[10].page_content in window.page_content and len(window.page_content) > 200


def test_the_memory_store_refuses_a_filter_it_cannot_decide() -> None:
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=4))
    write(store, ("a", "text", {"tags": "x"}))
    with pytest.raises(ConfigurationError, match=r"cannot decide the filter .*'\$contains'"):
        execute(store, Fetch(["a"], where={"tags": {"$contains": "x"}}))
    with pytest.raises(ConfigurationError, match=r"where_document: cannot decide .*\$like"):
        execute(store, Fetch(["a"], where_document={"$like": "x"}))
    with pytest.raises(ConfigurationError, match=r"exactly one key"):
        execute(store, Search("q", k=1, where={"a": 1, "b": 2}))
