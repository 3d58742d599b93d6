"""Records whose metadata covers every kind of value, and random filters over them.

Numbers at the edges of Chroma's types included: the differential test holds the library's
filter evaluator to Chroma with them, and the keyword index's rows to the evaluator.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from hypothesis import strategies as st

# Numbers where Chroma's int and float meet: 2**53 (the last int every float holds), the ends
# of the 64-bit ints, floats at and past them, fractions next to big ints, and floats Chroma
# reads one unit in the last place off what was written (0.9888481166708001 is read
# 0.9888481166708, 2.0**63 - 1024 is read 2.0**63).
EDGE_INTS = [2**53 - 1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), -(2**53) - 1]
EDGE_FLOATS = [
    2.0**53,
    2.0**53 + 2,
    9007199254740991.0,
    4503599627370495.5,
    9.2e18,
    9.3e18,
    1e19,
    -1e19,
    2.0**63,
    -(2.0**63),
    2.0**63 - 1024,
    2.0**64,
    0.9888481166708001,
    0.39784669626223723,
]
INTS = [-2, -1, 0, 1, 2, *EDGE_INTS]
FLOATS = [-1.5, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, *EDGE_FLOATS]
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


def _one_unit_off(number: float, up: bool) -> float:
    return math.nextafter(number, math.inf if up else -math.inf)


ints = st.one_of(st.sampled_from(INTS), st.integers(-(2**63), 2**63 - 1))
floats = st.one_of(
    st.sampled_from(FLOATS),
    st.builds(_one_unit_off, st.sampled_from(FLOATS), st.booleans()),
    st.floats(allow_nan=False, allow_infinity=False),
)
numbers = st.one_of(ints, floats)
scalars = st.one_of(numbers, st.sampled_from([*STRS, *BOOLS]))
keys = st.sampled_from(["a", "b"])


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    same_type_lists = st.one_of(
        st.lists(ints, min_size=1, max_size=3),
        st.lists(floats, min_size=1, max_size=3),
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
