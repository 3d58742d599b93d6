"""Shared fixtures: real Chroma collections (in memory or on disk), a spy on store calls, the
keyword index's clock held still, and a real Chroma server on loopback (with proxies in front).

The helpers they are built on, which test modules import too, are in ``tests/helpers``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from tests.helpers.servers import ChromaServer, GuardedProxy
from tests.helpers.stores import SPIED, SPIED_CLIENT, FakeClock, StoreSpy, drop_collection


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


@pytest.fixture
def spy_on(monkeypatch: pytest.MonkeyPatch) -> Callable[[Chroma], StoreSpy]:
    """Count every call a store's collection receives, from whatever object or thread.

    Chroma's ``Collection`` and ``Client`` classes are wrapped (not the store's one
    collection object): the keyword index reaches the collection through objects of its own
    (``client.get_collection`` at each check) and its change feed through another
    collection, and the async path to a server posts to it directly (``AsyncServer.call``).
    Calls to collections no spy watches pass through unlogged.
    """
    from chromadb.api.client import Client
    from chromadb.api.models.Collection import Collection

    from window_retriever.stores._chroma_http import AsyncServer
    from window_retriever.stores._chroma_keywords import FEED_PREFIX

    watched: dict[str, tuple[StoreSpy, str]] = {}
    """Collection name -> (its spy, the prefix of its calls' names)."""

    def log(name: str, prefix: str, spy: StoreSpy, kwargs: dict[str, Any], result: Any) -> None:
        carried = len(kwargs.get("ids") or [])
        if name == "get" and isinstance(result, Mapping):  # bounded by what it returns
            carried = max(carried, len(result.get("ids") or []))
        spy.log.append((prefix + name, kwargs, carried))

    def on_collection(method: str) -> Callable[..., Any]:
        original = getattr(Collection, method)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen = watched.get(self.name)
            if seen is None:
                return original(self, *args, **kwargs)
            result = None
            try:
                result = original(self, *args, **kwargs)
                return result
            finally:
                log(method, seen[1], seen[0], kwargs, result)

        return wrapper

    def on_client(method: str) -> Callable[..., Any]:
        original = getattr(Client, method)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            name = kwargs.get("name", args[0] if args else None)
            seen = watched.get(str(name))
            if seen is None:
                return original(self, *args, **kwargs)
            try:
                return original(self, *args, **kwargs)
            finally:
                log(method, seen[1], seen[0], {"name": name, **kwargs}, None)

        return wrapper

    original_call = AsyncServer.call

    async def on_server(self: Any, endpoint: str, body: Mapping[str, Any], **options: Any) -> Any:
        seen = watched.get(str(self._vectorstore._collection.name))
        if seen is None:
            return await original_call(self, endpoint, body, **options)
        result = None
        try:
            result = await original_call(self, endpoint, body, **options)
            return result
        finally:
            log(endpoint, seen[1], seen[0], dict(body), result)

    def attach(store: Chroma) -> StoreSpy:
        if not watched:  # the first store of the test: wrap the classes once
            for method in SPIED:
                monkeypatch.setattr(Collection, method, on_collection(method))
            for method in SPIED_CLIENT:
                monkeypatch.setattr(Client, method, on_client(method))
            monkeypatch.setattr(AsyncServer, "call", on_server)
        spy = StoreSpy()
        collection = store._collection
        watched[collection.name] = (spy, "")
        watched[FEED_PREFIX + str(collection.id)] = (spy, "feed.")
        return spy

    return attach


@pytest.fixture
def held_still(monkeypatch: pytest.MonkeyPatch) -> Callable[[Chroma], FakeClock]:
    """Stop the clock of a store's keyword index (made by a warm-up), checked now.

    The index checks the collection by the time since its last check, not per query: one
    ``get_collection`` (the generation token) once ``check_interval`` (1 s) has passed, and
    ``get_collection`` and ``count`` (the whole fingerprint) once ``COUNT_EVERY`` intervals
    have. With the clock stopped a test counts what each query costs between checks, and
    moves the clock (``clock.now += interval``) to count a check; without, how many checks
    land among its queries depends on how fast the machine runs them. The index's own
    clock is given back after the test.
    """
    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    def hold(store: Chroma) -> FakeClock:
        index = KeywordIndex.existing(ChromaKeywordSource(store))
        assert index is not None, "no keyword index of this store yet: warm a retriever up"
        clock = FakeClock()
        clock.now = time.monotonic()  # given back its clock, the index checks when due
        monkeypatch.setattr(index, "_clock", clock)
        index.refresh()  # checked at the clock's time: none due until the test moves it
        return clock

    return hold


@pytest.fixture
def fresh_keyword_indexes() -> Iterator[None]:
    """No keyword index shared with another test (they are kept per collection per process)."""
    from window_retriever.keywords._index import KeywordIndex

    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()


@pytest.fixture
def pages() -> tuple[Chroma, tuple[Document, ...], dict[str, str]]:
    from tests.helpers.pages import example_store

    return example_store()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server on loopback, started from this environment's ``chroma``."""
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    yield server.url
    server.stop()


@pytest.fixture
def guarded_server(chroma_server: str) -> Iterator[Callable[..., GuardedProxy]]:
    """Start proxies in front of the session's Chroma server that accept only given headers."""
    proxies: list[GuardedProxy] = []

    def start(accepted: dict[str, str], delay: float = 0.0) -> GuardedProxy:
        proxies.append(GuardedProxy(chroma_server, accepted, delay))
        return proxies[-1]

    yield start
    for proxy in proxies:
        proxy.close()
