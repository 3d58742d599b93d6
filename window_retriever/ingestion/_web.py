"""Web pages to text, and what every loader returns.

Fetching a page: a ``requests`` session bounded in time and size (a slow or huge page fails
on its own), LangChain's WebBaseLoader, the charset the server or page declares. Turning any
HTML (a page, or a local ``.html`` file) into text, its title and headings. And the result of
every loader (:class:`Loaded`, :class:`LoadOptions`, :func:`_finish`): ``_loaders`` (files,
directories, decoding, ``load_sources``) imports this module, never the reverse, so what both
need lives here. Split from ``_loaders`` to keep each module short.
"""

from __future__ import annotations

import codecs
import html
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from langchain_core.documents import Document

from window_retriever._errors import Message, Option
from window_retriever._version import __version__
from window_retriever.ingestion._headers import SECTION_HEADINGS, Heading, locate_headings

USER_AGENT = f"window-retriever/{__version__} (+https://pypi.org/project/window-retriever/)"
_ABANDONED = "abandoned"
EMPTY = "no text"
"""The error of a source with no text: for a file, as good as gone."""
BINARY = "binary content, not text"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TITLE = re.compile(r"<head.*?<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
"""10 MiB: far above any real documentation page, far below what hurts (a gzip bomb)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """One source: its name, and either its document or why it failed."""

    name: str
    document: Document | None = None
    error: str | None = None


class LoadOptions:
    """How sources are fetched and parsed.

    Args:
        selectors: CSS classes to keep (a ``SoupStrainer``); empty keeps the whole page.
        timeout: Seconds one web page may take in all: connecting, redirects and the whole
            body (not each read).
        requests_per_second: The most requests a second to one host.
        user_agent: The ``User-Agent`` header sent with every request.
        max_bytes: The largest page or file, in bytes after decompression; a larger one is
            refused without reading the rest.
    """

    def __init__(
        self,
        *,
        selectors: Sequence[str] = (),
        timeout: float = 20.0,
        requests_per_second: float = 2.0,
        user_agent: str = USER_AGENT,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.selectors = tuple(selectors)
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.interval = 1.0 / requests_per_second if requests_per_second > 0 else 0.0
        self.user_agent = user_agent


def clean_text(text: str) -> str:
    """Collapse the blank runs and trailing spaces that HTML leaves in extracted text."""
    lines = [line.rstrip() for line in text.removeprefix("\ufeff").splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _finish(
    name: str,
    text: str,
    metadata: dict[str, Any],
    options: LoadOptions,
    headings: Callable[[str], list[Heading]] | None = None,
) -> Loaded:
    """The loaded document, its text cleaned; its section headings placed in that text."""
    text = clean_text(text)
    if len(_CONTROL.findall(text[:100_000])) > max(8, len(text[:100_000]) // 200):
        return Loaded(name, error=BINARY)
    if not text:
        if not options.selectors:
            return Loaded(name, error=EMPTY)
        classes = tuple(options.selectors)
        said = f"class {' '.join(classes)}"
        return Loaded(
            name, error=Message(EMPTY, " in the elements of ", Option("selectors", classes, said))
        )
    found = headings(text) if headings is not None else []
    if found:
        metadata[SECTION_HEADINGS] = [list(heading) for heading in found]
    return Loaded(name, Document(page_content=text, metadata=metadata))


def _html_headings(soup: Any) -> Callable[[str], list[Heading]]:
    """The page's ``h1``-``h3`` (read now, before its text is taken), to place in its text."""
    found = [(int(tag.name[1]), tag.get_text()) for tag in soup.find_all(["h1", "h2", "h3"])]
    return lambda text: locate_headings(text, found)


def _soup(html: str, selectors: Sequence[str]) -> Any:
    from bs4 import BeautifulSoup
    from bs4.filter import SoupStrainer

    if selectors:
        return BeautifulSoup(html, "html.parser", parse_only=SoupStrainer(class_=list(selectors)))
    return BeautifulSoup(html, "html.parser")


class _NotHTMLError(Exception):
    pass


class _LimitError(Exception):
    pass


class _AbandonedError(_LimitError):
    """The request still runs in a thread of its own: its session must not be used again."""


def _session(options: LoadOptions) -> tuple[Any, dict[str, str]]:
    import requests

    class BoundedSession(requests.Session):
        """Every page within one deadline and ``max_bytes``; its declared charset kept."""

        final_url = ""

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            deadline = time.monotonic() + options.timeout
            kwargs["stream"] = True
            kwargs["timeout"] = options.timeout
            response = super().request(method, url, *args, **kwargs)
            self.final_url = urlsplit(response.url)._replace(fragment="").geturl()
            body = bytearray()
            try:
                while True:
                    if time.monotonic() > deadline:
                        raise _LimitError(f"timed out after {options.timeout:g} s")
                    piece = response.raw.read1(65536, decode_content=True)
                    if not piece:
                        break
                    body += piece
                    if len(body) > options.max_bytes:
                        raise _LimitError(_too_large(options.max_bytes))
            finally:
                response.close()
            response._content = bytes(body)
            response._content_consumed = True
            response.encoding = _charset(response)
            found = _TITLE.search(response.text[:200_000])
            if found:  # kept here: a --selector strains the page before WebBaseLoader sees it
                titles[self.final_url] = " ".join(html.unescape(found.group(1)).split())
            return response

    def only_html(response: Any, *args: Any, **kwargs: Any) -> None:
        if not response.ok or response.is_redirect:
            return  # a redirect's own type does not matter, the page it leads to does
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind not in _HTML_TYPES:
            response.close()  # the body is not wanted: let the connection go now
            raise _NotHTMLError(kind or "none sent")

    session = BoundedSession()
    titles: dict[str, str] = {}
    session.headers.update(
        {"User-Agent": options.user_agent, "Accept": "text/html,application/xhtml+xml;q=0.9"}
    )
    session.hooks["response"].append(only_html)
    return session, titles


def _charset(response: Any) -> str:
    """The declared charset (header, then ``<meta charset>``); a guess only without one."""
    declared = "charset=" in response.headers.get("Content-Type", "").lower()
    if declared and response.encoding:
        return str(response.encoding)
    found = _META_CHARSET.search(response.content[:4096])
    if found:
        name = found.group(1).decode("ascii", "replace")
        try:
            codecs.lookup(name)
        except LookupError:
            pass
        else:
            return name
    return str(response.apparent_encoding or "utf-8")


def _too_large(limit: int) -> Message:
    return Message(
        f"larger than {limit / 1024 / 1024:g} MiB; raise ", Option("max_bytes"), " to ingest it"
    )


def _web_base_loader() -> Any:
    # WebBaseLoader still lives in langchain-community, which warns on import that it is
    # being sunset; and it warns at import when USER_AGENT is unset. We send our own agent.
    os.environ.setdefault("USER_AGENT", USER_AGENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.document_loaders import WebBaseLoader
    return WebBaseLoader


def _load_url(url: str, options: LoadOptions, session: Any, titles: dict[str, str]) -> Loaded:
    import requests

    loader_class = _web_base_loader()
    bs_kwargs = {}
    if options.selectors:
        from bs4.filter import SoupStrainer

        bs_kwargs["parse_only"] = SoupStrainer(class_=list(options.selectors))
    loader = loader_class(
        web_paths=[url],
        session=session,
        requests_kwargs={"timeout": options.timeout},
        raise_for_status=True,
        bs_kwargs=bs_kwargs,
        default_parser="html.parser",
        autoset_encoding=False,  # keep the charset the server or the page declares
    )
    try:
        soup = _within(options.timeout, loader.scrape)
    except _NotHTMLError as error:
        return Loaded(url, error=f"not HTML (content type {error})")
    except _AbandonedError:
        return Loaded(url, error=_ABANDONED)
    except _LimitError as error:
        return Loaded(url, error=error.args[0])  # the message itself: it names its options
    except requests.HTTPError as error:
        response = error.response
        status = (
            f"HTTP {response.status_code} {response.reason}" if response is not None else str(error)
        )
        return Loaded(url, error=status)
    except requests.Timeout:
        return Loaded(url, error=f"timed out after {options.timeout:g} s")
    except requests.ConnectionError as error:
        return Loaded(url, error=f"cannot connect ({_root_cause(error)})")
    except requests.RequestException as error:
        return Loaded(url, error=f"request failed ({_root_cause(error)})")
    final = session.final_url or url
    metadata: dict[str, Any] = {"source": final}  # the page's own address, after redirects
    title = titles.get(final) or _head_title(soup)
    if " ".join(title.split()):
        metadata["title"] = " ".join(title.split())
    language = soup.find("html")
    if language is not None and isinstance(language.get("lang"), str):
        metadata["language"] = language["lang"]
    headings = _html_headings(soup)
    return _finish(url, _html_text(soup), metadata, options, headings)


_BLOCKS = [
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
]


def _within(seconds: float, work: Any) -> Any:
    """Run ``work()`` and give up after ``seconds`` (plus a little), whatever it waits on.

    The deadline inside the session bounds the body; this bounds the rest (slowly sent
    headers, a chain of slow redirects). A call given up on goes on in a daemon thread until
    its server lets go; its session is not used again.
    """
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as error:  # handed to the caller, whatever it is
            failed.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds + 0.5)
    if thread.is_alive():
        raise _AbandonedError(f"timed out after {seconds:g} s")
    if failed:
        raise failed[0]
    return done[0]


def _html_text(soup: Any) -> str:
    """A page's text: title and scripts left out, block elements never glued together.

    Where the HTML already puts whitespace between two blocks, it is kept as it is (so the
    text of a well-formatted page does not change); where blocks touch (``</p><p>``), a
    newline separates them.
    """
    for element in soup.find_all(["title", "script", "style", "noscript", "template"]):
        element.decompose()
    for element in soup.find_all(_BLOCKS):
        element.insert_before(_SEAM)
        element.insert_after(_SEAM)
    return _SEAMS.sub(_seam, str(soup.get_text()))


_SEAM = "\x00"
_SEAMS = re.compile(r"[\s\x00]*\x00[\s\x00]*")


def _seam(match: re.Match[str]) -> str:
    whitespace = match.group(0).replace(_SEAM, "")
    return whitespace if whitespace else "\n"


def _page_title(html: str) -> str:
    """The ``<title>`` of a page's head, parsing no more of the page than its head.

    A whole page costs as much to parse for its title as for its text; the head up to its
    closing tag (after the title's) gives the same title. A page where that finds none is
    parsed whole.
    """
    lower = html.lower()
    title_end = lower.find("</title")
    head_end = lower.find("</head", title_end) if title_end != -1 else -1
    close = lower.find(">", head_end) if head_end != -1 else -1
    if close != -1:
        title = _head_title(_soup(html[: close + 1], ()))
        if title:
            return title
    return _head_title(_soup(html, ()))


def _head_title(soup: Any) -> str:
    """The page's ``<title>`` from its head (an ``<svg><title>`` in the body is not it)."""
    head = soup.head
    title = head.find("title") if head is not None else None
    return " ".join(title.get_text().split()) if title is not None else ""


def _root_cause(error: BaseException) -> str:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return f"{type(error).__name__}: {error}".split("\n")[0][:200]
