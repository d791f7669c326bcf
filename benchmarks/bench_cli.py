"""The text command line against fastText's, whole processes, at equal settings.

Run from the repository root, in the benchmark environment (docs/performance.md, Setup):

    .venv-bench/bin/python benchmarks/bench_cli.py

For each dataset of ``bench_text.py`` (rt, clothing; its 80/20 split, written to fastText-format
files first) and each thread count, two processes train at fastText's settings there (dim 10,
5 epochs, word bigrams, 2,000,000 buckets, minCount 1, lr 0.2 for lookuplinear's row-wise
Adagrad on the batch mean, fastText's own default lr 0.1): ``lookuplinear train`` and
fastText through its Python package (``python -c "import fasttext; ...train_supervised(...);
save_model(...)"``; the package has no command line). Timed: the whole process, start to exit
(imports included), medians of ``--repeats`` interleaved rounds; then P@1 of each model on the
test file (``lookuplinear test`` and ``model.test``). Interleaved with them, a third process
imports what ``lookuplinear train`` imports before it reads its input (torch, scikit-learn,
lookuplinear's estimators and vectorizer) and exits: the "start" column, and the last ratio is
lookuplinear's time without it against fastText's whole process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_text  # the datasets and their split

from lookuplinear.report.machine import format_machine, machine_info

FASTTEXT = (
    "import fasttext, sys; m = fasttext.train_supervised(sys.argv[1], dim=10, epoch=5, "
    "wordNgrams=2, bucket=2000000, minCount=1, thread=int(sys.argv[3]), verbose=0); "
    "m.save_model(sys.argv[2])"
)
START = "import lookuplinear.sklearn, lookuplinear.text"
FASTTEXT_TEST = "import fasttext, sys; print(fasttext.load_model(sys.argv[1]).test(sys.argv[2])[1])"


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args(argv)
    print(f"machine: {format_machine(machine_info())}")
    ll = str(Path(sys.executable).parent / "lookuplinear")
    print("| dataset | threads | lookuplinear train s | fastText train s | ratio | start s | "
          "ratio without start | lookuplinear P@1 | fastText P@1 |\n"
          "|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("rt", "clothing"):
            tr, te, ytr, yte = bench_text.split(name)
            files = {}
            for part, texts, labels in (("train", tr, ytr), ("test", te, yte)):
                files[part] = Path(tmp) / f"{name}.{part}"
                files[part].write_text("".join(
                    f"__label__{y} {t}\n" for t, y in zip(texts, labels, strict=True)))
            for threads in args.threads:
                ours_model, ft_model = Path(tmp) / "m.ll", Path(tmp) / "m.bin"
                cmds = {
                    "ours": [ll, "train", str(files["train"]), "-o", str(ours_model), "--dim",
                             "10", "--epoch", "5", "--wordNgrams", "2", "--thread",
                             str(threads), "-q"],
                    "fastText": [sys.executable, "-c", FASTTEXT, str(files["train"]),
                                 str(ft_model), str(threads)],
                    "start": [sys.executable, "-c", START],
                }
                times: dict[str, list[float]] = {k: [] for k in cmds}
                for r in range(args.repeats):
                    for k in (cmds if r % 2 == 0 else list(cmds)[::-1]):
                        times[k].append(timed(cmds[k]))
                out = subprocess.run([ll, "test", str(ours_model), str(files["test"])],
                                     check=True, capture_output=True, text=True).stdout
                p_ours = float(out.splitlines()[1].split()[1])
                p_ft = float(subprocess.run(
                    [sys.executable, "-c", FASTTEXT_TEST, str(ft_model), str(files["test"])],
                    check=True, capture_output=True, text=True).stdout)
                t_ours, t_ft, t_start = (statistics.median(times[k])
                                         for k in ("ours", "fastText", "start"))
                print(f"| {name} | {threads} | {t_ours:.2f} | {t_ft:.2f} | {t_ours / t_ft:.2f}x "
                      f"| {t_start:.2f} | {(t_ours - t_start) / t_ft:.2f}x "
                      f"| {p_ours:.3f} | {p_ft:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
