"""Evaluation metrics on hand-made cases, the questions reader, configurations and the report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from window_retriever import ConfigurationError, ContextWindowRetriever, WindowSplitter, add_chunks
from window_retriever.evaluation import (
    Piece,
    Question,
    build_context,
    evaluate,
    merge_spans,
    normalize_answer,
    overlap,
    paired_bootstrap,
    parse_configs,
    percentile,
    read_questions,
    score,
)


def q(
    spans: list[tuple[int, int]] = (), answer: str | None = None, source: str = "doc"
) -> Question:  # type: ignore[assignment]
    return Question(line=1, question="?", source=source, answer=answer, gold_spans=tuple(spans))


# ---- spans and contexts ------------------------------------------------------------------------


def test_overlap_and_merge() -> None:
    assert merge_spans([(5, 10), (0, 3), (3, 4), (8, 12)]) == [(0, 4), (5, 12)]
    assert overlap([(0, 10)], [(5, 15)]) == 5
    assert overlap([(0, 10), (20, 30)], [(5, 25)]) == 10
    assert overlap([(0, 10)], [(10, 20)]) == 0
    assert overlap([(0, 10)], [(2, 4), (3, 6)]) == 4  # overlapping context spans count once


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 20)).map(lambda t: (t[0], t[0] + t[1])),
        max_size=6,
    ),
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 20)).map(lambda t: (t[0], t[0] + t[1])),
        max_size=6,
    ),
)
def test_overlap_equals_the_shared_characters(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    chars = lambda spans: {i for s, e in spans for i in range(s, e)}  # noqa: E731
    assert overlap(a, b) == len(chars(a) & chars(b))


def test_context_is_cut_at_the_budget_with_separators_counted() -> None:
    pieces = [
        Piece("a" * 6, "doc", None, 0),
        Piece("b" * 6, "doc", None, 100),
        Piece("c" * 6, "doc", None, 200),
    ]
    context = build_context(pieces, 10)
    assert context.text == "aaaaaa\n\nbb"
    assert len(context.text) == 10
    assert context.spans == (("doc", None, 0, 6), ("doc", None, 100, 102))
    assert context.characters == 8


def test_a_piece_cut_at_the_budget_counts_only_what_is_inside() -> None:
    # windows whose texts stand for collapsed whitespace: each ends past start + len(text)
    pieces = [
        Piece("a" * 6, "doc", None, 0, 9),
        Piece("b" * 6, "doc", None, 100, 109),
        Piece("c" * 6, "doc", None, 200, 209),
    ]
    context = build_context(pieces, 12)
    assert context.text == "aaaaaa\n\nbbbb"
    # the whole first window counts to its end; the cut one only to start + 4 taken
    assert context.spans == (("doc", None, 0, 9), ("doc", None, 100, 104))
    assert context.characters == 10
    result = score(q([(100, 109)]), context)
    assert result.coverage == pytest.approx(4 / 9)
    assert result.full is False


def test_empty_context() -> None:
    context = build_context([], 1000)
    assert context.text == "" and context.spans == ()
    result = score(q([(0, 10)], answer="x"), context)
    assert (result.coverage, result.full, result.precision, result.answer_hit) == (
        0.0,
        False,
        0.0,
        False,
    )


def test_partial_span_overlap_gives_partial_coverage_and_precision() -> None:
    context = build_context([Piece("x" * 20, "doc", None, 10)], 1000)  # covers 10..30
    result = score(q([(0, 20), (25, 35)]), context)  # 30 gold chars, 10 + 5 inside
    assert result.coverage == pytest.approx(15 / 30)
    assert result.full is False
    assert result.precision == pytest.approx(15 / 20)


def test_spans_of_another_source_do_not_count() -> None:
    context = build_context([Piece("x" * 20, "other", None, 0)], 1000)
    assert score(q([(0, 10)]), context).coverage == 0.0


def test_file_id_questions_match_by_file_id() -> None:
    context = build_context([Piece("x" * 20, "s", "f1", 0)], 1000)
    question = Question(line=1, question="?", file_id="f1", gold_spans=((0, 10),))
    result = score(question, context)
    assert result.coverage == 1.0 and result.full is True


def test_answer_hits_are_normalised() -> None:
    context = build_context(
        [Piece("On the 7th of May, 2023 -- they met.", "doc", None, None)], 1000
    )
    assert score(q(answer="7th May 2023"), context).answer_hit is False
    assert score(q(answer="the 7th of May 2023"), context).answer_hit is True
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert score(q(answer="x"), context).coverage is None


def test_bootstrap_and_percentile() -> None:
    mean, low, high = paired_bootstrap([0.1] * 50)
    assert mean == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)
    mean, low, high = paired_bootstrap([1.0, -1.0] * 50)
    assert low < mean < high and mean == pytest.approx(0.0)
    assert percentile([1, 2, 3, 4], 0.5) == 2.5 and percentile([5], 0.95) == 5


def test_the_paired_interval_pairs_each_question_with_itself() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    # question i: gold is 100 characters after a 6-letter word; plain covers 10*c of them
    # (c = 3*i mod 8, shuffled) and finds the answer when i is even; "better" covers 20 more
    # and finds the same answers
    questions = [
        Question(line=i, question=str(i), source=f"s{i}", answer="zebra", gold_spans=((6, 106),))
        for i in range(8)
    ]

    def covering(extra: int) -> Callable[[Question, int], list[Piece]]:
        def retrieve(question: Question, budget: int) -> list[Piece]:
            i = int(question.question)
            text = ("zebra " if i % 2 == 0 else "horse ") + "x" * (10 * (3 * i % 8) + extra)
            return [Piece(text, question.source, None, 0)]

        return retrieve

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    report = evaluate(
        store,
        questions,
        configs="plain",
        budgets=[1000],
        retrievers={"plain": covering(0), "better": covering(20)},
    )
    plain, better = report.rows
    assert [s.coverage for s in report.per_question["plain@1000"]] == pytest.approx(
        [(3 * i % 8) / 10 for i in range(8)]
    )
    # every paired difference is the same, so the interval has no width
    assert better.coverage_vs_plain == pytest.approx((0.2, 0.2, 0.2))
    assert better.answer_hit_vs_plain == pytest.approx((0.0, 0.0, 0.0))
    assert plain.coverage_vs_plain is None


# ---- questions file and configurations --------------------------------------------------------


def test_bad_lines_are_reported_by_number_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    lines = [
        {"question": "ok", "source": "a", "answer": "x"},
        "not json",
        {"question": "", "answer": "x"},
        {"question": "no gold"},
        {"question": "spans without source", "gold_spans": [[0, 5]]},
        {"question": "bad span", "source": "a", "gold_spans": [[5, 2]]},
        {"question": "ok too", "file_id": "f", "gold_spans": [[0, 5]]},
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    questions, problems = read_questions(path)
    assert [x.line for x in questions] == [1, 7]
    assert problems == [
        "line 2: not JSON (Expecting value)",
        'line 3: "question" must be a non-empty string',
        'line 4: needs "gold_spans" or "answer" to score against',
        'line 5: "gold_spans" need the "source" or "file_id" they point into',
        'line 6: "gold_spans" must be a list of [start, end] with 0 <= start < end',
    ]


def test_configurations_parse_and_bad_ones_are_named() -> None:
    configs = parse_configs("plain,window,window:window_budget=300;mode=next;expansion=static")
    assert [c.kind for c in configs] == ["plain", "window", "window"]
    assert dict(configs[2].options) == {
        "window_budget": "300",
        "mode": "next",
        "expansion": "static",
    }
    with pytest.raises(ConfigurationError, match=r"budget= is now window_budget="):
        parse_configs("window:budget=300")
    with pytest.raises(ConfigurationError, match="bad option 'mode=next' in configuration 'plain"):
        parse_configs("plain:mode=next")
    with pytest.raises(ConfigurationError, match="unknown configuration 'bm25'"):
        parse_configs("plain,bm25")
    with pytest.raises(ConfigurationError, match="bad option 'size=3'"):
        parse_configs("window:size=3")


# ---- a whole run on a small store ---------------------------------------------------------------


def test_evaluate_compares_configurations_at_equal_budgets(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    text = " ".join(f"Sentence {i:02d} is about topic {i}." for i in range(60))
    store = make_store()
    splitter = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=80, chunk_overlap=10))
    chunks = splitter.split_documents([Document(page_content=text, metadata={"source": "doc"})])
    add_chunks(store, chunks)
    target = chunks[5]
    start = target.metadata["start_index"]
    question = Question(
        line=1,
        question=target.page_content,
        source="doc",
        answer="topic 7",
        gold_spans=((start, start + 200),),
    )
    configs = "plain,window:window_budget=240;expansion=static;candidates=vector"
    report = evaluate(store, [question], configs=configs, budgets=[200, 400])
    assert [(r.config, r.budget) for r in report.rows] == [
        ("plain", 200),
        ("window:window_budget=240;expansion=static;candidates=vector", 200),
        ("plain", 400),
        ("window:window_budget=240;expansion=static;candidates=vector", 400),
    ]
    for row in report.rows:
        assert row.characters <= row.budget
        assert row.store_calls == (1.0 if row.config == "plain" else 2.0)
    # an independent oracle: the same contexts built by hand, gold measured as sets of offsets
    gold = set(range(start, start + 200))
    for row in report.rows:
        if row.config == "plain":
            docs = store.similarity_search(question.question, k=max(4, row.budget // 100))
        else:
            retriever = ContextWindowRetriever(
                vectorstore=store,
                window_budget=240,
                expansion="static",
                total_budget=row.budget,
                candidates="vector",
            )
            docs = retriever.invoke(question.question, k=max(4, row.budget // 200))
        covered: set[int] = set()
        used = 0
        for doc in docs:
            room = row.budget - used - (2 if used else 0)
            if room <= 0:
                break
            taken = min(room, len(doc.page_content))
            first = doc.metadata["start_index"]
            covered |= set(range(first, first + taken))
            used += taken + (2 if used else 0)
        assert row.coverage == pytest.approx(len(covered & gold) / len(gold)), row.config
        assert row.full_coverage == float(gold <= covered)
        assert row.answer_hit == float("topic 7" in " ".join(d.page_content for d in docs))
    assert report.rows[0].coverage_vs_plain is None and report.rows[1].coverage_vs_plain is not None
    mine, base = report.rows[1].coverage, report.rows[0].coverage
    assert report.rows[1].coverage_vs_plain[0] == pytest.approx(mine - base)  # type: ignore[index,operator]
    table = report.table()
    assert table.splitlines()[0].startswith("| config | budget | coverage")
    plot = tmp_path / "c.png"
    report.plot(plot)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(json.dumps(report.to_json()))["rows"][0]["config"] == "plain"


def test_a_line_that_is_not_utf8_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(
        b'{"question": "one?", "answer": "a"}\n'
        b'{"question": "caf\xe9?", "answer": "b"}\n'
        b'{"question": "three?", "answer": "c"}\n'
    )
    questions, problems = read_questions(path)
    assert [q.question for q in questions] == ["one?", "three?"]
    assert problems == ["line 2: not UTF-8 (byte 18)"]


def test_a_window_with_collapsed_whitespace_covers_its_whole_span(
    make_store: Callable[..., Chroma],
) -> None:
    text = "A" * 50 + "\n\n\n\n" + "B" * 50 + "\n\n\n\n" + "C" * 50
    store = make_store()
    splitter = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=60, chunk_overlap=0))
    add_chunks(
        store, splitter.split_documents([Document(page_content=text, metadata={"source": "d"})])
    )
    question = Question(line=1, question="C" * 50, source="d", gold_spans=((108, 158),))
    report = evaluate(
        store,
        [question],
        configs="plain,window:total_budget=none;window_budget=400;expansion=static",
        budgets=[400],
    )
    window = report.rows[1]
    assert window.coverage == 1.0 and window.full_coverage == 1.0


def test_plain_alone_runs_on_any_langchain_store() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_documents([Document(page_content="bees make honey", metadata={"source": "b"})])
    question = Question(line=1, question="bees make honey", answer="honey")
    report = evaluate(store, [question], configs="plain", budgets=[100])
    assert report.rows[0].answer_hit == 1.0


def test_a_bad_mode_or_expansion_is_refused_when_parsed() -> None:
    with pytest.raises(ConfigurationError, match=r"option mode=sideways .* must be one of both"):
        parse_configs("window:mode=sideways")
    with pytest.raises(ConfigurationError, match=r"option expansion=bogus .* must be one of"):
        parse_configs("window:expansion=bogus")


def test_resolve_sources_reads_relative_paths_and_names_the_closest_stored_source(
    make_store: Callable[..., Chroma], tmp_path: Path
) -> None:
    from window_retriever.evaluation import resolve_sources

    store = make_store()
    stored = str(tmp_path / "pages" / "errors.html")
    docs = [Document(page_content="Errors and exceptions.", metadata={"source": stored})]
    add_chunks(store, WindowSplitter().split_documents(docs))
    questions = [
        Question(line=1, question="?", source=stored, answer="x"),
        Question(line=2, question="?", source="pages/errors.html", answer="x"),
        Question(line=3, question="?", source="pages/eror.html", answer="x"),
        Question(line=4, question="?", source="gone", file_id="f", answer="x"),
    ]
    resolved, warnings = resolve_sources(store, questions, cwd=tmp_path)
    assert [q.source for q in resolved] == [stored, stored, "pages/eror.html", "gone"]
    assert warnings == [
        "line 3: source 'pages/eror.html' is not a stored source, so the question scores as a "
        f"miss (the closest is {stored!r}; local files are stored under their absolute paths)"
    ]
    assert resolve_sources(object(), questions) == (questions, [])  # a store it cannot list


def test_an_empty_source_is_a_bad_line_and_warns_no_other_question(
    tmp_path: Path, make_store: Callable[..., Chroma]
) -> None:
    from window_retriever.evaluation import resolve_sources

    path = tmp_path / "q.jsonl"
    path.write_text(
        '{"question": "deja vu", "answer": "vu"}\n'
        '{"question": "x", "source": "", "answer": "x"}\n'
        '{"question": "y", "source": "/docs/missing.txt", "answer": "y"}\n',
        encoding="utf-8",
    )
    questions, problems = read_questions(path)
    assert [q.question for q in questions] == ["deja vu", "y"]
    assert (
        len(problems) == 1
        and "line 2" in problems[0]
        and '"source" must not be empty' in problems[0]
    )
    store = make_store()
    add_chunks(
        store,
        WindowSplitter().split_documents([Document("vu", metadata={"source": "/docs/a.txt"})]),
    )
    _, warnings = resolve_sources(store, questions)
    assert len(warnings) == 1 and warnings[0].startswith("line 3: source '/docs/missing.txt'")


def test_keyword_weight_auto_chooses_the_weight_by_question(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``keyword_weight=auto`` passes each question its own weight; ``auto*X`` scales it."""
    from window_retriever.evaluation import make_retrieve, runner

    calls: list[tuple[str, dict[str, object]]] = []

    class Spy:
        def __init__(self, **options: object) -> None:
            assert "keyword_weight" not in options

        def invoke(self, query: str, **overrides: object) -> list[Document]:
            calls.append((query, overrides))
            return []

    monkeypatch.setattr(runner, "ContextWindowRetriever", Spy)
    code, prose = "What does json.dumps return?", "What does the encoder return?"
    for text, weights in (
        ("window:keyword_weight=auto", (2.0, 1.0)),
        ("window:keyword_weight=auto*0.75", (1.5, 0.75)),
    ):
        calls.clear()
        retrieve = make_retrieve(parse_configs(text)[0], vectorstore=None)
        for query in (code, prose):
            retrieve(Question(line=1, question=query, answer="x"), 500)
        assert [(query, o["keyword_weight"]) for query, o in calls] == list(
            zip((code, prose), weights, strict=True)
        )
    with pytest.raises(
        ConfigurationError, match=r"keyword_weight='auto\*x' .* must be a number, auto"
    ):
        parse_configs("window:keyword_weight=auto*x")
    with pytest.raises(ConfigurationError, match=r"must be a number, auto or auto\*X"):
        parse_configs("window:keyword_weight=automatic")
