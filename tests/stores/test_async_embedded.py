"""Async calls on an embedded Chroma store run in threads: the event loop keeps ticking.

A store call that ran on the loop would stall every other task for as long as the call
takes. Chroma's own calls are slowed here (one second each), and a heartbeat task ticks
every 10 ms meanwhile: the longest pause between its ticks must stay far below the second.
That checks that nothing blocks; it measures no speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from tests.helpers.stores import longest_pause
from window_retriever import (
    ChromaWindowStore,
    ContextWindowRetriever,
    Fetch,
    Search,
    SearchIds,
    WindowSplitter,
    add_chunks,
)

SLOW = 1.0
"""Seconds each Chroma ``query`` and ``get`` sleeps once slowed."""
MOST_PAUSE = 0.5
"""The longest pause allowed between heartbeats: half a slowed call, ample on a busy machine."""


@pytest.fixture
def store(make_store: Callable[..., Chroma]) -> Chroma:
    text = " ".join(f"Sentence {i:02d} tells of the lighthouse keeper." for i in range(40))
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=120, chunk_overlap=20, add_start_index=True
    )
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "keeper"})]
    )
    embedded = make_store()
    add_chunks(embedded, chunks)
    return embedded


def slow_down(store: Chroma, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the collection's ``query`` and ``get`` block for ``SLOW`` seconds, as a big
    collection on a slow disk would."""
    collection = store._collection
    for name in ("query", "get"):
        original = getattr(collection, name)

        def slowed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            time.sleep(SLOW)
            return _original(*args, **kwargs)

        monkeypatch.setattr(collection, name, slowed)


async def test_the_chroma_adapters_async_calls_leave_the_loop_free(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = ChromaWindowStore(store)
    ids = [str(i) for i in store.get()["ids"][:3]]
    slow_down(store, monkeypatch)
    pause, results = await longest_pause(
        adapter.asearch(Search("lighthouse keeper", k=2)),
        adapter.asearch_ids(SearchIds("lighthouse keeper", k=2)),
        adapter.asearch(Search("lighthouse keeper", k=2, embeddings=True)),
        adapter.afetch(Fetch(ids)),
        adapter.afetch(Fetch(ids, embeddings=True)),
    )
    assert all(r.documents if hasattr(r, "documents") else r for r in results)  # all reached it
    assert pause < MOST_PAUSE


async def test_ainvoke_on_an_embedded_store_leaves_the_loop_free(
    store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = ContextWindowRetriever(vectorstore=store, k=2, window_budget=400)
    # a retriever that has seen the typical chunk length searches for ids only
    lean = ContextWindowRetriever(vectorstore=store, k=2, window_budget=400)
    lean.invoke("lighthouse keeper")
    budgeted = ContextWindowRetriever(vectorstore=store, k=2, total_budget=600)
    slow_down(store, monkeypatch)
    pause, results = await longest_pause(
        fresh.ainvoke("lighthouse keeper"),
        lean.ainvoke("Sentence 12"),
        budgeted.ainvoke("Sentence 30"),
    )
    assert all(results)
    assert pause < MOST_PAUSE
