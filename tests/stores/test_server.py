"""A Chroma server as a first-class store: open_store, credentials, tenants, async, the CLI.

Everything runs against the real ``chroma run`` server on loopback; credentials are checked by
a proxy in front of it (as in production: Chroma's open-source server checks none itself).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from tests.helpers.pages import fill, notes
from tests.helpers.servers import TOKEN, GuardedProxy, unique
from window_retriever import (
    ContextWindowRetriever,
    StoreError,
    open_store,
)
from window_retriever.cli._parser import main
from window_retriever.stores import ChromaWindowStore

pytestmark = pytest.mark.integration

Guard = Callable[..., GuardedProxy]


def new_tenant_and_database(chroma_server: str) -> tuple[str, str]:
    """Create a fresh tenant with a fresh database on the server; return their names."""
    parts = urlsplit(chroma_server)
    admin = chromadb.AdminClient(
        Settings(
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host=parts.hostname,
            chroma_server_http_port=parts.port,
        )
    )
    tenant, database = unique("tenant"), unique("db")
    admin.create_tenant(tenant)
    admin.create_database(database, tenant=tenant)
    return tenant, database


def filled_in_a_new_tenant(
    chroma_server: str, name: str, embeddings: Embeddings
) -> tuple[Chroma, str, str]:
    """A collection ``name`` made and filled in a fresh tenant and database; and their names."""
    tenant, database = new_tenant_and_database(chroma_server)
    store = open_store(
        url=chroma_server,
        collection=name,
        create=True,
        tenant=tenant,
        database=database,
        embeddings=embeddings,
    )
    fill(store)
    return store, tenant, database


@pytest.mark.parametrize(
    ("header", "sent"),
    [("Authorization", f"Bearer {TOKEN}"), ("X-Chroma-Token", TOKEN)],
)
def test_a_token_reaches_the_server_on_every_call(
    guarded_server: Guard, header: str, sent: str
) -> None:
    proxy = guarded_server({header: sent})
    name = unique("token")
    store = open_store(
        url=proxy.url,
        collection=name,
        create=True,
        token=TOKEN,
        token_header=header,
        embeddings=DeterministicFakeEmbedding(size=32),
    )
    fill(store)
    before = len(proxy.seen)
    docs = ContextWindowRetriever(vectorstore=store, k=2).invoke("topic3 word7")
    assert docs and len(proxy.seen) > before  # the search and the fetch went through the proxy
    assert all(seen == {header.lower(): sent} for seen in proxy.seen)


def test_basic_auth_from_the_url(guarded_server: Guard) -> None:
    import base64

    proxy = guarded_server({"Authorization": "Basic " + base64.b64encode(b"ann:p@ss").decode()})
    netloc = urlsplit(proxy.url).netloc
    store = open_store(
        url=f"http://ann:p%40ss@{netloc}",
        collection=unique("basic"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
    )
    fill(store)
    assert ContextWindowRetriever(vectorstore=store, k=1).invoke("topic1")


@pytest.mark.parametrize("token", [None, "wrong"])
def test_refused_credentials_are_one_line_that_names_the_fix(
    guarded_server: Guard, token: str | None
) -> None:
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(StoreError) as raised:
        open_store(url=proxy.url, token=token, create=True, environ={})
    message = str(raised.value)
    assert message.startswith(f"the Chroma server at {proxy.url} refused the credentials")
    assert "WINDOW_RETRIEVER_CHROMA_TOKEN" in message and "\n" not in message
    assert TOKEN not in message and (token is None or token not in message)


def test_a_password_never_appears_in_a_message(guarded_server: Guard) -> None:
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    netloc = urlsplit(proxy.url).netloc
    with pytest.raises(StoreError) as raised:
        open_store(url=f"http://ann:hunter2@{netloc}", environ={})
    assert "hunter2" not in str(raised.value) and "ann:***@" in str(raised.value)


def test_tenant_and_database_are_passed_through(chroma_server: str) -> None:
    embeddings = DeterministicFakeEmbedding(size=32)
    name = unique("tenancy")
    store, tenant, database = filled_in_a_new_tenant(chroma_server, name, embeddings)
    # the same collection name in the default tenant is another collection (or none)
    with pytest.raises(StoreError, match=f"no collection '{name}'"):
        open_store(url=chroma_server, collection=name, embeddings=embeddings, environ={})
    environ = {
        "WINDOW_RETRIEVER_CHROMA_URL": chroma_server,
        "WINDOW_RETRIEVER_CHROMA_TENANT": tenant,
        "WINDOW_RETRIEVER_CHROMA_DATABASE": database,
    }
    again = open_store(collection=name, embeddings=embeddings, environ=environ)
    assert again._collection.count() == store._collection.count() > 0
    with pytest.raises(StoreError, match=r"no tenant 'nobody'.*pass another tenant"):
        open_store(url=chroma_server, tenant="nobody", environ={})
    with pytest.raises(StoreError, match=r"no database 'nothing'.*pass another database"):
        open_store(url=chroma_server, tenant=tenant, database="nothing", environ={})


def test_the_command_line_reads_the_server_and_token_from_the_environment(
    guarded_server: Guard, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    name = unique("cli")
    # ingest with the real packaged model, as a user would
    pages = notes(3, words=80)
    monkeypatch.setenv("WINDOW_RETRIEVER_CHROMA_URL", proxy.url)
    monkeypatch.setenv("WINDOW_RETRIEVER_CHROMA_TOKEN", TOKEN)
    folder = _write(pages, monkeypatch)
    assert main(["ingest", str(folder), "--collection", name]) == 0
    capsys.readouterr()
    assert main(["query", "topic2 word5", "--collection", name, "--json", "-k", "1"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert "topic2" in result["text"]
    assert proxy.seen  # it all went through the guarded server
    monkeypatch.setenv("WINDOW_RETRIEVER_CHROMA_TOKEN", "wrong")
    assert main(["query", "topic2", "--collection", name]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("window-retriever: error: the Chroma server at") and "\n" not in err
    monkeypatch.setenv("WINDOW_RETRIEVER_CHROMA_TOKEN", TOKEN)
    assert main(["query", "topic2", "--collection", unique("missing")]) == 2
    assert (
        "run 'window-retriever ingest' first or pass another --collection"
        in capsys.readouterr().err
    )


def _write(pages: list[Document], monkeypatch: pytest.MonkeyPatch) -> Any:
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="server-pages-"))
    for i, page in enumerate(pages):
        (folder / f"{i}.txt").write_text(page.page_content, encoding="utf-8")
    return folder


def test_async_on_a_server_uses_the_async_http_client(guarded_server: Guard) -> None:
    """Concurrent ainvokes wait on the network together and never hold the event loop.

    The proxy adds 0.5 s to every call, as a distant server would. Threads would cap the calls
    in flight at the executor's size and a blocking call would stall the heartbeat for 0.5 s.
    """
    delay, concurrent = 0.5, 24
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"}, delay=delay)
    store = open_store(
        url=proxy.url,
        collection=unique("async"),
        create=True,
        token=TOKEN,
        embeddings=DeterministicFakeEmbedding(size=32),
    )
    fill(store)
    budgeted = ContextWindowRetriever(vectorstore=store, k=2, total_budget=900, candidates="vector")
    static = ContextWindowRetriever(vectorstore=store, k=2)  # the lean search, once warm
    hybrid = ContextWindowRetriever(vectorstore=store, k=2, total_budget=900)
    expected = {id(r): r.invoke("topic4 word9") for r in (budgeted, static, hybrid)}
    gaps: list[float] = []

    async def heartbeat(stop: asyncio.Event) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def run(retriever: ContextWindowRetriever) -> list[list[Document]]:
        await retriever.ainvoke("warm up")  # opens the async client once
        proxy.most_in_flight = 0
        proxy.by_call.clear()
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(stop))
        results = await asyncio.gather(
            *(retriever.ainvoke("topic4 word9") for _ in range(concurrent))
        )
        stop.set()
        await beat
        return results

    for retriever in (budgeted, static):
        gaps.clear()
        results = asyncio.run(run(retriever))
        assert all(result == expected[id(retriever)] for result in results)
        # neither the searches nor the fetches capped by a thread pool (6 threads on 2 cores)
        assert proxy.by_call["query"][1] > 10 and proxy.by_call["get"][1] > 10
        assert max(gaps) < delay  # the loop was never held for a whole store call
        assert isinstance(retriever._store(), ChromaWindowStore)
        assert retriever._store()._server() is not None  # async HTTP, not threads
    assert static._lengths.typical() is not None  # so its searches asked for ids only
    # hybrid: the keyword leg runs in a thread (its index checks the collection with the sync
    # client); the loop is still never held, and every answer is the sync one
    gaps.clear()
    results = asyncio.run(run(hybrid))
    assert all(result == expected[id(hybrid)] for result in results)
    assert max(gaps) < delay


def test_async_on_an_embedded_store_stays_on_threads(tmp_path: Any) -> None:
    store = open_store(
        tmp_path / "db",
        collection="embedded",
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
    )
    fill(store)
    retriever = ContextWindowRetriever(vectorstore=store, k=2)
    docs = asyncio.run(retriever.ainvoke("topic1 word3"))
    assert docs == retriever.invoke("topic1 word3")
    assert retriever._store()._server() is None  # type: ignore[attr-defined]


def test_an_unreachable_server_is_one_line() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreError, match=r"cannot reach the Chroma server .*chroma run"):
        open_store(url=f"http://127.0.0.1:{port}", environ={})


def test_two_stores_with_two_tokens_each_send_their_own_in_one_event_loop(
    guarded_server: Guard,
) -> None:
    """Chroma's AsyncHttpClient shares connections per event loop; this library must not."""
    alice = guarded_server({"Authorization": "Bearer alice-token"})
    bob = guarded_server({"Authorization": "Bearer bob-token"})
    stores = [
        open_store(
            url=proxy.url,
            collection=unique(name),
            create=True,
            token=f"{name}-token",
            embeddings=DeterministicFakeEmbedding(size=32),
            environ={},
        )
        for name, proxy in (("alice", alice), ("bob", bob))
    ]
    for store in stores:
        fill(store)
    retrievers = [ContextWindowRetriever(vectorstore=store, k=1) for store in stores]

    async def both() -> None:
        for _ in range(2):  # the second round takes the lean search
            await asyncio.gather(*(r.ainvoke("topic1 word2") for r in retrievers))

    alice.seen.clear()
    bob.seen.clear()
    asyncio.run(both())
    assert alice.seen and bob.seen
    assert {s["authorization"] for s in alice.seen} == {"Bearer alice-token"}
    assert {s["authorization"] for s in bob.seen} == {"Bearer bob-token"}


@pytest.mark.parametrize(
    "options",
    [
        {"filter": {"tenant": "acme"}},
        {"where_document": {"$contains": "topic3"}},
        {"filter": {"tenant": "acme"}, "total_budget": 1500},
        {"where_document": {"$not_contains": "word1 "}, "total_budget": 1500},
    ],
)
def test_filters_hold_on_the_async_server_path(chroma_server: str, options: dict[str, Any]) -> None:
    store = open_store(
        url=chroma_server,
        collection=unique("filters"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
        environ={},
    )
    chunks = fill(store)
    allowed = {
        c.id
        for c in chunks
        if c.metadata["tenant"] == options.get("filter", {}).get("tenant", c.metadata["tenant"])
        and (
            "topic3" in c.page_content if "$contains" in options.get("where_document", {}) else True
        )
        and (
            "word1 " not in c.page_content
            if "$not_contains" in options.get("where_document", {})
            else True
        )
    }
    assert 0 < len(allowed) < len(chunks)
    retriever = ContextWindowRetriever(vectorstore=store, k=3, **options)

    async def ask() -> list[list[Document]]:
        return [await retriever.ainvoke(f"topic{i} word{i}") for i in range(6) for _ in range(2)]

    answers = asyncio.run(ask())  # each question twice: the full, then the lean search
    assert any(answers)
    for docs in answers:
        for doc in docs:
            assert set(doc.metadata["chunk_ids"]) <= allowed, doc.metadata["chunk_ids"]


def test_async_reads_the_tenant_and_database_the_store_was_opened_in(chroma_server: str) -> None:
    name, embeddings = unique("same-name"), DeterministicFakeEmbedding(size=32)
    decoy = open_store(url=chroma_server, collection=name, create=True, embeddings=embeddings)
    decoy.add_texts(["DECOY text in the default tenant"], ids=["decoy"])
    store, _, _ = filled_in_a_new_tenant(chroma_server, name, embeddings)
    retriever = ContextWindowRetriever(vectorstore=store, k=4)
    answers = asyncio.run(retriever.ainvoke("DECOY text in the default tenant"))
    assert answers and all("DECOY" not in doc.page_content for doc in answers)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_filtered_search_on_a_server_asks_for_the_ids_the_index_passes(
    chroma_server: str, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the process holds the keyword index, the search sends the ids its metadata
    passes in place of the filter (sync client and async HTTP alike), for Chroma's own hits."""
    from window_retriever.stores._chroma_http import AsyncServer

    store = _indexed_store(chroma_server, "passing")
    where = {"tenant": "acme"}
    passed = set(store._collection.get(where=where, include=[])["ids"])  # type: ignore[arg-type]
    assert 0 < len(passed) < store._collection.count()
    expected = _where_hits(store, "topic3 word3", where, 8)
    sent: list[dict[str, Any]] = []
    query, call = store._collection.query, AsyncServer.call

    def spy_query(*args: Any, **kwargs: Any) -> Any:
        sent.append(kwargs)
        return query(*args, **kwargs)

    async def spy_call(self: Any, endpoint: str, body: Any, **options: Any) -> Any:
        sent.append(dict(body))
        return await call(self, endpoint, body, **options)

    monkeypatch.setattr(store._collection, "query", spy_query)
    monkeypatch.setattr(AsyncServer, "call", spy_call)
    got = _search_ids(store, "topic3 word3", where, run)

    (body,) = sent
    assert body.get("where") is None and set(body["ids"]) == passed
    assert [chunk_id for chunk_id, _ in got] == expected


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_chunk_deleted_behind_the_index_s_back_does_not_fail_a_search_on_a_server(
    chroma_server: str, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refuses a search by ids naming one it no longer holds; the search asks
    again under ``where`` (sync client and async HTTP alike) and finds what Chroma finds."""
    store = _indexed_store(chroma_server, "deleted")
    where = {"tenant": "acme"}
    gone = store._collection.get(where=where, limit=1)["ids"][0]  # type: ignore[arg-type]
    store._collection.delete(ids=[gone])  # the count changes, but no check is due yet
    read, get = [], store._collection.get
    monkeypatch.setattr(store._collection, "get", lambda **kw: read.append(kw) or get(**kw))
    got = _search_ids(store, "topic3 word3", where, run)
    assert read == []  # the refusal is no store failure to diagnose (a blocking read, async)
    expected = _where_hits(store, "topic3 word3", where, 8)
    assert [chunk_id for chunk_id, _ in got] == expected


def _indexed_store(chroma_server: str, name: str) -> Chroma:
    """A new collection of the default notes on the server, its keyword index built."""
    from window_retriever.stores._chroma_keywords import keyword_index

    store = open_store(
        url=chroma_server,
        collection=unique(name),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
        environ={},
    )
    fill(store)
    keyword_index(store).search("warm", k=1)
    return store


def _search_ids(store: Chroma, question: str, where: dict[str, Any], run: str) -> Any:
    """The retrieval's search for 8 ids, by the sync client or over async HTTP (``run``)."""
    from window_retriever.retrieval._candidates import search_ids
    from window_retriever.retrieval._retriever import _arun, _run

    adapter = ChromaWindowStore(store)
    search = search_ids(question, 8, where, held=adapter.held())
    if run == "sync":
        return _run(search, adapter)
    return asyncio.run(_arun(search, adapter))


def _where_hits(store: Chroma, question: str, where: dict[str, Any], k: int) -> list[str]:
    """The ids Chroma's own ``where`` search finds, best first."""
    found = store._collection.query(
        query_embeddings=[store.embeddings.embed_query(question)],  # type: ignore[union-attr]
        n_results=k,
        where=where,  # type: ignore[arg-type]
        include=["distances"],
    )
    return found["ids"][0]


def test_diversity_on_a_server_reads_the_hits_vectors_with_the_search_only(
    chroma_server: str,
) -> None:
    """``SearchVectors`` over async HTTP: the same windows as the sync path, no vector fetched."""
    store = open_store(
        url=chroma_server,
        collection=unique("diverse"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=32),
        environ={},
    )
    fill(store)
    retriever = ContextWindowRetriever(
        vectorstore=store, total_budget=1200, diversity=0.3, candidates="vector"
    )
    expected = retriever.invoke("topic2 word5")
    assert expected
    adapter = retriever._store()
    assert isinstance(adapter, ChromaWindowStore) and adapter._server() is not None
    sent: list[tuple[str, dict[str, Any]]] = []
    server = adapter._server()
    call = server.call

    async def spy(method: str, arguments: dict[str, Any], **options: Any) -> Any:
        sent.append((method, arguments))
        return await call(method, arguments, **options)

    server.call = spy  # type: ignore[method-assign]
    assert asyncio.run(retriever.ainvoke("topic2 word5")) == expected
    queries = [arguments for method, arguments in sent if method == "query"]
    fetches = [arguments for method, arguments in sent if method == "get"]
    assert [q["include"] for q in queries] == [["distances", "embeddings"]]
    assert fetches and all("embeddings" not in f["include"] for f in fetches)
