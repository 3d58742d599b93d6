"""A filtered vector search by the ids the keyword index passes, in place of Chroma's ``where``.

Once the process holds a collection's keyword index, a search under a filter ``_filters`` can
decide asks Chroma for the ids the index's metadata passes (``ids=``): the same hits, at a
third to a sixth of the cost. These tests hold it to Chroma's own ``where`` (the same hits),
to when it must not be used (no index yet, a changed collection, a filter only Chroma decides,
another thread building), and to what a stale index must never do: return a chunk the filter
hides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers.corpora import TieFreeEmbeddings, distinct_conversations, split, turns
from tests.helpers.stores import FakeClock, StoreSpy
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.keywords._lifecycle import COUNT_EVERY
from window_retriever.retrieval._candidates import search_ids
from window_retriever.retrieval._retriever import _run
from window_retriever.stores import ChromaWindowStore
from window_retriever.stores._chroma_keywords import invalidate_keywords, keyword_index

FILTERS: list[dict[str, Any]] = [
    {"tenant": "a"},
    {"tenant": {"$ne": "a"}},
    {"source": {"$in": ["conv-0", "conv-2"]}},
    {"chunk_index": {"$nin": [2, 5, 6, 9, 13, 14]}},
    {"$and": [{"tenant": "a"}, {"chunk_index": {"$gte": 10}}]},
    {"$or": [{"source": "conv-2"}, {"chunk_index": {"$lt": 3}}]},
]
QUESTIONS = ["camping and guitar", "pottery in the garden library", "turn 12 running"]


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    """Three conversations in two tenants, searched exhaustively (any width ranks alike)."""
    chroma = make_store(TieFreeEmbeddings(), exhaustive=True)
    add_chunks(chroma, split(distinct_conversations(40, tenants=True), 140, 30))
    return chroma


def _queries(spy: StoreSpy) -> list[dict[str, Any]]:
    return [arguments for name, arguments, _ in spy.log if name == "query"]


def _search_ids(store: Chroma, question: str, where: dict[str, Any], k: int = 30) -> Any:
    """The retrieval's filtered search by ids: among the ids the index passes, where it can."""
    adapter = ChromaWindowStore(store)
    return _run(search_ids(question, k, where, held=adapter.held()), adapter)


def _chroma_where(store: Chroma, question: str, where: dict[str, Any], k: int = 30) -> Any:
    """What Chroma's own ``where`` finds: ``(id, distance)``, best first."""
    vector = store.embeddings.embed_query(question)  # type: ignore[union-attr]
    found = store._collection.query(
        query_embeddings=[vector], n_results=k, where=where, include=["distances"]
    )
    return list(zip(found["ids"][0], found["distances"][0], strict=True))


@pytest.mark.parametrize("where", FILTERS)
def test_the_search_asks_for_the_ids_the_index_passes_and_finds_what_where_finds(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], where: dict[str, Any]
) -> None:
    keyword_index(store).search("warm", k=1)  # the process now holds the index
    passed = set(store._collection.get(where=where, include=[])["ids"])  # type: ignore[arg-type]
    spy = spy_on(store)
    for question in QUESTIONS:
        spy.reset()
        got = _search_ids(store, question, where)
        (arguments,) = _queries(spy)
        assert arguments.get("where") is None and set(arguments["ids"]) == passed
        assert [i for i, _ in got] == [i for i, _ in _chroma_where(store, question, where)]
        assert [d for _, d in got] == pytest.approx(
            [d for _, d in _chroma_where(store, question, where)]
        )


def test_before_the_index_is_made_chroma_applies_the_filter(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    spy = spy_on(store)
    got = _search_ids(store, QUESTIONS[0], {"tenant": "a"})
    (arguments,) = _queries(spy)
    assert arguments["where"] == {"tenant": "a"} and "ids" not in arguments
    assert got == _chroma_where(store, QUESTIONS[0], {"tenant": "a"})


def test_a_process_that_never_searches_by_keyword_gets_the_ids_once_it_loads_the_index(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    """docs/scaling.md: static windows alone make no index; building (or loading) it once at
    start-up gives their filtered searches the ids, for the same windows."""
    retriever = ContextWindowRetriever(vectorstore=store, k=4, filter={"tenant": "a"})
    spy = spy_on(store)
    before = retriever.invoke(QUESTIONS[0])
    assert "ids" not in _queries(spy)[0]  # no index in this process: Chroma's where
    keyword_index(store).refresh()  # the start-up call docs/scaling.md gives
    spy.reset()
    after = retriever.invoke(QUESTIONS[0])
    (arguments,) = _queries(spy)
    assert arguments.get("where") is None and arguments["ids"]
    assert [d.page_content for d in after] == [d.page_content for d in before]


@pytest.mark.parametrize(
    ("where", "where_document"),
    [
        ({"tenant": {"$contains": "a"}}, None),  # an operator only Chroma decides
        ({"tenant": "a"}, {"$contains": "guitar"}),  # any document filter
    ],
)
def test_a_filter_only_chroma_decides_goes_to_chroma(
    store: Chroma,
    spy_on: Callable[[Chroma], StoreSpy],
    where: dict[str, Any],
    where_document: dict[str, Any] | None,
) -> None:
    keyword_index(store).search("warm", k=1)
    spy = spy_on(store)
    adapter = ChromaWindowStore(store)
    _run(search_ids(QUESTIONS[0], 10, where, where_document, adapter.held()), adapter)
    (arguments,) = _queries(spy)
    assert arguments["where"] == where and "ids" not in arguments


def test_a_filter_that_passes_nothing_searches_nothing(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    keyword_index(store).search("warm", k=1)
    spy = spy_on(store)
    assert _search_ids(store, QUESTIONS[0], {"tenant": "nobody"}) == []
    assert spy.calls["query"] == 0


def test_a_changed_collection_is_searched_under_where_until_the_index_is_built_again(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    """A bare ``add`` changes the count: the index no longer matches the collection, so the
    search does not trust it (and never waits for a build); the next keyword search rebuilds
    and the ids are used again, the new chunk among them."""
    index = keyword_index(store)
    index._clock = clock = FakeClock()
    index.search("warm", k=1)
    late = split([Document(turns(4, 9), metadata={"source": "late", "tenant": "a"})], 140, 30)
    store.add_documents(late, ids=[c.metadata["chunk_id"] for c in late])
    clock.now += COUNT_EVERY * index.check_interval  # the check of the count is due
    spy = spy_on(store)
    _search_ids(store, QUESTIONS[0], {"tenant": "a"})
    assert "ids" not in _queries(spy)[0]
    index.search("warm", k=1)  # rebuilds
    spy.reset()
    _search_ids(store, QUESTIONS[0], {"tenant": "a"})
    assert late[0].metadata["chunk_id"] in _queries(spy)[0]["ids"]


def test_while_another_thread_holds_the_index_the_filter_goes_to_chroma(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    index = keyword_index(store)
    index._clock = clock = FakeClock()
    index.search("warm", k=1)
    clock.now += 2  # the check is due, and another thread is checking (or building)
    spy = spy_on(store)
    with index._lock:
        got = _search_ids(store, QUESTIONS[1], {"tenant": "a"})
    assert "ids" not in _queries(spy)[0]
    assert got == _chroma_where(store, QUESTIONS[1], {"tenant": "a"})


@pytest.mark.parametrize(
    "options",
    [
        {"total_budget": 2000},
        {"total_budget": 2000, "candidates": "vector"},
        {"k": 3},
        {"k": 3, "window_budget": 600},
    ],
)
@pytest.mark.parametrize("run", ["sync", "async"])
def test_chunks_moved_out_of_the_filter_behind_the_index_s_back_never_come_back(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy], options: dict[str, Any], run: str
) -> None:
    """A bare ``update`` moves the windows' chunks to tenant "b" and tells no index: the ids
    the search asks for still hold them, Chroma returns them as hits, and the caller's filter
    on what is read keeps every one out."""
    keyword_index(store).search("warm", k=1)
    retriever = ContextWindowRetriever(vectorstore=store, filter={"tenant": "a"}, **options)
    ask = retriever.invoke if run == "sync" else lambda q: asyncio.run(retriever.ainvoke(q))
    for question in QUESTIONS:
        ask(question)  # static windows learn the typical length: the next search is lean
    question = QUESTIONS[0]
    moved = [i for d in ask(question) for i in d.metadata["chunk_ids"]]
    record = store._collection.get(ids=moved, include=["metadatas", "documents"])
    metadatas = [{**m, "tenant": "b"} for m in record["metadatas"]]  # type: ignore[union-attr]
    store._collection.update(ids=record["ids"], metadatas=metadatas)  # type: ignore[arg-type]
    spy = spy_on(store)

    got = ask(question)

    assert set(moved) <= set(_queries(spy)[0]["ids"])  # the search was by the stale ids
    assert not {i for d in got for i in d.metadata["chunk_ids"]} & set(moved)
    texts = " ".join(d.page_content for d in got)
    assert not any(text in texts for text in record["documents"])  # type: ignore[union-attr]


def test_a_chunk_moved_into_the_filter_unseen_is_searched_after_the_invalidation(
    store: Chroma,
) -> None:
    """The staleness the docs name: a bare write that moves a chunk into the filter is not
    searched until the index learns of it (``invalidate_keywords``, which the library's own
    writes call)."""
    keyword_index(store).search("warm", k=1)
    target = store._collection.get(where={"tenant": "b"}, limit=1)["ids"][0]
    text = store._collection.get(ids=[target])["documents"][0]  # type: ignore[index]
    metadata = store._collection.get(ids=[target])["metadatas"][0]  # type: ignore[index]
    store._collection.update(ids=[target], metadatas=[{**metadata, "tenant": "a"}])
    assert target not in [i for i, _ in _search_ids(store, text, {"tenant": "a"})]
    invalidate_keywords(store)
    keyword_index(store).search("warm", k=1)
    assert next(i for i, _ in _search_ids(store, text, {"tenant": "a"})) == target


def test_a_chunk_the_index_holds_as_read_is_passed_by_its_metadata_read(store: Chroma) -> None:
    index = keyword_index(store)
    index.search("warm", k=1)
    target = store._collection.get(where={"tenant": "b"}, limit=1)["ids"][0]
    metadata = store._collection.get(ids=[target])["metadatas"][0]  # type: ignore[index]
    assert target not in (index.passing({"tenant": "a"}) or [])
    index.correct({target: (10, {**metadata, "tenant": "a"})}, index.build())
    assert target in (index.passing({"tenant": "a"}) or [])
    assert target not in (index.passing({"tenant": "b"}) or [])


def test_a_chunk_deleted_behind_the_index_s_back_is_searched_under_where_not_refused(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma refuses a search by ids that names an id it no longer holds. A bare delete and
    add keep the count, so the index still lists the deleted chunk: the search asks again
    under ``where`` (one call more, once), and until the next build Chroma decides."""
    keyword_index(store).search("warm", k=1)
    gone = store._collection.get(where={"tenant": "a"}, limit=1)["ids"][0]
    store._collection.delete(ids=[gone])
    late = split([Document(turns(1, 9), metadata={"source": "late", "tenant": "b"})], 400, 0)
    store.add_documents(late[:1], ids=[late[0].metadata["chunk_id"]])
    asked: list[dict[str, Any]] = []
    query = store._collection.query

    def recorded(**arguments: Any) -> Any:
        asked.append(arguments)  # before the call: the refused one too
        return query(**arguments)

    monkeypatch.setattr(store._collection, "query", recorded)
    got = _search_ids(store, QUESTIONS[0], {"tenant": "a"})

    first, second = asked
    assert gone in first["ids"] and second["where"] == {"tenant": "a"}
    assert got == _chroma_where(store, QUESTIONS[0], {"tenant": "a"})
    asked.clear()
    retriever = ContextWindowRetriever(vectorstore=store, filter={"tenant": "a"}, total_budget=800)
    assert retriever.invoke(QUESTIONS[1])
    (only,) = asked  # not refused again: Chroma decides
    assert only["where"] == {"tenant": "a"}


def test_a_hit_read_as_moved_out_is_not_searched_again(
    store: Chroma, spy_on: Callable[[Chroma], StoreSpy]
) -> None:
    """Vector candidates drop a hit whose metadata just read is another tenant's; the index
    learns it from that read, so the next search no longer asks for it."""
    keyword_index(store).search("warm", k=1)
    options: dict[str, Any] = {"filter": {"tenant": "a"}, "total_budget": 800}
    retriever = ContextWindowRetriever(vectorstore=store, candidates="vector", **options)
    question = QUESTIONS[2]
    moved = retriever.invoke(question)[0].metadata["hit_chunk_ids"][0]
    metadata = store._collection.get(ids=[moved])["metadatas"][0]  # type: ignore[index]
    store._collection.update(ids=[moved], metadatas=[{**metadata, "tenant": "b"}])
    spy = spy_on(store)

    first = retriever.invoke(question)
    assert moved in _queries(spy)[0]["ids"]  # still listed: the index had not read it
    spy.reset()
    again = retriever.invoke(question)

    assert moved not in _queries(spy)[0]["ids"]
    for got in (first, again):
        assert moved not in {i for d in got for i in d.metadata["chunk_ids"]}


def test_a_changed_collection_is_checked_once_not_on_every_search(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that does not search by keyword never rebuilds: its filtered searches go to
    Chroma; the collection is checked once an interval until a check finds it changed, and
    not again until a keyword search rebuilds."""
    index = keyword_index(store)
    index._clock = clock = FakeClock()
    index.search("warm", k=1)
    late = split([Document(turns(2, 9), metadata={"source": "late", "tenant": "a"})], 140, 30)
    store.add_documents(late, ids=[c.metadata["chunk_id"] for c in late])
    checks: list[str] = []
    source = index._source
    for name in ("fingerprint", "generation"):
        call = getattr(source, name)
        monkeypatch.setattr(source, name, lambda c=call, n=name: checks.append(n) or c())
    clock.now += 2
    for _ in range(5):
        assert index.passing({"tenant": "a"}) is not None  # the token alone: unchanged
    assert checks == ["generation"]
    clock.now += COUNT_EVERY * index.check_interval
    for _ in range(5):
        assert index.passing({"tenant": "a"}) is None
    assert checks == ["generation", "fingerprint"]
    clock.now += 2
    assert index.passing({"tenant": "a"}) is None
    assert checks == ["generation", "fingerprint"]  # known changed: no call until rebuilt
    index.search("warm", k=1)  # rebuilds
    assert index.passing({"tenant": "a"}) is not None


def test_a_correction_that_keeps_a_chunk_s_place_in_a_filter_keeps_the_filter_s_ids(
    store: Chroma,
) -> None:
    index = keyword_index(store)
    index.search("warm", k=1)
    ids = index.passing({"tenant": "a"})
    assert ids
    metadata = store._collection.get(ids=[ids[0]])["metadatas"][0]  # type: ignore[index]
    index.correct({ids[0]: (10, {**metadata, "reviewed": True})}, index.build())  # ignored key
    assert index.passing({"tenant": "a"}) is ids  # not made again
    index.correct({ids[0]: (10, {**metadata, "tenant": "b"})}, index.build())
    assert index.passing({"tenant": "a"}) == ids[1:]


def test_a_filter_given_as_any_mapping_is_decided_alike(store: Chroma) -> None:
    from types import MappingProxyType

    index = keyword_index(store)
    index.search("warm", k=1)
    where = {"$and": [{"tenant": "a"}, {"chunk_index": {"$lt": 4}}]}
    frozen = MappingProxyType({"$and": [MappingProxyType(w) for w in where["$and"]]})
    assert index.passing(frozen) == index.passing(where)
    assert index.search("camping", k=5, where=frozen) == index.search("camping", k=5, where=where)


def test_an_id_list_made_while_a_correction_turns_a_row_is_not_kept(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A correction lands while another thread makes a filter's id list: that list may be
    used once, but is not kept (it would pass the moved chunk until its row turned again)."""
    import numpy as np

    index = keyword_index(store)
    index.search("warm", k=1)
    where = {"tenant": "a"}
    first, second = index.passing(where)[:2]  # type: ignore[index]
    metadata = store._collection.get(ids=[first])["metadatas"][0]  # type: ignore[index]
    index.correct({first: (10, {**metadata, "tenant": "b"})}, index.build())  # made again...
    flatnonzero = np.flatnonzero

    def meanwhile(mask: Any) -> Any:
        monkeypatch.setattr(np, "flatnonzero", flatnonzero)
        rows = flatnonzero(mask)
        index.correct({second: (10, {**metadata, "tenant": "b"})}, index.build())  # a row turns
        return rows

    monkeypatch.setattr(np, "flatnonzero", meanwhile)
    assert second in index.passing(where)  # type: ignore[operator]
    assert second not in index.passing(where)  # type: ignore[operator]


def test_a_read_is_not_held_by_a_build_made_after_it(store: Chroma) -> None:
    """A fetch takes the build before it reads; if the index is built again meanwhile, what it
    read may be older than the new build, so it is not held as a correction."""
    index = keyword_index(store)
    index.search("warm", k=1)
    (chunk_id,) = index.passing({"tenant": "a"})[:1]  # type: ignore[index]
    metadata = store._collection.get(ids=[chunk_id])["metadatas"][0]  # type: ignore[index]
    build = index.build()
    invalidate_keywords(store)
    index.refresh()  # built again
    index.correct({chunk_id: (10, {**metadata, "tenant": "b"})}, build)
    assert chunk_id in index.passing({"tenant": "a"})  # type: ignore[operator]
    index.correct({chunk_id: (10, {**metadata, "tenant": "b"})}, index.build())
    assert chunk_id not in index.passing({"tenant": "a"})  # type: ignore[operator]
