"""``results.csv``: the rows of ``results.json``, one per line, without the per-round times."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._atomic import replacing
from .bench import BenchResult

__all__ = ["CSV_FIELDS", "write_csv"]

#: every field of a results.json row, in its order, but the per-round ``times_s``
CSV_FIELDS = tuple(f.name for f in dataclasses.fields(BenchResult) if f.name != "times_s")


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` with the columns :data:`CSV_FIELDS`; returns ``path``. The file is
    replaced in one step: a failure leaves the old one as it was.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "r.csv"
    >>> p = write_csv([{"form": "bags", "median_s": 0.5}], path)
    >>> p.read_text().splitlines()[1].startswith("bags,")
    True
    """
    with replacing(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path
