"""Failures that used to surface as Chroma's or the OS's own words, now one line with the fix.

Filters Chroma would refuse with a bare ``Invalid where clause``, a store directory that is a
file, and a collection built with another embedding model (embedded Chroma, offline). The
server's failures (timeouts, refused credentials, a server gone) are in
``tests/stores/test_server_failures.py``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chromadb.errors import DuplicateIDError
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding

from window_retriever import ConfigurationError, ContextWindowRetriever, StoreError, open_store
from window_retriever.cli._lock import writer_lock
from window_retriever.cli._parser import main
from window_retriever.stores._chroma_errors import store_errors


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---- filters Chroma refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"tenant": float("nan")}, r"'tenant' got nan; Chroma takes no NaN or infinite number"),
        ({"tenant": float("inf")}, r"'tenant' got inf; .*use a finite one"),
        ({"n": {"$gte": float("-inf")}}, r"\$gte on 'n' got -inf; .*use a finite one"),
        ({"tenant": {"$ne": ["a"]}}, r"\$ne on 'tenant' takes one string.*use \$nin"),
        ({"tenant": {"$eq": ["a"]}}, r"\$eq on 'tenant' takes one string.*use \$in"),
        ({"tenant": ["a", "b"]}, r"'tenant' takes one string, number or bool.*use \$in"),
        ({"tenant": None}, r"'tenant' takes one string, number or bool, got None"),
        ({"n": {"$in": [1, True]}}, r"\$in on 'n' takes values of one type"),
        ({"n": {"$nin": [[1]]}}, r"\$nin on 'n' takes a list of strings, numbers or bools"),
        ({"n": {"$in": [1.5, float("nan")]}}, r"\$in on 'n' got nan"),
        ({"n": {"$gt": 2**64}}, r"\$gt on 'n' got \d+, beyond the 64-bit integers Chroma"),
        ({"tags": {"$contains": ["a"]}}, r"\$contains on 'tags' takes one string"),
    ],
    ids=str,
)
def test_a_filter_chroma_refuses_is_a_configuration_error_that_names_it(
    make_store: Callable[..., Chroma], where: dict[str, Any], message: str
) -> None:
    store = make_store()
    with pytest.raises(ConfigurationError, match=r"^filter: " + message):
        ContextWindowRetriever(vectorstore=store, filter=where)
    retriever = ContextWindowRetriever(vectorstore=store)
    with pytest.raises(ConfigurationError, match=message):  # given to invoke, too
        retriever.invoke("question", filter=where)
    with pytest.raises(ConfigurationError, match=message):
        asyncio.run(retriever.ainvoke("question", filter=where))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"tenant": NaN}', r"--filter holds NaN"),
        ('{"tenant": -Infinity}', r"--filter holds -Infinity"),
        ('{"tenant": {"$gt": 1e999}}', r"--filter holds 1e999"),
        ('{"tenant": {"$ne": ["a"]}}', r"--filter: \$ne on 'tenant' takes one string"),
        ('{"n": {"$in": [1, "a"]}}', r"--filter: \$in on 'n' takes values of one type"),
    ],
)
def test_the_command_line_refuses_such_a_filter_before_opening_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    missing = tmp_path / "no-store"  # a store that is never opened
    line = one_line(["query", "q", "--db", str(missing), "--filter", text], capsys)
    assert re.search(r"^window-retriever: error: " + message, line), line
    assert not missing.exists()


# ---- a store directory that is a file ---------------------------------------------------------


def test_a_writer_lock_on_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me", encoding="utf-8")
    is_a_file = rf"^{re.escape(str(path))} is a file, not a store directory$"
    with pytest.raises(StoreError, match=is_a_file), writer_lock(path):
        pass
    not_a_directory = r"cannot use .* as a store directory \(Not a directory\)$"
    with pytest.raises(StoreError, match=not_a_directory), writer_lock(path / "inside"):
        pass
    assert path.read_text(encoding="utf-8") == "keep me"


def test_ingest_into_a_file_names_db_and_leaves_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me", encoding="utf-8")
    source = tmp_path / "page.txt"
    source.write_text("some text to ingest", encoding="utf-8")
    line = one_line(["ingest", str(source), "--db", str(path)], capsys)
    assert line == f"window-retriever: error: --db {path} is a file, not a store directory"
    assert path.read_text(encoding="utf-8") == "keep me"


# ---- a collection built with another embedding model ------------------------------------------


def built_with_32_dimensions(directory: Path) -> None:
    store = open_store(
        directory, collection="dims", create=True, embeddings=DeterministicFakeEmbedding(size=32)
    )
    store.add_texts(["a text embedded in 32 dimensions"], ids=["one"])


def test_another_embedding_dimension_names_both_and_the_fix(tmp_path: Path) -> None:
    built_with_32_dimensions(tmp_path / "db")
    store = open_store(
        tmp_path / "db", collection="dims", embeddings=DeterministicFakeEmbedding(size=48)
    )
    message = (
        rf"^the collection 'dims' at {re.escape(str(tmp_path / 'db'))}/ holds vectors of "
        r"dimension 32, but the embedding model gives 48; use the model the collection was "
        r"built with, or pass another collection$"
    )
    for options in ({}, {"total_budget": 900}, {"expansion": "adaptive", "total_budget": 900}):
        retriever = ContextWindowRetriever(vectorstore=store, **options)
        with pytest.raises(StoreError, match=message):
            retriever.invoke("question")
        with pytest.raises(StoreError, match=message):
            asyncio.run(retriever.ainvoke("question"))
    with pytest.raises(StoreError, match=message), store_errors(store):  # as ingestion writes
        store.add_texts(["another text"], ids=["two"])
    assert store._collection.count() == 1  # nothing written, nothing lost


def test_the_command_line_says_pass_another_collection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built_with_32_dimensions(tmp_path / "db")  # the command line embeds with 384 (MiniLM)
    line = one_line(["query", "q", "--db", str(tmp_path / "db"), "--collection", "dims"], capsys)
    assert line.endswith(
        "holds vectors of dimension 32, but the embedding model gives 384; use the model the "
        "collection was built with, or pass another --collection"
    ), line


def test_other_store_errors_pass_unchanged(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    with pytest.raises(ZeroDivisionError), store_errors(store):
        1 / 0  # noqa: B018
    with pytest.raises(DuplicateIDError), store_errors(store):
        store.add_texts(["a", "b"], ids=["same", "same"])
