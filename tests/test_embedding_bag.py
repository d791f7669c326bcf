"""lookuplinear.EmbeddingBag against nn.EmbeddingBag on the same calls: a drop-in (signature,
defaults, attributes, state, repr), forward and gradients on every form, and what it works with."""

from __future__ import annotations

import gc
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import one_process
from torch import nn

import lookuplinear
from lookuplinear import (
    Bags,
    Checkpoint,
    DtypeMismatchError,
    EmbeddingBag,
    InputTypeError,
    InputValueError,
    LookupIndexError,
    QuantizedEmbeddingBag,
    optim,
)
from lookuplinear.ops import use_backend


# ------------------------------------------------------------------ the class itself
def test_signature_defaults_and_attributes_are_nn_embeddingbags() -> None:
    def params(f: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]

    assert params(EmbeddingBag.__init__) == params(nn.EmbeddingBag.__init__)
    assert params(EmbeddingBag.forward) == params(nn.EmbeddingBag.forward)
    assert params(EmbeddingBag.from_pretrained) == params(nn.EmbeddingBag.from_pretrained)
    bag = EmbeddingBag(10, 3)
    assert isinstance(bag, nn.EmbeddingBag)
    ref = nn.EmbeddingBag(10, 3)
    assert {k: v for k, v in vars(bag).items() if not k.startswith("_")} == {
        k: v for k, v in vars(ref).items() if not k.startswith("_")}
    assert bag.num_embeddings == 10 and bag.embedding_dim == 3 and bag.mode == "mean"
    assert list(bag.state_dict()) == list(ref.state_dict()) == ["weight"]
    assert [n for n, _ in bag.named_parameters()] == ["weight"]  # no bias


@pytest.mark.parametrize("kwargs", [
    {}, {"mode": "sum"}, {"mode": "max", "padding_idx": -1}, {"max_norm": 1.5, "norm_type": 1.0},
    {"scale_grad_by_freq": True}, {"include_last_offset": True, "padding_idx": 0},
])
def test_repr_state_dict_and_draw_equal_torchs(kwargs: dict[str, Any]) -> None:
    torch.manual_seed(0)
    bag = EmbeddingBag(10, 3, **kwargs)
    torch.manual_seed(0)
    ref = nn.EmbeddingBag(10, 3, **kwargs)
    assert repr(bag) == repr(ref)
    assert torch.equal(bag.weight, ref.weight)  # the same RNG calls, the padding row zeroed
    bag.load_state_dict(ref.state_dict())  # both ways, strict
    ref.load_state_dict(bag.state_dict())


def test_from_pretrained_and_weight_as_torchs() -> None:
    table = torch.randn(6, 4)
    for freeze in (True, False):
        bag = EmbeddingBag.from_pretrained(table, freeze=freeze, mode="sum", padding_idx=2)
        ref = nn.EmbeddingBag.from_pretrained(table, freeze=freeze, mode="sum", padding_idx=2)
        assert type(bag) is EmbeddingBag and bag.weight.requires_grad is (not freeze)
        assert torch.equal(bag.weight, ref.weight) and bag.padding_idx == 2
        x = torch.tensor([[0, 2], [5, 5]])
        assert torch.equal(bag(x), ref(x))
    bag = EmbeddingBag(6, 4, None, 2.0, False, "sum", False, table)  # positional, as torch's
    assert torch.equal(bag.weight, table)
    with pytest.raises(InputValueError, match=r"_weight must have shape .*\(6, 5\)"):
        EmbeddingBag(6, 5, _weight=table)


# ------------------------------------------------------------------ forward and gradients
def _pair(**kwargs: Any) -> tuple[EmbeddingBag, nn.EmbeddingBag]:
    torch.manual_seed(0)
    bag = EmbeddingBag(10, 4, dtype=torch.float64, **kwargs)
    torch.manual_seed(0)
    ref = nn.EmbeddingBag(10, 4, dtype=torch.float64, **kwargs)
    return bag, ref


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor of stride 2 (a column of a wider one, say), which ATen's
    internal bag kernels would read as contiguous."""
    return torch.stack([t, torch.full_like(t, 99)], 1)[:, 0]


def _calls(include_last_offset: bool) -> list[tuple[Any, ...]]:
    flat = torch.tensor([1, 2, 2, 9, 9, 3, 0])
    starts = torch.tensor([0, 0, 3, 3, 6])  # bags 0 and 3 empty
    offsets = torch.cat([starts, torch.tensor([7])]) if include_last_offset else starts
    calls: list[tuple[Any, ...]] = [(flat, offsets), (flat.int(), offsets.int()),
                                    (_strided(flat), _strided(offsets)),
                                    (flat, offsets.to(torch.int16)),
                                    (flat, offsets.to(torch.uint8))]
    if not include_last_offset:  # a (B, N) input ignores include_last_offset in torch too
        calls.append((torch.tensor([[1, 2, 2], [9, 0, 3]]),))
    calls.append((torch.tensor([[4, 7], [0, 0]]),))
    return calls


def _dense(g: torch.Tensor | None) -> torch.Tensor | None:
    return g.to_dense() if g is not None and g.is_sparse else g


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0, -1])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_forward_and_gradients_equal_torchs_on_every_form(
    mode: str, padding_idx: int | None, sparse: bool, include_last_offset: bool
) -> None:
    if mode == "max" and sparse:
        pytest.skip("PyTorch refuses sparse gradients with mode='max'")
    for call in _calls(include_last_offset):
        bag, ref = _pair(mode=mode, padding_idx=padding_idx, sparse=sparse,
                         include_last_offset=include_last_offset)
        out, want = bag(*call), ref(*call)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
        grad = torch.randn_like(want)
        out.backward(grad)
        want.backward(grad)
        assert bag.weight.grad is not None and bag.weight.grad.is_sparse is sparse
        torch.testing.assert_close(_dense(bag.weight.grad), _dense(ref.weight.grad))


@pytest.mark.parametrize(("mode", "sparse"), [("sum", False), ("sum", True), ("mean", False),
                                             ("mean", True), ("max", False)])
@pytest.mark.parametrize(("rows", "dim"), [(0, 3), (3, 0), (0, 0)])
def test_a_table_of_no_rows_or_columns_computes_as_torchs(rows: int, dim: int, mode: str,
                                                          sparse: bool) -> None:
    """``nn.EmbeddingBag(0, 3)`` and ``(3, 0)`` are tables PyTorch builds and runs: empty bags
    give zeros of width ``dim``, and the gradient is the table's shape. (On one thread:
    PyTorch's CPU bag kernel, which both call for a table of no columns, fails on bags that
    hold entries when it splits them over threads, "Expected i < index_size".)"""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _no_rows_or_columns(rows, dim, mode, sparse)
    finally:
        torch.set_num_threads(threads)


def _no_rows_or_columns(rows: int, dim: int, mode: str, sparse: bool) -> None:
    empty = torch.zeros(0, dtype=torch.long)
    calls = [(empty, torch.tensor([0, 0, 0]))]  # three empty bags
    if rows:
        calls += [(torch.tensor([2, 0, 1]), torch.tensor([0, 1, 1])),
                  (torch.tensor([[2, 0], [1, 1]]),)]
    for call in calls:
        bag = EmbeddingBag(rows, dim, mode=mode, sparse=sparse)
        ref = nn.EmbeddingBag(rows, dim, mode=mode, sparse=sparse)
        out, want = bag(*call), ref(*call)
        assert out.shape == want.shape and torch.equal(out, want)
        out.sum().backward()
        want.sum().backward()
        assert bag.weight.grad is not None and ref.weight.grad is not None
        assert bag.weight.grad.is_sparse is ref.weight.grad.is_sparse is sparse
        assert torch.equal(_dense(bag.weight.grad), _dense(ref.weight.grad))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_a_mean_is_nn_embedding_bags_to_the_bit(dtype: torch.dtype, sparse: bool,
                                                padding_idx: int | None) -> None:
    """mode="mean" divides each bag's sum by its size, as ATen does: the output is
    nn.EmbeddingBag's to the bit (a mean folded into per-entry weights 1/n rounds otherwise),
    for the drop-in and for LookupLinear on the same bags of many sizes (empty ones and
    padding entries among them); the weight gradient too, dense or sparse (ATen's backward
    multiplies by 1 / size, which a division's backward would not). With ``padding_idx`` and a
    dense gradient, ATen's backward leaves its fast kernel and sums a row's entries in
    another order, which the lookup of the entries without padding (ATen's fast kernel)
    does not follow: equal within rounding there."""
    torch.manual_seed(0)
    table = torch.randn(100, 16, dtype=dtype)
    x = torch.randint(0, 100, (3000,))
    x[::7] = 3
    offsets = torch.cat([torch.zeros(1, dtype=torch.long),
                         torch.randint(0, 3000, (999,)).sort().values])
    grad = torch.randn(1000, 16, dtype=dtype)
    ref = nn.EmbeddingBag.from_pretrained(table.clone(), mode="mean", freeze=False,
                                          sparse=sparse, padding_idx=padding_idx)
    bag = EmbeddingBag.from_pretrained(table.clone(), mode="mean", freeze=False, sparse=sparse,
                                       padding_idx=padding_idx)
    layer = lookuplinear.LookupLinear(100, 16, bias=False, mode="mean", sparse=sparse,
                                      dtype=dtype, padding_idx=padding_idx)
    with torch.no_grad():
        layer.weight.copy_(table)
    want = ref(x, offsets)
    assert torch.equal(bag(x, offsets), want) and torch.equal(layer(x, offsets), want)
    want.backward(grad)
    for ours in (bag, layer):
        ours(x, offsets).backward(grad)
        assert ours.weight.grad is not None and ref.weight.grad is not None
        if sparse or padding_idx is None:
            assert torch.equal(_dense(ours.weight.grad), _dense(ref.weight.grad))
        else:
            torch.testing.assert_close(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("cls", [EmbeddingBag, lookuplinear.Embedding])
def test_an_index_into_a_table_of_no_rows_says_no_index_is_valid(cls: type) -> None:
    """An index into a table of no rows is refused as an index out of range (PyTorch raises
    an IndexError or a RuntimeError), naming the empty table rather than a range [0, -1]."""
    with pytest.raises(lookuplinear.LookupIndexError,
                       match=r"in_features=0: the table has no rows, so no index is valid"):
        cls(0, 3)(torch.tensor([[0]]))


@pytest.mark.parametrize("sparse", [False, True])
def test_per_sample_weights_forward_and_gradients_equal_torchs(sparse: bool) -> None:
    bag, ref = _pair(mode="sum", sparse=sparse, padding_idx=3)
    for x, offsets in ((torch.tensor([1, 3, 3, 8]), torch.tensor([0, 1, 1])),
                       (torch.tensor([[1, 3], [3, 8]]), None)):
        w = torch.rand(x.shape, dtype=torch.float64, requires_grad=True)
        w_ref = w.detach().clone().requires_grad_()
        out, want = bag(x, offsets, w), ref(x, offsets, w_ref)
        torch.testing.assert_close(out, want)
        out.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(w.grad, w_ref.grad)
        torch.testing.assert_close(_dense(bag.weight.grad), _dense(ref.weight.grad))
        bag.weight.grad = ref.weight.grad = None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_bags_with_padding_equal_torchs_to_the_bit(dtype: torch.dtype) -> None:
    """Half-precision bags with a ``padding_idx`` give ``nn.EmbeddingBag``'s results bit for
    bit, unweighted and weighted: a bfloat16 table takes its kernel with ``padding_idx`` (the
    kernel without rounds bfloat16 sums otherwise), a float16 table drops the padding entries
    (both kernels sum float16 alike)."""
    g = torch.Generator().manual_seed(12)
    idx, offsets = torch.randint(0, 10, (400,), generator=g), torch.arange(0, 400, 9)
    weights = torch.rand(400, generator=g).to(dtype)
    for mode, psw in (("sum", None), ("mean", None), ("sum", weights)):
        torch.manual_seed(0)
        bag = EmbeddingBag(10, 4, mode=mode, padding_idx=2, dtype=dtype)
        ref = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=2, dtype=dtype,
                              _weight=bag.weight.detach().clone())
        with torch.no_grad():
            assert torch.equal(bag(idx, offsets, psw), ref(idx, offsets, psw)), mode


def test_nested_input_equals_torchs() -> None:
    bag, ref = _pair(mode="mean")
    rows = [torch.tensor([1, 2]), torch.tensor([3]), torch.tensor([4, 5, 9])]
    x = torch.nested.nested_tensor(rows, layout=torch.jagged)
    torch.testing.assert_close(bag(x), ref(x))


def test_a_strided_nested_input_is_refused_naming_the_jagged_layout() -> None:
    """torch's default nested layout has no offsets (nn.EmbeddingBag fails on it with an
    AttributeError); the float and the quantized bag name the layout that works."""
    bag = EmbeddingBag(10, 4, mode="sum")
    rows = [torch.tensor([1, 2]), torch.tensor([3])]
    strided = torch.nested.nested_tensor(rows)
    for layer in (bag, bag.quantize("int8")):
        with pytest.raises(InputTypeError, match=r"layout=torch\.jagged"):
            layer(strided)
        torch.testing.assert_close(layer(torch.nested.nested_tensor(rows, layout=torch.jagged)),
                                   layer(torch.tensor([1, 2, 3]), torch.tensor([0, 2])))


def test_max_norm_renorms_the_named_rows_as_torch() -> None:
    bag, ref = _pair(max_norm=0.7, norm_type=1.0, mode="sum")
    x = torch.tensor([[1, 2], [2, 8]])
    torch.testing.assert_close(bag(x), ref(x))
    torch.testing.assert_close(bag.weight, ref.weight)  # rows 1, 2, 8 rewritten in place


class _Triple(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 3 * w


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_max_norm_renorms_the_parametrized_weight_it_looks_up_as_torch(mode: str) -> None:
    """A parametrized weight is computed on each read: the forward reads it once, as
    nn.EmbeddingBag's does, and renorms the rows of the table it looks up (not another copy);
    the parameter itself is left as it is, as there."""
    from torch.nn.utils import parametrize

    bag, ref = _pair(max_norm=0.7, mode=mode)
    for m in (bag, ref):
        parametrize.register_parametrization(m, "weight", _Triple())
    x = torch.tensor([[1, 2], [2, 8]])
    got, want = bag(x), ref(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    ours, theirs = bag.parametrizations.weight.original, ref.parametrizations.weight.original
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours.grad, theirs.grad)


def test_max_norm_renorms_a_table_made_under_inference_mode_as_torch() -> None:
    """The renorm acts on the table's values outside autograd, as nn.EmbeddingBag's: a table
    made under inference_mode (loaded for serving) is renormed outside it too."""
    x = torch.tensor([[1, 2], [2, 8]])
    with torch.inference_mode():
        bag, ref = _pair(max_norm=0.7, mode="sum")
    torch.testing.assert_close(bag(x), ref(x))
    torch.testing.assert_close(bag.weight, ref.weight)


def _max_pair(dtype: torch.dtype, **kwargs: Any) -> tuple[EmbeddingBag, nn.EmbeddingBag]:
    torch.manual_seed(0)
    bag = EmbeddingBag(10, 4, mode="max", dtype=dtype, **kwargs)
    torch.manual_seed(0)
    ref = nn.EmbeddingBag(10, 4, mode="max", dtype=dtype, **kwargs)
    return bag, ref


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_gradient_goes_to_the_rows_the_forward_chose_as_torch(dtype: torch.dtype,
                                                                  backend: str) -> None:
    """The backward adds the gradient to the rows that gave each maximum when the forward ran,
    as nn.EmbeddingBag's (its max_indices), whatever happened to the table since: a second
    lookup whose max_norm renorms rows the first read (which raised "modified by an inplace
    operation"), or the table changed through .data (the gradient went to other rows)."""
    with use_backend(backend):
        bag, ref = _max_pair(dtype, max_norm=1.0)
        with torch.no_grad():
            bag.weight.mul_(5)
            ref.weight.mul_(5)
        outs = [m(torch.tensor([[1, 2, 3]])).sum() + m(torch.tensor([[3, 4, 5]])).sum()
                for m in (bag, ref)]
        for out in outs:
            out.backward()
        assert torch.equal(bag.weight, ref.weight)
        assert torch.equal(bag.weight.grad, ref.weight.grad)

        bag, ref = _max_pair(dtype)
        x, offsets = torch.tensor([1, 2, 3, 3, 7, 1]), torch.tensor([0, 3, 3])  # an empty bag
        outs = [m(x, offsets) for m in (bag, ref)]
        grad = torch.randn(outs[1].shape, dtype=dtype)
        for m, out in zip((bag, ref), outs, strict=True):
            m.weight.data.neg_()  # the maxima are now other rows
            out.backward(grad)
        assert torch.equal(bag.weight.grad, ref.weight.grad)


def test_max_second_derivative_is_the_gather_then_maxs() -> None:
    """Under create_graph=True the gradient of the max operator keeps its graph: a penalty on
    it differentiates to what the same pooling by F.embedding and max gives (before: the
    gradient had no graph and the penalty's share was silently dropped; nn.EmbeddingBag, and
    the layer where it runs ATen's max, raise NotImplementedError)."""
    x = torch.tensor([[1, 2, 1], [3, 9, 0]])
    torch.manual_seed(0)
    bag = EmbeddingBag(10, 4, mode="max", dtype=torch.float64)
    w = bag.weight.detach().clone().requires_grad_(True)
    for out, weight in ((bag(x), bag.weight), (F.embedding(x, w).max(1).values, w)):
        task = out.pow(2).sum()
        (g,) = torch.autograd.grad(task, weight, create_graph=True)
        (task + g.pow(2).sum()).backward()
    assert bag.weight.grad is not None and w.grad is not None
    torch.testing.assert_close(bag.weight.grad, w.grad, rtol=1e-12, atol=1e-12)
    assert not torch.equal(w.grad, 2 * torch.autograd.grad(
        F.embedding(x, w).max(1).values.pow(2).sum(), w)[0])  # the penalty counts


def test_scale_grad_by_freq_gradients_equal_torchs() -> None:
    bag, ref = _pair(scale_grad_by_freq=True, mode="sum")
    x, offsets = torch.tensor([1, 1, 1, 4, 2]), torch.tensor([0, 2])
    bag(x, offsets).sum().backward()
    ref(x, offsets).sum().backward()
    torch.testing.assert_close(_dense(bag.weight.grad), _dense(ref.weight.grad))
    with pytest.raises(InputValueError, match="mode='max'"):
        EmbeddingBag(10, 3, scale_grad_by_freq=True, mode="max")


def test_scale_grad_by_freq_with_sparse_is_built_and_fails_in_the_backward_as_torch() -> None:
    """nn.EmbeddingBag builds it and computes forwards (a frozen table, no_grad); only the
    backward that computes the weight gradient fails, with a RuntimeError."""
    table, x = torch.randn(10, 3), torch.tensor([[1, 2, 2], [3, 4, 1]])
    bag = EmbeddingBag.from_pretrained(table, mode="sum", scale_grad_by_freq=True, sparse=True)
    ref = nn.EmbeddingBag.from_pretrained(table, mode="sum", scale_grad_by_freq=True,
                                          sparse=True)
    torch.testing.assert_close(bag(x), ref(x))
    bag, ref = _pair(scale_grad_by_freq=True, sparse=True, mode="sum")
    with torch.no_grad():
        torch.testing.assert_close(bag(x), ref(x))
    for m in (bag, ref):
        out = m(x).sum()
        with pytest.raises(RuntimeError, match="scale_grad_by_freq"):
            out.backward()


@settings(max_examples=40, deadline=None)
@given(
    bags=st.lists(st.lists(st.integers(0, 7), max_size=5), min_size=1, max_size=6),
    mode=st.sampled_from(["sum", "mean", "max"]),
    padding_idx=st.sampled_from([None, 0, 5]),
)
def test_random_bags_equal_torch(bags: list[list[int]], mode: str,
                                 padding_idx: int | None) -> None:
    flat = torch.tensor([i for b in bags for i in b], dtype=torch.int64)
    offsets = torch.tensor(np.cumsum([0] + [len(b) for b in bags[:-1]]), dtype=torch.int64)
    torch.manual_seed(0)
    bag = EmbeddingBag(8, 3, mode=mode, padding_idx=padding_idx, dtype=torch.float64)
    ref = nn.EmbeddingBag(8, 3, mode=mode, padding_idx=padding_idx, dtype=torch.float64,
                          _weight=bag.weight.detach().clone())
    torch.testing.assert_close(bag(flat, offsets), ref(flat, offsets), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs", [
    {"mode": "sum"}, {"mode": "sum", "include_last_offset": True}, {"mode": "max"},
    {"mode": "mean", "max_norm": 1.0}, {"mode": "sum", "scale_grad_by_freq": True},
    {"mode": "sum", "sparse": True},
])
def test_offsets_given_as_a_list_mean_what_the_tensor_means(kwargs: dict[str, Any]) -> None:
    """[0, 1, 3] for [1, 2, 3] is nn.EmbeddingBag's three bags (the last one empty), two with
    include_last_offset=True: as the same offsets in a tensor, on every path of the forward."""
    table, x = torch.arange(12.0).view(6, 2), torch.tensor([1, 2, 3])
    for offsets in ([0, 1, 3], [0, 3]):
        ref = nn.EmbeddingBag.from_pretrained(table, **kwargs)(x, torch.tensor(offsets))
        for form in (list, tuple, np.array):
            out = EmbeddingBag.from_pretrained(table, **kwargs)(x, form(offsets))
            torch.testing.assert_close(out, ref)


def test_the_calls_torch_reads_otherwise_or_crashes_on_are_refused_clearly() -> None:
    bag = EmbeddingBag(10, 3)
    with pytest.raises(InputValueError, match="needs offsets"):  # never a per-position lookup
        bag(torch.tensor([1, 2]))
    with pytest.raises(InputValueError, match="offsets must be None"):
        bag(torch.tensor([[1, 2]]), torch.tensor([0]))
    with pytest.raises(InputValueError, match="mode='sum'"):
        bag(torch.tensor([1, 2]), torch.tensor([0]), torch.ones(2))
    with pytest.raises(InputTypeError, match="integer indices"):
        bag(torch.ones(2, 10))  # never read as dense rows
    with pytest.raises(InputValueError, match=r"1-D .* or 2-D"):
        bag(torch.zeros(2, 2, 2, dtype=torch.long))
    with pytest.raises(LookupIndexError, match="12"):
        bag(torch.tensor([[1, 12]]))
    with pytest.raises(LookupIndexError, match="12"):  # checked before the rows are renormed
        EmbeddingBag(10, 3, max_norm=1.0)(torch.tensor([[1, 12]]))
    with pytest.raises(InputValueError, match="mode must be one of"):
        EmbeddingBag(10, 3, mode="avg")
    with pytest.raises(InputValueError, match="padding_idx must be within"):
        EmbeddingBag(10, 3, padding_idx=10)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_small_integer_indices_as_nn_embedding_bag_takes_them(dtype: torch.dtype) -> None:
    """``nn.EmbeddingBag`` refuses a 2-D input of small integers (whose bag starts, built in
    the input's dtype, would wrap past 255 entries for uint8) and reads a 1-D one with offsets
    as its values: so does the drop-in (``DtypeMismatchError`` is a RuntimeError)."""
    ids = torch.arange(300).remainder(10).reshape(100, 3).to(dtype)
    with pytest.raises(DtypeMismatchError, match="int64 or int32"):
        EmbeddingBag(10, 3)(ids)
    with pytest.raises(RuntimeError, match="Long, Int"):
        nn.EmbeddingBag(10, 3)(ids)
    torch.manual_seed(0)
    bag = EmbeddingBag(10, 3)
    stock = nn.EmbeddingBag(10, 3, _weight=bag.weight.detach().clone())
    flat, offsets = ids.reshape(-1), torch.arange(0, 300, 3)
    torch.testing.assert_close(bag(flat, offsets), stock(flat, offsets))
    torch.testing.assert_close(bag(flat, offsets), stock(flat.long(), offsets))


# ------------------------------------------------------------------ what it works with
def test_ddp_expects_sparse_gradients_from_it_as_from_nn_embeddingbag(tmp_path: Path) -> None:
    model = nn.Sequential(EmbeddingBag(50, 4, mode="sum", sparse=True), nn.Linear(4, 1))
    with one_process(tmp_path):
        ddp = nn.parallel.DistributedDataParallel(model)
        _, expect_sparse = ddp._build_params_for_reducer()
        assert expect_sparse == [True, False, False]
        ddp(torch.tensor([[1, 2], [2, 49]])).sum().backward()
        del ddp  # its reducer holds the process group: released before the group is destroyed
        gc.collect()
    assert model[0].weight.grad is not None and model[0].weight.grad.is_sparse


@pytest.mark.parametrize("fused", [False, True])
def test_fused_optimizer_trains_it_as_torchs_sgd_trains_nn_embeddingbag(fused: bool) -> None:
    bag, ref = _pair(mode="mean", sparse=True)
    opt = optim.SGD(bag.parameters(), lr=0.5, fused=fused)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for step in range(3):
        x = torch.tensor([[step, 2, 7], [1, 1, 9]])
        for m, o in ((bag, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
    torch.testing.assert_close(bag.weight, ref.weight)


def test_checkpoint_saves_and_restores_it(tmp_path: Path) -> None:
    bag = EmbeddingBag(100, 4, mode="sum", sparse=True)
    opt = optim.Adagrad(bag.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", bag, opt)
    assert list(ckpt.tables) == ["weight"]
    bag(torch.tensor([[1, 5]])).sum().backward()
    opt.step()
    ckpt.save(step=1)
    saved = bag.weight.detach().clone()
    with torch.no_grad():
        bag.weight.zero_()
    assert ckpt.restore() == {"step": 1}
    assert torch.equal(bag.weight, saved)


def test_quantize_is_called_as_the_bag() -> None:
    bag = EmbeddingBag(1000, 16, mode="mean", padding_idx=0)
    q = bag.quantize("int8")
    assert isinstance(q, QuantizedEmbeddingBag)
    for call in ((torch.tensor([[1, 5, 0], [999, 3, 3]]),),
                 (torch.tensor([1, 5, 0, 999]), torch.tensor([0, 3, 3]))):
        assert q(*call).shape == bag(*call).shape
        assert float((q(*call) - bag(*call)).detach().abs().max()) < 0.05
    with pytest.raises(InputValueError, match="needs offsets"):
        q(torch.tensor([1, 2]))


@pytest.mark.parametrize("dtype", ["int8", "int4", "float16"])
@pytest.mark.parametrize(("mode", "padding_idx", "last"),
                         [("sum", None, False), ("mean", 0, True), ("max", 3, False),
                          ("sum", 0, True)])
def test_a_dequantized_bag_is_the_bag_on_the_dequantized_table(
        dtype: str, mode: str, padding_idx: int | None, last: bool) -> None:
    """``bag.quantize(dtype).dequantize()`` is an ``EmbeddingBag`` with the bag's mode,
    ``padding_idx`` and ``include_last_offset``: on every input form the bag takes (``(B, N)``
    bags, 1-D indices with offsets, ``per_sample_weights``) it gives ``nn.EmbeddingBag``'s
    output on the dequantized table, in the bag's shape, and the quantized bag's."""
    torch.manual_seed(0)
    bag = EmbeddingBag(50, 8, mode=mode, padding_idx=padding_idx, include_last_offset=last)
    q = bag.quantize(dtype)
    back = q.dequantize()
    assert type(back) is EmbeddingBag
    assert (back.mode, back.padding_idx, back.include_last_offset) == (mode, padding_idx, last)
    table = q.rows(torch.arange(50))
    stock = nn.EmbeddingBag.from_pretrained(table, mode=mode, padding_idx=padding_idx,
                                            include_last_offset=last)
    x2 = torch.tensor([[1, 5, 5], [49, 0, 7], [3, 3, 2]])
    w2 = torch.tensor([[0.5, 2.0, 1.0], [3.0, 0.25, 1.0], [1.0, 1.5, -2.0]])
    flat, starts = torch.tensor([1, 5, 5, 49, 0, 3, 3, 2]), torch.tensor([0, 3, 3, 5])
    offsets = torch.cat([starts, torch.tensor([flat.numel()])]) if last else starts
    calls: list[tuple[Any, ...]] = [(flat, offsets)] + ([] if last else [(x2,)])
    if mode == "sum":  # (B, N) input with include_last_offset: torch reads it otherwise
        calls += [(flat, offsets, torch.linspace(-1.0, 2.0, flat.numel()))]
        calls += [] if last else [(x2, None, w2)]
    for call in calls:
        want = stock(*call)
        assert back(*call).shape == bag(*call).shape == want.shape
        torch.testing.assert_close(back(*call).detach(), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(q(*call), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_per_sample_weights_on_every_form_float_and_quantized(mode: str) -> None:
    """``(B, N)`` indices, 1-D indices with offsets and a nested tensor are weighed by their
    ``per_sample_weights`` as nn.EmbeddingBag weighs them (mode ``sum``; other modes refuse
    them, as torch does), float and quantized alike; ``Bags`` and scipy input hold their own
    weights, so weights beside them are refused, never dropped."""
    torch.manual_seed(0)
    bag = EmbeddingBag(50, 8, mode=mode)
    x2 = torch.tensor([[1, 5, 5], [49, 0, 7]])
    w2 = torch.tensor([[0.5, 2.0, 1.0], [3.0, 0.25, 1.0]])
    calls = [(x2, None, w2), (x2.reshape(-1), torch.tensor([0, 3]), w2.reshape(-1)),
             (torch.nested.nested_tensor(list(x2), layout=torch.jagged), None,
              torch.nested.nested_tensor(list(w2), layout=torch.jagged))]
    bags = Bags.from_lists(x2.tolist())
    own = (bags, sp.csr_matrix(bags.to_dense(50).numpy()))
    refusal = "per_sample_weights needs offsets" if mode == "sum" else "mode='sum'"
    for layer in [bag] + [bag.quantize(dtype) for dtype in ("int8", "int4", "float16")]:
        table = bag.weight if layer is bag else layer.dequantize().weight
        stock = nn.EmbeddingBag.from_pretrained(table.detach(), mode=mode)
        for x, offsets, w in calls:
            if mode != "sum":
                with pytest.raises(NotImplementedError, match="mode='sum'"):
                    layer(x, offsets, w)
                continue
            want = stock(x2, None, w2)
            assert not torch.allclose(want, stock(x2))
            torch.testing.assert_close(layer(x, offsets, w), want, atol=1e-5, rtol=1e-5)
        for x in own:
            with pytest.raises(InputValueError, match=refusal):
                layer(x, None, w2.reshape(-1))


def test_exported_at_the_top_level() -> None:
    assert lookuplinear.EmbeddingBag is EmbeddingBag and "EmbeddingBag" in lookuplinear.__all__


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", ["Embedding", "EmbeddingBag"])
def test_a_table_on_the_meta_device_takes_cpu_indices_as_torchs(kind: str, sparse: bool) -> None:
    """A table on the meta device (a model built for its shapes) takes indices on the CPU
    and gives a meta output, as ``nn.Embedding`` and ``nn.EmbeddingBag`` do."""
    calls: list[tuple[torch.Tensor, ...]] = [(torch.tensor([[1, 2], [3, 4]]),)]
    modes = ["sum"]
    if kind == "EmbeddingBag":
        calls.append((torch.tensor([1, 2, 3]), torch.tensor([0, 1])))
        modes = ["sum", "mean"] + ["max"] * (not sparse)
    for mode in modes:
        for padding_idx in (None, 1):
            kw: dict[str, Any] = {"sparse": sparse, "padding_idx": padding_idx,
                                  "device": "meta"}
            if kind == "EmbeddingBag":
                kw["mode"] = mode
            ours, ref = getattr(lookuplinear, kind)(6, 3, **kw), getattr(nn, kind)(6, 3, **kw)
            for args in calls:
                out, expected = ours(*args), ref(*args)
                assert out.device.type == "meta" and out.shape == expected.shape


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # torch's vmap
@pytest.mark.parametrize("form", ["2d", "1d"])
@pytest.mark.parametrize("padding_idx", [None, 0])
@pytest.mark.parametrize(("mode", "sparse"), [("sum", False), ("sum", True), ("mean", False),
                                              ("mean", True), ("max", False)])
def test_torch_func_transforms_give_nn_embedding_bags_results(
    mode: str, sparse: bool, padding_idx: int | None, form: str
) -> None:
    """``torch.func.grad``, ``vjp``, ``jacrev`` and the per-sample-gradient recipe
    ``vmap(grad(...))`` over ``functional_call`` give what they give on ``nn.EmbeddingBag``
    (the lookup takes torch's own ops while a transform is active)."""
    from torch import func

    x2 = torch.tensor([[1, 2], [3, 3], [0, 5]])
    args = (x2,) if form == "2d" else (torch.tensor([1, 2, 3, 3, 0, 5]), torch.tensor([0, 2, 4]))
    results = []
    for cls in (lookuplinear.EmbeddingBag, nn.EmbeddingBag):
        torch.manual_seed(0)
        m = cls(6, 3, mode=mode, sparse=sparse, padding_idx=padding_idx)
        w = m.weight.detach()

        def f(weight: torch.Tensor, *a: torch.Tensor, m: nn.Module = m) -> torch.Tensor:
            return func.functional_call(m, {"weight": weight}, a)

        got = [func.grad(lambda weight, f=f: f(weight, *args).pow(2).sum())(w),
               func.vjp(lambda weight, f=f: f(weight, *args), w)[1](torch.ones(3, 3))[0]]
        if not sparse:  # (torch's sparse gradient has no vmap: jacrev and vmap refuse it)
            got.append(func.jacrev(lambda weight, f=f: f(weight, *args))(w))
            got.append(func.vmap(lambda x, f=f, w=w: func.grad(
                lambda weight: f(weight, x[None]).pow(2).sum())(w))(x2))
        results.append([g.to_dense() for g in got])
    for ours, theirs in zip(*results, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("sparse", [False, True])
def test_torch_func_grad_through_embedding_gives_nn_embeddings(sparse: bool) -> None:
    from torch import func

    x = torch.tensor([[1, 2], [3, 3], [0, 5]])
    grads = []
    for cls in (lookuplinear.Embedding, nn.Embedding):
        torch.manual_seed(0)
        m = cls(6, 3, sparse=sparse, padding_idx=0)
        grads.append(func.grad(lambda weight, m=m: func.functional_call(
            m, {"weight": weight}, (x,)).pow(2).sum())(m.weight.detach()).to_dense())
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_torch_jit_script_compiles_the_stock_module_it_is_a_drop_in_for(
        mode: str, padding_idx: int | None) -> None:
    """torch.jit.script scripts stock nn.EmbeddingBag / nn.Embedding with the layer's settings
    and its weight (the same Parameter), where TorchScript failed on the library's Python."""
    torch.manual_seed(0)
    bag = lookuplinear.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx)
    scripted = torch.jit.script(bag)
    idx, off = torch.tensor([1, 2, 4, 2, 9]), torch.tensor([0, 2, 2])
    torch.testing.assert_close(scripted(idx, off), bag(idx, off))
    assert scripted.weight is bag.weight
    emb = lookuplinear.Embedding(10, 3, padding_idx=padding_idx, sparse=True)
    scripted_emb = torch.jit.script(emb)
    x = torch.tensor([[1, 9], [3, 2]])
    assert torch.equal(scripted_emb(x), emb(x)) and scripted_emb.weight is emb.weight


def test_a_mean_under_forward_mode_ad_has_the_division_tangent() -> None:
    """``mean_of_sums`` on a dual tensor that also requires grad (forward-mode AD inside
    autograd): its tangent is the division's, ``tangent / size`` (an ``out=`` division, the
    eager way's, has no forward derivative)."""
    from torch.autograd import forward_ad

    from lookuplinear.modes import mean_of_sums

    sums = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    tangent = torch.randn(3, 4, dtype=torch.float64)
    sizes = torch.tensor([[2.0], [0.0], [5.0]], dtype=torch.float64)
    with forward_ad.dual_level():
        out = mean_of_sums(forward_ad.make_dual(sums, tangent), sizes)
        got = forward_ad.unpack_dual(out).tangent
    torch.testing.assert_close(got, tangent / sizes.clamp_min(1))
