"""The window map: strips per file, windows shaded and labelled, hits and plain chunks marked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langchain_core.documents import Document
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from window_retriever import ConfigurationError
from window_retriever.plotting import plot_window_map


def window(file_id: str, first: int, last: int, hits: list[int], source: str) -> Document:
    ids = [f"{file_id}:{i}" for i in range(first, last + 1)]
    return Document(
        page_content="text",
        metadata={
            "file_id": file_id,
            "source": source,
            "chunk_ids": ids,
            "first_chunk_index": first,
            "last_chunk_index": last,
            "hit_chunk_ids": [f"{file_id}:{i}" for i in hits],
        },
    )


def chunk(file_id: str, index: int, source: str) -> Document:
    return Document(
        page_content="text",
        metadata={"file_id": file_id, "chunk_index": index, "source": source},
    )


WINDOWS = [
    window("a", 3, 6, [5, 4], "https://example.org/docs/errors.html"),
    window("b", 0, 0, [0], "/data/io.txt"),
    Document(page_content="no window metadata: left out"),
]
CHUNKS = [chunk("a", i, "https://example.org/docs/errors.html") for i in range(10)] + [
    chunk("b", i, "/data/io.txt") for i in range(4)
]


def strips(figure: Figure) -> tuple[list[str], list[tuple[float, float, float]], list[str]]:
    """The strips' names, the shaded windows (x, width, y) and the window labels."""
    (axes,) = figure.axes
    names = [tick.get_text() for tick in axes.get_yticklabels()]
    shaded = [
        (p.get_x(), p.get_width(), p.get_y())
        for p in axes.patches
        if isinstance(p, Rectangle) and p.get_alpha() is not None and p.get_width() > 0
    ]
    labels = [text.get_text() for text in axes.texts]
    return names, shaded, labels


def test_the_map_shows_files_windows_hits_and_plain_chunks(tmp_path: Path) -> None:
    plain = [chunk("a", 5, "x"), chunk("c", 2, "/other/notes.md")]
    path = tmp_path / "map.png"
    figure = plot_window_map(WINDOWS, chunks=CHUNKS, plain=plain, title="Q?", path=path)
    names, shaded, labels = strips(figure)
    assert names == ["errors.html", "io.txt", "notes.md"]
    assert shaded == [(2.5, 4, -0.35), (-0.5, 1, -1.35)]  # windows 3..6 and 0..0
    assert labels == ["S1", "S2"]
    (axes,) = figure.axes
    markers: dict[str, list[tuple[float, float]]] = {"o": [], "x": []}
    for line in axes.get_lines():
        points = zip(line.get_xdata(), line.get_ydata(), strict=True)
        markers[str(line.get_marker())].extend((float(x), float(y)) for x, y in points)
    markers = {marker: sorted(points) for marker, points in markers.items()}
    assert markers["o"] == [(0, -1), (4, 0), (5, 0)]  # the hits, on their strips
    assert [(x, round(y, 1)) for x, y in markers["x"]] == [(2, -2.2), (5, -0.2)]
    # every chunk is a cell: 10 + 4 + 3 (the third file reaches chunk 2)
    cells = [p for p in axes.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert len(cells) == 17
    assert axes.get_title(loc="left") == "Q?"
    assert path.read_bytes().startswith(b"\x89PNG")


def test_strip_lengths_from_counts_or_from_the_windows() -> None:
    names, _, _ = strips(plot_window_map(WINDOWS[:1], chunks={"a": 40, "z": 5}))
    assert names == ["errors.html", "z"]  # a file named by the counts is drawn, even if empty
    (axes,) = plot_window_map(WINDOWS[:2]).axes
    assert axes.get_xlim() == (-1, 7)  # without chunks, strips end at the last window's end


def test_draws_into_given_axes() -> None:
    figure = Figure()
    left, right = figure.subplots(1, 2)
    assert plot_window_map(WINDOWS, ax=right) is figure
    assert not left.patches and right.patches


def test_nothing_to_draw_and_no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="nothing to draw: no document has 'file_id'"):
        plot_window_map([Document(page_content="plain")])
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'window-retriever\[eval\]'"):
        plot_window_map(WINDOWS)
