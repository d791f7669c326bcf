"""``LookupRegressor``: linear regression / a fastText-style network on sparse input."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import RegressorMixin

from ..errors import InputTypeError, InputValueError
from ._base import LookupEstimator
from ._input import float32_values

__all__ = ["LookupRegressor"]


class LookupRegressor(RegressorMixin, LookupEstimator):
    """A regressor on sparse rows: ``linear(densify(X) @ E)`` trained on the squared error.

    Dense equivalent: with ``hidden=None`` it is linear regression, ``nn.Linear(n_features,
    n_targets)`` on ``X`` (ridge with ``alpha``; at the defaults ``solver="dual_cd"`` solves
    ``Ridge()``'s problem, the mean of ``(y - f)^2`` plus ``alpha / 2 ||W||^2`` with
    ``alpha = 2 / n_samples``, the bias penalised too but the targets centred); with
    ``hidden=h`` it is ``nn.Linear(h, n_targets)(nn.Linear(n_features, h, bias=False)(X))``.
    The first layer is a :class:`~lookuplinear.LookupLinear` with a sparse gradient: ``X`` is
    never densified.

    Parameters
    ----------
    n_features, hidden, mode, solver, learning_rate_init, learning_rate, max_iter, batch_size,
    alpha, early_stopping, validation_fraction, n_iter_no_change, tol, random_state, verbose,
    device, n_jobs, warm_start
        As for :class:`~lookuplinear.sklearn.LookupClassifier`, except: ``"dual_cd"`` solves the
        squared error, ``alpha=None`` is ``2 / n_samples`` with it (``Ridge(alpha=1)``), and a
        minibatch solver's ``max_iter=None`` is 10 epochs; early stopping watches the held-out
        R^2.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        The linear map's weights, read-only, as for
        :class:`~lookuplinear.sklearn.LookupClassifier`: one row per target for two targets
        or more, 1-D for one (``y`` of shape (n_samples,) or (n_samples, 1)), as ``Ridge``.
    intercept_ : float or ndarray of shape (n_targets,)
        The model's bias plus the targets' offset (their mean at the first fit, kept in
        float64 apart from the float32 network, which learns the residuals), float64: a float
        for 1-D ``y``, an array for 2-D ``y`` (shape (1,) for one column), as ``Ridge``; the
        ``y`` of the call that built the model decides.
    n_features_in_ : int
    model_ : LookupNet
    loss_curve_ : list of float
        The training loss of each epoch: the squared error summed over the targets, averaged
        over the rows (the mean squared error for 1-D ``y``), without the ``alpha`` penalty.
    n_iter_ : int
        Epochs (``dual_cd``: passes) since the model was built: a warm-started ``fit`` and
        each ``partial_fit`` add theirs.
    validation_scores_, best_validation_score_
        With ``early_stopping``: held-out R^2 per epoch and its best.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from lookuplinear.sklearn import LookupRegressor
    >>> X = sp.random(200, 50, density=0.2, format="csr", random_state=0)
    >>> y = X @ np.arange(50.0) / 50
    >>> reg = LookupRegressor(max_iter=100, learning_rate_init=0.05, random_state=0).fit(X, y)
    >>> reg.score(X, y) > 0.9
    True
    """

    _DUAL_LOSS = "squared_error"
    _EPOCHS = 10
    _ALPHA_TIMES_N = 2.0

    def __init__(
        self,
        *,
        n_features: int | None = None,
        hidden: int | None = None,
        mode: str = "sum",
        solver: str = "auto",
        learning_rate_init: float | None = None,
        learning_rate: str = "constant",
        max_iter: int | None = None,
        batch_size: int = 64,
        alpha: float | None = None,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        tol: float | None = None,
        random_state: Any = None,
        verbose: int = 0,
        device: str | torch.device = "cpu",
        n_jobs: int | None = 1,
        warm_start: bool = False,
    ) -> None:
        self.n_features = n_features
        self.hidden = hidden
        self.mode = mode
        self.solver = solver
        self.learning_rate_init = learning_rate_init
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.alpha = alpha
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.n_jobs = n_jobs
        self.warm_start = warm_start

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LookupRegressor:
        """Train from scratch: solve the linear model (``solver="dual_cd"``), or ``max_iter``
        passes (epochs) of a stochastic solver.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or token-id lists
            A rectangular nested list is a dense matrix, as in scikit-learn; a ragged list of
            lists of ints (or ``Bags``) is token-id bags (see docs/sklearn.md).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), float or None, default None
            Non-negative weight of each row's squared error. A row of weight 0 is left out;
            an integer weight ``k`` gives the objective of the row repeated ``k`` times.
            ``dual_cd`` centres the targets by their weighted mean and solves
            ``Ridge().fit(X, y, sample_weight)``'s problem (up to the penalised bias;
            ``alpha=None`` is two over the weights' sum).

        Returns
        -------
        self : LookupRegressor

        Raises
        ------
        InputValueError
            ``sample_weight`` negative, NaN or infinite, all zero, or not one per row.
        InputTypeError
            ``y`` is a scipy.sparse matrix (also ``TypeError``, as ``Ridge`` raises): pass
            ``y.toarray()``.
        """
        return self._fit(X, y, sample_weight)

    def partial_fit(self, X: Any, y: Any, sample_weight: Any = None) -> LookupRegressor:
        """One pass over ``(X, y)`` at a constant learning rate, continuing from the last call.
        ``sample_weight`` as in ``fit``, relative to the call's rows."""
        self._begin_partial_fit()
        return self._partial_fit(X, y, epochs=1, schedule="constant",
                                 sample_weight=sample_weight)

    def predict(self, X: Any) -> np.ndarray:
        """``model_(X)``: shape (n_samples,) for one target (``y`` of shape (n_samples,) or
        (n_samples, 1), as ``Ridge.predict``), else (n_samples, n_targets)."""
        return self._predictions(self._raw_output(X))

    def _predictions(self, out: np.ndarray) -> np.ndarray:
        out = out + self._offset()
        return out.ravel() if out.shape[1] == 1 else out

    def _score_predictions(self, y: Any, pred: np.ndarray, sample_weight: Any) -> float:
        """``score``'s R^2 (``RegressorMixin.score``)."""
        from sklearn.metrics import r2_score

        return float(r2_score(y, pred, sample_weight=sample_weight))

    # ------------------------------------------------------------------ targets
    def _prepare_xy(self, X: Any, y: Any, *, reset: bool) -> tuple[Any, np.ndarray]:
        """Refuse a sparse ``y``, as ``Ridge`` does: targets are dense (a classifier's sparse
        label indicator is densified, a regressor's sparse targets are not)."""
        if sp.issparse(y):
            raise InputTypeError(
                f"y is a scipy.sparse {type(y).__name__} of shape {cast(Any, y).shape}, but "
                f"{type(self).__name__} takes dense targets: an array-like of shape "
                "(n_samples,) or (n_samples, n_targets), as Ridge does. Use y.toarray() to "
                "convert it to a dense numpy array."
            )
        return super()._prepare_xy(X, y, reset=reset)

    def _start(self, y: np.ndarray, weight: np.ndarray | None) -> None:
        """The targets' offset: their (weighted) mean in float64, as scikit-learn's linear
        models center ``y``. The model learns the float32 residuals ``y - offset`` (its bias
        starts at zero, the residuals' mean), so that targets far from zero keep their
        precision; ``predict`` and ``intercept_`` add the offset back in float64."""
        self._y_offset = (np.average(y, axis=0, weights=weight) if len(y)
                          else np.zeros(y.shape[1]))

    def _set_targets(self, y: np.ndarray, classes: Any, *, partial: bool) -> np.ndarray:
        """Remember whether ``y`` is 2-D (``intercept_``'s form); ``y`` as float64 of shape
        (n_samples, n_targets)."""
        y = np.asarray(y, dtype=np.float64)
        self._y_2d = y.ndim == 2
        return y.reshape(len(y), -1)

    def _encode_targets(self, y: np.ndarray, *, warm: bool) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if y.shape[1] != self._n_outputs():
            raise InputValueError(
                f"y has {y.shape[1]} targets but the fitted model has {self._n_outputs()}; "
                "pass y with as many targets, or fit a new model (warm_start=False)."
            )
        return y

    def _offset(self) -> np.ndarray:
        """The float64 offset the model's outputs are added to (zeros for a model that has
        none: one read from a file written before the offset was kept apart)."""
        offset = getattr(self, "_y_offset", None)
        return np.zeros(self._n_outputs()) if offset is None else offset

    def _n_model_outputs(self, y: np.ndarray) -> int:
        return int(y.shape[1])

    def _held_out(self, y: np.ndarray) -> Any:
        return y.ravel() if y.shape[1] == 1 else y

    def _residuals(self, y: np.ndarray) -> np.ndarray:
        """The residuals ``y - offset`` (computed in float64), checked to fit float32, in
        which the model learns them."""
        residuals = y - self._offset()
        float32_values(residuals, "y minus its mean (the residuals the float32 model learns)",
                       "rescale y, e.g. with sklearn.compose.TransformedTargetRegressor("
                       "transformer=StandardScaler())")
        return residuals

    def _targets(self, y: np.ndarray) -> torch.Tensor:
        """The residuals ``y - offset`` as float32."""
        return torch.as_tensor(self._residuals(y), dtype=torch.float32)

    def _dual_problem(
        self, y: np.ndarray, weight: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The targets centred by the offset (their weighted mean, as Ridge centres them);
        the offset stays apart from the float32 bias."""
        return self._residuals(y), None

    def _loss(
        self, out: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None
    ) -> torch.Tensor:
        # summed over the targets: alpha weighs each one as if it were fitted alone (Ridge's)
        per_row = (out - target).square().sum(1)
        return per_row.mean() if weight is None else (per_row * weight).mean()

    def _best_constant(self, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """The squared error's minimiser over constants: the targets' weighted mean."""
        if weight is None:
            return target.double().mean(0).float()
        w = weight.double()
        return ((w.unsqueeze(1) * target.double()).sum(0) / w.sum()).float()

    def _linear_map(self) -> tuple[np.ndarray, Any]:
        """As scikit-learn's ``Ridge``: for one target, ``coef_`` of shape (n_features,);
        ``intercept_`` a float for 1-D ``y``, else of shape (n_targets,). ``intercept_`` is
        the model's bias plus the targets' offset, in float64."""
        coef, bias = super()._linear_map()
        intercept = bias.astype(np.float64) + self._offset()
        intercept.flags.writeable = False
        coef = coef[0] if coef.shape[0] == 1 else coef
        return coef, (intercept if self._y_2d else float(intercept[0]))
