"""Chroma's async HTTP client for a store on a server: ``ainvoke`` waits without a thread.

``langchain_chroma.Chroma`` has no async client. Where the store is a Chroma server,
:class:`AsyncServer` speaks to it with one ``httpx.AsyncClient`` per event loop, with the sync
client's own address, headers, timeout, tenant and database, and closes it when that loop
ends; an embedded store runs its calls in LangChain's executor instead.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

from window_retriever.stores._chroma_errors import store_errors


class AsyncServer:
    """The store's own Chroma server, spoken to with one ``httpx.AsyncClient`` per event loop.

    The address, the headers (credentials included, whether given as headers or through
    Chroma's auth provider), the timeout, the tenant and the database are those the store's
    sync client sends, read from it; the collection id is read on every call, so a reset
    collection is followed. Chroma's own ``AsyncHttpClient`` is not used: it shares its
    connections between every client of one event loop, so two stores with two tokens would
    send one token.
    """

    def __init__(
        self, vectorstore: Any, url: str, headers: dict[str, str], verify: Any, timeout: Any
    ) -> None:
        self._vectorstore = vectorstore
        self._url = url
        self._headers = headers
        self._verify = verify
        self._timeout = timeout
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Any, AsyncIterator[None]]
        ] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, vectorstore: Any) -> AsyncServer | None:
        """For a store on a Chroma server; None for an embedded (or unknown) one."""
        client: Any = getattr(vectorstore, "_client", None)
        server: Any = getattr(client, "_server", None)
        try:
            settings = client.get_settings()
            if settings.chroma_api_impl != "chromadb.api.fastapi.FastAPI":
                return None
            url = (
                f"{server.get_api_url()}/tenants/{quote(client.tenant, safe='')}"
                f"/databases/{quote(client.database, safe='')}/collections/"
            )
            headers = dict(server.get_request_headers())
        except Exception:  # not a Chroma HTTP client: the thread path
            return None
        verify = settings.chroma_server_ssl_verify
        # The sync client's waits (open_store gives it a timeout; Chroma's own has none).
        timeout = getattr(getattr(server, "_session", None), "timeout", None)
        return cls(vectorstore, url, headers, True if verify is None else verify, timeout)

    async def call(self, endpoint: str, body: Mapping[str, Any], *, among: bool = False) -> Any:
        """POST ``body`` to the collection's ``endpoint`` (``query`` or ``get``).

        ``among``: a search among ids, which Chroma refuses (``InternalError``) when one is no
        longer stored; that error is raised as it is, not read as a store failure, whose
        diagnosis reads the collection with the sync client, on the event loop.
        """
        import orjson
        from chromadb.api.base_http_client import BaseHTTPClient
        from chromadb.errors import InternalError

        collection = str(self._vectorstore._collection.id)
        with store_errors(self._vectorstore):
            response = await (await self._client()).post(
                f"{self._url}{quote(collection, safe='')}/{endpoint}",
                content=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
            )
        try:
            BaseHTTPClient._raise_chroma_error(response)  # Chroma's errors, as sync raises them
        except Exception as error:  # a refusal of the credentials is a bare Exception
            if among and isinstance(error, InternalError):  # the caller's IdsRefused
                raise
            with store_errors(self._vectorstore):
                raise
        return orjson.loads(response.content)

    async def _client(self) -> Any:
        import httpx

        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None:
            return entry[0]
        verify = self._verify if self._url.startswith("https:") else False
        client = httpx.AsyncClient(headers=self._headers, timeout=self._timeout, verify=verify)
        closer = _close_when_the_loop_ends(client)
        self._clients[loop] = (client, closer)  # before any await: one client per loop
        await anext(closer)
        return client


async def _close_when_the_loop_ends(client: Any) -> AsyncIterator[None]:
    """Hold ``client`` open until its event loop shuts down, then close its connections.

    ``asyncio.run`` (and any loop that calls ``shutdown_asyncgens``) finalises the async
    generators still alive, so an application that runs one loop per request leaves no
    sockets behind.
    """
    try:
        yield
    finally:
        await client.aclose()
