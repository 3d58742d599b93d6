"""The keyword engine decides a filter itself, on the filter tokens each document holds.

A filter on keys kept as columns becomes a query of the tokens of the values it passes
(``Engine.filtered``): the engine then finds the rows the filter passes, and is asked for as
many hits as without a filter, where it was asked for about a hundred times more under a 1%
filter and the rest were thrown away. Held here to the rows' own mask: the same hits, in the
same order, for every filter of the differential test against Chroma.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import window_retriever.keywords._engine as keyword_engine
import window_retriever.keywords._rows as keyword_rows
from tests.helpers.filters import RECORDS, filters
from window_retriever.core._filters import compile_tree
from window_retriever.keywords._engine import (
    NOTHING,
    Built,
    Fingerprint,
    index_records,
    updated,
)
from window_retriever.keywords._rows import RowsBuilder, digest


def _texts(count: int, start: int = 0) -> list[str]:
    """Texts that all hold "zebra", of lengths and counts that spread their scores."""
    return [
        " ".join(["zebra"] * (1 + n % 3) + ["filler"] * (n % 7))
        for n in range(start, start + count)
    ]


def _built(metadatas: list[dict[str, Any]]) -> Built:
    ids = [f"r{n:04d}" for n in range(len(metadatas))]
    fingerprint = Fingerprint("c", len(ids), None)
    return index_records(fingerprint, ids, _texts(len(ids)), metadatas, None)


def _searched(built: Built, where: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The hits of the mask alone, of the engine's filter alone, and the filter query."""
    tree = compile_tree(where)
    assert tree is not None
    engine, mask = built.engine, built.rows.mask(tree)
    assert engine is not None
    filtered = engine.filtered(tree)
    every = len(built.rows)
    by_mask = engine.top(["zebra"], every, mask)
    if filtered is None:
        return by_mask, None, None
    by_engine = engine.top(["zebra"], every, None, filtered)
    return by_mask, by_engine, filtered


@pytest.mark.parametrize("column_values", [keyword_rows.COLUMN_VALUES, 3])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_the_engine_passes_exactly_the_rows_the_mask_passes(
    monkeypatch: pytest.MonkeyPatch, column_values: int, where: dict[str, Any]
) -> None:
    """Every kind of value and missing key; with few values a column, with more (3) the key
    is decided row by row, and a filter on it is not given to the engine."""
    monkeypatch.setattr(keyword_rows, "COLUMN_VALUES", column_values)
    built = _built(RECORDS)
    by_mask, by_engine, filtered = _searched(built, where)
    if column_values == 3:  # "a" holds more than three values: row by row
        assert filtered is None or "'a'" not in repr(where)
    if filtered is not None:
        assert by_engine == by_mask, where
        assert filtered is not NOTHING or not by_mask


def test_a_catch_ups_rows_are_filtered_by_the_engine_too() -> None:
    """Rows a catch-up added (another part, new values) and rows it replaced (dead)."""
    built = _built([{"tenant": f"t{n % 4}", "n": n} for n in range(40)])
    assert built.engine is not None
    rows = built.rows
    gone = rows.rows_of([f"r{n:04d}" for n in range(0, 40, 5)])
    builder = RowsBuilder()
    for n, text in zip(range(100, 110), _texts(10, 100), strict=True):
        metadata = {"tenant": f"t{n % 6}", "n": n}  # t4 and t5: values no row held
        builder.add(f"r{n:04d}", len(text), "zebra " * (1 + n % 3), metadata, digest(text, {}))
    changed = rows.changed(gone, builder.rows())
    added = list(range(rows.span, changed.span))
    fingerprint = Fingerprint("c", len(changed), None)
    after = updated(built.engine, {}, fingerprint, changed, gone.tolist(), added, None)
    assert after is not None

    for where in [{"tenant": "t5"}, {"tenant": {"$in": ["t0", "t4"]}}, {"n": {"$gte": 30}}]:
        by_mask, by_engine, _ = _searched(after, where)
        assert by_engine == by_mask and by_mask, where
        assert not set(gone.tolist()) & {row for row, _ in by_engine}


def test_a_filter_given_to_the_engine_asks_for_no_more_hits_than_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = _built([{"tenant": f"t{n % 100}"} for n in range(2000)])  # a 1% filter
    engine = built.engine
    assert engine is not None
    asked: list[int] = []
    searcher = engine.searcher

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(searcher, name)

        def search(self, query: Any, limit: int, **options: Any) -> Any:
            asked.append(limit)
            return searcher.search(query, limit, **options)

    monkeypatch.setattr(engine, "searcher", Counting())
    monkeypatch.setattr(keyword_engine, "_SMALL_FILTER", 0)  # as for a 1% filter of 1M rows
    tree = compile_tree({"tenant": "t7"})
    assert tree is not None
    mask = built.rows.mask(tree)

    by_mask = engine.top(["zebra"], 10, mask)
    by_engine = engine.top(["zebra"], 10, mask, engine.filtered(tree))

    assert by_engine == by_mask and len(by_mask) == 10
    assert asked == [2000, 18]  # over-fetched for the mask (all 2,000 held); then k + 8
    assert np.count_nonzero(mask) == 20


def test_a_chunk_corrected_into_a_filter_is_found_under_it() -> None:
    """A chunk rewritten in place by a writer that bypassed the library, read since: its
    filter tokens are the build's, so the engine would not pass it; the filter is decided on
    the rows (as corrected) until the next build."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    store = Chroma(
        collection_name="corrected-into-a-filter",
        client=chromadb.EphemeralClient(),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    texts = _texts(20)
    ids = [f"c{n:02d}" for n in range(20)]
    store.add_texts(texts, [{"tenant": f"t{n % 2}"} for n in range(20)], ids=ids)
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=60, reconcile_interval=None)
    under = {row for row, _ in index.search("zebra", k=20, where={"tenant": "t0"})}
    assert under == set(ids[0::2])

    index.correct({"c01": (len(texts[1]), {"tenant": "t0"})}, index.build())

    found = {row for row, _ in index.search("zebra", k=20, where={"tenant": "t0"})}
    assert found == under | {"c01"}


class Where(Mapping[str, Any]):
    """A filter as a ``Mapping`` that is not a dict, with no ``repr`` but its address."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_a_filter_of_any_mapping_gets_its_own_answer_never_another_s() -> None:
    """What is kept for a filter was keyed by its ``repr``: a mapping freed, the next one
    made at its address took its answer (another tenant's chunk). And one Chroma decides
    (``$contains``) raised orjson's ``TypeError``."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    store = Chroma(
        collection_name="any-mapping",
        client=chromadb.EphemeralClient(),
        embedding_function=DeterministicFakeEmbedding(size=4),
    )
    store.add_texts(
        ["pangolin", "pangolin"],
        [{"tenant": "acme"}, {"tenant": "beta"}],
        ids=["acme-1", "beta-1"],
    )
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=60, reconcile_interval=None)
    for tenant in ["acme", "beta", "acme", "beta"]:
        found = index.search("pangolin", 5, where=Where({"tenant": tenant}))
        assert [chunk_id for chunk_id, _ in found] == [f"{tenant}-1"]
    found = index.search("pangolin", 5, where_document=Where({"$contains": "pango"}))
    assert {chunk_id for chunk_id, _ in found} == {"acme-1", "beta-1"}
