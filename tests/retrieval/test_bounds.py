"""Every option bounded (issue 39, item 6): nothing grows with ``k``, ``fetch_k`` or a budget, a
``length_function`` returns a count or is named, and a saved keyword index whose files change
under the process is rebuilt, never a raw exception."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers.corpora import QUESTION, pages
from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    MemoryWindowStore,
    StoreError,
    add_chunks,
)
from window_retriever.keywords._engine import Engine
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import FOLDER
from window_retriever.stores import keyword_index

pytestmark = pytest.mark.usefixtures("fresh_keyword_indexes")

# ---- k, fetch_k and budgets: nothing allocated grows with them -----------------------------

HUGE = {
    "k, hybrid, adaptive": {"k": 10**9, "total_budget": 10**12},
    "k, hybrid, static": {"k": 10**9, "candidates": "hybrid"},
    "k and fetch_k, vector": {"k": 10**9, "fetch_k": 10**9, "candidates": "vector"},
    "total_budget": {"total_budget": 10**12},
    "total_budget, static": {"total_budget": 10**30, "expansion": "static"},
    "total_budget, filtered": {"total_budget": 10**12, "filter": {"tenant": "acme"}},
    "every budget": {"total_budget": 10**30, "window_budget": 10**30, "fetch_k": 10**9},
    "window_budget": {"window_budget": 10**30, "k": 10**9},
}
"""Retrievals asked for more than the collection holds: each returns every chunk (each is a
hit), an answer no larger than the collection."""

RETRIEVE_HUGE = """
import json, resource, sys
import chromadb
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from tests.helpers.corpora import QUESTION, pages
from tests.retrieval.test_bounds import HUGE
from window_retriever import ContextWindowRetriever, add_chunks
from window_retriever.stores import keyword_index

limit = 6 * 2**30  # an allocation that grows with k or a budget fails here, on any machine
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
store = Chroma("huge", DeterministicFakeEmbedding(size=16), client=chromadb.EphemeralClient())
add_chunks(store, pages())
found = {"keyword search": [i for i, _ in keyword_index(store).search(QUESTION, 10**12)]}
windows = ContextWindowRetriever(vectorstore=store).invoke(QUESTION, k=10**9, total_budget=1000)
found["k, budgeted"] = [len(window.page_content) for window in windows]
for case, options in HUGE.items():
    try:
        windows = ContextWindowRetriever(vectorstore=store).invoke(QUESTION, **options)
        found[case] = [i for window in windows for i in window.metadata["chunk_ids"]]
    except Exception as error:
        found[case] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def huge() -> dict[str, Any]:
    """What each of :data:`HUGE` returned (chunk ids, or the error), in a process of its own.

    Tantivy's search allocated for the limit asked (``k + 8``: 32 GB, and Python aborted),
    Chroma's query overflowed past 2**32 - 1 results: in its own process an abort fails the
    tests that need it instead of ending pytest.
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RETRIEVE_HUGE)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_keyword_search_for_a_trillion_costs_what_the_index_holds(huge: dict[str, Any]) -> None:
    holding_a_term = {chunk.id for chunk in pages() if "pottery" in chunk.page_content}
    assert set(huge["keyword search"]) == holding_a_term


def test_a_k_of_a_billion_under_a_total_budget_keeps_the_budget(huge: dict[str, Any]) -> None:
    """``invoke(q, k=10**9, total_budget=1000)``: hybrid candidates, tantivy asked for 1e9."""
    assert huge["k, budgeted"] and sum(huge["k, budgeted"]) <= 1000


@pytest.mark.parametrize("case", HUGE)
def test_more_than_the_collection_holds_returns_all_of_it(huge: dict[str, Any], case: str) -> None:
    """``total_budget=10**12`` made ``k`` 5e9 and ``fetch_k`` 1e10: Chroma's OverflowError."""
    assert isinstance(huge[case], list), huge[case]  # else the error it raised
    assert sorted(huge[case]) == sorted(chunk.id for chunk in pages())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 10**9 + 1}, r"k \(the number of windows to return\) must be at most 1,000,000,000"),
        ({"fetch_k": 2**32}, r"fetch_k \(.*\) must be at most 1,000,000,000, got 4294967296; pass"),
        ({"k": 10, "fetch_k": 10**12}, r"fetch_k .* got 1000000000000"),
    ],
)
def test_k_and_fetch_k_are_bounded_by_what_a_store_can_be_asked(
    options: dict[str, Any], message: str
) -> None:
    """Chroma takes at most 2**32 - 1 results (a raw OverflowError past it)."""
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=16))
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store, **options)
    with pytest.raises(ConfigurationError, match=message):
        ContextWindowRetriever(vectorstore=store).invoke(QUESTION, **options)


# ---- length_function: a count, or an error that names it -----------------------------------


@pytest.fixture
def memory() -> MemoryWindowStore:
    store = MemoryWindowStore(DeterministicFakeEmbedding(size=16))
    add_chunks(store, pages())
    return store


@pytest.mark.parametrize("total_budget", [1000, None])
@pytest.mark.parametrize(
    ("returned", "shown", "also_type_error"),
    [
        (lambda text: len(text) - 300, r"-\d+ \(int\)", False),
        (lambda text: -1, r"-1 \(int\)", False),
        (lambda text: len(text) / 3, r"\d+\.\d+ \(float\)", True),
        (lambda text: float(len(text)), r"\d+\.0 \(float\)", True),
        (lambda text: str(len(text)), r"'\d+' \(str\)", True),
        (lambda text: None, r"None \(NoneType\)", True),
        (lambda text: True, r"True \(bool\)", True),
    ],
)
def test_a_length_function_that_returns_no_count_is_named(
    memory: MemoryWindowStore,
    total_budget: int | None,
    returned: Callable[[str], Any],
    shown: str,
    also_type_error: bool,
) -> None:
    """A negative count bought room: 1,159 characters came back for ``total_budget=1000``."""
    retriever = ContextWindowRetriever(
        vectorstore=memory, length_function=returned, total_budget=total_budget
    )
    with pytest.raises(ConfigurationError) as raised:
        retriever.invoke(QUESTION)
    message = str(raised.value)
    assert message.startswith("length_function must return an int, 0 or more")
    assert raised.match(rf"got {shown} for the text '.{{40}}\.\.\.'; return a whole count")
    assert isinstance(raised.value, TypeError) is also_type_error  # as before, for the type


def test_a_length_function_may_return_numpy_integers(memory: MemoryWindowStore) -> None:
    def numpy_len(text: str) -> Any:
        return np.int64(len(text))

    by_numpy = ContextWindowRetriever(vectorstore=memory, length_function=numpy_len)
    by_len = ContextWindowRetriever(vectorstore=memory)
    for options in ({"total_budget": 1000}, {}):
        assert by_numpy.invoke(QUESTION, **options) == by_len.invoke(QUESTION, **options)


# ---- a saved keyword index whose files change under the process ----------------------------


def disk_store(directory: Path) -> Chroma:
    return Chroma(
        collection_name="docs",
        embedding_function=DeterministicFakeEmbedding(size=16),
        persist_directory=str(directory),
    )


def row_file(saved: Path, name: str) -> Path:
    """The saved rows' file ``name``: ``rows-0-N.<name>`` (an index built anew is one part)."""
    (path,) = saved.glob(f"rows-*.{name}")
    return path


def overwrite(path: Path, pattern: bytes) -> None:
    """Rewrite the array's bytes in place, its header kept: another copy of the same size."""
    with path.open("r+b") as file:
        np.lib.format.read_magic(file)
        np.lib.format.read_array_header_1_0(file)
        start = file.tell()
        size = path.stat().st_size - start
        file.write((pattern * size)[:size])


ACME = {"tenant": "acme"}

READERS: dict[str, Callable[[Chroma, list[str]], Any]] = {
    "search": lambda store, ids: keyword_index(store).search(QUESTION, 5),
    "search where": lambda store, ids: keyword_index(store).search(QUESTION, 5, where=ACME),
    "passing": lambda store, ids: keyword_index(store).passing(ACME),
    "indexed": lambda store, ids: keyword_index(store).indexed(ids),
    "indexed first": lambda store, ids: keyword_index(store).indexed(ids[:1]),
    "retrieval": lambda store, ids: [
        (window.id, window.page_content)
        for window in ContextWindowRetriever(vectorstore=store, total_budget=800).invoke(
            QUESTION, filter=ACME
        )
    ],
}
"""Every reader of the rows: searches (ids, filter masks), ``passing``, ``indexed``, and a
retrieval that reads them all (the keyword leg, ids for a filter, stand-ins, corrections)."""


FF, ZEROS, SEVEN = b"\xff", b"\x00", b"7" + b" " * 10**6
"""Not UTF-8 (nor JSON, nor an offset in range); zeros (empty ids: what a shorter file leaves
past its end); the first row's metadata a number (valid JSON, but no object)."""


@pytest.mark.parametrize(
    ("reader", "name", "pattern"),
    [  # each reader with the files it reads (the tenant's column: column-6)
        ("search", "ids.npy", FF),
        ("search", "ids.npy", ZEROS),
        ("search where", "ids.npy", FF),
        ("search where", "column-6.npy", b"\x7f"),
        ("passing", "ids.npy", ZEROS),
        ("passing", "column-6.npy", b"\x7f"),
        ("indexed", "metadata.npy", FF),
        ("indexed first", "metadata.npy", SEVEN),
        ("indexed", "metadata-ends.npy", FF),
        ("retrieval", "ids.npy", FF),
        ("retrieval", "metadata.npy", FF),
        ("retrieval", "metadata-ends.npy", FF),
        ("retrieval", "column-6.npy", b"\x7f"),
    ],
)
def test_a_saved_file_changed_under_the_process_is_rebuilt_by_every_reader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reader: str, name: str, pattern: bytes
) -> None:
    """``cp backup/* index/`` while a process held the index: every query raised."""
    store = disk_store(tmp_path)
    chunks = pages()
    add_chunks(store, chunks)
    ids = sorted(chunk.id or "" for chunk in chunks)[:5]
    read = READERS[reader]
    keyword_index(store).search(QUESTION, 5)  # built and saved
    expected = read(store, ids)
    saved = tmp_path / FOLDER / str(store._collection.id)
    described = orjson.loads(row_file(saved, "columns.json").read_bytes())
    assert described["columns"][6]["key"] == "tenant"
    KeywordIndex._shared.clear()  # a process that loads it, and holds it, as the files change
    index = keyword_index(store)
    assert index.search("nothing", 1) == [] and index.loads == 1

    overwrite(row_file(saved, name), pattern)
    with caplog.at_level(logging.WARNING, logger="window_retriever"):
        found = read(store, ids)

    if reader in ("passing", "indexed", "indexed first"):
        assert found is None  # the caller lets Chroma decide, and reads what it needs
    else:
        assert found == expected
    assert "a saved file changed since it was loaded" in caplog.text
    assert index.search(QUESTION, 5) == READERS["search"](store, ids)  # the next search rebuilds
    assert index.builds == 1  # once, from the collection
    assert read(store, ids) == expected


def test_an_index_that_fails_again_when_rebuilt_is_one_store_error(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    add_chunks(store, pages())
    index = keyword_index(store)
    index.search(QUESTION, 5)

    def broken(*args: Any, **kwargs: Any) -> Any:
        msg = "tantivy: the index is damaged"
        raise ValueError(msg)

    monkeypatch.setattr(Engine, "top", broken)
    with pytest.raises(StoreError, match=r"failed twice, .*: tantivy: the index is damaged"):
        index.search(QUESTION, 5)


TRUNCATE_SAVED = """
import json, sys
from pathlib import Path
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from tests.helpers.corpora import QUESTION, pages
from window_retriever import add_chunks
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import FOLDER
from window_retriever.stores import keyword_index

directory = Path(sys.argv[1])
store = Chroma("docs", DeterministicFakeEmbedding(size=16), persist_directory=str(directory))
add_chunks(store, pages())
expected = keyword_index(store).search(QUESTION, 5)  # built and saved
KeywordIndex._shared.clear()  # a process that loads it (its files mapped into memory)
index = keyword_index(store, check_interval=0)
assert index.search("nothing", 1) == [] and index.loads == 1
saved = directory / FOLDER / str(store._collection.id)
for path in saved.iterdir():  # cp of a smaller backup: each file written over, shorter
    if path.is_file() and path.name != "state.json" and path.stat().st_size > 1:
        with path.open("r+b") as file:
            file.truncate(path.stat().st_size // 2)
found = index.search(QUESTION, 5)
print(json.dumps({"expected": expected, "found": found, "builds": index.builds}))
"""


def test_saved_files_truncated_under_the_process_do_not_crash_it(tmp_path: Path) -> None:
    """Files cut shorter in place under a process that loaded them (tantivy maps its files
    into memory): the engine's failure is caught, the index rebuilt, the answer unchanged."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRUNCATE_SAVED), str(tmp_path)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    found = json.loads(done.stdout)
    assert found["found"] == found["expected"] and found["builds"] == 1
    assert "it is rebuilt from the collection" in done.stderr
