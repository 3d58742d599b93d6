"""The synthetic corpus of the latency and scale benchmarks: files of random sentences.

The same seed gives the same files; the words are the library's own vocabulary, so every
query shares words with many chunks (the hard case for a vector search).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document

WORDS = [
    *("window", "chunk", "context", "retrieval", "budget", "merge", "file", "store"),
    *("query", "answer", "evidence", "table", "sentence", "paragraph", "section", "source"),
    *("index", "neighbour", "overlap", "vector", "search", "token"),
]


def synthetic_files(
    rng: random.Random,
    chunks: int,
    per_file: int,
    metadata: Callable[[int], dict[str, Any]],
) -> list[Document]:
    """Files of about ``per_file`` chunks each (four sentences a chunk), ``chunks`` in all.

    ``metadata(number)`` gives the metadata of file ``number``; ``rng`` is drawn from in order,
    so the caller may go on drawing from it (to sample queries) after the files.
    """
    documents = []
    for number in range(max(1, chunks // per_file)):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
            for _ in range(per_file * 4)
        ]
        documents.append(Document(page_content=" ".join(sentences), metadata=metadata(number)))
    return documents
