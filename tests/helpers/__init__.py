"""What test modules share: a test module imports from here, never from another test module.

``stores``: the spy on store calls, the keyword index's clock, small stores. ``servers``:
Chroma servers, a credential-checking proxy, scripts in new processes. ``pages``: the example
pages and synthetic notes. ``corpora``: conversations and texts with embeddings made for them.
``windows``: files of chunks for the window algorithm. ``filters``: records and random filters
at the edges of Chroma's types.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[2]
"""The repository."""
