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

With ``--drift`` (realistic corpus), what updating in place costs the ranking: writes that
rewrite existing chunks (each text replaced by another chunk's, so the engine deletes a
document and adds one) until ``--drift-steps`` shares of the rows were rewritten, and after
each the reader's top ``k`` (10, the default's) for each real question against those of an
index built anew from the same records (exact BM25 statistics): the mean share of the top
``k`` they hold in common, and the share of questions whose top ``k`` is the same list.
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


def drift(
    store: Any,
    index: Any,
    texts: list[str],
    metadatas: list[dict[str, Any]],
    base: int,
    steps: list[float],
) -> list[dict[str, Any]]:
    """The in-place reader's top 10 against a fresh build's after rewrites (see the module)."""
    import random

    import realistic
    from langchain_core.documents import Document

    from window_retriever import add_chunks
    from window_retriever.keywords._index import KeywordIndex
    from window_retriever.stores._chroma_keywords import ChromaKeywordSource

    k = 10
    questions = realistic.questions()
    rng = random.Random(7)
    order = list(range(base))
    rng.shuffle(order)
    rewritten, rows = 0, []
    for share in steps:
        target = int(share * base)
        batch = []
        for position in order[rewritten:target]:  # chunk at position gets another's text
            source = texts[rng.randrange(base)]
            batch.append(
                Document(source, metadata=metadatas[position], id=metadatas[position]["chunk_id"])
            )
        for start in range(0, len(batch), 1000):  # writes of 1,000, each caught up with
            add_chunks(store, batch[start : start + 1000])
            index.refresh()
        rewritten = target
        fresh = KeywordIndex(ChromaKeywordSource(store), check_interval=0, reconcile_interval=None)
        fresh.directory = None  # built in memory from the records: nothing saved is loaded
        fresh.refresh()
        common, same = [], 0
        for question in questions:
            held = [chunk_id for chunk_id, _ in index.search(question, k)]
            exact = [chunk_id for chunk_id, _ in fresh.search(question, k)]
            common.append(len(set(held) & set(exact)) / max(1, len(exact)))
            same += held == exact
        rows.append(
            {
                "rewritten_share": share,
                "engine_deleted": index.engine_deletes,
                "top10_in_common": round(statistics.mean(common), 4),
                "same_top10": round(same / len(questions), 4),
                "questions": len(questions),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--added", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", choices=["realistic", "synthetic"], default="realistic")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--drift", action="store_true", help="measure the ranking's drift")
    parser.add_argument("--drift-steps", type=float, nargs="+", default=[0.05, 0.1, 0.2])
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
        if args.drift:
            results["drift"] = drift(store, index, texts, metadatas, base, args.drift_steps)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
