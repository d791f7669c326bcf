"""QuantizedLookupCollection against the float collection on the dequantized tables, and against
each table's own quantized layer."""

from __future__ import annotations

import copy

import pytest
import torch
from forms import SPLIT_BACKENDS

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    KeyedBags,
    LookupCollection,
    LookupIndexError,
    LookupLinear,
    QuantizedLookupCollection,
    QuantizedLookupLinear,
    TableConfig,
)

DTYPES = ["int8", "int4", "float16"]
MODES = ["sum", "mean", "sqrtn", "max"]
FEATS = {
    "user": [[3], [1, 4], [], [9, 9]],
    "item": [[7, 7, 2], [], [0], [5]],
    "last_item": [[5], [6], [6, 1], []],
}


def _batch(weighted: bool, big_ids: bool = False) -> KeyedBags:
    feats = dict(FEATS)
    if big_ids:  # IDs that only a hashed table reads
        feats["user"] = [[2**40 + 3], [-1, 4], [], [10**12, 10**12]]
    if not weighted:
        return KeyedBags.from_dict(feats)
    gen = torch.Generator().manual_seed(0)
    return KeyedBags.from_dict({
        k: Bags.from_lists(v, [torch.rand(len(b), generator=gen).tolist() for b in v])
        for k, v in feats.items()
    })


def _collection(mode: str, user_hashing: str | None = None) -> LookupCollection:
    torch.manual_seed(0)
    return LookupCollection([
        TableConfig("user", 10, 4, ["user"], mode=mode,  # type: ignore[arg-type]
                    hashing=user_hashing),
        TableConfig("item", 8, 6, ["item", "last_item"], mode=mode,  # type: ignore[arg-type]
                    padding_idx=None if mode == "max" else 7),
    ])


def _dequantized(col: LookupCollection, q: QuantizedLookupCollection) -> LookupCollection:
    """The float collection with each quantized table replaced by its dequantized values."""
    ref = copy.deepcopy(col).eval()
    with torch.no_grad():
        for name, layer in q.layers.items():
            if isinstance(layer, QuantizedLookupLinear):
                ref[name].weight.copy_(layer.dequantize().weight)  # a view: writes the table
    return ref


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("mode", "weighted"), [(m, w) for m in MODES for w in (False, True) if (m, w) != ("max", True)]
)
@pytest.mark.parametrize("hashing", [None, "mod"])
def test_pooled_equals_float_collection_on_dequantized_tables(dtype, mode, weighted, hashing):
    col = _collection(mode, hashing)
    q = col.quantize(dtype)
    assert isinstance(q, QuantizedLookupCollection) and not q.training
    assert q.dtypes == {"user": dtype, "item": dtype}
    kb = _batch(weighted, big_ids=hashing is not None)
    out, want = q(kb), _dequantized(col, q)(kb)
    assert out.keys() == want.keys() == ["user", "item", "last_item"]
    torch.testing.assert_close(out.values(), want.values())
    # every feature: its table's own quantized layer on the rows the float collection reads
    for f in col.feature_names:
        table = col._table_of[f]
        layer = col[table].quantize(dtype)
        assert torch.equal(out[f], layer(col.rows(kb, f)))
    # within half a quantization step of the float collection itself (wide for int4)
    assert (out.values() - col(kb).values()).abs().max() < (0.5 if dtype == "int4" else 0.05)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hashing", ["qr", "map"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_qr_and_id_map_tables(dtype, hashing, mode):
    torch.manual_seed(0)
    col = LookupCollection([
        TableConfig("user", 1000, 4, ["user"], mode=mode, hashing=hashing),  # type: ignore
        TableConfig("item", 8, 2, ["item", "last_item"], mode=mode),  # type: ignore
    ])
    col(_batch(False, big_ids=True))  # a map learns these 4 IDs (training mode)
    q = col.quantize(dtype)
    kb = _batch(True, big_ids=True)
    unseen = KeyedBags.from_dict({**FEATS, "user": [[123456789], [], [5], [2**50]]})
    ref = _dequantized(col, q)
    for batch in (kb, unseen):
        torch.testing.assert_close(q(batch).values(), ref(batch).values())
    if hashing == "map":  # the copy only looks up, and the collection's map is untouched
        assert len(q.id_maps["user"]) == len(col.id_maps["user"]) == 4


def test_train_on_a_model_holding_the_collection_keeps_it_for_inference():
    """A training loop's ``model.train()`` at every epoch: the quantized collection takes it as
    PyTorch's quantized modules do, computes the same, adds no ID to its maps (a map in
    training numbers new IDs) and records no gradient."""
    torch.manual_seed(0)
    col = LookupCollection([
        TableConfig("user", 1000, 4, ["user"], hashing="map"),
        TableConfig("item", 8, 2, ["item", "last_item"]),
    ])
    col(_batch(False, big_ids=True))  # the map learns 4 IDs
    q = col.quantize({"user": "int8"})  # item stays a frozen float table
    unseen = KeyedBags.from_dict({**FEATS, "user": [[123456789], [], [5], [2**50]]})
    before = q(unseen).values()
    model = torch.nn.ModuleDict({"sparse": q, "top": torch.nn.Linear(10, 1)})
    for _ in range(2):  # two epochs
        assert model.train() is model and q.training
        with torch.enable_grad():
            out = q(unseen).values()
        assert torch.equal(out, before) and not out.requires_grad
        assert len(q.id_maps["user"]) == 4 and not q.id_maps["user"].training
        assert not any(layer.training for layer in q.layers.values())
        model.eval()
        assert not q.training
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()


@pytest.mark.parametrize("dtype", DTYPES)
def test_unpooled_dict_input(dtype):
    col = _collection("sum", "mod")
    q = col.quantize(dtype)
    x = {"user": torch.tensor([[2**40, -5], [3, 3]]), "item": torch.tensor([7, 0, 2])}
    out, want = q(x), _dequantized(col, q)(x)
    assert out.keys() == want.keys()
    for f in x:
        assert out[f].shape == (*x[f].shape, col[col._table_of[f]].out_features)
        torch.testing.assert_close(out[f], want[f])


def test_dict_dtype_quantizes_the_named_tables_and_copies_the_others():
    col = _collection("mean")
    q = col.quantize({"user": "int4"})
    assert q.dtypes == {"user": "int4", "item": None}
    assert isinstance(q.layers["user"], QuantizedLookupLinear)
    item = q.layers["item"]
    assert isinstance(item, LookupLinear) and not item.weight.requires_grad
    kb = _batch(True)
    out, want = q(kb), _dequantized(col, q)(kb)
    torch.testing.assert_close(out.values(), want.values())
    # float: the same table, and the same kernel (but with LOOKUPLINEAR_BACKEND=torch)
    exact = {} if SPLIT_BACKENDS else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(out["item"], col.eval()(kb)["item"], **exact)
    with torch.no_grad():  # a copy: training the collection on does not change it
        col["item"].weight.add_(1.0)
    assert torch.equal(q(kb)["item"], out["item"])


def _pooled_magnitude(col: LookupCollection, kb: KeyedBags, feature: str) -> torch.Tensor:
    """The bags of ``feature`` pooled in float64 on the absolute values of its table and
    weights: the scale of the rounding of their sum."""
    cfg = col._places[col._table_of[feature]].config
    ref = LookupCollection([TableConfig(cfg.name, cfg.num_embeddings, cfg.embedding_dim,
                                        [feature], mode=cfg.mode, dtype=torch.float64,
                                        padding_idx=cfg.padding_idx)],
                           is_weighted=col.is_weighted).eval()
    with torch.no_grad():
        ref[cfg.name].weight.copy_(col[cfg.name].weight.abs())
    b = kb[feature]
    w = None if b.weights is None else b.weights.double().abs()
    return ref(KeyedBags.from_dict({feature: Bags(b.indices, b.offsets, w)}))[feature]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_a_table_left_float_matches_the_float_collection_as_documented(dtype, padding_idx):
    """A table left float pools through its own ``LookupLinear``: the float collection's
    output to the rounding of a sum in its dtype (a few units in the last place of the bags'
    sums of absolute values, docs/collection.md) for a float16 or bfloat16 table's mean and
    sqrtn and a padded table's bags, and to the bit for the other bags (sum and max, and a
    float32 table's, without padding)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    lists = [[*torch.randint(0, 60, (int(n),), generator=gen).tolist(), 3]
             for n in torch.randint(0, 30, (32,), generator=gen)]
    for mode in MODES:
        for weighted in (False, True) if mode != "max" else (False,):
            col = LookupCollection([
                TableConfig("user", 10, 4, ["user"]),
                TableConfig("item", 60, 16, ["item"], mode=mode,  # type: ignore[arg-type]
                            dtype=dtype, padding_idx=padding_idx)],
                is_weighted=weighted).eval()
            feats = {"user": Bags.from_lists([[1]] * 32), "item": Bags.from_lists(lists)}
            if weighted:
                feats = {k: Bags(b.indices, b.offsets, torch.rand(b.nnz, generator=gen) * 3)
                         for k, b in feats.items()}
            kb = KeyedBags.from_dict(feats)
            out, want = col.quantize({"user": "int8"})(kb)["item"], col(kb)["item"].detach()
            exact = padding_idx is None and (mode in ("sum", "max") or dtype == torch.float32)
            if exact and not SPLIT_BACKENDS:
                assert torch.equal(out, want), (mode, weighted)
            units = 4 * torch.finfo(dtype).eps * _pooled_magnitude(col, kb, "item")
            assert ((out.double() - want.double()).abs() <= units).all(), (mode, weighted)


def test_errors():
    col = _collection("sum")
    with pytest.raises(InputValueError, match=r"must be one of \['float16', 'int4', 'int8'\], "
                       "got 'int2'"):
        col.quantize("int2")
    with pytest.raises(InputValueError, match="table 'item' must be one of"):
        col.quantize({"user": "int8", "item": "uint8"})
    with pytest.raises(InputValueError, match=r"names table\(s\) \['items'\].*tables are "
                       r"\['user', 'item'\]"):
        col.quantize({"items": "int8"})
    with pytest.raises(InputTypeError, match=r"a string or a \{table: dtype\} dict"):
        col.quantize(["int8"])  # type: ignore[arg-type]
    odd = LookupCollection([TableConfig("user", 10, 3, ["user"])])
    with pytest.raises(InputValueError, match=r"embedding_dim 3, and int4 .* even width"):
        odd.quantize("int4")
    with pytest.raises(InputTypeError, match="takes a LookupCollection"):
        QuantizedLookupCollection(LookupLinear(4, 2))  # type: ignore[arg-type]
    q = col.quantize("int8")
    assert q.eval() is q and not q.training
    with pytest.raises(InputValueError, match=r"no feature \['last_item'\]"):
        q(KeyedBags.from_dict({"user": [[1]], "item": [[2]]}))
    with pytest.raises(InputValueError, match="no table reads"):
        q({"song": torch.tensor([1])})
    with pytest.raises(InputTypeError, match="KeyedBags"):
        q(torch.tensor([1]))  # type: ignore[arg-type]
    with pytest.raises(LookupIndexError, match=r"index 8 at kb\['item'\]"):
        q(KeyedBags.from_dict({**FEATS, "item": [[8], [], [], []]}))
    with pytest.raises(LookupIndexError, match="index 10"):
        q({"user": torch.tensor([10])})


def test_quantize_and_views_draw_nothing_on_meta():
    """A table's view (``collection[name]``, built on ``meta`` then given the rows) draws no
    values: drawing on ``meta`` would load PyTorch's compiler (about a second, in the first
    ``quantize()`` of a process)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from lookuplinear import LookupCollection, TableConfig\n"
        "c = LookupCollection([TableConfig('u', 100, 8, ['u'], padding_idx=0),\n"
        "                      TableConfig('i', 50, 8, ['i'], init='linear')])\n"
        "before = c['u'].weight.clone()\n"
        "q = c.quantize()\n"
        "assert torch.equal(c['u'].weight, before)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
