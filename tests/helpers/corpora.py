"""Texts made for the tests, and embeddings made for them.

LoCoMo-like conversations (short turns on few topics) with embeddings that tell topics apart,
with or without ties; a custom store that cannot search ids alone; and two files of tenant
acme on pottery and gardens, with the question asked of them.
"""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from typing import Any, ClassVar

from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import Fetch, Found, Search, WindowSplitter, WindowStore
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import execute

SPEAKERS = ("Caroline", "Melanie")
TOPICS = ("pottery", "camping", "adoption", "painting", "running", "guitar", "library", "garden")


def turns(count: int, seed: int) -> str:
    """A LoCoMo-like conversation: short turns, one topic each, runs of the same topic."""
    rng = random.Random(seed)
    lines, topic = [], rng.choice(TOPICS)
    for i in range(count):
        if rng.random() < 0.3:
            topic = rng.choice(TOPICS)
        lines.append(f"{SPEAKERS[i % 2]}: turn {i} I told you about {topic} and {topic} again.")
    return "\n".join(lines)


def distinct_conversations(turn_count: int, *, tenants: bool = False) -> list[Document]:
    """Three conversations whose chunks are never alike: each turn names its conversation.

    With ``tenants`` the first two are tenant "a" and the third "b".
    """
    return [
        Document(
            page_content=turns(turn_count, seed).replace(" turn ", f" conversation {seed}, turn "),
            metadata={
                "source": f"conv-{seed}",
                **({"tenant": "a" if seed < 2 else "b"} if tenants else {}),
            },
        )
        for seed in range(3)
    ]


class KeywordEmbeddings(Embeddings):
    """Bag of topic words: texts about the same topics are similar, others are not."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = [float(text.count(topic)) for topic in TOPICS] + [0.1]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]


class UntiedKeywordEmbeddings(KeywordEmbeddings):
    """:class:`KeywordEmbeddings` with a last, small component of each text's own.

    It breaks the ties between texts of the same topics: Chroma breaks exact ties
    arbitrarily (12 builds of the same data gave 12 different top-30s), so which of them a
    search returns, and so how many reads a test counts, changed from run to run.
    """

    def embed_query(self, text: str) -> list[float]:
        own = zlib.crc32(text.encode()) % 1000 / 1000 * 0.05
        vector = [float(text.count(topic)) for topic in TOPICS] + [0.1, own]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]


def split(documents: list[Document], size: int = 120, overlap: int = 20) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    )
    return WindowSplitter(splitter).split_documents(documents)


class ModernStore(WindowStore):
    """A custom store that searches and fetches (with vectors) but cannot search ids alone:
    adaptive selection then measures every neighbour by its stored vector."""

    supports_embeddings: ClassVar[bool] = True
    supports_query_embedding: ClassVar[bool] = True

    def __init__(self, store: Chroma) -> None:
        self.inner = store_adapter(store)
        self.searches: list[Search] = []

    def search(self, request: Search) -> Found:
        self.searches.append(request)
        return execute(self.inner, request)

    def fetch(self, request: Fetch) -> Found:
        return execute(self.inner, request)

    supports_keyword_search: ClassVar[bool] = True

    def keyword_search(
        self, query: str, k: int, where: Any, where_document: Any
    ) -> list[tuple[str, float]]:
        return self.inner.keyword_search(query, k, where, where_document)


class TieFreeEmbeddings(KeywordEmbeddings):
    """Topic words plus a little noise drawn from the text: no two chunks at one distance, so
    searches of any width rank them alike."""

    def embed_query(self, text: str) -> list[float]:
        noise = random.Random(hashlib.sha256(text.encode()).digest())
        vector = [
            *super().embed_query(text),
            *(0.15 * noise.random() for _ in range(4)),
        ]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]


QUESTION = "pottery kiln"


def pages() -> list[Document]:
    """Two files of tenant acme, 20 chunks of about 200 characters each, stamped."""
    texts = {
        "a.txt": "\n\n".join(
            f"Paragraph {i} on pottery glaze and kiln {i}. " * 3 for i in range(20)
        ),
        "b.txt": "\n\n".join(f"Note {i} on garden soil and compost {i}. " * 3 for i in range(20)),
    }
    splitter = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=200, chunk_overlap=20))
    return splitter.split_documents(
        [
            Document(text, metadata={"source": source, "tenant": "acme"})
            for source, text in texts.items()
        ]
    )
