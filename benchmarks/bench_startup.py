"""How long a command that loads a model and reads a small file takes, against ``import torch``.

Run from the repository root:

    .venv/bin/python benchmarks/bench_startup.py --repeats 11

Trains a tiny model (``lookuplinear train``, dim 4, on a 5-line fastText file) into a temporary
folder, then times whole processes, start to exit, in interleaved rounds whose order changes
from round to round (after one warm-up round): ``python -c "import torch"``, ``lookuplinear
test MODEL FILE`` and ``lookuplinear predict-prob MODEL FILE 2``, the command line run as
``python -m lookuplinear`` by the same interpreter. Prints each median and what the command
costs beyond ``import torch``, then the modules of the heavy packages the command imported
(none is the aim: the model file is read and scored without scikit-learn, pandas or
matplotlib).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINES = ("__label__a good fine nice\n__label__b bad awful poor\n__label__a nice great good\n"
         "__label__b poor bad terrible\n__label__a fine good\n")
#: packages a predicting command should not import
HEAVY = ("sklearn", "pandas", "matplotlib", "torch._dynamo", "scipy.stats")
#: the test command in one process, then the heavy packages it left in sys.modules
IMPORTED = (
    "import sys; from lookuplinear.cli import main; main(sys.argv[1:]); "
    f"print(sorted({{m.split('.')[0] if m.split('.')[0] != 'torch' else m for m in sys.modules "
    f"if m.startswith({HEAVY!r})}}), file=sys.stderr)"
)


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=11, help="timed rounds (default 11)")
    args = p.parse_args(argv)
    from lookuplinear.report.machine import format_machine, machine_info

    print(f"machine: {format_machine(machine_info())}")
    ll = [sys.executable, "-m", "lookuplinear"]
    with tempfile.TemporaryDirectory() as tmp:
        data, model = Path(tmp) / "small.txt", Path(tmp) / "m.ll"
        data.write_text(LINES)
        subprocess.run([*ll, "train", str(data), "-o", str(model), "--dim", "4", "--epoch",
                        "2", "-q"], check=True, capture_output=True)
        cmds = {
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "lookuplinear test": [*ll, "test", str(model), str(data)],
            "lookuplinear predict-prob": [*ll, "predict-prob", str(model), str(data), "2"],
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for r in range(args.repeats + 1):
            for k in (cmds if r % 2 == 0 else list(cmds)[::-1]):
                t = timed(cmds[k])
                if r:  # round 0 warms the file cache
                    times[k].append(t)
        heavy = subprocess.run([sys.executable, "-c", IMPORTED, "test", str(model), str(data)],
                               check=True, capture_output=True, text=True).stderr.strip()
    base = statistics.median(times["python -c 'import torch'"])
    print("\n| process | median s | beyond `import torch` s |\n|---|---|---|")
    for k, ts in times.items():
        m = statistics.median(ts)
        print(f"| `{k}` | {m:.2f} | {m - base:+.2f} |")
    print(f"\nheavy modules `lookuplinear test` imported: {heavy.splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
