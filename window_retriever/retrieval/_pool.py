"""What one retrieval knows, and how it reads chunks by id under the caller's filter.

A :class:`Pool` holds a retrieval's hits and every chunk read so far; a :class:`Survey` is
the lean search adaptive selection starts from (ids and distances only). :class:`Neighbours`
reads chunks by id, the planned neighbours and the hits known by id only, in one batched
fetch, and is the one place a chunk read is checked against the caller's filter. The rest
are small pure helpers over ids, positions and distances.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.documents import Document

from window_retriever.core._filters import Predicate, compile_where
from window_retriever.core._ids import make_chunk_id
from window_retriever.core._windows import Chunk, Hit, Measure, Position
from window_retriever.retrieval._params import Params
from window_retriever.retrieval._records import add_neighbours, by_position, read_hit, unique
from window_retriever.stores._protocol import Fetch, Held, Request, Space


@dataclass(frozen=True, slots=True)
class Call:
    """A step of a retrieval that is not a store request: a keyword search, another retriever.

    The sync driver calls ``run``; the async driver awaits ``arun``.
    """

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]


Flow = Generator["Request | Call", Any, Any]
"""A retrieval step: a generator of requests (see ``_retriever._run``) that returns its result."""


@dataclass
class Pool:
    """What one retrieval knows: its hits and every chunk read so far."""

    hits: list[Hit]
    """The candidates, best first, each chunk once."""
    chunks: dict[Position, Chunk]
    """Every chunk read so far (hits and neighbours), by position."""
    fetched: set[Position] = field(default_factory=set)
    """Positions already asked of the store: read into ``chunks``, or found absent (a gap)."""
    vectors: dict[str, Sequence[float]] = field(default_factory=dict)
    """Stored embeddings by chunk id, when the strategy asked for them."""
    query_embedding: Sequence[float] | None = None
    space: Space = "l2"
    returned: int = 0
    """How many results the search returned: fewer than asked means the store has no more."""
    beyond: list[Hit] = field(default_factory=list)
    """Lean search only: candidates known by id, not read (see ``StaticWindows``)."""
    fused: bool = False
    """The hits are in a fused order (not by distance): see ``HybridSearch``."""
    unread: dict[str, Position] = field(default_factory=dict)
    """Hits known by id only (text empty), read by the caller's neighbour fetch."""

    def settle(self) -> None:
        """Put the read chunks in place of the unread hits, with their true distances.

        A hit the fetch did not return (gone since, or hidden by the caller's filter) or
        whose vector did not come back is left out.
        """
        if not self.unread:
            return
        distances = to_query(self.query_embedding, self.space, self.vectors, self.unread)
        hits: list[Hit] = []
        for hit in self.hits:
            position = self.unread.get(hit.chunk.id)
            if position is None:
                hits.append(hit)
                continue
            chunk = self.chunks.get(position)
            if chunk is not None and chunk.id == hit.chunk.id and chunk.id in distances:
                hits.append(replace(hit, chunk=chunk, distance=distances[chunk.id]))
        self.hits = hits
        self.unread = {}


@dataclass
class Survey:
    """A lean search for adaptive selection: hits known by id, and a wider pool's distances.

    No text or metadata comes back (nor any vector but the hits', for diversity); each hit's
    position is read from its id (``file_id:chunk_index``), and the strategy reads the hits
    it can use, with their neighbours, in one fetch.
    """

    hits: list[Hit]
    """The candidates, best first (fused order for hybrid), text empty, each with its vector
    distance (``bound`` for a keyword hit beyond the pool)."""
    distances: dict[str, float]
    """The vector distance of every chunk in the pool, by id."""
    bound: float
    """The farthest distance in the pool: every chunk outside it is at least this far (the
    approximate index aside), and is measured at it."""
    fused: bool = False
    vectors: dict[str, Sequence[float]] = field(default_factory=dict)
    """With ``diversity`` only: the stored vectors of the vector leg's hits, by id (what
    diversity compares); empty otherwise."""
    space: Space | None = None
    """With ``diversity`` only: the store's distance space (its discount is in its units)."""

    def distance(self, chunk_id: str) -> float:
        """A chunk's distance to the query: its own in the pool, else the pool's bound."""
        return self.distances.get(chunk_id, self.bound)


@dataclass
class Read:
    """Chunks read by id that the caller's filter passes, in the order the store gave them."""

    documents: list[Document]
    vectors: dict[str, Sequence[float]]
    """Their stored vectors by id, when asked for."""
    space: Space


class Neighbours:
    """Reads chunks by id under the caller's filter: the one place a read is checked.

    Every chunk a retrieval reads by id (a hit known by id only, whatever found it, and every
    neighbour) comes through :meth:`read`. The filter is applied there when ``_filters`` can
    decide it (a fetch by ids alone is Chroma's fastest read), and otherwise sent with the
    fetch for the store to apply: either way a chunk the filter hides is never returned, so
    it never joins a window.
    """

    def __init__(
        self,
        params: Params,
        *,
        embeddings: bool = False,
        held: Held | None = None,
    ) -> None:
        self.held = held
        """The keyword index the route holds (``Route.held``), told what every read found."""
        self.predicate: Predicate | None = (
            compile_where(params.filter) if params.where_document is None else None
        )
        self.where = params.filter if self.predicate is None else None
        self.where_document = params.where_document
        self.embeddings = embeddings
        self.space: Space | None = None
        """The distance space of the store's last answer (``None`` before the first read)."""
        self.asked: dict[str, Document | None] = {}
        """Every id this retrieval read without vectors: the chunk, or ``None`` (not stored,
        or hidden). A re-planned route reads none of them again."""

    def fetch(self, pool: Pool, positions: Iterable[Position]) -> Flow:
        """Read the positions not asked before; the filter's hidden chunks become gaps."""
        missing = [position for position in positions if position not in pool.fetched]
        if not missing:
            return None
        ids = {make_chunk_id(*position): position for position in missing}
        read: Read = yield from self.read(list(ids), embeddings=self.embeddings)
        pool.fetched.update(missing)
        if pool.unread:
            pool.space = read.space  # the hits' distances are measured in it (settle)
        pool.vectors.update(read.vectors)
        add_neighbours(read.documents, ids, pool.chunks)
        return None

    def read(self, ids: Sequence[str], *, embeddings: bool = False) -> Flow:
        """Read ``ids`` in one fetch; return a :class:`Read` of those the filter passes.

        Without vectors, an id this retrieval read before is not asked again (what it found
        comes with the rest): a route re-planned after a read pays only for what is new.

        What the process holds beside the store (the keyword index) is told what was read
        (``Held.correct``): a chunk rewritten behind its back is then held as read.
        """
        asked, wanted = self.asked, list(dict.fromkeys(ids))
        unasked = wanted if embeddings else [i for i in wanted if i not in asked]
        if not unasked and self.space is not None:  # all read before by this retrieval
            known = (asked[i] for i in wanted)
            return Read([document for document in known if document is not None], {}, self.space)
        held = self.held
        build = None if held is None else held.build()
        found = yield Fetch(unasked, self.where, self.where_document, embeddings=embeddings)
        self.space = found.space
        if held is not None and found.documents:
            read_now = {d.id: (len(d.page_content), d.metadata) for d in found.documents if d.id}
            held.correct(read_now, build)
        read = Read([], {}, found.space)
        vectors = found.embeddings if embeddings else itertools.repeat(())
        for document, vector in zip(found.documents, vectors, strict=embeddings):
            if self.predicate is None or self.predicate(document.metadata):
                read.documents.append(document)
                if embeddings:
                    read.vectors[document.id or ""] = vector
        if not embeddings:  # what was read before comes with it, in the order asked
            asked.update(dict.fromkeys(unasked))
            asked.update((document.id or "", document) for document in read.documents)
            known = (asked[i] for i in wanted)
            read.documents = [document for document in known if document is not None]
        return read

    def read_located(
        self, covered: Sequence[Hit], ids: Mapping[str, Position], params: Params
    ) -> Flow:
        """Read the covered hits of a lean search with their planned neighbours, in one fetch.

        Return the pool. A hit read is where its id says, or has no position: ``read_record``
        gives one only to a chunk stored under the id its metadata makes, which names its
        position as ``position_of`` reads it.
        """
        found: Read = yield from self.read(list(ids))
        by_id = {document.id: document for document in found.documents}
        hits: list[Hit] = []
        for hit in covered:
            document = by_id.get(hit.chunk.id)
            if document is None:
                continue  # gone since the search, or hidden
            read = read_hit(document, hit.distance, params.unexpandable)
            hits.append(replace(read, ranks=hit.ranks))
        kept, chunks = by_position(unique(hits))
        add_neighbours(found.documents, ids, chunks)
        return Pool(kept, chunks, fetched=set(ids.values()), space=found.space)


class TypicalLength:
    """The median length of recently read chunks: what a search that returns no text plans by.

    Learned from the chunks each call reads (a few per call, the last 256 kept). A plan made
    with it may fetch a neighbour too many (cheap) or too few (one more fetch); never a
    different result.
    """

    __slots__ = ("_low", "_median", "_recent")

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=256)
        self._median: int | None = None
        self._low = (1, 1)

    def typical(self) -> int | None:
        return self._median

    def disable(self) -> None:
        """The store's ids do not tell positions: no lean search for this retriever."""
        self._median = None
        self._recent = deque(maxlen=0)

    @property
    def disabled(self) -> bool:
        return self._recent.maxlen == 0

    def learn(self, measure: Measure, chunks: Iterable[Chunk]) -> None:
        self.learn_from(measure.text(chunk) for chunk in itertools.islice(chunks, 8))

    def learn_from(self, lengths: Iterable[int]) -> None:
        self._recent.extend(lengths)
        if self._recent:
            ordered = sorted(self._recent)
            self._median = max(1, int(ordered[(len(ordered) - 1) // 2]))  # the median_low
            self._low = (
                max(1, ordered[len(ordered) // 10]),
                max(1, ordered[len(ordered) // 4]),
            )

    def low(self) -> tuple[int, int] | None:
        """The 10th percentile and the lower quartile of recently read chunks' lengths.

        What a plan made before the hits are read takes for their lower quartile and median
        (see ``plan_adaptive_fetch``): one notch lower each, so that the hits of a query,
        read, nearly always need no more than it fetched (their lower quartile falls under
        the 10th percentile of the chunks read before in about 4 queries in 100), where
        chunks vary in length; and about the same where they do not.
        """
        return self._low if self._median is not None else None


def positions_of(ids: Sequence[str]) -> dict[str, Position] | None:
    """The positions ``file_id:chunk_index`` ids name; ``None`` if one has another form."""
    positions: dict[str, Position] = {}
    for chunk_id in ids:
        position = position_of(chunk_id)
        if position is None:
            return None
        positions[chunk_id] = position
    return positions


def position_of(chunk_id: str) -> Position | None:
    """The position a ``file_id:chunk_index`` id names, or ``None`` for an id of another form."""
    file_id, _, index = chunk_id.rpartition(":")
    if not (file_id and index.isascii() and index.isdigit()):
        return None
    if make_chunk_id(file_id, int(index)) != chunk_id:  # "f:03" is not chunk 3
        return None
    return (file_id, int(index))


def to_query(
    query: Sequence[float] | None,
    space: Space,
    vectors: Mapping[str, Sequence[float]],
    ids: Iterable[str],
) -> dict[str, float]:
    """The store's own distance to the query of every chunk in ``ids`` whose vector came back.

    The measure the search ranks by (squared L2, cosine or inner product), so computed and
    searched distances are on one scale.
    """
    if query is None:
        return {}
    kept = [chunk_id for chunk_id in dict.fromkeys(ids) if len(vectors.get(chunk_id, ())) > 0]
    if not kept:
        return {}
    import numpy as np  # only here: importing the retriever should not cost numpy

    matrix = np.asarray([vectors[chunk_id] for chunk_id in kept], dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    if space == "l2":
        distances = ((matrix - q) ** 2).sum(axis=1)
    elif space == "ip":
        distances = 1.0 - matrix @ q
    else:
        norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
        distances = 1.0 - matrix @ q / np.clip(norms, 1e-12, None)
    return {chunk_id: float(value) for chunk_id, value in zip(kept, distances, strict=True)}


def hits_by_id(found: Sequence[tuple[str, float]]) -> list[Hit] | None:
    """Hits known by id alone: ``file_id:chunk_index`` ids give their positions, no text.

    ``None`` when an id has another form (the caller then reads the hits the usual way).
    """
    hits: list[Hit] = []
    seen: set[str] = set()
    for chunk_id, distance in found:
        position = position_of(chunk_id)
        if position is None:
            return None
        if chunk_id not in seen:
            seen.add(chunk_id)
            chunk = Chunk(id=chunk_id, text="", file_id=position[0], index=position[1])
            hits.append(Hit(chunk, float(distance)))
    return hits


def absorbed(
    beyond: Sequence[Hit], chunks: Mapping[Position, Chunk], *, until_unread: bool = False
) -> list[Hit]:
    """Candidates beyond the plan that were fetched as neighbours, as hits, in rank order.

    A search that returned texts would have them all, so they must count: absorbed into a
    window, each adds its id and score. ``until_unread`` stops at the first candidate that was
    not fetched: one after it must never open a window in its place (the caller reads all
    candidates when the ``k`` windows are not there by then).
    """
    found: list[Hit] = []
    for hit in beyond:
        if hit.chunk.position not in chunks:
            if until_unread:
                break
            continue
        found.append(Hit(chunks[hit.chunk.position], hit.distance))  # type: ignore[index]
    return found


def above_floor(hits: Sequence[Hit], floor: float | None) -> list[Hit]:
    """The hits strong enough to start a window, in their order: the relevance floor.

    With ``floor`` f, a hit is kept when its distance lies within ``1 - f`` of the pool's
    spread from the best hit's: ``distance - best <= (1 - f) * (worst - best)``, the best and
    worst being the smallest and largest distances among ``hits`` (for fused hits, their
    vector distances, which every hit has). So 0 keeps every hit, 1 only the best (and its
    ties), 0.5 the hits nearer the best than the weakest. ``None`` is off.

    Why the spread, not a share of the best similarity (``similarity >= f * best``): the rule
    only compares differences of distances, so it is unchanged by any increasing affine
    rescaling of them. One setting then means the same in every distance space (for unit
    vectors squared L2 is twice the cosine distance, and inner product distance is the cosine
    distance) and across embedding models whose similarities sit in different bands (one
    model's hits all between 0.7 and 0.9 cosine, another's between 0.2 and 0.7), where a ratio
    of similarities would cut nothing for the first and a lot for the second. The price: the
    floor is relative to the pool searched, so a wider search (a larger ``fetch_k``) reaches
    weaker hits and lowers it, and for any f above 0 the pool's weakest hit is always dropped
    (unless all tie). The relevance scale of ``_adaptive`` carries across models for the same
    reason.

    A hit under the floor is only kept from *starting* a window: its chunk stays known, and a
    stronger window may still take it as a neighbour (it then counts as a neighbour, not as one
    of the window's hits, and adds nothing to its ``score`` or ``hit_ids``).
    """
    if floor is None or len(hits) < 2:
        return list(hits)
    best = min(hit.distance for hit in hits)
    spread = max(hit.distance for hit in hits) - best
    return [hit for hit in hits if hit.distance - best <= (1.0 - floor) * spread]
