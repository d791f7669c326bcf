"""The bench matrix as Markdown tables and headline sentences (printed and put in the report)."""

from __future__ import annotations

from typing import Any

from .methods import (
    EMBEDDING,
    EMBEDDING_BAG,
    LINEAR,
    LOOKUP_OF_FORM,
    LOOKUP_SPARSE,
    SCIPY,
    SPARSE_MM,
)

__all__ = ["headlines", "summary_table", "train_table"]

Row = dict[str, Any]

#: what a measurement whose rounds kept disagreeing shows instead of a conclusion
BUSY = "machine too busy"


def _pm(r: Row) -> str:
    """The spread of a measurement's rounds as +-percent around its median."""
    return f"±{(r['spread'] - 1) / 2:.0%}"


def _why(r: Row) -> str:
    """Why a noisy measurement is not a number to draw on."""
    others = r.get("others_cpu")
    if others is not None and others > 0.05:
        return (f"other processes used {others:.0%} of the CPUs while it ran "
                f"({r['attempts']} attempts)")
    return f"its rounds still disagreed after {r['attempts']} attempts"


def _ms(r: Row | None) -> str:
    if r is None:
        return ""
    if r["status"] == "ok":
        cell = f"{r['median_s'] * 1e3:.3g} {_pm(r)}"
        return f"{cell} ({BUSY})" if r["noisy"] else cell
    est = r.get("estimated_bytes") or 0
    if r["status"] == "skipped" and est:
        return f"skipped ({est / 2**30:.1f} GiB)"
    return str(r["status"])


def _ref(rows: list[Row]) -> tuple[int, int]:
    main = [r for r in rows if r["phase"] != "train"]
    return min(r["out_features"] for r in main), min(r["batch"] for r in main)


def summary_table(doc: dict[str, Any], phase: str = "forward+backward") -> str:
    """Median milliseconds per method, one line per (form, in_features), as a Markdown table.

    Each time carries the spread of its rounds (half the ratio of the upper to the lower
    quartile, as +-percent); a time whose rounds kept disagreeing says the machine was too busy,
    and its speedup is not given.

    Examples
    --------
    >>> from lookuplinear.report.bench import Grid, run_matrix, to_json
    >>> tiny = Grid((100,), (4,), (8,), (("bags", "uniform"),), bag_size=3, repeats=1)
    >>> doc = to_json(run_matrix(tiny, progress=False), machine={}, settings={})
    >>> print(summary_table(doc).splitlines()[2][:20])
    | form | in_features
    """
    rows = [r for r in doc["results"] if r["phase"] == phase and r["dist"] == "uniform"]
    if not rows:
        return f"(no {phase} results)"
    d, batch = _ref(rows)
    rows = [r for r in rows if r["out_features"] == d and r["batch"] == batch]
    cols = ["nn.Linear dense", "lookup", "speedup", "nn.Embedding(Bag)", "torch.sparse.mm",
            "scipy"]
    if phase != "forward":
        cols.append("lookup, sparse grad")
    lines = [
        "| form | in_features | " + " | ".join(cols) + " |",
        "|" + "---|" * (len(cols) + 2),
    ]
    by: dict[tuple[str, int], dict[str, Row]] = {}
    for r in rows:
        by.setdefault((r["form"], r["in_features"]), {})[r["method"]] = r
    order = {"indices": 0, "bags": 1, "csr": 2, "dense": 3}
    for (form, n), m in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1])):
        lin, look = m.get(LINEAR), m.get(LOOKUP_OF_FORM[form])
        speed = ""
        if lin and look and lin["status"] == "ok" and look["status"] == "ok":
            speed = ("" if lin["noisy"] or look["noisy"]
                     else f"{lin['median_s'] / look['median_s']:.3g}x")
        emb = m.get(EMBEDDING) or m.get(EMBEDDING_BAG)
        cells = [_ms(lin), _ms(look), speed, _ms(emb), _ms(m.get(SPARSE_MM)), _ms(m.get(SCIPY))]
        if phase != "forward":
            cells.append(_ms(m.get(LOOKUP_SPARSE)))
        lines.append(f"| {form} | {n:,} | " + " | ".join(cells) + " |")
    return (f"{phase}, median ms (out_features={d}, batch={batch}, uniform indices; "
            f"lookup = {', '.join(sorted(set(LOOKUP_OF_FORM.values())))})\n\n"
            + "\n".join(lines))


def train_table(doc: dict[str, Any]) -> str:
    """Train-step median milliseconds per optimizer and ``in_features``, as a Markdown table."""
    rows = [r for r in doc["results"] if r["phase"] == "train"]
    if not rows:
        return "(no train-step results)"
    lines = ["| in_features | method | optimizer | median ms | status |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["in_features"], r["optimizer"], r["method"])):
        status = "ok" if r["status"] == "ok" else f"{r['status']}: {r['reason']}"
        if r["status"] == "ok" and r["noisy"]:
            status = f"{BUSY}: {_why(r)}"
        ms = f"{r['median_s'] * 1e3:.3g} {_pm(r)}" if r["status"] == "ok" else ""
        lines.append(f"| {r['in_features']:,} | {r['method']} | {r['optimizer']} | "
                     f"{ms} | {status} |")
    return "\n".join(lines)


def _x(v: float) -> str:
    return f"{v:.3g}x"


def headlines(doc: dict[str, Any]) -> list[str]:
    """A few sentences with the numbers that matter: speedups, crossovers, what did not fit.

    Every number comes from the tables (the ratio of two medians, with the range their rounds
    allow); a size whose rounds kept disagreeing is named as unmeasured instead, and a
    conclusion ("faster from ...") is drawn only where the whole range is on one side of 1.
    """
    out: list[str] = []
    rows = doc["results"]
    if not [r for r in rows if r["phase"] != "train"]:
        return out
    d, batch = _ref(rows)
    for c in doc["crossovers"]:
        if c["out_features"] != d or c["batch"] != batch or c["dist"] != "uniform":
            continue
        sp = {int(k): v for k, v in c["speedup_by_in_features"].items()}
        rng = {int(k): v for k, v in c["speedup_range_by_in_features"].items()}
        busy = ", ".join(f"{n:,}" for n in c["noisy_in_features"])
        head = f"{c['form']}, {c['phase']}: "
        if not sp:
            if busy:
                out.append(head + f"{BUSY} to measure at in_features={busy}; no conclusion "
                           "drawn.")
            continue
        n_max, n_min = max(sp), min(sp)
        cross = c["crossover_in_features"]
        if cross is not None:
            where = f"faster from in_features={cross:,} on"
        elif all(hi < 1 for _, hi in rng.values()):
            where = "slower at every measured size"
        else:
            where = "not faster beyond the spread of its rounds at every larger size"
        lo, hi = rng[n_max]
        line = (f"{head}{c['lookup_method']} is {where}; {_x(sp[n_max])} nn.Linear at "
                f"in_features={n_max:,} (rounds: {_x(lo)}-{_x(hi)})")
        if n_min != n_max:
            line += f"; {_x(sp[n_min])} at {n_min:,}"
        line += "."
        if busy:
            line += f" Not measured at in_features={busy}: {BUSY}."
        out.append(line)
    busy_rows = [r for r in rows if r["status"] == "ok" and r["noisy"]]
    if busy_rows:
        timed = [r for r in rows if r["status"] == "ok"]
        shares = [r["others_cpu"] for r in busy_rows if r.get("others_cpu") is not None]
        others = (f"; other processes used up to {max(shares):.0%} of the CPUs"
                  if shares and max(shares) >= 0.05 else "")
        out.append(f"{len(busy_rows)} of {len(timed)} measurements were taken while the machine "
                   f"was too busy (their rounds disagreed, or others used the CPUs, after "
                   f"{max(r['attempts'] for r in busy_rows)} attempts{others}): they are marked "
                   "in the tables and no headline rests on them; run again on a quiet machine.")
    skipped = [r for r in rows if r["method"] == LINEAR and r["status"] == "skipped"
               and r["phase"] == "forward" and r["out_features"] == d and r["batch"] == batch]
    if skipped:
        r = max(skipped, key=lambda r: r["in_features"])
        out.append(f"nn.Linear on the dense input was skipped from in_features="
                   f"{min(s['in_features'] for s in skipped):,} on: at {r['in_features']:,} "
                   f"the dense batch alone needs {r['input_bytes'] / 2**30:.1f} GiB.")
    return out
