"""Loading sources for ingestion: web pages (LangChain's WebBaseLoader), local HTML and text.

Every source becomes one :class:`Loaded`: a document, or the reason it could not be loaded,
so that one bad source never stops the others.
"""

from __future__ import annotations

import html
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langchain_core.documents import Document

from window_retriever._version import __version__

USER_AGENT = f"window-retriever/{__version__} (+https://pypi.org/project/window-retriever/)"
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst"})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


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
        timeout: Seconds to wait for a web server.
        requests_per_second: The most requests a second to one host.
        user_agent: The ``User-Agent`` header sent with every request.
    """

    def __init__(
        self,
        *,
        selectors: Sequence[str] = (),
        timeout: float = 20.0,
        requests_per_second: float = 2.0,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.selectors = tuple(selectors)
        self.timeout = timeout
        self.interval = 1.0 / requests_per_second if requests_per_second > 0 else 0.0
        self.user_agent = user_agent


def is_url(spec: str) -> bool:
    """True for ``http://`` and ``https://`` sources."""
    return urlsplit(spec).scheme in ("http", "https")


def expand(specs: Iterable[str]) -> list[str]:
    """Expand directories into the HTML and text files below them, in a stable order."""
    out: list[str] = []
    for spec in specs:
        path = Path(spec)
        if not is_url(spec) and path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix.lower() in HTML_SUFFIXES | TEXT_SUFFIXES
            )
            out.extend(str(p) for p in files)
        else:
            out.append(spec)
    return out


def load_sources(specs: Sequence[str], options: LoadOptions) -> Iterator[Loaded]:
    """Load each source in turn; URLs politely (one host at most ``requests_per_second``)."""
    last_request: dict[str, float] = {}
    session: tuple[Any, dict[str, str]] | None = None
    for spec in specs:
        if is_url(spec):
            host = urlsplit(spec).netloc
            wait = last_request.get(host, -1e9) + options.interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            session = session or _session(options)
            try:
                yield _load_url(spec, options, *session)
            finally:
                last_request[host] = time.monotonic()
        else:
            yield load_file(Path(spec), options)


def load_file(path: Path, options: LoadOptions | None = None) -> Loaded:
    """Load a local HTML or text file."""
    options = options or LoadOptions()
    name = str(path)
    if not path.exists():
        return Loaded(name, error="no such file or directory")
    if path.suffix.lower() not in HTML_SUFFIXES | TEXT_SUFFIXES:
        kinds = ", ".join(sorted(HTML_SUFFIXES | TEXT_SUFFIXES))
        return Loaded(name, error=f"not an HTML or text file (expected one of {kinds})")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return Loaded(name, error="not UTF-8 text")
    except OSError as error:
        return Loaded(name, error=f"cannot read: {error.strerror or error}")
    metadata: dict[str, Any] = {"source": str(path.resolve())}
    if path.suffix.lower() in HTML_SUFFIXES:
        soup = _soup(raw, options.selectors)
        title = _soup(raw, ()).title
        if title is not None and title.get_text().strip():
            metadata["title"] = title.get_text().strip()
        text = soup.get_text()
    else:
        text = raw
    return _finish(name, text, metadata, options)


def clean_text(text: str) -> str:
    """Collapse the blank runs and trailing spaces that HTML leaves in extracted text."""
    lines = [line.rstrip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _finish(name: str, text: str, metadata: dict[str, Any], options: LoadOptions) -> Loaded:
    text = clean_text(text)
    if not text:
        where = f" after --selector {' '.join(options.selectors)}" if options.selectors else ""
        return Loaded(name, error=f"no text{where}")
    return Loaded(name, Document(page_content=text, metadata=metadata))


def _soup(html: str, selectors: Sequence[str]) -> Any:
    from bs4 import BeautifulSoup
    from bs4.filter import SoupStrainer

    if selectors:
        return BeautifulSoup(html, "html.parser", parse_only=SoupStrainer(class_=list(selectors)))
    return BeautifulSoup(html, "html.parser")


class _NotHTMLError(Exception):
    pass


def _session(options: LoadOptions) -> tuple[Any, dict[str, str]]:
    import requests

    def only_html(response: Any, *args: Any, **kwargs: Any) -> None:
        if not response.ok:
            return
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind not in _HTML_TYPES:
            raise _NotHTMLError(kind or "no content type")
        # A --selector strains the page before WebBaseLoader looks for its <title>: keep it here.
        found = _TITLE.search(response.text)
        if found:
            titles[response.url] = html.unescape(found.group(1)).strip()

    session = requests.Session()
    titles: dict[str, str] = {}
    session.headers.update(
        {"User-Agent": options.user_agent, "Accept": "text/html,application/xhtml+xml;q=0.9"}
    )
    session.hooks["response"].append(only_html)
    return session, titles


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
    )
    try:
        (document,) = loader.load()
    except _NotHTMLError as error:
        return Loaded(url, error=f"not HTML (content type {error})")
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
    metadata = {k: v for k, v in document.metadata.items() if isinstance(v, str)}
    metadata["source"] = url
    if "title" not in metadata and titles.get(url):
        metadata["title"] = titles[url]
    return _finish(url, document.page_content, metadata, options)


def _root_cause(error: BaseException) -> str:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return f"{type(error).__name__}: {error}".split("\n")[0][:200]
