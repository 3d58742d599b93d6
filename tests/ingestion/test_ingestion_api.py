"""`ingest()`: what the ingest command does, as a library call that reports events."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document

from window_retriever import ConfigurationError, WindowSplitter, add_chunks, ingest
from window_retriever.ingestion import IngestEvent, Listed, Pruned, Repeated, SourceOutcome


def folder_with(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return folder


def test_ingest_reports_each_event_in_order_and_counts_them(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    folder = folder_with(
        tmp_path, bees="Bees make honey. " * 40, empty="", snails="Snails are slow. " * 40
    )
    (folder / "loop").symlink_to(".")
    store = make_store()
    events: list[IngestEvent] = []
    summary = ingest(store, [str(folder)], on_event=events.append)
    assert events == summary.events
    assert events[0] == Listed(3)
    assert events[1] == Repeated(str(folder / "loop"), str(folder))
    outcomes = [e for e in events if isinstance(e, SourceOutcome)]
    assert [Path(o.name).name for o in outcomes] == ["bees.txt", "empty.txt", "snails.txt"]
    assert (summary.sources, summary.added, summary.empty, summary.failed) == (3, 2, 1, 0)
    assert summary.written == len(store.get()["ids"]) > 0

    again = ingest(store, [str(folder)])
    assert (again.unchanged, again.written, again.gone) == (2, 0, 0)


def test_ingest_prunes_its_own_files_and_never_the_apis(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    folder = folder_with(tmp_path, bees="Bees make honey. " * 40, snails="Snails are slow. " * 40)
    store = make_store()
    ingest(store, [str(folder)])
    api = Document(page_content="Minutes of a meeting.", metadata={"source": str(folder / "m")})
    add_chunks(store, WindowSplitter().split_documents([api]))
    (folder / "bees.txt").unlink()
    summary = ingest(store, [str(folder)])
    assert [e.source for e in summary.events if isinstance(e, Pruned)] == [str(folder / "bees.txt")]
    assert summary.gone == 1
    sources = {m["source"] for m in store.get(include=["metadatas"])["metadatas"]}
    assert sources == {str(folder / "snails.txt"), str(folder / "m")}
    kept = ingest(store, [str(folder)], keep_missing=True)
    assert kept.gone == 0


def test_ingest_namespaces_owners_and_refuses_what_it_stamps_itself(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    folder = folder_with(tmp_path, bees="Bees make honey. " * 40)
    store = make_store()
    ingest(store, [str(folder)], metadata={"tenant": "a"})
    ingest(store, [str(folder)], metadata={"tenant": "b"})
    tenants = {m["tenant"] for m in store.get(include=["metadatas"])["metadatas"]}
    assert tenants == {"a", "b"}  # one file per owner, neither replaced
    with pytest.raises(ConfigurationError, match="metadata cannot set ingest_origin"):
        ingest(store, [str(folder)], metadata={"ingest_origin": "x"})
    with pytest.raises(ConfigurationError, match="origin must be a name"):
        ingest(store, [str(folder)], origin=" ")
    with pytest.raises(ConfigurationError, match="a source is an empty string"):
        ingest(store, [""])


def test_a_file_named_on_its_own_and_emptied_no_longer_answers(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    note = tmp_path / "one.txt"
    note.write_text("Bees make honey in the hive. " * 20, encoding="utf-8")
    other = tmp_path / "two.txt"
    other.write_text("Snails are slow. " * 20, encoding="utf-8")
    store = make_store()
    ingest(store, [str(note), str(other)], metadata={"tenant": "a"})
    ingest(store, [str(note)], metadata={"tenant": "b"})  # another owner's copy
    stored = len(store.get(where={"tenant": "a"})["ids"]) - len(
        store.get(where={"$and": [{"tenant": "a"}, {"source": str(other)}]})["ids"]
    )
    note.write_text("", encoding="utf-8")
    summary = ingest(store, [str(note), str(other)], metadata={"tenant": "a"})
    assert (summary.empty, summary.gone, summary.removed) == (1, 1, stored)
    assert [e for e in summary.events if isinstance(e, Pruned)] == [Pruned(str(note), stored)]
    left = {(m["source"], m["tenant"]) for m in store.get(include=["metadatas"])["metadatas"]}
    assert left == {(str(other), "a"), (str(note), "b")}  # tenant b's copy is not tenant a's


def test_a_source_may_be_a_path_and_one_source_alone_is_not_its_characters(
    make_store: Callable[..., Chroma], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = folder_with(tmp_path, bees="Bees make honey. " * 40)
    monkeypatch.chdir(tmp_path)
    store = make_store()
    summary = ingest(store, "docs")  # one source: never "d", "o", "c", "s"
    assert (summary.sources, summary.added, summary.failed) == (1, 1, 0)
    assert ingest(store, folder).unchanged == 1
    assert ingest(store, [folder / "bees.txt"]).unchanged == 1
    with pytest.raises(ConfigurationError, match="a source is a URL, a file or a directory"):
        ingest(store, [42])  # type: ignore[list-item]


def test_progress_is_told_of_every_source_read_so_it_can_estimate_the_whole(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    """One ``planned`` a source (0 where it has nothing to write): the count of sources read,
    which a progress bar needs to estimate the chunks of those not read yet."""

    class Told:
        def __init__(self) -> None:
            self.chunks: list[int] = []

        def planned(self, chunks: int) -> None:
            self.chunks.append(chunks)

        def written(self, chunks: int) -> None:
            pass

    folder = folder_with(
        tmp_path, bees="Bees make honey. " * 40, empty="", snails="Snails are slow. " * 40
    )
    store = make_store()
    for run in range(2):
        told = Told()
        summary = ingest(store, [str(folder)], progress=told)
        assert len(told.chunks) == summary.sources == 3
        assert sum(told.chunks) == summary.written
        zeros = (1, True) if run == 0 else (3, False)  # the empty file; then all unchanged
        assert (told.chunks.count(0), summary.written > 0) == zeros
