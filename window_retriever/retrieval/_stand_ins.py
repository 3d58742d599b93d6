"""Stand-ins: the chunks the keyword index holds, standing in for them until they are read.

One named step of adaptive selection (``_adaptive_strategy.Adaptive``). The keyword index the
hybrid search reads holds every chunk's text length and metadata (``Held.indexed``), so a
chunk can be measured before it is read: a stand-in is the chunk with a blank text of its
length (the budgets measure characters) and its metadata (the caller's filter applies to it).
Adaptive selection then selects among stand-ins and reads only the chunks it chose, not every
chunk it might measure (docs/how-it-works.md gives the counts).

The index may be stale. So every chunk chosen is read and checked against its stand-in
(:meth:`StandIns.check`: position, offset, version, length, and the filter on the metadata
just read), and so is every planned position the index holds no chunk for, or one the filter
hides (a gap: few, at file ends). Where one differs or a gap is filled (written since the
index was checked), the check fails and adaptive selection reads the chunks instead. A stale
index so never brings back an old text or a hidden chunk; a neighbour left unchosen whose
length changed unseen is still valued at its old length. Every read by id tells the index
what was read (``Neighbours.read``), so a rewritten chunk costs one fetch more once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from window_retriever.core._filters import Predicate
from window_retriever.core._ids import make_chunk_id
from window_retriever.core._windows import Chunk, Hit, Position, Window, join_texts
from window_retriever.retrieval._pool import Flow, Neighbours, Pool, Read
from window_retriever.retrieval._records import read_chunk, read_record
from window_retriever.stores._protocol import Held, Indexed


class StandIns:
    """The keyword index's lengths and metadata, as chunks that stand in for the stored ones."""

    def __init__(self, held: Held, predicate: Predicate) -> None:
        self.held = held
        self.predicate = predicate
        self.gaps: dict[str, Position] = {}
        """Planned positions the index holds no chunk for (or one the filter hides)."""

    def hits(self, hits: Sequence[Hit]) -> list[Hit] | None:
        """The hits as their stand-ins; ``None`` when one is not held where its id says.

        No filter here: the search applied it (the keyword leg to the index's own metadata,
        which :meth:`check` corrects).
        """
        known = self.held.indexed([hit.chunk.id for hit in hits])
        if known is None:
            return None
        stood: list[Hit] = []
        for hit in hits:
            stand_in = _stand_in(hit.chunk.id, known)
            if stand_in is None or stand_in.position != hit.chunk.position:
                return None  # not indexed yet, or not where its id says: read it
            stood.append(replace(hit, chunk=stand_in))
        return stood

    def add_neighbours(self, pool: Pool, positions: Iterable[Position]) -> None:
        """Put the planned neighbours' stand-ins in the pool; the rest are gaps to check."""
        planned = {
            make_chunk_id(*position): position
            for position in positions
            if position not in pool.chunks
        }
        known = self.held.indexed(list(planned)) or {}
        for chunk_id, position in planned.items():
            stand_in = _stand_in(chunk_id, known)
            if (
                stand_in is not None
                and stand_in.position == position
                and self.predicate(stand_in.metadata)
            ):
                pool.chunks[position] = stand_in
            else:
                self.gaps[chunk_id] = position  # none held there, or hidden as far as it knows

    def check(self, windows: Sequence[Window], neighbours: Neighbours) -> Flow:
        """Read the chunks chosen and the gaps in one fetch; return the chosen, read, by id.

        ``None`` when a chunk read differs from its stand-in, is gone or hidden, or a gap is
        filled. Nothing is read when nothing was chosen.
        """
        chosen = {chunk.id: chunk for window in windows for chunk in window.chunks}
        if not chosen:
            return {}
        found: Read = yield from neighbours.read([*chosen, *self.gaps])
        read: dict[str, Chunk] = {}
        filled = False
        for document in found.documents:
            chunk_id = document.id or ""
            stand_in = chosen.get(chunk_id)
            if stand_in is None and chunk_id not in self.gaps:
                continue
            chunk, problem = read_chunk(document)
            if problem is not None:
                continue
            if stand_in is None:
                filled = filled or chunk.position == self.gaps[chunk_id]
            elif _same_shape(chunk, stand_in):
                read[chunk_id] = chunk
        if filled or len(read) < len(chosen):
            return None  # written since the index was checked
        return read


def _stand_in(chunk_id: str, held: Indexed) -> Chunk | None:
    """The chunk the index holds under ``chunk_id``, with a blank text of its length; or None."""
    entry = held.get(chunk_id)
    if entry is None:
        return None
    length, metadata = entry
    chunk, problem = read_record(chunk_id, " " * length, metadata)
    return chunk if problem is None else None


def _same_shape(chunk: Chunk, stand_in: Chunk) -> bool:
    """A chunk read is what stood in for it: the same place, offset, version and length."""
    return (
        chunk.position == stand_in.position
        and chunk.start == stand_in.start
        and chunk.version == stand_in.version
        and len(chunk.text) == len(stand_in.text)
    )


def read_windows(windows: Sequence[Window], read: Mapping[str, Chunk]) -> list[Window]:
    """``windows`` with the chunks read in place of their stand-ins."""
    return [_read_window(window, read) for window in windows]


def _read_window(window: Window, read: Mapping[str, Chunk]) -> Window:
    chunks = tuple(read[chunk.id] for chunk in window.chunks)
    hits = tuple(replace(hit, chunk=read[hit.chunk.id]) for hit in window.hits)
    return Window(chunks=chunks, hits=hits, text=join_texts(chunks), cut=window.cut)
