"""The real stack: the example pages, the packaged embedding model and a Chroma store on disk."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import WindowSplitter, add_chunks, default_embeddings
from window_retriever._loaders import LoadOptions, load_file

PAGES = Path(__file__).parents[2] / "examples" / "pages"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration: `pytest -m "not integration"` is the fast set."""
    folder = Path(__file__).parent
    for item in items:
        if folder in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def load_page(path: Path) -> Document:
    loaded = load_file(path, LoadOptions(selectors=["body"]))
    assert loaded.document is not None, loaded.error
    return loaded.document


def example_store() -> tuple[Chroma, tuple[Document, ...], dict[str, str]]:
    return _example_store()[:3]  # type: ignore[return-value]


def example_store_directory() -> str:
    return _example_store()[3]


@lru_cache(maxsize=1)
def _example_store() -> tuple[Chroma, tuple[Document, ...], dict[str, str], str]:
    """One persistent store of the example pages per test session (embedding takes seconds)."""
    directory = tempfile.mkdtemp(prefix="window-retriever-it-")
    documents = [load_page(path) for path in sorted(PAGES.glob("*.html"))]
    chunks = WindowSplitter().split_documents(documents)
    store = Chroma(
        collection_name="pages",
        embedding_function=default_embeddings(),
        persist_directory=directory,
    )
    add_chunks(store, chunks)
    texts = {d.metadata["source"]: d.page_content for d in documents}
    return store, tuple(chunks), texts, directory


@pytest.fixture
def pages() -> tuple[Chroma, tuple[Document, ...], dict[str, str]]:
    return example_store()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server on loopback, started from this environment's ``chroma``."""
    executable = Path(sys.executable).parent / "chroma"
    port = _free_port()
    path = tmp_path_factory.mktemp("chroma-server")
    process = subprocess.Popen(
        [str(executable), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
            break
        except Exception:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail("the Chroma server did not start")
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)
