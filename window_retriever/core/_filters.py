"""An evaluator of Chroma's metadata filter language, so neighbours are filtered in Python.

Why: a fetch of neighbours by ids alone is far cheaper than one with a ``where``, which makes
Chroma scan (docs/benchmarks.md#chroma-reads-by-ids-against-a-where). So the retriever fetches
by id and applies the caller's filter here, to exactly the same effect as Chroma would.

"The same effect" is checked, not assumed: a differential property-based test runs random
metadata and filters through Chroma and through :func:`compile_where` and requires identical
answers. The semantics below are Chroma 1.5's, quirks included:

- Types are strict: the int ``0`` does not equal the string ``"0"``, and ``True`` is not ``1``.
- Ints and floats compare as numbers, the way Chroma's SQL does it: an operand becomes one
  int, for the int values, and one float, for the float values, and each comparison is exact.
  An int operand is itself for int values and the nearest float for float values (``2**53 + 1``
  is ``2.0**53``). A float operand is first read as Chroma reads it (:func:`as_chroma_reads`: a
  float in ten is read one unit in the last place off) and, for int values, truncated toward
  zero and clamped to the 64-bit ints (``{"a": {"$gte": 0.5}}`` matches ``a=0``,
  ``{"a": {"$lt": 9.3e18}}`` does not match ``a=2**63 - 1``).
- A missing key, or a list value, never matches ``$eq``, ``$in`` or a comparison, and always
  matches ``$ne`` and ``$nin``.

Chroma reads a float it stores the same way, so what it returns may differ from what was
written (``0.9888481166708001`` comes back ``0.9888481166708``): a predicate decides the
metadata *as read from Chroma*, as the library's callers hold it.

Anything outside that language (``$contains``, a malformed filter, mixed-type ``$in`` lists,
comparisons of strings) is *undecidable* here: :func:`compile_where` returns ``None`` and the
caller must let the store apply the filter itself.
"""

from __future__ import annotations

import math
import operator as _operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]

_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": _operator.gt,
    "$gte": _operator.ge,
    "$lt": _operator.lt,
    "$lte": _operator.le,
}
_COMPARISONS = set(_ORDERS)
_OPERATORS = {"$eq", "$ne", "$in", "$nin"} | _COMPARISONS


# Every metadata operator Chroma 1.5 knows; $contains / $not_contains test list values.
KNOWN_OPERATORS = _OPERATORS | {"$contains", "$not_contains"}


class _UndecidableError(Exception):
    """The filter is outside what this evaluator reproduces exactly."""


def check_where(where: Any, name: str = "filter") -> None:
    """Raise ``ValueError`` naming the rule for a filter that Chroma would reject.

    The rules, as Chroma 1.5 enforces them (checked by a differential test against it): each
    node one key; ``$and`` / ``$or`` lists of two or more filters; known operators; a value,
    ``$eq``, ``$ne``, ``$contains`` and ``$not_contains`` take one string, number or bool;
    ``$gt`` / ``$gte`` / ``$lt`` / ``$lte`` a number; ``$in`` / ``$nin`` a non-empty list of
    one type. Numbers must be finite (no NaN, no infinity) and ints fit in 64 bits (a Chroma
    server refuses bigger ones). Anything it lets through that Chroma still rejects comes back
    as Chroma's own error.
    """
    _check_node(where, name)


def _check_node(node: Any, name: str) -> None:
    if not isinstance(node, Mapping) or len(node) != 1:
        got = "an empty dict" if isinstance(node, Mapping) and not node else repr(node)
        msg = (
            f"{name}: each part must be a dict of exactly one key, e.g. {{'tenant': 'acme'}} or "
            f"{{'$and': [..., ...]}}; got {got}"
        )
        raise ValueError(msg)
    ((key, value),) = node.items()
    if key in ("$and", "$or"):
        if not isinstance(value, list) or len(value) < 2:
            msg = (
                f"{name}: {key} takes a list of two or more filters, got {value!r}; for one "
                "filter, use it without the {key}"
            ).replace("{key}", key)
            raise ValueError(msg)
        for part in value:
            _check_node(part, name)
        return
    if not isinstance(key, str) or key.startswith("$"):
        msg = f"{name}: unknown operator {key!r} at the top; use $and, $or or a metadata key"
        raise ValueError(msg)
    if not isinstance(value, Mapping):
        _check_operand(value, name, repr(key), several="$in")
        return
    if len(value) != 1:
        msg = f"{name}: {key!r} takes one operator, e.g. {{'$gte': 2}}, got {dict(value)!r}"
        raise ValueError(msg)
    ((operator, operand),) = value.items()
    if operator not in KNOWN_OPERATORS:
        known = ", ".join(sorted(KNOWN_OPERATORS))
        msg = f"{name}: unknown operator {operator!r} on {key!r}; Chroma knows {known}"
        raise ValueError(msg)
    where = f"{operator} on {key!r}"
    if operator in _COMPARISONS:
        if _kind(operand) not in ("int", "float"):
            raise ValueError(f"{name}: {where} compares numbers, got {operand!r}")
        _check_operand(operand, name, where)
    elif operator in ("$in", "$nin"):
        _check_list_operand(operand, name, where)
    else:
        _check_operand(operand, name, where, several={"$eq": "$in", "$ne": "$nin"}.get(operator))


_INT64 = range(-(2**63), 2**63)


def _check_operand(operand: Any, name: str, where: str, *, several: str | None = None) -> None:
    """Refuse what Chroma cannot compare: no scalar, NaN, infinity, an int beyond 64 bits."""
    kind = _kind(operand)
    if kind == "other":
        hint = f"; for any of several values, use {several}: [...]" if several else ""
        hint = hint if isinstance(operand, list | tuple) else ""
        msg = f"{name}: {where} takes one string, number or bool, got {operand!r}{hint}"
        raise ValueError(msg)
    if kind == "float" and not math.isfinite(operand):
        msg = f"{name}: {where} got {operand!r}; Chroma takes no NaN or infinite number"
        raise ValueError(msg + ": use a finite one")
    if kind == "int" and operand not in _INT64:
        msg = f"{name}: {where} got {operand}, beyond the 64-bit integers Chroma stores"
        raise ValueError(msg + ": use a smaller number")


def _check_list_operand(operand: Any, name: str, where: str) -> None:
    if not isinstance(operand, list) or not operand:
        raise ValueError(f"{name}: {where} takes a non-empty list, got {operand!r}")
    for item in operand:
        if _kind(item) == "other":
            msg = f"{name}: {where} takes a list of strings, numbers or bools, got {operand!r}"
            raise ValueError(msg)
        _check_operand(item, name, where)
    if len({_kind(item) for item in operand}) > 1:
        msg = (
            f"{name}: {where} takes values of one type (all strings, all ints, all floats or "
            f"all bools), got {operand!r}"
        )
        raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One test of one metadata key: ``predicate`` reads ``key`` and nothing else.

    So it can be decided once per distinct value of the key (``predicate({key: value})``, and
    ``predicate({})`` for a record without the key) instead of once per record.
    """

    key: str
    predicate: Predicate


@dataclass(frozen=True, slots=True)
class Branch:
    """``$and`` (``every``) or ``$or`` of its parts; no parts passes every record."""

    every: bool
    parts: tuple[Leaf | Branch, ...]


Tree = Leaf | Branch


def compile_tree(where: Mapping[str, Any] | None) -> Tree | None:
    """Compile a Chroma ``where`` filter into its tree of one-key tests.

    Args:
        where: A Chroma metadata filter, or ``None`` for no filter.

    Returns:
        The tree, which answers exactly as Chroma would (:func:`compile_where` is its
        predicate), or ``None`` when the filter cannot be decided here.
    """
    if where is None:
        return Branch(every=True, parts=())
    try:
        return _compile(where)
    except _UndecidableError:
        return None


def compile_where(where: Mapping[str, Any] | None) -> Predicate | None:
    """Compile a Chroma ``where`` filter into a predicate over a metadata mapping.

    Args:
        where: A Chroma metadata filter, or ``None`` for no filter.

    Returns:
        A predicate that answers exactly as Chroma would, or ``None`` when the filter cannot
        be decided here (the store must apply it).
    """
    tree = compile_tree(where)
    return None if tree is None else predicate_of(tree)


def predicate_of(tree: Tree) -> Predicate:
    """The predicate of a compiled tree: a metadata mapping in, whether it passes out."""
    if isinstance(tree, Leaf):
        return tree.predicate
    parts = [predicate_of(part) for part in tree.parts]
    if not parts:
        return _always
    if tree.every:
        return lambda metadata: all(part(metadata) for part in parts)
    return lambda metadata: any(part(metadata) for part in parts)


def _always(metadata: Mapping[str, Any]) -> bool:
    return True


def _compile(node: Any) -> Tree:
    if not isinstance(node, Mapping) or len(node) != 1:
        raise _UndecidableError
    ((key, value),) = node.items()
    if key in ("$and", "$or"):
        if not isinstance(value, list) or len(value) < 2:
            raise _UndecidableError
        return Branch(every=key == "$and", parts=tuple(_compile(part) for part in value))
    if not isinstance(key, str) or key.startswith("$"):
        raise _UndecidableError
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise _UndecidableError
        ((operator, operand),) = value.items()
    else:
        operator, operand = "$eq", value
    return Leaf(key, _leaf(key, operator, operand))


def _leaf(key: str, operator: Any, operand: Any) -> Predicate:
    if operator not in _OPERATORS:
        raise _UndecidableError
    if operator in _COMPARISONS:
        if _kind(operand) not in ("int", "float"):
            raise _UndecidableError
        _check_scalar(operand)
        test = _ordered(_ORDERS[operator], _number(operand))
        return lambda metadata: test(metadata.get(key))
    if operator in ("$in", "$nin"):
        operands = _check_list(operand)
    else:
        _check_scalar(operand)
        operands = [operand]
    equal = _equality(operands)
    if operator in ("$eq", "$in"):
        return lambda metadata: equal(metadata.get(key))
    return lambda metadata: not equal(metadata.get(key))


@dataclass(frozen=True, slots=True)
class _Number:
    """A number operand as Chroma compares it: ``whole`` with int values, ``real`` with floats."""

    whole: int
    real: float


def _number(operand: int | float) -> _Number:
    """Chroma's two forms of an operand (``sqlite_metadata.rs``, Rust's ``as`` casts).

    An int ``i`` is ``(i, i as f64)``: the nearest float, ties to even, as Python's
    ``float(i)``. A float is read first (:func:`as_chroma_reads`), then ``(f as i64, f)``:
    truncated toward zero and clamped to the 64-bit ints.
    """
    if _kind(operand) == "int":
        return _Number(int(operand), float(operand))
    real = as_chroma_reads(float(operand))
    return _Number(min(max(math.trunc(real), -(2**63)), 2**63 - 1), real)


def _equality(operands: list[Any]) -> Callable[[Any], bool]:
    """Whether a metadata value equals one of ``operands`` (all of one kind) as Chroma decides."""
    kind = _kind(operands[0])
    if kind in ("int", "float"):
        numbers = [_number(operand) for operand in operands]
        wholes = frozenset(number.whole for number in numbers)
        reals = frozenset(number.real for number in numbers)

        def equal(value: Any) -> bool:
            value_kind = _kind(value)  # by kind: True == 1 in Python, not in Chroma
            if value_kind == "int":
                return value in wholes
            return value_kind == "float" and value in reals

        return equal
    same = frozenset(operands)
    if kind == "str":  # the common case (tenants, sources)
        return lambda value: isinstance(value, str) and value in same
    return lambda value: isinstance(value, bool) and value in same


def _ordered(order: Callable[[Any, Any], bool], number: _Number) -> Callable[[Any], bool]:
    """Whether a metadata value stands in ``order`` to ``number`` as Chroma decides."""

    def test(value: Any) -> bool:
        kind = _kind(value)
        if kind == "int":
            return order(value, number.whole)
        return kind == "float" and order(value, number.real)

    return test


_POWERS_OF_TEN = tuple(float(f"1e{power}") for power in range(309))


def as_chroma_reads(number: float) -> float:
    """The float Chroma 1.5.9 compares when a filter holds ``number``.

    The Python client writes the shortest repr (``json.dumps``; over HTTP ``orjson``, whose
    digits are the same) and Chroma reads it with serde_json's fast parse (built without
    ``float_roundtrip``): the digits as one integer, rounded to a float, then multiplied or
    divided by one power of ten, rounded again. Two roundings: for about one float in ten
    the result is one unit in the last place off (``0.9888481166708001`` is read
    ``0.9888481166708``, ``2.0**63 - 1024`` is read ``2.0**63``). Reproduced here step by step,
    with the same IEEE operations. A float metadata value is read so when it is stored (twice
    on a server: from the request, then from its log).
    """
    text = float.__repr__(abs(number))
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    # at most 17 significant digits and a trailing "0": never the u64 overflow serde handles
    read = float(int(whole + fraction))
    power = int(exponent or 0) - len(fraction)
    while power < -308 and read:  # beyond serde's table of powers: by 1e308 first
        read /= 1e308
        power += 308
    if power >= 0:  # at most 292: the largest floats are read finite (checked to the top)
        read *= _POWERS_OF_TEN[power]
    elif power >= -308:
        read /= _POWERS_OF_TEN[-power]
    return math.copysign(read, number)


def _kind(value: Any) -> str:
    # bool before int: in Python, True is an int; in Chroma it is its own type.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "other"


def _check_scalar(operand: Any) -> None:
    """A value Chroma decides (NaN, infinities and ints beyond 64 bits are left to it)."""
    kind = _kind(operand)
    if (
        kind == "other"
        or (kind == "float" and not math.isfinite(operand))
        or (kind == "int" and not -(2**63) <= operand < 2**63)
    ):
        raise _UndecidableError


def _check_list(operand: Any) -> list[Any]:
    if not isinstance(operand, list) or not operand:
        raise _UndecidableError
    kinds = {_kind(item) for item in operand}
    if len(kinds) != 1:
        raise _UndecidableError
    for item in operand:
        _check_scalar(item)
    return list(operand)
