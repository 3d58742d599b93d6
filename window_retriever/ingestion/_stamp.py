"""Stamping a collection made without ``WindowSplitter``: positions recovered from ``start_index``.

:func:`stamp_collection` gives every chunk that lacks window metadata the ``file_id``,
``chunk_index``, ``chunk_id`` and ``file_version`` that ``WindowSplitter`` would have given
it, from the ``start_index`` a LangChain splitter records (``add_start_index=True``), and
stores it under its ``chunk_id`` with its stored embedding (nothing is embedded again).

The steps, each written so that a run killed at any point loses nothing:

1. read every record's metadata and refuse, before anything is written, what cannot be
   stamped (a chunk without ``start_index``, or without a key to derive its file from);
2. read the texts of the chunks to stamp, and refuse a file whose order is not one split of
   one text (two different chunks at one offset);
3. write each file's chunks under their new ids, stamped with ``original_id`` (the id they
   had), then delete the old ids. Until the deletes, a chunk is stored twice; a run killed
   there and run again recognises its copies by ``original_id`` and finishes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from window_retriever._errors import ConfigurationError, Message, Option
from window_retriever.core._ids import (
    CHUNK_ID,
    CHUNK_INDEX,
    FILE_ID,
    FILE_VERSION,
    START_INDEX,
    content_version,
    make_chunk_id,
    make_file_id,
)
from window_retriever.ingestion._write import (
    FILE_CHUNKS,
    _delete,
    _id_batch_size,
    batch_size_for,
    operation,
)
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import Fetch, Record, WindowStore

ORIGINAL_ID = "original_id"
"""Metadata that :func:`stamp_collection` puts on each chunk it stamps: the id the chunk was
stored under before (its copy under that id is deleted once every chunk of its file is
written). A run that stopped before its deletes recognises its copies by it."""

_WINDOW_KEYS = (FILE_ID, CHUNK_INDEX, CHUNK_ID, FILE_VERSION, FILE_CHUNKS, ORIGINAL_ID)
"""The keys stamping sets (or, for ``file_chunks``, drops): a chunk's other metadata stays."""

_REINGEST = (
    "re-ingest the sources through WindowSplitter instead (window_retriever.ingest, or "
    "WindowSplitter(...).split_documents then add_chunks)"
)


@dataclass(frozen=True, slots=True)
class Stamped:
    """What :func:`stamp_collection` did, in counts."""

    files: int = 0
    """Files whose chunks were stamped."""
    chunks: int = 0
    """Chunks written under their ``chunk_id``, with their stored embedding."""
    removed: int = 0
    """Records deleted: the stamped chunks' old ids, and exact duplicates."""
    duplicates: int = 0
    """Chunks stored more than once (the same file, offset, text and metadata): kept once."""
    kept: int = 0
    """Chunks that had window metadata already, left as they were."""
    misplaced: int = 0
    """Of ``kept``, chunks with window metadata that are not stored under their ``chunk_id``
    (added without ``ids=``): left as they were; add them again with ``add_chunks``."""


def stamp_collection(
    vectorstore: Any,
    *,
    file_id_keys: Sequence[str] = ("source",),
    batch_size: int | None = None,
) -> Stamped:
    """Give a collection's chunks the window metadata ``WindowSplitter`` gives, in place.

    For a collection split by another tool, or by LangChain's splitters alone, whose chunks
    carry ``start_index`` (``RecursiveCharacterTextSplitter(..., add_start_index=True)``):
    the chunks without window metadata are grouped into files, by an explicit
    ``metadata["file_id"]`` or else by the values of ``file_id_keys`` (as ``WindowSplitter``
    derives a file id, so a later ``ingest`` of the same source replaces them), and ordered
    by ``start_index``. Each then gets ``file_id``, ``chunk_index`` (its place in its file),
    ``chunk_id`` and ``file_version`` (a hash of its file's chunks), and ``original_id``
    (the id it had); its other metadata and its text stay. It is stored under its
    ``chunk_id`` with its stored embedding (nothing is embedded again; a store without
    ``supports_embeddings`` embeds it), and its old id is deleted. A chunk stored twice (the
    same file, offset, text and metadata) is kept once. Chunks that have window metadata
    already are left as they are, so running it again does nothing more.

    Nothing is written when a chunk cannot be stamped: every check reads before the first
    write. A run that is stopped leaves every chunk stored, some twice (under the old id and
    the new) until it is run again, which finishes the work. Run it while nothing else writes
    to the collection.

    Args:
        vectorstore: A ``langchain_chroma.Chroma`` (``open_store(...)``), or any
            ``WindowStore``.
        file_id_keys: The metadata keys that say which file a chunk belongs to, as for
            ``WindowSplitter``: add an owner key (``("source", "tenant")``) when one source
            is stored for several owners, as ``ingest`` does for ``metadata={"tenant": ...}``.
        batch_size: Records per write; default: the client's maximum.

    Returns:
        The counts.

    Raises:
        ConfigurationError: A chunk without window metadata has no ``start_index`` (its
            place in its file cannot be recovered) or none of ``file_id_keys``; a file
            holds two different chunks at one offset (two versions or two splits of it, or
            two owners' copies under one file id); or a file is also stored with window
            metadata. Nothing is written then.
    """
    keys = _checked_keys(file_id_keys)
    store = store_adapter(vectorstore)
    size = batch_size_for(store, batch_size)
    scan = _scan(store, keys)
    files = [file for file in scan.files.values() if file.unstamped]
    digests = _digests(store, [member.id for file in files for member in file.members])
    plans = [_plan(file, digests, scan, keys, size) for file in files]
    with operation(store):
        for plan in plans:
            _write(store, plan)
    processed = sum(len(file.members) for file in files)
    return Stamped(
        files=len(plans),
        chunks=sum(len(step) for plan in plans for step in plan.batches),
        removed=sum(len(plan.stale) for plan in plans),
        duplicates=sum(plan.duplicates for plan in plans),
        kept=scan.records - processed,
        misplaced=scan.misplaced,
    )


@dataclass(slots=True)
class _Member:
    """One stored record of a file being stamped."""

    id: str
    key: str
    """The chunk it holds: its ``original_id`` if stamped by a run before, else its own id."""
    start: int
    metadata: dict[str, Any]

    @property
    def own(self) -> dict[str, Any]:
        """Its metadata without the keys stamping sets."""
        return {k: v for k, v in self.metadata.items() if k not in _WINDOW_KEYS}


@dataclass(slots=True)
class _File:
    file_id: str
    source: Any
    members: list[_Member] = field(default_factory=list)
    unstamped: int = 0


@dataclass(slots=True)
class _Scan:
    files: dict[str, _File] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    windowed: set[str] = field(default_factory=set)
    """File ids of chunks with window metadata that stamping did not write."""
    records: int = 0
    misplaced: int = 0


def _checked_keys(file_id_keys: Sequence[str]) -> tuple[str, ...]:
    if (
        isinstance(file_id_keys, str)
        or not file_id_keys
        or not all(isinstance(key, str) and key for key in file_id_keys)
    ):
        msg = (
            f"file_id_keys must be a non-empty sequence of metadata keys, got "
            f"{file_id_keys!r}; pass e.g. ('source',) or ('source', 'tenant')"
        )
        raise ConfigurationError(msg)
    return tuple(file_id_keys)


def _pages(store: WindowStore) -> Iterator[tuple[str, dict[str, Any]]]:
    size = _id_batch_size(store)
    offset = 0
    while True:
        page = store.list_metadata(None, limit=size, offset=offset)
        yield from page
        if len(page) < size:
            return
        offset += size


def _scan(store: WindowStore, keys: tuple[str, ...]) -> _Scan:
    """Every record's metadata, read once: the files to stamp, or why they cannot be."""
    scan = _Scan()
    no_start: list[tuple[str, Any]] = []
    no_file: list[str] = []
    for record_id, metadata in _pages(store):
        scan.records += 1
        scan.ids.add(record_id)
        file_id, index = metadata.get(FILE_ID), metadata.get(CHUNK_INDEX)
        start = metadata.get(START_INDEX)
        if isinstance(file_id, str) and _is_count(index):  # window metadata
            original = metadata.get(ORIGINAL_ID)
            if isinstance(original, str) and _is_count(start):
                # stamped by a run before: its file is stamped again if it has chunks to do
                file = scan.files.setdefault(file_id, _File(file_id, metadata.get("source")))
                file.members.append(_Member(record_id, original, start, metadata))
                continue
            scan.windowed.add(file_id)
            if record_id != make_chunk_id(file_id, index):
                scan.misplaced += 1
            continue
        if not _is_count(start):
            no_start.append((record_id, metadata.get("source")))
            continue
        if isinstance(file_id, str) and file_id:
            derived = file_id  # an explicit file id, as WindowSplitter takes it
        elif any(metadata.get(key) is not None for key in keys):
            derived = make_file_id(metadata, keys)
        else:
            no_file.append(record_id)
            continue
        file = scan.files.setdefault(derived, _File(derived, metadata.get("source")))
        file.members.append(_Member(record_id, record_id, start, metadata))
        file.unstamped += 1
    if no_start:
        example, source = no_start[0]
        msg = (
            f"{len(no_start)} chunks without window metadata have no start_index, e.g. "
            f"{example!r} of source {source!r}, so their order in their file cannot be "
            f"recovered; {_REINGEST}, or split with add_start_index=True and add them "
            "again; nothing was written"
        )
        raise ConfigurationError(msg)
    if no_file:
        raise ConfigurationError(
            f"{len(no_file)} chunks without window metadata have no file_id and none of ",
            Option("file_id_keys", keys),
            f" to say which file they belong to, e.g. {no_file[0]!r}; pass the metadata key "
            "that names their document, e.g. file_id_keys=('source',); nothing was written",
        )
    return scan


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _digests(store: WindowStore, ids: Sequence[str]) -> dict[str, str]:
    """A hash of each record's text, read in batches (texts are not kept)."""
    digests: dict[str, str] = {}
    size = _id_batch_size(store)
    for begin in range(0, len(ids), size):
        found = store.fetch(Fetch(ids=list(ids[begin : begin + size])))
        for document in found.documents:
            text = document.page_content.encode("utf-8", "surrogatepass")
            digests[document.id or ""] = hashlib.sha256(text).hexdigest()
    missing = [record_id for record_id in ids if record_id not in digests]
    if missing:
        msg = (
            f"{len(missing)} chunks without window metadata have no text, e.g. "
            f"{missing[0]!r}, so they cannot be stored again under new ids; delete them or "
            f"{_REINGEST}; nothing was written"
        )
        raise ConfigurationError(msg)
    return digests


@dataclass(frozen=True, slots=True)
class _Step:
    """One chunk to write: under ``target``, with ``metadata``, copied from ``source``."""

    target: str
    metadata: dict[str, Any]
    source: str


@dataclass(slots=True)
class _Plan:
    batches: list[list[_Step]]
    """The writes, in batches: no batch overwrites a chunk whose only other copy it writes."""
    stale: list[str]
    """The ids to delete once every write is done."""
    duplicates: int


def _plan(
    file: _File, digests: Mapping[str, str], scan: _Scan, keys: tuple[str, ...], size: int
) -> _Plan:
    """Order one file's chunks by offset and decide what to write and delete (nothing yet)."""
    if file.file_id in scan.windowed:
        msg = (
            f"source {file.source!r} (file_id {file.file_id!r}) is stored both with window "
            f"metadata and without ({file.unstamped} chunks): stamping would overwrite the "
            "chunks that have it; delete one of the two copies, or pass file_id_keys that "
            "tell them apart; nothing was written"
        )
        raise ConfigurationError(msg)
    # One chunk per original id: a run before may have copied it, under a new id.
    held: dict[str, list[_Member]] = {}
    for member in file.members:
        held.setdefault(member.key, []).append(member)
    for copies in held.values():  # the original first: its metadata as it was
        copies.sort(key=lambda m: m.id != m.key)
    # One chunk per offset: equal copies are one chunk, different ones refuse the file.
    at: dict[int, tuple[str, str, str]] = {}  # start -> (key, digest, metadata)
    same: dict[str, str] = {}  # key -> the key of the chunk it is a copy of
    for key in sorted(held):
        first = held[key][0]
        digest = digests[first.id]
        own = json.dumps(first.own, sort_keys=True, default=str)
        other = at.get(first.start)
        if other is None:
            at[first.start] = (key, digest, own)
            same[key] = key
        elif other[1:] == (digest, own):
            same[key] = other[0]
        else:
            clash = _clash(file, first, held[other[0]][0], keys, other[1] != digest)
            raise ConfigurationError(clash)
    starts = sorted(at)
    version = content_version("\n".join(f"{start}:{at[start][1]}" for start in starts))
    target_of = {at[start][0]: make_chunk_id(file.file_id, n) for n, start in enumerate(starts)}
    own_ids = {member.id for member in file.members}
    for target in target_of.values():
        if target in scan.ids and target not in own_ids:
            msg = (
                f"source {file.source!r}: the id {target!r} its chunk would take holds a "
                f"chunk of another file; {_REINGEST}; nothing was written"
            )
            raise ConfigurationError(msg)
    steps = []
    for n, start in reversed(list(enumerate(starts))):  # a renumbered file shifts upwards
        key = at[start][0]
        first = held[key][0]
        metadata = {
            **first.own,
            FILE_ID: file.file_id,
            CHUNK_INDEX: n,
            CHUNK_ID: target_of[key],
            FILE_VERSION: version,
            ORIGINAL_ID: key,
        }
        steps.append((key, target_of[key], metadata))
    batches = _batches(file, steps, same, size)
    targets = set(target_of.values())
    stale = sorted(member.id for member in file.members if member.id not in targets)
    return _Plan(batches, stale, duplicates=len(held) - len(at))


def _batches(
    file: _File, steps: list[tuple[str, str, dict[str, Any]]], same: Mapping[str, str], size: int
) -> list[list[_Step]]:
    """The writes in order, cut into batches (one store call each) so no chunk is ever lost.

    A write may replace a record that holds another chunk (a file renumbered after a run
    that stopped): that chunk must then be stored elsewhere too, under an id no write of the
    batch replaces and stored before the batch (a batch may be applied in part), or the
    batch is cut there. Each write copies its chunk from a record that holds it when its
    batch starts: the batch reads before it writes.
    """
    members = {member.id: member for member in file.members}
    holder = {member.id: same[member.key] for member in file.members}  # id -> chunk held
    holders: dict[str, set[str]] = {}
    for record_id, chunk in holder.items():
        holders.setdefault(chunk, set()).add(record_id)
    batches: list[list[_Step]] = []
    batch: list[_Step] = []
    stored = {chunk: set(ids) for chunk, ids in holders.items()}  # when the batch starts

    def cut() -> None:
        nonlocal batch, stored
        if batch:
            batches.append(batch)
        batch = []
        stored = {chunk: set(ids) for chunk, ids in holders.items()}

    for chunk, target, metadata in steps:
        member = members.get(target)
        if member is not None and member.metadata == metadata:
            continue  # written so by a run before
        if len(batch) == size:
            cut()
        occupant = holder.get(target)
        if occupant is not None and occupant != chunk:
            if not holders[occupant] - {target}:
                msg = (
                    f"source {file.source!r} was partly stamped by a run that stopped, and "
                    f"its chunks changed since; {_REINGEST}; nothing was written"
                )
                raise ConfigurationError(msg)
            if not (stored[occupant] & holders[occupant]) - {target}:
                cut()  # its other copy is this batch's: write that one first
            holders[occupant].discard(target)
        batch.append(_Step(target, metadata, min(stored[chunk])))
        holder[target] = chunk
        holders[chunk].add(target)
    cut()
    return batches


def _clash(
    file: _File, one: _Member, other: _Member, keys: tuple[str, ...], texts_differ: bool
) -> Message:
    """Why a file that holds two different chunks at one offset cannot be put in order."""
    if texts_differ or one.own == other.own:
        return Message(
            f"source {file.source!r} holds two different chunks at start_index {one.start} "
            f"({other.id!r} and {one.id!r}): two versions or two splits of it, whose order "
            f"cannot be recovered; delete one of them, or {_REINGEST}; nothing was written"
        )
    differing = sorted(k for k in {*one.own, *other.own} if one.own.get(k) != other.own.get(k))
    fix = (*keys, *(key for key in differing if key not in keys))
    return Message(
        f"source {file.source!r} holds two chunks at start_index {one.start} whose metadata "
        f"differs ({', '.join(differing)}: {other.id!r} and {one.id!r}), two owners' copies "
        "under one file id; keep them apart with ",
        Option("file_id_keys", fix, said=f"file_id_keys={fix!r}"),
        "; nothing was written",
    )


def _write(store: WindowStore, plan: _Plan) -> None:
    """Write a plan's batches, each read then written, then delete the old ids."""
    for batch in plan.batches:
        sources = sorted({step.source for step in batch})
        texts: dict[str, str] = {}
        vectors: dict[str, list[float]] = {}
        size = _id_batch_size(store)
        for begin in range(0, len(sources), size):
            request = Fetch(sources[begin : begin + size], embeddings=store.supports_embeddings)
            found = store.fetch(request)
            for number, document in enumerate(found.documents):
                texts[document.id or ""] = document.page_content
                if found.embeddings:
                    vectors[document.id or ""] = [float(x) for x in found.embeddings[number]]
        missing = [source for source in sources if source not in texts]
        if missing:  # read moments ago, in the checks: written by another writer since
            msg = (
                f"chunk {missing[0]!r} was deleted while the collection was being stamped; "
                "run stamp_collection again once nothing else writes to it"
            )
            raise ConfigurationError(msg)
        store.upsert(
            [
                Record(step.target, texts[step.source], step.metadata, vectors.get(step.source))
                for step in batch
            ]
        )
    _delete(store, plan.stale)
