"""The exceptions of window_retriever: one root type, one subclass per kind of failure."""

from __future__ import annotations


class WindowRetrieverError(Exception):
    """Root of every error that window_retriever raises on purpose."""


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
