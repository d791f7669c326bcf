"""The row-sparse backward: equal to the dense gradient; grouped (one row per unique index) by
``group_rows``, one row per entry from the layer (``lookuplinear::bag_lookup``: sorted by row for
bags, in entry order for an index tensor)."""

from __future__ import annotations

import pytest
import torch
from forms import BATCH, DEVICES, make_case
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import Bags, LookupLinear
from lookuplinear.ops import c_available, group_rows, use_backend
from lookuplinear.ops.autograd import bag_lookup
from lookuplinear.optim import row_sparse_parts


@st.composite
def bag_batches(draw: st.DrawFn) -> tuple[int, list[list[int]], bool, int | None]:
    # (300,000 rows: the radix sort's two passes, as 5000, with a dense reference of 7 MB)
    in_features = draw(st.sampled_from([1, 2, 7, 300, 5000, 300_000]))
    idx = st.integers(0, in_features - 1)
    lists = draw(st.lists(st.lists(idx, max_size=6), min_size=1, max_size=8))
    weighted = draw(st.booleans())
    padding = draw(st.none() | idx)
    return in_features, lists, weighted, padding


@settings(max_examples=60, deadline=None)
@given(bag_batches(), st.sampled_from([torch.float32, torch.float64]))
def test_group_rows_equals_dense_gradient(
    case: tuple[int, list[list[int]], bool, int | None], dtype: torch.dtype
) -> None:
    """``(rows, values)`` is the non-zero rows of ``densify(x).T @ g``: C and torch ops."""
    in_features, lists, weighted, padding = case
    g = torch.Generator().manual_seed(len(lists))
    ws = [[float(torch.rand((), generator=g)) - 0.5 for _ in b] for b in lists]
    bags = Bags.from_lists(lists, weights=ws if weighted else None)
    grad_out = torch.randn(len(lists), 3, generator=g, dtype=dtype)
    dense = bags.to_dense(in_features, dtype=dtype)
    if padding is not None:
        dense[:, padding] = 0
    expected = dense.T @ grad_out  # (in_features, 3)
    for backend in ("c", "torch") if c_available() else ("torch",):
        with use_backend(backend):
            rows, values = group_rows(grad_out, in_features, bags.indices, bags.offsets,
                                      bags.weights, padding)
        assert rows.dtype == torch.long
        assert bool((rows[1:] > rows[:-1]).all())  # sorted and unique
        touched = sorted({i for b in lists for i in b} - {padding})
        assert rows.tolist() == touched
        got = torch.zeros_like(expected).index_add_(0, rows, values)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding_idx", [None, 1])
def test_index_input_gradient_is_nn_embeddings(padding_idx: int | None) -> None:
    """An index tensor's gradient is ``nn.Embedding(sparse=True)``'s (one row per position in
    order, padding left out), as the operator's backward gives it: a table read twice then
    sums a row's positions in the order ``fused=True`` sums them."""
    W = torch.randn(10, 4, requires_grad=True)
    x = torch.tensor([[3, 1], [3, 3]])
    g = torch.randn(2, 2, 4)
    bag_lookup(W, x, padding_idx=padding_idx).backward(g)
    emb = torch.nn.Embedding(10, 4, sparse=True, padding_idx=padding_idx)
    emb(x).backward(g)
    assert W.grad is not None and emb.weight.grad is not None
    assert torch.equal(W.grad._indices(), emb.weight.grad._indices())
    assert torch.equal(W.grad._values(), emb.weight.grad._values())


@settings(max_examples=40, deadline=None)
@given(bag_batches(), st.sampled_from([torch.float32, torch.float64]),
       st.sampled_from(["bags", "offsets", "index", "mean"]))
def test_layer_gradient_is_the_grouped_rows(
    case: tuple[int, list[list[int]], bool, int | None], dtype: torch.dtype, form: str
) -> None:
    """``LookupLinear(sparse=True)``'s weight gradient (the operator's backward, eager as
    compiled), padding left out: for bags each distinct row once, sorted, its ``group_rows``
    sum; for an index tensor ``nn.Embedding(sparse=True)``'s, the entries in order with their
    ``grad_out`` rows. Either way ``row_sparse_parts`` gives ``group_rows``' rows and sums
    back to the bit, without a coalesce."""
    in_features, lists, weighted, padding = case
    if form == "index":
        lists = [[i] for b in lists for i in b] or [[0]]
    g = torch.Generator().manual_seed(len(lists))
    ws = [[float(torch.rand((), generator=g)) - 0.5 for _ in b] for b in lists]
    bags = Bags.from_lists(lists, weights=ws if weighted and form != "index" else None)
    if bags.weights is not None:
        bags = Bags(bags.indices, bags.offsets, bags.weights.to(dtype))
    layer = LookupLinear(in_features, 3, bias=False, sparse=True, padding_idx=padding,
                         mode="mean" if form == "mean" else "sum", dtype=dtype)
    if form == "bags" or form == "mean":
        out = layer(bags)
    elif form == "offsets":
        out = layer(bags.indices, bags.offsets[:-1], per_sample_weights=bags.weights)
    else:
        out = layer(bags.indices.reshape(-1, 1)).reshape(-1, 3)
    grad_out = torch.randn(out.shape, generator=g, dtype=dtype)
    out.backward(grad_out)
    grad = layer.weight.grad
    assert grad is not None and grad.is_sparse
    rows, values = grad._indices()[0], grad._values()
    kept = [i for b in lists for i in b if i != padding]
    if form == "index":  # nn.Embedding's: one row per entry, in entry order
        assert rows.tolist() == kept
        assert torch.equal(values, grad_out[[i != padding for i in bags.indices.tolist()]])
    else:
        assert rows.tolist() == sorted(set(kept))  # each row once, sorted
    # the dense path in float64 on the same values: a weighted mean divides by the sum of its
    # weights, which can cancel, so two float32 evaluations may differ by more than rounding
    dense_layer = LookupLinear(in_features, 3, bias=False, padding_idx=padding,
                               mode="mean" if form == "mean" else "sum", dtype=torch.float64)
    dense_layer.weight.data.copy_(layer.weight.data)
    wide = bags if bags.weights is None else Bags(bags.indices, bags.offsets,
                                                  bags.weights.double())
    again = (dense_layer(wide) if form in ("bags", "mean") else
             dense_layer(wide.indices, wide.offsets[:-1], per_sample_weights=wide.weights)
             if form == "offsets" else dense_layer(wide.indices.reshape(-1, 1)).reshape(-1, 3))
    again.backward(grad_out.double())
    assert dense_layer.weight.grad is not None
    torch.testing.assert_close(grad.to_dense().double(), dense_layer.weight.grad,
                               **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))
    unique, sums = row_sparse_parts(grad)
    if form == "index":
        want_rows, want = group_rows(grad_out, in_features, bags.indices, None, None, padding)
        assert torch.equal(unique, want_rows) and torch.equal(sums, want)
        return
    assert torch.equal(unique, rows) and torch.equal(sums, values)  # as it is


def test_row_sparse_parts_sums_runs_of_sorted_rows() -> None:
    """Rows that never decrease, with any values: each run summed (as a coalesce sums it), no
    sort; rows in another order grouped, each row's values summed in the order they come;
    strictly increasing rows are kept as they are."""
    values = torch.tensor([[1.0], [2.0], [4.0], [8.0], [16.0]])
    rows, sums = row_sparse_parts(torch.sparse_coo_tensor(torch.tensor([[0, 2, 2, 2, 5]]),
                                                          values, (6, 1)))
    assert rows.tolist() == [0, 2, 5] and sums.reshape(-1).tolist() == [1.0, 14.0, 16.0]
    rows, sums = row_sparse_parts(torch.sparse_coo_tensor(torch.tensor([[2, 0, 2, 5, 2]]),
                                                          values, (6, 1)))
    assert rows.tolist() == [0, 2, 5] and sums.reshape(-1).tolist() == [2.0, 21.0, 8.0]
    increasing = torch.sparse_coo_tensor(torch.tensor([[0, 1, 4]]), values[:3], (6, 1))
    rows, sums = row_sparse_parts(increasing)
    assert rows.tolist() == [0, 1, 4] and sums.data_ptr() == increasing._values().data_ptr()


#: an optimizer of each row update, with options that read every term of its formula
STEPPERS = [("SGD", {"momentum": 0.5, "nesterov": True, "weight_decay": 0.01}),
            ("SGD", {}), ("Adagrad", {"weight_decay": 0.01}),
            ("RowWiseAdagrad", {"weight_decay": 0.01}), ("Adam", {}), ("AdamW", {})]


@settings(max_examples=40, deadline=None)
@given(bag_batches(), st.sampled_from([torch.float32, torch.float64]),
       st.sampled_from(STEPPERS), st.sampled_from(["auto", "torch"]))
def test_unfused_step_reads_the_layer_gradient_as_its_summed_rows(
    case: tuple[int, list[list[int]], bool, int | None], dtype: torch.dtype,
    stepper: tuple[str, dict[str, float]], backend: str,
) -> None:
    """An unfused ``lookuplinear.optim`` step on the layer's gradient (one row per entry, runs
    summed as the update reads them) gives the bits of the step on ``row_sparse_parts``'
    unique rows (each run summed first)."""
    from lookuplinear import optim

    in_features, lists, weighted, padding = case
    g = torch.Generator().manual_seed(len(lists))
    ws = [[float(torch.rand((), generator=g)) - 0.5 for _ in b] for b in lists]
    bags = Bags.from_lists(lists, weights=ws if weighted else None)
    if bags.weights is not None:
        bags = Bags(bags.indices, bags.offsets, bags.weights.to(dtype))
    grad_out = torch.randn(len(lists), 3, generator=g, dtype=dtype)
    name, kw = stepper
    weights, states = [], []
    for summed in (False, True):
        layer = LookupLinear(in_features, 3, bias=False, sparse=True, padding_idx=padding,
                             dtype=dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(in_features, 3, generator=torch.Generator()
                                           .manual_seed(0), dtype=dtype))
        opt = getattr(optim, name)(layer.parameters(), lr=0.1, **kw)
        with use_backend(backend):
            for _ in range(2):
                opt.zero_grad()
                layer(bags).backward(grad_out)
                grad = layer.weight.grad
                assert grad is not None
                if summed:
                    rows, values = row_sparse_parts(grad)
                    layer.weight.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values,
                                                                grad.shape)
                opt.step()
        weights.append(layer.weight.detach().reshape(-1).view(torch.uint8))
        states.append([v.reshape(-1).view(torch.uint8) for v in opt.state[layer.weight].values()
                       if isinstance(v, torch.Tensor)])
    assert torch.equal(weights[0], weights[1])
    assert all(torch.equal(a, b) for a, b in zip(*states, strict=True))


@pytest.mark.parametrize("change", ["set a row", "add in place", "through a view", "none"])
@pytest.mark.parametrize("name", ["SGD", "RowWiseAdagrad", "Adam"])
def test_unfused_step_reads_a_gradient_changed_in_place(change: str, name: str) -> None:
    """The layer's gradient changed in place after its backward (a hook's or a user's
    rescaling, one row set): the step reads the change, to the bits of the step on a copy of
    the changed gradient."""
    from lookuplinear import optim

    bags = Bags.from_lists([[3, 3, 5, 3], [5, 1], [6, 6]])
    grad_out = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    results = []
    for copied in (False, True):
        layer = LookupLinear(8, 4, bias=False, sparse=True)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))
        opt = getattr(optim, name)(layer.parameters(), lr=0.1)
        layer(bags).backward(grad_out)
        grad = layer.weight.grad
        assert grad is not None
        rows, values = grad._indices()[0], grad._values()
        assert rows.tolist() == [1, 3, 5, 6]
        if change == "set a row":
            values[2] = 1.5
        elif change == "add in place":
            values.add_(0.25)
        elif change == "through a view":
            values.detach()[3].fill_(-2.0)
        if copied:  # new tensors
            layer.weight.grad = torch.sparse_coo_tensor(rows.unsqueeze(0).clone(),
                                                        values.clone(), grad.shape)
        opt.step()
        results.append(layer.weight.detach().clone())
    assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32))
    if change != "none":
        unchanged = LookupLinear(8, 4, bias=False, sparse=True)
        with torch.no_grad():
            unchanged.weight.copy_(torch.randn(8, 4,
                                               generator=torch.Generator().manual_seed(0)))
        opt = getattr(optim, name)(unchanged.parameters(), lr=0.1)
        unchanged(bags).backward(grad_out)
        opt.step()
        assert not torch.equal(unchanged.weight.detach(), results[0])  # the change counted


@pytest.mark.parametrize("form", ["bags", "offsets", "torch_coo"])
@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn"])
def test_sparse_true_input_values_get_the_dense_gradient(form: str, mode: str) -> None:
    """Gradients flow to the input's values through the row-sparse path too."""
    grads = []
    for sparse in (False, True):
        torch.manual_seed(0)
        layer = LookupLinear(BATCH.in_features, 3, mode=mode, padding_idx=2, sparse=sparse)
        case = make_case(form, BATCH, requires_grad=True)
        layer(case.input, **case.kwargs).pow(2).sum().backward()
        assert case.leaf is not None and case.leaf.grad is not None
        grads.append((case.leaf.grad.clone(), layer.weight.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    assert grads[1][1] is not None and grads[0][1] is not None
    torch.testing.assert_close(grads[1][1].to_dense(), grads[0][1])


def test_c_and_torch_paths_give_the_same_gradient() -> None:
    torch.manual_seed(0)
    layer = LookupLinear(1000, 8, sparse=True, padding_idx=0)
    bags = Bags.from_lists([[5, 5, 0, 999], [], [7, 5]], weights=[[1, 2, 3, 4], [], [0.5, 1]])
    layer(bags).pow(2).sum().backward()
    assert layer.weight.grad is not None
    c_grad = layer.weight.grad.coalesce()
    layer.weight.grad = None
    with use_backend("torch"):
        layer(bags).pow(2).sum().backward()
    assert layer.weight.grad is not None
    torch_grad = layer.weight.grad.coalesce()
    assert torch.equal(c_grad.indices(), torch_grad.indices())
    torch.testing.assert_close(c_grad.values(), torch_grad.values())


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_gradient_on_device(device: str) -> None:
    layer = LookupLinear(50, 4, sparse=True, device=device)
    x = torch.tensor([[1, 4, 4], [0, 49, 1]], device=device)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.is_sparse
    dense = torch.zeros(50, 4, device=device)
    dense[[1, 4, 0, 49]] = torch.tensor([2.0, 2.0, 1.0, 1.0], device=device).unsqueeze(1)
    torch.testing.assert_close(layer.weight.grad.to_dense(), dense)


@pytest.mark.parametrize("weighted", [False, True])
def test_bag_gradient_off_the_cpu_is_nn_embedding_bags_one_row_per_entry(
        weighted: bool) -> None:
    """Off the CPU (meta here, CUDA on a GPU) a bag lookup's sparse gradient is
    ``nn.EmbeddingBag(sparse=True)``'s layout, one row per entry (uncoalesced): how many
    distinct rows there are is known on the device only, and a coalesced gradient would read
    it back, a synchronisation in every CUDA backward (stock's has none). On the CPU it is
    coalesced (:func:`test_layer_gradient_is_the_grouped_rows`)."""
    idx = torch.tensor([1, 2, 2, 5, 1], device="meta")
    off = torch.tensor([0, 2, 5], device="meta")
    psw = torch.ones(5, device="meta") if weighted else None
    grads = []
    for cls in (LookupLinear, torch.nn.EmbeddingBag):
        layer = cls(10, 4, mode="sum", sparse=True, include_last_offset=True, device="meta")
        layer(idx, off, per_sample_weights=psw).sum().backward()
        assert layer.weight.grad is not None
        grads.append(layer.weight.grad)
    ours, stock = grads
    assert ours.is_sparse and stock.is_sparse
    assert (ours._nnz(), ours.is_coalesced(), ours.shape) == \
        (stock._nnz(), stock.is_coalesced(), stock.shape) == (5, False, (10, 4))


def test_bfloat16_table_uses_torch_ops_and_matches_float32() -> None:
    torch.manual_seed(0)
    layer = LookupLinear(100, 4, sparse=True, dtype=torch.bfloat16)
    ref = LookupLinear(100, 4, sparse=True)
    with torch.no_grad():
        ref.weight.copy_(layer.weight.float())
    x = torch.tensor([[3, 3, 50], [1, 2, 3]])
    for m in (layer, ref):
        m(x).float().sum().backward()
    assert layer.weight.grad is not None and ref.weight.grad is not None
    torch.testing.assert_close(
        layer.weight.grad.to_dense().float(), ref.weight.grad.to_dense(), rtol=1e-2, atol=1e-2
    )


@pytest.mark.parametrize("x", [torch.tensor([1, 10]), torch.tensor([-1, 2]),
                               Bags.from_lists([[1], [12, 3]])])
def test_sparse_true_names_an_out_of_range_index(x: object) -> None:
    """The row-sparse forward relies on the lookup kernel's check; the error is still named."""
    from lookuplinear import LookupIndexError

    with pytest.raises(LookupIndexError, match="out of range for in_features=10"):
        LookupLinear(10, 3, sparse=True)(x)
