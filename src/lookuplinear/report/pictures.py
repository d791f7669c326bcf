"""The walkthrough's pictures: the lookup, the one-hot product, and a CSR row's weighted sum.

Each function draws one PNG with matplotlib (``Figure`` objects, no pyplot state) and returns
its path. Large tables are shown through a window: the looked-up rows plus the first rows, with
the real row numbers on the axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

__all__ = ["draw_csr_sum", "draw_explain", "draw_lookup_table", "draw_onehot_product"]

HIGHLIGHT = "#ff7f0e"
MAX_ROWS = 14
MAX_COLS = 12


def _shown(n: int, wanted: Sequence[int], limit: int) -> list[int]:
    """Which of ``n`` rows to draw: every wanted row, then the first rows, up to ``limit``."""
    rows = sorted(set(int(i) for i in wanted))[:limit]
    fill = 0
    while len(rows) < min(n, limit):
        if fill not in rows:
            rows.append(fill)
        fill += 1
    return sorted(rows)


def _labels(rows: Sequence[int], prefix: str = "") -> list[str]:
    """Row labels; a gap in the numbering is marked with a leading ellipsis."""
    out, prev = [], -1
    for r in rows:
        out.append(("… " if r != prev + 1 else "") + f"{prefix}{r}")
        prev = r
    return out


def _heat(
    ax: Any,
    M: np.ndarray,
    *,
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    boxes: Sequence[tuple[int, int, int, int]] = (),
    vmax: float | None = None,
    cmap: str = "RdBu_r",
) -> None:
    """Draw ``M`` as a heat map with its values written in; ``boxes`` are (row, col, h, w)."""
    vmax = float(np.abs(M).max() or 1.0) if vmax is None else vmax
    ax.imshow(M, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto")
    ax.set_title(title, fontsize=10)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.tick_params(length=0)
    if M.size <= 400:
        for (i, j), v in np.ndenumerate(M):
            txt = f"{v:.0f}" if float(v).is_integer() and abs(v) < 10 else f"{v:.2f}"
            color = "white" if abs(v) > 0.6 * vmax else "black"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7, color=color)
    for r, c, h, w in boxes:
        ax.add_patch(
            Rectangle((c - 0.5, r - 0.5), w, h, fill=False, edgecolor=HIGHLIGHT, linewidth=2.5)
        )


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def draw_lookup_table(weight: torch.Tensor, indices: Sequence[int], path: Path) -> Path:
    """The table with the looked-up rows boxed, next to the lookup result ``weight[indices]``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> draw_lookup_table(torch.randn(4, 5), [2, 3, 1], d / "t.png").exists()
    True
    """
    n, d = weight.shape
    rows = _shown(n, indices, MAX_ROWS)
    cols = list(range(min(d, MAX_COLS)))
    W = _np(weight)[np.ix_(rows, cols)]
    Y = _np(weight)[np.ix_(list(indices)[:MAX_ROWS], cols)]
    vmax = float(max(np.abs(W).max(), 1e-12))
    fig = Figure(figsize=(9, 0.45 * max(len(rows), 4) + 1.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1])
    _heat(
        left,
        W,
        rows=_labels(rows, "row "),
        cols=[str(c) for c in cols],
        title=f"weight ({n} x {d}): rows idx boxed",
        boxes=[(rows.index(int(i)), 0, 1, len(cols)) for i in set(int(i) for i in indices)],
        vmax=vmax,
    )
    _heat(
        right,
        Y,
        rows=[f"idx[{k}] = {int(i)}" for k, i in enumerate(list(indices)[:MAX_ROWS])],
        cols=[str(c) for c in cols],
        title="LookupLinear(idx) = weight[idx]",
        vmax=vmax,
    )
    fig.suptitle("The lookup: each index selects one row of the table", fontsize=12)
    fig.savefig(path, dpi=90)
    return path


def draw_onehot_product(weight: torch.Tensor, indices: Sequence[int], path: Path) -> Path:
    """``one_hot(idx) @ weight``: the 1 in row 0, the row it selects, and the output row boxed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> draw_onehot_product(torch.randn(4, 5), [2, 3, 1], d / "p.png").exists()
    True
    """
    n, d = weight.shape
    idx = [int(i) for i in indices][:MAX_ROWS]
    rows = _shown(n, idx, MAX_ROWS)
    cols = list(range(min(d, MAX_COLS)))
    X = np.zeros((len(idx), len(rows)))
    for k, i in enumerate(idx):
        X[k, rows.index(i)] = 1.0
    W = _np(weight)[np.ix_(rows, cols)]
    Y = X @ W
    vmax = float(max(np.abs(W).max(), 1e-12))
    fig = Figure(figsize=(12, 0.45 * max(len(rows), 4) + 1.6), layout="constrained")
    ax_x, ax_w, ax_y = fig.subplots(
        1, 3, width_ratios=[max(len(rows), 3), max(len(cols), 3), max(len(cols), 3)]
    )
    sel = rows.index(idx[0])
    _heat(
        ax_x,
        X,
        rows=[f"x{k}" for k in range(len(idx))],
        cols=_labels(rows),
        title=f"X = one_hot(idx, {n})",
        boxes=[(0, sel, 1, 1)],
        vmax=1.0,
        cmap="PuOr",
    )
    _heat(
        ax_w,
        W,
        rows=_labels(rows, "row "),
        cols=[str(c) for c in cols],
        title="@ W  (W.T is nn.Linear.weight)",
        boxes=[(sel, 0, 1, len(cols))],
        vmax=vmax,
    )
    _heat(
        ax_y,
        Y,
        rows=[f"y{k}" for k in range(len(idx))],
        cols=[str(c) for c in cols],
        title="= nn.Linear(X) = W[idx]",
        boxes=[(0, 0, 1, len(cols))],
        vmax=vmax,
    )
    fig.suptitle(
        f"The one-hot product: row 0 of X has its 1 in column {idx[0]}, "
        f"so it selects row {idx[0]} of W",
        fontsize=12,
    )
    fig.savefig(path, dpi=90)
    return path


def draw_csr_sum(
    weight: torch.Tensor, columns: Sequence[int], values: Sequence[float], path: Path
) -> Path:
    """One CSR row: each stored ``value * weight[column]``, then their sum, which is the output.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> draw_csr_sum(torch.randn(4, 5), [0, 2], [0.5, 2.0], d / "c.png").exists()
    True
    """
    n, d = weight.shape
    cols = list(range(min(d, MAX_COLS)))
    W = _np(weight)
    parts = np.stack([v * W[c, cols] for c, v in zip(columns, values, strict=True)])
    total = parts.sum(0, keepdims=True)
    dense_row = np.zeros((1, n))
    np.add.at(dense_row[0], list(columns), list(values))
    linear = dense_row @ W[:, cols]  # nn.Linear on the dense row
    M = np.concatenate([parts, total, linear])
    labels = [f"{v:g} x W[{c}]" for c, v in zip(columns, values, strict=True)]
    labels += ["sum = LookupLinear(row)", "nn.Linear(dense row)"]
    k = len(parts)
    fig = Figure(figsize=(8, 0.45 * len(M) + 1.8), layout="constrained")
    ax = fig.subplots()
    _heat(
        ax,
        M,
        rows=labels,
        cols=[str(c) for c in cols],
        title=f"CSR row: columns {list(columns)}, values {[float(v) for v in values]}",
        boxes=[(k, 0, 2, len(cols))],
    )
    ax.axhline(k - 0.5, color="black", linewidth=2)
    fig.suptitle("A bag: the weighted rows of the table, summed", fontsize=12)
    fig.savefig(path, dpi=90)
    return path


def draw_explain(
    weight: torch.Tensor,
    indices: Sequence[int],
    csr_columns: Sequence[int],
    csr_values: Sequence[float],
    out: Path,
) -> list[Path]:
    """The three walkthrough pictures into folder ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        draw_lookup_table(weight, indices, out / "explain_lookup.png"),
        draw_onehot_product(weight, indices, out / "explain_onehot_product.png"),
        draw_csr_sum(weight, csr_columns, csr_values, out / "explain_csr_sum.png"),
    ]
