"""lookuplinear.Embedding against nn.Embedding on the same calls: a drop-in (signature,
defaults, attributes, state, repr), forward and gradients, the padding row."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn

from lookuplinear import (
    Embedding,
    InputTypeError,
    LayoutError,
    LookupIndexError,
    LookupLinear,
    PaddingIdxError,
    optim,
)

X = torch.tensor([[0, 2, 4, 5], [4, 3, 0, 9]])


def test_signature_defaults_attributes_and_state_are_nn_embeddings() -> None:
    def params(f: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]

    assert params(Embedding.__init__) == params(nn.Embedding.__init__)
    assert params(Embedding.forward) == params(nn.Embedding.forward)
    assert params(Embedding.from_pretrained) == params(nn.Embedding.from_pretrained)
    torch.manual_seed(0)
    emb = Embedding(10, 3, padding_idx=-1, max_norm=2.0, sparse=True)
    torch.manual_seed(0)
    ref = nn.Embedding(10, 3, padding_idx=-1, max_norm=2.0, sparse=True)
    assert isinstance(emb, nn.Embedding)
    assert {k: v for k, v in vars(emb).items() if not k.startswith("_")} == {
        k: v for k, v in vars(ref).items() if not k.startswith("_")}
    assert repr(emb) == repr(ref) and torch.equal(emb.weight, ref.weight)  # the same draw
    assert list(emb.state_dict()) == list(ref.state_dict()) == ["weight"]
    emb.load_state_dict(ref.state_dict())  # both ways, strict
    ref.load_state_dict(emb.state_dict())


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32, torch.float64])
def test_from_pretrained_as_torchs(dtype: torch.dtype) -> None:
    table = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).to(dtype)
    emb = Embedding.from_pretrained(table)
    assert type(emb) is Embedding and not emb.weight.requires_grad
    assert torch.equal(emb(torch.tensor([1, 0])), nn.Embedding.from_pretrained(table)(
        torch.tensor([1, 0])))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 0, -2])
def test_forward_and_gradient_equal_torchs(sparse: bool, padding_idx: int | None) -> None:
    torch.manual_seed(0)
    table = torch.randn(10, 5, dtype=torch.float64)
    if padding_idx is not None:
        table[padding_idx] = 7.0  # a padding row loaded non-zero: both read it as it holds
    emb = Embedding.from_pretrained(table, freeze=False, padding_idx=padding_idx, sparse=sparse)
    ref = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=padding_idx,
                                       sparse=sparse)
    x = torch.tensor([[7, 1, 3, 8], [8, 0, 0, 1]])
    assert torch.equal(emb(x), ref(x))
    g = torch.randn(2, 4, 5, dtype=torch.float64)
    emb(x).backward(g)
    ref(x).backward(g)
    assert emb.weight.grad is not None and ref.weight.grad is not None
    if sparse:  # nn.Embedding's layout: one row per position, in input order
        assert torch.equal(emb.weight.grad._indices(), ref.weight.grad._indices())
        assert torch.equal(emb.weight.grad._values(), ref.weight.grad._values())
    else:
        assert torch.equal(emb.weight.grad, ref.weight.grad)
    if padding_idx is not None:
        assert not emb.weight.grad.to_dense()[padding_idx].any()


def test_max_norm_and_scale_grad_by_freq_as_torchs() -> None:
    torch.manual_seed(0)
    table = torch.randn(22, 5) * 3
    for kwargs in ({"max_norm": 1.0}, {"max_norm": 2.0, "norm_type": 0.5},
                   {"scale_grad_by_freq": True}):
        emb = Embedding.from_pretrained(table.clone(), freeze=False, **kwargs)
        ref = nn.Embedding.from_pretrained(table.clone(), freeze=False, **kwargs)
        x = torch.tensor([2, 8, 8, 6])
        assert torch.equal(emb(x), ref(x))
        assert torch.equal(emb.weight, ref.weight)  # the named rows renormed in place
        emb(x).sum().backward()
        ref(x).sum().backward()
        assert torch.equal(emb.weight.grad, ref.weight.grad)


class _Triple(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 3 * w


@pytest.mark.parametrize("sparse", [False, True])
def test_max_norm_renorms_the_parametrized_weight_it_looks_up_as_torchs(sparse: bool) -> None:
    """A parametrized weight is computed on each read: the forward reads it once, as
    nn.Embedding's does, and renorms the rows of the table it looks up (not another copy)."""
    from torch.nn.utils import parametrize

    table = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    x = torch.tensor([[1, 2], [4, 5]])
    emb = Embedding.from_pretrained(table.clone(), freeze=False, max_norm=1.0, sparse=sparse)
    ref = nn.Embedding.from_pretrained(table.clone(), freeze=False, max_norm=1.0, sparse=sparse)
    for m in (emb, ref):
        parametrize.register_parametrization(m, "weight", _Triple())
    got, want = emb(x), ref(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.sum().backward()
    want.sum().backward()
    ours, theirs = emb.parametrizations.weight.original, ref.parametrizations.weight.original
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # left as it is, as there
    torch.testing.assert_close(ours.grad.to_dense(), theirs.grad.to_dense(), rtol=0, atol=0)


def test_max_norm_under_forward_ad_and_on_an_inference_table_as_torchs() -> None:
    """The renorm acts on the table's values, outside autograd: forward-mode AD (jacfwd) gives
    nn.Embedding's Jacobian, and a table made under inference_mode is renormed outside it."""
    torch.manual_seed(0)
    table = torch.randn(8, 3, dtype=torch.float64) * 3
    x = torch.tensor([[1, 2, 2], [0, 7, 1]])

    def jacobian(kind: type) -> torch.Tensor:
        m = kind.from_pretrained(table.clone(), freeze=False, max_norm=1.0)
        return torch.func.jacfwd(
            lambda w: torch.func.functional_call(m, {"weight": w}, (x,)))(table.clone())

    torch.testing.assert_close(jacobian(Embedding), jacobian(nn.Embedding), rtol=0, atol=0)
    with torch.inference_mode():
        emb = Embedding.from_pretrained(table.clone(), max_norm=1.0)
        ref = nn.Embedding.from_pretrained(table.clone(), max_norm=1.0)
    torch.testing.assert_close(emb(x), ref(x), rtol=0, atol=0)
    torch.testing.assert_close(emb.weight, ref.weight, rtol=0, atol=0)


def test_empty_tables_and_errors() -> None:
    emb = Embedding(0, 0, sparse=True)  # as nn.Embedding allows
    emb(torch.tensor([], dtype=torch.int64)).sum().backward()
    assert emb.weight.grad is not None and emb.weight.grad.shape == (0, 0)
    with pytest.raises(LookupIndexError, match=r"index 10 at input\[1\]"):
        Embedding(10, 3)(torch.tensor([1, 10]))
    with pytest.raises(InputTypeError, match="integer indices"):
        Embedding(10, 3)(torch.tensor([1.0]))


@pytest.mark.parametrize("make", [
    lambda: torch.tensor([[1, 2]]).to_sparse(),
    lambda: torch.tensor([[1, 2]]).to_sparse_csr(),
])
def test_an_index_tensor_of_another_layout_is_refused_naming_the_layout(make: Any) -> None:
    """An int64 sparse tensor: the message names the layout (not the dtype, which is right),
    and the error is the RuntimeError nn.Embedding raises for it."""
    x = make()
    with pytest.raises(LayoutError, match=f"got .*layout {x.layout}") as info:
        Embedding(6, 3)(x)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, InputTypeError)
    assert "dtype" not in str(info.value) and "long()" not in str(info.value)


def test_a_nested_index_tensor_is_looked_up_as_nn_embedding_looks_it_up() -> None:
    """A jagged nested tensor of indices gives nn.Embedding's nested rows and gradient; an
    index out of range is named before the lookup."""
    torch.manual_seed(0)
    emb = Embedding(6, 3, padding_idx=0)
    ref = nn.Embedding(6, 3, padding_idx=0)
    ref.load_state_dict(emb.state_dict())
    x = torch.nested.nested_tensor([torch.tensor([1, 2, 0]), torch.tensor([5])],
                                   layout=torch.jagged)
    out, want = emb(x), ref(x)
    assert out.is_nested and torch.equal(out.values(), want.values())
    grad = torch.randn_like(want.values())
    out.values().backward(grad)
    want.values().backward(grad)
    assert emb.weight.grad is not None and ref.weight.grad is not None
    assert torch.equal(emb.weight.grad, ref.weight.grad)
    bad = torch.nested.nested_tensor([torch.tensor([1, 6])], layout=torch.jagged)
    with pytest.raises(LookupIndexError, match=r"index 6 at input.values\(\)\[1\]"):
        emb(bad)


def test_fused_optimizer_and_conversion() -> None:
    """With sparse=True a fused optimizer takes the gradient in the backward, as for the
    other tables; to_lookup_linear gives the same lookups."""
    torch.manual_seed(0)
    emb = Embedding(10, 4, padding_idx=0, sparse=True)
    ref = nn.Embedding(10, 4, padding_idx=0, sparse=True)
    ref.load_state_dict(emb.state_dict())
    fused = optim.SGD(emb.parameters(), lr=0.5, fused=True)
    plain = torch.optim.SGD(ref.parameters(), lr=0.5)
    emb(X).square().sum().backward()
    ref(X).square().sum().backward()
    fused.step()
    plain.step()
    torch.testing.assert_close(emb.weight, ref.weight)
    layer = emb.to_lookup_linear()
    assert isinstance(layer, LookupLinear) and layer.padding_idx == 0 and layer.sparse
    assert torch.equal(layer(X), emb(X))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, -3, 2])
def test_padding_idx_set_after_construction_as_torchs(sparse: bool, padding_idx: int) -> None:
    """A ``padding_idx`` written on the layer (negative: counted from the end) gets no
    gradient on every path, as ``F.embedding`` normalises it; one outside the table is refused
    as ``nn.Embedding`` refuses it."""
    torch.manual_seed(0)
    emb = Embedding(6, 3, sparse=sparse)
    ref = nn.Embedding(6, 3, sparse=sparse)
    ref.load_state_dict(emb.state_dict())
    emb.padding_idx = ref.padding_idx = padding_idx
    x = torch.tensor([[5, 3, 2], [0, 5, 3]])
    assert torch.equal(emb(x), ref(x))
    emb(x).sum().backward()
    ref(x).sum().backward()
    assert emb.weight.grad is not None and ref.weight.grad is not None
    assert torch.equal(emb.weight.grad.to_dense(), ref.weight.grad.to_dense())
    assert not emb.weight.grad.to_dense()[padding_idx].any()
    emb.padding_idx = ref.padding_idx = -7
    with pytest.raises(AssertionError):
        ref(x)
    with pytest.raises(PaddingIdxError, match="padding_idx must be within"):
        emb(x)
