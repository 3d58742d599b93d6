"""Import cost: ``import window_retriever`` loads almost nothing, a retriever only what it needs.

Each check runs in a fresh interpreter (this process has imported everything already) and
reads ``sys.modules`` after each step: the package, the retriever class, a query, a keyword
search. Measured times are in ``docs/CONTRIBUTING.md``; no time is asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys

    seen = {}

    def step(name):
        seen[name] = sorted(sys.modules)

    import window_retriever
    step("package")

    from window_retriever import ContextWindowRetriever
    step("retriever")

    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from window_retriever import MemoryWindowStore, WindowSplitter, add_chunks

    store = MemoryWindowStore(DeterministicFakeEmbedding(size=16))
    text = " ".join(f"Sentence {i} of a page about windows." for i in range(60))
    add_chunks(store, WindowSplitter().split_documents([Document(text, metadata={"source": "a"})]))
    found = ContextWindowRetriever(vectorstore=store, k=2).invoke("windows")
    assert found, "the query found nothing"
    step("query")

    from window_retriever.keywords._index import KeywordIndex
    step("keyword module")

    import chromadb
    from langchain_chroma import Chroma
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    chroma = Chroma(
        client=chromadb.EphemeralClient(),
        collection_name="import_cost",
        embedding_function=DeterministicFakeEmbedding(size=16),
    )
    chroma.add_texts(["max_retries on the adapter", "cookies persist"], ids=["a", "b"])
    hits = KeywordIndex.for_source(ChromaKeywordSource(chroma)).search("max_retries", k=1)
    assert [chunk_id for chunk_id, _ in hits] == ["a"], hits
    step("keyword search")
    print(json.dumps(seen))
    """
)

HEAVY = {"chromadb", "langchain_chroma", "matplotlib", "onnxruntime", "tantivy", "tokenizers"}
"""Third-party packages a retriever over a given store never needs."""
LATER = {
    "window_retriever.cli._parser",
    "window_retriever.cli._commands",
    "window_retriever.cli._terminal",
    "window_retriever.keywords._index",
    "window_retriever.keywords._lifecycle",
    "window_retriever.keywords._engine",
    "window_retriever.keywords._rows",
    "window_retriever.ingestion._pipeline",
    "window_retriever.citations",
    "window_retriever.evaluation",
    "window_retriever.ingestion._ingest",
    "window_retriever.plotting",
}
"""The library's modules imported on first use only."""


@pytest.fixture(scope="module")
def loaded() -> dict[str, set[str]]:
    """Module names in ``sys.modules`` after each step of SCRIPT, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {step: set(names) for step, names in json.loads(done.stdout).items()}


def packages(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_the_package_imports_only_its_version(loaded: dict[str, set[str]]) -> None:
    ours = {name for name in loaded["package"] if name.startswith("window_retriever")}
    assert ours == {"window_retriever", "window_retriever._version"}
    assert packages(loaded["package"]) & {"langchain_core", "pydantic", "numpy", *HEAVY} == set()


@pytest.mark.parametrize("step", ["retriever", "query"])
def test_a_retriever_loads_no_store_client_nor_later_modules(
    loaded: dict[str, set[str]], step: str
) -> None:
    assert packages(loaded[step]) & HEAVY == set()
    assert loaded[step] & LATER == set()


def test_tantivy_loads_at_the_first_keyword_search(loaded: dict[str, set[str]]) -> None:
    assert "tantivy" not in packages(loaded["keyword module"])
    assert "tantivy" in packages(loaded["keyword search"])  # the probe does see it
