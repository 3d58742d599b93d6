"""A Chroma server's address and credentials: the URL, the token and the headers, checked.

:func:`_address` parses a server URL, :func:`_headers` makes the HTTP headers of every request
(the caller's and the credentials), and :func:`_public`, :func:`_secrets` and :func:`_redact`
keep the token and the password out of every message. Kept apart from
``window_retriever.stores._open`` (which opens the store with them, and imports this module,
never the other way) so that each module does one job.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit

from window_retriever._errors import ConfigurationError, Option

TOKEN_HEADERS: Final = ("Authorization", "X-Chroma-Token")
_LONG_ENOUGH: Final = 8
"""The fewest characters of a header's value that messages hide as a possible credential."""


@dataclass(frozen=True)
class _Names:
    """Where each setting came from, as a message names it: the argument or the variable."""

    url: Option | str
    token: Option | str
    token_header: Option | str
    tenant: Option | str
    database: Option | str


@dataclass(frozen=True)
class _Address:
    """A Chroma server's address and the credentials in its URL, checked."""

    scheme: str
    host: str
    """As in a URL: an IPv6 address in brackets (``[::1]``), as chromadb.HttpClient takes it."""
    port: int
    port_given: bool
    user: str | None
    password: str | None
    shown: str
    """The URL for messages, without its password."""

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def _address(url: str, name: Option | str) -> _Address:
    """Parse a server URL; a flaw is a ConfigurationError that names ``name``, never a secret."""
    if any(char.isspace() or _is_control(char) for char in url):
        raise ConfigurationError(
            name, " holds a space, a line break or a control character; remove it"
        )
    shown = _public(url)
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [IPv6 address]
        raise ConfigurationError(name, f" must look like http://HOST:PORT, got {shown!r}") from None
    if parts.scheme in ("http", "https") and "@" in parts.path + parts.query + parts.fragment:
        raise ConfigurationError(  # a '/', '?' or '#' in the password ended the host early
            name,
            f" must look like http://USER:PASSWORD@HOST:PORT, got {shown!r}; percent-encode "
            "'/', '?', '#' and '@' in the user and the password (%2F, %3F, %23, %40)",
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(name, f" must look like http://HOST:PORT, got {shown!r}")
    try:
        port = parts.port
    except ValueError:  # not a number, or above 65535
        port = 0
    if port == 0:
        msg = f" must look like http://HOST:PORT, a PORT from 1 to 65535, got {shown!r}"
        raise ConfigurationError(name, msg)
    if parts.query or parts.fragment:
        raise ConfigurationError(
            name,
            " cannot have a query ('?...') or a fragment ('#...'): nothing is read from them; "
            "pass ",
            Option("tenant", said="tenant="),
            " and ",
            Option("database", said="database="),
        )
    if parts.path not in ("", "/"):
        msg = f" cannot have a path, got {parts.path!r} in {shown}; give http://HOST:PORT"
        raise ConfigurationError(name, msg)
    user = None if parts.username is None else unquote(parts.username)
    password = None if parts.password is None else unquote(parts.password)
    if any(_is_control(char) for char in (user or "") + (password or "")):
        raise ConfigurationError(
            "the user:password in ", name, " holds a control character (a line break?); remove it"
        )
    host = parts.hostname
    try:
        host.encode("idna")  # how the host is looked up: labels of 1 to 63 characters
    except UnicodeError:
        msg = " has a host name that cannot be looked up (an empty or over-long label)"
        raise ConfigurationError(name, f"{msg}, got {shown!r}") from None
    return _Address(
        scheme=parts.scheme,
        host=f"[{host}]" if ":" in host else host,
        port=port or (443 if parts.scheme == "https" else 8000),
        port_given=port is not None,
        user=user,
        password=password,
        shown=shown,
    )


def _headers(
    address: _Address,
    names: _Names,
    *,
    token: str | None,
    token_header: str,
    headers: Mapping[str, str] | None,
) -> dict[str, str]:
    """The HTTP headers of every request: the caller's and the credentials, checked."""
    if token_header.lower() not in {name.lower() for name in TOKEN_HEADERS}:
        choices = ", ".join(TOKEN_HEADERS)
        msg = f" must be one of {choices}, got {token_header!r}"
        raise ConfigurationError(names.token_header, msg)
    sent = dict(headers or {})
    for key, value in sent.items():
        flaw = _flaw(key) or _flaw(value.replace(" ", ""))  # a value may have inner spaces
        if flaw:
            raise ConfigurationError(f"the header {key!r} in headers holds {flaw}; fix it")
    if address.user is not None:
        if token is not None:
            raise ConfigurationError(
                names.token,
                " and a user:password in ",
                names.url,
                " both give credentials; keep one",
            )
        pair = f"{address.user}:{address.password or ''}"
        sent["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    elif token is not None:
        flaw = _flaw(token)
        if flaw:
            msg = f" holds {flaw}, which no token has; set it to the token alone"
            raise ConfigurationError(names.token, msg)
        is_bearer = token_header.lower() == "authorization"
        sent["Authorization" if is_bearer else "X-Chroma-Token"] = (
            f"Bearer {token}" if is_bearer else token
        )
    return sent


def _public(url: str) -> str:
    """``url`` for messages: no password, and nothing at all before an ``@`` it cannot tell apart.

    It never fails: a URL that does not parse (a mistyped port, a ``/`` or ``#`` in the
    password) is shown too, without whatever stands before its last ``@``. A query and a
    fragment are dropped (they may carry a token).
    """
    scheme, credentials, address = _split(url)
    address = address.split("?", 1)[0].split("#", 1)[0]
    if credentials is None:
        return scheme + address
    user, colon, _ = credentials.partition(":")
    plain_user = colon and user and not any(char in user for char in "/?#[]")
    return f"{scheme}{user + ':' if plain_user else ''}***@{address}"


def _secrets(url: str, token: str | None, headers: Mapping[str, str] | None) -> list[str]:
    """What no message may show: the token, the password (as written and decoded), and more.

    Also the basic-auth header made of the password, and the values of the caller's headers
    that are long enough to be a credential (shorter ones, such as ``1``, would only mangle
    the message).
    """
    found = [token or "", f"Bearer {token}" if token else ""]
    credentials = _split(url)[1]
    if credentials:
        user, colon, password = credentials.partition(":")
        secret = password if colon else user  # a user alone may be a token
        pair = f"{unquote(user)}:{unquote(password)}"
        found += [secret, unquote(secret), base64.b64encode(pair.encode()).decode("ascii")]
    found += [value for value in (headers or {}).values() if len(value) >= _LONG_ENOUGH]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def _split(url: str) -> tuple[str, str | None, str]:
    """``(scheme://, credentials or None, the rest)``, split at the last ``@``; never fails."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    credentials, at, address = rest.rpartition("@")
    return scheme + sep, credentials if at else None, address


def _redact(message: str, secrets: list[str]) -> str:
    """``message`` with each secret as ``***``, where it stands as a word of its own.

    A secret inside a longer word is left: a short token such as ``t`` would otherwise turn
    every ``t`` of the message into ``***``; a leaked secret stands between quotes, spaces,
    ``:`` or ``@``.
    """
    for secret in secrets:
        start = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
        end = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
        message = re.sub(start + re.escape(secret) + end, "***", message)
    return message


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc"


def _flaw(value: str) -> str:
    """What keeps ``value`` from being a token: '' when nothing does."""
    for char in value:
        if char in "\r\n":
            return "a line break"
        if char.isspace():
            return "a space"
        if _is_control(char):
            return "a control character"
        if not char.isascii():
            return "a non-ASCII character"
    return ""
