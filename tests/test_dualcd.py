"""``solver="dual_cd"``: the kernel on both backends, the solution against the dense path (the
gradient of ``nn.Linear``'s objective vanishes there) and against liblinear, and its errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC, LinearSVR

from lookuplinear.errors import InputValueError
from lookuplinear.ops import c_available, use_backend
from lookuplinear.ops._dualcd import dual_cd_epoch
from lookuplinear.sklearn import LookupClassifier, LookupRegressor

BACKENDS = ["torch", pytest.param("c", marks=pytest.mark.skipif(
    not c_available(), reason="the C kernels were not built"))]


def _text(n: int = 240, n_features: int = 60, n_classes: int = 3, seed: int = 0) -> Any:
    """TF-IDF-like rows (non-negative, unit norm) whose classes prefer their own columns."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = sp.random(n, n_features, density=0.1, format="lil", random_state=seed,
                  dtype=np.float64)
    span = n_features // n_classes
    for i, c in enumerate(y):
        X[i, rng.integers(c * span, (c + 1) * span, 2)] = 1.0
    X = sp.csr_matrix(X)
    X = sp.diags(1 / np.maximum(np.sqrt(X.multiply(X).sum(1).A1), 1e-12)) @ X
    return sp.csr_matrix(X, dtype=np.float32), y


def _dense_objective_grad(clf: Any, X: Any, signs: np.ndarray, alpha: float,
                          weight: np.ndarray | None = None) -> float:
    """The largest gradient entry of ``mean_i sum_k s_ik max(0, 1 - t_ik f_ik)^2 + alpha/2
    ||(W, b)||^2`` at the fitted model (``weight``: ``s_i`` a row or ``s_ik`` a row and
    output), computed by autograd on ``nn.Linear`` over dense X."""
    lookup = clf.model_.lookup
    lin = torch.nn.Linear(X.shape[1], signs.shape[1], dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(lookup.weight.detach().T)
        lin.bias.copy_(lookup.bias.detach())
    f = lin(torch.from_numpy(X.toarray().astype(np.float64)))
    t = torch.from_numpy(signs)
    s = torch.ones(len(t), dtype=torch.float64) if weight is None else torch.from_numpy(weight)
    s = s if s.dim() == 2 else s.unsqueeze(1)  # a row's weight, or one in each output
    per_row = (s * F.relu(1 - t * f).pow(2)).sum(1)
    obj = per_row.mean() + alpha / 2 * (lin.weight.pow(2).sum() + lin.bias.pow(2).sum())
    obj.backward()
    assert lin.weight.grad is not None and lin.bias.grad is not None
    return float(max(lin.weight.grad.abs().max(), lin.bias.grad.abs().max()))


@pytest.mark.parametrize("loss", ["squared_hinge", "squared_error"])
@pytest.mark.parametrize(("n_out", "per_output"), [(1, False), (4, False), (4, True)])
def test_kernel_backends_agree_and_keep_w_equal_to_the_duals(loss: str, n_out: int,
                                                             per_output: bool) -> None:
    """Both backends, one ``C_i`` a row or one a row and output (``per_output``, a tenth of
    them 0: ``diag`` inf, the variable held at 0)."""
    X, _ = _text()
    n = X.shape[0]
    rng = np.random.default_rng(1)
    t = (np.where(rng.random((n, n_out)) < 0.3, 1.0, -1.0) if loss == "squared_hinge"
         else rng.normal(size=(n, n_out)))
    d0 = rng.uniform(0.2, 2.0, (n, n_out) if per_output else n)
    if per_output:
        d0[rng.random((n, n_out)) < 0.1] = np.inf
    results = []
    for name in ("torch", "c") if c_available() else ("torch",):
        rows = (torch.from_numpy(X.indptr.astype(np.int64)),
                torch.from_numpy(X.indices.astype(np.int64)), torch.from_numpy(X.data))
        qdiag = torch.from_numpy(np.asarray(X.multiply(X).sum(1), np.float64).ravel() + 1.0)
        diag = torch.from_numpy(d0.copy())
        dual = torch.zeros(n, n_out, dtype=torch.float64)
        W, b = torch.zeros(X.shape[1], n_out), torch.zeros(n_out)
        order, active, above = torch.arange(n), n, float("inf")
        gen = torch.Generator().manual_seed(0)
        with use_backend(name):
            for _ in range(6):
                order[:active] = order[:active][torch.randperm(active, generator=gen)]
                active, pg_max, _ = dual_cd_epoch(W, b, rows, order, active, qdiag,
                                                  torch.from_numpy(t), diag, dual, loss, above)
                above = pg_max if pg_max > 0 else float("inf")
        assert not dual.numpy()[np.isinf(np.broadcast_to(d0.T, t.T.shape).T)].any()
        assert dual.numpy().any()
        coef = dual.numpy() * (t if loss == "squared_hinge" else 1.0)  # w = sum_i a_i t_i x_i
        np.testing.assert_allclose(W.numpy(), X.T @ coef, atol=1e-5)
        np.testing.assert_allclose(b.numpy(), coef.sum(0), atol=1e-5)
        results.append((W, b, dual, active))
    for W, _b, dual, active in results[1:]:
        torch.testing.assert_close(W, results[0][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dual, results[0][2], atol=1e-6, rtol=1e-5)
        assert active == results[0][3]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_classes", [2, 4])
def test_classifier_defaults_reach_the_dense_optimum(backend: str, n_classes: int) -> None:
    X, y = _text(n_classes=n_classes)
    with use_backend(backend):
        clf = LookupClassifier(tol=1e-4, random_state=0).fit(X, y)
    signs = clf._signs(clf._encode(y))
    grad = _dense_objective_grad(clf, X, signs, alpha=1 / X.shape[0])
    assert grad < 2e-4  # the gradient of the dense objective vanishes at the solution


@pytest.mark.parametrize("n_classes", [2, 4])
def test_classifier_defaults_solve_linearsvc(n_classes: int) -> None:
    X, y = _text(n_classes=n_classes)
    ours = LookupClassifier(tol=1e-5, random_state=0).fit(X, y)
    svc = LinearSVC(tol=1e-8, max_iter=100_000, random_state=0).fit(X, y)
    coef = ours.model_.lookup.weight.detach().numpy().T
    np.testing.assert_allclose(coef, svc.coef_, atol=2e-3)
    np.testing.assert_allclose(ours.model_.lookup.bias.detach().numpy(), svc.intercept_,
                               atol=2e-3)
    np.testing.assert_array_equal(ours.predict(X), svc.predict(X))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("class_weight", [{0: 3.0, 1: 1.0, 2: 0.5}, {0: 0.0, 1: 1.0, 2: 2.0}])
def test_class_weight_weighs_each_one_vs_rest_problem_as_linearsvc(
        backend: str, class_weight: dict[int, float]) -> None:
    """With more than two classes the squared hinge is fitted one-vs-rest, and a class's
    weight weighs its own rows in its own output only (the other classes' rows weigh 1
    there), as liblinear's ``LinearSVC`` and ``SGDClassifier`` weigh their binary problems;
    a class of weight 0 has no say in its own output."""
    X, y = _text(n_classes=3)
    with use_backend(backend):
        ours = LookupClassifier(class_weight=class_weight, tol=1e-5, random_state=0).fit(X, y)
    signs = ours._signs(y)
    w = np.where(signs > 0, np.array([class_weight[c] for c in y])[:, None], 1.0)
    assert _dense_objective_grad(ours, X, signs, alpha=1 / len(y), weight=w) < 2e-4
    svc = LinearSVC(class_weight=class_weight, tol=1e-8, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, svc.coef_, atol=2e-3)
    np.testing.assert_allclose(ours.intercept_, svc.intercept_, atol=2e-3)


def test_regressor_defaults_solve_ridge_with_a_penalised_bias() -> None:
    X, y = _text(n_classes=5)
    target = y + np.asarray(X[:, :10].sum(1)).ravel()
    ours = LookupRegressor(tol=1e-6, random_state=0).fit(X, target)
    # liblinear's L2-loss SVR with epsilon 0 is ridge; C = 1 / (alpha n) with alpha = 2 / n
    mean = target.mean()
    svr = LinearSVR(loss="squared_epsilon_insensitive", epsilon=0.0, C=0.5, tol=1e-10,
                    max_iter=100_000, dual=True).fit(X, target - mean)
    np.testing.assert_allclose(ours.predict(X), svr.predict(X) + mean, atol=1e-3)


def test_multilabel_is_one_problem_per_label() -> None:
    X, y = _text(n_classes=3)
    Y = np.column_stack([y == 0, y != 1]).astype(int)
    both = LookupClassifier(tol=1e-5, random_state=0).fit(X, Y)
    for k in range(2):
        one = LookupClassifier(tol=1e-5, random_state=0).fit(X, Y[:, k])
        np.testing.assert_allclose(both.decision_function(X)[:, k], one.decision_function(X),
                                   atol=1e-3)


def test_mean_mode_is_the_sum_of_rows_divided_by_their_sums() -> None:
    X, y = _text()
    scaled = sp.csr_matrix(sp.diags(1 / X.sum(1).A1) @ X, dtype=np.float32)
    a = LookupClassifier(mode="mean", random_state=0).fit(X, y).decision_function(X)
    b = LookupClassifier(random_state=0).fit(scaled, y).decision_function(scaled)
    np.testing.assert_allclose(a, b, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 12), seed=st.integers(0, 1000), empty=st.booleans())
def test_tiny_batches_and_empty_rows(n: int, seed: int, empty: bool) -> None:
    """A few rows, some of them empty: still the dense optimum."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, 5, density=0.4, format="csr", random_state=seed, dtype=np.float32)
    if empty:
        X = sp.vstack([X, sp.csr_matrix((1, 5), dtype=np.float32)]).tocsr()
    y = np.arange(X.shape[0]) % 2
    rng.shuffle(y)
    clf = LookupClassifier(tol=1e-6, max_iter=100_000, random_state=0).fit(X, y)
    assert _dense_objective_grad(clf, X, clf._signs(y), alpha=1 / X.shape[0]) < 1e-4


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 2 epochs
def test_auto_picks_dual_cd_only_where_it_applies() -> None:
    X, y = _text()
    assert LookupClassifier(random_state=0).fit(X, y).loss_curve_ == []  # dual_cd
    with pytest.raises(InputValueError, match=r"solver='dual_cd' cannot fit.*mode='max'"):
        LookupClassifier(solver="dual_cd", mode="max").fit(X, y)
    for params in ({"hidden": 4}, {"loss": "log_loss"}, {"early_stopping": True}):
        clf = LookupClassifier(max_iter=2, random_state=0, **params).fit(X, y)
        assert len(clf.loss_curve_) == clf.n_iter_ > 0  # Adam's epochs
        with pytest.raises(InputValueError, match="solver='dual_cd' cannot fit"):
            LookupClassifier(solver="dual_cd", random_state=0, **params).fit(X, y)
    warm = LookupClassifier(warm_start=True, random_state=0).fit(X, y)
    first = warm.n_iter_
    warm.set_params(max_iter=2).fit(X, y)  # continues with Adam from the solution
    assert warm.n_iter_ == first + 2 and len(warm.loss_curve_) == 2
    with pytest.raises(InputValueError, match="warm_start"):
        LookupClassifier(solver="dual_cd", warm_start=True).fit(X, y).fit(X, y)
    with pytest.raises(InputValueError, match="partial_fit needs a stochastic solver"):
        LookupClassifier(solver="dual_cd").partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(InputValueError, match="partial_fit needs a stochastic solver"):
        LookupRegressor(solver="dual_cd").partial_fit(X, y.astype(float))


def test_too_few_epochs_warn_as_liblinear_does() -> None:
    X, y = _text()
    with pytest.warns(ConvergenceWarning, match="max_iter=1 epochs"):
        LookupClassifier(max_iter=1, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LookupClassifier(random_state=0).fit(X, y)


def test_same_seed_same_model() -> None:
    X, y = _text()
    a = LookupClassifier(random_state=0).fit(X, y).model_.lookup.weight
    b = LookupClassifier(random_state=0).fit(X, y).model_.lookup.weight
    assert torch.equal(a, b)
