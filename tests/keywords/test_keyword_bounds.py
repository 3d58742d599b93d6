"""A saved keyword index whose files change under the process that loaded it (issue 39, item 6):
every reader of its rows, a damaged or truncated file, an engine that fails again when rebuilt.
Each is rebuilt from the collection or becomes one ``StoreError``, never a raw exception."""

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

from tests.helpers.corpora import QUESTION, pages
from tests.helpers.stores import disk_store, row_file
from window_retriever import ContextWindowRetriever, StoreError, add_chunks
from window_retriever.keywords._engine import Engine
from window_retriever.keywords._index import KeywordIndex
from window_retriever.keywords._lifecycle import FOLDER
from window_retriever.stores import keyword_index

pytestmark = pytest.mark.usefixtures("fresh_keyword_indexes")


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
