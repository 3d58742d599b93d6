"""What a 1,000-chunk write costs the keyword index of a large collection (issue 39, item 3).

Usage: ``python benchmarks/catch_up.py [--chunks 100000] [--added 1000] [--rounds 3]
[--corpus realistic|synthetic] [--json OUT]`` (on a shared machine hold the lock: ``flock
/tmp/bench.lock python benchmarks/catch_up.py``).

A store on disk in a temporary folder is filled with ``--chunks`` chunks of the corpus
(``realistic.py``: real documentation resampled, the default; ``synthetic.py``'s 22 words,
the worst case) and ``DeterministicFakeEmbedding`` vectors (no model: what is timed is the
keyword index). A reader's index is built once (*build*). Then, ``--rounds`` times each and
alternately, ``add_chunks`` writes ``--added`` new chunks and the reader's
``KeywordIndex.refresh()`` catches up with them, its engine:

- *in place*: the default: the changed chunks' documents deleted and added
  (``keywords._engine.updated``);
- *whole*: every row indexed anew (``REINDEX_ROWS`` raised past the collection), what every
  catch-up did before.

Also timed: a reconciliation that finds nothing (``KeywordIndex.reconcile``: every record
read and compared by its digest). Seconds, medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))


def fill(store: Any, texts: list[str], metadatas: list[dict[str, Any]]) -> None:
    """Write the chunks straight to the collection (the fill is not what is measured)."""
    collection = store._collection
    size = 5000
    for start in range(0, len(texts), size):
        end = min(start + size, len(texts))
        collection.add(
            ids=[m["chunk_id"] for m in metadatas[start:end]],
            documents=texts[start:end],
            metadatas=metadatas[start:end],
            embeddings=[[float(i % 7), 1.0] for i in range(start, end)],
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--added", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", choices=["realistic", "synthetic"], default="realistic")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding

    import window_retriever.keywords._lifecycle as lifecycle
    from window_retriever import add_chunks
    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource, invalidate_keywords

    if args.corpus == "realistic":
        import realistic

        texts, metadatas = realistic.chunks(args.chunks + args.added * args.rounds * 2)
    else:
        import scale

        split, _ = scale.corpus(args.chunks + args.added * args.rounds * 2)
        texts = [chunk.page_content for chunk in split]
        metadatas = [dict(chunk.metadata) for chunk in split]
    base, extra = args.chunks, args.added
    results: dict[str, Any] = {"chunks": base, "added": extra, "corpus": args.corpus}
    with tempfile.TemporaryDirectory() as folder:
        store = Chroma(
            collection_name="catch-up",
            client=chromadb.PersistentClient(path=folder),
            embedding_function=DeterministicFakeEmbedding(size=2),
        )
        started = time.perf_counter()
        fill(store, texts[:base], metadatas[:base])
        invalidate_keywords(store)  # a generation token, as any library write leaves
        results["fill_s"] = round(time.perf_counter() - started, 1)
        index = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
        started = time.perf_counter()
        index.refresh()
        results["build_s"] = round(time.perf_counter() - started, 2)
        times: dict[str, list[float]] = {"in_place": [], "whole": []}
        offset = base
        for _round in range(args.rounds):
            for mode, rows in (("in_place", lifecycle.REINDEX_ROWS), ("whole", 10**12)):
                batch = [
                    Document(text, metadata=metadata, id=metadata["chunk_id"])
                    for text, metadata in zip(
                        texts[offset : offset + extra],
                        metadatas[offset : offset + extra],
                        strict=True,
                    )
                ]
                offset += extra
                add_chunks(store, batch)  # stamped already: a library write, told to the feed
                previous, lifecycle.REINDEX_ROWS = lifecycle.REINDEX_ROWS, rows
                try:
                    started = time.perf_counter()
                    index.refresh()
                    times[mode].append(time.perf_counter() - started)
                finally:
                    lifecycle.REINDEX_ROWS = previous
        for mode, seconds in times.items():
            results[f"catch_up_{mode}_s"] = round(statistics.median(seconds), 3)
            results[f"catch_up_{mode}_all_s"] = [round(s, 3) for s in seconds]
        results["engine_adds"], results["engine_deletes"] = index.engine_adds, index.engine_deletes
        started = time.perf_counter()
        found = index.reconcile()
        results["reconcile_s"] = round(time.perf_counter() - started, 2)
        results["reconcile_found"] = len(found)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
