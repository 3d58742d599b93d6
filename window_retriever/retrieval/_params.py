"""The retriever's options, checked in one place: defaults, per-call overrides, and the rules.

``resolve`` turns the retriever's fields and a call's overrides into one frozen :class:`Params`
with every default decided (``fetch_k`` from ``k``, ``expansion`` from ``total_budget``), or
raises a ``ConfigurationError`` that names the argument, the value and the fix. The options
travel whole: a strategy hands the window algorithm its data through ``Params``' methods, the
one place each option is passed on to it.
"""

from __future__ import annotations

import difflib
import functools
import operator
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Literal, SupportsIndex

from pydantic import ValidationError

from window_retriever._errors import ConfigurationError, Option, Part
from window_retriever.core._adaptive import Similarity, plan_adaptive_fetch, select_adaptive
from window_retriever.core._assembly import Assembly, assemble
from window_retriever.core._filters import check_where
from window_retriever.core._windows import (
    MODES,
    Chunk,
    Hit,
    Measure,
    Mode,
    Position,
    Window,
    plan_fetch,
    plan_positions,
)
from window_retriever.retrieval._records import Unexpandable

Expansion = Literal["static", "adaptive"]
EXPANSIONS: tuple[Expansion, ...] = ("static", "adaptive")

CANDIDATES = ("vector", "hybrid", "keyword")

OVERRIDABLE = (
    "candidates",
    "k",
    "fetch_k",
    "window_budget",
    "total_budget",
    "expansion",
    "coherence",
    "floor",
    "diversity",
    "keyword_weight",
    "mode",
    "filter",
    "where_document",
)
"""The options a call may override: ``retriever.invoke(query, k=2, filter={...})``."""

RENAMED = {"budget": "window_budget"}
"""Old names that a caller may still pass, and the option each became."""

Chunks = Mapping[Position, Chunk]
Lengths = tuple[int, int] | None

MOST_RESULTS = 1_000_000_000
"""The most ``k`` and ``fetch_k`` may be: more hits than any collection holds, and few enough
for any store to be asked (Chroma takes at most 2**32 - 1, and the search may double it).
Nothing the retrieval allocates grows with them: only with what the store returns."""


@dataclass(frozen=True, slots=True)
class Params:
    """Every option of one retrieval, defaults decided and checked.

    Its methods call the window algorithm with every option each call takes: the one place
    an option is passed on to it.
    """

    k: int
    fetch_k: int
    window_budget: int
    total_budget: int | None
    expansion: Expansion
    coherence: float
    mode: Mode
    filter: Mapping[str, Any] | None
    where_document: Mapping[str, Any] | None
    length_function: Callable[[str], int]
    unexpandable: Unexpandable
    """The retriever's way with a hit that cannot grow: raise (``strict``) or warn once."""
    keyword_weight: float = 1.0
    """Hybrid only: the keyword leg's weight in the fusion, the vector leg's being 1."""
    candidates: Any = None
    """``"vector"``, ``"hybrid"``, a LangChain retriever whose hits grow into windows, or
    ``None``: hybrid with a total budget where the store has a keyword search, else vector."""
    floor: float | None = None
    """The relevance floor, 0 to 1, or ``None`` (off): see ``ContextWindowRetriever.floor``."""
    diversity: float = 0.0
    """Adaptive only: the MMR weight, 0 (off) to 1: see ``ContextWindowRetriever.diversity``."""

    @property
    def adaptive(self) -> bool:
        return self.expansion == "adaptive"

    def plan_fetch(self, hits: Sequence[Hit], measure: Measure) -> list[Position]:
        """The neighbours static growth may take (``_windows.plan_fetch``)."""
        return plan_fetch(
            hits,
            k=self.k,
            budget=self.window_budget,
            mode=self.mode,
            length_function=self.length_function,
            total_budget=self.total_budget,
            measure=measure,
        )

    def plan_lean(self, hits: Sequence[Hit], typical: int) -> tuple[list[Position], list[Hit]]:
        """:meth:`plan_fetch` for hits not read yet, each ``typical`` long; and those covered."""
        return plan_positions(
            hits,
            dict.fromkeys((hit.chunk.id for hit in hits), typical),
            k=self.k,
            budget=self.window_budget,
            mode=self.mode,
            total_budget=self.total_budget,
            known=set(),
        )

    def assemble(
        self, hits: Sequence[Hit], chunks: Chunks, fetched: Set[Position], measure: Measure
    ) -> Assembly:
        """The hits grown blindly into windows (``_assembly.assemble``)."""
        return assemble(
            hits,
            chunks,
            fetched,
            k=self.k,
            budget=self.window_budget,
            mode=self.mode,
            length_function=self.length_function,
            total_budget=self.total_budget,
            measure=measure,
        )

    def plan_adaptive(
        self, hits: Sequence[Hit], measure: Measure, typical: Lengths = None, *, read: bool = True
    ) -> list[Position]:
        """The neighbours adaptive selection may take (``_adaptive.plan_adaptive_fetch``)."""
        return plan_adaptive_fetch(
            hits,
            total_budget=self.total_budget or 0,
            mode=self.mode,
            length_function=self.length_function,
            window_budget=self.window_budget,
            measure=measure,
            typical=typical,
            read=read,
        )

    def select_adaptive(
        self,
        hits: Sequence[Hit],
        chunks: Chunks,
        relevance: Mapping[str, float],
        measure: Measure,
        unit: float,
        similarity: Similarity | None,
    ) -> tuple[list[Window], bool]:
        """``_adaptive.select_adaptive``; ``unit``: one of cosine similarity in the distances."""
        return select_adaptive(
            hits,
            chunks,
            relevance,
            k=self.k,
            total_budget=self.total_budget or 0,
            window_budget=self.window_budget,
            mode=self.mode,
            length_function=self.length_function,
            coherence=self.coherence,
            diversity=self.diversity * unit,
            similarity=similarity,
            measure=measure,
        )


def resolve(
    fields: Mapping[str, Any],
    overrides: Mapping[str, Any],
    *,
    length_function: Callable[[str], int],
    unexpandable: Unexpandable,
) -> Params:
    """The options of one call: the retriever's ``fields`` with a call's ``overrides``."""
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        msg = (
            f"unknown argument(s) {', '.join(map(repr, unknown))} for "
            f"ContextWindowRetriever.invoke; allowed: {', '.join(OVERRIDABLE)}"
        )
        raise ConfigurationError(msg)
    values = {name: fields[name] for name in OVERRIDABLE} | dict(overrides)
    budget = _positive_int(
        Option("window_budget"), values["window_budget"], "the largest length of one window"
    )
    total_budget = values["total_budget"]
    if total_budget is not None:
        total_budget = _positive_int(
            Option("total_budget"), total_budget, "the most all windows may measure together"
        )
    k = values["k"]
    if k is None:
        k = default_k(total_budget)
    k = _count(Option("k"), k, "the number of windows to return")
    expansion = _expansion(values["expansion"], total_budget)
    coherence = values["coherence"]
    if not _fraction(coherence):
        msg = f"coherence must be a number from 0 to 1, got {coherence!r}"
        raise ConfigurationError(msg)
    fetch_k = values["fetch_k"]
    if fetch_k is None:
        fetch_k = min(2 * k if total_budget is not None else 4 * k, MOST_RESULTS)
    elif _count("fetch_k", fetch_k, "the number of search candidates") < k:
        msg = f"fetch_k must be at least k ({k}), got {fetch_k}; raise fetch_k or omit it"
        raise ConfigurationError(msg)
    mode = values["mode"]
    if mode not in MODES:
        msg = f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}"
        raise ConfigurationError(msg)
    if not callable(length_function):
        msg = "length_function must be callable, e.g. len or a token counter"
        raise ConfigurationError(msg)
    keyword_weight = values["keyword_weight"]
    if not _fraction(keyword_weight, 100.0):
        raise ConfigurationError(
            Option("keyword_weight"), f" must be a number from 0 to 100, got {keyword_weight!r}"
        )
    floor = values["floor"]
    if floor is not None and not _fraction(floor):
        msg = (
            f"floor must be a number from 0 to 1 (a share of the hits' spread of distances, "
            f"1 keeping only the best hit) or None to keep every hit, got {floor!r}"
        )
        raise ConfigurationError(msg)
    diversity = values["diversity"]
    if not _fraction(diversity):
        msg = f"diversity must be a number from 0 (off) to 1, got {diversity!r}"
        raise ConfigurationError(msg)
    return Params(
        floor=None if floor is None else float(floor),
        diversity=float(diversity),
        keyword_weight=float(keyword_weight),
        candidates=_candidates(values["candidates"]),
        k=k,
        fetch_k=fetch_k,
        window_budget=budget,
        total_budget=total_budget,
        expansion=expansion,
        coherence=float(coherence),
        mode=mode,
        filter=_where("filter", values["filter"]),
        where_document=_where("where_document", values["where_document"]),
        length_function=_checked_length(length_function),
        unexpandable=unexpandable,
    )


def default_k(total_budget: int | None) -> int:
    """How many windows by default: 4, or one per 200 of a total budget (at least 4).

    A total budget binds before ``k`` does: 2,000 characters of 400-character chunks fit about
    five whole chunks, so ``k`` must not stop a budget from being spent on more, smaller
    windows where they are worth it.
    """
    return 4 if total_budget is None else min(max(4, total_budget // 200), MOST_RESULTS)


def _candidates(value: Any) -> Any:
    if value is None:
        return None  # decided with the store: see ContextWindowRetriever.candidates
    if isinstance(value, str):
        if value not in CANDIDATES:
            msg = (
                f"candidates must be one of {', '.join(map(repr, CANDIDATES))} or a LangChain "
                f"retriever, got {value!r}"
            )
            raise ConfigurationError(msg)
        return value
    if not (callable(getattr(value, "invoke", None)) and callable(getattr(value, "ainvoke", None))):
        msg = (
            "candidates must be 'vector', 'hybrid' or a LangChain retriever (with invoke and "
            f"ainvoke), got {type(value).__name__}"
        )
        raise ConfigurationError(msg)
    return value


def _expansion(expansion: Any, total_budget: int | None) -> Expansion:
    if expansion is None:
        return "adaptive" if total_budget is not None else "static"
    if expansion not in EXPANSIONS:
        msg = f"expansion must be one of {', '.join(map(repr, EXPANSIONS))}, got {expansion!r}"
        raise ConfigurationError(msg)
    if expansion == "adaptive" and total_budget is None:
        raise ConfigurationError(
            Option("expansion", "adaptive"),
            " shares one budget between windows: give ",
            Option("total_budget"),
            " (e.g. ",
            Option("total_budget", 2000),
            "), or use ",
            Option("expansion", "static"),
        )
    return expansion  # type: ignore[no-any-return]


def _where(name: str, value: Any) -> Mapping[str, Any] | None:
    """A Chroma filter, checked; ``{}`` filters nothing, as ``None`` does."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        msg = f"{name} must be a dict (a Chroma filter) or None, got {value!r}"
        raise ConfigurationError(msg)
    if not value:
        return None
    if name == "filter":
        try:
            check_where(value)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
    return value


def _fraction(value: Any, most: float = 1.0) -> bool:
    """A number from 0 to ``most`` (not a bool, not NaN)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0.0 <= value <= most


def _positive_int(name: Part, value: Any, meaning: str) -> int:
    """``value`` if it is a positive integer; ``name``: the option, as data where it is one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(name, f" ({meaning}) must be a positive integer, got {value!r}")
    return value


def _count(name: Part, value: Any, meaning: str) -> int:
    """A positive integer of at most :data:`MOST_RESULTS` (``k``, ``fetch_k``)."""
    count = _positive_int(name, value, meaning)
    if count > MOST_RESULTS:
        raise ConfigurationError(
            name,
            f" ({meaning}) must be at most {MOST_RESULTS:,}, got {count!r}; pass "
            f"{MOST_RESULTS:,} or less (more than the store holds is fine: all of it comes back)",
        )
    return count


class LengthFunctionError(ConfigurationError, TypeError):
    """A ``length_function`` returned no integer: a ``TypeError`` too, as it was before."""


def _checked_length(length_function: Callable[[str], int]) -> Callable[[str], int]:
    """``length_function`` with each value it returns checked: an int, 0 or more.

    The one place its values are checked: every budget measures through it (``len``, which
    returns nothing else, is left as it is). A negative count would buy room in a budget, a
    float or a string would break its sums: either raises a ``ConfigurationError`` that names
    the value and the text it measured.
    """
    if length_function is len:
        return len

    @functools.wraps(length_function)
    def counted(text: str) -> int:
        value = length_function(text)
        count = _whole(value)
        if count is not None and count >= 0:
            return count
        shown = text if len(text) <= 40 else text[:40] + "..."
        msg = (
            f"length_function must return an int, 0 or more (a count of characters or "
            f"tokens), got {value!r} ({type(value).__name__}) for the text {shown!r}; "
            f"return a whole count, e.g. len(text) or len(tokenizer.encode(text))"
        )
        raise (LengthFunctionError if count is None else ConfigurationError)(msg)

    return counted


def _whole(value: object) -> int | None:
    """``value`` as an int if it is one (numpy's integers too; not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, SupportsIndex) and type(value).__name__ not in ("bool_", "bool"):
        try:
            return operator.index(value)
        except TypeError:
            return None
    return None


def refused(error: ValidationError, known: list[str]) -> ConfigurationError:
    """The constructor's arguments refused: the options' own error, else pydantic's, reworded.

    A ``ConfigurationError`` raised while pydantic validates (by :func:`resolve`) comes back
    as it was raised, with the options it names as data, so a front end can say them its way.
    """
    details = error.errors()
    if len(details) == 1:
        raised = (details[0].get("ctx") or {}).get("error")
        if isinstance(raised, ConfigurationError):
            return raised
    return ConfigurationError(describe(error, known))


def describe(error: ValidationError, known: list[str]) -> str:
    """Pydantic's complaint about the constructor's arguments, one line, with the fix."""
    parts = []
    for detail in error.errors():
        location = ".".join(str(part) for part in detail["loc"])
        if detail["type"] == "extra_forbidden":
            parts.append(_unknown(location, known))
            continue
        message = str(detail["msg"]).removeprefix("Value error, ")
        parts.append(f"argument {location!r}: {message}" if location else message)
    return "; ".join(parts)


def _unknown(name: str, known: list[str]) -> str:
    if name in RENAMED:
        return f"argument {name!r} is now {RENAMED[name]!r}; pass {RENAMED[name]}= instead"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
    return f"unknown argument {name!r} for ContextWindowRetriever{hint}"
