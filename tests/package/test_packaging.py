"""The package ships every file it needs, declared as setuptools wants it: a quiet build.

setuptools warns (a ``BuildBackendWarning`` of about 40 lines on ``pip install -e .``, so on
``make demo``) for a folder of data files below a package that is not itself a declared
package, and will stop shipping it. Every folder of the package is declared, and its data
files are matched by its own ``package-data`` patterns.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "window_retriever"


def _setuptools() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["setuptools"]  # type: ignore[no-any-return]


def _folders() -> dict[str, Path]:
    """Every folder of the package that holds a file, by its dotted name."""
    folders = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            folder = path.parent.relative_to(ROOT)
            folders[".".join(folder.parts)] = path.parent
    return folders


def test_every_folder_of_the_package_is_a_declared_package() -> None:
    declared = set(_setuptools()["packages"])  # type: ignore[call-overload]
    assert sorted(set(_folders()) - declared) == []
    assert "window_retriever._data.pages" in declared  # the demo's pages


def test_every_data_file_is_matched_by_its_own_packages_patterns() -> None:
    patterns: dict[str, list[str]] = _setuptools()["package-data"]  # type: ignore[assignment]
    unshipped = []
    for name, folder in _folders().items():
        for path in sorted(folder.iterdir()):
            shipped = any(fnmatch.fnmatch(path.name, p) for p in patterns.get(name, []))
            if path.is_file() and path.suffix != ".py" and not shipped:
                unshipped.append(str(path.relative_to(ROOT)))
    assert unshipped == []
