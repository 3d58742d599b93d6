"""Retrieval questions with gold evidence over the Perl 5.36 documentation (perl-doc).

Usage::

    apt-get install perl-doc                 # installs /usr/share/perl/5.36/pod/*.pod
    python benchmarks/perldocs.py --check    # render, validate the questions, print statistics

Pages are rendered from ``.pod`` to text with ``pod2text`` into ``benchmarks/.cache/perldoc/``
first (:func:`render`). Data: ``benchmarks/data/perldocs_questions.jsonl``; the set, its schema,
its checks and its targets are described in ``docsets.py`` (:data:`docsets.PERLDOCS`).
"""

from __future__ import annotations

import sys

from docsets import PERLDOCS, POD_ROOT, main
from docsets import POD_CACHE as CACHE
from docsets import render_pods as render

QUESTIONS = PERLDOCS.questions
__all__ = ["CACHE", "POD_ROOT", "QUESTIONS", "render"]

if __name__ == "__main__":
    sys.exit(main(docset=PERLDOCS))
