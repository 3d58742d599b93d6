"""A writer's lock on an embedded Chroma directory.

Chroma's embedded mode is safe for threads but not for processes: two ingests writing to one
directory at once can corrupt it. Every writer of this package takes an exclusive lock on a
file in the directory first; a second writer waits (if asked to) or stops with a clear message.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from window_retriever._errors import Option, StoreError, WindowRetrieverError

LOCK_NAME = ".window-retriever.lock"


class StoreLockedError(WindowRetrieverError):
    """Another process is writing to the same embedded store."""


@contextmanager
def writer_lock(directory: str | Path, *, wait: bool = False) -> Iterator[None]:
    """Hold the exclusive writer lock of ``directory`` (created if missing) for the block."""
    path = Path(directory)
    if path.exists() and not path.is_dir():  # as open_store words it
        raise StoreError(Option("db", path, said=str(path)), " is a file, not a store directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:  # a file on the way (NotADirectoryError), no permission, ...
        reason = error.strerror or type(error).__name__
        raise StoreError(f"cannot use {path} as a store directory ({reason})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise StoreLockedError(
                f"another process is writing to the store in {path}; wait for it to finish "
                "(or pass ",
                Option("wait", True),
                "), or use a Chroma server (",
                Option("url", said="open_store(url=...)"),
                ") for several writers",
            ) from None
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
