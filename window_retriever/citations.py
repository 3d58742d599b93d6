"""Citations for chains: label each window ``[S1]``, ``[S2]``, ... and map labels to sources.

The three pieces fit an LCEL chain as they are:

- :func:`format_with_citations` turns retrieved documents into the context a model reads:
  each window under its label, with where it comes from (title, source, chunks, characters);
- :func:`citation_sources` maps the same labels to their provenance, including for web pages
  a link that opens the page at the window's first words (a text fragment);
- :func:`answer_with_sources` is the whole question-answering runnable: it returns the answer
  and the sources the answer cites.

Example:
    .. code-block:: python

        from langchain_core.runnables import RunnablePassthrough
        from window_retriever.citations import CITATION_PROMPT, format_with_citations

        chain = (
            {"context": retriever | format_with_citations, "question": RunnablePassthrough()}
            | CITATION_PROMPT
            | llm
        )

Documents need not be windows: a plain chunk, or a document with no position metadata at
all, is labelled and cited with what it has. Nothing is made up: a missing value is left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any, TypedDict
from urllib.parse import quote, urlsplit

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)

from window_retriever._errors import ConfigurationError

__all__ = [
    "CITATION_PROMPT",
    "AnswerWithSources",
    "Citation",
    "answer_with_sources",
    "citation_sources",
    "cited_labels",
    "format_with_citations",
]

LABEL_PREFIX = "S"
"""Labels are ``[S1]``, ``[S2]``, ... in the order of the documents."""

_FRAGMENT_WORDS = 6  # words of a window that its text-fragment link searches for
_FRAGMENT_MIN_WORDS = 4  # from the first line that has this many, if one has
_FRAGMENT_CHARACTERS = 60  # ... or fewer, so that the link stays short
# "[S1]", "[S2, S3]", "[S1; S4]": the labels an answer cites.
_CITED = re.compile(r"\[\s*(S\d+(?:\s*[,;]\s*S\d+)*)\s*\]")
_LABEL = re.compile(r"S\d+")

CITATION_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "Answer the question from the numbered sources below, and only from them. Cite "
            "the sources each statement comes from by their labels in square brackets, such as "
            "[S1] or [S2][S3]. If the sources do not hold the answer, say so.\n\n"
            "Sources:\n\n{context}",
        ),
        ("human", "{question}"),
    ]
)
"""A chat prompt for :func:`answer_with_sources`: the labelled ``context`` and the
``question``, with the instruction to cite by label."""


class Citation(TypedDict, total=False):
    """Where one labelled document comes from; a key is present only when it is known."""

    source: str
    """The ``source`` metadata: a URL or a path."""
    title: str
    """The page title, when the loader found one."""
    url: str
    """For ``http(s)`` sources: the source with a text fragment (``#:~:text=``) of the
    document's first words, so that a browser opens the page at the cited text."""
    file_id: str
    """The file id that ``WindowSplitter`` gave the source."""
    chunk_ids: list[str]
    """The chunks of the document, in order (one for a plain chunk)."""
    first_chunk_index: int
    """Position of the first chunk in its file."""
    last_chunk_index: int
    """Position of the last chunk in its file."""
    start_index: int
    """Character offset of the document's text in the source text."""
    end_index: int
    """Character offset just past the document's text in the source text."""


class AnswerWithSources(TypedDict):
    """What :func:`answer_with_sources` returns."""

    answer: str
    """The model's answer, citing sources by label."""
    sources: dict[str, Citation]
    """The sources the answer cites, by label (all of them when it cites none it was given)."""


def format_with_citations(documents: Sequence[Document]) -> str:
    """Join documents into a model's context, each under a label and where it comes from.

    Each document becomes a header line, ``[S1]`` followed by its title and source, its chunk
    range and its character span (as far as its metadata tells them), and then its text.
    Documents are separated by a blank line. Use it as it is in an LCEL chain:
    ``retriever | format_with_citations``.

    Args:
        documents: Retrieved documents, best first: windows from ``ContextWindowRetriever``,
            or any documents (what they do not tell is left out).

    Returns:
        The context, e.g. (the header is one line)::

            [S1] 8. Errors and Exceptions (https://docs.python.org/3.11/tutorial/errors.html),
            chunks 11-12, characters 3272-3650
            The try statement works as follows. ...

            [S2] ...
    """
    blocks = []
    for label, document in _labelled(documents):
        header = " ".join([f"[{label}]", _describe(_citation(document))]).rstrip()
        blocks.append(f"{header}\n{document.page_content}")
    return "\n\n".join(blocks)


def citation_sources(documents: Sequence[Document]) -> dict[str, Citation]:
    """Map each label of :func:`format_with_citations` to where its document comes from.

    Args:
        documents: The same documents, in the same order, as given to
            :func:`format_with_citations`.

    Returns:
        ``{"S1": {"source": ..., "title": ..., "url": ..., "chunk_ids": [...],
        "start_index": ..., "end_index": ..., ...}, ...}``: each :class:`Citation` holds
        only what the document's metadata tells.
    """
    return {label: _citation(document) for label, document in _labelled(documents)}


def _citation(document: Document) -> Citation:
    """Where one document comes from, read from its metadata (see :class:`Citation`)."""
    metadata = document.metadata
    found: Citation = {}
    source = _one_line(metadata.get("source"))
    if source:
        found["source"] = source
    title = _one_line(metadata.get("title"))
    if title:
        found["title"] = title
    if source and urlsplit(source).scheme in ("http", "https"):
        fragment = _text_fragment(document.page_content)
        if fragment:
            found["url"] = _with_directive(source, fragment)
    file_id = metadata.get("file_id")
    if isinstance(file_id, str) and file_id:
        found["file_id"] = file_id
    chunk_ids = metadata.get("chunk_ids")
    if isinstance(chunk_ids, list | tuple) and all(isinstance(c, str) for c in chunk_ids):
        found["chunk_ids"] = list(chunk_ids)
    elif isinstance(metadata.get("chunk_id"), str):
        found["chunk_ids"] = [metadata["chunk_id"]]
    first = _offset(metadata.get("first_chunk_index"))
    last = _offset(metadata.get("last_chunk_index"))
    if first is None or last is None or last < first:
        first = last = _offset(metadata.get("chunk_index"))  # a plain chunk
    if first is not None and last is not None:
        found["first_chunk_index"], found["last_chunk_index"] = first, last
    start = _offset(metadata.get("start_index"))  # -1: a splitter rewrote the text
    if start is not None:
        end = _offset(metadata.get("end_index"))
        found["start_index"] = start
        found["end_index"] = (
            end if end is not None and end >= start else start + len(document.page_content)
        )
    return found


def _text_fragment(text: str) -> str:
    """The first few words of ``text``, as the value of a ``#:~:text=`` directive.

    Words come from one line (a text fragment matches within one block of the page): the
    first with at least four words, else the first with any; at most six of them and about
    60 characters. The value is percent-encoded as the WICG Text Fragments specification
    requires: UTF-8, with every character other than letters, digits and ``_.~`` encoded,
    including the directive's own syntax ``-``, ``&`` and ``,``. Returns ``""`` for a text
    without words.
    """
    lines = [line for line in text.splitlines() if line.split()]
    # The first line that says something: a lone "f.close()" is found all over a page.
    line = next((line for line in lines if len(line.split()) >= _FRAGMENT_MIN_WORDS), "")
    line = line or (lines[0] if lines else "")
    words: list[str] = []
    for word in line.split():
        if words and (
            len(words) == _FRAGMENT_WORDS or len(" ".join([*words, word])) > _FRAGMENT_CHARACTERS
        ):
            break
        words.append(word)
    return quote(" ".join(words), safe="").replace("-", "%2D")


def answer_with_sources(
    retriever: Runnable[str, list[Document]],
    prompt: Runnable[dict[str, Any], Any],
    llm: Runnable[Any, Any],
) -> Runnable[str, AnswerWithSources]:
    """Build a runnable that answers a question and returns the sources its answer cites.

    The question goes to ``retriever``; its documents are formatted with
    :func:`format_with_citations` into the prompt's ``context`` (the question is its
    ``question``); the model's reply is read as text. Then the labels the answer cites
    (``[S1]``, also ``[S1, S3]``) are looked up: ``sources`` holds those that name a
    retrieved document, in label order, or every document's when the answer cites none of
    them (an answer that cites nothing was still made from all of them).

    Args:
        retriever: Any retriever, e.g. ``ContextWindowRetriever``, or a runnable from the
            question to documents.
        prompt: A prompt with the variables ``context`` and ``question``, e.g.
            :data:`CITATION_PROMPT`.
        llm: A chat model or LLM (any runnable from a prompt value to a message or text).

    Returns:
        A runnable from the question (a string) to ``{"answer": str, "sources": {label:
        Citation}}``; ``invoke``, ``ainvoke``, ``batch`` and ``stream`` work as usual.

    Raises:
        ConfigurationError: When ``prompt`` does not take exactly ``context`` and
            ``question``, or an argument is not a runnable.
    """
    for name, value in (("retriever", retriever), ("prompt", prompt), ("llm", llm)):
        if not isinstance(value, Runnable):
            msg = (
                f"{name} must be a LangChain Runnable (a retriever, prompt template or chat "
                f"model), got {type(value).__name__}"
            )
            raise ConfigurationError(msg)
    variables = getattr(prompt, "input_variables", None)
    if isinstance(variables, list) and set(variables) != {"context", "question"}:
        msg = (
            f"prompt must take the variables 'context' and 'question', it takes "
            f"{sorted(variables)}; write them into the template as {{context}} and "
            "{question}, or use window_retriever.citations.CITATION_PROMPT"
        )
        raise ConfigurationError(msg)
    documents: Runnable[Any, Any] = itemgetter("documents") | RunnableLambda(format_with_citations)
    answer = (
        RunnableParallel(context=documents, question=itemgetter("question"))
        | prompt
        | llm
        | StrOutputParser()
    )
    chain = RunnableParallel(question=RunnablePassthrough(), documents=retriever).assign(
        answer=answer
    ) | RunnableLambda(_cited_sources)
    return chain.with_config(run_name="answer_with_sources")


def cited_labels(answer: str) -> list[str]:
    """The labels an answer cites (``[S1]``, ``[S2, S3]``), in order of first citation."""
    labels: dict[str, None] = {}
    for group in _CITED.finditer(answer):
        labels.update(dict.fromkeys(_LABEL.findall(group.group(1))))
    return list(labels)


def _cited_sources(result: Mapping[str, Any]) -> AnswerWithSources:
    answer = str(result["answer"])
    sources = citation_sources(result["documents"])
    cited = set(cited_labels(answer)) & set(sources)
    if cited:
        sources = {label: found for label, found in sources.items() if label in cited}
    return {"answer": answer, "sources": sources}


def _labelled(documents: Sequence[Document]) -> list[tuple[str, Document]]:
    if isinstance(documents, Document) or not isinstance(documents, Sequence):
        msg = (
            "documents must be a list of Documents (what a retriever returns), got "
            f"{type(documents).__name__}"
        )
        raise ConfigurationError(msg)
    labelled = []
    for number, document in enumerate(documents, 1):
        if not isinstance(document, Document):
            msg = f"documents[{number - 1}] must be a Document, got {type(document).__name__}"
            raise ConfigurationError(msg)
        labelled.append((f"{LABEL_PREFIX}{number}", document))
    return labelled


def _describe(found: Citation) -> str:
    """``title (source), chunks a-b, characters s-e``, as far as each part is known."""
    parts = []
    title, source = found.get("title"), found.get("source")
    if title and source:
        parts.append(f"{title} ({source})")
    elif title or source:
        parts.append(title or source or "")
    if "first_chunk_index" in found:
        first, last = found["first_chunk_index"], found["last_chunk_index"]
        parts.append(f"chunk {first}" if first == last else f"chunks {first}-{last}")
    if "start_index" in found:
        parts.append(f"characters {found['start_index']}-{found['end_index']}")
    return ", ".join(parts)


def _with_directive(url: str, fragment: str) -> str:
    """Append a text directive, after the URL's own fragment if it has one."""
    base, _, own = url.partition("#")
    own = own.split(":~:")[0]  # a directive already there is replaced
    return f"{base}#{own}:~:text={fragment}"


def _one_line(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def _offset(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
