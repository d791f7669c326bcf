"""QuantizedLookupLinear: every input form and mode against nn.Linear on the dequantized table,
the per-row error bound against the float table, and no training."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    LookupIndexError,
    LookupLinear,
    QuantizedLookupLinear,
    check_equivalence,
)

DTYPES = ["int8", "int4", "float16"]
MODES = ["sum", "mean", "sqrtn", "max"]


def _layer(mode: str = "sum", padding_idx: int | None = None, bias: bool = True) -> LookupLinear:
    torch.manual_seed(0)
    layer = LookupLinear(50, 8, mode=mode, padding_idx=padding_idx, bias=bias)  # type: ignore
    with torch.no_grad():
        if layer.bias is not None:
            layer.bias.uniform_()
    return layer


def _inputs(mode: str) -> list[object]:
    lists = [[1, 5, 5], [], [49, 0, 7, 7, 7], [3]]
    weighted = Bags.from_lists(lists, [[0.5, 2.0, 1.0], [], [1.0, 3.0, 0.5, 0.5, 1.0], [2.0]])
    forms: list[object] = [Bags.from_lists(lists), torch.tensor([[1, 5], [49, 0]]),
                           Bags.from_lists(lists).to_dense(50) != 0]  # dense bool rows
    if mode != "max":
        forms += [weighted, sp.csr_matrix(weighted.to_dense(50).numpy()),
                  weighted.to_dense(50)]  # dense float rows
    return forms


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding_idx", [None, 7])
def test_forward_equals_linear_on_the_dequantized_table(dtype, mode, padding_idx):
    q = _layer(mode, padding_idx).quantize(dtype)
    assert isinstance(q, QuantizedLookupLinear)
    for x in _inputs(mode):
        report = check_equivalence(q, x)
        assert report.ok, (type(x).__name__, str(report))
    # nn.EmbeddingBag's call: N start offsets
    idx, offsets = torch.tensor([1, 5, 49, 3]), torch.tensor([0, 2, 3])
    want = q(Bags(idx, torch.tensor([0, 2, 3, 4])))
    torch.testing.assert_close(q(idx, offsets), want)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
@pytest.mark.parametrize("mode", ["mean", "sqrtn"])
def test_float64_weights_are_rounded_to_float32_first(dtype: str, mode: str) -> None:
    """The quantized lookups compute in float32: float64 weights give what the same weights
    rounded to float32 give, to the bit, as the float layer's."""
    q = _layer(mode).quantize(dtype)
    g = torch.Generator().manual_seed(0)
    lists = [torch.randint(0, 50, (int(n),), generator=g).tolist()
             for n in torch.randint(0, 7, (40,), generator=g)]
    values = [(torch.randn(len(b), generator=g, dtype=torch.float64) * 3.7).tolist()
              for b in lists]
    flat = Bags.from_lists(lists)
    exact = Bags(flat.indices, flat.offsets, np.array([v for b in values for v in b]))
    assert exact.weights is not None and exact.weights.dtype == torch.float64
    rounded = Bags(exact.indices, exact.offsets, exact.weights.float())
    assert torch.equal(q(exact), q(rounded))


def _half16(v: torch.Tensor) -> torch.Tensor:
    """float16's rounding of ``v`` at most: ``2**-11 * |v|``, ``2**-25`` below its normal range."""
    return torch.where(v.abs() < 2.0**-14, torch.full_like(v, 2.0**-25), v.abs() * 2.0**-11)


@pytest.mark.parametrize("dtype", DTYPES)
def test_error_bound_per_row(dtype):
    """docs/layer.md's bound on each value: int8 half a step plus FBGEMM's 1e-8, int4 half a
    step plus the float16 rounding of the row's minimum and step, float16 half a float16 ulp;
    on a random table and on rows that break half a step alone (far from 0 with a small range,
    ranges near 1e-7, float16's subnormal steps)."""
    layer = _layer()
    torch.manual_seed(1)
    hard = torch.cat([torch.tensor([[1000.3, 1000.6, 1001.0, 1001.3] * 2]),
                      torch.randn(6, 8) * 1e-7, torch.randn(6, 8) * 1e-6 + 3.0,
                      torch.randn(6, 8) * 1e-2 - 2e4, torch.randn(6, 8) * 3e-7])
    for w in (layer.weight.detach(), hard):
        table = LookupLinear(w.shape[0], 8, bias=False)
        with torch.no_grad():
            table.weight.copy_(w)
        deq = table.quantize(dtype).dequantize().weight.detach()
        lo, hi = w.min(1, keepdim=True).values, w.max(1, keepdim=True).values
        if dtype == "float16":
            bound = _half16(w)
        else:
            step = (hi - lo) / (2 ** {"int8": 8, "int4": 4}[dtype] - 1)
            bound = step / 2 + (1e-8 if dtype == "int8" else _half16(lo) + 15 * _half16(step))
        rounding = 2.0**-23 * (w.abs() + hi - lo)  # float32's, computing and reading back
        assert ((deq - w).abs() <= bound + rounding).all()
    x = Bags.from_lists([[1, 5, 5], [49]])
    assert (layer.quantize(dtype)(x) - layer(x)).abs().max() > 0 or dtype == "float16"


def test_inference_only_and_errors():
    q = _layer().quantize("int8")
    q.eval()
    with torch.enable_grad():
        assert not q(Bags.from_lists([[1]])).requires_grad
    with pytest.raises(InputValueError, match="dtype must be"):
        _layer().quantize("int2")
    with pytest.raises(LookupIndexError):
        q(Bags.from_lists([[50]]))
    with pytest.raises(LookupIndexError):
        q(torch.tensor([-1]))
    assert q.packed.dtype == torch.uint8 and q.packed.shape == (50, 8 + 8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", [torch.jagged, torch.strided])
def test_a_nested_tensor_is_refused_as_the_float_layer_refuses_it(dtype, layout):
    """A nested tensor gets the float ``LookupLinear``'s ``InputTypeError`` (pass its rows as
    ``Bags``), not another input form's error."""
    x = torch.nested.nested_tensor([torch.tensor([1, 1, 2]), torch.tensor([5])], layout=layout)
    layer = _layer()
    with pytest.raises(InputTypeError) as want:
        layer(x)
    with pytest.raises(InputTypeError) as got:
        layer.quantize(dtype)(x)
    assert str(got.value) == str(want.value)


def test_train_on_a_model_holding_a_quantized_layer_works_as_torch_aos():
    """``model.train()`` at every epoch, as a training loop calls it: PyTorch's quantized
    EmbeddingBag takes it and stays an inference layer; so does the quantized layer. What is
    refused is an optimizer on it (no parameters) and a gradient through it."""
    from torch.ao.nn.quantized import EmbeddingBag as AoEmbeddingBag

    ao = AoEmbeddingBag(50, 8, dtype=torch.quint8, mode="sum")
    q = _layer().quantize("int8")
    x, offsets = torch.tensor([1, 5, 5, 49]), torch.tensor([0, 3])
    before = q(x, offsets)
    for layer in (ao, q):
        model = torch.nn.Sequential(layer, torch.nn.Linear(8, 2))
        assert model.train() is model and layer.training
        assert model.eval() is model and not layer.training
        model.train()
        assert list(layer.parameters()) == []
        with pytest.raises(ValueError, match="empty parameter list"):
            torch.optim.SGD(layer.parameters(), lr=0.1)
        torch.optim.SGD(model.parameters(), lr=0.1)  # the float layers train
    with torch.enable_grad():
        out = q(x, offsets)
    assert torch.equal(out, before)  # the same lookup in training mode
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()


def test_dense_rows_and_no_bias():
    q = _layer(bias=False).quantize("int4")
    x = torch.rand(3, 50)
    assert check_equivalence(q, x).ok
    assert q.bias is None


def test_int4_needs_an_even_number_of_columns() -> None:
    with pytest.raises(InputValueError, match="even"):
        LookupLinear(10, 7).quantize("int4")
    assert LookupLinear(10, 7).quantize("int8").out_features == 7


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_lookup_is_the_dequantized_row_of_each_index(dtype, index_dtype):
    """An index tensor of any shape gives each index's dequantized row (the padding row as it
    is stored, as nn.Embedding reads it) plus the bias, to the bit, on int32 and int64."""
    q = _layer(padding_idx=7).quantize(dtype)
    x = torch.tensor([[[7, 49, 0], [3, 3, 7]], [[1, 2, 48], [0, 0, 0]]], dtype=index_dtype)
    flat = x.reshape(-1).long()
    assert q.bias is not None
    want = (q.rows(flat) + q.bias).reshape(*x.shape, 8)
    assert torch.equal(q(x), want)
    assert torch.equal(q(x[0, 0, :1]), want[0, 0, :1])  # a batch of one
    assert q(x[:0]).shape == (0, 2, 3, 8)  # no positions
    with pytest.raises(LookupIndexError, match="50"):
        q(torch.tensor([[0, 50]], dtype=index_dtype))


def _weighted_forms() -> list[tuple[str, object]]:
    """Every input form beside which ``per_sample_weights`` have no bags to weigh: the 2-D
    index tensor (one lookup a position), and the forms that hold their own weights."""
    bags = Bags.from_lists([[1, 5], [49, 0]])
    dense = bags.to_dense(50)
    return [("(B, N) indices", torch.tensor([[1, 5], [49, 0]])), ("Bags", bags),
            ("scipy CSR", sp.csr_matrix(dense.numpy())), ("torch COO", dense.to_sparse()),
            ("torch CSR", dense.to_sparse_csr()), ("dense rows", dense)]


@pytest.mark.parametrize("mode", MODES)
def test_per_sample_weights_are_weighed_with_offsets_and_refused_without(mode):
    """The float and the quantized layer take ``per_sample_weights`` with ``offsets`` (the
    weighted bags, equal to the float layer's on the dequantized table and to
    nn.EmbeddingBag's) and refuse them beside any other form, never dropping them."""
    layer = _layer(mode)
    idx, offsets = torch.tensor([1, 5, 49, 0, 3]), torch.tensor([0, 2, 4])
    w = torch.ones(5) if mode == "max" else torch.tensor([0.5, 2.0, 3.0, 1.0, 0.25])
    for q in [layer] + [layer.quantize(dtype) for dtype in DTYPES]:
        ref = layer if q is layer else q.dequantize()
        out = q(idx, offsets, w)
        torch.testing.assert_close(out, ref(idx, offsets, w).detach(), atol=1e-5, rtol=1e-5)
        if mode != "max":
            assert not torch.allclose(out, q(idx, offsets))  # weighed
        if mode in ("sum", "max"):  # (torch weighs sums only; max has unit weights)
            stock = torch.nn.EmbeddingBag.from_pretrained(ref.weight.detach(), mode=mode)
            want = stock(idx, offsets, w if mode == "sum" else None) + ref.bias.detach()
            torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        for name, x in _weighted_forms():
            n = x.numel() if isinstance(x, torch.Tensor) and x.layout == torch.strided else 4
            with pytest.raises(InputValueError, match="per_sample_weights needs offsets"):
                q(x, None, torch.ones(n))
                pytest.fail(f"{type(q).__name__} {name}: weights dropped")


def test_rows_beyond_float16_are_refused_not_stored_as_inf():
    """float16 storage of a value beyond 65504 (float16), or of an offset or step beyond it
    (int4 keeps them in float16), would read back as inf or NaN: refused naming the row, in a
    layer and in a collection (naming the table); int8 (float32 scale and offset) takes the
    table, and rows at float16's limit are taken."""
    from lookuplinear import LookupCollection, TableConfig

    layer = LookupLinear(3, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.0, 1, 2, 3], [7e4, 1, 2, 3], [-7e4, 0, 0, 1]]))
    x = torch.tensor([0, 1, 2])
    with pytest.raises(InputValueError, match=r"quantize\('float16'\): row 1 \(and 1 more"):
        layer.quantize("float16")
    with pytest.raises(InputValueError, match=r"quantize\('int4'\): row 2 holds.*'int8'"):
        layer.quantize("int4")
    assert torch.isfinite(layer.quantize("int8")(x)).all()
    edge = LookupLinear(2, 2, bias=False)
    with torch.no_grad():  # the largest float16 value; int4: offset and step 65504 at most
        edge.weight.copy_(torch.tensor([[-65504.0, 65504.0], [0.0, 65504.0 * 15]]))
    assert torch.isfinite(edge.quantize("int4")(torch.tensor([0, 1]))).all()
    with torch.no_grad():
        edge.weight[1, 1] = 0.0
    assert torch.isfinite(edge.quantize("float16")(torch.tensor([0, 1]))).all()
    coll = LookupCollection([TableConfig("small", 5, 4, ["a"]), TableConfig("big", 3, 4, ["b"])])
    with torch.no_grad():
        coll["big"].weight.copy_(layer.weight)
    with pytest.raises(InputValueError, match=r"table 'big': quantize\('float16'\): row 1"):
        coll.quantize("float16")
    assert coll.quantize({"small": "float16", "big": "int8"}).dtypes["big"] == "int8"


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_a_row_whose_range_overflows_float32_is_refused_for_int8_and_int4(dtype):
    """int8 and int4 compute a row's step from ``max - min`` in float32: a finite row whose
    range overflows it (or a float64 table's value beyond float32) would read back as NaN,
    as FBGEMM's packing gives it. Refused naming the row and its values (not an inf the
    user never wrote), with the fix; rows at float32's limit are taken."""
    big = torch.finfo(torch.float32).max
    layer = LookupLinear(2, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2, 3, 4], [-2e38, 2e38, 1, 0]]))
    with pytest.raises(InputValueError, match=rf"quantize\('{dtype}'\): row 1 holds values "
                       r"from -2e\+38 to 2e\+38.*range \(max - min\).*Scale the table down"):
        layer.quantize(dtype)
    wide = layer.double()
    with torch.no_grad():
        wide.weight[1] = torch.tensor([0.0, 1e300, 1, 0], dtype=torch.float64)
    with pytest.raises(InputValueError, match=r"row 1 holds values from 0 to 1e\+300") as err:
        wide.quantize(dtype)
    assert "inf" not in str(err.value)
    edge = LookupLinear(2, 4, bias=False)
    with torch.no_grad():
        edge.weight.copy_(torch.tensor([[0.0, big, 1, 0], [-big, 0, 1, 0]]))
    q = edge.quantize("int8")
    assert torch.isfinite(q(torch.tensor([0, 1]))).all()
    assert torch.isfinite(q(Bags.from_lists([[0], [1]]))).all()


def test_float16_refuses_a_value_beyond_it_beside_inf_and_from_float64():
    """float16 keeps NaN and inf, but a finite value beyond 65504 in the same row, or a
    float64 table's value beyond float32, would read back as inf: refused naming the value
    (int8 is not offered for a row it cannot take either)."""
    layer = LookupLinear(2, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2, 3, 4], [float("inf"), 7e4, 1, 0]]))
    with pytest.raises(InputValueError, match=r"row 1 holds 70000.*Scale the table") as err:
        layer.quantize("float16")
    assert "'int8'" not in str(err.value)
    with torch.no_grad():
        layer.weight[1, 1] = 1.0
    assert torch.isinf(layer.quantize("float16")(torch.tensor([1]))[0, 0])  # inf kept
    wide = layer.double()
    with torch.no_grad():
        wide.weight[1] = torch.tensor([0.0, 1e300, 1, 0], dtype=torch.float64)
    with pytest.raises(InputValueError, match=r"row 1 holds 1e\+300, and its values are "
                       r"stored as float16.*Scale the table"):
        wide.quantize("float16")



@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_a_table_with_nan_or_inf_is_refused_for_int8_and_int4(dtype):
    """int8 and int4 store a row as steps from its min to its max: a NaN would read back as a
    finite number, an inf would turn its row to NaN. Refused naming the first such row, in a
    layer, a collection (naming the table) and an estimator (left float); float16 keeps them."""
    from lookuplinear import LookupCollection, TableConfig
    from lookuplinear.sklearn import LookupClassifier

    layer = LookupLinear(4, 4, bias=False)
    for value, fate in ((float("nan"), "a NaN would read back"), (float("inf"), "an inf")):
        with torch.no_grad():
            layer.weight.copy_(torch.arange(16.0).reshape(4, 4))
            layer.weight[1, 2] = value
            layer.weight[3, 0] = -value
        with pytest.raises(InputValueError, match=rf"quantize\('{dtype}'\): row 1 \(and 1 more "
                           rf"rows\) holds {value}.*{fate}.*'float16'"):
            layer.quantize(dtype)
        kept = layer.quantize("float16").dequantize().weight.detach()
        assert torch.equal(kept.isnan(), layer.weight.isnan())
        assert torch.equal(kept.isinf(), layer.weight.isinf())
    coll = LookupCollection([TableConfig("small", 5, 4, ["a"]), TableConfig("big", 4, 4, ["b"])])
    with torch.no_grad():
        coll["big"].weight.copy_(layer.weight)
    with pytest.raises(InputValueError, match=rf"table 'big': quantize\('{dtype}'\): row 1"):
        coll.quantize(dtype)
    assert coll.quantize({"small": dtype, "big": "float16"}).dtypes["small"] == dtype
    clf = LookupClassifier(random_state=0).fit([[0, 1], [2], [1, 2], [3]], [0, 1, 2, 3])
    with torch.no_grad():
        clf.model_.lookup.weight[2, 0] = float("nan")
    with pytest.raises(InputValueError, match=rf"quantize\('{dtype}'\): row 2 holds nan"):
        clf.quantize(dtype)
    assert isinstance(clf.model_.lookup, LookupLinear)  # left float


CONVERSIONS = {"bfloat16": torch.bfloat16, "float": torch.float32, "double": torch.float64,
               "half": torch.float16, "to": torch.bfloat16}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("convert", list(CONVERSIONS))
def test_the_output_dtype_after_a_conversion_is_one_for_every_input_form(dtype, mode, convert):
    """The float32 lookup plus the converted bias, in their promoted dtype whatever the input's
    form (an index lookup added a float64 bias in place into its float32 output)."""
    q = _layer(mode).quantize(dtype)
    ref = q(_inputs(mode)[0])
    if convert == "to":
        q.to(CONVERSIONS[convert])
    else:
        getattr(q, convert)()
    assert q.bias is not None and q.bias.dtype == CONVERSIONS[convert]
    want = torch.promote_types(torch.float32, CONVERSIONS[convert])
    for x in _inputs(mode):
        assert q(x).dtype == want, type(x)
    if want == torch.float64:  # the float layer's after .double(), the bias's values exact
        torch.testing.assert_close(q(_inputs(mode)[0]), ref.double())


@pytest.mark.parametrize("dtype", DTYPES)
def test_module_type_keeps_the_packed_table_as_double_does(dtype):
    """``Module.type(torch.float64)`` converts integer tensors too: the int8/int4 table's
    bytes became float64 and the lookup crashed inside PyTorch ("Expected weight.scalar_type()
    == at::kByte"). The table is storage: kept, as ``double()`` keeps it, with its output."""
    q, wide = _layer("sum").quantize(dtype), _layer("sum").quantize(dtype)
    stored = q.packed.dtype
    q.type(torch.float64)
    wide.double()
    assert q.packed.dtype == stored and torch.equal(q.packed, wide.packed)
    for x in _inputs("sum"):
        assert torch.equal(q(x), wide(x)), type(x)


@pytest.mark.parametrize("convert", list(CONVERSIONS))
def test_a_float16_table_keeps_its_storage_through_module_dtype_conversions(convert):
    """A float16 table is storage, as int8's bytes are: ``model.to(dtype)``, ``float()``,
    ``bfloat16()``... convert the model's float tensors but not the table, whose format says
    float16 (PyTorch's quantized modules keep their packed params likewise); the lookup is
    unchanged, and a device move still moves the table."""
    from lookuplinear import LookupCollection, TableConfig

    q = _layer(bias=False).quantize("float16")
    coll = LookupCollection([TableConfig("t", 50, 8, ["a"])]).quantize("float16")
    model = torch.nn.Sequential(q, torch.nn.Linear(8, 2))
    x = torch.tensor([[1, 5], [49, 0]])
    before, table = q(x), q.packed.clone()
    coll_table = coll.layers["t"].packed.clone()
    for m in (model, coll):
        if convert == "to":
            m.to(CONVERSIONS[convert])
        else:
            getattr(m, convert)()
    assert model[1].weight.dtype == CONVERSIONS[convert]  # the rest of the model converted
    assert q.packed.dtype == torch.float16 and torch.equal(q.packed, table)
    assert torch.equal(coll.layers["t"].packed, coll_table)
    assert torch.equal(q(x), before)
    assert model.to("meta")[0].packed.device.type == "meta"
    assert q.packed.dtype == torch.float16
