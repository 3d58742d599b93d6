"""Contextual chunk headers: what text is embedded for a chunk.

A chunk is embedded as a header, a blank line, then its own text; the header is its
document's title and the path of section headings it falls under (``"Errors and Exceptions >
Handling Exceptions"``). The stored and returned text stays the chunk itself.
:class:`~window_retriever.WindowSplitter` stamps the header on each chunk
(``metadata["context_header"]``), and every embedding path (the ingest pipeline, and a store
that embeds records itself) embeds :func:`embedded_text`.

Headings come from the loaders: a source document may carry
``metadata["section_headings"]``, a list of ``[start, level, text]`` (a character offset into
its text, a level from 1 to 6, the heading's text), in text order; the splitter consumes it
(it is not stored on chunks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from window_retriever._errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_core.documents import Document

DEFAULT_HEADERS = False
"""Whether chunks are embedded with their context header by default (``WindowSplitter``,
``ingest``, the ``ingest`` command). Off: on the Python-docs dev set headers helped plain top
chunks but cost the default retriever (adaptive windows over hybrid candidates), and LoCoMo
has no titles (docs/benchmarks.md#contextual-chunk-headers)."""
CONTEXT_HEADER = "context_header"
"""Chunk metadata: the header embedded before the chunk's text (absent: none)."""
SECTION_HEADINGS = "section_headings"
"""Source document metadata: ``[start, level, text]`` of each heading, in text order."""
HEADER_SCHEME = "title > h1-h3 path; v1"
"""Names how headers are made; part of every file version made with headers on, so changing
how they are made re-embeds every file on its next ingest."""
MAX_HEADER = 200
"""The longest header, in characters (MiniLM reads 256 tokens: the chunk must keep its room)."""
_SEPARATOR = " > "
_PERMALINK = "¶#🔗 \t"

Heading = tuple[int, int, str]


def embedded_text(chunk: Document) -> str:
    """The text embedded for ``chunk``: its ``context_header``, a blank line, then its text."""
    header = chunk.metadata.get(CONTEXT_HEADER)
    if isinstance(header, str) and header:
        return f"{header}\n\n{chunk.page_content}"
    return chunk.page_content


def headings_of(metadata: Mapping[str, Any], length: int) -> list[Heading]:
    """The document's ``section_headings``, checked; ``[]`` when it has none.

    Raises:
        ConfigurationError: They are not ``[start, level, text]`` entries with a start inside
            the text, a level from 1 to 6, in text order.
    """
    raw = metadata.get(SECTION_HEADINGS)
    if raw is None:
        return []
    headings: list[Heading] = []
    for entry in raw if isinstance(raw, list | tuple) else [raw]:
        heading = _heading(entry, length)
        if heading is None or (headings and heading[0] < headings[-1][0]):
            msg = (
                f"metadata['{SECTION_HEADINGS}'] must list [start, level, text] of each heading "
                f"in text order (start a character offset into the text, level 1-6), got "
                f"{entry!r}; fix or remove it"
            )
            raise ConfigurationError(msg)
        headings.append(heading)
    return headings


def _heading(entry: Any, length: int) -> Heading | None:
    if not isinstance(entry, list | tuple) or len(entry) != 3:
        return None
    start, level, text = entry
    if not (_whole(start) and _whole(level) and isinstance(text, str)):
        return None
    if not (0 <= start <= length and 1 <= level <= 6):
        return None
    return (start, level, text)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def heading_paths(headings: Sequence[Heading], starts: Sequence[int]) -> list[list[str]]:
    """For each start offset, the path of headings above it (those at or before it)."""
    stack: list[tuple[int, str]] = []
    position = 0
    order = sorted(range(len(starts)), key=lambda n: starts[n])
    found: dict[int, list[str]] = {}
    for number in order:
        start = starts[number]
        while position < len(headings) and headings[position][0] <= start:
            _, level, text = headings[position]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            position += 1
        found[number] = [text for _, text in stack]
    return [found[number] for number in range(len(starts))]


def make_header(title: Any, path: Iterable[str]) -> str:
    """``"Title > Heading > Subheading"``, repeated parts left out, at most ``MAX_HEADER`` long.

    A heading already contained in the title (the page's ``h1`` in its ``<title>``) or equal
    to the part before it adds nothing and is left out.
    """
    parts: list[str] = []
    title_text = clean_heading(title) if isinstance(title, str) else ""
    if title_text:
        parts.append(title_text)
    for heading in path:
        text = clean_heading(heading)
        if not text or (title_text and text.casefold() in title_text.casefold()):
            continue
        if parts and parts[-1].casefold() == text.casefold():
            continue
        parts.append(text)
    header = _SEPARATOR.join(parts)
    if len(header) > MAX_HEADER:
        header = header[: MAX_HEADER - 1].rstrip() + "…"
    return header


def clean_heading(text: str) -> str:
    """A heading's text on one line, without a trailing permalink sign (``¶``)."""
    return " ".join(text.split()).rstrip(_PERMALINK)


_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_ATX = re.compile(r"^[ ]{0,3}(#{1,3})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def markdown_headings(text: str) -> list[Heading]:
    """The ``#``, ``##`` and ``###`` heading lines of Markdown text (not inside code fences)."""
    headings: list[Heading] = []
    fenced = False
    offset = 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if _FENCE.match(bare):
            fenced = not fenced
        elif not fenced:
            found = _ATX.match(bare)
            if found:
                headings.append((offset, len(found.group(1)), found.group(2).strip()))
        offset += len(line)
    return headings


def locate_headings(text: str, found: Sequence[tuple[int, str]]) -> list[Heading]:
    """Place headings found in a parsed page (``(level, text)``, in page order) in its text.

    Each is looked for after the one before, its words separated by any whitespace (the text
    was cleaned after parsing); one not found is left out.
    """
    headings: list[Heading] = []
    cursor = 0
    for level, heading in found:
        words = heading.split()[:24]
        if not words:
            continue
        pattern = re.compile(r"\s+".join(re.escape(word) for word in words))
        match = pattern.search(text, cursor)
        if match is None:
            continue
        headings.append((match.start(), level, clean_heading(heading)))
        cursor = match.end()
    return headings
