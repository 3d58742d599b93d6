"""An in-memory store: the whole protocol in plain Python, for tests and small experiments.

It is the second implementation of ``window_retriever.stores._protocol`` (beside the Chroma
adapter): the same behavioural tests run against both, which is what shows the protocol is
complete. It is public because it is useful for the tests of an application built on this
library: a retriever and ``add_chunks`` / ``sync_file`` / ``ingest`` run on it offline, with
no Chroma and no disk, in a few milliseconds.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from window_retriever._errors import ConfigurationError
from window_retriever.core._filters import check_where, compile_where
from window_retriever.stores._protocol import (
    Fetch,
    Found,
    IdHits,
    Record,
    Search,
    SearchIds,
    Space,
    Where,
    WindowStore,
    query_vector,
)

TextPredicate = Callable[[str], bool]


@dataclass(slots=True)
class _Stored:
    text: str
    metadata: dict[str, Any]
    embedding: list[float]


class MemoryWindowStore(WindowStore):
    """A :class:`~window_retriever.WindowStore` that keeps its records in a dict.

    Queries and records without a vector are embedded with ``embeddings``; distances are
    computed exactly in ``space`` (``"l2"``: squared Euclidean, Chroma's default;
    ``"cosine"``: 1 - cosine similarity; ``"ip"``: 1 - inner product). ``where`` filters are
    applied with the library's evaluator of Chroma's filter language, ``where_document`` with
    ``$contains``, ``$not_contains``, ``$regex``, ``$not_regex``, ``$and`` and ``$or``; a
    filter it cannot decide exactly as Chroma would raises ``ConfigurationError`` (it is never
    ignored). As Chroma does, a metadata value of ``None`` is not stored. Safe to use from
    several threads. It has no async twin: ``ainvoke`` runs its calls in threads.

    Example::

        from langchain_core.embeddings import DeterministicFakeEmbedding
        from window_retriever import (
            ContextWindowRetriever, MemoryWindowStore, WindowSplitter, add_chunks,
        )

        store = MemoryWindowStore(DeterministicFakeEmbedding(size=64))
        add_chunks(store, WindowSplitter().split_documents(documents))
        retriever = ContextWindowRetriever(vectorstore=store, k=2)
    """

    supports_search_ids: ClassVar[bool] = True
    supports_embeddings: ClassVar[bool] = True
    supports_query_embedding: ClassVar[bool] = True

    def __init__(self, embeddings: Embeddings, *, space: Space = "l2") -> None:
        """Keep records embedded by ``embeddings``, ranked by distance in ``space``."""
        if space not in ("l2", "cosine", "ip"):
            msg = f"space must be 'l2', 'cosine' or 'ip', got {space!r}"
            raise ConfigurationError(msg)
        self._embeddings = embeddings
        self.space: Space = space
        self._records: dict[str, _Stored] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many records are stored."""
        return len(self._records)

    # ---- reads -----------------------------------------------------------------------------

    def search(self, request: Search) -> Found:
        """The ``k`` nearest records that pass the filters, best first."""
        vector = query_vector(self._embeddings, request.query)
        ranked = self._ranked(vector, request.k, request.where, request.where_document)
        return Found(
            documents=[_document(i, record) for i, record, _ in ranked],
            distances=[distance for _, _, distance in ranked],
            embeddings=[list(r.embedding) for _, r, _ in ranked] if request.embeddings else (),
            query_embedding=(
                list(vector) if request.embeddings or request.query_embedding else None
            ),
            space=self.space,
        )

    def search_ids(self, request: SearchIds) -> IdHits:
        """The ``k`` nearest ids that pass the filters, with their distances."""
        vector = query_vector(self._embeddings, request.query)
        ranked = self._ranked(vector, request.k, request.where, request.where_document)
        return [(chunk_id, distance) for chunk_id, _, distance in ranked]

    def fetch(self, request: Fetch) -> Found:
        """The stored records among ``ids`` that pass the filters (missing ids are absent)."""
        keep = _selector(request.where, request.where_document)
        with self._lock:
            found = [
                (chunk_id, self._records[chunk_id])
                for chunk_id in dict.fromkeys(request.ids)
                if chunk_id in self._records and keep(self._records[chunk_id])
            ]
        return Found(
            documents=[_document(chunk_id, record) for chunk_id, record in found],
            embeddings=[list(record.embedding) for _, record in found]
            if request.embeddings
            else (),
            space=self.space,
        )

    def _ranked(
        self, vector: Sequence[float], k: int, where: Where | None, where_document: Where | None
    ) -> list[tuple[str, _Stored, float]]:
        keep = _selector(where, where_document)
        distance = _DISTANCES[self.space]
        with self._lock:
            scored = [
                (chunk_id, record, distance(vector, record.embedding))
                for chunk_id, record in self._records.items()
                if keep(record)
            ]
        scored.sort(key=lambda row: row[2])  # stable: ties keep the order of writing
        return scored[:k]

    # ---- writes ----------------------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        """The model queries and records are embedded with."""
        return self._embeddings

    def upsert(self, records: Sequence[Record]) -> None:
        """Store each record whole, replacing the one of its id (text, vector, metadata)."""
        missing = [record.to_embed for record in records if record.embedding is None]
        made = iter(self._embeddings.embed_documents(missing) if missing else [])
        rows = {
            record.id: _Stored(
                record.text,
                {key: value for key, value in record.metadata.items() if value is not None},
                list(record.embedding if record.embedding is not None else next(made)),
            )
            for record in records
        }
        with self._lock:
            self._records.update(rows)

    def update_metadata(self, ids: Sequence[str], metadata: Mapping[str, Any]) -> None:
        """Set ``metadata``'s keys on the stored records of ``ids`` (``None`` removes a key)."""
        with self._lock:
            for chunk_id in ids:
                record = self._records.get(chunk_id)
                if record is None:
                    continue
                for key, value in metadata.items():
                    if value is None:
                        record.metadata.pop(key, None)
                    else:
                        record.metadata[key] = value

    def delete(self, ids: Sequence[str]) -> None:
        """Forget the records of ``ids``."""
        with self._lock:
            for chunk_id in ids:
                self._records.pop(chunk_id, None)

    def get_metadata(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored metadata of the stored ones of ``ids``."""
        with self._lock:
            return {i: dict(self._records[i].metadata) for i in ids if i in self._records}

    def list_metadata(
        self, where: Where | None, *, limit: int, offset: int = 0
    ) -> list[tuple[str, dict[str, Any]]]:
        """One page of the records ``where`` matches, in the order they were first written."""
        keep = _selector(where, None)
        with self._lock:
            matching = [(i, r) for i, r in self._records.items() if keep(r)]
        return [(i, dict(r.metadata)) for i, r in matching[offset : offset + limit]]


def _document(chunk_id: str, record: _Stored) -> Document:
    return Document(page_content=record.text, metadata=dict(record.metadata), id=chunk_id)


def _selector(where: Where | None, where_document: Where | None) -> Callable[[_Stored], bool]:
    """One test of a record for both filters; a filter that cannot be decided raises."""
    if where is not None:
        try:
            check_where(where, "where")
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
    predicate = compile_where(where)
    if predicate is None:
        msg = (
            f"MemoryWindowStore cannot decide the filter {dict(where or {})!r} exactly as "
            "Chroma would; use a langchain_chroma.Chroma store for it"
        )
        raise ConfigurationError(msg)
    text = _text_predicate(where_document) if where_document else None
    if text is None:
        return lambda record: predicate(record.metadata)
    return lambda record: predicate(record.metadata) and text(record.text)


def _text_predicate(node: Any) -> TextPredicate:
    """Compile a ``where_document`` filter: ``$contains`` and the like, ``$and`` / ``$or``."""
    if not isinstance(node, Mapping) or len(node) != 1:
        msg = f"where_document: each part must be a dict of one operator, got {node!r}"
        raise ConfigurationError(msg)
    ((operator, operand),) = node.items()
    if operator in ("$and", "$or") and isinstance(operand, list) and len(operand) >= 2:
        parts = [_text_predicate(part) for part in operand]
        combine = all if operator == "$and" else any
        return lambda text: combine(part(text) for part in parts)
    if operator in ("$contains", "$not_contains") and isinstance(operand, str) and operand:
        negate = operator == "$not_contains"
        return lambda text: (operand in text) != negate
    if operator in ("$regex", "$not_regex") and isinstance(operand, str):
        pattern = re.compile(operand)
        negate = operator == "$not_regex"
        return lambda text: (pattern.search(text) is not None) != negate
    msg = (
        f"where_document: cannot decide {dict(node)!r}; MemoryWindowStore knows $contains, "
        "$not_contains, $regex, $not_regex (a non-empty string) and $and / $or of two or more"
    )
    raise ConfigurationError(msg)


def _l2(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return 1.0 - (dot / norms if norms else 0.0)


def _ip(a: Sequence[float], b: Sequence[float]) -> float:
    return 1.0 - math.fsum(x * y for x, y in zip(a, b, strict=True))


_DISTANCES: dict[Space, Callable[[Sequence[float], Sequence[float]], float]] = {
    "l2": _l2,
    "cosine": _cosine,
    "ip": _ip,
}
