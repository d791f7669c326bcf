"""The module: initialisation, state, copies, dtype moves, no_grad, torch.compile, TorchScript."""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path

import pytest
import torch
from forms import BATCH, MATRIX_FORMS, UNWEIGHTED, make_case
from torch import nn

from lookuplinear import Bags, LookupLinear, densify, lookup_linear

BAGS = Bags.from_lists([[3, 1, 3], [], [2, 7]])
X = torch.tensor([[3, 0], [9, 2]])


@pytest.mark.parametrize("padding_idx", [None, 4])
def test_init_normal_reproduces_nn_embedding(padding_idx: int | None) -> None:
    torch.manual_seed(7)
    emb = nn.Embedding(50, 6, padding_idx=padding_idx)
    torch.manual_seed(7)
    layer = LookupLinear(50, 6, padding_idx=padding_idx)
    assert torch.equal(layer.weight.detach(), emb.weight.detach())
    assert layer.bias is not None and not layer.bias.any()


def test_init_linear_reproduces_nn_linear() -> None:
    torch.manual_seed(7)
    lin = nn.Linear(50, 6)
    torch.manual_seed(7)
    layer = LookupLinear(50, 6, init="linear")
    assert torch.equal(layer.weight.detach(), lin.weight.detach().T)
    assert layer.bias is not None and torch.equal(layer.bias.detach(), lin.bias.detach())


def test_callable_init_and_padding_row_zeroed() -> None:
    layer = LookupLinear(5, 3, init=lambda w: nn.init.constant_(w, 0.25), padding_idx=-1)
    assert layer.padding_idx == 4
    assert torch.equal(layer.weight[:4].detach(), torch.full((4, 3), 0.25))
    assert not layer.weight[4].any()


def test_reset_parameters_redraws_under_the_same_seed() -> None:
    torch.manual_seed(3)
    layer = LookupLinear(20, 4, init="linear")
    first = copy.deepcopy(layer.state_dict())
    with torch.no_grad():
        layer.weight.zero_()
    torch.manual_seed(3)
    layer.reset_parameters()
    for name, value in first.items():
        assert torch.equal(layer.state_dict()[name], value), name


def test_extra_repr() -> None:
    assert repr(LookupLinear(10, 3)) == "LookupLinear(10, 3, bias=True)"
    layer = LookupLinear(10, 3, bias=False, mode="sqrtn", padding_idx=-1, sparse=True)
    assert (
        repr(layer) == "LookupLinear(10, 3, bias=False, mode='sqrtn', padding_idx=9, sparse=True)"
    )


def test_state_dict_round_trip_and_weights_only_load() -> None:
    layer = LookupLinear(10, 3, mode="mean", padding_idx=0)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"weight", "bias"}
    other = LookupLinear(10, 3, mode="mean", padding_idx=0)
    assert not torch.equal(other(BAGS), layer(BAGS))  # a fresh draw differs ...
    other.load_state_dict(state)
    assert torch.equal(other(BAGS), layer(BAGS))  # ... and the loaded state is identical


def test_deepcopy_is_independent_and_equal() -> None:
    layer = LookupLinear(10, 3, mode="max")
    clone = copy.deepcopy(layer)
    assert torch.equal(clone(BAGS), layer(BAGS))
    with torch.no_grad():
        clone.weight.add_(1.0)
    assert not torch.equal(clone(BAGS), layer(BAGS))
    assert clone.mode == "max"


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_to_dtype_keeps_values_and_computes_in_it(dtype: torch.dtype) -> None:
    layer = LookupLinear(10, 3)
    moved = copy.deepcopy(layer).to(dtype)
    assert moved.weight.dtype == dtype
    assert torch.equal(moved.weight, layer.weight.to(dtype))
    for x in (X, BAGS, BAGS.to_dense(10)):
        out = moved(x)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), layer(x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn"])
def test_autocast_dense_input_gives_nn_linears_dtype_in_every_mode(mode: str) -> None:
    """Under autocast, dense rows give what ``nn.Linear`` gives on ``densify(x)``'s rows, the
    autocast dtype, whatever the mode's row factor."""
    layer = LookupLinear(5, 3, mode=mode)
    with torch.no_grad():
        layer.bias.normal_()  # type: ignore[union-attr]
    lin = layer.to_linear(strict=False)
    x = torch.tensor([[1.0, 0, 2, 0, 0], [0, 1, 1, 0, 0]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, peer = layer(x), lin(densify(x, layer))
    assert ours.dtype == peer.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), peer.float(), rtol=3e-2, atol=3e-2)


def test_autocast_index_and_bag_input_give_the_lookups_dtype() -> None:
    """Under autocast, index and bag input give what ``nn.Embedding`` and ``nn.EmbeddingBag``
    give (autocast leaves lookups alone): the table's dtype (docs/layer.md)."""
    layer = LookupLinear(10, 3, bias=False)
    emb, bag = nn.Embedding(10, 3), nn.EmbeddingBag(10, 3, mode="sum")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(X).dtype == emb(X).dtype == torch.float32
        assert (layer(BAGS).dtype == bag(BAGS.indices, BAGS.offsets[:-1]).dtype
                == torch.float32)


def test_module_forward_is_the_functional() -> None:
    layer = LookupLinear(10, 3, mode="sqrtn", padding_idx=1)
    want = lookup_linear(BAGS, layer.weight, layer.bias, mode="sqrtn", padding_idx=1)
    assert torch.equal(layer(BAGS), want)


class _Double(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 2 * w


@pytest.mark.parametrize("bias", [True, False])
def test_forward_uses_a_replaced_weight(bias: bool) -> None:
    """forward reads its parameters from ``_parameters`` (a per-call cost beside a 100 us
    lookup); a weight that is parametrized, weight-normed or swapped by ``functional_call`` is
    the one used."""
    from torch.func import functional_call
    from torch.nn.utils import parametrize

    torch.manual_seed(0)
    layer = LookupLinear(10, 3, bias=bias)
    w = layer.weight.detach().clone()
    b = None if layer.bias is None else layer.bias.detach()
    for x in (BAGS, X):
        swapped = {"weight": 3 * w}
        assert torch.equal(functional_call(layer, swapped, (x,)), lookup_linear(x, 3 * w, b))
        assert torch.equal(layer(x), lookup_linear(x, w, b))  # and back afterwards
    parametrize.register_parametrization(layer, "weight", _Double())
    for x in (BAGS, X):
        assert torch.equal(layer(x), lookup_linear(x, 2 * w, b))
    with warnings.catch_warnings():  # the old hook-based weight_norm, deprecated but in use
        warnings.simplefilter("ignore", FutureWarning)
        normed = torch.nn.utils.weight_norm(LookupLinear(10, 3, bias=bias), dim=0)
    with torch.no_grad():
        expected = lookup_linear(BAGS, normed.weight_g * normed.weight_v / normed.weight_v.norm(
            dim=1, keepdim=True), normed.bias)
        torch.testing.assert_close(normed(BAGS), expected)
        assert "weight" not in normed._parameters


def test_torch_compile_index_and_bags() -> None:
    """One small compiled run. backend="aot_eager" traces with Dynamo and AOTAutograd (where a
    polymorphic forward or a graph break would fail) without Inductor's C++ code generation,
    which takes 15 s cold on 2 cores; Inductor gives the same results (see docs/layer.md)."""
    try:
        import torch._dynamo
    except ImportError as exc:  # pragma: no cover - torch built without dynamo
        pytest.skip(f"torch.compile unavailable: {exc}")
    torch._dynamo.reset()
    layer = LookupLinear(10, 3, mode="mean")
    compiled = torch.compile(layer, backend="aot_eager")
    for x in (X, BAGS):
        out = compiled(x)
        torch.testing.assert_close(out, layer(x))
        (grad,) = torch.autograd.grad(out.sum(), [layer.weight])
        (want,) = torch.autograd.grad(layer(x).sum(), [layer.weight])
        torch.testing.assert_close(grad, want)


def test_torchscript_is_not_supported_but_the_error_is_pytorchs() -> None:
    """The forward takes an index tensor, Bags, scipy or sparse input (a union TorchScript has
    no type for), reads the module's parameter dict and calls a function with keyword-only
    arguments, none of which TorchScript compiles; PyTorch 2.13 deprecates TorchScript for
    torch.compile / torch.export. What works: torch.compile (above)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(RuntimeError, match=r"LookupInput|_parameters"):
            torch.jit.script(LookupLinear(10, 3))


def test_hugepages_empty_is_an_ordinary_tensor() -> None:
    """The huge-page hint changes nothing a user can see: shape, dtype, device, values."""
    from lookuplinear import hugepages

    for size in ((3, 4), (2048, 1024 + 7)):  # small, and large enough to be advised
        t = hugepages.empty(*size, dtype=torch.float64)
        assert t.shape == size and t.dtype == torch.float64 and t.is_contiguous()
        t.fill_(1.5)
        assert bool((t == 1.5).all())
    assert hugepages.empty(4, 4, device="meta").device.type == "meta"
    layer = LookupLinear(1 << 16, 64)  # a 16 MiB table
    assert layer.weight.is_contiguous() and torch.isfinite(layer.weight).all()


#: every matrix form with every mode, except max on forms that add the batch's duplicates up to a
#: value of 2, which max rejects (tests/test_errors.py)
NO_GRAD_CASES = [
    (form, mode)
    for form in MATRIX_FORMS
    for mode in ("sum", "mean", "sqrtn", "max")
    if not (mode == "max" and form != "bool" and make_case(form, UNWEIGHTED).merges)
]


@pytest.mark.parametrize(("form", "mode"), NO_GRAD_CASES)
def test_no_grad_forward_gives_the_same_values(form: str, mode: str) -> None:
    """Under no_grad the lookup runs ATen's forward-only kernel (weight detached): same bits."""
    batch = UNWEIGHTED if mode == "max" else BATCH
    torch.manual_seed(0)
    layer = LookupLinear(batch.in_features, 4, mode=mode)
    case = make_case(form, batch)
    with_grad = layer(case.input, **case.kwargs)
    assert with_grad.requires_grad
    with torch.no_grad():
        without = layer(case.input, **case.kwargs)
    assert not without.requires_grad
    assert torch.equal(without, with_grad.detach())


def test_no_grad_does_not_drop_a_forward_mode_tangent() -> None:
    """Under no_grad with a forward-mode AD level open the weight is not detached: the tangent
    is not dropped silently, and ATen answers as for F.embedding_bag (it has no forward AD)."""
    from torch.autograd import forward_ad

    torch.manual_seed(0)
    weight = torch.randn(10, 3)
    bags = Bags.from_lists([[3, 1, 3], [], [2, 7]])
    with torch.no_grad(), forward_ad.dual_level():
        dual = forward_ad.make_dual(weight, torch.randn(10, 3))
        with pytest.raises(NotImplementedError, match="forward AD"):
            torch.nn.functional.embedding_bag(bags.indices, dual, bags.offsets, mode="sum",
                                              include_last_offset=True)
        with pytest.raises(NotImplementedError, match="forward AD"):
            lookup_linear(bags, dual)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("mode", ["mean", "sqrtn"])
def test_a_forward_mode_tangent_of_the_bags_weights_is_never_dropped(mode: str,
                                                                     sparse: bool) -> None:
    """Per-sample weights that are a dual tensor are not folded with the mode's factors by the C
    pass (which reads their values only): their tangent reaches ATen's ``embedding_bag``, which
    refuses it as it refuses ``mode="sum"``'s (it has no forward AD), never an output without
    its tangent."""
    from torch.autograd import forward_ad

    torch.manual_seed(0)
    weight = torch.randn(10, 4)
    x, offsets = torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 3])
    psw, tangent = torch.rand(5), torch.randn(5)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(psw, tangent)
        with pytest.raises(NotImplementedError, match="forward AD") as peer:
            torch.nn.functional.embedding_bag(x, weight, offsets, mode="sum",
                                              per_sample_weights=dual)
        with pytest.raises(type(peer.value), match="forward AD"):
            lookup_linear(x, weight, mode=mode, offsets=offsets, per_sample_weights=dual,
                          sparse=sparse)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_forward_mode_ad_of_a_sparse_layer_is_nn_embeddings(padding_idx: int | None) -> None:
    """``sparse=True`` on index input with a forward-mode AD level open takes ATen's lookup,
    ``nn.Embedding(sparse=True)``'s, which has a forward-mode formula: the same primal and
    tangent. On bags ATen's ``embedding_bag`` has none: refused as ``nn.EmbeddingBag`` refuses
    it, whatever the mode (the C++ operators' "jvp is not implemented" never surfaces)."""
    from torch.autograd import forward_ad
    from torch.func import functional_call

    torch.manual_seed(0)
    table, tangent = torch.randn(10, 4), torch.randn(10, 4)
    layer = LookupLinear(10, 4, bias=False, sparse=True, padding_idx=padding_idx)
    peer = nn.Embedding(10, 4, sparse=True, padding_idx=padding_idx)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(table, tangent)
        got = forward_ad.unpack_dual(functional_call(layer, {"weight": dual}, (X,)))
        want = forward_ad.unpack_dual(functional_call(peer, {"weight": dual}, (X,)))
        torch.testing.assert_close(got.primal, want.primal, rtol=0, atol=0)
        torch.testing.assert_close(got.tangent, want.tangent, rtol=0, atol=0)
        bag_peer = nn.EmbeddingBag(10, 4, mode="sum", sparse=True)
        with pytest.raises(NotImplementedError, match="forward AD") as refused:
            functional_call(bag_peer, {"weight": dual}, (BAGS.indices, BAGS.offsets[:-1]))
        for mode, sparse in (("sum", True), ("mean", True), ("sqrtn", True), ("max", False)):
            bags = LookupLinear(10, 4, bias=False, sparse=sparse, mode=mode)
            with pytest.raises(type(refused.value), match="forward AD"):
                functional_call(bags, {"weight": dual}, (BAGS,))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_vmap_over_the_bias_alone_is_nn_linears(padding_idx: int | None, sparse: bool) -> None:
    """``vmap`` over the bias alone (the lookup's output unbatched, the bias batched) on index
    input gives what it gives on ``nn.Linear`` of the one-hot input, as on bags: the bias is
    added out of place under the transform."""
    from torch.func import functional_call, vmap

    torch.manual_seed(0)
    layer = LookupLinear(10, 4, padding_idx=padding_idx, sparse=sparse)
    linear = layer.to_linear(strict=False)
    biases = torch.randn(3, 4)
    got = vmap(lambda b: functional_call(layer, {"bias": b}, (X,)))(biases)
    want = vmap(lambda b: functional_call(linear, {"bias": b}, (densify(X, layer),)))(biases)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("op", ["bag_lookup", "bag_max"])
def test_the_operators_never_drop_a_forward_mode_tangent(op: str, grad: bool) -> None:
    """The lookup operators, which skip their autograd node where nothing records a backward,
    still see a forward-mode tangent on the table, with grad mode on or off: refused (they have
    no forward AD), never a result without its tangent."""
    from torch.autograd import forward_ad

    weight = torch.randn(10, 3)
    bags = Bags.from_lists([[3, 1, 3], [], [2, 7]])
    run = getattr(torch.ops.lookuplinear, op)
    with torch.set_grad_enabled(grad), forward_ad.dual_level():
        dual = forward_ad.make_dual(weight, torch.randn(10, 3))
        with pytest.raises((NotImplementedError, RuntimeError), match=r"jvp|forward-mode AD"):
            run(dual, bags.indices, bags.offsets)
    with torch.no_grad():  # and without a tangent, the lookup itself
        torch.testing.assert_close(run(weight, bags.indices, bags.offsets),
                                   lookup_linear(bags, weight, mode="sum" if op == "bag_lookup"
                                                 else "max"))


def test_the_huge_page_policy_follows_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table allocated, moved or unpickled goes through the same policy (one loaded with
    ``assign=True`` is adopted as given); ``set_enabled(False)`` turns it off; values never
    change."""
    import pickle

    from lookuplinear import hugepages

    calls: list[int] = []  # the lengths madvise was asked for
    monkeypatch.setattr(hugepages, "_madvise", lambda: lambda start, n, advice: calls.append(n))
    big = hugepages.MIN_BYTES // 4 // 8 + 1  # rows of 8 float32: just above the threshold
    layer = LookupLinear(big, 8, bias=False)
    assert len(calls) == 1
    moved = layer.double()
    assert len(calls) == 2 and moved.weight.dtype == torch.float64
    other = LookupLinear(big, 8, bias=False, dtype=torch.float64)
    calls.clear()
    other.load_state_dict(layer.state_dict(), assign=True)
    assert not calls and other.weight.data_ptr() == layer.weight.data_ptr()
    back = pickle.loads(pickle.dumps(layer))
    assert len(calls) == 1 and torch.equal(back.weight, layer.weight)
    hugepages.set_enabled(False)
    try:
        LookupLinear(big, 8, bias=False).double()
    finally:
        hugepages.set_enabled(True)
    assert len(calls) == 1


def test_an_assigned_mmap_table_stays_in_its_file(tmp_path: Path) -> None:
    """The meta device + ``torch.load(mmap=True)`` + ``assign=True`` idiom: the layer adopts
    the file-backed table as ``nn.Embedding`` does, and a move to where it is keeps it."""
    from lookuplinear import hugepages

    rows = hugepages.MIN_BYTES // 4 // 8 + 1
    torch.save({"weight": torch.randn(rows, 8)}, tmp_path / "t.pt")
    sd = torch.load(tmp_path / "t.pt", mmap=True)
    with torch.device("meta"):
        stock, layer = nn.Embedding(rows, 8), LookupLinear(rows, 8, bias=False)
    for m in (stock, layer):
        m.load_state_dict(sd, assign=True)
    assert layer.weight.data_ptr() == stock.weight.data_ptr() == sd["weight"].data_ptr()
    assert layer.to("cpu").weight.data_ptr() == sd["weight"].data_ptr()
