"""from_linear / from_embedding / to_linear / to_embedding / to_embedding_bag."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    KeyedBags,
    LookupCollection,
    LookupLinear,
    check_equivalence,
    densify,
)

X_IDX = torch.tensor([[3, 0, 7], [9, 9, 2]])
BAGS = Bags.from_lists([[3, 1, 3], [], [2, 2], [0, 5, 9]])
FLAT, OFFSETS = BAGS.indices, BAGS.offsets  # CSR offsets: [0, 3, 3, 5, 8]


def test_from_linear_equals_linear_on_one_hot_and_multi_hot() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(10, 4)
    layer = LookupLinear.from_linear(lin)
    assert torch.equal(layer.weight.detach(), lin.weight.detach().T)
    assert layer.bias is not None and torch.equal(layer.bias.detach(), lin.bias.detach())
    torch.testing.assert_close(layer(X_IDX), lin(F.one_hot(X_IDX, 10).float()))
    torch.testing.assert_close(layer(BAGS), lin(BAGS.to_dense(10)))
    assert check_equivalence(layer, BAGS).ok


def test_from_linear_copies() -> None:
    lin = nn.Linear(5, 2)
    layer = LookupLinear.from_linear(lin, mode="mean", sparse=True)
    with torch.no_grad():
        lin.weight.zero_()
    assert layer.weight.abs().sum() > 0
    assert layer.mode == "mean" and layer.sparse


def test_from_linear_without_bias_and_float64() -> None:
    lin = nn.Linear(6, 3, bias=False, dtype=torch.float64)
    layer = LookupLinear.from_linear(lin)
    assert layer.bias is None and layer.weight.dtype == torch.float64
    x = torch.tensor([5, 1])
    assert torch.equal(layer(x), lin(F.one_hot(x, 6).double()))


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("sparse", [False, True])
def test_from_embedding_equals_embedding(padding_idx: int | None, sparse: bool) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4, padding_idx=padding_idx, sparse=sparse)
    layer = LookupLinear.from_embedding(emb)
    assert layer.bias is None
    assert layer.padding_idx == padding_idx and layer.sparse == sparse
    assert torch.equal(layer(X_IDX), emb(X_IDX))
    x = torch.tensor([2, 2, 5])
    assert torch.equal(layer(x), emb(x))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_from_embedding_bag_equals_embedding_bag(mode: str, padding_idx: int | None) -> None:
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx)
    layer = LookupLinear.from_embedding(bag)
    assert layer.mode == mode and layer.bias is None
    assert layer.padding_idx == (None if padding_idx is None else padding_idx % 10)
    want = bag(FLAT, OFFSETS[:-1])  # N start offsets, called as the embedding is
    torch.testing.assert_close(layer(FLAT, OFFSETS[:-1]), want)
    torch.testing.assert_close(layer(BAGS), want)


def test_from_embedding_bag_with_non_zero_padding_row_is_still_equal() -> None:
    bag = nn.EmbeddingBag(10, 4, mode="sum", padding_idx=1)
    with torch.no_grad():
        bag.weight[1] = 5.0  # EmbeddingBag skips padding entries whatever the row holds
    layer = LookupLinear.from_embedding(bag)
    torch.testing.assert_close(layer(FLAT, OFFSETS[:-1]), bag(FLAT, OFFSETS[:-1]))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: nn.Embedding(10, 4, max_norm=1.0), "max_norm"),
        (lambda: nn.EmbeddingBag(10, 4, max_norm=1.0), "max_norm"),
        (lambda: nn.Embedding(10, 4, scale_grad_by_freq=True), "scale_grad_by_freq"),
    ],
    ids=["embedding-max-norm", "bag-max-norm", "scale-grad-by-freq"],
)
def test_from_embedding_refuses_what_a_linear_layer_cannot_hold(make, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputValueError, match=match):
        LookupLinear.from_embedding(make())


def _padded_table() -> torch.Tensor:
    torch.manual_seed(0)
    table = torch.randn(10, 4)
    table[3] = 1.5  # a padding row loaded non-zero (PyTorch keeps whatever is loaded there)
    return table


@pytest.mark.parametrize("sparse", [False, True])
def test_non_zero_padding_row_reads_as_pytorchs_on_every_path(sparse: bool) -> None:
    """nn.Embedding returns the padding row at padding positions, nn.EmbeddingBag skips padding
    entries: the layer does both, whichever way the row got its values, and every conversion
    agrees with it."""
    table = _padded_table()
    emb = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=3, sparse=sparse)
    ebag = nn.EmbeddingBag.from_pretrained(table, freeze=False, mode="sum", padding_idx=3)
    x = torch.tensor([[3, 0, 7], [9, 3, 3]])
    loaded = LookupLinear(10, 4, bias=False, padding_idx=3, sparse=sparse)
    loaded.load_state_dict({"weight": table})  # the usual flow: build, then load the weights
    for layer in (loaded, LookupLinear.from_embedding(emb)):
        assert torch.equal(layer(x), emb(x))  # the padding row, as nn.Embedding gives it
        assert torch.equal(layer(x)[0, 0], table[3])
        torch.testing.assert_close(layer(FLAT, OFFSETS[:-1]), ebag(FLAT, OFFSETS[:-1]))
        for out in (layer.to_embedding()(x), layer.to_linear()(densify(x, layer))):
            torch.testing.assert_close(out, layer(x))
        torch.testing.assert_close(layer.to_embedding_bag()(FLAT, OFFSETS[:-1]), layer(BAGS))
        torch.testing.assert_close(layer.to_linear()(densify(BAGS, layer)), layer(BAGS))
        assert check_equivalence(layer, x).ok and check_equivalence(layer, BAGS).ok
        layer(x).sum().backward()  # the padding row gets no gradient
        grad = layer.weight.grad
        assert grad is not None
        assert not (grad.to_dense() if grad.is_sparse else grad)[3].any()
    back = nn.Embedding(10, 4, padding_idx=3)
    back.load_state_dict(loaded.to_embedding().state_dict())
    assert torch.equal(back(x), loaded(x))


def test_padding_position_gives_padding_row_plus_bias() -> None:
    layer = LookupLinear(10, 4, padding_idx=3)
    with torch.no_grad():
        layer.weight[3] = 2.0
        layer.bias.fill_(1.0)  # type: ignore[union-attr]
    assert torch.equal(layer(torch.tensor([3])), torch.full((1, 4), 3.0))
    assert torch.equal(layer.to_linear()(F.one_hot(torch.tensor([3]), 10).float()),
                       torch.full((1, 4), 3.0))


def test_from_wrong_module_types() -> None:
    with pytest.raises(InputTypeError, match=r"nn\.Linear"):
        LookupLinear.from_linear(nn.Embedding(3, 2))  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match=r"nn\.Embedding"):
        LookupLinear.from_embedding(nn.Linear(3, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_to_linear_is_a_drop_in_for_sum(padding_idx: int | None) -> None:
    layer = LookupLinear(10, 4, padding_idx=padding_idx, init="linear")
    lin = layer.to_linear()
    assert isinstance(lin, nn.Linear)
    assert lin.weight.shape == (4, 10)
    X = BAGS.to_dense(10)
    torch.testing.assert_close(layer(BAGS), lin(X))
    torch.testing.assert_close(layer(X_IDX), lin(F.one_hot(X_IDX, 10).float()))
    if padding_idx is not None:
        assert not lin.weight[:, padding_idx].any()
    # a copy: training the linear layer leaves the lookup layer alone
    with torch.no_grad():
        lin.weight.add_(1.0)
    assert not torch.allclose(layer.weight.T, lin.weight)


@pytest.mark.parametrize("mode", ["mean", "sqrtn", "max"])
def test_to_linear_strict_refuses_other_modes(mode: str) -> None:
    layer = LookupLinear(10, 4, mode=mode)
    with pytest.raises(InputValueError, match="strict=False"):
        layer.to_linear()
    assert layer.to_linear(strict=False).weight.shape == (4, 10)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_to_embedding_round_trip(padding_idx: int | None) -> None:
    layer = LookupLinear(10, 4, bias=False, padding_idx=padding_idx, sparse=True)
    emb = layer.to_embedding()
    assert isinstance(emb, nn.Embedding)
    assert emb.padding_idx == padding_idx and emb.sparse
    assert torch.equal(emb(X_IDX), layer(X_IDX))
    back = LookupLinear.from_embedding(emb)
    assert torch.equal(back(X_IDX), layer(X_IDX))
    assert torch.equal(back(BAGS), layer(BAGS))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_to_embedding_bag_round_trip(mode: str, padding_idx: int | None) -> None:
    layer = LookupLinear(10, 4, bias=False, mode=mode, padding_idx=padding_idx)
    bag = layer.to_embedding_bag()
    assert isinstance(bag, nn.EmbeddingBag)
    assert bag.mode == mode and bag.padding_idx == padding_idx and not bag.include_last_offset
    torch.testing.assert_close(bag(FLAT, OFFSETS[:-1]), layer(FLAT, OFFSETS[:-1]))
    torch.testing.assert_close(bag(FLAT, OFFSETS[:-1]), layer(BAGS))
    back = LookupLinear.from_embedding(bag)
    assert torch.equal(back(BAGS), layer(BAGS))
    assert torch.equal(back.weight, layer.weight)


def test_linear_round_trip_is_identical() -> None:
    layer = LookupLinear(10, 4, init="linear")
    back = LookupLinear.from_linear(layer.to_linear())
    for x in (X_IDX, BAGS, BAGS.to_dense(10)):
        assert torch.equal(back(x), layer(x))


@pytest.mark.parametrize("target", ["to_embedding", "to_embedding_bag"])
def test_bias_cannot_be_dropped(target: str) -> None:
    layer = LookupLinear(10, 4)
    with pytest.raises(InputValueError, match="bias=False"):
        getattr(layer, target)()


def test_sqrtn_has_no_embedding_bag() -> None:
    with pytest.raises(InputValueError, match="'sqrtn'"):
        LookupLinear(10, 4, bias=False, mode="sqrtn").to_embedding_bag()


def test_converted_layers_pass_check_equivalence() -> None:
    bag = nn.EmbeddingBag(10, 4, mode="mean", padding_idx=0)
    assert check_equivalence(LookupLinear.from_embedding(bag), BAGS).ok
    assert check_equivalence(LookupLinear.from_linear(nn.Linear(10, 4)), X_IDX).ok


def test_dlrm_call_reads_start_offsets_as_embedding_bag_does() -> None:
    """``E(indices, offsets)`` with N start offsets: N bags, the last one empty here (its start
    equals len(indices), which also reads as valid CSR offsets of N - 1 bags)."""
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(10, 2, mode="sum")
    layer = LookupLinear.from_embedding(bag)
    idx, starts = torch.tensor([5, 7, 9]), torch.tensor([0, 2, 3])
    want = bag(idx, starts)
    assert want.shape == (3, 2)
    torch.testing.assert_close(layer(idx, starts), want)
    ones = torch.tensor([0, 1, 2])
    torch.testing.assert_close(layer(idx, ones), bag(idx, ones))


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_round_trips_behave_as_the_original(include_last_offset: bool,
                                                          mode: str) -> None:
    """nn.EmbeddingBag -> from_embedding -> to_embedding_bag, each called as the original."""
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(10, 3, mode=mode, include_last_offset=include_last_offset)
    offsets = OFFSETS if include_last_offset else OFFSETS[:-1]
    layer = LookupLinear.from_embedding(bag)
    assert layer.include_last_offset == include_last_offset
    back = layer.to_embedding_bag()
    assert back.include_last_offset == include_last_offset
    want = bag(FLAT, offsets)
    torch.testing.assert_close(layer(FLAT, offsets), want)
    torch.testing.assert_close(back(FLAT, offsets), want)
    torch.testing.assert_close(layer(BAGS), want)  # Bags always hold CSR offsets


def test_csr_offsets_need_include_last_offset() -> None:
    from lookuplinear import InputValueError

    layer = LookupLinear(10, 3, bias=False, include_last_offset=True)
    torch.testing.assert_close(layer(FLAT, OFFSETS), layer(BAGS))
    with pytest.raises(InputValueError, match="end at len"):
        layer(FLAT, OFFSETS[:-1])  # start offsets to a CSR layer: the last bag has no end
    plain = LookupLinear(10, 3, bias=False)
    with pytest.raises(InputValueError, match="include_last_offset=True"):
        plain(FLAT, torch.tensor([0, 3, 3, 5, 9]))  # past len(indices): not start offsets


def test_from_embedding_keeps_freeze_and_refuses_integer_tables() -> None:
    from lookuplinear import InputTypeError

    table = torch.randn(6, 3)
    frozen = LookupLinear.from_embedding(nn.Embedding.from_pretrained(table, freeze=True))
    assert not frozen.weight.requires_grad
    assert not frozen.to_embedding().weight.requires_grad
    trainable = LookupLinear.from_embedding(nn.Embedding.from_pretrained(table, freeze=False))
    assert trainable.weight.requires_grad
    with pytest.raises(InputTypeError, match="floating point"):
        LookupLinear.from_embedding(nn.Embedding.from_pretrained(torch.arange(6).view(3, 2)))


@pytest.mark.parametrize("padding_idx", [None, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_index_gradient_is_nn_embeddings_own(padding_idx: int | None,
                                             dtype: torch.dtype) -> None:
    """On an index tensor, ``sparse=True``'s weight gradient is ``nn.Embedding(sparse=True)``'s
    own, to the bit: one row per entry in entry order (padding entries left out), not
    coalesced; densified it is ``nn.Linear``'s on the one-hot input."""
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4, padding_idx=padding_idx, sparse=True, dtype=dtype)
    layer = LookupLinear.from_embedding(emb)
    g = torch.randn(*X_IDX.shape, 4, dtype=dtype)
    emb(X_IDX).backward(g)
    layer(X_IDX).backward(g)
    ours, theirs = layer.weight.grad, emb.weight.grad
    assert ours is not None and theirs is not None and ours.is_sparse
    assert not ours.is_coalesced()
    assert torch.equal(ours._indices(), theirs._indices())
    assert torch.equal(ours._values(), theirs._values())
    lin = nn.Linear(10, 4, bias=False, dtype=dtype)
    lin(F.one_hot(X_IDX, 10).to(dtype)).backward(g)
    assert lin.weight.grad is not None
    want = lin.weight.grad.T
    if padding_idx is not None:
        want[padding_idx] = 0
    torch.testing.assert_close(ours.to_dense(), want)


def test_a_frozen_table_stays_frozen_through_linear_conversions() -> None:
    """from_linear, to_linear and LookupCollection.from_layers carry requires_grad, as
    from_embedding carries freeze: a converted frozen table is not trained by an optimizer
    over the new module's parameters."""
    lin = nn.Linear(4, 3).requires_grad_(False)
    layer = LookupLinear.from_linear(lin)
    assert not layer.weight.requires_grad and layer.bias is not None
    assert not layer.bias.requires_grad
    assert not layer.to_linear().weight.requires_grad
    assert LookupLinear.from_linear(nn.Linear(4, 3)).weight.requires_grad
    frozen = LookupLinear(5, 2, bias=False).requires_grad_(False)
    col = LookupCollection.from_layers({"a": frozen})
    assert not any(p.requires_grad for p in col.parameters())
    with pytest.raises(InputValueError, match=r"tables \['a'\] are frozen"):
        LookupCollection.from_layers({"a": frozen, "b": LookupLinear(5, 2, bias=False)})


def test_from_layers_copies_every_row_of_a_table_in_a_file(tmp_path: Any) -> None:
    """A table in a file draws a row at its first lookup: from_layers copies the whole table
    (drawn where not drawn yet), as to_linear and state_dict do, not its undrawn zeros."""
    layer = LookupLinear(8, 3, bias=False, storage=tmp_path / "t", seed=3)
    col = LookupCollection.from_layers({"f": layer})
    bags = Bags.from_lists([[5], [1, 2]])
    torch.testing.assert_close(col(KeyedBags.from_dict({"f": [[5], [1, 2]]})).values(),
                               layer(bags))
