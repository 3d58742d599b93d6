"""The embedding model a benchmark embeds with, chosen by its ``--embeddings`` option.

``fake`` (the default): ``DeterministicFakeEmbedding``, whose query embedding costs nothing, the
worst case for every ratio against plain search or static windows. ``packaged``: the model the
library ships (``default_embeddings``), which every query then pays for, as a user's does.
"""

from __future__ import annotations

import argparse

from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings


def add_embeddings_option(parser: argparse.ArgumentParser) -> None:
    """``--embeddings fake|packaged`` on ``parser``."""
    parser.add_argument(
        "--embeddings",
        choices=["fake", "packaged"],
        default="fake",
        help="the fake embedding (the query costs nothing: the worst case for the ratios) or "
        "the packaged model (what a user runs; every query is embedded by it)",
    )


def embeddings_named(name: str) -> Embeddings:
    """The model ``--embeddings`` names."""
    if name == "packaged":
        from window_retriever._embeddings import default_embeddings

        return default_embeddings()
    return DeterministicFakeEmbedding(size=384)
