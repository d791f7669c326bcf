"""benchmarks/bench_dlrm.py on a tiny model: it runs, checks one step and writes its ratios."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from benchmark_scripts import load


def test_bench_dlrm_runs_and_reports_every_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load("bench_dlrm")
    out = tmp_path / "dlrm.json"
    assert module.main(["--rows", "50-40-30", "--dim", "4", "--bottom", "5-8", "--top", "8",
                        "--batch", "6", "--bag", "3", "--repeats", "1", "--warmup", "1",
                        "--sample-ms", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["max_abs_diff"] < 1e-5
    fbgemm = importlib.util.find_spec("fbgemm_gpu") is not None  # its row where it imports
    assert [r["ratio"] for r in report["ratios"]][4:] == [
        "step: the floor / stock (the best any tables can give)",
        *(["step: FBGEMM / stock"] if fbgemm else [])]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in report["ratios"])
    assert len(report["rounds_s"]) == 8 + fbgemm
    assert "tables [50, 40, 30] x 4" in capsys.readouterr().out
