"""Record what the keyword index answers on both dev sets, to compare two versions exactly.

Usage::

    python benchmarks/keyword_answers.py OUT.json     # on each version, then
    cmp BEFORE.json AFTER.json                        # any difference is a change of behaviour

For every question of both dev sets (the stores of ``budget.py``, built once in its cache):
the top 40 keyword hits and their scores (rounded to 5 places) unfiltered and under four
filters (a ``$in`` and a ``$nin`` of half the sources, an ``$or`` of a source and a chunk
range, a chunk range), the length and metadata the index holds for the unfiltered hits
(``indexed``), and for each filter the ids it passes (``passing``). A change of the index's
structure must leave the file byte for byte the same; a change of the engine's ranking shows
where it moves the hits.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from replay import dev_set

from window_retriever.stores._chroma_keywords import keyword_index


def answers(name: str, cache: Path) -> list[Any]:
    store, questions, sources = dev_set(name, cache)
    index = keyword_index(store)
    half = sorted(sources)[: max(1, len(sources) // 2)]
    filters: list[dict[str, Any] | None] = [
        None,
        {"source": {"$in": half}},
        {"source": {"$nin": half}},
        {"$or": [{"source": half[0]}, {"chunk_index": {"$lt": 3}}]},
        {"chunk_index": {"$gte": 5}},
    ]
    found: list[Any] = []
    for question in questions:
        for where in filters:
            hits = index.search(question, 40, where=where)
            found.append([[chunk_id, round(score, 5)] for chunk_id, score in hits])
        ids = [chunk_id for chunk_id, _ in index.search(question, 40)] + ["not:held"]
        held = index.indexed(ids) or {}
        found.append(sorted([i, length, sorted(m.items())] for i, (length, m) in held.items()))
    for where in filters[1:]:
        found.append(sorted(index.passing(where) or []) if where else [])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sets", default="locomo,pydocs")
    parser.add_argument(
        "--cache", default=str(Path(tempfile.gettempdir()) / "window-retriever-budget")
    )
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    result = {name: answers(name, cache) for name in args.sets.split(",")}
    args.out.write_text(json.dumps(result), encoding="utf-8")
    print(f"wrote {args.out}: " + ", ".join(f"{k} {len(v)}" for k, v in result.items()))


if __name__ == "__main__":
    main()
