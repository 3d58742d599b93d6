"""The house has one arrow direction: the package's imports form no cycle and go down the layers.

The import graph is read from the source (every ``import`` and ``from ... import`` of
``window_retriever.*``, at module level, inside functions and under ``TYPE_CHECKING``: an
import deferred to the first call is still an arrow). The layers, lowest first, are drawn in
``docs/CONTRIBUTING.md``; a module may import its own layer or the ones below, never above.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "window_retriever"

RETRIEVAL = (
    "",
    "._adaptive_strategy",
    "._candidates",
    "._params",
    "._plan",
    "._pool",
    "._records",
    "._retriever",
    "._stand_ins",
    "._strategies",
)
INGEST = (
    "",
    "._headers",
    "._ingest",
    "._loaders",
    "._pipeline",
    "._prune",
    "._splitter",
    "._stamp",
    "._web",
    "._write",
)
LAYERS: dict[str, tuple[str, ...]] = {
    # plain data in, plain data out: the standard library only
    "core": (
        "_data",
        "_version",
        "core",
        "core._adaptive",
        "core._assembly",
        "core._filters",
        "core._fusion",
        "core._ids",
        "core._query_weight",
        "core._windows",
    ),
    # every module may raise the library's errors
    "errors": ("_errors",),
    # the contract a store keeps, and what stands beside it: LangChain types allowed
    "contract": ("_embeddings", "citations", "stores._protocol"),
    # the keyword index beside a store: it reaches the collection through its own protocol
    "keywords": (
        "keywords",
        "keywords._engine",
        "keywords._index",
        "keywords._lifecycle",
        "keywords._rows",
    ),
    # the stores: the only modules that know Chroma
    "stores": (
        "stores",
        "stores._adapters",
        "stores._address",
        "stores._chroma",
        "stores._chroma_errors",
        "stores._chroma_http",
        "stores._chroma_keywords",
        "stores._memory",
        "stores._open",
    ),
    # the retriever and ingestion: siblings, neither imports the other (checked below)
    "steps": (*(f"retrieval{m}" for m in RETRIEVAL), *(f"ingestion{m}" for m in INGEST)),
    # what is built on the retriever
    "uses": (
        "evaluation",
        "evaluation.configs",
        "evaluation.counting",
        "evaluation.metrics",
        "evaluation.questions",
        "evaluation.report",
        "evaluation.runner",
        "plotting",
    ),
    # the command line: nothing in the library imports it
    "cli": (
        "__main__",
        "cli",
        "cli._commands",
        "cli._interrupt",
        "cli._lock",
        "cli._main",
        "cli._parser",
        "cli._terminal",
    ),
    # the public names, each imported on first use; no module imports the package back
    "front": ("",),
}
PURE = LAYERS["core"]
RETRIEVER = tuple(f"retrieval{m}" for m in RETRIEVAL)
INGESTION = tuple(f"ingestion{m}" for m in INGEST)
STORE_CLIENTS = {
    # the third-party packages only the store layers may import, and who imports them today
    "chromadb": {
        "stores._chroma",
        "stores._chroma_errors",
        "stores._chroma_http",
        "stores._chroma_keywords",
        "stores._open",
    },
    "langchain_chroma": {"stores._open", "stores._adapters"},
    "tantivy": {"keywords._engine"},
}


def module_name(path: Path) -> str:
    """``window_retriever/stores/_chroma.py`` -> ``_chroma``; the package itself -> ``""``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every absolute module name the tree imports (``from a import b`` gives ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the module's package
                here = ["window_retriever", *name.split(".")] if name else ["window_retriever"]
                base = here if is_package else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def read_graph(package: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The package's own arrows (module -> modules it imports) and its third-party imports."""
    sources = {module_name(path): path for path in sorted(package.rglob("*.py"))}
    own: dict[str, set[str]] = {}
    third: dict[str, set[str]] = {}
    for name, path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = imported(tree, name, path.name == "__init__.py")
        ours = {n for n in names if n == "window_retriever" or n.startswith("window_retriever.")}
        local = {n.removeprefix("window_retriever").removeprefix(".") for n in ours}
        own[name] = (local & set(sources)) - {name}
        third[name] = {n.split(".")[0] for n in names - ours} - {"__future__"}
    return own, third


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


GRAPH, THIRD_PARTY = read_graph(PACKAGE)
LAYER_OF = {module: rank for rank, layer in enumerate(LAYERS.values()) for module in layer}
LAYER_NAME = {module: name for name, layer in LAYERS.items() for module in layer}


def show(module: str) -> str:
    return f"window_retriever.{module}" if module else "window_retriever"


def test_the_graph_is_read() -> None:
    """A guard on the reader: it sees deferred, relative and package-level imports."""
    assert "retrieval._retriever" in GRAPH[""]  # under TYPE_CHECKING in __init__
    assert "cli._parser" in GRAPH["cli._main"]  # inside main()
    assert "evaluation.configs" in GRAPH["evaluation"]
    assert "stores._open" in GRAPH["stores._chroma_errors"]
    tree = ast.parse("from . import _windows\nfrom .. import _ids\ndef f():\n    import x.y\n")
    assert imported(tree, "evaluation.metrics", False) >= {
        "window_retriever.evaluation._windows",
        "window_retriever._ids",
        "x.y",
    }


def test_no_import_cycle() -> None:
    assert [[show(module) for module in cycle] for cycle in cycles(GRAPH)] == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_layer() -> None:
    """A new module takes its place in LAYERS (and in the picture in CONTRIBUTING.md)."""
    assert sorted(set(GRAPH) - set(LAYER_OF)) == []
    assert sorted(set(LAYER_OF) - set(GRAPH)) == []  # no layer names a module that is gone


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{show(module)} ({LAYER_NAME[module]}) imports {show(target)} ({LAYER_NAME[target]})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if LAYER_OF[target] > LAYER_OF[module]
    ]
    assert upward == []


def test_the_pure_core_imports_only_the_standard_library() -> None:
    impure = {
        show(module): sorted(THIRD_PARTY[module] - set(sys.stdlib_module_names))
        for module in PURE
        if THIRD_PARTY[module] - set(sys.stdlib_module_names)
    }
    assert impure == {}


def test_the_retriever_and_ingestion_do_not_import_each_other() -> None:
    crossing = [
        f"{show(module)} imports {show(target)}"
        for group, other in ((RETRIEVER, INGESTION), (INGESTION, RETRIEVER))
        for module in group
        for target in sorted(GRAPH[module] & set(other))
    ]
    assert crossing == []


def test_the_retriever_steps_speak_the_protocol_not_a_store() -> None:
    """Candidates and strategies see requests and answers; only the class picks the adapter."""
    steps = [m for m in RETRIEVER if m != "retrieval._retriever"]
    stores = set(LAYERS["stores"]) | set(LAYERS["keywords"])
    assert {show(m): sorted(GRAPH[m] & stores) for m in steps} == {show(m): [] for m in steps}


@pytest.mark.parametrize("package", sorted(STORE_CLIENTS))
def test_only_the_store_layer_imports_store_clients(package: str) -> None:
    importers = {module for module, names in THIRD_PARTY.items() if package in names}
    allowed = set(LAYERS["stores"]) | set(LAYERS["keywords"])
    assert importers <= allowed, sorted(importers - allowed)
    assert importers == STORE_CLIENTS[package]


def test_the_options_reach_the_window_algorithm_in_one_place() -> None:
    """Only ``Params`` calls the algorithm's entry points: a new option is passed on there, once.

    The strategies call ``params.assemble(...)``, ``params.plan_fetch(...)`` and the like, not
    the core with the options copied out field by field at each call site.
    """
    entries = {"assemble", "plan_fetch", "plan_positions", "plan_adaptive_fetch", "select_adaptive"}
    callers = {
        module_name(path)
        for path in (PACKAGE / "retrieval").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("window_retriever.core")
        and entries & {alias.name for alias in node.names}
    }
    assert callers == {"retrieval._params"}
