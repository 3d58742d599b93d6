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

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, unquote, urlsplit

from window_retriever._errors import ConfigurationError, StoreError

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

TOKEN_HEADERS: Final = ("Authorization", "X-Chroma-Token")
PROBE_TIMEOUT: Final = 10.0
"""Seconds to wait for the server's first answers when the store is opened."""


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
    environ: Mapping[str, str] | None = None,
) -> Chroma:
    """Open (or, with ``create=True``, create) a collection as a ``langchain_chroma.Chroma``.

    Args:
        db: An embedded store's directory. Pass ``db`` or ``url``, not both; with neither,
            ``WINDOW_RETRIEVER_CHROMA_URL`` or ``WINDOW_RETRIEVER_DB`` decides, and without
            those the directory ``chroma-db``.
        url: A Chroma server, ``http(s)://[user:password@]host[:port]``.
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
        environ: Where the variables are read (default ``os.environ``).

    Raises:
        ConfigurationError: The arguments contradict each other or are malformed.
        StoreError: The store cannot be opened: an unreachable server, refused credentials,
            a missing store, tenant, database or collection. The message names the fix.
    """
    env = os.environ if environ is None else environ
    directory, url = store_location(db, url, env)
    tenant = tenant or env.get(ENV_TENANT) or None
    database = database or env.get(ENV_DATABASE) or None
    if url is not None:
        client = _server_client(
            url,
            token=token or env.get(ENV_TOKEN) or None,
            token_header=token_header or env.get(ENV_TOKEN_HEADER) or "Authorization",
            headers=headers,
            tenant=tenant,
            database=database,
        )
        where = _public(url)
    else:
        directory = directory or Path(DEFAULT_DB)  # (store_location never leaves both None)
        client = _embedded_client(directory, create=create, tenant=tenant, database=database)
        where = f"{directory}/"
    return _collection(client, collection, where, embeddings=embeddings, create=create)


def store_location(
    db: str | os.PathLike[str] | None, url: str | None, environ: Mapping[str, str] | None = None
) -> tuple[Path | None, str | None]:
    """The store meant: ``(directory, None)`` or ``(None, url)``, from the arguments or the env."""
    env = os.environ if environ is None else environ
    if db is not None and url is not None:
        raise ConfigurationError("pass db (a directory) or url (a Chroma server), not both")
    if db is None and url is None:
        url, db = env.get(ENV_URL) or None, env.get(ENV_DB) or None
        if url is not None and db is not None:
            msg = f"{ENV_URL} and {ENV_DB} are both set; unset the one you do not mean"
            raise ConfigurationError(msg)
    if url is not None:
        return None, url
    return Path(db if db is not None else DEFAULT_DB), None


def _server_client(
    url: str,
    *,
    token: str | None,
    token_header: str,
    headers: Mapping[str, str] | None,
    tenant: str | None,
    database: str | None,
) -> Any:
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ConfigurationError(f"a Chroma server URL looks like http://HOST:PORT, got {url!r}")
    if parts.path not in ("", "/"):
        msg = f"a Chroma server URL has no path, got {parts.path!r} in {_public(url)}"
        raise ConfigurationError(msg)
    if token_header.lower() not in {name.lower() for name in TOKEN_HEADERS}:
        msg = f"token_header must be one of {', '.join(TOKEN_HEADERS)}, got {token_header!r}"
        raise ConfigurationError(msg)
    sent = dict(headers or {})
    if parts.username is not None:
        if token is not None:
            msg = "pass a token or a user:password in the URL, not both"
            raise ConfigurationError(msg)
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        sent["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    elif token is not None:
        is_bearer = token_header.lower() == "authorization"
        sent["Authorization" if is_bearer else "X-Chroma-Token"] = (
            f"Bearer {token}" if is_bearer else token
        )
    host, port = parts.hostname, port or (443 if parts.scheme == "https" else 8000)
    _probe(f"{parts.scheme}://{host}:{port}", sent, _public(url), tenant, database)
    try:
        return chromadb.HttpClient(
            host=host,
            port=port,
            ssl=parts.scheme == "https",
            headers=sent or None,
            tenant=tenant or DEFAULT_TENANT,
            database=database or DEFAULT_DATABASE,
        )
    except Exception as error:
        raise StoreError(f"the Chroma server at {_public(url)} failed: {_brief(error)}") from None


def _probe(
    base: str, headers: Mapping[str, str], where: str, tenant: str | None, database: str | None
) -> None:
    """Ask the server who we are, and for the tenant and database, before Chroma's client does.

    Chroma's client leaves its connection open when its first call fails, and says little
    about why; these three small requests tell an unreachable server, refused credentials and
    a missing tenant or database apart.
    """
    import httpx
    from chromadb.config import DEFAULT_TENANT

    tenant_path = f"/api/v2/tenants/{quote(tenant or DEFAULT_TENANT, safe='')}"
    checks = [("/api/v2/auth/identity", "", "")]
    if tenant:
        checks.append((tenant_path, "tenant", tenant))
    if database:
        checks.append((f"{tenant_path}/databases/{quote(database, safe='')}", "database", database))
    try:
        with httpx.Client(base_url=base, headers=dict(headers), timeout=PROBE_TIMEOUT) as client:
            for path, kind, name in checks:
                response = client.get(path)
                if response.status_code in (401, 403):
                    raise StoreError(
                        f"the Chroma server at {where} refused the credentials "
                        f"({response.status_code} {response.reason_phrase}); check the token "
                        f"({ENV_TOKEN}) or the user:password in the URL"
                    )
                if response.status_code == 404 and kind:
                    msg = f"no {kind} {name!r} at {where}; create it or pass another {kind}"
                    raise StoreError(msg)
                if response.is_error:
                    text = " ".join(response.text.split())[:160]
                    raise StoreError(
                        f"the Chroma server at {where} answered {response.status_code} "
                        f"{response.reason_phrase} ({text}); is it a Chroma 1.x server?"
                    )
    except httpx.HTTPError as error:
        raise StoreError(
            f"cannot reach the Chroma server at {where} ({_brief(error)}); start one with "
            "'chroma run --path DIR --host 127.0.0.1 --port PORT', or check the URL"
        ) from None


def _embedded_client(
    directory: Path, *, create: bool, tenant: str | None, database: str | None
) -> Any:
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

    if directory.exists() and not directory.is_dir():
        raise StoreError(f"{directory} is a file, not a store directory")
    if not create and not (directory / "chroma.sqlite3").is_file():
        raise StoreError(f"no store at {directory}/; ingest into it first")
    try:
        return chromadb.PersistentClient(
            path=str(directory),
            tenant=tenant or DEFAULT_TENANT,
            database=database or DEFAULT_DATABASE,
        )
    except Exception as error:
        raise StoreError(f"the Chroma store at {directory}/ failed: {_brief(error)}") from None


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
            msg = f"no collection {name!r} in {where}; ingest into it first or name another one"
            raise StoreError(msg) from None
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


def _public(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()
