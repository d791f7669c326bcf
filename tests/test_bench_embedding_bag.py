"""benchmarks/bench_embedding_bag.py on tiny sizes: it runs, its models agree, its numbers are
finite (no timings)."""

from __future__ import annotations

import math

from benchmark_scripts import load


def test_bench_embedding_bag_runs_on_tiny_sizes() -> None:
    bench = load("bench_embedding_bag")
    out = bench.main(["--rows", "20", "300", "--dim", "4", "--bags", "4", "--bag-size", "3",
                      "--repeats", "1", "--warmup", "0", "--sample-ms", "0.01", "--json"])
    assert set(out) == {"forward", "forward+backward"}
    for times in out.values():
        assert set(times) == set(bench.MODELS)
        assert all(math.isfinite(t) and t > 0 for t in times.values())
