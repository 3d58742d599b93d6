"""What the commands print: windows with their hits marked, progress, counts."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from langchain_core.documents import Document


def count(number: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks``."""
    return f"{number} {noun}{'s' * (number != 1)}"


class Share:
    """How much of an ingest is done, from 0 to 1: never less than it said before.

    The chunks to write are known a source at a time, as each is read, so the share of the
    chunks planned so far that are written falls each time a source is planned (60% -> 56%).
    This estimates the whole instead: the chunks planned so far, and for each source not read
    yet as many as the sources read had on average (ingestion plans every source it reads
    once, with 0 chunks where it has nothing to write); and it never goes down (an estimate
    that was too high waits until the work catches up with it).
    """

    def __init__(self, sources: int) -> None:
        self.sources = sources
        self.planned = self.planned_sources = self.written = self.done = 0
        self._said = 0.0

    def plan(self, chunks: int) -> None:
        """A source was read: its ``chunks`` are to be written (0: nothing to write)."""
        self.planned += chunks
        self.planned_sources += 1

    def write(self, chunks: int) -> None:
        self.written += chunks

    def source_done(self) -> None:
        self.done += 1

    def value(self) -> float:
        """The share done now: the estimate, or the last one said if that was higher."""
        if self.sources and self.done >= self.sources:
            estimate = 1.0
        elif self.planned:
            known = max(self.planned_sources, self.done)
            unknown = max(self.sources - known, 0)
            expected = self.planned + unknown * self.planned / self.planned_sources
            estimate = min(self.written / expected, 1.0)
        else:  # nothing to write so far: the sources done
            estimate = self.done / self.sources if self.sources else 0.0
        self._said = max(self._said, estimate)
        return self._said


_STEPS = 1000
"""The bar's resolution: a tenth of a percent."""


class Progress:
    """A progress bar on a terminal; plain lines otherwise.

    The bar shows the share of the ingest done (:class:`Share`: it never goes backwards),
    the chunks written out of those planned so far with their rate (embedding is the slow
    part, so a long file shows movement), and the sources done. The ingest threads tell it
    of chunks.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.share = Share(0)
        self._lock = threading.Lock()

    @property
    def sources(self) -> int:
        return self.share.sources

    @property
    def done(self) -> int:
        return self.share.done

    def start(self, sources: int) -> None:
        """The sources are listed: show the bar (on a terminal)."""
        self.share = Share(sources)
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=_STEPS,
                file=self.stream,
                dynamic_ncols=True,
                bar_format="{percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
            )
            self._show()

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
        with self._lock:
            self.share.plan(chunks)
            self._show()

    def written(self, chunks: int) -> None:
        with self._lock:
            self.share.write(chunks)
            self._show()

    def source_done(self) -> None:
        with self._lock:
            self.share.source_done()
            self._show()

    def _show(self) -> None:
        """Bring the bar up to date (the caller holds the lock)."""
        if self.bar is None:
            return
        share = self.share
        self.bar.n = max(self.bar.n, round(share.value() * _STEPS))
        elapsed = self.bar.format_dict.get("elapsed") or 0.0
        rate = f", {share.written / elapsed:.0f} chunk/s" if elapsed > 0 and share.written else ""
        noun = "source" if share.sources == 1 else "sources"
        self.bar.set_postfix_str(
            f"{share.written}/{share.planned} chunks{rate}, {share.done}/{share.sources} {noun}",
            refresh=False,
        )
        self.bar.refresh()


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
        print(  # the source as stored, not shortened: what a --filter names
            f"[{rank}] {meta.get('source', meta.get('file_id', '?'))}  {where}{span}  "
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


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
