"""A Chroma server that fails after the store was opened: one line naming the server and the fix.

Each test starts its own ``chroma run`` on loopback (it will stop, pause or lose it) or puts the
credential-checking proxy of tests/helpers/servers.py in front of the session's server. A server that stops
answering must not block a caller: each wait is bounded by a deadline far above the timeout
given, and a call still running at the deadline fails the test.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.pages import fill
from tests.helpers.servers import TOKEN, ChromaServer, GuardedProxy, unique
from window_retriever import ContextWindowRetriever, StoreError, WindowSplitter, open_store
from window_retriever.cli._parser import main
from window_retriever.stores._chroma_errors import store_errors

pytestmark = pytest.mark.integration

Guard = Callable[..., GuardedProxy]
DEADLINE = 60.0
"""Seconds a call may take against a paused server with a 1 s timeout before it counts as hung."""


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A ``chroma run`` of this test's own, to pause (SIGSTOP), resume or stop."""
    server = ChromaServer(tmp_path / "chroma")
    try:
        yield server
    finally:
        server.stop()


def within_deadline(call: Callable[[], Any]) -> BaseException | None:
    """Run ``call`` in a thread; return what it raised (None if nothing); fail if it hangs."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        pytest.fail(f"the call still waited after {DEADLINE:g} s: no timeout reached it")
    return outcome[0]


def a_store(url: str, **options: Any) -> Any:
    return open_store(
        url=url,
        collection=unique("failures"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
        environ={},
        **options,
    )


# ---- a server that stops answering -----------------------------------------------------------


def test_a_paused_server_times_out_on_invoke_ainvoke_and_writes(
    private_server: ChromaServer,
) -> None:
    store = a_store(private_server.url, timeout=1)
    chunks = fill(store)
    budgeted = ContextWindowRetriever(vectorstore=store, k=2, total_budget=900)
    static = ContextWindowRetriever(vectorstore=store, k=2)
    for retriever in (budgeted, static):
        assert retriever.invoke("topic1 word2") and asyncio.run(retriever.ainvoke("topic1"))
    expected = (
        rf"^the Chroma server at {private_server.url} did not answer within 1 s; check that it "
        r"is running and not overloaded, or raise timeout \(WINDOW_RETRIEVER_CHROMA_TIMEOUT\)$"
    )
    private_server.pause()
    try:
        for retriever in (budgeted, static):
            for call in (
                lambda r=retriever: r.invoke("topic3 word4"),
                lambda r=retriever: asyncio.run(r.ainvoke("topic3 word4")),
            ):
                raised = within_deadline(call)
                assert isinstance(raised, StoreError), raised
                assert re.match(expected, str(raised)), str(raised)

        def write() -> None:  # ingestion's writes go through the same client
            with store_errors(store):
                store._collection.upsert(
                    ids=["late"], embeddings=[[0.0] * 32], documents=["late"], metadatas=[{"a": 1}]
                )

        raised = within_deadline(write)
        assert isinstance(raised, StoreError) and "did not answer within 1 s" in str(raised)
    finally:
        private_server.resume()
    assert store._collection.count() >= len(chunks)  # nothing lost


def test_the_timeout_can_come_from_the_environment(private_server: ChromaServer) -> None:
    store = open_store(
        url=private_server.url,
        collection=unique("env-timeout"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
        environ={"WINDOW_RETRIEVER_CHROMA_TIMEOUT": "1.5"},
    )
    fill(store)
    retriever = ContextWindowRetriever(vectorstore=store, k=1)
    private_server.pause()
    try:
        raised = within_deadline(lambda: retriever.invoke("topic1"))
    finally:
        private_server.resume()
    assert isinstance(raised, StoreError) and "did not answer within 1.5 s" in str(raised)


def test_the_command_line_against_a_paused_server_is_one_line(
    private_server: ChromaServer,
) -> None:
    fill(a_store(private_server.url))
    query_options = ["--chroma-url", private_server.url, "--chroma-timeout", "1"]
    private_server.pause()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "window_retriever", "query", "topic1", *query_options],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
            check=False,
        )
    finally:
        private_server.resume()
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"window-retriever: error: the Chroma server at {private_server.url} did not answer "
        "within 1 s; check that it is running and not overloaded, or raise --chroma-timeout "
        "(WINDOW_RETRIEVER_CHROMA_TIMEOUT)\n"
    )


# ---- a server gone ------------------------------------------------------------------------------


def test_a_server_gone_at_query_time_names_it(private_server: ChromaServer) -> None:
    store = a_store(private_server.url)
    fill(store)
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    assert retriever.invoke("topic2")
    private_server.stop()
    expected = (
        f"cannot reach the Chroma server at {private_server.url} (connection refused); "
        "is it running?"
    )
    for call in (lambda: retriever.invoke("topic2"), lambda: asyncio.run(retriever.ainvoke("q"))):
        with pytest.raises(StoreError) as raised:
            call()
        assert str(raised.value) == expected
    with pytest.raises(StoreError, match=r"^cannot reach .*is it running\?$"), store_errors(store):
        store.add_texts(["a late text"], ids=["late"])


class DroppingProxy(GuardedProxy):
    """The guarded proxy, which hangs up without an answer on every write (``upsert``)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream, {"Authorization": f"Bearer {TOKEN}"})
        handler = self.server.RequestHandlerClass
        forward = handler._forward  # type: ignore[attr-defined]

        def dropping(handler_self: Any) -> None:
            if handler_self.path.endswith("/upsert"):
                handler_self.close_connection = True
                handler_self.connection.close()
                return
            forward(handler_self)

        handler.do_POST = dropping  # type: ignore[attr-defined]


def test_the_command_line_names_a_server_that_breaks_off_mid_ingest(
    chroma_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Even where no store call was translated, main() prints one line naming the server."""
    proxy = DroppingProxy(chroma_server)
    try:
        (tmp_path / "page.txt").write_text("a page to ingest " * 40, encoding="utf-8")
        monkeypatch.setenv("WINDOW_RETRIEVER_CHROMA_TOKEN", TOKEN)
        argv = ["ingest", str(tmp_path / "page.txt"), "--chroma-url", proxy.url]
        assert main([*argv, "--collection", unique("dropped")]) == 2
    finally:
        proxy.close()
    # how the socket ends (a reset, or closed without a response) depends on timing
    assert re.fullmatch(
        rf"window-retriever: error: the Chroma server at {re.escape(proxy.url)} broke the "
        r"connection \((server disconnected without sending a response|connection reset by "
        r"peer)\); is it running\?\n",
        capsys.readouterr().err,
    )


# ---- credentials revoked ----------------------------------------------------------------------


@pytest.mark.parametrize(("accepted", "status"), [({"X-Other": "v"}, 401), (None, 403)])
def test_a_token_revoked_mid_session_is_a_refusal_that_names_the_variable(
    guarded_server: Guard, accepted: dict[str, str] | None, status: int
) -> None:
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    store = a_store(proxy.url, token=TOKEN)
    fill(store)
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    assert retriever.invoke("topic1")
    # revoked: the proxy now wants another header (401) or another token (403)
    proxy.accepted = {k.lower(): v for k, v in (accepted or {"Authorization": "x"}).items()}
    expected = (
        f"the Chroma server at {proxy.url} refused the credentials (HTTP {status}); check the "
        "token (WINDOW_RETRIEVER_CHROMA_TOKEN) or the user:password of the URL: it may have "
        "been revoked"
    )
    calls: list[Callable[[], Any]] = [
        lambda: retriever.invoke("topic1"),
        lambda: asyncio.run(retriever.ainvoke("topic1")),
        lambda: ContextWindowRetriever(vectorstore=store, total_budget=900).invoke("topic1"),
    ]
    for call in calls:
        with pytest.raises(StoreError) as raised:
            call()
        assert str(raised.value) == expected and TOKEN not in str(raised.value)
    late = WindowSplitter().split_documents(
        [Document(page_content="late", metadata={"source": "l"})]
    )
    with pytest.raises(StoreError, match=r"refused the credentials"), store_errors(store):
        store.add_documents(late)


def test_a_collection_of_another_dimension_on_a_server(chroma_server: str) -> None:
    name = unique("dims")
    built = open_store(
        url=chroma_server,
        collection=name,
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
    )
    fill(built)
    store = open_store(
        url=chroma_server, collection=name, embeddings=DeterministicFakeEmbedding(size=48)
    )
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    expected = (
        f"the collection '{name}' at {chroma_server} holds vectors of dimension 32, but the "
        "embedding model gives 48; use the model the collection was built with, or pass another "
        "collection"
    )
    for call in (lambda: retriever.invoke("topic1"), lambda: asyncio.run(retriever.ainvoke("q"))):
        with pytest.raises(StoreError) as raised:
            call()
        assert str(raised.value) == expected
