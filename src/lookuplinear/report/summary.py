"""The bench matrix as Markdown tables and headline sentences (printed and put in the report)."""

from __future__ import annotations

from typing import Any

from .bench import MIN_ROUNDS
from .methods import (
    EMBEDDING,
    EMBEDDING_BAG,
    LINEAR,
    LOOKUP_OF_FORM,
    LOOKUP_SPARSE,
    SCIPY,
    SPARSE_MM,
)

__all__ = ["failed_cases", "headlines", "nothing_measured", "summary_table", "train_table"]

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


def _sizes(ns: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in ns)


def _at(group: list[int], sizes: list[int], word: str) -> str:
    """``word`` and where it holds: at every size, from a size on, or at the sizes named."""
    if not group:
        return ""
    if group == sizes:
        return f"{word} at every measured size"
    if len(group) > 1 and group == sizes[-len(group):]:
        return f"{word} from in_features={group[0]:,} on"
    return f"{word} at in_features={_sizes(group)}"


def _where(ranges: dict[int, tuple[float, float]]) -> str:
    """Where the lookup is faster (the whole range of the rounds above 1), where slower (wholly
    below 1) and where neither, e.g. ``faster at in_features=100 and slower from ... on``."""
    sizes = sorted(ranges)
    faster = [n for n in sizes if ranges[n][0] > 1]
    slower = [n for n in sizes if ranges[n][1] < 1]
    neither = [n for n in sizes if n not in faster and n not in slower]
    parts = [_at(faster, sizes, "faster"), _at(slower, sizes, "slower"),
             _at(neither, sizes, "neither faster nor slower beyond the spread of its rounds")]
    return " and ".join(p for p in parts if p)


def _rounds(rows: list[Row], c: dict[str, Any]) -> int:
    """The fewest timed rounds behind a ratio of the crossover ``c``."""
    return min((len(r["times_s"]) for r in rows
                if r["status"] == "ok" and r["method"] in (LINEAR, c["lookup_method"])
                and all(r[k] == c[k] for k in ("form", "dist", "out_features", "batch", "phase"))),
               default=0)


def _crossover_line(c: dict[str, Any], rows: list[Row]) -> str | None:
    """The headline of one crossover: where the lookup is faster or slower, with the ratios."""
    sp = {int(k): v for k, v in c["speedup_by_in_features"].items()}
    rng = {int(k): tuple(v) for k, v in c["speedup_range_by_in_features"].items()}
    busy = _sizes(c["noisy_in_features"])
    head = f"{c['form']}, {c['phase']}: "
    if not sp:
        return (head + f"{BUSY} to measure at in_features={busy}; no conclusion drawn."
                if busy else None)
    n_max, n_min = max(sp), min(sp)
    rounds = _rounds(rows, c)
    ratios = f"{_x(sp[n_max])} nn.Linear at in_features={n_max:,}"
    if rounds >= MIN_ROUNDS:
        lo, hi = rng[n_max]
        line = f"{head}{c['lookup_method']} is {_where(rng)}; {ratios} (rounds: {_x(lo)}-{_x(hi)})"
    else:
        line = f"{head}{c['lookup_method']} runs at {ratios}"
    if n_min != n_max:
        line += f"; {_x(sp[n_min])} at {n_min:,}"
    line += "."
    if rounds < MIN_ROUNDS:
        line += (f" No verdict: {rounds} timed round{'s' * (rounds != 1)} per size, too few to "
                 f"tell a difference from noise (run with --repeats {MIN_ROUNDS} or more).")
    if busy:
        line += f" Not measured at in_features={busy}: {BUSY}."
    return line


def _skipped_sizes(rows: list[Row]) -> str | None:
    """The headline of the sizes skipped whole (rows with method ``*``), with the reason."""
    whole = [r for r in rows if r["method"] == "*"]
    if not whole:
        return None
    r = max(whole, key=lambda r: (r["in_features"], r["out_features"]))
    sizes = sorted({w["in_features"] for w in whole})
    return (f"Every method was skipped at in_features={_sizes(sizes)}: {r['reason']} (at "
            f"in_features={r['in_features']:,}, out_features={r['out_features']}).")


def failed_cases(doc: dict[str, Any]) -> list[str]:
    """One line per bench row that failed: the method, the case and the reason it failed."""
    return [f"{r['method']}{' ' + r['optimizer'] if r['optimizer'] else ''} {r['phase']} "
            f"{r['form']}/{r['dist']} in={r['in_features']:,} out={r['out_features']} "
            f"batch={r['batch']}: {r['reason']}"
            for r in doc["results"] if r["status"] == "failed"]


def nothing_measured(doc: dict[str, Any], fix: str) -> str | None:
    """Why the matrix measured nothing, with ``fix`` (what to change); None when a case ran."""
    rows = doc["results"]
    if any(r["status"] == "ok" for r in rows):
        return None
    how = "skipped or failed" if any(r["status"] == "failed" for r in rows) else "skipped"
    reasons = sorted({str(r["reason"]) for r in rows})
    return (f"nothing was measured, every case was {how}: " + "; ".join(reasons[:3])
            + f". {fix}")


def headlines(doc: dict[str, Any]) -> list[str]:
    """A few sentences with the numbers that matter: speedups, crossovers, what did not fit.

    Every number comes from the tables (the ratio of two medians, with the range their rounds
    allow); a size whose rounds kept disagreeing is named as unmeasured instead. "Faster" or
    "slower" at a size is said only where the whole range is on one side of 1, and only from
    :data:`~lookuplinear.report.bench.MIN_ROUNDS` timed rounds or more (with fewer, the range
    is the rounds themselves, and the line says that no verdict is drawn).

    Examples
    --------
    >>> from lookuplinear.report.bench import Grid, run_matrix, to_json
    >>> tiny = Grid((100,), (4,), (8,), (("bags", "uniform"),), bag_size=3, repeats=1)
    >>> doc = to_json(run_matrix(tiny, progress=False), machine={}, settings={})
    >>> "No verdict: 1 timed round per size" in headlines(doc)[0]
    True
    """
    out: list[str] = []
    rows = doc["results"]
    skipped_whole = _skipped_sizes(rows)
    measured = [r for r in rows if r["phase"] != "train" and r["method"] != "*"]
    if not measured:
        return [skipped_whole] if skipped_whole else out
    d, batch = _ref(measured)
    for c in doc["crossovers"]:
        if c["out_features"] != d or c["batch"] != batch or c["dist"] != "uniform":
            continue
        line = _crossover_line(c, rows)
        if line:
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
    if skipped_whole:
        out.append(skipped_whole)
    return out
