"""Retrieval questions with gold evidence over the Linux kernel 6.1 documentation.

Usage::

    apt-get install linux-doc-6.1               # installs /usr/share/doc/linux-doc-6.1/html
    python benchmarks/kerneldocs.py --check     # validate the questions and print statistics

Data: ``benchmarks/data/kerneldocs_questions.jsonl``, one question a line, in the schema of
``pydocs.py``::

    {"id": "kd-001", "page": "admin-guide/sysctl/vm.html", "question": "...",
     "evidence": ["exact quote", ...], "answer": "short answer"}

``page`` is relative to :data:`DOCS_ROOT`; every ``evidence`` quote is an exact substring,
occurring exactly once, of the page's text as :func:`window_retriever.load_file` loads it, and
``answer`` is a short string inside one of the quotes. A question needs more than one chunk
when no single chunk of the default split (:data:`CHUNK_SIZE`/:data:`CHUNK_OVERLAP`, as in
``pydocs.py``) holds all of its gold spans.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from pydocs import CHUNK_OVERLAP, CHUNK_SIZE, chunk_ranges, crosses, read_entries

DOCS_ROOT = Path("/usr/share/doc/linux-doc-6.1/html")
QUESTIONS = Path(__file__).parent / "data" / "kerneldocs_questions.jsonl"
MIN_QUESTIONS = 130
MIN_PAGES = 40
MAX_PER_PAGE = 4
MIN_MULTI_CHUNK = 0.6


def load_pages(root: Path = DOCS_ROOT, path: Path = QUESTIONS) -> list[Document]:
    """Load every page that the questions file names, in order of first mention.

    Args:
        root: The directory of the HTML documentation.
        path: The JSON Lines file of questions.

    Returns:
        One document a page; ``metadata["page"]`` holds the page path relative to ``root``.

    Raises:
        SystemExit: If the documentation is not installed or a page cannot be loaded.
    """
    from window_retriever import load_file

    if not root.is_dir():
        msg = f"{root} not found: install the documentation with `apt-get install linux-doc-6.1`"
        raise SystemExit(msg)
    documents = []
    for page in dict.fromkeys(entry["page"] for entry in read_entries(path)):
        loaded = load_file(root / page)
        if loaded.document is None:
            msg = f"cannot load {root / page}: {loaded.error}"
            raise SystemExit(msg)
        loaded.document.metadata["page"] = page
        documents.append(loaded.document)
    return documents


def questions(documents: Sequence[Document], path: Path = QUESTIONS) -> list[dict[str, Any]]:
    """Build evaluation rows, locating every evidence quote in its page.

    Args:
        documents: The pages from :func:`load_pages`.
        path: The JSON Lines file of questions.

    Returns:
        Rows ``{"id", "question", "source", "answer", "gold_spans"}`` as ``pydocs.questions``
        builds them.

    Raises:
        ValueError: If a page is not among ``documents``, or a quote is missing from its page,
            occurs in it more than once, or the answer is not inside the evidence.
    """
    by_page = {document.metadata.get("page"): document for document in documents}
    rows = []
    for entry in read_entries(path):
        ident = entry.get("id", "?")
        document = by_page.get(entry["page"])
        if document is None:
            msg = f"{ident}: page {entry['page']} is not among the loaded documents"
            raise ValueError(msg)
        text = document.page_content
        spans = []
        for quote in entry["evidence"]:
            start = text.find(quote)
            if start < 0:
                msg = f"{ident}: evidence not found in {entry['page']}: {quote[:80]!r}"
                raise ValueError(msg)
            if text.find(quote, start + 1) >= 0:
                msg = f"{ident}: evidence occurs more than once in {entry['page']}: {quote[:80]!r}"
                raise ValueError(msg)
            spans.append([start, start + len(quote)])
        answer = entry.get("answer")
        if not answer or not any(answer in quote for quote in entry["evidence"]):
            msg = f"{ident}: answer {answer!r} is missing or not inside its evidence"
            raise ValueError(msg)
        rows.append(
            {
                "id": ident,
                "question": entry["question"],
                "source": document.metadata["source"],
                "answer": answer,
                "gold_spans": spans,
            }
        )
    return rows


def needs_several(spans: Sequence[Sequence[int]], ranges: Sequence[tuple[int, int]]) -> bool:
    """True if no single chunk range holds all of the spans."""
    return not any(all(start <= s and e <= end for s, e in spans) for start, end in ranges)


def check(root: Path = DOCS_ROOT, path: Path = QUESTIONS) -> dict[str, Any]:
    """Validate the whole questions file and compute its statistics.

    Args:
        root: The directory of the HTML documentation.
        path: The JSON Lines file of questions.

    Returns:
        Counts of questions, pages and multi-chunk questions, evidence lengths, and per-page
        and per-section counts.

    Raises:
        ValueError: If an entry is malformed, its evidence does not match its page, or a page
            has more than :data:`MAX_PER_PAGE` questions.
    """
    entries = read_entries(path)
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
        if not entry["evidence"] or not all(isinstance(q, str) and q for q in entry["evidence"]):
            msg = f"{entry['id']}: evidence must be a non-empty list of non-empty strings"
            raise ValueError(msg)
    per_page_count = Counter(entry["page"] for entry in entries)
    crowded = [page for page, count in per_page_count.items() if count > MAX_PER_PAGE]
    if crowded:
        msg = f"more than {MAX_PER_PAGE} questions on {', '.join(crowded)}"
        raise ValueError(msg)
    documents = load_pages(root, path)
    rows = questions(documents, path)
    ranges = {document.metadata["source"]: chunk_ranges(document) for document in documents}
    pages = {document.metadata["source"]: document.metadata["page"] for document in documents}
    per_page = {
        document.metadata["page"]: {
            "chars": len(document.page_content),
            "chunks": len(ranges[document.metadata["source"]]),
            "questions": 0,
            "several": 0,
        }
        for document in documents
    }
    several = crossing = 0
    lengths = []
    for row, entry in zip(rows, entries, strict=True):
        stats = per_page[pages[row["source"]]]
        stats["questions"] += 1
        chunks = ranges[row["source"]]
        if needs_several(row["gold_spans"], chunks):
            several += 1
            stats["several"] += 1
        crossing += crosses(row["gold_spans"], chunks)
        lengths.append(sum(len(quote) for quote in entry["evidence"]))
    return {
        "questions": len(rows),
        "pages": len(documents),
        "several": several,
        "crossing": crossing,
        "quotes": sum(len(entry["evidence"]) for entry in entries),
        "mean_evidence": sum(lengths) / len(lengths) if lengths else 0.0,
        "sections": Counter(page.split("/")[0] for page in per_page),
        "per_page": per_page,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Validate the questions file (``--check``) and print its statistics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="validate and print statistics")
    parser.add_argument("--root", type=Path, default=DOCS_ROOT, help="the HTML documentation")
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="the questions file")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    try:
        stats = check(args.root, args.questions)
    except ValueError as error:
        print(f"invalid: {error}", file=sys.stderr)
        return 1
    total = stats["questions"] or 1
    share = stats["several"] / total
    print(f"{'page':<56} {'chars':>7} {'chunks':>6} {'questions':>9} {'several':>7}")
    for page, row in stats["per_page"].items():
        print(
            f"{page:<56} {row['chars']:>7} {row['chunks']:>6} "
            f"{row['questions']:>9} {row['several']:>7}"
        )
    sections = ", ".join(f"{name} {count}" for name, count in stats["sections"].most_common())
    print(f"pages by section: {sections}")
    print(f"questions: {stats['questions']}  pages: {stats['pages']}  quotes: {stats['quotes']}")
    print(
        f"needing more than one {CHUNK_SIZE}/{CHUNK_OVERLAP} chunk: {stats['several']} "
        f"({share:.0%}); with a quote crossing a chunk boundary: {stats['crossing']} "
        f"({stats['crossing'] / total:.0%})"
    )
    print(f"mean evidence length: {stats['mean_evidence']:.0f} characters a question")
    short = []
    if stats["questions"] < MIN_QUESTIONS:
        short.append(f"fewer than {MIN_QUESTIONS} questions")
    if stats["pages"] < MIN_PAGES:
        short.append(f"fewer than {MIN_PAGES} pages")
    if share < MIN_MULTI_CHUNK:
        short.append(f"under {MIN_MULTI_CHUNK:.0%} needing more than one chunk")
    if short:
        print(f"below target: {'; '.join(short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
