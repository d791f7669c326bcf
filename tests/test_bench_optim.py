"""benchmarks/bench_optim.py on a tiny table: it runs and writes its schema (no timings)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmark_scripts import load as _bench
from forms import c_by_default


def test_bench_optim_runs_and_reports_every_optimizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _bench("bench_optim")
    out = tmp_path / "optim.json"
    assert module.main(["--rows", "500", "--dim", "4", "--batch", "8", "--bag", "3",
                        "--repeats", "1", "--steps", "1", "--torch-ops", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["dists"]) == {"uniform", "zipf"}
    rows = {r["method"]: r for r in report["dists"]["zipf"]["rows"]}
    for name in ("SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"):
        r = rows[f"lookuplinear.optim.{name}"]
        assert math.isfinite(r["median_ms"]) and r["median_ms"] > 0
        assert set(r["phases_ms"]) == {"forward", "backward", "step"}
        assert r["bytes_moved"] > 0 and r["copy_GBps"] > 0
    assert "nn.EmbeddingBag (dense grad) + torch.optim.Adam" in rows
    assert "lookuplinear.optim.Adam (torch ops, no C kernels)" in rows
    assert "table 500 x 4" in capsys.readouterr().out


def test_bench_optim_dense_model_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _bench("bench_optim")
    out = tmp_path / "dense.json"
    assert module.main(["--dense-model", "--layers", "2", "--width", "8", "--rows", "50",
                        "--batch", "4", "--bag", "3", "--repeats", "1", "--steps", "1",
                        "--json", str(out)]) == 0
    report = json.loads(out.read_text())["dense_model"]
    assert report["parameters"] == 5
    rows = {r["method"]: r for r in report["rows"]}
    for name in ("SGD", "Adagrad", "RowWiseAdagrad", "Adam"):
        assert math.isfinite(rows[f"lookuplinear.optim.{name}"]["median_ms"])
    assert "torch.optim.Adam (default)" in rows and "torch.optim.SGD(foreach=True)" in rows
    assert "opt.step() on 2 x nn.Linear(8, 8)" in capsys.readouterr().out


@c_by_default  # it times the C kernels against their torch ops
def test_bench_kernels_runs(capsys: pytest.CaptureFixture[str]) -> None:
    module = _bench("bench_kernels")
    assert module.main(["--rows", "5000", "--dim", "8", "--entries", "200", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| kernel | C, ms | torch ops, ms | C / torch ops |" in out
    assert "`group_rows` (the row-sparse gradient)" in out
