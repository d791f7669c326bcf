"""What the classifier and the regressor share: input handling, the training loop, prediction."""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, ClassVar, Self, cast

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    _check_y,
    check_is_fitted,
    validate_data,
)

from .._device import check_device
from ..errors import InputValueError, LookupIndexError, NotLinearError, TrainingDivergedError
from ..functional import MODES, Mode
from ..sparse.bags import Bags
from ._input import csr_first, fold_mode, is_token_lists, max_squared_row_norm, to_csr
from ._minibatch import constant_loss, progress, torch_threads, train_epochs
from ._model import LookupNet
from ._optim import SOLVERS, default_learning_rate, make_optimizers, set_hyperparameters
from ._predict import raw_output

__all__ = ["LookupEstimator"]

#: ``fit`` warns (``ConvergenceWarning``) when a minibatch solver's last epoch left the training
#: loss above this fraction of the loss of the best constant output (a model that ignores X). On
#: the benchmark datasets' validation splits, models above it scored at or near the majority
#: class, and those below it had learned from X (a default Adam fit on small noisy data ends
#: at 0.82).
NO_PROGRESS = 0.85
#: rows of the training targets that estimate the best constant output's loss
CONSTANT_ROWS = 65536
#: plain SGD has diverged when an epoch's training loss grew to above this many times both
#: the lowest epoch loss of the same call and the loss of the best constant output: a model
#: that ignores X does that much better, and SGD's steps, in proportion to the gradient, grow
#: with the loss on to overflow. The adaptive solvers' steps are bounded by the rate: their
#: loss can rise that far on unscaled data and come back
DIVERGED = 10.0


class LookupEstimator(BaseEstimator):
    """Base class: an ``X -> LookupNet -> outputs`` model and its one training procedure.

    ``fit`` is ``_fit``: parameters checked, the fitted model dropped unless ``warm_start``,
    then ``_partial_fit`` for ``max_iter`` epochs (or solved by ``dual_cd``). ``partial_fit``
    is ``_partial_fit`` for one epoch. Subclasses define ``__init__`` (the parameters only)
    and what differs between a classifier and a regressor: the targets (``_set_targets``,
    ``_encode_targets``, ``_targets``, ``_class_weights``, ``_dual_problem``, ``_held_out``),
    the number of outputs (``_n_model_outputs``), the model's start (``_start``), ``_loss``
    and its best constant (``_best_constant``).

    Sample weights: a row of weight 0 is left out (as if removed); the others weigh the loss
    as repeated rows do. The objective is the weighted mean loss plus the penalty,
    ``sum_i s_i c_i loss_i / sum_i s_i + alpha / 2 ||W||^2`` (``c_i`` the class weight of the
    row's class), so integer weights give the objective of the data with each row repeated
    ``s_i`` times. The loss functions see per-row weights ``c_i s_i / mean(s)``: a batch's
    weighted mean loss is then an unbiased estimate of that objective's loss.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_features": [Interval(Integral, 1, None, closed="left"), None],
        "hidden": [Interval(Integral, 1, None, closed="left"), None],
        "mode": [StrOptions(set(MODES))],
        "solver": [StrOptions({"auto", "dual_cd", *SOLVERS})],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither"), None],
        "learning_rate": [StrOptions({"constant", "linear"})],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left"), None],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "device": [str, torch.device],
        "n_jobs": [Interval(Integral, None, -1, closed="right"),
                   Interval(Integral, 1, None, closed="left"), None],
        "warm_start": ["boolean"],
    }

    #: the loss ``solver="dual_cd"`` solves, and the epochs of a stochastic solver's ``fit``
    _DUAL_LOSS: ClassVar[str]
    _EPOCHS: ClassVar[int]
    #: ``alpha=None`` with ``dual_cd`` is this / n_samples (LinearSVC's C=1, Ridge's alpha=1)
    _ALPHA_TIMES_N: ClassVar[float]

    # set by subclasses' __init__
    n_features: int | None
    hidden: int | None
    mode: str
    solver: str
    learning_rate_init: float | None
    learning_rate: str
    max_iter: int | None
    batch_size: int
    alpha: float | None
    early_stopping: bool
    validation_fraction: float
    n_iter_no_change: int
    tol: float | None
    random_state: Any
    verbose: int
    device: str | torch.device
    n_jobs: int | None
    warm_start: bool
    _seed_: int  # the seed fit drew: partial_fit and warm starts continue from it
    _token_lists: bool  # fitted on token-id bags: a list of lists of ints is read as bags
    _max_row_norm: float  # the largest squared norm of a row the model was built on

    # ------------------------------------------------------------------ the procedure
    def _fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """``fit``: a new model (with ``warm_start``, the fitted one) trained on ``(X, y)`` for
        ``max_iter`` epochs of a stochastic solver, or solved by ``dual_cd``; returns self."""
        self._check_params()
        warm = self.warm_start and hasattr(self, "model_")
        self._uses_dual_cd(warm=warm)  # a solver that cannot fit this raises before any change
        if warm:
            self._check_continues("fit with warm_start=True",
                                  "set warm_start=False to fit a new model")
        else:
            self._forget()
        return self._partial_fit(X, y, epochs=self._n_epochs(), schedule=self.learning_rate,
                                 sample_weight=sample_weight, fit=True)

    def _partial_fit(
        self,
        X: Any,
        y: Any,
        *,
        epochs: int,
        schedule: str,
        classes: Any = None,
        sample_weight: Any = None,
        fit: bool = False,
    ) -> Self:
        """The one training procedure of ``fit`` and ``partial_fit``.

        The first call (no ``model_``) learns the targets' form (classes, outputs), draws the
        seed and builds the model; a later call checks ``X`` and ``y`` against them and
        continues from the model and its optimizer state, with the seed moved on by the epochs
        run so far. Rows of ``sample_weight`` 0 are left out. Then ``epochs`` minibatch passes
        at ``schedule``. ``fit=True`` (``fit``) adds what a whole fit does: the early-stopping
        hold-out, the ``dual_cd`` solver where it applies, and the no-progress warning.
        """
        first = not hasattr(self, "model_")
        Xc, y = self._prepare_xy(X, y, reset=first)
        sw = self._check_sample_weight(sample_weight, Xc)
        if first:
            y = self._set_targets(y, classes, partial=not fit)
            seed = self._seed_ = self._seed()
        else:
            y = self._encode_targets(y, warm=fit)
            seed = self._seed_ + self.n_iter_
        weight = self._class_weights(y, sw)  # (n,), (n, n_outputs) or None
        if sw is not None and not sw.all():  # a row of weight 0 is left out, as if removed
            keep = np.flatnonzero(sw)
            Xc, y, sw = Xc[keep], y[keep], sw[keep]
            weight = None if weight is None else weight[keep]
        validation = None
        if fit and self.early_stopping:
            from sklearn.model_selection import train_test_split  # slow to import: only here

            train, held = train_test_split(
                np.arange(Xc.shape[0]), test_size=self.validation_fraction, random_state=seed,
                stratify=self._stratify(y),
            )
            self._check_held_out(len(held), len(train) + len(held))
            validation = (Xc[held], self._held_out(y[held]), None if sw is None else sw[held])
            Xc, y = Xc[train], y[train]
            sw = None if sw is None else sw[train]
            weight = None if weight is None else weight[train]
        if fit or first:
            self.validation_scores_: list[float] = []
        # the loss's per-row weights c_i s_i / mean(s), and the rows they stand for (sum(s))
        n_samples = float(Xc.shape[0] if sw is None else sw.sum())
        if sw is not None:
            relative = sw / sw.mean()
            weight = (relative if weight is None
                      else (weight.T * relative).T)  # a row's weights, in each output
        if first:
            self._init_model(self._n_model_outputs(y), seed, Xc)
            self._start(y, weight)
        if fit and self._uses_dual_cd(warm=not first):
            target, offset = self._dual_problem(y, weight)
            self._fit_dual_cd(Xc, target, weight, seed=seed, offset=offset,
                              n_samples=n_samples)
            return self
        # the current learning rate and alpha, also for a model that continues training
        set_hyperparameters(self._optimizers, self._stochastic_solver(),
                            lr=self._learning_rate(), weight_decay=self.alpha or 0.0)
        target_t = self._targets(y)
        weight_t = None if weight is None else torch.as_tensor(weight, dtype=torch.float32)
        self._run_epochs(Xc, target_t, weight_t, epochs=epochs, seed=seed, schedule=schedule,
                         validation=validation)
        if fit:
            self._warn_if_not_converged(target_t, weight_t, warm=not first)
        return self

    def _check_held_out(self, n_held: int, n_rows: int) -> None:
        """Refuse an ``early_stopping`` hold-out of fewer than 2 rows (of ``n_rows`` of nonzero
        weight), whose score says nothing (the R^2 of one row is NaN), as ``MLPClassifier``
        and ``MLPRegressor`` refuse it; raised before the model changes."""
        if n_held < 2:
            raise InputValueError(
                f"{type(self).__name__}.fit: early_stopping holds out validation_fraction="
                f"{self.validation_fraction!r} of the {n_rows} training rows (of nonzero "
                f"weight), {n_held} row{'s' * (n_held != 1)}, and scoring it needs at least 2. "
                "The validation set is too small: increase validation_fraction or the number "
                "of rows, or set early_stopping=False."
            )

    def _check_sample_weight(self, sample_weight: Any, X: sp.csr_matrix) -> np.ndarray | None:
        """``sample_weight`` as float64 of shape (n_samples,), checked as scikit-learn checks
        it (``_check_sample_weight``: one finite, non-negative weight per row, not all zero);
        None for None."""
        if sample_weight is None:
            return None
        try:
            return _check_sample_weight(sample_weight, X, dtype=np.float64,
                                        ensure_non_negative=True)
        except ValueError as e:
            raise InputValueError(
                f"sample_weight: {e} Pass one finite, non-negative weight per row of X "
                f"({X.shape[0]} rows), not all of them zero."
            ) from e

    def _check_params(self) -> None:
        """The declared constraints, and ``device`` as the command line checks ``--device``
        (a device this torch can train on); raises before anything is changed."""
        self._validate_params()
        check_device(self.device)

    def _begin_partial_fit(self) -> None:
        """What ``partial_fit`` checks before it trains: the parameters (on every call, as
        ``fit`` does), a stochastic solver, no ``early_stopping`` (refused as
        ``MLPClassifier.partial_fit`` and ``SGDClassifier.partial_fit`` refuse it), and, once a
        model is fitted, that it can go on with the current parameters (``_check_continues``)."""
        self._check_params()
        self._check_partial_fit_solver()
        if self.early_stopping:
            raise InputValueError(
                f"{type(self).__name__}.partial_fit does not support early_stopping=True: "
                "one pass over the call's rows holds none out and has no epochs to stop "
                "between, so it would train on every row and ignore early stopping. Set "
                "early_stopping=False for partial_fit, or call fit, which holds out "
                "validation_fraction of the rows and stops on their score."
            )
        if hasattr(self, "model_"):
            self._check_continues("partial_fit",
                                  "call fit (without warm_start) to train a new model")

    def _built_with(self) -> dict[str, Any]:
        """The parameters that make the model and its optimizer what they are, as they are
        now: a warm start or ``partial_fit`` continues the fitted model only with the values
        it was built with. ``solver`` is the minibatch optimizer (Adam for ``"auto"``)."""
        return {"n_features": self.n_features, "hidden": self.hidden, "mode": self.mode,
                "solver": self._stochastic_solver(), "device": str(torch.device(self.device))}

    def _check_continues(self, call: str, fix: str) -> None:
        """Refuse, before anything changes, a ``call`` that would continue the fitted model
        with a parameter that changes what the model is (``_built_with``); the other
        parameters (learning rate, ``alpha``, ``batch_size``, ...) take their new values."""
        built = getattr(self, "_built", None)
        if built is None:  # a model from before the parameters were recorded
            return
        now = self._built_with()
        for name, old in built.items():
            if now[name] != old:
                what = ("the minibatch optimizer" if name == "solver" else "the model")
                raise InputValueError(
                    f"{type(self).__name__}.{call} continues the fitted model, built with "
                    f"{name}={old!r}, but {name} is now {now[name]!r} "
                    + (f"(solver={self.solver!r}) " if name == "solver" else "")
                    + f"and changing it changes {what} itself. Set {name}={old!r} to "
                    f"continue, or {fix}."
                )

    def _forget(self) -> None:
        """Drop the fitted model: the next ``_partial_fit`` starts a new one."""
        for name in ("model_", "_touched", "best_validation_score_"):
            if hasattr(self, name):
                delattr(self, name)

    # ------------------------------------------------------------------ subclass hooks
    def _set_targets(self, y: np.ndarray, classes: Any, *, partial: bool) -> np.ndarray:
        """Learn the targets' form from the first ``y`` (``classes``: every label, given to
        the first ``partial_fit``; ``partial``: called from it); ``y`` encoded for
        ``_targets``."""
        raise NotImplementedError

    def _encode_targets(self, y: np.ndarray, *, warm: bool) -> np.ndarray:
        """``y`` of a later call encoded as ``_set_targets`` did; raises if it does not fit
        (``warm``: a warm-started ``fit``, else ``partial_fit``)."""
        raise NotImplementedError

    def _n_model_outputs(self, y: np.ndarray) -> int:
        """Outputs of the model for encoded targets ``y``."""
        raise NotImplementedError

    def _start(self, y: np.ndarray, weight: np.ndarray | None) -> None:
        """Set the new model's start from the encoded targets and their row weights (nothing
        by default)."""

    def _stratify(self, y: np.ndarray) -> np.ndarray | None:
        """What the early-stopping hold-out is stratified by (None: not stratified)."""
        return None

    def _held_out(self, y: np.ndarray) -> Any:
        """Encoded held-out targets as ``score`` takes them."""
        raise NotImplementedError

    def _predictions(self, out: np.ndarray) -> np.ndarray:
        """``predict``'s answer from the model's outputs ``out`` (``_raw_output``)."""
        raise NotImplementedError

    def _score_predictions(self, y: Any, pred: np.ndarray, sample_weight: Any) -> float:
        """``score``'s metric of ``predict``'s answer ``pred`` against ``y``."""
        raise NotImplementedError

    def _targets(self, y: np.ndarray) -> torch.Tensor:
        """The loss's target tensor of encoded ``y``."""
        raise NotImplementedError

    def _class_weights(self, y: np.ndarray, sample_weight: np.ndarray | None) -> np.ndarray | None:
        """Each row's class weight for encoded ``y`` (float64: (n,), or (n, n_outputs) where a
        row weighs differently in each output), or None (the default)."""
        return None

    def _dual_problem(
        self, y: np.ndarray, weight: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``dual_cd``'s ``(target, offset)`` for encoded ``y`` and its row weights
        (:func:`~lookuplinear.sklearn._dualcd.solve`)."""
        raise NotImplementedError

    def _best_constant(self, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """The constant output (n_outputs,) that minimises ``_loss`` on ``target`` with row
        weights ``weight``, in closed form."""
        raise NotImplementedError

    # ------------------------------------------------------------------ input
    def _is_bags(self, X: Any, *, reset: bool) -> bool:
        """Whether ``X`` is token-id bags (``Bags``, or lists that ``is_token_lists`` reads
        so; after a fit on bags, any list of lists of ints) rather than a matrix."""
        fitted = not reset and getattr(self, "_token_lists", False)
        return isinstance(X, Bags) or is_token_lists(X, fitted_on_tokens=fitted)

    def _prepare_x(self, X: Any, *, reset: bool) -> sp.csr_matrix:
        """``X`` as a float32 CSR matrix; sets or checks ``n_features_in_`` (and, with
        ``reset``, whether the estimator is fitted on token-id bags). Token-id bags are rows
        of ``n_features`` columns, or (None) of the first call's largest id + 1; a matrix is
        as wide as it is, which ``n_features``, when set, must be."""
        if self._is_bags(X, reset=reset):
            bags = X if isinstance(X, Bags) else Bags.from_lists(X)
            if reset:
                if self.n_features is not None:
                    width = int(self.n_features)
                else:
                    width = int(bags.indices.max()) + 1 if bags.nnz else 1
                self._check_token_ids(bags, width)
                self.n_features_in_ = width
                self._token_lists = True
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            else:
                check_is_fitted(self)
                self._check_token_ids(bags, self.n_features_in_)
            return bags.to_scipy(self.n_features_in_)
        X = validate_data(
            self, csr_first(X), accept_sparse=True, dtype=[np.float32, np.float64], reset=reset
        )
        if reset:
            self._check_width(X)
            self._token_lists = False
        return self._checked_rows(to_csr(X))

    def _check_token_ids(self, bags: Bags, width: int) -> None:
        """With ``n_features`` set, refuse a token id outside the ``width`` columns it gives,
        naming the id and the parameter (without it, ``Bags.to_scipy`` refuses it)."""
        if self.n_features is None or not bags.nnz:
            return
        beyond = np.flatnonzero(bags.indices.cpu().numpy() >= width)
        if beyond.size:
            at = int(beyond[0])
            row = int(np.searchsorted(bags.offsets.cpu().numpy(), at, side="right")) - 1
            top = int(bags.indices.max())
            raise LookupIndexError(
                f"X holds token id {int(bags.indices[at])} (row {row}), but this "
                f"{type(self).__name__} reads token ids in [0, {width - 1}] "
                f"(n_features={self.n_features}, n_features_in_={width}). Set n_features to "
                f"the vocabulary size (at least {top + 1} here) and fit, or map the ids "
                "beyond it to a reserved one."
            )

    def _check_width(self, X: Any) -> None:
        """With ``n_features`` set, a matrix ``X`` must have that many columns."""
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise InputValueError(
                f"X has {X.shape[1]} columns, but n_features={self.n_features}: a matrix X "
                f"is read as it is, n_features must be its width. Set n_features="
                f"{X.shape[1]}, or None (the width of X)."
            )

    def _prepare_xy(self, X: Any, y: Any, *, reset: bool) -> tuple[sp.csr_matrix, np.ndarray]:
        if self._is_bags(X, reset=reset):
            Xc = self._prepare_x(X, reset=reset)
            y = _check_y(y, multi_output=True)  # as validate_data checks it (NaN, inf, ...)
            if y.shape[0] != Xc.shape[0]:
                raise ValueError(
                    f"X has {Xc.shape[0]} rows (token lists) but y has {y.shape[0]} entries; "
                    "pass one target per row."
                )
            return Xc, y
        X, y = validate_data(
            self, csr_first(X), y, accept_sparse=True, dtype=[np.float32, np.float64],
            multi_output=True, reset=reset,
        )
        if reset:
            self._check_width(X)
            self._token_lists = False
        return self._checked_rows(to_csr(X)), y

    def _checked_rows(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """``X``, refused where ``mode="mean"`` has no mean of a row: a row holding entries
        whose values sum to 0 or less (signed features, as ``HashingVectorizer``'s default
        ``alternate_sign=True`` gives) would be divided by that sum, turning its features'
        signs or dividing by 0."""
        if self.mode != "mean" or not X.nnz:
            return X
        sizes = np.diff(X.indptr)
        sums = np.bincount(np.repeat(np.arange(X.shape[0]), sizes), weights=X.data,
                           minlength=X.shape[0])
        bad = np.flatnonzero((sizes > 0) & (sums <= 0))
        if bad.size:
            raise InputValueError(
                f'mode="mean" divides each row by the sum of its values; row {int(bad[0])} '
                f"(of {bad.size} such rows) has entries summing to {float(sums[bad[0]]):.6g}, "
                "so its mean is undefined or flips its features' signs. Give non-negative "
                "features (HashingVectorizer(alternate_sign=False), counts, tf-idf), or use "
                'mode="sum" or "sqrtn".'
            )
        return X

    # ------------------------------------------------------------------ solvers
    def _loss_name(self) -> str:
        return self._DUAL_LOSS

    def _dual_cd_unsupported(self, *, warm: bool) -> str | None:
        """Why ``solver="dual_cd"`` cannot fit this configuration, or None."""
        if self.hidden is not None:
            return f"hidden={self.hidden} makes a network, not a linear model"
        if self.mode == "max":
            return "mode='max' is not linear in X"
        if self._loss_name() != self._DUAL_LOSS:
            return f"it solves loss={self._DUAL_LOSS!r}, got loss={self._loss_name()!r}"
        if self.early_stopping:
            return "early_stopping stops a stochastic solver between epochs"
        if warm:
            return "warm_start continues a stochastic solver from the fitted model"
        return None

    def _uses_dual_cd(self, *, warm: bool) -> bool:
        """Whether ``fit`` solves by dual coordinate descent: ``solver="dual_cd"``, or
        ``"auto"`` wherever it applies (else ``"auto"`` is Adam)."""
        why = self._dual_cd_unsupported(warm=warm)
        if self.solver == "dual_cd" and why is not None:
            raise InputValueError(
                f"solver='dual_cd' cannot fit this {type(self).__name__}: {why}. Use "
                "solver='auto' (dual_cd where it applies, else adam) or a stochastic solver "
                "such as solver='adam'."
            )
        return self.solver == "dual_cd" or (self.solver == "auto" and why is None)

    def _check_partial_fit_solver(self) -> None:
        """``partial_fit`` takes one minibatch step at a time: ``solver="dual_cd"`` has none."""
        if self.solver == "dual_cd":
            raise InputValueError(
                f"{type(self).__name__}.partial_fit needs a stochastic solver, got "
                "solver='dual_cd' (it solves the whole problem in fit). Use solver='auto' "
                "(Adam in partial_fit) or a stochastic solver such as 'adam'."
            )

    def _stochastic_solver(self) -> str:
        """The minibatch optimizer: ``solver`` itself, or Adam for ``"auto"``/``"dual_cd"``
        (``partial_fit`` and warm starts)."""
        return self.solver if self.solver in SOLVERS else "adam"

    def _learning_rate(self) -> float:
        """``learning_rate_init``, or the stochastic solver's default for the loss (plain
        SGD's divided by the largest squared row norm of the rows the model was built on,
        where that is above 1: :func:`~lookuplinear.sklearn._optim.default_learning_rate`)."""
        if self.learning_rate_init is not None:
            return float(self.learning_rate_init)
        return default_learning_rate(self._stochastic_solver(), self._loss_name(),
                                     network=self.hidden is not None,
                                     max_row_norm=getattr(self, "_max_row_norm", 1.0))

    def _make_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers of ``model_`` at the current learning rate and ``alpha``
        (:func:`~lookuplinear.sklearn._optim.make_optimizers`)."""
        return make_optimizers(
            self._stochastic_solver(),
            self.model_.sparse_parameters(),
            self.model_.dense_parameters(),
            lr=self._learning_rate(),
            weight_decay=self.alpha or 0.0,
        )

    def _early_stopping_tol(self) -> float:
        """The improvement of the held-out score that resets ``early_stopping``'s count:
        ``tol``, or scikit-learn's 1e-4 for None."""
        return 1e-4 if self.tol is None else float(self.tol)

    def _n_epochs(self) -> int:
        return self._EPOCHS if self.max_iter is None else self.max_iter

    def _fit_dual_cd(
        self,
        X: sp.csr_matrix,
        target: np.ndarray,
        sample_weight: np.ndarray | None,
        *,
        seed: int,
        offset: np.ndarray | None = None,
        n_samples: float,
    ) -> None:
        """Solve the linear model exactly (``_dualcd.solve``) into ``model_``; ``alpha=None``
        is ``_ALPHA_TIMES_N / n_samples`` (the sum of the sample weights)."""
        from ._dualcd import solve

        self._check_trainable()
        lookup = self.model_.lookup
        if lookup.mode in ("mean", "sqrtn"):
            X = fold_mode(X, lookup.mode)
        if self.alpha is not None:
            alpha = float(self.alpha)
        else:  # no rows (an empty Bags): nothing to solve, any penalty
            alpha = self._ALPHA_TIMES_N / n_samples if n_samples > 0 else 1.0
        with torch_threads(self.n_jobs):
            self.n_iter_ += solve(
                lookup, X, target, sample_weight, loss=self._DUAL_LOSS, alpha=alpha,
                tol=0.1 if self.tol is None else self.tol,
                max_iter=1000 if self.max_iter is None else self.max_iter, seed=seed,
                verbose=self.verbose, offset=offset)
        self._clear_untouched(X)
        self.model_.eval()

    # ------------------------------------------------------------------ model and training
    def _seed(self) -> int:
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def _init_model(self, n_outputs: int, seed: int, X: sp.csr_matrix) -> None:
        """Build ``model_`` under a forked, seeded RNG (the global RNG is left as it was). An
        embedding table draws only the rows of ``X``'s columns (the training rows) and starts
        the others at zero, where ``fit`` leaves every row training did not touch
        (``_clear_untouched``). The largest squared norm of a row of ``X`` sets plain SGD's
        default rate (``_learning_rate``) from here on, for this model."""
        drawn = None
        if self.hidden is not None:
            seen = np.zeros(X.shape[1], dtype=bool)
            seen[X.indices] = True
            drawn = torch.from_numpy(np.flatnonzero(seen))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            mode = cast(Mode, self.mode)  # validated by fit against MODES
            net = LookupNet(self.n_features_in_, n_outputs, hidden=self.hidden, mode=mode,
                            drawn=drawn)
        self.model_ = net.to(self.device)
        self._max_row_norm = max_squared_row_norm(X, self.mode)
        self._optimizers = self._make_optimizers()
        self._built = self._built_with()
        self.loss_curve_: list[float] = []
        self.n_iter_ = 0

    def _loss(
        self, out: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def _run_epochs(
        self,
        X: sp.csr_matrix,
        target: torch.Tensor,
        weight: torch.Tensor | None,
        *,
        epochs: int,
        seed: int,
        schedule: str,
        validation: tuple[Any, Any, Any] | None = None,
    ) -> None:
        """Minibatch training (:func:`~._minibatch.train_epochs`) with the estimator's
        bookkeeping after each epoch: ``loss_curve_``, ``n_iter_``, divergence and early
        stopping on ``validation`` (``(X, y, sample_weight)`` held out; the best epoch's weights
        are kept)."""
        self._check_trainable()
        model = self.model_
        best, best_state, no_change = -np.inf, None, 0
        lowest, constant = np.inf, None  # this call's lowest epoch loss; the constant's
        plain = self._stochastic_solver() == "sgd"  # steps in proportion to the gradient

        def end_epoch(epoch: int, epoch_loss: float) -> bool:
            nonlocal best, best_state, no_change, lowest, constant
            diverged = not np.isfinite(epoch_loss)
            if not diverged and plain and epoch_loss > DIVERGED * lowest:
                if constant is None:
                    constant = constant_loss(self._loss, self._best_constant, target, weight,
                                             rows=CONSTANT_ROWS)
                diverged = epoch_loss > DIVERGED * constant
            if diverged:
                grew = (f" grew from its lowest, {lowest:.4g}, to {epoch_loss:.4g} (over "
                        f"{DIVERGED:g} times both that and the {constant:.4g} of a constant "
                        "output that ignores X)" if np.isfinite(epoch_loss) and constant
                        is not None
                        else f" became {epoch_loss}")
                raise TrainingDivergedError(
                    f"the training loss{grew} in epoch {epoch + 1}: the "
                    f"optimizer diverged. Lower learning_rate_init (now "
                    f"{self._learning_rate():g}) or scale the features/targets."
                )
            lowest = min(lowest, epoch_loss)
            self.loss_curve_.append(epoch_loss)
            self.n_iter_ += 1
            if validation is None:
                return False
            held_x, held_y, held_w = validation  # rows checked already: no validate_data
            pred = self._predictions(self._output(held_x))
            score = float(self._score_predictions(held_y, pred, held_w))
            model.train()
            self.validation_scores_.append(score)
            # scikit-learn's rule (MLPClassifier's, SGDClassifier's): an epoch that does not
            # beat the best so far by ``tol`` counts, any better one is the new best
            no_change = no_change + 1 if score < best + self._early_stopping_tol() else 0
            if score > best:
                best = score
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return no_change >= self.n_iter_no_change

        bar = progress(self.verbose, total=epochs * X.shape[0])
        try:
            with torch_threads(self.n_jobs):
                train_epochs(model, self._optimizers, self._loss, X, target, weight,
                             batch_size=self.batch_size, epochs=epochs, seed=seed,
                             schedule=schedule, device=torch.device(self.device),
                             end_epoch=end_epoch, bar=bar)
        finally:  # also on Ctrl-C: the bar's line ends before anything else is printed
            if bar is not None:
                bar.close()
        if validation is not None and best_state is not None:
            model.load_state_dict(best_state)
            self.best_validation_score_ = best
        model.eval()
        self._clear_untouched(X)

    def _warn_if_not_converged(
        self, target: torch.Tensor, weight: torch.Tensor | None, *, warm: bool
    ) -> None:
        """``ConvergenceWarning`` after a minibatch ``fit`` that stopped short of a model:

        * the last epoch's training loss is above ``NO_PROGRESS`` times that of the best
          constant output: the model learned little from X (a learning rate too small, or too
          large, for the solver; too few epochs). A last loss above the lowest of
          ``loss_curve_`` names lowering the rate, else raising it or ``max_iter``;
        * else, where ``dual_cd`` solves the linear model exactly (``solver="auto"`` would
          have), a minibatch solver stops after ``max_iter`` epochs short of that optimum: on
          the benchmark's multi-class text sets up to 3.5 points of accuracy below it.

        Not scikit-learn's test of the loss's slope (still improving by ``tol`` at
        ``max_iter``): the default Adam fits end 5 epochs with the loss still falling by
        a quarter an epoch while scoring as well as the models they are compared with.
        """
        if not self.loss_curve_:
            return
        epochs = f"{self.n_iter_} epoch{'s' * (self.n_iter_ != 1)}"
        constant = constant_loss(self._loss, self._best_constant, target, weight,
                                 rows=CONSTANT_ROWS)
        last = self.loss_curve_[-1]
        if constant > 0 and last > NO_PROGRESS * constant:
            lowest = min(self.loss_curve_)
            fix = (f"The loss rose above its lowest, {lowest:.4g}: the rate is too large. Lower "
                   f"learning_rate_init (now {self._learning_rate():g}) or scale the features"
                   if last > lowest else self._more_training())
            dual_cd = self.solver in SOLVERS and self._dual_cd_unsupported(warm=warm) is None
            warnings.warn(
                f"{type(self).__name__}(solver={self.solver!r}) has not converged, it learned "
                f"little or nothing from X: the training loss after {epochs} is {last:.4g}, "
                f"{last / constant:.0%} of the {constant:.4g} of a constant output that ignores "
                f"X. {fix}"
                + (", or use solver='auto' (dual_cd here)." if dual_cd else "."),
                ConvergenceWarning,
                stacklevel=5,
            )
            return
        if self._dual_cd_unsupported(warm=warm) is None:
            warnings.warn(
                f"{type(self).__name__}(solver={self.solver!r}) stopped after {epochs} of "
                "minibatch steps, short of the optimum of this linear model, which "
                "solver='dual_cd' reaches (on multi-class text, minibatch classifiers scored "
                "up to 3.5 points of accuracy below it). Use solver='auto' "
                "(dual_cd here), or "
                f"raise max_iter (now {self._n_epochs()}) and compare on held-out data.",
                ConvergenceWarning,
                stacklevel=5,
            )

    def _more_training(self) -> str:
        """The fix for a fit that learned too little at a falling loss: a larger rate, and
        ``max_iter``, or, where early stopping ended the fit before ``max_iter``, the
        parameters that decide when it stops."""
        rate = f"Raise learning_rate_init (now {self._learning_rate():g})"
        run = len(self.validation_scores_)  # this fit's epochs, with early stopping
        if not self.early_stopping or run >= self._n_epochs():
            return f"{rate} or max_iter (now {self._n_epochs()})"
        return (f"{rate}, or let early stopping wait longer (it ended the fit after {run} of "
                f"max_iter={self._n_epochs()} epochs): raise n_iter_no_change (now "
                f"{self.n_iter_no_change}) or validation_fraction (now "
                f"{self.validation_fraction:g}), lower tol (now {self._early_stopping_tol():g}), "
                "or set early_stopping=False")

    def quantize(self, dtype: str = "int8") -> Any:
        """Quantize the fitted table for inference (``LookupLinear.quantize``): ``"int8"``,
        ``"int4"`` or ``"float16"``; returns ``self``. Predictions move by the quantization
        error; ``partial_fit`` and warm-started ``fit`` raise afterwards (``fit`` trains a
        new float model). On an estimator quantized already, the same ``dtype`` changes
        nothing and another raises (re-quantizing would add a second rounding: quantize the
        float model).

        Raises
        ------
        InputValueError
            An unknown ``dtype``, or one other than the table's on an estimator quantized
            already; a table that ``dtype`` cannot store (``LookupLinear.quantize``'s errors,
            such as a NaN or inf value for ``"int8"`` and ``"int4"``), which leaves the
            estimator float.

        Examples
        --------
        >>> from lookuplinear.sklearn import LookupClassifier
        >>> clf = LookupClassifier(random_state=0).fit([[0, 1], [2], [1, 2]], [0, 1, 1])
        >>> clf.quantize("int8").predict([[0, 1], [2]])
        array([0, 1])
        """
        from ..quant.layer import DTYPES, QuantizedLookupLinear

        if dtype not in DTYPES:
            raise InputValueError(
                f"quantize: dtype must be one of {sorted(DTYPES)}, got {dtype!r}."
            )
        check_is_fitted(self, "model_")
        lookup = self.model_.lookup
        if not isinstance(lookup, QuantizedLookupLinear):
            self.model_.lookup = lookup.cpu().quantize(dtype)
        elif lookup.dtype != dtype:
            raise InputValueError(
                f"quantize({dtype!r}): this {type(self).__name__} is quantized already, as "
                f"{lookup.dtype!r}; quantize the float model (fit it again, or load its "
                "float model file) to get another dtype."
            )
        return self

    def _check_trainable(self) -> None:
        from ..quant.layer import QuantizedLookupLinear

        if hasattr(self, "model_") and isinstance(self.model_.lookup, QuantizedLookupLinear):
            raise InputValueError(
                f"this {type(self).__name__} was quantized for inference; fit a new estimator "
                "(or quantize after training)."
            )

    @torch.no_grad()
    def _clear_untouched(self, X: sp.csr_matrix) -> None:
        """Zero the table rows of columns that no training row has had (over every ``fit`` /
        ``partial_fit`` call so far). They hold only their random start, which training never
        moved; zero, a test row's unseen hashed n-gram adds nothing instead of noise, and a
        model file stores only the rows training touched (its size follows the data, not
        ``bucket``)."""
        touched = getattr(self, "_touched", None)
        if touched is None or touched.shape[0] != X.shape[1]:
            touched = np.zeros(X.shape[1], dtype=bool)
        touched[X.indices] = True
        self._touched = touched
        weight = self.model_.lookup.weight
        if not touched.all():
            untouched = torch.from_numpy(np.flatnonzero(~touched)).to(weight.device)
            weight.index_fill_(0, untouched, 0.0)

    # ------------------------------------------------------------------ prediction
    def _raw_output(self, X: Any) -> np.ndarray:
        """``model_(X)`` as float64 numpy of shape (n_samples, n_outputs), in batches."""
        check_is_fitted(self, "model_")
        return self._output(self._prepare_x(X, reset=False))

    def _output(self, X: sp.csr_matrix) -> np.ndarray:
        """``_raw_output`` of rows prepared already (``_prepare_x``)."""
        return raw_output(self.model_, X, self._n_outputs(), device=self._model_device(),
                          n_jobs=self.n_jobs)

    def _model_device(self) -> torch.device:
        """Where the fitted table lives, which prediction's batches are moved to: ``fit``
        put it on ``device``; a ``device`` set afterwards takes effect at the next ``fit``."""
        lookup = self.model_.lookup
        for tensor in (*lookup.parameters(), *lookup.buffers()):
            return tensor.device
        return torch.device("cpu")

    def _n_outputs(self) -> int:
        out = self.model_.output
        return self.model_.lookup.out_features if out is None else out.out_features

    # ------------------------------------------------------------------ the linear map
    @property
    def coef_(self) -> np.ndarray:
        """The weights of the linear map the fitted model computes, read-only, shape
        (n_outputs, n_features): ``decision_function(X) == Xm @ coef_.T + intercept_``, with
        ``Xm`` the rows of ``X`` scaled by ``mode`` (``X`` itself for ``"sum"``).

        With ``hidden=None``, a view of the table, ``model_.lookup.weight.T`` (float32; a
        copy where the table is on a GPU or quantized): it follows further training. With
        ``hidden=h``, the product of the two layers, ``output.weight @ lookup.weight.T``,
        computed (float64) at each access. ``mode="max"`` is not linear in ``X``:
        :class:`~lookuplinear.NotLinearError` (an ``AttributeError``).
        """
        return self._linear_map()[0]

    @property
    def intercept_(self) -> np.ndarray:
        """The bias of the linear map (``coef_``), read-only, shape (n_outputs,): a view of
        ``model_.lookup.bias`` with ``hidden=None``, of ``model_.output.bias`` with
        ``hidden``."""
        return self._linear_map()[1]

    def _linear_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)`` of shapes (n_outputs, n_features) and (n_outputs,), read-only
        (see ``coef_``)."""
        from ..quant.layer import QuantizedLookupLinear

        check_is_fitted(self, "model_")
        lookup = self.model_.lookup
        if lookup.mode == "max":
            raise NotLinearError(
                f"{type(self).__name__}(mode='max') has no coef_ or intercept_: each output "
                "takes a maximum over a row's features, which no linear map of X computes. "
                "Use sklearn.inspection.permutation_importance, or fit with mode='sum', "
                "'mean' or 'sqrtn'."
            )
        if isinstance(lookup, QuantizedLookupLinear):
            lookup = lookup.dequantize()
        table = lookup.weight.detach()  # (n_features, hidden or n_outputs)
        out = self.model_.output
        if out is None:
            assert lookup.bias is not None  # the linear model has one (LookupNet)
            coef, bias = table.cpu().numpy().T, lookup.bias.detach().cpu().numpy()
        else:
            coef = (out.weight.detach().double() @ table.double().T).cpu().numpy()
            bias = out.bias.detach().cpu().numpy()
        coef.flags.writeable = False
        bias = bias.view()
        bias.flags.writeable = False
        return coef, bias

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.multi_output = True
        return tags
