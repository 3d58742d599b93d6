"""The keyword index's compact rows: ids found by binary search, filters decided per column."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import window_retriever.keywords._rows as keyword_rows
from tests.helpers.filters import RECORDS, filters
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
    (part,) = rows.parts
    assert "a" in part.wide and "a" not in part.columns
    assert "b" in part.columns and "b" not in part.wide  # its four values
    tree = compile_tree({"a": 1})
    assert tree is not None
    assert rows.mask(tree).sum() == sum(predicate_of(tree)(m) for _, m in SHUFFLED)


def test_one_one_point_zero_and_true_stay_three_values() -> None:
    rows = _rows([("a", {"v": 1}), ("b", {"v": 1.0}), ("c", {"v": True}), ("d", {})])
    assert rows.parts[0].columns["v"][1] == [1, 1.0, True]
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
            assert rows.length(row) == held.index(chunk_id)
        else:
            assert row == -1


def test_saved_rows_load_mapped_and_answer_alike(tmp_path: Path) -> None:
    rows = _rows(SHUFFLED)
    rows.save(tmp_path)
    loaded = Rows.load(tmp_path)
    assert loaded.ids_at(range(len(loaded))) == rows.ids_at(range(len(rows)))
    assert [loaded.length(r) for r in range(len(rows))] == [
        rows.length(r) for r in range(len(rows))
    ]
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


def _built(chunks: dict[str, tuple[str, dict[str, Any]]]) -> Rows:
    builder = RowsBuilder()
    for chunk_id, (words, meta) in chunks.items():
        builder.add(chunk_id, len(words) * 3, words, meta, len(chunk_id))
    return builder.rows()


def _linking(source: Path, folder: Path) -> Callable[[str], None]:
    """Link the files of a part held in ``source`` into ``folder`` (as a catch-up's save)."""

    def link(prefix: str) -> None:
        for path in source.glob(f"{prefix}*"):
            os.link(path, folder / path.name)

    return link


def _held(rows: Rows, tree: Any) -> list[tuple[Any, ...]]:
    """Each row held, in id order: its id, length, digest, metadata, words and filter test."""
    mask = rows.mask(tree)
    assert len(mask) == rows.span
    held = [
        (rows.id(r), rows.length(r), rows.digest(r), rows.metadata_at(r), rows.words_at(r), mask[r])
        for r in rows.live().tolist()
    ]
    assert not mask[np.setdiff1d(np.arange(rows.span), rows.live())].any()  # a dead row never
    return sorted(held, key=lambda row: row[0].encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("column_values", [keyword_rows.COLUMN_VALUES, 2])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    held=records,
    writes=st.lists(st.tuples(records, st.sets(record_ids, max_size=10)), min_size=1, max_size=6),
    where=filters,
)
def test_rows_changed_or_compacted_are_the_rows_built_from_the_same_records(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    column_values: int,
    held: dict[str, tuple[str, dict[str, Any]]],
    writes: list[tuple[dict[str, tuple[str, dict[str, Any]]], set[str]]],
    where: dict[str, Any],
) -> None:
    """Catch-ups one after another (held minus removed and rewritten, plus added: parts
    added and joined, each saved beside the last and loaded back), against a build's rows."""
    monkeypatch.setattr(keyword_rows, "COLUMN_VALUES", column_values)
    tree = compile_tree(where)
    assert tree is not None
    folder = tmp_path_factory.mktemp("rows")
    rows, records_now, beside = _built(held), dict(held), None
    for number, (added, removed) in enumerate(writes):
        gone = rows.rows_of(sorted(removed | set(added)))
        gone = gone[gone >= 0]
        compacted = rows.compacted(gone, _built(added))
        rows = rows.changed(gone, _built(added))
        records_now = {
            **{i: r for i, r in records_now.items() if i not in removed | set(added)},
            **added,
        }
        expected = _built(records_now)
        assert _held(rows, tree) == _held(expected, tree)
        every = range(len(expected))
        assert compacted.ids_at(every) == expected.ids_at(every)  # one part, in id order
        assert _held(compacted, tree) == _held(expected, tree)
        saved = folder / str(number)
        saved.mkdir()
        rows.save(saved, None if beside is None else _linking(beside, saved))
        rows, beside = Rows.load(saved), saved
        assert _held(rows, tree) == _held(expected, tree)


def test_a_catch_up_writes_its_own_rows_alone_and_links_those_held(tmp_path: Path) -> None:
    """The rows held are neither copied nor written again: their files are links."""
    held = {f"c{i:03d}": (f"w{i}", {"t": i % 3}) for i in range(100)}
    (tmp_path / "a").mkdir()
    _built(held).save(tmp_path / "a")
    rows = Rows.load(tmp_path / "a")
    gone = rows.rows_of(["c005", "c050"])
    changed = rows.changed(gone, _built({"c050": ("new", {"t": 9}), "x": ("x", {})}))
    (tmp_path / "b").mkdir()
    changed.save(tmp_path / "b", _linking(tmp_path / "a", tmp_path / "b"))

    base, added = changed.parts
    assert base is rows.parts[0] and (added.start, added.end) == (100, 102)
    for path in (tmp_path / "a").glob(f"{base.name}.*"):
        assert (tmp_path / "b" / path.name).stat().st_ino == path.stat().st_ino
    written = {p.name for p in (tmp_path / "b").iterdir() if p.stat().st_nlink == 1}
    assert written == {"rows.json", "rows.dead.npy"} | {
        p.name for p in (tmp_path / "b").glob(f"{added.name}.*")
    }
    assert Rows.load(tmp_path / "b").rows_of(["c005", "c050", "x"]).tolist() == [-1, 100, 101]


def test_parts_are_joined_as_a_binary_counter() -> None:
    """A part is joined with the one before while that one is less than twice its size: a
    row is copied about log2(rows / rows a write adds) times, the parts stay few."""
    rows = _built({f"base{i:04d}": ("w", {}) for i in range(1024)})
    for write in range(64):
        rows = rows.changed(np.empty(0, dtype=np.int64), _built({f"w{write:03d}": ("w", {})}))
        sizes = [len(part) for part in rows.parts]
        assert all(before >= 2 * after for before, after in itertools.pairwise(sizes))
    assert [len(part) for part in rows.parts] == [1024, 64]


def test_a_compaction_keeps_the_values_of_the_rows_it_keeps_alone() -> None:
    """A key rewritten again and again: the values of the rows replaced leave with them, as
    from a build of the same records (else a column grows with every rewrite, until the key
    is decided row by row)."""
    rows = _built({"a": ("w", {"rev": "r0"}), "b": ("w", {"rev": "old"})})
    for rewrite in range(1, 30):
        gone = rows.rows_of(["a"])
        rows = rows.compacted(gone, _built({"a": ("w", {"rev": f"r{rewrite}"})}))
    (part,) = rows.parts
    assert part.columns["rev"][1] == ["old", "r29"]
    rows = rows.compacted(rows.rows_of(["a", "b"]), _built({"c": ("w", {})}))
    assert "rev" not in rows.parts[0].columns  # no row holds it
