"""Sizes given as PyTorch takes them (anything ``operator.index`` accepts: numpy integers,
one-element integer tensors) build every table; anything else is refused clearly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from lookuplinear import (
    EmbeddingBag,
    IdMap,
    InputValueError,
    LookupCollection,
    LookupLinear,
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
    for build in (lambda: LookupLinear(size, 3), lambda: EmbeddingBag(size, 3),
                  lambda: TableConfig("t", size, 3, ["f"]), lambda: IdMap(size),
                  lambda: hash_ids(torch.arange(3), size)):
        with pytest.raises(InputValueError, match=r"must be an integer >= 1 .* got") as info:
            build()
        assert isinstance(info.value, ValueError)


