"""The keyword index's compact rows: ids found by binary search, filters decided per column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import window_retriever.keywords._rows as keyword_rows
from tests.integration.test_filters_vs_chroma import RECORDS, filters
from window_retriever.core._filters import compile_tree, predicate_of
from window_retriever.keywords._rows import Rows, RowsBuilder


def _rows(records: list[tuple[str, dict[str, Any]]]) -> Rows:
    builder = RowsBuilder()
    for number, (chunk_id, metadata) in enumerate(records):
        builder.add(chunk_id, number, f"w{number}", metadata)
    return builder.rows()


SHUFFLED = [(f"r{(i * 37) % len(RECORDS):03d}", m) for i, m in enumerate(RECORDS)]
"""Every kind of value and missing key, added out of id order."""


@pytest.mark.parametrize("column_values", [keyword_rows.COLUMN_VALUES, 3, 1])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=filters)
def test_a_mask_passes_exactly_the_rows_the_predicate_passes(
    monkeypatch: pytest.MonkeyPatch, column_values: int, where: dict[str, Any]
) -> None:
    """Per column (few values), row by row (a key with too many values) or a mix of both."""
    monkeypatch.setattr(keyword_rows, "COLUMN_VALUES", column_values)
    rows = _rows(SHUFFLED)
    tree = compile_tree(where)
    assert tree is not None
    predicate = predicate_of(tree)
    by_id = dict(SHUFFLED)
    expected = [predicate(by_id[chunk_id]) for chunk_id in rows.ids_at(range(len(rows)))]
    assert rows.mask(tree).tolist() == expected


def test_a_key_with_too_many_values_is_decided_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyword_rows, "COLUMN_VALUES", 4)
    rows = _rows(SHUFFLED)
    assert "a" in rows.wide and "a" not in rows.columns
    assert "b" in rows.columns and "b" not in rows.wide  # its four values
    tree = compile_tree({"a": 1})
    assert tree is not None
    assert rows.mask(tree).sum() == sum(predicate_of(tree)(m) for _, m in SHUFFLED)


def test_one_one_point_zero_and_true_stay_three_values() -> None:
    rows = _rows([("a", {"v": 1}), ("b", {"v": 1.0}), ("c", {"v": True}), ("d", {})])
    assert rows.columns["v"][1] == [1, 1.0, True]
    assert [type(rows.metadata_at(row).get("v")) for row in range(4)] == [
        int,
        float,
        bool,
        type(None),
    ]
    tree = compile_tree({"v": {"$eq": True}})
    assert tree is not None
    assert rows.mask(tree).tolist() == [False, False, True, False]


ids = st.lists(
    st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\x01", "é", "𝄞", ":", "0"]), max_size=6),
    unique=True,
    max_size=30,
)


@given(held=ids, asked=ids)
def test_each_id_is_found_at_its_row_and_an_id_not_held_at_none(
    held: list[str], asked: list[str]
) -> None:
    """Ids that differ only by NUL characters ("a", "a\\x00") are two ids, as in Chroma."""
    rows = _rows([(chunk_id, {}) for chunk_id in held])
    assert sorted(rows.ids_at(range(len(rows)))) == sorted(held)
    found = rows.rows_of(asked).tolist()
    for chunk_id, row in zip(asked, found, strict=True):
        if chunk_id in held:
            assert rows.id(row) == chunk_id
            assert rows.lengths[row] == held.index(chunk_id)
        else:
            assert row == -1


def test_saved_rows_load_mapped_and_answer_alike(tmp_path: Path) -> None:
    rows = _rows(SHUFFLED)
    rows.save(tmp_path)
    loaded = Rows.load(tmp_path)
    assert loaded.ids_at(range(len(loaded))) == rows.ids_at(range(len(rows)))
    assert loaded.lengths.tolist() == rows.lengths.tolist()
    assert [loaded.metadata_at(r) for r in range(len(rows))] == [
        rows.metadata_at(r) for r in range(len(rows))
    ]
    assert [loaded.words_at(r) for r in range(len(rows))] == [
        rows.words_at(r) for r in range(len(rows))
    ]
    tree = compile_tree({"$or": [{"a": {"$gte": 1}}, {"b": "a"}]})
    assert tree is not None
    assert loaded.mask(tree).tolist() == rows.mask(tree).tolist()


def test_no_rows() -> None:
    rows = _rows([])
    tree = compile_tree({"a": 1})
    assert tree is not None
    assert len(rows) == 0 and rows.mask(tree).tolist() == []
    assert rows.rows_of(["a"]).tolist() == [-1]


record_ids = st.text(alphabet=st.sampled_from(["a", "b", "c", "\x00", "é"]), min_size=1, max_size=4)
metadata = st.dictionaries(
    st.sampled_from(["a", "b", "t"]),
    st.sampled_from([0, 1, 1.0, True, "x", "", [1, 2]]),
    max_size=3,
)
records = st.dictionaries(record_ids, st.tuples(st.text(max_size=5), metadata), max_size=25)


@pytest.mark.parametrize("column_values", [keyword_rows.COLUMN_VALUES, 2])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(held=records, added=records, removed=st.sets(record_ids, max_size=10), where=filters)
def test_rows_merged_are_the_rows_built_from_the_same_records(
    monkeypatch: pytest.MonkeyPatch,
    column_values: int,
    held: dict[str, tuple[str, dict[str, Any]]],
    added: dict[str, tuple[str, dict[str, Any]]],
    removed: set[str],
    where: dict[str, Any],
) -> None:
    """A catch-up's rows (held minus removed and rewritten, plus added) against a build's."""
    monkeypatch.setattr(keyword_rows, "COLUMN_VALUES", column_values)

    def built(chunks: dict[str, tuple[str, dict[str, Any]]]) -> Rows:
        builder = RowsBuilder()
        for chunk_id, (words, meta) in chunks.items():
            builder.add(chunk_id, len(words) * 3, words, meta)
        return builder.rows()

    before = built(held)
    gone = removed | set(added)
    kept = ~np.isin(np.arange(len(before)), before.rows_of(sorted(gone)))
    merged = before.merged(kept, built(added))
    expected = built({**{i: r for i, r in held.items() if i not in gone}, **added})

    every = range(len(expected))
    assert merged.ids_at(range(len(merged))) == expected.ids_at(every)
    assert merged.lengths.tolist() == expected.lengths.tolist()
    assert [merged.metadata_at(r) for r in every] == [expected.metadata_at(r) for r in every]
    assert [merged.words_at(r) for r in every] == [expected.words_at(r) for r in every]
    tree = compile_tree(where)
    assert tree is not None
    assert merged.mask(tree).tolist() == expected.mask(tree).tolist()
