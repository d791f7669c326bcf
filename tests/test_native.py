"""The C row kernels (``lookuplinear._native``) against the numba kernels and the dense path.

The C kernels are compiled for widths 16, 32, 64 and 128 with a constant and for any other
width as it comes; row-wise Adagrad sums a row's squares 16 at a time, then the rest one by one.
Every test runs over widths of each kind.
"""

from __future__ import annotations

import shutil
import sysconfig
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import Bags, LookupLinear, _native, _numba, optim

WIDTHS = [1, 6, 10, 16, 24, 64, 128, 600]
PAD = 0


def test_built_where_a_compiler_is() -> None:
    """``pip install`` builds the extension wherever it finds the C compiler Python was built
    with; a failed build would otherwise pass unnoticed behind the numba fallback."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler {cc!r}: the install runs the numba kernels")
    assert _native.available()


needs_c = pytest.mark.skipif(not _native.available(), reason="the C kernels are not built")


def batches(width: int, dtype: torch.dtype, steps: int = 4) -> list[tuple[Bags, torch.Tensor]]:
    """Bags with duplicates, the padding index, an empty bag and per-entry weights."""
    g = torch.Generator().manual_seed(width)
    out = []
    for _ in range(steps):
        lists = [torch.randint(0, 30, (int(n),), generator=g).tolist()
                 for n in torch.randint(0, 7, (9,), generator=g)]
        lists[0] = [3, 3, PAD, 5, 3]
        lists[1] = []
        ws = [[float(torch.rand((), generator=g)) + 0.5 for _ in b] for b in lists]
        target = torch.randn(len(lists), width, generator=g, dtype=dtype)
        out.append((Bags.from_lists(lists, weights=ws), target))
    return out


def run(name: str, width: int, dtype: torch.dtype, *, c: bool, fused: bool,
        monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, dict[str, Any]]:
    monkeypatch.setattr(_native, "ENABLED", c)
    torch.manual_seed(0)
    layer = LookupLinear(50, width, bias=False, padding_idx=PAD, sparse=True, dtype=dtype)
    kw: dict[str, Any] = {"lr": 0.05, "weight_decay": 0.01}
    if name == "SGD":
        kw.update(momentum=0.5, nesterov=True)
    opt = getattr(optim, name)(layer.parameters(), fused=fused, **kw)
    for bags, target in batches(width, dtype):
        opt.zero_grad()
        F.mse_loss(layer(bags), target).backward()
        opt.step()
    state = {k: v.clone() for k, v in opt.state[layer.weight].items()
             if isinstance(v, torch.Tensor)}
    return layer.weight.detach().clone(), state


@needs_c
@pytest.mark.parametrize("name", ["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_c_equals_numba_and_fused_equals_unfused(
    name: str, width: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same weights and state as the numba kernels (to rounding: numba reassociates the row-wise
    mean of squares, the C build does not); fused and unfused C steps agree to the bit."""
    w_numba, s_numba = run(name, width, dtype, c=False, fused=False, monkeypatch=monkeypatch)
    w_c, s_c = run(name, width, dtype, c=True, fused=False, monkeypatch=monkeypatch)
    w_fused, s_fused = run(name, width, dtype, c=True, fused=True, monkeypatch=monkeypatch)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    torch.testing.assert_close(w_c, w_numba, **tol)
    assert s_c.keys() == s_numba.keys()
    for key in s_c:
        torch.testing.assert_close(s_c[key], s_numba[key], **tol)
    assert torch.equal(w_fused, w_c)
    for key in s_c:
        assert torch.equal(s_fused[key], s_c[key]), key


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 7, 2048, 3_000_000]),
    st.data(),
    st.sampled_from(WIDTHS),
    st.sampled_from([np.float32, np.float64]),
)
def test_group_rows_equals_numba(in_features: int, data: st.DataObject, width: int,
                                 dtype: type) -> None:
    """The C grouping returns numba's rows and sums: empty batches, all padding, one bag,
    duplicates, index input (no offsets), with and without weights."""
    idx = data.draw(st.lists(st.integers(0, in_features - 1), max_size=40))
    n = len(idx)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    offsets = np.array([0, *cuts, n] if data.draw(st.booleans()) else [], np.int64)
    n_out = offsets.size - 1 if offsets.size else n
    rng = np.random.default_rng(n)
    weights = (rng.standard_normal(n).astype(dtype) if data.draw(st.booleans())
               else np.empty(0, dtype))
    grad_out = rng.standard_normal((n_out, width)).astype(dtype)
    padding = data.draw(st.sampled_from([-1, *idx[:1]]))
    args = (np.array(idx, np.int64), offsets, weights, grad_out, padding, in_features)
    got = _native.group_rows(*args)
    assert got is not None
    rows, values = _numba.group_rows(*args)
    np.testing.assert_array_equal(got[0], rows)
    np.testing.assert_allclose(got[1], values, rtol=1e-5, atol=1e-6)


@needs_c
def test_index_input_and_wide_rows_match_the_dense_gradient() -> None:
    """2-D index input (one lookup per position, no offsets) with a wide row: the gradient of
    the dense path, ``one_hot(x).T @ grad_out`` over the positions."""
    torch.manual_seed(0)
    layer = LookupLinear(20, 700, bias=False, sparse=True)
    x = torch.tensor([[3, 3], [19, 0], [3, 7]])
    out = layer(x)
    g = torch.randn_like(out)
    out.backward(g)
    assert layer.weight.grad is not None
    dense = F.one_hot(x, 20).reshape(-1, 20).to(g.dtype)  # (positions, in_features)
    torch.testing.assert_close(layer.weight.grad.to_dense(), dense.T @ g.reshape(-1, 700))


def test_layouts_the_c_kernels_do_not_take_go_to_numba() -> None:
    """A non-contiguous table, a state of another layout or dtype: ``None``/False, nothing
    done, so that the caller runs numba."""
    w = np.zeros((10, 4), np.float32)
    rows = np.array([1, 2], np.int64)
    values = np.ones((2, 4), np.float32)
    kernel = _numba.rowwise_adagrad_rows
    s = np.zeros(10, np.float32)
    before = w.copy()
    assert not _native.update(kernel, w[:, ::2], rows, values[:, ::2], s, 0.1, 0.0, 0.0, 0.5)
    assert not _native.update(kernel, w, rows, values, s.astype(np.float64), 0.1, 0, 0, 0.25)
    assert not _native.update(_numba.adam_rows, w, rows, values, np.zeros((10, 4), np.float32))
    assert not _native.update(print, w, rows, values, s)
    assert (w == before).all() and not s.any()


@needs_c
def test_the_extension_is_loaded_through_ctypes_only() -> None:
    """The module defines no Python functions: the kernels are reached through ctypes."""
    from lookuplinear import _rowkernels  # type: ignore[attr-defined]

    assert not [n for n in dir(_rowkernels) if not n.startswith("__")]


def test_the_environment_turns_the_c_kernels_off() -> None:
    """``LOOKUPLINEAR_NO_C=1`` makes a process run the numba kernels."""
    import os
    import subprocess
    import sys

    code = "from lookuplinear import _native; print(_native.available())"
    env = {**os.environ, "LOOKUPLINEAR_NO_C": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
