"""Pruning a fitted estimator's table to the rows that matter most, as fastText's
``quantize -cutoff`` does, and fine-tuning what is left (``-retrain``).

fastText keeps the ``cutoff`` rows of its input matrix with the largest L2 norm
(``FastText::selectEmbeddings``), drops the others from its dictionary, and may train the kept
rows and the output layer again on the training file. Here the estimator's table keeps those
rows, renumbered in their order (column ``j`` of the pruned model is row ``rows[j]`` of the
table before), and the vectorizer is pruned to the same columns
(:meth:`~lookuplinear.text.FastTextVectorizer.prune`), so a pruned word or n-gram is absent
from a text: it adds nothing, and a ``mode="mean"`` text averages over the features kept.

Dense equivalent: the pruned model on ``X[:, rows]`` is the model before on ``X`` with the
columns outside ``rows`` removed from every row (their values set to 0, also in the mean's
denominator).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import InputValueError

__all__ = ["keep_rows", "retrain", "select_rows"]


def select_rows(estimator: Any, cutoff: int) -> np.ndarray:
    """The ``cutoff`` rows of the fitted table with the largest L2 norm, in increasing order.

    Rows of equal norm are taken lowest first (fastText's sort leaves their order open).

    Raises
    ------
    InputValueError
        ``cutoff`` is not in ``[1, rows of the table]``, or the table is quantized already.

    Examples
    --------
    >>> from lookuplinear.sklearn import LookupClassifier
    >>> clf = LookupClassifier(hidden=2, learning_rate_init=0.1, max_iter=20, random_state=0).fit(
    ...     [[0, 1], [2], [1, 2]], [0, 1, 1])
    >>> select_rows(clf, 2).tolist() == sorted(
    ...     clf.model_.lookup.weight.norm(dim=1).argsort(descending=True)[:2].tolist())
    True
    """
    weight = _float_table(estimator)
    n = weight.shape[0]
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, np.integer)) or not (
            1 <= cutoff <= n):
        raise InputValueError(
            f"cutoff must be an integer in [1, {n}] (the rows of the table), got {cutoff!r}; "
            f"keep at most the {n} rows there are."
        )
    norms = torch.linalg.vector_norm(weight.float(), dim=1).numpy()
    return np.sort(np.argsort(-norms, kind="stable")[:cutoff])


@torch.no_grad()
def keep_rows(estimator: Any, rows: np.ndarray) -> Any:
    """Keep only ``rows`` of the fitted table, renumbered ``0..len(rows)-1``; returns the
    estimator, which then takes ``X[:, rows]`` (``n_features_in_ == len(rows)``) and trains on
    as before (its optimizers start anew)."""
    from ..modules.layer import LookupLinear

    old = estimator.model_.lookup
    weight = _float_table(estimator)
    index = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=weight.device)
    new = LookupLinear(index.numel(), old.out_features, bias=old.bias is not None,
                       mode=old.mode, sparse=old.sparse, init=torch.nn.init.zeros_,
                       device=weight.device, dtype=weight.dtype)
    new.weight.copy_(weight.index_select(0, index))
    if old.bias is not None and new.bias is not None:
        new.bias.copy_(old.bias)
    new.init = old.init
    estimator.model_.lookup = new
    estimator.n_features_in_ = index.numel()
    estimator._touched = np.ones(index.numel(), dtype=bool)
    _new_optimizers(estimator)
    return estimator


def retrain(estimator: Any, X: Any, y: Any, *, epochs: int, learning_rate: float | None = None,
            sample_weight: Any = None) -> Any:
    """Fine-tune the fitted estimator (the kept rows and the output layer) for ``epochs`` more
    passes over ``(X, y)`` (each row weighted by ``sample_weight``), from fresh optimizer state
    at ``learning_rate`` (default: the estimator's), as fastText's ``quantize -retrain -epoch
    -lr`` does; returns it. Its parameters are as before afterwards."""

    saved = estimator.get_params()
    try:
        estimator.set_params(warm_start=True, max_iter=epochs)
        if learning_rate is not None:
            estimator.set_params(learning_rate_init=learning_rate)
        _new_optimizers(estimator)
        estimator.fit(X, y, sample_weight=sample_weight)
    finally:
        estimator.set_params(**{k: saved[k] for k in
                                ("warm_start", "max_iter", "learning_rate_init")})
    return estimator


def _new_optimizers(estimator: Any) -> None:
    """Fresh optimizers for the estimator's parameters, the old ones released first (a fused
    optimizer stays bound to its tables until then)."""
    for opt in estimator._optimizers:
        if hasattr(opt, "unbind"):
            opt.unbind()
    estimator._optimizers = estimator._make_optimizers()


def _float_table(estimator: Any) -> torch.Tensor:
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator, "model_")
    lookup = estimator.model_.lookup
    if not hasattr(lookup, "weight") or hasattr(lookup, "packed"):
        raise InputValueError(
            f"this {type(estimator).__name__} is quantized already; prune the float model "
            "(before quantize)."
        )
    return lookup.weight.detach()
