"""Vocab: tokens to indices and back, and its indices in the layer."""

from __future__ import annotations

import string

import pytest
import torch

from lookuplinear import (
    InputTypeError,
    InputValueError,
    LookupIndexError,
    LookupLinear,
    LookupLinearError,
    UnknownTokenError,
    Vocab,
)


def test_characters_are_string_printable_in_order() -> None:
    v = Vocab.characters()
    assert len(v) == 100
    assert [v[c] for c in string.printable] == list(range(100))
    text = "WTF does nn.Embedding do?"
    x = v.encode(text)
    assert x.dtype == torch.long and x.shape == (25,)
    assert v.decode(x) == text
    assert LookupLinear(len(v), 10)(x.unsqueeze(0)).shape == (1, 25, 10)  # seed 004


def test_repeats_keep_their_first_index_and_special_tokens() -> None:
    v = Vocab(["a", "b", "a", "c"], unknown="<unk>", padding="<pad>")
    assert len(v) == 5
    assert (v["a"], v["b"], v["c"]) == (0, 1, 2)
    assert (v.unknown_idx, v.padding_idx) == (3, 4)
    assert v["never seen"] == 3
    assert "a" in v and "z" not in v
    assert v.decode([0, 4, 3]) == ["a", "<pad>", "<unk>"]
    layer = LookupLinear(len(v), 2, padding_idx=v.padding_idx, bias=False)
    assert not layer(v.encode(["<pad>"])).any()


def test_unknown_token_without_unknown_entry_raises_key_error() -> None:
    with pytest.raises(UnknownTokenError, match="unknown='<unk>'") as info:
        Vocab(["a"]).encode(["b"])
    assert isinstance(info.value, KeyError) and isinstance(info.value, LookupLinearError)


def test_integer_tokens_in_a_tensor_or_array_are_read_by_their_values() -> None:
    """A tensor of raw IDs encodes as the list of the same IDs (its elements are 0-d
    tensors, which would each be an unknown token)."""
    import numpy as np

    v = Vocab([10, 20, 30], unknown=-1)
    want = torch.tensor([1, 2, 3])
    for tokens in ([20, 30, 99], torch.tensor([20, 30, 99]), np.array([20, 30, 99])):
        assert torch.equal(v.encode(tokens), want)
    words = Vocab(["the", "cat"])
    assert words.decode(1) == words.decode(torch.tensor(1)) == ["cat"]
    assert words.decode(np.array([1, 0])) == ["cat", "the"]
    with pytest.raises(InputTypeError, match="integer indices"):
        words.decode([1.0])


def test_decode_errors() -> None:
    v = Vocab(["a", "b"])
    with pytest.raises(LookupIndexError, match=r"index 2 is outside the vocabulary \[0, 1\]"):
        v.decode([0, 2])
    with pytest.raises(InputValueError, match="1-D"):
        v.decode(torch.tensor([[0, 1]]))


def test_encode_keeps_a_0_d_token_and_refuses_more_dimensions_as_decode_does() -> None:
    """A 0-d tensor or array is one token, its index 0-d (decode reads it as one index); a
    batch of sequences (2-D, a list of lists) is refused as decode refuses it, and an
    unhashable token is named."""
    import numpy as np

    v = Vocab([10, 20, 30], unknown=-1)
    for token in (torch.tensor(20), np.array(20)):
        x = v.encode(token)
        assert x.shape == () and x.dtype == torch.long and int(x) == 1
        assert v.decode(x) == [20]
    for batch in (torch.tensor([[10, 20], [30, 10]]), np.array([[10, 20]]), [[10, 20]]):
        with pytest.raises(InputValueError, match="1-D sequence of tokens"):
            v.encode(batch)
        with pytest.raises(InputValueError, match="1-D"):
            v.decode(batch)
    with pytest.raises(InputTypeError, match=r"hashable tokens, got dict \{\} at position 1"):
        v.encode([10, {}])


def test_a_vocab_iterates_its_tokens_in_index_order() -> None:
    """Iterating a Vocab gives its tokens in index order, as a dict of token to index gives
    its tokens; it ended never (with ``unknown``: every integer read as an unknown token) or
    raised UnknownTokenError (without)."""
    v = Vocab(["the", "cat", "sat"], unknown="<unk>", padding="<pad>")
    assert list(v) == ["the", "cat", "sat", "<unk>", "<pad>"]
    assert [v[t] for t in v] == list(range(len(v)))
    assert list(Vocab(["x", "y"])) == ["x", "y"]


def test_one_token_for_both_unknown_and_padding_is_refused() -> None:
    """Every unseen token would read the padding row (zero, no gradient): refused."""
    with pytest.raises(InputValueError, match=r"unknown and padding are the same token"):
        Vocab(["a", "b"], unknown="<x>", padding="<x>")
