"""A table in a file holds what it is given and exports what it computes.

Every way of writing the table (``load_state_dict``, ``copy_``, ``weight[rows] = v``,
``from_linear`` / ``from_embedding`` into a file) lands and is never drawn over by the lazy
initialisation; every export (``state_dict``, ``to_linear``, ``to_embedding``,
``to_embedding_bag``, ``quantize``, a collection's ``to_torchrec``) equals the layer on every
row, drawn or not. The reference is the dense path: ``nn.Linear`` / ``nn.Embedding`` holding the
same values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from lookuplinear import (
    Bags,
    Checkpoint,
    InputValueError,
    KeyedBags,
    LookupCollection,
    LookupIndexError,
    LookupLinear,
    TableConfig,
)
from lookuplinear.storage.tables import draw_rows

ROWS, DIM = 40, 6


def _pretrained(zero_rows: tuple[int, ...] = (3, 17)) -> torch.Tensor:
    """Pretrained values with some rows all zero (unknown words, as often loaded)."""
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(7))
    table[list(zero_rows)] = 0
    return table


def _drawn(layer: LookupLinear) -> torch.Tensor:
    """Every row's lazy initial value (the layer's whole table when nothing was written)."""
    assert layer.storage is not None
    meta = layer.storage.meta
    table = draw_rows(torch.arange(layer.in_features), layer.out_features, seed=meta["seed"],
                      init=meta["init"], in_features=layer.in_features)
    if layer.padding_idx is not None:
        table[layer.padding_idx] = 0
    return table


ALL = torch.arange(ROWS)


# ---------------------------------------------------------------------- writes land
def test_load_state_dict_into_a_new_table_is_kept(tmp_path: Path) -> None:
    table = _pretrained()
    layer = LookupLinear(ROWS, DIM, bias=False, storage=tmp_path / "t", seed=0)
    layer.load_state_dict({"weight": table})
    assert torch.equal(layer(ALL), table)  # zero rows included: nothing drawn over
    assert layer.storage is not None
    assert layer.storage.drawn_rows().tolist() == list(range(ROWS))


@pytest.mark.parametrize("how", ["copy_", "setitem", "init"])
def test_a_direct_write_before_the_first_lookup_is_kept(tmp_path: Path, how: str) -> None:
    table = _pretrained(zero_rows=())
    layer = LookupLinear(ROWS, DIM, bias=False, storage=tmp_path / "t", seed=0)
    layer(torch.tensor([1, 2]))  # a few rows drawn before the write
    with torch.no_grad():
        if how == "copy_":
            layer.weight.copy_(table)
        elif how == "setitem":
            layer.weight[ALL] = table
        else:
            nn.init.constant_(layer.weight, 0.5)
            table = torch.full((ROWS, DIM), 0.5)
    assert torch.equal(layer(ALL), table)


def test_rows_written_as_zeros_are_kept_once_marked(tmp_path: Path) -> None:
    table = _pretrained()
    layer = LookupLinear(ROWS, DIM, bias=False, storage=tmp_path / "t", seed=0)
    assert layer.storage is not None
    with torch.no_grad():
        layer.weight.copy_(table)
    layer.storage.mark_written()
    assert torch.equal(layer(ALL), table)
    with pytest.raises(LookupIndexError, match="rows"):
        layer.storage.mark_written(torch.tensor([ROWS]))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(written=st.lists(st.integers(0, ROWS - 1), max_size=12),
       looked_up=st.lists(st.integers(0, ROWS - 1), max_size=8),
       queries=st.lists(st.lists(st.integers(0, ROWS - 1), max_size=4), min_size=1, max_size=5),
       seed=st.integers(0, 2**31))
def test_rows_written_by_index_are_kept_and_the_rest_drawn(
        tmp_path_factory: pytest.TempPathFactory, written: list[int], looked_up: list[int],
        queries: list[list[int]], seed: int) -> None:
    """Dense reference: nn.EmbeddingBag holding the lazy draw, then the written rows."""
    layer = LookupLinear(ROWS, DIM, bias=False, storage=tmp_path_factory.mktemp("w") / "t",
                         seed=seed)
    layer(torch.tensor(looked_up, dtype=torch.long))  # drawn before the write
    values = torch.randn(len(written), DIM).add_(torch.sign(torch.randn(len(written), 1)) * 3)
    with torch.no_grad():
        layer.weight[torch.tensor(written, dtype=torch.long)] = values
    reference = _drawn(layer)
    reference[torch.tensor(written, dtype=torch.long)] = values  # the last write wins
    bag = nn.EmbeddingBag.from_pretrained(reference, mode="sum")
    x = Bags.from_lists(queries)
    assert torch.equal(layer(x), bag(x.indices, x.offsets[:-1]))


def test_from_linear_and_from_embedding_into_a_file(tmp_path: Path) -> None:
    lin = nn.Linear(ROWS, DIM)
    with torch.no_grad():
        lin.weight[:, 5] = 0  # a zero row of the table
    layer = LookupLinear.from_linear(lin, storage=tmp_path / "lin")
    assert layer.storage is not None and layer.storage.path == tmp_path / "lin"
    x = torch.nn.functional.one_hot(ALL, ROWS).float()
    torch.testing.assert_close(layer(ALL), lin(x), rtol=0, atol=1e-6)
    emb = nn.EmbeddingBag.from_pretrained(_pretrained(), mode="mean", freeze=False)
    layer = LookupLinear.from_embedding(emb, storage=tmp_path / "emb")
    assert layer.storage is not None and layer.mode == "mean"
    bags = Bags.from_lists([[3, 4], [17], [0, 39, 3]])
    torch.testing.assert_close(layer(bags), emb(bags.indices, bags.offsets[:-1]))
    reopened = LookupLinear.open(tmp_path / "emb")
    assert torch.equal(reopened(bags), layer(bags))


def test_load_state_dict_with_assign_is_refused(tmp_path: Path) -> None:
    layer = LookupLinear(ROWS, DIM, bias=False, storage=tmp_path / "t", seed=0)
    with pytest.raises(InputValueError, match="assign"):
        layer.load_state_dict({"weight": _pretrained()}, assign=True)
    assert layer.weight.data_ptr() == layer.storage.weight.data_ptr()  # type: ignore[union-attr]


def test_a_collection_table_in_a_file_keeps_what_is_loaded(tmp_path: Path) -> None:
    coll = LookupCollection([TableConfig("user", ROWS, DIM, ["u"], storage=tmp_path / "u"),
                             TableConfig("item", 10, DIM, ["i"])])
    table = _pretrained()
    state = coll.state_dict()
    state["embedding_bags.user.weight"] = table
    coll.load_state_dict(state)
    out = coll(KeyedBags.from_dict({"u": [[r] for r in range(ROWS)],
                                    "i": [[0]] * ROWS}))["u"]
    assert torch.equal(out, table)
    other = LookupCollection([TableConfig("user", ROWS, DIM, ["u"], storage=tmp_path / "v")])
    other["user"].load_state_dict({"weight": table})  # through the table's own layer
    assert torch.equal(other({"u": ALL})["u"], table)


# ---------------------------------------------------------------------- exports equal the layer
def _partly_drawn(tmp_path: Path, **kw: object) -> LookupLinear:
    layer = LookupLinear(ROWS, DIM, storage=tmp_path / "t", seed=3, **kw)  # type: ignore[arg-type]
    layer(torch.tensor([0, 5, 6]))
    return layer


@pytest.mark.parametrize("bias", [False, True])
def test_state_dict_of_a_partly_drawn_table_equals_the_layer(tmp_path: Path, bias: bool) -> None:
    layer = _partly_drawn(tmp_path, bias=bias)
    memory = LookupLinear(ROWS, DIM, bias=bias)
    memory.load_state_dict(layer.state_dict())
    x = Bags.from_lists([[1, 2, 39], [5], []])
    assert torch.equal(memory(x), layer(x))


def test_conversions_of_a_partly_drawn_table_equal_the_layer(tmp_path: Path) -> None:
    layer = _partly_drawn(tmp_path, bias=False, padding_idx=9)
    emb, bag = layer.to_embedding(), layer.to_embedding_bag()
    lin, q = layer.to_linear(), layer.quantize("float16")
    x = torch.tensor([[1, 9], [39, 5]])
    assert torch.equal(emb(x), layer(x))
    bags = Bags.from_lists([[1, 2, 39], [5, 9], []])
    assert torch.equal(bag(bags.indices, bags.offsets[:-1]), layer(bags))
    torch.testing.assert_close(lin(bags.to_dense(ROWS)), layer(bags), rtol=0, atol=1e-5)
    torch.testing.assert_close(q(bags), layer(bags), rtol=1e-3, atol=1e-3)


def test_exports_of_a_partly_drawn_collection_equal_the_collection(tmp_path: Path) -> None:
    coll = LookupCollection([TableConfig("user", ROWS, DIM, ["u"], storage=tmp_path / "u"),
                             TableConfig("item", 10, DIM, ["i"])])
    kb = KeyedBags.from_dict({"u": [[1, 2], [39]], "i": [[0], [3]]})
    coll(KeyedBags.from_dict({"u": [[5]], "i": [[0]]}))
    memory = LookupCollection([TableConfig("user", ROWS, DIM, ["u"]),
                               TableConfig("item", 10, DIM, ["i"])])
    memory.load_state_dict(coll.state_dict())
    q = coll.quantize({"user": "float16"})
    pytest.importorskip("torchrec")
    ebc = coll.to_torchrec(is_weighted=False)
    expected = coll(kb).values()
    assert torch.equal(memory(kb).values(), expected)
    torch.testing.assert_close(q(kb).values(), expected, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ebc(kb.to_kjt()).values(), expected)


def test_a_checkpoint_of_a_loaded_table_holds_every_row(tmp_path: Path) -> None:
    table = _pretrained()
    layer = LookupLinear(ROWS, DIM, bias=False, sparse=True, storage=tmp_path / "t", seed=0)
    layer.load_state_dict({"weight": table})
    ckpt = Checkpoint(tmp_path / "ckpt", layer)
    ckpt.save()
    layer.reset_parameters()  # every row undrawn again, as after a crash before any save
    ckpt.restore()
    assert torch.equal(layer(ALL), table)
