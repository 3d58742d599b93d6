"""The ``window-retriever`` command: ingest sources, query them, evaluate, run the demo.

Every error becomes one line on stderr and a non-zero exit status (``--debug`` shows the
traceback). Exit status: 0 success, 1 some sources failed to ingest, 2 bad usage or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO

from window_retriever._errors import (
    Command,
    Mention,
    Message,
    OptionName,
    WindowRetrieverError,
)
from window_retriever._headers import DEFAULT_HEADERS
from window_retriever._open import (
    DEFAULT_COLLECTION,
    DEFAULT_DB,
    ENV_DATABASE,
    ENV_DB,
    ENV_TENANT,
    ENV_TIMEOUT,
    ENV_TOKEN,
    ENV_TOKEN_HEADER,
    ENV_URL,
)
from window_retriever._version import __version__
from window_retriever._windows import DEFAULT_WINDOW_BUDGET

if TYPE_CHECKING:  # the command starts without LangChain: an early Ctrl-C is handled too
    from langchain_core.documents import Document

    from window_retriever._pipeline import SourceOutcome

PROG = "window-retriever"
DEMO_QUESTION = (
    "How do I make sure a file is closed after reading it, even if an exception is raised?"
)
DEMO_TOTAL_BUDGET = 2000
DEMO_ORIGIN = "window-retriever-demo"
"""The demo's pages carry this origin: a demo run removes what another install's demo wrote."""
EXIT_OK, EXIT_SOURCES_FAILED, EXIT_ERROR = 0, 1, 2


class CommandError(WindowRetrieverError):
    """A command cannot run as asked; the message says why and what to do."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `query ... | head`: the reader left; that is not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as error:  # one clear line, never a traceback (unless --debug)
        if args.debug:
            traceback.print_exc()
        if not isinstance(error, WindowRetrieverError):  # a store call not translated yet
            from window_retriever._open import _public
            from window_retriever._stores import store_failure

            url = getattr(args, "chroma_url", None) or os.environ.get(ENV_URL)
            error = store_failure(error, _public(url) if url else None) or error
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
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
    parser.set_defaults(debug=False, run=lambda args: _usage(parser))
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
        type=int,
        default=400,
        metavar="N",
        help="characters per chunk (default: 400)",
    )
    ingest.add_argument(
        "--chunk-overlap",
        type=int,
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
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="the most seconds one web page may take in all (default: 20)",
    )
    ingest.add_argument(
        "--max-size-mb",
        type=float,
        default=10.0,
        metavar="MB",
        help="refuse a page or file larger than this, decompressed (default: 10)",
    )
    ingest.add_argument(
        "--rate",
        type=float,
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
    ingest.set_defaults(run=_ingest)

    query = commands.add_parser(
        "query",
        help="retrieve windows for a question",
        description="Retrieve windows for a question and print them with their provenance.",
    )
    query.add_argument("question", help="the question")
    _store_arguments(query)
    _window_arguments(query)
    query.add_argument(
        "--filter", metavar="JSON", help='Chroma metadata filter, e.g. \'{"tenant": "acme"}\''
    )
    query.add_argument("--json", action="store_true", help="print machine-readable JSON")
    query.set_defaults(run=_query)

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
    evaluate.set_defaults(run=_eval)

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
    _window_arguments(demo, total_budget=DEMO_TOTAL_BUDGET)
    demo.set_defaults(run=_demo)
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


def _window_arguments(parser: argparse.ArgumentParser, *, total_budget: int | None = None) -> None:
    parser.add_argument(
        "-k",
        type=int,
        metavar="N",
        help="windows to return (default: 4; with --total-budget, the most windows: one per "
        "200 characters of it, at least 4)",
    )
    parser.add_argument(
        "--candidates",
        choices=["vector", "hybrid", "keyword"],
        help="where hits come from: vector search, vector + BM25 keyword search fused by rank, "
        "or keyword alone (default: hybrid with --total-budget, else vector)",
    )
    parser.add_argument(
        "--keyword-weight",
        type=float,
        metavar="X",
        help="hybrid: the keyword search's weight in the fusion, the vector search's being 1 "
        "(default: 1)",
    )
    parser.add_argument(
        "--window-budget",
        type=int,
        default=DEFAULT_WINDOW_BUDGET,
        metavar="N",
        help=f"the most characters of one window (default: {DEFAULT_WINDOW_BUDGET})",
    )
    parser.add_argument(
        "--total-budget",
        type=int,
        default=total_budget,
        metavar="N",
        help="the most characters of all windows together; -k is then the most windows "
        + (
            "(default: none, -k windows of --window-budget each)"
            if total_budget is None
            else f"(default: {total_budget}; the plain chunks are cut at the same budget)"
        ),
    )
    parser.add_argument(
        "--expansion",
        choices=["adaptive", "static"],
        help="with --total-budget: grow windows toward relevant neighbours (adaptive, the "
        "default) or blindly to --window-budget (static)",
    )
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--mode",
        choices=["both", "prev", "next"],
        default="both",
        help="which way windows grow (default: both)",
    )


# ---- commands ---------------------------------------------------------------------------------


def _ingest(args: argparse.Namespace) -> int:
    from window_retriever._loaders import LoadOptions, check_sources, printable
    from window_retriever._pipeline import SourceOutcome
    from window_retriever.ingestion import Listed, Repeated, Unlistable, ingest

    metadata = _parse_metadata(args.metadata)
    splitter = _splitter(args.chunk_size, args.chunk_overlap)
    if not all(math.isfinite(v) and v > 0 for v in (args.timeout, args.rate, args.max_size_mb)):
        raise CommandError("--timeout, --rate and --max-size-mb must be positive numbers")
    if args.origin is not None and not args.origin.strip():
        raise CommandError("--origin takes a name, e.g. --origin build-server-docs")
    options = LoadOptions(
        selectors=args.selector,
        timeout=args.timeout,
        requests_per_second=args.rate,
        max_bytes=int(args.max_size_mb * 1024 * 1024),
    )
    try:  # before the store is opened: a refused command creates nothing
        check_sources(args.sources)
    except ValueError as error:
        raise CommandError(str(error)) from None
    with _opened_for_writing(args) as store, _Progress() as progress:

        def line(event: Any) -> None:
            if isinstance(event, Listed):
                progress.start(event.sources)
                return
            if isinstance(event, Unlistable):
                text = (
                    f"failed    {printable(event.folder)}: cannot list this folder (kept as stored)"
                )
            elif isinstance(event, Repeated):
                text = (
                    f"skipped   {printable(event.path)}: already read as "
                    f"{printable(event.first)} (a link loop, or a second link to it)"
                )
            elif isinstance(event, SourceOutcome):
                progress.source_done()
                text = _source_line(event)
            else:  # a pruned file
                text = f"removed   {event.source}: gone ({_count(event.chunks, 'chunk')})"
            progress.line(text)

        summary = ingest(
            store,
            args.sources,
            splitter=splitter,
            headers=args.headers,
            metadata=metadata,
            options=options,
            keep_missing=args.keep_missing,
            origin=args.origin,
            progress=progress,
            on_event=line,
        )
    ingested = summary.added + summary.updated
    print(
        f"{_count(summary.sources, 'source')}: {ingested} ingested ({summary.added} added, "
        f"{summary.updated} updated), {summary.unchanged} skipped (unchanged), "
        f"{summary.empty} skipped (empty), {summary.failed} failed, "
        f"{summary.gone} gone (removed); "
        f"{_count(summary.written, 'chunk')} written, {summary.removed} removed"
    )
    return EXIT_SOURCES_FAILED if summary.failed else EXIT_OK


def _source_line(result: SourceOutcome) -> str:
    from window_retriever._loaders import EMPTY, printable

    name, outcome = printable(result.name), result.outcome
    if outcome is None:
        if result.error == EMPTY:
            return f"skipped   {name}: empty (no text)"
        return f"failed    {name}: {_said(result.error or '')}"
    detail = _count(outcome.chunks, "chunk")
    if outcome.status == "unchanged":
        detail += ", nothing embedded"
    elif outcome.written != outcome.chunks or outcome.removed:
        detail += f", {outcome.written} written, {outcome.removed} removed"
    return f"{outcome.status:<9} {name}: {detail}"


def _query(args: argparse.Namespace) -> int:
    _check_window_arguments(args)
    where = None
    if args.filter is not None:
        from window_retriever._filters import check_where

        def finite(text: str) -> float:  # NaN, Infinity and 1e999, which JSON alone lets in
            number = float(text)
            if not math.isfinite(number):
                raise CommandError(f"--filter holds {text}; Chroma takes only finite numbers")
            return number

        try:
            where = json.loads(args.filter, parse_float=finite, parse_constant=finite)
        except json.JSONDecodeError as error:
            raise CommandError(
                f"--filter is not valid JSON ({error.msg} at column {error.colno})"
            ) from None
        if not isinstance(where, dict):
            raise CommandError('--filter must be a JSON object, e.g. {"tenant": "acme"}')
        try:
            check_where(where, "--filter")
        except ValueError as error:
            raise CommandError(str(error)) from None
    store = _open_for_reading(args)
    docs = _retrieve(store, args, where)
    if args.json:
        json.dump(
            [_as_json(rank, doc) for rank, doc in enumerate(docs, 1)],
            sys.stdout,
            indent=2,
            ensure_ascii=False,
        )
        print()
    else:
        _print_windows(docs, sys.stdout)
    if not docs:  # an answer, not an error (exit 0), but never a silent one
        print(
            f"no windows: nothing in the collection {args.collection!r} matches"
            + (" the --filter" if where is not None else ""),
            file=sys.stderr,
        )
    return EXIT_OK


def _eval(args: argparse.Namespace) -> int:
    from window_retriever._embeddings import default_embeddings
    from window_retriever.evaluation import (
        evaluate,
        parse_configs,
        read_questions,
        resolve_sources,
    )

    try:
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or min(budgets) < 1:
        raise CommandError(
            f"--total-budgets takes positive whole numbers, e.g. 1000,2000,4000, "
            f"got {args.budgets!r}"
        )
    for option, target in (("--json", args.json_out), ("--plot", args.plot)):
        if target is not None:
            folder = Path(target).parent
            if Path(target).is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
                raise CommandError(f"{option} {target}: cannot write there")
    if args.plot is not None:  # before the run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CommandError(
                "--plot needs matplotlib: pip install 'window-retriever[eval]'"
            ) from None
    configs = parse_configs(args.configs)
    path = Path(args.questions)
    if not path.is_file():
        raise CommandError(f"no questions file at {path}")
    questions, problems = read_questions(path)
    for problem in problems:
        print(f"skipped {problem}", file=sys.stderr)
    if not questions:
        raise CommandError(f"no usable questions in {path} ({len(problems)} lines skipped)")
    store = _open_for_reading(args)
    questions, warnings = resolve_sources(store, questions)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    report = evaluate(
        store,
        questions,
        configs=configs,
        budgets=budgets,
        count_tokens=default_embeddings().count_tokens,
        skipped=problems,
    )
    print(f"{_count(len(questions), 'question')}, {_count(len(problems), 'line')} skipped")
    print(report.table())
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    if args.plot:
        report.plot(args.plot)
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    _check_window_arguments(args)
    from window_retriever._ingest import prune_missing
    from window_retriever._loaders import LoadOptions
    from window_retriever._pipeline import SourceOutcome
    from window_retriever.ingestion import ingest

    pages = Path(args.pages) if args.pages else bundled_pages()
    if not pages.is_dir():
        raise CommandError(f"no pages at {pages}; pass --pages DIR, a folder of HTML pages")
    if args.total_budget < 1:
        raise CommandError(f"--total-budget must be at least 1, got {args.total_budget}")
    # The collection every command reads by default, so that `query --db DIR` finds it.
    args.chroma_url, args.collection, args.wait = None, DEFAULT_COLLECTION, False
    args.chroma_tenant = args.chroma_database = None
    began = time.perf_counter()
    with _opened_for_writing(args) as store:
        summary = ingest(
            store, [str(pages)], options=LoadOptions(selectors=["body"]), origin=DEMO_ORIGIN
        )
        results = [event for event in summary.events if isinstance(event, SourceOutcome)]
        for result in results:
            if result.outcome is None:
                raise CommandError(
                    f"cannot load {result.name}: {result.error} (the demo reads the 'body' "
                    "class of HTML pages; --pages DIR must hold such pages)"
                )
        # The pages as another install (another path) of the demo wrote them: gone.
        shown = {os.path.abspath(result.name) for result in results}
        prune_missing(store, os.sep, shown, origin=DEMO_ORIGIN)
    written = summary.written
    total = sum(result.outcome.chunks for result in results if result.outcome is not None)
    print(
        f"{_count(total, 'chunk')} of the pages in {pages} are in {args.db}/, collection "
        f"{args.collection!r} ({written} embedded now, {time.perf_counter() - began:.1f} s)"
    )
    budget = args.total_budget
    print(f"\nQ: {args.question}\n")
    # Plain top chunks in rank order, cut at the same total budget as the windows.
    found = store.similarity_search_with_score(args.question, k=max(args.k or 4, budget // 100 + 1))
    plain: list[tuple[Document, float, int]] = []
    used = 0
    for doc, score in found:
        if used >= budget:
            break
        taken = min(len(doc.page_content), budget - used)
        plain.append((doc, score, taken))
        used += taken
    print(f"--- plain: the top {_count(len(plain), 'chunk')}, {used} of {budget} characters")
    for rank, (doc, score, taken) in enumerate(plain, 1):
        meta = doc.metadata
        cut = len(doc.page_content) - taken
        print(
            f"[{rank}] {_short(meta.get('source', '?'))}  chunk {meta.get('chunk_index')}  "
            f"distance {score:.3f}"
            + (f"  (cut at the budget: {cut} characters left out)" * (cut > 0))
        )
        print(_indent(doc.page_content[:taken]))
    docs = _retrieve(store, args, None)
    print(
        f"\n--- windows: {_count(len(docs), 'window')}, "
        f"{sum(len(d.page_content) for d in docs)} of {budget} characters"
    )
    _print_windows(docs, sys.stdout)
    print(f'\nAsk another question: {PROG} query --db {args.db} "QUESTION" --total-budget {budget}')
    return EXIT_OK


def bundled_pages() -> Path:
    """The demo's pages, shipped in the package (three pages of the Python 3.11 tutorial)."""
    return Path(__file__).resolve().parent / "_data" / "pages"


def _count(number: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks``."""
    return f"{number} {noun}{'s' * (number != 1)}"


# ---- helpers ----------------------------------------------------------------------------------


FLAGS: Final[Mapping[OptionName, str]] = {
    "collection": "--collection",
    "database": "--chroma-database",
    "db": "--db",
    "file_id_keys": "--metadata",
    "max_bytes": "--max-size-mb",
    "selectors": "--selector",
    "tenant": "--chroma-tenant",
    "timeout": "--chroma-timeout",
    "token": ENV_TOKEN,  # kept off command lines, where other users can read it
    "token_header": ENV_TOKEN_HEADER,
    "url": "--chroma-url",
    "wait": "--wait",
}
"""How the command line sets each option that a library message can name (a test checks all)."""


def _said(message: str) -> str:
    """A library message in the command line's words: each option it names as its flag."""
    if not isinstance(message, Message):
        return message
    return message.render(_say)


def _say(mention: Mention) -> str:
    if isinstance(mention, Command):
        given = " ".join(_say(option) for option in mention.options)
        return f"run '{PROG} {mention.name}{' ... ' + given if given else ''}'"
    flag = FLAGS[mention.name]
    if not mention.has_value or mention.value is True:  # a switch (--wait) or the option itself
        return flag
    value = mention.value
    if mention.name == "file_id_keys":  # the owner keys of the file id are --metadata keys
        return " ".join(f"{flag} {key}=..." for key in value if key != "source")
    if isinstance(value, list | tuple):
        return " ".join([flag, *map(str, value)])
    return f"{flag} {value}"


def _check_window_arguments(args: argparse.Namespace) -> None:
    """Refuse window options that cannot work, before any store is opened."""
    if args.budget is not None:
        raise CommandError(
            "--budget is now --window-budget (the most characters of one window); "
            "--total-budget N caps all windows together"
        )
    if args.expansion == "adaptive" and args.total_budget is None:
        raise CommandError(
            "--expansion adaptive shares one budget between windows: give --total-budget N"
        )


def _retrieve(store: Any, args: argparse.Namespace, where: dict[str, Any] | None) -> list[Document]:
    from window_retriever._retriever import ContextWindowRetriever

    retriever = ContextWindowRetriever(
        vectorstore=store,
        k=args.k,
        window_budget=args.window_budget,
        total_budget=args.total_budget,
        expansion=args.expansion,
        mode=args.mode,
        filter=where,
        candidates=args.candidates,
        **({} if args.keyword_weight is None else {"keyword_weight": args.keyword_weight}),
    )
    return retriever.invoke(args.question)


def _splitter(size: int, overlap: int) -> Any:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    if size < 1:
        raise CommandError(f"--chunk-size must be at least 1, got {size}")
    if not 0 <= overlap < size:
        raise CommandError(
            f"--chunk-overlap must be from 0 to less than --chunk-size ({size}), got {overlap}"
        )
    return RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    )


def _parse_metadata(pairs: Sequence[str]) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--metadata takes KEY=VALUE, got {pair!r}")
        metadata[key.strip()] = value
    from window_retriever.ingestion import RESERVED_METADATA

    reserved = set(metadata) & RESERVED_METADATA
    if reserved:
        raise CommandError(
            f"--metadata cannot set {', '.join(sorted(reserved))}: the ingester stamps it"
        )
    return metadata


@contextmanager
def _opened_for_writing(args: argparse.Namespace) -> Iterator[Any]:
    """Open the store for an ingest: an embedded store is locked against other writers."""
    from window_retriever._lock import writer_lock

    directory, _ = _location(args)
    if directory is None:  # a server orders its writers itself
        yield _store(args, create=True)
        return
    with writer_lock(directory, wait=args.wait):
        yield _store(args, create=True)


def _open_for_reading(args: argparse.Namespace) -> Any:
    return _store(args, create=False)


def _location(args: argparse.Namespace) -> tuple[Path | None, str | None]:
    from window_retriever._open import store_location

    return store_location(args.db, args.chroma_url)


def _store(args: argparse.Namespace, *, create: bool) -> Any:
    from window_retriever._open import open_store

    # open_store reads the environment itself, so that its messages name the variables; they
    # name the arguments the flags were passed as, which main() says as the flags.
    return open_store(
        args.db,
        url=args.chroma_url,
        collection=args.collection,
        create=create,
        tenant=args.chroma_tenant,
        database=args.chroma_database,
        timeout=getattr(args, "chroma_timeout", None),
    )


class _Progress:
    """A progress bar on a terminal; plain lines otherwise.

    The bar counts the chunks written out of those planned, with their rate (embedding is the
    slow part, so a long file shows movement), and the sources done. The ingest threads tell
    it of chunks.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.sources = self.done = 0
        self._lock = threading.Lock()

    def start(self, sources: int) -> None:
        """The sources are listed: show the bar (on a terminal)."""
        self.sources = sources
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=0, unit="chunk", file=self.stream, dynamic_ncols=True)
            self._show_sources()

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def line(self, text: str) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def planned(self, chunks: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.total += chunks
                self.bar.refresh()

    def written(self, chunks: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(chunks)

    def source_done(self) -> None:
        self.done += 1
        if self.bar is not None:
            with self._lock:
                self._show_sources()

    def _show_sources(self) -> None:
        noun = "source" if self.sources == 1 else "sources"
        self.bar.set_postfix_str(f"{self.done}/{self.sources} {noun}")


def _print_windows(docs: Sequence[Document], out: TextIO) -> None:
    mark: Callable[[str], str] = (
        (lambda s: f"\x1b[1;33m{s}\x1b[0m") if out.isatty() else (lambda s: f"»{s}«")
    )
    for rank, doc in enumerate(docs, 1):
        meta = doc.metadata
        first, last = meta.get("first_chunk_index"), meta.get("last_chunk_index")
        if first is None:
            where = "unexpanded"
        else:
            where = f"chunk {first}" if first == last else f"chunks {first}-{last}"
        span = (
            f"  characters {meta['start_index']}-{meta['end_index']}" if "end_index" in meta else ""
        )
        hits = len(meta.get("hit_chunk_ids", []))
        print(
            f"[{rank}] {_short(meta.get('source', meta.get('file_id', '?')))}  {where}{span}  "
            f"score {meta['score']:.3f}  {hits} hit{'s' * (hits != 1)}",
            file=out,
        )
        print(_indent(_highlight(doc.page_content, meta.get("hit_spans", []), mark)), file=out)


def _highlight(text: str, spans: Sequence[Sequence[int]], mark: Callable[[str], str]) -> str:
    from window_retriever.evaluation import merge_spans

    out, cursor = [], 0
    for start, end in merge_spans((int(s), int(e)) for s, e in spans):
        out += [text[cursor:start], mark(text[start:end])]
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _as_json(rank: int, doc: Document) -> dict[str, Any]:
    return {"rank": rank, "id": doc.id, "text": doc.page_content, "metadata": doc.metadata}


def _short(source: str) -> str:
    path = Path(source)
    if path.is_absolute():
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return source
    return source


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _one_line(error: BaseException) -> str:
    said = _said(error.message) if isinstance(error, WindowRetrieverError) else str(error)
    text = said.strip().splitlines()
    message = text[0] if text else type(error).__name__
    if not isinstance(error, WindowRetrieverError):
        message = f"{type(error).__name__}: {message}"
    return message
