"""Bad input: the library's error, also the right builtin, the same from the module and the
functional, with a message naming what was expected, what was received and the fix."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from lookuplinear import (
    Bags,
    DeviceMismatchError,
    DtypeMismatchError,
    InputTypeError,
    InputValueError,
    LookupIndexError,
    LookupLinear,
    LookupLinearError,
    OffsetsError,
    SizeError,
    SizeTypeError,
    lookup_linear,
)

IN = 10


def _coo(rows: list[int], cols: list[int], shape: tuple[int, int] = (2, IN)) -> torch.Tensor:
    # check_invariants=False: PyTorch would refuse these itself; we test what the layer does
    # with a tensor that slipped through (the default when invariant checks are off)
    return torch.sparse_coo_tensor(
        torch.tensor([rows, cols]), torch.ones(len(rows)), shape, check_invariants=False
    )


def _csr_unchecked(col: int) -> sp.csr_matrix:
    m = sp.csr_matrix((2, IN), dtype=np.float32)
    m.indices, m.indptr, m.data = (
        np.array([1, col], dtype=np.int32),
        np.array([0, 1, 2], dtype=np.int32),
        np.ones(2, dtype=np.float32),
    )
    return m


def _csr_corrupt(indptr: list[int], nnz: int = 2, n_data: int = 2) -> sp.csr_matrix:
    """A CSR matrix whose arrays were changed after scipy built it (scipy checks on request)."""
    m = sp.csr_matrix((len(indptr) - 1, IN), dtype=np.float32)
    m.indices, m.indptr, m.data = (
        np.arange(nnz, dtype=np.int32),
        np.array(indptr, dtype=np.int32),
        np.ones(n_data, dtype=np.float32),
    )
    return m


# (id, layer kwargs, input, forward kwargs, error class, builtin, words the message must contain)
CASES: list[tuple[str, dict[str, Any], Any, dict[str, Any], type, type, list[str]]] = [
    # ---- index out of range, in every input form: value, position, in_features
    ("index-too-big", {}, torch.tensor([[1, 2], [3, 10]]), {}, LookupIndexError, IndexError,
     ["index 10", "input[1, 1]", "in_features=10", "[0, 9]"]),
    ("index-negative", {}, torch.tensor([4, -1]), {}, LookupIndexError, IndexError,
     ["index -1", "input[1]", "in_features=10"]),
    ("index-int32-huge", {}, torch.tensor([2**31 - 1], dtype=torch.int32), {}, LookupIndexError,
     IndexError, ["index 2147483647", "in_features=10"]),
    ("index-int64-huge", {}, torch.tensor([0, 2**40]), {}, LookupIndexError, IndexError,
     ["index 1099511627776", "input[1]"]),
    ("index-scalar", {}, torch.tensor(11), {}, LookupIndexError, IndexError,
     ["index 11", "in_features=10"]),
    ("bags-too-big", {}, Bags.from_lists([[1], [2, 12]]), {}, LookupIndexError, IndexError,
     ["index 12", "indices[2]", "in_features=10"]),
    ("bags-negative", {}, Bags.from_lists([[-3]]), {}, LookupIndexError, IndexError,
     ["index -3", "indices[0]"]),
    ("offsets-too-big", {}, torch.tensor([1, 2, 10]), {"offsets": torch.tensor([0, 1, 3])},
     LookupIndexError, IndexError, ["index 10", "indices[2]", "in_features=10"]),
    ("scipy-too-big", {}, _csr_unchecked(10), {}, LookupIndexError, IndexError,
     ["index 10", "in_features=10"]),
    ("scipy-negative", {}, _csr_unchecked(-2), {}, LookupIndexError, IndexError,
     ["index -2", "in_features=10"]),
    ("torch-coo-too-big", {}, _coo([0, 1], [3, 10]), {}, LookupIndexError, IndexError,
     ["index 10", "in_features=10"]),
    ("torch-coo-negative", {}, _coo([0], [-1]), {}, LookupIndexError, IndexError,
     ["index -1", "in_features=10"]),
    # ---- shapes
    ("dense-wrong-width", {}, torch.ones(2, 11), {}, InputValueError, ValueError,
     ["(..., in_features=10)", "(2, 11)", "x.long()"]),
    ("dense-scalar", {}, torch.tensor(1.0), {}, InputValueError, ValueError,
     ["in_features=10", "()"]),
    ("scipy-wrong-columns", {}, sp.csr_matrix((2, 11)), {}, InputValueError, ValueError,
     ["(N, in_features=10)", "(2, 11)", "in_features=11"]),
    ("scipy-array-wrong-columns", {}, sp.coo_array((3, 9)), {}, InputValueError, ValueError,
     ["(N, in_features=10)", "(3, 9)"]),
    ("torch-coo-wrong-columns", {}, torch.zeros(2, 11).to_sparse(), {}, InputValueError,
     ValueError, ["(N, in_features=10)", "(2, 11)"]),
    ("torch-csr-wrong-columns", {}, torch.zeros(2, 9).to_sparse_csr(), {}, InputValueError,
     ValueError, ["(N, in_features=10)", "(2, 9)"]),
    ("torch-sparse-3d", {}, torch.zeros(2, 2, IN).to_sparse(), {}, InputValueError, ValueError,
     ["(N, in_features=10)", "(2, 2, 10)", "2-D"]),
    # ---- offsets and weights
    ("offsets-not-from-0", {}, torch.tensor([1, 2]), {"offsets": torch.tensor([1, 2])},
     OffsetsError, RuntimeError, ["start at 0", "offsets[0]=1", "Prepend 0"]),
    ("offsets-decreasing", {}, torch.tensor([1, 2, 3]), {"offsets": torch.tensor([0, 2, 1, 3])},
     OffsetsError, RuntimeError, ["non-decreasing", "offsets[2]=1", "cumulative sum"]),
    ("offsets-overrun", {}, torch.tensor([1, 2]), {"offsets": torch.tensor([0, 5])},
     OffsetsError, RuntimeError, ["len(indices)=2", "offsets[1]=5", "include_last_offset=True"]),
    ("offsets-start-style-to-csr-layer", {"include_last_offset": True}, torch.tensor([1, 2, 3]),
     {"offsets": torch.tensor([0, 1])},
     OffsetsError, RuntimeError, ["N + 1", "offsets[-1]=1", "append len(indices)"]),
    ("offsets-empty", {}, torch.tensor([1]), {"offsets": torch.tensor([], dtype=torch.long)},
     OffsetsError, RuntimeError, ["one start offset per bag", "offsets=[0]"]),
    ("offsets-empty-csr", {"include_last_offset": True}, torch.tensor([1]),
     {"offsets": torch.tensor([], dtype=torch.long)},
     OffsetsError, RuntimeError, ["N + 1", "offsets=[0]"]),
    ("scipy-indptr-decreasing", {}, _csr_corrupt([0, 2, 1, 2]), {}, OffsetsError,
     RuntimeError, ["non-decreasing", "offsets[2]=1 < offsets[1]=2"]),
    ("scipy-indptr-overrun", {}, _csr_corrupt([0, 1, 3]), {}, OffsetsError, RuntimeError,
     ["len(indices)=2", "offsets[-1]=3"]),
    ("scipy-indptr-not-from-0", {}, _csr_corrupt([1, 2]), {}, OffsetsError, RuntimeError,
     ["start at 0", "offsets[0]=1"]),
    ("scipy-data-wrong-length", {}, _csr_corrupt([0, 1, 2], n_data=3), {}, InputValueError,
     ValueError, ["not a valid CSR matrix", "data of shape (3,)", "check_format"]),
    ("offsets-float", {}, torch.tensor([1, 2]), {"offsets": torch.tensor([0.0, 2.0])},
     DtypeMismatchError, RuntimeError, ["integer", "float32", "offsets.long()"]),
    ("offsets-non-finite", {}, torch.tensor([1, 2]),
     {"offsets": torch.tensor([0.0, float("nan"), 2.0])}, DtypeMismatchError, RuntimeError,
     ["integer", "offsets.long()"]),
    ("offsets-with-2d-input", {}, torch.tensor([[1, 2]]), {"offsets": torch.tensor([0, 2])},
     InputValueError, ValueError, ["1-D index tensor", "(1, 2)", "flattened"]),
    ("weights-wrong-length", {}, torch.tensor([1, 2]),
     {"offsets": torch.tensor([0, 2]), "per_sample_weights": torch.ones(3)},
     InputValueError, ValueError, ["one value per index", "(2,)", "(3,)"]),
    ("weights-without-offsets", {}, torch.tensor([1, 2]),
     {"per_sample_weights": torch.ones(2)}, InputValueError, ValueError, ["offsets="]),
    ("weights-integer", {}, torch.tensor([1, 2]),
     {"offsets": torch.tensor([0, 2]), "per_sample_weights": torch.ones(2, dtype=torch.long)},
     DtypeMismatchError, RuntimeError, ["floating point", "int64", "weights.float()"]),
    ("indices-float-with-offsets", {}, torch.tensor([1.0, 2.0]),
     {"offsets": torch.tensor([0, 2])}, DtypeMismatchError, RuntimeError,
     ["integer", "float32"]),
    # ---- mode
    ("max-non-unit-weights", {"mode": "max"}, sp.csr_matrix(np.eye(IN, dtype=np.float32) * 0.5),
     {}, InputValueError, ValueError, ['mode="max"', "weight 1", "0.5", "mode='sum'"]),
    ("max-non-unit-dense", {"mode": "max"}, torch.eye(IN)[:2] * 3, {}, InputValueError,
     ValueError, ["weight 1", "3.0", "0/1 values"]),
    ("max-stored-zero", {"mode": "max"},
     sp.csr_matrix((np.array([1.0, 0.0], np.float32), [0, 1], [0, 2]), shape=(1, IN)), {},
     InputValueError, ValueError, ["weight 0.0", "X.eliminate_zeros()"]),
    ("max-sparse-grad", {"mode": "max", "sparse": True}, Bags.from_lists([[1]]), {},
     InputValueError, ValueError, ['mode="max"', "sparse=True", "sparse=False"]),
    # ---- device
    ("index-on-meta", {}, torch.tensor([1], device="meta"), {}, DeviceMismatchError,
     ValueError, ["meta", "cpu", ".to('cpu')"]),
    ("dense-on-meta", {}, torch.ones(2, IN, device="meta"), {}, DeviceMismatchError,
     ValueError, ["meta", ".to('cpu')"]),
    ("bags-on-meta", {}, Bags.from_lists([[1, 2]]).to("meta"), {}, DeviceMismatchError,
     ValueError, ["meta", ".to('cpu')"]),
    ("offsets-on-meta", {}, torch.tensor([1], device="meta"),
     {"offsets": torch.tensor([0, 1], device="meta")}, DeviceMismatchError, ValueError,
     ["meta", ".to('cpu')"]),
    ("torch-sparse-on-meta", {}, torch.eye(IN)[:2].to_sparse().to("meta"), {},
     DeviceMismatchError, ValueError, ["meta", ".to('cpu')"]),
    # ---- types
    ("list", {}, [1, 2, 3], {}, InputTypeError, TypeError, ["got list", "Bags.from_lists"]),
    ("numpy", {}, np.array([1, 2]), {}, InputTypeError, TypeError,
     ["got ndarray", "torch.tensor"]),
    ("string", {}, "cat", {}, InputTypeError, TypeError, ["got str"]),
    ("none", {}, None, {}, InputTypeError, TypeError, ["got NoneType"]),
    ("complex", {}, torch.ones(2, IN, dtype=torch.complex64), {}, InputTypeError, TypeError,
     ["complex64", "x.real"]),
    ("torch-csc", {}, torch.eye(IN)[:2].to_sparse_csc(), {}, InputTypeError, TypeError,
     ["sparse_csc", "to_sparse_csr()"]),
]


def _call_module(layer_kwargs: dict[str, Any]) -> Callable[..., Any]:
    return LookupLinear(IN, 3, **layer_kwargs)


def _call_functional(layer_kwargs: dict[str, Any]) -> Callable[..., Any]:
    layer = LookupLinear(IN, 3, **layer_kwargs)

    def call(x: Any, **kw: Any) -> torch.Tensor:
        return lookup_linear(
            x,
            layer.weight,
            layer.bias,
            mode=layer.mode,
            padding_idx=layer.padding_idx,
            sparse=layer.sparse,
            include_last_offset=layer.include_last_offset,
            **kw,
        )

    return call


@pytest.mark.parametrize(
    ("layer_kwargs", "x", "kwargs", "error", "builtin", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_input_raises_the_library_error(
    layer_kwargs: dict[str, Any],
    x: Any,
    kwargs: dict[str, Any],
    error: type,
    builtin: type,
    words: list[str],
) -> None:
    assert issubclass(error, LookupLinearError) and issubclass(error, builtin)
    messages = []
    for make in (_call_module, _call_functional):
        with pytest.raises(error) as info:
            make(layer_kwargs)(x, **kwargs)
        assert type(info.value) is error  # the same class from the module and the functional
        assert isinstance(info.value, builtin)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    for word in words:
        assert word in messages[0], f"{word!r} not in: {messages[0]}"
    assert "out of range in self" not in messages[0]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: LookupLinear(IN, 3, mode="avg"), ["'sum', 'mean', 'sqrtn', 'max'", "'avg'"]),
        (lambda: lookup_linear(torch.tensor([1]), torch.ones(IN, 3), mode="avg"), ["'avg'"]),
        (lambda: LookupLinear(IN, 3, padding_idx=IN),
         ["within in_features=10", "-10 through 9", "got 10", "None"]),
        (lambda: LookupLinear(IN, 3, padding_idx=-IN - 1), ["-10 through 9", "got -11"]),
        (
            lambda: lookup_linear(torch.tensor([1]), torch.ones(IN, 3), padding_idx=IN),
            ["-10 through 9", "got 10"],
        ),
        (lambda: LookupLinear(0, 3), ["in_features", "integer >= 1", "0"]),
        (lambda: LookupLinear(IN, 3, init="xavier"), ["'normal', 'linear'", "'xavier'"]),
        (lambda: lookup_linear(torch.tensor([1]), torch.ones(IN)), ["(in_features, out", "(10,)"]),
    ],
    ids=[
        "mode-layer",
        "mode-functional",
        "padding-too-big",
        "padding-too-negative",
        "padding-functional",
        "in-features-zero",
        "unknown-init",
        "weight-1d",
    ],
)
def test_bad_arguments_raise_value_error(make: Callable[[], Any], words: list[str]) -> None:
    with pytest.raises(InputValueError) as info:
        make()
    assert isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value), f"{word!r} not in: {info.value}"


@pytest.mark.parametrize(("size", "builtin", "ours"), [
    (-1, RuntimeError, SizeError), (2.5, TypeError, SizeTypeError), ("3", TypeError,
                                                                     SizeTypeError)])
def test_a_bad_size_is_also_the_class_nn_linear_raises(size: Any, builtin: type,
                                                       ours: type) -> None:
    for args in ((size, 3), (3, size)):
        with pytest.raises(builtin):
            torch.nn.Linear(*args)
        with pytest.raises(builtin, match="must be an integer >= 1") as info:
            LookupLinear(*args)
        assert type(info.value) is ours and isinstance(info.value, ValueError)


def test_padding_idx_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(InputTypeError, match=r"int or None, got 1\.5"):
        LookupLinear(IN, 3, padding_idx=1.5)  # type: ignore[arg-type]
    with pytest.raises(InputTypeError):
        lookup_linear(torch.tensor([1]), torch.ones(IN, 3), padding_idx=True)  # type: ignore[arg-type]


def test_max_ignores_the_weight_of_padding_entries() -> None:
    """Padding entries are dropped, so their weight cannot break mode="max" (a dense input gets
    its padding column zeroed first; a sparse one must behave the same)."""
    layer = LookupLinear(IN, 3, mode="max", padding_idx=0)
    X = torch.tensor([[2.0, 1.0] + [0.0] * (IN - 2)])  # padding column holds 2, entry 1 holds 1
    out_dense = layer(X)
    out_sparse = layer(sp.csr_matrix(X.numpy()))
    torch.testing.assert_close(out_sparse, out_dense)
    torch.testing.assert_close(out_dense[0], layer.weight[1] + layer.bias)


def test_nested_tensor_is_refused() -> None:
    with warnings.catch_warnings():  # PyTorch's prototype warning, once a process
        warnings.simplefilter("ignore", UserWarning)
        x = torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])])
    with pytest.raises(InputTypeError, match="nested tensor"):
        LookupLinear(IN, 3)(x)


def test_bags_constructor_errors() -> None:
    with pytest.raises(InputValueError, match="one value per index"):
        Bags([1, 2], [0, 2], [1.0])
    with pytest.raises(InputValueError, match="1-D"):
        Bags([[1, 2]], [0, 2])
    with pytest.raises(InputValueError, match="one list per bag"):
        Bags.from_lists([[1, 2]], weights=[[1.0]])
    with pytest.raises(InputTypeError, match="offsets must be an integer"):
        Bags([1, 2], np.array([0.0, np.inf, 2.0]))
    with pytest.raises(InputValueError, match="offsets are on meta"):
        Bags(torch.tensor([1]), torch.tensor([0, 1], device="meta"))
    with pytest.raises(InputTypeError, match=r"scipy\.sparse"):
        Bags.from_scipy(np.eye(3))
    with pytest.raises(InputTypeError, match="sparse COO or CSR"):
        Bags.from_torch_sparse(torch.eye(3))
