"""``LookupClassifier``: a linear SVM, logistic regression or fastText on sparse input."""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import (
    check_classification_targets,
    type_of_target,
    unique_labels,
)
from sklearn.utils.validation import column_or_1d

from ..errors import InputValueError
from ._base import LookupEstimator
from ._predict import class_scores

__all__ = ["LookupClassifier"]

#: the smallest probability ``_best_constant`` takes the log of (a logit of about -69)
_TINY = 1e-30

#: how to train on labels outside ``classes_``, by the call that met them: the first
#: ``partial_fit`` (its ``classes=`` fixes them), a warm-started ``fit`` (it continues the
#: fitted model) or a later ``partial_fit`` (the call that built the model fixed them)
_UNKNOWN_LABELS_FIX = {
    "first": "Pass every label in classes= on the first partial_fit call, e.g. "
             "classes=np.unique(y_all).",
    "warm": "A warm-started fit continues the fitted model and its classes: set "
            "warm_start=False to fit a new model with these labels.",
    "later": "classes_ is fixed by the call that built the model (fit: the labels of its y; "
             "a first partial_fit: its classes=), and partial_fit continues that model. To "
             "train on these labels, build a new model: call fit on a y that holds every "
             "label, or partial_fit(X, y, classes=<every label>, e.g. np.unique(y_all)) "
             "first on a new estimator (sklearn.base.clone(est)).",
}


class LookupClassifier(ClassifierMixin, LookupEstimator):
    """A classifier on sparse rows: ``linear(densify(X) @ E)`` scored per class, as LinearSVC.

    Dense equivalent: with ``hidden=None`` it is ``nn.Linear(n_features, n_classes)`` on ``X``
    (one output for two classes), trained as ``LinearSVC`` (``loss="squared_hinge"``; at the
    defaults it solves ``LinearSVC()``'s problem, one-vs-rest, by the same dual coordinate
    descent) or as multinomial logistic regression (``loss="log_loss"``); with ``hidden=h`` it
    is ``nn.Linear(h, n_classes)(nn.Linear(n_features, h, bias=False)(X))``, fastText's
    architecture when ``mode="mean"`` and ``X`` holds token counts. The first layer is a
    :class:`~lookuplinear.LookupLinear` with a sparse gradient: ``X`` (scipy.sparse of any format,
    a dense array, or a list of token-id lists) is never densified.

    Parameters
    ----------
    loss : {"squared_hinge", "log_loss"}, default "squared_hinge"
        ``"squared_hinge"``: ``sum_k max(0, 1 - t_k * out_k) ** 2`` with ``t_k = +1`` for the
        true class (label) and ``-1`` for the others, one-vs-rest as ``LinearSVC``'s default
        (no ``predict_proba``, as for ``SGDClassifier(loss="hinge")``). ``"log_loss"``:
        softmax cross-entropy (a sigmoid per output for two classes or multilabel), with
        ``predict_proba``; fastText's loss.
    n_features : int or None, default None
        The width of the input, as ``HashingVectorizer``'s ``n_features``: token-id lists are
        read as rows of this many columns (a vocabulary of ids ``0 .. n_features - 1``; a
        larger id is a :class:`~lookuplinear.LookupIndexError` naming it), so that folds of a
        cross-validation and the batches of ``partial_fit`` share one width whichever ids
        they hold. A matrix ``X`` must have this many columns. None: a matrix's own width,
        or the largest token id of the first ``fit``/``partial_fit`` + 1.
    hidden : int or None, default None
        Embedding size (fastText's ``dim``, typically 10-100); ``None`` for a linear model.
    mode : {"sum", "mean", "sqrtn", "max"}, default "sum"
        How each row of ``X`` is reduced; ``"sum"`` is exactly ``X @ W``, ``"mean"`` divides a row
        by the sum of its values (fastText's average of word vectors), ``"sqrtn"`` by the root
        of the sum of their squares; ``"max"`` takes, per output, the maximum of the table rows
        of a row's features (``X`` must be 0/1; not linear, trained with a dense table
        gradient).
    solver : {"auto", "dual_cd", "adam", "adamw", "sgd", "adagrad", "rowwise_adagrad"}, \
default "auto"
        ``"dual_cd"`` solves the linear model exactly (the minimum of the mean loss plus
        ``alpha / 2 ||W||^2``, bias included) by dual coordinate descent, as liblinear solves
        ``LinearSVC``: for ``hidden=None``, ``loss="squared_hinge"`` and a ``mode`` other than
        ``"max"``, without ``early_stopping`` or a warm start. The others are minibatch
        optimizers from ``lookuplinear.optim`` run for ``max_iter`` epochs. ``"auto"`` is
        ``"dual_cd"`` wherever it applies and ``"adam"`` elsewhere (and in ``partial_fit``).
    learning_rate_init : float or None, default None
        Initial learning rate of a minibatch solver. None: the solver's own, chosen on the
        validation splits of real text datasets: 0.01 for ``"adam"``/``"adamw"`` (and
        ``"auto"`` where it is Adam), 0.1 for ``"adagrad"``/``"rowwise_adagrad"`` (0.3 for
        ``"adagrad"`` on the linear model with ``loss="log_loss"``), and for ``"sgd"`` 10 with
        a squared loss, 30 with ``loss="log_loss"`` (1 and 3 with ``hidden``), its biases
        at a hundredth of that rate, as ``SGDClassifier``'s on sparse data. ``fit`` warns
        (``ConvergenceWarning``) when its last epoch's training loss is above 85% of that of
        the best constant output (the model learned little or nothing from X), or when a
        minibatch solver fitted the linear model that ``"auto"`` solves exactly by
        ``"dual_cd"``: it stops short of that optimum (up to 3.5 points of accuracy below
        it on multi-class text).
    learning_rate : {"constant", "linear"}, default "constant"
        ``"linear"`` decays the rate linearly to zero over all steps of ``fit`` (fastText).
    max_iter : int or None, default None
        Passes over the training data (epochs) in ``fit`` (``partial_fit`` makes one): at most
        this many for ``dual_cd`` (None: 1000), exactly this many for a minibatch solver
        (None: 5).
    batch_size : int, default 128
        Rows per gradient step.
    alpha : float or None, default None
        L2 penalty: the objective is the mean loss plus ``alpha / 2 ||W||^2``, a row's loss
        summed over its outputs (so each label of a multilabel fit is its own fit). None:
        ``1 / n_samples`` for ``dual_cd``, which is ``LinearSVC(C=1)``'s objective, and 0 for
        a minibatch solver. A minibatch solver applies it as the optimizer's ``weight_decay``,
        on the table to the rows each batch touches.
    early_stopping : bool, default False
        Hold out ``validation_fraction`` of the data (stratified) and stop when its accuracy has
        not improved by ``tol`` for ``n_iter_no_change`` epochs; the best epoch's weights are kept.
        ``fit`` only: ``partial_fit`` refuses it, as scikit-learn's ``partial_fit`` does.
    validation_fraction : float, default 0.1
    n_iter_no_change : int, default 5
    tol : float or None, default None
        ``dual_cd`` stops when the projected gradient's spread over an epoch falls under it
        (liblinear's test; None: 0.1, liblinear's default for its dual solvers);
        ``early_stopping`` counts an epoch whose held-out score is not at least ``tol`` above
        the best so far (None: 1e-4).
    class_weight : dict, "balanced" or None, default None
        Weights of the classes in the loss, as in scikit-learn's linear models: multiplied
        with ``sample_weight``; ``"balanced"`` counts each class's sample weights. With more
        than two classes and the squared hinge (one-vs-rest) class k's weight weighs its rows
        in output k only, the other rows 1 there (``LinearSVC``, ``SGDClassifier``). For a
        multilabel ``y``, ``"balanced"`` only (each label's 0/1 balanced, multiplied over a
        row's labels, as ``compute_sample_weight``); ``partial_fit`` refuses ``"balanced"``,
        as ``SGDClassifier.partial_fit`` does (pass ``compute_class_weight``'s as a dict).
    random_state : int, RandomState instance or None, default None
        Seeds weight initialisation and shuffling: the same seed gives the same model.
    verbose : int, default 0
        A progress bar (examples/s, loss) on stderr when > 0; ``dual_cd`` prints a line per
        epoch.
    device : str or torch.device, default "cpu"
        Where ``fit`` puts the model (``"cpu"``, ``"cuda"``, ``"cuda:N"``). Prediction runs
        where the fitted model is: a ``device`` set after ``fit`` takes effect at the next
        ``fit``.
    warm_start : bool, default False
        ``fit`` continues from the fitted model (and its optimizer state) instead of starting
        anew: ``max_iter`` more passes; the labels must be among ``classes_``. It (and every
        ``partial_fit``) trains at the current ``learning_rate_init``, ``alpha`` and the
        other training parameters; changing ``n_features``, ``hidden``, ``mode``, ``loss``,
        ``device`` or the minibatch optimizer (``solver``) would make another model, and is
        an ``InputValueError`` (fit without ``warm_start`` to start anew).
    n_jobs : int or None, default 1
        ``torch.set_num_threads`` while training and predicting (restored afterwards), as
        scikit-learn counts: ``-1`` is every CPU (joblib's ``effective_n_jobs``), ``-2`` all
        but one; ``None`` keeps torch's setting. With more than one, the table kernels split
        a minibatch of 4,096 IDs or more over the threads.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels (for multilabel ``y``: ``arange(n_labels)``).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        The linear map's weights, read-only: one row for two classes, one per class (label)
        otherwise; ``decision_function(X) == Xm @ coef_.T + intercept_`` with ``Xm`` the rows
        of ``X`` scaled by ``mode``. With ``hidden=None`` a view of ``model_``'s table (it
        follows ``partial_fit``; ``coef_.copy()`` keeps a snapshot); with ``hidden``, the
        product of the two layers, computed at each access. Not defined for ``mode="max"``
        (:class:`~lookuplinear.NotLinearError`, an ``AttributeError``).
    intercept_ : ndarray of shape (1,) or (n_classes,)
        The linear map's bias, read-only (a view of the model's bias).
    n_features_in_ : int
    model_ : LookupNet
        The trained ``torch.nn.Module``.
    loss_curve_ : list of float
        Mean training loss of each epoch of a minibatch solver, without the ``alpha``
        penalty (empty after ``dual_cd``).
    n_iter_ : int
        Epochs (``dual_cd``: passes) since the model was built: a warm-started ``fit`` and
        each ``partial_fit`` add theirs (scikit-learn's estimators count the last call's).
    validation_scores_ : list of float
        With ``early_stopping``: the held-out accuracy after each epoch.
    best_validation_score_ : float
        With ``early_stopping``: the best of ``validation_scores_``.

    Raises
    ------
    InputValueError
        ``y`` holds a single class, or a multi-output multiclass target.

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from sklearn.pipeline import make_pipeline
    >>> from lookuplinear.sklearn import LookupClassifier
    >>> texts = ["good movie", "great film", "bad movie", "awful film"] * 10
    >>> labels = ["pos", "pos", "neg", "neg"] * 10
    >>> clf = make_pipeline(TfidfVectorizer(), LookupClassifier(max_iter=20, random_state=0))
    >>> clf.fit(texts, labels).predict(["a great movie", "an awful movie"])
    array(['pos', 'neg'], dtype='<U3')
    """

    _DUAL_LOSS = "squared_hinge"
    _EPOCHS = 5
    _ALPHA_TIMES_N = 1.0

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **LookupEstimator._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "loss": [StrOptions({"squared_hinge", "log_loss"})],
    }

    def __init__(
        self,
        *,
        loss: str = "squared_hinge",
        n_features: int | None = None,
        hidden: int | None = None,
        mode: str = "sum",
        solver: str = "auto",
        learning_rate_init: float | None = None,
        learning_rate: str = "constant",
        max_iter: int | None = None,
        batch_size: int = 128,
        alpha: float | None = None,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        tol: float | None = None,
        class_weight: dict[Any, float] | str | None = None,
        random_state: Any = None,
        verbose: int = 0,
        device: str | torch.device = "cpu",
        n_jobs: int | None = 1,
        warm_start: bool = False,
    ) -> None:
        self.loss = loss
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
        self.class_weight = class_weight
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.n_jobs = n_jobs
        self.warm_start = warm_start

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LookupClassifier:
        """Train from scratch: solve the linear model (``solver="dual_cd"``), or ``max_iter``
        passes (epochs) of a stochastic solver.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or token-id lists
            A rectangular nested list is a dense matrix, as in scikit-learn; a ragged list of
            lists of ints (or ``Bags``) is token-id bags (see docs/sklearn.md).
        y : {array-like, sparse matrix} of shape (n_samples,) or (n_samples, n_labels)
            Class labels, or a 0/1 indicator matrix for multilabel (one-vs-all sigmoid outputs;
            a scipy.sparse one makes ``predict`` answer a sparse matrix).
        sample_weight : array-like of shape (n_samples,), float or None, default None
            Non-negative weight of each row's loss, multiplied by its ``class_weight``. A row
            of weight 0 is left out; an integer weight ``k`` gives the objective of the row
            repeated ``k`` times. ``dual_cd`` solves ``LinearSVC().fit(X, y, sample_weight)``'s
            problem (``alpha=None`` is one over the weights' sum).

        Returns
        -------
        self : LookupClassifier

        Raises
        ------
        InputValueError
            ``sample_weight`` negative, NaN or infinite, all zero, or not one per row.
        """
        return self._fit(X, y, sample_weight)

    def partial_fit(self, X: Any, y: Any, classes: Any = None,
                    sample_weight: Any = None) -> LookupClassifier:
        """One pass over ``(X, y)`` at a constant learning rate, continuing from the last call.

        ``classes`` (all labels that will ever appear) is required on the first call, as in
        scikit-learn's ``SGDClassifier.partial_fit``; not for a multilabel indicator ``y``.
        ``sample_weight`` as in ``fit``, relative to the call's rows: the pass minimises
        their weighted mean loss.
        """
        self._begin_partial_fit()
        if isinstance(self.class_weight, str) and self.class_weight == "balanced":
            raise InputValueError(
                "class_weight 'balanced' is not supported for partial_fit: a call sees only "
                "its own rows' class frequencies. In order to use 'balanced' weights, use "
                "compute_class_weight('balanced', classes=classes, y=y) with all classes (y a "
                "large enough sample of the training targets) and pass the weights as a dict: "
                "class_weight=dict(zip(classes, weights))."
            )
        if (hasattr(self, "model_") and classes is not None and not self.multilabel_
              and not np.array_equal(self.classes_, unique_labels(classes))):
            raise InputValueError(
                f"`classes={classes!r}` is not the same as on last call to partial_fit, "
                f"was: {self.classes_!r}. The classes are fixed by the first call: pass "
                "the same classes (or none), or call fit to start anew with others."
            )
        return self._partial_fit(X, y, epochs=1, schedule="constant", classes=classes,
                                 sample_weight=sample_weight)

    # ------------------------------------------------------------------ predict
    def decision_function(self, X: Any) -> np.ndarray:
        """The logits ``model_(X)``: shape (n_samples,) for two classes, else (n_samples, n_out)."""
        return class_scores(self._raw_output(X), binary=self._binary(),
                            multilabel=self.multilabel_, proba=False)

    @available_if(lambda self: self.loss == "log_loss")
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_samples, n_classes); per-label sigmoids for multilabel."""
        return class_scores(self._raw_output(X), binary=self._binary(),
                            multilabel=self.multilabel_, proba=True)

    @available_if(lambda self: self.loss == "log_loss")
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """``log(predict_proba(X))``."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> Any:
        """The most likely class; for multilabel, the 0/1 matrix of labels with logit > 0,
        of int (``np.int_``) whatever the fitted ``y``'s dtype, and a scipy.sparse
        ``csr_matrix`` where the model was fitted on a sparse ``y``, as ``MLPClassifier``
        and ``OneVsRestClassifier`` answer."""
        return self._predictions(self._raw_output(X))

    def _predictions(self, out: np.ndarray) -> Any:
        if self.multilabel_:
            labels = (out > 0).astype(int)
            return sp.csr_matrix(labels) if getattr(self, "_y_sparse", False) else labels
        idx = (out.ravel() > 0).astype(int) if self._binary() else out.argmax(axis=1)
        return self.classes_[idx]

    def _score_predictions(self, y: Any, pred: np.ndarray, sample_weight: Any) -> float:
        """``score``'s accuracy (``ClassifierMixin.score``)."""
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(y, pred, sample_weight=sample_weight))

    # ------------------------------------------------------------------ targets
    def _set_targets(self, y: np.ndarray, classes: Any, *, partial: bool) -> np.ndarray:
        """Set ``classes_``/``multilabel_`` and return ``y`` encoded as class indices."""
        if partial and classes is None and type_of_target(y) != "multilabel-indicator":
            raise InputValueError(
                "partial_fit needs classes= (every label that can appear) on its first call, "
                "got classes=None. Pass classes=np.unique(y_all)."
            )
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        kind = type_of_target(y)
        self.multilabel_ = kind == "multilabel-indicator"
        if self.multilabel_:
            y = np.asarray(y)
            if not np.isin(y, (0, 1)).all():  # scikit-learn's kind also takes {-1, 1}, {1, 2}
                raise InputValueError(
                    f"y is a label indicator matrix of {y.shape[1]} labels, which must hold 0 "
                    f"and 1, got the values {np.unique(y).tolist()}. Pass one 0/1 column per "
                    "label, e.g. (y == positive).astype(int)."
                )
            self.classes_ = np.arange(y.shape[1])
            return y
        if y.ndim != 1:
            raise InputValueError(
                f"y must be 1-D labels or a multilabel 0/1 indicator matrix, got {kind} of "
                f"shape {y.shape}. Train one classifier per output for multi-output multiclass."
            )
        self.classes_ = np.unique(y) if classes is None else np.unique(np.asarray(classes))
        if len(self.classes_) < 2:
            raise InputValueError(
                f"LookupClassifier needs at least 2 classes in y, got 1 class "
                f"({self.classes_[0]!r}). Add examples of another class."
            )
        return self._encode(y, call="first")

    def _built_with(self) -> dict[str, Any]:
        return {**super()._built_with(), "loss": self.loss}

    def _encode_targets(self, y: np.ndarray, *, warm: bool) -> np.ndarray:
        return self._encode(y, call="warm" if warm else "later")

    def _prepare_xy(self, X: Any, y: Any, *, reset: bool) -> tuple[Any, np.ndarray]:
        if reset:  # the model's multilabel predictions are sparse, as MLPClassifier's
            self._y_sparse = sp.issparse(y)
        if sp.issparse(y):  # a sparse label indicator, densified as MLPClassifier takes it
            y = cast(Any, y).toarray()
        return super()._prepare_xy(X, y, reset=reset)

    def _encode(self, y: np.ndarray, *, call: str = "later") -> np.ndarray:
        """``y`` as indices into ``classes_`` (a 0/1 indicator matrix as it is), refused where
        it holds another label (or another number of labels); ``call`` says which call the
        message tells how to fix: ``"first"`` (the first ``partial_fit``, with ``classes=``),
        ``"warm"`` (a warm-started ``fit``) or ``"later"`` (a ``partial_fit`` after the model
        is built)."""
        if self.multilabel_:
            y = np.asarray(y)
            n = len(self.classes_)
            if y.ndim != 2 or y.shape[1] != n or not np.isin(y, (0, 1)).all():
                raise InputValueError(
                    f"y must be a 0/1 indicator matrix of {n} labels, as the fitted multilabel "
                    f"model's, got {'a matrix' if y.ndim == 2 else 'an array'} of shape "
                    f"{y.shape}. Pass one 0/1 column per label of classes_, or "
                    + ("set warm_start=False to fit a new model on other labels."
                       if call == "warm" else "call fit to train a new model on other labels.")
                )
            return y
        y = column_or_1d(y, warn=True)
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        bad = self.classes_[idx] != y
        if bad.any():
            raise InputValueError(
                f"y holds labels not in classes_ {self.classes_.tolist()}: "
                f"{np.unique(y[bad]).tolist()}. " + _UNKNOWN_LABELS_FIX[call]
            )
        return idx

    def _signs(self, y: np.ndarray) -> np.ndarray:
        """The one-vs-rest targets of ``dual_cd``: +1 for the row's class (label), else -1;
        shape (n, n_outputs)."""
        y = np.asarray(y)
        if self.multilabel_:
            return np.where(y > 0, 1.0, -1.0)
        if self._binary():
            return np.where(y == 1, 1.0, -1.0)[:, None]
        signs = np.full((len(y), len(self.classes_)), -1.0)
        signs[np.arange(len(y)), y] = 1.0
        return signs

    def _loss_name(self) -> str:
        return self.loss

    def _binary(self) -> bool:
        return not self.multilabel_ and len(self.classes_) == 2

    def _n_model_outputs(self, y: np.ndarray) -> int:
        return 1 if self._binary() else len(self.classes_)

    def _stratify(self, y: np.ndarray) -> np.ndarray | None:
        return y if y.ndim == 1 else None

    def _held_out(self, y: np.ndarray) -> Any:
        return self.classes_[y] if y.ndim == 1 else y

    def _dual_problem(
        self, y: np.ndarray, weight: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        return self._signs(y), None

    def _class_weights(self, y: np.ndarray, sample_weight: np.ndarray | None) -> np.ndarray | None:
        """``class_weight`` of each row's class; ``"balanced"`` counts the classes with the
        sample weights, as scikit-learn's linear models do (a class whose rows all weigh 0 is
        infinite, on rows that are left out). One-vs-rest with the squared hinge and more
        than two classes, (n, n_classes): output k weighs class k's rows by its weight and
        the others by 1, as ``LinearSVC`` and ``SGDClassifier`` weigh their binary problems.
        For multilabel ``y``, ``"balanced"`` only, as scikit-learn's ``compute_sample_weight``
        takes it for multi-output ``y``: each label's 0/1 balanced, a row's weight the product
        over the labels."""
        if self.class_weight is None:
            return None
        if self.multilabel_:
            return self._multilabel_class_weights(y, sample_weight)
        with np.errstate(divide="ignore"):
            cw = np.asarray(compute_class_weight(self.class_weight, classes=self.classes_,
                                                 y=self.classes_[y], sample_weight=sample_weight),
                            dtype=np.float64)
        if self.loss == "squared_hinge" and not self._binary():
            # one-vs-rest, as liblinear and SGDClassifier weigh it: class k's weight on its own
            # rows in output k only, the rest of output k's rows at 1
            weight = np.ones((len(y), len(self.classes_)))
            weight[np.arange(len(y)), y] = cw[y]
            return weight
        return cw[y]

    def _multilabel_class_weights(self, y: np.ndarray,
                                  sample_weight: np.ndarray | None) -> np.ndarray:
        if not (isinstance(self.class_weight, str) and self.class_weight == "balanced"):
            raise InputValueError(
                f"class_weight={self.class_weight!r} weighs the classes of 1-D labels, but y is "
                f"a multilabel indicator ({len(self.classes_)} labels). Pass "
                "class_weight='balanced' (each label's 0/1 balanced, multiplied over a row's "
                "labels, as scikit-learn's compute_sample_weight does for multi-output y), or "
                "weigh the rows: sample_weight=compute_sample_weight([{0: w0, 1: w1}, ...], y) "
                "with class_weight=None."
            )
        weight = np.ones(len(y))
        for label in np.asarray(y, dtype=np.int64).T:
            present = np.unique(label)  # a label always 0 (or 1) weighs 1
            with np.errstate(divide="ignore"):
                cw = compute_class_weight("balanced", classes=present, y=label,
                                          sample_weight=sample_weight)
            weight *= np.asarray(cw, dtype=np.float64)[np.searchsorted(present, label)]
        return weight

    def _targets(self, y: np.ndarray) -> torch.Tensor:
        """The loss's target tensor: class indices, or 0/1 of shape (n, n_outputs)."""
        if self.multilabel_ or self._binary():
            target = torch.as_tensor(np.asarray(y, dtype=np.float32))
            return target if self.multilabel_ else target.reshape(-1, 1)
        return torch.as_tensor(np.asarray(y, dtype=np.int64))

    def _best_constant(self, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """The loss's minimiser over constant outputs, from each class's (label's) weighted
        frequency ``p``: ``2 p - 1`` (the weighted mean of the +-1 signs) for the squared
        hinge; ``log p`` for the softmax, ``logit(p)`` for the sigmoids (clipped at
        ``+-69``, where a class absent from ``target`` would need an infinite one)."""
        w = torch.ones(len(target), dtype=torch.float64) if weight is None else weight.double()
        if w.dim() == 2:  # one-vs-rest weights: output k's weighted mean of its +-1 signs
            sign = torch.full(w.shape, -1.0, dtype=torch.float64)
            sign.scatter_(1, target.unsqueeze(1), 1.0)
            return ((w * sign).sum(0) / w.sum(0).clamp_min(_TINY)).float()
        if target.dtype == torch.int64:
            counts = torch.bincount(target, weights=w, minlength=len(self.classes_))
            p = counts / counts.sum().clamp_min(_TINY)
        else:
            p = (w.unsqueeze(1) * target.double()).sum(0) / w.sum().clamp_min(_TINY)
        if self.loss == "squared_hinge":
            best = 2 * p - 1
        elif target.dtype == torch.int64:
            best = p.clamp_min(_TINY).log()
        else:
            best = p.clamp_min(_TINY).log() - (1 - p).clamp_min(_TINY).log()
        return best.float()

    def _loss(
        self, out: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None
    ) -> torch.Tensor:
        if self.loss == "squared_hinge":  # LinearSVC's: one +-1 margin per class (or label)
            if target.dtype == torch.int64:
                sign = torch.full_like(out, -1.0).scatter_(1, target.unsqueeze(1), 1.0)
            else:
                sign = target * 2 - 1
            per_output = F.relu(1 - sign * out).pow(2)
            if weight is not None and weight.dim() == 2:  # one-vs-rest class weights
                return (per_output * weight).sum(1).mean()
            per_row = per_output.sum(1)
        elif target.dtype == torch.int64:
            per_row = F.cross_entropy(out, target, reduction="none")
        else:
            # summed over the labels, as the squared hinge: alpha weighs each label's sigmoid
            # as if it were fitted alone
            per_row = F.binary_cross_entropy_with_logits(out, target, reduction="none").sum(1)
        if weight is None:
            return per_row.mean()
        return (per_row * weight).mean()  # scikit-learn's meaning of a sample weight

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        return tags

