"""One exception hierarchy for every mistake lookuplinear reports.

Each class is also the built-in exception a Python user would catch for that kind of mistake
(``IndexError``, ``ValueError``, ``TypeError``), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "DeviceMismatchError",
    "InputTypeError",
    "InputValueError",
    "LookupIndexError",
    "LookupLinearError",
]


class LookupLinearError(Exception):
    """Base class of every error raised by lookuplinear."""


class LookupIndexError(LookupLinearError, IndexError):
    """An index is outside ``[0, in_features)``."""


class InputValueError(LookupLinearError, ValueError):
    """An argument has the right type but a wrong value or shape."""


class InputTypeError(LookupLinearError, TypeError):
    """An argument has a type lookuplinear does not accept."""


class DeviceMismatchError(InputValueError):
    """The input lives on another device than the layer's weight."""
