"""benchmarks/bench_dlrm.py on a tiny model: it runs, checks one step and writes its ratios."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_dlrm.py"


def test_bench_dlrm_runs_and_reports_every_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("bench_dlrm", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_dlrm"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "dlrm.json"
    assert module.main(["--rows", "50-40-30", "--dim", "4", "--bottom", "5-8", "--top", "8",
                        "--batch", "6", "--bag", "3", "--repeats", "1", "--warmup", "1",
                        "--sample-ms", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["max_abs_diff"] < 1e-5
    assert len(report["ratios"]) == 4
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in report["ratios"])
    assert len(report["rounds_s"]) == 7
    assert "tables [50, 40, 30] x 4" in capsys.readouterr().out
