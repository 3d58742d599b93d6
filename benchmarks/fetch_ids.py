"""Ids read by id a query: static windows on scale.py's synthetic corpus, with and without a filter.

Usage: ``PYTHONPATH=TREE python benchmarks/fetch_ids.py [--chunks 20000] [--queries 100]``.

A count, not a clock: deterministic, so it needs no benchmark lock and tells one commit from
another where timings drown in noise. It builds scale.py's synthetic corpus (files of 50
chunks of about 400 characters, ten tenants) in a temporary Chroma on disk with the fake
embedding, then runs ``ContextWindowRetriever(k=4)`` (static windows of up to 1,200
characters) over the same queries, unfiltered and under ``{"tenant": "t3"}``, after five
warm-up queries (so the lean search runs), and prints the mean ids each query's ``get`` calls
carried, the ``get`` calls a query and how many of them sent a ``where``. It counts at
Chroma's ``Collection.get``, below the library, so it runs on the package of any commit
(``git archive COMMIT window_retriever | tar -x -C DIR``, then ``PYTHONPATH=DIR``); only
``WindowSplitter``, ``add_chunks`` and ``ContextWindowRetriever`` are used.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from typing import Any

from chromadb.api.models.Collection import Collection
from langchain_chroma import Chroma
from langchain_core.embeddings import DeterministicFakeEmbedding
from synthetic import synthetic_files

from window_retriever import ContextWindowRetriever, WindowSplitter, add_chunks

LOG: list[tuple[int, bool]] = []
"""Each ``get``: the ids it carried, and whether it sent a ``where``."""

_GET = Collection.get


def _counted_get(self: Any, ids: Any = None, where: Any = None, *args: Any, **kwargs: Any) -> Any:
    LOG.append((len(ids) if ids is not None else 0, where is not None))
    return _GET(self, ids, where, *args, **kwargs)


def main() -> None:
    """Build the store, count each configuration's reads, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    Collection.get = _counted_get  # type: ignore[method-assign]
    rng = random.Random(7)
    documents = synthetic_files(
        rng, args.chunks, 50, lambda n: {"source": f"doc-{n}", "tenant": f"t{n % 10}"}
    )
    split = WindowSplitter().split_documents(documents)
    texts = [chunk.page_content for chunk in rng.sample(split, min(len(split), 2000))]
    queries = [" ".join(text.split()[3:12]) for text in texts][: args.queries]
    with tempfile.TemporaryDirectory() as directory:
        store = Chroma(
            collection_name="bench",
            embedding_function=DeterministicFakeEmbedding(size=384),
            persist_directory=directory,
        )
        add_chunks(store, split)
        for where in (None, {"tenant": "t3"}):
            retriever = ContextWindowRetriever(vectorstore=store, k=4, filter=where)
            for query in queries[:5]:
                retriever.invoke(query)
            ids, gets, with_where = [], [], []
            for query in queries:
                LOG.clear()
                retriever.invoke(query)
                ids.append(sum(carried for carried, _ in LOG))
                gets.append(len(LOG))
                with_where.append(sum(sent for _, sent in LOG))
            print(
                f"filter={'tenant' if where else 'none'}: ids a query {statistics.mean(ids):.2f}, "
                f"gets {statistics.mean(gets):.2f}, gets with a where "
                f"{statistics.mean(with_where):.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
