"""The questions file: one JSON object a line, read, validated and matched to stored sources.

Each line has a ``question`` and something to score against: ``gold_spans`` (character offsets
in the text of its ``source`` or ``file_id``) and / or an ``answer``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from window_retriever._errors import ConfigurationError
from window_retriever.core._ids import FILE_ID
from window_retriever.stores._adapters import store_adapter
from window_retriever.stores._protocol import WindowStore

Span = tuple[int, int]
"""A character range ``[start, end)`` in a source text."""


@dataclass(frozen=True, slots=True)
class Question:
    """One line of a questions file."""

    line: int
    question: str
    source: str | None = None
    file_id: str | None = None
    answer: str | None = None
    gold_spans: tuple[Span, ...] = ()

    @property
    def where(self) -> dict[str, str] | None:
        """The filter that keeps the search inside the question's own file, if it names one."""
        if self.file_id is not None:
            return {FILE_ID: self.file_id}
        if self.source is not None:
            return {"source": self.source}
        return None


def read_questions(path: str | os.PathLike[str]) -> tuple[list[Question], list[str]]:
    """Read a JSONL questions file; return the questions and one message per bad line."""
    questions: list[Question] = []
    problems: list[str] = []
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(f"line {number}: not UTF-8 (byte {error.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                questions.append(parse_question(number, json.loads(line)))
            except json.JSONDecodeError as error:
                problems.append(f"line {number}: not JSON ({error.msg})")
            except ValueError as error:
                problems.append(f"line {number}: {error}")
    return questions, problems


def parse_question(number: int, data: Any) -> Question:
    """Validate one decoded line."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('"question" must be a non-empty string')
    for key in ("source", "file_id", "answer"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f'"{key}" must be a string')
    for key in ("source", "file_id"):
        if isinstance(data.get(key), str) and not data[key].strip():
            raise ValueError(f'"{key}" must not be empty (leave it out instead)')
    spans = data.get("gold_spans") or []
    if not isinstance(spans, list) or not all(
        isinstance(s, list | tuple)
        and len(s) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
        and 0 <= s[0] < s[1]
        for s in spans
    ):
        raise ValueError('"gold_spans" must be a list of [start, end] with 0 <= start < end')
    if not spans and not data.get("answer"):
        raise ValueError('needs "gold_spans" or "answer" to score against')
    if spans and data.get("source") is None and data.get("file_id") is None:
        raise ValueError('"gold_spans" need the "source" or "file_id" they point into')
    return Question(
        line=number,
        question=question,
        source=data.get("source"),
        file_id=data.get("file_id"),
        answer=data.get("answer") or None,
        gold_spans=tuple((int(s[0]), int(s[1])) for s in spans),
    )


def resolve_sources(
    vectorstore: Any, questions: Sequence[Question], *, cwd: str | Path | None = None
) -> tuple[list[Question], list[str]]:
    """Match each question's ``source`` to a stored source; return the questions and warnings.

    A question's ``source`` must equal the ``source`` its chunks were stored under, or it
    scores as a miss: local files are stored under their absolute paths (as ``ingest`` stores
    them), web pages under their final address. A relative path is made absolute against
    ``cwd`` (default: the current directory), as ``ingest`` does, when that absolute path is a
    stored source. Any other unknown source gets one warning naming the closest stored source.
    Questions with a ``file_id`` are left as they are; so is every question when the store
    cannot be listed (neither a ``langchain_chroma.Chroma`` nor a ``WindowStore``).
    """
    named = sorted({q.source for q in questions if q.source is not None and q.file_id is None})
    try:
        store = store_adapter(vectorstore)
    except ConfigurationError:
        return list(questions), []
    if not named:
        return list(questions), []
    missing = [source for source in named if not _stored(store, source)]
    resolved: dict[str, str] = {}
    for source in missing:
        if "://" not in source and not os.path.isabs(source):
            absolute = os.path.abspath(os.path.join(cwd or os.getcwd(), source))
            if _stored(store, absolute):
                resolved[source] = absolute
    unknown = {source for source in missing if source not in resolved}
    stored = _stored_sources(store) if unknown else []
    out: list[Question] = []
    warnings: list[str] = []
    for question in questions:
        given = question.source
        if given is None or question.file_id is not None:
            pass
        elif given in resolved:
            question = dataclasses.replace(question, source=resolved[given])
        elif given in unknown:
            closest = difflib.get_close_matches(given, stored, n=1, cutoff=0.0)
            hint = f"the closest is {closest[0]!r}" if closest else "the store has none"
            warnings.append(
                f"line {question.line}: source {given!r} is not a stored source, so the "
                f"question scores as a miss ({hint}; local files are stored under their "
                "absolute paths)"
            )
        out.append(question)
    return out, warnings


def _stored(store: WindowStore, source: str) -> bool:
    return bool(store.list_metadata({"source": source}, limit=1))


def _stored_sources(store: WindowStore, page: int = 5000) -> list[str]:
    """Every stored source, read from each file's first chunk (``chunk_index`` 0)."""
    sources: set[str] = set()
    for where in ({"chunk_index": 0}, None):  # chunks not from WindowSplitter have no index
        offset = 0
        while True:
            metadatas = [m for _, m in store.list_metadata(where, limit=page, offset=offset)]
            sources.update(str(meta["source"]) for meta in metadatas if meta and meta.get("source"))
            if len(metadatas) < page:
                break
            offset += page
        if sources:
            break
    return sorted(sources)
