"""Citations: labels, provenance and text-fragment links, and chains that cite (offline)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough, RunnableSequence
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ConfigurationError, ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.citations import (
    CITATION_PROMPT,
    answer_with_sources,
    citation_sources,
    cited_labels,
    format_with_citations,
)

URL = "https://docs.example.org/guide/errors.html"
WINDOW = Document(
    page_content="The try statement works as follows.\nFirst, the try clause is executed.",
    metadata={
        "file_id": "f1",
        "source": URL,
        "title": "8. Errors and\n  Exceptions",  # loaders can leave line breaks in titles
        "chunk_ids": ["f1:11", "f1:12"],
        "first_chunk_index": 11,
        "last_chunk_index": 12,
        "hit_chunk_ids": ["f1:12"],
        "hit_scores": [0.4],
        "hit_spans": [[36, 71]],
        "score": 0.4,
        "start_index": 3272,
        "end_index": 3343,
    },
    id="f1:11-12",
)
NO_SPAN = Document(  # a window of chunks whose splitter rewrote the text: start_index -1
    page_content="Lists have an append method.",
    metadata={
        "file_id": "f2",
        "source": "/data/lists.txt",
        "chunk_ids": ["f2:4"],
        "first_chunk_index": 4,
        "last_chunk_index": 4,
        "start_index": -1,
    },
)
PLAIN_CHUNK = Document(  # what a plain similarity search returns
    page_content="Use f.close() to free the file.",
    metadata={"file_id": "f3", "source": "notes.md", "chunk_index": 7, "chunk_id": "f3:7"},
)
BARE = Document(page_content="Some text from somewhere.")


def test_labels_and_provenance_in_the_context() -> None:
    context = format_with_citations([WINDOW, NO_SPAN, PLAIN_CHUNK, BARE])
    assert context == (
        f"[S1] 8. Errors and Exceptions ({URL}), chunks 11-12, characters 3272-3343\n"
        f"{WINDOW.page_content}\n\n"
        "[S2] /data/lists.txt, chunk 4\n"
        "Lists have an append method.\n\n"
        "[S3] notes.md, chunk 7\n"
        "Use f.close() to free the file.\n\n"
        "[S4]\n"
        "Some text from somewhere."
    )
    assert format_with_citations([]) == ""


def test_sources_map_says_only_what_the_metadata_tells() -> None:
    sources = citation_sources([WINDOW, NO_SPAN, PLAIN_CHUNK, BARE])
    assert list(sources) == ["S1", "S2", "S3", "S4"]
    assert sources["S1"] == {
        "source": URL,
        "title": "8. Errors and Exceptions",
        "url": f"{URL}#:~:text=The%20try%20statement%20works%20as%20follows.",
        "file_id": "f1",
        "chunk_ids": ["f1:11", "f1:12"],
        "first_chunk_index": 11,
        "last_chunk_index": 12,
        "start_index": 3272,
        "end_index": 3343,
    }
    # a local path: no link; a start_index of -1 is no offset, so no span at all
    assert sources["S2"] == {
        "source": "/data/lists.txt",
        "file_id": "f2",
        "chunk_ids": ["f2:4"],
        "first_chunk_index": 4,
        "last_chunk_index": 4,
    }
    assert sources["S3"] == {
        "source": "notes.md",
        "file_id": "f3",
        "chunk_ids": ["f3:7"],
        "first_chunk_index": 7,
        "last_chunk_index": 7,
    }
    assert sources["S4"] == {}


def test_a_plain_chunk_with_start_index_gets_its_span() -> None:
    chunk = Document(
        page_content="0123456789", metadata={"chunk_index": 2, "start_index": 40, "source": "a"}
    )
    (found,) = citation_sources([chunk]).values()
    assert (found["start_index"], found["end_index"]) == (40, 50)
    assert format_with_citations([chunk]).splitlines()[0] == "[S1] a, chunk 2, characters 40-50"


def test_text_fragment_is_percent_encoded_per_the_spec() -> None:
    text = "Ünïcode — co-operation, salt & pepper, and more words\nsecond line"
    page = Document(page_content=text, metadata={"source": "https://example.org/wiki/Ä?x=1"})
    url = citation_sources([page])["S1"]["url"]
    base, directive = url.split("#:~:text=")
    assert base == "https://example.org/wiki/Ä?x=1"
    # the directive's own syntax (- , &) and every non-ASCII byte are percent-encoded
    assert re.fullmatch(r"(?:[A-Za-z0-9_.~]|%[0-9A-F]{2})+", directive)
    assert "%2D" in directive and "%2C" in directive and "%26" in directive
    assert directive.startswith("%C3%9Cn%C3%AFcode%20%E2%80%94%20co%2Doperation")
    assert unquote(directive) == "Ünïcode — co-operation, salt & pepper,"  # six words


def test_text_fragment_skips_a_line_too_short_to_find_and_keeps_the_urls_fragment() -> None:
    page = Document(
        page_content="\n  f.close()\nThe use of the else clause is better than adding code",
        metadata={"source": "http://example.org/p.html#handling"},
    )
    assert citation_sources([page])["S1"]["url"] == (
        "http://example.org/p.html#handling:~:text=The%20use%20of%20the%20else%20clause"
    )
    only_short = Document(page_content="f.close()", metadata={"source": "https://e.org/"})
    assert citation_sources([only_short])["S1"]["url"] == "https://e.org/#:~:text=f.close%28%29"
    empty = Document(page_content=" \n ", metadata={"source": "https://e.org/"})
    assert "url" not in citation_sources([empty])["S1"]


def test_cited_labels() -> None:
    answer = "Use finally [S2]. Also [S1, S3] and [S2; S4]; not S5 or [5] or [see S6]."
    assert cited_labels(answer) == ["S2", "S1", "S3", "S4"]


def test_documents_must_be_a_list_of_documents() -> None:
    with pytest.raises(ConfigurationError, match="documents must be a list of Documents"):
        format_with_citations(WINDOW)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"documents\[1\] must be a Document, got str"):
        citation_sources([WINDOW, "text"])  # type: ignore[list-item]


# ---- chains, on a real in-memory Chroma with fake embeddings and a fake chat model -------------

TEXT = "\n\n".join(
    f"Paragraph {i:02d} explains topic {i} in a few words of its own." for i in range(24)
)


@pytest.fixture
def retriever(make_store: Callable[..., Chroma]) -> ContextWindowRetriever:
    splitter = RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=0)
    document = Document(page_content=TEXT, metadata={"source": URL, "title": "Topics"})
    store = make_store()
    add_chunks(store, WindowSplitter(splitter).split_documents([document]))
    return ContextWindowRetriever(vectorstore=store, k=2, window_budget=200)


QUESTION = "Paragraph 05 explains topic 5 in a few words of its own."


class Spy:
    """Passes the prompt on to the model and keeps it."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, prompt: PromptValue) -> PromptValue:
        self.prompts.append(prompt.to_string())
        return prompt


def test_plain_functions_compose_in_lcel(retriever: ContextWindowRetriever) -> None:
    spy = Spy()
    formatted = retriever | format_with_citations
    assert isinstance(formatted, RunnableSequence)
    assert isinstance(formatted.last, RunnableLambda)
    chain = (
        {"context": formatted, "question": RunnablePassthrough()}
        | CITATION_PROMPT
        | RunnableLambda(spy)
        | FakeListChatModel(responses=["Topic 5 [S1]."])
    )
    assert chain.invoke(QUESTION).content == "Topic 5 [S1]."
    windows = retriever.invoke(QUESTION)
    assert len(windows) == 2
    (prompt,) = spy.prompts
    assert format_with_citations(windows) in prompt
    assert prompt.endswith(f"Human: {QUESTION}")
    assert "[S1] Topics (" in prompt and "[S2] Topics (" in prompt
    assert (retriever | citation_sources).invoke(QUESTION) == citation_sources(windows)


def test_answer_with_sources_returns_the_cited_windows(
    retriever: ContextWindowRetriever, make_store: Callable[..., Chroma]
) -> None:
    spy = Spy()
    llm = RunnableLambda(spy) | FakeListChatModel(responses=["It is about topic 5 [S2]."])
    result = answer_with_sources(retriever, CITATION_PROMPT, llm).invoke(QUESTION)
    windows = retriever.invoke(QUESTION)
    assert result["answer"] == "It is about topic 5 [S2]."
    assert list(result["sources"]) == ["S2"]
    cited = result["sources"]["S2"]
    assert cited == citation_sources(windows)["S2"]
    # the label maps back to a real window: its chunks are stored, its span is its text
    window = windows[1]
    assert cited["chunk_ids"] == window.metadata["chunk_ids"]
    stored = retriever.vectorstore.get(ids=cited["chunk_ids"])
    assert sorted(stored["ids"]) == sorted(cited["chunk_ids"])
    assert TEXT[cited["start_index"] : cited["end_index"]].split() == window.page_content.split()
    assert window.page_content.split()[:6] == unquote(cited["url"].split("text=")[1]).split()
    # ... and the model read that window under that label
    (prompt,) = spy.prompts
    assert f"[S2] Topics ({URL}), " in prompt
    assert window.page_content in prompt.split("[S2] ", 1)[1]


async def test_an_answer_citing_nothing_known_keeps_every_source(
    retriever: ContextWindowRetriever,
) -> None:
    llm = FakeListChatModel(responses=["I cannot tell.", "See [S7]."])
    chain = answer_with_sources(retriever, CITATION_PROMPT, llm)
    everything = citation_sources(retriever.invoke(QUESTION))
    assert len(everything) == 2
    assert (await chain.ainvoke(QUESTION))["sources"] == everything
    assert chain.invoke(QUESTION) == {"answer": "See [S7].", "sources": everything}


def test_answer_with_sources_checks_its_arguments(retriever: ContextWindowRetriever) -> None:
    llm = FakeListChatModel(responses=["x"])
    wrong = ChatPromptTemplate.from_messages([("human", "{docs}\n\n{question}")])
    with pytest.raises(
        ConfigurationError,
        match=r"prompt must take the variables 'context' and 'question', it takes "
        r"\['docs', 'question'\]",
    ):
        answer_with_sources(retriever, wrong, llm)
    prompt: Any = "Answer {question} from {context}"
    with pytest.raises(ConfigurationError, match="prompt must be a LangChain Runnable"):
        answer_with_sources(retriever, prompt, llm)
