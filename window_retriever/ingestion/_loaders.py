"""Loading sources for ingestion: web pages (LangChain's WebBaseLoader), local HTML and text.

Every source becomes one :class:`Loaded`: a document, or the reason it could not be loaded,
so that one bad source never stops the others. This module holds files, directories,
decoding and :func:`load_sources`; fetching web pages, HTML to text and ``Loaded`` itself
are in ``_web``, which it imports.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from window_retriever.ingestion._headers import Heading, markdown_headings
from window_retriever.ingestion._web import (
    _ABANDONED,
    _META_CHARSET,
    BINARY,
    Loaded,
    LoadOptions,
    _finish,
    _html_headings,
    _html_text,
    _load_url,
    _page_title,
    _root_cause,
    _session,
    _soup,
    _too_large,
)

GONE = "no such file or directory"
"""The error of a local source that is not there (any more)."""
NAME_NOT_UTF8 = "its name is not valid UTF-8; rename it"
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst"})
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?---[ \t]*(\n|\Z)", re.DOTALL)


def is_url(spec: str) -> bool:
    """True for ``http://`` and ``https://`` sources."""
    return urlsplit(spec).scheme in ("http", "https")


def stored_source(spec: str) -> str:
    """The ``source`` metadata a source's chunks are stored under: what ``--filter`` matches.

    A local file's absolute path, as found (``os.path.abspath``: from any working directory
    the same, so its file id is too; a link is not followed), and a web address as given,
    without its ``#fragment`` (its chunks carry the final address, after redirects). The
    command line shows a source in this form, so what it prints is what a filter names.
    """
    if is_url(spec):
        return urlsplit(spec)._replace(fragment="").geturl()
    return os.path.abspath(spec)


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


def load_file(path: str | os.PathLike[str], options: LoadOptions | None = None) -> Loaded:
    """Load a local HTML or text file (regular files only, at most ``max_bytes``).

    ``path`` is a ``str`` or any path-like object (``pathlib.Path``). Text in another encoding
    than UTF-8 is decoded (see :func:`decode_text`) and the encoding recorded in the metadata
    as ``encoding``; binary content is refused.
    """
    options = options or LoadOptions()
    path = Path(path)
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
    metadata: dict[str, Any] = {"source": stored_source(os.fspath(path))}
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
