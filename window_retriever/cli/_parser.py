"""The ``window-retriever`` command line: its arguments, and one line for every error.

The commands themselves are in ``_commands`` (with ``FLAGS`` and ``said``, which word a
library message in flags), what they print in ``_terminal``. Every error becomes one line on
stderr and a non-zero exit status (``--debug`` shows the traceback). Exit
status: 0 success, 1 some sources failed to ingest, 2 bad usage or an error.

Parsing imports nothing heavy (no Chroma, LangChain, numpy or model): every number a flag
takes is checked by its type here, so a bad one is refused at once, before a command imports
what it needs (docs/benchmarks.md#start-up-of-the-command-line-issue-41; a test keeps these
types in step with the retriever's own checks).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from window_retriever._errors import OptionName, WindowRetrieverError
from window_retriever._version import __version__
from window_retriever.cli._commands import (
    DEFAULT_TOTAL_BUDGET,
    DEMO_QUESTION,
    EXIT_ERROR,
    EXIT_OK,
    FLAGS,
    LIBRARY_WORDS,
    PROG,
    run_demo,
    run_eval,
    run_ingest,
    run_query,
    run_reindex,
    said,
)
from window_retriever.cli._interrupt import INTERRUPTED
from window_retriever.core._windows import DEFAULT_WINDOW_BUDGET
from window_retriever.ingestion._headers import DEFAULT_HEADERS
from window_retriever.stores._open import (
    DEFAULT_COLLECTION,
    DEFAULT_DB,
    ENV_DATABASE,
    ENV_DB,
    ENV_TENANT,
    ENV_TIMEOUT,
    ENV_TOKEN,
    ENV_URL,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    return run(parse(argv))


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed arguments; a usage error (a bad flag) is one line and ``SystemExit(2)``."""
    return build_parser().parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """Run the command of parsed ``args``; return the exit status."""
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except BrokenPipeError:  # `query ... | head`: the reader left; that is not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as error:  # one clear line, never a traceback (unless --debug)
        if args.debug:
            traceback.print_exc()
        if not isinstance(error, WindowRetrieverError):  # a store call not translated yet
            from window_retriever.stores._address import _public
            from window_retriever.stores._chroma_errors import store_failure

            url = getattr(args, "chroma_url", None) or os.environ.get(ENV_URL)
            error = store_failure(error, _public(url) if url else None) or error
        print(f"{PROG}: error: {_one_line(error, getattr(args, 'flags', FLAGS))}", file=sys.stderr)
        return EXIT_ERROR


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line instead of the whole usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (also read by the tests and the README check)."""
    parser = _Parser(
        prog=PROG,
        description="Grow vector-search hits into whole, readable windows of their documents.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    # writes=False: the command writes nothing, so its process may end without Python's
    # teardown once its output is out (cli._main)
    parser.set_defaults(debug=False, writes=True, run=lambda args: _usage(parser))
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    ingest = commands.add_parser(
        "ingest",
        help="load web pages or files, split them and store the chunks",
        description=(
            "Load web pages (URLs) or local HTML / text / Markdown files and directories, split "
            "them into positioned chunks and upsert them. Re-running is idempotent: unchanged "
            "sources cost no embedding, changed ones replace their old chunks."
        ),
    )
    ingest.add_argument(
        "sources", nargs="+", metavar="URL_OR_PATH", help="URLs, files or directories"
    )
    _store_arguments(ingest)
    ingest.add_argument(
        "--chunk-size",
        type=_whole(1, "characters"),
        default=400,
        metavar="N",
        help="characters per chunk (default: 400)",
    )
    ingest.add_argument(
        "--chunk-overlap",
        type=_whole(0, "characters"),
        default=40,
        metavar="N",
        help="characters shared by neighbouring chunks (default: 40)",
    )
    ingest.add_argument(
        "--headers",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_HEADERS,
        help=(
            "embed each chunk with its page title and section headings (the stored text stays "
            "the chunk); switching re-embeds those pages "
            f"(default: {'on' if DEFAULT_HEADERS else 'off'})"
        ),
    )
    ingest.add_argument(
        "--selector",
        nargs="+",
        action="extend",
        default=[],
        metavar="CSS_CLASS",
        help="keep only elements of these classes in HTML (e.g. post-content post-title)",
    )
    ingest.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stamp on every chunk, e.g. tenant=acme (the keys also namespace the file ids)",
    )
    ingest.add_argument(
        "--timeout",
        type=_positive("seconds"),
        default=20.0,
        metavar="SECONDS",
        help="the most seconds one web page may take in all (default: 20)",
    )
    ingest.add_argument(
        "--max-size-mb",
        type=_positive("megabytes"),
        default=10.0,
        metavar="MB",
        help="refuse a page or file larger than this, decompressed (default: 10)",
    )
    ingest.add_argument(
        "--rate",
        type=_positive("requests a second"),
        default=2.0,
        metavar="PER_SECOND",
        help="most requests a second to one host (default: 2)",
    )
    ingest.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep the stored files that are gone from (or empty in) a directory given again "
        "(default: remove them, so the store matches the directory)",
    )
    ingest.add_argument(
        "--origin",
        metavar="NAME",
        help="name this machine's copy of the directories, for pruning (default: derived "
        "from the machine and the directory; name it where machines are rebuilt)",
    )
    ingest.add_argument(
        "--wait",
        action="store_true",
        help="wait for another writer of the same --db instead of stopping",
    )
    ingest.set_defaults(run=run_ingest)

    query = commands.add_parser(
        "query",
        help="retrieve windows for a question",
        description=(
            "Retrieve windows for a question and print them with their provenance. By default "
            f"the best configuration measured: one total budget of {DEFAULT_TOTAL_BUDGET} "
            "characters, hybrid hits, adaptive windows; --total-budget none gives the default "
            "up to 0.2 (-k windows of --window-budget each, grown blindly)."
        ),
    )
    query.add_argument("question", help="the question")
    _store_arguments(query)
    _window_arguments(query)
    query.add_argument(
        "--filter", metavar="JSON", help='Chroma metadata filter, e.g. \'{"tenant": "acme"}\''
    )
    query.add_argument("--json", action="store_true", help="print machine-readable JSON")
    query.set_defaults(run=run_query, writes=False)

    reindex = commands.add_parser(
        "reindex",
        help="bring the keyword index in line with the collection after outside writes",
        description=(
            "Compare every chunk of the collection with its keyword index and have every "
            "process read again those that differ: for writes made around window_retriever "
            "(a bare collection.update, a restore from a backup). Without it, each process "
            "finds them within its reconcile interval (10 minutes by default)."
        ),
    )
    _store_arguments(reindex)
    reindex.add_argument(
        "--wait",
        action="store_true",
        help="wait for another writer of the same --db instead of stopping",
    )
    reindex.set_defaults(run=run_reindex)

    evaluate = commands.add_parser(
        "eval",
        help="measure whether windows beat plain chunks on your questions, at equal budgets",
        description=(
            "Run configurations (plain top chunks, windows, ...) on a JSONL file of questions "
            'with "gold_spans" and/or "answer", at the same total context budgets, and report '
            "evidence coverage, precision, answer hits, context length, latency and store calls, "
            "each against plain with a bootstrap confidence interval."
        ),
    )
    evaluate.add_argument("questions", metavar="QUESTIONS.jsonl", help="one JSON object a line")
    _store_arguments(evaluate)
    evaluate.add_argument(
        "--total-budgets",
        "--budgets",
        dest="budgets",
        default="1000,2000,4000",
        metavar="N,N,...",
        help="total context budgets in characters (default: 1000,2000,4000)",
    )
    evaluate.add_argument(
        "--configs",
        default="plain,window",
        metavar="C,C,...",
        help=(
            "configurations: plain, window[:total_budget=N|none;expansion=adaptive|static;"
            "window_budget=N;mode=M;k=N;coherence=X] (default: plain,window; a window "
            "configuration's total_budget is each of --total-budgets unless it says)"
        ),
    )
    evaluate.add_argument(
        "--json", metavar="OUT", dest="json_out", help="write the results as JSON"
    )
    evaluate.add_argument("--plot", metavar="OUT.png", help="plot coverage against budget (PNG)")
    # a window configuration names the retriever's options as the library does (total_budget=N)
    evaluate.set_defaults(run=run_eval, flags=LIBRARY_WORDS)

    demo = commands.add_parser(
        "demo",
        help="ingest the bundled example pages offline and show windows for a question",
        description=(
            "Ingest the Python-tutorial pages bundled with the package into a local store (the "
            f"collection {DEFAULT_COLLECTION!r}, which query reads by default), then print the "
            "plain top chunks and the windows for a question, side by side, at one total budget."
        ),
    )
    demo.add_argument(
        "question", nargs="?", default=DEMO_QUESTION, help="the question (default: a sample)"
    )
    demo.add_argument(
        "--db", default="demo-db", metavar="DIR", help="Chroma directory (default: demo-db)"
    )
    demo.add_argument(
        "--pages",
        metavar="DIR",
        help="pages to ingest (default: the pages bundled with the package)",
    )
    _window_arguments(demo, demo=True)
    demo.set_defaults(run=run_demo)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _store_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        metavar="DIR",
        help=f"embedded Chroma directory (default: ${ENV_DB}, else {DEFAULT_DB})",
    )
    where.add_argument(
        "--chroma-url",
        metavar="URL",
        help=f"a Chroma server, e.g. http://127.0.0.1:8000 (default: ${ENV_URL}); "
        f"a token is read from ${ENV_TOKEN}, basic auth from http://USER:PASSWORD@HOST:PORT",
    )
    parser.add_argument(
        "--chroma-tenant",
        metavar="NAME",
        help=f"the server's Chroma tenant (default: ${ENV_TENANT}, else Chroma's default)",
    )
    parser.add_argument(
        "--chroma-database",
        metavar="NAME",
        help=f"the server's Chroma database (default: ${ENV_DATABASE}, else Chroma's default)",
    )
    parser.add_argument(
        "--chroma-timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long to wait for each answer of the server (default: ${ENV_TIMEOUT}, else 30)",
    )
    parser.add_argument(
        "--collection",
        default=DEFAULT_COLLECTION,
        metavar="NAME",
        help=f"collection (default: {DEFAULT_COLLECTION})",
    )


def _whole(least: int, unit: str) -> Callable[[str], int]:
    """The type of a flag that takes a whole number of ``unit``, ``least`` or more."""

    def whole(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = least - 1
        if number < least:
            msg = f"takes a whole number of {unit}, at least {least}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return number

    return whole


def _positive(unit: str) -> Callable[[str], float]:
    """The type of a flag that takes a positive number of ``unit`` (not infinite)."""

    def positive(text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            msg = f"takes a positive number of {unit}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return number

    return positive


def _total_budget(text: str) -> int | None:
    """``--total-budget``: a number of characters, at least 1, or ``none`` (no total budget)."""
    if text.strip().lower() == "none":
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        msg = f"takes a whole number of characters, at least 1, or none, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return number


def _keyword_weight(text: str) -> float:
    """``--keyword-weight``: the retriever's ``keyword_weight``, a number from 0 to 100."""
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not 0.0 <= number <= 100.0:  # NaN too
        msg = f"takes a number from 0 to 100, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return number


def _window_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    parser.add_argument(
        "-k",
        type=_whole(1, "windows"),
        metavar="N",
        help="the most windows to return (default: one per 200 characters of --total-budget, "
        "at least 4; with --total-budget none, exactly this many: 4)",
    )
    parser.add_argument(
        "--candidates",
        choices=["vector", "hybrid", "keyword"],
        help="where hits come from: vector search, vector + BM25 keyword search fused by rank, "
        "or keyword alone (default: hybrid; vector with --total-budget none)",
    )
    parser.add_argument(
        "--keyword-weight",
        type=_keyword_weight,
        metavar="X",
        help="hybrid: the keyword search's weight in the fusion, the vector search's being 1 "
        "(default: 1)",
    )
    parser.add_argument(
        "--window-budget",
        type=_whole(1, "characters"),
        default=DEFAULT_WINDOW_BUDGET,
        metavar="N",
        help=f"the most characters of one window (default: {DEFAULT_WINDOW_BUDGET})",
    )
    parser.add_argument(
        "--total-budget",
        type=_total_budget,
        default=DEFAULT_TOTAL_BUDGET,
        metavar="N" if demo else "N|none",
        help=f"the most characters of all windows together (default: {DEFAULT_TOTAL_BUDGET}; "
        + (
            "the plain chunks are cut at the same budget)"
            if demo
            else "none: no total budget, -k windows of --window-budget each, grown blindly, "
            "the default up to 0.2)"
        ),
    )
    parser.add_argument(
        "--expansion",
        choices=["adaptive", "static"],
        help="grow windows toward relevant neighbours (adaptive, the default) or blindly to "
        "--window-budget (static; the only way with --total-budget none)",
    )
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--mode",
        choices=["both", "prev", "next"],
        default="both",
        help="which way windows grow (default: both)",
    )


def _one_line(error: BaseException, flags: Mapping[OptionName, str] = FLAGS) -> str:
    words = said(error.message, flags) if isinstance(error, WindowRetrieverError) else str(error)
    text = words.strip().splitlines()
    message = text[0] if text else type(error).__name__
    if not isinstance(error, WindowRetrieverError):
        message = f"{type(error).__name__}: {message}"
    return message
