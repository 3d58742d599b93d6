"""The keyword leg's weight chosen by the query: more weight where the query names an identifier.

Issue 42, item 3: one ``keyword_weight`` for every query moved the dev sets in opposite
directions (2 helped the kernel docs and cost Perl's and Python's). The hypothesis measured
here: a query that names something exactly (a function, an option, a path, an error code, a
variable) is found by its words, and leans on BM25; a question about meaning leans on vectors.

:func:`keyword_weight_for` is a pure, deterministic rule on the query's text alone, with no
threshold fitted to a set: the weight is ``factor * base`` when the query holds at least one
identifier-like token (:func:`identifier_tokens`), else ``base``. An identifier-like token has a
shape prose words do not have:

- code between backticks: ```chomp $cwd```;
- a call: ``system()``, ``madvise(MADV_MERGEABLE)`` (``file(s)`` is prose);
- ``snake_case`` and ``ENV_VARS`` (an underscore inside a word): ``overcommit_memory``,
  ``CONFIG_KSM``, ``__init__``;
- ``CamelCase`` (a lower-case letter followed by an upper-case one): ``ValueError``, ``SysRq``;
- a dotted name: ``json.dump``, ``memory.high``, ``os.path.join`` (not ``e.g.`` or ``3.11``);
  a bare extension: ``.ko``, ``.orig``;
- a package path: ``File::Spec``;
- an option: ``--verbose``, ``-l``, ``-pi`` (not ``built-in`` or ``-2``);
- a setting: ``hugepages=256``, ``mem_type=1``;
- a file path with a leading slash: ``/proc/sys/vm/drop_caches``, ``/etc/modprobe.d``;
- a variable with a sigil: ``$_``, ``$/``, ``@ARGV``, ``%ENV``, ``%pK`` (not ``$100`` or
  ``50%``);
- an errno-style code: ``EINVAL``, ``E2BIG``; a hexadecimal number: ``0x1f``.

Bare acronyms (``CPU``, ``KSM``, ``LGBTQ``) and hyphenated words are not marked: they occur in
questions about meaning as often as in lookups.
"""

from __future__ import annotations

import re

IDENTIFIER_FACTOR = 2.0
"""How much more the keyword leg weighs for a query that names an identifier."""

_PATTERNS: tuple[tuple[str, str], ...] = (
    ("code", r"`[^`\s][^`]*`"),
    ("call", r"\b[A-Za-z_]\w*\((?!s\))"),
    ("snake_case", r"\b\w*[A-Za-z0-9]_\w*|\b_\w+"),
    ("CamelCase", r"\b\w*[a-z][A-Z]\w*"),
    ("dotted", r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b"),
    ("extension", r"(?<![\w.])\.[A-Za-z]\w{0,7}\b"),
    ("package", r"\b\w+::\w+"),
    ("option", r"(?<![\w-])--?[A-Za-z][\w-]*"),
    ("setting", r"\b[A-Za-z_]\w*=[\w\"'./-]"),
    ("path", r"(?<![\w/])/[\w.-]+/[\w./-]*|(?<![\w/])/(?:proc|sys|dev|etc|usr|var|tmp)\b"),
    ("sigil", r"(?<!\w)[$@%](?:[A-Za-z_{]|[/!|@;,.\\0&`'+^])"),
    ("errno", r"\bE[A-Z0-9]{3,}\b"),
    ("hex", r"\b0x[0-9A-Fa-f]+\b"),
)
_IDENTIFIER = re.compile("|".join(f"(?P<{name}>{p})" for name, p in _PATTERNS))
_ABBREVIATIONS = frozenset({"e.g", "i.e", "a.m", "p.m", "etc", "vs"})


def identifier_tokens(query: str) -> list[str]:
    """The identifier-like tokens of ``query``, in order (see the module's docstring)."""
    tokens = []
    for match in _IDENTIFIER.finditer(query):
        token = match.group()
        if match.lastgroup == "dotted" and token.lower() in _ABBREVIATIONS:
            continue
        tokens.append(token)
    return tokens


def keyword_weight_for(query: str, base: float, factor: float = IDENTIFIER_FACTOR) -> float:
    """The keyword leg's weight for ``query``: ``factor * base`` if it names an identifier.

    Args:
        query: The query text.
        base: The weight of a query that names no identifier (the retriever's
            ``keyword_weight``; the vector leg's weight is 1).
        factor: How much more an identifier-like query weighs the keyword leg.

    Returns:
        ``factor * base`` when :func:`identifier_tokens` finds a token in ``query``, else
        ``base``. Deterministic, and a function of the query's text alone.
    """
    return factor * base if identifier_tokens(query) else base
