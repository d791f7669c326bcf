"""lookuplinear.optim over several steps against torch.optim and the documented formulas.

Every run trains a small model (a ``LookupLinear(sparse=True)`` table, a ReLU, a dense head) on
batches with duplicates, padding entries and empty bags, and compares all its weights with the
reference after each step.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from forms import BACKENDS, C_BY_DEFAULT, DEVICES
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from unchanged import assert_unchanged, snapshot

from lookuplinear import (
    Bags,
    FusedAccumulationWarning,
    KeyedBags,
    LookupCollection,
    LookupLinear,
    TableConfig,
    optim,
)
from lookuplinear.errors import InputValueError, LookupIndexError
from lookuplinear.ops import c_available, group_rows, summed_runs, unique_sums, use_backend

V, D, C, PAD = 40, 6, 3, 0
STEPS = 6
OPTIMIZERS = ["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"]


def batches(seed: int = 0, steps: int = STEPS) -> list[tuple[Bags, torch.Tensor]]:
    """Bags with duplicates, the padding index and an empty bag; a class label per bag."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        lists = [torch.randint(0, 12, (int(n),), generator=g).tolist()
                 for n in torch.randint(0, 6, (8,), generator=g)]
        lists[0] = [3, 3, PAD, 5]  # a duplicate and the padding index
        lists[1] = []  # an empty bag
        out.append((Bags.from_lists(lists), torch.randint(0, C, (8,), generator=g)))
    return out


class Model(nn.Module):
    """Table -> ReLU -> dense head: sparse and dense parameters in one optimizer."""

    def __init__(self, table: nn.Module) -> None:
        super().__init__()
        self.table = table
        self.head = nn.Linear(D, C)

    def forward(self, bags: Bags) -> torch.Tensor:
        if isinstance(self.table, LookupLinear):
            h = self.table(bags)
        elif isinstance(self.table, nn.EmbeddingBag):
            h = self.table(bags.indices, bags.offsets)
        else:  # nn.Linear on the densified input
            dense = bags.to_dense(V)
            dense[:, PAD] = 0
            h = self.table(dense)
        return self.head(F.relu(h))


def lookup_model(dtype: torch.dtype = torch.float32, device: str = "cpu") -> Model:
    torch.manual_seed(0)
    m = Model(LookupLinear(V, D, bias=False, padding_idx=PAD, sparse=True))
    return m.to(device=device, dtype=dtype)


def bag_model(dtype: torch.dtype = torch.float32) -> Model:
    """The same weights as nn.EmbeddingBag(sparse=True) + head."""
    ours = lookup_model(dtype)
    bag = nn.EmbeddingBag(V, D, mode="sum", sparse=True, padding_idx=PAD,
                          include_last_offset=True, dtype=dtype)
    m = Model(bag).to(dtype)
    with torch.no_grad():
        bag.weight.copy_(ours.table.weight)
        m.head.load_state_dict(ours.head.state_dict())
    return m


def train(model: Model, opts: list[Any], data: list[tuple[Bags, torch.Tensor]],
          check: Callable[[int], None] | None = None) -> list[float]:
    losses = []
    for step, (bags, y) in enumerate(data):
        for o in opts:
            o.zero_grad()
        loss = F.cross_entropy(model(bags), y)
        loss.backward()
        for o in opts:
            o.step()
        losses.append(loss.item())
        if check is not None:
            check(step)
    return losses


def table(m: Model) -> torch.Tensor:
    return m.table.weight.detach()


def assert_same_model(a: Model, b: Model, **tol: float) -> None:
    torch.testing.assert_close(table(a), table(b), **tol)
    torch.testing.assert_close(a.head.weight, b.head.weight, **tol)
    torch.testing.assert_close(a.head.bias, b.head.bias, **tol)


# ---------------------------------------------------------------- against torch.optim


def test_sgd_equals_torch_sgd_on_the_dense_gradient() -> None:
    """Plain SGD: the same weights as nn.Linear on the densified input + torch.optim.SGD."""
    ours = lookup_model()
    dense = Model(nn.Linear(V, D, bias=False))
    with torch.no_grad():
        dense.table.weight.copy_(table(ours).T)
        dense.head.load_state_dict(ours.head.state_dict())
    a = optim.SGD(ours.parameters(), lr=0.5)
    b = torch.optim.SGD(dense.parameters(), lr=0.5)
    data = batches()

    def check(step: int) -> None:
        torch.testing.assert_close(table(ours), dense.table.weight.detach().T)

    train(ours, [a], data)
    train(dense, [b], data)
    check(0)
    torch.testing.assert_close(ours.head.weight, dense.head.weight)
    assert not torch.equal(table(ours), table(lookup_model()))  # it did train


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        ("SGD", lambda m: [torch.optim.SGD(m.parameters(), lr=0.3)]),
        ("Adagrad", lambda m: [torch.optim.Adagrad(m.parameters(), lr=0.3, lr_decay=0.01)]),
        ("Adam", lambda m: [torch.optim.SparseAdam([m.table.weight], lr=0.05),
                            torch.optim.Adam(m.head.parameters(), lr=0.05)]),
    ],
)
def test_sparse_update_equals_torch_optim(name: str, ref: Callable[[Model], list[Any]]) -> None:
    """SGD and Adagrad as torch.optim's sparse updates; Adam as SparseAdam on the table and
    torch.optim.Adam on the dense head, in one optimizer."""
    kw: dict[str, Any] = {"SGD": {"lr": 0.3}, "Adagrad": {"lr": 0.3, "lr_decay": 0.01},
                          "Adam": {"lr": 0.05}}[name]
    ours, theirs = lookup_model(), bag_model()
    data = batches()
    train(ours, [getattr(optim, name)(ours.parameters(), **kw)], data)
    train(theirs, ref(theirs), data)
    assert_same_model(ours, theirs, rtol=1e-5, atol=1e-6)
    assert not table(ours)[PAD].any()  # the padding row never moves


@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_parameters_follow_torch_adamw_and_momentum_sgd(backend: str) -> None:
    """Dense gradients get torch.optim's own update (AdamW, SGD with momentum and nesterov),
    whether the C row kernel runs on every row or the torch ops."""
    with use_backend(backend):
        _dense_parameters_follow_torch()


def _dense_parameters_follow_torch() -> None:
    for ours_cls, theirs_cls, kw in (
        (optim.AdamW, torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.1}),
        (optim.SGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                      "weight_decay": 0.01}),
        (optim.Adam, torch.optim.Adam, {"lr": 0.05, "weight_decay": 0.1}),
        (optim.Adagrad, torch.optim.Adagrad, {"lr": 0.1, "weight_decay": 0.1}),
    ):
        torch.manual_seed(1)
        a, b = nn.Linear(5, 3), nn.Linear(5, 3)
        b.load_state_dict(a.state_dict())
        oa, ob = ours_cls(a.parameters(), **kw), theirs_cls(b.parameters(), **kw)
        for step in range(5):
            x = torch.randn(4, 5, generator=torch.Generator().manual_seed(step))
            for m, o in ((a, oa), (b, ob)):
                o.zero_grad()
                m(x).pow(2).sum().backward()
                o.step()
        torch.testing.assert_close(a.weight, b.weight, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(a.bias, b.bias, rtol=1e-6, atol=1e-7)


DENSE_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "weight_decay": 0.1, "lr_decay": 0.01,
                 "initial_accumulator_value": 0.1}),
    ("Adam", {"lr": 0.05}),
    ("Adam", {"lr": 0.05, "betas": (0.8, 0.99), "weight_decay": 0.1, "eps": 1e-6}),
    ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
]


class ManyDense(nn.Module):
    """Dense parameters of several sizes: 2-D, 1-D, 3-D, one over
    ``optim._base.CPU_LARGE_BYTES`` (the single-tensor update), small ones in more than one
    multi-tensor run."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.a = nn.Linear(7, 33).to(dtype)
        self.b = nn.Linear(33, 5).to(dtype)
        self.big = nn.Parameter(torch.randn(5, 400, 70, dtype=dtype) / 20)  # 140,000 elements
        self.c = nn.Linear(5, 5, bias=False).to(dtype)
        self.mids = nn.ParameterList([torch.randn(60, 300, dtype=dtype) for _ in range(8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.b(torch.relu(self.a(x)))
        mids = sum(m.sin().mean() for m in self.mids)
        return self.c(h) + torch.einsum("bi,ijk->bk", h, self.big)[:, :5] / 400 + mids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("name", "kw"), DENSE_VARIANTS)
def test_dense_steps_equal_torch_optims_default_to_the_bit(
    name: str, kw: dict[str, Any], dtype: torch.dtype
) -> None:
    """Dense parameters stepped together (torch.optim's multi-tensor update in runs on the
    CPU, its single-tensor update for the large ones) end each step where torch.optim's
    default update puts them, bit for bit, and with the same state."""
    from lookuplinear.optim._base import CPU_LARGE_BYTES, CPU_RUN_BYTES
    m = ManyDense(dtype)
    assert m.big.numel() * m.big.element_size() >= CPU_LARGE_BYTES
    assert sum(p.numel() * p.element_size() for p in m.mids) > CPU_RUN_BYTES
    ours, theirs = ManyDense(dtype), ManyDense(dtype)
    oa, ob = getattr(optim, name)(ours.parameters(), **kw), \
        getattr(torch.optim, name)(theirs.parameters(), **kw)
    for step in range(5):
        x = torch.randn(9, 7, dtype=dtype, generator=torch.Generator().manual_seed(step))
        for m, o in ((ours, oa), (theirs, ob)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
        for pa, pb in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert pa.isfinite().all() and torch.equal(pa, pb), step
            sa, sb = oa.state[pa], ob.state[pb]
            assert sa["step"] == step + 1
            for key, value in sa.items():
                if key != "step":
                    assert torch.equal(value, sb[key]), key
    assert not torch.equal(ours.a.weight, ManyDense(dtype).a.weight)  # it did train


def test_sparse_and_dense_in_the_same_groups_equal_torch_optim() -> None:
    """A group holding the sparse table and dense parameters, another dense only, each with its
    own rate: the dense parameters as torch.optim's default (to the bit after the first step,
    when the table's sparse update, equal to float rounding, has not changed the gradients
    yet), the table as torch.optim's sparse update."""
    for name in ("SGD", "Adagrad", "Adam"):
        ours, theirs = lookup_model(), bag_model()
        extra = [nn.Parameter(torch.ones(C)) for _ in range(2)]

        def groups(m: Model, extra: list[nn.Parameter]) -> list[dict[str, Any]]:
            return [{"params": [m.table.weight, m.head.weight], "lr": 0.2},
                    {"params": [m.head.bias, *extra], "lr": 0.05}]

        theirs_extra = [nn.Parameter(p.detach().clone()) for p in extra]
        oa = getattr(optim, name)(groups(ours, extra))
        if name == "Adam":  # torch.optim.Adam refuses sparse gradients: SparseAdam the table
            dense = [{"params": [theirs.head.weight], "lr": 0.2},
                     *groups(theirs, theirs_extra)[1:]]
            refs: list[Any] = [torch.optim.SparseAdam([theirs.table.weight], lr=0.2),
                               torch.optim.Adam(dense)]
        else:
            refs = [getattr(torch.optim, name)(groups(theirs, theirs_extra))]
        for step, (bags, y) in enumerate(batches()):
            for model, opts, ex in ((ours, [oa], extra), (theirs, refs, theirs_extra)):
                for o in opts:
                    o.zero_grad()
                out = model(bags) * ex[0] + ex[1]
                F.cross_entropy(out, y).backward()
                for o in opts:
                    o.step()
            pairs = [(ours.head.weight, theirs.head.weight), (ours.head.bias, theirs.head.bias),
                     *zip(extra, theirs_extra, strict=True)]
            for pa, pb in pairs:
                assert torch.equal(pa, pb) or step > 0, name
                torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(table(ours), table(theirs), rtol=1e-5, atol=1e-6)
        assert oa.state[ours.table.weight]["step"] == oa.state[extra[0]]["step"] == STEPS


def test_sgd_keeps_its_momentum_buffer_and_starts_it_at_the_gradient() -> None:
    """The buffer SGD allocated is the one the dense update writes (torch.optim.SGD's first
    step starts it at the gradient, undamped); a momentum set on the group after a step
    without one starts a buffer then."""
    p = nn.Parameter(torch.ones(4))
    opt = optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.5)
    buf = opt.state[p]["momentum_buffer"] if p in opt.state else None
    p.grad = torch.full((4,), 2.0)
    opt.step()
    buf = opt.state[p]["momentum_buffer"]
    assert torch.equal(buf, torch.full((4,), 2.0)) and torch.equal(p, torch.full((4,), 0.8))
    opt.step()
    assert opt.state[p]["momentum_buffer"] is buf
    assert torch.equal(buf, torch.full((4,), 2.0 * 0.9 + 0.5 * 2.0))
    q = nn.Parameter(torch.ones(3))
    later = optim.SGD([q], lr=0.1)
    q.grad = torch.ones(3)
    later.step()
    later.param_groups[0]["momentum"] = 0.5
    later.step()
    assert torch.equal(later.state[q]["momentum_buffer"], torch.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rowwise_adagrad_dense_step_is_its_row_update_on_every_row(backend: str) -> None:
    """RowWiseAdagrad's dense update (2-D and 1-D parameters, several together; the C kernel
    on every row, or the multi-tensor torch ops) ends where its row update on every row (the
    same gradient, sparse; a 1-D parameter as one row) puts it, float64 to 1e-12."""
    with use_backend(backend):
        _rowwise_dense_is_every_row()


def _rowwise_dense_is_every_row() -> None:
    ends = []
    for sparse in (False, True):
        torch.manual_seed(3)
        w = nn.Parameter(torch.randn(4, 6, dtype=torch.float64))
        u = nn.Parameter(torch.randn(3, 5, dtype=torch.float64))
        b = nn.Parameter(torch.randn(1, 4, dtype=torch.float64))
        if not sparse:
            b = nn.Parameter(b.detach().view(-1))
        opt = optim.RowWiseAdagrad([w, u, b], lr=0.1, weight_decay=0.05)
        for step in range(6):
            g = torch.Generator().manual_seed(step)
            grads = [torch.randn(p.shape, dtype=torch.float64, generator=g) for p in (w, u, b)]
            for p, grad in zip((w, u, b), grads, strict=True):
                p.grad = grad.view(-1, grad.shape[-1]).to_sparse(1) if sparse else grad
            opt.step()
        ends.append([p.detach().reshape(-1).clone() for p in (w, u, b)])
    for x, y in zip(*ends, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the documented formulas


def touched_rows(bags: Bags) -> torch.Tensor:
    rows = torch.unique(bags.indices)
    return rows[rows != PAD]


def replay(data: list[tuple[Bags, torch.Tensor]], update: Callable[..., None]) -> Model:
    """Train a twin whose table follows ``update(weight, grad, rows, step)`` by hand."""
    ref = lookup_model()
    ref.table.sparse = False
    head = torch.optim.SGD(ref.head.parameters(), lr=0.0)  # the head is checked elsewhere
    for step, (bags, y) in enumerate(data, start=1):
        head.zero_grad()
        ref.table.weight.grad = None
        F.cross_entropy(ref(bags), y).backward()
        with torch.no_grad():
            update(ref.table.weight, ref.table.weight.grad, touched_rows(bags), step)
    return ref


def test_rowwise_adagrad_follows_its_formula() -> None:
    """s[i] += mean(g[i]**2); w[i] -= lr / (sqrt(s[i]) + eps) * g[i], touched rows only."""
    lr, eps = 0.2, 1e-8
    state = torch.zeros(V)

    def update(w: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, step: int) -> None:
        state[rows] += g[rows].pow(2).mean(1)
        w[rows] -= (lr / (state[rows].sqrt() + eps)).unsqueeze(1) * g[rows]

    data = batches()
    ref = replay(data, update)
    ours = lookup_model()
    opt = optim.RowWiseAdagrad([ours.table.weight], lr=lr, eps=eps)
    train(ours, [opt], data)
    torch.testing.assert_close(table(ours), table(ref), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(opt.state[ours.table.weight]["sum"], state)
    assert opt.state[ours.table.weight]["sum"].shape == (V,)  # one value per row


def test_adamw_is_lazy_untouched_rows_and_state_do_not_move() -> None:
    lr, wd, (b1, b2), eps = 0.05, 0.1, (0.9, 0.999), 1e-8
    m, v = torch.zeros(V, D), torch.zeros(V, D)

    def update(w: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, step: int) -> None:
        w[rows] *= 1 - lr * wd
        m[rows] = b1 * m[rows] + (1 - b1) * g[rows]
        v[rows] = b2 * v[rows] + (1 - b2) * g[rows] ** 2
        size = lr * (1 - b2**step) ** 0.5 / (1 - b1**step)
        w[rows] -= size * m[rows] / (v[rows].sqrt() + eps)

    data = batches()
    ref = replay(data, update)
    ours = lookup_model()
    opt = optim.AdamW([ours.table.weight], lr=lr, weight_decay=wd)
    start = table(ours).clone()
    train(ours, [opt], data)
    torch.testing.assert_close(table(ours), table(ref), rtol=1e-5, atol=1e-6)
    never = torch.ones(V, dtype=torch.bool)
    for bags, _ in data:
        never[touched_rows(bags)] = False
    assert never.sum() > 10
    assert torch.equal(table(ours)[never], start[never])
    state = opt.state[ours.table.weight]
    assert not state["exp_avg"][never].any() and not state["exp_avg_sq"][never].any()


def test_momentum_sgd_is_lazy() -> None:
    lr, mu = 0.1, 0.9
    buf = torch.zeros(V, D)

    def update(w: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, step: int) -> None:
        buf[rows] = mu * buf[rows] + g[rows]
        w[rows] -= lr * buf[rows]

    data = batches()
    ref = replay(data, update)
    ours = lookup_model()
    opt = optim.SGD([ours.table.weight], lr=lr, momentum=mu)
    train(ours, [opt], data)
    torch.testing.assert_close(table(ours), table(ref), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(opt.state[ours.table.weight]["momentum_buffer"], buf)


# ---------------------------------------------------------------- kernels, state, API


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_c_kernels_equal_torch_ops(name: str, fused: bool) -> None:
    """The two backends of the row updates (C where built, torch ops) give the same weights."""
    kw: dict[str, Any] = {"lr": 0.1, "weight_decay": 0.01, "fused": fused}
    if name == "SGD":
        kw.update(momentum=0.5, nesterov=True)
    runs = []
    for backend in ("auto", "torch"):
        with use_backend(backend):
            model = lookup_model(torch.float64)
            train(model, [getattr(optim, name)(model.parameters(), **kw)], batches())
        runs.append(model)
    assert_same_model(runs[0], runs[1], rtol=1e-12, atol=1e-12)


#: options that make every optimizer use every term of its row update
ROW_OPTIONS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 0.1, "weight_decay": 0.01, "momentum": 0.5, "nesterov": True},
    "Adagrad": {"lr": 0.1, "weight_decay": 0.01, "lr_decay": 0.1},
    "RowWiseAdagrad": {"lr": 0.1, "weight_decay": 0.01},
    "Adam": {"lr": 0.1, "weight_decay": 0.01},
    "AdamW": {"lr": 0.1, "weight_decay": 0.1},
}


def _row_steps(name: str, shape: tuple[int, ...], backend: str, apart: bool = False
               ) -> list[torch.Tensor]:
    """The table and its state tensors (each as ``(rows, -1)``) after 4 steps of stored sparse
    gradients; ``apart``: Adam's moments laid out as ``torch.optim.Adam`` keeps them."""
    g = torch.Generator().manual_seed(0)
    w = nn.Parameter(torch.randn(shape, generator=g))
    opt = getattr(optim, name)([w], **ROW_OPTIONS[name])
    with use_backend(backend):
        for step in range(4):
            rows = torch.unique(torch.randint(0, shape[0], (12,), generator=g))
            values = torch.randn(rows.numel(), *shape[1:], generator=g)
            w.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values, shape)
            opt.step()
            if apart and step == 0:
                opt._set_layout(w, None)
    state = opt.state[w]
    return [t.detach().reshape(shape[0], -1).contiguous()
            for t in (w, *(state[k] for k in sorted(state) if k != "step"))]


@pytest.mark.skipif(not c_available(), reason="the C kernels are not built")
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_rows_the_c_kernel_does_not_take_get_its_bits(name: str) -> None:
    """Where the C kernel does not run (the torch backend; a table of more than 2 dims;
    Adam's moments apart; CUDA and other dtypes alike), a stored sparse gradient's rows are
    updated by the kernel's torch-op twin: the C kernel's table and state to the bit (on a
    CPU that fuses multiply-adds, as tests/test_rowops.py)."""
    want = _row_steps(name, (30, 6), "c")
    for got in (_row_steps(name, (30, 6), "torch"), _row_steps(name, (30, 2, 3), "c"),
                _row_steps(name, (30, 6), "torch", apart=True)):
        for x, y in zip(got, want, strict=True):
            assert torch.equal(x.view(torch.int32), y.view(torch.int32))


def test_rowwise_adagrad_sums_half_precision_rows_in_float32() -> None:
    """A bfloat16 table of wide rows (no C kernel): each touched row's mean of squares is
    summed in float32 and rounded once, within an ulp of the exact mean (summed in 16-bit
    lanes it would be several ulps off)."""
    g = torch.Generator().manual_seed(0)
    w = nn.Parameter(torch.randn(300, 600, generator=g).bfloat16())
    opt = optim.RowWiseAdagrad([w], lr=0.1)
    rows = torch.arange(0, 300, 2)
    values = torch.randn(rows.numel(), 600, generator=g).bfloat16()
    w.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values, w.shape)
    opt.step()
    exact = (values.double() ** 2).mean(1)
    torch.testing.assert_close(opt.state[w]["sum"][rows].double(), exact, rtol=2**-7, atol=0)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_dict_resumes_bit_identically(name: str) -> None:
    data = batches(steps=8)
    a = lookup_model()
    opt_a = getattr(optim, name)(a.parameters(), lr=0.1)
    train(a, [opt_a], data[:4])
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buf)
    train(a, [opt_a], data[4:])

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    b = lookup_model()
    b.load_state_dict(saved["model"])
    opt_b = getattr(optim, name)(b.parameters(), lr=0.1)
    opt_b.load_state_dict(saved["opt"])
    train(b, [opt_b], data[4:])
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_loads_again_after_a_load_a_copy_or_a_pickle(name: str) -> None:
    """``torch.optim.Optimizer`` adds ``differentiable`` to an optimizer's defaults when it
    loads a state dict, is copied or unpickled; none of these makes the next load refuse the
    optimizer's own state."""
    import copy
    import pickle

    model = lookup_model()
    opt = getattr(optim, name)(model.parameters(), lr=0.1)
    train(model, [opt], batches(steps=2))
    saved = opt.state_dict()
    opt.load_state_dict(saved)
    opt.load_state_dict(saved)  # a second load
    opt.load_state_dict(opt.state_dict())
    copied = copy.deepcopy(opt)
    copied.load_state_dict(copied.state_dict())
    pickle.loads(pickle.dumps(opt)).load_state_dict(saved)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_state_under_an_index_no_group_lists_is_left_out_of_a_load(name: str) -> None:
    """``torch.optim`` loads a state dict whose ``state`` has an entry under an index no group
    lists (and steps no parameter with it); so does this optimizer, which leaves it out: the
    load and the training after it are as without it."""
    import copy

    model = lookup_model()
    opt = getattr(optim, name)(model.parameters(), lr=0.1)
    train(model, [opt], batches(steps=2))
    saved = copy.deepcopy(opt.state_dict())
    stray = copy.deepcopy(saved)
    stray["state"][len(list(model.parameters())) + 3] = copy.deepcopy(saved["state"][0])
    twin = copy.deepcopy(model)
    twin_opt = getattr(optim, name)(twin.parameters(), lr=0.1)
    twin_opt.load_state_dict(saved)
    opt.load_state_dict(stray)
    assert all(isinstance(p, torch.Tensor) for p in opt.state)
    assert sorted(opt.state_dict()["state"]) == sorted(saved["state"])
    train(model, [opt], batches(steps=2))
    train(twin, [twin_opt], batches(steps=2))
    for pa, pb in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("fused", [False, True])
def test_sgd_momentum_raised_from_zero_starts_a_buffer_as_torchs(fused: bool) -> None:
    """A momentum schedule that starts at 0: the tables' states have no buffer when it rises;
    the step starts one (as ``torch.optim.SGD`` does) instead of refusing part way through.
    The same rows every step: lazy momentum is then torch's dense momentum."""
    torch.manual_seed(0)
    ours = [LookupLinear(20, 3, bias=False, sparse=True) for _ in range(2)]
    ref = [LookupLinear(20, 3, bias=False) for _ in range(2)]
    for a, b in zip(ours, ref, strict=True):
        b.load_state_dict(a.state_dict())
    opt = optim.SGD([{"params": m.parameters()} for m in ours], lr=0.1, fused=fused)
    opt_ref = torch.optim.SGD([{"params": m.parameters()} for m in ref], lr=0.1)
    x = torch.tensor([[1, 4], [4, 7]])
    for step in range(4):
        if step == 2:
            for o in (opt, opt_ref):
                o.param_groups[1]["momentum"] = 0.9
        for model, o in ((ours, opt), (ref, opt_ref)):
            o.zero_grad()
            (model[0](x) * model[1](x)).square().sum().backward()
            o.step()
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.weight, b.weight)


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW"])
def test_a_zero_dimensional_parameter_steps_as_torchs(name: str) -> None:
    """A 0-d parameter (a learned temperature): its state is 0-d too."""
    kw: dict[str, Any] = {"lr": 0.1, **({"momentum": 0.9} if name == "SGD" else {})}
    got = []
    for module in (torch.optim, optim):
        p = nn.Parameter(torch.tensor(1.5))
        opt = getattr(module, name)([p], **kw)
        for _ in range(3):
            opt.zero_grad()
            (p * p).backward()
            opt.step()
        got.append(p.detach())
    assert torch.equal(got[0], got[1])


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW"])
def test_bfloat16_dense_parameters_step_as_torchs_default(name: str) -> None:
    """torch.optim's default on the CPU is the single-tensor update, whose bfloat16 rounding
    the multi-tensor one does not give: the values are torch's, to the bit."""
    kw: dict[str, Any] = {"lr": 0.05, "weight_decay": 0.5,
                          **({"momentum": 0.9} if name == "SGD" else {})}
    got = []
    for module in (torch.optim, optim):
        torch.manual_seed(0)
        lin = nn.Linear(8, 4).to(torch.bfloat16)
        opt = getattr(module, name)(lin.parameters(), **kw)
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1)).bfloat16()
        for _ in range(5):
            opt.zero_grad()
            lin(x).float().square().mean().backward()
            opt.step()
        got.append(lin.weight.detach())
    assert torch.equal(got[0], got[1])


def test_sgd_momentum_raised_on_a_dense_parameter_starts_from_the_gradient() -> None:
    """torch.optim.SGD starts a momentum buffer as the gradient itself (no dampening), also
    when momentum rises from 0 during training."""
    got = []
    for module in (torch.optim, optim):
        torch.manual_seed(0)
        lin = nn.Linear(4, 3)
        opt = module.SGD(lin.parameters(), lr=0.01, momentum=0.0, dampening=0.5)
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
        for i in range(4):
            if i == 2:
                opt.param_groups[0]["momentum"] = 0.9
            opt.zero_grad()
            lin(x).square().mean().backward()
            opt.step()
        got.append(lin.weight.detach())
    assert torch.equal(got[0], got[1])


def test_group_values_of_numpy_or_tensor_type_load() -> None:
    """A scheduler's lambda may return np.float32, and torch.optim keeps a tensor lr: both
    state dicts load (as torch.optim's load them)."""
    import numpy as np

    lin = nn.Linear(3, 2)
    opt = optim.Adam(lin.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: np.float32(0.5))
    lin(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    optim.Adam(lin.parameters()).load_state_dict(opt.state_dict())
    tensor_lr = torch.optim.Adam(lin.parameters(), lr=torch.tensor(0.01))
    tensor_lr.step()
    loaded = optim.Adam(lin.parameters())
    loaded.load_state_dict(tensor_lr.state_dict())
    assert torch.equal(loaded.param_groups[0]["lr"], torch.tensor(0.01))


def test_restarted_rows_start_adagrad_at_its_initial_accumulator_value() -> None:
    """Rows re-initialised for a new ID (an IdMap's eviction) start their state as a new
    state starts: Adagrad's sums at ``initial_accumulator_value``, not 0."""
    from lookuplinear._rowreset import RESETS

    layer = LookupLinear(10, 2, bias=False, sparse=True)
    opt = optim.Adagrad(layer.parameters(), lr=0.1, initial_accumulator_value=0.3)
    layer(torch.tensor([1, 2])).sum().backward()
    opt.step()
    RESETS.add(layer.weight, torch.tensor([2]))
    opt.zero_grad()
    layer(torch.tensor([5])).sum().backward()
    opt.step()
    assert torch.equal(opt.state[layer.weight]["sum"][2], torch.full((2,), 0.3))


def test_a_fused_optimizer_refuses_a_grad_scaler_step() -> None:
    """GradScaler's scale reaches a fused table's update in the backward: refused at the step
    (PyTorch's way for an optimizer that takes the scale), nothing stepped then. An unfused
    optimizer under GradScaler steps as without it (a power-of-2 scale: to the bit)."""
    def run(fused: bool, scaled: bool) -> LookupLinear:
        torch.manual_seed(0)
        layer = LookupLinear(10, 2, sparse=True)
        opt = optim.SGD(layer.parameters(), lr=0.1, fused=fused)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=scaled)
        scaler.scale(layer(torch.tensor([1, 2])).sum()).backward()
        bias = layer.bias.detach().clone()
        if fused and scaled:
            with pytest.raises(InputValueError, match="GradScaler"):
                scaler.step(opt)
            assert torch.equal(layer.bias, bias)  # the dense parameters: not stepped
        else:
            scaler.step(opt)
        return layer

    run(True, True)
    with_scaler, without = run(False, True), run(False, False)
    assert torch.equal(with_scaler.weight, without.weight)
    assert torch.equal(with_scaler.bias, without.bias)


@pytest.mark.parametrize("lr", ["float", "tensor"])
def test_fused_group_values_changed_before_the_step_warn(lr: str) -> None:
    """An lr set between backward() and step() warns: a float replaced, or a tensor lr
    changed in place (as torch's schedulers fill_ it)."""
    def set_lr(value: float) -> None:
        group = opt.param_groups[0]
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value

    layer = LookupLinear(10, 2, sparse=True)
    opt = optim.SGD(layer.parameters(), lr=1.0 if lr == "float" else torch.tensor(1.0),
                    fused=True)
    layer(torch.tensor([1])).sum().backward()
    set_lr(0.5)
    with pytest.warns(UserWarning, match="lr changed between backward"):
        opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.zero_grad()
        layer(torch.tensor([1])).sum().backward()
        opt.step()
        set_lr(0.25)  # a scheduler after step(): as PyTorch orders them
        opt.zero_grad()
        layer(torch.tensor([1])).sum().backward()
        opt.step()


@pytest.mark.parametrize("name", ["Adam", "Adagrad"])
def test_fused_steps_count_as_unfused_with_zero_grad_keeping_zeros(name: str) -> None:
    """zero_grad(set_to_none=False) keeps a table's gradient as zeros, whose step counts (as
    SparseAdam's): a fused table that no backward reached counts it too."""
    g = torch.Generator().manual_seed(0)
    idx = [torch.randint(0, 8, (6,), generator=g) for _ in range(6)]
    out = []
    for fused in (False, True):
        torch.manual_seed(0)
        a, b = LookupLinear(20, 4, bias=False, sparse=True), LookupLinear(20, 4, bias=False,
                                                                          sparse=True)
        opt = getattr(optim, name)([*a.parameters(), *b.parameters()], lr=0.1, fused=fused)
        for i, x in enumerate(idx):
            opt.zero_grad(set_to_none=False)
            loss = a(x).tanh().sum() + (b(x).sin().sum() if i % 3 == 0 else 0)
            loss.backward()
            opt.step()
        out.append((b.weight.detach().clone(), opt.state[b.weight]["step"]))
    assert out[0][1] == out[1][1] == 6
    assert torch.equal(out[0][0], out[1][0])


@pytest.mark.parametrize("name", ["Adam", "Adagrad"])
def test_fused_tables_with_no_gradient_to_keep_count_no_step_as_unfused(name: str) -> None:
    """A table that holds no gradient with fused=False (a fresh model and optimizer resumed
    from state dicts, or after zero_grad(set_to_none=True)) counts no step for a backward that
    does not reach it, whatever zero_grad(set_to_none=False) comes after: the step counts and
    weights are fused=False's."""
    x = torch.tensor([1, 2, 3, 2])
    out = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(20, 4, bias=False, sparse=True)
        opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
        for _ in range(2):
            opt.zero_grad(set_to_none=False)
            layer(x).sum().backward()
            opt.step()
        saved = (_copied(layer.state_dict()), _copied(opt.state_dict()))
        opt.unbind()
        resumed = LookupLinear(20, 4, bias=False, sparse=True)
        resumed.load_state_dict(saved[0])
        opt = getattr(optim, name)(resumed.parameters(), lr=0.1, fused=fused)
        opt.load_state_dict(saved[1])
        steps = []
        for reached in (False, True, False, False, True):
            opt.zero_grad(set_to_none=False)
            if reached:
                resumed(x).sum().backward()
            opt.step()
            steps.append(opt.state[resumed.weight]["step"])
            if len(steps) == 3:
                opt.zero_grad(set_to_none=True)  # no gradient held again
        out.append((steps, resumed.weight.detach().clone()))
    assert out[0][0] == out[1][0] == [2, 3, 4, 4, 5]
    assert torch.equal(out[0][1], out[1][1])


@pytest.mark.parametrize("name", ["Adam", "Adagrad"])
def test_a_load_into_the_live_optimizer_keeps_its_tables_kept_gradients(name: str) -> None:
    """A state dict loaded into the very optimizer (the model's gradients untouched) leaves a
    table that held a kept zero gradient holding it: a backward that does not reach it then
    counts a step under zero_grad(set_to_none=False), as fused=False does."""
    x = torch.tensor([1, 2, 3, 2])
    out = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(20, 4, bias=False, sparse=True)
        opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
        opt.zero_grad(set_to_none=False)
        layer(x).sum().backward()
        opt.step()
        opt.load_state_dict(_copied(opt.state_dict()))
        for reached in (False, True, False):
            opt.zero_grad(set_to_none=False)
            if reached:
                layer(x).sum().backward()
            opt.step()
        out.append((opt.state[layer.weight]["step"], layer.weight.detach().clone()))
    assert out[0][0] == out[1][0] == 4
    assert torch.equal(out[0][1], out[1][1])


@pytest.mark.parametrize("fused", [False, True])
def test_adam_moments_paired_and_repaired(fused: bool) -> None:
    """A CPU table's m and v are views into one block, a row of each adjacent; a state loaded
    with them apart (plain tensors) is paired again by the C kernel's step (left apart by the
    torch ops' step, which reads them as two tensors) and resumes bit-identically."""
    data = batches(steps=8)
    a = lookup_model()
    opt_a = optim.Adam(a.parameters(), lr=0.1, fused=fused)
    train(a, [opt_a], data[:4])
    state = opt_a.state[a.table.weight]
    m, v = state["exp_avg"], state["exp_avg_sq"]
    assert v.data_ptr() - m.data_ptr() == D * m.element_size() and m.stride() == (2 * D, 1)
    assert opt_a.state[a.head.weight]["exp_avg"].is_contiguous()  # dense: torch.optim's layout
    saved = {"model": {k: t.clone() for k, t in a.state_dict().items()},
             "opt": opt_a.state_dict()}
    saved["opt"]["state"] = {k: {n: t.clone() if isinstance(t, torch.Tensor) else t
                                 for n, t in st.items()}
                             for k, st in saved["opt"]["state"].items()}  # apart, contiguous
    train(a, [opt_a], data[4:])

    b = lookup_model()
    b.load_state_dict(saved["model"])
    opt_b = optim.Adam(b.parameters(), lr=0.1, fused=fused)
    opt_b.load_state_dict(saved["opt"])
    assert opt_b.state[b.table.weight]["exp_avg"].is_contiguous()
    train(b, [opt_b], data[4:])
    m, v = opt_b.state[b.table.weight]["exp_avg"], opt_b.state[b.table.weight]["exp_avg_sq"]
    assert (v.data_ptr() - m.data_ptr() == D * m.element_size()) == C_BY_DEFAULT
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_new_storage_or_state_between_steps(name: str, fused: bool) -> None:
    """The kernels' numpy views follow ``p.data = ...`` and a replaced state tensor."""
    data = batches()
    a, b = lookup_model(), lookup_model()
    opt_a = getattr(optim, name)(a.parameters(), lr=0.1, fused=fused)
    opt_b = getattr(optim, name)(b.parameters(), lr=0.1, fused=fused)
    train(a, [opt_a], data[:2])
    train(b, [opt_b], data[:2])
    b.table.weight.data = b.table.weight.data.clone()  # new storage, same values
    state = opt_b.state[b.table.weight]
    for key, t in list(state.items()):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            state[key] = t.clone()  # apart from the old views
    train(a, [opt_a], data[2:])
    train(b, [opt_b], data[2:])
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_lr_scheduler_and_param_groups() -> None:
    """Schedulers move group["lr"]; groups keep their own settings."""
    ours, theirs = lookup_model(), bag_model()
    oa = optim.SGD([{"params": [ours.table.weight], "lr": 1.0},
                    {"params": ours.head.parameters()}], lr=0.1)
    ob = torch.optim.SGD([{"params": [theirs.table.weight], "lr": 1.0},
                          {"params": theirs.head.parameters()}], lr=0.1)
    sa = torch.optim.lr_scheduler.StepLR(oa, step_size=1, gamma=0.5)
    sb = torch.optim.lr_scheduler.StepLR(ob, step_size=1, gamma=0.5)
    for bags, y in batches():
        for model, o, s in ((ours, oa, sa), (theirs, ob, sb)):
            o.zero_grad()
            F.cross_entropy(model(bags), y).backward()
            o.step()
            s.step()
    assert oa.param_groups[0]["lr"] == pytest.approx(0.5**STEPS)
    assert_same_model(ours, theirs, rtol=1e-5, atol=1e-6)


def test_accumulated_gradients_are_coalesced_before_the_update() -> None:
    """Two backward passes without zero_grad: the summed sparse gradient repeats rows."""
    ours, theirs = lookup_model(), bag_model()
    oa, ob = optim.Adagrad(ours.parameters(), lr=0.3), torch.optim.Adagrad(theirs.parameters(),
                                                                           lr=0.3)
    (b1, y1), (b2, y2) = batches()[:2]
    for model, o in ((ours, oa), (theirs, ob)):
        o.zero_grad()
        F.cross_entropy(model(b1), y1).backward()
        F.cross_entropy(model(b2), y2).backward()
        o.step()
    assert_same_model(ours, theirs, rtol=1e-5, atol=1e-6)


#: each row update's variants (lookuplinear.optim's options for a sparse gradient)
UNFUSED_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("SGD", {}), ("SGD", {"weight_decay": 0.01}), ("SGD", {"momentum": 0.9}),
    ("SGD", {"momentum": 0.9, "dampening": 0.2, "weight_decay": 0.01}),
    ("SGD", {"momentum": 0.5, "nesterov": True, "weight_decay": 0.01}),
    ("Adagrad", {}), ("Adagrad", {"weight_decay": 0.01}),
    ("RowWiseAdagrad", {}), ("RowWiseAdagrad", {"weight_decay": 0.01}),
    ("Adam", {"weight_decay": 0.01}), ("AdamW", {}),
]


def summed_grad(grad: torch.Tensor) -> torch.Tensor:
    """A row-sparse gradient with unique rows: runs of rows that never decrease summed in
    order onto ``-0.0`` (``index_add_``, as a coalesce sums), any other gradient coalesced."""
    rows, values = grad._indices()[0], grad._values()
    if rows.numel() > 1 and not bool((rows[1:] >= rows[:-1]).all()):
        return grad.coalesce()
    heads, run = torch.unique_consecutive(rows, return_inverse=True)
    sums = torch.full((heads.numel(), *values.shape[1:]), -0.0, dtype=values.dtype)
    return torch.sparse_coo_tensor(heads.unsqueeze(0), sums.index_add_(0, run, values),
                                   grad.shape)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.uint8)


def _backwards(kind: str, dtype: torch.dtype) -> list[list[tuple[Bags, torch.Tensor]]]:
    """Per step, the ``(bags, grad_out)`` of each backward before it: bags with runs (and
    ``grad_out`` rows of ``+0.0`` and ``-0.0``), two backwards accumulated, no entries, one bag
    of one ID."""
    g = torch.Generator().manual_seed(1)
    steps = []
    for bags, _ in batches(seed=2, steps=3):
        grad_out = torch.randn(8, D, generator=g, dtype=dtype)
        grad_out[2], grad_out[3] = 0.0, -0.0
        if kind == "runs":
            steps.append([(bags, grad_out)])
        elif kind == "accumulated":
            other = Bags.from_lists([[9, 3, 1], [3], [11, 11, 2]])
            steps.append([(bags, grad_out), (other, torch.randn(3, D, generator=g,
                                                                dtype=dtype))])
        elif kind == "empty":
            steps.append([(Bags.from_lists([[], []]), grad_out[:2])])
        else:
            steps.append([(Bags.from_lists([[7]]), grad_out[:1])])
    return steps


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("kind", ["runs", "accumulated", "empty", "one"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("name", "kw"), UNFUSED_VARIANTS)
def test_unfused_step_on_the_lookup_gradient_equals_its_summed_rows_to_the_bit(
        name: str, kw: dict[str, Any], dtype: torch.dtype, kind: str, backend: str) -> None:
    """The step on a lookup's gradient as the backward stores it (one row per entry, its runs
    summed as the update reads them) gives the bits of the step on the same gradient with
    unique rows (each run summed first, in entry order); accumulated gradients (rows in no
    order) are coalesced first either way."""
    layers, opts = [], []
    for _ in range(2):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, bias=False, padding_idx=PAD, sparse=True, dtype=dtype)
        layers.append(layer)
        opts.append(getattr(optim, name)(layer.parameters(), lr=0.1, **kw))
    with use_backend(backend):
        for backwards in _backwards(kind, dtype):
            for i, (layer, opt) in enumerate(zip(layers, opts, strict=True)):
                opt.zero_grad()
                for bags, grad_out in backwards:
                    layer(bags).backward(grad_out)
                if i == 1:
                    assert layer.weight.grad is not None
                    layer.weight.grad = summed_grad(layer.weight.grad)
                opt.step()
    a, b = (layer.weight for layer in layers)
    assert torch.equal(_bits(a), _bits(b))
    sa, sb = opts[0].state[a], opts[1].state[b]
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(_bits(value), _bits(sb[key])), key
    if kind != "empty":
        assert not torch.equal(a.detach(), _first_weight(dtype))  # it did train


def _first_weight(dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    return LookupLinear(V, D, bias=False, padding_idx=PAD, sparse=True, dtype=dtype).weight.detach()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_unique_sums_are_a_coalesces_and_the_sorted_runs_sums_to_the_bit(
        dtype: torch.dtype) -> None:
    """``unique_sums``, the grouping a step runs off the CPU (where whether the rows are in
    order is not read back), sums each row's entries in entry order: rows in any order get the
    sums of a coalesce (float16/bfloat16 summed in float32, as a CUDA coalesce sums them),
    rows in order those ``summed_runs`` gives (the CPU step's), to the bit, the signs of
    zeros included (a row of ``-0.0`` entries sums to ``-0.0``, as a coalesce's)."""
    g = torch.Generator().manual_seed(0)
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    for order in ([7, 2, 0, 2, 3, 7, 0, 5, 2], [0, 0, 2, 2, 2, 3, 5, 7, 7]):
        rows = torch.tensor(order)
        values = torch.randn(rows.numel(), 3, generator=g).to(dtype)
        values[rows == 0] = -0.0  # two entries of -0.0
        values[rows == 5] = -0.0  # one
        values[(rows == 3).nonzero()[0, 0], 1] = 0.0
        heads, sums = unique_sums(rows, values)
        ref = torch.sparse_coo_tensor(rows.unsqueeze(0), values.to(acc), (9, 3)).coalesce()
        assert torch.equal(heads, ref.indices()[0])
        assert torch.equal(_bits(sums), _bits(ref.values().to(dtype)))
        if order == sorted(order) and acc == dtype:
            runs = summed_runs(rows, values)
            assert torch.equal(heads, runs[0]) and torch.equal(_bits(sums), _bits(runs[1]))


class _AnswersUnique(TorchDispatchMode):
    """On the meta device, where reading a value raises (on CUDA it makes the host wait for
    the device), ``torch.unique`` answered as if its rows were distinct: the one read a
    grouping of the rows makes, as a coalesce makes it. Counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._unique2.default and args[0].device.type == "meta":
            self.reads += 1
            x = args[0]
            return (x.new_empty(x.numel()), x.new_empty(x.shape, dtype=torch.long),
                    x.new_empty(0, dtype=torch.long))
        return func(*args, **(kwargs or {}))


def _meta_grad() -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor([[1, 3]], device="meta"),
                                   torch.ones(2, 4, device="meta"), (10, 4),
                                   is_coalesced=True, check_invariants=False)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize(("name", "kw"), UNFUSED_VARIANTS)
def test_a_coalesced_sparse_gradient_steps_off_the_cpu_reading_nothing(
        name: str, kw: dict[str, Any], fused: bool) -> None:
    """Off the CPU (meta here: a value read raises; on CUDA it makes the host wait for the
    device) a sparse gradient flagged coalesced (each row once, sorted) is stepped as it is:
    nothing grouped, nothing read back, as ``torch.optim``'s ``coalesce()`` returns it as it
    is."""
    table = LookupLinear(10, 4, bias=False, sparse=True, device="meta")
    opt = getattr(optim, name)(table.parameters(), lr=0.1, fused=fused, **kw)
    for _ in range(2):
        table.weight.grad = _meta_grad()
        opt.step()
    assert opt.state[table.weight]["step"] == 2


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("model", ["layer", "collection"])
@pytest.mark.parametrize(("name", "kw"), UNFUSED_VARIANTS)
def test_a_lookups_sparse_gradient_steps_off_the_cpu_in_one_read(
        name: str, kw: dict[str, Any], model: str, fused: bool) -> None:
    """Off the CPU a bag lookup's gradient has one row per entry (``nn.EmbeddingBag
    (sparse=True)``'s): the step groups each table's rows once, with ``torch.unique``, whose
    number of rows is the one value it reads back (``torch.optim.Adagrad`` and ``SparseAdam``
    read it in ``coalesce()``); it does not read whether the rows are in order. ``fused=True``
    updates the tables in the backward from the gradient ``fused=False`` stores, so it reads
    the same. On meta a mode answers that read; any other read raises."""
    if model == "layer":
        m: nn.Module = LookupLinear(10, 4, sparse=True, device="meta")
        x: Any = Bags(torch.tensor([3, 1, 3, 5]), torch.tensor([0, 2, 4])).to("meta")
    else:
        m = LookupCollection([TableConfig("a", 10, 4, ["a"]), TableConfig("b", 7, 3, ["b"])],
                             sparse=True, device="meta")
        x = KeyedBags(["a", "b"], torch.tensor([3, 1, 3, 5, 2, 2]),
                      lengths=torch.tensor([2, 0, 1, 3])).to("meta")
    opt = getattr(optim, name)(m.parameters(), lr=0.1, fused=fused, **kw)
    tables = [p for p in m.parameters() if p.dim() == 2]
    answered = _AnswersUnique()
    for _ in range(2):
        opt.zero_grad()
        out = m(x)
        loss = (out if isinstance(out, torch.Tensor) else out.values()).sum()
        if fused:  # the tables are updated in the backward
            with answered:
                loss.backward()
        else:
            loss.backward()
            assert all(p.grad is not None and not p.grad.is_coalesced() for p in tables)
        with answered:
            opt.step()
    assert answered.reads == 2 * len(tables)
    assert all(opt.state[p]["step"] == 2 for p in tables)


def test_step_takes_a_closure_and_skips_parameters_without_gradient() -> None:
    model = lookup_model()
    frozen = nn.Parameter(torch.ones(3))
    opt = optim.Adam([*model.parameters(), frozen], lr=0.1)
    bags, y = batches()[0]

    def closure() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(bags), y)
        loss.backward()
        return loss.item()

    assert isinstance(opt.step(closure), float)
    assert torch.equal(frozen, torch.ones(3)) and frozen not in opt.state


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("device", DEVICES)
def test_every_optimizer_trains_on_device(name: str, device: str) -> None:
    model = lookup_model(device=device)
    opt = getattr(optim, name)(model.parameters(), lr=0.05)
    data = [(b.to(device), y.to(device)) for b, y in batches(steps=30)] * 3
    losses = train(model, [opt], data[:1] * 40)
    assert losses[-1] < losses[0]


def test_bad_arguments_and_gradients_raise_clear_errors() -> None:
    w = nn.Parameter(torch.zeros(4, 2))
    with pytest.raises(InputValueError, match="lr must be a number >= 0"):
        optim.Adam([w], lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([w], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([w], nesterov=True)
    opt = optim.SGD([w], lr=0.1)
    w.grad = torch.zeros(4, 2)
    w.grad.data = torch.ones(5, 2)  # .data skips the checks of assigning .grad
    with pytest.raises(InputValueError, match=r"gradient of shape \(5, 2\).*Nothing was stepped"):
        opt.step()


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_refused_step_changes_nothing(name: str) -> None:
    """A gradient the step refuses, in the second group, after tables, a dense parameter and
    a gradient taken in its row-sparse form: no parameter, state tensor, step count or new
    state changes, to the bit; before the first step and after one."""
    torch.manual_seed(0)
    model = nn.Module()
    model.a = LookupLinear(50, 4, sparse=True)
    model.b = LookupLinear(30, 3, sparse=True, bias=False)
    model.c = nn.Parameter(torch.randn(6, 5))
    model.d = nn.Parameter(torch.randn(7, 2))
    opt = getattr(optim, name)([{"params": [model.a.weight, model.a.bias, model.c]},
                                {"params": [model.b.weight, model.d]}], lr=0.1)

    def grads() -> None:
        opt.zero_grad()
        (model.a(torch.tensor([[1, 2], [2, 7]])).sum() + model.b(torch.tensor([[3]])).sum()
         + model.c.sum()).backward()
        model.c.grad = model.c.grad.to_sparse()  # sparse_dim=2: taken as row-sparse
        model.d.grad = torch.zeros(7, 2)
        model.d.grad.data = torch.ones(7, 3)

    for _ in range(2):  # no state yet, then started states
        grads()
        before = snapshot(model, opt)
        with pytest.raises(InputValueError, match=r"shape \(7, 2\).*Nothing was stepped"):
            opt.step()
        assert_unchanged(before, model, opt)
        model.d.grad = torch.ones(7, 2)
        opt.step()


#: the optimizers and the torch.optim class whose step on sparse gradients they equal
SPARSE_PEERS = [("SGD", torch.optim.SGD, {}), ("Adagrad", torch.optim.Adagrad, {"lr_decay": 0.1}),
                ("Adam", torch.optim.SparseAdam, {})]


def _element_sparse(shape: tuple[int, ...], step: int) -> torch.Tensor:
    """A random gradient with about half of its elements zero, float64."""
    g = torch.Generator().manual_seed(step)
    dense = torch.randn(shape, dtype=torch.float64, generator=g)
    return dense * (torch.rand(shape, generator=g) < 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "peer", "options"), SPARSE_PEERS)
def test_sparse_gradients_of_every_form_step_as_torch_optim(
        backend: str, name: str, peer: type[torch.optim.Optimizer], options: dict[str, Any]
) -> None:
    """A 1-D or 0-D parameter's sparse gradient, and a sparse gradient of sparse_dim 0, 2 or 3
    (``w.grad.to_sparse()``), uncoalesced, take the step ``torch.optim`` takes on them, over
    several steps, float64 to rounding. (Adam, as SparseAdam, on whole rows: it updates each
    row a gradient names, zeros where it has no entry; SparseAdam the entries.)"""
    shapes = [(8,), (), (5, 4), (4, 3, 2), (6, 3)]
    whole_rows = name == "Adam"

    def grads(step: int) -> list[torch.Tensor]:
        out = []
        for shape in shapes:
            g = _element_sparse(shape, step)
            if whole_rows and len(shape) >= 2:  # every element of a touched row
                touched = (g != 0).flatten(1).any(1).view(-1, *[1] * (len(shape) - 1))
                g = (torch.randn(shape, dtype=torch.float64) + 3) * touched
            out.append(g)
        out[1] = out[1] + 1.5  # a 0-D gradient with its entry
        sparse = [g.to_sparse() for g in out]  # sparse_dim = dim
        sparse[-1] = torch.sparse_coo_tensor(torch.zeros(0, 2, dtype=torch.long),
                                             torch.stack([out[-1], out[-1] / 3]), shapes[-1])
        # uncoalesced: each entry twice, halves
        sparse[2] = torch.sparse_coo_tensor(sparse[2]._indices().repeat(1, 2),
                                            sparse[2]._values().repeat(2) / 2, shapes[2])
        return sparse

    torch.manual_seed(1)
    start = [torch.randn(shape, dtype=torch.float64) for shape in shapes]
    ours = [nn.Parameter(x.clone()) for x in start]
    theirs = [nn.Parameter(x.clone()) for x in start]
    with use_backend(backend):
        opt = getattr(optim, name)(ours, lr=0.1, **options)
        ref = peer(theirs, lr=0.1, **options)
        for step in range(4):
            for p, q, g in zip(ours, theirs, grads(step), strict=True):
                p.grad, q.grad = g.clone(), g.clone()
            opt.step()
            ref.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_refuses_a_sparse_gradient_without_every_entry_of_its_rows(name: str) -> None:
    """Adam updates whole rows: a gradient of sparse_dim 2 that has some entries of a row
    would move the others by the row's moments, where SparseAdam moves only the entries: it
    is refused, and nothing is stepped."""
    torch.manual_seed(0)
    table, other = nn.Parameter(torch.randn(5, 3)), nn.Parameter(torch.randn(4, 2))
    opt = getattr(optim, name)([other, table], lr=0.1)
    whole = torch.zeros(5, 3)
    whole[1] = torch.tensor([1.0, 2.0, 3.0])
    table.grad, other.grad = whole.to_sparse(), torch.ones(4, 2).to_sparse(1)
    opt.step()  # every entry of row 1: taken
    before = [t.detach().clone() for t in (table, other)]
    states = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
              for p, s in opt.state.items()}
    partial = torch.sparse_coo_tensor(torch.tensor([[1, 3], [0, 2]]), torch.tensor([1.0, 2.0]),
                                      (5, 3))
    table.grad, other.grad = partial, torch.ones(4, 2).to_sparse(1)
    with pytest.raises(InputValueError, match=r"2 entries in 2 rows of 3.*SparseAdam.*"
                                              r"to_sparse\(1\).*Nothing was stepped"):
        opt.step()
    for t, b in zip((table, other), before, strict=True):
        assert torch.equal(t.detach(), b)
    for p, s in opt.state.items():
        assert s.keys() == states[id(p)].keys()
        for k, v in s.items():
            assert torch.equal(v, states[id(p)][k]) if isinstance(v, torch.Tensor) \
                else v == states[id(p)][k]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rowwise_adagrad_takes_a_1d_sparse_gradient_as_its_one_row(backend: str) -> None:
    """RowWiseAdagrad: a 1-D parameter is one row; its sparse gradient steps it as its dense
    gradient does."""
    ends = []
    for sparse in (False, True):
        p = nn.Parameter(torch.arange(6, dtype=torch.float64))
        with use_backend(backend):
            opt = optim.RowWiseAdagrad([p], lr=0.1, weight_decay=0.01)
            for step in range(3):
                g = _element_sparse((6,), step) + (step == 0)
                p.grad = g.to_sparse() if sparse else g
                opt.step()
        ends.append(p.detach().clone())
    torch.testing.assert_close(ends[0], ends[1], rtol=1e-12, atol=1e-12)


#: each optimizer's numeric values and the torch.optim class that checks them
CHECKED_VALUES: dict[str, tuple[str, list[str]]] = {
    "SGD": ("SGD", ["lr", "momentum", "weight_decay"]),
    "Adagrad": ("Adagrad", ["lr", "lr_decay", "weight_decay", "initial_accumulator_value",
                            "eps"]),
    "RowWiseAdagrad": ("Adagrad", ["lr", "weight_decay", "eps"]),
    "Adam": ("Adam", ["lr", "eps", "weight_decay"]),
    "AdamW": ("AdamW", ["lr", "eps", "weight_decay"]),
}


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
@pytest.mark.parametrize("name", sorted(CHECKED_VALUES))
def test_negative_or_nan_values_are_refused_where_torch_optim_refuses_them(
        name: str, bad: float) -> None:
    """A negative or NaN rate, epsilon, decay, momentum or starting sum is refused with a
    ``ValueError`` wherever ``torch.optim`` refuses it (and NaN everywhere, where
    ``torch.optim.SGD`` would train to NaN): in the constructor, in a parameter group and in
    a state dict, before anything is added or loaded."""
    twin, keys = CHECKED_VALUES[name]
    cls = getattr(optim, name)
    for key in keys:
        w = nn.Parameter(torch.ones(2, 2))
        try:
            getattr(torch.optim, twin)([w], **{key: bad})
            torch_refuses = False
        except ValueError:
            torch_refuses = True
        assert torch_refuses or (name == "SGD" and bad != bad)  # torch.optim.SGD takes NaN
        with pytest.raises(ValueError, match=f"{key} must be a number >= 0"):
            cls([w], **{key: bad})
        opt = cls([w], lr=0.1)
        with pytest.raises(InputValueError, match=f"add_param_group: {key} must be"):
            opt.add_param_group({"params": [nn.Parameter(torch.ones(2))], key: bad})
        with pytest.raises(InputValueError, match=f"add_param_group: {key} must be"):
            cls([{"params": [nn.Parameter(torch.ones(2))], key: bad}], lr=0.1)
        assert len(opt.param_groups) == 1
        saved = opt.state_dict()
        saved["param_groups"][0][key] = bad
        with pytest.raises(InputValueError, match=f"load_state_dict: {key} must be"):
            opt.load_state_dict(saved)
        assert opt.param_groups[0].get(key) != bad


@pytest.mark.parametrize(
    ("name", "kind"),
    [("RowWiseAdagrad", "EXACT_ROWWISE_ADAGRAD"), ("SGD", "EXACT_SGD"),
     ("Adagrad", "EXACT_ADAGRAD")],
)
def test_matches_fbgemm_when_installed(name: str, kind: str) -> None:
    """FBGEMM's fused CPU optimizers, 5 steps from the same table (benchmark environment)."""
    g = torch.Generator().manual_seed(0)
    rows, dim, lr, eps = 500, 8, 0.05, 1e-8
    init = torch.randn(rows, dim, generator=g)
    emb = _fbgemm_table(init, kind, lr, eps)
    layer = LookupLinear(rows, dim, bias=False, sparse=True, include_last_offset=True,
                         init=lambda w: w.copy_(init))  # FBGEMM's CSR offsets
    opt = getattr(optim, name)([layer.weight], lr=lr, **({} if name == "SGD" else {"eps": eps}))
    for _ in range(5):
        idx = torch.randint(0, 50, (32 * 6,), generator=g)  # many duplicates
        offsets = torch.arange(0, idx.numel() + 1, 6)
        target = torch.randn(32, dim, generator=g)
        F.mse_loss(emb(idx, offsets), target).backward()
        opt.zero_grad()
        F.mse_loss(layer(idx, offsets=offsets), target).backward()
        opt.step()
    torch.testing.assert_close(layer.weight.detach(), emb.split_embedding_weights()[0],
                               rtol=1e-5, atol=1e-6)


def test_fbgemm_cpu_rowwise_adagrad_leaves_weight_decay_out() -> None:
    """docs/optim.md: fbgemm-gpu-cpu's CPU EXACT_ROWWISE_ADAGRAD gives the same weights with
    weight_decay (L2 or DECOUPLE) as without, so RowWiseAdagrad agrees with it without weight
    decay only (RowWiseAdagrad adds weight_decay * w[i] to the row's gradient, FBGEMM's L2)."""
    init = torch.arange(160.0).view(20, 8) / 100
    idx, offsets = torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3])
    weights = []
    for mode in (None, "L2", "DECOUPLE"):
        emb = _fbgemm_table(init, "EXACT_ROWWISE_ADAGRAD", 0.1, 1e-8, weight_decay_mode=mode)
        emb(idx, offsets).backward(torch.ones(2, 8))
        weights.append(emb.split_embedding_weights()[0].detach().clone())
    assert torch.equal(weights[0], weights[1]) and torch.equal(weights[0], weights[2])
    layer = LookupLinear(20, 8, bias=False, sparse=True, include_last_offset=True,
                         init=lambda w: w.copy_(init))
    opt = optim.RowWiseAdagrad([layer.weight], lr=0.1, eps=1e-8, weight_decay=0.1)
    layer(idx, offsets=offsets).backward(torch.ones(2, 8))
    opt.step()
    assert not torch.allclose(layer.weight.detach(), weights[0])  # ours decays


def _fbgemm_table(init: torch.Tensor, optimizer: str, lr: float, eps: float, *,
                  half: bool = False, weight_decay_mode: str | None = None) -> Any:
    """FBGEMM's CPU table-batched embedding of one table holding ``init``, updated by its fused
    ``optimizer`` (an ``EmbOptimType`` name); ``half``: FP16 weights, no stochastic rounding.
    Skips the test where fbgemm-gpu-cpu is not installed (benchmark environment)."""
    with warnings.catch_warnings():  # its import warns about modules the CPU build lacks
        warnings.simplefilter("ignore")
        pytest.importorskip("fbgemm_gpu", reason="fbgemm-gpu-cpu is installed for benchmarks only")
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
        from fbgemm_gpu.tbe.config.optimizer_config import WeightDecayMode
    rows, dim = init.shape
    options: dict[str, Any] = {"weights_precision": SparseType.FP16,
                               "stochastic_rounding": False} if half else {}
    if weight_decay_mode is not None:  # FBGEMM's weight decay, 0.1
        options |= {"weight_decay": 0.1,
                      "weight_decay_mode": getattr(WeightDecayMode, weight_decay_mode)}
    emb = SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
        optimizer=getattr(EmbOptimType, optimizer), learning_rate=lr, eps=eps,
        pooling_mode=PoolingMode.SUM, **options)
    with torch.no_grad():
        emb.split_embedding_weights()[0].copy_(init)
    return emb


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_fused_update_in_backward_gives_the_same_weights(name: str) -> None:
    """fused=True updates the table inside backward (no gradient stored): same result."""
    kw: dict[str, Any] = {"lr": 0.1, "weight_decay": 0.01}
    if name == "SGD":
        kw.update(momentum=0.5)
    runs, opts = [], []
    for fused in (False, True):
        model = lookup_model()
        opt = getattr(optim, name)(model.parameters(), fused=fused, **kw)
        data = batches()

        def check(step: int, model: Model = model, fused: bool = fused) -> None:
            assert (model.table.weight.grad is None) == fused  # nothing stored when fused
            assert model.head.weight.grad is not None

        train(model, [opt], data, check)
        runs.append(model)
        opts.append(opt)
    for pa, pb in zip(runs[0].parameters(), runs[1].parameters(), strict=True):
        assert torch.equal(pa, pb)
    sa, sb = (o.state[m.table.weight] for o, m in zip(opts, runs, strict=True))
    assert sa["step"] == sb["step"] == STEPS
    for key, value in sa.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, sb[key]), key


def test_fused_keeps_the_input_values_gradient() -> None:
    """The gradient of weighted entries is computed before the fused update moves the table."""
    grads = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, sparse=True)
        opt = optim.Adam(layer.parameters(), lr=0.1, fused=fused)
        vals = torch.tensor([0.5, 2.0, 1.0, -1.0], requires_grad=True)
        bags = Bags(torch.tensor([3, 3, 7, 1]), torch.tensor([0, 2, 4]), vals)
        opt.zero_grad()
        layer(bags).pow(2).sum().backward()
        opt.step()
        assert vals.grad is not None
        grads.append((vals.grad.clone(), layer.weight.detach().clone()))
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])


def _weighted_loss(layer: nn.Module, vals: torch.Tensor) -> torch.Tensor:
    return layer(Bags(torch.tensor([3, 3, 7, 1]), torch.tensor([0, 2, 4]), vals)).pow(2).sum()


def _same_sparse(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two row-sparse gradients hold the same rows and values, to the bit."""
    a, b = a.coalesce(), b.coalesce()
    return torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())


@pytest.mark.parametrize("how", ["grad per_sample_weights", "grad weight",
                                 "backward inputs=per_sample_weights"])
def test_a_gradient_not_accumulated_into_a_fused_table_moves_nothing(how: str) -> None:
    """``torch.autograd.grad`` (and ``backward(inputs=...)`` without the table) accumulates
    nothing into the table: with a fused optimizer bound to it, the table and the optimizer
    state stay as they were to the bit, and the gradient is the unfused layer's (as
    ``nn.EmbeddingBag`` with ``SparseAdam`` does). ``backward()`` then trains as unfused."""
    layers, opts = [], []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, sparse=True)
        opt = optim.Adam(layer.parameters(), lr=0.1, fused=fused)
        _weighted_loss(layer, torch.tensor([0.5, 2.0, 1.0, -1.0])).backward()
        opt.step()  # the optimizer state exists
        layers.append(layer)
        opts.append(opt)
    grads = []
    for layer, opt in zip(layers, opts, strict=True):
        opt.zero_grad()
        before = snapshot(layer, opt)
        vals = torch.tensor([0.5, 2.0, 1.0, -1.0], requires_grad=True)
        loss = _weighted_loss(layer, vals)
        if how == "grad weight":
            grads.append(torch.autograd.grad(loss, [layer.weight])[0])
        elif how == "grad per_sample_weights":
            grads.append(torch.autograd.grad(loss, [vals])[0])
        else:
            loss.backward(inputs=[vals])
            grads.append(vals.grad)
            assert layer.weight.grad is None
        assert_unchanged(before, layer, opt)
    unfused, fused = grads
    assert _same_sparse(unfused, fused) if how == "grad weight" else torch.equal(unfused, fused)
    for layer, opt in zip(layers, opts, strict=True):
        opt.zero_grad()
        _weighted_loss(layer, torch.tensor([1.0, -2.0, 0.5, 3.0])).backward()
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(layers[0].parameters(), layers[1].parameters(),
                                                 strict=True))
    assert torch.equal(opts[0].state[layers[0].weight]["exp_avg_sq"],
                       opts[1].state[layers[1].weight]["exp_avg_sq"])


def test_backward_inputs_naming_a_fused_table_updates_it() -> None:
    """``backward(inputs=[table])`` accumulates into the table: the fused optimizer updates it,
    as ``fused=False``'s step applies the stored gradient."""
    weights = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, sparse=True)
        opt = optim.Adagrad(layer.parameters(), lr=0.1, fused=fused)
        _weighted_loss(layer, torch.tensor([0.5, 2.0, 1.0, -1.0])).backward(
            inputs=[layer.weight])
        assert layer.bias.grad is None
        opt.step()
        weights.append(layer.weight.detach().clone())
    assert torch.equal(*weights)


def _two_segments(layers: list[LookupLinear], x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    from torch.utils.checkpoint import checkpoint

    return sum(checkpoint(lambda t, m=m: m(x) * t, h, use_reentrant=True).sum()
               for m in layers)


def _nested_segments(layers: list[LookupLinear], x: torch.Tensor, h: torch.Tensor
                     ) -> torch.Tensor:
    from torch.utils.checkpoint import checkpoint

    a, b = layers
    return checkpoint(lambda t: _two_segments([a], x, t) * t + b(x), h, use_reentrant=True).sum()


@pytest.mark.parametrize("forward", ["plain", "reentrant checkpoints", "nested checkpoints"])
def test_a_second_backward_before_step_warns_once(forward: str) -> None:
    """Two backward passes without ``step()``/``zero_grad()`` between them: a fused optimizer
    updates twice where ``torch.optim`` applies the summed gradient once, so it warns, once,
    naming the line that called ``backward()``. One ``backward()`` that runs reentrant
    checkpoints' backward passes inside it (each updating at its own end) counts once."""
    torch.manual_seed(0)
    layers = [LookupLinear(V, D, bias=False, sparse=True) for _ in range(2)]
    opt = optim.Adagrad([p for m in layers for p in m.parameters()], lr=0.1, fused=True)
    x, h = torch.tensor([1, 2, 3]), torch.ones(3, D, requires_grad=True)

    def loss() -> torch.Tensor:
        if forward == "plain":
            return sum(m(x).pow(2).sum() for m in layers)
        return (_two_segments if forward.startswith("reentrant") else _nested_segments)(
            layers, x, h)

    for reset in (opt.zero_grad, opt.step, opt.zero_grad):
        reset()
        loss().backward()  # the first update since: no warning (the suite raises one)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss().backward()
        loss().backward()
    assert [w.category for w in caught] == [FusedAccumulationWarning]
    assert caught[0].filename == __file__
    assert "fused=False to accumulate gradients" in str(caught[0].message)
    assert opt.state[layers[0].weight]["step"] == 5  # each backward updated
    plain = LookupLinear(V, D, sparse=True)
    optim.Adagrad(plain.parameters(), lr=0.1)
    for _ in range(2):
        plain(x).sum().backward()  # fused=False accumulates: no warning (the suite raises one)


def test_fused_works_on_the_torch_op_path_too() -> None:
    """A bfloat16 table (no C kernel) is updated in backward too, as the unfused step does."""
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, sparse=True, dtype=torch.bfloat16)
        opt = optim.SGD(layer.parameters(), lr=0.5, fused=fused)
        before = layer.weight.detach().clone()
        layer(torch.tensor([[1, 2], [2, 5]])).float().sum().backward()
        assert (layer.weight.grad is None) == fused
        opt.step()
        assert not torch.equal(layer.weight.detach(), before)
        runs.append(layer.weight.detach())
    assert torch.equal(runs[0], runs[1])


def test_fused_optimizer_and_model_pickle_together() -> None:
    """Unpickled, a fused optimizer registers on the unpickled table again: same next step."""
    import pickle

    model = lookup_model()
    opt = optim.RowWiseAdagrad(model.parameters(), lr=0.1, fused=True)
    data = batches()
    train(model, [opt], data[:2])
    model2, opt2 = pickle.loads(pickle.dumps((model, opt)))
    train(model, [opt], data[2:])
    train(model2, [opt2], data[2:])
    assert model2.table.weight.grad is None  # updated inside backward
    for pa, pb in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(pa, pb)


# ---------------------------------------------------------------- fusion: binding and sharing


class SharedItems(nn.Module):
    """A recommender's usual model: one item table for the candidate and the history bag."""

    def __init__(self) -> None:
        super().__init__()
        self.items = LookupLinear(V, D, bias=False, sparse=True)
        self.head = nn.Linear(2 * D, 1)

    def forward(self, candidate: torch.Tensor, history: Bags) -> torch.Tensor:
        both = torch.cat([self.items(candidate), self.items(history)], dim=1)  # (B, 2D)
        return self.head(both).squeeze(1)


def shared_batches() -> list[tuple[torch.Tensor, Bags, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(5):
        cand = torch.randint(0, V, (6,), generator=g)
        hist = Bags.from_lists([[*torch.randint(0, V, (3,), generator=g).tolist(), int(c)]
                                for c in cand])  # the candidate is in its own history too
        out.append((cand, hist, torch.randn(6, generator=g)))
    return out


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_fused_table_used_twice_trains_as_unfused(name: str, backend: str) -> None:
    """Both uses' gradients are summed and the table updated once, after the whole backward:
    the same weights and state as ``fused=False``, to the bit."""
    runs = []
    with use_backend(backend):
        for fused in (False, True):
            torch.manual_seed(0)
            model = SharedItems()
            opt = getattr(optim, name)(model.parameters(), lr=0.1, fused=fused)
            for cand, hist, target in shared_batches():
                opt.zero_grad()
                F.mse_loss(model(cand, hist), target).backward()
                opt.step()
            assert model.items.weight.grad is None or not fused
            runs.append((model, opt.state[model.items.weight]))
    (a, sa), (b, sb) = runs
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    for key in sa:
        assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_fused_tables_of_several_groups_widths_and_steps_train_as_unfused(name: str) -> None:
    """One backward updates tables of two groups (each with its own, scheduled ``lr``), of
    three widths, whose step counts differ (one table skips every other batch, one comes
    later): the scalars and states asked once per group give each table its own, to the
    bit."""
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        tables = [LookupLinear(V, d, bias=False, sparse=True) for d in (2, 3, 5, 3)]
        opt = getattr(optim, name)(
            [{"params": [t.weight for t in tables[:2]], "lr": 0.2},
             {"params": [tables[2].weight], "weight_decay": 0.01}], lr=0.1, fused=fused)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        for step, (bags, _) in enumerate(batches()):
            if step == 2:
                opt.add_param_group({"params": [tables[3].weight], "lr": 0.05})
            used = [t for i, t in enumerate(tables)
                    if (i != 1 or step % 2 == 0) and (i != 3 or step >= 2)]
            opt.zero_grad()
            sum(t(bags).pow(2).sum() for t in used).backward()
            opt.step()
            sched.step()
        runs.append((tables, opt))
    (ta, oa), (tb, ob) = runs
    for a, b in zip(ta, tb, strict=True):
        assert torch.equal(a.weight, b.weight)
        sa, sb = oa.state[a.weight], ob.state[b.weight]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key
    assert [oa.state[t.weight]["step"] for t in ta] == [STEPS, STEPS // 2, STEPS, STEPS - 2]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_kernels_split_over_threads_give_the_same_bits(name: str) -> None:
    """Batches large enough for the C kernels to split them over PyTorch's threads (the
    forward's rows, the fused update's rows, the stored gradient's update): the same weights on
    one thread and on two, fused and unfused, to the bit."""
    g = torch.Generator().manual_seed(0)
    rows = 60_000
    idx = (torch.rand(40_000, generator=g).pow(3) * rows).long()  # duplicates, as Zipf IDs
    offsets = torch.arange(0, idx.numel() + 1, 4)
    threads = torch.get_num_threads()
    ends = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for fused in (False, True):
                torch.manual_seed(0)
                layer = LookupLinear(rows, 16, bias=False, sparse=True, include_last_offset=True)
                opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
                for x in ((idx, offsets), (idx,)):
                    opt.zero_grad()
                    layer(*x).pow(2).sum().backward()
                    opt.step()
                ends.append(layer.weight.detach().clone())
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(ends[0], e) for e in ends[1:])


def test_a_backward_inside_the_backward_loses_no_update() -> None:
    """A reentrant checkpoint runs a backward inside the backward: the table deferred by the
    outer backward before it and the table of the inner one (one fused optimizer) are both
    updated, once each, as ``fused=False`` updates them."""
    from torch.utils.checkpoint import checkpoint

    x = torch.tensor([1, 2, 3])
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        a, b, c = (LookupLinear(V, D, bias=False, sparse=True) for _ in range(3))
        params = [*a.parameters(), *b.parameters(), *c.parameters()]
        opt = optim.Adagrad(params, lr=0.1, fused=fused)
        for _ in range(2):
            opt.zero_grad()
            inner = checkpoint(lambda h, b=b: b(x) * h, a(x), use_reentrant=True)
            (inner.sum() + c(x).pow(2).sum()).backward()  # c's backward runs first
            opt.step()
        runs.append([p.detach().clone() for p in params])
        assert all(opt.state[p]["step"] == 2 for p in params)
    assert all(torch.equal(p, q) for p, q in zip(*runs, strict=True))


def test_nothing_is_updated_when_the_backward_fails() -> None:
    """A backward that raises after the table's own backward ran leaves the table and the
    optimizer state as they were; the next backward updates from its own gradient only."""

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    torch.manual_seed(0)
    layer = LookupLinear(V, D, bias=False, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.tensor([1, 2, 3])
    before = layer.weight.detach().clone()
    other = torch.ones(3, D, requires_grad=True)
    loss = layer(x).sum() + Boom.apply(other).sum()
    with pytest.raises(RuntimeError, match="boom"):
        loss.backward()
    assert torch.equal(layer.weight.detach(), before)
    assert not opt.state[layer.weight]
    ref = LookupLinear(V, D, bias=False, sparse=True)
    with torch.no_grad():
        ref.weight.copy_(before)
    ref_opt = optim.Adam(ref.parameters(), lr=0.1)
    for m, o in ((layer, opt), (ref, ref_opt)):
        m(x).pow(2).sum().backward()
        o.step()
    assert torch.equal(layer.weight, ref.weight)


def test_the_binding_lives_with_the_parameter() -> None:
    """Two models in one process each update through their own optimizer; a deep copy of a
    model is not bound to the original's optimizer, a copy of both together is bound to its
    own copy; state_dict round trips are untouched."""
    import copy

    torch.manual_seed(0)
    a, b = LookupLinear(V, D, sparse=True), LookupLinear(V, D, sparse=True)
    opt_a = optim.SGD(a.parameters(), lr=1.0, fused=True)
    opt_b = optim.SGD(b.parameters(), lr=1.0, fused=True)
    x = torch.tensor([4])
    wa, wb = a.weight.detach().clone(), b.weight.detach().clone()
    a(x).sum().backward()
    assert torch.equal(b.weight, wb) and not torch.equal(a.weight, wa)
    assert not opt_b.state[b.weight]

    lone = copy.deepcopy(a)
    lone(x).sum().backward()  # no optimizer: the gradient is stored
    assert lone.weight.grad is not None
    model2, opt2 = copy.deepcopy((a, opt_a))
    w2 = model2.weight.detach().clone()
    model2(x).sum().backward()
    assert model2.weight.grad is None and not torch.equal(model2.weight, w2)
    assert opt2.state[model2.weight]["step"] == 2 and opt_a.state[a.weight]["step"] == 1

    state = a.state_dict()
    c = LookupLinear(V, D, sparse=True)
    c.load_state_dict(state)
    assert torch.equal(c.weight, a.weight)


def test_check_equivalence_leaves_a_fused_layer_and_its_optimizer_alone() -> None:
    from lookuplinear import check_equivalence

    torch.manual_seed(0)
    layer = LookupLinear(V, D, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    before = [p.detach().clone() for p in layer.parameters()]
    report = check_equivalence(layer, Bags.from_lists([[1, 2, 2], [], [7]]))
    assert report.ok, str(report)
    for p, q in zip(layer.parameters(), before, strict=True):
        assert torch.equal(p, q) and p.grad is None
    assert not opt.state[layer.weight]


def test_double_backward_through_a_sparse_table() -> None:
    """``create_graph=True``: the row-sparse gradient keeps its graph, as
    ``nn.Embedding(sparse=True)``'s does, so a gradient penalty gets the same gradient."""
    torch.manual_seed(0)
    layer = LookupLinear(V, D, bias=False, sparse=True)
    emb = nn.Embedding(V, D, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(layer.weight)
    x = torch.tensor([[1, 2, 2], [3, 1, 0]])
    penalties = []
    for m in (layer, emb):
        (g,) = torch.autograd.grad(m(x).pow(2).sum(), m.weight, create_graph=True)
        assert g.requires_grad
        penalty = torch.sparse.sum(g * g)
        penalty.backward()
        penalties.append((penalty.detach(), m.weight.grad))
    torch.testing.assert_close(penalties[0][0], penalties[1][0])
    assert penalties[0][1] is not None and penalties[1][1] is not None
    torch.testing.assert_close(penalties[0][1].to_dense(), penalties[1][1].to_dense())


def test_a_fused_gradient_penalty_trains_as_unfused() -> None:
    """With a fused optimizer the penalty's backward updates the table, as ``step`` after an
    unfused backward does."""
    x = torch.tensor([[1, 2, 2], [3, 1, 0]])
    weights = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, bias=False, sparse=True)
        opt = optim.SGD(layer.parameters(), lr=0.1, fused=fused)
        (g,) = torch.autograd.grad(layer(x).pow(2).sum(), layer.weight, create_graph=True)
        torch.sparse.sum(g * g).backward()
        assert (layer.weight.grad is None) == fused
        opt.step()
        weights.append(layer.weight.detach())
    assert torch.equal(weights[0], weights[1])


@pytest.mark.parametrize("name", ["SGD", "RowWiseAdagrad", "Adam"])
def test_a_penalty_on_a_fused_table_is_one_update_with_the_summed_gradient(name: str) -> None:
    """A loss that reads a fused table by a lookup and by a penalty on its values: the fused
    update takes the penalty's (dense) gradient with the lookup's, and applies their sum once
    in the backward, to the bits of ``fused=False``'s step (``torch.optim`` applies the sum)."""
    x = torch.tensor([[1, 2, 2], [3, 1, 0]])
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(V, D, bias=False, sparse=True)
        opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
        for _ in range(3):
            opt.zero_grad()
            (layer(x).pow(2).sum() + 0.01 * layer.weight.pow(2).sum()).backward()
            assert (layer.weight.grad is None) == fused
            opt.step()
        runs.append((layer.weight.detach(), opt.state[layer.weight]))
    (wa, sa), (wb, sb) = runs
    assert torch.equal(wa, wb)
    assert sa["step"] == sb["step"] == 3


#: losses that read a table by several lookups and by a dense use made after all lookups but
#: the last: autograd adds the lookups' gradients to the dense one as they come
LOOKUPS_AND_A_DENSE_USE: dict[str, Callable[[LookupLinear, torch.Tensor, torch.Tensor],
                                            torch.Tensor]] = {
    "lookup, dense, lookup": lambda m, x, h: (m(x).tanh().sum() + (h @ m.weight.T).sin().sum()
                                              + m(x[:2]).cos().sum()),
    "lookup, lookup, dense": lambda m, x, h: (m(x).tanh().sum() + m(x[:2]).cos().sum()
                                              + (h @ m.weight.T).sin().sum()),
    "lookup, lookup, dense, lookup": lambda m, x, h: (
        m(x).tanh().sum() + m(x[:2]).cos().sum() + (h @ m.weight.T).sin().sum()
        + m(x[1:]).sin().sum()),
}


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("loss", sorted(LOOKUPS_AND_A_DENSE_USE))
def test_several_lookups_and_a_dense_use_of_a_fused_table_train_as_unfused(
        loss: str, backend: str) -> None:
    """A table read by several lookups and a dense use in one backward: the fused update adds
    the lookups' gradients to the dense one in the order autograd accumulates them, so the
    weights are ``fused=False``'s to the bit (20 draws: another order differs in the last
    bits of most)."""
    def run(fused: bool, seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        layer = LookupLinear(10, 3, bias=False, sparse=True)
        opt = optim.SGD(layer.parameters(), lr=1.0, fused=fused)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 10, (4,), generator=g)
        h = torch.randn(2, 3, generator=g)
        LOOKUPS_AND_A_DENSE_USE[loss](layer, x, h).backward()
        assert (layer.weight.grad is None) == fused
        opt.step()
        return layer.weight.detach()

    with use_backend(backend):
        for seed in range(20):
            assert torch.equal(run(False, seed), run(True, seed)), seed


def test_a_fused_optimizer_leaves_a_dense_parameter_for_step() -> None:
    """A parameter with rows that no lookup reads (a ``nn.Linear`` weight) in a fused
    optimizer's group keeps its gradient in ``.grad`` until ``step()``, as ``torch.optim``'s
    (gradient clipping sees it)."""
    torch.manual_seed(0)
    model = nn.Sequential(LookupLinear(V, D, sparse=True), nn.Linear(D, 2))
    opt = optim.SGD(model.parameters(), lr=0.1, fused=True)
    model(torch.tensor([[1, 2], [3, 4]])).sum().backward()
    assert model[0].weight.grad is None and model[1].weight.grad is not None
    before = model[1].weight.detach().clone()
    opt.step()
    assert not torch.equal(model[1].weight, before)


# ---------------------------------------------------------------- one fused optimizer per table


def test_an_unfused_optimizer_over_a_fused_table_is_refused() -> None:
    """A fused=False optimizer over a table a fused one updates in its backward would never see
    a gradient of it: its step() would silently leave the table as it is."""
    layer = LookupLinear(V, D, bias=False, sparse=True)
    first = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    with pytest.raises(InputValueError, match=r"already bound to Adam\(lr=0.1\).*fused=False"):
        optim.SGD(layer.parameters(), lr=1.0)
    first.unbind()
    optim.SGD(layer.parameters(), lr=1.0)  # released: taken


def test_a_second_fused_optimizer_is_refused_and_the_first_stays_bound() -> None:
    """Two fused optimizers on one table would each take its gradient in turn (the second's
    rate applied, or nothing without its zero_grad): the second is refused, nothing of it is
    bound, and the first goes on updating the table."""
    import gc

    torch.manual_seed(0)
    layer = LookupLinear(V, D, bias=False, sparse=True)
    other = LookupLinear(V, D, bias=False, sparse=True)
    first = optim.SGD(layer.parameters(), lr=1.0, fused=True)
    with pytest.raises(InputValueError, match=r"already bound to SGD\(lr=1.0\)") as err:
        optim.SGD([{"params": other.parameters()}, {"params": layer.parameters()}], lr=100.0,
                  fused=True)
    assert isinstance(err.value, ValueError) and "unbind()" in str(err.value)
    second = optim.SGD(other.parameters(), lr=100.0, fused=True)  # other was left unbound
    with pytest.raises(InputValueError, match="already bound"):
        second.add_param_group({"params": [layer.weight]})
    assert len(second.param_groups) == 1  # the refused group is not added

    x = torch.tensor([4])
    for zero_grad in (True, False):
        w = layer.weight.detach().clone()
        first.zero_grad()
        if zero_grad:
            second.zero_grad()
        layer(x).sum().backward()
        assert layer.weight.grad is None
        moved = w - layer.weight.detach()  # by the first's lr, whatever the second's
        torch.testing.assert_close(moved, torch.eye(V)[4].unsqueeze(1).expand(V, D))

    first.unbind()  # released: the gradient is stored again, and another may bind
    layer(x).sum().backward()
    assert layer.weight.grad is not None
    layer.weight.grad = None
    third = optim.SGD(layer.parameters(), lr=0.5, fused=True)
    with pytest.raises(InputValueError, match="already bound"):
        optim.SGD(layer.parameters(), lr=0.1, fused=True)
    del third
    gc.collect()  # an optimizer that is gone releases its tables too
    fourth = optim.SGD(layer.parameters(), lr=0.1, fused=True)
    w = layer.weight.detach().clone()
    layer(x).sum().backward()
    assert torch.allclose(w - layer.weight.detach(), 0.1 * torch.eye(V)[4].unsqueeze(1))
    fourth.load_state_dict(fourth.state_dict())  # loading keeps its own binding
    fourth.zero_grad()
    layer(x).sum().backward()
    assert layer.weight.grad is None


def test_a_table_listed_twice_in_a_fused_group_is_refused() -> None:
    """torch.optim and fused=False step a table listed twice in a group twice; the fused update
    in the backward applies its gradient once: refused (constructor and add_param_group),
    nothing bound; fused=False keeps stepping it twice, as torch.optim."""
    layer = LookupLinear(V, D, bias=False, sparse=True)
    other = LookupLinear(V, D, bias=False, sparse=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.optim's warning on duplicates
        with pytest.raises(InputValueError, match=r"table of shape \(40, 6\) more than once"):
            optim.Adagrad([{"params": [other.weight]},
                           {"params": [layer.weight, layer.weight]}], lr=0.1, fused=True)
        opt = optim.Adagrad([other.weight], lr=0.1, fused=True)  # other was left unbound
        with pytest.raises(InputValueError, match="List each table once"):
            opt.add_param_group({"params": [layer.weight, layer.weight]})
        assert len(opt.param_groups) == 1
        unfused = optim.Adagrad([layer.weight, layer.weight], lr=0.1)  # the table is unbound
    layer(torch.tensor([1])).sum().backward()
    unfused.step()
    assert unfused.state[layer.weight]["step"] == 2


# ---------------------------------------------------------------- state dicts with torch.optim

TWINS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "Adagrad": {"lr": 0.1, "initial_accumulator_value": 0.1, "weight_decay": 0.01},
    "Adam": {"lr": 0.01, "weight_decay": 0.01},
    "AdamW": {"lr": 0.01, "weight_decay": 0.1},
}


def dense_model() -> Model:
    """Dense gradients only: there lookuplinear.optim is torch.optim to the bit."""
    torch.manual_seed(0)
    return Model(nn.Linear(V, D, bias=False))


def _copied(state_dict: dict[str, Any]) -> dict[str, Any]:
    """What ``torch.save``/``torch.load`` gives: no tensor shared with the optimizer."""
    buf = io.BytesIO()
    torch.save(state_dict, buf)
    buf.seek(0)
    loaded: dict[str, Any] = torch.load(buf, weights_only=True)
    return loaded


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", sorted(TWINS))
def test_state_dicts_go_both_ways_with_torch_optim(name: str, fused: bool) -> None:
    """A lookuplinear optimizer's state dict resumes in the torch.optim optimizer of the same
    name and back, each time as the run that was not interrupted (bit for bit); the fused flag
    is lookuplinear's own key, so torch's "fused" keeps its meaning both ways."""
    kw = TWINS[name]
    data = batches(steps=9)
    ours = dense_model()
    opt = getattr(optim, name)(ours.parameters(), fused=fused, **kw)
    train(ours, [opt], data[:3])
    saved = _copied({"model": ours.state_dict(), "opt": opt.state_dict()})
    assert saved["opt"]["param_groups"][0]["in_backward"] is fused
    train(ours, [opt], data[3:6])
    mid = _copied({"model": ours.state_dict(), "opt": opt.state_dict()})
    train(ours, [opt], data[6:])

    theirs = dense_model()
    theirs.load_state_dict(saved["model"])
    ref = getattr(torch.optim, name)(theirs.parameters(), **kw)
    ref.load_state_dict(saved["opt"])
    assert not ref.param_groups[0]["fused"]  # torch's meaning: its own fused kernels, unused
    train(theirs, [ref], data[3:6])
    for key, value in theirs.state_dict().items():
        assert torch.equal(value, mid["model"][key]), key

    back = dense_model()
    back.load_state_dict(theirs.state_dict())
    again = getattr(optim, name)(back.parameters(), fused=not fused, **kw)
    again.load_state_dict(_copied(ref.state_dict()))
    assert again.param_groups[0]["in_backward"] is not fused  # as this one was built
    assert "fused" not in again.param_groups[0] or not again.param_groups[0]["fused"]
    train(back, [again], data[6:])
    for pa, pb in zip(ours.parameters(), back.parameters(), strict=True):
        assert torch.equal(pa, pb)
    for state in again.state.values():
        assert isinstance(state["step"], int)


@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_a_fused_table_state_resumes_in_torch_optim_and_back(name: str) -> None:
    """A sparse table trained by a fused lookuplinear optimizer resumes under stock torch.optim
    (which trains sparse gradients with SGD and Adagrad), and a torch.optim state loaded into a
    fused optimizer keeps it fused."""
    kw = {"lr": 0.1}
    data = batches(steps=6)
    ours = lookup_model()
    opt = getattr(optim, name)(ours.parameters(), fused=True, **kw)
    train(ours, [opt], data[:3])
    theirs = bag_model()
    theirs.table.weight.data.copy_(ours.table.weight.detach())
    theirs.head.load_state_dict(ours.head.state_dict())
    ref = getattr(torch.optim, name)(theirs.parameters(), **kw)
    ref.load_state_dict(_copied(opt.state_dict()))
    torch_state = _copied(ref.state_dict())
    train(theirs, [ref], data[3:])

    back = lookup_model()
    back.table.weight.data.copy_(ours.table.weight.detach())
    back.head.load_state_dict(ours.head.state_dict())
    again = getattr(optim, name)(back.parameters(), fused=True, **kw)
    again.load_state_dict(torch_state)
    train(back, [again], data[3:])
    assert back.table.weight.grad is None  # updated in backward, as built
    train(ours, [opt], data[3:])
    assert_same_model(back, ours, rtol=0, atol=0)
    assert_same_model(theirs, ours, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_torch_sgds_sparse_momentum_buffer_resumes_here(backend: str) -> None:
    """``torch.optim.SGD(momentum)`` keeps a sparse table's momentum buffer sparse: its state
    dict loads as a dense buffer of the same values, and the steps after it are torch's (on
    batches that touch every row the buffer holds, where lazy momentum is torch's; to
    rounding, as torch adds an uncoalesced buffer's entries one by one)."""
    torch.manual_seed(0)
    emb = nn.Embedding(10, 3, sparse=True)
    theirs = torch.optim.SGD(emb.parameters(), lr=0.1, momentum=0.9)
    data = [[1, 2, 2, 5], [5, 1, 2], [2, 5, 1, 1], [1, 1, 5, 2]]
    emb(torch.tensor(data[0])).sum().backward()
    theirs.step()
    buf = theirs.state[emb.weight]["momentum_buffer"]
    assert buf.is_sparse
    layer = LookupLinear(10, 3, bias=False, sparse=True)
    with torch.no_grad():
        layer.weight.copy_(emb.weight)
    ours = optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    ours.load_state_dict(_copied(theirs.state_dict()))
    loaded = ours.state[layer.weight]["momentum_buffer"]
    assert loaded.layout == torch.strided and torch.equal(loaded, buf.to_dense())
    loaded_weight = layer.weight.detach().clone()
    with use_backend(backend):
        for x in data[1:]:
            emb.zero_grad()
            emb(torch.tensor(x)).square().sum().backward()
            theirs.step()
            ours.zero_grad()
            layer(torch.tensor(x)).square().sum().backward()
            ours.step()
            torch.testing.assert_close(layer.weight, emb.weight, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(ours.state[layer.weight]["momentum_buffer"],
                                       theirs.state[emb.weight]["momentum_buffer"].to_dense(),
                                       rtol=1e-5, atol=1e-6)
    untouched = [r for r in range(10) if r not in (1, 2, 5)]
    assert torch.equal(layer.weight[untouched], emb.weight[untouched])
    assert not torch.equal(layer.weight[1], loaded_weight[1])  # it did train
    assert ours.state[layer.weight]["step"] == 4


def test_a_sparse_update_that_raises_counts_no_step() -> None:
    """A row update that fails (here on a state tensor no update can read) leaves the step
    count and the table as they were."""
    layer = LookupLinear(10, 3, bias=False, sparse=True)
    opt = optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.tensor([1])).sum().backward()
    opt.step()
    state = opt.state[layer.weight]
    state["momentum_buffer"] = state["momentum_buffer"].to_sparse()
    before = layer.weight.detach().clone()
    layer(torch.tensor([1, 3])).sum().backward()
    with pytest.raises(NotImplementedError, match="SparseCPU"):
        opt.step()
    assert state["step"] == 1
    assert torch.equal(layer.weight, before)


def test_state_dicts_that_would_change_the_updates_are_refused() -> None:
    """What has no twin here is refused with the reason, and nothing is loaded."""
    model = dense_model()
    params = list(model.parameters())

    def torch_state(opt: torch.optim.Optimizer) -> dict[str, Any]:
        train(model, [opt], batches(steps=1))
        return _copied(opt.state_dict())

    cases = [
        (optim.Adam, torch.optim.Adam(params, amsgrad=True), "amsgrad=True"),
        (optim.SGD, torch.optim.SGD(params, lr=0.1, maximize=True), "maximize=True"),
        (optim.Adam, torch.optim.AdamW(params), "decoupled_weight_decay=True"),
        (optim.AdamW, torch.optim.Adam(params), "decoupled_weight_decay=False"),
        (optim.RowWiseAdagrad, torch.optim.Adagrad(params, lr_decay=0.1), "lr_decay=0.1"),
        (optim.RowWiseAdagrad, torch.optim.Adagrad(params), r"'sum' .* has shape \(6, 40\)"),
        (optim.Adam, torch.optim.SGD(params, lr=0.1), "has no betas"),
    ]
    for cls, theirs, message in cases:
        ours = cls(params, lr=0.5)
        train(model, [ours], batches(steps=1))
        before = _copied(ours.state_dict())
        with pytest.raises(InputValueError, match=message):
            ours.load_state_dict(torch_state(theirs))
        after = ours.state_dict()
        assert after["param_groups"] == before["param_groups"]
        for i, state in before["state"].items():
            for key, value in state.items():
                assert torch.equal(torch.as_tensor(after["state"][i][key]),
                                   torch.as_tensor(value))


@pytest.mark.parametrize(("name", "option"), [
    ("SGD", {"maximize": True}), ("Adagrad", {"maximize": True}), ("Adam", {"maximize": True}),
    ("Adam", {"amsgrad": True}), ("Adam", {"decoupled_weight_decay": True}),
    ("AdamW", {"decoupled_weight_decay": False}), ("RowWiseAdagrad", {"lr_decay": 0.1}),
])
def test_groups_that_set_an_option_the_update_would_ignore_are_refused(
        name: str, option: dict[str, Any]) -> None:
    """A group (in the constructor or added) that sets what this class does not compute with
    is refused, as load_state_dict refuses it, not stepped as if unset; the defaults pass."""
    (key, value), = option.items()
    cls = getattr(optim, name)
    p = nn.Parameter(torch.ones(2, 3))
    with pytest.raises(InputValueError, match=f"group sets {key}={value!r}"):
        cls([{"params": [p], **option}], lr=0.1)
    opt = cls([p], lr=0.1)
    q = nn.Parameter(torch.ones(2))
    with pytest.raises(InputValueError, match=f"add_param_group: a parameter group sets {key}"):
        opt.add_param_group({"params": [q], **option})
    assert len(opt.param_groups) == 1
    same = {"maximize": False, "amsgrad": False, "lr_decay": 0.0,
            "decoupled_weight_decay": name == "AdamW"}[key]
    opt.add_param_group({"params": [q], key: same})  # the value the class computes with


def test_a_state_dict_of_earlier_versions_loads() -> None:
    """Earlier versions kept fused=True under torch's "fused" key: read as this version's own
    key, and torch's key is not left behind with that meaning."""
    model = dense_model()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, [opt], batches(steps=2))
    old = _copied(opt.state_dict())
    for group in old["param_groups"]:
        group["fused"] = group.pop("in_backward")
    again = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    again.load_state_dict(old)
    assert "fused" not in again.param_groups[0] and again.param_groups[0]["in_backward"]
    torch.optim.SGD(model.parameters(), lr=0.1).load_state_dict(again.state_dict())


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_index_tensors_gradient_is_summed_in_entry_order(name: str, padding_idx: int | None,
                                                             backend: str) -> None:
    """An index tensor's gradient (``nn.Embedding(sparse=True)``'s: one row per position, in
    order) with many positions per row: the stored-gradient update sums each row's positions
    in entry order, as ``fused=True`` sums them (a coalesce adds them in another order), so the
    two train the table to the same bits."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 5, (64, 32), generator=g)  # about 400 positions per row
    ends = []
    with use_backend(backend):
        for fused in (False, True):
            torch.manual_seed(0)
            layer = LookupLinear(5, 8, bias=False, sparse=True, padding_idx=padding_idx)
            opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
            for step in range(3):
                opt.zero_grad()
                out = layer(x) * torch.randn(64, 32, 8,
                                             generator=torch.Generator().manual_seed(step))
                out.sum().backward()
                opt.step()
            ends.append(layer.weight.detach().clone())
        values = torch.randn(x.numel(), 8, generator=g)
        rows, sums = optim.row_sparse_parts(torch.sparse_coo_tensor(x.reshape(1, -1), values,
                                                                    (5, 8)))
        want_rows, want = group_rows(values, 5, x.reshape(-1))  # entry order
    assert torch.equal(ends[0], ends[1])
    assert torch.equal(rows, want_rows) and torch.equal(sums, want)


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_index_tensor_read_twice_trains_fused_and_unfused_alike(
        name: str, padding_idx: int | None, backend: str) -> None:
    """A table that one forward reads twice with index tensors: its stored gradient is
    ``nn.Embedding(sparse=True)``'s for each read, on either backend (the torch backend's
    sorted sums added a row's entries in another order than ``fused=True``'s), so the two
    train the table to the same bits."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 5, (64,), generator=g)
    go = torch.randn(64, 8, generator=g)
    ends, grads = [], []
    with use_backend(backend):
        for fused in (False, True):
            torch.manual_seed(0)
            layer = LookupLinear(5, 8, bias=False, sparse=True, padding_idx=padding_idx)
            opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused)
            ((layer(x) * go).sum() + (layer(x.flip(0)) * go).sum()).backward()
            if not fused:
                grads.append(layer.weight.grad)
            opt.step()
            ends.append(layer.weight.detach().clone())
    emb = nn.Embedding(5, 8, sparse=True, padding_idx=padding_idx)
    emb(x).backward(go)
    with use_backend(backend):
        layer = LookupLinear(5, 8, bias=False, sparse=True, padding_idx=padding_idx)
        layer(x).backward(go)
    assert torch.equal(ends[0], ends[1])
    assert torch.equal(layer.weight.grad._indices(), emb.weight.grad._indices())
    assert torch.equal(layer.weight.grad._values(), emb.weight.grad._values())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_table_of_three_dims_whose_strides_have_no_rows_view(name: str) -> None:
    """A (rows, a, b) parameter whose strides cannot be viewed as (rows, a * b) (its last two
    dimensions transposed) with a sparse gradient: updated as its contiguous copy is, in
    place (the torch-op update viewed it as rows and raised)."""
    g = torch.Generator().manual_seed(5)
    base = torch.randn(6, 3, 2, generator=g)
    strided = nn.Parameter(base.transpose(1, 2).contiguous().transpose(1, 2))
    plain = nn.Parameter(base.clone())
    assert torch.equal(strided, plain) and not strided.is_contiguous()
    opts = [getattr(optim, name)([p], lr=0.1) for p in (strided, plain)]
    for _ in range(2):
        grad = torch.sparse_coo_tensor(torch.tensor([[4, 0, 4]]),
                                       torch.randn(3, 3, 2, generator=g), (6, 3, 2))
        for p, opt in zip((strided, plain), opts, strict=True):
            p.grad = grad.clone()
            opt.step()
    assert torch.equal(strided, plain)
    assert not torch.equal(plain, base)


def _rowwise_reference(w: torch.Tensor, grads: list[torch.Tensor], lr: float, eps: float,
                       weight_decay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise Adagrad on a half-precision table as FBGEMM computes it: the sum and the update
    in float32, each row rounded to the table's dtype once a step."""
    s = torch.zeros(w.shape[0])
    for g in grads:
        x = g.float() + weight_decay * w.float()
        s = s + (x * x).mean(1)
        w = (w.float() - lr / (s.sqrt() + eps).unsqueeze(1) * x).to(w.dtype)
    return w, s


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("how", ["sparse", "fused", "dense"])
def test_rowwise_adagrad_keeps_a_half_tables_sums_in_float32(dtype: torch.dtype,
                                                             how: str) -> None:
    """A float16/bfloat16 table's sums are float32 (FBGEMM's): unit gradients sum past where a
    sum in the table's dtype stops (2048 in float16, 256 in bfloat16: the rate stops
    decaying), and gradients of 100 do not overflow it to inf (which stops the row); the
    weights are the float32 update rounded once a step."""
    past_the_stall = 2100 if dtype == torch.float16 else 300
    for scale, steps in ((1.0, past_the_stall), (100.0, 12)):
        layer = LookupLinear(4, 4, bias=False, sparse=how != "dense", dtype=dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.arange(16.0).view(4, 4) / 16)
        start = layer.weight.detach().clone()
        opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.01, weight_decay=0.5,
                                   fused=how == "fused")
        bags = Bags.from_lists([[1], [3, 3]])
        for _ in range(steps):
            opt.zero_grad()
            (scale * layer(bags)).sum().backward()
            opt.step()
        sums = opt.state[layer.weight]["sum"]
        assert sums.dtype == torch.float32
        grad = torch.zeros(4, 4, dtype=dtype)
        grad[1], grad[3] = scale, 2 * scale
        w, s = _rowwise_reference(start, [grad] * steps, 0.01, 1e-8, 0.5)
        if how != "dense":  # a sparse gradient's untouched rows keep their state
            s[[0, 2]] = 0
            w[[0, 2]] = start[[0, 2]]
        assert bool(torch.isfinite(sums).all())
        torch.testing.assert_close(sums, s, rtol=1e-6, atol=0)
        torch.testing.assert_close(layer.weight.detach(), w, rtol=0, atol=0)
    assert sums[1] > 65504  # float16's largest finite value


def test_rowwise_adagrad_float16_matches_fbgemm_when_installed() -> None:
    """FBGEMM's EXACT_ROWWISE_ADAGRAD on a float16 table (weights_precision=FP16, its state
    float32): the same weights and sums, to the bit, fused and not, past the step where a
    float16 sum would overflow."""
    g = torch.Generator().manual_seed(0)
    rows, dim, lr, eps = 50, 8, 0.5, 1e-8
    init = torch.randn(rows, dim, generator=g).half()
    batches = []
    for _ in range(10):
        idx = torch.randint(0, 20, (8 * 3,), generator=g)  # duplicates: gradients 100 x k
        batches.append((idx, torch.arange(0, idx.numel() + 1, 3)))
    for fused in (False, True):
        emb = _fbgemm_table(init, "EXACT_ROWWISE_ADAGRAD", lr, eps, half=True)
        layer = LookupLinear(rows, dim, bias=False, sparse=True, include_last_offset=True,
                             dtype=torch.float16, init=lambda w: w.copy_(init))
        opt = optim.RowWiseAdagrad([layer.weight], lr=lr, eps=eps, fused=fused)
        for idx, offsets in batches:
            (100 * emb(idx, offsets)).sum().backward()
            opt.zero_grad()
            (100 * layer(idx, offsets=offsets).float()).sum().backward()
            opt.step()
        sums = opt.state[layer.weight]["sum"]
        assert sums.dtype == torch.float32 and sums.max() > 65504
        assert torch.equal(sums, emb.split_optimizer_states()[0][0])
        assert torch.equal(layer.weight.detach(), emb.split_embedding_weights()[0])


def test_rowwise_adagrad_loads_half_tables_sums_in_float32() -> None:
    """A float16 table's float32 sums go through a state dict unrounded; a state dict that
    holds them in float16 (as saved before they were float32) is cast up."""
    layer = LookupLinear(6, 2, bias=False, sparse=True, dtype=torch.float16)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (300 * layer(Bags.from_lists([[1], [2, 2]]))).sum().backward()
        opt.step()
    saved = opt.state_dict()
    buf = io.BytesIO()
    torch.save(saved, buf)
    buf.seek(0)
    for state_dict in (torch.load(buf, weights_only=True), saved):
        fresh = optim.RowWiseAdagrad(layer.parameters(), lr=0.1)
        fresh.load_state_dict(state_dict)
        got = fresh.state[layer.weight]["sum"]
        assert got.dtype == torch.float32
        assert torch.equal(got, opt.state[layer.weight]["sum"])
        assert got.max() > 65504
    old = {**saved, "state": {0: {**saved["state"][0], "sum": torch.tensor(
        [0, 1.5, 2.25, 0, 0, 0], dtype=torch.float16)}}}
    fresh = optim.RowWiseAdagrad(layer.parameters(), lr=0.1)
    fresh.load_state_dict(old)
    got = fresh.state[layer.weight]["sum"]
    assert got.dtype == torch.float32 and got.tolist() == [0, 1.5, 2.25, 0, 0, 0]


@pytest.mark.parametrize("name", ["Adagrad", "Adam"])
def test_elementwise_optimizers_keep_state_in_the_parameters_dtype(name: str) -> None:
    """Adagrad's and Adam's state is in the parameter's dtype, as torch.optim keeps it."""
    layer = LookupLinear(6, 2, bias=False, sparse=True, dtype=torch.float16)
    opt = getattr(optim, name)(layer.parameters(), lr=0.1)
    layer(Bags.from_lists([[1]])).sum().backward()
    opt.step()
    assert {v.dtype for v in opt.state[layer.weight].values()
            if isinstance(v, torch.Tensor)} == {torch.float16}


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_follows_a_model_converted_after_a_step(name: str, dtype: torch.dtype,
                                                      fused: bool) -> None:
    """A model converted after a step (``model.double()``, ``.bfloat16()``) trains on, as with
    torch.optim: its state is converted to the dtype the class keeps for the new one (float32
    for RowWiseAdagrad's bfloat16 sums), and it steps as an optimizer that loaded the state
    dict into the converted model (whose load casts the state so) steps, to the bit."""
    kw: dict[str, Any] = {"momentum": 0.9} if name == "SGD" else {}
    x = torch.tensor([1, 2, 3, 2])
    torch.manual_seed(0)
    layer = Model(LookupLinear(V, D, bias=False, sparse=True))
    opt = getattr(optim, name)(layer.parameters(), lr=0.1, fused=fused, **kw)
    layer(Bags.from_lists([[1, 2], [3]])).sum().backward()
    opt.step()
    opt.zero_grad()
    saved = _copied(opt.state_dict())
    layer.to(dtype)
    twin = Model(LookupLinear(V, D, bias=False, sparse=True, dtype=dtype)).to(dtype)
    twin.load_state_dict(layer.state_dict())
    resumed = getattr(optim, name)(twin.parameters(), lr=0.1, fused=fused, **kw)
    resumed.load_state_dict(saved)
    for model, o in ((layer, opt), (twin, resumed)):
        for _ in range(2):
            model(Bags.from_lists([x.tolist(), [5]])).float().sum().backward()
            o.step()
            o.zero_grad()
    for p, q in zip(layer.parameters(), twin.parameters(), strict=True):
        assert p.dtype == dtype and torch.equal(p, q)
        ours, theirs = opt.state[p], resumed.state[q]
        assert ours.keys() == theirs.keys() and ours["step"] == theirs["step"] == 3
        for key in ours.keys() - {"step"}:
            assert ours[key].dtype == theirs[key].dtype == opt._state_dtype(p, key)
            assert torch.equal(ours[key], theirs[key])


@pytest.mark.parametrize("how", ["constructor", "group"])
@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW"])
def test_a_tensor_lr_steps_as_torch_optims(name: str, how: str) -> None:
    """``lr`` as a one-element tensor, given to the constructor or written into a group
    (as a scheduler may), is taken as ``torch.optim`` takes it: the dense parameters small
    and large are stepped where ``torch.optim``'s default puts them, bit for bit (on the CPU
    its single-tensor update, whose rounding with a tensor ``lr`` is not the multi-tensor
    one's; Adam's multi-tensor update refuses a tensor ``lr``)."""
    from lookuplinear.optim._base import CPU_LARGE_BYTES

    kw: dict[str, Any] = {"momentum": 0.9} if name == "SGD" else {}
    g = torch.Generator().manual_seed(0)
    shapes = [(7, 4), (5,), (), (CPU_LARGE_BYTES // 4 + 8,)]
    base = [torch.randn(s, generator=g) for s in shapes]
    ours = [nn.Parameter(b.clone()) for b in base]
    theirs = [nn.Parameter(b.clone()) for b in base]
    lr = torch.tensor(0.05)
    if how == "constructor":
        oa = getattr(optim, name)(ours, lr=lr, **kw)
        ob = getattr(torch.optim, name)(theirs, lr=lr, **kw)
    else:
        oa = getattr(optim, name)(ours, lr=0.1, **kw)
        ob = getattr(torch.optim, name)(theirs, lr=0.1, **kw)
        oa.param_groups[0]["lr"] = ob.param_groups[0]["lr"] = lr
    for _ in range(3):
        for a, b in zip(ours, theirs, strict=True):
            a.grad = torch.randn(a.shape, generator=g)
            b.grad = a.grad.clone()
        oa.step()
        ob.step()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ours[0], base[0])  # it did train
    w = nn.Parameter(torch.zeros(3))
    with pytest.raises(InputValueError, match="a tensor lr must be one number >= 0"):
        getattr(optim, name)([w], lr=torch.tensor([0.1, 0.2]))
    with pytest.raises(InputValueError, match="a tensor lr must be one number >= 0"):
        getattr(optim, name)([w], lr=torch.tensor(-0.1))


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW"])
def test_the_constructor_takes_torch_optims_arguments(name: str) -> None:
    """Every argument of the torch.optim class of the same name (but its own ``fused``, which
    means PyTorch's fused kernel), positional where torch.optim's is: at torch.optim's default
    it builds the same optimizer (``foreach`` at any value); an option this class does not
    compute with, set otherwise, is refused, naming it."""
    import inspect

    torch_cls, ours_cls = getattr(torch.optim, name), getattr(optim, name)
    sig = inspect.signature(torch_cls.__init__)
    names = [n for n in sig.parameters if n not in ("self", "params", "fused")]
    positional = [n for n, p in sig.parameters.items()
                  if p.kind is p.POSITIONAL_OR_KEYWORD and n not in ("self", "params")]
    w = nn.Parameter(torch.zeros(3, 2))
    defaults = {n: sig.parameters[n].default for n in names}
    ours = ours_cls([w], *[defaults[n] for n in positional],
                    **{n: v for n, v in defaults.items() if n not in positional})
    assert ours.defaults["lr"] == torch_cls([w]).defaults["lr"]
    for foreach in (True, False):
        ours_cls([w], foreach=foreach)
    flags = {"maximize": True, "amsgrad": True, "capturable": True, "differentiable": True,
             "decoupled_weight_decay": name != "AdamW"}
    for key, value in flags.items():
        if key in names:
            with pytest.raises(InputValueError, match=key):
                ours_cls([w], **{key: value})
    if "betas" in names:  # torch.optim takes tensors there (for capturable): refused clearly
        with pytest.raises(InputValueError, match=r"betas must be two numbers, got tensors"):
            ours_cls([w], betas=(torch.tensor(0.9), torch.tensor(0.999)))


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam"])
def test_a_float32_tensor_lr_steps_a_float64_table_as_torch_optims_sparse_update(
        name: str) -> None:
    """A float32 tensor ``lr`` on a float64 row-sparse table: torch.optim's sparse updates
    round what they derive from ``lr`` (Adagrad's clr, SparseAdam's step size) in its dtype;
    so do the row kernels' scalars (float64 rounding apart)."""
    g = torch.Generator().manual_seed(0)
    start = torch.randn(20, 4, generator=g, dtype=torch.float64)
    ours, theirs = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    peer = torch.optim.SparseAdam if name == "Adam" else getattr(torch.optim, name)
    lr = torch.tensor(0.1)
    oa, ob = getattr(optim, name)([ours], lr=lr), peer([theirs], lr=lr)
    for _ in range(5):
        rows = torch.randint(0, 20, (6,), generator=g).unique()
        grad = torch.sparse_coo_tensor(rows[None], torch.randn(len(rows), 4, generator=g,
                                                              dtype=torch.float64), (20, 4))
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        oa.step()
        ob.step()
    torch.testing.assert_close(ours, theirs, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "AdamW"])
def test_a_tensor_lr_resumes_from_a_state_dict_as_torch_optims(name: str) -> None:
    """A group's tensor ``lr`` stays a tensor through ``load_state_dict``, as ``torch.optim``
    keeps it, and is stepped as it was before the save: a run resumed from either optimizer's
    state dict is ``torch.optim``'s resumed run, bit for bit, and the tensor is validated."""
    kw: dict[str, Any] = {"momentum": 0.9} if name == "SGD" else {}
    if name == "Adagrad":
        kw["lr_decay"] = 0.1
    shapes = [(3, 4), (5,), (7, 7)]
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(6)]

    def run(cls: type[torch.optim.Optimizer], into: type[torch.optim.Optimizer]
            ) -> tuple[list[nn.Parameter], torch.optim.Optimizer]:
        params = [nn.Parameter(b.clone()) for b in base]
        opt = cls(params, lr=torch.tensor(0.0123), **kw)
        for i, gs in enumerate(grads):
            if i == 3:  # saved, and resumed by a fresh optimizer built with another lr
                saved = _copied(opt.state_dict())
                opt = into(params, lr=torch.tensor(0.5), **kw)
                opt.load_state_dict(saved)
            for p, gr in zip(params, gs, strict=True):
                p.grad = gr.clone()
            opt.step()
        return params, opt

    ours, opt = run(getattr(optim, name), getattr(optim, name))
    theirs, _ = run(getattr(torch.optim, name), getattr(torch.optim, name))
    from_torch, _ = run(getattr(torch.optim, name), getattr(optim, name))
    lr = opt.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and torch.equal(lr, torch.tensor(0.0123))
    for a, b, c in zip(ours, theirs, from_torch, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(c, b)
    saved = opt.state_dict()
    saved["param_groups"][0]["lr"] = torch.tensor(float("nan"))
    with pytest.raises(InputValueError, match="a tensor lr must be one number >= 0"):
        opt.load_state_dict(saved)


def test_adagrad_starts_every_sum_at_the_constructors_value_as_torchs() -> None:
    """``torch.optim.Adagrad`` starts every ``sum`` at the constructor's
    ``initial_accumulator_value`` and ignores a group's own: so does ``Adagrad``, which warns
    once that the group's value is unused (in the constructor and in ``add_param_group``)."""
    torch.manual_seed(0)
    base = [torch.randn(5, 3), torch.randn(2), torch.randn(4)]
    ours = [nn.Parameter(b.clone()) for b in base]
    theirs = [nn.Parameter(b.clone()) for b in base]

    def groups(ps: list[nn.Parameter]) -> list[dict[str, Any]]:
        return [{"params": [ps[0]], "initial_accumulator_value": 0.7}, {"params": [ps[1]]}]

    with pytest.warns(UserWarning, match=r"initial_accumulator_value=0\.7.*torch\.optim\."
                                         "Adagrad ignores") as caught:
        oa = optim.Adagrad(groups(ours), lr=0.1, initial_accumulator_value=0.1)
    assert len(caught) == 1
    ob = torch.optim.Adagrad(groups(theirs), lr=0.1, initial_accumulator_value=0.1)
    with pytest.warns(UserWarning, match=r"initial_accumulator_value=0\.5"):
        oa.add_param_group({"params": [ours[2]], "initial_accumulator_value": 0.5})
    ob.add_param_group({"params": [theirs[2]], "initial_accumulator_value": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optim.Adagrad(groups(ours)[1:], initial_accumulator_value=0.1)  # no group value: quiet
    for step in range(3):  # (torch.optim.Adagrad makes no state for an added group's params)
        g = torch.Generator().manual_seed(step)
        for a, b in zip(ours[:2], theirs[:2], strict=True):
            a.grad = torch.randn(a.shape, generator=g)
            b.grad = a.grad.clone()
        oa.step()
        ob.step()
    for a, b in zip(ours[:2], theirs[:2], strict=True):
        assert torch.equal(a, b)
        assert torch.equal(oa.state[a]["sum"], ob.state[b]["sum"])


def test_adagrad_share_memory_as_torchs() -> None:
    """``share_memory()`` puts each ``sum`` in shared memory, as ``torch.optim.Adagrad``'s
    does (Hogwild), states not yet stepped included; steps then go on as before."""
    torch.manual_seed(0)
    p, q = nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(2))
    ref = [nn.Parameter(p.detach().clone()), nn.Parameter(q.detach().clone())]
    opt = optim.Adagrad([p, q], lr=0.1, initial_accumulator_value=0.2)
    plain = optim.Adagrad(ref, lr=0.1, initial_accumulator_value=0.2)
    p.grad, ref[0].grad = torch.ones(4, 3), torch.ones(4, 3)
    opt.step()
    plain.step()
    opt.share_memory()
    assert opt.state[p]["sum"].is_shared() and opt.state[q]["sum"].is_shared()
    assert torch.equal(opt.state[q]["sum"], torch.full((2,), 0.2))
    for a, b in ((p, ref[0]), (q, ref[1])):
        a.grad, b.grad = torch.full(a.shape, 0.5), torch.full(b.shape, 0.5)
    opt.step()
    plain.step()
    assert torch.equal(p, ref[0]) and torch.equal(q, ref[1])
    assert torch.equal(opt.state[p]["sum"], plain.state[ref[0]]["sum"])


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize(("cls", "key", "value"), [
    (optim.SGD, "maximize", True), (optim.Adam, "amsgrad", True),
    (optim.Adam, "decoupled_weight_decay", True)])
def test_an_unimplemented_option_set_on_a_group_by_hand_is_refused_at_the_update(
        cls: Any, key: str, value: Any, fused: bool) -> None:
    """An option the class does not implement, written into a group after it was made (where
    the constructor's and add_param_group's checks cannot see it): the update refuses it,
    nothing moved, where it would ignore it (torch.optim's class of that name applies it)."""
    torch.manual_seed(0)
    layer = LookupLinear(10, 4, sparse=True)
    opt = cls(layer.parameters(), lr=0.1, fused=fused)
    opt.param_groups[0][key] = value
    before = snapshot(layer, opt)
    with pytest.raises(InputValueError, match=rf"sets {key}={value}"):
        layer(torch.tensor([[1, 2]])).sum().backward()
        opt.step()
    assert_unchanged(before, layer, opt)


def test_load_state_dict_runs_its_pre_hooks_before_checking_as_torch_optim() -> None:
    """A ``register_load_state_dict_pre_hook`` that mends an old state dict (a group key it
    lacks) runs before the checks, as torch.optim runs it: the load takes the mended dict, where
    torch.optim.Adam loads it too."""
    def mend(opt: Any, sd: dict[str, Any]) -> dict[str, Any]:
        sd = {**sd, "param_groups": [{**g, "eps": 1e-8} for g in sd["param_groups"]]}
        return sd

    for cls in (optim.Adam, torch.optim.Adam):
        layer = LookupLinear(10, 4)
        opt = cls(layer.parameters(), lr=0.1)
        sd = opt.state_dict()
        sd["param_groups"] = [{k: v for k, v in g.items() if k != "eps"}
                              for g in sd["param_groups"]]
        opt.register_load_state_dict_pre_hook(mend)
        opt.load_state_dict(sd)
        assert opt.param_groups[0]["eps"] == 1e-8


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize(("name", "options", "theirs"), [
    ("Adam", {}, torch.optim.SparseAdam), ("Adagrad", {}, torch.optim.Adagrad),
    ("SGD", {"momentum": 0.9}, torch.optim.SGD)])
def test_an_infinite_weight_stays_infinite_without_weight_decay(
        name: str, options: dict[str, Any], theirs: Any, fused: bool, backend: str) -> None:
    """Without weight decay no decay term is added (torch.optim's rule): an inf element of a
    row the batch names stays inf and its state finite, as torch.optim keeps them (``0 * inf``
    would make both NaN, for good)."""
    w = torch.ones(4, 2)
    w[1, 0] = float("inf")
    with use_backend(backend):
        stock = nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, sparse=True)
        layer = LookupLinear(4, 2, bias=False, sparse=True)
        with torch.no_grad():
            layer.weight.copy_(w)
        opts = (theirs(stock.parameters(), lr=0.01, **options),
                getattr(optim, name)(layer.parameters(), lr=0.01, fused=fused, **options))
        for _ in range(2):
            for model, opt in zip((stock, layer), opts, strict=True):
                opt.zero_grad()
                model(torch.tensor([[0, 1]])).sum().backward()
                opt.step()
    assert torch.equal(stock.weight[1].isinf(), layer.weight[1].isinf())
    if name != "SGD":  # (torch's momentum on a sparse gradient is its own: docs/optim.md)
        torch.testing.assert_close(layer.weight[1].detach(), stock.weight[1].detach(),
                                   rtol=1e-6, atol=1e-7)
    assert not layer.weight.isnan().any()
    for value in opts[1].state[layer.weight].values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            assert not value.isnan().any()


@pytest.mark.parametrize(("dtype", "backend"), [
    (torch.float32, "auto"), (torch.float32, "torch"), (torch.float16, "auto"),
    (torch.bfloat16, "auto")])
def test_a_hand_built_gradient_flagged_coalesced_with_duplicates_steps_as_torch_optim(
        dtype: torch.dtype, backend: str) -> None:
    """A sparse gradient built by hand with ``is_coalesced=True`` but a row twice (torch
    takes the flag on trust): every path sums the row's entries, as ``torch.optim.SGD`` and
    the C kernel do (the torch-op path kept one entry's update)."""
    idx = torch.tensor([[1, 1, 3]])
    vals = torch.tensor([[1.0, 2.0], [10.0, 20.0], [5.0, 5.0]], dtype=dtype)
    found = []
    for cls in (torch.optim.SGD, optim.SGD):
        p = nn.Parameter(torch.zeros(5, 2, dtype=dtype))
        opt = cls([p], lr=1.0)
        p.grad = torch.sparse_coo_tensor(idx, vals, (5, 2), is_coalesced=True)
        with use_backend(backend):
            opt.step()
        found.append(p.detach())
    assert torch.equal(found[0], found[1])


def test_the_torch_op_grouping_keeps_a_rows_sign_of_zero() -> None:
    """Rows out of order whose entries are all -0.0 sum to -0.0 on the torch-op grouping, as
    on the C kernel's and in a coalesce (it started from +0.0)."""
    rows, values = torch.tensor([3, 1, 3]), torch.full((3, 2), -0.0)
    found = []
    for backend in ("auto", "torch"):
        with use_backend(backend):
            found.append(group_rows(values, 5, rows)[1])
    coalesced = torch.sparse_coo_tensor(rows[None], values, (5, 2)).coalesce().values()
    for sums in found:
        assert torch.equal(sums, coalesced) and torch.signbit(sums).all()


@pytest.mark.parametrize(("dtype", "backend"), [
    (torch.float32, "auto"), (torch.float32, "torch"), (torch.float16, "auto")])
def test_a_gradient_row_past_the_table_is_named_on_every_path(
        dtype: torch.dtype, backend: str) -> None:
    """A sparse gradient with a row past the table is refused with ``LookupIndexError``
    naming the row, on the C kernel's path and the torch-op one alike (which raised torch's
    bare ``IndexError``), nothing updated."""
    p = nn.Parameter(torch.zeros(5, 2, dtype=dtype))
    opt = optim.Adagrad([p])
    p.grad = torch.sparse_coo_tensor(torch.tensor([[1, 9]]), torch.ones(2, 2, dtype=dtype),
                                     (5, 2), check_invariants=False)
    with use_backend(backend), pytest.raises(LookupIndexError, match="row 9"):
        opt.step()
    assert not p.detach().any()
