"""Shared test helpers: one batch of bags in every input form, and the dense reference.

The reference is written here independently of the library: the dense matrix is built with
``index_put`` from the batch's own entries, the mode is applied by hand, then ``nn.Linear``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch import nn

from lookuplinear import Bags, LookupLinear
from lookuplinear.ops import backend, c_available

#: a test of the C kernels: skipped where they were not built (an install without a compiler,
#: or LOOKUPLINEAR_NO_C set)
needs_c = pytest.mark.skipif(not c_available(), reason="the C kernels were not built")
#: whether the kernels that the Python side calls run C by default in this process: built, and
#: not ``LOOKUPLINEAR_BACKEND=torch`` (the debug backend: torch ops there)
C_BY_DEFAULT = backend() == "c"
#: a test of what the default path's C kernels do (a kernel taken, its layouts, its checks):
#: skipped where the kernels run torch ops by default
c_by_default = pytest.mark.skipif(not C_BY_DEFAULT, reason="the kernels run torch ops by "
                                  "default here (not built, or LOOKUPLINEAR_BACKEND=torch)")
#: ``LOOKUPLINEAR_BACKEND=torch`` with the C kernels built: the eager path's kernels run torch
#: ops while the C++ operators' CPU kernels (and so a compiled graph) run C, whose fused
#: multiply-adds round some sums differently; two such paths are equal to rounding, not bits
SPLIT_BACKENDS = c_available() and not C_BY_DEFAULT
#: a test holding two paths equal to the bit that run one kernel by default
same_kernel = pytest.mark.skipif(SPLIT_BACKENDS, reason="LOOKUPLINEAR_BACKEND=torch: the paths "
                                 "compared run torch ops and C, equal to rounding only")
#: the kernel backends a test body runs on (``use_backend``): ``"c"`` where built, ``"torch"``
BACKENDS = [pytest.param("c", marks=needs_c), "torch"]
#: the same, as names (for hypothesis)
BACKEND_NAMES = ["c", "torch"] if c_available() else ["torch"]

MODES = ("sum", "mean", "sqrtn", "max")
DTYPES = (torch.float32, torch.float64, torch.bfloat16)

#: (rtol, atol) of the layer (in its dtype) against the float64 dense reference. bfloat16 keeps 8
#: bits of mantissa: one rounding of an output is a relative error of 2**-8 = 0.004, and a sum of
#: a few rounded terms stays well inside 3e-2 (documented in docs/layer.md).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (3e-2, 3e-2),
}

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


def on_cuda_in_a_process(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (Python that imports what it needs) and then a CUDA synchronisation in a
    process of its own, as a device-side assert ends its process's CUDA context: it prints
    ``refused: <message>`` where they raised a ``RuntimeError``, else ``taken``."""
    script = ("import torch\ntry:\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")
              + "\n    torch.cuda.synchronize()\nexcept RuntimeError as e:\n"
              "    print('refused:', e)\nelse:\n    print('taken')\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)


@dataclass(frozen=True)
class Batch:
    """``N`` bags of indices into ``range(in_features)``, optionally one weight per entry."""

    lists: list[list[int]]
    weights: list[list[float]] | None
    in_features: int

    @property
    def n(self) -> int:
        return len(self.lists)

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, vals, indptr)`` of the entries, bag after bag, duplicates kept."""
        rows = np.array([b for b, bag in enumerate(self.lists) for _ in bag], dtype=np.int64)
        cols = np.array([i for bag in self.lists for i in bag], dtype=np.int64)
        if self.weights is None:
            vals = np.ones(cols.size, dtype=np.float64)
        else:
            vals = np.array([w for ws in self.weights for w in ws], dtype=np.float64)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum([len(b) for b in self.lists], out=indptr[1:])
        return rows, cols, vals, indptr

    def has_duplicates(self, padding_idx: int | None = None) -> bool:
        """Whether some bag names a non-padding index twice."""
        return any(
            len(kept) != len(set(kept))
            for kept in ([i for i in bag if i != padding_idx] for bag in self.lists)
        )


#: A batch with the edge cases in it: a duplicate, an empty bag, a bag of only padding (2) and
#: entries equal to the last index (padding_idx=-1), and weights that sum to 0 in bag 4.
BATCH = Batch(
    lists=[[3, 1, 3, 9], [], [2, 2], [0, 5, 2, 9, 7], [4, 6], [8]],
    weights=[
        [0.5, -1.25, 2.0, 1.0],
        [],
        [0.75, 1.5],
        [1.0, -0.5, 0.25, 2.0, 1.5],
        [1.5, -1.5],
        [2],
    ],
    in_features=10,
)
UNWEIGHTED = Batch(BATCH.lists, None, BATCH.in_features)


@dataclass
class Case:
    """One batch in one input form, ready for ``layer(case.input, **case.kwargs)``."""

    input: Any
    kwargs: dict[str, Any]
    leaf: torch.Tensor | None  # the input's differentiable values, when asked for
    entries: Callable[[torch.Tensor | None], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    merges: bool  # the form adds up duplicate entries before the layer sees them


def _values(batch: Batch, vals: np.ndarray, requires_grad: bool) -> torch.Tensor:
    t = torch.tensor(vals, dtype=torch.float32)
    return t.requires_grad_(requires_grad)


def make_case(form: str, batch: Batch, *, requires_grad: bool = False) -> Case:
    """Build ``batch`` as input form ``form``; ``requires_grad`` makes its values a leaf."""
    rows, cols, vals, indptr = batch.flat()
    n, m = batch.n, batch.in_features
    r, c = torch.from_numpy(rows), torch.from_numpy(cols)
    v = _values(batch, vals, requires_grad)
    weighted = batch.weights is not None or requires_grad

    def raw(leaf: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return r, c, torch.from_numpy(vals) if leaf is None else leaf

    leaf = v if requires_grad else None
    if form == "bags":
        x = Bags(c, torch.from_numpy(indptr), v if weighted else None)
        return Case(x, {}, leaf, raw, merges=False)
    if form == "offsets":
        kw = {"offsets": torch.from_numpy(indptr[:-1])}  # N start offsets, as nn.EmbeddingBag
        if weighted:
            kw["per_sample_weights"] = v
        return Case(c, kw, leaf, raw, merges=False)
    if form == "offsets_strided":  # every tensor a column of a wider one (stride 2)
        def strided(t: torch.Tensor) -> torch.Tensor:
            wide = torch.stack([t.detach(), torch.zeros_like(t.detach())], 1)
            return wide[:, 0].requires_grad_(t.requires_grad)

        kw = {"offsets": strided(torch.from_numpy(indptr[:-1]))}
        if weighted:
            kw["per_sample_weights"] = strided(v)
        leaf_s = kw.get("per_sample_weights") if requires_grad else None
        return Case(strided(c), kw, leaf_s, raw, merges=False)
    if form == "offsets_int32":
        kw = {"offsets": torch.from_numpy(indptr[:-1]).int()}
        if weighted:
            kw["per_sample_weights"] = v
        return Case(c.int(), kw, leaf, raw, merges=False)
    if form in ("scipy_csr", "scipy_csr_array", "scipy_csc", "scipy_coo"):
        data = vals.astype(np.float32)
        if form == "scipy_csr":  # CSR built from the entries stores duplicates; read summed
            x = sp.csr_matrix((data, cols.astype(np.int32), indptr.astype(np.int32)), (n, m))
            return Case(x, {}, None, raw, merges=True)
        if form == "scipy_csr_array":
            x = sp.csr_array((data, cols, indptr), shape=(n, m))
            return Case(x, {}, None, raw, merges=True)
        coo = sp.coo_matrix((data, (rows, cols)), shape=(n, m))  # duplicates add up
        return Case(coo if form == "scipy_coo" else coo.tocsc(), {}, None, raw, merges=True)
    if form in ("torch_coo", "torch_coo_coalesced"):
        t = torch.sparse_coo_tensor(torch.stack([r, c]), v, (n, m), check_invariants=True)
        if form == "torch_coo_coalesced":
            t = t.coalesce()
        return Case(t, {}, leaf, raw, merges=True)
    if form == "torch_csr":
        # PyTorch's CSR invariants: columns sorted and distinct in each row, so merge first
        key, inverse = np.unique(rows * m + cols, return_inverse=True)
        merged = np.zeros(key.size)
        np.add.at(merged, inverse, vals)
        rc, cc = torch.from_numpy(key // m), torch.from_numpy(key % m)
        crow = torch.from_numpy(np.searchsorted(key // m, np.arange(n + 1)))
        vc = _values(batch, merged, requires_grad)
        t = torch.sparse_csr_tensor(crow, cc, vc, (n, m), check_invariants=True)

        def csr_entries(lf: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
            return rc, cc, torch.from_numpy(merged) if lf is None else lf

        return Case(t, {}, vc if requires_grad else None, csr_entries, merges=True)  # type: ignore[arg-type]
    if form in ("dense", "bool"):
        X = torch.zeros(n, m, dtype=torch.float64).index_put((r, c), torch.from_numpy(vals), True)
        if form == "bool":
            xb = X != 0
            grid = torch.nonzero(xb, as_tuple=True)
            return Case(xb, {}, None, lambda _: (*grid, torch.ones(grid[0].numel())), merges=True)
        xd = X.float().requires_grad_(requires_grad)
        grid = torch.meshgrid(torch.arange(n), torch.arange(m), indexing="ij")
        full = (grid[0].reshape(-1), grid[1].reshape(-1))

        def dense_entries(lf: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
            return (*full, (X if lf is None else lf).reshape(-1))

        return Case(xd, {}, xd if requires_grad else None, dense_entries, merges=True)  # type: ignore[arg-type]
    raise ValueError(form)


MATRIX_FORMS = (
    "bags",
    "offsets",
    "offsets_int32",
    "offsets_strided",
    "scipy_csr",
    "scipy_csr_array",
    "scipy_csc",
    "scipy_coo",
    "torch_coo",
    "torch_coo_coalesced",
    "torch_csr",
    "dense",
    "bool",
)
#: Forms whose values can require grad (scipy holds numpy data; bool has no gradient).
GRAD_FORMS = ("bags", "offsets", "offsets_strided", "torch_coo", "torch_coo_coalesced",
              "torch_csr", "dense")


def _safe_inverse(d: torch.Tensor, *, sqrt: bool = False) -> torch.Tensor:
    """``1 / d`` (``1 / sqrt(d)``), 0 where ``d == 0``; the inner where keeps gradients finite."""
    ok = d != 0
    safe = torch.where(ok, d, torch.ones_like(d))
    return torch.where(ok, 1 / (safe.sqrt() if sqrt else safe), torch.zeros_like(d))


def reference_linear(layer: LookupLinear) -> nn.Linear:
    """A float64 ``nn.Linear`` holding ``layer``'s values (weight transposed)."""
    lin = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    lin = lin.double()
    with torch.no_grad():
        lin.weight.copy_(layer.weight.detach().double().T)
        if layer.bias is not None:
            lin.bias.copy_(layer.bias.detach().double())
    return lin


def reference_bags(
    lin: nn.Linear,
    entries: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    n_bags: int,
    *,
    mode: str,
    padding_idx: int | None,
    merges: bool,
) -> torch.Tensor:
    """``nn.Linear`` on the dense matrix of ``entries``, each row reduced by ``mode``."""
    rows, cols, vals = entries
    vals = vals.double()
    m = lin.in_features
    keep = torch.ones_like(cols, dtype=torch.bool) if padding_idx is None else cols != padding_idx
    vals = vals * keep
    X = torch.zeros(n_bags, m, dtype=torch.float64).index_put((rows, cols), vals, accumulate=True)
    if mode == "max":
        if merges:
            present = X != 0
        else:
            present = torch.zeros(n_bags, m, dtype=torch.bool)
            present[rows[keep], cols[keep]] = True
        W = lin.weight.T  # (in, out)
        masked = torch.where(present.unsqueeze(-1), W, torch.tensor(-torch.inf, dtype=W.dtype))
        out = torch.where(present.any(1, keepdim=True), masked.amax(1), torch.zeros(()))
        return out if lin.bias is None else out + lin.bias
    if mode == "mean":
        X = X * _safe_inverse(X.sum(1)).unsqueeze(1)
    elif mode == "sqrtn":
        if merges:  # the layer sees the merged entries: the non-zeros of X
            sq = (X * X).sum(1)
        else:  # entries one by one, like TensorFlow's sqrtn combiner
            sq = torch.zeros(n_bags, dtype=torch.float64).index_add(0, rows, vals * vals)
        X = X * _safe_inverse(sq, sqrt=True).unsqueeze(1)
    return lin(X)


def reference_index(lin: nn.Linear, x: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """``nn.Linear`` on ``one_hot(x)``, the padding column dropped."""
    X = torch.nn.functional.one_hot(x.long(), lin.in_features).double()
    if padding_idx is not None:
        X[..., padding_idx] = 0
    return lin(X)


def assert_close(got: torch.Tensor | None, want: torch.Tensor | None, dtype: torch.dtype) -> None:
    """``got`` (layer, its dtype; dense or sparse) equals the float64 reference ``want``."""
    assert got is not None and want is not None
    if got.layout != torch.strided:
        got = got.to_dense()
    # a float32 input's gradient carries float32 rounding even when the layer is float64
    rtol, atol = max(TOLERANCES[dtype], TOLERANCES.get(got.dtype, (0.0, 0.0)))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(
        got.detach().cpu().double(), want.detach().double(), rtol=rtol, atol=atol
    )
