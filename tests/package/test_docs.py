"""The docs hold together: a short README that links every page, and no link that leads nowhere.

Links are read as Markdown links outside fenced code; a relative link must name a file of the
repository, and a `#anchor` a heading of its page (GitHub's way of making anchors).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def prose(page: Path) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page))


def slug(heading: str) -> str:
    """The anchor GitHub makes of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(prose(page)):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def test_the_slug_is_githubs() -> None:
    assert slug("`ContextWindowRetriever(vectorstore, **options)`") == (
        "contextwindowretrievervectorstore-options"
    )
    assert slug("`window-retriever ingest URL_OR_PATH... [options]`") == (
        "window-retriever-ingest-url_or_path-options"
    )
    assert slug("Budgets: characters or tokens") == "budgets-characters-or-tokens"


def test_the_readme_is_the_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "move the detail to a page in docs/"
    for command in ("make demo", "make test"):
        assert re.search(rf"^{command} +# ", text, re.MULTILINE), command
        assert re.search(rf"^{command.split()[1]}:", makefile, re.MULTILINE), command


def test_every_docs_page_is_linked_from_the_readme() -> None:
    assert {page.name for page in DOCS} >= {
        "api.md",
        "benchmarks.md",
        "cli.md",
        "CONTRIBUTING.md",
        "how-it-works.md",
        "scaling.md",
    }
    linked = {(ROOT / target.split("#")[0]).resolve() for target in links(README)}
    assert [page.name for page in DOCS if page.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_file():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert broken == []


def test_every_retriever_option_is_in_the_api_options_table() -> None:
    from langchain_core.retrievers import BaseRetriever

    from window_retriever import ContextWindowRetriever
    from window_retriever.retrieval._params import OVERRIDABLE

    text = prose(ROOT / "docs" / "api.md")
    section = text.split("## `ContextWindowRetriever(vectorstore, **options)`")[1].split("\n## ")[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))
    options = set(ContextWindowRetriever.model_fields) - set(BaseRetriever.model_fields)
    assert sorted(options - rows) == []
    assert set(OVERRIDABLE) <= options


def test_every_metadata_key_of_a_returned_window_is_in_the_api_table() -> None:
    """Each key a window's document can carry has its row in "What a retriever returns"."""
    from window_retriever.core._windows import Chunk, Cut, Hit, Window
    from window_retriever.retrieval._records import to_document, without_repeated_texts

    text = prose(ROOT / "docs" / "api.md")
    section = text.split("## What a retriever returns")[1].split("\n## ")[0]
    rows = {
        key
        for cell in re.findall(r"^\| ([^|]+) \|", section, re.MULTILINE)
        for key in re.findall(r"`(\w+)`", cell)
    }
    chunks = [
        Chunk(id=f"f:{i}", text=f"text {i}.", file_id="f", index=i, start=8 * i) for i in (0, 1)
    ]
    window = Window(
        tuple(chunks),
        (Hit(chunks[0], 0.2, ranks=(("vector", 1), ("keyword", 2))),),
        "text 0.text 1.",
        Cut("next", 12),
    )
    documents = [to_document(window, "cosine", over_budget=True) for _ in range(2)]
    [document] = without_repeated_texts(documents)  # the second is a copy: `also_in`
    keys = {*document.metadata, "source", "keyword_leg"}  # (those two: set elsewhere)
    assert sorted(keys - rows) == []
