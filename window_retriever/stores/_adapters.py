"""Where the retriever and ingestion get their store: :func:`store_adapter`.

It wraps a ``langchain_chroma.Chroma`` in ``stores._chroma.ChromaWindowStore`` and passes a
``WindowStore`` through. The protocol's names live in ``stores._protocol``; the public ones are
in ``window_retriever.stores``.
"""

from __future__ import annotations

from typing import Any

from window_retriever._errors import ConfigurationError
from window_retriever.stores._chroma import ChromaWindowStore
from window_retriever.stores._protocol import WindowStore


def store_adapter(vectorstore: Any) -> WindowStore:
    """Wrap ``vectorstore`` in its adapter, or explain which stores are supported.

    A ``langchain_chroma.Chroma`` (a subclass too, whatever methods it adds) gets the Chroma
    adapter; a :class:`WindowStore` is used as it is; anything else is refused.
    """
    if isinstance(vectorstore, WindowStore):
        return vectorstore
    try:
        from langchain_chroma import Chroma
    except ImportError:  # pragma: no cover - langchain-chroma is a dependency
        Chroma = None  # type: ignore[assignment,misc]  # noqa: N806
    if Chroma is not None and isinstance(vectorstore, Chroma):
        return ChromaWindowStore(vectorstore)
    hint = ""
    if callable(getattr(vectorstore, "search", None)) and callable(
        getattr(vectorstore, "fetch", None)
    ):
        hint = " (WindowStore is a base class now: subclass it)"
    msg = (
        f"vectorstore must be a langchain_chroma.Chroma (or a subclass of "
        f"window_retriever.WindowStore), got {type(vectorstore).__name__}{hint}"
    )
    raise ConfigurationError(msg)
