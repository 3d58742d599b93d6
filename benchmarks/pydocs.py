"""Retrieval questions with gold evidence over the Python 3.11 documentation.

Usage::

    apt-get install python3.11-doc           # installs /usr/share/doc/python3.11/html
    python benchmarks/pydocs.py --check      # validate the questions and print statistics

Data: ``benchmarks/data/pydocs_questions.jsonl``, one question a line::

    {"id": "pd-001", "page": "library/json.html", "question": "...",
     "evidence": ["exact quote", ...], "answer": "short answer"}

``page`` is relative to :data:`DOCS_ROOT`; every ``evidence`` quote is an exact substring,
occurring exactly once, of the page's text as :func:`window_retriever.ingestion._loaders.load_file`
loads it, and the gold spans of a question are the character spans of its quotes. ``answer``
(optional) is a short string that occurs inside the evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

DOCS_ROOT = Path("/usr/share/doc/python3.11/html")
QUESTIONS = Path(__file__).parent / "data" / "pydocs_questions.jsonl"
CHUNK_SIZE = 400
CHUNK_OVERLAP = 40


def read_entries(path: Path = QUESTIONS) -> list[dict[str, Any]]:
    """Read the questions file.

    Args:
        path: The JSON Lines file of questions.

    Returns:
        One dict a non-blank line, in file order.
    """
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as error:
                msg = f"{path}:{number}: not JSON: {error}"
                raise ValueError(msg) from error
    return entries


def load_pages(root: Path = DOCS_ROOT) -> list[Document]:
    """Load every page that the questions file names, in order of first mention.

    Args:
        root: The directory of the HTML documentation.

    Returns:
        One document a page; ``metadata["page"]`` holds the page path relative to ``root``.

    Raises:
        SystemExit: If the documentation is not installed or a page cannot be loaded.
    """
    from window_retriever import load_file

    if not root.is_dir():
        msg = f"{root} not found: install the documentation with `apt-get install python3.11-doc`"
        raise SystemExit(msg)
    pages = list(dict.fromkeys(entry["page"] for entry in read_entries()))
    documents = []
    for page in pages:
        loaded = load_file(root / page)
        if loaded.document is None:
            msg = (
                f"cannot load {root / page}: {loaded.error} "
                "(is `apt-get install python3.11-doc` complete?)"
            )
            raise SystemExit(msg)
        loaded.document.metadata["page"] = page
        documents.append(loaded.document)
    return documents


def questions(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """Build evaluation rows, locating every evidence quote in its page.

    Args:
        documents: The pages from :func:`load_pages`.

    Returns:
        Rows ``{"id", "question", "source", "answer", "gold_spans"}``; ``source`` is the
        page document's ``metadata["source"]`` and ``gold_spans`` are ``[start, end]`` pairs.

    Raises:
        ValueError: If a page is not among ``documents``, or a quote is missing from its page,
            occurs in it more than once, or the answer is not inside the evidence.
    """
    by_page = {document.metadata.get("page"): document for document in documents}
    by_source = {Path(document.metadata["source"]).as_posix(): document for document in documents}
    rows = []
    for entry in read_entries():
        ident = entry.get("id", "?")
        document = by_page.get(entry["page"]) or by_source.get(
            (DOCS_ROOT / entry["page"]).resolve().as_posix()
        )
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
        if answer is not None and not any(answer in quote for quote in entry["evidence"]):
            msg = f"{ident}: answer {answer!r} is not inside its evidence"
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


def chunk_ranges(document: Document) -> list[tuple[int, int]]:
    """Split a page as the product ingests it by default and return each chunk's range.

    Args:
        document: A page from :func:`load_pages`.

    Returns:
        ``(start, end)`` character ranges, end exclusive, one a chunk.
    """
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from window_retriever import WindowSplitter

    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(
            chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, add_start_index=True
        )
    )
    return [
        (chunk.metadata["start_index"], chunk.metadata["start_index"] + len(chunk.page_content))
        for chunk in splitter.split_documents([document])
    ]


def crosses(spans: Sequence[Sequence[int]], ranges: Sequence[tuple[int, int]]) -> bool:
    """True if some span fits inside no single chunk range."""
    return any(not any(start <= s and e <= end for start, end in ranges) for s, e in spans)


def check(root: Path = DOCS_ROOT) -> dict[str, Any]:
    """Validate the whole questions file and compute its statistics.

    Args:
        root: The directory of the HTML documentation.

    Returns:
        Counts of questions, pages, crossing and fitting questions, overall and per page.

    Raises:
        ValueError: If an entry is malformed or its evidence does not match its page.
    """
    entries = read_entries()
    seen: set[str] = set()
    for entry in entries:
        missing = {"id", "page", "question", "evidence"} - entry.keys()
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
    documents = load_pages(root)
    rows = questions(documents)
    ranges = {document.metadata["source"]: chunk_ranges(document) for document in documents}
    per_page: dict[str, dict[str, int]] = {}
    pages = {document.metadata["source"]: document.metadata["page"] for document in documents}
    for document in documents:
        per_page[document.metadata["page"]] = {
            "chars": len(document.page_content),
            "chunks": len(ranges[document.metadata["source"]]),
            "questions": 0,
            "crossing": 0,
        }
    crossing = 0
    for row in rows:
        stats = per_page[pages[row["source"]]]
        stats["questions"] += 1
        if crosses(row["gold_spans"], ranges[row["source"]]):
            crossing += 1
            stats["crossing"] += 1
    return {
        "questions": len(rows),
        "pages": len(documents),
        "crossing": crossing,
        "fitting": len(rows) - crossing,
        "with_answer": sum(row["answer"] is not None for row in rows),
        "per_page": per_page,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Validate the questions file (``--check``) and print its statistics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="validate and print statistics")
    parser.add_argument("--root", type=Path, default=DOCS_ROOT, help="the HTML documentation")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    try:
        stats = check(args.root)
    except ValueError as error:
        print(f"invalid: {error}", file=sys.stderr)
        return 1
    total = stats["questions"] or 1
    print(f"questions: {stats['questions']}  pages: {stats['pages']}")
    print(
        f"evidence crossing a {CHUNK_SIZE}/{CHUNK_OVERLAP} chunk boundary: {stats['crossing']} "
        f"({stats['crossing'] / total:.0%}); fitting in one chunk: {stats['fitting']} "
        f"({stats['fitting'] / total:.0%}); with a short answer: {stats['with_answer']}"
    )
    print(f"{'page':<32} {'chars':>7} {'chunks':>6} {'questions':>9} {'crossing':>8}")
    for page, row in stats["per_page"].items():
        print(
            f"{page:<32} {row['chars']:>7} {row['chunks']:>6} "
            f"{row['questions']:>9} {row['crossing']:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
