"""The estimators' predictions from their network, without scikit-learn: what
``LookupClassifier.predict_proba`` / ``decision_function`` compute once ``X`` is a float32 CSR
matrix. A model file loaded for prediction (``load_model(path, lazy=True)``, the command line's
``predict`` and ``test``) calls the same functions, so it predicts what the estimator does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ._input import CSRBatches
from ._minibatch import torch_threads

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["PREDICT_BATCH", "class_scores", "raw_output"]

#: rows a prediction runs at a time
PREDICT_BATCH = 8192


def raw_output(model: Any, X: sp.csr_matrix, n_outputs: int, *, device: Any,
               n_jobs: int | None) -> np.ndarray:
    """``model.predict(X)`` as float64 numpy of shape (n_samples, n_outputs), in batches of
    :data:`PREDICT_BATCH` rows, on ``device`` with ``n_jobs`` torch threads."""
    model.eval()
    outs = [np.zeros((0, n_outputs), dtype=np.float64)]
    with torch.no_grad(), torch_threads(n_jobs):
        for _, _, bags in CSRBatches(X).batches(PREDICT_BATCH):
            outs.append(model.predict(bags.to(torch.device(device))).cpu().numpy())
    return np.concatenate(outs)


def class_scores(out: np.ndarray, *, binary: bool, multilabel: bool, proba: bool) -> np.ndarray:
    """A classifier's scores from its logits ``out`` (n_samples, n_outputs).

    ``proba``: ``predict_proba``, shape (n_samples, n_classes): ``[1 - sigmoid, sigmoid]`` of
    the one logit for two classes, per-label sigmoids for multilabel, else the softmax.
    Otherwise ``decision_function``: the logits, raveled to (n_samples,) for two classes.
    """
    if not proba:
        return out.ravel() if binary else out
    from scipy.special import expit, softmax

    out = out.astype(np.float64)
    if binary:
        p = expit(out.ravel())
        return np.column_stack([1 - p, p])
    return expit(out) if multilabel else softmax(out, axis=1)
