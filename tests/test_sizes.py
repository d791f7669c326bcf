"""Sizes given as PyTorch takes them (anything ``operator.index`` accepts: numpy integers,
one-element integer tensors) build every table; anything else is refused clearly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import lookuplinear
from lookuplinear import (
    EmbeddingBag,
    IdMap,
    InputValueError,
    LookupCollection,
    LookupLinear,
    SizeError,
    SizeTypeError,
    TableConfig,
    hash_ids,
)

SIZES = [np.int64(12), np.int32(12), np.uint16(12), torch.tensor(12),
         torch.tensor(12, dtype=torch.int32)]
BAD_SIZES = [12.0, np.float64(12), torch.tensor(12.0), True, np.bool_(True), torch.tensor(True),
             0, -3, "12", None]


@pytest.mark.parametrize("size", SIZES, ids=repr)
def test_sizes_as_numpy_integers_and_tensors_build_every_table(size: Any, tmp_path: Path) -> None:
    built = [
        LookupLinear(size, size),
        LookupLinear.from_embedding(nn.EmbeddingBag(size, size)),
        LookupLinear(size, 4, storage=tmp_path / "table", seed=size),  # to a JSON file
        EmbeddingBag(size, size),
    ]
    for layer in built:
        assert type(layer.weight.shape[0]) is int and layer.weight.shape[0] == 12
    assert all(type(n) is int for n in (built[0].in_features, built[0].out_features,
                                        built[3].num_embeddings, built[3].embedding_dim))
    cfg = TableConfig("t", size, size, ["f"], hashing="qr", qr_buckets=size)
    assert (type(cfg.num_embeddings), type(cfg.embedding_dim), type(cfg.qr_buckets)) == (int,) * 3
    cfg = TableConfig("m", size, 4, ["g"], hashing="map", fallback_rows=size - 10,
                      admit_after=size - 10)
    assert (cfg.fallback_rows, cfg.admit_after) == (2, 2)
    coll = LookupCollection([cfg, TableConfig("t", size, size, ["f"])])
    assert coll.table_of("f").weight.shape == (12, 12)
    assert IdMap(size, fallback_rows=size - 10).capacity == 10
    assert torch.equal(hash_ids(torch.arange(5), size), hash_ids(torch.arange(5), 12))
    assert LookupLinear(20, 3, padding_idx=size).padding_idx == 12


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # one epoch, 2 rows
def test_an_estimators_hidden_size_may_be_a_numpy_integer() -> None:
    from lookuplinear.sklearn import LookupClassifier

    clf = LookupClassifier(hidden=np.int64(4), max_iter=1, random_state=0)
    clf.fit([[0, 1], [2]], [0, 1])
    assert clf.predict([[0, 1]]).shape == (1,)


@pytest.mark.parametrize("size", BAD_SIZES, ids=repr)
def test_a_size_that_is_not_a_positive_integer_is_refused_clearly(size: Any) -> None:
    for build in (lambda: LookupLinear(size, 3), lambda: TableConfig("t", size, 3, ["f"]),
                  lambda: IdMap(size), lambda: hash_ids(torch.arange(3), size)):
        with pytest.raises(InputValueError, match=r"must be an integer >= 1 .* got") as info:
            build()
        assert isinstance(info.value, ValueError)


# 0 is a size these take; a bool tensor PyTorch refuses with its kernel's RuntimeError, where
# lookuplinear's is the TypeError of every other bool
@pytest.mark.parametrize("size", [s for s in BAD_SIZES if not (type(s) is int and s == 0)
                                  and not (isinstance(s, torch.Tensor) and s.dtype == torch.bool)],
                         ids=repr)
@pytest.mark.parametrize("cls", ["Embedding", "EmbeddingBag"])
def test_a_bad_size_raises_the_class_pytorch_raises(size: Any, cls: str) -> None:
    """A float, a bool or a string: a ``TypeError``; a negative size: a ``RuntimeError``, as
    ``nn.Embedding``/``nn.EmbeddingBag`` raise; each also lookuplinear's, a ``ValueError``."""
    ours, stock = getattr(lookuplinear, cls), getattr(nn, cls)
    for args in ((size, 3), (3, size)):
        try:
            stock(*args)
        except Exception as e:  # the class is what is compared
            theirs = type(e)
        with pytest.raises(theirs, match=r"must be an integer >= 0 .* got") as info:
            ours(*args)
        assert type(info.value) is (SizeError if theirs is RuntimeError else SizeTypeError)
        assert isinstance(info.value, InputValueError)


@pytest.mark.parametrize("cls", ["Embedding", "EmbeddingBag"])
def test_a_table_of_no_rows_or_columns_is_built_as_pytorch_builds_it(cls: str) -> None:
    for n, d in ((0, 3), (3, 0), (0, 0)):
        assert getattr(lookuplinear, cls)(n, d).weight.shape == getattr(nn, cls)(n, d).weight.shape


