"""The store protocol: what the retriever reads and ingestion writes, and the rules a store keeps.

A store is a subclass of :class:`WindowStore` (sync), and optionally of
:class:`AsyncWindowStore` (its async twin, for a store that can wait without a thread), as
httpx's ``BaseTransport`` / ``AsyncBaseTransport``. The retriever speaks to it only through
request objects (:class:`Search`, :class:`SearchIds`, :class:`SearchVectors`, :class:`Fetch`)
run by :func:`execute` and :func:`aexecute`, so its sync and async paths share one body.
Ingestion speaks to it through the write methods. ``window_retriever.ChromaWindowStore`` and
``window_retriever.MemoryWindowStore`` implement both; the same behavioural tests run
against each (``tests/stores/test_store_contract.py``).

The rules every store keeps (the retriever and ingestion rely on them):

1. **Ids are chunk ids.** A chunk from ``WindowSplitter`` is stored under its
   ``metadata["chunk_id"]``, and every document a store returns has ``Document.id`` set to it.
   The retriever computes neighbours' ids from positions and fetches them by id.
2. **Distances are lower-is-better**, in the store's own space (:attr:`Found.space`):
   ``"l2"`` (squared Euclidean), ``"cosine"`` (1 - cosine similarity) or ``"ip"``
   (1 - inner product). Search results come best first.
3. **Filters are applied by the store, always.** ``where`` (metadata) and ``where_document``
   (text) of a request restrict its results exactly as Chroma's filter language says, on a
   fetch by ids as on a search. When the retriever's own evaluator cannot decide a filter it
   passes it to the fetch and relies on the store: a chunk the filter hides must never come
   back (it may be another tenant's). A store that cannot decide a filter raises
   ``ConfigurationError``; it never ignores one. The one exception: a :class:`SearchIds`
   given ``ids`` (the ids ``where`` passes as far as the process knows) may search among them
   in place of ``where``, never in place of ``where_document``; the retriever applies the
   filter again to every chunk it reads.
4. **Missing ids are simply absent** from a fetch or a read by ids: no error, no placeholder.
5. **Embeddings come back when asked, and only then**: a request with ``embeddings=True`` gets
   one stored vector per document (and a search the query's vector), a
   :class:`SearchVectors` one per hit; otherwise
   :attr:`Found.embeddings` is empty. A search with ``query_embedding=True`` gets the query's
   vector alone, from a store with ``supports_query_embedding = True`` (any other is sent
   ``embeddings=True`` instead). A store that holds no vectors says so with
   ``supports_embeddings = False`` and is never asked.
6. **An upsert replaces a record whole**: its text, its embedding and *exactly* its metadata
   (a key the stored record has and the new one lacks is gone afterwards; Chroma's own
   upsert merges, so its adapter removes such keys). Writes never touch other records.
7. **Batches respect** :attr:`WindowStore.batch_size`: callers never pass more ids or records
   to one call than it says.
8. **Writers tell the store when they are done**: every write operation of the library ends
   with one :meth:`WindowStore.written` (in a ``finally``), after its last write.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, overload

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from window_retriever._errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

Where = Mapping[str, Any]
Space = Literal["l2", "cosine", "ip"]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Search:
    """A similarity search: the ``k`` chunks nearest to ``query``, best first."""

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None
    embeddings: bool = False
    """Also return the query's and every hit's embedding (rule 5)."""
    query_embedding: bool = False
    """Also return the query's embedding, without the hits' (rule 5): what measuring other
    chunks against the query needs, at no cost on the wire."""


@dataclass(frozen=True, slots=True)
class SearchIds:
    """A similarity search that returns only ``(id, distance)`` pairs, best first.

    The cheapest search Chroma has: no text, no metadata. The retriever reads each hit's
    position from its id and fetches the texts of the hits it will use together with their
    neighbours, in one fetch: static windows once the store's typical chunk length is known,
    adaptive ones always (a pool of 100, whose distances measure the neighbours). Only a store
    with ``supports_search_ids = True`` is asked.
    """

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None
    ids: Sequence[str] | None = None
    """The ids ``where`` passes as far as the process knows (:meth:`Held.passing`), or
    ``None``: a store may search among them in place of applying ``where`` (never of
    ``where_document``; Chroma's
    ``ids=`` costs a fraction of its ``where``), or ignore them. They may be stale: the caller
    applies the filter again to every chunk it reads, and where one is no longer stored the
    store may raise :class:`IdsRefused` (Chroma does), for the caller to ask again without
    them."""


class IdsRefused(Exception):  # noqa: N818 - a signal between the store and the retriever
    """The store refused a search among :attr:`SearchIds.ids`: it no longer holds one of them.

    Raised by a store's ``search_ids`` / ``search_vectors`` only; the retriever tells the
    keyword index that gave the ids (``Held.distrust``) and asks again with ``where``.
    """


@dataclass(frozen=True, slots=True)
class SearchVectors:
    """A :class:`SearchIds` whose answer carries each hit's stored vector too.

    What diversity between windows compares (the hits' vectors), beside the distances a lean
    search gives, with no text and no metadata. Only a store with ``supports_embeddings =
    True`` is asked; the default :meth:`WindowStore.search_vectors` runs a full
    :meth:`WindowStore.search` with ``embeddings=True`` and keeps the ids, distances and
    vectors.
    """

    query: str
    k: int
    where: Where | None = None
    where_document: Where | None = None
    ids: Sequence[str] | None = None
    """As :attr:`SearchIds.ids`."""


@dataclass(frozen=True, slots=True)
class Fetch:
    """A batched fetch of chunks by id, filtered by the store itself (rule 3)."""

    ids: Sequence[str]
    where: Where | None = None
    where_document: Where | None = None
    embeddings: bool = False
    """Also return every chunk's stored embedding (rule 5)."""


Request = Search | SearchIds | SearchVectors | Fetch
IdHits = list[tuple[str, float]]
"""The answer to a :class:`SearchIds`: ``(id, distance)`` pairs, best first."""


@dataclass(frozen=True, slots=True)
class Found:
    """The answer to a :class:`Search` or a :class:`Fetch`: documents, in one shape for both.

    A search's documents come best first, a fetch's in any order. Documents without text are
    left out.
    """

    documents: Sequence[Document]
    distances: Sequence[float] = ()
    """One per document for a search (lower is better, in ``space``); empty for a fetch."""
    embeddings: Sequence[Sequence[float]] = ()
    """One stored vector per document when the request asked; empty otherwise."""
    query_embedding: Sequence[float] | None = None
    """The query's vector, for a search that asked for it (``embeddings`` or
    ``query_embedding``); otherwise ``None``."""
    space: Space = "l2"
    """The distance the store ranks by: ``"l2"`` (squared), ``"cosine"`` or ``"ip"``."""

    def pairs(self) -> list[tuple[Document, float]]:
        """A search's ``(document, distance)`` pairs, best first."""
        return list(zip(self.documents, self.distances, strict=True))


@dataclass(frozen=True, slots=True)
class VectorHits:
    """The answer to a :class:`SearchVectors`: ids and distances, best first, with vectors."""

    hits: IdHits
    """``(id, distance)`` pairs, best first, as a :class:`SearchIds` answers."""
    vectors: Sequence[Sequence[float]]
    """One stored vector per hit, in the same order."""
    space: Space = "l2"
    """The distance the store ranks by (as :attr:`Found.space`)."""


Response = Found | IdHits | VectorHits

Indexed = Mapping[str, tuple[int, Mapping[str, Any]]]
"""Chunk id -> (text length in characters, metadata): what :meth:`Held.indexed` answers."""


class Held(Protocol):
    """What a process holds of a store's chunks beside the store: Chroma's keyword index.

    The retrieval uses it in three named places, never beneath a store call: a filtered
    search by ids asks it for the ids the filter passes (:attr:`SearchIds.ids`), adaptive
    selection chooses among its lengths and metadata before it reads
    (``retrieval/_stand_ins.py``), and every read by id tells it what was read
    (``Neighbours.read``), so a chunk rewritten behind its back is held as read. It may be
    stale: every chunk read is checked against the caller's filter, and against what it said.
    """

    def indexed(self, ids: Sequence[str]) -> Indexed | None:
        """Each id's text length and metadata as held (ids not held left out); ``None`` if none."""

    def passing(self, where: Mapping[str, Any]) -> list[str] | None:
        """The ids of every chunk ``where`` passes as held, or ``None`` where it cannot say."""

    def build(self) -> object | None:
        """A token of what is held now, taken before a read and given back to :meth:`correct`."""

    def correct(self, read: Indexed, build: object | None) -> None:
        """Hold the chunks just ``read`` as read, unless what is held changed since ``build``."""

    def distrust(self) -> None:
        """The store refused a search among the ids :meth:`passing` gave (:class:`IdsRefused`)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One chunk to write: its id (the ``chunk_id``), text, exact metadata and vector.

    ``embedding`` ``None`` asks the store to embed :attr:`to_embed` with its own model: the
    chunk's ``embed_text`` (its context header and its text) when given, else its ``text``.
    Whatever is embedded, the store stores and returns ``text``.
    """

    id: str
    text: str
    metadata: Mapping[str, Any]
    embedding: Sequence[float] | None = None
    embed_text: str | None = None
    """The text to embed in place of ``text`` (``None``: ``text`` itself)."""

    @property
    def to_embed(self) -> str:
        """The text a store embeds for this record (when ``embedding`` is ``None``)."""
        return self.text if self.embed_text is None else self.embed_text


class WindowStore(ABC):
    """A store of chunks, as the retriever reads it and ingestion writes it (sync).

    Subclass it and implement :meth:`search` and :meth:`fetch`: that is a store the retriever
    can read (static windows; set ``supports_embeddings`` for adaptive ones). A store
    ingestion writes to implements the five write methods too. Keep the rules of the module
    docstring (``window_retriever.stores._protocol``). An implementation that can also wait without
    a thread subclasses :class:`AsyncWindowStore` as well; one that does not is driven from
    async code in a thread (LangChain's executor).
    """

    supports_search_ids: ClassVar[bool] = False
    """True when :meth:`search_ids` is implemented. Without it the retriever always runs the
    full :meth:`search`: static windows are the same, with more data read; adaptive windows
    measure every neighbour by its stored vector, where the search's pool measures one
    outside the pool at the pool's farthest distance (so they may differ a little)."""
    supports_embeddings: ClassVar[bool] = False
    """True when requests with ``embeddings=True`` are answered (rule 5). Without it,
    adaptive windows that need vectors (no ``search_ids``, ids that do not name positions,
    ``diversity``) are refused with a ``ConfigurationError``."""
    supports_keyword_search: ClassVar[bool] = False
    """True when :meth:`keyword_search` is implemented: ``candidates="hybrid"`` needs it."""
    supports_query_embedding: ClassVar[bool] = False
    """True when a search with ``query_embedding=True`` returns the query's vector (rule 5).
    Without it such a search is sent with ``embeddings=True`` instead: the same answer, with
    the hits' vectors too."""

    # ---- reads (the retriever) -------------------------------------------------------------

    @abstractmethod
    def search(self, request: Search) -> Found:
        """The ``request.k`` nearest chunks that pass its filters, best first, with distances."""

    @abstractmethod
    def fetch(self, request: Fetch) -> Found:
        """The stored chunks among ``request.ids`` that pass its filters (any order)."""

    def search_ids(self, request: SearchIds) -> IdHits:
        """``(id, distance)`` pairs, best first (only if ``supports_search_ids``).

        Among ``request.ids`` in place of ``where``, where given and the store can (see
        :attr:`SearchIds.ids`): those ids may be stale, and the retriever applies the filter
        again to every chunk it reads.
        """
        raise NotImplementedError(_lacks(self, "search_ids"))

    def search_vectors(self, request: SearchVectors) -> VectorHits:
        """``(id, distance)`` pairs, best first, with each hit's vector (``supports_embeddings``).

        The default runs :meth:`search` with ``embeddings=True`` (``request.ids`` ignored); a
        store that can leave the texts and metadata out does better.
        """
        found = self.search(_full_search(request))
        return _vector_hits(found)

    def keyword_search(
        self, query: str, k: int, where: Where | None, where_document: Where | None
    ) -> IdHits:
        """``(id, score)`` pairs of a keyword (BM25) search, best (highest score) first.

        At most ``k``, only chunks that hold a word of the query, under the filters (rule 3),
        over exactly the chunks stored (only if ``supports_keyword_search``).
        """
        raise NotImplementedError(_lacks(self, "keyword_search"))

    def keyword_search_building(self) -> bool:
        """Whether :meth:`keyword_search` finds nothing for now: its index is not built yet.

        ``True`` while a first build runs in the background (Chroma's index of a large
        collection): the retriever then marks its documents ``keyword_leg="building"``, found
        by the vector leg alone. ``False`` (the default) otherwise.
        """
        return False

    def held(self) -> Held | None:
        """What this process holds of the store's chunks beside it (:class:`Held`), or ``None``.

        ``None`` (the default): filtered searches go to the store's ``where``, and adaptive
        windows read every chunk the selection might measure. Chroma's adapter answers its
        collection's keyword index, once this process has one (it never makes one here).
        """
        return None

    # ---- writes (ingestion) ----------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings | None:
        """The model the store embeds with; ingestion embeds with it and writes the vectors.

        ``None``: ingestion writes records without vectors (the store embeds them itself, in
        :meth:`upsert`), source by source.
        """
        return None

    @property
    def batch_size(self) -> int | None:
        """The most ids or records one call may carry; ``None`` for no limit of its own."""
        return None

    def upsert(self, records: Sequence[Record]) -> None:
        """Write ``records``, each replacing the stored record of its id whole (rule 6)."""
        raise NotImplementedError(_lacks(self, "upsert"))

    def update_metadata(self, ids: Sequence[str], metadata: Mapping[str, Any]) -> None:
        """Set the keys of ``metadata`` on the stored records of ``ids`` (others untouched).

        Text, embedding and the other keys stay; an id that is not stored is ignored.
        """
        raise NotImplementedError(_lacks(self, "update_metadata"))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete the records of ``ids``; an id that is not stored is ignored."""
        raise NotImplementedError(_lacks(self, "delete"))

    def get_metadata(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored metadata of those of ``ids`` that are stored, by id (no text, no vector)."""
        raise NotImplementedError(_lacks(self, "get_metadata"))

    def written(self) -> None:
        """Told once at the end of every write operation of the library (rule 8).

        ``add_chunks``, ``sync_file``, ``remove_file``, ``prune_missing`` and ``ingest`` call
        it after their last write, also when they failed part-way (a partial write changes the
        store too), and once for the whole operation, not per batch. A store that keeps state
        derived from its records brings it up to date here; the default does nothing. (The
        Chroma adapter invalidates the collection's keyword index, in every process.)
        """
        return  # a store without derived state has nothing to do

    def list_metadata(
        self, where: Where | None, *, limit: int, offset: int = 0
    ) -> list[tuple[str, dict[str, Any]]]:
        """One page of ``(id, metadata)`` of the records ``where`` matches (all for ``None``).

        The order is the store's own, the same from page to page while nothing is written;
        a page shorter than ``limit`` is the last.
        """
        raise NotImplementedError(_lacks(self, "list_metadata"))


class AsyncWindowStore(ABC):
    """The async twin of :class:`WindowStore`'s reads, for a store that waits without threads.

    A store subclasses both; :func:`aexecute` then awaits these instead of running the sync
    methods in a thread. The same rules hold, and the answers equal the sync ones.
    """

    @abstractmethod
    async def asearch(self, request: Search) -> Found:
        """:meth:`WindowStore.search`, awaited."""

    @abstractmethod
    async def afetch(self, request: Fetch) -> Found:
        """:meth:`WindowStore.fetch`, awaited."""

    async def asearch_ids(self, request: SearchIds) -> IdHits:
        """:meth:`WindowStore.search_ids`, awaited (only if ``supports_search_ids``)."""
        raise NotImplementedError(_lacks(self, "asearch_ids"))

    async def asearch_vectors(self, request: SearchVectors) -> VectorHits:
        """:meth:`WindowStore.search_vectors`, awaited; by default :meth:`asearch`'s answer."""
        found = await self.asearch(_full_search(request))
        return _vector_hits(found)


def _full_search(request: SearchVectors) -> Search:
    """The full search that answers ``request`` where a store has nothing leaner."""
    return Search(request.query, request.k, request.where, request.where_document, embeddings=True)


def _vector_hits(found: Found) -> VectorHits:
    hits = [(document.id or "", distance) for document, distance in found.pairs()]
    return VectorHits(hits, list(found.embeddings), found.space)


def _lacks(store: object, method: str) -> str:
    return f"{type(store).__name__} does not implement {method}"


@overload
def execute(store: WindowStore, request: SearchIds) -> IdHits: ...
@overload
def execute(store: WindowStore, request: SearchVectors) -> VectorHits: ...
@overload
def execute(store: WindowStore, request: Search | Fetch) -> Found: ...
@overload
def execute(store: WindowStore, request: Request) -> Response: ...
def execute(store: WindowStore, request: Request) -> Response:
    """Run one request against ``store``."""
    request = _check(store, request)
    if isinstance(request, SearchIds):
        return store.search_ids(request)
    if isinstance(request, SearchVectors):
        return store.search_vectors(request)
    if isinstance(request, Search):
        return store.search(request)
    return store.fetch(request)


@overload
async def aexecute(store: WindowStore, request: SearchIds) -> IdHits: ...
@overload
async def aexecute(store: WindowStore, request: SearchVectors) -> VectorHits: ...
@overload
async def aexecute(store: WindowStore, request: Search | Fetch) -> Found: ...
@overload
async def aexecute(store: WindowStore, request: Request) -> Response: ...
async def aexecute(store: WindowStore, request: Request) -> Response:
    """Run one request against ``store`` without blocking the event loop.

    A store that is also an :class:`AsyncWindowStore` is awaited; any other runs its sync
    method in a thread (:func:`in_thread`).
    """
    if not isinstance(store, AsyncWindowStore):
        return await in_thread(execute, store, request)
    request = _check(store, request)
    if isinstance(request, SearchIds):
        return await store.asearch_ids(request)
    if isinstance(request, SearchVectors):
        return await store.asearch_vectors(request)
    if isinstance(request, Search):
        return await store.asearch(request)
    return await store.afetch(request)


async def in_thread(function: Callable[..., _T], *args: Any) -> _T:
    """Run a blocking store call in LangChain's executor: the one place async code does so."""
    return await run_in_executor(None, function, *args)


_QUERY_VECTORS: ContextVar[dict[str, list[tuple[object, list[float]]]] | None] = ContextVar(
    "window_retriever_query_vectors", default=None
)
"""The query vectors of the retrieval under way (:func:`one_retrieval`): by query, each with
the model that embedded it. LangChain's executor copies the context into its threads, so a
sync call run from async code shares them."""


@contextmanager
def one_retrieval() -> Iterator[None]:
    """The requests of one retrieval: within it, a store embeds each query once.

    A retrieval may search more than once (static windows whose hits merge search again,
    twice as wide; a route re-planned to ``read``; a search among ids the store refused), and
    with the packaged model an embedding costs about 10 ms, more than the search it serves.
    A retrieval run within another (``candidates=`` a retriever that retrieves) shares the
    outer one's vectors. Only within one retrieval: another call, even of the same query,
    embeds it again, so no call is faster for what an earlier one asked.
    """
    outer = _QUERY_VECTORS.get()
    token = _QUERY_VECTORS.set({} if outer is None else outer)
    try:
        yield
    finally:
        with suppress(ValueError):  # closed from another context (an abandoned task's coroutine)
            _QUERY_VECTORS.reset(token)


def _kept(
    query: str, embedder: object
) -> tuple[list[float] | None, list[tuple[object, list[float]]] | None]:
    """The vector kept for ``query`` by ``embedder`` in this retrieval, or ``None``.

    And the list to keep a new one in (``None`` outside a retrieval).
    """
    kept = _QUERY_VECTORS.get()
    if kept is None:
        return None, None
    by_model = kept.setdefault(query, [])
    found = next((vector for model, vector in by_model if model is embedder), None)
    return (None if found is None else list(found)), by_model


def _floats(vector: Sequence[float]) -> list[float]:
    """A vector as the plain floats Chroma takes (a model may give numpy's)."""
    return [float(value) for value in vector]


def query_vector(embedder: Any, query: str) -> list[float]:
    """``embedder.embed_query(query)``, once within one retrieval (:func:`one_retrieval`)."""
    vector, by_model = _kept(query, embedder)
    if vector is None:
        vector = _floats(embedder.embed_query(query))
        if by_model is not None:
            by_model.append((embedder, list(vector)))
    return vector


async def aquery_vector(embedder: Any, query: str) -> list[float]:
    """:func:`query_vector` with the model's ``aembed_query``."""
    vector, by_model = _kept(query, embedder)
    if vector is None:
        embedded: Awaitable[Sequence[float]] = embedder.aembed_query(query)
        vector = _floats(await embedded)
        if by_model is not None:
            by_model.append((embedder, list(vector)))
    return vector


def _check(store: WindowStore, request: Request) -> Request:
    """The request as the store can answer it; refuse one it cannot, naming the fix."""
    if isinstance(request, SearchIds):
        if not store.supports_search_ids:
            msg = f"{type(store).__name__} has no search_ids; the retriever should not ask it"
            raise ConfigurationError(msg)
        return request
    if (
        isinstance(request, Search)
        and request.query_embedding
        and not request.embeddings
        and not store.supports_query_embedding
    ):
        request = replace(request, embeddings=True)  # the query's vector comes with them
    measures = (
        isinstance(request, SearchVectors)
        or request.embeddings
        or (isinstance(request, Search) and request.query_embedding)
    )
    if measures and not store.supports_embeddings:
        msg = (
            f"expansion='adaptive' needs a store that returns embeddings; "
            f"{type(store).__name__} does not (supports_embeddings is False): use "
            "langchain_chroma.Chroma, or expansion='static'"
        )
        raise ConfigurationError(msg)
    return request
