"""The keyword index across processes: writes of the CLI's ingest, and the collection's space.

The writer is another process, run to its end before the reader looks; the reader then waits
out its ``check_interval`` (the documented staleness bound) and must see every change.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.servers import run_script, unique
from window_retriever import ingest, open_store
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import GENERATION_KEY
from window_retriever.stores import ChromaWindowStore
from window_retriever.stores._chroma_keywords import keyword_index

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
COMMON = "manual"
INTERVAL = 0.2


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()


def page(term: str) -> str:
    return f"This page of the {COMMON} explains the {term} option and nothing else."


def hits(index: KeywordIndex, term: str) -> list[str]:
    return [chunk_id for chunk_id, _ in index.search(term, k=1000)]


def cli_ingest(url: str, collection: str, folder: Path) -> None:
    """``window-retriever ingest`` in its own process, run to its end."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WINDOW_RETRIEVER_")}
    arguments = ["ingest", "--chroma-url", url, "--collection", collection, str(folder)]
    done = subprocess.run(
        [sys.executable, "-m", "window_retriever", *arguments],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_reader_process_sees_the_cli_s_ingests_within_its_check_interval(
    chroma_server: str, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(page("zebrafish"))
    (folder / "b.md").write_text(page("quokka"))
    name = unique("kwsync")
    cli_ingest(chroma_server, name, folder)
    address = urlsplit(chroma_server)
    store = Chroma(
        collection_name=name,
        embedding_function=DeterministicFakeEmbedding(size=16),  # keyword search embeds nothing
        client=chromadb.HttpClient(host=address.hostname, port=address.port),
    )
    index = keyword_index(store, check_interval=INTERVAL)
    assert len(hits(index, "zebrafish")) == 1
    count = store._collection.count()

    # A page rewritten in place: the count stays the same, only the generation token tells.
    (folder / "a.txt").write_text(page("narwhal"))
    cli_ingest(chroma_server, name, folder)
    assert store._collection.count() == count
    time.sleep(INTERVAL)  # the bound: a search that starts now must see the write

    assert hits(index, "zebrafish") == []
    assert len(hits(index, "narwhal")) == 1

    # A file deleted (pruned) and another added in one run: the count stays the same again.
    (folder / "b.md").unlink()
    (folder / "c.txt").write_text(page("okapi"))
    cli_ingest(chroma_server, name, folder)
    assert store._collection.count() == count
    time.sleep(INTERVAL)

    assert hits(index, "quokka") == []
    assert len(hits(index, "okapi")) == 1
    stored = set(store.get(include=[])["ids"])
    assert set(hits(index, COMMON)) == stored  # every page holds the word: the index is the store


REOPEN = """
import json, sys
import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from window_retriever import ingest, open_store
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index
from window_retriever.keywords._index import KeywordIndex
from window_retriever.stores import ChromaWindowStore
config = json.loads(sys.argv[1])
fake = DeterministicFakeEmbedding(size=16)
if config["how"] == "open_store":
    store = open_store(config.get("db"), url=config.get("url"), collection=config["name"],
                       embeddings=fake)
else:
    client = (chromadb.PersistentClient(path=config["db"]) if config.get("db")
              else chromadb.HttpClient(host=config["host"], port=config["port"]))
    store = Chroma(collection_name=config["name"], embedding_function=fake, client=client,
                   collection_metadata={"hnsw:space": "cosine"})
space = ChromaWindowStore(store).space()
summary = ingest(store, [config["folder"]])
hit = keyword_index(store).search("narwhal", k=1)
_, distance = store.similarity_search_with_score(config["query"], k=1)[0]
print(json.dumps({"space": space, "after": ChromaWindowStore(store).space(),
                  "updated": summary.updated, "hit": hit, "distance": distance}))
"""


def reopen(config: dict[str, Any]) -> Any:
    return run_script(REOPEN, config)


@pytest.mark.parametrize("where", ["embedded", "server"])
@pytest.mark.parametrize(("how", "space"), [("open_store", "l2"), ("cosine", "cosine")])
def test_the_collection_keeps_its_space_through_ingests_and_a_new_process(
    where: str, how: str, space: str, tmp_path: Path, chroma_server: str
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(page("zebrafish"))
    (folder / "b.md").write_text(page("quokka"))
    fake = DeterministicFakeEmbedding(size=16)
    name = unique("space")
    address = urlsplit(chroma_server)
    config: dict[str, Any] = {"how": how, "name": name, "folder": str(folder)}
    if where == "embedded":
        config["db"] = str(tmp_path / "db")
        client: Any = chromadb.PersistentClient(path=config["db"])
    else:
        config.update(url=chroma_server, host=address.hostname, port=address.port)
        client = chromadb.HttpClient(host=address.hostname, port=address.port)
    if how == "open_store":
        store = open_store(config.get("db"), url=config.get("url"), collection=name,
                           embeddings=fake, create=True)  # fmt: skip
    else:
        store = Chroma(
            collection_name=name,
            embedding_function=fake,
            client=client,
            collection_metadata={"hnsw:space": "cosine"},
        )

    ingest(store, [str(folder)])  # writes, then invalidates: a new token in the metadata

    metadata = client.get_collection(name).metadata or {}
    assert GENERATION_KEY in metadata
    assert ChromaWindowStore(store).space() == space
    if where == "embedded":
        del store, client  # the new process is the only one holding the store
    (folder / "a.txt").write_text(page("narwhal"))

    theirs = reopen({**config, "query": page("narwhal")})

    assert (theirs["space"], theirs["after"]) == (space, space)
    assert theirs["updated"] == 1  # the re-ingest invalidated again, through the same path
    assert len(theirs["hit"]) == 1
    assert theirs["distance"] == pytest.approx(0, abs=1e-4)  # the page finds itself
