"""The exceptions of window_retriever: one root type, one subclass per kind of failure.

A message names the options it concerns as data, not only as words. It is built of text and
:class:`Option` mentions (and :class:`Command` mentions, for a fix that is "run this first")::

    raise ConfigurationError(Option("timeout"), f" must be a positive number, got {timeout!r}")

``str(error)`` says it in the library's words (``timeout must be ...``); ``error.options``
lists the options it names (``("timeout",)``); a front end says the same message in its own
words with ``error.message.render(say)``, as the command line does with its table of flags
(``--chroma-timeout must be ...``). Rewording the text changes no front end's option names.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

OptionName = Literal[
    "collection",
    "database",
    "db",
    "expansion",
    "file_id_keys",
    "k",
    "keyword_weight",
    "max_bytes",
    "selectors",
    "tenant",
    "timeout",
    "token",
    "token_header",
    "total_budget",
    "url",
    "wait",
    "window_budget",
]
"""Every option a message can name. A front end must say each (the CLI's test checks it)."""

CommandName = Literal["ingest"]
"""Every library step a message can tell the caller to run first."""


class _NoValue(enum.Enum):
    NO_VALUE = enum.auto()  # an enum member stays itself through pickle and copy


_NO_VALUE: Any = _NoValue.NO_VALUE


@dataclass(frozen=True)
class Option:
    """An option named in a message: the library's argument, and the value the fix gives it.

    Args:
        name: The library's argument, e.g. ``"timeout"``.
        value: The value a fix sets (``wait=True``) or the message shows (a directory).
        said: The library's words for it, when they are more than the name or ``name=value``
            (e.g. ``WindowSplitter(file_id_keys=('tenant', 'source'))``). Only the library
            says them; a front end says the option its own way, from ``name`` and ``value``.
    """

    name: OptionName
    value: Any = _NO_VALUE
    said: str | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE

    def __str__(self) -> str:
        if self.said is not None:
            return self.said
        return f"{self.name}={self.value!r}" if self.has_value else self.name


@dataclass(frozen=True)
class Command:
    """A step to run first (``ingest``), with the options to run it with."""

    name: CommandName
    options: tuple[Option, ...] = ()
    said: str | None = None
    """The library's words, e.g. ``ingest into it``."""

    def __str__(self) -> str:
        return self.said if self.said is not None else self.name


Mention: TypeAlias = Option | Command
Part: TypeAlias = str | Option | Command


class Message(str):
    """A message as the library says it, that also knows which of its words are options.

    It is a ``str`` (the library's wording), so it goes wherever a message string goes, like
    ``markupsafe.Markup``; a front end reads :attr:`parts` to say it its own way. String
    operations (``+``, f-strings, ``strip``) return a plain ``str``: build a new ``Message``.
    """

    parts: tuple[Part, ...]

    def __new__(cls, *parts: Part) -> Message:
        flat: list[Part] = []
        for part in parts:
            flat.extend(part.parts if isinstance(part, Message) else [part])
        self = super().__new__(cls, "".join(str(part) for part in flat))
        self.parts = tuple(flat)
        return self

    @property
    def options(self) -> tuple[OptionName, ...]:
        """The options the message names, in order (those of its commands included)."""
        names: list[OptionName] = []
        for part in self.parts:
            if isinstance(part, Option):
                names.append(part.name)
            elif isinstance(part, Command):
                names.extend(option.name for option in part.options)
        return tuple(dict.fromkeys(names))

    def render(self, say: Callable[[Mention], str]) -> str:
        """The message with each option and command said by ``say`` (a front end's words)."""
        return "".join(part if isinstance(part, str) else say(part) for part in self.parts)

    def map_text(self, change: Callable[[str], str]) -> Message:
        """The message with ``change`` applied to its text (not to its mentions)."""
        return Message(*(change(p) if isinstance(p, str) else p for p in self.parts))


class WindowRetrieverError(Exception):
    """Root of every error that window_retriever raises on purpose.

    Args:
        *parts: The message: text, and the :class:`Option` s (and :class:`Command` s) it names.
    """

    message: Message
    """The message with its mentions; ``str(error)`` is its library wording."""

    def __init__(self, *parts: Part) -> None:
        self.message = Message(*parts)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    @property
    def options(self) -> tuple[OptionName, ...]:
        """The options this error concerns (the library's names), e.g. ``("timeout",)``."""
        return self.message.options


class ConfigurationError(WindowRetrieverError, ValueError):
    """An argument is invalid; the message names the argument, the value and the fix."""


class MissingWindowMetadataError(WindowRetrieverError, ValueError):
    """A stored chunk lacks the metadata that windows are built from.

    Raised only in strict mode; otherwise such a chunk is returned as it is, with a warning.
    """


class OwnershipError(WindowRetrieverError, ValueError):
    """Writing a file would replace chunks that another owner (tenant, user, ...) stored."""


class StoreError(WindowRetrieverError, RuntimeError):
    """The store cannot be opened or answered with an error.

    An unreachable server, refused credentials, a missing store directory, tenant, database or
    collection. The message names the store and the fix.
    """
