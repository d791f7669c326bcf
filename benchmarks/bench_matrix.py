"""The bench matrix of ``lookuplinear bench`` as a program: same options, same outputs.

Run from the repository root:

    .venv/bin/python benchmarks/bench_matrix.py --quick --out out/bench-quick

Writes results.json, results.csv and the plots into --out and prints the machine, the summary
tables and the headline ratios (see docs/report.md for the schema and how to read the plots).
"""

import sys

from lookuplinear.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
