"""benchmarks/ab.py's reading of a benchmark's timings: from its JSON, and from the Markdown
tables a script without ``--json`` prints."""

from __future__ import annotations

from benchmark_scripts import load

PRINTED = """machine: AMD EPYC
| kernel | C, ms | torch ops, ms | C / torch ops |
|---|---|---|---|
| group_rows | 1.234 | 2.5 | 0.49 |
| sgd | 0.5 | 1,234.5 | 0.01 |

| widths | batch | 8/16/32 ms (x per width) |
|---|---|---|
| 8/16/32 | one-hot | 0.53 (0.78x) |
| dataset | threads | train s | ratio | accuracy |
|---|---|---|---|---|
| rt | 2 | 2.79 | 0.97x | 0.791 |
a line between tables
| not | a table |
"""


def test_table_timings_reads_the_time_columns_of_every_table() -> None:
    got = load("ab").table_timings(PRINTED)
    kernels = "kernel | C, ms | torch ops, ms | C / torch ops"
    assert got == {
        f"{kernels}/group_rows/C, ms": 1.234,
        f"{kernels}/group_rows/torch ops, ms": 2.5,
        f"{kernels}/sgd/C, ms": 0.5,
        f"{kernels}/sgd/torch ops, ms": 1234.5,
        # a table right after another: its header is the row over the dashes
        "widths | batch | 8/16/32 ms (x per width)/8/16/32 / one-hot/8/16/32 ms (x per width)":
            0.53,
        # the integer thread count labels the row; the ratio and accuracy are no timings
        "dataset | threads | train s | ratio | accuracy/rt / 2/train s": 2.79,
    }


def test_json_timings_keep_times_and_leave_settings_and_ratios() -> None:
    got = load("ab").timings({"args": {"repeats_s": 3}, "forward": {"ours_ms": 1.5, "ratio": 0.9},
                         "rounds_s": [1.0, 3.0, 2.0]}, under=("rounds_s",))
    assert got == {"/forward/ours_ms": 1.5, "/rounds_s": 2.0}
