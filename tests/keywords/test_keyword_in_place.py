"""A catch-up of a large index updates its engine in place, by the changed documents alone.

``REINDEX_ROWS`` is set to 0 here, as for a collection past it. The engine's adds and deletes
are counted; what the index finds is compared with an index built from scratch over the same
collection: the same chunks for every query (the BM25 statistics count a deleted document
until its segment merges, so scores may differ a little, never the set of matches).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter

import window_retriever.keywords._lifecycle as lifecycle
from window_retriever import WindowSplitter, add_chunks, sync_file
from window_retriever.ingestion._prune import remove_file
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores._chroma_keywords import ChromaKeywordSource

WORDS = ["window", "chunk", "budget", "merge", "store", "query", "answer", "table", "sentence"]
QUERIES = ["window budget", "merge table", "rare1 rare2", "sentence", "pangolin"]


@pytest.fixture(autouse=True)
def _every_index_updated_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "REINDEX_ROWS", 0)


class Scratch(ChromaKeywordSource):
    """The same collection, indexed from scratch: no saved copy, no feed."""

    @property
    def index_directory(self) -> Path | None:
        return None

    def changes(self, since: str, until: str) -> set[str] | None:
        return None


def page(rng: random.Random, source: str, extra: str = "") -> Document:
    words = [rng.choice(WORDS) for _ in range(rng.randint(60, 120))]
    words += [f"rare{rng.randint(0, 5)}" for _ in range(2)]
    return Document(" ".join(words) + extra, metadata={"source": source})


def split(documents: list[Document]) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=200, chunk_overlap=0)
    return WindowSplitter(splitter).split_documents(documents)


def matches(index: KeywordIndex) -> list[set[str]]:
    return [{chunk_id for chunk_id, _ in index.search(query, k=1000)} for query in QUERIES]


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_a_catch_up_adds_and_deletes_only_the_changed_documents(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    client: Any = (
        chromadb.PersistentClient(path=str(tmp_path / "db"))
        if kind == "disk"
        else chromadb.EphemeralClient()
    )
    store = Chroma(
        collection_name=f"in-place-{kind}",
        client=client,
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    add_chunks(store, split([page(rng, f"p{i}") for i in range(30)]))
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    before = matches(index)
    held = index._snapshot
    assert held is not None and index.builds == 1

    rewritten = split([page(rng, "p0", " pangolin")])  # same source: new text, same ids
    added = split([page(rng, "n1", " pangolin")])
    removed = split([page(random.Random(0), "p1")])[0].metadata["file_id"]
    sync_file(store, rewritten)
    add_chunks(store, added)
    gone = len(store.get(where={"file_id": removed})["ids"])
    remove_file(store, removed)

    after = matches(index)

    assert index.builds == 1 and index.catch_ups == 1
    assert index.engine_adds == len(rewritten) + len(added)
    assert index.engine_deletes == len(rewritten) + gone
    assert after == matches(KeywordIndex(Scratch(store), reconcile_interval=None))
    assert after[-1] and not before[-1]  # the new word found
    assert matches_of(held) == before  # the old snapshot still answers as it did
    if kind == "disk":  # a new process loads the updated copy, exactly, by its stamps
        import orjson

        import window_retriever.keywords._engine as engine

        saved = index.directory / str(store._collection.id)
        parts = orjson.loads((saved / "rows.json").read_bytes())["parts"]
        new = held.rows.span + len(rewritten) + len(added)
        assert parts == [[0, held.rows.span], [held.rows.span, new]]  # the rows held kept

        read: list[Path] = []
        checksums = engine.checksums
        monkeypatch.setattr(engine, "checksums", lambda *a: read.append(a[0]) or checksums(*a))
        other = KeywordIndex(ChromaKeywordSource(store), reconcile_interval=None)
        assert matches(other) == after
        assert (other.loads, other.builds) == (1, 0)
        assert read == []  # stamped after the old folder's removal changed its links' ctime


def matches_of(snapshot: Any) -> list[set[str]]:
    from window_retriever.keywords._engine import stems

    found = []
    for query in QUERIES:
        hits = snapshot.engine.top(stems(query), 1000, None)
        found.append({snapshot.rows.id(row) for row, _ in hits})
    return found


def test_an_engine_that_deleted_a_quarter_of_its_rows_is_indexed_anew(tmp_path: Path) -> None:
    rng = random.Random(3)
    store = Chroma(
        collection_name="in-place-compact",
        client=chromadb.EphemeralClient(),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    add_chunks(store, split([page(rng, f"p{i}") for i in range(4)]))
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    matches(index)
    rewrites = 0
    for _ in range(3):
        chunks = split([page(rng, "p0", " pangolin")])
        rewrites += len(chunks)
        sync_file(store, chunks)
        matches(index)
    assert index._snapshot is not None
    assert index._snapshot.deleted <= len(index._snapshot.rows) * lifecycle._DELETED_SHARE
    assert index.catch_ups == 3
    assert 0 < index.engine_deletes < rewrites  # in place, then indexed anew once


def test_a_catch_up_is_searched_while_its_rows_are_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving every row is a third of a catch-up at a million chunks (1.3 s of 3): searches
    answer from the updated index while it is written, not from the old one."""
    from window_retriever.keywords._rows import Rows

    rng = random.Random(11)
    store = Chroma(
        collection_name="in-place-served",
        client=chromadb.PersistentClient(path=str(tmp_path / "db")),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    add_chunks(store, split([page(rng, f"p{i}") for i in range(20)]))
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    assert not matches(index)[-1]  # no chunk holds "pangolin" yet
    meanwhile: list[set[str]] = []
    save = Rows.save

    def saving(rows: Rows, folder: Path, beside: Path | None = None) -> None:
        meanwhile.append(matches_of(index._snapshot)[-1])  # what a search answers now
        save(rows, folder, beside)

    monkeypatch.setattr(Rows, "save", saving)
    add_chunks(store, split([page(rng, "n1", " pangolin")]))

    after = matches(index)

    assert index.catch_ups == 1 and index.builds == 1
    assert after[-1] and meanwhile == [after[-1]]
    other = KeywordIndex(ChromaKeywordSource(store), reconcile_interval=None)
    assert matches(other) == after and (other.loads, other.builds) == (1, 0)


def test_ties_are_ranked_by_id_whatever_part_holds_them() -> None:
    """A chunk a catch-up added has a later slot than those held: equal scores are still
    ranked by id, as a build of the same chunks ranks them (not by slot)."""
    store = Chroma(
        collection_name="in-place-ties",
        client=chromadb.EphemeralClient(),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    held = split([Document("the quokka molts", metadata={"source": "held"})])
    add_chunks(store, split([page(random.Random(5), f"p{i}") for i in range(3)]) + held)
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    assert [i for i, _ in index.search("quokka", k=5)] == [held[0].id]
    added = next(  # a chunk of the same text whose id sorts first
        chunks
        for source in (f"added-{n}" for n in range(100))
        if (chunks := split([Document("the quokka molts", metadata={"source": source})]))[0].id
        < (held[0].id or "")
    )
    add_chunks(store, added)

    found = index.search("quokka", k=5)

    assert index.catch_ups == 1
    assert found[0][1] == found[1][1]  # a tie
    assert [i for i, _ in found] == [added[0].id, held[0].id]


def test_a_catch_up_never_links_the_files_another_process_saved_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes hold the same saved index; one catches up and saves first. The other's
    catch-up must not link the files now in the folder (the first one's engine and rows, with
    its slots): it links only files it holds, finds them replaced, and indexes anew."""
    import os

    import window_retriever.keywords._engine as engine

    rng = random.Random(13)
    store = Chroma(
        collection_name="in-place-race",
        client=chromadb.PersistentClient(path=str(tmp_path / "db")),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    add_chunks(store, split([page(rng, f"p{i}") for i in range(20)]))
    first = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    matches(first)
    second = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    matches(second)
    assert (second.loads, second.builds) == (1, 0)  # the very files the first one saved
    assert second._snapshot is not None and second._snapshot.engine is not None
    held = set(second._snapshot.engine.held.values())

    add_chunks(store, split([page(rng, "n1", " pangolin")]))
    matches(first)  # caught up, saved over the folder both held
    sync_file(store, split([page(rng, "p3", " pangolin")]))  # a state neither saved
    linked: list[int] = []
    link = os.link

    def linking(source: Any, destination: Any) -> None:
        linked.append(os.stat(source).st_ino)
        link(source, destination)

    monkeypatch.setattr(engine.os, "link", linking)

    after = matches(second)

    assert linked and set(linked) - held == set(linked[-1:])  # the last: the first's, refused
    expected = matches(KeywordIndex(Scratch(store), reconcile_interval=None))
    assert after == expected and after[-1]
    monkeypatch.undo()
    third = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    assert matches(third) == expected


def test_a_catch_up_reads_the_checksums_of_the_files_it_wrote_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files it linked are the very files it holds (checked by their inodes): their
    checksums are taken as saved, the held part's rows not read again (at a million chunks
    hundreds of megabytes a catch-up)."""
    import window_retriever.keywords._engine as engine

    rng = random.Random(17)
    store = Chroma(
        collection_name="in-place-checksums",
        client=chromadb.PersistentClient(path=str(tmp_path / "db")),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    add_chunks(store, split([page(rng, f"p{i}") for i in range(20)]))
    index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
    matches(index)
    assert index._snapshot is not None and index._snapshot.engine is not None
    held = set(index._snapshot.engine.held)
    read: list[str] = []
    checksums = engine.checksums

    def counted(folder: Path, known: Any = None) -> dict[str, list[int]]:
        read.extend(p.name for p in folder.iterdir() if not known or p.name not in known)
        return checksums(folder, known)

    monkeypatch.setattr(engine, "checksums", counted)
    add_chunks(store, split([page(rng, "n1", " pangolin")]))

    assert matches(index)[-1] and index.catch_ups == 1
    assert read and not set(read) & {name for name in held if name.startswith("rows-0-")}
