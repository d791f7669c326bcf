"""The methods the bench matrix compares, for each input form: one callable per method.

Every method computes the same ``densify(x) @ W`` (``W`` of shape ``(in_features,
out_features)``, the embedding layout) from its own representation of the same input:

====================  ==============================================================
input form            representations
====================  ==============================================================
``indices``           one index per row: ``idx`` (N,), one-hot dense (N, in), CSR
``bags``              ``bag_size`` indices per row, weight 1 (multi-hot counts)
``csr``               a weighted scipy CSR matrix (TF-IDF-like values in (0, 1])
``dense``             a dense multi-hot float tensor: the user holds the dense matrix
====================  ==============================================================

The dense and converted representations are built before timing (except where a method's name
says the conversion is included); their size is recorded as the method's ``input_bytes``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from ..functional import lookup_linear
from ..sparse.bags import Bags

__all__ = [
    "DISTRIBUTIONS",
    "FORMS",
    "LINEAR",
    "LOOKUP",
    "LOOKUP_OF_FORM",
    "Method",
    "make_input",
    "methods_for",
]

FORMS = ("indices", "bags", "csr", "dense")
DISTRIBUTIONS = ("uniform", "zipf")
ZIPF_EXPONENT = 1.2

LINEAR = "nn.Linear (dense input)"
LOOKUP = "LookupLinear"
LOOKUP_SPARSE = "LookupLinear (sparse grad)"
EMBEDDING = "nn.Embedding"
EMBEDDING_BAG = "nn.EmbeddingBag"
SPARSE_MM = "torch.sparse.mm (CSR)"
SCIPY = "scipy CSR @ numpy"
FROM_DENSE = "LookupLinear (Bags.from_dense)"
FROM_SCIPY = "LookupLinear (scipy input)"

FLOAT_BYTES = 4

#: for each form, the lookup method compared with ``nn.Linear`` on the dense input
LOOKUP_OF_FORM = {"indices": LOOKUP, "bags": LOOKUP, "csr": FROM_SCIPY, "dense": FROM_DENSE}


@dataclass
class Method:
    """One way to compute the case: ``run()`` returns the output (a tensor or an array).

    ``dense_grad`` says whether its backward materialises an ``(in_features, out_features)``
    gradient; ``input_bytes`` is the size of the input representation it needs;
    ``backward`` overrides autograd (scipy: the weight gradient ``X.T @ G`` by hand).
    """

    name: str
    run: Callable[[], Any]
    input_bytes: int
    dense_grad: bool = True
    backward: Callable[[Any], Any] | None = None
    needs_dense_input: bool = False
    cpu_only: bool = False
    build: Callable[[], None] | None = field(default=None, repr=False)


def draw_indices(rng: np.random.Generator, n: int, size: int, dist: str) -> np.ndarray:
    """``size`` indices in ``[0, n)``: uniform, or Zipf (index 0 the most frequent).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> int(draw_indices(rng, 10, 1000, "zipf").max()) < 10
    True
    """
    if dist == "uniform":
        return rng.integers(0, n, size=size)
    if dist == "zipf":
        return (rng.zipf(ZIPF_EXPONENT, size=size) - 1) % n
    raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {dist!r}")


def make_input(
    form: str, dist: str, n: int, batch: int, bag_size: int, seed: int = 0
) -> sp.csr_matrix:
    """The case's input as a float32 scipy CSR matrix of shape ``(batch, n)``.

    ``indices``: one entry of value 1 per row; ``bags`` and ``dense``: ``bag_size`` entries of
    value 1 per row (repeats summed); ``csr``: ``bag_size`` entries with values in (0, 1].
    """
    rng = np.random.default_rng(seed)
    per_row = 1 if form == "indices" else bag_size
    cols = draw_indices(rng, n, batch * per_row, dist)
    if form == "csr":
        values = rng.uniform(0.05, 1.0, size=cols.size).astype(np.float32)
    else:
        values = np.ones(cols.size, dtype=np.float32)
    indptr = np.arange(0, cols.size + 1, per_row)
    m = sp.csr_matrix((values, cols, indptr), shape=(batch, n))
    if form != "indices":
        m.sum_duplicates()
    return m


def _torch_csr(x: sp.csr_matrix, device: str) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.from_numpy(x.indptr.astype(np.int64)),
            torch.from_numpy(x.indices.astype(np.int64)),
            torch.from_numpy(x.data),
            size=x.shape,
            device=device,
            check_invariants=False,
        )


def methods_for(form: str, x: sp.csr_matrix, W: torch.Tensor, device: str) -> list[Method]:
    """The methods that compute ``densify(x) @ W`` for ``form``; dense inputs are built lazily.

    Call ``method.build()`` (when not None) before ``method.run``: it makes the dense input.
    """
    n = x.shape[1]
    nnz_bytes = x.nnz * (8 + 8 + FLOAT_BYTES)
    dense_bytes = x.shape[0] * n * FLOAT_BYTES
    holder: dict[str, torch.Tensor] = {}

    def build_dense() -> None:
        if "dense" not in holder:
            holder["dense"] = torch.from_numpy(x.toarray()).to(device)

    bags = Bags.from_scipy(x).to(device)
    idx = bags.indices
    offsets = bags.offsets
    psw = bags.weights
    csr_t = _torch_csr(x, device)
    Wn = W.detach().cpu().numpy()

    def linear() -> torch.Tensor:
        return F.linear(holder["dense"], W.T)

    def scipy_fwd() -> np.ndarray:
        return x @ Wn

    def scipy_bwd(_: Any) -> np.ndarray:
        G = np.ones((x.shape[0], W.shape[1]), dtype=np.float32)
        return x.T @ G  # the weight gradient of X @ W, shape (n, out)

    common = [
        Method(LINEAR, linear, dense_bytes, needs_dense_input=True, build=build_dense),
        Method(SPARSE_MM, lambda: torch.sparse.mm(csr_t, W), nnz_bytes),
        Method(SCIPY, scipy_fwd, nnz_bytes, backward=scipy_bwd, cpu_only=True),
    ]
    if form == "indices":
        flat = idx  # one entry per row: the indices themselves
        return [
            *common,
            Method(EMBEDDING, lambda: F.embedding(flat, W), flat.numel() * 8),
            Method(LOOKUP, lambda: lookup_linear(flat, W), flat.numel() * 8),
            Method(
                LOOKUP_SPARSE,
                lambda: lookup_linear(flat, W, sparse=True),
                flat.numel() * 8,
                dense_grad=False,
            ),
        ]
    if form == "bags":
        return [
            *common,
            Method(
                EMBEDDING_BAG,
                lambda: F.embedding_bag(
                    idx, W, offsets, mode="sum", per_sample_weights=psw, include_last_offset=True
                ),
                nnz_bytes,
            ),
            Method(LOOKUP, lambda: lookup_linear(bags, W), nnz_bytes),
            Method(
                LOOKUP_SPARSE, lambda: lookup_linear(bags, W, sparse=True), nnz_bytes,
                dense_grad=False,
            ),
        ]
    if form == "csr":
        return [
            *common,
            Method(
                EMBEDDING_BAG,
                lambda: F.embedding_bag(
                    idx, W, offsets, mode="sum", per_sample_weights=psw, include_last_offset=True
                ),
                nnz_bytes,
            ),
            Method(FROM_SCIPY, lambda: lookup_linear(x, W), nnz_bytes),
            Method(
                LOOKUP_SPARSE, lambda: lookup_linear(x, W, sparse=True), nnz_bytes,
                dense_grad=False,
            ),
        ]
    if form == "dense":
        return [
            Method(LINEAR, linear, dense_bytes, needs_dense_input=True, build=build_dense),
            Method(
                LOOKUP,
                lambda: lookup_linear(holder["dense"], W),
                dense_bytes,
                needs_dense_input=True,
                build=build_dense,
            ),
            Method(
                FROM_DENSE,
                lambda: lookup_linear(Bags.from_dense(holder["dense"]), W),
                dense_bytes,
                needs_dense_input=True,
                build=build_dense,
            ),
        ]
    raise ValueError(f"form must be one of {FORMS}, got {form!r}")
