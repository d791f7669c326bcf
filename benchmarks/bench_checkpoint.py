"""What a checkpoint costs: save time and bytes against the rows touched, for any table size.

Run from the repository root:

    .venv/bin/python benchmarks/bench_checkpoint.py

A ``LookupLinear(rows, 16, sparse=True)`` with a fused ``Adam``, for tables of 10^6, 10^8 and
10^9 rows in a file (``storage=``, sparse files) and 10^6 rows in memory. Each step touches
``--touched`` random rows; ``Checkpoint.save()`` after every step. Printed per table: the first
save (every drawn row: the base), then the median time and bytes of the next ``--saves`` saves,
and the time of ``restore()``. A save should cost what the step touched, whatever the table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lookuplinear import Checkpoint, LookupLinear, optim
from lookuplinear.report.machine import format_machine, machine_info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--touched", type=int, default=10_000)
    p.add_argument("--saves", type=int, default=10)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {format_machine(machine_info())}")
    print(f"rows touched a step: {args.touched:,}; dim 16, Adam (3 x 64 bytes a row)\n")
    print("| table | first save s | next saves: median s | median KB | restore s |")
    print("|---|---|---|---|---|")
    for rows, in_file in ((10**6, False), (10**6, True), (10**8, True), (10**9, True)):
        root = Path(tempfile.mkdtemp(prefix="bench_checkpoint_"))
        try:
            torch.manual_seed(0)
            layer = LookupLinear(rows, 16, sparse=True, bias=False,
                                 storage=root / "t" if in_file else None)
            opt = optim.Adam(layer.parameters(), lr=0.01, fused=True)
            ckpt = Checkpoint(root / "ckpt", layer, opt)
            g = torch.Generator().manual_seed(1)
            batches = [torch.randint(0, rows, (args.touched,), generator=g)
                       for _ in range(args.saves + 1)]
            layer(batches[0]).sum().backward()
            t = time.perf_counter()
            ckpt.save()
            first = time.perf_counter() - t
            times, sizes = [], []
            for x in batches[1:]:
                opt.zero_grad()
                layer(x).sum().backward()
                t = time.perf_counter()
                ckpt.save()
                times.append(time.perf_counter() - t)
                manifest = json.loads((root / "ckpt" / "MANIFEST.json").read_text())
                sizes.append(manifest["segments"][-1]["bytes"])
            t = time.perf_counter()
            ckpt.restore()
            restore = time.perf_counter() - t
            where = "file" if in_file else "memory"
            print(f"| {rows:,} rows, {where} | {first:.3f} | {statistics.median(times):.4f} | "
                  f"{statistics.median(sizes) / 1024:.0f} | {restore:.3f} |", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
