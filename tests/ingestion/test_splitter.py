"""WindowSplitter and add_chunks: the metadata windows depend on, and safe writes."""

from __future__ import annotations

import datetime
import importlib
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import (
    CharacterTextSplitter,
    RecursiveCharacterTextSplitter,
    TextSplitter,
)

import window_retriever
from window_retriever import ConfigurationError, WindowSplitter, add_chunks
from window_retriever.core._windows import Chunk, chunk_spans, join_texts
from window_retriever.ingestion._splitter import _start_indexes

TEXT = "\n\n".join(
    f"Paragraph {p}. " + " ".join(f"Sentence {p}.{s} is here." for s in range(6)) for p in range(8)
)


def test_every_chunk_is_stamped_with_its_position() -> None:
    doc = Document(page_content=TEXT, metadata={"source": "notes.txt"})
    chunks = WindowSplitter().split_documents([doc])
    assert len(chunks) > 3
    file_ids = {c.metadata["file_id"] for c in chunks}
    assert len(file_ids) == 1
    for index, chunk in enumerate(chunks):
        meta = chunk.metadata
        assert meta["chunk_index"] == index
        assert meta["chunk_id"] == chunk.id == f"{meta['file_id']}:{index}"
        assert (
            TEXT[meta["start_index"] : meta["start_index"] + len(chunk.page_content)]
            == chunk.page_content
        )
        assert meta["source"] == "notes.txt"
        assert isinstance(meta["file_version"], str)


def test_ids_are_deterministic_and_follow_the_source() -> None:
    doc = Document(page_content=TEXT, metadata={"source": "a.txt"})
    first = WindowSplitter().split_documents([doc])
    again = WindowSplitter().split_documents(
        [Document(page_content=TEXT, metadata={"source": "a.txt"})]
    )
    other = WindowSplitter().split_documents(
        [Document(page_content=TEXT, metadata={"source": "b.txt"})]
    )
    assert [c.id for c in first] == [c.id for c in again]
    assert not {c.id for c in first} & {c.id for c in other}
    changed = WindowSplitter().split_documents(
        [Document(page_content=TEXT + " More.", metadata={"source": "a.txt"})]
    )
    assert changed[0].metadata["file_id"] == first[0].metadata["file_id"]
    assert changed[0].metadata["file_version"] != first[0].metadata["file_version"]


def test_file_id_can_be_namespaced_or_explicit() -> None:
    docs = [
        Document(page_content=TEXT, metadata={"source": "s", "tenant": "a"}),
        Document(page_content=TEXT, metadata={"source": "s", "tenant": "b"}),
    ]
    chunks = WindowSplitter(file_id_keys=("tenant", "source")).split_documents(docs)
    assert len({c.metadata["file_id"] for c in chunks}) == 2
    explicit = WindowSplitter().split_documents(
        [Document(page_content=TEXT, metadata={"file_id": "kb/42"})]
    )
    assert explicit[0].id == "kb/42:0"


def test_same_file_id_twice_is_refused_with_the_fix() -> None:
    docs = [
        Document(page_content="page one", metadata={"source": "book.pdf", "page": 1}),
        Document(page_content="page two", metadata={"source": "book.pdf", "page": 2}),
    ]
    with pytest.raises(
        ConfigurationError, match=r"documents 0 and 1 have the same file_id .*'page'"
    ):
        WindowSplitter().split_documents(docs)
    chunks = WindowSplitter(file_id_keys=("source", "page")).split_documents(docs)
    assert len({c.metadata["file_id"] for c in chunks}) == 2


def test_a_document_without_source_is_refused_with_the_fix() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"document 0 has no metadata\['file_id'\].*set metadata\['source'\]",
    ):
        WindowSplitter().split_documents([Document(page_content="anonymous")])


@pytest.mark.parametrize("bad", [None, "not a splitter"])
def test_bad_splitter_or_keys_are_refused(bad: object) -> None:
    if bad is None:
        with pytest.raises(ConfigurationError, match="file_id_keys must be a non-empty sequence"):
            WindowSplitter(file_id_keys=())
    else:
        with pytest.raises(
            ConfigurationError,
            match=r"splitter must be a langchain_text_splitters.TextSplitter, got str",
        ):
            WindowSplitter(bad)  # type: ignore[arg-type]


def test_start_index_without_the_splitters_own() -> None:
    splitter = CharacterTextSplitter(separator=" ", chunk_size=60, chunk_overlap=15)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=TEXT, metadata={"source": "x"})]
    )
    for chunk in chunks:
        start = chunk.metadata["start_index"]
        assert TEXT[start : start + len(chunk.page_content)] == chunk.page_content


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["a", "bb", "ccc", "the", "cat", "\n\n", "."]), min_size=1, max_size=200
    ),
    size=st.integers(5, 60),
    overlap=st.integers(0, 4),
)
def test_start_index_is_right_even_for_repetitive_text(
    words: list[str], size: int, overlap: int
) -> None:
    text = " ".join(words)
    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "r"})]
    )
    previous = -1
    for chunk in chunks:
        start = chunk.metadata["start_index"]
        assert text[start : start + len(chunk.page_content)] == chunk.page_content
        assert start >= previous
        previous = start


def test_metadata_is_made_storable() -> None:
    when = datetime.date(2026, 11, 30)
    doc = Document(
        page_content="text",
        metadata={
            "source": "m",
            "none": None,
            "tags": ["a", "b"],
            "mixed": [1, "a"],
            "empty": [],
            "nested": {"x": [1, 2]},
            "when": when,
            "flag": True,
        },
    )
    meta = WindowSplitter().split_documents([doc])[0].metadata
    assert "none" not in meta
    assert meta["tags"] == ["a", "b"] and meta["flag"] is True
    assert (
        meta["mixed"] == '[1, "a"]' and meta["empty"] == "[]" and meta["nested"] == '{"x": [1, 2]}'
    )
    assert meta["when"] == "2026-11-30"


def test_storable_metadata_really_stores(make_store: Callable[..., Chroma]) -> None:
    doc = Document(
        page_content="text",
        metadata={"source": "m", "none": None, "d": {"a": 1}, "l": [1, "x"], "e": []},
    )
    store = make_store()
    add_chunks(store, WindowSplitter().split_documents([doc]))
    assert store.get()["metadatas"][0]["d"] == '{"a": 1}'


def test_reingesting_upserts_instead_of_duplicating(make_store: Callable[..., Chroma]) -> None:
    store = make_store()
    docs = [Document(page_content=TEXT, metadata={"source": "a.txt"})]
    first = add_chunks(store, WindowSplitter().split_documents(docs))
    second = add_chunks(store, WindowSplitter().split_documents(docs))
    assert first == second
    assert len(store.get()["ids"]) == len(first)


def test_add_chunks_batches(
    make_store: Callable[..., Chroma], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    sizes: list[int] = []
    original = store.add_documents
    monkeypatch.setattr(
        store, "add_documents", lambda docs, **kw: sizes.append(len(docs)) or original(docs, **kw)
    )
    chunks = WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0)
    ).split_documents([Document(page_content=TEXT, metadata={"source": "a"})])
    add_chunks(store, chunks, batch_size=7)
    assert sizes[:-1] == [7] * (len(sizes) - 1) and sum(sizes) == len(chunks)
    assert len(store.get()["ids"]) == len(chunks)


def test_add_chunks_refuses_unstamped_chunks_and_writes_nothing(
    make_store: Callable[..., Chroma],
) -> None:
    store = make_store()
    good = WindowSplitter().split_documents([Document(page_content=TEXT, metadata={"source": "a"})])
    with pytest.raises(
        ConfigurationError,
        match=r"chunk 1 has no metadata\['chunk_id'\]; split documents with WindowSplitter",
    ):
        add_chunks(store, [good[0], Document(page_content="raw")])
    with pytest.raises(ConfigurationError, match="chunk 1 repeats chunk_id"):
        add_chunks(store, [good[0], good[0]])
    assert store.get()["ids"] == []


def test_public_api_is_explicit_and_sorted() -> None:
    assert window_retriever.__all__ == sorted(window_retriever.__all__)
    for name in window_retriever.__all__:
        assert hasattr(window_retriever, name), name
    public = {n for n in dir(window_retriever) if not n.startswith("_")}
    assert public <= set(window_retriever.__all__)
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert window_retriever.__version__ == pyproject["project"]["version"]


# ---- start_index: where the splitter cut each piece, for every splitter and text -----------------

_SEPARATOR_CHARACTERS = frozenset(" \n.")


def _unique_letters(text: str) -> str:
    """``text`` with every letter made unique, every separator character kept.

    The splitters below decide only by separators and lengths, so they cut this text exactly
    where they cut ``text``; and a piece with a letter in it appears once, which gives its
    true start.
    """
    out, letter = [], 0
    for char in text:
        if char in _SEPARATOR_CHARACTERS:
            out.append(char)
        else:
            out.append(chr(0x4E00 + letter))
            letter += 1
    return "".join(out)


def _printed_positions(text: str, starts: list[int], pieces: list[str]) -> set[int]:
    return {
        at
        for start, piece in zip(starts, pieces, strict=True)
        if start >= 0
        for at in range(start, start + len(piece))
        if not text[at].isspace()
    }


@st.composite
def _splitters(draw: st.DrawFn) -> tuple[TextSplitter, int]:
    size = draw(st.integers(2, 40))
    overlap = draw(st.integers(0, size - 1))
    strip = draw(st.booleans())
    if draw(st.booleans()):
        keep = draw(st.sampled_from([True, False, "start", "end"]))
        splitter: TextSplitter = RecursiveCharacterTextSplitter(
            chunk_size=size, chunk_overlap=overlap, keep_separator=keep, strip_whitespace=strip
        )
    else:
        splitter = CharacterTextSplitter(
            separator=draw(st.sampled_from([" ", "\n\n", ".", "\n"])),
            chunk_size=size,
            chunk_overlap=overlap,
            strip_whitespace=strip,
        )
    return splitter, overlap


@settings(max_examples=400, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["a", "bb", "end", "the", "x", ".", "\n\n", "\n", " "]),
        min_size=1,
        max_size=60,
    ),
    joiner=st.sampled_from(["", " ", "\n"]),
    split=_splitters(),
)
def test_start_index_is_where_the_splitter_cut_each_piece(
    words: list[str], joiner: str, split: tuple[TextSplitter, int]
) -> None:
    splitter, overlap = split
    text = joiner.join(words)
    pieces = splitter.split_text(text)
    starts = _start_indexes(text, pieces, overlap)
    found = [start for start in starts if start >= 0]
    for start, piece in zip(starts, pieces, strict=True):
        assert start == -1 or text[start : start + len(piece)] == piece
    assert found == sorted(found)  # in order, never backwards
    unique = _unique_letters(text)
    cut = splitter.split_text(unique)
    assert [len(piece) for piece in cut] == [len(piece) for piece in pieces]
    truth = [unique.find(piece) for piece in cut]
    # Where the splitter rewrote a piece (joined two with another separator), how much text
    # it stood for is lost; and a piece of separators alone has no unique letter to find it by.
    if -1 not in truth and all(set(piece) - _SEPARATOR_CHARACTERS for piece in cut):
        # Every character the splitter really put in a chunk is in a chunk where we say it is
        # (where two placements cover the same text, either is right).
        assert _printed_positions(text, starts, pieces) >= _printed_positions(text, truth, cut)


def test_a_short_repeated_piece_is_not_placed_inside_the_previous_one() -> None:
    text = "alpha beta gamma delta. end\n\nend"
    splitter = RecursiveCharacterTextSplitter(chunk_size=24, chunk_overlap=6)
    assert splitter.split_text(text) == ["alpha beta gamma delta.", "end", "end"]
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "s"})]
    )
    assert [chunk.metadata["start_index"] for chunk in chunks] == [0, 24, 29]


def test_the_same_region_emitted_twice_keeps_one_start() -> None:
    """Splitters do emit one region twice; the two pieces then share their start."""
    text = "a a \n a a a x"
    splitter = CharacterTextSplitter(separator=" ", chunk_size=3, chunk_overlap=1)
    pieces = splitter.split_text(text)
    starts = _start_indexes(text, pieces, 1)
    for start, piece in zip(starts, pieces, strict=True):
        assert text[start : start + len(piece)] == piece
    assert starts == sorted(starts)


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["end", "a", "the", ".", "\n\n", "\n"]), min_size=1, max_size=80
    ),
    size=st.integers(3, 40),
    overlap=st.integers(0, 10),
)
def test_a_window_over_every_chunk_gives_back_the_text(
    words: list[str], size: int, overlap: int
) -> None:
    """The window joined from all the chunks of a text is that text, up to the blanks the
    splitter dropped between chunks (the only thing a RecursiveCharacterTextSplitter drops)."""
    text = " ".join(words)
    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=min(overlap, size - 1))
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "w"})]
    )
    if not chunks:
        return
    window = [
        Chunk(
            id=c.metadata["chunk_id"],
            text=c.page_content,
            file_id=c.metadata["file_id"],
            index=c.metadata["chunk_index"],
            start=c.metadata["start_index"],
        )
        for c in chunks
    ]
    joined = join_texts(window)
    for chunk, (begin, end) in zip(window, chunk_spans(window), strict=True):
        assert joined[begin:end] == chunk.text
    start = window[0].start
    end = max(c.start + len(c.text) for c in window if c.start is not None)
    assert start is not None
    assert joined.split() == text[start:end].split()
    assert text[:start].strip() == "" and text[end:].strip() == ""


def test_the_window_keeps_a_repeated_short_chunk() -> None:
    text = "alpha beta gamma delta. end\n\nend"
    splitter = RecursiveCharacterTextSplitter(chunk_size=24, chunk_overlap=6)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "s"})]
    )
    window = [
        Chunk(id=str(i), text=c.page_content, file_id="f", index=i, start=c.metadata["start_index"])
        for i, c in enumerate(chunks)
    ]
    assert join_texts(window) == "alpha beta gamma delta. end\nend"


@pytest.mark.parametrize(
    ("words", "size", "overlap", "starts"),
    [
        (["end"] * 9, 4, 3, [0, 4, 8, 12, 16, 20, 24, 28, 32]),  # overlap as long as a piece
        (["the", "end", "\n\n", "the", "end"], 8, 7, [0, 11, 11]),  # a split, then its chunk
    ],
)
def test_a_repeated_piece_is_not_put_back_inside_the_one_before(
    words: list[str], size: int, overlap: int, starts: list[int]
) -> None:
    """Found by the property test above: a placement that lags behind must not win."""
    text = " ".join(words)
    splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "w"})]
    )
    assert [c.metadata["start_index"] for c in chunks] == starts


def test_a_chunk_the_splitter_emits_inside_the_one_before_keeps_every_span_true() -> None:
    # found by hypothesis: with overlap 7 of 8 the splitter emits "the" twice, and the first
    # one is placed inside "the end"; the join must not measure the next seam from inside it
    words = ["the", "end", "\n\n", "the", "\n", "\n\n"]
    text = " ".join(words)
    splitter = RecursiveCharacterTextSplitter(chunk_size=8, chunk_overlap=7)
    chunks = WindowSplitter(splitter).split_documents(
        [Document(page_content=text, metadata={"source": "w"})]
    )
    window = [
        Chunk(
            id=str(n),
            text=c.page_content,
            file_id="f",
            index=n,
            start=c.metadata["start_index"],
        )
        for n, c in enumerate(chunks)
    ]
    joined = join_texts(window)
    for chunk, (begin, end) in zip(window, chunk_spans(window), strict=True):
        assert joined[begin:end] == chunk.text
    assert joined.split() == text.split()
    nested = [Chunk("a", "abcdefgh", "f", 0, start=0), Chunk("b", "cd", "f", 1, start=2)]
    after = [*nested, Chunk("c", "ghij", "f", 2, start=6)]
    assert join_texts(after) == "abcdefghij"  # measured from "abcdefgh"'s end, not "cd"'s
    assert chunk_spans(after) == [(0, 8), (2, 4), (6, 10)]


@pytest.mark.parametrize("name", ["window_retriever.stores", "window_retriever.ingestion"])
def test_each_public_subpackage_lists_its_names_and_gives_each(name: str) -> None:
    """``stores`` and ``ingestion`` are public packages of private modules, like the package."""
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    for public in module.__all__:
        assert getattr(module, public) is not None, public
    assert {n for n in dir(module) if not n.startswith("_")} <= set(module.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        module.Nothing  # noqa: B018 - the attribute access is the test
