"""The real stack: the example pages, the packaged embedding model and a Chroma store on disk."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

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
