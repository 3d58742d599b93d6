"""Every option bounded (issue 39, item 6): nothing grows with ``k``, ``fetch_k`` or a budget, and
a ``length_function`` returns a count or is named, never a raw exception. (A saved keyword index
whose files change under the process: ``tests/keywords/test_keyword_bounds.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.corpora import QUESTION, pages
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    MemoryWindowStore,
    add_chunks,
)

pytestmark = pytest.mark.usefixtures("fresh_keyword_indexes")

# ---- k, fetch_k and budgets: nothing allocated grows with them -----------------------------

HUGE = {
    "k, hybrid, adaptive": {"k": 10**9, "total_budget": 10**12},
    "k, hybrid, static": {"k": 10**9, "candidates": "hybrid"},
    "k and fetch_k, vector": {"k": 10**9, "fetch_k": 10**9, "candidates": "vector"},
    "total_budget": {"total_budget": 10**12},
    "total_budget, static": {"total_budget": 10**30, "expansion": "static"},
    "total_budget, filtered": {"total_budget": 10**12, "filter": {"tenant": "acme"}},
    "every budget": {"total_budget": 10**30, "window_budget": 10**30, "fetch_k": 10**9},
    "window_budget": {"window_budget": 10**30, "k": 10**9},
}
"""Retrievals asked for more than the collection holds: each returns every chunk (each is a
hit), an answer no larger than the collection."""

RETRIEVE_HUGE = """
import json, resource, sys
import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from tests.helpers.corpora import QUESTION, pages
from tests.retrieval.test_bounds import HUGE
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.stores import keyword_index

limit = 6 * 2**30  # an allocation that grows with k or a budget fails here, on any machine
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
store = Chroma("huge", DeterministicFakeEmbedding(size=16), client=chromadb.EphemeralClient())
add_chunks(store, pages())
found = {"keyword search": [i for i, _ in keyword_index(store).search(QUESTION, 10**12)]}
windows = ContextWindowRetriever(vectorstore=store).invoke(QUESTION, k=10**9, total_budget=1000)
found["k, budgeted"] = [len(window.page_content) for window in windows]
for case, options in HUGE.items():
    try:
        windows = ContextWindowRetriever(vectorstore=store).invoke(QUESTION, **options)
        found[case] = [i for window in windows for i in window.metadata["chunk_ids"]]
    except Exception as error:
        found[case] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def huge() -> dict[str, Any]:
    """What each of :data:`HUGE` returned (chunk ids, or the error), in a process of its own.

    Tantivy's search allocated for the limit asked (``k + 8``: 32 GB, and Python aborted),
    Chroma's query overflowed past 2**32 - 1 results: in its own process an abort fails the
    tests that need it instead of ending pytest.
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RETRIEVE_HUGE)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_keyword_search_for_a_trillion_costs_what_the_index_holds(huge: dict[str, Any]) -> None:
    holding_a_term = {chunk.id for chunk in pages() if "pottery" in chunk.page_content}
    assert set(huge["keyword search"]) == holding_a_term


def test_a_k_of_a_billion_under_a_total_budget_keeps_the_budget(huge: dict[str, Any]) -> None:
    """``invoke(q, k=10**9, total_budget=1000)``: hybrid candidates, tantivy asked for 1e9."""
    assert huge["k, budgeted"] and sum(huge["k, budgeted"]) <= 1000


@pytest.mark.parametrize("case", HUGE)
def test_more_than_the_collection_holds_returns_all_of_it(huge: dict[str, Any], case: str) -> None:
    """``total_budget=10**12`` made ``k`` 5e9 and ``fetch_k`` 1e10: Chroma's OverflowError."""
    assert isinstance(huge[case], list), huge[case]  # else the error it raised
    assert sorted(huge[case]) == sorted(chunk.id for chunk in pages())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 10**9 + 1}, r"k \(the number of windows to return\) must be at most 1,000,000,000"),
        ({"fetch_k": 2**32}, r"fetch_k \(.*\) must be at most 1,000,000,000, got 4294967296; pass"),
        ({"k": 10, "fetch_k": 10**12}, r"fetch_k .* got 1000000000000"),
    ],
)
def test_k_and_fetch_k_are_bounded_by_what_a_store_can_be_asked(
    options: dict[str, Any], message: str
) -> None:
    """Chroma takes at most 2**32 - 1 results (a raw OverflowError past it)."""
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=16))
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store, **options)
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store).invoke(QUESTION, **options)


# ---- length_function: a count, or an error that names it -----------------------------------


@pytest.fixture
def memory() -> MemoryWindowStore:
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=16))
    add_chunks(store, pages())
    return store


@pytest.mark.parametrize("total_budget", [1000, None])
@pytest.mark.parametrize(
    ("returned", "shown", "also_type_error"),
    [
        (lambda text: len(text) - 300, r"-\d+ \(int\)", False),
        (lambda text: -1, r"-1 \(int\)", False),
        (lambda text: len(text) / 3, r"\d+\.\d+ \(float\)", True),
        (lambda text: float(len(text)), r"\d+\.0 \(float\)", True),
        (lambda text: str(len(text)), r"'\d+' \(str\)", True),
        (lambda text: None, r"None \(NoneType\)", True),
        (lambda text: True, r"True \(bool\)", True),
    ],
)
def test_a_length_function_that_returns_no_count_is_named(
    memory: MemoryWindowStore,
    total_budget: int | None,
    returned: Callable[[str], Any],
    shown: str,
    also_type_error: bool,
) -> None:
    """A negative count bought room: 1,159 characters came back for ``total_budget=1000``."""
    retriever = ContextWindowRetriever(
        vectorstore=memory, length_function=returned, total_budget=total_budget
    )
    with pytest.raises(ConfigurationError) as raised:
        retriever.invoke(QUESTION)
    message = str(raised.value)
    assert message.startswith("length_function must return an int, 0 or more")
    assert raised.match(rf"got {shown} for the text '.{{40}}\.\.\.'; return a whole count")
    assert isinstance(raised.value, TypeError) is also_type_error  # as before, for the type


def test_a_length_function_may_return_numpy_integers(memory: MemoryWindowStore) -> None:
    def numpy_len(text: str) -> Any:
        return np.int64(len(text))

    by_numpy = ContextWindowRetriever(vectorstore=memory, length_function=numpy_len)
    by_len = ContextWindowRetriever(vectorstore=memory)
    for options in ({"total_budget": 1000}, {}):
        assert by_numpy.invoke(QUESTION, **options) == by_len.invoke(QUESTION, **options)
