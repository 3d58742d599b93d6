"""Ctrl-C for the command line: raised where Python can take it, never lost, never a hang.

Python's own handler raises ``KeyboardInterrupt`` at whatever line runs when Ctrl-C comes.
Three places cannot take it:

- **The import machinery.** An interrupt inside importlib's bookkeeping (a module lock's
  weakref callback) can leave the global import lock held: the next import on another
  thread (Chroma's and the embedding's pools import lazily) then waits for ever.
- **Code run by** ``exec`` **while a module is imported** (every ``@dataclass`` does it). Once
  the interrupt has passed through ``exec``, CPython 3.11 ends the process by SIGINT at exit,
  whatever status the command returned, so the command's 130 was lost.
- **A finaliser** (``__del__``, a weakref callback). The interrupt is printed as "Exception
  ignored" and dropped, and the command runs on as if Ctrl-C had not come.

:func:`interrupts_where_safe` puts off an interrupt that comes in the first two (the frame
it would be raised in is inside importlib, or in code that ``exec`` or ``eval`` runs from a
string; a ``python -c`` program is a string too, but nothing called it) and takes back one dropped
by the third. A helper thread then asks again every few milliseconds, and the interrupt is
raised at the first line outside those places, once the outermost import running ends: at
once, or as late as the end of a command's first import of Chroma and the embedding model
(docs/benchmarks.md#the-command-lines-start-up). A second Ctrl-C while the first is put off,
or after it was raised (while the command cleans up), ends the process there and then, as a
shell's user expects: an import that never ends must not hold it, and a second interrupt
inside the clean-up could end the process by a signal (seen: a crash of the embedding's
threads).

This module imports only the standard library's lightest modules: it is installed before
anything else is imported.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

INTERRUPTED = "window-retriever: interrupted"
"""The one line an interrupted command ends with, wherever the interrupt is caught."""
RETRY_SECONDS = 0.005
"""How often a put-off interrupt is tried again."""
RETRY_SIGNAL = signal.SIGUSR2
"""Sent to the main thread to ask again; handled by the guard from the first interrupt owed."""

_UNSAFE_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def unsafe(frame: FrameType | None) -> bool:
    """Whether an interrupt raised in ``frame`` could hang the process or change its status."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name in _UNSAFE_FILES:
            return True
        if name == "<string>" and frame.f_back is not None:  # run by exec() or eval()
            return True
        frame = frame.f_back
    return False


class _Guard:
    """The SIGINT handler and the unraisable hook of one :func:`interrupts_where_safe`.

    The helper asks again by sending ``RETRY_SIGNAL`` to the main thread, not SIGINT: two
    SIGINTs coalesce into one handler call, so a second Ctrl-C could not be told apart. The
    signal's handler stays until the guard ends, after the helper: one sent late is ignored,
    where the default action would end the process.
    """

    def __init__(self, on_force: Callable[[], None]) -> None:
        self.on_force = on_force
        self.pending = False  # an interrupt is owed to the main thread
        self.raised = False  # an interrupt was raised: the command is ending
        self.previous_hook = sys.unraisablehook
        self._previous_retry: Any = None
        self._retry_installed = False
        self._helper: threading.Thread | None = None

    def interrupt(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT: raise ``KeyboardInterrupt`` here if it is safe, else owe it.

        Ctrl-C again, while the first is put off or once it was raised (the command is
        cleaning up), ends the process at once: a second interrupt inside that clean-up
        could end it by a signal, or worse.
        """
        if self.pending or self.raised:
            self.on_force()
        self.retry(signum, frame)

    def retry(self, signum: int, frame: FrameType | None) -> None:
        """Raise an owed interrupt if ``frame`` can take it (also the helper's retry)."""
        if signum == RETRY_SIGNAL and not self.pending:  # late, or sent from outside: not owed
            return
        if unsafe(frame):
            self._owe()
            return
        self.pending = False
        self.raised = True
        raise KeyboardInterrupt

    def unraisable(self, info: Any) -> None:
        """``sys.unraisablehook``: an interrupt a finaliser dropped is owed again, silently."""
        if isinstance(info.exc_value, KeyboardInterrupt):
            self._owe()
            return
        self.previous_hook(info)

    def close(self) -> None:
        """Nothing is owed any more: the helper ends, then the retry signal is given back."""
        self.pending = False
        if self._helper is not None:
            self._helper.join()
        if self._retry_installed:
            signal.signal(RETRY_SIGNAL, self._previous_retry)

    def _owe(self) -> None:
        self.pending = True
        if not self._retry_installed:  # runs in the main thread: a handler or a finaliser
            self._previous_retry = signal.signal(RETRY_SIGNAL, self.retry)
            # system calls restart after it where they can; sleeps and lock waits still wake
            signal.siginterrupt(RETRY_SIGNAL, False)
            self._retry_installed = True
        if self._helper is None or not self._helper.is_alive():
            self._helper = threading.Thread(
                target=self._ask_again, name="window-retriever-interrupt", daemon=True
            )
            self._helper.start()

    def _ask_again(self) -> None:
        while self.pending:
            time.sleep(RETRY_SECONDS)
            if self.pending:  # a real signal: it wakes a main thread that sleeps or waits
                signal.pthread_kill(threading.main_thread().ident or 0, RETRY_SIGNAL)


def _exit_now() -> None:
    print(INTERRUPTED, file=sys.stderr, flush=True)
    os._exit(130)


@contextmanager
def interrupts_where_safe(on_force: Callable[[], None] = _exit_now) -> Iterator[None]:
    """Within the block, Ctrl-C raises ``KeyboardInterrupt`` only where Python can take it.

    Installed only from the main thread (where signal handlers live), and not where SIGINT is
    ignored (a shell script's ``command &``); otherwise the block runs with the handlers it
    has. ``on_force`` runs on a second Ctrl-C, while the first is put off or once it was raised;
    by default it prints :data:`INTERRUPTED` and ends the process with 130. Once an interrupt
    was raised, the block leaves Ctrl-C ending the process at once
    (:func:`end_at_once_on_interrupt`).
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # `command &` in a script
    ):
        yield
        return
    guard = _Guard(on_force)
    previous = signal.signal(signal.SIGINT, guard.interrupt)
    sys.unraisablehook = guard.unraisable
    try:
        yield
    finally:
        guard.close()
        if guard.raised:  # the command is ending: a Ctrl-C on its way, or one more, ends it
            end_at_once_on_interrupt()
        else:
            signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = guard.previous_hook


def end_at_once_on_interrupt() -> None:
    """From now on, Ctrl-C ends the process with 130 at once (an interrupted command ends).

    Until Python's last steps of shutting down, which reset every handler to the system's
    default (a Ctrl-C then would end the process by SIGINT, not with 130): from the exit
    callbacks on, Ctrl-C is ignored, which those steps keep.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(
        signal.SIGINT
    ) not in (signal.SIG_IGN, _exit_at_once):
        signal.signal(signal.SIGINT, _exit_at_once)
        atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    os._exit(130)
