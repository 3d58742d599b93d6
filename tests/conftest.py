"""Shared fixtures: real Chroma collections (in memory or on disk) and a spy on store calls."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings


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

    def factory(embeddings: Embeddings | None = None) -> Chroma:
        name = f"test-{uuid.uuid4().hex[:12]}"
        names.append(name)
        return Chroma(
            collection_name=name,
            embedding_function=embeddings or DeterministicFakeEmbedding(size=64),
            client=chroma_client,
        )

    yield factory
    for name in names:
        chroma_client.delete_collection(name)


class StoreSpy:
    """Counts the calls that reach a Chroma collection."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, dict[str, Any]]] = []

    def reset(self) -> None:
        self.calls.clear()
        self.log.clear()


@pytest.fixture
def spy_on(monkeypatch: pytest.MonkeyPatch) -> Callable[[Chroma], StoreSpy]:
    """Wrap a store's collection ``query`` and ``get`` so a test can count them."""

    def attach(store: Chroma) -> StoreSpy:
        spy = StoreSpy()
        collection = store._collection
        for method in ("query", "get"):
            original = getattr(collection, method)

            def wrapper(
                *args: Any, _name: str = method, _original: Any = original, **kwargs: Any
            ) -> Any:
                spy.calls[_name] += 1
                spy.log.append((_name, kwargs))
                return _original(*args, **kwargs)

            monkeypatch.setattr(collection, method, wrapper)
        return spy

    return attach
