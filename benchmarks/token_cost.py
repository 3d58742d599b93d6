"""What a token budget costs against a character budget, on the same store and questions.

Usage::

    python benchmarks/token_cost.py    # needs the pydocs dev set cached by benchmarks/budget.py

Both retrievers fill one total budget of about the same size (2,000 characters, or 500 MiniLM
tokens at about 4 characters a token), adaptive and static, interleaved over the same
questions; reports the p50 of each and their ratio. Windows are measured piece by piece as
they grow, so counting tokens should cost about what counting characters does.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import chromadb
from langchain_chroma import Chroma

from window_retriever import ContextWindowRetriever, default_embeddings

CACHE = Path(tempfile.gettempdir()) / "window-retriever-budget"


def main() -> int:
    questions_file = CACHE / "pydocs-questions.jsonl"
    if not questions_file.is_file():
        sys.exit("run `python benchmarks/budget.py --sets pydocs` first (it builds the store)")
    rows = [json.loads(line) for line in questions_file.read_text(encoding="utf-8").splitlines()]
    model = default_embeddings()
    store = Chroma(
        collection_name="pydocs-400-40",
        embedding_function=model,
        client=chromadb.PersistentClient(path=str(CACHE)),
    )
    for expansion in ("adaptive", "static"):
        chars = ContextWindowRetriever(
            vectorstore=store, k=10, total_budget=2000, expansion=expansion
        )
        tokens = ContextWindowRetriever(
            vectorstore=store,
            k=10,
            total_budget=500,
            window_budget=300,
            expansion=expansion,
            length_function=model.count_tokens,
        )
        times: dict[str, list[float]] = {"len": [], "tokens": []}
        for row in rows[:3]:  # warm up
            chars.invoke(row["question"])
            tokens.invoke(row["question"])
        for row in rows:
            for name, retriever in (("len", chars), ("tokens", tokens)):
                began = time.perf_counter()
                retriever.invoke(row["question"], filter={"source": row["source"]})
                times[name].append((time.perf_counter() - began) * 1000)
        p50 = {name: statistics.median(values) for name, values in times.items()}
        print(
            f"{expansion}: p50 len {p50['len']:.1f} ms, tokens {p50['tokens']:.1f} ms, "
            f"ratio {p50['tokens'] / p50['len']:.2f}x ({len(rows)} questions)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
