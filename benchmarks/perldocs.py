"""Retrieval questions with gold evidence over the Perl 5.36 documentation (perl-doc).

Usage::

    apt-get install perl-doc                 # installs /usr/share/perl/5.36/pod/*.pod
    python benchmarks/perldocs.py --check    # render, validate the questions, print statistics

``window_retriever.load_file`` reads HTML and text files only and refuses ``.pod``, so every
page the questions name is first rendered to plain text with the standard ``pod2text``
(Pod::Text 4.14, shipped with perl 5.36; ``pod2text --utf8 -w 76``) into
:data:`CACHE` (``benchmarks/.cache/perldoc/<name>.txt``), which is what the benchmark loads. A
page is rendered again when its ``.pod`` is newer than the text. The cache is generated: do not
commit it (add ``benchmarks/.cache/`` to ``.gitignore``; the script also leaves a ``.gitignore``
of ``*`` inside the cache folder so that ``git status`` stays clean).

Data: ``benchmarks/data/perldocs_questions.jsonl``, one question a line::

    {"id": "pl-001", "page": "perlfunc.txt", "question": "...",
     "evidence": ["exact quote", ...], "answer": "short answer"}

``page`` is relative to the cache folder (``perlfunc.txt`` is rendered from ``perlfunc.pod``);
every ``evidence`` quote is an exact substring, occurring exactly once, of the page's text as
:func:`window_retriever.load_file` loads it, and the gold spans of a question are the character
spans of its quotes. ``answer`` is a short string that occurs inside the evidence.

A question *needs several chunks* when no single chunk of the page (split 400/40 as
``pydocs.py`` does) holds all of its gold spans; *crossing* is ``pydocs.py``'s measure (some
single quote fits inside no chunk).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

sys.path.insert(0, str(Path(__file__).parent))

from pydocs import CHUNK_OVERLAP, CHUNK_SIZE, chunk_ranges, crosses, read_entries

POD_ROOT = Path("/usr/share/perl/5.36/pod")
CACHE = Path(__file__).parent / ".cache" / "perldoc"
QUESTIONS = Path(__file__).parent / "data" / "perldocs_questions.jsonl"
POD2TEXT_OPTIONS = ("--utf8", "-w", "76")


def render(pages: Sequence[str], pod_root: Path = POD_ROOT, cache: Path = CACHE) -> None:
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


def load_pages(
    entries: Sequence[dict[str, Any]], pod_root: Path = POD_ROOT, cache: Path = CACHE
) -> list[Document]:
    """Render and load every page the entries name, in order of first mention.

    Returns:
        One document a page; ``metadata["page"]`` holds the page name.

    Raises:
        SystemExit: If a page cannot be rendered or loaded.
    """
    from window_retriever import load_file

    pages = list(dict.fromkeys(entry["page"] for entry in entries))
    render(pages, pod_root, cache)
    documents = []
    for page in pages:
        loaded = load_file(cache / page)
        if loaded.document is None:
            msg = f"cannot load {cache / page}: {loaded.error}"
            raise SystemExit(msg)
        loaded.document.metadata["page"] = page
        documents.append(loaded.document)
    return documents


def validate(entries: Sequence[dict[str, Any]]) -> None:
    """Check the keys, ids and evidence types of every entry.

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


def needs_several(spans: Sequence[Sequence[int]], ranges: Sequence[tuple[int, int]]) -> bool:
    """True if no single chunk range holds every span."""
    return not any(all(start <= s and e <= end for s, e in spans) for start, end in ranges)


def check(
    questions: Path = QUESTIONS, pod_root: Path = POD_ROOT, cache: Path = CACHE
) -> dict[str, Any]:
    """Validate the whole questions file and compute its statistics.

    Returns:
        Counts of questions, pages, multi-chunk and crossing questions, overall and per page.

    Raises:
        ValueError: If an entry is malformed or its evidence does not match its page.
    """
    entries = read_entries(questions)
    validate(entries)
    documents = {
        document.metadata["page"]: document for document in load_pages(entries, pod_root, cache)
    }
    per_page = {
        page: {"chars": len(document.page_content), "questions": 0, "several": 0}
        for page, document in documents.items()
    }
    ranges = {page: chunk_ranges(document) for page, document in documents.items()}
    several = crossing = evidence_chars = 0
    for entry in entries:
        spans = locate(entry, documents[entry["page"]].page_content)
        evidence_chars += sum(end - start for start, end in spans)
        per_page[entry["page"]]["questions"] += 1
        if needs_several(spans, ranges[entry["page"]]):
            several += 1
            per_page[entry["page"]]["several"] += 1
        crossing += crosses(spans, ranges[entry["page"]])
    for page, stats in per_page.items():
        stats["chunks"] = len(ranges[page])
    return {
        "questions": len(entries),
        "pages": len(documents),
        "several": several,
        "crossing": crossing,
        "mean_evidence": evidence_chars / (len(entries) or 1),
        "per_page": per_page,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Validate the questions file (``--check``) and print its statistics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="validate and print statistics")
    parser.add_argument("--pod-root", type=Path, default=POD_ROOT, help="the .pod files")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where pages are rendered")
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="the questions file")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    try:
        stats = check(args.questions, args.pod_root, args.cache)
    except ValueError as error:
        print(f"invalid: {error}", file=sys.stderr)
        return 1
    total = stats["questions"] or 1
    print(f"questions: {stats['questions']}  pages: {stats['pages']}")
    print(
        f"needing more than one {CHUNK_SIZE}/{CHUNK_OVERLAP} chunk: {stats['several']} "
        f"({stats['several'] / total:.0%}); with a quote crossing a chunk boundary: "
        f"{stats['crossing']} ({stats['crossing'] / total:.0%}); "
        f"mean evidence length: {stats['mean_evidence']:.0f} chars"
    )
    print(f"{'page':<24} {'chars':>7} {'chunks':>6} {'questions':>9} {'several':>7}")
    for page, row in sorted(stats["per_page"].items()):
        print(
            f"{page:<24} {row['chars']:>7} {row['chunks']:>6} "
            f"{row['questions']:>9} {row['several']:>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
