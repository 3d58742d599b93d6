"""Loading sources for ingestion: web pages (LangChain's WebBaseLoader), local HTML and text.

Every source becomes one :class:`Loaded`: a document, or the reason it could not be loaded,
so that one bad source never stops the others.
"""

from __future__ import annotations

import codecs
import errno
import html
import os
import re
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langchain_core.documents import Document

from window_retriever._errors import Message, Option
from window_retriever._version import __version__
from window_retriever.ingestion._headers import (
    SECTION_HEADINGS,
    Heading,
    locate_headings,
    markdown_headings,
)

USER_AGENT = f"window-retriever/{__version__} (+https://pypi.org/project/window-retriever/)"
_ABANDONED = "abandoned"
GONE = "no such file or directory"
"""The error of a local source that is not there (any more)."""
EMPTY = "no text"
"""The error of a source with no text: for a file, as good as gone."""
BINARY = "binary content, not text"
NAME_NOT_UTF8 = "its name is not valid UTF-8; rename it"
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst"})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TITLE = re.compile(r"<head.*?<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?---[ \t]*(\n|\Z)", re.DOTALL)
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


def is_url(spec: str) -> bool:
    """True for ``http://`` and ``https://`` sources."""
    return urlsplit(spec).scheme in ("http", "https")


def expand(
    specs: Iterable[str],
    unreadable: list[str] | None = None,
    repeated: list[tuple[str, str]] | None = None,
) -> list[str]:
    """Expand directories into the HTML and text files below them, in a stable order.

    Web addresses lose their ``#fragment`` (it names a place in a page, not another page),
    and a source given twice is loaded once. Symbolic links are followed, and a file keeps
    the path it was found by as its name (the link, not its target).

    A folder that cannot be listed (no permission, or a symbolic link whose target is gone:
    a moved or unmounted folder) is appended to ``unreadable`` (when given) instead of being
    passed over in silence: what is stored below it is not known to be gone. A dangling link
    with an HTML or text suffix is a file that is gone: it is listed, and loading it fails
    with :data:`GONE`.

    A folder or file reached a second time through a link is walked or listed once: a link
    to a folder above it (a loop) or two links to one folder or file (or two hard links)
    would otherwise ingest the same text under several names, or never end. Each one passed
    over is appended to ``repeated`` (when given) as ``(path, the path already walked)``.
    Which of two names is kept follows the walk's sorted order; only what one walk finds is
    compared, so a file given by name and also found in a folder is loaded under both.

    Raises:
        ValueError: A source is empty (often an unset shell variable): loading it would
            mean the current directory.
    """
    out: list[str] = []
    specs = list(specs)
    check_sources(specs)
    for spec in specs:
        if is_url(spec):
            out.append(urlsplit(spec)._replace(fragment="").geturl())
        elif _is_dir(spec):
            out.extend(_walk(spec, unreadable, repeated))
        else:
            out.append(spec)
    return list(dict.fromkeys(out))


def check_sources(specs: Iterable[str]) -> None:
    """Refuse an empty source (an unset shell variable?): it would mean the current directory.

    Raises:
        ValueError: A source is empty or blank.
    """
    if any(not spec.strip() for spec in specs):
        msg = (
            "a source is an empty string (an unset shell variable?); name a URL, a file "
            "or a directory, e.g. '.' for the current directory"
        )
        raise ValueError(msg)


def _is_dir(spec: str) -> bool:
    try:
        return Path(spec).is_dir()
    except OSError:
        return False


def _walk(
    directory: str,
    unreadable: list[str] | None,
    repeated: list[tuple[str, str]] | None,
) -> list[str]:
    """The files below ``directory``, each real folder and file once (see :func:`expand`)."""
    suffixes = HTML_SUFFIXES | TEXT_SUFFIXES
    walked: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) -> the path it was found by
    found: list[str] = []

    def cannot_list(path: str) -> None:
        if unreadable is not None:
            unreadable.append(path)

    def seen_before(path: str, status: os.stat_result) -> bool:
        key = (status.st_dev, status.st_ino)
        if key in walked:
            if repeated is not None:
                repeated.append((path, walked[key]))
            return True
        walked[key] = path
        return False

    def visit(folder: str, status: os.stat_result) -> None:
        if seen_before(folder, status):
            return
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            cannot_list(folder)
            return
        for entry in entries:
            try:
                status = entry.stat()  # follows links
            except OSError:
                if Path(entry.name).suffix.lower() in suffixes:
                    found.append(entry.path)  # a file that is gone, or a loop: load_file says
                else:
                    cannot_list(entry.path)  # a link to a folder that is gone, perhaps
                continue
            if stat.S_ISDIR(status.st_mode):
                visit(entry.path, status)
            elif Path(entry.name).suffix.lower() in suffixes and (
                not stat.S_ISREG(status.st_mode) or not seen_before(entry.path, status)
            ):
                found.append(entry.path)

    try:
        top = os.stat(directory)
    except OSError:
        cannot_list(directory)
        return []
    visit(directory, top)
    return sorted(found)


def printable(name: str) -> str:
    r"""Return ``name`` made safe to print on one line.

    Bytes that are not UTF-8 (kept by the file system's decoding as lone surrogates) and
    control characters are shown escaped, ``caf\xe9.txt``; everything else as it is.
    """
    out = []
    for char in name:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as os.fsdecode keeps it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF or code < 0x20 or code == 0x7F:
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)


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
                loaded = _guarded(spec, _load_url, spec, options, *session)
                if loaded.error == _ABANDONED:
                    session = None  # a thread still holds it
                    loaded = Loaded(spec, error=f"timed out after {options.timeout:g} s")
                yield loaded
            finally:
                last_request[host] = time.monotonic()
        else:
            yield _guarded(spec, load_file, Path(spec), options)


def _guarded(name: str, load: Any, *args: Any) -> Loaded:
    """Run one loader; whatever goes wrong stays that source's failure."""
    try:
        return load(*args)  # type: ignore[no-any-return]
    except Exception as error:
        return Loaded(name, error=f"could not be loaded ({_root_cause(error)})")


def load_file(path: Path, options: LoadOptions | None = None) -> Loaded:
    """Load a local HTML or text file (regular files only, at most ``max_bytes``).

    Text in another encoding than UTF-8 is decoded (see :func:`decode_text`) and the
    encoding recorded in the metadata as ``encoding``; binary content is refused.
    """
    options = options or LoadOptions()
    name = str(path)
    if not _utf8_name(name):
        return Loaded(name, error=NAME_NOT_UTF8)
    try:
        status = path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return Loaded(name, error="a symbolic link loop")
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return Loaded(name, error=GONE)
        return Loaded(name, error=f"cannot read: {error.strerror or error}")
    if not stat.S_ISREG(status.st_mode):
        return Loaded(name, error="not a regular file (a pipe, device or socket is not read)")
    if path.suffix.lower() not in HTML_SUFFIXES | TEXT_SUFFIXES:
        kinds = ", ".join(sorted(HTML_SUFFIXES | TEXT_SUFFIXES))
        return Loaded(name, error=f"not an HTML or text file (expected one of {kinds})")
    if status.st_size > options.max_bytes:
        return Loaded(name, error=_too_large(options.max_bytes))
    try:
        data = path.read_bytes()
    except OSError as error:
        return Loaded(name, error=f"cannot read: {error.strerror or error}")
    html_file = path.suffix.lower() in HTML_SUFFIXES
    decoded = decode_text(data, declared=_declared_charset(data) if html_file else None)
    if decoded is None:
        return Loaded(name, error=BINARY)
    raw, encoding = decoded
    metadata: dict[str, Any] = {"source": os.path.abspath(path)}  # as found, links not followed
    if encoding != "utf-8":
        metadata["encoding"] = encoding
    headings: Callable[[str], list[Heading]] | None = None
    if path.suffix.lower() in HTML_SUFFIXES:
        title = _page_title(raw)
        if title:
            metadata["title"] = title
        soup = _soup(raw, options.selectors)
        headings = _html_headings(soup)
        text = _html_text(soup)
    else:
        text = raw.removeprefix("\ufeff")
        if path.suffix.lower() in (".md", ".markdown"):
            text = _FRONT_MATTER.sub("", text, count=1)
            headings = markdown_headings
    return _finish(name, text, metadata, options, headings)


def _utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_FALLBACK = "cp1252"
_WESTERN = frozenset({"cp1252", "latin_1", "iso8859_15"})
# The encodings files are still written in; the DOS and Mac code pages a short text also
# decodes in (cp852 for curly quotes, say) are not guessed.
_SINGLE_BYTE = frozenset(
    {f"cp{page}" for page in range(1250, 1259)} | {"koi8_r", "koi8_u", "latin_1", "tis_620"}
)
_MULTIBYTE = frozenset(
    {"cp932", "shift_jis", "euc_jp", "iso2022_jp", "gb2312", "gbk", "gb18030", "big5"}
    | {"big5hkscs", "cp949", "euc_kr", "cp950"}
)
_COHERENT = 0.1  # charset-normalizer recognises a language in the text (0 to 1)
_NOISY = 0.1  # and finds few odd characters in it (0 to 1)


def decode_text(data: bytes, *, declared: str | None = None) -> tuple[str, str] | None:
    """Decode a file's bytes; return ``(text, encoding)``, or ``None`` for binary content.

    In this order: a byte order mark (UTF-8, UTF-16, UTF-32) decides; then a NUL byte means
    binary; then the ``declared`` charset (an HTML file's ``<meta charset>``) if the bytes
    decode with it; then UTF-8; then ``charset-normalizer``'s best guess, taken only when it
    recognises a language in the result (coherence) and finds little noise (chaos), since on a
    few bytes it guesses absurdly (``café`` in Latin-1 comes back as UTF-16); then Windows-1252,
    the usual encoding of Western text that is not UTF-8, and Latin-1, which decodes any
    bytes. Text full of control characters is refused later, as binary, whatever decoded it.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), encoding.removesuffix("-sig")
            except UnicodeDecodeError:
                return None
    if b"\x00" in data:
        return None
    for encoding in filter(None, (declared, "utf-8")):
        try:
            return data.decode(encoding), encoding
        except (UnicodeDecodeError, LookupError):
            pass
    for encoding in filter(None, (_guess_encoding(data), _FALLBACK)):
        try:
            return data.decode(encoding), encoding
        except (UnicodeDecodeError, LookupError):
            pass
    return data.decode("latin-1"), "latin-1"


def _guess_encoding(data: bytes) -> str | None:
    """``charset-normalizer``'s guess, if it is sure enough; Windows-1252 on a tie with it."""
    from charset_normalizer import from_bytes

    sample = data[:65536]
    # Text in a CJK encoding is mostly bytes above 127; Western text mostly ASCII, and a few
    # accented letters side by side decode as Big5 or GBK too ("Idée" as "Id嶪").
    cjk = len(sample.translate(None, bytes(range(128)))) >= 0.3 * len(sample)
    matches = [match for match in from_bytes(sample) if _trusted(match, cjk=cjk)]
    if not matches:
        return None
    best = matches[0]
    for match in matches:  # Western code pages often tie: prefer the common one
        if (
            match.encoding in _WESTERN
            and match.chaos <= best.chaos
            and match.coherence >= best.coherence - 0.05
        ):
            return _FALLBACK
    return str(best.encoding)


def _trusted(match: Any, *, cjk: bool) -> bool:
    """Whether a guess is worth taking.

    It must find little noise, and be either a strict multibyte decode of mostly non-ASCII
    bytes (itself good evidence) or a single-byte code page in which a language shows.
    """
    if match.chaos > _NOISY:
        return False
    if match.encoding in _MULTIBYTE:
        return cjk
    western = match.encoding in _SINGLE_BYTE or match.encoding.startswith("iso8859_")
    return bool(western and match.coherence >= _COHERENT)


def _declared_charset(data: bytes) -> str | None:
    found = _META_CHARSET.search(data[:4096])
    if not found:
        return None
    name = found.group(1).decode("ascii", "replace")
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


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
