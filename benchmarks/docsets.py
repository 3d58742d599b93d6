"""Documentation dev sets: retrieval questions with gold evidence quoted from real documentation.

Usage::

    apt-get install python3.11-doc linux-doc-6.1 perl-doc
    python benchmarks/docsets.py --check                  # validate every set, print statistics
    python benchmarks/docsets.py --check --sets perldocs  # one set (also: benchmarks/perldocs.py --check)

A set is described by :class:`DocSet`: where its pages load from, its questions file and how
it is chunked. The sets:

- ``pydocs``: the Python 3.11 documentation (Debian's ``python3.11-doc``), HTML;
- ``kerneldocs``: the Linux kernel 6.1 documentation (``linux-doc-6.1``), HTML;
- ``perldocs``: the Perl 5.36 documentation (``perl-doc``). ``window_retriever.load_file``
  reads HTML and text files only and refuses ``.pod``, so every page the questions name is
  first rendered to plain text with the standard ``pod2text`` (``pod2text --utf8 -w 76``) into
  :data:`POD_CACHE` (``benchmarks/.cache/perldoc/<name>.txt``), which is what is loaded; a page
  is rendered again when its ``.pod`` is newer than the text. The cache is generated, never
  committed (it holds a ``.gitignore`` of ``*``).

Questions files, ``benchmarks/data/<set>_questions.jsonl``, one question a line::

    {"id": "kd-001", "page": "admin-guide/sysctl/vm.html", "question": "...",
     "evidence": ["exact quote", ...], "answer": "short answer"}

``page`` is relative to the set's :attr:`DocSet.root`; every ``evidence`` quote is an exact
substring, occurring exactly once, of the page's text as :func:`window_retriever.load_file`
loads it, and the gold spans of a question are the character spans of its quotes. ``answer`` is
a short string inside one of the quotes.

A question *needs several chunks* when no single chunk of the page (split as the set is
chunked, by ``WindowSplitter``) holds all of its gold spans; it is *crossing* when some single
quote fits inside no chunk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

DATA = Path(__file__).parent / "data"
POD_ROOT = Path("/usr/share/perl/5.36/pod")
POD_CACHE = Path(__file__).parent / ".cache" / "perldoc"
POD2TEXT_OPTIONS = ("--utf8", "-w", "76")


@dataclass(frozen=True)
class Targets:
    """What a set must reach to pass ``--check`` (``None``: no bound)."""

    questions: int | None = None
    pages: int | None = None
    per_page: int | None = None
    """The most questions on one page."""
    several: float | None = None
    """The least share of questions that need more than one chunk."""


@dataclass(frozen=True)
class DocSet:
    """A documentation dev set: where its pages load from, its questions, its chunking."""

    name: str
    title: str
    package: str
    """The Debian package that installs the documentation."""
    root: Path
    """Pages load from ``root / page``."""
    questions: Path
    chunk_size: int = 400
    chunk_overlap: int = 40
    prepare: Callable[[Sequence[str], Path], None] | None = None
    """Makes ``root / page`` for each page named (given the pages and the root), where the
    package's files are not loaded as they are (a render)."""
    targets: Targets = Targets()


def render_pods(pages: Sequence[str], pod_root: Path = POD_ROOT, cache: Path = POD_CACHE) -> None:
    """Render each page's ``.pod`` to ``cache/<name>.txt`` with ``pod2text`` unless up to date.

    Args:
        pages: Page names such as ``perlfunc.txt``.
        pod_root: The directory of the ``.pod`` files.
        cache: The directory of the rendered text.

    Raises:
        SystemExit: If the documentation or ``pod2text`` is missing, or a page fails to render.
    """
    if not pod_root.is_dir():
        msg = f"{pod_root} not found: install the documentation with `apt-get install perl-doc`"
        raise SystemExit(msg)
    pod2text = shutil.which("pod2text")
    if pod2text is None:
        msg = "pod2text not found (it comes with perl)"
        raise SystemExit(msg)
    cache.mkdir(parents=True, exist_ok=True)
    ignore = cache / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    for page in pages:
        source = pod_root / Path(page).with_suffix(".pod").name
        target = cache / page
        if not source.is_file():
            msg = f"{source} not found (is `apt-get install perl-doc` complete?)"
            raise SystemExit(msg)
        if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
            continue
        done = subprocess.run(  # noqa: S603
            [pod2text, *POD2TEXT_OPTIONS, str(source), str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            target.unlink(missing_ok=True)
            msg = f"pod2text failed on {source}: {done.stderr.strip()}"
            raise SystemExit(msg)


def _render_into(pages: Sequence[str], root: Path) -> None:
    render_pods(pages, cache=root)


PYDOCS = DocSet(
    name="pydocs",
    title="the Python 3.11 documentation",
    package="python3.11-doc",
    root=Path("/usr/share/doc/python3.11/html"),
    questions=DATA / "pydocs_questions.jsonl",
)
KERNELDOCS = DocSet(
    name="kerneldocs",
    title="the Linux kernel 6.1 documentation",
    package="linux-doc-6.1",
    root=Path("/usr/share/doc/linux-doc-6.1/html"),
    questions=DATA / "kerneldocs_questions.jsonl",
    targets=Targets(questions=130, pages=40, per_page=4, several=0.6),
)
PERLDOCS = DocSet(
    name="perldocs",
    title="the Perl 5.36 documentation",
    package="perl-doc",
    root=POD_CACHE,
    questions=DATA / "perldocs_questions.jsonl",
    prepare=_render_into,
    targets=Targets(questions=120, several=0.6),
)
DOCSETS = {docset.name: docset for docset in (PYDOCS, KERNELDOCS, PERLDOCS)}


def read_entries(path: Path) -> list[dict[str, Any]]:
    """Read a questions file: one dict a non-blank line, in file order."""
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as error:
                msg = f"{path}:{number}: not JSON: {error}"
                raise ValueError(msg) from error
    return entries


def validate(entries: Sequence[dict[str, Any]]) -> None:
    """Check the keys, ids, evidence and answer types of every entry.

    Raises:
        ValueError: If an entry is malformed or an id repeats.
    """
    seen: set[str] = set()
    for entry in entries:
        missing = {"id", "page", "question", "evidence", "answer"} - entry.keys()
        if missing:
            msg = f"{entry.get('id', '?')}: missing keys {sorted(missing)}"
            raise ValueError(msg)
        if entry["id"] in seen:
            msg = f"duplicate id {entry['id']}"
            raise ValueError(msg)
        seen.add(entry["id"])
        evidence = entry["evidence"]
        if not isinstance(evidence, list) or not evidence:
            msg = f"{entry['id']}: evidence must be a non-empty list"
            raise ValueError(msg)
        if not all(isinstance(quote, str) and quote for quote in evidence):
            msg = f"{entry['id']}: evidence must be non-empty strings"
            raise ValueError(msg)
        if not isinstance(entry["answer"], str) or not entry["answer"]:
            msg = f"{entry['id']}: answer must be a non-empty string"
            raise ValueError(msg)


def load_pages(docset: DocSet, entries: Sequence[dict[str, Any]] | None = None) -> list[Document]:
    """Load every page the entries name (by default the set's questions), in order of mention.

    Returns:
        One document a page; ``metadata["page"]`` holds the page path relative to the root.

    Raises:
        SystemExit: If the documentation is not installed or a page cannot be loaded.
    """
    from window_retriever import load_file

    if entries is None:
        entries = read_entries(docset.questions)
    pages = list(dict.fromkeys(entry["page"] for entry in entries))
    if docset.prepare is not None:
        docset.prepare(pages, docset.root)
    if not docset.root.is_dir():
        msg = (
            f"{docset.root} not found: install the documentation with "
            f"`apt-get install {docset.package}`"
        )
        raise SystemExit(msg)
    documents = []
    for page in pages:
        loaded = load_file(docset.root / page)
        if loaded.document is None:
            msg = (
                f"cannot load {docset.root / page}: {loaded.error} "
                f"(is `apt-get install {docset.package}` complete?)"
            )
            raise SystemExit(msg)
        loaded.document.metadata["page"] = page
        documents.append(loaded.document)
    return documents


def locate(entry: dict[str, Any], text: str) -> list[list[int]]:
    """The gold spans of one entry in its page's text.

    Raises:
        ValueError: If a quote is missing or repeated, or the answer is outside the evidence.
    """
    spans = []
    for quote in entry["evidence"]:
        start = text.find(quote)
        if start < 0:
            msg = f"{entry['id']}: evidence not found in {entry['page']}: {quote[:80]!r}"
            raise ValueError(msg)
        if text.find(quote, start + 1) >= 0:
            msg = (
                f"{entry['id']}: evidence occurs more than once in {entry['page']}: {quote[:80]!r}"
            )
            raise ValueError(msg)
        spans.append([start, start + len(quote)])
    if not any(entry["answer"] in quote for quote in entry["evidence"]):
        msg = f"{entry['id']}: answer {entry['answer']!r} is not inside its evidence"
        raise ValueError(msg)
    return spans


def questions(docset: DocSet, documents: Sequence[Document]) -> list[dict[str, Any]]:
    """Evaluation rows of the set's questions, every evidence quote located in its page.

    Returns:
        Rows ``{"id", "question", "source", "answer", "gold_spans"}``; ``source`` is the page
        document's ``metadata["source"]`` and ``gold_spans`` are ``[start, end]`` pairs.

    Raises:
        ValueError: If an entry is malformed, names a page not among ``documents``, or its
            evidence does not match its page.
    """
    entries = read_entries(docset.questions)
    validate(entries)
    by_page = {document.metadata.get("page"): document for document in documents}
    rows = []
    for entry in entries:
        document = by_page.get(entry["page"])
        if document is None:
            msg = f"{entry['id']}: page {entry['page']} is not among the loaded documents"
            raise ValueError(msg)
        rows.append(
            {
                "id": entry["id"],
                "question": entry["question"],
                "source": document.metadata["source"],
                "answer": entry["answer"],
                "gold_spans": locate(entry, document.page_content),
            }
        )
    return rows


def chunk_ranges(docset: DocSet, document: Document) -> list[tuple[int, int]]:
    """Split a page as the set is chunked; each chunk's ``(start, end)``, end exclusive."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from window_retriever import WindowSplitter

    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(
            chunk_size=docset.chunk_size,
            chunk_overlap=docset.chunk_overlap,
            add_start_index=True,
        )
    )
    return [
        (chunk.metadata["start_index"], chunk.metadata["start_index"] + len(chunk.page_content))
        for chunk in splitter.split_documents([document])
    ]


def crosses(spans: Sequence[Sequence[int]], ranges: Sequence[tuple[int, int]]) -> bool:
    """True if some span fits inside no single chunk range."""
    return any(not any(start <= s and e <= end for start, end in ranges) for s, e in spans)


def needs_several(spans: Sequence[Sequence[int]], ranges: Sequence[tuple[int, int]]) -> bool:
    """True if no single chunk range holds every span."""
    return not any(all(start <= s and e <= end for s, e in spans) for start, end in ranges)


def check(docset: DocSet) -> dict[str, Any]:
    """Validate the whole questions file and compute its statistics.

    Returns:
        Counts of questions, pages, multi-chunk and crossing questions, evidence lengths, and
        per-page and per-section counts.

    Raises:
        ValueError: If an entry is malformed or its evidence does not match its page.
    """
    entries = read_entries(docset.questions)
    validate(entries)
    documents = load_pages(docset, entries)
    rows = questions(docset, documents)
    ranges = {document.metadata["page"]: chunk_ranges(docset, document) for document in documents}
    per_page = {
        document.metadata["page"]: {
            "chars": len(document.page_content),
            "chunks": len(ranges[document.metadata["page"]]),
            "questions": 0,
            "several": 0,
        }
        for document in documents
    }
    several = crossing = evidence = 0
    for row, entry in zip(rows, entries, strict=True):
        stats = per_page[entry["page"]]
        stats["questions"] += 1
        if needs_several(row["gold_spans"], ranges[entry["page"]]):
            several += 1
            stats["several"] += 1
        crossing += crosses(row["gold_spans"], ranges[entry["page"]])
        evidence += sum(end - start for start, end in row["gold_spans"])
    return {
        "questions": len(rows),
        "pages": len(documents),
        "quotes": sum(len(entry["evidence"]) for entry in entries),
        "several": several,
        "crossing": crossing,
        "mean_evidence": evidence / (len(rows) or 1),
        "per_page": per_page,
        "sections": Counter(page.split("/")[0] for page in per_page if "/" in page),
    }


def shortfalls(docset: DocSet, stats: dict[str, Any]) -> list[str]:
    """Where a set's statistics fall below its targets."""
    targets, short = docset.targets, []
    if targets.questions is not None and stats["questions"] < targets.questions:
        short.append(f"fewer than {targets.questions} questions")
    if targets.pages is not None and stats["pages"] < targets.pages:
        short.append(f"fewer than {targets.pages} pages")
    crowded = [
        page
        for page, row in stats["per_page"].items()
        if targets.per_page is not None and row["questions"] > targets.per_page
    ]
    if crowded:
        short.append(f"more than {targets.per_page} questions on {', '.join(crowded)}")
    share = stats["several"] / (stats["questions"] or 1)
    if targets.several is not None and share < targets.several:
        short.append(f"under {targets.several:.0%} needing more than one chunk")
    return short


def report(docset: DocSet) -> int:
    """Validate one set and print its statistics; 1 if invalid or below its targets."""
    try:
        stats = check(docset)
    except ValueError as error:
        print(f"{docset.name}: invalid: {error}", file=sys.stderr)
        return 1
    total = stats["questions"] or 1
    size = f"{docset.chunk_size}/{docset.chunk_overlap}"
    width = max(24, *(len(page) + 2 for page in stats["per_page"]))
    print(f"## {docset.name}: {docset.title} ({docset.root})")
    print(f"{'page':<{width}} {'chars':>7} {'chunks':>6} {'questions':>9} {'several':>7}")
    for page, row in stats["per_page"].items():
        print(
            f"{page:<{width}} {row['chars']:>7} {row['chunks']:>6} "
            f"{row['questions']:>9} {row['several']:>7}"
        )
    if stats["sections"]:
        sections = ", ".join(f"{name} {count}" for name, count in stats["sections"].most_common())
        print(f"pages by section: {sections}")
    print(f"questions: {stats['questions']}  pages: {stats['pages']}  quotes: {stats['quotes']}")
    print(
        f"needing more than one {size} chunk: {stats['several']} "
        f"({stats['several'] / total:.0%}); with a quote crossing a chunk boundary: "
        f"{stats['crossing']} ({stats['crossing'] / total:.0%})"
    )
    print(f"mean evidence length: {stats['mean_evidence']:.0f} characters a question")
    short = shortfalls(docset, stats)
    if short:
        print(f"{docset.name}: below target: {'; '.join(short)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None, docset: DocSet | None = None) -> int:
    """Validate questions files (``--check``) and print their statistics.

    Args:
        argv: The command line.
        docset: One set (its own script's ``--check``); by default every set, or ``--sets``.
    """
    parser = argparse.ArgumentParser(
        description=(
            __doc__.splitlines()[0]
            if docset is None
            else f"Retrieval questions with gold evidence over {docset.title}."
        )
    )
    parser.add_argument("--check", action="store_true", help="validate and print statistics")
    if docset is None:
        parser.add_argument(
            "--sets", default=",".join(DOCSETS), help="sets to check (default: all)"
        )
    parser.add_argument("--root", type=Path, help="where the pages load from (one set only)")
    parser.add_argument("--questions", type=Path, help="the questions file (one set only)")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    chosen = [docset] if docset is not None else [named(name) for name in args.sets.split(",")]
    if (args.root or args.questions) and len(chosen) != 1:
        parser.error("--root and --questions need one set (--sets NAME)")
    status = 0
    for one in chosen:
        if args.root:
            one = replace(one, root=args.root)
        if args.questions:
            one = replace(one, questions=args.questions)
        status = max(status, report(one))
    return status


def named(name: str) -> DocSet:
    """The documentation dev set called ``name``."""
    try:
        return DOCSETS[name]
    except KeyError:
        msg = f"unknown documentation set {name!r}; sets: {', '.join(DOCSETS)}"
        raise SystemExit(msg) from None


if __name__ == "__main__":
    sys.exit(main())
