"""Offline demo: ingest three pages of the Python tutorial, then compare plain chunks and windows.

Run it with ``make demo`` (or ``python examples/demo.py [QUESTION] [--db DIR]``). Everything
runs on this machine: Chroma on local disk and the packaged MiniLM embedding model.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import time
from pathlib import Path

from bs4 import BeautifulSoup
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks, default_embeddings

PAGES = Path(__file__).parent / "pages"
QUESTION = "How do I make sure a file is closed after reading it, even if an exception is raised?"


def load_page(path: Path) -> Document:
    """Read a tutorial page: the text of its ``div.body``, with blank runs collapsed."""
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    body = soup.select_one("div.body") or soup
    text = re.sub(r"\n\s*\n+", "\n\n", body.get_text()).strip()
    title = soup.title.get_text().strip() if soup.title else path.stem
    return Document(
        page_content=text, metadata={"source": f"examples/pages/{path.name}", "title": title}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default=QUESTION)
    parser.add_argument("--db", default="demo-db", help="Chroma directory (default: demo-db)")
    parser.add_argument("-k", type=int, default=3, help="windows to return (default: 3)")
    parser.add_argument(
        "--budget", type=int, default=1200, help="characters per window (default: 1200)"
    )
    args = parser.parse_args(argv)

    store = Chroma(
        collection_name="demo", embedding_function=default_embeddings(), persist_directory=args.db
    )
    chunks = WindowSplitter().split_documents(load_page(p) for p in sorted(PAGES.glob("*.html")))
    ids = [c.metadata["chunk_id"] for c in chunks]
    stored = set(store.get(ids=ids, include=[])["ids"])
    if stored != set(ids):
        began = time.perf_counter()
        add_chunks(store, chunks)
        print(
            f"ingested {len(chunks)} chunks of 3 pages "
            f"in {time.perf_counter() - began:.1f} s -> {args.db}/"
        )
    else:
        print(f"{len(chunks)} chunks already in {args.db}/")

    print(f"\nQ: {args.question}\n")
    plain = store.similarity_search_with_score(args.question, k=args.k)
    print(
        f"--- plain top {args.k} chunks ({sum(len(d.page_content) for d, _ in plain)} characters)"
    )
    for doc, score in plain:
        print(
            f"[{doc.metadata['source']} chunk {doc.metadata['chunk_index']}, distance {score:.3f}]"
        )
        print(textwrap.indent(doc.page_content, "    "))
    retriever = ContextWindowRetriever(vectorstore=store, k=args.k, window_budget=args.budget)
    windows = retriever.invoke(args.question)
    print(f"\n--- {len(windows)} windows ({sum(len(d.page_content) for d in windows)} characters)")
    for doc in windows:
        meta = doc.metadata
        print(
            f"[{meta['source']} chunks {meta['first_chunk_index']}-{meta['last_chunk_index']}, "
            f"characters {meta['start_index']}-{meta['end_index']}, score {meta['score']:.3f}, "
            f"hits {len(meta['hit_chunk_ids'])}]"
        )
        print(textwrap.indent(doc.page_content, "    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
