"""The Python API end to end: load pages, split them, store the chunks, retrieve windows.

    python examples/ingest_and_query.py ["QUESTION"] [--total-budget N] [--window-map PNG]

It loads the three bundled pages of the Python 3.11 tutorial (window_retriever/_data/pages) with
BeautifulSoup, splits them with WindowSplitter, stores the chunks with add_chunks in a Chroma
store in a temporary directory (the packaged embedding model: offline, no API key), and
prints the windows that ContextWindowRetriever returns for the question. With --window-map it
also draws which chunks the windows cover (needs matplotlib: the [eval] extra).

The bundled pages are copies of pages on docs.python.org, so each is stored under its address
there: citations then link to the passage on the live page (see chain.py).
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from bs4 import BeautifulSoup
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks, default_embeddings

PAGES = Path(__file__).resolve().parents[1] / "window_retriever" / "_data" / "pages"
ONLINE = "https://docs.python.org/3.11/tutorial/"  # where the bundled pages come from
QUESTION = "How do I make sure a file is closed after reading it, even if an exception is raised?"


def load_pages(directory: Path = PAGES) -> list[Document]:
    """Each HTML page as one Document: the text of its article, its title and its address."""
    documents = []
    for path in sorted(directory.glob("*.html")):
        soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        article = soup.find("div", class_="body") or soup  # the page without its navigation
        lines = [line.rstrip() for line in article.get_text().splitlines()]
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        title = soup.title.get_text().split(" \N{EM DASH} ")[0].strip() if soup.title else None
        metadata = {"source": ONLINE + path.name, "title": title}
        documents.append(Document(page_content=text, metadata=metadata))
    return documents


def build_store(directory: str) -> tuple[Chroma, list[Document]]:
    """Split the bundled pages and store their chunks in a Chroma store in ``directory``."""
    chunks = WindowSplitter().split_documents(load_pages())  # 400 characters, 40 overlap
    store = Chroma(
        collection_name="pages",
        embedding_function=default_embeddings(),
        persist_directory=directory,
    )
    add_chunks(store, chunks)  # under their chunk ids: running it again updates, never doubles
    return store, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("question", nargs="?", default=QUESTION)
    parser.add_argument("--total-budget", type=int, default=1500, metavar="N")
    parser.add_argument("--window-map", metavar="PNG", help="also draw the window map here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="window-retriever-example-") as directory:
        store, chunks = build_store(directory)
        print(f"stored {len(chunks)} chunks of the pages in {PAGES} in {directory}")

        retriever = ContextWindowRetriever(vectorstore=store, total_budget=args.total_budget)
        windows = retriever.invoke(args.question)

        print(f"\nQ: {args.question}\n")
        used = sum(len(window.page_content) for window in windows)
        print(f"{len(windows)} windows, {used} of {args.total_budget} characters\n")
        for rank, window in enumerate(windows, 1):
            meta = window.metadata
            first, last = meta["first_chunk_index"], meta["last_chunk_index"]
            span = f"chunk {first}" if first == last else f"chunks {first}-{last}"
            print(
                f"[{rank}] {meta['title']}, {span}, "
                f"characters {meta['start_index']}-{meta['end_index']}, "
                f"score {meta['score']:.3f}, {len(meta['hit_chunk_ids'])} hit(s)"
            )
            print("    " + window.page_content.replace("\n", "\n    "))

        if args.window_map:
            from window_retriever.plotting import plot_window_map

            plain = store.similarity_search(args.question, k=4)
            plot_window_map(
                windows, chunks=chunks, plain=plain, title=args.question, path=args.window_map
            )
            print(f"\nwindow map: {args.window_map}")


if __name__ == "__main__":
    main()
