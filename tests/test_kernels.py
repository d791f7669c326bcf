"""The row kernels of both backends (C where built, torch ops) against each other and the
dense path; fused equals unfused to the bit on each backend.

The C kernels are compiled for widths 16, 32, 64 and 128 with a constant and for any other
width as it comes; row-wise Adagrad sums a row's squares 16 at a time, then the rest one by one.
Every test runs over widths of each kind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from forms import c_by_default, needs_c
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import Bags, InputValueError, LookupIndexError, LookupLinear, optim
from lookuplinear.ops import (
    backend,
    c_available,
    deinterleave,
    gather_rows,
    group_rows,
    interleave,
    one_id_rows,
    segments,
    shifted_rows,
    update_rows,
    use_backend,
)
from lookuplinear.ops._clib import NO_C

WIDTHS = [1, 6, 10, 16, 24, 64, 128, 600]
PAD = 0
BACKENDS = ["c", "torch"]


def test_built_where_a_compiler_is() -> None:
    """``pip install`` builds the extension wherever it finds the C compiler Python was built
    with; a failed build would otherwise pass unnoticed behind the torch-op fallback."""
    if NO_C:
        pytest.skip("LOOKUPLINEAR_NO_C is on: the process runs as an install without a compiler")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler {cc!r}: the install runs torch ops")
    assert c_available()




def in_backend(name: str) -> Any:
    if name == "c" and not c_available():
        pytest.skip("the C kernels are not built")
    return use_backend(name)


def batches(width: int, dtype: torch.dtype, steps: int = 4, n_bags: int = 9
            ) -> list[tuple[Bags, torch.Tensor]]:
    """Bags with duplicates, the padding index, an empty bag and per-entry weights."""
    g = torch.Generator().manual_seed(width)
    out = []
    for _ in range(steps):
        lists = [torch.randint(0, 30, (int(n),), generator=g).tolist()
                 for n in torch.randint(0, 7, (n_bags,), generator=g)]
        lists[0] = [3, 3, PAD, 5, 3]
        lists[1] = []
        ws = [[float(torch.rand((), generator=g)) + 0.5 for _ in b] for b in lists]
        target = torch.randn(len(lists), width, generator=g, dtype=dtype)
        out.append((Bags.from_lists(lists, weights=ws), target))
    return out


def run(name: str, width: int, dtype: torch.dtype, *, fused: bool, n_bags: int = 9
        ) -> tuple[torch.Tensor, dict[str, Any]]:
    torch.manual_seed(0)
    layer = LookupLinear(50, width, bias=False, padding_idx=PAD, sparse=True, dtype=dtype)
    kw: dict[str, Any] = {"lr": 0.05, "weight_decay": 0.01}
    if name == "SGD":
        kw.update(momentum=0.5, nesterov=True)
    opt = getattr(optim, name)(layer.parameters(), fused=fused, **kw)
    for bags, target in batches(width, dtype, n_bags=n_bags):
        opt.zero_grad()
        F.mse_loss(layer(bags), target).backward()
        opt.step()
    state = {k: v.clone() for k, v in opt.state[layer.weight].items()
             if isinstance(v, torch.Tensor)}
    return layer.weight.detach().clone(), state


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_c_equals_torch_ops_and_fused_equals_unfused(
    name: str, width: int, dtype: torch.dtype
) -> None:
    """Same weights and state from both backends (to rounding: the C build fuses multiply-adds,
    torch ops may not); on each backend fused and unfused steps agree to the bit."""
    results = {}
    for b in BACKENDS if c_available() else ["torch"]:
        with use_backend(b):
            results[b] = [run(name, width, dtype, fused=fused) for fused in (False, True)]
        (w, s), (w_fused, s_fused) = results[b]
        assert torch.equal(w_fused, w), b
        for key in s:
            assert torch.equal(s_fused[key], s[key]), (b, key)
    if "c" in results:
        tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
        (w_c, s_c), (w_t, s_t) = results["c"][0], results["torch"][0]
        torch.testing.assert_close(w_c, w_t, **tol)
        assert s_c.keys() == s_t.keys()
        for key in s_c:
            torch.testing.assert_close(s_c[key], s_t[key], **tol)


@needs_c
@pytest.mark.parametrize("name", ["SGD", "RowWiseAdagrad", "Adam"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_equals_unfused_with_a_large_gradient(name: str, dtype: torch.dtype) -> None:
    """A grad_out of 4096 bags x 64 (1-2 MiB): the fused kernel copies each row's first entry
    as it reads it, where a smaller one's is only noted (rowkernels.c, LAZY_BYTES); both give
    the unfused step's bits."""
    (w, s), (w_fused, s_fused) = [run(name, 64, dtype, fused=fused, n_bags=4096)
                                  for fused in (False, True)]
    assert torch.equal(w_fused, w)
    for key in s:
        assert torch.equal(s_fused[key], s[key]), key


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 7, 2048, 3_000_000]),
    st.data(),
    st.sampled_from(WIDTHS),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_group_rows_c_equals_torch_ops(in_features: int, data: st.DataObject, width: int,
                                       dtype: torch.dtype) -> None:
    """The C grouping returns the torch-op rows and sums: empty batches, all padding, one bag,
    duplicates, index input (no offsets), with and without weights."""
    idx = data.draw(st.lists(st.integers(0, in_features - 1), max_size=40))
    n = len(idx)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    offsets = torch.tensor([0, *cuts, n]) if data.draw(st.booleans()) else None
    n_out = n if offsets is None else offsets.numel() - 1
    g = torch.Generator().manual_seed(n)
    weights = torch.randn(n, generator=g, dtype=dtype) if data.draw(st.booleans()) else None
    grad_out = torch.randn(n_out, width, generator=g, dtype=dtype)
    padding = data.draw(st.sampled_from([None, *idx[:1]]))
    lk = (torch.tensor(idx, dtype=torch.int64), offsets, weights, padding)
    with use_backend("c"):
        rows, values = group_rows(grad_out, in_features, *lk)
    with use_backend("torch"):
        want_rows, want_values = group_rows(grad_out, in_features, *lk)
    assert torch.equal(rows, want_rows)
    torch.testing.assert_close(values, want_values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("b", BACKENDS)
def test_index_input_and_wide_rows_match_the_dense_gradient(b: str) -> None:
    """2-D index input (one lookup per position, no offsets) with a wide row: the gradient of
    the dense path, ``one_hot(x).T @ grad_out`` over the positions."""
    with in_backend(b):
        torch.manual_seed(0)
        layer = LookupLinear(20, 700, bias=False, sparse=True)
        x = torch.tensor([[3, 3], [19, 0], [3, 7]])
        out = layer(x)
        g = torch.randn_like(out)
        out.backward(g)
    assert layer.weight.grad is not None
    dense = F.one_hot(x, 20).reshape(-1, 20).to(g.dtype)  # (positions, in_features)
    torch.testing.assert_close(layer.weight.grad.to_dense(), dense.T @ g.reshape(-1, 700))



@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(0, 6),
    st.sampled_from([torch.int32, torch.int64]),
    st.data(),
)
def test_one_id_rows_c_equals_torch_ops(n_features: int, n: int, dtype: torch.dtype,
                                        data: st.DataObject) -> None:
    """One ID per bag: the shifted rows in example order; a bag of zero or two IDs: None; an ID
    below 0 or past its table: the position of the first such ID. C and torch ops agree, and
    the rows equal their definition."""
    limit = torch.tensor(data.draw(st.lists(st.integers(1, 2**31 - 3), min_size=n_features,
                                            max_size=n_features)))
    shift = torch.cat([torch.zeros(1, dtype=torch.int64), limit.cumsum(0)[:-1]])
    ids = [data.draw(st.integers(-3, int(limit[f]) + 2)) for f in range(n_features)
           for _ in range(n)]
    lengths = [1] * len(ids)
    if ids and data.draw(st.booleans()):  # one bag of two IDs and one of none
        lengths[0], lengths[-1] = (2, 0) if len(ids) > 1 else (1, 1)
    values = torch.tensor(ids, dtype=dtype)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype)
    # ``place``: the features split in two groups, each group's (N, F_g) rows in example order,
    # group after group
    group = data.draw(st.lists(st.booleans(), min_size=n_features, max_size=n_features))
    members = [[f for f in range(n_features) if group[f] == k] for k in (False, True)]
    place = torch.zeros(n_features, 2, dtype=torch.int64)
    for k, feats in enumerate(members):
        first = len(members[0]) * n if k else 0
        for j, f in enumerate(feats):
            place[f] = torch.tensor([first + j, len(feats)])
    results, placed = [], []
    for b in BACKENDS:
        with in_backend(b):
            results.append(one_id_rows(values, offsets, n_features, shift, limit))
            placed.append(one_id_rows(values, offsets, n_features, shift, limit, place))
    c, torch_ops = results
    if isinstance(torch_ops, torch.Tensor):
        assert isinstance(c, torch.Tensor) and torch.equal(c, torch_ops)
        want = (values.long().view(n_features, n) + shift.unsqueeze(1)).t()
        assert torch.equal(c, want)
        grouped = torch.cat([want[:, feats].reshape(-1) for feats in members])
        assert all(isinstance(x, torch.Tensor) and torch.equal(x, grouped) for x in placed)
    else:
        assert c == torch_ops == placed[0] == placed[1]
    if lengths.count(1) != len(lengths):
        assert torch_ops is None
    elif isinstance(torch_ops, int):
        f = torch_ops // max(n, 1)
        assert not 0 <= ids[torch_ops] < int(limit[f])
        assert all(0 <= x < int(limit[k // n]) for k, x in enumerate(ids[:torch_ops]))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(0, 5),
    st.sampled_from([torch.int32, torch.int64]),
    st.data(),
)
def test_shifted_rows_c_equals_torch_ops(n_features: int, n: int, dtype: torch.dtype,
                                         data: st.DataObject) -> None:
    """Bags of any length (empty ones too): every entry of feature ``f`` shifted by
    ``shift[f]``, or the position of the first ID below 0 or past its table. C and torch ops
    agree, and equal the definition."""
    limit = torch.tensor(data.draw(st.lists(st.integers(1, 2**31 - 3), min_size=n_features,
                                            max_size=n_features)))
    shift = torch.cat([torch.zeros(1, dtype=torch.int64), limit.cumsum(0)[:-1]])
    lengths = data.draw(st.lists(st.integers(0, 3), min_size=n_features * n,
                                 max_size=n_features * n))
    feature = [f for f in range(n_features) for b in range(n) for _ in range(lengths[f * n + b])]
    ids = [data.draw(st.integers(-2, int(limit[f]) + 1)) for f in feature]
    values = torch.tensor(ids, dtype=dtype)
    offsets = torch.tensor([0, *torch.tensor(lengths, dtype=torch.long).cumsum(0).tolist()],
                           dtype=dtype)
    results = []
    for b in BACKENDS:
        with in_backend(b):
            results.append(shifted_rows(values, offsets, n_features, shift, limit))
    c, torch_ops = results
    bad = [k for k, (x, f) in enumerate(zip(ids, feature, strict=True))
           if not 0 <= x < int(limit[f])]
    if bad:
        assert c == torch_ops == bad[0]
    else:
        want = torch.tensor([x + int(shift[f]) for x, f in zip(ids, feature, strict=True)],
                            dtype=torch.int64)
        assert isinstance(c, torch.Tensor) and isinstance(torch_ops, torch.Tensor)
        assert torch.equal(c, want) and torch.equal(torch_ops, want)


@c_by_default
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([*WIDTHS, 32]),
    st.sampled_from([torch.float32, torch.float64]),
    st.sampled_from([torch.int32, torch.int64]),
    st.lists(st.integers(0, 39), max_size=50),
    st.sampled_from([(-1,), (2, -1), (-1, 1)]),
)
def test_gather_rows_equals_embedding(width: int, dtype: torch.dtype, idx_dtype: torch.dtype,
                                      idx: list[int], shape: tuple[int, ...]) -> None:
    """The C gather (index input's forward) returns ``F.embedding``'s rows, in any shape."""
    w = torch.randn(40, width, dtype=dtype)
    x = torch.tensor(idx, dtype=idx_dtype)
    if len(shape) == 2 and shape[0] == 2:
        x = x[: len(idx) // 2 * 2]
    x = x.reshape(shape)
    got = gather_rows(w, x)
    assert got is not None and torch.equal(got, F.embedding(x, w))


@c_by_default
def test_gather_rows_refuses_rows_outside_the_table() -> None:
    """A row below 0 or past the table: torch's IndexError, which a layer turns into a
    LookupIndexError naming it; a table of another layout is left to torch."""
    w = torch.randn(5, 16)
    for bad in (5, -1, 2**40):
        with pytest.raises(IndexError, match="out of range"):
            gather_rows(w, torch.tensor([0, bad, 1]))
    assert gather_rows(w.t().contiguous().t(), torch.tensor([1])) is None
    layer = LookupLinear(5, 16, bias=False, sparse=True)
    with pytest.raises(LookupIndexError, match="5"):
        layer(torch.tensor([[0, 5]]))


@c_by_default
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_batches_split_over_threads_group_as_torch_ops(threads: int) -> None:
    """Batches large enough for the C sort and gather to split over PyTorch's threads (bags,
    weights, padding; rows needing one to three radix passes) give the torch-op rows, sums and
    lookups on any number of threads."""
    g = torch.Generator().manual_seed(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in (1_000, 3_000_000, 2**31 - 1):
            idx = torch.randint(0, rows, (30_000,), generator=g)
            idx[::7] = idx[3]  # a row of many entries, across the threads' parts
            offsets = torch.arange(0, idx.numel() + 1, 6)
            lk = (idx, offsets, torch.randn(idx.numel(), generator=g), int(idx[5]))
            grad_out = torch.randn(offsets.numel() - 1, 16, generator=g, dtype=torch.float64)
            with use_backend("c"):
                got = group_rows(grad_out, rows, *lk)
            with use_backend("torch"):
                want = group_rows(grad_out, rows, *lk)
            assert torch.equal(got[0], want[0])
            torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)
            table = torch.randn(rows if rows < 10**4 else 10**4, 16, generator=g)
            ids = idx % table.shape[0]
            assert torch.equal(gather_rows(table, ids), F.embedding(ids, table))
    finally:
        torch.set_num_threads(before)


@needs_c
def test_sorts_share_no_memory_across_threads_or_sizes() -> None:
    """The C sort keeps one buffer between calls: threads that sort at the same time (one gets
    the kept buffer, the others their own), a batch larger than what is kept (its own buffer)
    and a small one after it all give the torch-op grouping."""
    g = torch.Generator().manual_seed(0)

    def case(n: int, rows: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        idx = torch.randint(0, rows, (n,), generator=g)
        return torch.randn(n, 2, generator=g), rows, idx

    cases = [case(50_000 + 1000 * k, 2**31 - 1) for k in range(8)]
    cases.append(case(3_400_000, 1000))  # 20 bytes an entry: more than the 64 MiB kept
    cases.append(case(10, 5))
    with use_backend("torch"):
        want = [group_rows(*c) for c in cases]
    with use_backend("c"), ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: group_rows(*c), cases))
    for (rows, values), (want_rows, want_values) in zip(got, want, strict=True):
        assert torch.equal(rows, want_rows)
        torch.testing.assert_close(values, want_values, rtol=1e-5, atol=1e-6)

@c_by_default
def test_layouts_the_c_kernels_do_not_take_are_declined() -> None:
    """A non-contiguous table, a state of another dtype: False, nothing done, so that the
    optimizer runs its torch ops."""
    w = torch.zeros(10, 8)
    rows = torch.tensor([1, 2])
    values = torch.ones(2, 4)
    s = torch.zeros(10)
    params = {"lr": 0.1, "eps": 0.0, "weight_decay": 0.0, "inv_dim": 0.25}
    assert not update_rows("rowwise_adagrad", w[:, ::2], s, rows, values, params)
    assert not update_rows("rowwise_adagrad", w[:, :4], s.double(), rows, values, params)
    assert not w.any() and not s.any()
    assert update_rows("rowwise_adagrad", w[:, :4].contiguous(), s, rows, values, params)


@needs_c
def test_the_extension_is_loaded_through_ctypes_only() -> None:
    """The module defines no Python functions: the kernels are reached through ctypes."""
    from lookuplinear.ops import _lib  # type: ignore[attr-defined]

    assert not [n for n in dir(_lib) if not n.startswith("__")]


def _backend_in_a_process(value: str) -> subprocess.CompletedProcess[str]:
    code = "from lookuplinear.ops import backend; print(backend())"
    env = {**os.environ, "LOOKUPLINEAR_BACKEND": value}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_the_environment_picks_the_backend() -> None:
    """``LOOKUPLINEAR_BACKEND=torch`` makes a process run torch ops; a wrong name is refused
    with the names that are right."""
    assert _backend_in_a_process("torch").stdout.strip() == "torch"
    want = "c" if c_available() else "torch"
    assert _backend_in_a_process("auto").stdout.strip() == want
    bad = _backend_in_a_process("numba")
    assert bad.returncode != 0 and "must be one of auto, c, torch" in bad.stderr


@pytest.mark.parametrize(("value", "on"), [
    ("", None), ("1", True), ("TRUE", True), ("yes", True), ("On", True),
    ("0", False), ("false", False), ("NO", False), ("Off", False),
    ("2", "refused"), ("disabled", "refused"), (" 1", "refused"),
])
def test_an_on_off_variable_is_read_strictly_and_as_setup_py_reads_it(
        monkeypatch: pytest.MonkeyPatch, value: str, on: bool | str | None) -> None:
    from benchmark_scripts import setup_py

    from lookuplinear._env import flag

    no_c = setup_py(monkeypatch)["no_c"]
    monkeypatch.setenv("LOOKUPLINEAR_NO_C", value)
    if on == "refused":
        with pytest.raises(InputValueError, match=rf"LOOKUPLINEAR_NO_C must be one of 1, true, "
                                                  rf"yes, on, 0, false, no, off \(any case\), "
                                                  rf"got '{value}'"):
            flag("LOOKUPLINEAR_NO_C", default=False)
        with pytest.raises(RuntimeError, match=f"LOOKUPLINEAR_NO_C must be one of .*'{value}'"):
            no_c()
        return
    assert flag("LOOKUPLINEAR_NO_C", default=False) is bool(on)
    assert flag("LOOKUPLINEAR_NO_C", default=True) is (True if on is None else on)
    assert no_c() is bool(on)


def test_the_on_off_variables_are_read_when_a_process_starts() -> None:
    code = ("from lookuplinear import hugepages; from lookuplinear.ops import _clib; "
            "print(_clib.NO_C, hugepages.enabled())")

    def started(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                              capture_output=True, text=True)

    assert started(LOOKUPLINEAR_NO_C="0", LOOKUPLINEAR_HUGEPAGES="OFF").stdout.split() == [
        "False", "False"]
    bad = started(LOOKUPLINEAR_HUGEPAGES="2")
    assert bad.returncode != 0
    assert "LOOKUPLINEAR_HUGEPAGES must be one of 1, true, yes, on, 0, false, no, off" in bad.stderr


def test_use_backend_restores_and_refuses_unknown_names() -> None:
    before = backend()
    with use_backend("torch"):
        assert backend() == "torch"
    assert backend() == before
    with pytest.raises(InputValueError, match="must be one of auto, c, torch"), \
            use_backend("numba"):
        pass


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 3, 8, 16, 32, 64])), min_size=1,
             max_size=8),
    st.integers(0, 5),
    st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.int64]),
)
def test_interleave_c_equals_torch_cat(parts: list[tuple[int, int]], n: int,
                                       dtype: torch.dtype) -> None:
    """Blocks' columns side by side in a given order (a collection's widths in feature order)
    and back: C and torch ops equal ``torch.cat`` of the blocks' column ranges, and the
    inverse gives the blocks back; blocks may be row-strided views."""
    used = sorted({b for b, _ in parts})
    parts = [(used.index(b), c) for b, c in parts]  # every block used
    widths = [sum(c for b, c in parts if b == k) for k in range(len(used))]
    segs = segments(parts, widths)
    base = torch.arange(n * (sum(widths) + 2) * 2).to(dtype).view(2 * n, sum(widths) + 2)
    blocks, at = [], 0
    for w in widths:  # views: every other row, a column offset
        blocks.append(base[::2, at:at + w])
        at += w
    taken = [0] * len(widths)
    pieces = []
    for b, c in parts:
        pieces.append(blocks[b][:, taken[b]:taken[b] + c])
        taken[b] += c
    want = torch.cat(pieces, 1)
    for b in BACKENDS:
        with in_backend(b):
            out = interleave(blocks, segs)
            assert out.dtype == dtype and torch.equal(out, want)
            back = [torch.full((n, w), -1).to(dtype) for w in widths]
            deinterleave(out, segs, back)
            assert all(torch.equal(x, y) for x, y in zip(back, blocks, strict=True))
