"""Writing chunks to a store: under their own ids, in batches, replacing old versions safely."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError, Message, Option, OwnershipError
from window_retriever.core._ids import CHUNK_ID, CHUNK_INDEX, FILE_ID, FILE_VERSION
from window_retriever.ingestion._headers import embedded_text
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import Record, WindowStore

logger = logging.getLogger(__name__)

_FALLBACK_BATCH_SIZE = 5000
"""Records a call carries for a store with no limit of its own (``WindowStore.batch_size``)."""
MAX_IDS_PER_CALL = 32_762
"""Chroma (SQLite) fails above this many ids in one call ("too many SQL variables"), and so
does a ``get`` that would return more records: every read, write and delete is cut below it,
whatever the store."""
FILE_CHUNKS = "file_chunks"
"""Metadata that :func:`sync_file` stamps on a file's first chunk, which it writes last: how
many chunks the file has. It says the write of that version finished: with every chunk of
the version stored, the file is unchanged without a metadata query."""

INGEST_ORIGIN = "ingest_origin"
"""Metadata that a directory ingest stamps on every chunk of the files it lists: which copy of
the directory (this machine's, see :func:`directory_origin`) the file was read from. Pruning
removes only files with the run's own origin; chunks written through the API carry none and
are never pruned or replaced by a directory run. It is not part of the file's version: a run
that finds a file unchanged under another origin restamps it (metadata only, no embedding)."""

OWNER_KEYS = (
    "tenant",
    "tenant_id",
    "owner",
    "owner_id",
    "user",
    "user_id",
    "namespace",
    "org",
    "org_id",
    "organization",
)
"""Metadata keys that say whose a file is. :func:`sync_file` never replaces or deletes the
chunks of a file whose stored value of one of these differs from the new chunks' value."""


class _Operations(threading.local):
    """The stores this thread is in a write operation on (by ``id``)."""

    def __init__(self) -> None:
        self.open: set[int] = set()


_operations = _Operations()


@contextlib.contextmanager
def operation(store: WindowStore) -> Iterator[None]:
    """One write operation on ``store``: at its end, the store is told once (``written``).

    Also when the operation fails part-way: a partial write changes the store too (the
    failure in flight is raised, a failure to tell the store is then only logged). An
    operation inside another on the same store in the same thread (``ingest`` syncing,
    removing and pruning files) leaves the telling to the outer one: once per operation, not
    per file or batch. Other threads' operations tell for themselves.
    """
    key = id(store)
    if key in _operations.open:
        yield
        return
    _operations.open.add(key)
    try:
        yield
    except BaseException:
        _operations.open.discard(key)
        try:
            store.written()
        except Exception as error:  # the write's own failure is the one to raise
            logger.warning("could not tell the store it was written to: %s", error)
        raise
    _operations.open.discard(key)
    store.written()


def add_chunks(
    vectorstore: Any, chunks: Sequence[Document], *, batch_size: int | None = None
) -> list[str]:
    """Upsert chunks from ``WindowSplitter`` under their ``chunk_id``, in batches.

    Re-adding the same chunks replaces them (same ids), so ingestion can be re-run safely.
    Batches never exceed the client's maximum batch size (Chroma: about 5,461 records).

    Args:
        vectorstore: A ``langchain_chroma.Chroma``, or any ``WindowStore``.
        chunks: Chunks that carry ``metadata["chunk_id"]``.
        batch_size: Records per call; default: the client's maximum.

    Returns:
        The ids written, in the order of ``chunks``.

    Raises:
        ConfigurationError: A chunk has no ``chunk_id``, or two chunks share one. Nothing is
            written then.
    """
    ids = _chunk_ids(chunks)
    store = store_adapter(vectorstore)
    size = batch_size_for(store, batch_size)
    with operation(store):
        store_chunks(store, chunks, size)
    return ids


def _chunk_ids(chunks: Sequence[Document]) -> list[str]:
    ids: list[str] = []
    seen: set[str] = set()
    for number, chunk in enumerate(chunks):
        chunk_id = chunk.metadata.get(CHUNK_ID)
        if not isinstance(chunk_id, str) or not chunk_id:
            msg = (
                f"chunk {number} has no metadata['chunk_id']; split documents with "
                "WindowSplitter before adding them"
            )
            raise ConfigurationError(msg)
        if chunk_id in seen:
            msg = (
                f"chunk {number} repeats chunk_id {chunk_id!r}; two source documents share "
                "a file_id (see WindowSplitter's file_id_keys)"
            )
            raise ConfigurationError(msg)
        seen.add(chunk_id)
        ids.append(chunk_id)
    return ids


def batch_size_for(store: WindowStore, batch_size: int | None) -> int:
    """Records a write may carry: ``batch_size``, checked, or what the store allows."""
    size = _id_batch_size(store) if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        msg = f"batch_size must be a whole number, at least 1, got {size!r}"
        raise ConfigurationError(msg)
    return size


def store_chunks(
    store: WindowStore,
    chunks: Sequence[Document],
    size: int,
    vectors: Sequence[Sequence[float]] | None = None,
) -> None:
    """Upsert ``chunks`` under their ids, ``size`` a call; embedded by the store, or ``vectors``.

    A chunk the store embeds is embedded as :func:`embedded_text` says (``Record.embed_text``);
    ``vectors`` must be of that text too.
    """
    for begin in range(0, len(chunks), size):
        part = chunks[begin : begin + size]
        given = vectors[begin : begin + size] if vectors is not None else [None] * len(part)
        store.upsert([_record(chunk, vector) for chunk, vector in zip(part, given, strict=True)])


def _record(chunk: Document, vector: Sequence[float] | None) -> Record:
    embed = embedded_text(chunk)
    return Record(
        chunk.metadata[CHUNK_ID],
        chunk.page_content,
        chunk.metadata,
        vector,
        embed_text=None if embed == chunk.page_content else embed,
    )


def _id_batch_size(store: WindowStore) -> int:
    """The most ids (or records) one call may carry: the store's limit, and Chroma's SQL's."""
    return max(1, min(store.batch_size or _FALLBACK_BATCH_SIZE, MAX_IDS_PER_CALL))


def _get_by_ids(store: WindowStore, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stored metadata of those of ``ids`` that are stored, read in batches."""
    found: dict[str, dict[str, Any]] = {}
    size = _id_batch_size(store)
    for begin in range(0, len(ids), size):
        found.update(store.get_metadata(ids[begin : begin + size]))
    return found


def _get_where(store: WindowStore, where: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ids and metadata of every stored chunk that ``where`` matches, page by page."""
    found: list[tuple[str, dict[str, Any]]] = []
    size = _id_batch_size(store)
    while True:
        page = store.list_metadata(where, limit=size, offset=len(found))
        found += page
        if len(page) < size:
            return found


def _delete(store: WindowStore, ids: Sequence[str]) -> None:
    size = _id_batch_size(store)
    for begin in range(0, len(ids), size):
        store.delete(ids[begin : begin + size])


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What syncing one file's chunks did to the store."""

    status: Literal["added", "updated", "unchanged"]
    chunks: int
    """Chunks the file has now."""
    written: int
    """Chunks embedded and written (0 for an unchanged file)."""
    removed: int
    """Chunks of an older version that were deleted."""


def sync_file(
    vectorstore: Any,
    chunks: Sequence[Document],
    *,
    batch_size: int | None = None,
    owner_keys: Sequence[str] = OWNER_KEYS,
    replace_source_copies: bool = False,
) -> FileOutcome:
    """Make the store hold exactly ``chunks`` for their file, embedding only what changed.

    ``chunks`` are all the chunks of one file, from ``WindowSplitter`` (one ``file_id``, one
    ``file_version``). First the chunks' own ids are read (metadata only, no embeddings): when
    every one is stored with this version and the file's first chunk says its write finished,
    the file is unchanged and that is all. Otherwise the store's chunks of that file are read
    by ``file_id``, and with ``replace_source_copies`` also those stored under the same
    ``source`` with another file id. Then:

    - chunks already stored with this version are left alone (an unchanged file, or one whose
      earlier ingest was killed half-way, costs no embedding for them). The version hashes
      the text *and* the metadata, so a changed ``access`` level is a new version;
    - the others but the first chunk are upserted under the same ids, so every position holds
      the old or the new version at every moment and the file is never missing (windows join
      only chunks of the hit's version, so a half-written file never yields a mixed window);
    - chunks at positions the new version no longer has are deleted; with
      ``replace_source_copies`` (what the ingest command passes, one file per source and
      owner) so are copies of the same ``source`` under another file id with the same owner,
      e.g. from an ingest that put other metadata into the file id. Leave it off when one
      source holds several files (``file_id_keys=("source", "page")``);
    - last, the first chunk is written, stamped with the file's chunk count
      (``metadata["file_chunks"]``): the mark that this version was written whole (with
      nothing to delete, it goes in the last batch of the others). A file stored without it
      (by an earlier release, or by a write that was killed) is checked by ``file_id`` and,
      when it is otherwise complete, only its first chunk is written again.

    Every read and delete carries at most 32,762 ids and every write at most the client's
    batch size, so a file of any length fits Chroma's limits. A run killed at any point and
    run again converges to the same store, without duplicates.

    Raises:
        OwnershipError: The stored chunks of this file id have another value for one of
            ``owner_keys`` (another tenant's copy of the same source): nothing is written.
            Namespace the file id with ``WindowSplitter(file_id_keys=("tenant", "source"))``.
    """
    if not chunks:
        return FileOutcome("unchanged", 0, 0, 0)
    store = store_adapter(vectorstore)
    size = batch_size_for(store, batch_size)
    plan = plan_file(store, chunks, owner_keys, replace_source_copies)
    with operation(store):
        return apply_plan(store, plan, size)


@dataclass(frozen=True, slots=True)
class Plan:
    """What syncing one file writes, found by reading the store before anything is embedded."""

    body: list[Document]
    """Chunks to upsert first, in order."""
    head: Document | None
    """The first chunk, stamped with the file's chunk count, upserted last (or not at all)."""
    stale: list[str]
    """Ids to delete between the two: a shrunk file's tail, copies under older file ids."""
    chunks: int
    existed: bool
    restamp: list[str] = field(default_factory=list)
    """Ids of chunks that are current but carry another ``ingest_origin``: their stamp is set
    to this run's, without embedding them again."""
    origin: str | None = None

    def documents(self) -> list[Document]:
        """Every chunk to embed and write, in the order they are written."""
        return [*self.body, *([self.head] if self.head is not None else [])]


def plan_file(
    vectorstore: WindowStore | Any,
    chunks: Sequence[Document],
    owner_keys: Sequence[str],
    replace_source_copies: bool,
) -> Plan:
    """Read what the store holds of a file and decide what syncing it writes (nothing yet)."""
    store = store_adapter(vectorstore)
    file_ids = {chunk.metadata.get(FILE_ID) for chunk in chunks}
    versions = {chunk.metadata.get(FILE_VERSION) for chunk in chunks}
    if len(file_ids) != 1 or len(versions) != 1:
        msg = (
            "sync_file takes the chunks of exactly one file version (one file_id, one file_version)"
        )
        raise ConfigurationError(msg)
    (file_id,) = file_ids
    (version,) = versions
    ids = _chunk_ids(chunks)
    # The file's first chunk (chunk_index 0) is written last: the mark of a whole write.
    head = next((n for n, c in enumerate(chunks) if c.metadata.get(CHUNK_INDEX) == 0), 0)
    first = chunks[head].metadata
    owner = {key: first.get(key) for key in owner_keys}
    mark = {FILE_ID: file_id, FILE_VERSION: version, **owner}
    origin = first.get(INGEST_ORIGIN)
    found = _get_by_ids(store, ids)
    if (
        len(found) == len(ids)
        and all(_matches(metadata, mark) for metadata in found.values())
        and found[ids[head]].get(FILE_CHUNKS) == len(chunks)
    ):
        restamp = _restamps(found, ids, origin)
        return Plan([], None, [], len(chunks), existed=True, restamp=restamp, origin=origin)

    source = first.get("source")
    where: dict[str, Any] = {FILE_ID: file_id}
    if (
        replace_source_copies
        and isinstance(source, str | int | float)
        and not isinstance(source, bool)
    ):
        where = {"$or": [{FILE_ID: file_id}, {"source": source}]}
    stored: dict[str, dict[str, Any]] = {}
    copies: list[str] = []
    for chunk_id, metadata in _get_where(store, where):
        same_owner = all(metadata.get(key) == value for key, value in owner.items())
        if metadata.get(FILE_ID) == file_id:
            if not same_owner:
                raise OwnershipError(_owner_message(str(file_id), source, metadata, owner))
            stored[chunk_id] = metadata
        elif same_owner and origin is not None and metadata.get(INGEST_ORIGIN) == origin:
            copies.append(chunk_id)  # the same source, as this run read it, under an old file id
    todo = [
        number
        for number, chunk_id in enumerate(ids)
        if number != head and stored.get(chunk_id, {}).get(FILE_VERSION) != version
    ]
    stale = sorted(set(stored) - set(ids)) + sorted(copies)
    stored_head = stored.get(ids[head], {})
    whole = stored_head.get(FILE_VERSION) == version and stored_head.get(FILE_CHUNKS) == len(ids)
    marked = Document(
        page_content=chunks[head].page_content,
        metadata={**first, FILE_CHUNKS: len(chunks)},
        id=ids[head],
    )
    rewritten = {*todo, head}
    kept = {chunk_id: stored[chunk_id] for n, chunk_id in enumerate(ids) if n not in rewritten}
    if whole:
        kept[ids[head]] = stored_head
    return Plan(
        body=[chunks[n] for n in todo],
        head=None if whole else marked,
        stale=stale,
        chunks=len(chunks),
        existed=bool(stored or copies),
        restamp=_restamps(kept, [i for i in ids if i in kept], origin),
        origin=origin,
    )


def _restamps(
    stored: Mapping[str, Mapping[str, Any]], ids: Sequence[str], origin: Any
) -> list[str]:
    """Which of ``ids``, stored and current, carry another origin than this run's."""
    if origin is None:
        return []
    return [chunk_id for chunk_id in ids if stored[chunk_id].get(INGEST_ORIGIN) != origin]


def apply_plan(
    store: WindowStore,
    plan: Plan,
    size: int,
    vectors: Sequence[Sequence[float]] | None = None,
) -> FileOutcome:
    """Write a plan: its body, its deletes, then its first chunk (``vectors``: theirs).

    The first chunk's mark must not come before the deletes (a file marked whole would not be
    read again, so a tail left by a killed run would stay); with nothing to delete it goes
    last in the body's writes, in one embedding call with them.
    """
    if vectors is None:
        if not plan.stale:
            store_chunks(store, plan.documents(), size)
        else:
            if plan.body:
                store_chunks(store, plan.body, size)
            _delete(store, plan.stale)
            if plan.head is not None:
                store_chunks(store, [plan.head], size)
        _restamp(store, plan)
    else:
        write_plan(store, plan, size, [vectors])
    return outcome_of(plan)


def write_plan(
    store: WindowStore,
    plan: Plan,
    size: int,
    parts: Iterable[Sequence[Sequence[float]]],
    written: Callable[[int], None] | None = None,
) -> None:
    """Write a plan whose vectors arrive in ``parts``, each part's chunks as soon as it comes.

    The parts are the vectors of :meth:`Plan.documents`, in order. The body is written part
    by part (what a run stopped half-way has written stays, and the next run does not embed
    it again), then the deletes, then the first chunk: with nothing to delete, in the last
    part's write. ``written`` is told how many chunks each write stored.
    """
    documents = plan.documents()
    done = 0
    head_vector: Sequence[float] | None = None
    for part in parts:
        chunks = documents[done : done + len(part)]
        vectors = list(part)
        done += len(part)
        if plan.stale and plan.head is not None and done == len(documents):
            head_vector = vectors.pop()  # the mark waits for the deletes
            chunks = chunks[:-1]
        if chunks:
            store_chunks(store, chunks, size, vectors)
            if written is not None:
                written(len(chunks))
    if done != len(documents):
        msg = f"write_plan got vectors for {done} of the plan's {len(documents)} chunks"
        raise ValueError(msg)
    if plan.stale:
        _delete(store, plan.stale)
    if plan.head is not None and head_vector is not None:
        store_chunks(store, [plan.head], size, [head_vector])
        if written is not None:
            written(1)
    _restamp(store, plan)


def _restamp(store: WindowStore, plan: Plan) -> None:
    """Set this run's origin on the plan's current chunks that carry another (metadata only)."""
    size = _id_batch_size(store)
    for begin in range(0, len(plan.restamp), size):
        store.update_metadata(plan.restamp[begin : begin + size], {INGEST_ORIGIN: plan.origin})


def outcome_of(plan: Plan) -> FileOutcome:
    """What writing ``plan`` did."""
    written = len(plan.documents())
    if not written and not plan.stale:
        status: Literal["added", "updated", "unchanged"] = "unchanged"
    else:
        status = "updated" if plan.existed else "added"
    return FileOutcome(status, plan.chunks, written, len(plan.stale))


def _matches(metadata: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    return all(metadata.get(key) == value for key, value in expected.items())


def _owner_message(
    file_id: str, source: Any, stored: Mapping[str, Any], owner: Mapping[str, Any]
) -> Message:
    differing = [key for key, value in owner.items() if stored.get(key) != value]
    was = ", ".join(f"{key}={stored.get(key)!r}" for key in differing)
    now = ", ".join(f"{key}={owner[key]!r}" for key in differing)
    what = f"source {source!r}" if source is not None else f"file {file_id!r}"
    keys = (*differing, "source")
    return Message(
        f"{what} is stored with {was}; syncing it with {now} would replace the other "
        f"owner's chunks, so nothing was written. Keep one file per owner with ",
        Option("file_id_keys", keys, said=f"WindowSplitter(file_id_keys={keys!r})"),
        " or delete the stored file first",
    )
