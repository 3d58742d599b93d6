"""What the ``window-retriever`` commands do: ``ingest``, ``query``, ``eval`` and ``demo``.

Each command takes the parsed arguments (see ``cli._parser.build_parser``) and returns the exit
status; a command that cannot run as asked raises :class:`CommandError`, which ``cli._parser.main``
prints as one line. Heavy modules (LangChain, Chroma, the embedding model) are imported inside
the commands, so that the command line starts fast and an early Ctrl-C is handled.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from window_retriever._errors import (
    Command,
    Mention,
    Message,
    OptionName,
    WindowRetrieverError,
)
from window_retriever.cli._terminal import Progress, as_json, count, indent, print_windows
from window_retriever.stores._open import (
    DEFAULT_COLLECTION,
    ENV_TOKEN,
    ENV_TOKEN_HEADER,
)

if TYPE_CHECKING:  # the command starts without LangChain: an early Ctrl-C is handled too
    from langchain_core.documents import Document

    from window_retriever.ingestion._pipeline import SourceOutcome

PROG = "window-retriever"
DEMO_QUESTION = (
    "How do I make sure a file is closed after reading it, even if an exception is raised?"
)
DEFAULT_TOTAL_BUDGET = 2000
"""``--total-budget`` of ``query`` and ``demo``: the best configuration measured (README)."""
DEMO_ORIGIN = "window-retriever-demo"
"""The demo's pages carry this origin: a demo run removes what another install's demo wrote."""
EXIT_OK, EXIT_SOURCES_FAILED, EXIT_ERROR = 0, 1, 2


class CommandError(WindowRetrieverError):
    """A command cannot run as asked; the message says why and what to do."""


def run_ingest(args: argparse.Namespace) -> int:
    from window_retriever.ingestion import Listed, Repeated, Unlistable, ingest
    from window_retriever.ingestion._loaders import check_sources, printable
    from window_retriever.ingestion._pipeline import SourceOutcome
    from window_retriever.ingestion._web import LoadOptions

    metadata = _parse_metadata(args.metadata)
    splitter = _splitter(args.chunk_size, args.chunk_overlap)  # numbers: checked by the parser
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
    with _opened_for_writing(args) as store, Progress() as progress:

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
                text = f"removed   {event.source}: gone ({count(event.chunks, 'chunk')})"
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
        _keywords_saved(store)
    ingested = summary.added + summary.updated
    print(
        f"{count(summary.sources, 'source')}: {ingested} ingested ({summary.added} added, "
        f"{summary.updated} updated), {summary.unchanged} skipped (unchanged), "
        f"{summary.empty} skipped (empty), {summary.failed} failed, "
        f"{summary.gone} gone (removed); "
        f"{count(summary.written, 'chunk')} written, {summary.removed} removed"
    )
    return EXIT_SOURCES_FAILED if summary.failed else EXIT_OK


def _source_line(result: SourceOutcome) -> str:
    from window_retriever.ingestion._loaders import printable
    from window_retriever.ingestion._web import EMPTY

    name, outcome = printable(result.source), result.outcome  # as stored: what --filter names
    if outcome is None:
        if result.error == EMPTY:
            return f"skipped   {name}: empty (no text)"
        return f"failed    {name}: {said(result.error or '')}"
    detail = count(outcome.chunks, "chunk")
    if outcome.status == "unchanged":
        detail += ", nothing embedded"
    elif outcome.written != outcome.chunks or outcome.removed:
        detail += f", {outcome.written} written, {outcome.removed} removed"
    return f"{outcome.status:<9} {name}: {detail}"


def run_query(args: argparse.Namespace) -> int:
    _check_window_arguments(args)
    where = None
    if args.filter is not None:
        from window_retriever.core._filters import check_where

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
    from window_retriever._embeddings import warm_default_model

    warm_default_model()  # on a second core, while the store's libraries import
    store = _open_for_reading(args)
    docs = _retrieve(store, args, where)
    if args.json:
        json.dump(
            [as_json(rank, doc) for rank, doc in enumerate(docs, 1)],
            sys.stdout,
            indent=2,
            ensure_ascii=False,
        )
        print()
    else:
        print_windows(docs, sys.stdout)
    if not docs:  # an answer, not an error (exit 0), but never a silent one
        print(
            f"no windows: nothing in the collection {args.collection!r} matches"
            + (" the --filter" if where is not None else "")
            + _source_hint(where),
            file=sys.stderr,
        )
    return EXIT_OK


def _source_hint(where: Mapping[str, Any] | None) -> str:
    """For a filter on a relative path: the form a local file's ``source`` is stored in."""
    source = (where or {}).get("source")
    if not isinstance(source, str) or not source.strip() or os.path.isabs(source):
        return ""
    from window_retriever.ingestion._loaders import is_url, stored_source

    if is_url(source):
        return ""
    said = json.dumps({"source": stored_source(source)}, ensure_ascii=False)
    return f" (a local file's source is its absolute path, as query shows it: {said})"


def _keywords_saved(store: Any) -> None:
    """Bring the collection's saved keyword index up to date before the command ends.

    Each ``query`` is a process of its own: an index it found missing or behind would be
    built or caught up on a background thread that its exit ends (over ``INLINE_ROWS``
    chunks), so no query would ever have its keyword leg. The ingest that wrote pays it
    instead: a catch-up of what it wrote, a build the first time. A failure here loses
    nothing stored: the line says how to build the index later.
    """
    from window_retriever.stores._chroma_keywords import keyword_index

    try:
        keyword_index(store, reconcile_interval=math.inf).refresh()
    except Exception as error:  # the ingest itself succeeded: say so, exit as it did
        print(
            f"warning: the keyword index was not saved ({error}); 'window-retriever reindex' "
            "builds it",
            file=sys.stderr,
        )


def run_reindex(args: argparse.Namespace) -> int:
    from window_retriever.stores._chroma_keywords import keyword_index

    with _opened_for_writing(args, create=False) as store:
        index = keyword_index(store, reconcile_interval=math.inf)
        differing = index.reconcile()
        total = len(index)
    if differing:
        print(
            f"reindexed {args.collection!r}: {len(differing):,} of {total:,} chunks differed "
            "from the keyword index; every process reads them again at its next check"
        )
    else:
        print(
            f"reindexed {args.collection!r}: the keyword index holds all {total:,} chunks as stored"
        )
    return EXIT_OK


def run_eval(args: argparse.Namespace) -> int:
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
        count_tokens=_token_counter(),
        skipped=problems,
    )
    print(f"{count(len(questions), 'question')}, {count(len(problems), 'line')} skipped")
    print(report.table())
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    if args.plot:
        report.plot(args.plot)
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    _check_window_arguments(args)
    from window_retriever.ingestion import ingest
    from window_retriever.ingestion._pipeline import SourceOutcome
    from window_retriever.ingestion._prune import prune_missing
    from window_retriever.ingestion._web import LoadOptions

    pages = Path(args.pages) if args.pages else bundled_pages()
    if not pages.is_dir():
        raise CommandError(f"no pages at {pages}; pass --pages DIR, a folder of HTML pages")
    if args.total_budget is None:
        raise CommandError(
            "the demo compares plain chunks and windows at one --total-budget: give a number, "
            f"e.g. --total-budget {DEFAULT_TOTAL_BUDGET}"
        )
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
        shown = {result.source for result in results}
        prune_missing(store, os.sep, shown, origin=DEMO_ORIGIN)
    written = summary.written
    total = sum(result.outcome.chunks for result in results if result.outcome is not None)
    print(
        f"{count(total, 'chunk')} of the pages in {pages} are in {args.db}/, collection "
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
    print(f"--- plain: the top {count(len(plain), 'chunk')}, {used} of {budget} characters")
    for rank, (doc, score, taken) in enumerate(plain, 1):
        meta = doc.metadata
        cut = len(doc.page_content) - taken
        print(
            f"[{rank}] {meta.get('source', '?')}  chunk {meta.get('chunk_index')}  "
            f"distance {score:.3f}"
            + (f"  (cut at the budget: {cut} characters left out)" * (cut > 0))
        )
        print(indent(doc.page_content[:taken]))
    docs = _retrieve(store, args, None)
    print(
        f"\n--- windows: {count(len(docs), 'window')}, "
        f"{sum(len(d.page_content) for d in docs)} of {budget} characters"
    )
    print_windows(docs, sys.stdout)
    same = "" if budget == DEFAULT_TOTAL_BUDGET else f" --total-budget {budget}"
    print(f'\nAsk another question: {PROG} query --db {args.db} "QUESTION"{same}')
    return EXIT_OK


def _token_counter() -> Any:
    from window_retriever._embeddings import default_embeddings  # numpy, LangChain: not earlier

    return default_embeddings().count_tokens


def bundled_pages() -> Path:
    """The demo's pages, shipped in the package (three pages of the Python 3.11 tutorial)."""
    return Path(__file__).resolve().parents[1] / "_data" / "pages"


FLAGS: Final[Mapping[OptionName, str]] = {
    "collection": "--collection",
    "database": "--chroma-database",
    "db": "--db",
    "expansion": "--expansion",
    "file_id_keys": "--metadata",
    "k": "-k",
    "keyword_weight": "--keyword-weight",
    "max_bytes": "--max-size-mb",
    "selectors": "--selector",
    "tenant": "--chroma-tenant",
    "timeout": "--chroma-timeout",
    "token": ENV_TOKEN,  # kept off command lines, where other users can read it
    "token_header": ENV_TOKEN_HEADER,
    "total_budget": "--total-budget",
    "url": "--chroma-url",
    "wait": "--wait",
    "window_budget": "--window-budget",
}
"""How the command line sets each option that a library message can name (a test checks all)."""

_WINDOW_OPTIONS: Final = {"expansion", "k", "keyword_weight", "total_budget", "window_budget"}
LIBRARY_WORDS: Final[Mapping[OptionName, str]] = {
    name: flag for name, flag in FLAGS.items() if name not in _WINDOW_OPTIONS
}
"""``FLAGS`` for ``eval``, whose window configurations set the retriever's options by the
library's own names (``window:total_budget=800``): those are said as the library says them."""


def said(message: str, flags: Mapping[OptionName, str] = FLAGS) -> str:
    """A library message in the command line's words: each option it names as its flag.

    An option ``flags`` does not list is said in the library's words.
    """
    if not isinstance(message, Message):
        return message
    return message.render(lambda mention: _say(mention, flags))


def _say(mention: Mention, flags: Mapping[OptionName, str] = FLAGS) -> str:
    if isinstance(mention, Command):
        given = " ".join(_say(option, flags) for option in mention.options)
        return f"run '{PROG} {mention.name}{' ... ' + given if given else ''}'"
    flag = flags.get(mention.name)
    if flag is None:
        return str(mention)
    if not mention.has_value or mention.value is True:  # a switch (--wait) or the option itself
        return flag
    value = mention.value
    if mention.name == "file_id_keys":  # the owner keys of the file id are --metadata keys
        return " ".join(f"{flag} {key}=..." for key in value if key != "source")
    if isinstance(value, list | tuple):
        return " ".join([flag, *map(str, value)])
    return f"{flag} {value}"


def _check_window_arguments(args: argparse.Namespace) -> None:
    """Refuse a question or window options that cannot work, before any store is opened."""
    if not args.question.strip():
        raise CommandError(
            'the question is empty (an unset shell variable?); ask one, e.g. "How do I close '
            'a file?"'
        )
    if args.budget is not None:
        raise CommandError(
            "--budget is now --window-budget (the most characters of one window); "
            "--total-budget N caps all windows together"
        )
    if args.expansion == "adaptive" and args.total_budget is None:
        raise CommandError(
            "--expansion adaptive shares one budget between windows: give --total-budget N "
            "rather than none"
        )


def _retrieve(store: Any, args: argparse.Namespace, where: dict[str, Any] | None) -> list[Document]:
    from window_retriever.retrieval._retriever import ContextWindowRetriever

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
    if not 0 <= overlap < size:
        raise CommandError(
            f"--chunk-overlap must be from 0 to less than --chunk-size ({size}), got {overlap}"
        )
    from langchain_text_splitters import RecursiveCharacterTextSplitter

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
def _opened_for_writing(args: argparse.Namespace, *, create: bool = True) -> Iterator[Any]:
    """Open the store for a write: an embedded store is locked against other writers."""
    from window_retriever.cli._lock import writer_lock

    directory, _ = _location(args)
    if directory is None:  # a server orders its writers itself
        yield _store(args, create=create)
        return
    if not create and not directory.is_dir():  # no lock file left where nothing is
        yield _store(args, create=False)
        return
    with writer_lock(directory, wait=args.wait):
        yield _store(args, create=create)


def _open_for_reading(args: argparse.Namespace) -> Any:
    return _store(args, create=False)


def _location(args: argparse.Namespace) -> tuple[Path | None, str | None]:
    from window_retriever.stores._open import store_location

    return store_location(args.db, args.chroma_url)


def _store(args: argparse.Namespace, *, create: bool) -> Any:
    from window_retriever.stores._open import open_store

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
