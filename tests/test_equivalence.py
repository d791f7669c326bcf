"""Every input form x mode x padding_idx x dtype equals nn.Linear on the dense input.

Forward, and the gradients of weight, bias and (when they require grad) the input's values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import scipy.sparse
import torch
import torch.nn.functional as F
from forms import (
    BATCH,
    DEVICES,
    DTYPES,
    GRAD_FORMS,
    MATRIX_FORMS,
    MODES,
    UNWEIGHTED,
    assert_close,
    make_case,
    on_cuda_in_a_process,
    reference_bags,
    reference_index,
    reference_linear,
)

from lookuplinear import Bags, InputValueError, LookupLinear
from lookuplinear.ops import backend as kernel_backend
from lookuplinear.ops import use_backend


def _to(x: Any, device: str) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor | Bags) else x


def _layer(in_features: int, **kw: Any) -> LookupLinear:
    torch.manual_seed(0)
    layer = LookupLinear(in_features, 4, **kw)
    with torch.no_grad():  # a non-zero bias, so that "an empty row gives the bias" is visible
        assert layer.bias is not None
        layer.bias.normal_()
    return layer


def _upstream(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A float64 upstream gradient that is exact in ``dtype`` (so both sides get the same one)."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).double()


@pytest.fixture(params=["auto", "torch"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test body on the C kernels (where built) and on their torch-op fallback; yields the
    backend that runs (``"c"`` or ``"torch"``)."""
    with use_backend(request.param):
        yield kernel_backend()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", MATRIX_FORMS)
def test_matrix_form_equals_dense_linear(
    form: str, mode: str, padding_idx: int | None, dtype: torch.dtype, backend: str,
    device: str = "cpu",
) -> None:
    batch = UNWEIGHTED if mode == "max" or form == "bool" else BATCH
    grad = form in GRAD_FORMS and mode != "max"
    layer = _layer(batch.in_features, mode=mode, padding_idx=padding_idx, dtype=dtype)
    layer = layer.to(device)
    case = make_case(form, batch, requires_grad=grad)
    x = _to(case.input, device)
    kwargs = {k: _to(v, device) for k, v in case.kwargs.items()}
    pad = layer.padding_idx

    if mode == "max" and case.merges and form != "bool" and batch.has_duplicates(pad):
        # the form adds duplicates up to a value of 2, and max needs every value to be 1
        if device != "cpu" and isinstance(x, torch.Tensor | Bags):
            pytest.skip("values on the device are asserted there, which ends the process's "
                        "CUDA context: test_max_weight_on_cuda_is_a_device_assert")
        with pytest.raises(InputValueError, match="weight 1"):
            layer(x, **kwargs)
        return

    lin = reference_linear(layer)
    leaf_ref = None if case.leaf is None else case.leaf.detach().double().requires_grad_(True)
    ref = reference_bags(
        lin, case.entries(leaf_ref), batch.n, mode=mode, padding_idx=pad, merges=case.merges
    )
    out = layer(x, **kwargs)
    assert out.shape == (batch.n, 4)
    assert out.dtype == dtype
    assert_close(out, ref, dtype)

    g = _upstream(ref.shape, dtype)
    inputs = [layer.weight, layer.bias] + ([case.leaf] if case.leaf is not None else [])
    ref_inputs = [lin.weight, lin.bias] + ([leaf_ref] if leaf_ref is not None else [])
    grads = torch.autograd.grad(out, inputs, g.to(dtype).to(device))
    ref_grads = torch.autograd.grad(ref, ref_inputs, g)
    assert_close(grads[0], ref_grads[0].T, dtype)  # weight: (in, out) vs nn.Linear's (out, in)
    assert_close(grads[1], ref_grads[1], dtype)
    if case.leaf is not None:
        assert_close(grads[2], ref_grads[2], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("int_dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 2)], ids=str)
def test_index_tensor_equals_linear_on_one_hot(
    shape: tuple[int, ...],
    int_dtype: torch.dtype,
    mode: str,
    padding_idx: int | None,
    dtype: torch.dtype,
    device: str = "cpu",
) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    x = torch.randint(0, 10, shape, generator=gen)
    if x.numel() >= 2:  # make sure both padding choices occur
        x.view(-1)[0], x.view(-1)[-1] = 2, 9
    x = x.to(int_dtype)
    layer = _layer(10, mode=mode, padding_idx=padding_idx, dtype=dtype).to(device)
    lin = reference_linear(layer)

    out = layer(x.to(device))
    ref = reference_index(lin, x, layer.padding_idx)
    assert out.shape == (*shape, 4)
    assert_close(out, ref, dtype)

    g = _upstream(ref.shape, dtype)
    grads = torch.autograd.grad(out, [layer.weight, layer.bias], g.to(dtype).to(device))
    ref_grads = torch.autograd.grad(ref, [lin.weight, lin.bias], g)
    assert_close(grads[0], ref_grads[0].T, dtype)
    assert_close(grads[1], ref_grads[1], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", MATRIX_FORMS)
def test_matrix_form_on_device(form: str, mode: str, device: str) -> None:
    """The matrix-form test above on every device (float32 and bfloat16, padding_idx=2)."""
    for dtype in (torch.float32, torch.bfloat16):
        test_matrix_form_equals_dense_linear(form, mode, 2, dtype, "auto", device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("mode", MODES)
def test_index_tensor_on_device(mode: str, padding_idx: int | None, device: str) -> None:
    """The index test above on every device (float32, int64 and int32 indices)."""
    for int_dtype in (torch.int64, torch.int32):
        test_index_tensor_equals_linear_on_one_hot(
            (3, 4), int_dtype, mode, padding_idx, torch.float32, device
        )


def test_max_weight_of_a_host_matrix_is_refused_before_it_leaves_the_host() -> None:
    """A scipy matrix for a ``mode="max"`` layer on another device (meta here, CUDA on a GPU)
    is read on the host: an entry of weight 2 is the CPU's ``InputValueError`` there, not
    a device-side assert (which ends a CUDA context) or nothing at all (meta)."""
    layer = LookupLinear(5, 2, mode="max", device="meta")
    twice = scipy.sparse.coo_matrix(([1.0, 1.0], ([0, 0], [3, 3])), shape=(1, 5))
    with pytest.raises(InputValueError, match=r"entry 0 has weight 2\.0"):
        layer(twice)
    once = scipy.sparse.coo_matrix(([1.0], ([0], [3])), shape=(1, 5))
    assert layer(once).shape == (1, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_max_weight_on_cuda_is_a_device_assert() -> None:
    """A ``mode="max"`` batch on the GPU with an entry of weight 2 (a COO matrix holding one
    entry twice) is a device-side assert at the next synchronisation, as ``nn.EmbeddingBag``'s
    for a bad index (in a process of its own: it ends the CUDA context); the same matrix
    from scipy, on the host, is refused there with the CPU's ``InputValueError``."""
    layer = LookupLinear(5, 2, mode="max", device="cuda")
    twice = scipy.sparse.coo_matrix(([1.0, 1.0], ([0, 0], [3, 3])), shape=(1, 5))
    with pytest.raises(InputValueError, match=r"weight 2\.0"):  # on the host: nothing moved
        layer(twice)
    run = on_cuda_in_a_process("""
        from lookuplinear import LookupLinear
        layer = LookupLinear(5, 2, mode="max", device="cuda")
        layer(torch.sparse_coo_tensor([[0, 0], [3, 3]], [1.0, 1.0], (1, 5), device="cuda"))
    """)
    assert "refused:" in run.stdout and "device-side assert" in run.stdout, \
        run.stdout + run.stderr


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", ["index", "bags", "offsets", "scipy_csr", "torch_coo"])
def test_sparse_true_gives_sparse_weight_grad_equal_to_dense(form: str, mode: str,
                                                             backend: str) -> None:
    batch = UNWEIGHTED if mode == "max" else BATCH
    if mode == "max" and form != "index":  # F.embedding_bag has no sparse gradient for max
        with pytest.raises(InputValueError, match="sparse"):
            _layer(10, mode=mode, sparse=True)(Bags.from_lists([[1]]))
        return
    dense_layer = _layer(batch.in_features, mode=mode, padding_idx=2)
    sparse_layer = _layer(batch.in_features, mode=mode, padding_idx=2, sparse=True)
    if form == "index":
        x: Any = torch.tensor([[3, 1, 2], [9, 9, 0]])
        kwargs: dict[str, Any] = {}
    else:
        case = make_case(form, batch)
        x, kwargs = case.input, case.kwargs
    for layer in (dense_layer, sparse_layer):
        layer(x, **kwargs).pow(2).sum().backward()
    assert sparse_layer.weight.grad is not None and dense_layer.weight.grad is not None
    assert sparse_layer.weight.grad.is_sparse
    assert not dense_layer.weight.grad.is_sparse
    if backend == "torch":  # index_add_ sums in another order than ATen's dense backward
        torch.testing.assert_close(sparse_layer.weight.grad.to_dense(), dense_layer.weight.grad)
    else:  # the C kernels sum each row's entries in order, as ATen's dense backward does
        assert torch.equal(sparse_layer.weight.grad.to_dense(), dense_layer.weight.grad)
    assert dense_layer.weight.grad.abs().sum() > 0  # the comparison is not between zeros
    assert not dense_layer.weight.grad[2].any()  # the padding row gets no gradient


def test_same_batch_gives_same_output_in_every_form() -> None:
    """All matrix forms of one batch agree with each other (mode="mean", padding)."""
    layer = _layer(BATCH.in_features, mode="mean", padding_idx=2)
    outs = {}
    for form in MATRIX_FORMS:
        if form == "bool":
            continue
        case = make_case(form, BATCH)
        outs[form] = layer(case.input, **case.kwargs)
    first = outs.pop("bags")
    for form, out in outs.items():
        torch.testing.assert_close(out, first, msg=form)


def test_mean_and_sqrtn_of_empty_or_padding_or_zero_sum_rows_give_the_bias() -> None:
    # bag 1 is empty, bag 2 holds only padding (2), bag 4's weights sum to 0 (mean only)
    for mode, rows in (("mean", [1, 2, 4]), ("sqrtn", [1, 2])):
        layer = _layer(BATCH.in_features, mode=mode, padding_idx=2)
        for form in GRAD_FORMS:
            case = make_case(form, BATCH, requires_grad=True)
            out = layer(case.input, **case.kwargs)
            assert torch.equal(out[rows], layer.bias.detach().expand(len(rows), -1)), form
            out.sum().backward()
            assert case.leaf is not None and case.leaf.grad is not None
            assert torch.isfinite(case.leaf.grad).all()
            assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()
            layer.zero_grad()


def test_sqrtn_counts_duplicate_entries_one_by_one() -> None:
    """Like TensorFlow's combiner: [3, 3] is two entries of weight 1, so the scale is 1/sqrt(2),
    while the dense row [.., 2, ..] (merged) has L2 norm 2."""
    layer = _layer(5, mode="sqrtn", bias=True)
    w3 = layer.weight.detach()[3]
    b = layer.bias.detach()
    torch.testing.assert_close(layer(Bags.from_lists([[3, 3]]))[0], 2 * w3 / 2**0.5 + b)
    dense = torch.tensor([[0.0, 0.0, 0.0, 2.0, 0.0]])
    torch.testing.assert_close(layer(dense)[0], 2 * w3 / 2 + b)


@pytest.mark.parametrize("mode", MODES)
def test_dense_input_with_leading_dims_is_row_by_row(mode: str) -> None:
    """A dense ``(..., in_features)`` input is reduced row by row, like nn.Linear."""
    layer = _layer(6, mode=mode, padding_idx=0)
    X = (torch.rand(2, 3, 6) < 0.5).float()
    X[0, 1] = 0  # an empty row
    out = layer(X)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out.reshape(6, 4), layer(X.reshape(6, 6)))
    torch.testing.assert_close(out[0, 1], layer.bias.detach())


@pytest.mark.parametrize("mode", ["sum", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_bfloat16_rows_pooled_in_float32_equal_embedding_bag(mode: str,
                                                            padding_idx: int | None) -> None:
    """The CUDA bfloat16 path with per-entry weights or max (the batch's rows gathered and
    pooled in float32), run here on the CPU: ``F.embedding_bag`` on the float32 table, rounded
    to bfloat16, forward and weight gradient; an empty bag gives zeros."""
    from lookuplinear.functional import _float32_pooled

    torch.manual_seed(0)
    weight = torch.randn(6, 3).bfloat16().requires_grad_()
    bags = Bags.from_lists([[1, 2, 1], [], [5, 2], [2]])
    psw = torch.rand(bags.nnz).bfloat16() if mode == "sum" else None
    code = {"sum": 0, "max": 2}[mode]
    out = _float32_pooled(bags, weight, psw, code, padding_idx)
    ref_weight = weight.detach().float().requires_grad_()
    ref = F.embedding_bag(bags.indices, ref_weight, bags.offsets, mode=mode,
                          per_sample_weights=None if psw is None else psw.float(),
                          include_last_offset=True, padding_idx=padding_idx)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, ref.bfloat16())
    g = torch.randn(out.shape)
    out.backward(g.bfloat16())
    ref.backward(g.bfloat16().float())
    assert weight.grad is not None and ref_weight.grad is not None
    torch.testing.assert_close(weight.grad.float(), ref_weight.grad, rtol=1e-2, atol=1e-2)
