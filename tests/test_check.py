"""check_equivalence: passes on every form, and fails when the layer is wrong."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from forms import MATRIX_FORMS, MODES, Batch, make_case
from torch import nn

import lookuplinear.modules.embedding
import lookuplinear.modules.embedding_bag
import lookuplinear.modules.layer
from lookuplinear import (
    Bags,
    Embedding,
    EmbeddingBag,
    EquivalenceError,
    InputTypeError,
    InputValueError,
    KeyedBags,
    KeyedTensor,
    LookupCollection,
    LookupLinear,
    LookupLinearError,
    QuantizedLookupCollection,
    TableConfig,
    check_equivalence,
    dense_reference,
    lookup_linear,
)

#: No duplicates, so that mode="max" applies to every form (merged duplicates would be 2).
NODUP = Batch([[3, 1, 9], [], [2], [0, 5, 2, 9, 7], [4, 6], [8]], None, 10)


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", [f for f in MATRIX_FORMS if f != "offsets_int32"])
def test_passes_on_every_form(form: str, mode: str, padding_idx: int | None) -> None:
    case = make_case(form, NODUP)
    if case.kwargs:  # 1-D indices + offsets: the checker takes one input, so pass the Bags
        case = make_case("bags", NODUP)
    layer = LookupLinear(10, 4, mode=mode, padding_idx=padding_idx)
    report = check_equivalence(layer, case.input)
    assert report.ok, str(report)
    assert [c.name for c in report.comparisons] == ["output", "weight.grad", "bias.grad"]
    report.raise_if_failed()


@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_passes_on_index_tensors(shape: tuple[int, ...]) -> None:
    x = torch.randint(0, 10, shape)
    assert check_equivalence(LookupLinear(10, 4, padding_idx=0), x).ok


@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("form", ["bags", "dense", "torch_coo", "torch_coo_coalesced", "torch_csr"])
def test_compares_input_gradient_when_values_require_grad(form: str, mode: str) -> None:
    batch = Batch([[3, 1, 3], [], [2]], [[0.5, 2.0, 1.0], [], [1.5]], 10)
    x = make_case(form, batch, requires_grad=True).input
    report = check_equivalence(LookupLinear(10, 4, mode=mode), x)
    assert [c.name for c in report.comparisons][-1] == "input.grad"
    assert report.ok, str(report)


def test_fails_when_only_the_input_gradient_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong_grad(input: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = lookup_linear(input, *args, **kwargs)
        return out + 1e-3 * (input.weights - input.weights.detach()).sum()

    monkeypatch.setattr(lookuplinear.modules.layer, "lookup_linear", wrong_grad)
    bags = Bags.from_lists([[1, 2], [3]], weights=[[1.0, 0.5], [2.0]])
    assert bags.weights is not None
    bags.weights.requires_grad_(True)
    report = check_equivalence(LookupLinear(10, 4), bags)
    assert [c.name for c in report.comparisons if not c.ok] == ["input.grad"]


@pytest.fixture
def broken_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer's output is off by 1e-3: a checker that cannot see this is broken itself."""

    def off_by_a_little(*args: Any, **kwargs: Any) -> torch.Tensor:
        return lookup_linear(*args, **kwargs) + 1e-3

    monkeypatch.setattr(lookuplinear.modules.layer, "lookup_linear", off_by_a_little)


@pytest.mark.usefixtures("broken_forward")
@pytest.mark.parametrize("x", [torch.tensor([1, 2]), Bags.from_lists([[1, 2], []])], ids=str)
def test_fails_when_the_forward_is_wrong(x: Any) -> None:
    report = check_equivalence(LookupLinear(10, 4), x)
    assert not report.ok
    failed = [c.name for c in report.comparisons if not c.ok]
    assert failed == ["output"]
    assert report.comparisons[0].max_abs_diff == pytest.approx(1e-3, rel=1e-2)
    assert "DIFFERENT" in str(report) and "FAIL" in str(report)
    with pytest.raises(EquivalenceError) as info:
        report.raise_if_failed()
    assert isinstance(info.value, AssertionError) and isinstance(info.value, LookupLinearError)


def test_fails_when_only_the_weight_gradient_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong_grad(input: Any, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = lookup_linear(input, weight, *args, **kwargs)
        return out + 1e-3 * (weight - weight.detach()).sum()  # forward + 0, gradient + 1e-3

    monkeypatch.setattr(lookuplinear.modules.layer, "lookup_linear", wrong_grad)
    report = check_equivalence(LookupLinear(10, 4), Bags.from_lists([[1, 2], [3]]))
    assert [c.name for c in report.comparisons if not c.ok] == ["weight.grad"]
    with pytest.raises(EquivalenceError, match=r"weight\.grad"):
        report.raise_if_failed()


def test_works_on_a_converted_layer() -> None:
    layer = LookupLinear.from_embedding(nn.EmbeddingBag(10, 4, mode="max"))
    assert check_equivalence(layer, Bags.from_lists([[1, 2], [], [9]])).ok


class _SplitTies(LookupLinear):
    """A wrong max backward: ``amax`` splits a tie's gradient between the tied rows."""

    def forward(self, x: Bags) -> torch.Tensor:  # type: ignore[override]
        ends = zip(x.offsets[:-1].tolist(), x.offsets[1:].tolist(), strict=True)
        return torch.stack([self.weight[x.indices[a:b]].amax(0) for a, b in ends]) + self.bias


def test_max_ties_route_the_gradient_to_one_row_as_embedding_bag() -> None:
    """Tied rows of a max: nn.EmbeddingBag gives the whole gradient to the first in the bag;
    the reference does too, so the real layer passes and a layer splitting ties fails."""
    lists = [[1, 2], [3, 4, 5], [7, 6, 7], [8]]
    x = Bags.from_lists(lists)
    assert check_equivalence(LookupLinear(10, 3, mode="max", init=nn.init.zeros_), x).ok
    assert check_equivalence(EmbeddingBag(10, 3, mode="max", _weight=torch.zeros(10, 3)),
                             torch.tensor([[2, 1, 2], [4, 3, 4]])).ok
    report = check_equivalence(_SplitTies(10, 3, mode="max", init=nn.init.zeros_), x)
    assert [c.name for c in report.comparisons if not c.ok] == ["weight.grad"], str(report)
    # the reference's gradient is nn.EmbeddingBag's, on rows tied in some columns only
    weight = torch.tensor([[0.0, 1], [1, 1], [1, 0], [0, 0], [1, 1]], dtype=torch.float64)
    peer = nn.EmbeddingBag(5, 2, mode="max", _weight=weight.clone())
    up = torch.randn(3, 2, dtype=torch.float64)
    bags = [[0, 1, 2, 4], [4, 2, 1], [3, 0, 3]]
    peer(torch.tensor([b for bag in bags for b in bag]), torch.tensor([0, 4, 7])).backward(up)
    layer = LookupLinear(5, 2, mode="max", bias=False, dtype=torch.float64)
    lin = nn.Linear(5, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(weight.T)
    dense_reference(layer, Bags.from_lists(bags), linear=lin).backward(up)
    assert lin.weight.grad is not None and peer.weight.grad is not None
    torch.testing.assert_close(lin.weight.grad.T, peer.weight.grad)


def test_leaves_the_layers_grad_untouched() -> None:
    layer = LookupLinear(10, 4)
    x = Bags.from_lists([[1, 2], [3]])
    assert check_equivalence(layer, x).ok
    assert layer.weight.grad is None and layer.bias is not None and layer.bias.grad is None
    layer(x).sum().backward()
    before = layer.weight.grad
    assert before is not None
    saved = before.clone()
    assert check_equivalence(layer, x).ok
    assert layer.weight.grad is before and torch.equal(before, saved)


def test_works_under_no_grad() -> None:
    layer = LookupLinear(10, 4, mode="sqrtn")
    with torch.no_grad():
        report = check_equivalence(layer, Bags.from_lists([[1, 1, 2]]))
    assert report.ok and len(report.comparisons) == 3


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_default_tolerances_per_dtype(dtype: torch.dtype) -> None:
    layer = LookupLinear(10, 4, mode="mean", dtype=dtype)
    report = check_equivalence(layer, Bags.from_lists([[1, 2, 2], [], [9, 0]]))
    assert report.ok, str(report)
    rtol = report.comparisons[0].rtol
    assert rtol == (1e-10 if dtype == torch.float64 else 5e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("rows", "shape"), [(50, (2048, 30)), (3, (4000, 10))])
def test_a_large_batch_is_not_called_different_for_its_rounding(
        dtype: torch.dtype, rows: int, shape: tuple[int, int]) -> None:
    """A row read thousands of times sums thousands of gradient terms in the layer's dtype,
    as nn.Embedding's own backward does (the same values, checked here): that rounding is
    allowed, and a gradient 1% off is still found where the dtype can tell. In float16 and
    bfloat16 the rounding allowed such sums exceeds their values: not a FAIL, not decisive."""
    torch.manual_seed(0)
    layer = LookupLinear(rows, 16, dtype=dtype)
    x = torch.randint(0, rows, shape)
    report = check_equivalence(layer, x)
    assert all(c.ok for c in report.comparisons) and "DIFFERENT" not in str(report), str(report)
    assert report.ok == (dtype in (torch.float32, torch.float64)), str(report)
    assert report.comparisons[1].terms > 1000 and "rounding of sums" in str(report)

    stock = nn.Embedding(rows, 16, dtype=dtype, _weight=layer.weight.detach().clone())
    up = torch.randn(*shape, 16, dtype=torch.float64).to(dtype)
    ours = torch.autograd.grad(layer(x), layer.weight, up)[0]
    theirs = torch.autograd.grad(stock(x), stock.weight, up)[0]
    assert torch.equal(ours.to_dense() if ours.is_sparse else ours, theirs)


class _ScaledGrad(torch.autograd.Function):
    """The identity, whose backward multiplies the gradient by ``factor``."""

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return w.view_as(w)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g * ctx.factor, None


class _NegatedWeightGrad(LookupLinear):
    """A layer whose forward is right and whose weight gradient is negated."""

    def forward(self, x: Any, *args: Any) -> torch.Tensor:
        return lookup_linear(x, _ScaledGrad.apply(self.weight, -1.0), self.bias)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_gradient_the_rounding_allowance_cannot_decide_is_not_called_ok(
        dtype: torch.dtype) -> None:
    """Rows read 5,000 times: in float16 and bfloat16 the rounding allowed each gradient value
    exceeds the value itself, so a negated gradient would pass. The report says not decisive
    (not ok, not a FAIL), and float32 decides the same batch both ways."""
    torch.manual_seed(0)
    x = torch.randint(0, 20, (100_000,))
    for layer in (_NegatedWeightGrad(20, 4, dtype=dtype), LookupLinear(20, 4, dtype=dtype)):
        report = check_equivalence(layer, x)
        grad = report.comparisons[1]
        assert not report.ok and "weight.grad" in report.not_decisive, str(report)
        assert grad.name == "weight.grad" and grad.ok and not grad.decisive
        assert "not decisive: the rounding allowed" in str(grad) and "FAIL" not in str(report)
        assert report.comparisons[0].decisive and "NOT DECISIVE" in str(report)
        with pytest.raises(EquivalenceError, match="not decisive"):
            report.raise_if_failed()
    assert check_equivalence(LookupLinear(20, 4), x).ok
    wrong = check_equivalence(_NegatedWeightGrad(20, 4), x)
    assert [c.name for c in wrong.comparisons if not c.ok] == ["weight.grad"], str(wrong)
    # an exactly zero sum is allowed no rounding: decisive in any dtype
    zero = LookupLinear(20, 4, bias=False, dtype=dtype, init=nn.init.zeros_)
    assert check_equivalence(zero, x).comparisons[0].decisive


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_large_batch_still_finds_a_gradient_one_percent_off(
        dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    def one_percent_off(input: Any, weight: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
        out = lookup_linear(input, weight, *args, **kw)
        return out + 0.01 * (lookup_linear(input, weight, *args, **kw)
                             - lookup_linear(input, weight.detach(), *args, **kw))

    monkeypatch.setattr(lookuplinear.modules.layer, "lookup_linear", one_percent_off)
    torch.manual_seed(0)
    report = check_equivalence(LookupLinear(50, 16, dtype=dtype),
                               torch.randint(0, 50, (2048, 30)))
    assert [c.name for c in report.comparisons if not c.ok] == ["weight.grad"], str(report)


@pytest.mark.parametrize("read", [True, False])
def test_nan_in_the_weight_is_located_not_called_different(read: bool) -> None:
    layer = LookupLinear(10, 3)
    with torch.no_grad():
        layer.weight[3, 1] = float("nan")
    report = check_equivalence(layer, Bags.from_lists([[1, 2], [3 if read else 4], []]))
    text = str(report)
    assert not report.ok and "DIFFERENT" not in text and "not finite" in text
    assert "NaN in the weight: rows [3] (1 of 10)" in text
    assert ("NaN in the output: bags [1] (1 of 3)" in text) == read
    with pytest.raises(EquivalenceError, match=r"NaN in the weight: rows \[3\]"):
        report.raise_if_failed()


def test_nan_in_the_input_and_overflow_in_the_output_are_located() -> None:
    x = Bags.from_lists([[1, 2], [4], []], [[1.0, float("nan")], [2.0], []])
    text = str(check_equivalence(LookupLinear(10, 3), x))
    assert "NaN in the input (per_sample_weights): bags [0] (1 of 3)" in text
    assert "NaN in the weight" not in text
    half = LookupLinear(10, 3, dtype=torch.float16)
    with torch.no_grad():
        half.weight[1] = 60000.0
    text = str(check_equivalence(half, Bags.from_lists([[1, 1], [4], []])))
    assert "infinity in the output: bags [0] (1 of 3)" in text and "overflowed" in text


def test_a_collection_of_several_dtypes_judges_each_table_by_its_own() -> None:
    """A float64 table and a bfloat16 one: the bfloat16 table's rounding passes, and an error
    of 1e-3 in the float64 table's columns fails, whichever table comes first."""
    kb = KeyedBags.from_dict({"fa": [[1, 2, 3]] * 8, "fb": [[3, 5, 7, 7, 1, 2]] * 8})

    class Off(LookupCollection):
        def forward(self, kb: Any) -> Any:
            kt = super().forward(kb)
            at = 4 if self.tables[0].dtype == torch.bfloat16 else 0  # the float64 columns
            v = kt.values().clone()
            v[:, at:at + 4] += 1e-3
            return KeyedTensor(kt.keys(), kt.length_per_key(), v)

    for first, second in ((torch.float64, torch.bfloat16), (torch.bfloat16, torch.float64)):
        torch.manual_seed(0)
        configs = [TableConfig("a" if first == torch.float64 else "b", 10, 4,
                               ["fa" if first == torch.float64 else "fb"], dtype=first),
                   TableConfig("b" if first == torch.float64 else "a", 10, 4,
                               ["fb" if first == torch.float64 else "fa"], dtype=second)]
        assert check_equivalence(LookupCollection(configs), kb).ok
        report = check_equivalence(Off(configs), kb)
        assert not report.ok and "output['fa']" in str(report)


class _BadWeightsGrad(LookupCollection):
    def forward(self, kb: KeyedBags) -> KeyedTensor:  # type: ignore[override]
        w = _ScaledGrad.apply(kb.weights, 3.0)  # three times too large
        return super().forward(KeyedBags(kb.keys(), kb.values, offsets=kb.offsets, weights=w))


def test_a_collection_compares_the_gradient_of_weights_that_require_it() -> None:
    """Each feature's weights' gradient against the reference: the sum over the tables that
    read it, through a variable batch's expansion and a "qr" table's two rows per ID."""
    torch.manual_seed(0)
    tables = [TableConfig("t", 10, 3, ["a", "b"], mode="mean"), TableConfig("u", 10, 2, ["a"]),
              TableConfig("h", 7, 2, ["c"], hashing="qr", qr_buckets=3)]
    kb = KeyedBags(["a", "b", "c"], torch.tensor([3, 1, 7, 7, 2, 5]),
                   lengths=torch.tensor([2, 3, 0, 1]), stride_per_key_per_rank=[[1], [2], [1]],
                   inverse_indices=torch.tensor([[0, 0, 0], [1, 0, 1], [0, 0, 0]]),
                   weights=torch.rand(6, requires_grad=True))
    report = check_equivalence(LookupCollection(tables), kb)
    assert report.ok, str(report)
    assert [c.name for c in report.comparisons][-3:] == [
        "input.grad['a']", "input.grad['b']", "input.grad['c']"]
    bad = _BadWeightsGrad([TableConfig("t", 10, 3, ["a"])])
    w = torch.tensor([0.5, 2.0, 1.5], requires_grad=True)
    kb = KeyedBags(["a"], torch.tensor([1, 2, 3]), offsets=torch.tensor([0, 1, 3]), weights=w)
    report = check_equivalence(bad, kb)
    assert [c.name for c in report.comparisons if not c.ok] == ["input.grad['a']"], str(report)


def test_nan_in_a_collection_table_is_located() -> None:
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    col = LookupCollection([TableConfig("t", 10, 2, feature_names=["f"])])
    with torch.no_grad():
        col["t"].weight[5] = float("nan")
    kb = KeyedBags.from_dict({"f": Bags.from_lists([[5], [1]])})
    text = str(check_equivalence(col, kb))
    assert "NaN in the table 't': rows [5] (1 of 10)" in text and "DIFFERENT" not in text


# ---- every module, any vocabulary -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("sparse", [False, True])
def test_embedding_bag_drop_in_in_its_input_forms(mode: str, sparse: bool) -> None:
    """The drop-in has no bias and reads (B, N) input as B bags and 1-D input with offsets:
    output and weight.grad compared as nn.EmbeddingBag computes them."""
    torch.manual_seed(0)
    bag = EmbeddingBag(20, 4, mode=mode, sparse=sparse and mode != "max", padding_idx=3)
    idx = torch.tensor([1, 3, 7, 7, 19, 0])
    for x, off in ((idx.reshape(2, 3), None), (idx, torch.tensor([0, 2, 2]))):
        report = check_equivalence(bag, x, off)
        assert report.ok, str(report)
        assert [c.name for c in report.comparisons] == ["output", "weight.grad"]
    weights = torch.rand(6, requires_grad=True)
    if mode == "sum":  # per_sample_weights that require grad: their gradient too, with
        # offsets or beside (B, N) input
        for x, off, w in ((idx, torch.tensor([0, 2, 2]), weights),
                          (idx.reshape(2, 3), None, weights.detach().reshape(2, 3)
                           .requires_grad_())):
            report = check_equivalence(bag, x, off, w)
            assert report.ok and report.comparisons[-1].name == "input.grad", str(report)


class _CutWeightsGrad(EmbeddingBag):
    """An EmbeddingBag whose per_sample_weights get no gradient: a broken layer."""

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Any:
        weights = None if per_sample_weights is None else per_sample_weights.detach()
        return super().forward(input, offsets, weights)


def test_a_cut_per_sample_weights_gradient_fails_the_check_in_every_input_form() -> None:
    """check_equivalence compares the weights' gradient whenever they require it: beside
    (B, N) input as with offsets, so a layer that drops it fails."""
    torch.manual_seed(0)
    bag = _CutWeightsGrad(20, 4, mode="sum")
    idx = torch.tensor([1, 3, 7, 7, 19, 0])
    for x, off in ((idx, torch.tensor([0, 2, 2])), (idx.reshape(2, 3), None)):
        w = torch.rand(x.shape, requires_grad=True)
        report = check_equivalence(bag, x, off, w)
        assert not report.ok and "input.grad" in [c.name for c in report.comparisons]


def test_embedding_bag_with_max_norm_is_checked_on_a_copy() -> None:
    """max_norm renorms the rows a lookup reads, in place: the check renorms a copy, compares
    against the renormed rows, and leaves the layer's table as it was."""
    bag = EmbeddingBag(10, 4, max_norm=0.5, mode="sum")
    with torch.no_grad():
        bag.weight.mul_(10)
    before = bag.weight.detach().clone()
    assert check_equivalence(bag, torch.tensor([[1, 2], [2, 9]])).ok
    assert torch.equal(bag.weight, before)


@pytest.mark.parametrize("renorm", ["half", "none"])
@pytest.mark.parametrize("kind", [EmbeddingBag, Embedding])
def test_a_wrong_max_norm_renorm_fails_the_check(monkeypatch: pytest.MonkeyPatch,
                                                 kind: type, renorm: str) -> None:
    """The reference renorms its own copy of the table, as nn.Embedding(Bag) does: a layer
    renorming to the wrong norm, or not at all, is DIFFERENT."""
    torch.manual_seed(0)
    layer = kind(10, 4, max_norm=0.5)
    with torch.no_grad():
        layer.weight.mul_(10)
    x = torch.tensor([[1, 2], [3, 3]])
    good = check_equivalence(layer, x)
    assert good.ok, str(good)
    peer = (nn.EmbeddingBag if kind is EmbeddingBag else nn.Embedding)(10, 4, max_norm=0.5)
    with torch.no_grad():
        peer.weight.copy_(layer.weight)
    peer(x)  # the renormed rows of the peer are those the check expects of the layer
    probe = kind(10, 4, max_norm=0.5, _weight=layer.weight.detach().clone())
    probe(x)
    torch.testing.assert_close(probe.weight, peer.weight, rtol=0, atol=0)

    def wrong(weight: torch.Tensor, indices: torch.Tensor, max_norm: float,
              norm_type: float) -> None:
        if renorm == "half":
            with torch.no_grad():
                torch.embedding_renorm_(weight.detach(), indices, max_norm / 2, norm_type)

    module = lookuplinear.modules.embedding_bag if kind is EmbeddingBag else \
        lookuplinear.modules.embedding
    monkeypatch.setattr(module, "renorm_rows_", wrong)
    report = check_equivalence(layer, x)
    assert not report.ok, str(report)
    assert {c.name for c in report.comparisons if not c.ok} == {"output", "weight.renorm"}
    assert good.comparisons[-1].name == "weight.renorm"


class _Doubled(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 2 * w


@pytest.mark.parametrize("kind", [LookupLinear, EmbeddingBag, Embedding])
def test_a_parametrized_layer_is_checked_on_its_computed_weight(kind: type) -> None:
    """torch.nn.utils.parametrize: the reference is nn.Linear with the computed weight, and
    the layer's parametrization gets no gradient from the check."""
    layer = kind(10, 3)
    nn.utils.parametrize.register_parametrization(layer, "weight", _Doubled())
    x = torch.tensor([[1, 2], [3, 3]])
    report = check_equivalence(layer, x)
    assert report.ok, str(report)
    assert report.comparisons[1].name == "weight.grad"
    assert layer.parametrizations.weight.original.grad is None
    if kind is LookupLinear:  # dense rows, densified whole
        assert check_equivalence(layer, torch.rand(2, 10)).ok


@pytest.mark.parametrize("kind", [LookupLinear, EmbeddingBag])
def test_a_layer_under_the_older_weight_norm_is_checked_on_its_computed_weight(
        kind: type) -> None:
    """``torch.nn.utils.weight_norm`` (a forward pre-hook computing ``weight`` from
    ``weight_g`` and ``weight_v``): the reference is nn.Linear with the computed weight, as
    for a parametrized layer (a correct layer was reported DIFFERENT, its weight gradient read
    from the hook's attribute)."""
    torch.manual_seed(0)
    layer = kind(10, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the older API's deprecation
        nn.utils.weight_norm(layer, "weight")
    x = torch.tensor([[1, 2], [3, 3]])
    report = check_equivalence(layer, x)
    assert report.ok, str(report)
    assert layer.weight_g.grad is None and layer.weight_v.grad is None


def test_refuses_what_has_no_dense_equivalent_clearly() -> None:
    with pytest.raises(InputValueError, match="scale_grad_by_freq"):
        check_equivalence(EmbeddingBag(10, 4, scale_grad_by_freq=True),
                          torch.tensor([[1, 2]]))
    tables = LookupCollection([TableConfig("t", 10, 4, ["f"])])
    quantized = QuantizedLookupCollection(tables)
    kb = KeyedBags.from_dict({"f": Bags.from_lists([[1]])})
    with pytest.raises(InputTypeError, match=r"q\.layers\[table\], kb\[feature\]"):
        check_equivalence(quantized, kb)
    assert check_equivalence(quantized.layers["t"], kb["f"]).ok  # the call it names


def test_quantized_embedding_bag_reads_its_input_as_the_drop_in() -> None:
    q = EmbeddingBag(50, 4, mode="mean").quantize("int8")
    report = check_equivalence(q, torch.tensor([[1, 2, 2], [49, 0, 3]]))
    assert report.ok and [c.name for c in report.comparisons] == ["output"], str(report)


def test_a_collection_on_a_real_vocabulary_in_small_memory() -> None:
    """A collection whose tables share features and rows: each table's gradient is the sum
    over its features, on the rows they touch, without a (N, rows) matrix."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("big", 305_017, 8, ["a", "b"], mode="mean"),
                            TableConfig("small", 50, 4, ["c"], mode="max")], sparse=True)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(0, 5, (3 * 64,), generator=g)
    values = torch.randint(0, 50, (int(lengths.sum()),), generator=g)
    values[: int(lengths[:128].sum())] *= 6100  # features a and b across the big table
    kb = KeyedBags(["a", "b", "c"], values, lengths=lengths)
    report = check_equivalence(col, kb, max_bytes=64 << 20)
    assert report.ok, str(report)
    assert [c.name for c in report.comparisons] == ["output", "big.weight.grad",
                                                    "small.weight.grad"]


def test_a_real_vocabulary_checks_fast_in_small_memory() -> None:
    """A (2048, 16) index batch into a 305,017-row table: the dense one-hot would be 74 GiB in
    float64; the reference on the touched columns stays under the 64 MiB it is given."""
    torch.manual_seed(0)
    layer = LookupLinear(305_017, 16, sparse=True)
    x = torch.randint(0, 305_017, (2048, 16), generator=torch.Generator().manual_seed(0))
    x[0, :4] = 7  # duplicates
    report = check_equivalence(layer, x, max_bytes=64 << 20)
    assert report.ok, str(report)
    bags = EmbeddingBag(305_017, 16, mode="mean")
    assert check_equivalence(bags, x, max_bytes=64 << 20).ok


def test_a_gradient_in_a_row_the_batch_does_not_touch_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference computes only the touched rows; every other row of the layer's gradient
    must be exactly zero, and one that is not fails the check."""
    def stray(input: Any, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = lookup_linear(input, weight, *args, **kwargs)
        return out + 0 * weight[9].sum() + 1e-3 * (weight[9] - weight[9].detach()).sum()

    monkeypatch.setattr(lookuplinear.modules.layer, "lookup_linear", stray)
    report = check_equivalence(LookupLinear(10, 4), Bags.from_lists([[1, 2], [3]]))
    assert [c.name for c in report.comparisons if not c.ok] == ["weight.grad"], str(report)


def test_refuses_a_batch_past_the_bound_with_the_estimate_and_a_smaller_call() -> None:
    layer = LookupLinear(1000, 64)
    x = torch.randint(0, 1000, (4096, 8))
    with pytest.raises(InputValueError, match=r"needs about \d+ MiB.*first \d+ bags") as info:
        check_equivalence(layer, x, max_bytes=8 << 20)
    fit = int(str(info.value).split("first ")[1].split(" ")[0])
    assert check_equivalence(layer, x.reshape(-1)[:fit], max_bytes=8 << 20).ok
    dense = torch.rand(64, 1000, requires_grad=True)
    with pytest.raises(InputValueError, match=r"densified whole.*x\[:\d+\]"):
        check_equivalence(layer, dense, max_bytes=1 << 20)


@pytest.mark.parametrize("make", ["layer", "embedding", "quantized"])
def test_an_index_lookup_reads_a_loaded_padding_row_and_passes(make: str) -> None:
    """A padding row loaded non-zero is what an index lookup returns (nn.Embedding), with no
    gradient: the reference reads it too, and gives it no gradient."""
    layer: Any = (lookuplinear.Embedding(10, 3, padding_idx=0) if make == "embedding"
                  else LookupLinear(10, 3, padding_idx=0))
    with torch.no_grad():
        layer.weight[0] = 5.0
    if make == "quantized":
        layer = layer.quantize("int8")
    x = torch.tensor([[0, 1, 2], [0, 0, 3]])
    bias = getattr(layer, "bias", None)
    assert torch.allclose(layer(x)[0, 0] - (0 if bias is None else bias),
                          torch.full((3,), 5.0), atol=0.05)
    report = check_equivalence(layer, x)
    assert report.ok, str(report)
    # the bags of the same layer still drop the padding entries (nn.EmbeddingBag)
    if make == "layer":
        bags = Bags.from_lists([[0, 1], [2, 0]])
        assert check_equivalence(layer, bags).ok
        assert torch.allclose(layer(bags)[0], layer.weight[1] + layer.bias)
