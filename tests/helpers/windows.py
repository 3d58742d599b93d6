"""Files of chunks for the window algorithm: their source text, and every position asked."""

from __future__ import annotations

import itertools
import string
from collections.abc import Sequence

from window_retriever.core._windows import Chunk, Position


def make_file(
    file_id: str, sizes: Sequence[int], overlap: int = 0, version: str | None = "v1"
) -> tuple[str, list[Chunk]]:
    """Build a source text and its chunks: chunk i has sizes[i] characters and overlaps its
    predecessor by up to ``overlap`` characters (no gaps), so every window's text must equal
    the source between the window's start and end."""
    starts = [0]
    for previous, size in itertools.pairwise(sizes):
        shared = min(overlap, previous - 1, size - 1)
        starts.append(starts[-1] + previous - max(0, shared))
    end = max(start + size for start, size in zip(starts, sizes, strict=True))
    letters = string.ascii_letters
    source = "".join(letters[(i * 7) % len(letters)] for i in range(end))
    chunks = [
        Chunk(
            id=f"{file_id}:{index}",
            text=source[start : start + size],
            file_id=file_id,
            index=index,
            start=start,
            version=version,
        )
        for index, (start, size) in enumerate(zip(starts, sizes, strict=True))
    ]
    return source, chunks


EVERYWHERE = {(f, i) for f in ("a", "b", "f") for i in range(-1, 200)}
"""Every position was asked of the store: one that is not in ``chunks`` is a gap."""


def by_position(*files: Sequence[Chunk]) -> dict[Position, Chunk]:
    return {c.position: c for chunks in files for c in chunks if c.position is not None}
