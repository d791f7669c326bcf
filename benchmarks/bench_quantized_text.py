"""Quantized text classifiers: accuracy and size against float32, and against fastText's quantize.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_quantized_text.py

On each dataset of ``bench_text.py`` (rt, clothing; the same 80/20 split), at fastText's
settings there (dim 10, 5 epochs, word bigrams, 2,000,000 buckets, minCount 1, one thread):
``FastTextVectorizer`` + ``LookupClassifier(hidden=10, mode="mean")`` saved as a model file in
float32 and after ``quantize("int8")`` / ``quantize("int4")``, and fastText's
``train_supervised`` saved as ``.bin`` and after ``quantize()`` at its defaults (``.ftz``).
Printed: test accuracy (P@1) and file size of each.

``--pruned``: fastText's ``quantize -cutoff N -retrain -qnorm`` against
``lookuplinear quantize`` with the same flags, each on its own command-line model
(``supervised -dim 10 -epoch 5 -wordNgrams 2 -bucket 2000000 -minCount 1 -thread 1``, the
same train / test files): P@1 on the test file and the file size of the model before
(``.bin``) and after (``.ftz``), at each ``--cutoff``:

    .venv-bench/bin/python benchmarks/bench_quantized_text.py --pruned --cutoff 100000 10000
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_text  # the datasets and their split


def main() -> int:
    import fasttext

    from lookuplinear.report.machine import format_machine, machine_info
    from lookuplinear.sklearn import LookupClassifier, save_model
    from lookuplinear.text import FastTextVectorizer

    print(f"machine: {format_machine(machine_info())}")

    print("| dataset | model | test accuracy | file MB |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("rt", "clothing"):
            tr, te, ytr, yte = bench_text.split(name)
            vec = FastTextVectorizer(word_ngrams=2, bucket=2_000_000)
            X = vec.fit_transform(tr)
            Xte = vec.transform(te)
            clf = LookupClassifier(loss="log_loss", hidden=10, mode="mean", max_iter=5,
                                   solver="rowwise_adagrad", learning_rate_init=0.2,
                                   learning_rate="linear", batch_size=256,
                                   random_state=0).fit(X, ytr)
            for dtype in ("float32", "int8", "int4"):
                model = clf if dtype == "float32" else copy.deepcopy(clf).quantize(dtype)
                path = Path(tmp) / f"{name}.{dtype}.ll"
                save_model(path, model, vectorizer=vec, labels=[str(c) for c in clf.classes_])
                acc = float(np.mean(model.predict(Xte) == yte))
                print(f"| {name} | lookuplinear {dtype} | {acc:.4f} | "
                      f"{os.path.getsize(path) / 1e6:.2f} |", flush=True)
            train_file = Path(tmp) / f"{name}.txt"
            train_file.write_text("".join(f"__label__{y} {t}\n" for t, y in zip(tr, ytr,
                                                                              strict=True)))
            ft = fasttext.train_supervised(str(train_file), dim=10, epoch=5, wordNgrams=2,
                                           bucket=2_000_000, minCount=1, thread=1, verbose=0,
                                           seed=0)
            for label, ext in (("fastText .bin", "bin"), ("fastText quantize (.ftz)", "ftz")):
                if ext == "ftz":
                    ft.quantize()  # fastText's defaults
                path = Path(tmp) / f"{name}.{ext}"
                ft.save_model(str(path))
                pred = [p[0].removeprefix("__label__") for p in ft.predict(list(te))[0]]
                acc = float(np.mean(np.array(pred) == np.array([str(y) for y in yte])))
                print(f"| {name} | {label} | {acc:.4f} | {os.path.getsize(path) / 1e6:.2f} |",
                      flush=True)
    return 0


#: fastText's supervised settings of this benchmark, as command-line flags
TRAIN_FLAGS = ["-dim", "10", "-epoch", "5", "-wordNgrams", "2", "-bucket", "2000000",
               "-minCount", "1", "-thread", "1"]


def _p_at_1(predicted: list[str], truth: np.ndarray) -> float:
    return float(np.mean(np.array([p.removeprefix("__label__") for p in predicted])
                         == np.array([str(y) for y in truth])))


def _ours(path: Path, test: list[str], truth: np.ndarray) -> float:
    from lookuplinear.sklearn import load_model

    model = load_model(path)
    return _p_at_1([model.labels[j] for j in model.scores(test).argmax(axis=1)], truth)


def _theirs(model: Any, test: list[str], truth: np.ndarray) -> float:
    return _p_at_1([p[0] for p in model.predict(test)[0]], truth)


def pruned(cutoffs: list[int], flags: list[str]) -> int:
    """fastText's ``quantize -cutoff N`` + ``flags`` against lookuplinear's, on each dataset."""
    print(f"quantize -cutoff N {' '.join(flags)}\n")
    print("| dataset | model | P@1 | file MB |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("rt", "clothing"):
            for model, acc, path in _pruned_dataset(name, Path(tmp), cutoffs, flags):
                print(f"| {name} | {model} | {acc:.4f} | {path.stat().st_size / 1e6:.3f} |",
                      flush=True)
    return 0


def _pruned_dataset(name: str, tmp: Path, cutoffs: list[int], flags: list[str]
                    ) -> Iterator[tuple[str, float, Path]]:
    """(model, P@1, file) of each model of ``pruned`` on dataset ``name``."""
    import fasttext

    from lookuplinear.cli import main as cli

    tr, te, ytr, yte = bench_text.split(name)
    test = list(te)
    train = tmp / f"{name}.train.txt"
    train.write_text("".join(f"__label__{y} {t}\n" for t, y in zip(tr, ytr, strict=True)))
    ll, ft = tmp / f"{name}-ll", tmp / f"{name}-ft"  # -output NAME: NAME.bin, NAME.ftz
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli(["supervised", "-input", str(train), "-output", str(ll), "--quiet",
                    *TRAIN_FLAGS]) == 0
    yield "lookuplinear .bin", _ours(ll.with_suffix(".bin"), test, yte), ll.with_suffix(".bin")
    settings = dict(zip(TRAIN_FLAGS[::2], TRAIN_FLAGS[1::2], strict=True))
    model = fasttext.train_supervised(
        str(train), **{k.removeprefix("-"): int(v) for k, v in settings.items()},
        verbose=0, seed=0)
    model.save_model(str(ft.with_suffix(".bin")))
    yield "fastText .bin", _theirs(model, test, yte), ft.with_suffix(".bin")
    dsub = {"dsub": int(flags[flags.index("-dsub") + 1])} if "-dsub" in flags else {}
    for n in cutoffs:
        with contextlib.redirect_stderr(io.StringIO()):
            assert cli(["quantize", "-input", str(train), "-output", str(ll), "-cutoff", str(n),
                        *flags]) == 0
        yield (f"lookuplinear .ftz, -cutoff {n}", _ours(ll.with_suffix(".ftz"), test, yte),
               ll.with_suffix(".ftz"))
        model = fasttext.load_model(str(ft.with_suffix(".bin")))
        model.quantize(input=str(train), cutoff=n, retrain="-retrain" in flags,
                       qnorm="-qnorm" in flags, verbose=0, **dsub)
        model.save_model(str(ft.with_suffix(".ftz")))
        yield f"fastText .ftz, -cutoff {n}", _theirs(model, test, yte), ft.with_suffix(".ftz")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pruned", action="store_true",
                        help="fastText's quantize -cutoff against lookuplinear's")
    parser.add_argument("--cutoff", type=int, nargs="+", default=[100_000, 10_000])
    parser.add_argument("--flags", default="-retrain -qnorm",
                        help="the other quantize flags, for both (default: -retrain -qnorm)")
    opts = parser.parse_args()
    raise SystemExit(pruned(opts.cutoff, opts.flags.split()) if opts.pruned else main())
