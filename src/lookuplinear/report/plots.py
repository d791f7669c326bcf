"""The bench matrix in pictures, drawn from the rows of ``results.json``.

* ``time_vs_in_features.png``: median time against ``in_features``, log-log, one line per method,
  one panel per input form (forward and forward+backward);
* ``memory_vs_in_features.png``: the memory a method needs (its input representation plus the
  peak it allocates) against ``in_features``; skipped dense cases drawn at their estimate;
* ``crossover.png``: ``nn.Linear`` time divided by the lookup's time; above 1 the lookup wins;
* ``train_step.png``: one train step per optimizer, sparse lookup against dense ``EmbeddingBag``;
* ``readme.png``: a small panel for the README, bags forward+backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

__all__ = [
    "plot_all",
    "plot_big_vocab",
    "plot_crossover",
    "plot_memory",
    "plot_readme",
    "plot_side_by_side",
    "plot_time",
    "plot_train",
]

Row = dict[str, Any]

STYLE = {
    "nn.Linear (dense input)": ("black", "o", "-"),
    "LookupLinear": ("#d62728", "s", "-"),
    "LookupLinear (scipy input)": ("#d62728", "s", "-"),
    "LookupLinear (Bags.from_dense)": ("#d62728", "s", "-"),
    "LookupLinear (sparse grad)": ("#ff9896", "D", "--"),
    "nn.Embedding": ("#1f77b4", "^", "-"),
    "nn.EmbeddingBag": ("#1f77b4", "^", "-"),
    "torch.sparse.mm (CSR)": ("#2ca02c", "v", "-"),
    "scipy CSR @ numpy": ("#9467bd", "P", "-"),
}


def _style(method: str) -> dict[str, Any]:
    color, marker, ls = STYLE.get(method, ("gray", ".", ":"))
    return dict(color=color, marker=marker, linestyle=ls, markersize=4, linewidth=1.3)


def _draw(ax: Any, sub: Sequence[Row], scale: float, **style: Any) -> bool:
    """Plot ``sub``'s measured times (``median_s * scale``) vs ``in_features``: a line through
    the clean ones, and hollow unconnected markers where the machine was too busy for the
    number (``noisy``: not a measurement to read). Whether anything was drawn."""
    ok = [r for r in sub if r["status"] == "ok"]
    clean = sorted((r["in_features"], r["median_s"] * scale) for r in ok if not r["noisy"])
    busy = sorted((r["in_features"], r["median_s"] * scale) for r in ok if r["noisy"])
    if clean:
        xs, ys = zip(*clean, strict=True)
        ax.plot(xs, ys, **style)
    if busy:
        xs, ys = zip(*busy, strict=True)
        ax.plot(xs, ys, linestyle="none", marker="o", markerfacecolor="none",
                markeredgecolor=style.get("color", "gray"), markersize=5,
                **({} if clean else {"label": style.get("label")}))
    return bool(clean or busy)


def _busy_note(fig: Any, rows: Sequence[Row]) -> None:
    """Say under the figure what its hollow markers are, where it has any: as the figure's
    bottom label, for which the constrained layout makes room below the x-axis labels."""
    if any(r["status"] == "ok" and r["noisy"] for r in rows):
        fig.supxlabel("hollow markers: the machine was too busy for that number (its rounds "
                      "disagreed); not a measurement to read", x=0.01, ha="left", fontsize=6,
                      color="gray")


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty panel has no legend
        ax.legend(**kw)


def _first(rows: Sequence[Row], key: str) -> Any:
    return sorted({r[key] for r in rows})[0] if rows else None


def _slice(rows: Sequence[Row], **eq: Any) -> list[Row]:
    return [r for r in rows if all(r.get(k) == v for k, v in eq.items())]


def _forms(rows: Sequence[Row]) -> list[str]:
    order = ["indices", "bags", "csr", "dense"]
    present = {r["form"] for r in rows if r["phase"] != "train"}
    return [f for f in order if f in present]


def _reference(rows: Sequence[Row]) -> dict[str, Any]:
    """The slice the summary plots show: the first out_features and batch, uniform indices."""
    main = [r for r in rows if r["phase"] != "train"]
    return dict(out_features=_first(main, "out_features"), batch=_first(main, "batch"),
                dist="uniform")


def plot_time(rows: Sequence[Row], path: Path) -> Path:
    """Median time vs ``in_features`` (log-log), a panel per form and phase."""
    ref = _reference(rows)
    forms = _forms(rows)
    phases = ["forward", "forward+backward"]
    fig = Figure(figsize=(3.4 * max(len(forms), 1), 6.2), layout="constrained")
    axes = fig.subplots(2, max(len(forms), 1), squeeze=False, sharex=True)
    for j, form in enumerate(forms):
        for i, phase in enumerate(phases):
            ax = axes[i][j]
            sub = _slice(rows, form=form, phase=phase, **ref)
            for method in sorted({r["method"] for r in sub}):
                _draw(ax, [r for r in sub if r["method"] == method], 1e3, label=method,
                      **_style(method))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{form}: {phase}", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
            if j == 0:
                ax.set_ylabel("median time (ms)")
            if i == 1:
                ax.set_xlabel("in_features")
            _legend(ax, fontsize=6, loc="upper left")
    fig.suptitle(f"Time vs in_features (out_features={ref['out_features']}, "
                 f"batch={ref['batch']}, uniform indices)", fontsize=11)
    _busy_note(fig, rows)
    fig.savefig(path, dpi=80)
    return path


def plot_memory(rows: Sequence[Row], path: Path) -> Path:
    """Memory needed vs ``in_features`` for forward+backward; skipped cases at their estimate."""
    ref = _reference(rows)
    forms = _forms(rows)
    fig = Figure(figsize=(3.4 * max(len(forms), 1), 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(forms), 1), squeeze=False)[0]
    for ax, form in zip(axes, forms, strict=False):
        sub = _slice(rows, form=form, phase="forward+backward", **ref)
        for method in sorted({r["method"] for r in sub}):
            ok = sorted((r["in_features"], r["input_bytes"] + (r["peak_bytes"] or 0))
                        for r in sub if r["method"] == method and r["status"] == "ok")
            est = sorted((r["in_features"], r["estimated_bytes"]) for r in sub
                         if r["method"] == method and r["status"] == "skipped")
            st = _style(method)
            if ok:
                xs, ys = zip(*ok, strict=True)
                ax.plot(xs, [y / 2**20 for y in ys], label=method, **st)
            if est:
                xs, ys = zip(*est, strict=True)
                ax.plot(xs, [y / 2**20 for y in ys], color=st["color"], marker="x",
                        linestyle="none", markersize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{form}: forward+backward", fontsize=9)
        ax.set_xlabel("in_features")
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax, fontsize=6, loc="upper left")
    axes[0].set_ylabel("input + peak allocated (MiB)")
    fig.suptitle("Memory vs in_features (beyond the weight table itself); "
                 "x: skipped over --max-memory, drawn at its estimate", fontsize=11)
    fig.savefig(path, dpi=80)
    return path


def plot_crossover(crossovers: Sequence[Row], path: Path) -> Path:
    """``nn.Linear`` time / lookup time vs ``in_features``: the lookup wins above 1."""
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = {"indices": "#1f77b4", "bags": "#d62728", "csr": "#2ca02c", "dense": "black"}
    out0 = _first(crossovers, "out_features")
    batch0 = _first(crossovers, "batch")
    for c in crossovers:
        if c["out_features"] != out0 or c["batch"] != batch0:
            continue
        pts = sorted((int(k), v) for k, v in c["speedup_by_in_features"].items())
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        ls = "-" if c["phase"] == "forward" else "--"
        marker = "o" if c["dist"] == "uniform" else "s"
        ax.plot(xs, ys, color=colors.get(c["form"], "gray"), linestyle=ls, marker=marker,
                markersize=4, label=f"{c['form']} ({c['dist']}), {c['phase']}")
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("in_features")
    ax.set_ylabel("nn.Linear time / lookup time\n(> 1: the lookup is faster)")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, fontsize=7)
    ax.set_title(f"Where the lookup starts to win (out_features={out0}, batch={batch0})",
                 fontsize=11)
    fig.savefig(path, dpi=80)
    return path


def plot_train(rows: Sequence[Row], path: Path) -> Path:
    """Train-step time per optimizer vs ``in_features``: sparse lookup vs dense EmbeddingBag."""
    train = [r for r in rows if r["phase"] == "train"]
    names = []
    for r in train:
        name = r["optimizer"].rsplit(".", 1)[-1]
        if name not in names:
            names.append(name)
    fig = Figure(figsize=(2.9 * max(len(names), 1), 3.4), layout="constrained")
    axes = fig.subplots(1, max(len(names), 1), squeeze=False, sharey=True)[0]
    for ax, name in zip(axes, names, strict=False):
        for method in sorted({r["method"] for r in train}):
            sub = [r for r in train if r["method"] == method
                   and r["optimizer"].endswith("." + name)]
            label = f"{method}\n+ {sub[0]['optimizer']}" if sub else method
            if not _draw(ax, sub, 1e3, label=label,
                         **_style(method if "Lookup" in method else "nn.EmbeddingBag")):
                why = next((r["reason"] for r in sub if r["reason"]), "not run")
                ax.text(0.5, 0.1 if "Lookup" in method else 0.2, f"{method}: {why}"[:70],
                        transform=ax.transAxes, fontsize=5, ha="center", wrap=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("in_features")
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax, fontsize=5, loc="upper left")
    axes[0].set_ylabel("train step (ms)")
    fig.suptitle("One training step per optimizer", fontsize=11)
    _busy_note(fig, train)
    fig.savefig(path, dpi=80)
    return path


def plot_all(doc: dict[str, Any], out: Path) -> list[Path]:
    """Every bench plot of a ``results.json`` document into folder ``out``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = doc["results"]
    paths = [
        plot_time(rows, out / "time_vs_in_features.png"),
        plot_memory(rows, out / "memory_vs_in_features.png"),
        plot_crossover(doc["crossovers"], out / "crossover.png"),
    ]
    if any(r["phase"] == "train" for r in rows):
        paths.append(plot_train(rows, out / "train_step.png"))
    if any(r["form"] == "bags" and r["phase"] == "forward+backward" for r in rows):
        paths.append(plot_readme(rows, out / "readme.png"))
    return paths


def plot_side_by_side(run: Any, path: Path) -> Path:
    """The two loss curves of :func:`~lookuplinear.report.training.train_side_by_side`."""
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax, ax_diff = fig.subplots(1, 2, width_ratios=[2, 1])
    steps = range(1, len(run.loss_lookup) + 1)
    ax.plot(steps, run.loss_linear, color="black", linewidth=3, alpha=0.35,
            label="nn.Linear on one_hot(idx)")
    ax.plot(steps, run.loss_lookup, color="#d62728", linewidth=1.2, linestyle="--",
            label="LookupLinear on idx")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.legend(fontsize=8)
    ax.set_title("Same initial weights, same batches, same SGD", fontsize=10)
    diff = [abs(a - b) for a, b in zip(run.loss_lookup, run.loss_linear, strict=True)]
    ax_diff.plot(steps, diff, color="#1f77b4")
    ax_diff.set_xlabel("step")
    ax_diff.set_title(f"|loss difference| (max {max(diff):.2g})", fontsize=10)
    ax_diff.set_ylim(bottom=0, top=max(max(diff) * 1.2, 1e-6))
    fig.savefig(path, dpi=80)
    return path


def plot_big_vocab(run: Any, path: Path) -> Path:
    """The loss curve of :func:`~lookuplinear.report.training.train_big_vocab`."""
    from .memory import format_bytes

    fig = Figure(figsize=(8, 3.2), layout="constrained")
    ax = fig.subplots()
    losses = run.losses
    ax.plot(range(1, len(losses) + 1), losses, color="#d62728", alpha=0.35, linewidth=0.8)
    k = max(1, len(losses) // 20)
    smooth = [sum(losses[max(0, i - k): i + 1]) / len(losses[max(0, i - k): i + 1])
              for i in range(len(losses))]
    ax.plot(range(1, len(losses) + 1), smooth, color="#d62728", linewidth=2,
            label=f"LookupLinear(sparse=True) + {run.optimizer}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.legend(fontsize=8)
    ax.set_title(
        f"in_features = {run.in_features:,}: held-out accuracy {run.accuracy_before:.1%} -> "
        f"{run.accuracy_after:.1%}; the dense batch would need "
        f"{format_bytes(run.dense_batch_bytes)}", fontsize=10)
    fig.savefig(path, dpi=80)
    return path


def plot_readme(rows: Sequence[Row], path: Path, form: str = "bags") -> Path:
    """One small panel for the README: forward+backward time of one input form vs in_features,
    with the sizes where the dense input did not fit marked on the ``nn.Linear`` line."""
    ref = _reference(rows)
    sub = _slice(rows, form=form, phase="forward+backward", **ref)
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.subplots()
    for method in sorted({r["method"] for r in sub}):
        if method in ("scipy CSR @ numpy", "torch.sparse.mm (CSR)"):
            continue
        _draw(ax, [r for r in sub if r["method"] == method], 1e3, label=method,
              **_style(method))
    top = max((r["median_s"] * 1e3 for r in sub if r["status"] == "ok"), default=1.0)
    for r in sub:
        if r["method"] == "nn.Linear (dense input)" and r["status"] == "skipped":
            ax.plot([r["in_features"]], [top * 3], marker="x", color="black", markersize=8)
            ax.annotate(f"dense input\n{r['input_bytes'] / 2**30:.1f} GiB:\nskipped",
                        (r["in_features"], top * 3), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    low = min((r["median_s"] * 1e3 for r in sub if r["status"] == "ok"), default=0.1)
    ax.set_ylim(low / 2, top * 40)
    ax.margins(x=0.1)  # room for the "skipped" notes at the widest vocabulary
    ax.set_xlabel("in_features (vocabulary size)")
    ax.set_ylabel("forward + backward (ms)")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, fontsize=7, loc="upper left")
    ax.set_title(f"{ref['batch']} bags of 20 indices -> out_features={ref['out_features']}",
                 fontsize=10)
    _busy_note(fig, sub)
    fig.savefig(path, dpi=80)
    return path
