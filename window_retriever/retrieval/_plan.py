"""The route of one retrieval, chosen once, up front, from facts the code declares.

A retrieval's route says which store calls it makes. It is chosen before the first call from
what is known then (:func:`plan`), and changed at most once, visibly, when a call finds that
one of those facts did not hold (:meth:`Route.replan`). The ``window_retriever`` logger says
at DEBUG level which route each retrieval planned and why, and which it took, with its store
calls. The routes, and the store calls of each, are listed in docs/how-it-works.md#routes.

With ``total_budget`` and adaptive expansion (the default), three routes:

- ``stand-ins``: a survey (a search of ids and distances), then one fetch of the chunks chosen
  among the keyword index's stand-ins (``_stand_ins``). Needs a store that searches ids alone
  whose ids name positions, a keyword index that holds a snapshot, a keyword leg (hybrid
  candidates: their keyword search checks the index is current before the stand-ins are
  read), budgets in characters, and a filter decided here.
- ``survey``: a survey, then one fetch of the hits with the neighbours an estimate plans
  (rarely a second, for what the hits' own lengths plan beyond it). Where the above holds but
  for the index, the keyword leg, the length function or the filter. A ``stand-ins`` route
  whose check finds a stand-in that differs from the chunk read re-plans to this one, reusing
  its survey.
- ``read``: a search that reads the hits, then one fetch of their neighbours with their
  vectors (``_strategies._Budgeted``). Where the store cannot search ids alone (nor can
  keyword candidates or another retriever's), or its ids are known not to name positions. A
  survey that finds so (an id of another form, or no vector hit to measure by) re-plans to
  it, once, and searches again.

Static windows (no total budget) take ``lean`` (ids only, the planned neighbours read with the
hits) once a chunk length is known, else ``search``; a lean search that cannot answer re-plans
to ``search``. Static expansion within a total budget always takes ``read``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from window_retriever.core._filters import compile_where
from window_retriever.retrieval._params import Params
from window_retriever.stores._protocol import Held

logger = logging.getLogger("window_retriever")

# Why a call reads its hits: the store (no ``search_ids``) or the candidates (keyword, another
# retriever's, hybrid without a budget) cannot be searched by ids alone.
_NO_SURVEY = (
    "these candidates cannot be searched by ids alone "
    "(that needs the store's search_ids and vector or hybrid candidates)"
)
_NO_LEAN = (
    "these candidates cannot be searched by ids alone "
    "(that needs the store's search_ids and vector candidates)"
)

RouteName = Literal["stand-ins", "survey", "read", "lean", "search"]


@dataclass
class Route:
    """Which store calls one retrieval makes: chosen up front, re-planned at most once.

    The facts it was chosen from are kept, so a user (or a test) can see why.
    """

    name: RouteName
    held: Held | None = None
    """The keyword index this retrieval reads beside the store, taken once, before the first
    call (``WindowStore.held``): the one way it reaches the retrieval. ``None`` when the
    process holds none (or none with a snapshot yet)."""
    reasons: tuple[str, ...] = ()
    """The facts that chose :attr:`name` (for logging)."""
    planned: RouteName | None = None
    """The route first chosen, when it was re-planned (``None`` otherwise)."""
    replanned_because: str | None = None
    store_calls: int = 0
    """Store requests sent so far (searches and fetches; the keyword index's own are not)."""

    def replan(self, name: RouteName, because: str) -> None:
        """Take ``name`` from here on, once; the second re-plan of a retrieval is a bug."""
        if self.planned is not None:
            msg = f"a retrieval re-planned twice ({self.planned} -> {self.name} -> {name})"
            raise AssertionError(msg)
        logger.debug("route %s re-planned to %s: %s", self.name, name, because)
        self.planned, self.name, self.replanned_because = self.name, name, because

    @property
    def label(self) -> str:
        """The route taken: ``"survey"``, or ``"stand-ins>survey"`` where it was re-planned."""
        return self.name if self.planned is None else f"{self.planned}>{self.name}"

    def __str__(self) -> str:
        """One line for the log: ``route stand-ins>survey, 3 store calls (...)``."""
        why = f" ({self.replanned_because})" if self.replanned_because else ""
        calls = "1 store call" if self.store_calls == 1 else f"{self.store_calls} store calls"
        return f"route {self.label}, {calls}{why}"


def snapshot_of(held: Held | None) -> Held | None:
    """``held`` where it holds a snapshot of the collection (it was built), else ``None``."""
    return held if held is not None and held.build() is not None else None


def plan(
    params: Params,
    held: Held | None,
    *,
    surveys: bool,
    locates: bool,
    positions: bool,
    typical: bool,
    keyword_leg: bool,
) -> Route:
    """The route the facts choose (see the module docstring).

    ``held``: the store's keyword index where this process holds one with a snapshot
    (:func:`snapshot_of`), else ``None``; ``surveys`` / ``locates``:
    the candidate source can search ids alone; ``positions``: its ids are not known to name
    anything but positions (``TypicalLength.disabled`` says when they are); ``typical``: a
    chunk length is known, to plan a lean search by; ``keyword_leg``: the source searches
    the keyword index, which checks it is current (``CandidateSource.keyword_leg``).
    """
    if params.total_budget is None:
        if locates and positions and typical:
            return Route("lean", held, ("the store searches ids alone", "a length is known"))
        return Route("search", held, _why_not_lean(locates, positions, typical))
    if not params.adaptive:
        return Route("read", held, ("static expansion",))
    if not surveys:
        return Route("read", held, (_NO_SURVEY,))
    if not positions:
        return Route("read", held, ("the store's ids do not name positions",))
    blocked = _why_no_stand_ins(params, held, keyword_leg)
    if blocked is None:
        return Route("stand-ins", held, ("the keyword index holds every chunk's length",))
    return Route("survey", held, (blocked,))


def _why_no_stand_ins(params: Params, held: Held | None, keyword_leg: bool) -> str | None:
    """Why stand-ins cannot be chosen among before the read, or ``None`` where they can."""
    if held is None:
        return "no keyword index is held in this process yet"
    if not keyword_leg:  # nothing checks the index: a write since would go unseen
        return "no keyword search checks the index is current (vector candidates)"
    if params.length_function is not len:
        return "budgets measure other than characters"
    if params.where_document is not None or compile_where(params.filter) is None:
        return "the filter is one only the store can decide"
    return None


def _why_not_lean(locates: bool, positions: bool, typical: bool) -> tuple[str, ...]:
    if not locates:
        return (_NO_LEAN,)
    if not positions:
        return ("the store's ids do not name positions",)
    return ("no chunk length known yet",)
