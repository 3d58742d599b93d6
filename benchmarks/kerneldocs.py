"""Retrieval questions with gold evidence over the Linux kernel 6.1 documentation.

Usage::

    apt-get install linux-doc-6.1               # installs /usr/share/doc/linux-doc-6.1/html
    python benchmarks/kerneldocs.py --check     # validate the questions and print statistics

Data: ``benchmarks/data/kerneldocs_questions.jsonl``; the set, its schema, its checks and its
targets are described in ``docsets.py`` (:data:`docsets.KERNELDOCS`).
"""

from __future__ import annotations

import sys

from docsets import KERNELDOCS, main

DOCS_ROOT = KERNELDOCS.root
QUESTIONS = KERNELDOCS.questions

if __name__ == "__main__":
    sys.exit(main(docset=KERNELDOCS))
