"""Retrieval questions with gold evidence over the Python 3.11 documentation.

Usage::

    apt-get install python3.11-doc           # installs /usr/share/doc/python3.11/html
    python benchmarks/pydocs.py --check      # validate the questions and print statistics

Data: ``benchmarks/data/pydocs_questions.jsonl``; the set, its schema and its checks are
described in ``docsets.py`` (:data:`docsets.PYDOCS`).
"""

from __future__ import annotations

import sys

from docsets import PYDOCS, main

DOCS_ROOT = PYDOCS.root
QUESTIONS = PYDOCS.questions

if __name__ == "__main__":
    sys.exit(main(docset=PYDOCS))
