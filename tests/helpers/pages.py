"""The example pages of the package, stored once a session, and small synthetic notes."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma
from langchain_core.documents import Document

from tests.helpers import ROOT
from window_retriever import WindowSplitter, add_chunks, default_embeddings
from window_retriever.ingestion._loaders import load_file
from window_retriever.ingestion._web import LoadOptions

PAGES = ROOT / "window_retriever" / "_data" / "pages"


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


def notes(count: int = 6, words: int = 300) -> list[Document]:
    """Small synthetic notes, ``notes/{i}.txt``, of two tenants (``acme`` and ``globex``)."""
    return [
        Document(
            page_content=" ".join(f"topic{i} word{j}" for j in range(words)),
            metadata={"source": f"notes/{i}.txt", "tenant": "acme" if i % 2 else "globex"},
        )
        for i in range(count)
    ]


def fill(store: Any) -> list[Document]:
    """Split and store the default :func:`notes`; return the chunks."""
    chunks = WindowSplitter().split_documents(notes())
    add_chunks(store, chunks)
    return chunks
