"""benchmarks/bench_collection.py on tiny tables: every method and the kernels-alone floor run,
on one width and on several, and their numbers are finite (no timings asserted)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmark_scripts import load


@pytest.mark.parametrize("widths", [[], ["--mixed-dims"]])
def test_bench_collection_runs_on_tiny_tables(tmp_path: Path, widths: list[str]) -> None:
    bench = load("bench_collection")
    out = tmp_path / "result.json"
    assert bench.main(["--scale", "0.0005", "--batch", "64", "--repeats", "1", "--steps", "1",
                       *widths, "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"one-hot", "multi-hot"}
    for times in results.values():
        assert {bench.LOSS, bench.KERNELS, "LookupCollection + RowWiseAdagrad (fused)"} <= set(
            times)
        assert all(math.isfinite(t) and t > 0 for t in times.values())


@pytest.mark.parametrize("args", [[], ["--mode", "mean", "--sparse"], ["--hashing", "map"],
                                  ["--hashing", "mod", "--sparse"]])
def test_bench_collection_tables_runs_and_checks_its_outputs(
        args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/bench_collection_tables.py: both batches, both sides, their outputs held
    equal before timing (an assert in the script), a ratio printed for each (no timing
    asserted); sum tables with dense gradients, and mean tables with row-sparse ones."""
    bench = load("bench_collection_tables")
    assert bench.main(["--batch", "4", "--rounds", "1", "--calls", "1", *args]) == 0
    out = capsys.readouterr().out
    assert "one ID: ours / stock" in out and "bags: ours / stock" in out


def test_bench_collection_write_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/bench_collection_write.py on tiny tables: both widths, both ways, both timed
    calls printed (no timing asserted)."""
    bench = load("bench_collection_write")
    assert bench.main(["--scale", "0.0005", "--batch", "16", "--repeats", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| 8/16/32 |", "| 16 |"))]
    assert len(rows) == 4
