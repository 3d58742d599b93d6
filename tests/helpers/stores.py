"""A spy on store calls, a clock for the keyword index, and small stores and helpers.

Shared by the test modules (a test module imports from ``tests.helpers``, never from another
test module); the fixtures built on them are in ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma


def add_file_f(store: Chroma) -> None:
    """Store one file ``f`` of six stamped chunks, ``f:0`` to ``f:5``, 50 characters apart."""
    from langchain_core.documents import Document

    documents = [
        Document(
            f"chunk {i} " + "x" * 40,
            metadata={
                "file_id": "f",
                "chunk_index": i,
                "start_index": 50 * i,
                "chunk_id": f"f:{i}",
            },
        )
        for i in range(6)
    ]
    store.add_documents(documents, ids=[f"f:{i}" for i in range(6)])


def disk_store(directory: Path) -> Chroma:
    """A Chroma collection ``docs`` on disk in ``directory``, its keyword index saved beside it."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    return Chroma(
        collection_name="docs",
        embedding_function=DeterministicFakeEmbedding(size=16),
        persist_directory=str(directory),
    )


def row_file(saved: Path, name: str) -> Path:
    """The saved rows' file ``name``: ``rows-0-N.<name>`` (an index built anew is one part)."""
    (path,) = saved.glob(f"rows-*.{name}")
    return path


def drop_collection(client: Any, name: str) -> None:
    """Delete a collection, if there is one, and its records first, so it leaves nothing behind.

    Every ``chromadb.EphemeralClient()`` of a process is one Chroma (one SQLite database), and
    chromadb 1.5.9's ``delete_collection`` leaves the records' list-valued metadata in it
    (chroma-core/chroma#7594): the next record to reuse a deleted record's internal row id, in
    any collection, inherits those lists (a ``{"groups": ["staff"]}`` on a record written
    without it). Deleting the records by id removes them whole.
    """
    from chromadb.errors import NotFoundError

    try:
        collection = client.get_collection(name)
    except NotFoundError:
        return
    ids = collection.get(include=[])["ids"]
    for start in range(0, len(ids), 5000):  # under Chroma's limit of ids in one call
        collection.delete(ids=ids[start : start + 5000])
    client.delete_collection(name)


class StoreSpy:
    """Every call that reaches one Chroma collection: its name, arguments and ids carried.

    The retrieval's own calls and those of the keyword index beside it (its checks, its
    reads, the change feed): ``log`` holds ``(name, keyword arguments, ids carried)`` in call
    order, and ``calls`` counts them by name. A name is the method called: a collection's
    (``query``, ``get``, ``count``, ``modify``, ...), or the client's for this collection
    (``get_collection``, ...); ``feed.`` before it for the collection's keyword change feed
    (``feed.get``, ``feed.get_collection``, ...). A ``get`` carries the ids it sent or
    returned, whichever is more; a call that raised is logged too.
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any], int]] = []

    @property
    def calls(self) -> Counter[str]:
        return Counter(name for name, _, _ in self.log)

    def reset(self) -> None:
        self.log.clear()


SPIED = ("get", "query", "count", "peek", "add", "upsert", "update", "delete", "modify")
"""The collection methods a :class:`StoreSpy` sees: every read and write of a collection."""

SPIED_CLIENT = (
    "get_collection",
    "get_or_create_collection",
    "create_collection",
    "delete_collection",
)
"""The client methods a :class:`StoreSpy` sees, for the collections it watches (by name)."""


async def longest_pause(*calls: Awaitable[Any]) -> tuple[float, list[Any]]:
    """Run ``calls`` together beside a heartbeat; return the longest pause between beats.

    A store call that ran on the event loop would stall the heartbeat for as long as it takes.
    """
    beats: list[float] = []

    async def heartbeat() -> None:
        while True:
            beats.append(time.perf_counter())
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.02)
    results = await asyncio.gather(*calls)
    await asyncio.sleep(0.02)
    ticker.cancel()
    return max(b - a for a, b in itertools.pairwise(beats)), results


class FakeClock:
    """A clock that moves only when a test says (``clock.now += 2``): the keyword index's
    check interval without sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
