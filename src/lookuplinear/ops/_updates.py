"""The row optimizers' updates in torch ops, to the bits of the C kernels
(``csrc/rowkernels_impl.h``).

Each function updates ``weight``'s ``rows`` (unique) by the gradient rows ``values`` with one
optimizer's formula, in place, its scalars ``p`` in the C kernel's order
(:data:`._clib.SCALARS`). The C kernels are built with multiply-adds fused
(``-ffp-contract=fast``); here each fused multiply-add is a torch op that computes one:
``a.add(b, alpha=c)`` is ``fma(c, b, a)`` and ``torch.addcmul(a, b, c)`` is ``fma(b, c, a)``
(one rounding, as ATen's CPU kernels compute them where the CPU has FMA), and square roots are
rounded correctly (:func:`_sqrt`: ``torch.sqrt`` may be off by an ulp). So on such a CPU the
twin and the C kernel give the same bits (tests/test_rowops.py); row-wise Adagrad's mean of
squares is summed in the C kernel's order (16 lanes folded in halves, then the rest).

``lookuplinear::rows_update_`` (:mod:`.library`) runs these where the C kernels do not:
another device, another dtype or layout, no C library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..errors import InputValueError, LookupIndexError, OffsetsError, PaddingIdxError
from . import _inputs
from ._clib import SCALARS
from ._rows import FusedTable, fused_rows_c, group_rows, grouped_rows, update_rows_c

__all__ = ["FLOAT_DTYPES", "ROW_UPDATES", "adagrad_rows", "adam_rows", "check_float",
           "check_padding", "check_rows", "check_update",
           "group_rows_twin", "rows_fused_cpu", "rows_fused_twin", "rows_update_cpu",
           "rows_update_twin", "rowwise_adagrad_rows", "sgd_rows", "state_parts"]


def sgd_rows(weight: torch.Tensor, buf: torch.Tensor | None, rows: torch.Tensor,
             values: torch.Tensor, p: Sequence[float]) -> None:
    """SGD: ``g = values + wd * w``; ``b = momentum * b + (1 - dampening) * g``; ``w -= lr *
    (g + momentum * b if nesterov else b)`` (``buf``: the momentum buffer, ``(N, dim)``, or
    None without momentum)."""
    lr, wd, mom, omd, nesterov = p[:5]
    wr = weight.index_select(0, rows)
    if mom == 0 and wd == 0:
        weight.index_copy_(0, rows, wr.add_(values, alpha=-lr))
        return
    # no decay term without decay (torch.optim's): 0 * inf would make an inf weight NaN
    x = values.add(wr, alpha=wd) if wd != 0 else values
    if mom != 0:
        assert buf is not None
        b = (x * omd).add_(buf.index_select(0, rows), alpha=mom)
        buf.index_copy_(0, rows, b)
        x = x.add(b, alpha=mom) if nesterov != 0 else b
    weight.index_copy_(0, rows, wr.add_(x, alpha=-lr))


def adagrad_rows(weight: torch.Tensor, sums: torch.Tensor, rows: torch.Tensor,
                 values: torch.Tensor, p: Sequence[float]) -> None:
    """Adagrad: ``g = values + wd * w``; ``s += g * g``; ``w -= clr * g / (sqrt(s) + eps)``
    (``sums``: ``(N, dim)``)."""
    clr, eps, wd = p[:3]
    wr = weight.index_select(0, rows)
    x = values.add(wr, alpha=wd) if wd != 0 else values  # (see sgd_rows)
    s = torch.addcmul(sums.index_select(0, rows), x, x)
    sums.index_copy_(0, rows, s)
    weight.index_copy_(0, rows, wr.sub_((x * clr).div_(_sqrt(s).add_(eps))))


def _sqrt(s: torch.Tensor) -> torch.Tensor:
    """``sqrt(s)`` correctly rounded, as C's ``sqrt`` (``torch.sqrt``, a vector library's, may
    be an ulp off). Below float64: the float64 root rounded to ``s``'s dtype, which is the
    correctly rounded one (the float64 root is within an ulp of the exact one, and a ``p``-bit
    number's root is never within a relative ``2**-(2p + 1)`` of a ``p``-bit midpoint). In
    float64:
    ``torch.sqrt`` moved to the neighbour that Tuckerman's test picks (``y`` is the rounded
    root of ``s`` iff ``y * prev(y) < s <= y * next(y)``, each product's sign read from one
    fused multiply-add; exact for normal ``s``)."""
    if s.dtype != torch.float64 and s.device.type != "mps":  # MPS has no float64
        return s.double().sqrt_().to(s.dtype)
    y = s.sqrt()
    below = torch.nextafter(y, y.new_zeros(()))
    above = torch.nextafter(y, y.new_full((), float("inf")))
    positive = s > 0  # 0 is exact; inf and nan fail both tests
    high = positive & (torch.addcmul(s, y, below, value=-1) <= 0)
    low = positive & (torch.addcmul(s, y, above, value=-1) > 0)
    return torch.where(high, below, torch.where(low, above, y))


def _sum_of_squares(e: torch.Tensor) -> torch.Tensor:
    """Each row's sum of squares as the C kernel adds it: the first ``16k`` elements in 16
    lanes (element ``d`` in lane ``d % 16``), folded in halves, then the rest one by one.
    Half-precision rows (no C kernel) are summed in float32, as torch sums them (``mean``,
    ``sum``), and the float32 sums returned: in 16-bit lanes a wide row's sum would lose
    digits."""
    e = e.float() if e.dtype in (torch.float16, torch.bfloat16) else e
    n, dim = e.shape
    d0 = dim // 16 * 16
    total = e.new_zeros(n)
    if d0:
        acc = e.new_zeros(n, 16)
        for k in range(0, d0, 16):
            x = e[:, k:k + 16]
            acc = torch.addcmul(acc, x, x)
        while acc.shape[1] > 1:
            half = acc.shape[1] // 2
            acc = acc[:, :half] + acc[:, half:]
        total = acc[:, 0]
    for d in range(d0, dim):
        total = torch.addcmul(total, e[:, d], e[:, d])
    return total


def rowwise_adagrad_rows(weight: torch.Tensor, sums: torch.Tensor, rows: torch.Tensor,
                         values: torch.Tensor, p: Sequence[float]) -> None:
    """Row-wise Adagrad: ``g = values + wd * w``; ``s += sum(g * g) * inv_dim``; ``w -= lr /
    (sqrt(s) + eps) * g`` (``sums``: ``(N,)``). A float16/bfloat16 table's update is computed
    in float32 as FBGEMM's CPU update computes it (``sums`` may be float32, FBGEMM's; the
    product rounded, then the difference: no fused multiply-add) and each row rounded to the
    table's dtype once."""
    lr, eps, wd, inv_dim = p[:4]
    wr = weight.index_select(0, rows)
    if wr.dtype in (torch.float16, torch.bfloat16):
        wr, values = wr.float(), values.float()
    e = values.add(wr, alpha=wd) if wd != 0 else values
    s = sums.index_select(0, rows).to(wr.dtype).add_(_sum_of_squares(e), alpha=inv_dim)
    sums.index_copy_(0, rows, s.to(sums.dtype))
    mult = torch.full((), lr, dtype=s.dtype, device=s.device) / _sqrt(s).add_(eps)
    if wr.dtype != weight.dtype:
        weight.index_copy_(0, rows, wr.sub_(e * mult.unsqueeze(1)).to(weight.dtype))
    else:
        weight.index_copy_(0, rows, wr.addcmul_(e, mult.unsqueeze(1), value=-1))


def adam_rows(weight: torch.Tensor, m: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
              values: torch.Tensor, p: Sequence[float]) -> None:
    """Adam: ``x = w * decay``; ``g = values + l2 * x``; ``m = beta1 * m + (1 - beta1) * g``;
    ``v = beta2 * v + (1 - beta2) * g * g``; ``w = x - step_size * m / (sqrt(v) + eps)``
    (``m``, ``v``: ``(N, dim)``)."""
    b1, omb1, b2, omb2, eps, step_size, l2, decay = p[:8]
    x = weight.index_select(0, rows).mul_(decay)
    # an infinite weight adds no decay term (the C kernel's rule; see sgd_rows)
    y = values.add(torch.where(x.isfinite(), x, 0), alpha=l2)
    mm = (y * omb1).add_(m.index_select(0, rows), alpha=b1)
    vv = (y * omb2).mul_(y).add_(v.index_select(0, rows), alpha=b2)
    m.index_copy_(0, rows, mm)
    v.index_copy_(0, rows, vv)
    weight.index_copy_(0, rows, x.sub_((mm * step_size).div_(_sqrt(vv).add_(eps))))


def state_parts(kernel: str, state: torch.Tensor, weight: torch.Tensor,
                scalars: Sequence[float]) -> tuple[torch.Tensor | None, ...]:
    """The state tensors of ``kernel``'s update in the layout its C kernel reads (``state``
    contiguous: SGD's momentum buffer, ``(N, dim)``, or any tensor without momentum, not read;
    Adagrad's sums, ``(N, dim)``; row-wise Adagrad's, ``(N,)``; Adam's moments,
    ``(N, 2 * dim)``, a row's ``m`` then its ``v``) as views of the twin's arguments
    (``scalars``: the kernel's, :data:`._clib.SCALARS`; SGD's momentum the third)."""
    n, dim = weight.shape
    if kernel == "sgd":
        return (state.view(n, dim) if scalars[2] != 0 else None,)
    if kernel == "adagrad":
        return (state.view(n, dim),)
    if kernel == "rowwise_adagrad":
        return (state.view(n),)
    pairs = state.view(n, 2, dim)
    return pairs[:, 0], pairs[:, 1]


#: each kernel's twin: ``(weight, *state_parts, rows, values, scalars)``
ROW_UPDATES: dict[str, Callable[..., None]] = {
    "sgd": sgd_rows,
    "adagrad": adagrad_rows,
    "rowwise_adagrad": rowwise_adagrad_rows,
    "adam": adam_rows,
}


# ---- the operators lookuplinear::rows_update_ and rows_fused_ (registered by library.py) ----

#: a row's state per kernel: that many rows of the table's width, or one value (0)
_STATE_WIDTHS = {"sgd": 1, "adagrad": 1, "rowwise_adagrad": 0, "adam": 2}

#: the dtypes the twins compute in (the C kernels: float32 and float64)
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check_float(op: str, what: str, dtype: torch.dtype) -> None:
    """``InputValueError`` unless ``dtype`` (operand ``what``'s) is a real floating dtype (the
    C++ kernels' check, ``csrc/ops.cpp``)."""
    if dtype not in FLOAT_DTYPES:
        raise InputValueError(
            f"lookuplinear::{op}: {what} must be a real floating dtype (float32, float64, "
            f"float16 or bfloat16); got {dtype}. Convert it first (.float()).")


def check_padding(op: str, what: str, padding_idx: int, num_rows: int,
                  none: int | None = None) -> None:
    """``PaddingIdxError`` unless ``padding_idx`` is a row of a table of ``num_rows`` rows (or
    ``none``, the value that means no padding) (the C++ kernels' check)."""
    if (none is not None and padding_idx == none) or 0 <= padding_idx < num_rows:
        return
    alternative = f", or {none} for none" if none is not None else ", or None"
    raise PaddingIdxError(
        f"lookuplinear::{op}: {what} must be a row of the table, in [0, {num_rows})"
        f"{alternative}; got {padding_idx}. Normalize it first (a negative padding_idx counts "
        "from the end, as nn.Embedding's).")


def check_update(op: str, kernel: str, scalars: Sequence[float], weight: torch.Tensor,
                 state: torch.Tensor) -> None:
    """``InputValueError`` unless ``kernel`` is one, ``scalars`` its number of values and
    ``state`` what it reads for ``weight`` (the C++ kernels' checks, ``csrc/ops.cpp``)."""
    names = SCALARS.get(kernel)
    if names is None:
        raise InputValueError(f"lookuplinear::{op}: kernel must be one of sgd, adagrad, "
                              f"rowwise_adagrad, adam; got '{kernel}'")
    if len(scalars) != len(names):
        raise InputValueError(f"lookuplinear::{op}: the {kernel} kernel reads {len(names)} "
                              f"scalars (ops/_clib.py's SCALARS); got {len(scalars)}")
    if weight.dim() != 2:
        raise InputValueError(f"lookuplinear::{op}: weight must be 2-D (rows, dim); got shape "
                              f"{list(weight.shape)}")
    check_float(op, "weight", weight.dtype)
    if (state.dtype != weight.dtype or state.device != weight.device
            or not state.is_contiguous()):
        raise InputValueError(
            f"lookuplinear::{op}: the state must be contiguous (the kernel's layout), of the "
            f"weight's dtype and device, {weight.dtype} on {weight.device}; got {state.dtype} "
            f"on {state.device}{'' if state.is_contiguous() else ', not contiguous'}")
    n, dim = weight.shape
    if kernel == "sgd" and scalars[2] == 0:  # no momentum: the state is not read
        return
    widths = _STATE_WIDTHS[kernel]
    want = n * (widths * dim if widths else 1)
    if state.numel() != want:
        per_row = f"{widths} x dim a row" if widths else "one a row"
        raise InputValueError(
            f"lookuplinear::{op}: the {kernel} kernel reads {want} state values for a table "
            f"of shape {list(weight.shape)} ({per_row}); got a state of shape "
            f"{list(state.shape)}")


def check_rows(op: str, rows: torch.Tensor, values: torch.Tensor, weight: torch.Tensor) -> None:
    """``InputValueError`` unless ``rows`` are 1-D integers with one gradient row of ``values``
    each (``weight``'s width and dtype); ``LookupIndexError`` naming the first row outside the
    table."""
    n, dim = rows.numel(), weight.shape[1]
    if rows.dim() != 1 or rows.dtype not in (torch.int32, torch.int64):
        raise InputValueError(f"lookuplinear::{op}: rows must be a 1-D int32 or int64 tensor; "
                              f"got {rows.dtype} of shape {list(rows.shape)}")
    if values.dim() != 2 or tuple(values.shape) != (n, dim) or values.dtype != weight.dtype:
        raise InputValueError(
            f"lookuplinear::{op}: values must be one gradient row per row, of the weight's "
            f"width and dtype, ({n}, {dim}) {weight.dtype}; got {values.dtype} of shape "
            f"{list(values.shape)}")
    bad = (rows < 0) | (rows >= weight.shape[0])
    if n and bool(bad.any()):
        k = int(torch.nonzero(bad)[0, 0])
        raise LookupIndexError(
            f"lookuplinear::{op}: row {int(rows[k])} at rows[{k}] is out of range for a table "
            f"of {weight.shape[0]} rows. Give the rows of the table the gradient is for.")


def group_rows_twin(grad_out: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
                    per_sample_weights: torch.Tensor | None, padding_idx: int | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)`` of ``densify(x).T @ grad_out`` (rows sorted, padding left out), each
    row's gradient summed as the C kernels sum it (``sum_entries``): its entries in order, the
    first's (weighted) row, then each next one added (weighted: one fused multiply-add)."""
    idx = indices.reshape(-1).long()
    if offsets is None:
        bag = torch.arange(idx.numel(), device=idx.device)
    else:
        lengths = offsets[1:] - offsets[:-1]
        bag = torch.repeat_interleave(torch.arange(lengths.numel(), device=idx.device),
                                      lengths, output_size=idx.numel())
    keep = torch.arange(idx.numel(), device=idx.device)
    if padding_idx is not None:
        keep = keep[idx[keep] != padding_idx]
    order = keep[torch.argsort(idx[keep], stable=True)]  # entries by row, then entry
    rows, group, counts = torch.unique_consecutive(idx[order], return_inverse=True,
                                                   return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=idx.device) - starts[group]  # place in its row
    src = grad_out.index_select(0, bag[order])
    w = None if per_sample_weights is None else \
        per_sample_weights.reshape(-1).to(grad_out.dtype)[order]
    first = rank == 0
    values = src[first] if w is None else src[first] * w[first].unsqueeze(1)
    for j in range(1, int(counts.max()) if counts.numel() else 0):
        at = rank == j
        g = group[at]
        if w is None:
            values[g] = values[g] + src[at]
        else:
            values[g] = torch.addcmul(values[g], src[at], w[at].unsqueeze(1))
    return rows, values


def rows_update_twin(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor,
                     values: torch.Tensor, kernel: str, scalars: Sequence[float]) -> None:
    """``lookuplinear::rows_update_`` with torch ops, on any device: each row's entries summed
    first (:func:`._rows.grouped_rows`)."""
    op = "rows_update_"
    check_update(op, kernel, scalars, weight, state)
    check_rows(op, rows, values, weight)
    rows, values = grouped_rows(rows, values, weight.shape[0])
    ROW_UPDATES[kernel](weight, *state_parts(kernel, state, weight, scalars), rows.long(),
                        values, list(scalars))


def rows_update_cpu(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor,
                    values: torch.Tensor, kernel: str, scalars: Sequence[float]) -> None:
    """``lookuplinear::rows_update_`` on the CPU: the C kernel where it takes the table, else
    the twin; every operand checked first."""
    op = "rows_update_"
    check_update(op, kernel, scalars, weight, state)
    check_rows(op, rows, values, weight)
    if rows.numel() > 1 and not bool((rows[1:] >= rows[:-1]).all()):
        rows, values = group_rows(values, weight.shape[0], rows)  # each row once, summed
    if not update_rows_c(kernel, weight, state, rows, values, list(scalars)):
        rows_update_twin(weight, state, rows, values, kernel, scalars)


def _fused_tables(weights: Sequence[torch.Tensor], states: Sequence[torch.Tensor],
                  grad_outs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor],
                  offsets: Sequence[torch.Tensor | None],
                  per_sample_weights: Sequence[torch.Tensor | None],
                  padding_idx: Sequence[int], kernel: str, scalars: Sequence[float]
                  ) -> list[tuple[FusedTable, list[float]]]:
    """Every table of a ``rows_fused_`` call checked (before any is updated: a refused call
    changes nothing), each as a :class:`FusedTable` and its scalars."""
    op = "rows_fused_"
    nt = len(weights)
    lengths = [len(states), len(grad_outs), len(indices), len(offsets), len(per_sample_weights),
               len(padding_idx)]
    if any(k != nt for k in lengths):
        raise InputValueError(
            f"lookuplinear::{op}: one state, grad_out, indices, offsets, per_sample_weights and "
            f"padding_idx per table ({nt} tables); got {', '.join(map(str, lengths))}")
    k = len(scalars) // nt if nt else 0
    if nt and len(scalars) % nt:
        raise InputValueError(f"lookuplinear::{op}: each table's scalars one after the other; "
                              f"got {len(scalars)} for {nt} tables")
    tables = []
    for t in range(nt):
        w, g, idx, off, psw = weights[t], grad_outs[t], indices[t], offsets[t], \
            per_sample_weights[t]
        own = list(scalars[t * k:(t + 1) * k])
        check_update(op, kernel, own, w, states[t])
        if g.dim() != 2 or g.shape[1] != w.shape[1] or g.dtype != w.dtype:
            raise InputValueError(
                f"lookuplinear::{op}: grad_outs[{t}] must be 2-D, of table {t}'s width and "
                f"dtype ({w.shape[1]}, {w.dtype}); got {g.dtype} of shape {list(g.shape)}")
        if idx.dtype not in (torch.int32, torch.int64):
            raise InputValueError(f"lookuplinear::{op}: indices[{t}] must be int32 or int64; "
                                  f"got {idx.dtype}")
        nnz = idx.numel()
        if off is not None and (off.dim() != 1 or off.dtype not in (torch.int32, torch.int64)
                                or not _inputs.offsets_ok(off, nnz)):
            raise OffsetsError(
                f"lookuplinear::{op}: offsets must start at 0, never decrease and end at "
                f"the number of entries, {nnz}; got offsets[{t}] of {off.dtype} "
                f"{list(off.shape)}. Build the batch with Bags or KeyedBags (they check "
                "it), or give lengths instead of offsets.")
        n_out = nnz if off is None else off.numel() - 1
        if g.shape[0] != n_out:
            raise InputValueError(
                f"lookuplinear::{op}: grad_outs[{t}] must have one row per "
                f"{'entry' if off is None else 'bag'}, {n_out}; got {g.shape[0]}")
        if psw is not None and psw.numel() != nnz:
            raise InputValueError(
                f"lookuplinear::{op}: per_sample_weights[{t}] must hold one value per entry, "
                f"{nnz}; got {psw.numel()}")
        if psw is not None:
            check_float(op, "per_sample_weights", psw.dtype)
        flat = idx.reshape(-1)
        bad = (flat < 0) | (flat >= w.shape[0])
        if nnz and bool(bad.any()):
            e = int(torch.nonzero(bad)[0, 0])
            raise LookupIndexError(
                f"lookuplinear::{op}: index {int(flat[e])} at indices[{e}] is out of range for "
                f"a table of {w.shape[0]} rows. Map the IDs into [0, {w.shape[0]}) first "
                "(hashing=, or an IdMap for raw IDs), or make the table larger.")
        check_padding(op, "padding_idx", padding_idx[t], w.shape[0], none=-1)
        pad = None if padding_idx[t] == -1 else padding_idx[t]
        tables.append((FusedTable(g, w, states[t], {}, idx, off, psw, pad), own))
    return tables


def _fused_twin(kernel: str, t: FusedTable, scalars: list[float]) -> None:
    rows, values = group_rows_twin(t.grad_out, t.indices, t.offsets, t.per_sample_weights,
                                   t.padding_idx)
    ROW_UPDATES[kernel](t.weight, *state_parts(kernel, t.state, t.weight, scalars), rows,
                        values, scalars)


def rows_fused_twin(weights: Sequence[torch.Tensor], states: Sequence[torch.Tensor],
                    grad_outs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor],
                    offsets: Sequence[torch.Tensor | None],
                    per_sample_weights: Sequence[torch.Tensor | None],
                    padding_idx: Sequence[int], kernel: str, scalars: Sequence[float]) -> None:
    """``lookuplinear::rows_fused_`` with torch ops, on any device: each table's rows grouped
    (:func:`group_rows_twin`), then updated."""
    for t, own in _fused_tables(weights, states, grad_outs, indices, offsets,
                                per_sample_weights, padding_idx, kernel, scalars):
        _fused_twin(kernel, t, own)


def rows_fused_cpu(weights: Sequence[torch.Tensor], states: Sequence[torch.Tensor],
                   grad_outs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor],
                   offsets: Sequence[torch.Tensor | None],
                   per_sample_weights: Sequence[torch.Tensor | None],
                   padding_idx: Sequence[int], kernel: str, scalars: Sequence[float]) -> None:
    """``lookuplinear::rows_fused_`` on the CPU: the C kernel for the tables it takes, the twin
    for the others; every table checked first."""
    tables = _fused_tables(weights, states, grad_outs, indices, offsets, per_sample_weights,
                           padding_idx, kernel, scalars)
    taken = fused_rows_c(kernel, [t for t, _ in tables], [own for _, own in tables])
    for (t, own), done in zip(tables, taken, strict=True):
        if not done:
            _fused_twin(kernel, t, own)
