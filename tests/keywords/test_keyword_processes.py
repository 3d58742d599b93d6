"""The keyword index across real processes: a Chroma server and a store on disk.

A writer is another Python process (``python -c``), run to its end before the reader looks,
so nothing depends on timing; the reader's staleness bound is checked on the index's own
clock, which the test moves.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from langchain_core.documents import Document

from tests.helpers.servers import OPEN, run_script, server_store, unique
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import COUNT_EVERY
from window_retriever.stores._chroma_keywords import keyword_index

pytestmark = pytest.mark.integration

FILLER = [
    "Connections are pooled and reused between requests to the same host.",
    "The client follows redirects unless told otherwise.",
    "Cookies persist across requests made from one session.",
    "Proxies can be configured per scheme, for http and https separately.",
]
OPTION = "Set max_retries on the adapter to retry failed connections a few times."


def run(script: str, config: dict[str, Any]) -> Any:
    """Run ``script`` after :data:`OPEN` in a new Python process; its last line, as JSON."""
    return run_script(OPEN + textwrap.dedent(script), config)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ids(found: list[tuple[str, float]]) -> list[str]:
    return [chunk_id for chunk_id, _ in found]


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    KeywordIndex._shared.clear()
    yield
    KeywordIndex._shared.clear()


def test_writes_of_another_process_are_seen_on_a_server_within_the_bound(
    chroma_server: str,
) -> None:
    config, store = server_store(chroma_server, "keyword")
    store.add_documents(
        [Document(page_content=text, id=f"doc:{i}") for i, text in enumerate(FILLER)],
        ids=[f"doc:{i}" for i in range(len(FILLER))],
    )
    index = keyword_index(store, check_interval=30)
    clock = FakeClock()
    index._clock = clock
    assert ids(index.search("redirects", k=3)) == ["doc:1"]
    assert index.search("max_retries", k=3) == []

    # Another process, through this library: a new chunk, a deletion, an in-place rewrite
    # (the count stays 4), then invalidate.
    run(
        """
        store.add_documents(
            [Document(page_content=config["option"], id="doc:9"),
             Document(page_content="Sessions keep a cookie jar.", id="doc:1")],
            ids=["doc:9", "doc:1"],
        )
        store.delete(ids=["doc:0"])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        """,
        {**config, "option": OPTION},
    )
    clock.now += 29  # within the bound this process may still answer from its old build
    assert ids(index.search("redirects", k=3)) == ["doc:1"]
    clock.now += 2
    assert ids(index.search("max_retries", k=3)) == ["doc:9"]
    assert index.search("redirects", k=3) == []  # rewritten in place
    assert "doc:0" not in ids(index.search("connections requests host", k=10))  # deleted

    # A writer that bypasses the library (a bare add) is seen by its count, which a check
    # reads once every COUNT_EVERY intervals (the others read the token alone).
    run(
        """
        store._collection.add(ids=["doc:10"], documents=["Use a timeout_seconds budget."],
                              embeddings=[[0.1] * 16])
        """,
        config,
    )
    clock.now += 31
    assert index.search("timeout_seconds", k=3) == []
    clock.now += COUNT_EVERY * 30
    assert ids(index.search("timeout_seconds", k=3)) == ["doc:10"]

    # Another process on the same server builds its own index and ranks the same way.
    theirs = run(
        """
        index = keyword_index(store)
        print(json.dumps(index.search("retry adapter connections", k=5)))
        """,
        config,
    )
    assert [tuple(hit) for hit in theirs] == index.search("retry adapter connections", k=5)


SEARCH = """
from chromadb.api.models.Collection import Collection
reads = 0
original = Collection.get
def get(self, *args, **kwargs):
    global reads
    reads += "documents" in (kwargs.get("include") or []) and self.name == config["name"]
    return original(self, *args, **kwargs)
Collection.get = get
index = keyword_index(store)
import logging
logged = []
handler = logging.Handler()
handler.emit = lambda record: logged.append(record.getMessage())
logging.getLogger("window_retriever").addHandler(handler)
logging.getLogger("window_retriever").setLevel(logging.DEBUG)
hits = index.search(config["query"], k=3)
print(json.dumps({"builds": index.builds, "loads": index.loads, "reads": reads, "hits": hits,
                  "logged": logged}))
"""


@pytest.mark.parametrize("where", ["disk", "server"])
def test_a_new_process_loads_the_saved_index_and_rebuilds_it_after_a_change(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """Beside a store on disk, or in this machine's cache for a store on a server."""
    config: dict[str, Any] = {"name": unique("docs"), "query": "max_retries"}
    if where == "disk":
        config["path"] = str(tmp_path / "store")
    else:
        address = urlsplit(request.getfixturevalue("chroma_server"))
        config.update(host=address.hostname, port=address.port, cache=str(tmp_path / "one"))
    run(
        """
        store.add_documents([Document(page_content=t, id=f"doc:{i}")
                             for i, t in enumerate(config["texts"])],
                            ids=[f"doc:{i}" for i in range(len(config["texts"]))])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        """,
        {**config, "texts": [*FILLER, OPTION]},
    )

    first = run(SEARCH, config)
    second = run(SEARCH, config)

    assert (first["builds"], first["loads"], first["reads"]) == (1, 0, 1)
    assert (second["builds"], second["loads"], second["reads"]) == (0, 1, 0)  # no rebuild
    assert second["hits"] == first["hits"]
    assert [hit[0] for hit in first["hits"]] == ["doc:4"]

    run(
        """
        store.add_documents([Document(page_content="Set max_retries=5.", id="doc:7")],
                            ids=["doc:7"])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        """,
        config,
    )
    third = run(SEARCH, config)

    assert (third["builds"], third["loads"], third["reads"]) == (1, 0, 1)
    assert {hit[0] for hit in third["hits"]} == {"doc:4", "doc:7"}
    if where == "server":
        saved = list((tmp_path / "one" / "keyword").glob("*/*/state.json"))
        assert len(saved) == 1, saved  # one server, tenant and database; one collection id
        # Another machine (its own cache folder) builds once, then loads its own copy.
        other = {**config, "cache": str(tmp_path / "two")}
        first_there = run(SEARCH, other)
        assert [first_there[key] for key in ("builds", "loads")] == [1, 0], first_there
        again = run(SEARCH, other)
        assert [again[key] for key in ("builds", "loads")] == [0, 1]
        assert again["hits"] == third["hits"]


HALF_LOADED = """
import asyncio, importlib.abc, importlib.machinery, json, sys, threading
import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from window_retriever.retrieval._candidates import search_ids
from window_retriever.retrieval._retriever import _arun, _run
from window_retriever.stores._chroma import ChromaWindowStore

NAME = "window_retriever.keywords._index"
started, release = threading.Event(), threading.Event()


class Held(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # The keyword module's import, held after it is in sys.modules and before it runs.
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        self.real, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        started.set()
        release.wait()
        self.real.exec_module(module)


sys.meta_path.insert(0, Held())
chroma = Chroma(
    client=chromadb.EphemeralClient(),
    collection_name="half_loaded",
    embedding_function=DeterministicFakeEmbedding(size=16),
)
chroma.add_texts(
    ["max_retries on the adapter", "cookies persist"],
    ids=["a", "b"],
    metadatas=[{"tenant": "acme"}, {"tenant": "globex"}],
)
store = ChromaWindowStore(chroma)
threading.Thread(target=lambda: __import__(NAME)).start()  # a keyword search's first import
started.wait()
assert NAME in sys.modules and not hasattr(sys.modules[NAME], "KeywordIndex")
threading.Timer(0.3, release.set).start()
call = json.loads(sys.argv[1])["call"]
search = search_ids("max_retries", 2, {"tenant": "acme"}, held=store.held())
if call == "held":
    got = [] if store.held() is None else ["an index"]  # none was made: only imported
elif call == "search_ids":
    got = [chunk_id for chunk_id, _ in _run(search, store)]
else:
    got = [chunk_id for chunk_id, _ in asyncio.run(_arun(search, store))]
print(json.dumps(got))
"""


@pytest.mark.parametrize(
    ("call", "expected"),
    [("held", []), ("search_ids", ["a"]), ("asearch_ids", ["a"])],
)
def test_a_read_while_another_thread_first_imports_the_keyword_module_waits_for_it(
    call: str, expected: list[str]
) -> None:
    """Found in CI: a fetch took the half-run module from ``sys.modules`` (AttributeError).

    The adapter's fetch no longer asks for the index; a filtered search and every read by id
    ask the store for it (``held``), which must wait for the import: ``held`` alone, and the
    retrieval's filtered search, sync and async.
    """
    assert run_script(HALF_LOADED, {"call": call}) == expected


KILLED = """
import os, pathlib, time
import window_retriever.keywords._engine as engine
point = config["point"]
def hold(*args):
    print("held", flush=True)
    time.sleep(60)
if point == "saving":  # the engine's files and the rows written, state.json not yet
    checksums = engine.checksums
    def held_checksums(folder, known=None):
        if ".tmp-" in folder.name:  # the save's, not a load's
            hold()
        return checksums(folder, known)
    engine.checksums = held_checksums
else:  # the old copy moved aside, the new one not yet in its place
    rename = pathlib.Path.rename
    def held_rename(self, target):
        if ".tmp-" in self.name:
            hold()
        return rename(self, target)
    pathlib.Path.rename = held_rename
keyword_index(store).search("max_retries", k=3)
"""


@pytest.mark.parametrize("point", ["saving", "renaming"])
def test_a_writer_killed_while_saving_leaves_nothing_a_reader_serves(
    tmp_path: Path, point: str
) -> None:
    """kill -9 mid-save: the next process rebuilds (never loads a half-written copy) and
    agrees with the store; a later save sweeps what the killed one left."""
    import json
    import os
    import signal
    import subprocess
    import sys

    config: dict[str, Any] = {"path": str(tmp_path / "store"), "name": "docs", "point": point}
    texts = [*FILLER, OPTION]
    run(
        """
        store.add_documents([Document(page_content=t, id=f"doc:{i}")
                             for i, t in enumerate(config["texts"])],
                            ids=[f"doc:{i}" for i in range(len(config["texts"]))])
        keyword_index(store).search("max_retries", k=3)  # an older copy is saved
        store.add_documents([Document(page_content="Set max_retries=5.", id="doc:7")],
                            ids=["doc:7"])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        """,
        {**config, "texts": texts},
    )
    killed = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OPEN + KILLED), json.dumps(config)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert killed.stdout is not None
    assert killed.stdout.readline().strip() == "held"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    killed.stdout.close()
    folder = tmp_path / "store" / "window_retriever_keyword"
    left = [p for p in folder.iterdir() if p.name.startswith(".")]
    assert left, "the kill came before the save began"

    after = run(SEARCH, {**config, "query": "max_retries"})

    assert (after["builds"], after["loads"]) == (1, 0)
    assert {hit[0] for hit in after["hits"]} == {"doc:4", "doc:7"}
    for path in left:  # as if the kill was more than an hour ago
        os.utime(path, (0, 0))
    run(
        """
        store.add_documents([Document(page_content="max_retries again", id="doc:8")],
                            ids=["doc:8"])
        KeywordIndex.invalidate(ChromaKeywordSource(store))
        keyword_index(store).search("max_retries", k=3)
        """,
        config,
    )
    assert not any(path.exists() for path in left)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []


def test_another_process_s_library_writes_are_caught_up_on_every_machine(
    chroma_server: str, tmp_path: Path
) -> None:
    """A writer process's ``add_chunks``, ``sync_file`` and ``remove_file`` on a server: the
    reader here and a new process on another machine (its own cache) apply the change feed,
    read no other record, and rank as a build from scratch does."""
    config, store = server_store(chroma_server, "feed")
    run(
        """
        from window_retriever import WindowSplitter, add_chunks
        pages = [Document(t, metadata={"source": f"p{i}"}) for i, t in enumerate(config["texts"])]
        add_chunks(store, WindowSplitter().split_documents(pages))
        """,
        {**config, "texts": FILLER},
    )
    index = keyword_index(store, check_interval=0)
    assert index.search("max_retries", k=3) == []
    run(
        """
        from window_retriever import WindowSplitter, add_chunks, sync_file
        from window_retriever.ingestion._prune import remove_file
        splitter = WindowSplitter()
        add_chunks(store, splitter.split_documents(
            [Document(config["option"], metadata={"source": "new"})]))
        rewritten = splitter.split_documents(
            [Document("Sessions keep a cookie jar.", metadata={"source": "p1"})])
        sync_file(store, rewritten)
        gone = splitter.split_documents([Document("x", metadata={"source": "p0"})])
        remove_file(store, gone[0].metadata["file_id"])
        """,
        {**config, "option": OPTION},
    )

    found = index.search("max_retries", k=3)

    assert len(found) == 1
    assert index.search("redirects", k=3) == []  # p1 rewritten
    assert index.search("pooled host", k=3) == []  # p0 removed
    assert (index.builds, index.catch_ups) == (1, 1)
    theirs = run(
        SEARCH.replace('config["query"]', '"max_retries"'),
        {**config, "cache": str(tmp_path / "other")},
    )
    assert (theirs["builds"], theirs["loads"]) == (1, 0)  # nothing saved on that machine
    assert [tuple(hit) for hit in theirs["hits"]] == found
