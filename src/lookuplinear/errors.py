"""One exception hierarchy for every mistake lookuplinear reports.

Each class is also the built-in exception a Python user would catch for that kind of mistake
(``IndexError``, ``ValueError``, ``TypeError``), so ``except ValueError`` keeps working. Where
PyTorch raises another built-in for the same mistake in ``nn.Embedding``/``nn.EmbeddingBag``
(``RuntimeError`` for bad offsets or a negative size, ``TypeError`` for a size that is not an
integer, ``AssertionError`` for a ``padding_idx`` outside the table or a ``_weight`` of another
shape, ``NotImplementedError`` for ``per_sample_weights`` with a mode other than ``"sum"``), the
error is that one too, so code written against PyTorch catches it as it did:

>>> from lookuplinear import EmbeddingBag
>>> bag = EmbeddingBag(10, 3, mode="sum")
>>> try:
...     bag(torch.tensor([1, 2, 3]), torch.tensor([1, 2]))   # offsets must start at 0
... except RuntimeError as e:                  # as from nn.EmbeddingBag; also a ValueError
...     print(type(e).__name__)
OffsetsError

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
    "DtypeMismatchError",
    "FusedAccumulationWarning",
    "InputTypeError",
    "InputValueError",
    "LayoutError",
    "LookupIndexError",
    "LookupLinearError",
    "ModeNotSupportedError",
    "ModelFileError",
    "NotLinearError",
    "OffsetsError",
    "PaddingIdxError",
    "SizeError",
    "SizeTypeError",
    "StateDictError",
    "TableShapeError",
    "TrainingDivergedError",
    "UnknownTokenError",
]


class LookupLinearError(Exception):
    """Base class of every error raised by lookuplinear."""


class LookupIndexError(LookupLinearError, IndexError, RuntimeError):
    """An index is outside ``[0, in_features)``. Also a ``RuntimeError``: PyTorch raises
    ``IndexError`` from ``F.embedding`` and ``RuntimeError`` from ``F.embedding_bag`` for it."""


class InputValueError(LookupLinearError, ValueError):
    """An argument has the right type but a wrong value or shape."""


class InputTypeError(LookupLinearError, TypeError):
    """An argument has a type lookuplinear does not accept."""


class DeviceMismatchError(InputValueError):
    """The input lives on another device than the layer's weight."""


class OffsetsError(InputValueError, RuntimeError):
    """Offsets that do not cut the entries into bags: not starting at 0, decreasing, or past the
    end of the input. Also a ``RuntimeError``, as PyTorch's ``embedding_bag`` raises."""


class PaddingIdxError(InputValueError, AssertionError, RuntimeError):
    """``padding_idx`` outside the table. Also an ``AssertionError`` (``nn.Embedding`` and
    ``nn.EmbeddingBag`` assert it) and a ``RuntimeError`` (``F.embedding_bag`` raises one)."""


class SizeError(InputValueError, RuntimeError):
    """A size (rows, columns, a count) below the smallest the argument takes: a negative
    ``num_embeddings``. Also a ``RuntimeError``, as ``nn.Embedding``, ``nn.EmbeddingBag`` and
    ``nn.Linear`` raise for a negative size."""


class SizeTypeError(InputValueError, TypeError):
    """A size that is not an integer (a float, a bool, a string). Also a ``TypeError``, as
    ``nn.Embedding``, ``nn.EmbeddingBag`` and ``nn.Linear`` raise for it."""


class TableShapeError(InputValueError, AssertionError):
    """A table of another shape than the layer's: a ``_weight`` that is not
    ``(num_embeddings, embedding_dim)``, a ``from_pretrained`` table that is not 2-D. Also an
    ``AssertionError``, as ``nn.Embedding`` and ``nn.EmbeddingBag`` assert it."""


class ModeNotSupportedError(InputValueError, NotImplementedError):
    """An argument the layer's ``mode`` has no meaning for in PyTorch (``per_sample_weights``
    with a mode other than ``"sum"`` in ``EmbeddingBag``). Also a ``NotImplementedError``, as
    ``nn.EmbeddingBag`` raises."""


class DtypeMismatchError(InputTypeError, RuntimeError):
    """Two tensors that must share a dtype do not (``per_sample_weights`` and the table). Also a
    ``RuntimeError``, as PyTorch's ``embedding_bag`` raises."""


class LayoutError(InputTypeError, RuntimeError):
    """A tensor of a layout the call does not take: a sparse index tensor given to
    ``Embedding``, which looks up a strided one. Also a ``RuntimeError``, as ``nn.Embedding``
    raises for a sparse one."""


class UnknownTokenError(LookupLinearError, KeyError):
    """A token is not in the ``Vocab`` and the vocabulary has no ``unknown`` entry."""


class ModelFileError(LookupLinearError, ValueError):
    """A model file is not a lookuplinear model: corrupt, truncated, or of another format."""


class NotLinearError(LookupLinearError, AttributeError):
    """A linear model's attribute (``coef_``, ``intercept_``) of a fitted model that is not
    linear in ``X`` (``mode="max"``). An ``AttributeError``, as scikit-learn's attributes an
    estimator does not define: ``hasattr(est, "coef_")`` is False."""


class StateDictError(LookupLinearError, RuntimeError):
    """A ``state_dict`` does not fit the module it is loaded into (a missing or unexpected key,
    a tensor of another shape): refused before anything is copied. A ``RuntimeError`` too, as
    ``nn.Module.load_state_dict`` raises."""


class CheckpointNotFoundError(LookupLinearError, FileNotFoundError):
    """No checkpoint has completed at a ``Checkpoint``'s path (nothing to restore yet)."""


class TrainingDivergedError(LookupLinearError, FloatingPointError):
    """The training loss became NaN or infinite, or grew from one epoch to the next to many
    times that of a model that ignores the features (the learning rate is too high for the
    data)."""


class FusedAccumulationWarning(UserWarning):
    """A ``fused=True`` optimizer updated its tables in a second ``backward`` since its last
    ``step()`` or ``zero_grad()``.

    Such an optimizer updates its tables inside every backward, so two backward passes apply two
    updates where ``torch.optim`` would apply their summed gradient once, in ``step()``. Call
    ``opt.zero_grad()`` or ``opt.step()`` between backward passes, or build the optimizer with
    ``fused=False`` to accumulate gradients. Warned once until the next ``step()`` or
    ``zero_grad()``.
    """
