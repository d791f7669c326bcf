"""benchmarks/bench_embedding_bag.py on tiny sizes: it runs, its models agree, its numbers are
finite (no timings)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_embedding_bag.py"


def test_bench_embedding_bag_runs_on_tiny_sizes() -> None:
    spec = importlib.util.spec_from_file_location("bench_embedding_bag", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--rows", "20", "300", "--dim", "4", "--bags", "4", "--bag-size", "3",
                      "--repeats", "1", "--warmup", "0", "--sample-ms", "0.01", "--json"])
    assert set(out) == {"forward", "forward+backward"}
    for times in out.values():
        assert set(times) == set(bench.MODELS)
        assert all(math.isfinite(t) and t > 0 for t in times.values())
