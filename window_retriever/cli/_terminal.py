"""What the commands print: windows with their hits marked, progress, counts."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from langchain_core.documents import Document


def count(number: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks``."""
    return f"{number} {noun}{'s' * (number != 1)}"


class Progress:
    """A progress bar on a terminal; plain lines otherwise.

    The bar counts the chunks written out of those planned, with their rate (embedding is the
    slow part, so a long file shows movement), and the sources done. The ingest threads tell
    it of chunks.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.sources = self.done = 0
        self._lock = threading.Lock()

    def start(self, sources: int) -> None:
        """The sources are listed: show the bar (on a terminal)."""
        self.sources = sources
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=0, unit="chunk", file=self.stream, dynamic_ncols=True)
            self._show_sources()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def line(self, text: str) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def planned(self, chunks: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.total += chunks
                self.bar.refresh()

    def written(self, chunks: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(chunks)

    def source_done(self) -> None:
        self.done += 1
        if self.bar is not None:
            with self._lock:
                self._show_sources()

    def _show_sources(self) -> None:
        noun = "source" if self.sources == 1 else "sources"
        self.bar.set_postfix_str(f"{self.done}/{self.sources} {noun}")


def print_windows(docs: Sequence[Document], out: TextIO) -> None:
    mark: Callable[[str], str] = (
        (lambda s: f"\x1b[1;33m{s}\x1b[0m") if out.isatty() else (lambda s: f"»{s}«")
    )
    for rank, doc in enumerate(docs, 1):
        meta = doc.metadata
        first, last = meta.get("first_chunk_index"), meta.get("last_chunk_index")
        if first is None:
            where = "unexpanded"
        else:
            where = f"chunk {first}" if first == last else f"chunks {first}-{last}"
        span = (
            f"  characters {meta['start_index']}-{meta['end_index']}" if "end_index" in meta else ""
        )
        hits = len(meta.get("hit_chunk_ids", []))
        print(
            f"[{rank}] {short(meta.get('source', meta.get('file_id', '?')))}  {where}{span}  "
            f"score {meta['score']:.3f}  {hits} hit{'s' * (hits != 1)}",
            file=out,
        )
        print(indent(_highlight(doc.page_content, meta.get("hit_spans", []), mark)), file=out)


def _highlight(text: str, spans: Sequence[Sequence[int]], mark: Callable[[str], str]) -> str:
    from window_retriever.evaluation import merge_spans

    out, cursor = [], 0
    for start, end in merge_spans((int(s), int(e)) for s, e in spans):
        out += [text[cursor:start], mark(text[start:end])]
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def as_json(rank: int, doc: Document) -> dict[str, Any]:
    return {"rank": rank, "id": doc.id, "text": doc.page_content, "metadata": doc.metadata}


def short(source: str) -> str:
    path = Path(source)
    if path.is_absolute():
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return source
    return source


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
