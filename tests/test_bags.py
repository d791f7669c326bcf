"""Random bags (hypothesis) against the dense reference; ``Bags`` adapters; huge indices."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from forms import (
    MODES,
    Batch,
    assert_close,
    make_case,
    reference_bags,
    reference_index,
    reference_linear,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    KeyedBags,
    LookupIndexError,
    LookupLinear,
    lookup_linear,
)
from lookuplinear.functional import normalize_padding_idx

#: Weights exact in bfloat16 and float32, so sums are exact and "sums to 0" really is 0.
DYADIC = [-2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0]


@st.composite
def batches(draw: st.DrawFn) -> tuple[Batch, int | None]:
    """A batch of 0-5 bags of 0-6 indices (duplicates likely), weighted or not, and a
    padding_idx (None, or any index, negative included)."""
    in_features = draw(st.integers(1, 12))
    lists = draw(st.lists(st.lists(st.integers(0, in_features - 1), max_size=6), max_size=5))
    weights = None
    if draw(st.booleans()):
        weights = [[draw(st.sampled_from(DYADIC)) for _ in bag] for bag in lists]
    padding = draw(st.none() | st.integers(-in_features, in_features - 1))
    return Batch(lists, weights, in_features), padding


EDGES = {
    "zero-sized batch": (Batch([], None, 4), None),
    "all-empty batch": (Batch([[], [], []], None, 4), 0),
    "batch of one": (Batch([[2]], [[1.5]], 3), None),
    "only padding": (Batch([[1, 1], [1]], None, 3), 1),
    "duplicates": (Batch([[0, 0, 0], [2, 0, 2]], None, 3), None),
    "weights sum to 0": (Batch([[0, 1], [1, 1]], [[1.0, -1.0], [0.5, -0.5]], 2), -1),
}


def _with_edges(test: Any) -> Any:
    for name, (batch, pad) in EDGES.items():
        test = example(data=(batch, pad), mode="mean", form="bags").via(name)(test)
    return test


@settings(max_examples=60, deadline=None)
@given(
    data=batches(),
    mode=st.sampled_from(MODES),
    form=st.sampled_from(["bags", "offsets", "scipy_csr", "torch_coo", "dense"]),
)
@_with_edges
def test_random_bags_equal_dense_linear(
    data: tuple[Batch, int | None], mode: str, form: str
) -> None:
    batch, padding_idx = data
    if mode == "max":
        batch = Batch(batch.lists, None, batch.in_features)
    torch.manual_seed(0)
    layer = LookupLinear(batch.in_features, 3, mode=mode, padding_idx=padding_idx)
    with torch.no_grad():
        assert layer.bias is not None
        layer.bias.normal_()
    case = make_case(form, batch, requires_grad=mode != "max" and form != "scipy_csr")
    pad = layer.padding_idx
    if mode == "max" and case.merges and batch.has_duplicates(pad):
        with pytest.raises(InputValueError, match="weight 1"):
            layer(case.input, **case.kwargs)
        return
    lin = reference_linear(layer)
    leaf_ref = None if case.leaf is None else case.leaf.detach().double().requires_grad_(True)
    ref = reference_bags(
        lin, case.entries(leaf_ref), batch.n, mode=mode, padding_idx=pad, merges=case.merges
    )
    out = layer(case.input, **case.kwargs)
    assert out.shape == (batch.n, 3)
    assert_close(out, ref, torch.float32)  # never NaN: assert_close checks finiteness too

    # rows with nothing left after padding give exactly the bias
    kept = [[i for i in bag if i != pad] for bag in batch.lists]
    for b, bag in enumerate(kept):
        if not bag:
            assert torch.equal(out[b], layer.bias.detach())

    g = torch.randn(ref.shape, dtype=torch.float64)
    inputs = [layer.weight, layer.bias] + ([case.leaf] if case.leaf is not None else [])
    ref_inputs = [lin.weight, lin.bias] + ([leaf_ref] if leaf_ref is not None else [])
    grads = torch.autograd.grad(out, inputs, g.float(), allow_unused=True)
    ref_grads = torch.autograd.grad(ref, ref_inputs, g, allow_unused=True)
    assert_close(grads[0], ref_grads[0].T, torch.float32)
    assert_close(grads[1], ref_grads[1], torch.float32)
    if case.leaf is not None:
        got = torch.zeros_like(case.leaf) if grads[2] is None else grads[2]
        want = torch.zeros_like(leaf_ref) if ref_grads[2] is None else ref_grads[2]
        assert_close(got, want, torch.float32)


@settings(max_examples=40, deadline=None)
@given(data=batches())
def test_bags_round_trip_through_scipy_and_dense(data: tuple[Batch, int | None]) -> None:
    batch, _ = data
    bags = make_case("bags", batch).input
    rows, cols, vals, _ = batch.flat()
    want = np.zeros((batch.n, batch.in_features))
    np.add.at(want, (rows, cols), vals)

    dense = bags.to_dense(batch.in_features, dtype=torch.float64)
    np.testing.assert_array_equal(dense.numpy(), want)
    np.testing.assert_array_equal(bags.to_scipy(batch.in_features).toarray(), want)
    back = Bags.from_scipy(bags.to_scipy(batch.in_features))
    np.testing.assert_array_equal(back.to_dense(batch.in_features).numpy(), want)
    from_dense = Bags.from_dense(dense)
    np.testing.assert_array_equal(
        from_dense.to_dense(batch.in_features, dtype=torch.float64).numpy(), want
    )
    assert len(bags) == batch.n
    assert bags.lengths().tolist() == [len(b) for b in batch.lists]
    assert bags.bag_ids().tolist() == rows.tolist()
    assert bags.nnz == len(cols)


@pytest.mark.parametrize(("lists", "error"), [
    ([[1.5]], "float 1.5"), ([[2, 1.0]], "float 1.0"), ([[True]], "bool True"),
    ([[True, 2]], "bool True"), ([[3], [2, np.True_]], "bool"),
    ([[torch.tensor(True), 2]], "Tensor"), ([[1, None]], "NoneType None"),
    ([[None]], "NoneType None"),
    ([[1, "a"]], "str 'a'"), ([[[1]]], "list"), ([[2**63]], "does not fit in int64"),
    ([[-(2**70), 3]], "does not fit in int64"), ([[torch.tensor(1.5)]], "Tensor"),
    ([[torch.tensor([1, 2])]], "Tensor")])
def test_from_lists_refuses_what_is_no_row_index(lists: Any, error: str) -> None:
    """A float (1.5 was read as row 1), a bool, a string or a nested list is refused, as
    ``nn.EmbeddingBag`` refuses a float index tensor; an integer past int64 too."""
    with pytest.raises((InputTypeError, InputValueError), match=error):
        Bags.from_lists(lists)
    with pytest.raises(RuntimeError):
        torch.nn.EmbeddingBag(3, 2)(torch.tensor([1.5]), torch.tensor([0]))


def test_from_lists_takes_python_numpy_and_0_d_tensor_integers() -> None:
    bags = Bags.from_lists([[1, np.int32(2)], [], [torch.tensor(0), np.uint64(2)]])
    assert bags.indices.dtype == torch.int64 and bags.indices.tolist() == [1, 2, 0, 2]
    assert bags.offsets.tolist() == [0, 2, 2, 4]


def test_list_and_array_weights_keep_their_precision() -> None:
    """A floating array keeps its dtype: a float64 layer equals nn.Linear on the float64
    matrix (0.1 not rounded to float32, 1e40 not inf); a list is read in torch's default
    dtype, as torch.tensor reads it (float64 under torch.set_default_dtype(torch.float64));
    a float32 layer rounds them to float32 as it did, to the bit."""
    lists, values = [[1, 2], [0]], [[0.1, 1e40], [1 / 3]]
    X = torch.tensor([[0.0, 0.1, 1e40], [1 / 3, 0.0, 0.0]], dtype=torch.float64)
    flat = np.array([0.1, 1e40, 1 / 3])
    default = torch.get_default_dtype()
    assert Bags.from_lists([[1]], weights=[[0.1]]).weights.dtype == default  # type: ignore
    torch.set_default_dtype(torch.float64)
    try:
        listed = [Bags.from_lists(lists, weights=values),
                  Bags(torch.tensor([1, 2, 0]), torch.tensor([0, 2, 3]), flat.tolist())]
    finally:
        torch.set_default_dtype(default)
    for bags in (*listed, Bags(torch.tensor([1, 2, 0]), torch.tensor([0, 2, 3]), flat)):
        assert bags.weights is not None and bags.weights.dtype == torch.float64
        layer = LookupLinear(3, 2, dtype=torch.float64)
        with torch.no_grad():
            assert torch.equal(layer(bags), layer.to_linear()(X))
    bags = Bags(torch.tensor([1]), torch.tensor([0, 1]), np.float16([0.1]))
    assert bags.weights is not None and bags.weights.dtype == torch.float16
    for mode in ("sum", "mean", "sqrtn"):
        layer = LookupLinear(3, 2, mode=mode)
        rounded = Bags.from_lists(lists, weights=[[0.1, 3e38], [1 / 3]])
        assert rounded.weights is not None
        rounded.weights = rounded.weights.float()
        with torch.no_grad():
            assert torch.equal(layer(Bags.from_lists(lists, weights=[[0.1, 3e38], [1 / 3]])),
                               layer(rounded))


def test_from_padded_drops_padding() -> None:
    x = torch.tensor([[3, 1, 0], [0, 0, 0], [2, 2, 5]])
    bags = Bags.from_padded(x, padding_idx=0)
    assert bags.offsets.tolist() == [0, 2, 2, 5]
    assert bags.indices.tolist() == [3, 1, 2, 2, 5]
    layer = LookupLinear(6, 2, padding_idx=0)
    # the padded index tensor summed over L equals the bags (padding outputs the bias, so
    # subtract it for each padded position: L * bias in the index path, bias once in the bags)
    per_position = layer(x) - layer.bias
    torch.testing.assert_close(per_position.sum(1) + layer.bias, layer(bags))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", [sp.csr_matrix, sp.csr_array])
def test_from_scipy_csr_shares_memory(kind: Any, index_dtype: Any) -> None:
    m = kind(sp.random(5, 50, density=0.2, format="csr", dtype=np.float32, random_state=0))
    m.indices = m.indices.astype(index_dtype)
    m.indptr = m.indptr.astype(index_dtype)
    bags = Bags.from_scipy(m)
    assert bags.indices.dtype == torch.from_numpy(np.zeros(1, index_dtype)).dtype
    assert np.shares_memory(bags.indices.numpy(), m.indices)
    assert np.shares_memory(bags.offsets.numpy(), m.indptr)
    assert bags.weights is not None
    assert np.shares_memory(bags.weights.numpy(), m.data)
    layer = LookupLinear(50, 3)
    torch.testing.assert_close(layer(m), layer(torch.from_numpy(m.toarray())))


@pytest.mark.parametrize(("data_dtype", "index_dtype"), [
    (">f8", np.int32), (">f4", np.int64), (np.longdouble, np.int32), (np.float64, ">i4"),
    (np.float32, ">i8"), (np.float64, np.int16)])
def test_from_scipy_reads_any_byte_order_and_width(data_dtype: Any, index_dtype: Any) -> None:
    """Big-endian or longdouble data and big-endian or narrow indices are converted to what
    torch takes (native float64, int64), not passed to torch.from_numpy to fail there."""
    A = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 0.25]])
    m = sp.csr_matrix(A)
    m.data = m.data.astype(data_dtype)
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    bags = Bags.from_scipy(m)
    assert bags.indices.dtype in (torch.int32, torch.int64)
    assert bags.indices.dtype == bags.offsets.dtype
    np.testing.assert_array_equal(bags.to_dense(3, dtype=torch.float64).numpy(), A)


def test_scipy_coo_duplicates_add_up() -> None:
    coo = sp.coo_matrix(
        (np.array([1.0, 2.0, 0.5]), (np.array([0, 0, 1]), np.array([3, 3, 1]))), shape=(2, 5)
    )
    layer = LookupLinear(5, 2, bias=False)
    W = layer.weight.detach()
    torch.testing.assert_close(layer(coo), torch.stack([3.0 * W[3], 0.5 * W[1]]))


def _stored_twice(form: str) -> Any:
    """The matrix [[0, 2, 0, 1], [3, 0, 0, 0]] with its 2 stored as two entries of 1, out of
    order, in ``form``."""
    data, cols, indptr = [1.0, 1.0, 1.0, 3.0], [1, 3, 1, 0], [0, 3, 4]
    if form == "torch_csr":
        return torch.sparse_csr_tensor(torch.tensor(indptr), torch.tensor(cols),
                                       torch.tensor(data), (2, 4))
    m = sp.csr_matrix((np.float32(data), np.array(cols), np.array(indptr)), shape=(2, 4))
    return {"csr": m, "csr_array": sp.csr_array(m), "csc": m.tocsc()}[form]


@pytest.mark.parametrize("form", ["csr", "csr_array", "csc", "torch_csr"])
def test_entries_stored_twice_in_a_matrix_are_summed(form: str) -> None:
    """A CSR or CSC matrix with one row and column stored twice is read as its sum, as the
    dense matrix: sqrtn divides by the norm of the merged row, max refuses the 2."""
    x = _stored_twice(form)
    X = torch.tensor([[0.0, 2.0, 0.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    bags = Bags.from_scipy(x) if form != "torch_csr" else Bags.from_torch_sparse(x)
    assert bags.indices.tolist() == [1, 3, 0] and bags.offsets.tolist() == [0, 2, 3]
    assert bags.weights is not None and bags.weights.tolist() == [2.0, 1.0, 3.0]
    for mode, denominator in (("sum", torch.ones(2, 1)), ("mean", X.sum(1, keepdim=True)),
                              ("sqrtn", X.norm(dim=1, keepdim=True))):
        layer = LookupLinear(4, 2, mode=mode)
        lin = layer.to_linear(strict=False)
        with torch.no_grad():
            want = (lin(X) - lin.bias) / denominator + lin.bias
            torch.testing.assert_close(layer(x), want)
            torch.testing.assert_close(layer(bags), want)
    with pytest.raises(InputValueError, match="weight 1"):
        LookupLinear(4, 2, mode="max")(x)


def test_from_scipy_sums_float16_entries_stored_twice() -> None:
    m = sp.csr_matrix((np.float32([0.5, 0.25, 1.0]), np.array([2, 2, 0]), np.array([0, 3])),
                      shape=(1, 3))
    m.data = m.data.astype(np.float16)
    bags = Bags.from_scipy(m)
    assert bags.weights is not None and bags.weights.dtype == torch.float16
    assert bags.indices.tolist() == [0, 2] and bags.weights.tolist() == [1.0, 0.75]
    assert m.indices.tolist() == [2, 2, 0]  # the matrix itself is left as it is


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_to_scipy_owns_its_arrays(index_dtype: torch.dtype) -> None:
    """scipy's in-place operations on the matrix leave the bags' weights and indices alone."""
    bags = Bags(torch.tensor([3, 1, 2, 0], dtype=index_dtype),
                torch.tensor([0, 2, 4], dtype=index_dtype), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    before = bags.to_dense(4)
    m = bags.to_scipy(4)
    m.sort_indices()
    m.data *= 2
    assert torch.equal(bags.to_dense(4), before)
    np.testing.assert_array_equal(m.toarray(), 2 * before.numpy())


@pytest.mark.parametrize(("dtype", "want"), [
    (torch.float64, np.float64), (torch.float32, np.float32), (torch.float16, np.float32),
    (torch.bfloat16, np.float32)])
def test_to_scipy_keeps_float32_and_float64_weights(dtype: torch.dtype, want: Any) -> None:
    """float64 weights stay float64 (0.1 and 1e-300 exactly); half precisions widen."""
    m = sp.csr_matrix(np.array([[0.1, 0.0, 1e-300]]))
    bags = Bags.from_scipy(m)
    assert bags.weights is not None
    bags.weights = bags.weights.to(dtype)
    out = bags.to_scipy(3)
    assert out.dtype == want
    np.testing.assert_array_equal(out.toarray(), bags.to_dense(3).to(torch.float64).numpy())


@pytest.mark.parametrize("source", ["scipy", "torch_sparse", "dense"])
def test_complex_values_are_refused_as_the_layer_refuses_them(source: str) -> None:
    """The imaginary part is not dropped: the sparse paths refuse complex values as the layer
    refuses a complex dense input."""
    x = torch.tensor([[1 + 2j, 0]], dtype=torch.complex64)
    build = {"scipy": lambda: Bags.from_scipy(sp.csr_matrix(x.numpy())),
             "torch_sparse": lambda: Bags.from_torch_sparse(x.to_sparse()),
             "dense": lambda: Bags.from_dense(x)}[source]
    with pytest.raises(InputTypeError, match=r"complex64\. Pass x\.real"):
        build()
    with pytest.raises(InputTypeError, match=r"Pass x\.real"):
        LookupLinear(2, 1)(x)


def test_huge_in_features_index_lookup() -> None:
    """in_features = 2**31 + 5 does not fit int32 and its table (8 GiB) cannot be allocated here,
    so the weight is one row expanded with stride 0: every row holds the same values, which
    checks that indices above 2**31 pass the range check un-truncated and index the table, and
    that 2**31 + 5 is refused naming the right in_features."""
    n = 2**31 + 5
    row = torch.tensor([[1.0, -2.0, 3.0]])
    W = row.expand(n, 3)
    x = torch.tensor([[n - 1, 2**31], [0, 7]])
    out = lookup_linear(x, W, torch.tensor([0.5, 0.5, 0.5]))
    assert out.shape == (2, 2, 3)
    torch.testing.assert_close(out, (row + 0.5).expand(2, 2, 3))
    # -1 is index 2**31 + 4, which an index lookup reads as nn.Embedding reads a padding row
    assert normalize_padding_idx(-1, n) == n - 1
    padded = lookup_linear(x, W, padding_idx=-1)
    assert torch.equal(padded, row.expand(2, 2, 3))
    with pytest.raises(LookupIndexError, match=f"index {n} at input\\[1\\] .* in_features={n}"):
        lookup_linear(torch.tensor([0, n]), W)


def test_huge_index_values_in_bags_are_refused_not_wrapped() -> None:
    """An int64 index that would wrap to a valid one in int32 (2**32 + 3 -> 3) is refused."""
    layer = LookupLinear(10, 2)
    with pytest.raises(LookupIndexError, match=f"index {2**32 + 3}"):
        layer(Bags(torch.tensor([1, 2**32 + 3]), torch.tensor([0, 2])))
    with pytest.raises(LookupIndexError, match=f"index {2**32 + 3}"):
        layer(torch.tensor([2**32 + 3]))


def test_uint64_values_past_int64_are_refused_not_wrapped() -> None:
    """A uint64 index of 2**63 or more would wrap to a negative one: refused, naming it, as
    ``Bags.from_lists`` refuses it; smaller uint64 values are read as they are."""
    with pytest.raises(InputValueError, match=f"indices holds {2**63 + 1}, .* int64"):
        Bags(np.array([3, 2**63 + 1], dtype=np.uint64), [0, 2])
    with pytest.raises(InputValueError, match=f"offsets holds {2**64 - 1}, .* int64"):
        Bags([3], torch.tensor([0, 2**64 - 1], dtype=torch.uint64))
    bags = Bags(np.array([3, 1], dtype=np.uint64), np.array([0, 2], dtype=np.uint64))
    assert bags.indices.tolist() == [3, 1] and bags.offsets.tolist() == [0, 2]


@pytest.mark.parametrize(("values", "error", "message"), [
    ([2**63], InputValueError, f"values holds {2**63}, which does not fit in int64"),
    ([2**64], InputValueError, f"values holds {2**64}, which does not fit in int64"),
    ([-1, 2**63], InputValueError, f"values holds {2**63}, which does not fit in int64"),
    ([-(2**70), 3], InputValueError, f"values holds {-(2**70)}, which does not fit in int64"),
    ([True, 2], InputTypeError, "values must be integers, got bool True"),
    ([1, 2.5], InputTypeError, "values must be integers, got float 2.5"),
])
def test_a_list_of_ids_outside_int64_or_not_integers_is_refused_naming_it(
        values: list[Any], error: type[Exception], message: str) -> None:
    """A Python list of values is read as ``Bags.from_lists`` reads its entries: an int
    outside int64 is refused naming it (numpy held it as uint64, object or float64: a raw
    torch error, or a float dtype whose ``.long()`` would change it), and so is an entry that
    is no integer (a bool read as 0 or 1, a float)."""
    with pytest.raises(error, match=message):
        KeyedBags(["a"], values, lengths=[len(values)])
    with pytest.raises(error, match=message.replace("values", "indices")):
        Bags(values, [0, len(values)])
    with pytest.raises(error, match=message.replace("values", "offsets")):
        Bags(list(range(len(values))), [0, *values])
    ok = KeyedBags(["a"], [2**63 - 1, -(2**63), np.uint64(3)], lengths=(3,))
    assert ok.values.dtype == torch.int64 and ok.values.tolist() == [2**63 - 1, -(2**63), 3]
    assert Bags([], [0]).indices.dtype == torch.int64


def test_index_lookup_reference_matches_embedding() -> None:
    """The helper reference itself is what nn.Embedding plus bias computes (a check on the test)."""
    layer = LookupLinear(6, 3, padding_idx=None)
    x = torch.tensor([[5, 0], [2, 2]])
    emb = torch.nn.functional.embedding(x, layer.weight.detach()) + layer.bias.detach()
    torch.testing.assert_close(reference_index(reference_linear(layer), x, None).float(), emb)


@settings(max_examples=40, deadline=None)
@given(
    lists=st.lists(st.lists(st.integers(0, 9), max_size=4), min_size=1, max_size=4),
    bad=st.integers(-(2**63), -1) | st.integers(10, 2**63 - 1),
    where=st.integers(0, 15),
)
def test_any_out_of_range_value_is_named_with_its_position(
    lists: list[list[int]], bad: int, where: int
) -> None:
    """Any int64 value outside [0, 10), negative or huge, is refused naming the value, its
    position and in_features, in the Bags and the index-tensor forms."""
    flat = [i for bag in lists for i in bag]
    pos = where % (len(flat) + 1)
    flat.insert(pos, bad)
    lists = [*lists[:-1], lists[-1] + [0]]  # one more entry, so the offsets still add up
    bags = Bags(torch.tensor(flat), Bags.from_lists(lists).offsets)
    layer = LookupLinear(10, 2)
    with pytest.raises(LookupIndexError) as info:
        layer(bags)
    assert f"index {bad} at indices[{pos}]" in str(info.value)
    assert "in_features=10" in str(info.value)
    with pytest.raises(LookupIndexError, match=f"index {bad} at input\\[{pos}\\]"):
        layer(torch.tensor(flat))
    for psw in (None, torch.ones(len(flat))):  # (indices, offsets) take a path of their own
        with pytest.raises(LookupIndexError, match=f"index {bad} at indices\\[{pos}\\]"):
            layer(torch.tensor(flat), bags.offsets, psw)


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(st.integers(-3, 12), min_size=1, max_size=8),
    nnz=st.integers(0, 12),
    dtype=st.sampled_from([np.int32, np.int64]),
)
@example(offsets=[0], nnz=0, dtype=np.int64)  # an empty batch
@example(offsets=[0, 2, 2, 5], nnz=5, dtype=np.int32)  # an empty bag in the middle
@example(offsets=[0, 3, 2, 5], nnz=5, dtype=np.int64)  # one decrease
def test_compiled_offsets_check_equals_its_definition(
    offsets: list[int], nnz: int, dtype: Any
) -> None:
    from lookuplinear.ops import offsets_ok

    o = np.array(offsets, dtype=dtype)
    expected = o[0] == 0 and o[-1] == nnz and bool(np.all(np.diff(o) >= 0))
    assert offsets_ok(o, nnz) is bool(expected)
    strided = np.repeat(o, 2)[::2]  # the same values through a non-contiguous view
    assert offsets_ok(strided, nnz) is bool(expected)
    # tensors: read through the address when contiguous, with torch ops otherwise
    assert offsets_ok(torch.from_numpy(o), nnz) is bool(expected)
    assert offsets_ok(torch.from_numpy(o).repeat_interleave(2)[::2], nnz) is bool(expected)
    assert offsets_ok(torch.from_numpy(np.repeat(o, 3))[1::3], nnz) is bool(expected)
    if expected:
        Bags(torch.zeros(nnz, dtype=torch.long), torch.from_numpy(strided))
    else:
        with pytest.raises(InputValueError, match="offsets must"):
            Bags(torch.zeros(nnz, dtype=torch.long), torch.from_numpy(strided))


@settings(max_examples=100, deadline=None)
@given(data=batches(), value=st.integers(0, 11), int32=st.booleans())
@example(data=(Batch([[1, 1], [1]], [[0.5, 2.0], [1.0]], 3), None), value=1, int32=False)
@example(data=(Batch([[0, 2], []], None, 3), None), value=1, int32=True)  # nothing to drop
def test_drop_index_zeroes_that_column_and_keeps_the_weights_graph(
    data: tuple[Batch, int | None], value: int, int32: bool
) -> None:
    from lookuplinear.ops import drop_entries, use_backend

    batch = data[0]
    bags = Bags.from_lists(batch.lists, batch.weights)
    if int32:
        bags = Bags(bags.indices.int(), bags.offsets.int(), bags.weights)
    if bags.weights is not None:
        bags.weights.requires_grad_(True)
    dropped = bags.drop_index(value)

    expected = bags.to_dense(max(batch.in_features, value + 1)).detach()
    expected[:, value] = 0
    assert torch.equal(dropped.to_dense(expected.shape[1]), expected)
    assert dropped.indices.dtype == dropped.offsets.dtype == bags.indices.dtype
    assert value not in dropped.indices.tolist()
    if value not in bags.indices.tolist():
        assert dropped is bags
        return
    # the C pass (CPU) and the torch ops (other devices) agree
    with use_backend("torch"):
        torch_ops = drop_entries(bags.indices, bags.offsets, value)
    assert torch_ops is not None
    kept_torch, _, offsets_torch = torch_ops
    assert torch.equal(dropped.indices, bags.indices[kept_torch])
    assert torch.equal(dropped.offsets, offsets_torch)
    if bags.weights is not None:
        assert dropped.weights is not None
        (grad,) = torch.autograd.grad(dropped.weights.sum(), bags.weights)
        assert torch.equal(grad, (bags.indices != value).to(grad.dtype))


@settings(max_examples=100, deadline=None)
@given(data=batches(), sqrt=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
@example(data=(Batch([[0, 1], [], [2]], [[1.0, -1.0], [], [0.0]], 3), None), sqrt=False,
         dtype=np.float32)  # a zero sum, an empty bag, a zero weight
def test_compiled_mode_weights_equal_their_definition(
    data: tuple[Batch, int | None], sqrt: bool, dtype: Any
) -> None:
    from lookuplinear.ops import mode_weights

    batch = data[0]
    bags = Bags.from_lists(batch.lists, batch.weights)
    w = None if bags.weights is None else bags.weights.numpy().astype(dtype)
    torch_dtype = torch.float32 if dtype is np.float32 else torch.float64
    got = mode_weights(bags.offsets, None if w is None else torch.from_numpy(w), sqrt,
                       torch_dtype).numpy()
    assert got.dtype == dtype and got.shape == (bags.nnz,)
    for b, bag in enumerate(batch.lists):
        lo = int(bags.offsets[b])
        vals = np.ones(len(bag)) if w is None else w[lo : lo + len(bag)].astype(np.float64)
        denom = np.sqrt((vals * vals).sum()) if sqrt else vals.sum()
        want = vals / denom if denom != 0 else np.zeros_like(vals)
        np.testing.assert_allclose(got[lo : lo + len(bag)], want, rtol=1e-6)


@settings(max_examples=100, deadline=None)
@given(data=batches(), dtype=st.sampled_from([torch.float32, torch.float64]))
@example(data=(Batch([[1, 1], [], [0, 2, 0]], None, 3), None), dtype=torch.float32)  # duplicates
def test_compiled_max_equals_atens_max_forward_and_backward(
    data: tuple[Batch, int | None], dtype: torch.dtype
) -> None:
    from lookuplinear.ops import bag_max, c_available, use_backend

    if not c_available():
        pytest.skip("the C kernels are not built: mode='max' runs ATen's own")
    batch = data[0]
    bags = Bags.from_lists(batch.lists)
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(batch.in_features, 5, generator=gen, dtype=dtype)
    if batch.in_features > 1:
        W[0] = W[1]  # a tie between two rows: both kernels keep the first entry
    W.requires_grad_(True)
    with use_backend("c"):  # whatever LOOKUPLINEAR_BACKEND says
        out = bag_max(W, bags.indices, bags.offsets)
    assert out is not None
    ref = F.embedding_bag(bags.indices, W, bags.offsets, mode="max", include_last_offset=True)
    assert torch.equal(out, ref)
    g = torch.randn(out.shape, generator=gen, dtype=dtype)
    (grad,) = torch.autograd.grad(out, W, g)
    (grad_ref,) = torch.autograd.grad(ref, W, g)
    torch.testing.assert_close(grad, grad_ref)


@pytest.mark.parametrize("bad", [-1, 10])
def test_max_mode_names_an_index_out_of_range(bad: int) -> None:
    layer = LookupLinear(10, 3, mode="max")
    with pytest.raises(LookupIndexError, match=f"index {bad} at indices\\[2\\]"):
        layer(Bags.from_lists([[1, 2], [bad, 3]]))


def test_from_padded_without_a_padding_index_keeps_every_entry() -> None:
    x = torch.tensor([[3, 1, 0], [0, 0, 0]])
    bags = Bags.from_padded(x, padding_idx=None)
    assert bags.offsets.tolist() == [0, 3, 6] and torch.equal(bags.indices, x.reshape(-1))
    assert torch.equal(bags.to_dense(4), F.one_hot(x, 4).sum(1).float())
    assert len(Bags.from_padded(torch.zeros(2, 0, dtype=torch.long), padding_idx=None)) == 2


def test_empty_start_offsets_are_an_empty_batch() -> None:
    """As ``nn.EmbeddingBag``: no offsets and no entries give 0 rows; entries without a bag are
    refused (``nn.EmbeddingBag`` drops them silently)."""
    from lookuplinear import InputValueError, LookupLinear

    layer = LookupLinear(5, 2)
    empty = torch.tensor([], dtype=torch.long)
    assert layer(empty, empty).shape == (0, 2)
    with pytest.raises(InputValueError, match="one start offset per bag"):
        layer(torch.tensor([1, 2]), empty)


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("form", [list, tuple, np.array])
def test_offsets_given_as_a_list_mean_what_the_tensor_means(
    form: Any, include_last_offset: bool,
) -> None:
    """Start offsets unless include_last_offset=True, as the same tensor is read: [0, 1, 3] is
    three bags of [1, 2, 3] (the last one empty), or two as CSR offsets."""
    layer = LookupLinear(6, 2, include_last_offset=include_last_offset)
    x = torch.tensor([1, 2, 3])
    for offsets in ([0, 1, 3], [0, 3]):
        expected = layer(x, torch.tensor(offsets))
        assert len(expected) == len(offsets) - include_last_offset
        assert torch.equal(layer(x, form(offsets)), expected)
        assert torch.equal(lookup_linear(x, layer.weight, offsets=form(offsets),
                                         include_last_offset=include_last_offset),
                           lookup_linear(x, layer.weight, offsets=torch.tensor(offsets),
                                         include_last_offset=include_last_offset))
    with pytest.raises(InputTypeError, match="1-D tensor of integers"):
        layer(x, ["a", "b"])


@pytest.mark.parametrize(
    ("offsets", "nnz", "match"),
    [
        ([1, 2], 2, r"start at 0 \(CSR offsets\), got offsets\[0\]=1"),
        ([0, 2, 1, 3], 3, r"be non-decreasing \(CSR offsets\), but offsets\[2\]=1 < offsets\[1\]"),
        ([0, 3], 2, r"end at len\(ENTRIES\)=2 .* got offsets\[-1\]=3"),
        ([], 0, r"hold N \+ 1 entries .* offsets=\[0\]"),
    ],
)
def test_one_offsets_validator(offsets: list[int], nnz: int, match: str) -> None:
    """Bags and KeyedBags check their offsets with one validator: the same message, naming the
    batch type and its entries."""
    from lookuplinear import KeyedBags

    off = torch.tensor(offsets, dtype=torch.long)
    bags_match = "^Bags: offsets must " + match.replace("ENTRIES", "indices")
    keyed_match = "^KeyedBags: offsets must " + match.replace("ENTRIES", "values")
    with pytest.raises(InputValueError, match=bags_match):
        Bags(torch.zeros(nnz, dtype=torch.long), off)
    with pytest.raises(InputValueError, match=keyed_match):
        KeyedBags(["a"], torch.zeros(nnz, dtype=torch.long), offsets=off)


def test_from_checked_keeps_the_tensors() -> None:
    """The trusted constructors hold the given tensors, unchecked and uncopied."""
    from lookuplinear import KeyedBags

    idx, off, w = torch.tensor([3, 1, 2]), torch.tensor([0, 2, 3]), torch.tensor([1.0, 2, 3])
    bags = Bags.from_checked(idx, off, w)
    assert bags.indices is idx and bags.offsets is off and bags.weights is w
    kb = KeyedBags.from_checked(["a", "b"], idx, off)  # a: [3, 1], b: [2]
    assert kb.keys() == ["a", "b"] and kb.batch_size == 1 and kb.values is idx
    assert torch.equal(kb["b"].indices, torch.tensor([2]))


def test_keyed_batches_without_keys_and_keyed_tensors_of_mismatched_widths() -> None:
    """A batch of no keys is TorchRec's empty KeyedJaggedTensor (it divided by zero); a
    KeyedTensor with one width too few says so (a bare zip error)."""
    from lookuplinear import KeyedBags, KeyedTensor

    empty = torch.tensor([], dtype=torch.long)
    kb = KeyedBags([], empty, lengths=empty)
    assert kb.keys() == [] and kb.batch_size == 0
    with pytest.raises(InputValueError, match="one width per key"):
        KeyedTensor(["a", "b"], [2], torch.zeros(2, 3))



@pytest.mark.parametrize("array", [
    np.array([3, 1, 2])[::-1],           # a reversed view: negative strides
    np.array([2, 1, 3], dtype=">i8"),    # another byte order
])
def test_numpy_indices_in_any_layout_are_read_as_their_values(array: np.ndarray) -> None:
    """numpy arrays of indices, weights and keyed values that ``torch.as_tensor`` refuses
    (negative strides, a byte order not the machine's) are read as their values."""
    weights = np.array([3.0, 1.0, 2.0])[::-1]
    bags = Bags(array, [0, 3], weights)
    assert bags.indices.tolist() == [2, 1, 3]
    assert bags.weights is not None and bags.weights.tolist() == [2.0, 1.0, 3.0]
    keyed = KeyedBags(["a"], array, lengths=[3])
    assert keyed.values.tolist() == [2, 1, 3]


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64], ids=str)
@pytest.mark.parametrize("sparse", [False, True])
def test_an_unsigned_index_out_of_range_is_named(dtype: torch.dtype, sparse: bool) -> None:
    """An index tensor of a wide unsigned dtype (which ``torch.aminmax`` does not take) with
    an index past the table: the ``LookupIndexError`` naming it, as for any integer dtype; a
    uint64 past int64 named by its own value."""
    layer = LookupLinear(7, 3, sparse=sparse)
    with pytest.raises(LookupIndexError, match=r"index 10 at input\[1\]"):
        layer(torch.tensor([1, 10], dtype=dtype))
    if dtype == torch.uint64:
        with pytest.raises(LookupIndexError, match=rf"index {2**64 - 1} at input\[1\]"):
            layer(torch.tensor([1, 2**64 - 1], dtype=dtype))
    ok = torch.tensor([1, 6], dtype=dtype)
    assert torch.equal(layer(ok), layer(ok.long()))
