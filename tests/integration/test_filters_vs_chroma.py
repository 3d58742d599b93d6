"""Differential test: the Python filter evaluator must answer exactly as Chroma does.

Random filters run against one real Chroma collection whose records cover every kind of
value (ints, floats, bools, strings, lists, missing keys); the evaluator must select the same
ids, and must refuse (return None) exactly the filters Chroma rejects.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import chromadb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import drop_collection
from window_retriever.core._filters import KNOWN_OPERATORS, check_where, compile_where

INTS = [-2, -1, 0, 1, 2]
FLOATS = [-1.5, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0]
STRS = ["", "0", "1", "a", "b"]
BOOLS = [True, False]
LISTS: list[list[Any]] = [[1, 2], ["a", "b"], [True]]
VALUES: list[Any] = [*INTS, *FLOATS, *STRS, *BOOLS, *LISTS]


def _records() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [{"z": 0}]  # no "a", no "b"
    for a in VALUES:
        records.append({"a": a})
    for a, b in itertools.product([*INTS, *FLOATS, *STRS, *BOOLS], [0, 1.5, "a", True]):
        records.append({"a": a, "b": b})
    return records


RECORDS = _records()


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


scalars = st.sampled_from([*INTS, *FLOATS, *STRS, *BOOLS])
numbers = st.sampled_from([*INTS, *FLOATS])
keys = st.sampled_from(["a", "b"])


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    same_type_lists = st.one_of(
        st.lists(st.sampled_from(INTS), min_size=1, max_size=3),
        st.lists(st.sampled_from(FLOATS), min_size=1, max_size=3),
        st.lists(st.sampled_from(STRS), min_size=1, max_size=3),
        st.lists(st.sampled_from(BOOLS), min_size=1, max_size=2),
    )
    return st.one_of(
        st.builds(lambda k, v: {k: v}, keys, scalars),
        st.builds(lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(["$eq", "$ne"]), scalars),
        st.builds(
            lambda k, op, v: {k: {op: v}},
            keys,
            st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
            numbers,
        ),
        st.builds(
            lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(["$in", "$nin"]), same_type_lists
        ),
    )


filters = st.recursive(
    _leaf(),
    lambda children: st.builds(
        lambda op, parts: {op: parts},
        st.sampled_from(["$and", "$or"]),
        st.lists(children, min_size=2, max_size=3),
    ),
    max_leaves=5,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_evaluator_selects_exactly_what_chroma_selects(
    collection: Any, where: dict[str, Any]
) -> None:
    predicate = compile_where(where)
    assert predicate is not None, f"valid filter refused: {where}"
    check_where(where)  # the shape check never refuses what Chroma accepts
    expected = set(collection.get(where=where, include=[])["ids"])
    actual = {str(i) for i, record in enumerate(RECORDS) if predicate(record)}
    assert actual == expected, where


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
