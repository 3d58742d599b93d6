"""Peer systems for the LoCoMo benchmark, each behind the same Retrieve interface.

All use the packaged MiniLM embeddings; the chunk-based ones reuse this library's 300-character
chunks and their stored embeddings, so they differ from ``plain`` and ``window`` only in how
they expand hits. Each question searches only its own conversation (an index per
conversation), and every returned text carries its character span in the source, so coverage
is measured the same way for every system.

Needs the ``bench`` extra (llama-index-core, haystack-ai), never the core dependencies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import default_embeddings
from window_retriever.evaluation import Piece, Question, Retrieve


def _top_k(budget: int) -> int:
    return max(4, budget // 100)  # the same rule as plain: more than enough to fill the budget


def _chunks_by_source(store: Chroma) -> dict[str, list[tuple[str, int, list[float]]]]:
    """This library's chunks with their embeddings, per conversation, in position order."""
    result = store.get(include=["documents", "metadatas", "embeddings"])
    by_source: dict[str, list[tuple[int, str, int, list[float]]]] = {}
    for text, meta, vector in zip(
        result["documents"], result["metadatas"], result["embeddings"], strict=True
    ):
        by_source.setdefault(meta["source"], []).append(
            (meta["chunk_index"], text, meta["start_index"], list(vector))
        )
    return {s: [(t, start, v) for _, t, start, v in sorted(rows)] for s, rows in by_source.items()}


# ---- LlamaIndex ------------------------------------------------------------------------------


def _llama_settings() -> None:
    from llama_index.core import Settings
    from llama_index.core.embeddings import BaseEmbedding

    model = default_embeddings()

    class MiniLM(BaseEmbedding):  # type: ignore[misc]
        def _get_query_embedding(self, query: str) -> list[float]:
            return model.embed_query(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return model.embed_query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return model.embed_documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return model.embed_documents(texts)

    Settings.embed_model = MiniLM(model_name="minilm-int8", embed_batch_size=64)
    Settings.llm = None


def llama_sentence_window(documents: Sequence[Document], window_size: int = 3) -> Retrieve:
    """LlamaIndex SentenceWindowNodeParser + MetadataReplacementPostProcessor."""
    from llama_index.core import Document as LlamaDocument
    from llama_index.core import VectorStoreIndex
    from llama_index.core.node_parser import SentenceWindowNodeParser
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor

    _llama_settings()
    parser = SentenceWindowNodeParser.from_defaults(window_size=window_size)
    replace = MetadataReplacementPostProcessor(target_metadata_key="window")
    indexes, spans = {}, {}
    for document in documents:
        source = document.metadata["source"]
        nodes = parser.get_nodes_from_documents([LlamaDocument(text=document.page_content)])
        for position, node in enumerate(nodes):  # the window's span: its first to its last sentence
            first = nodes[max(0, position - window_size)]
            last = nodes[min(len(nodes) - 1, position + window_size)]
            spans[node.node_id] = (first.start_char_idx, last.end_char_idx)
        indexes[source] = VectorStoreIndex(nodes)

    def retrieve(question: Question, budget: int) -> list[Piece]:
        retriever = indexes[question.source].as_retriever(similarity_top_k=_top_k(budget))
        nodes = replace.postprocess_nodes(retriever.retrieve(question.question))
        return [
            Piece(n.node.get_content(), question.source, None, spans[n.node.node_id][0])
            for n in nodes
        ]

    return retrieve


def llama_prev_next(store: Chroma, num_nodes: int = 1) -> Retrieve:
    """LlamaIndex PrevNextNodePostprocessor over the same 300-character chunks."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.postprocessor import PrevNextNodePostprocessor
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    _llama_settings()
    indexes = {}
    for source, rows in _chunks_by_source(store).items():
        nodes = [
            TextNode(
                id_=f"{source}:{i}",
                text=text,
                embedding=vector,
                start_char_idx=start,
                end_char_idx=start + len(text),
            )
            for i, (text, start, vector) in enumerate(rows)
        ]
        for i, node in enumerate(nodes):
            if i:
                node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(
                    node_id=nodes[i - 1].node_id
                )
            if i + 1 < len(nodes):
                node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(
                    node_id=nodes[i + 1].node_id
                )
        storage = StorageContext.from_defaults()
        storage.docstore.add_documents(nodes)
        indexes[source] = VectorStoreIndex(nodes, storage_context=storage)

    def retrieve(question: Question, budget: int) -> list[Piece]:
        index = indexes[question.source]
        expand = PrevNextNodePostprocessor(
            docstore=index.docstore, num_nodes=num_nodes, mode="both"
        )
        found = index.as_retriever(similarity_top_k=_top_k(budget)).retrieve(question.question)
        nodes = expand.postprocess_nodes(found)
        return [
            Piece(n.node.get_content(), question.source, None, n.node.start_char_idx) for n in nodes
        ]

    return retrieve


# ---- Haystack --------------------------------------------------------------------------------


def haystack_sentence_window(store: Chroma, window_size: int = 1) -> Retrieve:
    """Haystack SentenceWindowRetriever over the same 300-character chunks."""
    from haystack import Document as HaystackDocument
    from haystack.components.retrievers import SentenceWindowRetriever
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    model = default_embeddings()
    systems: dict[str, Any] = {}
    for source, rows in _chunks_by_source(store).items():
        documents = InMemoryDocumentStore(embedding_similarity_function="cosine")
        documents.write_documents(
            [
                HaystackDocument(
                    id=f"{source}:{i}",
                    content=text,
                    embedding=vector,
                    meta={"source_id": source, "split_id": i, "split_idx_start": start},
                )
                for i, (text, start, vector) in enumerate(rows)
            ]
        )
        systems[source] = (
            InMemoryEmbeddingRetriever(documents),
            SentenceWindowRetriever(documents, window_size=window_size),
        )

    def retrieve(question: Question, budget: int) -> list[Piece]:
        search, windows = systems[question.source]
        hits = search.run(
            query_embedding=model.embed_query(question.question), top_k=_top_k(budget)
        )["documents"]
        result = windows.run(retrieved_documents=hits)
        pieces = []
        groups = _group(result["context_documents"], hits, window_size)
        for text, docs in zip(result["context_windows"], groups, strict=False):
            start = min((d.meta["split_idx_start"] for d in docs), default=None)
            pieces.append(Piece(text, question.source, None, start))
        return pieces

    return retrieve


def _group(context_documents: list[Any], hits: list[Any], window_size: int) -> list[list[Any]]:
    """Haystack returns one flat list of window documents: regroup it per hit, in hit order."""
    by_id = {d.meta["split_id"]: d for d in context_documents}
    groups = []
    for hit in hits:
        split = hit.meta["split_id"]
        groups.append(
            [by_id[i] for i in range(split - window_size, split + window_size + 1) if i in by_id]
        )
    return groups


# ---- dsRAG Relevant Segment Extraction ---------------------------------------------------------


def relevant_segment_extraction(
    store: Chroma,
    texts: dict[str, str],
    *,
    candidates: int = 30,
    decay_rate: float = 30.0,
    penalty: float = 0.18,
    max_segment: int = 15,
    minimum_value: float = 0.0,
) -> Retrieve:
    """Relevant Segment Extraction as dsRAG publishes it, budgeted in characters.

    Follows the published outline (dsRAG ``dsrag/rse.py``, v0.5.5, "balanced" preset): the top
    ``candidates`` chunks by vector similarity are worth ``exp(-rank / decay_rate) *
    similarity - penalty`` (no reranker: the raw similarity), every other chunk ``-penalty``;
    then, greedily, the contiguous segment of largest value sum (starting and ending on a
    non-negative chunk, at most ``max_segment`` chunks, not overlapping a chosen one) that
    still fits the remaining characters, until none is worth more than ``minimum_value``.
    dsRAG's own ``minimum_value`` is 0.5 on calibrated reranker scores; with raw MiniLM
    similarities that stops it long before the budget, so 0 lets it spend the budget like
    every other system here.
    """
    import numpy as np

    model = default_embeddings()
    chunks = _chunks_by_source(store)
    matrices = {s: np.asarray([v for _, _, v in rows]) for s, rows in chunks.items()}

    def retrieve(question: Question, budget: int) -> list[Piece]:
        source = question.source or ""
        rows, matrix, text = chunks[source], matrices[source], texts[source]
        query = np.asarray(model.embed_query(question.question))
        similarity = matrix @ query / np.linalg.norm(matrix, axis=1) / np.linalg.norm(query)
        values = np.full(len(rows), -penalty)
        for rank, index in enumerate(np.argsort(-similarity)[:candidates]):
            values[index] = math.exp(-rank / decay_rate) * similarity[index] - penalty
        spans = [(start, start + len(chunk)) for chunk, start, _ in rows]
        chosen: list[tuple[int, int]] = []
        pieces: list[Piece] = []
        used = 0
        while True:
            best: tuple[float, int, int] | None = None
            for first in range(len(rows)):
                if values[first] < 0 or any(a <= first <= b for a, b in chosen):
                    continue
                total = 0.0
                for last in range(first, min(len(rows), first + max_segment)):
                    if any(a <= last <= b for a, b in chosen):
                        break
                    total += values[last]
                    length = spans[last][1] - spans[first][0]
                    if used + length + (2 if pieces else 0) > budget:
                        break
                    if values[last] >= 0 and (best is None or total > best[0]):
                        best = (total, first, last)
            if best is None or best[0] <= minimum_value:
                return pieces
            _, first, last = best
            chosen.append((first, last))
            start, end = spans[first][0], spans[last][1]
            pieces.append(Piece(text[start:end], source, None, start))
            used += end - start + (2 if len(pieces) > 1 else 0)

    return retrieve
