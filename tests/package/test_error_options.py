"""Errors name their options as data; the library and the command line each say them their way.

A library message names the library's arguments (``timeout``, ``wait=True``); the CLI shows
the same error with its flags (``--chroma-timeout``, ``--wait``) from one table, ``FLAGS``,
never by reading the message's text.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import get_args

import pytest
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import (
    ConfigurationError,
    OwnershipError,
    WindowSplitter,
    open_store,
    sync_file,
)
from window_retriever._errors import (
    Command,
    CommandName,
    Message,
    Option,
    OptionName,
)
from window_retriever.cli._commands import FLAGS, said
from window_retriever.cli._lock import StoreLockedError, writer_lock
from window_retriever.cli._parser import build_parser, main
from window_retriever.ingestion._loaders import load_file
from window_retriever.ingestion._web import LoadOptions
from window_retriever.stores._open import ENV_TIMEOUT

PACKAGE = Path(__file__).parents[2] / "window_retriever"


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 2) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.removeprefix("window-retriever: error: ").rstrip("\n")


def cli_options() -> set[str]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        option
        for command in commands.choices.values()
        for action in command._actions
        for option in action.option_strings
    }


def test_every_option_a_message_can_name_has_a_cli_flag() -> None:
    assert set(FLAGS) == set(get_args(OptionName))
    flags = cli_options()
    for name, flag in FLAGS.items():  # a flag of some command, or the variable the CLI reads
        assert flag in flags or flag.startswith("WINDOW_RETRIEVER_"), (name, flag)
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(get_args(CommandName)) <= set(commands.choices)


def test_every_option_named_in_the_package_is_declared() -> None:
    """mypy holds this too; here a new ``Option("name")`` fails without mypy."""
    named: list[tuple[str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("Option", "Command")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                named.append((node.func.id, str(node.args[0].value)))
    assert len(named) > 10
    declared = {"Option": get_args(OptionName), "Command": get_args(CommandName)}
    assert [(kind, name) for kind, name in named if name not in declared[kind]] == []


def test_a_message_says_its_options_in_the_library_words_and_lists_them() -> None:
    message = Message("wait (or pass ", Option("wait", True), "); ", Command("ingest"), " first")
    assert message == "wait (or pass wait=True); ingest first"
    assert isinstance(message, str) and message.options == ("wait",)
    error = ConfigurationError(Option("db", "/x", said="/x"), " is a file; ", message)
    assert str(error) == "/x is a file; wait (or pass wait=True); ingest first"
    assert error.options == ("db", "wait")
    assert said(error.message) == (
        "--db /x is a file; wait (or pass --wait); run 'window-retriever ingest' first"
    )
    assert str(ConfigurationError("plain")) == "plain" and ConfigurationError("x").options == ()


def test_the_timeout_is_timeout_in_the_library_and_its_flag_or_variable_in_the_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_TIMEOUT, raising=False)
    with pytest.raises(ConfigurationError) as raised:
        open_store(url="http://127.0.0.1:8000", timeout=0)
    assert str(raised.value).startswith("timeout must be a positive number of seconds")
    assert raised.value.options == ("timeout",)

    url = ["query", "q", "--chroma-url", "http://127.0.0.1:8000"]
    line = one_line([*url, "--chroma-timeout", "0"], capsys)
    assert line == "--chroma-timeout must be a positive number of seconds, e.g. 30, got 0.0"
    monkeypatch.setenv(ENV_TIMEOUT, "-1")
    line = one_line(url, capsys)
    assert line == f"{ENV_TIMEOUT} must be a positive number of seconds, e.g. 30, got -1.0"


def test_rewording_a_library_message_cannot_change_the_flag_the_cli_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The words around an option are the library's to change; the flag stays the CLI's."""
    from window_retriever.stores import _open

    real = _open._timeout

    def reworded(*args: object, **kwargs: object) -> object:
        try:
            return real(*args, **kwargs)  # type: ignore[arg-type]
        except ConfigurationError as error:  # "timeout must be ..." -> "the timeout ... wants"
            said = error.message.map_text(lambda text: text.replace(" must be", " wants"))
            raise ConfigurationError("the ", said) from None

    monkeypatch.setattr(_open, "_timeout", reworded)
    with pytest.raises(ConfigurationError, match=r"^the timeout wants a positive number"):
        open_store(url="http://127.0.0.1:8000", timeout=0)
    argv = ["query", "q", "--chroma-url", "http://127.0.0.1:8000", "--chroma-timeout", "0"]
    line = one_line(argv, capsys)
    assert line == "the --chroma-timeout wants a positive number of seconds, e.g. 30, got 0.0"


def test_a_locked_store_says_wait_true_in_the_library_and_wait_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    note = tmp_path / "note.txt"
    note.write_text("A short note about bees.", encoding="utf-8")
    with writer_lock(db):  # a second open file of the lock conflicts, even in one process
        with pytest.raises(StoreLockedError) as raised, writer_lock(db):
            pass
        line = one_line(["ingest", str(note), "--db", str(db)], capsys)
    assert str(raised.value) == (
        f"another process is writing to the store in {db}; wait for it to finish (or pass "
        "wait=True), or use a Chroma server (open_store(url=...)) for several writers"
    )
    assert raised.value.options == ("wait", "url")
    assert line == (
        f"another process is writing to the store in {db}; wait for it to finish (or pass "
        "--wait), or use a Chroma server (--chroma-url) for several writers"
    )


def test_a_file_too_large_says_max_bytes_in_the_library_and_max_size_mb_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.txt"
    big.write_text("bees " * 1000, encoding="utf-8")
    loaded = load_file(big, LoadOptions(max_bytes=1024))
    assert loaded.error == "larger than 0.000976562 MiB; raise max_bytes to ingest it"
    assert isinstance(loaded.error, Message) and loaded.error.options == ("max_bytes",)
    argv = ["ingest", str(big), "--db", str(tmp_path / "db"), "--max-size-mb", "0.001"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"failed    {big}: larger than 0.000999451 MiB; raise --max-size-mb to ingest it" in out


def test_another_owner_says_file_id_keys_in_the_library_and_metadata_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The owner error crosses the ingest pipeline as a string and keeps its option."""
    note = tmp_path / "note.txt"
    note.write_text("Bees make honey in the hive. " * 5, encoding="utf-8")
    db = tmp_path / "db"
    loaded = load_file(note)
    assert loaded.document is not None
    loaded.document.metadata["tenant"] = "a"  # stored by tenant a under the file id of source
    splitter = RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=40)
    chunks = WindowSplitter(splitter).split_documents([loaded.document])
    sync_file(open_store(db, create=True), chunks)

    assert main(["ingest", str(note), "--db", str(db)]) == 1  # no tenant: another owner
    out = capsys.readouterr().out
    assert (
        "would replace the other owner's chunks, so nothing was written. Keep one file per "
        "owner with --metadata tenant=... or delete the stored file first"
    ) in out
    assert "file_id_keys" not in out
    for chunk in chunks:
        chunk.metadata["tenant"] = "b"
    with pytest.raises(OwnershipError) as raised:
        sync_file(open_store(db), chunks)
    assert "WindowSplitter(file_id_keys=('tenant', 'source'))" in str(raised.value)
    assert raised.value.options == ("file_id_keys",)
