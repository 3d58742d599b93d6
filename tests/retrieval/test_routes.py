"""The route of a retrieval: chosen once from declared facts, re-planned at most once, visibly.

docs/how-it-works.md#routes lists the routes and their store calls; these tests hold the plan
to its facts, each route to its store calls, and a re-plan to reusing what was read.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.corpora import TOPICS, TieFreeEmbeddings, distinct_conversations, split, turns
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ContextWindowRetriever, MemoryWindowStore, add_chunks
from window_retriever.retrieval._plan import Route, plan, snapshot_of
from window_retriever.retrieval._retriever import _run
from window_retriever.stores import ChromaWindowStore, IdsRefused, SearchIds


class Unindexed(ChromaWindowStore):
    """The same Chroma collection, with nothing held in the process: every chunk is read."""

    def held(self) -> None:
        return None


class _Held:
    """A keyword index that holds a snapshot (or, ``built=False``, none yet)."""

    def __init__(self, *, built: bool = True) -> None:
        self.built = built
        self.distrusted = 0

    def build(self) -> object | None:
        return object() if self.built else None

    def passing(self, where: Any) -> list[str]:
        return ["gone"]

    def distrust(self) -> None:
        self.distrusted += 1


def _params(**options: Any) -> Any:
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=8))
    return ContextWindowRetriever(store, **options)._params({})


def _route(
    held: Any = None,
    *,
    surveys: bool = True,
    positions: bool = True,
    keyword_leg: bool = True,
    **options: Any,
) -> str:
    facts = {"surveys": surveys, "locates": surveys, "positions": positions, "typical": True}
    return plan(_params(**options), snapshot_of(held), keyword_leg=keyword_leg, **facts).name


def test_each_declared_fact_chooses_the_route_of_a_default_call() -> None:
    budget: dict[str, Any] = {"total_budget": 2000}
    assert _route(_Held(), **budget) == "stand-ins"
    assert _route(None, **budget) == "survey"  # no index held in this process yet
    assert _route(_Held(built=False), **budget) == "survey"  # one, but no snapshot yet
    assert _route(_Held(), length_function=lambda text: len(text.split()), **budget) == "survey"
    assert _route(_Held(), filter={"groups": {"$contains": "staff"}}, **budget) == "survey"
    assert _route(_Held(), where_document={"$contains": "x"}, **budget) == "survey"
    assert _route(_Held(), filter={"tenant": "a"}, **budget) == "stand-ins"
    assert _route(_Held(), keyword_leg=False, **budget) == "survey"  # vector candidates
    assert _route(_Held(), surveys=False, **budget) == "read"
    assert _route(_Held(), positions=False, **budget) == "read"
    assert _route(_Held(), expansion="static", **budget) == "read"
    assert _route(_Held()) == "lean"
    assert _route(_Held(), surveys=False) == "search"


def test_a_route_re_plans_once_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    route = Route("stand-ins")
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        route.replan("survey", "a stand-in differed")
    assert (route.name, route.label) == ("survey", "stand-ins>survey")
    assert "re-planned to survey: a stand-in differed" in caplog.text
    with pytest.raises(AssertionError, match="re-planned twice"):
        route.replan("read", "again")


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    chroma = make_store(TieFreeEmbeddings())
    add_chunks(chroma, split(distinct_conversations(60, tenants=True), 140, 30))
    return chroma


def _routes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The route planned and the route taken, of each retrieval logged."""
    messages = [record.getMessage() for record in caplog.records]
    return [m for m in messages if m.startswith("route ") and "re-planned to" not in m]


def test_a_default_call_takes_the_route_it_planned_with_two_store_calls(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], caplog: pytest.LogCaptureFixture
) -> None:
    """The first call holds no index yet (the keyword leg makes it): ``survey``; the next
    holds it: ``stand-ins``. Each plans once, before its first call, and keeps to it."""
    retriever = ContextWindowRetriever(store, total_budget=800)
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        first = retriever.invoke("pottery in the garden library")
        spy = spy_on(store)
        again = retriever.invoke("pottery in the garden library")
    assert _routes(caplog) == [
        "route planned: survey (no keyword index is held in this process yet)",
        "route survey, 2 store calls",
        "route planned: stand-ins (the keyword index holds every chunk's length)",
        "route stand-ins, 2 store calls",
    ]
    assert spy.calls == {"query": 1, "get": 1}  # the log counts what the store received
    assert again == first


def test_a_stand_in_that_differs_re_plans_to_the_survey_it_already_made(
    store: Chroma,
    spy_on: Callable[[Chroma], StoreSpy],
    held_still: Callable[[Chroma], FakeClock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A chunk rewritten behind the index's back: its stand-in is stale. The retrieval
    re-plans to ``survey`` on the survey it made (no search again), once, and reads only
    what the check did not."""
    retriever = ContextWindowRetriever(store, total_budget=800)
    question = "pottery in the garden library"
    target = retriever.invoke(question)[0].metadata["hit_chunk_ids"][0]
    held_still(store)
    old = store._collection.get(ids=[target])["documents"][0]  # type: ignore[index]
    new = old + " (corrected later: the pottery class moved to Tuesday)"
    vector = TieFreeEmbeddings().embed_documents([new])
    store._collection.update(ids=[target], documents=[new], embeddings=vector)  # type: ignore[arg-type]
    spy = spy_on(store)
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        got = retriever.invoke(question)
    assert _routes(caplog)[-1] == (
        "route stand-ins>survey, 3 store calls (a stand-in differed from the chunk read)"
    )
    assert spy.calls == {"query": 1, "get": 2}
    check, then = [set(arguments["ids"]) for name, arguments, _ in spy.log if name == "get"]
    assert target in check and not check & then  # what the check read is not read again
    assert any("moved to Tuesday" in document.page_content for document in got)


def test_ids_that_do_not_name_positions_re_plan_to_read_once_then_plan_it(
    make_store: Callable[..., Chroma], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(TieFreeEmbeddings())
    chunks = split([Document(page_content=turns(30, 1), metadata={"source": "conv"})], 140, 30)
    store.add_documents(chunks, ids=[f"uuid-{i}" for i in range(len(chunks))])
    retriever = ContextWindowRetriever(store, total_budget=800, candidates="vector")
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        retriever.invoke("garden")
        retriever.invoke("garden")
    assert _routes(caplog) == [
        "route planned: survey (no keyword index is held in this process yet)",
        "route survey>read, 2 store calls (a hit's id does not name its position)",
        "route planned: read (the store's ids do not name positions)",
        "route read, 1 store call",  # its hits have no neighbours to fetch
    ]


def test_vector_candidates_read_the_usual_way_and_see_a_write_the_index_has_not_caught_up(
    store: Chroma, caplog: pytest.LogCaptureFixture
) -> None:
    """Stand-ins are exact only where the keyword leg has just checked the index is current
    (hybrid candidates): vector candidates search no keyword, so an index another retriever
    built is never checked, and a neighbour left unchosen would be valued at a length a
    write since changed. They read the usual way (docs/how-it-works.md, **Chosen before the
    read**), and give the windows of reading every chunk."""
    ContextWindowRetriever(store, total_budget=800).invoke("warm")  # hybrid: builds the index
    vector = ContextWindowRetriever(store, total_budget=800, candidates="vector")
    reading_all = ContextWindowRetriever(Unindexed(store), total_budget=800, candidates="vector")
    chunks = split(distinct_conversations(60, tenants=True), 140, 30)
    shorter = random.Random(1)
    for chunk in chunks:  # half rewritten through the library: the same ids, shorter texts
        if shorter.random() < 0.5:
            chunk.page_content = chunk.page_content[: max(20, len(chunk.page_content) // 4)]
    add_chunks(store, chunks)  # the index is told: its next keyword search catches up
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        for question in [*TOPICS, "camping and guitar", "pottery in the garden library"]:
            got = [(d.page_content, d.metadata) for d in vector.invoke(question)]
            expected = [(d.page_content, d.metadata) for d in reading_all.invoke(question)]
            assert got == expected, question
    assert not any(route.startswith("route stand-ins") for route in _routes(caplog))


@pytest.mark.parametrize(
    ("options", "planned"),
    [
        ({"candidates": "keyword", "total_budget": 800}, "read"),
        ({"candidates": "hybrid"}, "search"),
        ({"candidates": "keyword"}, "search"),
    ],
)
def test_the_logged_plan_blames_the_candidates_not_a_store_that_searches_ids(
    store: Chroma, caplog: pytest.LogCaptureFixture, options: dict[str, Any], planned: str
) -> None:
    """Chroma searches ids alone; candidates that cannot (keyword, hybrid without a budget,
    another retriever's) are why the route reads: the plan a user sees must say so."""
    with caplog.at_level(logging.DEBUG, logger="window_retriever"):
        ContextWindowRetriever(store, **options).invoke("pottery in the garden library")
    (reason,) = [line for line in _routes(caplog) if line.startswith("route planned")]
    assert reason.startswith(f"route planned: {planned} (")
    assert "the store cannot search ids alone" not in reason
    assert "candidates" in reason


def test_a_refused_search_among_ids_is_asked_again_under_the_filter_and_the_index_told() -> None:
    """The store refuses an id it no longer holds (``IdsRefused``); the driver throws it into
    the flow, which tells the index that gave the ids and asks with ``where``: the adapter
    never calls back into the index."""
    from window_retriever.retrieval._candidates import search_ids

    asked: list[SearchIds] = []

    class Refusing(MemoryWindowStore):
        def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
            asked.append(request)
            if request.ids is not None:
                raise IdsRefused("gone")
            return [("a", 0.0)]

    held = _Held()
    store = Refusing(DeterministicFakeEmbedding(size=8))
    route = Route("survey", held)  # type: ignore[arg-type]
    found = _run(search_ids("q", 2, {"tenant": "a"}, None, held), store, route)  # type: ignore[arg-type]
    assert found == [("a", 0.0)]
    assert [request.ids for request in asked] == [["gone"], None]
    assert held.distrusted == 1 and route.store_calls == 2


@pytest.mark.parametrize("diversity", [0.0, 0.5])
def test_a_filter_the_index_passes_nothing_asks_the_store_nothing(diversity: float) -> None:
    """Where the index says no chunk passes the filter, the search is answered here: no store
    call (none counted), and no query embedded for a search among no ids."""
    from window_retriever.retrieval._candidates import search_ids, search_vectors

    class Counting(MemoryWindowStore):
        def search_ids(self, request: SearchIds) -> list[tuple[str, float]]:
            raise AssertionError("asked the store")

        search_vectors = search_ids  # type: ignore[assignment]

    class Nothing(_Held):
        def passing(self, where: Any) -> list[str]:
            return []

    held = Nothing()
    store = Counting(DeterministicFakeEmbedding(size=8))
    route = Route("survey", held)  # type: ignore[arg-type]
    search = search_ids if diversity == 0 else search_vectors
    found = _run(search("q", 2, {"tenant": "a"}, None, held), store, route)  # type: ignore[arg-type]
    assert (found if diversity == 0 else found.hits) == []
    assert route.store_calls == 0
