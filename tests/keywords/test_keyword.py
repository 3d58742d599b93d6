"""The keyword index: BM25 over exactly the chunks of a real Chroma collection.

Real embedded Chroma (in memory and on disk) with ``DeterministicFakeEmbedding``; the clock of
the index is a test's own, so the staleness bound is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import orjson
import pytest
from chromadb.api.models.Collection import Collection
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

import window_retriever
from tests.helpers.stores import FakeClock, disk_store, row_file
from window_retriever import ConfigurationError
from window_retriever.keywords._engine import Fingerprint
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import COUNT_EVERY, FOLDER, GENERATION_KEY
from window_retriever.stores._chroma_keywords import (
    ChromaKeywordSource,
    invalidate_keywords,
    keyword_index,
)

FILLER = [
    "Connections are pooled and reused between requests to the same host.",
    "The client follows redirects unless told otherwise.",
    "Cookies persist across requests made from one session.",
    "Proxies can be configured per scheme, for http and https separately.",
    "Streaming downloads read the body in chunks as it arrives.",
    "Authentication handlers sign each outgoing request.",
    "Hooks run after a response arrives, before it is returned.",
    "A transport adapter can be mounted for a URL prefix.",
]
OPTION = "Set max_retries on the adapter to retry failed connections a few times."


pytestmark = pytest.mark.usefixtures("fresh_keyword_indexes")


class Reads:
    """Every ``Collection.get`` of the process that asked for documents (a build)."""

    def __init__(self) -> None:
        self.documents = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    seen = Reads()
    original = Collection.get

    def get(self: Collection, *args: Any, **kwargs: Any) -> Any:
        if "documents" in (kwargs.get("include") or []):
            seen.documents += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", get)
    return seen


def chunks(texts: list[str], **metadata: Any) -> list[Document]:
    return [
        Document(page_content=text, metadata={"chunk_index": i, **metadata}, id=f"doc:{i}")
        for i, text in enumerate(texts)
    ]


def store_with(make_store: Callable[..., Chroma], documents: list[Document]) -> Chroma:
    store = make_store()
    store.add_documents(documents, ids=[d.id for d in documents])
    return store


def test_an_exact_option_name_is_found_where_the_vector_search_misses_it(
    make_store: Callable[..., Chroma],
) -> None:
    store = store_with(make_store, chunks([*FILLER, OPTION]))
    vector_top = [d.id for d in store.similarity_search("max_retries", k=3)]
    assert "doc:8" not in vector_top  # the premise: the dense leg does not find it

    found = keyword_index(store).search("max_retries", k=3)

    assert [chunk_id for chunk_id, _ in found] == ["doc:8"]  # only chunks holding a term
    assert found[0][1] > 0


def test_stemming_and_stop_words(make_store: Callable[..., Chroma]) -> None:
    store = store_with(make_store, chunks([*FILLER, OPTION]))
    index = keyword_index(store)

    # "retrying" meets "retry" and "redirect" meets "redirects" through their stems
    assert {i for i, _ in index.search("retrying redirect", k=5)} == {"doc:1", "doc:8"}
    assert index.search("the and of to", k=5) == []  # only stop words: nothing to rank by
    assert index.search("", k=5) == []
    assert index.search("zyzzyva", k=5) == []  # no chunk holds it
    assert index.search("requests", k=0) == []


def test_k_larger_than_the_corpus_returns_every_chunk_holding_a_term(
    make_store: Callable[..., Chroma],
) -> None:
    store = store_with(make_store, chunks(["requests here", "more requests", "nothing"]))

    found = keyword_index(store).search("requests", k=100)

    assert sorted(i for i, _ in found) == ["doc:0", "doc:1"]
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_an_empty_collection_and_chunks_of_stop_words_only(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    index = keyword_index(store, check_interval=0)
    assert index.search("anything", k=5) == []
    assert len(index) == 0

    store.add_documents(chunks(["the and of", "", "it is"]), ids=["a", "b", "c"])
    assert index.search("the", k=5) == []
    assert len(index) == 3


def test_a_filter_hides_chunks_from_the_keyword_leg(make_store: Callable[..., Chroma]) -> None:
    documents = [
        Document(
            page_content=f"retry policy {'retry ' * (10 - i)}",
            metadata={"tenant": "acme" if i % 2 else "globex", "n": i},
            id=f"c{i}",
        )
        for i in range(10)
    ]
    store = store_with(make_store, documents)
    index = keyword_index(store)

    unfiltered = [i for i, _ in index.search("retry", k=3)]
    acme = [i for i, _ in index.search("retry", k=3, where={"tenant": "acme"})]

    assert unfiltered == ["c0", "c1", "c2"]  # globex ranks first without the filter
    assert acme == ["c1", "c3", "c5"]  # k is filled from what the filter allows


FILTERS: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = [
    ({"tenant": "acme"}, None),
    ({"$and": [{"tenant": "globex"}, {"n": {"$gte": 4}}]}, None),
    ({"$or": [{"n": {"$in": [1, 2, 3]}}, {"tenant": {"$ne": "acme"}}]}, None),
    ({"n": {"$nin": [0, 1]}}, None),
    ({"tags": {"$contains": "red"}}, None),  # a list operator: Chroma decides
    (None, {"$contains": "Retry"}),  # case-sensitive, as Chroma's
    (None, {"$not_contains": "policy 3"}),
    ({"tenant": "acme"}, {"$regex": "policy [0-5]"}),
]


@pytest.mark.parametrize(("where", "where_document"), FILTERS)
def test_filters_agree_with_chroma_s_own(
    make_store: Callable[..., Chroma],
    where: dict[str, Any] | None,
    where_document: dict[str, Any] | None,
) -> None:
    documents = [
        Document(
            page_content=f"{'Retry' if i % 3 == 0 else 'retry'} policy {i} " + "retry " * (i % 4),
            metadata={
                "tenant": "acme" if i % 2 else "globex",
                "n": i,
                "tags": ["red", "blue"] if i % 3 else ["blue"],
            },
            id=f"c{i:02d}",
        )
        for i in range(24)
    ]
    store = store_with(make_store, documents)
    allowed = set(store.get(where=where, where_document=where_document, include=[])["ids"])
    assert 0 < len(allowed) < 24
    index = keyword_index(store)
    ranked = [i for i, _ in index.search("retry", k=24)]

    found = index.search("retry", k=5, where=where, where_document=where_document)

    assert [i for i, _ in found] == [i for i in ranked if i in allowed][:5]


def test_a_deleted_chunk_never_comes_back(make_store: Callable[..., Chroma]) -> None:
    store = store_with(make_store, chunks([*FILLER, OPTION]))
    index = keyword_index(store)
    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:8"]

    store.delete(ids=["doc:8"])
    KeywordIndex.invalidate(ChromaKeywordSource(store))

    assert index.search("max_retries", k=3) == []
    assert "doc:8" not in {i for i, _ in index.search("adapter", k=10)}


def test_an_in_place_rewrite_is_seen_through_invalidate(
    make_store: Callable[..., Chroma],
) -> None:
    store = store_with(make_store, chunks([*FILLER, OPTION]))
    index = keyword_index(store)
    index._clock = FakeClock()  # no time passes: only invalidate can tell
    assert index.search("backoff_factor", k=3) == []

    rewritten = "Set backoff_factor to wait longer between retries."
    store.add_documents([Document(page_content=rewritten, id="doc:8")], ids=["doc:8"])
    assert index.search("backoff_factor", k=3) == []  # same count, not yet told
    window_retriever.invalidate_keywords(store)  # what docs/scaling.md tells an outside writer

    assert [i for i, _ in index.search("backoff_factor", k=3)] == ["doc:8"]
    assert index.search("max_retries", k=3) == []


def watched(make_store: Callable[..., Chroma]) -> tuple[Chroma, KeywordIndex, FakeClock]:
    """The filler chunks, their index built (checked every 5 s) and the index's own clock."""
    store = store_with(make_store, chunks(FILLER))
    index = keyword_index(store, check_interval=5)
    index._clock = clock = FakeClock()
    assert index.search("max_retries", k=3) == []
    return store, index, clock


def test_another_writer_is_seen_within_the_check_interval(
    make_store: Callable[..., Chroma],
) -> None:
    store, index, clock = watched(make_store)

    # Another client of the same collection writes, and tells (a new generation token).
    other = Chroma(
        client=chromadb.EphemeralClient(),
        collection_name=store._collection.name,
        embedding_function=DeterministicFakeEmbedding(size=64),
    )
    other._collection.add(ids=["new"], documents=[OPTION], embeddings=[[0.5] * 64])
    invalidate_keywords(other)

    clock.now += 4.9
    assert index.search("max_retries", k=3) == []  # within the bound: may be stale
    clock.now += 0.2
    assert [i for i, _ in index.search("max_retries", k=3)] == ["new"]


def test_a_writer_that_bypasses_the_library_is_seen_by_its_count(
    make_store: Callable[..., Chroma],
) -> None:
    """The count is read once every COUNT_EVERY intervals; the checks between read the token."""
    store, index, clock = watched(make_store)

    other = chromadb.EphemeralClient().get_collection(store._collection.name)
    other.add(ids=["new"], documents=[OPTION], embeddings=[[0.5] * 64])  # tells nobody

    for _ in range(COUNT_EVERY - 1):
        clock.now += 5.1
        assert index.search("max_retries", k=3) == []  # the token alone: unchanged
    clock.now += 5.1
    assert [i for i, _ in index.search("max_retries", k=3)] == ["new"]


def test_invalidate_keeps_the_collection_s_metadata_and_distance(
    chroma_client: Any, make_store: Callable[..., Chroma]
) -> None:
    name = make_store()._collection.name
    store = Chroma(
        collection_name=name + "-cos",
        embedding_function=DeterministicFakeEmbedding(size=8),
        client=chroma_client,
        collection_metadata={"hnsw:space": "cosine", "owner": "docs team"},
    )
    try:
        store.add_texts(["one text"], ids=["x"])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        first = chroma_client.get_collection(name + "-cos").metadata[GENERATION_KEY]
        KeywordIndex.invalidate(ChromaKeywordSource(store))

        collection = chroma_client.get_collection(name + "-cos")
        assert collection.metadata["owner"] == "docs team"
        assert collection.metadata[GENERATION_KEY] != first
        assert collection.configuration["hnsw"]["space"] == "cosine"
        assert store.similarity_search_with_score("one text", k=1)[0][1] == pytest.approx(0)
    finally:
        chroma_client.delete_collection(name + "-cos")


def test_one_index_per_collection_per_process(
    chroma_client: Any, make_store: Callable[..., Chroma]
) -> None:
    store = make_store()
    again = Chroma(
        collection_name=store._collection.name,
        embedding_function=DeterministicFakeEmbedding(size=64),
        client=chroma_client,
    )

    first = keyword_index(store, check_interval=3)
    second = keyword_index(again, check_interval=0.5)

    assert first is second
    assert first.check_interval == 0.5  # the strictest caller wins
    assert keyword_index(make_store()) is not first


def test_async_search_gives_the_same_answer(make_store: Callable[..., Chroma]) -> None:
    store = store_with(make_store, chunks([*FILLER, OPTION]))
    index = keyword_index(store)

    found = asyncio.run(index.asearch("retry adapter", k=3, where={"chunk_index": 8}))

    assert found == index.search("retry adapter", k=3, where={"chunk_index": 8})
    assert [i for i, _ in found] == ["doc:8"]


def test_bad_arguments_are_named(make_store: Callable[..., Chroma]) -> None:
    with pytest.raises(ConfigurationError, match="check_interval must be a number"):
        keyword_index(make_store(), check_interval=-1)
    with pytest.raises(ConfigurationError, match="check_interval must be finite"):
        keyword_index(make_store(), check_interval=float("inf"))
    with pytest.raises(ConfigurationError, match=r"vectorstore must be a langchain_chroma\.Chroma"):
        keyword_index(object())


# ---- saved beside an embedded store ------------------------------------------------------


def test_a_saved_index_is_loaded_not_rebuilt_while_the_collection_is_unchanged(
    tmp_path: Path, reads: Reads
) -> None:
    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION]), ids=[f"doc:{i}" for i in range(9)])
    first = keyword_index(store)
    expected = first.search("max_retries adapter", k=3)
    assert (first.builds, first.loads, reads.documents) == (1, 0, 1)
    assert (tmp_path / FOLDER / str(store._collection.id) / "state.json").is_file()

    KeywordIndex._shared.clear()  # as a new process would start
    second = keyword_index(disk_store(tmp_path))

    assert second.search("max_retries adapter", k=3) == expected
    assert (second.builds, second.loads, reads.documents) == (0, 1, 1)  # not one more read


def test_a_saved_index_is_rebuilt_when_the_collection_changed(tmp_path: Path, reads: Reads) -> None:
    store = disk_store(tmp_path)
    store.add_documents(chunks(FILLER), ids=[f"doc:{i}" for i in range(8)])
    keyword_index(store).search("adapter", k=3)
    KeywordIndex._shared.clear()

    store.add_documents([Document(page_content=OPTION, id="doc:8")], ids=["doc:8"])
    KeywordIndex.invalidate(ChromaKeywordSource(store))
    index = keyword_index(store)

    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:8"]
    assert (index.builds, index.loads, reads.documents) == (1, 0, 2)
    saved = list((tmp_path / FOLDER).iterdir())
    assert [p.name for p in saved] == [str(store._collection.id)]  # replaced, nothing left over


def test_indexed_gives_each_held_chunk_s_length_and_metadata_without_a_store_call(
    make_store: Callable[..., Chroma], reads: Reads
) -> None:
    texts = [*FILLER, OPTION, "café naïve ünïcode"]  # lengths in characters, not bytes
    store = store_with(make_store, chunks(texts, tenant="a"))
    index = keyword_index(store)
    assert index.indexed(["doc:0"]) is None  # nothing built before the first search
    index.search("adapter", k=3)
    before = reads.documents

    held = index.indexed(["doc:8", "doc:9", "doc:99", "doc:0"])

    assert reads.documents == before  # from memory
    assert held is not None and set(held) == {"doc:8", "doc:9", "doc:0"}  # "doc:99" left out
    stored = store._collection.get(ids=list(held), include=["documents", "metadatas"])
    rows = zip(stored["ids"], stored["documents"], stored["metadatas"], strict=True)
    for chunk_id, text, metadata in rows:
        assert held[chunk_id] == (len(text), metadata)
    assert held["doc:9"][0] == len("café naïve ünïcode")


def test_a_saved_index_keeps_the_lengths_and_one_saved_in_another_format_is_rebuilt(
    tmp_path: Path,
) -> None:
    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION]), ids=[f"doc:{i}" for i in range(9)])
    keyword_index(store).search("adapter", k=3)
    KeywordIndex._shared.clear()
    loaded = keyword_index(disk_store(tmp_path))
    loaded.search("adapter", k=3)
    assert (loaded.builds, loaded.loads) == (0, 1)
    assert loaded.indexed(["doc:8"]) == {"doc:8": (len(OPTION), {"chunk_index": 8})}

    saved = tmp_path / FOLDER / str(store._collection.id)
    state = orjson.loads((saved / "state.json").read_bytes())
    (saved / "state.json").write_bytes(orjson.dumps({**state, "format": 3}))  # rows.json
    KeywordIndex._shared.clear()
    rebuilt = keyword_index(disk_store(tmp_path))
    rebuilt.search("adapter", k=3)
    assert (rebuilt.builds, rebuilt.loads) == (1, 0)
    assert rebuilt.indexed(["doc:8"]) == {"doc:8": (len(OPTION), {"chunk_index": 8})}


@pytest.mark.parametrize("damage", ["{not json", '{"columns": [], "wide": 5}', "null"])
def test_a_damaged_saved_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION]), ids=[f"doc:{i}" for i in range(9)])
    keyword_index(store).search("adapter", k=3)
    KeywordIndex._shared.clear()
    saved = tmp_path / FOLDER / str(store._collection.id)
    row_file(saved, "columns.json").write_text(damage)

    index = keyword_index(store)

    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:8"]
    assert (index.builds, index.loads) == (1, 0)


@pytest.mark.parametrize("file", ["lengths.npy", "words-ends.npy", "column-0.npy"])
def test_saved_rows_that_disagree_in_length_are_rebuilt_even_with_their_checksums(
    tmp_path: Path, file: str
) -> None:
    """A save whose arrays disagree (a bug, not a disk) is caught when the rows are opened."""
    import window_retriever.keywords._engine as keyword

    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION]), ids=[f"doc:{i}" for i in range(9)])
    expected = keyword_index(store).search("max_retries", k=3)
    KeywordIndex._shared.clear()
    saved = tmp_path / FOLDER / str(store._collection.id)
    path = row_file(saved, file)
    array = np.load(path)
    path.unlink()
    np.save(path, array[:-1])
    state = orjson.loads((saved / "state.json").read_bytes())
    (saved / "state.json").write_bytes(orjson.dumps({**state, "files": keyword.checksums(saved)}))

    index = keyword_index(store)

    assert index.search("max_retries", k=3) == expected
    assert (index.builds, index.loads) == (1, 0)


def _damaged(path: Path, how: str) -> None:
    """Damage one saved file as a crash or a disk would; written as a new file (a process
    that still maps the old one must not see it change under it)."""
    data = path.read_bytes()
    path.unlink()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "one byte changed":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    else:
        assert how == "missing"


ENGINE_FILES = [".term", ".idx", ".store", ".fast", ".fieldnorm", "meta.json"]
ROW_FILES = ["ids.npy", "lengths.npy", "metadata.npy", "metadata-ends.npy", "words.npy"]
ROW_FILES += ["words-ends.npy", "column-0.npy", "columns.json", "rows.json", "rows.dead.npy"]


@pytest.mark.parametrize("how", ["truncated", "one byte changed", "missing"])
@pytest.mark.parametrize("file", ENGINE_FILES + ROW_FILES)
def test_a_damaged_engine_file_is_rebuilt_never_served(tmp_path: Path, file: str, how: str) -> None:
    """tantivy checks no checksum at open: a changed byte in the terms or postings could rank
    by garbage, one in the rows could name another chunk. The saved sizes and CRC-32s catch
    it; the rebuild is saved whole again."""
    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION] * 5), ids=[f"doc:{i:02d}" for i in range(45)])
    expected = keyword_index(store).search("max_retries adapter redirects", k=10)
    KeywordIndex._shared.clear()
    saved = tmp_path / FOLDER / str(store._collection.id)
    (target,) = [p for p in saved.iterdir() if p.name.endswith(file) and p.stat().st_size]
    _damaged(target, how)

    index = keyword_index(store)

    assert index.search("max_retries adapter redirects", k=10) == expected
    assert (index.builds, index.loads) == (1, 0)
    KeywordIndex._shared.clear()
    again = keyword_index(store)
    assert again.search("max_retries adapter redirects", k=10) == expected
    assert (again.builds, again.loads) == (0, 1)


def _counting_checksums(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record each folder whose files a load reads for their CRC-32."""
    import window_retriever.keywords._engine as keyword

    read: list[Path] = []
    checksums = keyword.checksums

    def counted(folder: Path, known: Any = None) -> dict[str, list[int]]:
        read.append(folder)
        return checksums(folder, known)

    monkeypatch.setattr(keyword, "checksums", counted)
    return read


def test_a_saved_index_whose_stamps_hold_is_loaded_without_reading_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a million chunks reading the saved files for their CRC-32 is 0.3 s of a new
    process's first query: a load whose files' stamps (a stat) are as the save left them
    skips it; without the stamps it reads them, and loads all the same."""
    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION] * 5), ids=[f"doc:{i:02d}" for i in range(45)])
    expected = keyword_index(store).search("max_retries adapter", k=10)
    read = _counting_checksums(monkeypatch)
    KeywordIndex._shared.clear()

    index = keyword_index(disk_store(tmp_path))

    assert index.search("max_retries adapter", k=10) == expected
    assert (index.builds, index.loads, read) == (0, 1, [])
    (tmp_path / FOLDER / str(store._collection.id) / "stamps.json").write_text("{garbled")
    KeywordIndex._shared.clear()
    again = keyword_index(disk_store(tmp_path))
    assert again.search("max_retries adapter", k=10) == expected
    assert (again.builds, again.loads, len(read)) == (0, 1, 1)


def test_a_file_removed_while_a_folder_is_read_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process saving may remove a file while this one reads the folder's stamps or
    checksums: each file is looked at as it is taken, so the one gone is passed over (the
    folder's files then differ from its save's, and the load reads them or rebuilds), never
    raised from the middle of the walk."""
    import os

    from window_retriever.keywords._engine import checksums, stamps

    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    real_stat, real_open = Path.stat, Path.open
    stats_of_a = []

    def stat(path: Path, **kwargs: Any) -> Any:  # the second of ``a``: stamps reads it
        stats_of_a.extend([path] if path.name == "a" else [])
        if len(stats_of_a) == 2 and os.path.exists(tmp_path / "b"):
            os.unlink(tmp_path / "b")
        return real_stat(path, **kwargs)

    def opened(path: Path, *args: Any, **kwargs: Any) -> Any:  # checksums reads ``a``
        if path.name == "a" and os.path.exists(tmp_path / "b"):
            os.unlink(tmp_path / "b")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    assert sorted(stamps(tmp_path)) == ["a", "c"]
    (tmp_path / "b").write_bytes(b"b" * 10)
    monkeypatch.setattr(Path, "open", opened)
    assert sorted(checksums(tmp_path)) == ["a", "c"]


@pytest.mark.parametrize("file", ["ids.npy", ".term", "meta.json"])
def test_a_file_rewritten_in_place_with_its_times_put_back_is_caught(
    tmp_path: Path, file: str
) -> None:
    """A restore that keeps the size, the inode and the modification time (``cp -p`` over
    the file) still changes the file's change time: its stamp no longer holds, so its CRC-32
    is read, and the index is rebuilt."""
    import os

    store = disk_store(tmp_path)
    store.add_documents(chunks([*FILLER, OPTION] * 5), ids=[f"doc:{i:02d}" for i in range(45)])
    expected = keyword_index(store).search("max_retries adapter redirects", k=10)
    KeywordIndex._shared.clear()
    saved = tmp_path / FOLDER / str(store._collection.id)
    (target,) = [p for p in saved.iterdir() if p.name.endswith(file) and p.stat().st_size]
    before = target.stat()
    with target.open("r+b") as opened:
        opened.seek(before.st_size // 2)
        byte = opened.read(1)
        opened.seek(before.st_size // 2)
        opened.write(bytes([byte[0] ^ 0xFF]))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = target.stat()
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (
        before.st_size,
        before.st_ino,
        before.st_mtime_ns,
    )

    index = keyword_index(store)

    assert index.search("max_retries adapter redirects", k=10) == expected
    assert (index.builds, index.loads) == (1, 0)


FILLERS = pytest.mark.parametrize("fillers", [0, 100, 500])
"""Chunks without the query's word: with none or few, most rows score (ranked in place, the
rest at 0); with 500, most do not (the scoring rows are gathered first). All rank alike."""


def _fillers(count: int) -> list[Document]:
    return [Document("banana cherry", metadata={"tenant": "x"}, id=f"z:{i}") for i in range(count)]


@FILLERS
def test_the_top_k_are_the_head_of_the_whole_ranking_ties_by_id(
    make_store: Callable[..., Chroma], fillers: int
) -> None:
    # 60 chunks hold the word, many with equal scores: the partial sort that serves a small
    # k must give exactly the head of the full ranking, with and without a filter
    texts = [" ".join(["apple"] * (1 + i % 4) + ["pear"] * (i % 7)) for i in range(60)]
    documents = [
        Document(text, metadata={"tenant": "ab"[i // 30]}, id=f"doc:{i:02d}")
        for i, text in enumerate(texts)
    ] + _fillers(fillers)
    store = store_with(make_store, documents)
    index = keyword_index(store)
    whole = index.search("apple", k=60)
    assert len(whole) == 60
    for k in (1, 3, 7, 20):
        assert index.search("apple", k=k) == whole[:k]
    where = {"tenant": "b"}
    allowed = [hit for hit in whole if hit[0] in set(store.get(where=where)["ids"])]
    for k in (1, 3, 7):
        assert index.search("apple", k=k, where=where) == allowed[:k]


@FILLERS
def test_a_filter_that_passes_few_chunks_finds_them_at_every_score(
    make_store: Callable[..., Chroma], fillers: int
) -> None:
    # 400 chunks hold the word; the filter passes one in 37 of them, at every score (some
    # among the 20 best, most below them), and none for "none"
    texts = [" ".join(["apple"] * (1 + i % 5) + ["pear"] * (i % 11)) for i in range(400)]
    documents = [
        Document(
            text,
            metadata={"tenant": "rare" if i % 37 == 3 or i == 44 else "common"},
            id=f"d:{i:03d}",
        )
        for i, text in enumerate(texts)
    ] + _fillers(fillers)
    store = store_with(make_store, documents)
    index = keyword_index(store)
    whole = index.search("apple", k=400)
    assert index.search("apple", k=1000) == whole  # only the chunks that hold the word
    rare = set(store.get(where={"tenant": "rare"})["ids"])
    allowed = [hit for hit in whole if hit[0] in rare]
    assert len(allowed) == 12
    assert allowed[0] in whole[:20] and allowed[1] not in whole[:20]
    for k in (1, 3, 5, 9, 12, 25):
        assert index.search("apple", k=k, where={"tenant": "rare"}) == allowed[:k]
    assert index.search("apple", k=5, where={"tenant": "none"}) == []


def _random_snapshot(seed: int, rows: int, wordless: int = 0) -> Any:
    """A snapshot of ``rows`` short random texts of few words (so many scores tie)."""
    import random

    from window_retriever.keywords._engine import index_records

    rng = random.Random(seed)
    common = ["window", "chunk", "budget", "merge", "store"]
    rare = [f"term{i}" for i in range(40)]
    texts = [
        " ".join(rng.choice(common) for _ in range(rng.randint(1, 8)))
        + " "
        + " ".join(rng.choice(rare) for _ in range(rng.randint(0, 3)))
        for _ in range(rows)
    ]
    texts += ["", "the and of", "a"] * (wordless // 3)  # no word once stop words are out
    rng.shuffle(texts)
    ids = [f"id{i:05d}" for i in range(len(texts))]
    built = index_records(Fingerprint("c", len(ids), None), ids, texts, [{} for _ in texts], None)
    return built, texts


@pytest.mark.parametrize("wordless", [0, 300], ids=["every-row-has-words", "some-rows-have-none"])
def test_scores_are_lucene_s_bm25_at_each_row(wordless: int) -> None:
    """Each row's score is BM25 (k1 1.2, b 0.75, Lucene's idf) of its stems, at its own row,
    where rows with no word are not in the engine; a repeated query word counts twice."""
    import math

    from window_retriever.keywords._engine import stems as stems_of

    snapshot, texts = _random_snapshot(5, 2000, wordless)
    stems = {i: stems_of(text) for i, text in enumerate(texts) if stems_of(text)}
    assert snapshot.engine.searcher.num_docs == len(texts) - wordless == len(stems)
    average = sum(map(len, stems.values())) / len(stems)
    for query in (["window"], ["term3", "merg"], ["chunk", "term7", "chunk"]):
        expected: dict[int, float] = {}
        for row, words in stems.items():
            score = 0.0
            for word in query:
                held = sum(word in w for w in stems.values())
                tf = words.count(word)
                if tf:
                    idf = math.log(1 + (len(stems) - held + 0.5) / (held + 0.5))
                    norm = 1.2 * (1 - 0.75 + 0.75 * len(words) / average)
                    score += idf * 2.2 * tf / (tf + norm)
            if score:
                expected[row] = score
        found = dict(snapshot.engine.top(query, len(texts), None))
        assert found.keys() == expected.keys()
        assert all(math.isclose(found[row], expected[row], rel_tol=1e-5) for row in found)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),  # seed
    st.sampled_from([0.0, 0.002, 0.05, 0.5, 1.0]),  # the share of rows the filter passes
    st.integers(1, 40),  # k
    st.booleans(),  # the filter searched within its rows, or hits over-fetched and kept
)
def test_the_top_k_under_any_filter_are_the_head_of_the_whole_ranking(
    seed: int, share: float, k: int, within: bool
) -> None:
    """Both ways of a filtered search give the head of the whole ranking, ties by row."""
    import numpy as np

    import window_retriever.keywords._engine as keyword

    snapshot, texts = _random_snapshot(seed % 1000, 3000)
    mask = np.random.default_rng(seed).random(len(texts)) < share
    whole = snapshot.engine.top(["window", "term1"], len(texts), None)
    assert whole == sorted(whole, key=lambda hit: (-hit[1], hit[0]))
    expected = [hit for hit in whole if mask[hit[0]]][:k]
    previous = keyword._SMALL_FILTER
    keyword._SMALL_FILTER = len(texts) if within else 0
    try:
        assert snapshot.engine.top(["window", "term1"], k, mask) == expected
        assert snapshot.engine.top(["window", "term1"], k, None) == whole[:k]
    finally:
        keyword._SMALL_FILTER = previous


@pytest.mark.parametrize("k", [1, 9, 30])
def test_equal_scores_past_the_fetch_limit_are_still_ordered_by_row(k: int) -> None:
    """A filtered search that over-fetches keeps fetching while the k-th score ties the last
    one fetched: rows written in reverse (tantivy breaks ties by its own document order) must
    still come back lowest row first."""
    import numpy as np

    import window_retriever.keywords._engine as keyword
    from window_retriever.keywords._rows import RowsBuilder

    tantivy = keyword._tantivy()
    index = tantivy.Index(keyword.Engine.schema())
    writer = index.writer(keyword._WRITER_HEAP, 1)
    rows = 600
    builder = RowsBuilder()
    for row in range(rows):
        builder.add(f"{row:04d}", 9, "same word", {})
    for row in reversed(range(rows)):
        document = tantivy.Document()
        document.add_text("words", "same word")
        document.add_unsigned("slot", row)
        writer.add_document(document)
    writer.commit()
    engine = keyword.Engine(index, builder.rows())
    mask = np.ones(rows, dtype=bool)
    mask[[3, 4]] = False  # a filter, over-fetched (not searched within its rows)
    previous = keyword._SMALL_FILTER
    keyword._SMALL_FILTER = 0
    try:
        hits = engine.top(["same"], k, mask)
    finally:
        keyword._SMALL_FILTER = previous
    expected = [row for row in range(rows) if mask[row]][:k]
    assert [row for row, _ in hits] == expected
    assert len({score for _, score in hits}) == 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["The", "and", "Windows", "running", "ran", "a", "x", "I'm", "can't"]),
            st.text(alphabet="abcXYZ é_-'.,0129\t\n", max_size=12),
            st.text(max_size=12),  # any unicode: capitals that lower-case to two letters, ...
        ),
        max_size=12,
    )
)
def test_text_is_tokenised_as_bm25s_tokenised_it(parts: list[str]) -> None:
    """The words are those the index had under ``bm25s.tokenize``, in order, repeats kept."""
    import bm25s
    import Stemmer

    from window_retriever.keywords._engine import stems

    query = " ".join(parts)
    expected = bm25s.tokenize(
        [query],
        lower=True,
        token_pattern=r"(?u)\b\w\w+\b",  # noqa: S106 - a pattern, not a password
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=False,
        show_progress=False,
    )[0]
    assert stems(query) == expected


# ---- the protocol, implemented without Chroma -----------------------------------------------


class ListSource:
    """A ``KeywordSource`` over a dict of records: the index needs nothing else of a store."""

    def __init__(self, records: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.records = records
        self.token = 0
        self.calls: list[str] = []

    @property
    def key(self) -> tuple[str, ...]:
        return ("list", str(id(self)))

    @property
    def index_directory(self) -> Path | None:
        return None

    def fingerprint(self) -> Fingerprint:
        self.calls.append("fingerprint")
        return Fingerprint("list", len(self.records), str(self.token))

    def generation(self) -> tuple[str, str | None]:
        self.calls.append("generation")
        return "list", str(self.token)

    def intend(self, ids: Any) -> str | None:
        self.token += 1
        return None  # no feed: nothing pending to follow

    def bump_generation(self, changed: Any = None, completes: Any = ()) -> None:
        self.token += 1

    def changes(self, since: str, until: str) -> set[str] | None:
        return None  # no feed: every change is a rebuild

    def pending(self) -> dict[str, tuple[float, frozenset[str]]]:
        return {}

    def records(self, ids: Sequence[str]) -> tuple[list[str], list[str], list[Mapping[str, Any]]]:
        found = [i for i in ids if i in self.records]
        return found, [self.records[i][0] for i in found], [self.records[i][1] for i in found]

    def pages(self, size: int) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
        self.calls.append("pages")
        ids = sorted(self.records)
        for start in range(0, len(ids), size):
            page = ids[start : start + size]
            yield page, [self.records[i][0] for i in page], [self.records[i][1] for i in page]

    def allowed_ids(
        self, where: Mapping[str, Any] | None, where_document: Mapping[str, Any] | None, size: int
    ) -> list[str]:
        self.calls.append("allowed_ids")
        needle = (where_document or {}).get("$contains", "")
        return [i for i, (text, _) in self.records.items() if needle in text]


def test_any_source_that_keeps_the_protocol_is_indexed() -> None:
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate([*FILLER, OPTION])}
    source = ListSource(records)
    index = KeywordIndex.for_source(source)
    index._clock = FakeClock()

    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:8"]
    assert [i for i, _ in index.search("requests", k=3, where={"n": {"$gte": 3}})] == ["doc:5"]
    found = index.search("adapter", k=3, where_document={"$contains": "max_retries"})
    assert [i for i, _ in found] == ["doc:8"]  # the source decides a document filter
    assert source.calls == ["fingerprint", "pages", "fingerprint", "allowed_ids"]

    records["doc:8"] = ("Set backoff_factor to wait longer.", {"n": 8})  # same count
    assert index.search("backoff_factor", k=3) == []  # not told, no check due
    KeywordIndex.invalidate(source)
    assert [i for i, _ in index.search("backoff_factor", k=3)] == ["doc:8"]


def test_a_document_filter_passing_only_chunks_the_index_does_not_hold_passes_none() -> None:
    """The source passes an id written since the build (not yet held): it marks no row.

    Its row is -1 (``Rows.rows_of``); taken as an index, -1 would mark the last row (here
    ``doc:7``, which holds the query's word but not the filter's) as passing.
    """
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate(FILLER)}
    source = ListSource(records)
    index = KeywordIndex.for_source(source)
    index._clock = FakeClock()
    assert [i for i, _ in index.search("adapter", k=3)] == ["doc:7"]  # the last row

    records["doc:9"] = (OPTION, {"n": 9})  # a bare write, no check due: not held
    found = index.search("adapter", k=3, where_document={"$contains": "max_retries"})
    assert source.calls[-1] == "allowed_ids"
    assert found == []


def test_checks_read_the_token_and_the_count_only_every_count_every_intervals() -> None:
    """A check costs one cheap call (the id and token); the count (a scan of the collection)
    is read every COUNT_EVERY intervals, after a write of this library, and by ``refresh``."""
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate(FILLER)}
    source = ListSource(records)
    index = KeywordIndex.for_source(source, check_interval=2)
    index._clock = clock = FakeClock()
    index.search("redirects", k=3)
    source.calls.clear()

    for _ in range(COUNT_EVERY - 1):
        clock.now += 2
        index.search("redirects", k=3)
    assert source.calls == ["generation"] * (COUNT_EVERY - 1)

    records["doc:9"] = (OPTION, {"n": 9})  # a bare write: the token stays
    clock.now += 1
    assert index.search("max_retries", k=3) == []  # no check due
    clock.now += 1
    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:9"]  # the count is due
    assert source.calls[-3:] == ["fingerprint", "pages", "fingerprint"]  # rebuilt

    source.calls.clear()
    records["doc:10"] = ("Use a timeout_seconds budget.", {"n": 10})
    KeywordIndex.invalidate(source)  # a write of this library: the count is read at once
    assert [i for i, _ in index.search("timeout_seconds", k=3)] == ["doc:10"]
    assert source.calls[0] == "fingerprint"

    source.calls.clear()
    index.refresh()
    assert source.calls == ["fingerprint"]


def test_another_process_s_token_is_seen_by_the_next_check_without_the_count() -> None:
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate(FILLER)}
    source = ListSource(records)
    index = KeywordIndex.for_source(source, check_interval=2)
    index._clock = clock = FakeClock()
    index.search("redirects", k=3)
    clock.now += 2
    index.search("redirects", k=3)  # a check by the token: the count is not due
    source.calls.clear()

    records["doc:1"] = ("Sessions keep a cookie jar.", {"n": 1})  # same count, in place
    source.token += 1  # as another process's invalidate does
    clock.now += 2
    assert index.search("redirects", k=3) == []
    assert source.calls[:2] == ["generation", "fingerprint"]  # changed: then read whole


class HeldSource(ListSource):
    """A ``ListSource`` whose ``generation`` reads the token, then waits for the test: a check
    on another thread that read the collection before the test's write."""

    def __init__(self, records: dict[str, tuple[str, dict[str, Any]]]) -> None:
        super().__init__(records)
        self.hold = False
        self.reading = threading.Event()
        self.release = threading.Event()

    def generation(self) -> tuple[str, str | None]:
        read = super().generation()
        if self.hold:
            self.hold = False
            self.reading.set()
            self.release.wait(5)
        return read


def _held_check(source: HeldSource, index: KeywordIndex) -> threading.Thread:
    """A search whose check (due now) has read the token and waits in ``generation``."""
    source.hold = True
    checking = threading.Thread(target=index.search, args=("redirects", 3))
    checking.start()
    assert source.reading.wait(5)
    return checking


def _filler_index(
    source_type: type[ListSource] = ListSource,
) -> tuple[dict[str, tuple[str, dict[str, Any]]], Any, KeywordIndex, FakeClock]:
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate(FILLER)}
    source = source_type(records)
    index = KeywordIndex.for_source(source, check_interval=2)
    index._clock = clock = FakeClock()
    index.search("redirects", k=3)
    return records, source, index, clock


def test_a_write_during_another_thread_s_check_is_seen_by_the_writer_s_next_search() -> None:
    records, source, index, clock = _filler_index(HeldSource)
    clock.now += 2
    checking = _held_check(source, index)
    records["doc:9"] = (OPTION, {"n": 9})  # this library's write, and its invalidate
    KeywordIndex.invalidate(source)
    source.release.set()
    checking.join(5)
    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:9"]


def test_refresh_during_another_thread_s_check_reads_the_count_itself() -> None:
    records, source, index, clock = _filler_index(HeldSource)
    clock.now += 2
    checking = _held_check(source, index)
    records["doc:9"] = (OPTION, {"n": 9})  # a bare write: the count alone tells
    refreshing = threading.Thread(target=index.refresh)
    refreshing.start()  # waits for the check in flight
    source.release.set()
    checking.join(5)
    refreshing.join(5)
    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:9"]


def test_a_bare_write_is_seen_once_count_every_intervals_passed_since_the_count() -> None:
    records, _, index, clock = _filler_index()
    clock.now += 2 * COUNT_EVERY - 1
    index.search("redirects", k=3)  # a check of the token alone, just before the count is due
    records["doc:9"] = (OPTION, {"n": 9})
    clock.now += 1  # COUNT_EVERY intervals since the count: due, though a check ran 1 s ago
    assert [i for i, _ in index.search("max_retries", k=3)] == ["doc:9"]


def test_the_snapshot_a_rebuild_replaced_is_not_held() -> None:
    records, _, index, clock = _filler_index()
    old = index._snapshot
    records["doc:9"] = (OPTION, {"n": 9})
    clock.now += 2 * COUNT_EVERY
    assert index.passing({"n": {"$gte": 0}}) is None  # a check finds the count changed
    assert index._stale is old
    index.search("redirects", k=3)  # rebuilds
    assert index._snapshot is not old and index._stale is None


class ChurningSource(ListSource):
    """A ``ListSource`` that is written to (a new record and token) during every read."""

    def __init__(self, records: dict[str, tuple[str, dict[str, Any]]], directory: Path) -> None:
        super().__init__(records)
        self.directory = directory
        self.reads = 0

    @property
    def index_directory(self) -> Path | None:
        return self.directory

    def pages(self, size: int) -> Iterator[tuple[list[str], list[str], list[Mapping[str, Any]]]]:
        yield from super().pages(size)
        self.reads += 1
        self.records[f"late:{self.reads}"] = (f"churn{self.reads} text", {"n": 100})
        self.token += 1


def test_a_build_the_collection_changed_under_three_times_is_kept_changed_not_saved(
    tmp_path: Path,
) -> None:
    records = {f"doc:{i}": (text, {"n": i}) for i, text in enumerate(FILLER)}
    source = ChurningSource(records, tmp_path)
    index = KeywordIndex.for_source(source, check_interval=2)
    index._clock = clock = FakeClock()
    index.search("redirects", k=3)
    snapshot = index._snapshot
    assert snapshot is not None and source.reads == 3
    held = snapshot.rows.ids_at(range(len(snapshot.rows)))
    assert "late:2" in held and "late:3" not in held  # written after it
    assert snapshot.fingerprint == Fingerprint("list", len(FILLER) + 2, "2")  # not the last
    assert index._stale is snapshot
    assert not any(tmp_path.rglob("state.json"))  # never loaded as current by a new process
    clock.now += 2
    index.search("redirects", k=3)  # the next check rebuilds (the source churns on)
    assert source.reads > 3


def test_the_machine_cache_is_the_variable_then_xdg_then_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from window_retriever.keywords._lifecycle import CACHE_VARIABLE, cache_directory, server_cache

    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "mine"))
    assert cache_directory() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "xdg" / "window_retriever"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_directory() == tmp_path / "home" / ".cache" / "window_retriever"
    one = server_cache("http://127.0.0.1:8000", "default_tenant", "default_database")
    assert one.parent == cache_directory() / "keyword"
    others = {
        server_cache("http://127.0.0.1:8001", "default_tenant", "default_database"),
        server_cache("http://127.0.0.1:8000", "acme", "default_database"),
        server_cache("http://127.0.0.1:8000", "default_tenant", "other"),
    }
    assert one not in others and len(others) == 3
