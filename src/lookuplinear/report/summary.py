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


def _ms(r: Row | None) -> str:
    if r is None:
        return ""
    if r["status"] == "ok":
        return f"{r['median_s'] * 1e3:.3g}"
    est = r.get("estimated_bytes") or 0
    if r["status"] == "skipped" and est:
        return f"skipped ({est / 2**30:.1f} GiB)"
    return str(r["status"])


def _ref(rows: list[Row]) -> tuple[int, int]:
    main = [r for r in rows if r["phase"] != "train"]
    return min(r["out_features"] for r in main), min(r["batch"] for r in main)


def summary_table(doc: dict[str, Any], phase: str = "forward+backward") -> str:
    """Median milliseconds per method, one line per (form, in_features), as a Markdown table.

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
            speed = f"{lin['median_s'] / look['median_s']:.3g}x"
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
        lines.append(f"| {r['in_features']:,} | {r['method']} | {r['optimizer']} | "
                     f"{_ms(r) if r['status'] == 'ok' else ''} | {status} |")
    return "\n".join(lines)


def headlines(doc: dict[str, Any]) -> list[str]:
    """A few sentences with the numbers that matter: speedups, crossovers, what did not fit."""
    out: list[str] = []
    rows = doc["results"]
    if not [r for r in rows if r["phase"] != "train"]:
        return out
    d, batch = _ref(rows)
    for c in doc["crossovers"]:
        if c["out_features"] != d or c["batch"] != batch or c["dist"] != "uniform":
            continue
        sp = {int(k): v for k, v in c["speedup_by_in_features"].items()}
        if not sp:
            continue
        n_max = max(sp)
        cross = c["crossover_in_features"]
        where = (f"faster from in_features={cross:,} on" if cross is not None
                 else "never faster in this range")
        out.append(
            f"{c['form']}, {c['phase']}: {c['lookup_method']} is {where}; "
            f"{sp[n_max]:.3g}x nn.Linear at in_features={n_max:,} "
            f"({sp[min(sp)]:.2g}x at {min(sp):,})."
        )
    skipped = [r for r in rows if r["method"] == LINEAR and r["status"] == "skipped"
               and r["phase"] == "forward" and r["out_features"] == d and r["batch"] == batch]
    if skipped:
        r = max(skipped, key=lambda r: r["in_features"])
        out.append(f"nn.Linear on the dense input was skipped from in_features="
                   f"{min(s['in_features'] for s in skipped):,} on: at {r['in_features']:,} "
                   f"the dense batch alone needs {r['input_bytes'] / 2**30:.1f} GiB.")
    return out
