"""Chroma's limits crossed on purpose: a file of more chunks than one call may carry ids.

Chroma 1.5 (SQLite) refuses a call with more than 32,762 ids, or a read that would return
more records ("too many SQL variables"), and an add above ``get_max_batch_size()`` (5,461).
Fake embeddings, the real embedded Chroma on disk, and the ingest path the command runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ContextWindowRetriever, LoadOptions, WindowSplitter
from window_retriever.ingestion._pipeline import ingest_sources
from window_retriever.ingestion._prune import origins_of, prune_missing
from window_retriever.ingestion._write import MAX_IDS_PER_CALL

pytestmark = pytest.mark.integration

BIG = MAX_IDS_PER_CALL + 700  # chunks of the big file: more than one call may name
SPLITTER = WindowSplitter(
    RecursiveCharacterTextSplitter(
        chunk_size=40, chunk_overlap=0, separators=["\n"], add_start_index=True
    )
)


def write_lines(path: Path, tag: str, count: int) -> None:
    # one line a chunk: "<tag> line 00012 ..." is 39 characters with its newline
    path.write_text("".join(f"{tag} line {i:05d} of the file.....\n" for i in range(count)))


def snapshot(store: Chroma) -> dict[str, list[tuple[str, int]]]:
    """Stored (id, chunk_index) per source, read page by page, checked for duplicates."""
    ids: list[str] = []
    per_source: dict[str, list[tuple[str, int]]] = {}
    offset = 0
    while True:
        page = store.get(include=["metadatas"], limit=5000, offset=offset)
        for chunk_id, metadata in zip(page["ids"], page["metadatas"], strict=True):
            ids.append(chunk_id)
            per_source.setdefault(metadata["source"], []).append(
                (chunk_id, metadata["chunk_index"])
            )
        if len(page["ids"]) < 5000:
            break
        offset += 5000
    assert len(ids) == len(set(ids)) == store._collection.count()
    return per_source


def assert_whole(files: dict[str, list[tuple[str, int]]], expected: dict[Path, int]) -> None:
    assert set(files) == {str(path.resolve()) for path in expected}
    for path, count in expected.items():
        chunks = files[str(path.resolve())]
        indexes = sorted(index for _, index in chunks)
        assert indexes == list(range(count))  # contiguous from 0, nothing lost or doubled
        (file_id,) = {chunk_id.rsplit(":", 1)[0] for chunk_id, _ in chunks}
        assert {chunk_id for chunk_id, _ in chunks} == {f"{file_id}:{i}" for i in range(count)}


def ingest(store: Chroma, paths: list[Path]) -> Counter[str]:
    sources = [str(p) for p in paths]
    origins = origins_of(sources, [str(paths[0].parent)])  # read from their folder
    outcomes = list(
        ingest_sources(store, sources, splitter=SPLITTER, options=LoadOptions(), origins=origins)
    )
    assert all(o.outcome is not None for o in outcomes), [o.error for o in outcomes]
    tally: Counter[str] = Counter()
    for o in outcomes:
        assert o.outcome is not None
        tally[o.outcome.status] += 1
        tally["written"] += o.outcome.written
        tally["removed"] += o.outcome.removed
    return tally


def test_a_corpus_above_both_limits_is_stored_whole_and_shrinks_whole(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    big, small, other = docs / "big.txt", docs / "small.txt", docs / "other.txt"
    write_lines(big, "big", BIG)
    write_lines(small, "small", 30)
    write_lines(other, "other", 45)
    client: Any = chromadb.PersistentClient(path=str(tmp_path / "db"))
    assert client.get_max_batch_size() < 6000
    store = Chroma(
        collection_name="limits",
        embedding_function=DeterministicFakeEmbedding(size=8),
        client=client,
    )

    tally = ingest(store, [big, small, other])
    assert tally == Counter(added=3, written=BIG + 75, removed=0)
    assert_whole(snapshot(store), {big: BIG, small: 30, other: 45})
    hit = store.similarity_search("big line 33000 of the file.....", k=1)[0]
    assert hit.metadata["chunk_index"] == 33000
    windows = ContextWindowRetriever(vectorstore=store, k=1, window_budget=200).invoke(
        "big line 33000 of the file....."
    )
    assert (
        windows[0].metadata["first_chunk_index"] < 33000 < windows[0].metadata["last_chunk_index"]
    )

    # unchanged: read by ids, BIG of them
    assert ingest(store, [big, small, other]) == Counter(unchanged=3, written=0, removed=0)

    # the big file shrinks: more ids to delete than one call may carry
    write_lines(big, "BIG", 60)
    tally = ingest(store, [big, small, other])
    assert tally == Counter(updated=1, unchanged=2, written=60, removed=BIG - 60)
    assert BIG - 60 > MAX_IDS_PER_CALL
    assert_whole(snapshot(store), {big: 60, small: 30, other: 45})

    big.unlink()
    pruned = prune_missing(store, docs, keep=[str(small.resolve()), str(other.resolve())])
    assert [(p.source, p.chunks) for p in pruned] == [(str(big.resolve()), 60)]
    assert_whole(snapshot(store), {small: 30, other: 45})
