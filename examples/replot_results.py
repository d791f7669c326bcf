"""Redraw the bench plots and tables from a results.json (e.g. one from another machine).

    python examples/replot_results.py out/bench-quick/results.json out/replot
"""

import json
import sys
from pathlib import Path

from lookuplinear.report.plots import plot_all
from lookuplinear.report.summary import headlines, summary_table

if __name__ == "__main__":
    results, out = Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else "out/replot")
    doc = json.loads(results.read_text(encoding="utf-8"))
    for path in plot_all(doc, out):
        print(f"plot written to {path}")
    print(summary_table(doc, "forward+backward"))
    print("\n".join(f"- {line}" for line in headlines(doc)))
