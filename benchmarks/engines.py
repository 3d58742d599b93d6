"""Keyword engines side by side: today's bm25s index, tantivy and SQLite FTS5 (issue 28, step 1).

Usage: ``python benchmarks/engines.py [--chunks 10000 100000] [--queries 200] [--out OUT]``
(one engine at a time, each in a fresh process, so its peak memory is its own; on a shared
machine, hold a lock: ``flock /tmp/bench.lock python benchmarks/engines.py``).

Every engine indexes the same synthetic chunks (``synthetic.WORDS``, 60 words a chunk: every
query word is in nearly every chunk, the worst case for a top-k search) under the same
pre-tokenised words (lower-cased, split on spaces), so what differs is the engine alone:

- ``bm25s``: ``bm25s.BM25`` (Lucene BM25, k1 1.5), top-k by ``retrieve``; the id restriction
  as the library applies it (scores of the rows it hides set to 0 before the top-k);
- ``tantivy``: an on-disk index, one segment, the words in a ``whitespace`` field, a
  ``should`` query of the words; the restriction a ``term_set_query`` of the allowed ids;
- ``fts5``: a contentless FTS5 table on disk, ``MATCH 'a OR b ...' ORDER BY rank``; the
  restriction a join with the allowed rowids.

Reported per engine and size: build (index the tokens and save), cold open (a new handle on
the saved index), peak RSS of the process, and the top-20 p50 without and with a restriction
to 10% of the ids (the tenant filter case). FTS5 is timed on at most 20 queries: it scores
every matching row, seconds a query at 1M.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import WORDS

K = 20
WORDS_PER_CHUNK = 60


def corpus(chunks: int, queries: int) -> tuple[list[str], list[str], list[list[str]]]:
    rng = random.Random(3)
    texts = [" ".join(rng.choice(WORDS) for _ in range(WORDS_PER_CHUNK)) for _ in range(chunks)]
    ids = [f"f{n // 50:06d}:{n % 50:04d}" for n in range(chunks)]
    asked = [[rng.choice(WORDS) for _ in range(5)] for _ in range(queries)]
    return ids, texts, asked


def p50_ms(search: Any, queries: list[list[str]]) -> float:
    times = []
    for words in queries:
        began = time.perf_counter()
        found = search(words)
        times.append(time.perf_counter() - began)
        if not 0 < len(found) <= K:
            raise SystemExit(f"a query found {len(found)} chunks, expected 1 to {K}")
    return statistics.median(times) * 1000


def run_bm25s(
    folder: Path, ids: list[str], texts: list[str], queries: list[list[str]]
) -> dict[str, float]:
    import bm25s
    import numpy as np

    began = time.perf_counter()
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    model.index([text.split() for text in texts], show_progress=False)
    model.save(str(folder / "bm25s"))
    build = time.perf_counter() - began
    began = time.perf_counter()
    model = bm25s.BM25.load(str(folder / "bm25s"), mmap=True)
    cold = time.perf_counter() - began
    vocabulary = model.vocab_dict
    allowed = np.zeros(len(ids), dtype=bool)
    allowed[::10] = True

    def search(words: list[str], mask: Any = None) -> list[str]:
        scores = model.get_scores([w for w in words if w in vocabulary])
        if mask is not None:
            scores[~mask] = 0
        top = np.argpartition(-scores, K)[:K]
        return [ids[row] for row in top[np.argsort(-scores[top])] if scores[row] > 0]

    return {
        "build_s": build,
        "open_s": cold,
        "p50_ms": p50_ms(search, queries),
        "p50_restricted_ms": p50_ms(lambda w: search(w, allowed), queries),
    }


def run_tantivy(
    folder: Path, ids: list[str], texts: list[str], queries: list[list[str]]
) -> dict[str, float]:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text", tokenizer_name="whitespace")
    schema = builder.build()
    began = time.perf_counter()
    index = tantivy.Index(schema, path=str(folder))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for chunk_id, text in zip(ids, texts, strict=True):
        document = tantivy.Document()
        document.add_text("id", chunk_id)
        document.add_text("text", text)
        writer.add_document(document)
    writer.commit()
    writer.wait_merging_threads()
    build = time.perf_counter() - began
    began = time.perf_counter()
    searcher = tantivy.Index.open(str(folder)).searcher()
    cold = time.perf_counter() - began
    restriction = tantivy.Query.const_score_query(
        tantivy.Query.term_set_query(schema, "id", ids[::10]), 0.0
    )

    def search(words: list[str], restricted: bool = False) -> list[str]:
        should = tantivy.Occur.Should
        query = tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(schema, "text", word)) for word in words]
        )
        if restricted:
            must = tantivy.Occur.Must
            query = tantivy.Query.boolean_query([(must, query), (must, restriction)])
        hits = searcher.search(query, K).hits
        return [searcher.doc(address)["id"][0] for _, address in hits]

    return {
        "build_s": build,
        "open_s": cold,
        "p50_ms": p50_ms(search, queries),
        "p50_restricted_ms": p50_ms(lambda w: search(w, restricted=True), queries),
    }


def run_fts5(
    folder: Path, ids: list[str], texts: list[str], queries: list[list[str]]
) -> dict[str, float]:
    path = folder / "fts5.db"
    began = time.perf_counter()
    connection = sqlite3.connect(path)
    connection.execute("CREATE VIRTUAL TABLE chunks USING fts5(text, content='')")
    connection.execute("CREATE TABLE allowed(rowid INTEGER PRIMARY KEY)")
    connection.executemany("INSERT INTO chunks(rowid, text) VALUES (?, ?)", enumerate(texts))
    connection.executemany("INSERT INTO allowed VALUES (?)", [(n,) for n in range(0, len(ids), 10)])
    connection.commit()
    connection.close()
    build = time.perf_counter() - began
    began = time.perf_counter()
    connection = sqlite3.connect(path)
    connection.execute("SELECT count(*) FROM allowed").fetchone()
    cold = time.perf_counter() - began
    plain = "SELECT rowid FROM chunks WHERE chunks MATCH ? ORDER BY rank LIMIT ?"
    restricted = (
        "SELECT chunks.rowid FROM chunks JOIN allowed ON allowed.rowid = chunks.rowid "
        "WHERE chunks MATCH ? ORDER BY rank LIMIT ?"
    )

    def search(words: list[str], sql: str = plain) -> list[str]:
        rows = connection.execute(sql, (" OR ".join(words), K)).fetchall()
        return [ids[row] for (row,) in rows]

    few = queries[:20]
    return {
        "build_s": build,
        "open_s": cold,
        "p50_ms": p50_ms(search, few),
        "p50_restricted_ms": p50_ms(lambda w: search(w, restricted), few),
    }


ENGINES = {"bm25s": run_bm25s, "tantivy": run_tantivy, "fts5": run_fts5}


def one(engine: str, chunks: int, queries: int) -> dict[str, float]:
    """Measure one engine at one size in this process (what the child runs)."""
    ids, texts, asked = corpus(chunks, queries)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as folder:
        result = ENGINES[engine](Path(folder), ids, texts, asked)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["rss_mib"] = peak / 1024
    result["rss_over_corpus_mib"] = (peak - before) / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, chunks, queries = args.child
        print(json.dumps(one(engine, int(chunks), int(queries))))
        return
    results: list[dict[str, Any]] = []
    print(
        "| chunks | engine | build s | open s | peak RSS MiB (over corpus) | top-20 p50 ms | with 10% ids |"
    )
    print("|---|---|---|---|---|---|---|")
    for chunks in args.chunks:
        for engine in args.engines:
            command = [sys.executable, __file__, "--child", engine, str(chunks), str(args.queries)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)  # noqa: S603
            row = {"chunks": chunks, "engine": engine, **json.loads(done.stdout.splitlines()[-1])}
            results.append(row)
            print(
                f"| {chunks:,} | {engine} | {row['build_s']:.1f} | {row['open_s']:.4f} | "
                f"{row['rss_mib']:.0f} ({row['rss_over_corpus_mib']:.0f}) | {row['p50_ms']:.2f} | "
                f"{row['p50_restricted_ms']:.2f} |",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
