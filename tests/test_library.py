"""The operators of ``lookuplinear.ops.library``, each alone: equal to its torch-op twin (and to
the dense path) on the CPU, ``torch.library.opcheck`` (schema, fake implementation, autograd
registration, ``torch.compile``), the fake output's shape, the range check inside the operator,
and the decompositions an exported program uses."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from forms import C_BY_DEFAULT, on_cuda_in_a_process, same_kernel
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import lookuplinear.ops.library as library
from lookuplinear.errors import InputValueError, LookupIndexError, OffsetsError
from lookuplinear.ids.hashing import hash_ids
from lookuplinear.ops import _idmap, bag_max, group_rows, segment_triples

ops = torch.ops.lookuplinear


def bag_cases() -> list[tuple[str, dict[str, Any]]]:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 10, (9,), generator=g)
    csr = torch.tensor([0, 2, 2, 6, 9])
    w = torch.rand(9, generator=g, dtype=torch.float64)
    return [
        ("index 1-D", {"indices": idx}),
        ("index 2-D", {"indices": idx[:8].reshape(4, 2)}),
        ("index padding", {"indices": idx, "padding_idx": int(idx[0])}),
        ("bags", {"indices": idx, "offsets": csr}),
        ("bags weighted", {"indices": idx, "offsets": csr, "weights": w}),
        ("bags padding", {"indices": idx, "offsets": csr, "padding_idx": int(idx[0])}),
        ("bags start offsets", {"indices": idx, "offsets": csr[:-1],
                                "include_last_offset": False}),
    ]


def dense_reference(weight: torch.Tensor, indices: torch.Tensor,
                    offsets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                    padding_idx: int | None = None, include_last_offset: bool = True
                    ) -> torch.Tensor:
    """``densify(x) @ weight``, the input densified entry by entry. ``padding_idx``: left out
    of bags; an index input reads its row, which gets no gradient (as ``F.embedding``)."""
    rows = weight.shape[0]
    if offsets is None:
        x = F.one_hot(indices, rows).to(weight.dtype)
        if padding_idx is not None:
            pad = torch.arange(rows).unsqueeze(1) == padding_idx
            weight = torch.where(pad, weight.detach(), weight)
        return x @ weight
    ends = offsets.tolist()[1:] if include_last_offset else [*offsets.tolist()[1:],
                                                                indices.numel()]
    starts = offsets.tolist()[:len(ends)]
    out = []
    for s, e in zip(starts, ends, strict=True):  # bag by bag, entry by entry
        x = torch.zeros(rows, dtype=weight.dtype)
        for k in range(s, e):
            if int(indices[k]) != padding_idx:
                one = F.one_hot(indices[k], rows).to(weight.dtype)
                x = x + (one if weights is None else one * weights[k])
        out.append(x @ weight)
    return torch.stack(out)


@pytest.mark.parametrize(("name", "kw"), bag_cases(), ids=[c[0] for c in bag_cases()])
def test_bag_lookup_equals_twin_and_dense(name: str, kw: dict[str, Any]) -> None:
    weight = torch.randn(10, 3, dtype=torch.float64)
    out = ops.bag_lookup(weight, **kw)
    torch.testing.assert_close(out, library._bag_lookup_twin(weight, **kw), rtol=0, atol=0)
    torch.testing.assert_close(out, dense_reference(weight, **kw))


@pytest.mark.parametrize(("name", "kw"), bag_cases(), ids=[c[0] for c in bag_cases()])
def test_bag_lookup_gradient_is_embedding_bags_sparse_one(name: str, kw: dict[str, Any]
                                                          ) -> None:
    weight = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    psw = kw.get("weights")
    if psw is not None:
        kw = {**kw, "weights": psw.double().requires_grad_()}
    g = torch.randn_like(ops.bag_lookup(weight.detach(), **kw))
    ops.bag_lookup(weight, **kw).backward(g)
    assert weight.grad is not None and weight.grad.is_sparse
    ours_w, ours_psw = weight.grad.to_dense(), None if psw is None else kw["weights"].grad
    weight.grad = None
    ref_kw = {**kw, "weights": None if psw is None else kw["weights"].detach().requires_grad_()}
    dense_reference(weight, **ref_kw).backward(g)
    torch.testing.assert_close(ours_w, weight.grad)
    if psw is not None:
        torch.testing.assert_close(ours_psw, ref_kw["weights"].grad)


@pytest.mark.parametrize(("name", "kw"), bag_cases(), ids=[c[0] for c in bag_cases()])
def test_bag_lookup_opcheck(name: str, kw: dict[str, Any]) -> None:
    weight = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    args = (weight, kw["indices"], kw.get("offsets"), kw.get("weights"), kw.get("padding_idx"))
    # test_autograd_registration compares with a dense gradient; ours is sparse. Leaving
    # the padding entries out of it is a data-dependent shape (the entries kept: a nonzero),
    # which a graph records only with capture_dynamic_output_shape_ops. Bags' gradient has
    # one row per distinct row (row_sums): a size of its own, which a graph records with a
    # shape environment (test_aot_dispatch_dynamic; torch.compile always has one).
    utils = ["test_schema", "test_faketensor"]
    if kw.get("padding_idx") is None:
        utils.append("test_aot_dispatch_dynamic")
        if kw.get("offsets") is None and kw.get("weights") is None:
            utils.append("test_aot_dispatch_static")
    torch.library.opcheck(ops.bag_lookup.default, args,
                          {"include_last_offset": kw.get("include_last_offset", True)},
                          test_utils=utils)


@same_kernel
@pytest.mark.parametrize(("name", "kw"), bag_cases(), ids=[c[0] for c in bag_cases()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bag_lookup_gradient_densifies_to_the_eager_one_to_the_bit(
        name: str, kw: dict[str, Any], dtype: torch.dtype) -> None:
    """The operator's gradient is the grouping's (``group_rows``, which the fused update sums
    by) to the bit: each distinct row once, sorted, summed by the same kernel, whose weighted
    sums fuse each multiply-add where torch ops round the product first (a mean table's
    weights are rarely exact in binary); an index tensor's, one row per entry, densified or
    coalesced."""
    kw = {**kw, "weights": kw["weights"].to(dtype)} if "weights" in kw else kw
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(10, 5, dtype=dtype, generator=g)
    w = weight.clone().requires_grad_()
    out = ops.bag_lookup(w, **kw)
    grad_out = torch.randn(out.shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
    out.backward(grad_out)
    ours = w.grad
    assert ours is not None and ours.is_sparse
    offsets = kw.get("offsets")
    if offsets is not None and not kw.get("include_last_offset", True):
        offsets = torch.cat([offsets, offsets.new_tensor([kw["indices"].numel()])])
    rows, values = group_rows(grad_out.reshape(-1, 5), 10, kw["indices"].reshape(-1),
                                  offsets, kw.get("weights"), kw.get("padding_idx"))
    eager = torch.sparse_coo_tensor(rows.unsqueeze(0), values, (10, 5))
    if offsets is None and kw.get("weights") is None:  # nn.Embedding(sparse=True)'s
        assert ours._nnz() == kw["indices"].numel() - (
            0 if kw.get("padding_idx") is None else
            int((kw["indices"] == kw["padding_idx"]).sum()))
    else:  # each row once
        assert torch.equal(ours._indices()[0], rows) and torch.equal(ours._values(), values)
    assert torch.equal(ours.to_dense(), eager.to_dense())
    assert torch.equal(ours.coalesce().values(), eager.coalesce().values())


def test_row_sums_equals_twin_and_opcheck() -> None:
    g = torch.Generator().manual_seed(5)
    grad = torch.randn(4, 3, dtype=torch.float64, generator=g)
    idx, off = torch.tensor([7, 2, 7, 2, 0, 7]), torch.tensor([0, 2, 2, 5, 6])
    w = torch.rand(6, dtype=torch.float64, generator=g)
    for args in ((grad, idx, off, w, None, 10), (grad, idx, off, None, 2, 10),
                 (grad[:3].repeat(2, 1), idx, None, None, None, 10),
                 (grad[:0], idx[:0], off[:1], None, 0, 10)):
        rows, out = ops.row_sums(*args)
        torch.testing.assert_close((rows, out), library._row_sums_twin(*args))
        distinct = torch.unique(args[1])  # each row once, sorted, padding left out
        distinct = distinct[distinct != args[4]] if args[4] is not None else distinct
        assert torch.equal(rows, distinct) and out.shape == (distinct.numel(), 3)
        # a size of the data's: the static fake test has no shape environment to give it one
        torch.library.opcheck(ops.row_sums.default, args, test_utils=[
            "test_schema", "test_autograd_registration", "test_faketensor",
            "test_aot_dispatch_dynamic"])
    rows, out = ops.row_sums(grad, idx, off, None, 2, 10)  # row 2 is padding
    assert rows.tolist() == [0, 7]
    assert torch.equal(out[1], grad[0] + grad[2] + grad[3]) and torch.equal(out[0], grad[2])


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([1, 3, 50, 5_000, 3_000_000, 2**32]),
       st.sampled_from([1, 5, 16, 32]), st.sampled_from([torch.float32, torch.float64]),
       st.booleans())
def test_row_sums_of_index_input_is_the_dense_gradient(data: st.DataObject, num_rows: int,
                                                       dim: int, dtype: torch.dtype,
                                                       padded: bool) -> None:
    """``row_sums`` of an index tensor (no offsets, no weights): each distinct row once, sorted
    (padding left out), its sum: ``one_hot(x).T @ grad``'s non-zero rows (the weight gradient
    of ``nn.Linear`` on the one-hot input). Empty batches, one entry, duplicates, all padding,
    and indices of up to 32 bits (one to three passes of the sort)."""
    idx = torch.tensor(data.draw(st.lists(st.integers(0, num_rows - 1), max_size=300)),
                       dtype=torch.int64)
    if idx.numel() and data.draw(st.booleans()):  # many duplicates
        idx = idx[torch.randint(0, min(idx.numel(), 4), (idx.numel(),),
                                generator=torch.Generator().manual_seed(idx.numel()))]
    padding_idx = int(idx[0]) if padded and idx.numel() else None
    grad = torch.randn(idx.numel(), dim, dtype=dtype,
                       generator=torch.Generator().manual_seed(dim))
    rows, values = ops.row_sums(grad, idx, None, None, padding_idx, num_rows)
    assert values.shape == (rows.numel(), dim) and values.dtype == dtype
    # the sums, to the bit: each row's grad rows added in entry order
    twin_rows, twin = library._row_sums_twin(grad, idx, None, None, padding_idx, num_rows)
    assert torch.equal(rows, twin_rows) and torch.equal(values, twin)
    # the dense reference: nn.Linear's weight gradient on the one-hot input, at the rows taken
    keep = torch.ones_like(idx, dtype=torch.bool) if padding_idx is None else idx != padding_idx
    uniq, inverse = torch.unique(idx[keep], return_inverse=True)
    one_hot = F.one_hot(inverse, max(uniq.numel(), 1)).to(dtype)[:, :uniq.numel()]  # (n, rows)
    linear = torch.nn.Linear(uniq.numel(), dim, bias=False, dtype=dtype)
    linear(one_hot).backward(grad[keep])
    assert linear.weight.grad is not None
    assert torch.equal(rows, uniq)
    torch.testing.assert_close(values, linear.weight.grad.T)


def test_bag_lookup_fake_shapes() -> None:
    with FakeTensorMode():
        w, idx = torch.empty(10, 3), torch.empty(7, dtype=torch.long)
        assert ops.bag_lookup(w, idx).shape == (7, 3)
        assert ops.bag_lookup(w, idx.reshape(7, 1)).shape == (7, 1, 3)
        off = torch.empty(5, dtype=torch.long)
        assert ops.bag_lookup(w, idx, off).shape == (4, 3)
        assert ops.bag_lookup(w, idx, off, include_last_offset=False).shape == (5, 3)


@pytest.mark.parametrize("offsets", [None, torch.tensor([0, 1, 3])])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_bag_lookup_checks_the_range_inside(offsets: torch.Tensor | None, requires_grad: bool
                                            ) -> None:
    """The raw operator raises IndexError with the project's message (the C++ kernels raise
    the builtin, the Python registration its LookupIndexError; lookuplinear's own calls map
    it, test_cpp_ops.py)."""
    weight = torch.randn(10, 3, requires_grad=requires_grad)
    with pytest.raises(IndexError, match=r"index 12 at indices\[1\].*table of 10 rows"):
        ops.bag_lookup(weight, torch.tensor([1, 12, 3]), offsets)


def test_in_feature_order_equals_twin_and_its_gradient_the_columns_back() -> None:
    # a: feature-major, 2 features of width 2 over 3 examples; b: example-major, width 3
    a = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    parts = [(0, 2), (2, 3), (1, 2)]  # a's first feature, b, a's second feature
    flat = segment_triples(parts, [2, 2, 3])
    out = ops.in_feature_order([a, b], [2, 0], flat)
    expected = torch.cat([a[:3], b, a[3:]], 1)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, library._in_feature_order_twin([a, b], [2, 0], flat),
                               rtol=0, atol=0)
    g = torch.randn_like(out)
    out.backward(g)
    torch.testing.assert_close(a.grad, torch.cat([g[:, :2], g[:, 5:]], 0), rtol=0, atol=0)
    torch.testing.assert_close(b.grad, g[:, 2:5], rtol=0, atol=0)
    torch.library.opcheck(ops.in_feature_order.default, ([a, b], [2, 0], list(flat)))
    with FakeTensorMode():
        fake = ops.in_feature_order([torch.empty(6, 2), torch.empty(3, 3)], [2, 0], flat)
    assert fake.shape == (3, 7)


@pytest.mark.parametrize("case", ["block past the last", "columns past the width",
                                  "feature-major rows", "negative count", "rows differ",
                                  "1-D output", "counts short"])
def test_in_feature_order_refuses_bad_operands(case: str) -> None:
    """Operands that do not fit (a segment outside the blocks, outputs whose rows do not
    match): a ValueError naming the operator, from both registrations (the Python one's CPU
    kernel read past the blocks in C)."""
    a, b = torch.randn(6, 2), torch.randn(3, 3)  # 2 features x 3 examples; 3 examples
    flat = list(segment_triples([(0, 2), (2, 3), (1, 2)], [2, 2, 3]))
    outs, features = [a, b], [2, 0]
    if case == "block past the last":
        flat[3] = 9
    elif case == "columns past the width":
        flat[5] = 30
    elif case == "feature-major rows":
        features = [3, 0]
    elif case == "negative count":
        features = [-1, 0]
    elif case == "rows differ":
        outs = [a, torch.randn(2, 3)]
    elif case == "1-D output":
        outs = [a, torch.randn(3)]
    else:
        features = [2]
    with pytest.raises(ValueError, match="lookuplinear::in_feature_order"):
        ops.in_feature_order(outs, features, flat)
    with pytest.raises(ValueError, match="lookuplinear::in_feature_order"):
        library._in_feature_order_twin(outs, features, flat)


@pytest.mark.parametrize("shape", [(3,), (3, 7, 1)])
def test_in_feature_order_backward_refuses_a_gradient_not_2d(shape: tuple[int, ...]) -> None:
    flat = segment_triples([(0, 2), (2, 3), (1, 2)], [2, 2, 3])
    with pytest.raises(ValueError, match="the gradient is 2-D"):
        ops.in_feature_order_backward(torch.randn(shape), [2, 0], flat)


def test_in_feature_order_backward_equals_twin_and_the_two_differentiate_again() -> None:
    """``in_feature_order_backward``: the columns back in each output's layout (its CPU
    kernel, its twin and the slices to the bit), fake shapes, ``opcheck``; and the two
    operators, each the other's backward, pass ``gradcheck`` and ``gradgradcheck``."""
    a = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    flat = segment_triples([(0, 2), (2, 3), (1, 2)], [2, 2, 3])
    g = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    ga, gb = ops.in_feature_order_backward(g, [2, 0], flat)
    assert torch.equal(ga, torch.cat([g[:, :2], g[:, 5:]], 0)) and torch.equal(gb, g[:, 2:5])
    for twin in library._in_feature_order_backward_twin(g, [2, 0], flat), \
            library._in_feature_order_backward_cpu(g, [2, 0], flat):
        assert torch.equal(twin[0], ga) and torch.equal(twin[1], gb)
    torch.library.opcheck(ops.in_feature_order_backward.default, (g, [2, 0], list(flat)))
    with FakeTensorMode():
        fakes = ops.in_feature_order_backward(torch.empty(3, 7), [2, 0], flat)
    assert [f.shape for f in fakes] == [(6, 2), (3, 3)]
    with pytest.raises(ValueError, match="left to right"):
        ops.in_feature_order_backward(g, [2, 0], [0, 1, 2, *flat[3:]])

    def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ops.in_feature_order([x, y], [2, 0], flat)

    def backward(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(ops.in_feature_order_backward(x, [2, 0], flat))

    assert torch.autograd.gradcheck(forward, (a, b))
    assert torch.autograd.gradgradcheck(forward, (a, b))
    assert torch.autograd.gradcheck(backward, (g,))
    assert torch.autograd.gradgradcheck(backward, (g,))


def test_idmap_find_equals_twin() -> None:
    table = _idmap.empty_table(16)
    _idmap.set_values(table, torch.tensor([5, 10**12, -3]), torch.tensor([0, 1, 2]))
    keys = torch.tensor([[10**12, 7], [-3, 5]])
    out = ops.idmap_find(table, keys)
    assert out.tolist() == [1, -1, 2, 0]
    assert torch.equal(out, library._idmap_find_twin(table, keys))
    torch.library.opcheck(ops.idmap_find.default, (table, keys))
    with FakeTensorMode():
        assert ops.idmap_find(torch.empty(32, dtype=torch.long),
                              torch.empty(2, 3, dtype=torch.long)).shape == (6,)


def test_idmap_rows_equals_twin() -> None:
    found = torch.tensor([3, -1, 0, -1])
    keys = torch.tensor([10, 10**12, 7, -5])
    out = ops.idmap_rows(found, keys, 4)
    assert out.tolist()[::2] == [7, 4]
    assert out.tolist()[1::2] == hash_ids(torch.tensor([10**12, -5]), 4).tolist()
    assert torch.equal(out, library._idmap_rows_twin(found, keys, 4))
    torch.library.opcheck(ops.idmap_rows.default, (found, keys, 4))


def test_decompositions_give_each_operator_its_twin() -> None:
    table = library.decompositions()
    ours = {op.name(): fn for op, fn in table.items() if op.name().startswith("lookuplinear::")}
    assert ours == {"lookuplinear::bag_lookup": library._bag_lookup_twin,
                    "lookuplinear::in_feature_order": library._in_feature_order_twin,
                    "lookuplinear::in_feature_order_backward":
                        library._in_feature_order_backward_twin,
                    "lookuplinear::gather_groups": library._gather_groups_twin,
                    "lookuplinear::idmap_find": library._idmap_find_twin,
                    "lookuplinear::idmap_rows": library._idmap_rows_twin,
                    "lookuplinear::bag_max": library._bag_max_twin,
                    "lookuplinear::bag_max_arg": library._bag_max_arg_twin,
                    "lookuplinear::bag_max_backward": library._bag_max_backward_twin,
                    "lookuplinear::mode_weights": library._mode_weights_twin,
                    "lookuplinear::row_sums": library._row_sums_twin,
                    "lookuplinear::shifted_rows": library._shifted_rows_twin}
    assert len(table) > len(ours)  # and PyTorch's own, to core ATen


def _groups(dtype: torch.dtype = torch.float64, requires_grad: bool = False
            ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int], int]:
    """Two tables (widths 2 and 3) read by three features over three examples: table 0's two
    features at columns 0 and 5, table 1's one at column 2, of 7."""
    g = torch.Generator().manual_seed(4)
    weights = [torch.randn(5, 2, dtype=dtype, generator=g).requires_grad_(requires_grad),
               torch.randn(4, 3, dtype=dtype, generator=g).requires_grad_(requires_grad)]
    rows = [torch.tensor([[4, 0], [1, 1], [0, 3]]), torch.tensor([[2], [3], [0]]).int()]
    return weights, rows, [0, 5, 2], 7


def _same_gradients(out: torch.Tensor, old: torch.Tensor, dense: torch.Tensor,
                    weights: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A group operator's table gradients (returned) are ``old``'s (its lookups per table put
    in order by ``in_feature_order``) to the bit, and the dense path's; under
    ``create_graph=True`` and differentiated again, ``old``'s to the bit."""
    g = torch.randn(out.shape, dtype=out.dtype)
    ours = torch.autograd.grad(out, weights, g, retain_graph=True)
    theirs = torch.autograd.grad(old, weights, g, retain_graph=True)
    want = torch.autograd.grad(dense, weights, g)
    for a, b, d in zip(ours, theirs, want, strict=True):
        assert a.is_sparse and torch.equal(a._indices(), b._indices())
        assert torch.equal(a._values(), b._values())
        torch.testing.assert_close(a.to_dense(), d)
    loss = [(x.pow(2).sum() * 3).sum() for x in (out, old)]
    again = [torch.autograd.grad(x, weights, create_graph=True) for x in loss]
    second = [torch.autograd.grad(sum(v.to_dense().pow(2).sum() for v in grads), weights)
              for grads in again]
    for a, b in zip(*second, strict=True):
        assert torch.equal(a.to_dense(), b.to_dense())
    return ours


def _operator_path(weights: list[torch.Tensor], rows: list[torch.Tensor]) -> torch.Tensor:
    """The same lookups as ``bag_lookup`` per table and ``in_feature_order``."""
    outs = [ops.bag_lookup(w, r).view(r.shape[0], -1) for w, r in zip(weights, rows, strict=True)]
    return ops.in_feature_order(outs, [0, 0], segment_triples([(0, 2), (1, 3), (0, 2)], [4, 3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gather_groups_is_bag_lookup_then_in_feature_order_to_the_bit(dtype: torch.dtype
                                                                      ) -> None:
    """``gather_groups``: the output, its CPU kernel's and its twin's, equal the dense path and
    ``bag_lookup`` per table put in order by ``in_feature_order``, to the bit; each table's
    gradient is that path's (``nn.Embedding(sparse=True)``'s: the same indices in the same
    order, the same values), also under ``create_graph=True`` and differentiated again; fake
    shape and ``opcheck``."""
    weights, rows, columns, width = _groups(dtype, requires_grad=True)
    out = ops.gather_groups(weights, rows, columns, width)
    old = _operator_path(weights, rows)
    assert torch.equal(out, old)
    assert torch.equal(library._gather_groups_twin(weights, rows, columns, width), out)
    assert torch.equal(library._gather_groups_cpu(weights, rows, columns, width), out)
    dense = torch.cat([F.one_hot(rows[0][:, 0], 5).to(dtype) @ weights[0],
                       F.one_hot(rows[1][:, 0].long(), 4).to(dtype) @ weights[1],
                       F.one_hot(rows[0][:, 1], 5).to(dtype) @ weights[0]], 1)
    torch.testing.assert_close(out, dense)
    ours = _same_gradients(out, old, dense, weights)
    for a, r in zip(ours, rows, strict=True):
        assert torch.equal(a._indices()[0], r.reshape(-1).long())  # entry order
    torch.library.opcheck(ops.gather_groups.default, (weights, rows, columns, width))
    with FakeTensorMode():
        fake = ops.gather_groups([torch.empty(5, 2), torch.empty(4, 3)],
                                 [torch.empty(3, 2, dtype=torch.long),
                                  torch.empty(3, 1, dtype=torch.long)], columns, width)
    assert fake.shape == (3, width)


@pytest.mark.parametrize("case", ["tables short", "dtypes differ", "float rows", "rows differ",
                                  "columns short", "columns overlap", "columns past the width",
                                  "group not left to right", "1-D table"])
def test_gather_groups_refuses_bad_operands(case: str) -> None:
    """Operands the C kernel cannot read: a ValueError naming the operator, from the operator
    and its twin (both registrations); a row outside its table an IndexError naming it."""
    weights, rows, columns, width = _groups()
    if case == "tables short":
        weights = weights[:1]
    elif case == "dtypes differ":
        weights = [weights[0], weights[1].float()]
    elif case == "float rows":
        rows = [rows[0].double(), rows[1]]
    elif case == "rows differ":
        rows = [rows[0], rows[1][:2]]
    elif case == "columns short":
        columns = columns[:2]
    elif case == "columns overlap":
        columns = [0, 4, 1]
    elif case == "columns past the width":
        width = 6
    elif case == "group not left to right":
        columns = [5, 0, 2]
    else:
        weights = [torch.randn(10), weights[1]]
    for run in ops.gather_groups, library._gather_groups_twin:
        with pytest.raises(ValueError, match="lookuplinear::gather_groups"):
            run(weights, rows, columns, width)


@pytest.mark.parametrize("bad", [5, -1])
def test_gather_groups_checks_the_range_inside(bad: int) -> None:
    weights, rows, columns, width = _groups()
    rows[0][2, 1] = bad
    for run in ops.gather_groups, library._gather_groups_twin, library._gather_groups_cpu:
        with pytest.raises(IndexError, match=rf"row {bad} at rows\[0\]\[2, 1\]"):
            run(weights, rows, columns, width)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bag_max_equals_twin_and_its_gradient_atens(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(10, 3, dtype=dtype, generator=g, requires_grad=True)
    idx = torch.randint(0, 10, (9,), generator=g)
    off = torch.tensor([0, 2, 2, 6, 9])  # bag 1 empty
    out = ops.bag_max(weight, idx, off)
    ref = F.embedding_bag(idx, weight, off, mode="max", include_last_offset=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(out, library._bag_max_twin(weight, idx, off), rtol=0, atol=0)
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, weight, grad)
    (theirs,) = torch.autograd.grad(ref, weight, grad)
    torch.testing.assert_close(ours, theirs)
    pooled, arg = ops.bag_max_arg(weight, idx, off)
    assert torch.equal(pooled, out) and arg.dtype == torch.int64
    assert arg[1].tolist() == [-1] * 3  # the empty bag: no row
    twin = library._bag_max_arg_twin(weight.detach(), idx, off)
    assert torch.equal(twin[0], out) and torch.equal(twin[1], arg)
    torch.testing.assert_close(ops.bag_max_backward(grad, arg, 10), theirs, rtol=0, atol=0)
    torch.testing.assert_close(library._bag_max_backward_twin(grad, arg, 10), theirs)
    torch.library.opcheck(ops.bag_max.default, (weight, idx, off))
    torch.library.opcheck(ops.bag_max_arg.default, (weight, idx, off))
    torch.library.opcheck(ops.bag_max_backward.default, (grad, arg, 10))
    with FakeTensorMode():
        assert ops.bag_max(torch.empty(10, 3), torch.empty(9, dtype=torch.long),
                           torch.empty(5, dtype=torch.long)).shape == (4, 3)
        fake = ops.bag_max_arg(torch.empty(10, 3), torch.empty(9, dtype=torch.long),
                               torch.empty(5, dtype=torch.long))
        assert [t.shape for t in fake] == [(4, 3), (4, 3)] and fake[1].dtype == torch.int64
        assert ops.bag_max_backward(torch.empty(4, 3), fake[1], 10).shape == (10, 3)
    # the operator called directly: the C++ kernel's IndexError (a LookupIndexError where the
    # operators are registered from Python); lookuplinear's callers raise the project's
    with pytest.raises(IndexError, match="index 10 at indices"):
        ops.bag_max(weight.detach(), torch.tensor([1, 10]), torch.tensor([0, 2]))
    if not C_BY_DEFAULT:  # torch ops (no C kernels): the caller takes ATen's path
        assert bag_max(weight.detach(), torch.tensor([1, 10]), torch.tensor([0, 2])) is None
        return
    with pytest.raises(LookupIndexError, match="index 10 at indices"):
        bag_max(weight.detach(), torch.tensor([1, 10]), torch.tensor([0, 2]))


@pytest.mark.parametrize("sqrt", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_mode_weights_equals_twin(sqrt: bool, weighted: bool) -> None:
    off = torch.tensor([0, 2, 2, 5])
    w = torch.tensor([1.0, 3.0, 2.0, 2.0, 1.0]) if weighted else None
    out = ops.mode_weights(off, w, sqrt, torch.float32, 5)
    torch.testing.assert_close(out, library._mode_weights_twin(off, w, sqrt, torch.float32, 5))
    vals = torch.ones(5) if w is None else w
    sums = [vals[:2], vals[2:]]
    den = [float(s.square().sum().sqrt()) if sqrt else float(s.sum()) for s in sums]
    torch.testing.assert_close(out, torch.cat([sums[0] / den[0], sums[1] / den[1]]))
    torch.library.opcheck(ops.mode_weights.default, (off, w, sqrt, torch.float32, 5))
    with FakeTensorMode():
        assert ops.mode_weights(torch.empty(4, dtype=torch.long), None, sqrt, torch.float64,
                                7).shape == (7,)


@pytest.mark.parametrize("offsets", [[0, 2, 9], [0, 3, 1], [1, 2, 4], [0, 2, 3]],
                         ids=["past the end", "decreasing", "not from 0", "short of the end"])
def test_operators_that_run_c_over_bags_check_the_offsets_inside(offsets: list[int]) -> None:
    """Where a recorded graph runs (the eager path has checked them before): offsets that do
    not cover the entries exactly are refused, not read past the indices by the C kernels."""
    weight, idx = torch.rand(10, 3), torch.tensor([1, 2, 3, 4])
    off = torch.tensor(offsets)
    # mode_weights: the C++ kernel's builtin called directly (no Python frame under it), and
    # the project's error from lookuplinear's own call, which calls it; the Python
    # registration raises the project's
    with pytest.raises(OffsetsError if not library.CPP else ValueError,
                       match="offsets must start at 0, never decrease"):
        ops.mode_weights(off, None, False, torch.float32, 4)
    if library.CPP:
        with pytest.raises(OffsetsError, match="offsets must start at 0, never decrease"):
            library.mode_weights(off, None, False, torch.float32, 4)
    # bag_max's and bag_max_arg's C++ autograd kernels: the builtin ValueError (the Python
    # registration's OffsetsError is one too), and lookuplinear's own call the project's error;
    # a bfloat16 table (ATen's kernel, not C) the same
    for call in (lambda: ops.bag_max(weight, idx, off),
                 lambda: ops.bag_max_arg(weight, idx, off),
                 lambda: ops.bag_max_arg(weight.requires_grad_(True), idx, off),
                 lambda: ops.bag_max(weight.bfloat16(), idx, off),
                 lambda: ops.bag_max_arg(weight.bfloat16(), idx, off)):
        with pytest.raises(ValueError, match="offsets must start at 0, never decrease"):
            call()
    weight.requires_grad_(False)
    if C_BY_DEFAULT:
        with pytest.raises(InputValueError, match="offsets must start at 0, never decrease"):
            bag_max(weight, idx, off)
    else:  # it leaves the bags to the caller's ATen path, whose batch checked them
        assert bag_max(weight, idx, off) is None
    with pytest.raises(InputValueError, match="one value per entry, 4; got 3"):
        (library.mode_weights if library.CPP else ops.mode_weights)(
            torch.tensor([0, 2, 4]), torch.ones(3), False, torch.float32, 4)
    # bag_lookup, as the eager path calls it (it leaves the offsets to the operator), with the
    # table requiring grad or not
    for w in (weight, weight.clone().requires_grad_()):
        with pytest.raises(ValueError, match="offsets must start at 0, never decrease and end"):
            ops.bag_lookup(w, idx, off)


@pytest.mark.parametrize("offsets", [[0, 3, 1], [1, 2], [0, 5]],
                         ids=["decreasing", "not from 0", "past the end"])
def test_bag_lookup_checks_start_offsets_inside(offsets: list[int]) -> None:
    """nn.EmbeddingBag's start offsets (``include_last_offset=False``), refused as Bags
    refuses them, where ATen's CPU kernel on one thread takes decreasing ones; valid ones,
    an empty last bag included, give F.embedding_bag's sums."""
    weight, idx = torch.rand(10, 3), torch.tensor([1, 2, 3, 4])
    with pytest.raises(ValueError, match="never decrease and stay within the number of entries"):
        ops.bag_lookup(weight, idx, torch.tensor(offsets), include_last_offset=False)
    start = torch.tensor([0, 2, 4])
    assert torch.equal(ops.bag_lookup(weight, idx, start, include_last_offset=False),
                       F.embedding_bag(idx, weight, start, mode="sum"))


ASSERT_BAGS_BAD = [
    ([1, -1, 3], None, "an index of kb.values is out of range for in_features=4: every index "
     r"must be in \[0, 3\]"),
    ([1, 2, 4], [0, 2, 3], "an index of kb.values is out of range"),
    ([1, 2, 3], [1, 2, 3], "KeyedBags offsets are not the CSR offsets of its 3 entries"),
    ([1, 2, 3], [0, 3, 2, 3], "KeyedBags offsets are not the CSR"),
    ([1, 2, 3], [0, 2], "KeyedBags offsets are not the CSR"),
    ([1, 2, 3], [0, 2, 4], "KeyedBags offsets are not the CSR"),
]


@pytest.mark.parametrize(("indices", "offsets", "message"), ASSERT_BAGS_BAD,
                         ids=["negative", "past the table", "not from 0", "decreasing",
                              "short of the end", "past the end"])
def test_assert_bags_refuses_a_bad_batch_with_its_message(
        indices: list[int], offsets: list[int] | None, message: str) -> None:
    """On the CPU the device-side asserts fire at once (a RuntimeError with the message), on
    either registration, for int64 and int32 operands."""
    for dtype in (torch.int64, torch.int32):
        off = None if offsets is None else torch.tensor(offsets, dtype=dtype)
        with pytest.raises(RuntimeError, match=message):
            ops.assert_bags(torch.tensor(indices, dtype=dtype), off, 4, "kb.values",
                            "KeyedBags")


@pytest.mark.parametrize(("indices", "offsets"), [
    ([1, 2, 3], [0, 2, 3]), ([0, 3], None), ([], [0]), ([], None), ([[0, 1], [2, 3]], None),
    ([3, 3], [0, 0, 2, 2]),
], ids=["bags", "index", "one empty bag", "no entries", "2-D indices", "empty bags"])
def test_assert_bags_passes_a_good_batch_and_opcheck(indices: list[int],
                                                     offsets: list[int] | None) -> None:
    idx = torch.tensor(indices, dtype=torch.long)
    off = None if offsets is None else torch.tensor(offsets)
    assert ops.assert_bags(idx, off, 4, "indices", "Bags") is None
    assert ops.assert_bags(idx.int(), None if off is None else off.int(), 4, "indices",
                           "Bags") is None
    torch.library.opcheck(ops.assert_bags.default, (idx, off, 4, "indices", "Bags"))


def test_assert_bags_takes_nn_embedding_bags_start_offsets() -> None:
    """``include_last_offset=False``: start offsets, the last at most the number of entries
    (an empty last bag), refused past it, decreasing or not from 0."""
    idx = torch.tensor([1, 2, 3])
    for good in ([0, 2, 2], [0, 3], [0]):
        ops.assert_bags(idx, torch.tensor(good), 4, "indices", "Bags", False)
    for bad in ([0, 4], [1], [0, 2, 1]):
        with pytest.raises(RuntimeError, match=r"Bags offsets are not the start offsets of its "
                           r"3 entries .* stay within the number of entries"):
            ops.assert_bags(idx, torch.tensor(bad), 4, "indices", "Bags", False)
    torch.library.opcheck(ops.assert_bags.default,
                          (idx, torch.tensor([0, 2]), 4, "indices", "Bags", False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_assert_bags_on_cuda_passes_good_batches_without_a_synchronisation() -> None:
    """The CUDA kernel (the torch-op twin where the build had no toolkit): every operand
    dtype, empty bags and no entries, without a host synchronisation."""
    cases = [([1, 2, 3], [0, 2, 3]), ([0, 3], None), ([], [0]), ([3, 3], [0, 0, 2, 2]),
             (list(range(4)) * 50_000, [0, 100_000, 200_000])]
    batches = [  # copied to the GPU first: a copy from pageable host memory synchronises
        (torch.tensor(indices, dtype=i_dtype, device="cuda"),
         None if offsets is None else torch.tensor(offsets, dtype=o_dtype, device="cuda"))
        for indices, offsets in cases
        for i_dtype, o_dtype in itertools.product((torch.int64, torch.int32), repeat=2)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for idx, off in batches:
            ops.assert_bags(idx, off, 4, "indices", "Bags")
            if off is not None:  # the same as start offsets, the last bag empty
                ops.assert_bags(idx, off, 4, "indices", "Bags", False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()  # no device-side assert


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(("indices", "offsets"), [
    ASSERT_BAGS_BAD[0][:2], ASSERT_BAGS_BAD[3][:2], ([1, 2, 3], [0, 4])],
    ids=["negative index", "decreasing offsets", "start offsets past the end"])
def test_assert_bags_on_cuda_fails_a_bad_batch_as_a_device_assert(
        indices: list[int], offsets: list[int] | None) -> None:
    """A bad batch is a device-side assert at the next synchronisation, as
    ``nn.EmbeddingBag``'s for a bad index (in a process of its own: it ends the CUDA
    context; three cases, each a process that starts CUDA, within gpu.sh's time)."""
    include_last = offsets != [0, 4]  # [0, 4]: start offsets past the 3 entries
    run = on_cuda_in_a_process(f"""
        import lookuplinear.ops.library
        idx = torch.tensor({indices!r}, device="cuda")
        off = None if {offsets!r} is None else torch.tensor({offsets!r}, device="cuda")
        torch.ops.lookuplinear.assert_bags(idx, off, 4, "kb.values", "KeyedBags",
                                           {include_last!r})
    """)
    assert "refused:" in run.stdout and "device-side assert" in run.stdout, \
        run.stdout + run.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_operators_on_cuda_equal_the_cpu_ones() -> None:
    """Another device runs the torch-op implementation: the same results as the CPU's C."""
    weight = torch.randn(10, 3, dtype=torch.float64)
    idx, off = torch.tensor([1, 4, 4, 9, 0]), torch.tensor([0, 2, 2, 5])
    cuda = [t.cuda() for t in (weight, idx, off)]
    torch.testing.assert_close(ops.bag_lookup(*cuda).cpu(), ops.bag_lookup(weight, idx, off))
    torch.testing.assert_close(ops.bag_lookup(cuda[0], cuda[1]).cpu(),
                               ops.bag_lookup(weight, idx))
    torch.testing.assert_close(ops.bag_max(*cuda).cpu(), ops.bag_max(weight, idx, off))
    flat = segment_triples([(0, 3), (1, 3)], [3, 3])
    torch.testing.assert_close(ops.in_feature_order([cuda[0][:5], cuda[0][5:]], [0, 0], flat)
                               .cpu(), ops.in_feature_order([weight[:5], weight[5:]], [0, 0],
                                                            flat))


@pytest.mark.parametrize("op", ["bag_lookup", "gather_groups"])
def test_a_fused_tables_gradient_is_handed_to_its_optimizer(op: str) -> None:
    """The backward of each lookup operator (this registration's) hands a table bound to a
    ``fused=True`` optimizer its gradient instead of returning it: no ``.grad``, the weights
    of ``fused=False`` to the bit; ``torch.autograd.grad`` gets the gradient and moves
    nothing."""
    import lookuplinear

    def run(weights: list[torch.Tensor]) -> torch.Tensor:
        if op == "gather_groups":
            _, rows, columns, width = _groups()
            return ops.gather_groups(weights, rows, columns, width)
        return ops.bag_lookup(weights[0], torch.tensor([4, 0, 1, 1, 1, 0, 3, 3]),
                              torch.tensor([0, 2, 2, 3, 5, 6, 8]))

    ends = []
    for fused in (False, True):
        weights = [torch.nn.Parameter(w.detach()) for w in _groups()[0]]
        opt = lookuplinear.optim.Adam(weights, lr=0.1, fused=fused)
        loss = run(weights).pow(2).sum()
        if fused:
            before = [w.detach().clone() for w in weights]
            grads = torch.autograd.grad(loss, weights[:1], retain_graph=True)
            assert grads[0].is_sparse
            assert all(torch.equal(w, b) for w, b in zip(weights, before, strict=True))
        loss.backward()
        read = weights[:1] if op == "bag_lookup" else weights  # the tables the lookup reads
        assert all((w.grad is None) == fused for w in read)
        opt.step()
        ends.append([w.detach().clone() for w in weights])
    assert all(torch.equal(x, y) for x, y in zip(*ends, strict=True))


def test_gather_groups_refuses_a_forward_mode_tangent() -> None:
    """No forward-mode formula: a table with a tangent is refused on both registrations, never
    looked up without its tangent."""
    from torch.autograd import forward_ad

    with forward_ad.dual_level():
        weights, rows, columns, width = _groups()
        dual = [forward_ad.make_dual(weights[0], torch.ones_like(weights[0])), weights[1]]
        with pytest.raises((NotImplementedError, RuntimeError), match=r"jvp|forward-mode AD"):
            ops.gather_groups(dual, rows, columns, width)


def test_a_sparse_gradient_from_row_sums_warns_nothing() -> None:
    """``row_sums_grad`` (the sparse backward of the Python registration) builds its coalesced
    tensor without torch's invariant checks, as ``entry_grads`` does: no torch warning that
    they are disabled (before: one on the first sparse backward of a process)."""
    script = textwrap.dedent("""
        import warnings
        import torch
        from lookuplinear.ops.library import row_sums_grad
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            row_sums_grad(torch.tensor([1, 2]), torch.ones(2, 4), (10, 4))
        print(len(caught), [str(w.message)[:80] for w in caught])
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert run.stdout.startswith("0 "), run.stdout + run.stderr


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=9), data=st.data(),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
       padding=st.booleans(), last=st.booleans())
def test_bag_lookup_mean_is_nn_embedding_bags_to_the_bit(sizes: list[int], data: Any,
                                                        dtype: torch.dtype, padding: bool,
                                                        last: bool) -> None:
    """``bag_lookup(..., mode=1)``: ``nn.EmbeddingBag(mode="mean", sparse=True)``'s output and
    weight gradient, to the bit (empty bags, duplicates, padding entries left out of a bag's
    size, start or CSR offsets), on whichever registration is loaded; a float16 gradient
    within rounding (a row's contributions summed in float32)."""
    n = 12
    idx = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=sum(sizes),
                                          max_size=sum(sizes))), dtype=torch.long)
    offsets = torch.tensor([0, *itertools.accumulate(sizes)])
    pad = 3 if padding else None
    bag = torch.nn.EmbeddingBag(n, 5, mode="mean", sparse=True, padding_idx=pad,
                                include_last_offset=last).to(dtype)
    with torch.no_grad():
        bag.weight.mul_(30)
    weight = bag.weight.detach().clone().requires_grad_()
    off = offsets if last else offsets[:-1]
    want = bag(idx, off)
    got = ops.bag_lookup(weight, idx, off, None, pad, 1, include_last_offset=last)
    assert torch.equal(got, want)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(len(sizes))).to(dtype)
    want.backward(g)
    got.backward(g)
    assert weight.grad is not None and bag.weight.grad is not None
    if dtype == torch.float16:  # a row's contributions summed in float32, rounded once
        torch.testing.assert_close(weight.grad.to_dense(), bag.weight.grad.to_dense(),
                                   rtol=2e-3, atol=2e-3)
    else:
        assert torch.equal(weight.grad.to_dense(), bag.weight.grad.to_dense())


@pytest.mark.parametrize(("args", "mode", "match"), [
    ((torch.tensor([1, 2]),), 1, "mode=1 .mean. pools bags, so it needs offsets"),
    ((torch.tensor([1, 2]), torch.tensor([0, 2]), torch.ones(2)), 1, "takes no per-entry weights"),
    ((torch.tensor([1, 2]), torch.tensor([0, 2])), 2, "mode must be 0 .sum. or 1 .mean."),
])
@pytest.mark.parametrize("twin", [False, True], ids=["operator", "trace twin"])
def test_bag_lookup_refuses_a_mean_it_cannot_give(args: tuple[torch.Tensor, ...], mode: int,
                                                   match: str, twin: bool) -> None:
    """A mean without offsets, a mean with per-entry weights (ATen's takes them for a sum
    only) and a mode other than sum and mean are refused, naming the fix; so does the
    operator's trace twin (``lookuplinear.ops.autograd.bag_lookup``), with the same error."""
    from lookuplinear.ops.autograd import bag_lookup

    weight = torch.randn(4, 3)
    rest = (*args, *(None,) * (3 - len(args)))
    lookup = bag_lookup if twin else ops.bag_lookup
    with pytest.raises(ValueError, match=match):
        lookup(weight, rest[0], rest[1], rest[2], None, mode)
