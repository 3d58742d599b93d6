"""Pictures of what the retriever chose: the window map.

:func:`plot_window_map` draws one horizontal strip per file, its chunks as cells: the windows
the retriever returned are shaded and labelled like their citations (``S1``, ``S2``, ...),
the search hits inside them are marked, and so, optionally, are the chunks that a plain
top-k search would have returned instead. It needs matplotlib (the ``[eval]`` extra), which
is imported only when a map is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document

from window_retriever._errors import ConfigurationError
from window_retriever.citations import LABEL_PREFIX

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_window_map"]

_MISSING_MATPLOTLIB = "plot_window_map needs matplotlib: pip install 'window-retriever[eval]'"


@dataclass
class _File:
    """One strip: a file's name, how many chunks it has, and what lies on it."""

    name: str
    chunks: int = 0
    windows: list[tuple[int, int, int]] = field(default_factory=list)  # (rank, first, last)
    hits: list[int] = field(default_factory=list)
    plain: list[int] = field(default_factory=list)

    def reach(self, index: int) -> None:
        self.chunks = max(self.chunks, index + 1)


def plot_window_map(
    windows: Sequence[Document],
    *,
    chunks: Sequence[Document] | Mapping[str, int] | None = None,
    plain: Sequence[Document] = (),
    title: str | None = None,
    path: str | Path | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw which chunks of which files the retriever returned, and why.

    Each file is a strip of cells, one per chunk. A returned window is a shaded run of cells
    labelled ``S1``, ``S2``, ... in rank order, as :func:`format_with_citations` labels it; a
    dot marks each search hit inside it (the chunks the windows grew from); an ``x`` marks
    each chunk of ``plain``, e.g. the top chunks of a plain similarity search at the same
    budget, for comparison.

    Args:
        windows: Documents from ``ContextWindowRetriever`` (documents without window
            metadata, ``file_id`` and ``first_chunk_index``, are left out of the map).
        chunks: How long each file's strip is: every chunk of the files (from
            ``WindowSplitter``), or a mapping from file id to its number of chunks. Files
            named here are drawn even where nothing was returned from them. Without it,
            strips end at the last chunk that anything on the map reaches.
        plain: Chunks to mark with an ``x`` (they need ``file_id`` and ``chunk_index``).
        title: A title for the map, e.g. the question.
        path: Where to save the map as an image (the format follows the suffix, e.g. PNG).
        ax: Draw into these matplotlib axes instead of a new figure.

    Returns:
        The matplotlib ``Figure`` (displayed by Jupyter when it is a cell's result).

    Raises:
        ImportError: When matplotlib is not installed.
        ConfigurationError: When there is nothing to draw: no document has window or chunk
            metadata.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError(_MISSING_MATPLOTLIB) from None
    files = _files(windows, chunks, plain)
    if not files:
        msg = (
            "nothing to draw: no document has 'file_id' and 'first_chunk_index' (windows) or "
            "'chunk_index' (chunks) metadata; pass documents from ContextWindowRetriever"
        )
        raise ConfigurationError(msg)
    own_figure = ax is None
    if ax is None:
        width = min(16.0, max(8.0, 0.12 * max(f.chunks for f in files.values()) + 3))
        figure = Figure(figsize=(width, 0.75 * len(files) + 1.4), layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.get_figure()  # type: ignore[assignment]
    colors = _palette()
    for row, strip in enumerate(files.values()):
        y = -row
        for index in range(strip.chunks):
            ax.add_patch(
                Rectangle(
                    (index - 0.5, y - 0.35), 1, 0.7, facecolor="white", edgecolor="0.75", lw=0.6
                )
            )
        for rank, first, last in strip.windows:
            color = colors[(rank - 1) % len(colors)]
            ax.add_patch(
                Rectangle(
                    (first - 0.5, y - 0.35),
                    last - first + 1,
                    0.7,
                    facecolor=color,
                    edgecolor=color,
                    alpha=0.45,
                    lw=1.2,
                )
            )
            ax.text(
                (first + last) / 2,
                y + 0.42,
                f"{LABEL_PREFIX}{rank}",
                ha="center",
                va="bottom",
                fontsize=8,
                color=color,
                fontweight="bold",
            )
        if strip.hits:
            ax.plot(strip.hits, [y] * len(strip.hits), "o", color="black", ms=4, zorder=3)
        if strip.plain:
            ax.plot(strip.plain, [y - 0.2] * len(strip.plain), "x", color="0.35", ms=5, zorder=3)
    ax.plot([], [], "o", color="black", ms=4, label="search hit inside a window")
    if any(strip.plain for strip in files.values()):
        ax.plot([], [], "x", color="0.35", ms=5, label="plain top chunk")
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colors[0], alpha=0.45, label="window"))
    longest = max(strip.chunks for strip in files.values())
    ax.set_xlim(-1, longest)
    ax.set_ylim(-len(files) + 0.4, 0.9)
    ax.set_yticks([-row for row in range(len(files))], [f.name for f in files.values()])
    ax.set_xlabel("chunk index")
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if own_figure:
        figure.legend(loc="outside lower center", ncols=3, fontsize="small", frameon=False)
    else:
        ax.legend(fontsize="small")
    if title:
        ax.set_title(title, loc="left", fontsize="medium")
    if path is not None:
        figure.savefig(path, dpi=120)
    return figure


def _files(
    windows: Sequence[Document],
    chunks: Sequence[Document] | Mapping[str, int] | None,
    plain: Sequence[Document],
) -> dict[str, _File]:
    """The strips to draw, in order: files named by ``chunks`` first, then the others."""
    files: dict[str, _File] = {}

    def strip(metadata: Mapping[str, Any]) -> _File:
        file_id = str(metadata["file_id"])
        if file_id not in files:
            files[file_id] = _File(_name(metadata, file_id))
        return files[file_id]

    if isinstance(chunks, Mapping):
        for file_id, count in chunks.items():
            files[file_id] = _File(_name({}, file_id), chunks=int(count))
    elif chunks is not None:
        for chunk in chunks:
            index = _index(chunk.metadata.get("chunk_index"))
            if "file_id" in chunk.metadata and index is not None:
                strip(chunk.metadata).reach(index)
    for rank, window in enumerate(windows, 1):
        metadata = window.metadata
        first = _index(metadata.get("first_chunk_index"))
        last = _index(metadata.get("last_chunk_index"))
        if "file_id" not in metadata or first is None or last is None or last < first:
            continue
        found = strip(metadata)
        if found.name == str(metadata["file_id"]):  # named by the mapping: find a better name
            found.name = _name(metadata, found.name)
        found.windows.append((rank, first, last))
        found.reach(last)
        ids = metadata.get("chunk_ids") or []
        for hit in metadata.get("hit_chunk_ids") or []:
            if hit in ids:
                found.hits.append(first + list(ids).index(hit))
    for chunk in plain:
        index = _index(chunk.metadata.get("chunk_index"))
        if "file_id" in chunk.metadata and index is not None:
            found = strip(chunk.metadata)
            found.plain.append(index)
            found.reach(index)
    return files


def _name(metadata: Mapping[str, Any], default: str) -> str:
    """A short name for a strip: the source's last path segment, else the title or file id."""
    source = metadata.get("source")
    if isinstance(source, str) and source.strip("/"):
        return source.rstrip("/").rsplit("/", 1)[-1].split("#")[0] or source
    title = metadata.get("title")
    return title if isinstance(title, str) and title else default


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _palette() -> list[str]:
    """Matplotlib's default colour cycle (tab10)."""
    return [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
    ]
