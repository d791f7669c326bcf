"""What the classifier and the regressor share: input handling, the training loop, prediction."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Integral, Real
from typing import Any, ClassVar, cast

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._bags import Bags
from ..errors import InputValueError, TrainingDivergedError
from ..functional import MODES, Mode, row_scale
from ._model import LookupNet
from ._optim import SOLVERS, default_learning_rate, make_optimizers, make_schedulers

__all__ = ["LookupEstimator"]

#: rows per forward pass at prediction time
PREDICT_BATCH = 8192
#: ``fit`` warns (``ConvergenceWarning``) when a minibatch solver's last epoch left the training
#: loss above this fraction of the loss of the best constant output (a model that ignores X). On
#: the benchmark datasets' validation splits, models above it scored at or near the majority
#: class, and those below it had learned from X
NO_PROGRESS = 0.85
#: rows of the training targets that estimate the best constant output's loss
CONSTANT_ROWS = 65536


def _is_token_lists(X: Any) -> bool:
    """A Python list/tuple whose rows are lists/tuples of Python ints: fastText-style token ids."""
    if not isinstance(X, list | tuple) or len(X) == 0:
        return False
    rows = X[: min(len(X), 20)]
    return all(
        isinstance(r, list | tuple)
        and all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in r)
        for r in rows
    ) and any(len(r) for r in X)


class _CSRBatches:
    """A CSR matrix as torch tensors, cut into ``Bags`` of consecutive rows.

    Rows ``a:b`` are ``Bags(indices[indptr[a]:indptr[b]], indptr[a:b+1] - indptr[a], data[...])``:
    a view, no copy, nothing densified.
    """

    def __init__(self, X: sp.csr_matrix) -> None:
        self.n = X.shape[0]
        self.indptr = torch.from_numpy(np.asarray(X.indptr, dtype=np.int64))
        self.indices = torch.from_numpy(np.asarray(X.indices, dtype=np.int64))
        self.data = torch.from_numpy(np.asarray(X.data, dtype=np.float32))

    def rows(self, a: int, b: int) -> Bags:
        s, e = int(self.indptr[a]), int(self.indptr[b])
        return Bags(self.indices[s:e], self.indptr[a : b + 1] - s, self.data[s:e])

    def bounds(self, size: int) -> Iterator[tuple[int, int]]:
        """``(a, b)`` of each batch of ``size`` consecutive rows."""
        for a in range(0, self.n, size):
            yield a, min(a + size, self.n)

    def batches(self, size: int) -> Iterator[tuple[int, int, Bags]]:
        for a, b in self.bounds(size):
            yield a, b, self.rows(a, b)


def _fold_mode(X: sp.csr_matrix, mode: str) -> sp.csr_matrix:
    """``X`` with ``mode``'s row scaling folded into its values (``"mean"``: each row divided
    by its sum; ``row_scale``'s factors), so that a ``"sum"`` lookup of it is a ``mode`` lookup
    of ``X``: computed once per ``fit`` instead of at every step."""
    scale = row_scale(Bags.from_scipy(X), mode, None).numpy()  # (N,)
    data = X.data * np.repeat(scale, np.diff(X.indptr))
    return sp.csr_matrix((data, X.indices, X.indptr), shape=X.shape)


class LookupEstimator(BaseEstimator):
    """Base class: an ``X -> LookupNet -> outputs`` model trained by minibatch optimisation.

    Subclasses define ``__init__`` (the parameters), ``_encode_targets`` and ``_loss``.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
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
        "n_jobs": [Interval(Integral, 1, None, closed="left"), None],
        "warm_start": ["boolean"],
    }

    #: the loss ``solver="dual_cd"`` solves, and the epochs of a stochastic solver's ``fit``
    _DUAL_LOSS: ClassVar[str]
    _EPOCHS: ClassVar[int]
    #: ``alpha=None`` with ``dual_cd`` is this / n_samples (LinearSVC's C=1, Ridge's alpha=1)
    _ALPHA_TIMES_N: ClassVar[float]

    # set by subclasses' __init__
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

    # ------------------------------------------------------------------ input
    def _prepare_x(self, X: Any, *, reset: bool) -> sp.csr_matrix:
        """``X`` as a float32 CSR matrix; sets or checks ``n_features_in_``."""
        if isinstance(X, Bags) or _is_token_lists(X):
            bags = X if isinstance(X, Bags) else Bags.from_lists(X)
            if reset:
                top = int(bags.indices.max()) + 1 if bags.nnz else 1
                self.n_features_in_ = top
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            else:
                check_is_fitted(self)
            return bags.to_scipy(self.n_features_in_)
        X = validate_data(
            self, _csr_first(X), accept_sparse=True, dtype=[np.float32, np.float64], reset=reset
        )
        return _to_csr(X)

    def _prepare_xy(self, X: Any, y: Any, *, reset: bool) -> tuple[sp.csr_matrix, np.ndarray]:
        if isinstance(X, Bags) or _is_token_lists(X):
            Xc = self._prepare_x(X, reset=reset)
            y = np.asarray(y)
            if y.shape[0] != Xc.shape[0]:
                raise ValueError(
                    f"X has {Xc.shape[0]} rows (token lists) but y has {y.shape[0]} entries; "
                    "pass one target per row."
                )
            return Xc, y
        X, y = validate_data(
            self, _csr_first(X), y, accept_sparse=True, dtype=[np.float32, np.float64],
            multi_output=True, reset=reset,
        )
        return _to_csr(X), y

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
        """``learning_rate_init``, or the stochastic solver's default for the loss."""
        if self.learning_rate_init is not None:
            return float(self.learning_rate_init)
        return default_learning_rate(self._stochastic_solver(), self._loss_name())

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
    ) -> None:
        """Solve the linear model exactly (``_dualcd.solve``) into ``model_``."""
        from ._dualcd import solve

        self._check_trainable()
        lookup = self.model_.lookup
        if lookup.mode in ("mean", "sqrtn"):
            X = _fold_mode(X, lookup.mode)
        n = X.shape[0]
        alpha = self._ALPHA_TIMES_N / max(n, 1) if self.alpha is None else self.alpha
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
        embedding table draws only the rows of ``X``'s columns (the training rows): the others
        would be zeroed at the end of ``fit`` (``_clear_untouched``), and with fastText's 2
        million hash buckets drawing them was most of a small ``fit``."""
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
        self._optimizers = make_optimizers(
            self._stochastic_solver(),
            self.model_.sparse_parameters(),
            self.model_.dense_parameters(),
            lr=self._learning_rate(),
            weight_decay=self.alpha or 0.0,
        )
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
        validation: tuple[Any, Any] | None = None,
    ) -> None:
        """Minibatch training: shuffle rows with a seeded generator, step on each batch."""
        self._check_trainable()
        bar = _progress(self.verbose, total=epochs * X.shape[0])
        try:
            with torch_threads(self.n_jobs):
                self._epochs(X, target, weight, epochs=epochs, seed=seed, schedule=schedule,
                             validation=validation, bar=bar)
        finally:  # also on Ctrl-C: the bar's line ends before anything else is printed
            if bar is not None:
                bar.close()
        self._clear_untouched(X)

    def _warn_if_no_progress(self, target: torch.Tensor, weight: torch.Tensor | None) -> None:
        """``ConvergenceWarning`` when ``fit``'s last epoch left the training loss above
        ``NO_PROGRESS`` times that of the best constant output: the model learned little or
        nothing from X (a learning rate too small, or too large, for the solver; too few
        epochs)."""
        if not self.loss_curve_:
            return
        constant = self._constant_loss(target, weight)
        last = self.loss_curve_[-1]
        if constant > 0 and last > NO_PROGRESS * constant:
            warnings.warn(
                f"{type(self).__name__}(solver={self.solver!r}) learned little or nothing from "
                f"X: the training loss after {self.n_iter_} epoch{'s' * (self.n_iter_ != 1)} is "
                f"{last:.4g}, "
                f"{last / constant:.0%} of the {constant:.4g} of a constant output that ignores "
                f"X. Raise learning_rate_init (now "
                f"{self._learning_rate():g}) or max_iter (now {self._n_epochs()})"
                + (", or use solver='auto'." if self.solver in SOLVERS else "."),
                ConvergenceWarning,
                stacklevel=3,
            )

    def _constant_loss(self, target: torch.Tensor, weight: torch.Tensor | None) -> float:
        """The training loss of the best constant output (one value per output, fitted by
        L-BFGS on up to ``CONSTANT_ROWS`` seeded rows of ``target``): what a model that ignores
        X reaches."""
        n = target.shape[0]
        rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:CONSTANT_ROWS]
        t, w = target[rows], None if weight is None else weight[rows]
        const = torch.zeros(self._n_outputs(), requires_grad=True)
        opt = torch.optim.LBFGS([const], max_iter=100, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = self._loss(const.expand(len(rows), -1), t, w)
            loss.backward()
            return loss

        with torch.enable_grad():
            opt.step(closure)
            return float(self._loss(const.detach().expand(len(rows), -1), t, w))

    def quantize(self, dtype: str = "int8") -> Any:
        """Quantize the fitted table for inference (``LookupLinear.quantize``): ``"int8"``,
        ``"int4"`` or ``"float16"``; returns ``self``. Predictions move by the quantization
        error; ``partial_fit`` and warm-started ``fit`` raise afterwards (``fit`` trains a
        new float model).

        Examples
        --------
        >>> from lookuplinear.sklearn import LookupClassifier
        >>> clf = LookupClassifier(random_state=0).fit([[0, 1], [2], [1, 2]], [0, 1, 1])
        >>> clf.quantize("int8").predict([[0, 1], [2]])
        array([0, 1])
        """
        from .._quantized import QuantizedLookupLinear

        check_is_fitted(self, "model_")
        if not isinstance(self.model_.lookup, QuantizedLookupLinear):
            self.model_.lookup = self.model_.lookup.cpu().quantize(dtype)
        return self

    def _check_trainable(self) -> None:
        from .._quantized import QuantizedLookupLinear

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

    def _epochs(
        self,
        X: sp.csr_matrix,
        target: torch.Tensor,
        weight: torch.Tensor | None,
        *,
        epochs: int,
        seed: int,
        schedule: str,
        validation: tuple[Any, Any] | None,
        bar: Any,
    ) -> None:
        n = X.shape[0]
        gen = torch.Generator().manual_seed(seed)
        per_epoch = -(-n // self.batch_size)
        schedulers = make_schedulers(self._optimizers, schedule, epochs * per_epoch)
        best, best_state, no_change = -np.inf, None, 0
        model, device = self.model_, torch.device(self.device)
        model.train()
        prescaled = model.lookup.mode in ("mean", "sqrtn")
        if prescaled:
            X = _fold_mode(X, model.lookup.mode)
        for epoch in range(epochs):
            perm = torch.randperm(n, generator=gen)
            batches = _CSRBatches(X[perm.numpy()])
            t_epoch, w_epoch = target[perm].to(device), None if weight is None else weight[perm]
            total, seen = 0.0, 0
            for a, b in batches.bounds(self.batch_size):
                w = None if w_epoch is None else w_epoch[a:b].to(device)
                bags = batches.rows(a, b).to(device)
                loss = self._loss(model(bags, prescaled=prescaled), t_epoch[a:b], w)
                for opt in self._optimizers:
                    opt.zero_grad(set_to_none=True)
                loss.backward()  # the fused optimizer updates the table here
                for opt in self._optimizers:
                    opt.step()
                for sched in schedulers:
                    sched.step()
                total += float(loss.detach()) * (b - a)
                seen += b - a
                if bar is not None:
                    bar.update(b - a)
                    bar.set_postfix(epoch=epoch + 1, loss=f"{total / seen:.4f}")
            epoch_loss = total / max(seen, 1)
            if not np.isfinite(epoch_loss):
                raise TrainingDivergedError(
                    f"the training loss became {epoch_loss} in epoch {epoch + 1}: the optimizer "
                    f"diverged. Lower learning_rate_init (now {self._learning_rate()}) or scale "
                    "the features/targets."
                )
            self.loss_curve_.append(epoch_loss)
            self.n_iter_ += 1
            if validation is not None:
                score = float(self.score(*validation))
                model.train()
                self.validation_scores_.append(score)
                if score > best + (1e-4 if self.tol is None else self.tol):
                    best, no_change = score, 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                else:
                    no_change += 1
                if no_change >= self.n_iter_no_change:
                    break
        if validation is not None and best_state is not None:
            model.load_state_dict(best_state)
            self.best_validation_score_ = best
        model.eval()

    # ------------------------------------------------------------------ prediction
    def _raw_output(self, X: Any) -> np.ndarray:
        """``model_(X)`` as float64 numpy of shape (n_samples, n_outputs), in batches."""
        check_is_fitted(self, "model_")
        Xc = self._prepare_x(X, reset=False)
        model, device = self.model_, torch.device(self.device)
        model.eval()
        outs = [np.zeros((0, self._n_outputs()), dtype=np.float64)]
        with torch.no_grad(), torch_threads(self.n_jobs):
            for _, _, bags in _CSRBatches(Xc).batches(PREDICT_BATCH):
                outs.append(model.predict(bags.to(device)).cpu().numpy())
        return np.concatenate(outs)

    def _n_outputs(self) -> int:
        out = self.model_.output
        return self.model_.lookup.out_features if out is None else out.out_features

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.multi_output = True
        return tags


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block, the previous setting after it.

    Minibatch steps on sparse rows are a few small kernels each; on a small or shared machine
    intra-op threads only add synchronisation, so the estimators default to one thread.
    """
    if n is None or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _csr_first(X: Any) -> Any:
    """Sparse input in CSR before validation (scikit-learn cannot check DOK/LIL for NaN)."""
    if not sp.issparse(X):
        return X
    m: Any = X  # issparse narrows to an ABC without the matrix API
    return m if m.format in ("csr", "csc", "coo") else m.tocsr()


def _to_csr(X: Any) -> sp.csr_matrix:
    if sp.issparse(X):
        m: Any = X
        return sp.csr_matrix(m, dtype=np.float32)
    return sp.csr_matrix(np.asarray(X, dtype=np.float32))


def _progress(verbose: int, *, total: int) -> Any:
    if not verbose:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="ex", unit_scale=True, file=sys.stderr, leave=True)
