"""Numbers at the edges of Chroma's types, decided as Chroma 1.5.9 decides them (issue 39).

Chroma compares a number operand as one int with the int values and as one float with the
float values (``core/_filters.py`` states the rule; the differential test in
tests/core/test_filters_vs_chroma.py holds it to Chroma). Each case below is one that
Chroma itself answered, and that the evaluator answered otherwise before it followed the rule:
a chunk the filter hides let through (a leak), or one it passes dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma

from window_retriever._errors import ConfigurationError
from window_retriever.core._filters import as_chroma_reads, compile_where
from window_retriever.stores import keyword_index

# (a metadata value as Chroma returns it, a filter on it, whether Chroma passes it)
CASES: list[tuple[Any, dict[str, Any], bool]] = [
    # a float operand for int values: truncated toward zero, clamped to the 64-bit ints
    (2**63 - 1, {"n": {"$lt": 9.3e18}}, False),  # the leak of issue 39
    (2**63 - 1, {"n": {"$lte": 9.3e18}}, True),
    (2**63 - 1, {"n": {"$gte": 1e19}}, True),
    (2**63 - 1, {"n": 2.0**63}, True),
    (-(2**63), {"n": {"$lte": -1e19}}, True),
    (-(2**63), {"n": {"$gt": -1e19}}, False),
    (-(2**63), {"n": {"$nin": [-1e19]}}, False),
    (0, {"n": {"$gte": 0.5}}, True),
    (0, {"n": {"$gt": -0.5}}, False),
    (2**53 + 1, {"n": {"$in": [2.0**53]}}, False),  # ints compare with ints exactly
    # an int operand for float values: the nearest float
    (2.0**53, {"n": 2**53 + 1}, True),
    (2.0**53, {"n": {"$ne": 2**53 + 1}}, False),
    (2.0**63, {"n": {"$gt": 2**63 - 1}}, False),
    (2.0**63, {"n": {"$in": [1, 2**63 - 1]}}, True),
    # a float operand as Chroma reads it: 0.9888481166708001 is read 0.9888481166708
    (0.9888481166708, {"n": 0.9888481166708001}, True),
    (0.9888481166708, {"n": {"$lt": 0.9888481166708001}}, False),
    (2.0**63, {"n": {"$in": [2.0**63 - 1024]}}, True),
    # unchanged: types stay strict, a missing key passes only $ne and $nin
    (True, {"n": 1}, False),
    (1, {"n": True}, False),
    (None, {"n": {"$nin": [2**63 - 1]}}, True),
    (None, {"n": {"$lt": 1e19}}, False),
]


@pytest.mark.parametrize(("value", "where", "passes"), CASES, ids=str)
def test_numbers_compare_as_chroma_compares_them(
    value: Any, where: dict[str, Any], passes: bool
) -> None:
    predicate = compile_where(where)
    assert predicate is not None
    assert predicate({} if value is None else {"n": value}) is passes


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (0.9888481166708001, 0.9888481166708),
        (0.39784669626223723, 0.3978466962622372),
        (9007199254740991.0, 9007199254740990.0),  # 2**53 - 1: "9007199254740991.0", 17 digits
        (2.0**63 - 1024, 2.0**63),
        (4503599627370495.5, 4503599627370495.0),
        (0.1 + 0.2, 0.1 + 0.2),  # most floats are read exactly
        (9.3e18, 9.3e18),
        (1.7976931348623157e308, 1.7976931348623157e308),
        (5e-324, 5e-324),
    ],
)
def test_floats_are_read_as_chroma_reads_them(written: float, read: float) -> None:
    assert as_chroma_reads(written) == read
    assert as_chroma_reads(-written) == -read


def test_the_sign_of_zero_is_kept() -> None:
    assert str(as_chroma_reads(-0.0)) == "-0.0"


def test_the_keyword_index_refuses_a_filter_chroma_cannot_hold(
    make_store: Callable[..., Chroma],
) -> None:
    """The retriever's error, not a bare TypeError from the filter's cache key (or Chroma's
    'Invalid where clause' for an int from 2**63 to 2**64)."""
    store = make_store()
    store.add_texts(["zebra one"], metadatas=[{"n": 1}], ids=["a"])
    with pytest.raises(ConfigurationError, match=r"^where: 'n' got 18446744073709551616, beyond"):
        keyword_index(store).search("zebra", 5, where={"n": 2**64})
    with pytest.raises(ConfigurationError, match=r"^where: \$in on 'n' got 9223372036854775808"):
        keyword_index(store).search("zebra", 5, where={"n": {"$in": [2**63]}})
