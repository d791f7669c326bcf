"""Model files: size and load time of lookuplinear's against fastText's ``.bin``, same settings.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_modelfile.py

On the training split of each dataset of ``bench_text.py`` (rt, clothing), at fastText's
settings there (dim 10, 5 epochs, word bigrams, 2,000,000 buckets, minCount 1): fastText's
``train_supervised`` + ``save_model`` (``.bin``) and ``FastTextVectorizer`` +
``LookupClassifier(hidden=10, mode="mean")`` + ``save_model``. Printed: file sizes and the
median of 5 loads of each (``fasttext.load_model``, ``lookuplinear.sklearn.load_model``,
which checks every checksum and rebuilds the table).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_text  # the datasets and their split


def main() -> int:
    import fasttext

    from lookuplinear.report.machine import format_machine, machine_info
    from lookuplinear.sklearn import LookupClassifier, load_model, save_model
    from lookuplinear.text import FastTextVectorizer

    print(f"machine: {format_machine(machine_info())}")

    print("| dataset | rows touched | lookuplinear MB | fastText .bin MB | lookuplinear load s | "
          "fastText load s |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("rt", "clothing"):
            tr, _, ytr, _ = bench_text.split(name)
            vec = FastTextVectorizer(word_ngrams=2, bucket=2_000_000)
            X = vec.fit_transform(tr)
            clf = LookupClassifier(loss="log_loss", hidden=10, mode="mean", max_iter=5,
                                   solver="rowwise_adagrad",
                                   learning_rate_init=0.2, learning_rate="linear", batch_size=256,
                                   random_state=0).fit(X, ytr)
            ours = save_model(Path(tmp) / f"{name}.ll", clf, vectorizer=vec,
                              labels=[str(c) for c in clf.classes_])
            train_file = Path(tmp) / f"{name}.txt"
            train_file.write_text("".join(f"__label__{y} {t}\n" for t, y in zip(tr, ytr,
                                                                              strict=True)))
            ft = fasttext.train_supervised(str(train_file), dim=10, epoch=5, wordNgrams=2,
                                           bucket=2_000_000, minCount=1, thread=1, verbose=0)
            theirs = Path(tmp) / f"{name}.bin"
            ft.save_model(str(theirs))
            loads: dict[str, list[float]] = {"ours": [], "fastText": []}
            for _ in range(5):
                t = time.perf_counter()
                load_model(ours)
                loads["ours"].append(time.perf_counter() - t)
                t = time.perf_counter()
                fasttext.load_model(str(theirs))
                loads["fastText"].append(time.perf_counter() - t)
            touched = int(clf.model_.lookup.weight.detach().any(dim=1).sum())
            print(f"| {name} | {touched:,} of {X.shape[1]:,} | {os.path.getsize(ours) / 1e6:.1f} | "
                  f"{os.path.getsize(theirs) / 1e6:.1f} | {statistics.median(loads['ours']):.3f} | "
                  f"{statistics.median(loads['fastText']):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
