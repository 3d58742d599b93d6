"""The ``window-retriever`` entry point: nothing to import before Ctrl-C is handled.

Importing the command line takes long enough for a Ctrl-C to land in it, and an interrupt
then would end in a traceback, or worse (see :mod:`window_retriever.cli._interrupt`;
docs/benchmarks.md#the-command-lines-start-up). This module imports only that light module, so
the interrupt is handled from the first line of :func:`main` on (Python's own start-up is the
rest).

A command that writes nothing (``query``) ends its process here once its output is out,
without Python's teardown: unloading Chroma, LangChain and onnxruntime module by module took
0.3-0.6 s of every ``query`` (docs/benchmarks.md#start-up-of-the-command-line-issue-41).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from window_retriever.cli._interrupt import INTERRUPTED, interrupts_where_safe


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (130 when interrupted).

    The process's entry point (``window-retriever``, ``python -m window_retriever``): after a
    command that writes nothing it ends the process itself (:func:`end_now`). A program runs
    commands with ``window_retriever.cli._parser.main`` instead.
    """
    with interrupts_where_safe():  # once interrupted, it leaves Ctrl-C ending the process
        try:
            from window_retriever.cli._parser import parse, run

            args = parse(argv)
            status = run(args)
        except KeyboardInterrupt:  # before the command handles it (importing, parsing)
            print(INTERRUPTED, file=sys.stderr)
            return 130
    if not args.writes:
        end_now(status)
    return status


def end_now(status: int) -> NoReturn:
    """End the process with ``status``: flush the output, run the exit handlers, and no more.

    What Python's own exit would do next is left out: waiting for threads that are not
    daemons, and then unloading every module (finalisers, the native libraries' destructors).
    So only a command that writes nothing may end here. A daemon thread still running (a
    keyword index being saved in the background) stops as it would at any exit: the index is
    moved into place whole or not at all, and the next process finds the old one or builds.
    """
    atexit._run_exitfuncs()  # logging's flush among them, and a coverage run's save
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the reader left (`query | head`)
            stream.flush()
    os._exit(status)
