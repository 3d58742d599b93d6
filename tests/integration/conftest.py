"""Every test under tests/integration is marked ``integration``."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration: `pytest -m "not integration"` is the fast set."""
    folder = Path(__file__).parent
    for item in items:
        if folder in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
