"""Every write path of the library keeps the keyword index true, in the process that wrote.

Real embedded Chroma. The index's clock stands still (``FakeClock``), so it never checks the
collection on its own: only a write path's telling (``WindowStore.written``, which invalidates
the index) can make it see a write. Each test here turns red when its path stops telling.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from tests.helpers.stores import FakeClock
from window_retriever import MemoryWindowStore, WindowSplitter, add_chunks, ingest, sync_file
from window_retriever.ingestion._prune import prune_missing, remove_file
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index

COMMON = "manual"
"""A word every page holds: a search for it lists every chunk the index has."""


pytestmark = pytest.mark.usefixtures("fresh_keyword_indexes")


def frozen_index(store: Chroma) -> KeywordIndex:
    """The store's shared index, built now, whose clock never moves (no check falls due)."""
    index = keyword_index(store, check_interval=60)
    index._clock = FakeClock()
    index.search(COMMON, k=1)
    return index


def hits(index: KeywordIndex, term: str, **filters: Any) -> list[str]:
    return [chunk_id for chunk_id, _ in index.search(term, k=1000, **filters)]


def assert_agree(store: Chroma, index: KeywordIndex) -> None:
    """The index holds exactly the store's chunks: what it returns, the store has."""
    stored = set(store.get(include=[])["ids"])
    assert set(hits(index, COMMON)) <= stored
    assert len(index) == len(stored)


def page(term: str) -> str:
    return f"This page of the {COMMON} explains the {term} option and nothing else."


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text(page("zebrafish"))
    (docs / "b.md").write_text(page("quokka"))
    (docs / "c.txt").write_text(page("axolotl"))
    return docs


def test_an_ingest_of_a_folder_is_seen(make_store: Callable[..., Chroma], folder: Path) -> None:
    store = make_store()
    index = frozen_index(store)  # built on the empty collection
    assert hits(index, COMMON) == []

    ingest(store, [str(folder)])

    assert len(hits(index, "zebrafish")) == 1
    assert len(hits(index, "quokka")) == 1
    assert_agree(store, index)


def test_a_re_ingest_of_a_changed_page_replaces_its_terms(
    make_store: Callable[..., Chroma], folder: Path
) -> None:
    store = make_store()
    ingest(store, [str(folder)])
    index = frozen_index(store)
    count = len(index)
    assert len(hits(index, "zebrafish")) == 1

    (folder / "a.txt").write_text(page("narwhal"))  # same length: the count stays the same
    summary = ingest(store, [str(folder)])

    assert summary.updated == 1
    assert len(store.get(include=[])["ids"]) == count  # only the token tells
    assert hits(index, "zebrafish") == []
    assert len(hits(index, "narwhal")) == 1
    assert_agree(store, index)


def test_a_deleted_file_is_pruned_from_the_index(
    make_store: Callable[..., Chroma], folder: Path
) -> None:
    store = make_store()
    ingest(store, [str(folder)])
    index = frozen_index(store)

    (folder / "b.md").unlink()
    summary = ingest(store, [str(folder)])

    assert summary.gone == 1
    assert hits(index, "quokka") == []
    assert len(hits(index, "zebrafish")) == 1
    assert_agree(store, index)


def test_prune_missing_on_its_own_is_seen(make_store: Callable[..., Chroma], folder: Path) -> None:
    store = make_store()
    ingest(store, [str(folder)])
    index = frozen_index(store)

    (folder / "c.txt").unlink()
    kept = [str(folder / "a.txt"), str(folder / "b.md")]
    pruned = prune_missing(store, folder, kept)

    assert [gone.source for gone in pruned] == [str(folder / "c.txt")]
    assert hits(index, "axolotl") == []
    assert_agree(store, index)


def test_a_restamp_is_seen_by_a_filtered_search(
    make_store: Callable[..., Chroma], folder: Path
) -> None:
    store = make_store()
    ingest(store, [str(folder)], origin="first-copy")
    index = frozen_index(store)
    assert len(hits(index, "zebrafish", where={"ingest_origin": "first-copy"})) == 1

    summary = ingest(store, [str(folder)], origin="second-copy")  # metadata only

    assert (summary.unchanged, summary.written) == (3, 0)
    assert len(hits(index, "zebrafish", where={"ingest_origin": "second-copy"})) == 1
    assert hits(index, "zebrafish", where={"ingest_origin": "first-copy"}) == []


def chunks_of(source: str, text: str, **metadata: Any) -> list[Document]:
    document = Document(page_content=text, metadata={"source": source, **metadata})
    return WindowSplitter().split_documents([document])


def test_add_chunks_is_seen(make_store: Callable[..., Chroma], folder: Path) -> None:
    store = make_store()
    ingest(store, [str(folder)])
    index = frozen_index(store)

    add_chunks(store, chunks_of("notes/new.txt", page("pangolin")))

    assert len(hits(index, "pangolin")) == 1
    assert_agree(store, index)


def test_a_write_that_fails_part_way_is_seen_for_what_it_wrote(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    index = frozen_index(store)
    good = chunks_of("notes/good.txt", page("pangolin"))
    bad = chunks_of("notes/bad.txt", page("okapi"))
    bad[0].metadata["nested"] = {"not": "allowed"}  # Chroma refuses it, in the second batch

    with pytest.raises(ValueError, match="metadata"):
        add_chunks(store, [*good, *bad], batch_size=1)

    assert len(hits(index, "pangolin")) == 1  # the first batch was written, and told
    assert hits(index, "okapi") == []
    assert_agree(store, index)


def test_sync_file_of_a_changed_file_is_seen(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    sync_file(store, chunks_of("notes/a.txt", page("zebrafish")))
    index = frozen_index(store)

    outcome = sync_file(store, chunks_of("notes/a.txt", page("narwhal")))

    assert outcome.status == "updated"
    assert hits(index, "zebrafish") == []
    assert len(hits(index, "narwhal")) == 1
    assert_agree(store, index)


def test_remove_file_is_seen(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    chunks = chunks_of("notes/a.txt", page("zebrafish"))
    add_chunks(store, [*chunks, *chunks_of("notes/b.txt", page("quokka"))])
    index = frozen_index(store)

    assert remove_file(store, chunks[0].metadata["file_id"]) == 1

    assert hits(index, "zebrafish") == []
    assert len(hits(index, "quokka")) == 1
    assert_agree(store, index)


def test_each_operation_invalidates_once_and_only_when_it_wrote(
    make_store: Callable[..., Chroma], folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = KeywordIndex.invalidate.__func__  # type: ignore[attr-defined]

    def counted(
        cls: type[KeywordIndex], source: ChromaKeywordSource, changed: Any = None, **told: Any
    ) -> None:
        calls.append(source.name)
        original(cls, source, changed, **told)

    monkeypatch.setattr(KeywordIndex, "invalidate", classmethod(counted))
    store = make_store()

    ingest(store, [str(folder)])  # three files
    assert len(calls) == 1
    ingest(store, [str(folder)])  # nothing changed: no process needs to rebuild
    assert len(calls) == 1
    (folder / "a.txt").write_text(page("narwhal"))
    (folder / "b.md").unlink()
    (folder / "c.txt").write_text("")  # emptied: removed
    ingest(store, [str(folder)])  # a sync, a prune and a removal: one operation
    assert len(calls) == 2
    long = chunks_of("notes/x.txt", " ".join([page("pangolin")] * 20))
    assert len(long) > 3
    add_chunks(store, long, batch_size=1)  # one write per chunk, one invalidate
    assert len(calls) == 3
    sync_file(store, long)  # stamps the file's first chunk (add_chunks does not)
    assert len(calls) == 4
    sync_file(store, long)  # unchanged
    assert len(calls) == 4


class CountingStore(MemoryWindowStore):
    """A store of its own that embeds what it is given (no ``embeddings`` for ingestion), and
    counts how often it is told it was written to."""

    def __init__(self) -> None:
        super().__init__(DeterministicFakeEmbedding(size=16))
        self.told = 0

    @property
    def embeddings(self) -> Embeddings | None:
        return None  # ingest syncs it file by file, with sync_file

    def written(self) -> None:
        self.told += 1


def test_any_store_is_told_once_per_operation_not_per_file(folder: Path) -> None:
    store = CountingStore()

    summary = ingest(store, [str(folder)])

    assert summary.added == 3
    assert store.told == 1
    (folder / "a.txt").write_text(page("narwhal"))
    (folder / "b.md").unlink()
    ingest(store, [str(folder)])  # a sync and a prune
    assert store.told == 2
