"""Ingesting many sources at once: loading, embedding and writing overlap.

:func:`window_retriever.ingestion._write.ingest_sources` runs this: a loader thread splits the next
sources, this thread plans each one (what :func:`sync_file` would write), an embedding thread
embeds the chunks of every source that is ready in one call, and a writer thread writes the
sources before, each whole and in order. Outcomes come in source order.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from langchain_core.documents import Document

from window_retriever._errors import OwnershipError
from window_retriever.core._ids import FILE_ID
from window_retriever.ingestion._headers import embedded_text
from window_retriever.ingestion._loaders import load_sources, stored_source
from window_retriever.ingestion._splitter import WindowSplitter
from window_retriever.ingestion._web import LoadOptions
from window_retriever.ingestion._write import (
    INGEST_ORIGIN,
    OWNER_KEYS,
    FileOutcome,
    Plan,
    apply_plan,
    batch_size_for,
    outcome_of,
    plan_file,
    store_chunks,
    sync_file,
    write_plan,
)
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import WindowStore

_T = TypeVar("_T")

AHEAD = 4
"""Sources loaded and split ahead of the one being planned."""
GROUP = 128
"""Chunks planned before they are embedded when several sources are ready (small pages fill
batches)."""
PART = 128
"""The most chunks of one embedding call: a long file is embedded and written in parts, so
its progress shows, an interrupt waits for one part at most, and what was written stays."""
WRITES_AHEAD = 64
"""Sources embedded and waiting for the writer (it writes faster than the model embeds)."""

Split = tuple[str, list[Document] | None, str | None]


@dataclass(frozen=True, slots=True)
class SourceOutcome:
    """One source of :func:`ingest_sources`: what syncing it did, or why it failed to load."""

    name: str
    """The source as listed: as given, or as found below a directory given."""
    outcome: FileOutcome | None = None
    error: str | None = None

    @property
    def source(self) -> str:
        """The ``source`` its chunks are stored under (see :func:`stored_source`).

        A local file's absolute path; a web address as given (its chunks carry the final
        address, after redirects). What the command prints and what a filter names.
        """
        return stored_source(self.name)


def ingest_sources(
    vectorstore: Any,
    sources: Sequence[str],
    *,
    splitter: WindowSplitter,
    options: LoadOptions,
    metadata: Mapping[str, Any] | None = None,
    origins: Mapping[str, str] | None = None,
    progress: IngestProgress | None = None,
) -> Generator[SourceOutcome, None, None]:
    """Load, split and :func:`sync_file` each source (URL or file); outcomes in source order.

    The stages overlap. A loader thread fetches, parses and splits sources, one at a time (so
    ``requests_per_second`` holds), up to a few ahead. This thread reads the store for each
    source (what to write, as :func:`sync_file` decides it). An embedding thread embeds what
    changed, the chunks of all the sources that are ready in one call (full batches across
    small pages). A writer thread writes each source whole, in order, while the next ones
    embed (the sources waiting for it together, in one upsert). Two sources of the same file
    or ``source`` are never in flight together. A store without a model of its own to embed
    with (``WindowStore.embeddings`` is ``None``) is synced source by source with
    :func:`sync_file` (loading still runs ahead).

    A source that cannot be loaded, or whose chunks may not be written (another owner's
    file), is yielded with its error and the others go on; any other error is raised in its
    place, after the sources before it. When the caller stops or is interrupted, the part
    being written is finished and nothing else starts; what was written stays (a long file
    is written in parts of a few hundred chunks, and the next run embeds only the rest).

    ``metadata`` is stamped on every chunk; the ``ingest_origin`` of ``origins`` (see
    :func:`origins_of`) on the chunks of those sources, which :func:`prune_missing` may
    later remove. ``progress`` is told of the chunks planned and written, as they are.
    """
    store = store_adapter(vectorstore)
    ahead = Ahead(split_sources(sources, splitter, options, metadata, origins), AHEAD)
    try:
        embeddings = store.embeddings
        if embeddings is None:
            for name, chunks, error in ahead:
                outcome = _sync_source(store, name, chunks, error)
                if progress is not None:  # every source, as pipelined() tells of it
                    written = 0 if outcome.outcome is None else outcome.outcome.written
                    progress.planned(written)
                    progress.written(written)
                yield outcome
        else:
            yield from pipelined(store, embeddings, ahead, progress)
    finally:
        ahead.close()


def _sync_source(
    store: WindowStore, name: str, chunks: list[Document] | None, error: str | None
) -> SourceOutcome:
    if chunks is None:
        return SourceOutcome(name, error=error)
    try:
        outcome = sync_file(store, chunks, replace_source_copies=True)
    except OwnershipError as failure:
        return SourceOutcome(name, error=str(failure))
    return SourceOutcome(name, outcome=outcome)


def split_sources(
    sources: Sequence[str],
    splitter: WindowSplitter,
    options: LoadOptions,
    metadata: Mapping[str, Any] | None,
    origins: Mapping[str, str] | None = None,
) -> Iterator[Split]:
    """Load each source in turn and split it: ``(name, chunks, None)``, or its error.

    A source in ``origins`` has its chunks stamped with its ``ingest_origin`` after the split,
    so that the stamp is not part of the file's version.
    """
    for loaded in load_sources(sources, options):
        if loaded.document is None:
            yield loaded.name, None, loaded.error
            continue
        loaded.document.metadata.update(metadata or {})
        chunks = splitter.split_documents([loaded.document])
        origin = (origins or {}).get(loaded.name)
        if origin is not None:
            for chunk in chunks:
                chunk.metadata[INGEST_ORIGIN] = origin
        yield loaded.name, chunks, None


class IngestProgress(Protocol):
    """Told how ingestion advances, chunk by chunk (from any of the ingest threads)."""

    def planned(self, chunks: int) -> None:
        """``chunks`` more chunks are to be embedded and written: once for each source read.

        With 0 for a source that has nothing to write (unchanged, empty, failed), so the
        calls count the sources read so far as well as their chunks.
        """

    def written(self, chunks: int) -> None:
        """``chunks`` more chunks are in the store."""


def pipelined(
    vectorstore: WindowStore | Any,
    embeddings: Any,
    ahead: Ahead[Split],
    progress: IngestProgress | None = None,
) -> Iterator[SourceOutcome]:
    """Plan here, embed on an embedding thread, write on a writer thread; outcomes in order."""
    store = store_adapter(vectorstore)
    size = batch_size_for(store, None)
    writer = Writer(store, size, progress)
    outcomes: deque[Future[SourceOutcome]] = deque()
    group: list[tuple[Future[SourceOutcome], str, Plan]] = []
    in_flight: list[tuple[frozenset[Any], Future[SourceOutcome]]] = []

    embedding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="window-retriever-embed")
    embedded: deque[Future[Any]] = deque()

    def embed_group() -> None:
        if not group:
            return
        texts = [embedded_text(c) for _, _, plan in group for c in plan.documents()]
        parts = [
            (embedding.submit(embeddings.embed_documents, texts[at : at + PART]), at)
            for at in range(0, len(texts), PART)
        ]
        begin = 0
        for future, name, plan in group:
            end = begin + len(plan.documents())
            pieces = [
                Piece(vectors, max(begin, at) - at, min(end, at + PART) - at)
                for vectors, at in parts
                if at < end and at + PART > begin
            ]
            writer.put(Write(future, name, plan, pieces))
            begin = end
        group.clear()
        embedded.extend(vectors for vectors, _ in parts)
        while len(embedded) > 2 and writer.failure is None:  # plan no further ahead
            settle(embedded.popleft())

    def planned(chunks: int) -> None:
        if progress is not None:
            progress.planned(chunks)

    try:
        for name, chunks, error in _failing_in_place(ahead, outcomes):
            future: Future[SourceOutcome] = Future()
            outcomes.append(future)
            if chunks is None:
                planned(0)
                future.set_result(SourceOutcome(name, error=error))
            elif not chunks:
                planned(0)
                future.set_result(SourceOutcome(name, outcome=FileOutcome("unchanged", 0, 0, 0)))
            else:
                keys = _keys(chunks)
                waits = [job for held, job in in_flight if held & keys]
                if waits:  # the same file or source is still being written: let it finish
                    embed_group()
                    for job in waits:
                        settle(job)
                try:
                    plan = plan_file(store, chunks, OWNER_KEYS, replace_source_copies=True)
                except OwnershipError as failure:
                    planned(0)
                    future.set_result(SourceOutcome(name, error=str(failure)))
                except Exception as failure:  # raised in its place, after the sources before
                    future.set_exception(failure)
                    break
                else:
                    planned(len(plan.documents()))
                    if plan.documents() or plan.stale:
                        group.append((future, name, plan))
                        in_flight.append((keys, future))
                    else:
                        future.set_result(
                            SourceOutcome(name, outcome=apply_plan(store, plan, size))
                        )
            if group and (
                sum(len(plan.documents()) for _, _, plan in group) >= GROUP or not ahead.ready()
            ):
                embed_group()
            in_flight = [(held, job) for held, job in in_flight if not job.done()]
            while outcomes and outcomes[0].done():
                yield outcomes.popleft().result()
            if writer.failure is not None:  # the store failed: plan and embed nothing more
                break
        if writer.failure is None:
            embed_group()
        else:
            for future, _, _ in group:
                future.cancel()
        while outcomes:
            yield outcomes.popleft().result()
    finally:
        embedding.shutdown(wait=False, cancel_futures=True)  # no other part starts
        writer.close()
        embedding.shutdown(wait=True)


def settle(future: Future[Any]) -> None:
    """Wait until ``future`` has a result, an error, or was cancelled.

    ``concurrent.futures.wait`` never returns for a future that an executor's
    ``shutdown(cancel_futures=True)`` cancelled (its waiters are not told), and an interrupted
    ingest cancels exactly those: waiting here cannot hang.
    """
    with contextlib.suppress(CancelledError):
        future.exception()


def _failing_in_place(
    ahead: Ahead[Split], outcomes: deque[Future[SourceOutcome]]
) -> Iterator[Split]:
    """The loaded sources; a loader error becomes a failed outcome in its place, then stops."""
    try:
        yield from ahead
    except Exception as error:
        failed: Future[SourceOutcome] = Future()
        failed.set_exception(error)
        outcomes.append(failed)


def _keys(chunks: Sequence[Document]) -> frozenset[Any]:
    first = chunks[0].metadata
    return frozenset({(FILE_ID, repr(first.get(FILE_ID))), ("source", repr(first.get("source")))})


@dataclass(frozen=True, slots=True)
class Piece:
    """Vectors of one embedding call, ``[begin:end]`` of its result."""

    vectors: Future[Any]
    begin: int
    end: int

    def result(self) -> Any:
        return self.vectors.result()[self.begin : self.end]


@dataclass(frozen=True, slots=True)
class Write:
    """One source for the writer: its plan, and its vectors, in one piece or several."""

    future: Future[SourceOutcome]
    name: str
    plan: Plan
    pieces: list[Piece]


class _StoppedError(Exception):
    """The ingest was stopped while a source was being written piece by piece."""


class Writer:
    """One thread that writes planned sources in order, each whole, with their vectors.

    The sources waiting when it starts a write are written together, in one upsert (each
    one's first chunk after its others), except a source with chunks to delete or with
    vectors in several pieces (a long file), which is written alone: its first chunk must
    follow its deletes, and its pieces are written as they are embedded. Per-call costs of
    the store then do not add up over small pages, and a long file keeps what was written
    when the ingest is stopped.
    """

    def __init__(
        self, store: WindowStore | Any, size: int, progress: IngestProgress | None = None
    ) -> None:
        self._store = store_adapter(store)
        self._size = size
        self._progress = progress
        self._queue: queue.Queue[Write | None] = queue.Queue(maxsize=WRITES_AHEAD)
        self._stopping = threading.Event()
        self.failure: BaseException | None = None
        """The first write that failed: the writer then stops, and so does the ingest."""
        self._thread = threading.Thread(
            target=self._run, name="window-retriever-write", daemon=True
        )
        self._thread.start()

    def put(self, write: Write) -> None:
        self._queue.put(write)

    def _run(self) -> None:
        ending = False
        while not ending:
            waiting = [self._queue.get()]
            first = waiting[0]
            if first is not None:  # its group is embedding: the rest of the group comes meanwhile
                settle(first.pieces[0].vectors)
            while waiting[-1] is not None and len(waiting) < WRITES_AHEAD:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            together: list[Write] = []
            for write in waiting:
                if write is None:
                    ending = True
                elif self._stopping.is_set() or not write.future.set_running_or_notify_cancel():
                    write.future.cancel()
                elif write.plan.stale or len(write.pieces) > 1:
                    self._write(together)
                    together = []
                    self._write_alone(write)
                else:
                    together.append(write)
            self._write(together)

    def _written(self, chunks: int) -> None:
        if self._progress is not None:
            self._progress.written(chunks)

    def _write_alone(self, write: Write) -> None:
        def parts() -> Iterator[Any]:
            for piece in write.pieces:
                if self._stopping.is_set():
                    raise _StoppedError
                yield piece.result()

        try:
            write_plan(self._store, write.plan, self._size, parts(), self._written)
        except _StoppedError as error:
            write.future.set_exception(error)
        except BaseException as error:  # handed to the caller, in this source's place
            self._fail(error, [write])
            write.future.set_exception(error)
        else:
            write.future.set_result(SourceOutcome(write.name, outcome=outcome_of(write.plan)))

    def _write(self, writes: list[Write]) -> None:
        ready: list[tuple[Write, Any]] = []
        for write in writes:
            try:
                ready.append((write, write.pieces[0].result()))
            except BaseException as error:  # its embedding failed: in this source's place
                write.future.set_exception(error)
        try:
            if ready:
                chunks = [c for write, _ in ready for c in write.plan.documents()]
                vectors = [v for _, vs in ready for v in vs]
                store_chunks(self._store, chunks, self._size, vectors)
                self._written(len(chunks))
        except BaseException as error:  # handed to the caller, in these sources' places
            self._fail(error, [write for write, _ in ready])
            for write, _ in ready:
                write.future.set_exception(error)
        else:
            for write, _ in ready:
                write.future.set_result(SourceOutcome(write.name, outcome=outcome_of(write.plan)))

    def _fail(self, error: BaseException, writes: list[Write]) -> None:
        """A write failed (a store gone, refusing, full): write nothing more.

        The embedding of what these sources still wait for stops too, so the error is reported
        at once, not after the rest of a long file is embedded.
        """
        if self.failure is None:
            self.failure = error
        self._stopping.set()
        for write in writes:
            for piece in write.pieces:
                piece.vectors.cancel()

    def close(self) -> None:
        """Finish the sources being written, drop the others (when stopped early), and end."""
        self._stopping.set()
        self._queue.put(None)
        self._thread.join()


class Ahead(Generic[_T]):
    """Items produced on a background thread, in order, up to ``size`` ahead of the consumer.

    An exception of the producer is raised in its place. :meth:`close` stops the producer at
    its next item.
    """

    def __init__(self, items: Iterator[_T], size: int) -> None:
        self._queue: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._produce, args=(items,), name="window-retriever-load", daemon=True
        )
        self._thread.start()

    def __iter__(self) -> Iterator[_T]:
        while True:
            ok, value = self._queue.get()
            if ok:
                yield value
            elif value is None:
                return
            else:
                raise value

    def ready(self) -> bool:
        """True when the next item (or the end) is waiting."""
        return not self._queue.empty()

    def close(self) -> None:
        self._stop.set()

    def _produce(self, items: Iterator[_T]) -> None:
        try:
            for item in items:
                if not self._put((True, item)):
                    return
        except BaseException as error:  # handed to the consumer, whatever it is
            self._put((False, error))
            return
        self._put((False, None))

    def _put(self, entry: tuple[bool, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False
