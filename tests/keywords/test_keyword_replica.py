"""The keyword index as a replica of its collection: every write leaves a trace it acts on.

A writer killed between its write and the moment it tells the index (a real ``SIGKILL`` in
another process, on a Chroma server), a write recorded as pending whose writer never
finishes, and writes that bypass the library and keep the record count (found by
reconciliation). Each reader is compared with the collection as it is, by what it finds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

import window_retriever.keywords._lifecycle as lifecycle
from tests.helpers.servers import OPEN, server_store
from window_retriever import WindowSplitter, add_chunks, sync_file
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index

pytestmark = pytest.mark.integration

OLD = "The adapter pools connections and reuses them between requests to one host."
NEW = "The gateway throttles uploads with a leaky bucket before anything reaches disk."


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()


def pages(text: str) -> list[Document]:
    """Three stamped chunks of one file: the same ids whatever ``text`` says."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    body = "\n\n".join(f"Part {i}. {text}" for i in range(3))
    document = Document(body, metadata={"source": "guide.txt"})
    splitter = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
    return WindowSplitter(splitter).split_documents([document])


def reader(store: Chroma) -> KeywordIndex:
    """Another process's index (its own, not this process's shared one), checking always."""
    return KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)


def found(index: KeywordIndex, query: str) -> int:
    return len(index.search(query, k=10))


KILLED = """
import os, signal
from window_retriever import sync_file
from window_retriever.stores._chroma import ChromaWindowStore
from tests.keywords.test_keyword_replica import pages, NEW

def killed(self):  # the moment between the write and telling it: killed there
    os.kill(os.getpid(), signal.SIGKILL)

ChromaWindowStore.written = killed
sync_file(store, pages(NEW))
"""


def test_a_writer_killed_between_its_write_and_telling_it_leaves_no_reader_stale(
    chroma_server: str,
) -> None:
    config, store = server_store(chroma_server, "killed")
    add_chunks(store, pages(OLD))
    index = reader(store)
    assert found(index, "pools connections") == 3
    count = store._collection.count()

    done = subprocess.run(
        [sys.executable, "-c", OPEN + textwrap.dedent(KILLED), __import__("json").dumps(config)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert store._collection.count() == count  # rewritten in place: the count tells nothing
    assert found(index, "leaky bucket throttles") == 3
    assert found(index, "pools connections") == 0
    assert index._snapshot is not None and index._snapshot.unsettled  # never completed


def test_a_pending_write_is_read_again_at_each_check_until_it_settles(
    chroma_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write lands after the reader read its records, and its writer never tells."""
    _, store = server_store(chroma_server, "pending")
    chunks = add_chunks(store, pages(OLD))
    index = reader(store)
    assert found(index, "pools connections") == 3
    source = ChromaKeywordSource(store)

    KeywordIndex.intend(source, chunks)  # recorded, then the reader looks, then the write
    assert found(index, "pools connections") == 3
    new = pages(NEW)
    store._collection.upsert(
        ids=chunks,
        documents=[chunk.page_content for chunk in new],
        metadatas=[chunk.metadata for chunk in new],
        embeddings=[[0.5] * 16 for _ in new],
    )

    assert found(index, "leaky bucket throttles") == 3  # the same token: read again all the same
    reads = []
    monkeypatch.setattr(index._source, "records", _counting(index._source.records, reads))
    later = time.time() + lifecycle.PENDING_SECONDS + 1
    monkeypatch.setattr(lifecycle.time, "time", lambda: later)
    found(index, "bucket")
    found(index, "bucket")
    assert len(reads) == 1  # read one last time once expired, then no more
    assert index._snapshot is not None and not index._snapshot.unsettled


def _counting(method: Any, calls: list[Any]) -> Any:
    def counted(*args: Any) -> Any:
        calls.append(args)
        return method(*args)

    return counted


def test_a_completed_write_settles_at_once(chroma_server: str) -> None:
    _, store = server_store(chroma_server, "settled")
    add_chunks(store, pages(OLD))
    index = reader(store)
    found(index, "connections")
    sync_file(store, pages(NEW))  # pending entry, write, entry that completes it

    assert found(index, "leaky bucket throttles") == 3
    assert index._snapshot is not None and not index._snapshot.unsettled


@pytest.mark.parametrize("kind", ["rewrite", "balanced"])
def test_reconciliation_finds_outside_writes_that_keep_the_count(
    chroma_server: str, kind: str
) -> None:
    _, store = server_store(chroma_server, f"reconcile-{kind}")
    chunks = add_chunks(store, pages(OLD))
    index = keyword_index(store, check_interval=0)
    other = reader(store)  # another process's index, told through the feed
    assert found(index, "pools connections") == found(other, "pools connections") == 3
    collection = store._collection
    if kind == "rewrite":  # a text rewritten in place, its metadata moved
        collection.update(
            ids=[chunks[0]], documents=[NEW], metadatas=[{"tenant": "b"}], embeddings=[[0.5] * 16]
        )
        expected = {chunks[0]}
    else:  # one raw add and one raw delete: the count balances
        collection.add(ids=["outside"], documents=[NEW], embeddings=[[0.5] * 16])
        collection.delete(ids=[chunks[1]])
        expected = {"outside", chunks[1]}
    assert found(index, "leaky bucket throttles") == 0  # unseen: nothing told, same count

    assert index.reconcile() == expected

    assert found(index, "leaky bucket throttles") == found(other, "leaky bucket throttles") == 1
    if kind == "rewrite":  # its metadata as it is now, for filters too
        assert len(index.search("leaky bucket", k=10, where={"tenant": "b"})) == 1
    assert index.reconcile() == set()  # as the collection is now


def test_reconciliation_runs_in_the_background_every_interval(chroma_server: str) -> None:
    _, store = server_store(chroma_server, "background")
    chunks = add_chunks(store, pages(OLD))
    index = keyword_index(store, check_interval=0, reconcile_interval=0.2)
    found(index, "connections")
    store._collection.update(ids=[chunks[2]], documents=[NEW], embeddings=[[0.5] * 16])

    # Waits for the effect, not for what a pass found: the next pass, 0.2 s later, finds
    # nothing and says so, and a poll on a loaded machine can sleep through the pass between.
    deadline = time.monotonic() + 30
    while found(index, "leaky bucket throttles") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)

    assert found(index, "leaky bucket throttles") == 1
    assert index.reconciliations >= 1
    assert index.reconcile() == set()  # the background pass left it as the collection is
