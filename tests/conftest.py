"""Shared fixtures: real Chroma collections (in memory or on disk), a spy on store calls, and a
heartbeat that tells whether async calls leave the event loop free."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings


@pytest.fixture(scope="session", autouse=True)
def keyword_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This test run's own machine cache (indexes of stores on a server), not the user's.

    Set in the environment, so the processes a test starts use it too.
    """
    folder = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("WINDOW_RETRIEVER_CACHE")
    os.environ["WINDOW_RETRIEVER_CACHE"] = str(folder)
    yield folder
    if previous is None:
        del os.environ["WINDOW_RETRIEVER_CACHE"]
    else:
        os.environ["WINDOW_RETRIEVER_CACHE"] = previous


@pytest.fixture(scope="session")
def chroma_client() -> Any:
    return chromadb.EphemeralClient()


@pytest.fixture
def make_store(chroma_client: Any) -> Iterator[Callable[..., Chroma]]:
    """Return a factory of fresh, empty Chroma stores (deleted after the test).

    Unit tests get ``DeterministicFakeEmbedding``: identical texts embed identically, so a
    query equal to a chunk's text finds that chunk first.
    """
    names: list[str] = []

    def factory(embeddings: Embeddings | None = None, *, exhaustive: bool = False) -> Chroma:
        """``exhaustive``: a search ef of 1000, so a search of any width ranks chunks alike."""
        name = f"test-{uuid.uuid4().hex[:12]}"
        names.append(name)
        return Chroma(
            collection_name=name,
            embedding_function=embeddings or DeterministicFakeEmbedding(size=64),
            client=chroma_client,
            collection_metadata={"hnsw:search_ef": 1000} if exhaustive else None,
        )

    yield factory
    from window_retriever.stores._chroma_keywords import FEED_PREFIX

    for name in names:  # and the keyword change feed a write made beside it, if any
        feed = FEED_PREFIX + str(chroma_client.get_collection(name).id)
        drop_collection(chroma_client, name)
        drop_collection(chroma_client, feed)


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
    """Every call that reaches a Chroma collection: its name, arguments and ids carried.

    ``log`` holds ``(name, keyword arguments, ids carried)`` in call order (a ``get`` carries
    the ids it sent or returned, whichever is more); ``calls`` counts them by name.
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any], int]] = []

    @property
    def calls(self) -> Counter[str]:
        return Counter(name for name, _, _ in self.log)

    def reset(self) -> None:
        self.log.clear()


SPIED = ("get", "query", "upsert", "add", "delete", "update")
"""The collection methods a :class:`StoreSpy` sees: every read and write of a store."""


@pytest.fixture
def spy_on(monkeypatch: pytest.MonkeyPatch) -> Callable[[Chroma], StoreSpy]:
    """Wrap a store's collection reads and writes so a test can count and inspect them."""

    def attach(store: Chroma) -> StoreSpy:
        spy = StoreSpy()
        collection = store._collection
        for method in SPIED:
            original = getattr(collection, method)

            def wrapper(
                *args: Any, _name: str = method, _original: Any = original, **kwargs: Any
            ) -> Any:
                result = _original(*args, **kwargs)
                carried = len(kwargs.get("ids") or [])
                if _name == "get":  # a read is bounded by what it returns, too
                    carried = max(carried, len(result["ids"]))
                spy.log.append((_name, kwargs, carried))
                return result

            monkeypatch.setattr(collection, method, wrapper)
        return spy

    return attach


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


@pytest.fixture
def fresh_keyword_indexes() -> Iterator[None]:
    """No keyword index shared with another test (they are kept per collection per process)."""
    from window_retriever.keywords._index import KeywordIndex

    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()
