"""open_store against real servers: IPv6 loopback, and a credential-checking proxy.

The offline checks of every message are in ``tests/stores/test_open_store.py``; here the real
``chroma run`` and real HTTP prove that what is sent and said holds on the wire.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.pages import notes
from tests.helpers.servers import TOKEN, ChromaServer, GuardedProxy, _free_port, unique
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    StoreError,
    WindowSplitter,
    add_chunks,
    open_store,
)
from window_retriever.cli._parser import main
from window_retriever.stores import ChromaWindowStore

pytestmark = pytest.mark.integration

ENV_URL, ENV_TOKEN = "WINDOW_RETRIEVER_CHROMA_URL", "WINDOW_RETRIEVER_CHROMA_TOKEN"
Guard = Callable[..., GuardedProxy]


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def ipv6_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server listening on ``[::1]`` only."""
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback (::1) on this machine")
    server = ChromaServer(tmp_path_factory.mktemp("chroma-ipv6"), host="::1")
    yield server.url
    server.stop()


def test_a_server_on_ipv6_loopback_serves_sync_async_and_the_cli(
    ipv6_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    embeddings = DeterministicFakeEmbedding(size=32)
    name = unique("v6")
    store = open_store(url=ipv6_server, collection=name, create=True, embeddings=embeddings)
    add_chunks(store, WindowSplitter().split_documents(notes(4, words=80)))
    reopened = open_store(url=f"{ipv6_server}/", collection=name, embeddings=embeddings)
    retriever = ContextWindowRetriever(vectorstore=reopened, k=2)
    docs = retriever.invoke("topic2 word5")
    assert docs and "topic2" in docs[0].page_content
    assert asyncio.run(retriever.ainvoke("topic2 word5")) == docs
    assert isinstance(retriever._store(), ChromaWindowStore)
    assert retriever._store()._server() is not None  # async HTTP took the bracketed host too
    with pytest.raises(
        StoreError, match=r"^no collection 'nothing' in http://\[::1\]:\d+ \(it has[^)]*\); "
    ):
        open_store(url=ipv6_server, collection="nothing", embeddings=embeddings, environ={})

    # the command line, with the real packaged model, as a user would
    for variable in ("DB", "CHROMA_URL", "CHROMA_TOKEN", "CHROMA_TENANT", "CHROMA_DATABASE"):
        monkeypatch.delenv(f"WINDOW_RETRIEVER_{variable}", raising=False)
    folder = Path(tempfile.mkdtemp(prefix="v6-pages-"))
    (folder / "bees.txt").write_text("Bees make honey from the nectar of flowers.", "utf-8")
    (folder / "lava.txt").write_text("A volcano erupts and lava flows down its side.", "utf-8")
    where = ["--chroma-url", ipv6_server, "--collection", unique("v6-cli")]
    assert main(["ingest", str(folder), *where]) == 0
    capsys.readouterr()
    assert main(["query", "how do bees make honey", *where, "--json", "-k", "1"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert "honey" in result["text"]


def test_an_ipv6_server_that_is_down_is_one_line(ipv6_server: str) -> None:
    port = _free_port("::1")  # nothing listens there
    with pytest.raises(StoreError) as raised:
        open_store(url=f"http://ann:{TOKEN}@[::1]:{port}", environ={})
    message = str(raised.value)
    assert message.startswith(f"cannot reach the Chroma server at http://ann:***@[::1]:{port} (")
    assert TOKEN not in message and "\n" not in message


def test_a_token_ending_in_a_carriage_return_is_named_and_never_sent(
    guarded_server: Guard, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token file saved on Windows: before, the request failed as 'cannot reach the server'."""
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    monkeypatch.setenv(ENV_URL, proxy.url)
    monkeypatch.setenv(ENV_TOKEN, f"{TOKEN}\r")
    assert main(["query", "q"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"window-retriever: error: {ENV_TOKEN} holds a line break, which no token has; "
        "set it to the token alone\n"
    )
    monkeypatch.setenv(ENV_TOKEN, TOKEN)  # the same token, trimmed, is accepted
    name = unique("trimmed")
    store = open_store(collection=name, create=True, embeddings=DeterministicFakeEmbedding(size=8))
    assert store._collection.name == name and proxy.seen


def test_a_header_httpx_cannot_send_is_told_apart_from_an_unreachable_server(
    guarded_server: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's own guard, behind the checks of the token: h11 refuses the header."""
    import window_retriever.stores._address as opened

    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    monkeypatch.setattr(opened, "_flaw", lambda value: "")  # let the bad token through
    with pytest.raises(ConfigurationError) as raised:
        open_store(url=proxy.url, token=f"{TOKEN}\r", environ={})
    message = str(raised.value)
    assert message.startswith("a header is not valid HTTP (a line break")
    assert message.endswith("; check headers and token")
    assert TOKEN not in message and "cannot reach" not in message


def test_refused_credentials_name_the_variables_they_came_from(
    guarded_server: Guard, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = guarded_server({"Authorization": f"Bearer {TOKEN}"})
    netloc = urlsplit(proxy.url).netloc
    monkeypatch.delenv(ENV_TOKEN, raising=False)
    monkeypatch.setenv(ENV_URL, f"http://ann:{TOKEN}@{netloc}")
    assert main(["query", "q"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"window-retriever: error: the Chroma server at http://ann:***@{netloc} refused the "
        f"credentials (403 Forbidden); check the token ({ENV_TOKEN}) or the user:password in "
        f"{ENV_URL}\n"
    )


def test_a_non_ascii_password_reaches_the_server_as_utf8(guarded_server: Guard) -> None:
    password = "hünter2"  # noqa: S105 - a test's password
    pair = f"ann:{password}".encode()
    proxy = guarded_server({"Authorization": "Basic " + base64.b64encode(pair).decode()})
    netloc = urlsplit(proxy.url).netloc
    store = open_store(
        url=f"http://ann:h%C3%BCnter2@{netloc}",
        collection=unique("utf8"),
        create=True,
        embeddings=DeterministicFakeEmbedding(size=8),
        environ={},
    )
    add_chunks(store, WindowSplitter().split_documents(notes(2, words=80)))
    assert ContextWindowRetriever(vectorstore=store, k=1).invoke("topic1") and proxy.seen
