"""Open the Chroma store: a directory on this machine or a Chroma server, one function for all.

Every command and the Python API open their store here, so a server URL, its credentials and
its tenant / database mean the same thing everywhere::

    store = open_store("chroma-db")                              # embedded, on local disk
    store = open_store(url="http://127.0.0.1:8000")              # a Chroma server
    store = open_store()   # WINDOW_RETRIEVER_CHROMA_URL, else WINDOW_RETRIEVER_DB, else chroma-db

Credentials are sent as HTTP headers on every request: a token (``Authorization: Bearer T``,
or ``X-Chroma-Token: T`` as Chroma Cloud and Chroma's token auth expect) or HTTP basic auth
from the URL (``http://user:password@host:port``). Chroma's open-source server does not check
credentials itself; a proxy in front of it or Chroma's distributed deployment does.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from window_retriever._errors import (
    Command,
    ConfigurationError,
    Message,
    Option,
    Part,
    StoreError,
)
from window_retriever.stores._address import (
    _Address,
    _address,
    _headers,
    _Names,
    _redact,
    _secrets,
)

if TYPE_CHECKING:
    from langchain_chroma import Chroma
    from langchain_core.embeddings import Embeddings

DEFAULT_DB: Final = "chroma-db"
DEFAULT_COLLECTION: Final = "documents"

ENV_URL: Final = "WINDOW_RETRIEVER_CHROMA_URL"
"""A Chroma server's URL, used when neither a directory nor a URL is passed."""
ENV_DB: Final = "WINDOW_RETRIEVER_DB"
"""An embedded store's directory, used when neither a directory nor a URL is passed."""
ENV_TOKEN: Final = "WINDOW_RETRIEVER_CHROMA_TOKEN"  # noqa: S105 - a variable's name
"""A token for the server (kept out of command lines, where other users can read it)."""
ENV_TOKEN_HEADER: Final = "WINDOW_RETRIEVER_CHROMA_TOKEN_HEADER"  # noqa: S105
ENV_TENANT: Final = "WINDOW_RETRIEVER_CHROMA_TENANT"
ENV_DATABASE: Final = "WINDOW_RETRIEVER_CHROMA_DATABASE"
ENV_TIMEOUT: Final = "WINDOW_RETRIEVER_CHROMA_TIMEOUT"
"""Seconds to wait for each answer of the server (default :data:`DEFAULT_TIMEOUT`)."""

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds to wait for each answer of a Chroma server, unless told otherwise."""
CONNECT_TIMEOUT: Final = 5.0
"""Seconds to wait for a connection to the server (the timeout, when that is shorter)."""


def open_store(
    db: str | os.PathLike[str] | None = None,
    *,
    url: str | None = None,
    collection: str = DEFAULT_COLLECTION,
    embeddings: Embeddings | None = None,
    create: bool = False,
    token: str | None = None,
    token_header: str | None = None,
    tenant: str | None = None,
    database: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> Chroma:
    """Open (or, with ``create=True``, create) a collection as a ``langchain_chroma.Chroma``.

    Args:
        db: An embedded store's directory. Pass ``db`` or ``url``, not both; with neither,
            ``WINDOW_RETRIEVER_CHROMA_URL`` or ``WINDOW_RETRIEVER_DB`` decides, and without
            those the directory ``chroma-db``.
        url: A Chroma server, ``http(s)://[user:password@]host[:port]``: no path, query or
            fragment; an IPv6 host in brackets (``http://[::1]:8000``); without a port, 8000
            for http and 443 for https. Percent-encode ``/ ? # @`` in the user and password.
        collection: The collection's name.
        embeddings: The embedding model; default: the packaged offline MiniLM model.
        create: Create the directory and the collection when missing. Readers leave it
            ``False`` so that a mistyped name is an error, not a new empty store.
        token: A token for the server; default ``WINDOW_RETRIEVER_CHROMA_TOKEN``.
        token_header: ``"Authorization"`` (``Bearer`` token, the default) or
            ``"X-Chroma-Token"``; default ``WINDOW_RETRIEVER_CHROMA_TOKEN_HEADER``.
        tenant: Chroma's tenant; default ``WINDOW_RETRIEVER_CHROMA_TENANT``, else Chroma's.
        database: Chroma's database; default ``WINDOW_RETRIEVER_CHROMA_DATABASE``, else
            Chroma's.
        headers: More HTTP headers for every request to the server.
        timeout: Seconds to wait for each answer of the server (searches, fetches and
            writes alike; a connection gets at most 5 of them); default
            ``WINDOW_RETRIEVER_CHROMA_TIMEOUT``, else 30. A server that does not answer in
            time is a ``StoreError``, not a wait without end.
        environ: Where the variables are read (default ``os.environ``).

    Raises:
        ConfigurationError: The arguments contradict each other or are malformed (a token or
            password that no HTTP header can carry included).
        StoreError: The store cannot be opened: an unreachable or unresponsive server,
            refused credentials, a missing store, tenant, database or collection.

    Every message is one line that names the argument, or the variable it was read from, and
    the fix; it never shows the token or the password, not even of a URL that does not parse.
    """
    env = os.environ if environ is None else environ
    names = _Names(
        url=Option("url") if url is not None else ENV_URL,
        token=Option("token") if token else ENV_TOKEN,
        token_header=Option("token_header") if token_header else ENV_TOKEN_HEADER,
        tenant=Option("tenant") if tenant else ENV_TENANT,
        database=Option("database") if database else ENV_DATABASE,
    )
    token = token or env.get(ENV_TOKEN) or None
    token_header = token_header or env.get(ENV_TOKEN_HEADER) or "Authorization"
    tenant = tenant or env.get(ENV_TENANT) or None
    database = database or env.get(ENV_DATABASE) or None
    secrets: list[str] = []
    try:
        directory, url = store_location(db, url, env)
        if url is not None:
            secrets = _secrets(url, token, headers)
            address = _address(url, names.url)
            sent = _headers(address, names, token=token, token_header=token_header, headers=headers)
            waits = _timeout(timeout, env)
            client = _server_client(
                address, sent, names, tenant=tenant, database=database, timeout=waits
            )
            where = address.shown
        else:
            directory = directory or Path(DEFAULT_DB)  # (store_location never leaves both None)
            named: Part = str(directory)
            if db is not None:  # a directory the caller gave, not the variable's or the default
                named = Option("db", directory, said=str(directory))
            client = _embedded_client(
                directory, named, create=create, tenant=tenant, database=database
            )
            where = f"{directory}/"
        return _collection(client, collection, where, embeddings=embeddings, create=create)
    except (ConfigurationError, StoreError) as error:
        if not secrets:
            raise
        # The last guard: no message names a secret, whatever a library put into it.
        raise type(error)(error.message.map_text(lambda text: _redact(text, secrets))) from None


def store_location(
    db: str | os.PathLike[str] | None, url: str | None, environ: Mapping[str, str] | None = None
) -> tuple[Path | None, str | None]:
    """The store meant: ``(directory, None)`` or ``(None, url)``, from the arguments or the env."""
    env = os.environ if environ is None else environ
    if db is not None and url is not None:
        raise ConfigurationError(
            "pass ",
            Option("db"),
            " (a directory) or ",
            Option("url"),
            " (a Chroma server), not both",
        )
    if db is None and url is None:
        url, db = env.get(ENV_URL) or None, env.get(ENV_DB) or None
        if url is not None and db is not None:
            msg = f"{ENV_URL} and {ENV_DB} are both set; unset the one you do not mean"
            raise ConfigurationError(msg)
    if url is not None:
        return None, url
    return Path(db if db is not None else DEFAULT_DB), None


def _server_client(
    address: _Address,
    headers: dict[str, str],
    names: _Names,
    *,
    tenant: str | None,
    database: str | None,
    timeout: Any,
) -> Any:
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

    _probe(address, headers, names, tenant, database, timeout)
    try:
        client = chromadb.HttpClient(
            host=address.host,
            port=address.port,
            ssl=address.scheme == "https",
            headers=headers or None,
            tenant=tenant or DEFAULT_TENANT,
            database=database or DEFAULT_DATABASE,
        )
    except Exception as error:
        msg = f"the Chroma server at {address.shown} failed: {_brief(error)}"
        raise StoreError(msg) from None
    # Chroma's client waits without end (its httpx.Client has timeout=None, and no setting
    # changes that): give its session ours. Every call of the store, reads and writes, and the
    # retriever's async client (which copies it) then stop waiting after `timeout` seconds.
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:
        session.timeout = timeout
    return client


def _timeout(timeout: float | None, env: Mapping[str, str]) -> Any:
    """The waits for a server, as an ``httpx.Timeout``: ``timeout``, else the variable, else 30."""
    import httpx

    name: Option | str = Option("timeout")
    if timeout is None and env.get(ENV_TIMEOUT):
        name, text = ENV_TIMEOUT, env[ENV_TIMEOUT]
        try:
            timeout = float(text)
        except ValueError:
            msg = f"{ENV_TIMEOUT} must be a number of seconds, e.g. 30, got {text!r}"
            raise ConfigurationError(msg) from None
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        msg = f" must be a positive number of seconds, e.g. 30, got {timeout!r}"
        raise ConfigurationError(name, msg)
    return httpx.Timeout(float(timeout), connect=min(float(timeout), CONNECT_TIMEOUT))


def _probe(
    address: _Address,
    headers: Mapping[str, str],
    names: _Names,
    tenant: str | None,
    database: str | None,
    timeout: Any,
) -> None:
    """Ask the server who we are, and for the tenant and database, before Chroma's client does.

    Chroma's client leaves its connection open when its first call fails, and says little
    about why; these three small requests tell an unreachable server, refused credentials and
    a missing tenant or database apart.
    """
    import httpx
    from chromadb.config import DEFAULT_TENANT

    where = address.shown
    tenant_path = f"/api/v2/tenants/{quote(tenant or DEFAULT_TENANT, safe='')}"
    checks: list[tuple[str, str, str, Option | str]] = [("/api/v2/auth/identity", "", "", "")]
    if tenant:
        checks.append((tenant_path, "tenant", tenant, names.tenant))
    if database:
        path = f"{tenant_path}/databases/{quote(database, safe='')}"
        checks.append((path, "database", database, names.database))
    try:
        with httpx.Client(base_url=address.base, headers=dict(headers), timeout=timeout) as client:
            for path, kind, name, named in checks:
                response = client.get(path)
                if response.status_code in (401, 403):
                    raise StoreError(
                        f"the Chroma server at {where} refused the credentials "
                        f"({response.status_code} {response.reason_phrase}); check the token "
                        f"({ENV_TOKEN}) or the user:password in ",
                        names.url,
                    )
                if response.status_code == 404 and kind:
                    msg = f"no {kind} {name!r} at {where}; create it or pass another "
                    raise StoreError(msg, named)
                if response.is_error:
                    text = " ".join(response.text.split())[:160]
                    raise StoreError(
                        f"the Chroma server at {where} answered {response.status_code} "
                        f"{response.reason_phrase} ({text}); is it a Chroma 1.x server?"
                    )
    except (httpx.LocalProtocolError, UnicodeEncodeError):  # a header httpx cannot send
        msg = "a header is not valid HTTP (a line break, a control or non-ASCII character?)"
        raise ConfigurationError(f"{msg}; check headers and ", names.token) from None
    except (httpx.InvalidURL, UnicodeError):  # a host that cannot be looked up
        msg = f" is not a URL HTTP can reach, got {where!r}; give http://HOST:PORT"
        raise ConfigurationError(names.url, msg) from None
    except httpx.TimeoutException as error:
        raise StoreError(timeout_message(f"the Chroma server at {where}", error)) from None
    except httpx.HTTPError as error:
        port = "" if address.port_given else f" on its default port {address.port}"
        raise StoreError(
            f"cannot reach the Chroma server at {where}{port} ({_brief(error)}); start one with "
            "'chroma run --path DIR --host 127.0.0.1 --port PORT', or check ",
            names.url,
        ) from None


def _embedded_client(
    directory: Path, named: Part, *, create: bool, tenant: str | None, database: str | None
) -> Any:
    """The client of the store in ``directory``, which messages name as ``named``."""
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

    if directory.exists() and not directory.is_dir():
        raise StoreError(named, " is a file, not a store directory")
    if not create and not (directory / "chroma.sqlite3").is_file():
        given = (named,) if isinstance(named, Option) else ()
        first = Command("ingest", given, said="ingest into it")
        raise StoreError(f"no store at {directory}/; ", first, " first")
    try:
        return chromadb.PersistentClient(  # Chroma caches clients by the path as given:
            path=os.path.abspath(directory),  # "db" from two working directories is two stores
            tenant=tenant or DEFAULT_TENANT,
            database=database or DEFAULT_DATABASE,
        )
    except Exception as error:
        raise StoreError(f"the Chroma store at {directory}/ failed: {_brief(error)}") from None


_FEEDS = "window_retriever_changes-"
"""The keyword index's change feeds (``_chroma_keywords.FEED_PREFIX``; imported from there, a
cycle)."""


def _collection(
    client: Any, name: str, where: str, *, embeddings: Embeddings | None, create: bool
) -> Chroma:
    from chromadb.errors import NotFoundError
    from langchain_chroma import Chroma

    from window_retriever._embeddings import default_embeddings

    if not create:
        try:
            client.get_collection(name)
        except (NotFoundError, ValueError):
            try:  # name what is there: a demo's or another tool's collection, say
                names = sorted(
                    name
                    for name in (str(getattr(c, "name", c)) for c in client.list_collections())
                    if not name.startswith(_FEEDS)
                )
                has = f" (it has: {', '.join(names)})" if names else " (it has none)"
            except Exception:
                has = ""
            raise StoreError(
                f"no collection {name!r} in {where}{has}; ",
                Command("ingest", said="ingest into it"),
                " first or pass another ",
                Option("collection"),
            ) from None
        except Exception as error:
            raise StoreError(f"the Chroma store at {where} failed: {_brief(error)}") from None
    try:
        return Chroma(
            collection_name=name,
            embedding_function=embeddings if embeddings is not None else default_embeddings(),
            client=client,
        )
    except Exception as error:
        raise StoreError(f"the Chroma store at {where} failed: {_brief(error)}") from None


def _brief(error: BaseException) -> str:
    return " ".join(str(error).split())[:200] or type(error).__name__


def timeout_message(named: str, error: Any) -> Message:
    """``named`` (the server) did not answer within the timeout that ``error`` ran out of."""
    import httpx

    waits: Mapping[str, Any] = {}
    with contextlib.suppress(RuntimeError):  # an httpx error without its request
        waits = error.request.extensions.get("timeout") or {}
    kind, what = "read", "did not answer"
    if isinstance(error, httpx.ConnectTimeout):
        kind, what = "connect", "did not accept a connection"
    elif isinstance(error, httpx.WriteTimeout | httpx.PoolTimeout):
        kind, what = "write", "did not take the request"
    seconds = waits.get(kind)
    within = f" within {seconds:g} s" if isinstance(seconds, int | float) else " in time"
    return Message(
        f"{named} {what}{within}; check that it is running and not overloaded, or raise ",
        Option("timeout"),
        f" ({ENV_TIMEOUT})",
    )
