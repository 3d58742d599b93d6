"""Where hits come from: the retrieval's first step.

A :class:`CandidateSource` turns a query into a :class:`~window_retriever.retrieval._pool.Pool`: the
hits, best first, and the chunks known so far. It is the one seam for another kind of
candidate: the store's vector search (:class:`VectorSearch`), vector and keyword fused
(:class:`HybridSearch`) or any LangChain retriever's hits (:class:`RetrieverHits`), chosen by
:func:`source_for`. A strategy asks the source, never the store, for hits, and reads every
chunk known by id only through :class:`~window_retriever.retrieval._pool.Neighbours`. Sources are
generators of requests (see ``_retriever``), so one body serves the sync and the async path.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever.core._fusion import DEFAULT_WEIGHTS, Fused, fuse
from window_retriever.core._ids import CHUNK_ID
from window_retriever.core._windows import Chunk, Hit, Position
from window_retriever.retrieval._params import Params
from window_retriever.retrieval._pool import (
    Call,
    Flow,
    Neighbours,
    Pool,
    Read,
    Survey,
    hits_by_id,
    positions_of,
    to_query,
)
from window_retriever.retrieval._records import by_position, read_hit, read_hits, unique
from window_retriever.stores._protocol import (
    Found,
    Held,
    IdHits,
    IdsRefused,
    Search,
    SearchIds,
    SearchVectors,
    Space,
    VectorHits,
    Where,
    WindowStore,
    aquery_vector,
    in_thread,
    query_vector,
)

SURVEY_WIDTH = 100
"""How many chunks' distances a survey reads (ids and distances only, Chroma's cheapest
search): adaptive selection measures a neighbour among them by its distance, and any other at
the farthest of them. Wide enough that the default's coverage on the dev sets does not move
with it (docs/how-it-works.md gives the measurement)."""


def _survey_of(found: Sequence[tuple[str, float]]) -> tuple[dict[str, float], float]:
    distances: dict[str, float] = {}
    for chunk_id, distance in found:
        distances.setdefault(chunk_id, float(distance))
    return distances, max(distances.values(), default=math.inf)


def _nothing() -> Flow:
    """A flow that asks nothing and returns ``None``."""
    yield from ()
    return None


class CandidateSource(ABC):
    """Finds the hits that windows grow from."""

    @abstractmethod
    def find(
        self, query: str, k: int, params: Params, *, embeddings: bool, defer: bool = False
    ) -> Flow:
        """Yield store requests; return a :class:`Pool` of at most ``k`` hits, best first.

        Hits honour ``params.filter`` and ``params.where_document`` (a chunk they hide never
        comes back). With ``embeddings`` the pool carries the query's vector and the store's
        distance space (to measure neighbours by), and every hit's stored vector where
        ``params.diversity`` needs them; a hit without its vector is measured by its distance.
        With ``defer`` a source may leave hits it knows only by id unread (``Pool.unread``):
        the caller reads them with its neighbour fetch, with their vectors, and then calls
        :meth:`Pool.settle`.
        """

    surveys = False
    """The source can :meth:`survey` (its store searches ids alone)."""

    locates = False
    """The source can :meth:`locate` (its store searches ids alone)."""

    keyword_leg = False
    """The source searches the keyword index, which checks the collection (at most a check
    interval stale) before its hits come back: only then may adaptive selection choose among
    the index's stand-ins (``_plan``)."""

    held: Held | None = None
    """The keyword index the route holds (``Route.held``), or ``None``: a filtered search by
    ids asks it for the ids the filter passes (:func:`search_ids`), and every read by id
    tells it what it read (``Neighbours``). Given by :func:`source_for`."""

    def survey(self, query: str, k: int, params: Params) -> Flow:
        """Yield store requests; return a :class:`Survey` of at most ``k`` hits, or ``None``.

        ``None`` when a hit's id does not name its position (the caller then uses
        :meth:`find`). Only asked of a source whose ``surveys`` is true.
        """
        return _nothing()

    def locate(self, query: str, k: int, params: Params) -> Flow:
        """The lean search, ids and distances only: return hits without text, and the count.

        Each hit's position is read from its id (``file_id:chunk_index``); the hits are ``None``
        when an id has another form (the caller then searches the usual way). Only asked of a
        source whose ``locates`` is true.
        """
        return _nothing()


class VectorSearch(CandidateSource):
    """The store's similarity search: hits scored by distance (lower is better)."""

    def __init__(self, *, locates: bool = False, held: Held | None = None) -> None:
        self.locates = locates
        self.surveys = locates
        self.held = held

    def survey(self, query: str, k: int, params: Params) -> Flow:
        width = max(k, SURVEY_WIDTH)
        found, vectors, space = yield from _surveyed(query, width, k, params, self.held)
        hits = hits_by_id(found[:k])  # the rest of the pool is measured by id, whatever its form
        if hits is None:
            return None
        distances, bound = _survey_of(found)
        return Survey(hits, distances, bound, vectors=vectors, space=space)

    def find(
        self, query: str, k: int, params: Params, *, embeddings: bool, defer: bool = False
    ) -> Flow:
        found = yield _search(query, k, params, measured=embeddings)
        pairs = found.pairs()
        hits, chunks = read_hits(pairs, params.unexpandable)
        return Pool(
            hits,
            chunks,
            fetched=set(chunks),
            vectors=_vectors(found),  # none unless measured (and then only for diversity)
            query_embedding=found.query_embedding,  # None unless measured
            space=found.space,
            returned=len(pairs),
        )

    def locate(self, query: str, k: int, params: Params) -> Flow:
        found = yield from search_ids(query, k, params.filter, params.where_document, self.held)
        return hits_by_id(found), len(found)


def search_ids(
    query: str,
    k: int,
    where: Where | None,
    where_document: Where | None = None,
    held: Held | None = None,
) -> Flow:
    """The search for ids and distances alone; under a filter, among the ids the index passes.

    Where the process holds the keyword index and ``_filters`` can decide the filter on its
    metadata, the index names the chunks the filter passes (``Held.passing``) and the store
    searches among them (``SearchIds.ids``) in place of its ``where``. As current as the index:
    every chunk read is checked against the filter again (``Neighbours.read``), and where the
    store refuses an id it no longer holds (:class:`IdsRefused`) the index is told
    (``Held.distrust``) and the store asked again with ``where``: one store call more. Where
    it passes none, there are no hits and the store is not asked.
    """
    found: IdHits = yield from _among_passing(SearchIds, query, k, where, where_document, held)
    return found


def search_vectors(
    query: str,
    k: int,
    where: Where | None,
    where_document: Where | None = None,
    held: Held | None = None,
) -> Flow:
    """:func:`search_ids` with each hit's stored vector (``SearchVectors``): for diversity."""
    found: VectorHits = yield from _among_passing(
        SearchVectors, query, k, where, where_document, held
    )
    return found


def _among_passing(
    request: type[SearchIds | SearchVectors],
    query: str,
    k: int,
    where: Where | None,
    where_document: Where | None,
    held: Held | None,
) -> Flow:
    """``request`` among the ids the keyword index passes, else with ``where`` (see above)."""
    if held is None or where is None or where_document is not None:
        return (yield request(query, k, where, where_document))
    passing, decided = held.passing, where
    ids: list[str] | None = yield Call(
        lambda: passing(decided), lambda: in_thread(passing, decided)
    )
    if ids == []:  # the filter passes no chunk: nothing to ask the store
        return [] if request is SearchIds else VectorHits(hits=[], vectors=[])
    try:
        return (yield request(query, k, where, where_document, ids=ids))
    except IdsRefused:
        held.distrust()  # an id deleted since the index's build: the store decides for now
        return (yield request(query, k, where, where_document))


def _surveyed(query: str, width: int, k: int, params: Params, held: Held | None) -> Flow:
    """A survey's search: the ``(id, distance)`` pairs of ``width`` chunks.

    Where diversity compares hits, also the vectors of the first ``k`` and the store's space
    (else ``{}`` and ``None``): nothing else is compared, a window's likeness to a hit being
    that of the hits it holds.
    """
    if params.diversity <= 0:
        pairs = yield from search_ids(query, width, params.filter, params.where_document, held)
        return pairs, {}, None
    found: VectorHits = yield from search_vectors(
        query, width, params.filter, params.where_document, held
    )
    first = zip(found.hits[:k], found.vectors, strict=False)
    space = found.space if found.hits else None  # none found (perhaps not asked): not known
    return found.hits, {chunk_id: vector for (chunk_id, _), vector in first}, space


def _vectors(found: Found) -> dict[str, Sequence[float]]:
    """The stored vectors that came back, by chunk id (none unless asked)."""
    if not found.embeddings:
        return {}
    return {
        document.id or "": vector
        for document, vector in zip(found.documents, found.embeddings, strict=True)
    }


def _search(query: str, k: int, params: Params, *, measured: bool) -> Search:
    """The search of the vector leg.

    ``measured``: with the query's vector, and the hits' vectors only where diversity compares
    chunks (each costs 384 floats on a server's wire; a hit's distance already says how near
    it is).
    """
    return Search(
        query,
        k,
        params.filter,
        params.where_document,
        embeddings=measured and params.diversity > 0,
        query_embedding=measured,
    )


class HybridSearch(CandidateSource):
    """Vector and keyword (BM25) candidates, fused by reciprocal rank (``_fusion``).

    Each leg returns up to ``k`` chunks under the caller's filters; the fused top ``k`` are the
    hits, in fused order. Chunks only the keyword leg found are read in one fetch, with their
    stored vectors, so every hit has its true distance to the query and ``score`` keeps its
    meaning (the minimum distance of a window's hits); each hit's ``ranks`` say which legs
    found it and where. A :meth:`survey` reads no vector: a keyword hit beyond the vector
    leg's pool is measured at the pool's farthest distance.
    """

    keyword_leg = True

    def __init__(
        self,
        keyword: Callable[[str, int, Params], Call],
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        *,
        locates: bool = False,
        held: Held | None = None,
    ) -> None:
        self.keyword = keyword
        self.weights = weights
        self.surveys = locates
        self.held = held

    def _fuse(self, vector: list[str], keyword: list[tuple[str, float]], k: int) -> list[Fused]:
        """The first ``k`` of the two legs' ids fused by reciprocal rank."""
        ids = {"vector": vector, "keyword": [chunk_id for chunk_id, _ in keyword]}
        return fuse(ids, self.weights, limit=k)

    def survey(self, query: str, k: int, params: Params) -> Flow:
        """The vector leg as ids and distances of a wider pool; its first ``k`` are fused."""
        width = max(k, SURVEY_WIDTH)
        found, vectors, space = yield from _surveyed(query, width, k, params, self.held)
        keyword: list[tuple[str, float]] = yield self.keyword(query, k, params)
        distances, bound = _survey_of(found)
        vector = list(dict.fromkeys(chunk_id for chunk_id, _ in found))[:k]
        fused = self._fuse(vector, keyword, k)
        positions = positions_of([item.id for item in fused])
        if positions is None:
            return None
        hits = [
            Hit(
                _unread(item.id, positions[item.id]).chunk,
                distances.get(item.id, bound),
                item.ranks,
            )
            for item in fused
        ]
        return Survey(hits, distances, bound, fused=True, vectors=vectors, space=space)

    def find(
        self, query: str, k: int, params: Params, *, embeddings: bool, defer: bool = False
    ) -> Flow:
        found = yield _search(query, k, params, measured=True)
        keyword: list[tuple[str, float]] = yield self.keyword(query, k, params)
        vector = {document.id or "": n for n, document in enumerate(found.documents)}
        fused = self._fuse(list(vector), keyword, k)
        documents = {document.id or "": document for document in found.documents}
        vectors = _vectors(found)
        distances = dict(zip(vector, found.distances, strict=True))
        unread = [item.id for item in fused if item.id not in documents]
        positions = (positions_of(unread) if defer else None) or {}
        if unread and not positions:  # read here: the caller's fetch cannot (or may not)
            read = yield from _read(unread, found.query_embedding, params, self.held)
            documents |= read.documents
            vectors |= read.vectors
            distances |= read.distances
        hits: list[Hit] = []
        for item in fused:
            if item.id in documents and item.id in distances:
                hit = read_hit(documents[item.id], distances[item.id], params.unexpandable)
                hits.append(replace(hit, ranks=item.ranks))
            elif item.id in positions:  # read with the caller's neighbour fetch: one call less
                hits.append(_unread(item.id, positions[item.id], item.ranks))
        hits = unique(hits)
        _, chunks = by_position([hit for hit in hits if hit.chunk.id not in positions])
        return Pool(
            hits,
            chunks,
            fetched=set(chunks),
            vectors=vectors,
            query_embedding=found.query_embedding,
            space=found.space,
            returned=max(len(found.documents), len(keyword)),
            fused=True,
            unread=positions,
        )


class RetrieverHits(CandidateSource):
    """Any LangChain retriever's documents as hits: an ensemble, a reranker, MMR, multi-query.

    The documents must carry ``WindowSplitter``'s metadata (they come from the same store).
    They are read again from the store by id under the caller's filters (another retriever
    may not apply them: a chunk they hide never comes back), with their stored vectors, so
    each hit gets its true distance to the query; with a total budget, in the neighbour fetch
    itself (``defer``). The hits keep the retriever's order, and its first ``k`` are used.
    """

    def __init__(
        self, retriever: Any, embed_query: Callable[[str], Call], *, held: Held | None = None
    ) -> None:
        self.retriever = retriever
        self.embed_query = embed_query
        self.held = held

    def find(
        self, query: str, k: int, params: Params, *, embeddings: bool, defer: bool = False
    ) -> Flow:
        retriever = self.retriever
        given = yield Call(lambda: retriever.invoke(query), lambda: retriever.ainvoke(query))
        ids = list(dict.fromkeys(hit for document in given for hit in _hit_ids(document)))
        ids = [chunk_id for chunk_id in ids if chunk_id][:k]
        query_vector = yield self.embed_query(query)
        positions = positions_of(ids) if defer else None
        if positions is not None:  # read with the caller's neighbour fetch: one call less
            placeholders = [_unread(chunk_id, position) for chunk_id, position in positions.items()]
            return Pool(
                placeholders,
                {},
                query_embedding=query_vector,
                returned=len(given),
                fused=True,
                unread=positions,
            )
        read = yield from _read(ids, query_vector, params, self.held)
        hits = [
            read_hit(read.documents[chunk_id], read.distances[chunk_id], params.unexpandable)
            for chunk_id in ids
            if chunk_id in read.documents and chunk_id in read.distances
        ]
        kept, chunks = by_position(unique(hits))
        return Pool(
            kept,
            chunks,
            fetched=set(chunks),
            vectors=read.vectors,
            query_embedding=query_vector,
            space=read.space,
            returned=len(given),
            fused=True,
        )


def source_for(params: Params, store: WindowStore, held: Held | None = None) -> CandidateSource:
    """Where the hits come from: the store's vector search, hybrid, or another retriever.

    ``held``: the keyword index the route holds (``Route.held``), which the source's filtered
    searches by ids and its reads by id use.
    """
    choice = params.candidates
    if choice is None:  # the best measured: hybrid where a budget is shared (docs/benchmarks.md)
        budgeted = params.total_budget is not None and store.supports_keyword_search
        choice = "hybrid" if budgeted else "vector"
    if choice == "vector":
        return VectorSearch(locates=store.supports_search_ids, held=held)
    if choice == "hybrid":
        weights = {"vector": 1.0, "keyword": params.keyword_weight}
        return HybridSearch(_keyword(store), weights, locates=store.supports_search_ids, held=held)
    if choice == "keyword":
        return HybridSearch(_keyword(store), {"vector": 0.0, "keyword": 1.0}, held=held)
    embedder = store.embeddings
    if embedder is None:
        msg = (
            "candidates=<retriever> needs the store's embedding model to measure its hits; "
            "create the store with an embedding_function"
        )
        raise ConfigurationError(msg)
    return RetrieverHits(
        params.candidates,
        lambda query: Call(
            lambda: query_vector(embedder, query), lambda: aquery_vector(embedder, query)
        ),
        held=held,
    )


def _keyword(store: WindowStore) -> Callable[[str, int, Params], Call]:
    """The keyword leg: the store's BM25 search, run in a thread from async code."""
    if not store.supports_keyword_search:
        msg = (
            "candidates='hybrid' needs a store with a keyword search, such as a "
            f"langchain_chroma.Chroma; {type(store).__name__} has none: use candidates='vector'"
        )
        raise ConfigurationError(msg)

    def call(query: str, k: int, params: Params) -> Call:
        def run() -> IdHits:
            return store.keyword_search(query, k, params.filter, params.where_document)

        return Call(run, lambda: in_thread(run))

    return call


@dataclass
class _Measured:
    """Hits known by id, read with their stored vectors and their distances to the query."""

    documents: dict[str, Document]
    vectors: dict[str, Sequence[float]]
    distances: dict[str, float]
    space: Space


def _read(
    ids: Sequence[str],
    query: Sequence[float] | None,
    params: Params,
    held: Held | None,
) -> Flow:
    """Read hits known by id, under the caller's filters, in one fetch (a :class:`_Measured`)."""
    read: Read = yield from Neighbours(params, held=held).read(ids, embeddings=True)
    documents = {document.id or "": document for document in read.documents}
    distances = to_query(query, read.space, read.vectors, ids)
    return _Measured(documents, read.vectors, distances, read.space)


def _unread(chunk_id: str, position: Position, ranks: tuple[tuple[str, int], ...] = ()) -> Hit:
    """A hit known by id only: text empty, distance unknown until :meth:`Pool.settle`."""
    return Hit(Chunk(id=chunk_id, text="", file_id=position[0], index=position[1]), math.inf, ranks)


def _hit_ids(document: Any) -> list[str]:
    """The store ids of another retriever's document: its ``id``, else its ``chunk_id``.

    A window of this library (a ``ContextWindowRetriever``'s, alone or in an ensemble) is no
    chunk: its hits are (``hit_chunk_ids``, best first as it found them).
    """
    metadata = getattr(document, "metadata", {}) or {}
    hits = metadata.get("hit_chunk_ids")
    if isinstance(hits, list) and hits:
        return [str(hit) for hit in hits]
    found = str(getattr(document, "id", None) or metadata.get(CHUNK_ID) or "")
    return [found] if found else []
