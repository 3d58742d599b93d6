"""The configuration language: ``plain[:OPTION=VALUE;...]`` and ``window[:...]``, comma-separated.

Each names a retrieval that :func:`~window_retriever.evaluation.runner.make_retrieve` builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from window_retriever._errors import ConfigurationError
from window_retriever.retrieval._retriever import OVERRIDABLE

DEFAULT_CONFIGS = "plain,window"


@dataclass(frozen=True, slots=True)
class Config:
    """A named configuration, e.g. ``plain`` or ``window:expansion=static;window_budget=600``."""

    name: str
    kind: str
    options: Mapping[str, str] = field(default_factory=dict)


# The retriever's own per-call argument names (filters come from each question);
# ``total_budget`` defaults to the evaluation budget.
WINDOW_OPTIONS = tuple(name for name in OVERRIDABLE if name not in ("filter", "where_document"))
_WINDOW_HELP = (
    "window[:total_budget=N|none;expansion=adaptive|static;window_budget=N;"
    "mode=both|prev|next;k=N;fetch_k=N;coherence=X;floor=X|none;diversity=X;candidates=vector|hybrid|keyword;keyword_weight=X|auto|auto*X]"
)
AUTO_KEYWORD_WEIGHT = "auto"
"""``keyword_weight=auto`` (or ``auto*X``): the weight chosen per question by
``keyword_weight_for`` from base 1 (or X), twice the base where the question names an
identifier. An evaluation lever (issue 42, item 3), not a retriever option."""


def parse_configs(text: str | Sequence[str]) -> list[Config]:
    """Parse ``"plain,window,window:expansion=static;window_budget=600"``.

    Options follow ``:`` and are separated by ``;``. A ``window`` configuration takes the
    retriever's own argument names; ``total_budget`` defaults to each evaluation budget
    (``total_budget=none`` gives ``k`` windows of ``window_budget`` each, cut at the budget).
    """
    items = [t for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    configs = []
    for item in items:
        kind, _, rest = item.strip().partition(":")
        if kind not in ("plain", "window"):
            msg = (
                f"unknown configuration {kind!r}; use "
                f"plain[:k=N;candidates=vector|hybrid|keyword] or {_WINDOW_HELP}"
            )
            raise ConfigurationError(msg)
        allowed = ("k", "candidates") if kind == "plain" else WINDOW_OPTIONS
        options: dict[str, str] = {}
        for pair in filter(None, rest.split(";")):
            key, sep, value = pair.partition("=")
            if not sep or key not in allowed:
                hint = " (budget= is now window_budget=)" if key == "budget" else ""
                msg = (
                    f"bad option {pair!r} in configuration {item!r}{hint}; "
                    f"options: {', '.join(f'{name}=...' for name in allowed)}"
                )
                raise ConfigurationError(msg)
            if key in ("k", "fetch_k", "window_budget") or (
                key == "total_budget" and value.lower() != "none"
            ):
                number = _int_option(Config(item.strip(), kind), key, value)
                if number < 1:
                    msg = (
                        f"option {key}={value} in configuration {item.strip()!r} must be at least 1"
                    )
                    raise ConfigurationError(msg)
            if key == "keyword_weight" and value.startswith(AUTO_KEYWORD_WEIGHT):
                keyword_weight_base(Config(item.strip(), kind), value)
            elif key in ("coherence", "keyword_weight", "diversity") or (
                key == "floor" and value.lower() != "none"
            ):
                _number_option(Config(item.strip(), kind), key, value)
            choices = {
                "mode": ("both", "next", "prev"),
                "expansion": ("adaptive", "static"),
                "candidates": ("vector", "hybrid", "keyword"),
            }
            if key in choices and value not in choices[key]:
                msg = (
                    f"option {key}={value} in configuration {item.strip()!r} must be one of "
                    f"{', '.join(choices[key])}"
                )
                raise ConfigurationError(msg)
            options[key] = value
        configs.append(Config(name=item.strip(), kind=kind, options=options))
    if not configs:
        raise ConfigurationError("no configurations given; e.g. plain,window")
    return configs


def keyword_weight_base(config: Config, value: str) -> float | None:
    """The base of ``keyword_weight=auto`` (1) or ``auto*X`` (X); ``None`` for a fixed weight."""
    if not value.startswith(AUTO_KEYWORD_WEIGHT):
        return None
    rest = value.removeprefix(AUTO_KEYWORD_WEIGHT)
    if not rest:
        return 1.0
    try:
        if rest.startswith("*"):
            return float(rest[1:])
    except ValueError:
        pass
    msg = (
        f"option keyword_weight={value!r} in configuration {config.name!r} must be a "
        f"number, {AUTO_KEYWORD_WEIGHT} or {AUTO_KEYWORD_WEIGHT}*X"
    )
    raise ConfigurationError(msg)


def _int_option(config: Config, key: str, value: str) -> int:
    return int(_number_option(config, key, value, whole=True))


def _number_option(config: Config, key: str, value: str, *, whole: bool = False) -> float:
    try:
        return int(value) if whole else float(value)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        msg = f"option {key}={value!r} in configuration {config.name!r} must be {kind}"
        raise ConfigurationError(msg) from None
