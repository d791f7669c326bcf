"""One exception hierarchy for every mistake lookuplinear reports.

Each class is also the built-in exception a Python user would catch for that kind of mistake
(``IndexError``, ``ValueError``, ``TypeError``), so ``except ValueError`` keeps working.

Examples
--------
>>> from lookuplinear import LookupLinear
>>> layer = LookupLinear(10, 3)
>>> try:
...     layer(torch.tensor([4, 12]))
... except IndexError as e:                    # also a LookupLinearError
...     print(type(e).__name__, "-", e)
LookupIndexError - index 12 at input[1] is out of range for in_features=10: ...
>>> layer(torch.ones(2, 7))
Traceback (most recent call last):
    ...
lookuplinear.errors.InputValueError: a floating input is read as dense rows of shape ... (2, 7). ...
"""

from __future__ import annotations

__all__ = [
    "CheckpointNotFoundError",
    "DeviceMismatchError",
    "InputTypeError",
    "InputValueError",
    "LookupIndexError",
    "LookupLinearError",
    "ModelFileError",
    "StateDictError",
    "TrainingDivergedError",
    "UnknownTokenError",
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


class UnknownTokenError(LookupLinearError, KeyError):
    """A token is not in the ``Vocab`` and the vocabulary has no ``unknown`` entry."""


class ModelFileError(LookupLinearError, ValueError):
    """A model file is not a lookuplinear model: corrupt, truncated, or of another format."""


class StateDictError(LookupLinearError, RuntimeError):
    """A ``state_dict`` does not fit the module it is loaded into (a missing or unexpected key,
    a tensor of another shape): refused before anything is copied. A ``RuntimeError`` too, as
    ``nn.Module.load_state_dict`` raises."""


class CheckpointNotFoundError(LookupLinearError, FileNotFoundError):
    """No checkpoint has completed at a ``Checkpoint``'s path (nothing to restore yet)."""


class TrainingDivergedError(LookupLinearError, FloatingPointError):
    """The training loss became NaN or infinite (the learning rate is too high for the data)."""
