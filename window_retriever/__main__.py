"""``python -m window_retriever``: the same as the ``window-retriever`` command."""

import sys

from window_retriever.cli._main import main

sys.exit(main())
