"""``lookuplinear bench``: the benchmark matrix, written as results.json, CSV and plots."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ._args import output_dir, positive_int

__all__ = ["add_parser", "bench", "run"]


def _gigabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GB, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(
            f"expected a positive, finite number of GB, got {text!r}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="time nn.Linear, nn.Embedding(Bag), torch.sparse, scipy and LookupLinear",
        description=(
            "The benchmark matrix: input forms (indices, bags, weighted CSR, dense multi-hot) x "
            "in_features 1e2..1e7 x methods x phases (forward, forward+backward, train step "
            "per optimizer). Writes results.json, results.csv and plots into --out; dense cases "
            "that would need more than --max-memory are skipped with the reason recorded."
        ),
    )
    p.add_argument("--quick", action="store_true",
                   help="one out_features and batch size, fewer cases (about a minute)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", type=Path, default=Path("out/bench"), metavar="DIR",
                   help="output folder (default out/bench)")
    p.add_argument("--max-memory", type=_gigabytes, default=None, metavar="GB",
                   help="skip a method that would need more than this many GB beyond the weight "
                   "table (its input, output and gradient); default 0.5 with --quick, else 4")
    p.add_argument("--in-features", type=positive_int, nargs="+", default=None, metavar="N",
                   help="override the in_features grid")
    p.add_argument("--out-features", type=positive_int, nargs="+", default=None, metavar="D",
                   help="override the out_features grid")
    p.add_argument("--batch", type=positive_int, nargs="+", default=None, metavar="B",
                   help="override the batch sizes")
    p.add_argument("--train-in-features", type=positive_int, nargs="*", default=None,
                   metavar="N", help="override the train-step sizes (none: no train steps)")
    p.add_argument("--repeats", type=positive_int, default=None, metavar="R",
                   help="timed rounds per case (default 7)")
    return p


def bench(args: argparse.Namespace) -> tuple[dict[str, Any], Path]:
    """Run the matrix the arguments describe; write its files; return (document, json path).

    ``args._command_line`` (set by :func:`lookuplinear.cli.main`: the command line that ran,
    ``lookuplinear report ...`` for the report's matrix) is recorded as ``settings.command``.
    """
    import dataclasses
    import json
    import os
    import time
    import warnings

    import torch

    from .._atomic import replacing
    from ..report.bench import FULL, QUICK, grid_dict, run_matrix, to_json
    from ..report.csv import write_csv
    from ..report.machine import format_machine, machine_info
    from ..report.plots import plot_all
    from ..report.summary import headlines, summary_table, train_table

    grid = QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    if args.in_features:
        changes["in_features"] = tuple(args.in_features)
    if args.out_features:
        changes["out_features"] = tuple(args.out_features)
    if args.batch:
        changes["batch_sizes"] = tuple(args.batch)
    if args.train_in_features is not None:
        changes["train_in_features"] = tuple(args.train_in_features)
    if args.repeats:
        changes["repeats"] = args.repeats
    grid = dataclasses.replace(grid, **changes)
    machine = machine_info(args.device)
    print(f"machine: {format_machine(machine)}")
    gb = args.max_memory if args.max_memory is not None else (0.5 if args.quick else 4.0)
    max_memory = int(gb * 1e9)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "sparse CSR is in beta"
        torch.manual_seed(0)
        results = run_matrix(grid, device=args.device, max_memory=max_memory)
    elapsed = time.perf_counter() - start
    settings = {
        "elapsed_s": round(elapsed, 1),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "quick": bool(args.quick),
        "device": args.device,
        "max_memory_bytes": max_memory,
        "grid": grid_dict(grid),
        "command": args._command_line,
    }
    doc = to_json(results, machine=machine, settings=settings)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    write_csv(doc["results"], args.out / "results.csv")
    plot_all(doc, args.out)
    print()
    print(summary_table(doc, "forward"))
    print()
    print(summary_table(doc, "forward+backward"))
    print()
    print(train_table(doc))
    print()
    for line in headlines(doc):
        print(f"- {line}")
    return doc, path


def run(args: argparse.Namespace) -> int:
    from .._device import check_device
    from ..errors import InputValueError

    try:
        check_device(args.device, flag="--device")
    except InputValueError as e:  # a usage error: exit code 2, as for a bad --device choice
        print(f"lookuplinear bench: error: {e}", file=sys.stderr)
        return 2
    output_dir(args._parser, args.out, "--out")
    from ..report.summary import failed_cases, nothing_measured

    doc, path = bench(args)
    failed = failed_cases(doc)
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    nothing = nothing_measured(doc, "Raise --max-memory or pass smaller --in-features.")
    if nothing:
        print(f"lookuplinear bench: error: {nothing}", file=sys.stderr)
        return 1
    print(f"\nbench matrix ran in {doc['settings']['elapsed_s']:.0f} s")
    print(f"results written to {path} (and results.csv, plots) in {args.out}")
    return 1 if failed else 0
