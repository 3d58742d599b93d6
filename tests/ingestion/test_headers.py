"""Contextual chunk headers: the title and section path are embedded, the chunk is stored.

Real Chroma (in memory) and the in-memory store, with a spy embedding that records every text
it is asked to embed; the loaders read real files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_text_splitters import RecursiveCharacterTextSplitter
from pydantic import Field

from window_retriever import (
    ConfigurationError,
    ContextWindowRetriever,
    MemoryWindowStore,
    WindowSplitter,
    add_chunks,
    ingest,
    load_file,
    sync_file,
)
from window_retriever.ingestion._headers import (
    CONTEXT_HEADER,
    SECTION_HEADINGS,
    embedded_text,
    heading_paths,
    make_header,
    markdown_headings,
)


class SpyEmbeddings(DeterministicFakeEmbedding):
    """Fake embeddings that remember every document text they embedded."""

    texts: list[str] = Field(default_factory=list)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed_documents(texts)


SECTIONS = ["Installing", "Configuring", "Troubleshooting"]


def manual() -> Document:
    """A titled page of three sections, each long enough for several chunks."""
    parts: list[str] = []
    headings: list[list[Any]] = []
    at = 0
    for name in SECTIONS:
        headings.append([at, 2, name])
        body = f"{name}\n" + " ".join(f"{name.lower()} step {n} is described." for n in range(8))
        parts.append(body)
        at += len(body) + 2
    return Document(
        page_content="\n\n".join(parts),
        metadata={"source": "manual.html", "title": "Widget Manual", SECTION_HEADINGS: headings},
    )


def splitter(*, headers: bool = True) -> WindowSplitter:
    return WindowSplitter(
        RecursiveCharacterTextSplitter(chunk_size=80, chunk_overlap=10, add_start_index=True),
        headers=headers,
    )


def chroma(make_store: Callable[..., Chroma], spy: SpyEmbeddings) -> Chroma:
    return make_store(spy)


def memory(make_store: Callable[..., Chroma], spy: SpyEmbeddings) -> MemoryWindowStore:
    return MemoryWindowStore(spy)


STORES = [chroma, memory]


def stored_texts(store: Any) -> dict[str, str]:
    if isinstance(store, Chroma):
        found = store.get(include=["documents"])
        return dict(zip(found["ids"], found["documents"], strict=True))
    return {chunk_id: record.text for chunk_id, record in store._records.items()}


def test_each_chunk_gets_its_title_and_section_path() -> None:
    chunks = splitter().split_documents([manual()])
    text = manual().page_content
    for chunk in chunks:
        start = chunk.metadata["start_index"]
        section = max((s for s in SECTIONS if text.find(s) <= start), key=text.find)
        assert chunk.metadata[CONTEXT_HEADER] == f"Widget Manual > {section}"
        assert SECTION_HEADINGS not in chunk.metadata
    assert {c.metadata[CONTEXT_HEADER] for c in chunks} == {
        f"Widget Manual > {s}" for s in SECTIONS
    }


def test_headers_leave_the_chunks_text_positions_and_ids_alone() -> None:
    plain = splitter(headers=False).split_documents([manual()])
    headed = splitter().split_documents([manual()])
    assert [c.page_content for c in headed] == [c.page_content for c in plain]
    assert [c.id for c in headed] == [c.id for c in plain]
    for a, b in zip(plain, headed, strict=True):
        assert CONTEXT_HEADER not in a.metadata and SECTION_HEADINGS not in a.metadata
        same = {k: v for k, v in b.metadata.items() if k not in (CONTEXT_HEADER, "file_version")}
        assert same == {k: v for k, v in a.metadata.items() if k != "file_version"}
        assert a.metadata["file_version"] != b.metadata["file_version"]


@pytest.mark.parametrize("make", STORES, ids=["chroma", "memory"])
@pytest.mark.parametrize("write", ["add_chunks", "sync_file"])
def test_the_store_embeds_header_and_text_but_stores_the_text(
    make: Callable[..., Any], write: str, make_store: Callable[..., Chroma]
) -> None:
    spy = SpyEmbeddings(size=32)
    store = make(make_store, spy)
    chunks = splitter().split_documents([manual()])
    if write == "add_chunks":
        add_chunks(store, chunks)
    else:
        sync_file(store, chunks)
    expected = [f"{c.metadata[CONTEXT_HEADER]}\n\n{c.page_content}" for c in chunks]
    assert sorted(spy.texts) == sorted(expected)
    assert stored_texts(store) == {c.id: c.page_content for c in chunks}
    # The stored vector is the embedding of header + text, not of the text alone.
    one = chunks[3]
    retriever = ContextWindowRetriever(vectorstore=store, k=1, window_budget=80)
    [found] = retriever.invoke(embedded_text(one))
    assert found.metadata["hit_chunk_ids"] == [one.id]
    assert found.page_content == one.page_content


@pytest.mark.parametrize("make", STORES, ids=["chroma", "memory"])
def test_the_ingest_pipeline_embeds_header_and_text(
    make: Callable[..., Any], make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    page = tmp_path / "guide.html"
    paragraphs = "".join(f"<p>Paragraph {n} says something about setup.</p>" for n in range(6))
    page.write_text(
        "<html><head><title>Guide</title></head><body>"
        f"<h1>Guide</h1><p>Intro.</p><h2>Setup</h2>{paragraphs}</body></html>",
        encoding="utf-8",
    )
    spy = SpyEmbeddings(size=32)
    store = make(make_store, spy)
    summary = ingest(
        store,
        [str(page)],
        splitter=RecursiveCharacterTextSplitter(chunk_size=80, chunk_overlap=0),
        headers=True,
    )
    assert summary.added == 1
    text = load_file(page).document.page_content  # type: ignore[union-attr]
    stored = stored_texts(store)
    assert sorted(stored.values()) == sorted(spy_text.split("\n\n", 1)[1] for spy_text in spy.texts)
    assert all(value in text for value in stored.values())
    headers = {spy_text.split("\n\n", 1)[0] for spy_text in spy.texts}
    assert headers == {"Guide", "Guide > Setup"}


@pytest.mark.parametrize("make", STORES, ids=["chroma", "memory"])
def test_turning_headers_on_or_off_embeds_the_file_again(
    make: Callable[..., Any], make_store: Callable[..., Chroma]
) -> None:
    spy = SpyEmbeddings(size=32)
    store = make(make_store, spy)
    off = splitter(headers=False).split_documents([manual()])
    on = splitter().split_documents([manual()])
    assert sync_file(store, off).status == "added"
    spy.texts.clear()
    outcome = sync_file(store, on)
    assert (outcome.status, outcome.written) == ("updated", len(on))
    assert sorted(spy.texts) == sorted(embedded_text(c) for c in on)
    assert sync_file(store, on).status == "unchanged"
    spy.texts.clear()
    outcome = sync_file(store, off)
    assert (outcome.status, outcome.written) == ("updated", len(off))
    assert sorted(spy.texts) == sorted(c.page_content for c in off)
    if isinstance(store, Chroma):  # the header key is gone from the stored records
        metadatas = store.get(include=["metadatas"])["metadatas"]
        assert all(CONTEXT_HEADER not in m for m in metadatas)


def test_a_document_without_title_or_headings_embeds_its_plain_text(
    make_store: Callable[..., Chroma],
) -> None:
    document = Document(
        page_content=" ".join(f"sentence {n} of a bare note." for n in range(20)),
        metadata={"source": "note.txt"},
    )
    chunks = splitter().split_documents([document])
    assert all(CONTEXT_HEADER not in c.metadata for c in chunks)
    # Nothing to head: the version is the one without headers, so toggling embeds nothing.
    plain = splitter(headers=False).split_documents([document])
    assert [c.metadata for c in chunks] == [c.metadata for c in plain]
    spy = SpyEmbeddings(size=32)
    store = make_store(spy)
    sync_file(store, chunks)
    assert sorted(spy.texts) == sorted(c.page_content for c in chunks)
    assert sync_file(store, plain).status == "unchanged"


def test_the_loaders_record_html_and_markdown_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<html><head><title>Errors and Exceptions</title></head><body>"
        '<h1>Errors and Exceptions<a class="headerlink" href="#e">¶</a></h1><p>Intro.</p>'
        "<h2>Handling   <code>Exceptions</code></h2><p>Use try.</p>"
        "<h4>Too deep</h4><p>Not a section.</p>"
        "<h3>Notes</h3><p>Add notes.</p><h2>Raising</h2><p>Use raise.</p></body></html>",
        encoding="utf-8",
    )
    document = load_file(page).document
    assert document is not None
    text = document.page_content
    headings = document.metadata[SECTION_HEADINGS]
    assert [(level, name) for _, level, name in headings] == [
        (1, "Errors and Exceptions"),
        (2, "Handling Exceptions"),
        (3, "Notes"),
        (2, "Raising"),
    ]
    assert [text[start : start + 5] for start, _, _ in headings] == [
        "Error",
        "Handl",
        "Notes",
        "Raisi",
    ]
    markdown = tmp_path / "notes.md"
    markdown.write_text(
        "---\ntitle: x\n---\n# Guide\n\nIntro.\n\n## Setup ##\n\n```\n# not a heading\n```\n"
        "#### deep\n\n### Linux\n\nText.\n",
        encoding="utf-8",
    )
    document = load_file(markdown).document
    assert document is not None
    found = document.metadata[SECTION_HEADINGS]
    assert [(level, name) for _, level, name in found] == [(1, "Guide"), (2, "Setup"), (3, "Linux")]
    assert [document.page_content[s : s + 2 + level] for s, level, _ in found] == [
        "# G",
        "## S",
        "### L",
    ]
    plain = tmp_path / "plain.txt"
    plain.write_text("# not markdown\n\ntext\n", encoding="utf-8")
    assert SECTION_HEADINGS not in load_file(plain).document.metadata  # type: ignore[union-attr]


def test_heading_paths_follow_the_levels() -> None:
    headings = [(0, 1, "A"), (10, 2, "B"), (20, 3, "C"), (30, 2, "D"), (40, 1, "E")]
    paths = heading_paths(headings, [0, 5, 25, 35, 45, 12])
    assert paths == [["A"], ["A"], ["A", "B", "C"], ["A", "D"], ["E"], ["A", "B"]]
    assert heading_paths([], [0, 10]) == [[], []]


def test_the_header_leaves_out_what_the_title_says() -> None:
    title = "8. Errors and Exceptions — Python 3.11 documentation"
    assert make_header(title, ["8. Errors and Exceptions¶", "8.3. Handling Exceptions¶"]) == (
        f"{title} > 8.3. Handling Exceptions"
    )
    assert make_header(None, ["Setup", "Setup", "Linux"]) == "Setup > Linux"
    assert make_header("", []) == ""
    assert len(make_header("T" * 500, [])) == 200


def test_markdown_headings_ignore_fenced_code() -> None:
    text = "# A\n~~~\n## no\n~~~\n## B\n"
    assert markdown_headings(text) == [(0, 1, "A"), (text.index("## B"), 2, "B")]


@pytest.mark.parametrize(
    "bad",
    [
        [[5, 1, "x"], [2, 1, "y"]],
        [[0, 0, "x"]],
        [[0, 1]],
        [[999, 1, "x"]],
        "heading",
        [[0, True, "x"]],
    ],
)
def test_bad_section_headings_are_refused_with_the_fix(bad: Any) -> None:
    document = Document(page_content="some text", metadata={"source": "s", SECTION_HEADINGS: bad})
    with pytest.raises(ConfigurationError, match=r"metadata\['section_headings'\] must list"):
        splitter().split_documents([document])


def test_headers_must_be_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="headers must be True or False, got 'yes'"):
        WindowSplitter(headers="yes")  # type: ignore[arg-type]


def test_a_chroma_store_without_a_langchain_model_embeds_the_header_with_its_own(
    chroma_client: Any,
) -> None:
    import chromadb

    seen: list[str] = []

    class Spy(chromadb.EmbeddingFunction):  # type: ignore[misc, type-arg]
        def __init__(self) -> None:
            pass

        def __call__(self, input: list[str]) -> list[list[float]]:
            seen.extend(input)
            return [[float(len(text)), 1.0, 0.0] for text in input]

        @staticmethod
        def name() -> str:
            return "window-retriever-test-spy"

        def get_config(self) -> dict[str, Any]:
            return {}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> Spy:
            return Spy()

    chroma_client.create_collection("headers-own-model", embedding_function=Spy())
    try:
        store = Chroma(client=chroma_client, collection_name="headers-own-model")
        chunks = splitter().split_documents([manual()])
        add_chunks(store, chunks)
        assert sorted(seen) == sorted(embedded_text(c) for c in chunks)
        assert stored_texts(store) == {c.id: c.page_content for c in chunks}
    finally:
        chroma_client.delete_collection("headers-own-model")


def test_a_new_version_that_drops_a_key_is_still_embedded_with_its_header(
    make_store: Callable[..., Chroma],
) -> None:
    spy = SpyEmbeddings(size=32)
    store = make_store(spy)
    before = manual()
    before.metadata["access"] = "public"
    sync_file(store, splitter().split_documents([before]))
    spy.texts.clear()
    after = splitter().split_documents([manual()])  # no "access": Chroma must drop the key
    assert sync_file(store, after).status == "updated"
    assert sorted(spy.texts) == sorted(embedded_text(c) for c in after)
    assert all("access" not in m for m in store.get(include=["metadatas"])["metadatas"])
