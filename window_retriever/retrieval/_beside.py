"""Steps of a retrieval that are not store requests, and the one worker thread that earns its place.

A retrieval is a generator of requests (see ``_retriever``). Most are store requests; a
:class:`Call` is any other step (a keyword search, another retriever's ``invoke``, a query
embedding), which the sync driver runs and the async driver awaits. :class:`Beside` starts a
call early, beside the store requests that follow: the default's keyword search runs on a
worker thread while the query is embedded and Chroma searches. That overlap is the only
worker thread in the retrieval, and it is kept because it pays with the packaged embedding
model (the keyword search hides behind the query's embedding);
docs/benchmarks.md#the-keyword-leg-beside-the-vector-search has the ratios and the command
that measures them (``python benchmarks/beside.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Call:
    """A step that is not a store request (a keyword search, another retriever's ``invoke``).

    The sync driver calls ``run``; the async driver awaits ``arun``.
    """

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]
    ready: Callable[[], bool] = lambda: False
    """Whether ``run`` would now be quick: no index to build, no check of the store due (see
    :class:`Beside`)."""


@dataclass(frozen=True, slots=True)
class Beside:
    """Start ``call`` now, beside the store requests that follow; the answer is a :class:`Call`.

    A flow yields it before a request whose answer the call does not need (the keyword leg
    before the vector search) and yields the call it gets back where it needs the result;
    that call raises what the started one raised. The sync driver runs a call that is
    :attr:`Call.ready` on a worker thread while it searches (the keyword search's numpy work
    then overlaps the query's embedding and Chroma's search); any other call (one that would
    build an index or read the store), or one met when every worker is busy, runs where it
    is awaited, as if it had never been started. The async driver starts it as a task.
    """

    call: Call

    def start(self) -> Call:
        """The sync driver's start: on a worker if the call is ready and a worker is free.

        The worker asks again before it runs the call (it may have waited for the GIL while
        a check fell due); a call no longer ready is run by the caller when it is awaited.
        The worker runs it in the caller's context (``contextvars``), as the caller would.
        """
        call = self.call
        if not call.ready() or not _free_workers.acquire(blocking=False):
            return call
        try:
            future = _worker_pool().submit(contextvars.copy_context().run, _if_ready, call)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            _free_workers.release()
            return call
        future.add_done_callback(lambda _: _free_workers.release())

        def result() -> Any:
            answer = future.result()
            return call.run() if answer is _NOT_RUN else answer

        return Call(result, call.arun)

    def astart(self) -> tuple[Call, asyncio.Future[Any]]:
        """The async driver's start: a task now, that the driver cancels if the flow ends first.

        Cancelling also marks a task that ended in an error as seen (no "Task exception was
        never retrieved" when the vector search failed first).
        """
        task = asyncio.ensure_future(self.call.arun())

        async def result() -> Any:
            return await task

        return Call(lambda: task.result(), result), task


WORKERS = 2
"""Worker threads for calls started beside the store requests, per process (more would queue
for the GIL)."""
_free_workers = threading.BoundedSemaphore(WORKERS)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_NOT_RUN = object()
"""A worker's answer for a call that was no longer ready: the caller runs it."""


def _if_ready(call: Call) -> Any:
    return call.run() if call.ready() else _NOT_RUN


def _worker_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="window-retriever-beside")
        return _pool


def _new_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when needed."""
    global _pool, _pool_lock, _free_workers
    _pool, _pool_lock = None, threading.Lock()
    _free_workers = threading.BoundedSemaphore(WORKERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_pool_in_child)
