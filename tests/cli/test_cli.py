"""The command line: help, version, and every error path (one line, non-zero, no traceback)."""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from window_retriever import __version__
from window_retriever.cli._parser import build_parser, main

CLI_REFERENCE = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def fails(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 2) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_every_command_has_help_and_is_in_the_cli_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(commands()) == {"ingest", "query", "reindex", "eval", "demo"}
    for name, parser in commands().items():
        assert parser.description
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: window-retriever {name}")
        assert f"window-retriever {name}" in CLI_REFERENCE, name
        for action in parser._actions:
            assert action.help, (name, action.dest)
            if action.help == argparse.SUPPRESS:  # an old name, refused with the new one
                continue
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    documented = re.search(rf"`{re.escape(option)}(?![\w-])", CLI_REFERENCE)
                    assert documented, (name, option)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"window-retriever {__version__}"


def test_python_dash_m_runs_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "window_retriever", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == f"window-retriever {__version__}"


def test_no_command_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: window-retriever" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ingest", "x.txt", "--metadata", "tenant"], "--metadata takes KEY=VALUE, got 'tenant'"),
        (
            ["ingest", "x.txt", "--metadata", "source=x"],
            "--metadata cannot set source: the ingester stamps it",
        ),
        (
            ["ingest", "x.txt", "--chunk-size", "100", "--chunk-overlap", "100"],
            "--chunk-overlap must be from 0 to less than --chunk-size (100), got 100",
        ),
        (
            ["query", "q", "--filter", "{tenant: a}"],
            "--filter is not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        ),
        (
            ["query", "q", "--filter", "[1]"],
            '--filter must be a JSON object, e.g. {"tenant": "acme"}',
        ),
        (
            ["query", "q", "--chroma-url", "localhost:8000"],
            "--chroma-url must look like http://HOST:PORT, got 'localhost:8000'",
        ),
        (
            ["query", ""],
            'the question is empty (an unset shell variable?); ask one, e.g. "How do I close a '
            'file?"',
        ),
        (
            ["query", "  \t"],
            'the question is empty (an unset shell variable?); ask one, e.g. "How do I close a '
            'file?"',
        ),
        (
            ["demo", " "],
            'the question is empty (an unset shell variable?); ask one, e.g. "How do I close a '
            'file?"',
        ),
        (
            ["query", "q", "--budget", "300"],
            "--budget is now --window-budget (the most characters of one window); "
            "--total-budget N caps all windows together",
        ),
        (
            ["eval", "q.jsonl", "--total-budgets", ","],
            "--total-budgets takes positive whole numbers, e.g. 1000,2000,4000, got ','",
        ),
        (
            ["eval", "q.jsonl", "--configs", "plain:k=-1"],
            "option k=-1 in configuration 'plain:k=-1' must be at least 1",
        ),
        (
            ["eval", "q.jsonl", "--configs", "window:window_budget=abc"],
            "option window_budget='abc' in configuration 'window:window_budget=abc' must be a "
            "whole number",
        ),
        (
            ["eval", "q.jsonl", "--json", "/no/such/folder/out.json"],
            "--json /no/such/folder/out.json: cannot write there",
        ),
        (
            ["query", "q", "--expansion", "adaptive", "--total-budget", "none"],
            "--expansion adaptive shares one budget between windows: give --total-budget N "
            "rather than none",
        ),
        (
            ["demo", "--total-budget", "none"],
            "the demo compares plain chunks and windows at one --total-budget: give a number, "
            "e.g. --total-budget 2000",
        ),
    ],
)
def test_bad_arguments_fail_with_one_line(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert fails(argv, capsys) == f"window-retriever: error: {message}"


def _note(directory: Path) -> Path:
    path = directory / "note.txt"
    path.write_text("A short note about bees.", encoding="utf-8")
    return path


def test_query_without_a_store_says_to_ingest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails(["query", "q", "--db", str(tmp_path / "none")], capsys)
    assert (
        line
        == f"window-retriever: error: no store at {tmp_path / 'none'}/; run 'window-retriever ingest ... --db {tmp_path / 'none'}' first"
    )


def test_query_of_a_missing_collection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "db"
    assert main(["ingest", str(_note(tmp_path)), "--db", str(db)]) == 0
    capsys.readouterr()
    line = fails(["query", "q", "--db", str(db), "--collection", "other"], capsys)
    assert (
        line
        == f"window-retriever: error: no collection 'other' in {db}/ (it has: documents); run 'window-retriever ingest' first or pass another --collection"
    )


def test_an_unreachable_server_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a loopback port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = fails(["query", "q", "--chroma-url", f"http://127.0.0.1:{port}"], capsys)
    assert line.startswith(
        f"window-retriever: error: cannot reach the Chroma server at http://127.0.0.1:{port} ("
    )


def test_db_and_chroma_url_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["query", "q", "--db", "x", "--chroma-url", "http://127.0.0.1:1"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_bad_local_sources_are_reported_and_the_rest_ingested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "paper.pdf").write_bytes(b"%PDF")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02")
    good = _note(tmp_path)
    db = tmp_path / "db"
    status = main(
        [
            "ingest",
            str(good),
            str(tmp_path / "gone.txt"),
            str(tmp_path / "paper.pdf"),
            str(tmp_path / "binary.txt"),
            "--db",
            str(db),
        ]
    )
    assert status == 1
    out = capsys.readouterr().out.splitlines()
    assert f"failed    {tmp_path / 'gone.txt'}: no such file or directory" in out
    assert any(
        re.fullmatch(
            rf"failed    {re.escape(str(tmp_path / 'paper.pdf'))}: not an HTML or text file .*",
            line,
        )
        for line in out
    )
    assert f"failed    {tmp_path / 'binary.txt'}: binary content, not text" in out
    assert f"added     {good}: 1 chunk" in out
    assert (
        out[-1]
        == "4 sources: 1 ingested (1 added, 0 updated), 0 skipped (unchanged), 0 skipped (empty), 3 failed, 0 gone (removed); 1 chunk written, 0 removed"
    )


def test_a_directory_is_walked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text("# A\n\nAlpha.", encoding="utf-8")
    (tmp_path / "docs" / "sub" / "b.html").write_text(
        "<html><body><p>Beta.</p></body></html>", encoding="utf-8"
    )
    (tmp_path / "docs" / "image.png").write_bytes(b"\x89PNG")
    assert main(["ingest", str(tmp_path / "docs"), "--db", str(tmp_path / "db")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 sources: 2 ingested")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["query"],
            "the following arguments are required: question (see 'window-retriever query --help')",
        ),
        (
            ["ingest", "x", "--chunk-size", "big"],
            "argument --chunk-size: takes a whole number of characters, at least 1, got 'big' "
            "(see 'window-retriever ingest --help')",
        ),
        (
            ["ingest", "x.txt", "--chunk-size", "0"],
            "argument --chunk-size: takes a whole number of characters, at least 1, got '0'",
        ),
        (
            ["ingest", "x.txt", "--chunk-overlap", "-1"],
            "argument --chunk-overlap: takes a whole number of characters, at least 0, got '-1'",
        ),
        (
            ["ingest", "x.txt", "--timeout", "0"],
            "argument --timeout: takes a positive number of seconds, got '0'",
        ),
        (
            ["ingest", "x.txt", "--max-size-mb", "inf"],
            "argument --max-size-mb: takes a positive number of megabytes, got 'inf'",
        ),
        (
            ["ingest", "x.txt", "--rate", "nan"],
            "argument --rate: takes a positive number of requests a second, got 'nan'",
        ),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
        (
            ["query", "q", "--total-budget", "lots"],
            "argument --total-budget: takes a whole number of characters, at least 1, or none, "
            "got 'lots' (see 'window-retriever query --help')",
        ),
        (
            ["query", "q", "--total-budget", "-5"],
            "argument --total-budget: takes a whole number of characters, at least 1, or none, "
            "got '-5'",
        ),
        (["query", "q", "-k", "0"], "argument -k: takes a whole number of windows, at least 1"),
        (
            ["query", "q", "--total-budget", "none", "--window-budget", "0"],
            "argument --window-budget: takes a whole number of characters, at least 1, got '0'",
        ),
        (
            ["query", "q", "--keyword-weight", "500"],
            "argument --keyword-weight: takes a number from 0 to 100, got '500'",
        ),
        (
            ["demo", "--total-budget", "0"],
            "argument --total-budget: takes a whole number of characters, at least 1, or none, "
            "got '0' (see 'window-retriever demo --help')",
        ),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"window-retriever: error: {message}")


def test_a_db_that_is_a_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "db"
    file.write_text("not a store", encoding="utf-8")
    assert fails(["query", "q", "--db", str(file)], capsys) == (
        f"window-retriever: error: --db {file} is a file, not a store directory"
    )
    assert file.read_text(encoding="utf-8") == "not a store"


# ---- demo, query and eval output -------------------------------------------------------------


def _pages(directory: Path) -> Path:
    pages = directory / "pages"
    pages.mkdir()
    for name, words in (("bees", "Bees make honey from nectar."), ("ants", "Ants farm fungi.")):
        body = " ".join(f"<p>{words} Paragraph {i} about {name}.</p>" for i in range(40))
        (pages / f"{name}.html").write_text(
            f'<html><head><title>{name}</title></head><body><div class="body">{body}</div></body></html>',
            encoding="utf-8",
        )
    return pages


def test_demo_writes_the_collection_query_reads_and_compares_at_one_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    pages = _pages(tmp_path)
    assert (
        main(
            [
                "demo",
                "How do bees make honey?",
                "--db",
                str(tmp_path / "demo-db"),
                "--pages",
                str(pages),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(
        r"^\d+ chunks of the pages in .* are in .*demo-db/, collection 'documents' ", out, re.M
    )
    plain = re.search(r"^--- plain: the top (\d+) chunks?, (\d+) of 2000 characters$", out, re.M)
    windows = re.search(r"^--- windows: (\d+) windows?, (\d+) of 2000 characters$", out, re.M)
    assert plain is not None and windows is not None, out
    assert 0 < int(plain[2]) <= 2000 and 0 < int(windows[2]) <= 2000
    assert int(plain[2]) > 1000  # the plain chunks fill the same budget, not k chunks
    assert "(cut at the budget: " in out
    # the store the demo made is the one `query --db` opens by default
    assert main(["query", "How do bees make honey?", "--db", str(tmp_path / "demo-db")]) == 0
    captured = capsys.readouterr()
    # the source as stored (an absolute path), so that a --filter on what is shown matches
    assert captured.out.startswith(f"[1] {pages / 'bees.html'}  "), captured
    assert captured.err == ""


def test_query_without_a_match_says_so_on_stderr_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "db"
    assert main(["ingest", str(_note(tmp_path)), "--db", str(db)]) == 0
    capsys.readouterr()
    argv = ["query", "bees", "--db", str(db), "--filter", '{"tenant": "nobody"}']
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "no windows: nothing in the collection 'documents' matches the --filter\n"
    )
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "[]\n" and captured.err.startswith("no windows: ")


def test_the_source_shown_is_the_one_stored_so_a_filter_on_it_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 3: ingest and query show the absolute path a local file is stored under."""
    monkeypatch.chdir(tmp_path)
    stored = str(_note(tmp_path))
    assert main(["ingest", "note.txt", "--db", "db"]) == 0  # named by a relative path
    assert f"added     {stored}: 1 chunk" in capsys.readouterr().out
    assert main(["query", "bees", "--db", "db"]) == 0
    shown = capsys.readouterr().out.splitlines()[0].split("  ")[0].removeprefix("[1] ")
    assert shown == stored
    found = ["query", "bees", "--db", "db", "--filter", json.dumps({"source": shown})]
    assert main(found) == 0
    assert capsys.readouterr().out.startswith(f"[1] {stored}  ")
    assert main(["query", "bees", "--db", "db", "--filter", '{"source": "note.txt"}']) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "no windows: nothing in the collection 'documents' matches the --filter (a local "
        f"file's source is its absolute path, as query shows it: {json.dumps({'source': stored})})\n"
    )
    assert main(["ingest", stored, "--db", "db"]) == 0  # named the other way: the same file
    assert f"unchanged {stored}" in capsys.readouterr().out


def test_eval_plot_without_matplotlib_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    line = fails(["eval", "missing.jsonl", "--plot", str(tmp_path / "out.png")], capsys)
    assert line == (
        "window-retriever: error: --plot needs matplotlib: pip install 'window-retriever[eval]'"
    )


def test_eval_warns_of_a_source_that_is_not_stored_and_resolves_relative_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    note = _note(tmp_path)
    assert (
        main(["ingest", "note.txt", "--db", str(tmp_path / "db")]) == 0
    )  # stored as its absolute path
    questions = tmp_path / "questions.jsonl"
    lines = [
        {"question": "bees?", "source": "note.txt", "gold_spans": [[0, 24]]},
        {"question": "bees?", "source": "notes.txt", "gold_spans": [[0, 24]]},
        {"question": "bees?", "source": str(note), "gold_spans": [[0, 24]]},
    ]
    questions.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    capsys.readouterr()
    argv = [
        "eval",
        "questions.jsonl",
        "--db",
        str(tmp_path / "db"),
        "--total-budgets",
        "100",
        "--configs",
        "plain",
    ]
    assert main([*argv, "--json", "out.json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "warning: line 2: source 'notes.txt' is not a stored source, so the question scores "
        f"as a miss (the closest is {str(note)!r}; local files are stored under their "
        "absolute paths)"
    ]
    assert captured.out.startswith("3 questions, 0 lines skipped\n")
    (row,) = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert row["coverage"] == pytest.approx(2 / 3)  # the relative path found its chunks


def test_counts_of_one_are_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", str(_note(tmp_path)), "--db", str(tmp_path / "db")]) == 0
    (tmp_path / "q.jsonl").write_text('{"question": "bees?", "answer": "bees"}', encoding="utf-8")
    capsys.readouterr()
    argv = [
        "eval",
        "q.jsonl",
        "--db",
        str(tmp_path / "db"),
        "--total-budgets",
        "100",
        "--configs",
        "plain",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("1 question, 0 lines skipped\n")


def test_a_relative_db_means_the_directory_it_names_from_each_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chroma caches its clients by the path as given: ``db`` from two working directories
    in one process must still be two stores."""
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.chdir(folder)
        (folder / "n.txt").write_text("Bees make honey in the hive. " * 20, encoding="utf-8")
        assert main(["ingest", "n.txt", "--db", "db"]) == 0
        assert (folder / "db" / "chroma.sqlite3").is_file(), name
    capsys.readouterr()


def test_reindex_finds_an_outside_rewrite_and_refuses_a_missing_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import chromadb

    from window_retriever.keywords._index import KeywordIndex

    db = tmp_path / "db"
    assert main(["ingest", str(_note(tmp_path)), "--db", str(db)]) == 0
    assert main(["reindex", "--db", str(db)]) == 0
    assert capsys.readouterr().out.endswith(
        "reindexed 'documents': the keyword index holds all 1 chunks as stored\n"
    )
    collection = chromadb.PersistentClient(path=str(db)).get_collection("documents")
    (chunk_id,) = collection.get()["ids"]
    collection.update(ids=[chunk_id], documents=["A note about wasps."], embeddings=[[0.0] * 384])
    KeywordIndex._shared.clear()  # a new process

    assert main(["reindex", "--db", str(db)]) == 0

    assert "1 of 1 chunks differed from the keyword index" in capsys.readouterr().out
    line = fails(["reindex", "--db", str(tmp_path / "none")], capsys)
    assert line.startswith(f"window-retriever: error: no store at {tmp_path / 'none'}/")
    assert not (tmp_path / "none").exists()


# ---- the first hour of a new user (issue 41) -------------------------------------------------


def test_query_runs_the_best_configuration_by_default_and_none_gives_the_old_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default is ``--total-budget 2000`` (hybrid hits, adaptive windows); ``none`` is 0.1's
    ``-k`` windows of ``--window-budget`` each, and ``--help`` says so."""
    assert build_parser().parse_args(["query", "q"]).total_budget == 2000
    assert build_parser().parse_args(["query", "q", "--total-budget", "None"]).total_budget is None
    query = commands()["query"]
    assert "2000" in query.format_help() and "--total-budget none" in query.format_help()
    db = tmp_path / "db"
    assert main(["ingest", str(_pages(tmp_path)), "--db", str(db)]) == 0
    capsys.readouterr()
    question = ["query", "How do bees make honey?", "--db", str(db), "--json"]

    assert main(question) == 0
    default = json.loads(capsys.readouterr().out)
    assert default and sum(len(doc["text"]) for doc in default) <= 2000
    assert all("hit_ranks" in doc["metadata"] for doc in default)  # hybrid candidates

    assert main([*question, "--total-budget", "none"]) == 0
    blind = json.loads(capsys.readouterr().out)
    assert blind and not any("hit_ranks" in doc["metadata"] for doc in blind)  # vector hits
    assert sum(len(doc["text"]) for doc in blind) > 2000  # -k 4 windows of up to 1200 each


def test_eval_says_a_window_configurations_options_in_the_library_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In ``--configs 'window:keyword_weight=500'`` the user typed the library's name."""
    db = tmp_path / "db"
    assert main(["ingest", str(_note(tmp_path)), "--db", str(db)]) == 0
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "bees?", "answer": "bees"}\n', encoding="utf-8")
    capsys.readouterr()
    argv = ["eval", str(questions), "--db", str(db), "--configs", "window:keyword_weight=500"]
    line = fails(argv, capsys)
    assert line == (
        "window-retriever: error: keyword_weight must be a number from 0 to 100, got 500.0"
    )


def test_ingest_progress_never_goes_backwards_as_sources_are_read() -> None:
    """Pages are read while others are written, so the chunks planned grow as the bar runs."""
    import io

    from window_retriever.cli._terminal import Progress, Share

    share = Share(4)
    said = []
    for chunks in (10, 30, 5, 20):  # each page planned, then written in two halves
        share.plan(chunks)
        said.append(share.value())
        share.write(chunks // 2)
        said.append(share.value())
        share.write(chunks - chunks // 2)
        share.source_done()
        said.append(share.value())
    assert said == sorted(said) and said[-1] == 1.0
    halfway = Share(4)  # the sources not read yet are estimated as those read so far
    halfway.plan(10)
    halfway.write(5)
    assert halfway.value() == pytest.approx(5 / 40)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown = []
    with Progress(Terminal()) as progress:
        progress.start(3)
        for step in ("p60", "w50", "p100", "w10", "d", "p0", "d", "w100", "d"):
            kind, number = step[0], int(step[1:] or 0)
            {"p": progress.planned, "w": progress.written}.get(kind, lambda _: None)(number)
            if kind == "d":
                progress.source_done()
            shown.append(progress.bar.n)
    assert shown == sorted(shown) and shown[-1] == 1000


def test_ingest_leaves_the_keyword_index_saved_for_the_queries_that_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each query is a new process: over ``INLINE_ROWS`` chunks it would only start a build its
    exit ends, so the ingest saves the index, and a new process loads it (builds nothing)."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores import keyword_index
    from window_retriever.stores._open import DEFAULT_COLLECTION

    assert main(["ingest", str(_note(tmp_path)), "--db", str(tmp_path / "db")]) == 0
    capsys.readouterr()
    KeywordIndex._shared.clear()  # as a new process
    store = Chroma(
        collection_name=DEFAULT_COLLECTION,
        client=chromadb.PersistentClient(path=str(tmp_path / "db")),
        embedding_function=DeterministicFakeEmbedding(size=8),
    )
    index = keyword_index(store)
    assert index.search("bees", k=3)
    assert (index.loads, index.builds) == (1, 0)
