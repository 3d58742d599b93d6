"""Chroma's failures, read in one place: a server unreachable, slow, refusing; a wrong dimension.

The Chroma adapter (``window_retriever.stores._chroma``) runs every call inside
:func:`store_errors`; the command line and ``open_store`` read errors with :func:`store_failure`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from window_retriever._errors import Option, StoreError, WindowRetrieverError
from window_retriever.stores._open import ENV_TOKEN, timeout_message


@contextlib.contextmanager
def store_errors(vectorstore: Any) -> Iterator[None]:
    """Turn a failed Chroma call in the block into a one-line ``StoreError`` that names the fix.

    The one place where Chroma's and httpx's failures are read: a server that cannot be
    reached, does not answer in time or refuses the credentials (named by its URL, never with
    its credentials), and a collection that holds vectors of another dimension than the
    embedding model gives. Any other error passes as it is. The Chroma adapter runs every
    call in it, reads and writes alike::

        with store_errors(self.vectorstore):
            self.vectorstore._collection.upsert(...)
    """
    try:
        yield
    except WindowRetrieverError:
        raise
    except Exception as error:
        failure = store_failure(error, server_address(vectorstore), vectorstore=vectorstore)
        if failure is None:
            raise
        raise failure from None


def store_failure(
    error: BaseException, server: str | None, *, vectorstore: Any = None
) -> StoreError | None:
    """What ``error`` of a Chroma call means, as a ``StoreError``; None when it is no such failure.

    Args:
        error: An exception raised by chromadb or httpx (or anything else: then None).
        server: The server's URL for the message (no credentials), or None if unknown.
        vectorstore: The store the call was made on, to tell a dimension mismatch apart.
    """
    import httpx
    from chromadb.errors import ChromaError

    named = f"the Chroma server at {server}" if server else "the Chroma server"
    for cause in _causes(error):
        if isinstance(cause, httpx.TimeoutException):
            return StoreError(timeout_message(named, cause))
        status = _refusal(cause)
        if status:
            return StoreError(
                f"{named} refused the credentials (HTTP {status}); check the token "
                f"({ENV_TOKEN}) or the user:password of the URL: it may have been revoked"
            )
        if isinstance(cause, httpx.ConnectError):
            return StoreError(f"cannot reach {named} ({_reason(cause)}); is it running?")
        if isinstance(cause, httpx.TransportError):
            return StoreError(f"{named} broke the connection ({_reason(cause)}); is it running?")
    if vectorstore is not None and isinstance(error, ChromaError):
        return _dimension_failure(vectorstore, server)
    return None


def server_address(vectorstore: Any) -> str | None:
    """The URL of the Chroma server behind ``vectorstore`` (no credentials); None if embedded."""
    client: Any = getattr(vectorstore, "_client", None)
    try:
        if client.get_settings().chroma_api_impl != "chromadb.api.fastapi.FastAPI":
            return None
        parts = urlsplit(client._server.get_api_url())
    except Exception:  # not a Chroma HTTP client
        return None
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what it was raised from or during, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _refusal(error: BaseException) -> int:
    """401 or 403 when ``error`` is a server's refusal of the credentials, else 0.

    Chroma's client raises a refusal as a bare ``Exception`` of the body, raised while
    handling httpx's ``HTTPStatusError`` (found as its context), or as one of its own errors
    when the body names one.
    """
    import httpx
    from chromadb.errors import ChromaError

    if isinstance(error, httpx.HTTPStatusError):
        status = error.response.status_code
    elif isinstance(error, ChromaError):
        status = error.code()
    else:
        return 0
    return status if status in (401, 403) else 0


def _reason(error: BaseException) -> str:
    """Why a connection failed, in a few words: the system's reason when there is one."""
    for cause in _causes(error):
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):
            reason = os.strerror(cause.errno) if cause.errno else str(cause.strerror)
            return reason[:1].lower() + reason[1:]
    reason = " ".join(str(error).split())[:120].rstrip(".") or type(error).__name__
    return reason[:1].lower() + reason[1:]


def _dimension_failure(vectorstore: Any, server: str | None) -> StoreError | None:
    """A StoreError if the collection holds vectors of another dimension than the model's.

    Asked only after Chroma refused a call: one stored vector is read and one text embedded.
    """
    try:
        collection = vectorstore._collection
        stored = collection.get(limit=1, include=["embeddings"])["embeddings"]
        held = len(stored[0]) if stored is not None and len(stored) else 0
        given = len(vectorstore.embeddings.embed_query("dimension"))
        where = server or f"{collection._client.get_settings().persist_directory}/"
    except Exception:
        return None
    if not held or held == given:
        return None
    return StoreError(
        f"the collection {collection.name!r} at {where} holds vectors of dimension {held}, but "
        f"the embedding model gives {given}; use the model the collection was built with, "
        "or pass another ",
        Option("collection"),
    )
