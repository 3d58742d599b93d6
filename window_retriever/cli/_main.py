"""The ``window-retriever`` entry point: nothing to import before Ctrl-C is handled.

Importing the command line takes long enough for a Ctrl-C to land in it, and an interrupt
then would end in a traceback, or worse (see :mod:`window_retriever.cli._interrupt`;
docs/benchmarks.md#the-command-lines-start-up). This module imports only that light module, so
the interrupt is handled from the first line of :func:`main` on (Python's own start-up is the
rest).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from window_retriever.cli._interrupt import INTERRUPTED, interrupts_where_safe


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (130 when interrupted)."""
    with interrupts_where_safe():  # once interrupted, it leaves Ctrl-C ending the process
        try:
            from window_retriever.cli._parser import main as run

            return run(argv)
        except KeyboardInterrupt:  # before the command handles it (importing, parsing)
            print(INTERRUPTED, file=sys.stderr)
            return 130
