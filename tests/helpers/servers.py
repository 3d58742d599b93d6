"""Chroma servers on loopback, a credential-checking proxy, and scripts run in new processes.

What the tests that start servers or processes share: the session's server fixture
(``chroma_server``) and the proxies' (``guarded_server``) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.helpers import ROOT


def run_script(script: str, config: dict[str, Any]) -> Any:
    """Run ``script`` in a new Python process, ``config`` its one argument (as JSON).

    Returns its last line of output, read as JSON (``None`` when it printed nothing); a
    process that fails fails the test with its error output.
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), json.dumps(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


TOKEN = "s3cret-token"  # noqa: S105 - a test's token


def unique(prefix: str) -> str:
    """A collection (or tenant, database) name no other test uses on the shared server."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ChromaServer:
    """A ``chroma run`` on loopback from this environment's ``chroma``, answering once built.

    The one place the tests start a Chroma server: the session's :func:`chroma_server`, a
    server on IPv6 loopback, and the servers a test pauses (SIGSTOP), resumes or stops.
    """

    def __init__(self, path: Path, host: str = "127.0.0.1") -> None:
        port = _free_port(host)
        executable = Path(sys.executable).parent / "chroma"
        self.process = subprocess.Popen(
            [str(executable), "run", "--path", str(path), "--host", host, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        address = f"[{host}]" if ":" in host else host
        self.url = f"http://{address}:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                chromadb.HttpClient(host=address, port=port).heartbeat()
                return
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    pytest.fail(f"the Chroma server on {address} did not start")
                time.sleep(0.2)

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()  # a stopped process cannot act on SIGTERM
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class GuardedProxy:
    """An HTTP proxy on loopback in front of the Chroma server that checks credentials.

    Chroma's open-source server does not check them itself; in production a proxy or Chroma's
    distributed deployment does, answering 401 / 403 as this one does. ``seen`` keeps the
    credentials of every request that reached the server.
    """

    def __init__(self, upstream: str, accepted: dict[str, str], delay: float = 0.0) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        self.accepted = {name.lower(): value for name, value in accepted.items()}
        self.seen: list[dict[str, str]] = []
        self.in_flight = self.most_in_flight = 0
        self.by_call: dict[str, list[int]] = {}  # last path segment: [in flight, most]
        lock = threading.Lock()
        upstream_parts = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real server

            def _forward(self) -> None:
                given = {k.lower(): v for k, v in self.headers.items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if not any(given.get(k) == v for k, v in proxy.accepted.items()):
                    code = 401 if not any(k in given for k in proxy.accepted) else 403
                    payload = b'{"error": "Unauthorized", "message": "bad credentials"}'
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                proxy.seen.append({k: given[k] for k in proxy.accepted if k in given})
                call = proxy.by_call.setdefault(self.path.rstrip("/").rsplit("/", 1)[-1], [0, 0])
                with lock:
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                    call[0] += 1
                    call[1] = max(call)
                try:
                    time.sleep(delay)  # a server across a network
                    self._pass_on(body)
                finally:
                    with lock:
                        proxy.in_flight -= 1
                        call[0] -= 1

            def _pass_on(self, body: bytes | None) -> None:
                import http.client

                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                for attempt in (1, 2):  # once more on a fresh connection if a pooled one died
                    if getattr(self, "upstream", None) is None:
                        self.upstream = http.client.HTTPConnection(
                            upstream_parts.hostname or "127.0.0.1", upstream_parts.port, timeout=30
                        )
                    try:
                        self.upstream.request(self.command, self.path, body=body, headers=headers)
                        response = self.upstream.getresponse()
                        data = response.read()
                        break
                    except (ConnectionError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt == 2:
                            raise
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def finish(self) -> None:
                super().finish()
                if getattr(self, "upstream", None) is not None:
                    self.upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # many clients connect at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


OPEN = """
import json, os, sys
config = json.loads(sys.argv[1])
if "cache" in config:  # this "machine"'s cache folder
    os.environ["WINDOW_RETRIEVER_CACHE"] = config["cache"]
import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from window_retriever.stores._chroma_keywords import ChromaKeywordSource, keyword_index
from window_retriever.keywords._index import KeywordIndex
if "host" in config:
    client = chromadb.HttpClient(host=config["host"], port=config["port"])
else:
    client = chromadb.PersistentClient(path=config["path"])
store = Chroma(
    collection_name=config["name"],
    embedding_function=DeterministicFakeEmbedding(size=16),
    client=client,
)
"""


def server_store(url: str, prefix: str) -> tuple[dict[str, Any], Chroma]:
    """A new collection on the server at ``url``: the scripts' config, and this process's store."""
    address = urlsplit(url)
    config = {"host": address.hostname, "port": address.port, "name": unique(prefix)}
    store = Chroma(
        collection_name=config["name"],
        embedding_function=DeterministicFakeEmbedding(size=16),
        client=chromadb.HttpClient(host=address.hostname, port=address.port),
    )
    return config, store
