"""A search never waits for a refresh of a large index: it answers from the snapshot it has.

The refresh (first build, catch-up) runs on a background thread; the source here blocks its
reads on a gate the test opens only after the searches returned, so a search that waited for
the refresh would still be blocked (the gate times out after ``GATE_SECONDS``) and find the
refresh over when it returned.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

import window_retriever.keywords._lifecycle as lifecycle
from tests.helpers.servers import run_script
from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index

GATE_SECONDS = 10.0


class Gated(ChromaKeywordSource):
    """The collection's source, whose reads of records wait for ``gate`` once it is closed."""

    def __init__(self, vectorstore: Any) -> None:
        super().__init__(vectorstore)
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()

    def _wait(self) -> None:
        if not self.gate.is_set():
            self.blocked.set()
            self.gate.wait(GATE_SECONDS)

    def pages(self, size: int) -> Iterator[Any]:
        self._wait()
        yield from super().pages(size)

    def records(self, ids: Any) -> Any:
        self._wait()
        return super().records(ids)


@pytest.fixture(autouse=True)
def _every_refresh_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "INLINE_ROWS", 0)  # as for a collection of a million


def store_of(texts: list[str]) -> Chroma:
    store = Chroma(
        collection_name=f"background-{random.getrandbits(32):08x}",
        client=chromadb.EphemeralClient(),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    documents = [Document(text, metadata={"source": f"p{i}"}) for i, text in enumerate(texts)]
    add_chunks(store, WindowSplitter().split_documents(documents))
    return store


def eventually(found: Any, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if result := found():
            return result
        time.sleep(0.05)
    raise AssertionError("the background refresh never finished")


def test_the_first_search_answers_at_once_while_the_index_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = store_of(["The window budget grows.", "Chunks merge into windows."])
    source = Gated(store)
    index = KeywordIndex(source, check_interval=0, reconcile_interval=None)
    source.gate.clear()

    with caplog.at_level(logging.WARNING):
        assert index.search("window budget", k=5) == []  # nothing yet, at once
        assert source.blocked.wait(GATE_SECONDS)
        assert index._refreshing  # the build still runs: the search did not wait for it
        assert index.search("window budget", k=5) == []
    building = [r for r in caplog.records if "being built in the background" in r.message]
    assert len(building) == 1  # said once

    source.gate.set()

    hits = eventually(lambda: index.search("window budget", k=5))
    assert len(hits) == 2


def test_a_search_answers_from_the_snapshot_it_has_while_a_catch_up_runs() -> None:
    store = store_of(["The window budget grows.", "Chunks merge into windows."])
    source = Gated(store)
    index = KeywordIndex(source, check_interval=0, reconcile_interval=None)
    eventually(lambda: index.search("budget", k=5))
    before = index.search("budget", k=5)
    source.gate.clear()
    pangolin = [Document("A pangolin budget appears.", metadata={"source": "new"})]
    add_chunks(store, WindowSplitter().split_documents(pangolin))

    answers: list[Any] = []
    other = threading.Thread(target=lambda: answers.append(index.search("pangolin", k=5)))
    assert index.search("budget", k=5) == before  # the snapshot it has
    assert source.blocked.wait(GATE_SECONDS)
    other.start()
    other.join(GATE_SECONDS / 2)
    assert answers == [[]]  # another thread did not wait either
    assert index._refreshing  # the catch-up still runs

    source.gate.set()

    assert len(eventually(lambda: index.search("pangolin", k=5))) == 1
    assert index.catch_ups == 1 and index.builds == 1


def test_documents_say_the_keyword_leg_is_building_until_the_index_is_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = store_of(["The window budget grows.", "Chunks merge into windows."])
    gate = threading.Event()
    pages = ChromaKeywordSource.pages

    def gated(self: ChromaKeywordSource, size: int) -> Iterator[Any]:
        gate.wait(GATE_SECONDS)
        yield from pages(self, size)

    monkeypatch.setattr(ChromaKeywordSource, "pages", gated)
    retriever = ContextWindowRetriever(store, total_budget=500)

    first = retriever.invoke("window budget")  # answered by the vector leg alone, at once
    assert first and {d.metadata.get("keyword_leg") for d in first} == {"building"}
    assert (
        "keyword_leg" not in ContextWindowRetriever(store, k=2).invoke("window budget")[0].metadata
    )

    gate.set()
    keyword_index(store).refresh()
    later = retriever.invoke("window budget")
    assert later and all("keyword_leg" not in d.metadata for d in later)


def test_reconciliations_take_no_more_than_their_share_of_a_core() -> None:
    """A pass that takes longer than ``RECONCILE_SHARE`` of its interval pushes the next one
    back (at 1M chunks a pass reads for 90 s: every 600 s would be 15% of a core)."""

    class Slow:
        reconcile_interval = 0.01
        passes = 0

        def reconcile(self) -> None:
            self.passes += 1
            time.sleep(0.02)  # with RECONCILE_SHARE 0.05: the next in 0.4 s, not 0.01

    reconciler, index = lifecycle._Reconciler(), Slow()
    reconciler.schedule(index)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + GATE_SECONDS
        while not index.passes and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.3)  # the next pass is due 0.4 s after the first ended
    finally:
        reconciler.stop()
    assert index.passes == 1  # without the share: about ten


def test_a_new_process_loads_the_saved_index_once_and_holds_it(tmp_path: Any) -> None:
    """A process that finds the saved index as the collection is loads it in its first search
    and keeps it: every later search reads the held snapshot, none loads it again (each did,
    and answered from the load without holding it: at 100k chunks the default read 78 chunks
    a query where it reads 7, and cost 4.4x static windows where it costs 1.0x)."""
    client = chromadb.PersistentClient(path=str(tmp_path))
    store = Chroma("saved", DeterministicFakeEmbedding(size=8), client=client)
    texts = ["The window budget grows.", "Chunks merge into windows."]
    documents = [Document(text, metadata={"source": f"p{i}"}) for i, text in enumerate(texts)]
    add_chunks(store, WindowSplitter().split_documents(documents))
    keyword_index(store).refresh()  # built and saved
    KeywordIndex._shared.clear()  # as a new process: nothing held

    index = keyword_index(store, check_interval=0)
    for _ in range(5):
        assert len(index.search("window budget", k=5)) == 2
    assert index.loads == 1 and index.builds == 0
    assert not index.building


EXITING = """
import json, pathlib, sys, threading, time
import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
import window_retriever.keywords._lifecycle as lifecycle
from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.stores._chroma_keywords import ChromaKeywordSource

config = json.loads(sys.argv[1])
lifecycle.INLINE_ROWS, lifecycle.PAGE_SIZE = 5, 2  # a build in the background, page by page
marker = pathlib.Path(config["marker"])
read = ChromaKeywordSource.pages


def pages(self, size):
    try:
        for page in read(self, size):
            time.sleep(0.05)  # a page of a large collection takes time
            yield page
    finally:
        marker.write_text("stopped")  # the read ended: it was not cut off by the exit


ChromaKeywordSource.pages = pages
store = Chroma(
    client=chromadb.EphemeralClient(),
    collection_name="exiting",
    embedding_function=DeterministicFakeEmbedding(size=16),
)
text = " ".join(f"Sentence {n} about gardens and pottery." for n in range(300))
add_chunks(store, WindowSplitter().split_documents([Document(text, metadata={"source": "notes"})]))
ContextWindowRetriever(store, total_budget=800).invoke("pottery")  # starts the build
building = [t for t in threading.enumerate() if t.name == "window-retriever-keywords"]
print(json.dumps(bool(building) and building[0].is_alive()))  # then the process exits
"""


def test_an_exit_stops_a_build_in_the_background_and_waits_for_it(tmp_path: Path) -> None:
    """Found by a benchmark: asking one question of 20,000 new chunks and exiting crashed the
    process (a segmentation fault: the build's thread still read Chroma and wrote tantivy's
    files as the interpreter tore its modules down). The exit now stops the read at its next
    page and waits for the thread: the read ends (its ``finally`` runs), and the exit is
    clean, well before the build would have ended."""
    marker = tmp_path / "marker"
    began = time.monotonic()
    still_building = run_script(EXITING, {"marker": str(marker)})
    assert still_building is True  # the exit came while the build ran
    assert marker.exists()  # the read ended: not cut off mid-page by the exit
    assert time.monotonic() - began < 60
