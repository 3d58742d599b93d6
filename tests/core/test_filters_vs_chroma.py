"""Differential test: the Python filter evaluator must answer exactly as Chroma does.

Random filters run against one real Chroma collection whose records cover every kind of
value (ints, floats, bools, strings, lists, missing keys), numbers at the edges of Chroma's
types included (around 2**53 and the 64-bit range, floats Chroma reads one unit in the last
place off); the evaluator must select the same ids, and must refuse (return None) exactly the
filters Chroma rejects. The two callers that decide filters in Python are held to Chroma's own
``get(where=...)`` the same way: the keyword index (its searches and the ids it passes) and the
retriever's neighbours, fetched by id and filtered here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import chromadb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_chroma import Chroma
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever

from tests.helpers.filters import INTS, RECORDS, filters, keys
from tests.helpers.stores import drop_collection
from window_retriever import ContextWindowRetriever
from window_retriever.core._filters import KNOWN_OPERATORS, check_where, compile_where
from window_retriever.stores import keyword_index

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def collection() -> Any:
    client = chromadb.EphemeralClient()
    col = client.create_collection(f"filters-{uuid.uuid4().hex[:8]}", embedding_function=None)
    col.add(
        ids=[str(i) for i in range(len(RECORDS))],
        embeddings=[[0.0, 1.0]] * len(RECORDS),
        metadatas=RECORDS,  # type: ignore[arg-type]
    )
    yield col
    drop_collection(client, col.name)  # its lists must not outlive it (see drop_collection)


@pytest.fixture(scope="module")
def stored(collection: Any) -> dict[str, Any]:
    """Each record's metadata as Chroma returns it, which is what the library decides on.

    Not always what was written: Chroma reads a float it stores as it reads one in a filter.
    """
    got = collection.get(include=["metadatas"])
    return dict(zip(got["ids"], got["metadatas"], strict=True))


def test_chroma_stores_some_floats_one_unit_off(stored: dict[str, Any]) -> None:
    """Why ``stored`` matters: evaluated on the metadata written, the test would be wrong."""
    assert stored[str(RECORDS.index({"a": 0.9888481166708001}))] == {"a": 0.9888481166708}
    assert stored[str(RECORDS.index({"a": 2.0**63 - 1024}))] == {"a": 2.0**63}


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_evaluator_selects_exactly_what_chroma_selects(
    collection: Any, stored: dict[str, Any], where: dict[str, Any]
) -> None:
    predicate = compile_where(where)
    assert predicate is not None, f"valid filter refused: {where}"
    check_where(where)  # the shape check never refuses what Chroma accepts
    expected = set(collection.get(where=where, include=[])["ids"])
    actual = {i for i, metadata in stored.items() if predicate(metadata)}
    assert actual == expected, where


class _Anchors(BaseRetriever):
    """Hits that need no search: every anchor chunk, whatever the query."""

    anchors: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self.anchors


@pytest.fixture(scope="module")
def langchain_store() -> Iterator[Chroma]:
    """One file per record: an anchor chunk (chunk 0, ``anchor=True``), then the record's chunk.

    Every text holds the word ``zebra``, so a keyword search for it ranks every chunk.
    """
    client = chromadb.EphemeralClient()
    store = Chroma(
        collection_name=f"filters-paths-{uuid.uuid4().hex[:8]}",
        embedding_function=DeterministicFakeEmbedding(size=4),
        client=client,
    )
    chunks = []
    for number, record in enumerate(RECORDS):
        anchor = f"anchor zebra {number}."
        for index, (text, metadata) in enumerate(
            [(anchor, {"anchor": True}), (f"value zebra {number}.", record)]
        ):
            chunk_id = f"f{number}:{index}"
            stamps = {"file_id": f"f{number}", "chunk_index": index, "chunk_id": chunk_id}
            start = {"start_index": (len(anchor) + 1) * index}
            chunks.append(Document(text, metadata={**metadata, **stamps, **start}))
    store.add_documents(chunks, ids=[chunk.metadata["chunk_id"] for chunk in chunks])
    yield store
    drop_collection(client, store._collection.name)


def _chroma_passes(store: Chroma, where: dict[str, Any]) -> set[str]:
    return set(store._collection.get(where=where, include=[])["ids"])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_the_keyword_index_passes_exactly_what_chroma_passes(
    langchain_store: Chroma, where: dict[str, Any]
) -> None:
    """Its masks decide each value of a key once (``keywords/_rows.py``): the same answers."""
    expected = _chroma_passes(langchain_store, where)
    index = keyword_index(langchain_store)
    found = index.search("zebra", k=2 * len(RECORDS), where=where)
    assert {chunk_id for chunk_id, _ in found} == expected, where
    passing = index.passing(where)
    assert passing is not None
    assert set(passing) == expected, where


def _chunk_ids(documents: Sequence[Any]) -> set[str]:
    return {chunk_id for document in documents for chunk_id in document.metadata["chunk_ids"]}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_the_retriever_takes_exactly_the_neighbours_chroma_passes(
    langchain_store: Chroma, where: dict[str, Any]
) -> None:
    """Every anchor is a hit; its record's chunk, a neighbour read by id and filtered in
    Python, must join its window exactly when Chroma's ``where`` passes it."""
    anchors = [
        Document(f"anchor zebra {number}.", metadata={"chunk_id": f"f{number}:0"})
        for number in range(len(RECORDS))
    ]
    anchored = {"$or": [{"anchor": True}, where]}
    retriever = ContextWindowRetriever(
        vectorstore=langchain_store,
        candidates=_Anchors(anchors=anchors),
        k=len(RECORDS),
        window_budget=100,
        mode="next",
    )
    documents = retriever.invoke("zebra", filter=anchored)
    assert len(documents) == len(RECORDS)
    assert _chunk_ids(documents) == _chroma_passes(langchain_store, anchored), where


INVALID: list[dict[str, Any]] = [
    {"a": {"$gt": "a"}},
    {"a": {"$lt": True}},
    {"a": {"$in": [0, "x"]}},
    {"a": {"$in": []}},
    {"a": {"$nin": []}},
    {"a": 1, "b": 1},
    {"$and": [{"a": 1}]},
    {"$or": []},
    {"a": {"$eq": [1, 2]}},
    {"a": {"$lt": float("inf")}},
    {"a": {"$gte": float("-inf")}},
    {"a": {"$gt": float("nan")}},
]


@pytest.mark.parametrize("where", INVALID, ids=str)
def test_evaluator_refuses_what_chroma_rejects(collection: Any, where: dict[str, Any]) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - Chroma raises several types
        collection.get(where=where)
    assert compile_where(where) is None


SHAPE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"a": {"$gt": "a"}}, r"\$gt on 'a' compares numbers, got 'a'"),
    ({"a": {"$lt": True}}, r"\$lt on 'a' compares numbers, got True"),
    ({"a": {"$in": []}}, r"\$in on 'a' takes a non-empty list"),
    ({"a": 1, "b": 1}, r"exactly one key"),
    ({"$and": [{"a": 1}]}, r"\$and takes a list of two or more filters"),
    ({"$or": []}, r"\$or takes a list of two or more filters"),
    ({"a": {"$foo": 1}}, r"unknown operator '\$foo' on 'a'; Chroma knows"),
    ({"$foo": 1}, r"unknown operator '\$foo' at the top"),
]


@pytest.mark.parametrize(("where", "message"), SHAPE_ERRORS, ids=str)
def test_the_shape_check_names_the_rule_chroma_would_enforce(
    collection: Any, where: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - Chroma raises several types
        collection.get(where=where)
    with pytest.raises(ValueError, match=message):
        check_where(where)


@pytest.mark.parametrize("where", [{"a": {"$contains": 1}}, {"a": {"$not_contains": "a"}}], ids=str)
def test_operators_outside_the_evaluator_go_to_the_store(where: dict[str, Any]) -> None:
    assert compile_where(where) is None


# Values of every kind a caller might pass, Chroma's refusals included: NaN, infinities, None,
# lists where one value is due, mixed or nested lists, ints at and beyond 64 bits.
WILD: list[Any] = [
    *INTS,
    1.5,
    "a",
    True,
    float("nan"),
    float("inf"),
    float("-inf"),
    None,
    [],
    ["a"],
    [1, 2],
    [1.5, float("nan")],
    [1, "a"],
    [1, True],
    [True, 1],
    [1, 1.5],
    [[1]],
    [None],
    {"$eq": 1},
    2**63 - 1,
    -(2**63),
    2**63,
    2**70,
]
BEYOND_64_BITS = (2**63, 2**70)


def _wild_leaf() -> st.SearchStrategy[dict[str, Any]]:
    values = st.sampled_from(WILD)
    return st.one_of(
        st.builds(lambda k, v: {k: v}, keys, values),
        st.builds(
            lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(sorted(KNOWN_OPERATORS)), values
        ),
    )


wild_filters = st.recursive(
    _wild_leaf(),
    lambda children: st.builds(
        lambda op, parts: {op: parts},
        st.sampled_from(["$and", "$or"]),
        st.lists(children, min_size=2, max_size=3),
    ),
    max_leaves=3,
)


def _beyond_64_bits(node: Any) -> bool:
    if isinstance(node, dict):
        return any(_beyond_64_bits(value) for value in node.values())
    if isinstance(node, list):
        return any(_beyond_64_bits(value) for value in node)
    return not isinstance(node, bool) and node in BEYOND_64_BITS


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=wild_filters)
def test_the_check_refuses_exactly_what_chroma_refuses(
    collection: Any, where: dict[str, Any]
) -> None:
    """check_where raises (a one-line rule) for every filter Chroma refuses, and only those.

    One deliberate difference: ints beyond 64 bits, which embedded Chroma takes (to some
    effect) and a Chroma server refuses; the check refuses them everywhere.
    """
    try:
        collection.get(where=where, include=[])
        chroma_takes = True
    except Exception:
        chroma_takes = False
    refusal = ""
    try:
        check_where(where)
    except ValueError as error:
        refusal = str(error)
    we_take = not refusal
    assert we_take or (refusal.startswith("filter: ") and "\n" not in refusal)
    if _beyond_64_bits(where):
        assert not we_take, where
    else:
        assert we_take == chroma_takes, (where, chroma_takes)


@pytest.mark.parametrize(
    "where",
    [
        {"a": 2**70},
        {"a": {"$ne": -(2**63) - 1}},
        {"a": {"$lt": 2**64}},
        {"a": {"$in": [1, 2**63]}},
        {"a": {"$lte": float("inf")}},
        {"a": {"$eq": float("nan")}},
    ],
    ids=str,
)
def test_values_only_chroma_decides_are_left_to_it(where: dict[str, Any]) -> None:
    """NaN, infinities and ints beyond 64 bits: Chroma refuses some of these or stores them
    its own way, so the evaluator does not guess (and nothing keys a cache by them)."""
    assert compile_where(where) is None
