"""Quantized text classifiers: accuracy and size against float32, and against fastText's quantize.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_quantized_text.py

On each dataset of ``bench_text.py`` (rt, clothing; the same 80/20 split), at fastText's
settings there (dim 10, 5 epochs, word bigrams, 2,000,000 buckets, minCount 1, one thread):
``FastTextVectorizer`` + ``LookupClassifier(hidden=10, mode="mean")`` saved as a model file in
float32 and after ``quantize("int8")`` / ``quantize("int4")``, and fastText's
``train_supervised`` saved as ``.bin`` and after ``quantize()`` at its defaults (``.ftz``).
Printed: test accuracy (P@1) and file size of each.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_text  # the datasets and their split


def main() -> int:
    import fasttext

    from lookuplinear.sklearn import LookupClassifier, save_model
    from lookuplinear.text import FastTextVectorizer

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


if __name__ == "__main__":
    raise SystemExit(main())
