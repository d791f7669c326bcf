"""The optimizers' row updates as operators (``lookuplinear::rows_update_``, ``rows_fused_``):
the C kernels' bits from the torch-op twins, ``torch.optim``'s result on the dense gradient,
bad operands refused before anything is written, on whichever registration is loaded
(``make test`` runs this file on both)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from forms import C_BY_DEFAULT, needs_c

from lookuplinear import InputValueError, LookupIndexError, OffsetsError, PaddingIdxError
from lookuplinear.ops import library
from lookuplinear.ops._clib import SCALARS
from lookuplinear.ops._updates import _sqrt, group_rows_twin

ops = torch.ops.lookuplinear

#: per kernel, scalars by name (SGD with and without momentum)
SCALAR_CASES: dict[str, list[dict[str, float]]] = {
    "sgd": [dict(lr=0.05, weight_decay=0.0, momentum=0.0, one_minus_dampening=1.0, nesterov=0),
            dict(lr=0.05, weight_decay=0.01, momentum=0.5, one_minus_dampening=1.0,
                 nesterov=1),
            dict(lr=0.05, weight_decay=0.01, momentum=0.9, one_minus_dampening=0.8,
                 nesterov=0)],
    "adagrad": [dict(clr=0.05, eps=1e-10, weight_decay=0.01),
                dict(clr=0.05, eps=1e-10, weight_decay=0.0)],
    "rowwise_adagrad": [dict(lr=0.05, eps=1e-8, weight_decay=0.01),
                        dict(lr=0.05, eps=1e-8, weight_decay=0.0)],
    "adam": [dict(beta1=0.9, one_minus_beta1=0.1, beta2=0.999, one_minus_beta2=1 - 0.999,
                  eps=1e-8, step_size=0.03, l2=0.01, decay=1.0),
             dict(beta1=0.9, one_minus_beta1=0.1, beta2=0.999, one_minus_beta2=1 - 0.999,
                  eps=1e-8, step_size=0.03, l2=0.0, decay=0.999)],
}
WIDTHS = [1, 6, 16, 24, 64, 600]
DTYPES = [torch.float32, torch.float64]


def scalars(kernel: str, named: dict[str, float], dim: int) -> list[float]:
    named = {**named, "inv_dim": 1 / dim} if kernel == "rowwise_adagrad" else named
    return [float(named[k]) for k in SCALARS[kernel]]


def table(kernel: str, p: list[float], dim: int, dtype: torch.dtype, rows: int = 40,
          seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A table and its optimizer state in the kernel's layout (state values positive)."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, dim, dtype=dtype, generator=g)
    shape = {"sgd": (rows, dim), "adagrad": (rows, dim), "rowwise_adagrad": (rows,),
             "adam": (rows, 2 * dim)}[kernel]
    if kernel == "sgd" and p[2] == 0:
        shape = (0,)
    return weight, torch.rand(shape, dtype=dtype, generator=g)


def cases() -> list[tuple[str, dict[str, float], int, torch.dtype]]:
    return [(k, s, d, t) for k, ss in SCALAR_CASES.items() for s in ss
            for d, t in itertools.product(WIDTHS, DTYPES)]


def _ids(c: tuple[Any, ...]) -> str:
    return f"{c[0]}-{c[2]}-{str(c[3])[6:]}-{sorted(c[1].items())[0][1]}"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@needs_c
@pytest.mark.parametrize(("kernel", "named", "dim", "dtype"), cases(), ids=map(_ids, cases()))
def test_rows_update_equals_its_twin_to_the_bit(kernel: str, named: dict[str, float], dim: int,
                                                 dtype: torch.dtype) -> None:
    """Three steps of the operator (its C kernel) and of its torch-op twin: the same weights
    and state, to the bit."""
    p = scalars(kernel, named, dim)
    w, s = table(kernel, p, dim, dtype)
    w2, s2 = w.clone(), s.clone()
    g = torch.Generator().manual_seed(dim)
    for _ in range(3):
        rows = torch.unique(torch.randint(0, 40, (25,), generator=g))
        values = torch.randn(rows.numel(), dim, dtype=dtype, generator=g)
        ops.rows_update_(w, s, rows, values, kernel, p)
        library.ROW_TWINS["rows_update_"](w2, s2, rows, values, kernel, p)
    assert _same(w, w2) and _same(s, s2)


def summed(rows: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row once, its values summed in entry order onto ``-0.0`` (a coalesce's sum,
    written independently of the library's)."""
    order = torch.sort(rows, stable=True).indices
    rows, values = rows[order], values[order]
    heads, run = torch.unique_consecutive(rows, return_inverse=True)
    sums = torch.full((heads.numel(), values.shape[1]), -0.0, dtype=values.dtype)
    return heads, sums.index_add_(0, run, values)


def runs_of_rows(dim: int, dtype: torch.dtype, seed: int, order: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """A lookup gradient's layout (``order="sorted"``: one row per entry, rows never
    decreasing, each row's sum at its first entry and ``-0.0`` at its others, some sums
    ``+0.0`` and ``-0.0``), runs of random values (``"values"``), runs of rows in no order
    (``"unsorted"``), or a row's entries apart (``"apart"``)."""
    g = torch.Generator().manual_seed(seed)
    heads = torch.randperm(40, generator=g)[:18]
    if order != "unsorted":
        heads = heads.sort().values
    counts = torch.randint(1, 5, (heads.numel(),), generator=g)
    rows = torch.repeat_interleave(heads, counts)
    values = torch.randn(rows.numel(), dim, dtype=dtype, generator=g)
    if order == "sorted":
        first = torch.ones(rows.numel(), dtype=torch.bool)
        first[1:] = rows[1:] != rows[:-1]
        values[~first] = -0.0
        values[0] = 0.0
        values[int(torch.nonzero(first)[1, 0])] = -0.0
    else:
        values[::7] = -0.0
        values[3::7] = 0.0
    if order == "apart":
        order_ = torch.randperm(rows.numel(), generator=g)
        rows, values = rows[order_], values[order_]
    return rows, values


@pytest.mark.parametrize("order", ["sorted", "values", "unsorted", "apart"])
@pytest.mark.parametrize(("kernel", "named", "dim", "dtype"), cases(), ids=map(_ids, cases()))
def test_rows_update_sums_each_run_of_rows_to_the_bit(
        kernel: str, named: dict[str, float], dim: int, dtype: torch.dtype, order: str) -> None:
    """Rows whose entries come in runs (a lookup's gradient: one row per entry) or apart: each
    row's entries summed in entry order, then the row updated once, to the bits of the update
    of the summed rows; the twin the same."""
    p = scalars(kernel, named, dim)
    w, s = table(kernel, p, dim, dtype)
    by_runs, twin = (w.clone(), s.clone()), (w.clone(), s.clone())
    for step in range(3):
        rows, values = runs_of_rows(dim, dtype, 10 * dim + step, order)
        ops.rows_update_(*by_runs, rows, values, kernel, p)
        library.ROW_TWINS["rows_update_"](*twin, rows, values, kernel, p)
        ops.rows_update_(w, s, *summed(rows, values), kernel, p)
    for a, b in (by_runs, twin):
        assert _same(a, w) and _same(b, s)


def test_rows_update_takes_no_rows_and_one_row() -> None:
    """No rows: nothing changes; one row: its update."""
    p = scalars("adam", SCALAR_CASES["adam"][0], 4)
    w, s = table("adam", p, 4, torch.float32)
    before = w.clone(), s.clone()
    ops.rows_update_(w, s, torch.empty(0, dtype=torch.long), torch.empty(0, 4), "adam", p)
    assert _same(w, before[0]) and _same(s, before[1])
    ops.rows_update_(w, s, torch.tensor([7]), torch.ones(1, 4), "adam", p)
    changed = (w != before[0]).any(1)
    assert changed.nonzero().reshape(-1).tolist() == [7]


def lookups(dtype: torch.dtype, dim: int, seed: int, rows: int = 40, n: int = 60
            ) -> list[tuple[Any, ...]]:
    """(grad_out, indices, offsets, per_sample_weights, padding_idx): bags with duplicates,
    an empty bag, padding, weights; index input (no offsets). ``n`` entries into ``rows``
    rows, in six bags."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, rows, (n,), generator=g)
    idx[:5] = 3  # a row of many entries
    idx[n // 2:n // 2 + n // 4] = torch.randint(0, 8, (n // 4,), generator=g)  # and a few more
    off = torch.tensor([0, 5, 5, n // 4, n // 2, 3 * n // 4, n])
    psw = torch.rand(n, dtype=dtype, generator=g) + 0.5
    return [
        (torch.randn(6, dim, dtype=dtype, generator=g), idx, off, None, -1),
        (torch.randn(6, dim, dtype=dtype, generator=g), idx.int(), off.int(), psw, int(idx[7])),
        (torch.randn(n, dim, dtype=dtype, generator=g), idx, None, None, 3),
        (torch.randn(n, dim, dtype=dtype, generator=g), idx, None, psw, -1),
    ]


def fused_equals_twin_and_unfused(kernel: str, named: dict[str, float], dim: int,
                                  dtype: torch.dtype, rows: int = 40, n: int = 60) -> None:
    p = scalars(kernel, named, dim)
    looks = lookups(dtype, dim, dim, rows, n)
    tables = [table(kernel, p, dim, dtype, rows, seed=t) for t in range(len(looks))]
    fused = [(w.clone(), s.clone()) for w, s in tables]
    twin = [(w.clone(), s.clone()) for w, s in tables]
    start = [w.clone() for w, _ in tables]
    args = ([g for g, *_ in looks], [i for _, i, *_ in looks], [o for _, _, o, *_ in looks],
            [w for *_, w, _ in looks], [pad for *_, pad in looks], kernel, p * len(looks))
    ops.rows_fused_([w for w, _ in fused], [s for _, s in fused], *args)
    library.ROW_TWINS["rows_fused_"]([w for w, _ in twin], [s for _, s in twin], *args)
    for (w, s), (w2, s2), (w3, s3), (g, idx, off, psw, pad), w0 in zip(
            fused, twin, tables, looks, start, strict=True):
        assert _same(w, w2) and _same(s, s2)
        rows_, values = group_rows_twin(g, idx, off, psw, None if pad < 0 else pad)
        ops.rows_update_(w3, s3, rows_, values, kernel, p)
        assert _same(w, w3) and _same(s, s3)
        assert not torch.equal(w, w0)  # it did train


@needs_c
@pytest.mark.parametrize(("kernel", "named", "dim", "dtype"), cases(), ids=map(_ids, cases()))
def test_rows_fused_equals_its_twin_and_the_unfused_update_to_the_bit(
        kernel: str, named: dict[str, float], dim: int, dtype: torch.dtype) -> None:
    """Four tables in one ``rows_fused_`` call (sum and weighted bags, index input, padding):
    the twin's bits, and those of ``group_rows`` then ``rows_update_`` table by table."""
    fused_equals_twin_and_unfused(kernel, named, dim, dtype)


@needs_c
@pytest.mark.parametrize("kernel", list(SCALAR_CASES))
@pytest.mark.parametrize(("rows", "n", "threads"), [(200_000, 60, 1), (200_000, 9000, 2),
                                                     (3000, 9000, 2), (3000, 9000, 1),
                                                     (200_000, 9000, 5), (3000, 9000, 3)])
def test_rows_fused_on_large_tables_and_batches_to_the_bit(kernel: str, rows: int, n: int,
                                                            threads: int) -> None:
    """The fused update's rows looked up by hash (a table of many rows beside the entries) or
    by row, on one thread or split over several (a batch of thousands of entries; more threads
    than cores too): the twin's bits and the unfused update's."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fused_equals_twin_and_unfused(kernel, SCALAR_CASES[kernel][0], 16, torch.float32, rows,
                                      n)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.bfloat16, torch.float16])
def test_twins_square_root_is_correctly_rounded(dtype: torch.dtype) -> None:
    """The twins' square root is C's ``sqrt``, correctly rounded, where ``torch.sqrt`` may be an
    ulp off: numpy's float64 root (the CPU's instruction), rounded to the dtype."""
    g = torch.Generator().manual_seed(0)
    s = torch.cat([torch.rand(100_000, dtype=torch.float64, generator=g) * 10,
                   torch.randn(1_000, dtype=torch.float64, generator=g).exp() ** 20,
                   torch.tensor([0.0, 1.0, 4.0, 2.0, float("inf")], dtype=torch.float64)])
    s = s.to(dtype)
    want = torch.from_numpy(np.sqrt(s.double().numpy())).to(dtype)
    assert _same(_sqrt(s), want)
    assert _sqrt(torch.tensor([float("nan"), -1.0], dtype=dtype)).isnan().all()


@needs_c
@pytest.mark.parametrize("dtype", DTYPES)
def test_group_rows_twin_sums_as_the_c_kernel(dtype: torch.dtype) -> None:
    """The twin's grouping gives the C kernel's sums (weighted: one fused multiply-add an
    entry) to the bit."""
    from lookuplinear.ops import group_rows, use_backend

    for g, idx, off, psw, pad in lookups(dtype, 24, 1):
        with use_backend("c"):
            want = group_rows(g, 40, idx, off, psw, None if pad < 0 else pad)
        got = group_rows_twin(g, idx, off, psw, None if pad < 0 else pad)
        assert torch.equal(got[0], want[0]) and _same(got[1], want[1])


@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_rows_update_equals_torch_optim_on_the_dense_gradient(name: str) -> None:
    """Without momentum or weight decay, SGD's and Adagrad's row updates are ``torch.optim``'s
    dense step restricted to the gradient's rows (the others have a zero gradient, which moves
    neither): the same weights and sums, to the bit where ``torch.optim``'s dense update runs
    the same fused operations (SGD) and to rounding otherwise (Adagrad: ``torch.optim``
    divides by ``sqrt(s) + eps`` first)."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(30, 16, generator=g)
    rows = torch.tensor([1, 4, 5, 17, 29])
    values = torch.randn(5, 16, generator=g)
    dense = torch.zeros(30, 16).index_copy_(0, rows, values)
    ref = torch.nn.Parameter(weight.clone())
    opt: torch.optim.Optimizer
    if name == "SGD":
        opt = torch.optim.SGD([ref], lr=0.1)
        state = torch.empty(0)
        kernel, p = "sgd", [0.1, 0.0, 0.0, 1.0, 0.0]
    else:
        opt = torch.optim.Adagrad([ref], lr=0.1)
        state = torch.zeros(30, 16)
        kernel, p = "adagrad", [0.1, 1e-10, 0.0]
    ref.grad = dense
    opt.step()
    ops.rows_update_(weight, state, rows, values, kernel, p)
    if name == "SGD":
        assert _same(weight, ref.detach())
    else:
        torch.testing.assert_close(weight, ref.detach(), rtol=1e-6, atol=1e-7)
        assert _same(state, opt.state[ref]["sum"])


def _bad_update_cases() -> list[tuple[str, dict[str, Any], type[Exception], str]]:
    return [
        ("unknown kernel", {"kernel": "lamb"}, InputValueError, "kernel must be one of"),
        ("scalars", {"scalars": [0.1, 0.0]}, InputValueError, "reads 4 scalars"),
        ("state size", {"state": torch.zeros(9)}, InputValueError, "reads 10 state values"),
        ("state dtype", {"state": torch.zeros(10, dtype=torch.float64)}, InputValueError,
         "state must be contiguous"),
        ("state layout", {"state": torch.zeros(20)[::2]}, InputValueError, "not contiguous"),
        ("row past", {"rows": torch.tensor([1, 10])}, LookupIndexError, r"row 10 at rows\[1\]"),
        ("row below", {"rows": torch.tensor([-1, 2])}, LookupIndexError, r"row -1 at rows\[0\]"),
        ("rows float", {"rows": torch.tensor([1.0, 2.0])}, InputValueError, "rows must be"),
        ("values shape", {"values": torch.ones(2, 3)}, InputValueError, "values must be"),
        ("values dtype", {"values": torch.ones(2, 4, dtype=torch.float64)}, InputValueError,
         "values must be"),
        ("weight 1-D", {"weight": torch.zeros(10)}, InputValueError, "weight must be 2-D"),
        *[(f"{dtype} table", {"weight": torch.zeros(10, 4, dtype=dtype),
                              "state": torch.zeros(10, dtype=dtype),
                              "values": torch.ones(2, 4, dtype=dtype)},
           InputValueError, "weight must be a real floating dtype")
          for dtype in (torch.int64, torch.int32, torch.bool, torch.complex64)],
    ]


@pytest.mark.parametrize(("what", "change", "error", "match"), _bad_update_cases(),
                         ids=[c[0] for c in _bad_update_cases()])
def test_rows_update_refuses_bad_operands_and_writes_nothing(
        what: str, change: dict[str, Any], error: type[Exception], match: str) -> None:
    """Each operand the C kernel reads is checked first: the project's error naming it (the C++
    kernel's builtin error mapped by ``update_rows``; ``ValueError`` or ``IndexError`` from the
    operator itself), and neither the table nor its state changes."""
    args: dict[str, Any] = {"weight": torch.zeros(10, 4), "state": torch.zeros(10),
                            "rows": torch.tensor([1, 2]), "values": torch.ones(2, 4),
                            "kernel": "rowwise_adagrad", "scalars": [0.1, 1e-8, 0.0, 0.25]}
    args.update(change)
    before = args["weight"].clone(), args["state"].clone()
    builtin = IndexError if issubclass(error, IndexError) else ValueError
    with pytest.raises(builtin, match=match) as e:
        ops.rows_update_(*args.values())
    mapped = library.project_error(e.value) or e.value
    assert isinstance(mapped, error)
    assert torch.equal(args["weight"], before[0]) and torch.equal(args["state"], before[1])


def test_update_rows_raises_the_projects_errors() -> None:
    """``lookuplinear.ops.update_rows`` and ``fused_rows`` (what the optimizers call) raise the
    project's errors for what the operators refuse."""
    from lookuplinear.ops import FusedTable, fused_rows, update_rows

    w, s = torch.zeros(10, 4), torch.zeros(10)
    named = {"lr": 0.1, "eps": 1e-8, "weight_decay": 0.0, "inv_dim": 0.25}
    if not C_BY_DEFAULT:
        pytest.skip("the optimizers run torch ops here (no C kernels, or "
                    "LOOKUPLINEAR_BACKEND=torch)")
    with pytest.raises(LookupIndexError, match="row 12"):
        update_rows("rowwise_adagrad", w, s, torch.tensor([12]), torch.ones(1, 4), named)
    good = FusedTable(torch.ones(2, 4), w, s, named, torch.tensor([1, 2, 3]),
                      torch.tensor([0, 1, 3]))
    bad = good._replace(weight=torch.zeros(10, 4), state=torch.zeros(10),
                        offsets=torch.tensor([0, 2, 1]))
    with pytest.raises(OffsetsError, match="offsets must"):
        fused_rows("rowwise_adagrad", [good, bad])
    assert not w.any() and not s.any()  # the good table was not updated either
    out_of_range = good._replace(indices=torch.tensor([1, 2, 40]))
    with pytest.raises(LookupIndexError, match="index 40"):
        fused_rows("rowwise_adagrad", [out_of_range])


def test_rows_fused_refuses_mismatched_lists() -> None:
    with pytest.raises(ValueError, match="one state, grad_out"):
        ops.rows_fused_([torch.zeros(3, 2)], [], [torch.zeros(1, 2)], [torch.tensor([0])],
                        [None], [None], [-1], "sgd", [0.1, 0.0, 0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="one row per bag"):
        ops.rows_fused_([torch.zeros(3, 2)], [torch.empty(0)], [torch.zeros(2, 2)],
                        [torch.tensor([0])], [torch.tensor([0, 1])], [None], [-1], "sgd",
                        [0.1, 0.0, 0.0, 1.0, 0.0])


def _fused_args(**change: Any) -> dict[str, Any]:
    """A ``rows_fused_`` call on one table of 10 rows (two bags), with ``change``."""
    args: dict[str, Any] = {"weights": [torch.zeros(10, 4)], "states": [torch.zeros(10)],
                            "grad_outs": [torch.ones(2, 4)], "indices": [torch.tensor([1, 3, 9])],
                            "offsets": [torch.tensor([0, 1, 3])], "per_sample_weights": [None],
                            "padding_idx": [-1], "kernel": "rowwise_adagrad",
                            "scalars": [0.1, 1e-8, 0.0, 0.25]}
    args.update(change)
    return args


def _bad_fused_cases() -> list[tuple[str, dict[str, Any], type[Exception], str]]:
    return [
        *[(f"padding_idx {pad}", {"padding_idx": [pad]}, PaddingIdxError,
           rf"padding_idx must be a row of the table, in \[0, 10\), or -1 for none; got {pad}")
          for pad in (10, 12, -2, -10)],
        *[(f"{dtype} table", {"weights": [torch.zeros(10, 4, dtype=dtype)],
                              "states": [torch.zeros(10, dtype=dtype)],
                              "grad_outs": [torch.ones(2, 4, dtype=dtype)]},
           InputValueError, "weight must be a real floating dtype")
          for dtype in (torch.int64, torch.bool, torch.complex64)],
        ("complex per_sample_weights",
         {"per_sample_weights": [torch.ones(3, dtype=torch.complex64)]}, InputValueError,
         "per_sample_weights must be a real floating dtype"),
    ]


@pytest.mark.parametrize(("what", "change", "error", "match"), _bad_fused_cases(),
                         ids=[c[0] for c in _bad_fused_cases()])
def test_rows_fused_refuses_bad_operands_and_writes_nothing(
        what: str, change: dict[str, Any], error: type[Exception], match: str) -> None:
    """A ``padding_idx`` no entry can equal (past the table, or negative but -1) and a table
    the kernels cannot compute in are refused before any table is updated: the builtin error
    that the project's maps to (a second, good table left as it was)."""
    good = _fused_args()
    args = _fused_args(**change)
    for key in ("weights", "states", "grad_outs", "indices", "offsets", "per_sample_weights",
                "padding_idx"):
        args[key] = [good[key][0], *args[key]]
    args["scalars"] = good["scalars"] * 2
    before = [w.clone() for w in args["weights"]]
    builtin = IndexError if issubclass(error, IndexError) else ValueError
    with pytest.raises(builtin, match=match) as e:
        ops.rows_fused_(*args.values())
    mapped = library.project_error(e.value) or e.value
    assert isinstance(mapped, error)
    assert all(torch.equal(w, b) for w, b in zip(args["weights"], before, strict=True))


def test_rows_fused_takes_the_last_row_as_padding() -> None:
    """``padding_idx`` 9, the last row of 10: its entries are left out (the bounds refused
    above are the table's)."""
    args = _fused_args(padding_idx=[9], kernel="sgd", scalars=[1.0, 0.0, 0.0, 1.0, 0.0],
                       states=[torch.empty(0)])
    ops.rows_fused_(*args.values())
    w = args["weights"][0]
    assert torch.equal(w[1], -torch.ones(4)) and torch.equal(w[3], -torch.ones(4))
    assert not w[9].any()


@pytest.mark.parametrize("name", ["rows_update_", "rows_fused_"])
def test_row_operators_opcheck(name: str) -> None:
    """``opcheck``: the schema (what each writes declared), no autograd, the fake."""
    w, s = torch.randn(10, 4), torch.zeros(10)
    p = [0.1, 1e-8, 0.0, 0.25]
    args: tuple[Any, ...]
    if name == "rows_update_":
        args = (w, s, torch.tensor([1, 3]), torch.randn(2, 4), "rowwise_adagrad", p)
    else:
        args = ([w], [s], [torch.randn(2, 4)], [torch.tensor([1, 3, 3])],
                [torch.tensor([0, 1, 3])], [None], [-1], "rowwise_adagrad", p)
    torch.library.opcheck(getattr(ops, name).default, args,
                          test_utils=["test_schema", "test_autograd_registration",
                                      "test_faketensor"])


@pytest.mark.parametrize("name", ["rows_update_", "rows_fused_"])
def test_row_operators_twins_run_on_other_devices(name: str) -> None:
    """Each row operator has a kernel for CUDA tensors (its twin: redispatched on CPU tensors
    here), which gives the CPU kernel's weights."""
    op = getattr(ops, name).default
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(op.name(), "CUDA")
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    results = []
    for run in (lambda *a: op.redispatch(keys, *a), op):
        w, s = torch.randn(10, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(10)
        p = [0.1, 1e-8, 0.0, 0.25]
        if name == "rows_update_":
            run(w, s, torch.tensor([1, 3]), torch.ones(2, 4), "rowwise_adagrad", p)
        else:
            run([w], [s], [torch.ones(2, 4)], [torch.tensor([1, 3, 3])],
                [torch.tensor([0, 1, 3])], [None], [-1], "rowwise_adagrad", p)
        results.append((w, s))
    assert _same(*[r[0] for r in results]) and _same(*[r[1] for r in results])
