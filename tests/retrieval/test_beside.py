"""The keyword leg runs beside the vector search when it is ready (``_beside.Beside``).

A store in plain Python (``MemoryWindowStore`` with a keyword search of its own) tells each
leg when the other ran: the vector search waits a moment for the keyword search to start,
which it can only see when the two overlap.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ContextWindowRetriever, MemoryWindowStore, WindowSplitter, add_chunks
from window_retriever.retrieval import _beside as beside_module
from window_retriever.stores._protocol import Found, IdHits, Search, SearchIds, Where

ROOT = Path(__file__).parents[2]
TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
OVERLAP_WAIT = 5.0
"""How long a vector search waits to see the keyword search start (met at once when it runs)."""


class KeywordError(RuntimeError):
    pass


class VectorError(RuntimeError):
    pass


class Legs(MemoryWindowStore):
    """A store whose keyword search (chunks holding a query word) reports where and when it ran."""

    supports_keyword_search: ClassVar[bool] = True

    def __init__(self, *, ready: bool) -> None:
        super().__init__(DeterministicFakeEmbedding(size=16))
        self.ready = ready
        self.keyword_started = threading.Event()
        self.keyword_ended = threading.Event()
        self.vector_after_keyword = False
        self.keyword_threads: list[threading.Thread] = []
        self.overlapped: list[bool] = []
        self.keyword_fails = False
        self.vector_fails = False
        self.keyword_waits: threading.Event | None = None
        self.vector_waits = OVERLAP_WAIT if ready else 0.2
        self.asked: list[threading.Thread] = []
        self.answers: list[bool] | None = None
        """What ``keyword_search_ready`` answers in turn (else ``ready`` each time)."""
        self.contexts: list[str] = []

    def keyword_search_ready(self) -> bool:
        self.asked.append(threading.current_thread())
        return self.ready if self.answers is None else self.answers.pop(0)

    def keyword_search(
        self, query: str, k: int, where: Where | None, where_document: Where | None
    ) -> IdHits:
        self.keyword_threads.append(threading.current_thread())
        self.contexts.append(TENANT.get())
        self.keyword_started.set()
        try:
            return self._keyword_hits(query, k)
        finally:
            self.keyword_ended.set()

    def _keyword_hits(self, query: str, k: int) -> IdHits:
        if self.keyword_waits is not None:
            self.keyword_waits.wait(OVERLAP_WAIT)
        if self.keyword_fails:
            raise KeywordError("the keyword leg failed")
        words = set(query.lower().split())
        held = {
            chunk_id: sum(word in record.text.lower() for word in words)
            for chunk_id, record in self._records.items()
        }  # no filter: these tests give none
        ranked = sorted((n, chunk_id) for chunk_id, n in held.items() if n)
        return [(chunk_id, float(n)) for n, chunk_id in reversed(ranked)][:k]

    def _vector(self) -> None:
        self.overlapped.append(self.keyword_started.wait(self.vector_waits))
        if self.vector_after_keyword:  # and after its end is known to the event loop
            assert self.keyword_ended.wait(OVERLAP_WAIT)
            time.sleep(0.1)
        if self.vector_fails:
            raise VectorError("the vector leg failed")

    def search(self, request: Search) -> Found:
        self._vector()
        return super().search(request)

    def search_ids(self, request: SearchIds) -> IdHits:
        self._vector()
        return super().search_ids(request)


TEXT = " ".join(
    f"Paragraph {n} is about {'retries and timeouts' if n % 7 == 0 else 'something else'}."
    for n in range(120)
)


def legs(*, ready: bool) -> Legs:
    store = Legs(ready=ready)
    add_chunks(
        store,
        WindowSplitter(
            RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=0, add_start_index=True)
        ).split_documents([Document(page_content=TEXT, metadata={"source": "guide.txt"})]),
    )
    return store


def texts(documents: list[Document]) -> list[str]:
    return [document.page_content for document in documents]


@pytest.fixture(autouse=True)
def workers_free() -> Iterator[None]:
    yield
    for _ in range(beside_module.WORKERS):  # every started call has ended and let its worker go
        assert beside_module._free_workers.acquire(timeout=OVERLAP_WAIT)
    for _ in range(beside_module.WORKERS):
        beside_module._free_workers.release()


def test_a_ready_keyword_search_runs_on_a_worker_beside_the_vector_search() -> None:
    ready, later = legs(ready=True), legs(ready=False)
    query = "How are retries and timeouts set?"
    beside = ContextWindowRetriever(vectorstore=ready, total_budget=600).invoke(query)
    after = ContextWindowRetriever(vectorstore=later, total_budget=600).invoke(query)
    assert ready.overlapped == [True]
    assert ready.keyword_threads[0] is not threading.current_thread()
    assert ready.keyword_threads[0].name.startswith("window-retriever-beside")
    assert texts(beside) == texts(after)  # the same windows either way
    assert any("retries" in text for text in texts(beside))


def test_a_keyword_search_that_is_not_ready_runs_after_the_vector_search_in_the_callers_thread() -> (
    None
):
    store = legs(ready=False)
    ContextWindowRetriever(vectorstore=store, total_budget=600).invoke("retries and timeouts")
    assert store.overlapped == [False]
    assert store.keyword_threads == [threading.current_thread()]


def test_a_call_no_longer_ready_when_its_worker_runs_is_run_by_the_caller() -> None:
    """A check fell due while the worker waited: the worker would check (or rebuild) the index."""
    store = legs(ready=True)
    store.vector_waits = 0.2
    store.answers = [True, False]  # ready when started, not when the worker asks again
    ContextWindowRetriever(vectorstore=store, total_budget=600).invoke("retries")
    assert store.asked[0] is threading.current_thread()
    assert store.asked[1].name.startswith("window-retriever-beside")
    assert store.keyword_threads == [threading.current_thread()]


def test_the_worker_runs_the_keyword_search_in_the_callers_context() -> None:
    store = legs(ready=True)
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=600)
    token = TENANT.set("acme")
    try:
        retriever.invoke("retries")
    finally:
        TENANT.reset(token)
    assert store.keyword_threads[0] is not threading.current_thread()
    assert store.contexts == ["acme"]


def test_with_every_worker_busy_the_keyword_search_runs_in_the_callers_thread() -> None:
    store = legs(ready=True)
    store.vector_waits = 0.2
    for _ in range(beside_module.WORKERS):
        assert beside_module._free_workers.acquire(blocking=False)
    try:
        ContextWindowRetriever(vectorstore=store, total_budget=600).invoke("retries")
    finally:
        for _ in range(beside_module.WORKERS):
            beside_module._free_workers.release()
    assert store.keyword_threads == [threading.current_thread()]


def test_the_keyword_searchs_error_on_a_worker_is_raised_by_invoke() -> None:
    store = legs(ready=True)
    store.keyword_fails = True
    retriever = ContextWindowRetriever(vectorstore=store, total_budget=600)
    with pytest.raises(KeywordError, match="the keyword leg failed"):
        retriever.invoke("retries")
    with pytest.raises(KeywordError, match="the keyword leg failed"):
        asyncio.run(retriever.ainvoke("retries"))


async def test_async_runs_the_keyword_search_beside_the_vector_search() -> None:
    store = legs(ready=False)  # the async path starts it whether or not it is ready
    store.vector_waits = OVERLAP_WAIT
    got = await ContextWindowRetriever(vectorstore=store, total_budget=600).ainvoke("retries")
    assert store.overlapped == [True]
    assert texts(got) == texts(
        ContextWindowRetriever(vectorstore=legs(ready=False), total_budget=600).invoke("retries")
    )


def test_a_vector_search_error_ends_the_query_while_the_keyword_search_still_runs() -> None:
    store = legs(ready=True)
    store.vector_fails = True
    store.keyword_waits = threading.Event()  # the keyword search is still running
    try:
        with pytest.raises(VectorError):
            ContextWindowRetriever(vectorstore=store, total_budget=600).invoke("retries")
        assert not store.keyword_ended.is_set()  # raised without waiting for the keyword leg
    finally:
        store.keyword_waits.set()


def test_async_a_vector_search_error_cancels_the_started_task_and_leaves_no_error_unseen() -> None:
    seen: list[dict[str, Any]] = []

    async def query(store: Legs) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: seen.append(context))
        with pytest.raises(VectorError):
            await ContextWindowRetriever(vectorstore=store, total_budget=600).ainvoke("retries")
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.sleep(0.05)
        assert all(task.done() for task in pending)
        if store.keyword_waits is not None:
            store.keyword_waits.set()  # the thread ends; the task was let go before

    failing = legs(ready=True)  # the keyword search fails first, then the vector search
    failing.keyword_fails = True
    failing.vector_fails = True
    failing.vector_after_keyword = True
    asyncio.run(query(failing))
    still_running = legs(ready=True)  # the vector search fails while the keyword search runs
    still_running.vector_fails = True
    still_running.keyword_waits = threading.Event()
    try:
        asyncio.run(query(still_running))
    finally:
        still_running.keyword_waits.set()
    assert still_running.keyword_threads  # it had started
    gc.collect()
    assert seen == []  # no "Task exception was never retrieved"


FORKED_CHILD = """
import os, signal, sys
from tests.retrieval.test_beside import legs
from window_retriever import ContextWindowRetriever
from window_retriever.retrieval import _beside as beside_module

ContextWindowRetriever(vectorstore=legs(ready=True), total_budget=600).invoke("retries")
assert beside_module._pool is not None  # the parent's workers exist, and are not the child's
child = os.fork()
if child == 0:
    signal.alarm(20)  # a child that waits for its parent's workers ends here
    store = legs(ready=True)
    ContextWindowRetriever(vectorstore=store, total_budget=600).invoke("retries")
    os._exit(0 if store.keyword_threads[0].name.startswith("window-retriever-beside") else 3)
_, status = os.waitpid(child, 0)
if os.WIFSIGNALED(status):
    sys.exit("the child's query never ended: it waited for its parent's workers")
sys.exit(os.WEXITSTATUS(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_workers() -> None:
    """In a process of its own: forking this one (the suite's threads, Chroma's) risks locks
    another thread held at the fork, which is not what this test is about."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
