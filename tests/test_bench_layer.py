"""benchmarks/bench_layer.py on tiny sizes: it runs and its numbers are finite (no timings)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import pytest
import torch
from benchmark_scripts import load

TINY = ["--bags", "8", "--bag-size", "3", "--in-features", "50", "--out-features", "4",
        "--memory-in-features", "1000", "--memory-nnz", "40", "--memory-rows", "8",
        "--repeats", "1", "--warmup", "1", "--sample-ms", "0.01"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("bench_layer")


def test_every_method_computes_the_same_layer(bench: ModuleType) -> None:
    d = bench.make_data(n_bags=8, bag_size=3, in_features=50, out_features=4)
    for name, (run, params) in bench.methods(d).items():
        out = run()
        want = (8, 3, 4) if "(N, L)" in name or name == "F.embedding" else (8, 4)
        assert tuple(out.shape) == want, name
        assert bool(torch.isfinite(out).all()), name
        assert all(p.requires_grad for p in params), name
    assert bench.check_outputs(d) < 1e-4


def test_timing_and_ratios_are_finite(bench: ModuleType) -> None:
    d = bench.make_data(n_bags=8, bag_size=3, in_features=50, out_features=4)
    medians = bench.run_timing(d, repeats=2, warmup=1, target_s=1e-5)
    assert set(medians) == set(bench.PHASES)
    for phase in medians.values():
        assert set(phase) == set(bench.methods(d))
        assert all(math.isfinite(t) and t > 0 for t in phase.values())
    rows = bench.ratios(medians)
    assert len(rows) == 2 * len(bench.RATIOS)
    assert all(math.isfinite(r["value"]) for r in rows)
    assert "| ratio |" in bench.report(medians, rows)


def test_memory_case_gradient_is_sparse(bench: ModuleType) -> None:
    m = bench.memory_case(in_features=1000, out_features=4, n_rows=8, nnz=40, measurements=1)
    assert m["dense_grad_bytes"] == 1000 * 4 * 4 and m["dense_input_bytes"] == 8 * 1000 * 4
    for phase in bench.PHASES:
        peak = m[phase]["peak_bytes"]
        assert peak is None or peak >= 0
        assert m[phase]["median_s"] > 0
    assert "peak extra memory" in bench.report_memory(m)


def test_main_writes_json(bench: ModuleType, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert bench.main([*TINY, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "machine:" in printed and "goal < 50 MB" in printed
    data = json.loads(out.read_text())
    assert set(data) >= {"machine", "medians_s", "ratios", "memory", "args"}
    assert data["memory"]["nnz"] == 40
