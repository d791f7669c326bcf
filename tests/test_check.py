"""check_equivalence: passes on every form, and fails when the layer is wrong."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from forms import MATRIX_FORMS, MODES, Batch, make_case
from torch import nn

import lookuplinear.modules.layer
from lookuplinear import (
    Bags,
    EquivalenceError,
    LookupLinear,
    LookupLinearError,
    check_equivalence,
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


def test_nan_in_a_collection_table_is_located() -> None:
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    col = LookupCollection([TableConfig("t", 10, 2, feature_names=["f"])])
    with torch.no_grad():
        col["t"].weight[5] = float("nan")
    kb = KeyedBags.from_dict({"f": Bags.from_lists([[5], [1]])})
    text = str(check_equivalence(col, kb))
    assert "NaN in the table 't': rows [5] (1 of 10)" in text and "DIFFERENT" not in text
