"""KeyedBags, TableConfig and LookupCollection against the dense reference."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
import torch
from forms import BACKEND_NAMES, BACKENDS, SPLIT_BACKENDS, c_by_default
from hypothesis import given, settings
from hypothesis import strategies as st
from unchanged import assert_unchanged, snapshot

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    KeyedBags,
    KeyedTensor,
    LookupCollection,
    LookupIndexError,
    LookupLinear,
    TableConfig,
    check_equivalence,
    densify,
    optim,
)
from lookuplinear.ops import use_backend
from lookuplinear.parallel import sparse_tables

MODES = ["sum", "mean", "sqrtn", "max"]


def _batch(weighted: bool = False) -> KeyedBags:
    feats = {
        "user": [[3], [1, 4], [], [9, 9]],
        "item": [[7, 7, 2], [], [0], [5]],
        "last_item": [[5], [6], [6, 1], []],
    }
    if not weighted:
        return KeyedBags.from_dict(feats)
    gen = torch.Generator().manual_seed(0)
    return KeyedBags.from_dict({
        k: Bags.from_lists(v, [torch.rand(len(b), generator=gen).tolist() for b in v])
        for k, v in feats.items()
    })


def _collection(mode: str = "sum", sparse: bool = False, dtype: torch.dtype | None = None,
                padding_idx: int | None = None) -> LookupCollection:
    torch.manual_seed(0)
    return LookupCollection(
        [TableConfig("user", 10, 4, ["user"], mode=mode, dtype=dtype),  # type: ignore[arg-type]
         TableConfig("item", 8, 3, ["item", "last_item"], mode=mode,  # type: ignore[arg-type]
                     padding_idx=padding_idx, dtype=dtype)],
        sparse=sparse,
    )


def _dense_out(col: LookupCollection, kb: KeyedBags) -> torch.Tensor:
    """Per feature, nn.Linear (no bias) of its table on the densified bags, side by side."""
    outs = []
    for f, table in col.features():
        if table.mode == "max":
            outs.append(_max_reference(table, kb[f]))
        else:
            x = densify(kb[f], table).to(table.weight.dtype)
            outs.append(table.to_linear(strict=False)(x))
    return torch.cat(outs, 1)


def _max_reference(table: LookupLinear, bags: Bags) -> torch.Tensor:
    rows = []
    for b in range(len(bags)):
        idx = bags.indices[bags.offsets[b]:bags.offsets[b + 1]]
        if table.padding_idx is not None:
            idx = idx[idx != table.padding_idx]
        rows.append(table.weight[idx].max(0).values if idx.numel() else
                    torch.zeros(table.out_features, dtype=table.weight.dtype))
    return torch.stack(rows)


# ---------------------------------------------------------------------- KeyedBags
def test_keyed_bags_layout_is_feature_major():
    kb = KeyedBags(["user", "item"], torch.tensor([3, 1, 4, 7, 7, 2]),
                   lengths=torch.tensor([1, 2, 3, 0]))
    assert kb.keys() == ["user", "item"] and len(kb) == 2 and kb.batch_size == 2
    assert kb["user"].indices.tolist() == [3, 1, 4] and kb["user"].offsets.tolist() == [0, 1, 3]
    assert kb["item"].indices.tolist() == [7, 7, 2] and kb["item"].offsets.tolist() == [0, 3, 3]
    same = KeyedBags(["user", "item"], kb.values, offsets=torch.tensor([0, 1, 3, 6, 6]))
    assert torch.equal(same.lengths(), kb.lengths())
    assert torch.equal(kb["item"].to_dense(8), Bags.from_lists([[7, 7, 2], []]).to_dense(8))


def test_keyed_bags_from_dict_and_weights():
    kb = KeyedBags.from_dict({"a": Bags.from_lists([[1], [2, 3]], [[0.5], [2.0, 3.0]]),
                              "b": [[4], []]})
    assert kb.weights is not None
    assert kb["a"].weights.tolist() == [0.5, 2.0, 3.0]
    assert kb["b"].weights.tolist() == [1.0]  # the unweighted feature gets 1s
    assert set(kb.to_dict()) == {"a", "b"} and "a" in kb and list(kb) == ["a", "b"]
    assert kb.to("meta").device.type == "meta" and kb.to("cpu") is kb
    assert "batch_size=2" in repr(kb)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("mode", ["mean", "sqrtn"])
def test_float64_weights_are_rounded_to_the_tables_dtype_first(mode: str, sparse: bool) -> None:
    """Weights more precise than the tables (float64) give what the same weights rounded to
    the tables' float32 give, to the bit, as LookupLinear's: the folded mode factors too, and
    a "qr" table's."""
    lists = [[3, 1, 4], [], [9, 2], [5]]
    values = [[0.1, 1 / 3, 2.7], [], [1e-3, 7.3], [0.3]]
    tables = [TableConfig("t", 10, 4, ["a", "b"], mode=mode),
              TableConfig("q", 12, 3, ["c"], mode=mode, hashing="qr", qr_buckets=4)]
    torch.manual_seed(0)
    coll = LookupCollection(tables, sparse=sparse)

    def batch(dtype: torch.dtype) -> KeyedBags:
        bags = Bags.from_lists(lists)
        exact = torch.tensor([v for b in values for v in b], dtype=torch.float64)
        bags = Bags(bags.indices, bags.offsets, exact.to(dtype))
        return KeyedBags.from_dict({"a": bags, "b": bags, "c": bags})

    with torch.no_grad():
        assert torch.equal(coll(batch(torch.float64)).values(),
                           coll(batch(torch.float32)).values())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keys": ["a", "b"], "values": [1, 2], "lengths": [1, 2, 0, 0]}, "sum to 3"),
        ({"keys": ["a", "b"], "values": [1, 2], "lengths": [3, -1, 0, 0]}, r"lengths\[1\] = -1"),
        ({"keys": ["a", "a"], "values": [1, 2], "lengths": [1, 1]}, "distinct"),
        ({"keys": ["a", "b"], "values": [1, 2], "lengths": [1, 1, 0]}, "multiple"),
        ({"keys": ["a"], "values": [1, 2], "lengths": [1, 1], "weights": [1.0]},
         "one value per entry"),
        ({"keys": ["a"], "values": [1, 2], "offsets": [0, 3]}, "CSR offsets"),
        ({"keys": ["a"], "values": [1, 2]}, "exactly one of"),
        ({"keys": [1], "values": [1], "lengths": [1]}, "strings"),
    ],
)
def test_keyed_bags_errors(kwargs, match):
    with pytest.raises(InputValueError, match=match):
        KeyedBags(**kwargs)


def test_keyed_bags_errors_types_and_keys():
    with pytest.raises(InputTypeError, match="floating"):
        KeyedBags(["a"], [1], lengths=[1], weights=torch.tensor([1]))
    with pytest.raises(InputValueError, match="one bag per example"):
        KeyedBags.from_dict({"a": [[1]], "b": [[1], [2]]})
    with pytest.raises(KeyError, match="no feature 'c'"):
        _batch()["c"]


def test_keyed_tensor():
    kt = KeyedTensor(["a", "b"], [2, 1], torch.arange(6.0).reshape(2, 3))
    assert kt.keys() == ["a", "b"] and kt.length_per_key() == [2, 1]
    assert kt["a"].tolist() == [[0.0, 1.0], [3.0, 4.0]]
    assert set(kt.to_dict()) == {"a", "b"}
    with pytest.raises(KeyError):
        kt["c"]


# ---------------------------------------------------------------------- LookupCollection
@pytest.mark.parametrize(
    ("mode", "weighted"), [(m, w) for m in MODES for w in (False, True) if (m, w) != ("max", True)]
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_gradients_equal_dense(mode, weighted, backend):
    col, kb = _collection(mode, dtype=torch.float64), _batch(weighted)
    with use_backend(backend):
        out = col(kb)
        assert isinstance(out, KeyedTensor)
        assert out.keys() == ["user", "item", "last_item"] and out.length_per_key() == [4, 3, 3]
        torch.testing.assert_close(out.values(), _dense_out(col, kb), rtol=1e-12, atol=1e-12)
        report = check_equivalence(col, kb)
    assert report.ok, str(report)
    assert [c.name for c in report.comparisons] == ["output", "user.weight.grad",
                                                    "item.weight.grad"]


@pytest.mark.parametrize("padding_idx", [None, 6])
def test_shared_table_gradient_is_the_sum(padding_idx):
    col, kb = _collection("sum", sparse=True, padding_idx=padding_idx), _batch()
    col(kb).values().sum().backward()
    grad = col.table_groups[1].grad.to_dense()  # the item table alone in its group (dim 3)
    want = (kb["item"].to_dense(8) + kb["last_item"].to_dense(8)).sum(0)
    if padding_idx is not None:
        want[padding_idx] = 0
    torch.testing.assert_close(grad, want.unsqueeze(1).expand(8, 3))


def test_unpooled_dict_input():
    col = _collection()
    out = col({"user": torch.tensor([[1, 2], [3, 4]]), "last_item": torch.tensor([5])})
    assert isinstance(out, dict)
    assert out["user"].shape == (2, 2, 4) and out["last_item"].shape == (1, 3)
    torch.testing.assert_close(out["last_item"], col["item"].weight[[5]])


def test_collection_errors():
    with pytest.raises(InputValueError, match="no feature"):
        _collection()(KeyedBags.from_dict({"user": [[1]], "item": [[1]]}))
    with pytest.raises(InputValueError, match="lists feature 'x' twice"):
        LookupCollection([TableConfig("a", 3, 2, ["x", "x"])])
    with pytest.raises(InputValueError, match="distinct"):
        LookupCollection([TableConfig("a", 3, 2, ["x"]), TableConfig("a", 3, 2, ["y"])])
    with pytest.raises(InputValueError, match="hashing"):
        TableConfig("a", 3, 2, ["x"], hashing="murmur")
    with pytest.raises(InputValueError, match="mode"):
        TableConfig("a", 3, 2, ["x"], mode="median")  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="KeyedBags"):
        _collection()(torch.tensor([1]))  # type: ignore[arg-type]
    with pytest.raises(InputValueError, match="no table reads"):
        _collection()({"nope": torch.tensor([1])})
    with pytest.raises(InputTypeError, match="KeyedBags"):
        check_equivalence(_collection(), Bags.from_lists([[1]]))
    with pytest.raises(KeyError, match="no table 'x'"):
        _collection()["x"]


def test_from_layers_tables_and_state_dict_keys():
    user, item = LookupLinear(10, 3, bias=False), LookupLinear(5, 3, bias=False, mode="mean")
    col = LookupCollection.from_layers({"user": user, "item": item})
    assert len(col.table_groups) == 1  # one parameter, 2 tables
    assert col.table_groups[0].shape == (15, 3)
    assert torch.equal(col["user"].weight, user.weight)
    assert torch.equal(col["item"].weight, item.weight)
    assert set(col.state_dict()) == {"embedding_bags.user.weight", "embedding_bags.item.weight"}
    kb = KeyedBags.from_dict({"user": [[1, 2], []], "item": [[4], [0, 0]]})
    torch.testing.assert_close(col(kb)["item"], item(kb["item"]))
    torch.testing.assert_close(col(kb)["user"], user(kb["user"]))
    with torch.no_grad():  # a table's module shares the collection's memory
        col["user"].weight[1].fill_(7.0)
    assert (col.state_dict()["embedding_bags.user.weight"][1] == 7.0).all()
    with pytest.raises(InputTypeError, match="LookupLinear"):
        LookupCollection.from_layers({"x": torch.nn.Embedding(3, 2)})  # type: ignore[dict-item]
    with pytest.raises(InputValueError, match="bias"):
        LookupCollection.from_layers({"x": LookupLinear(3, 2)})


def test_state_dict_round_trip_and_groups():
    col = _collection("sum")  # dims 4 and 3: two parameters
    assert [tuple(p.shape) for p in col.table_groups] == [(10, 4), (8, 3)]
    other = _collection("sum")
    with torch.no_grad():
        for p in other.table_groups:
            p.add_(1.0)
    other.load_state_dict(col.state_dict())
    kb = _batch()
    torch.testing.assert_close(other(kb).values(), col(kb).values())
    with pytest.raises(RuntimeError, match="Missing key"):
        other.load_state_dict({"embedding_bags.user.weight": torch.zeros(10, 4)})


def test_weights_is_the_former_name_of_table_groups():
    """``weights`` still reads the groups' parameters, with a FutureWarning naming the new name;
    the parameters are named ``table_groups.<g>``, the state_dict keys are TorchRec's."""
    col = _collection("sum")
    with pytest.warns(FutureWarning, match="table_groups"):
        assert col.weights is col.table_groups
    assert [n for n, _ in col.named_parameters()] == ["table_groups.0", "table_groups.1"]
    assert set(col.state_dict()) == {"embedding_bags.user.weight", "embedding_bags.item.weight"}


def test_same_values_as_separate_layers_made_in_order():
    """Table after table, the init draws what separate LookupLinear layers would."""
    torch.manual_seed(5)
    col = LookupCollection([TableConfig("a", 6, 3, ["a"]), TableConfig("b", 4, 3, ["b"])])
    torch.manual_seed(5)
    a, b = LookupLinear(6, 3, bias=False), LookupLinear(4, 3, bias=False)
    assert torch.equal(col["a"].weight, a.weight) and torch.equal(col["b"].weight, b.weight)


def test_index_of_another_table_is_an_error():
    """Tables share one parameter: an index past a table must not read the next table."""
    col = _collection()
    with pytest.raises(LookupIndexError, match="kb\\['user'\\]"):
        col(KeyedBags.from_dict({"user": [[10]], "item": [[0]], "last_item": [[0]]}))
    with pytest.raises(LookupIndexError):
        col({"user": torch.tensor([-1])})
    # one group, the batch's keys in the group's order: the vectorized path checks too
    one = LookupCollection([TableConfig("a", 4, 2, ["a"]), TableConfig("b", 3, 2, ["b"])])
    ok = KeyedBags.from_dict({"a": [[3], [0, 1]], "b": [[2], []]})
    assert check_equivalence(one, ok).ok
    for bad, where in (({"a": [[3], [0, 1]], "b": [[2], [3]]}, "b"),
                       ({"a": [[4], [0, 1]], "b": [[2], []]}, "a"),
                       ({"a": [[3], [0, -1]], "b": [[2], []]}, "a")):
        with pytest.raises(LookupIndexError, match=f"kb\\['{where}'\\]"):
            one(KeyedBags.from_dict(bad))


def test_check_equivalence_changes_nothing():
    col, kb = _collection(sparse=True), _batch()
    opt = optim.Adam(col.parameters(), lr=0.1, fused=True)
    before = copy.deepcopy(col.state_dict())
    assert check_equivalence(col, kb).ok
    for k, v in col.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(p.grad is None for p in col.parameters()) and not opt.state


@pytest.mark.parametrize("wrt", ["weights", "tables"])
def test_autograd_grad_moves_no_fused_table(wrt):
    """``torch.autograd.grad`` through a collection whose tables a fused optimizer updates
    (every group in one call, or a lookup per group for weighted bags) accumulates nothing:
    the tables and the optimizer state stay as they were to the bit and the gradient is the
    unfused collection's; ``backward()`` then trains as unfused."""
    cols, opts = [], []
    for fused in (False, True):
        col = _collection(sparse=True)
        opt = optim.Adam(col.parameters(), lr=0.05, fused=fused)
        col(_batch()).values().pow(2).sum().backward()
        opt.step()  # the optimizer state exists
        cols.append(col)
        opts.append(opt)
    grads = []
    for col, opt in zip(cols, opts, strict=True):
        opt.zero_grad()
        before = snapshot(col, opt)
        kb = _batch(weighted=wrt == "weights")
        targets = [kb.weights.requires_grad_()] if wrt == "weights" else list(col.parameters())
        grads.append(torch.autograd.grad(col(kb).values().pow(2).sum(), targets))
        assert_unchanged(before, col, opt)
    for a, b in zip(*grads, strict=True):
        if a.is_sparse:
            a, b = a.coalesce(), b.coalesce()
            assert torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
        else:
            assert torch.equal(a, b)
    for col, opt in zip(cols, opts, strict=True):
        opt.zero_grad()
        col(_batch(weighted=True)).values().pow(2).sum().backward()
        opt.step()
    for a, b in zip(cols[0].parameters(), cols[1].parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("opt_name", ["SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_equals_unfused_to_the_bit(opt_name, backend):
    cls = getattr(optim, opt_name)
    kbs = [_batch(), _batch(weighted=True)] * 2
    weights = []
    with use_backend(backend):
        for fused in (False, True):
            col = _collection("mean", sparse=True)
            opt = cls(col.parameters(), lr=0.05, fused=fused)
            for kb in kbs:
                opt.zero_grad()
                col(kb).values().pow(2).sum().backward()
                opt.step()
            weights.append([p.detach().clone() for p in col.parameters()])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)


def test_sgd_equals_torch_sgd_on_the_dense_path():
    col, kb = _collection("sum", sparse=True, dtype=torch.float64), _batch(weighted=True)
    linears = {t.name: copy.deepcopy(col[t.name].to_linear(strict=False)) for t in col.tables}
    ours = optim.SGD(col.parameters(), lr=0.1, momentum=0.0)
    ref = torch.optim.SGD([lin.weight for lin in linears.values()], lr=0.1)
    for _ in range(3):
        ours.zero_grad(), ref.zero_grad()
        col(kb).values().pow(2).sum().backward()
        dense = torch.cat([linears[col._table_of[f]](densify(kb[f], t).double())
                           for f, t in col.features()], 1)
        dense.pow(2).sum().backward()
        ours.step(), ref.step()
    for n, lin in linears.items():
        torch.testing.assert_close(col[n].weight, lin.weight.T, rtol=1e-12, atol=1e-12)


def test_deepcopy_and_pickle():
    col, kb = _collection(), _batch()
    for other in (copy.deepcopy(col), pickle.loads(pickle.dumps(col))):
        torch.testing.assert_close(other(kb).values(), col(kb).values())
        assert other.table_groups[0].data_ptr() != col.table_groups[0].data_ptr()


def test_a_pickle_of_another_version_builds_the_lookup_again_from_its_plan():
    """A collection's lookup keeps its plan across pickles and builds the rest from it, so a
    pickle that lacks an attribute of this version (or holds an old one) runs."""
    col, kb = _collection(), _batch()
    lookup = col._lookup_plan
    old = {"plan": lookup.plan, "groups": lookup.groups, "_a_removed_cache": {}}
    again = type(lookup).__new__(type(lookup))
    again.__setstate__(old)
    other = copy.copy(col)
    other._lookup_plan = again
    torch.testing.assert_close(other(kb).values(), col(kb).values())
    assert not hasattr(again, "_a_removed_cache")


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 5),
    mode=st.sampled_from(MODES),
    item_dim=st.sampled_from([2, 3]),
)
def test_random_batches_equal_dense(data, n, mode, item_dim):
    """Empty bags, duplicates, a batch of one, the last row of each table."""
    sizes = {"user": 7, "item": 3}
    feats = {
        f: data.draw(st.lists(st.lists(st.integers(0, sizes["item" if f != "user" else "user"]
                                                    - 1), max_size=4),
                              min_size=n, max_size=n))
        for f in ("user", "item", "last_item")
    }
    col = LookupCollection(
        [TableConfig("user", 7, 2, ["user"], mode=mode, dtype=torch.float64),
         TableConfig("item", 3, item_dim, ["item", "last_item"], mode=mode,
                     dtype=torch.float64)],  # dim 2: one parameter for both tables
        sparse=mode != "max",
    )
    report = check_equivalence(col, KeyedBags.from_dict(feats))
    assert report.ok, str(report)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(0, 4),
    modes=st.lists(st.sampled_from(["sum", "mean", "sqrtn"]), min_size=3, max_size=3),
    dims=st.lists(st.sampled_from([2, 3]), min_size=3, max_size=3),
    weighted=st.booleans(),
    sparse=st.booleans(),
    shared=st.booleans(),
    hashed=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_random_batches_of_mixed_modes_equal_dense(data, n, modes, dims, weighted, sparse,
                                                   shared, hashed):
    """Tables of sum, mean and sqrtn side by side, of one width or several, hashed
    (``hashing="mod"``) or not, a feature read by two tables or not, weighted or not, dense or
    row-sparse gradients: the usual batch's one lookup path (its IDs hashed and its modes
    folded over the whole batch) equals the dense equivalent; empty bags, a batch of none,
    duplicates, one ID per bag among them."""
    sizes = [6, 4, 5]
    feats = ["a", "b", "c"]
    tables = [TableConfig(f"t{i}", sizes[i], dims[i],
                          ["a", "c"] if shared and i == 2 else [feats[i]],
                          mode=modes[i], hashing="mod" if hashed[i] else None,
                          dtype=torch.float64) for i in range(3)]
    one_id = data.draw(st.booleans())
    lists = {f: data.draw(st.lists(st.lists(st.integers(0, 3), min_size=int(one_id),
                                            max_size=1 if one_id else 4),
                                   min_size=n, max_size=n)) for f in feats}
    kb = KeyedBags.from_dict(lists)
    if weighted:
        g = torch.Generator().manual_seed(n)
        kb = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel(), dtype=torch.float64, generator=g))
    col = LookupCollection(tables, sparse=sparse)
    report = check_equivalence(col, kb)
    assert report.ok, str(report)


# ---------------------------------------------------------------------- hashing
def test_hash_ids_is_scikit_learns_murmurhash():
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.utils import murmurhash3_32

    from lookuplinear import hash_ids

    gen = torch.Generator().manual_seed(0)
    ids = torch.cat([torch.randint(-(2**62), 2**62, (2000,), generator=gen),
                     torch.tensor([0, -1, 2**31, -(2**31), 2**63 - 1, -(2**63)])])
    want = [abs(murmurhash3_32(int(i).to_bytes(8, "little", signed=True), seed=0)) % 997
            for i in ids]
    assert hash_ids(ids, 997).tolist() == want
    assert hash_ids(ids.numpy(), 997).tolist() == want
    assert hash_ids(ids.reshape(2, -1), 997).shape == (2, 1003)
    tokens = ["user42", "café", "a b", ""]
    hv = HashingVectorizer(n_features=997, alternate_sign=False, norm=None,
                           analyzer=lambda doc: [doc])
    assert hash_ids(tokens, 997).tolist() == hv.transform(tokens).indices.tolist()
    with pytest.raises(InputTypeError, match="integer"):
        hash_ids(torch.tensor([1.0]), 10)
    with pytest.raises(InputTypeError, match="str"):
        hash_ids(["a", 1], 10)  # type: ignore[list-item]
    with pytest.raises(InputValueError, match="num_rows"):
        hash_ids(torch.tensor([1]), 0)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_hash_ids_refuses_more_rows_than_int64_holds(backend: str) -> None:
    """Rows are int64: up to ``2**63 - 1`` rows hash as scikit-learn's column; more (``2**63``
    read as int64 is negative, giving negative rows) are refused, by ``hash_ids``, a hashed
    ``TableConfig`` and an ``IdMap``, naming the count."""
    from sklearn.utils import murmurhash3_32

    from lookuplinear import IdMap, hash_ids

    n = 2**63 - 1
    ids = [1, -5, 12345]
    want = [abs(murmurhash3_32(int(i).to_bytes(8, "little", signed=True), seed=0)) % n
            for i in ids]
    with use_backend(backend):
        assert hash_ids(torch.tensor(ids), n).tolist() == want
        assert hash_ids(["a"], n).tolist() == [abs(murmurhash3_32("a", seed=0)) % n]
        for rows in (2**63, 2**64):
            for ids_ in (torch.tensor(ids), ["a"]):
                with pytest.raises(InputValueError, match=r"num_rows must be at most 2\*\*63 - 1"):
                    hash_ids(ids_, rows)
    for hashing in ("mod", "qr", "map"):
        with pytest.raises(InputValueError, match=r"num_embeddings must be at most 2\*\*63"):
            TableConfig("t", 2**63, 2, ["a"], hashing=hashing)
    TableConfig("t", 2**63, 2, ["a"])  # unhashed: a row count as any other
    with pytest.raises(InputValueError, match=r"num_embeddings must be at most 2\*\*63"):
        IdMap(2**63 + 3, fallback_rows=2**63)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_mod_hashing_equals_linear_on_the_hashed_one_hot(mode):
    from sklearn.utils import murmurhash3_32

    col = LookupCollection([TableConfig("q", 13, 3, ["query"], mode=mode, hashing="mod",
                                        dtype=torch.float64)], sparse=mode != "max")
    raw = [[10**12, -5, 10**12], [], [7]]
    kb = KeyedBags.from_dict({"query": raw})
    report = check_equivalence(col, kb)
    assert report.ok, str(report)
    # an independent hashing matrix H: row of each ID by scikit-learn's murmurhash
    rows = [[abs(murmurhash3_32(i.to_bytes(8, "little", signed=True), seed=0)) % 13 for i in b]
            for b in raw]
    # a mean: the collection folds its factor into per-entry weights, the table's lookup divides
    # the sums as nn.EmbeddingBag does (docs/performance.md): equal within rounding
    exact = {} if SPLIT_BACKENDS or mode == "mean" else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(col(kb)["query"], col["q"](Bags.from_lists(rows)), **exact)
    assert torch.equal(col({"query": torch.tensor([[10**12]])})["query"],
                       col["q"].weight[[rows[0][0]]].unsqueeze(0))


@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_qr_hashing_equals_linear_on_the_composed_table(mode, weighted):
    """Row h of a qr table is Q[h // m] + R[h % m]; built here from scikit-learn's hash."""
    from sklearn.utils import murmurhash3_32

    n, m, dim = 50, 7, 3
    col = LookupCollection([TableConfig("q", n, dim, ["query"], mode=mode, hashing="qr",
                                        qr_buckets=m, dtype=torch.float64),
                            TableConfig("plain", 5, dim, ["plain"], dtype=torch.float64)],
                           sparse=True)
    stored = col["q"].weight.detach()
    n_q = -(-n // m)
    assert stored.shape == (n_q + m, dim) == (TableConfig("x", n, dim, ["x"], hashing="qr",
                                                          qr_buckets=m).stored_rows, dim)
    composed = torch.stack([stored[h // m] + stored[n_q + h % m] for h in range(n)])  # (n, dim)
    raw = [[10**12, -5, 10**12], [], [7, 8]]
    w = [[0.5, 2.0, 1.0], [], [3.0, 1.0]] if weighted else None
    kb = KeyedBags.from_dict({"query": Bags.from_lists(raw, w),
                              "plain": Bags.from_lists([[1], [4], []], [[1.0], [1.0], []]
                                                       if weighted else None)})
    report = check_equivalence(col, kb)
    assert report.ok, str(report)
    hashed = [[abs(murmurhash3_32(i.to_bytes(8, "little", signed=True), seed=0)) % n
               for i in b] for b in raw]
    ref_layer = LookupLinear(n, dim, bias=False, mode=mode, dtype=torch.float64,
                             init=lambda t: t.copy_(composed))
    want = ref_layer(Bags.from_lists(hashed, w))
    torch.testing.assert_close(col(kb)["query"], want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(col({"query": torch.tensor([10**12])})["query"],
                               composed[[hashed[0][0]]], rtol=1e-12, atol=1e-12)


def test_qr_config_errors_and_memory():
    assert TableConfig("a", 10_000_000, 16, ["a"], hashing="qr").stored_rows == 6325
    with pytest.raises(InputValueError, match="max"):
        TableConfig("a", 100, 2, ["a"], hashing="qr", mode="max")
    with pytest.raises(InputValueError, match="padding_idx"):
        TableConfig("a", 100, 2, ["a"], hashing="mod", padding_idx=0)
    with pytest.raises(InputValueError, match="qr_buckets"):
        TableConfig("a", 100, 2, ["a"], hashing="qr", qr_buckets=0)
    with pytest.raises(InputValueError, match="qr_buckets is for"):
        TableConfig("a", 100, 2, ["a"], qr_buckets=10)


# ---------------------------------------------------------------------- TorchRec
def test_torchrec_round_trip():
    torchrec = pytest.importorskip("torchrec")
    col = LookupCollection([TableConfig("user", 10, 4, ["user"]),
                            TableConfig("item", 8, 4, ["item", "last_item"], mode="mean")])
    kb = _batch(weighted=False)
    ebc = col.to_torchrec(is_weighted=False)
    assert isinstance(ebc, torchrec.EmbeddingBagCollection)
    kjt = kb.to_kjt()
    assert isinstance(kjt, torchrec.KeyedJaggedTensor)
    theirs = ebc(kjt)
    assert theirs.keys() == col(kb).keys()
    torch.testing.assert_close(theirs.values(), col(kb).values())
    back = LookupCollection.from_torchrec(ebc, sparse=True)
    torch.testing.assert_close(back(KeyedBags.from_kjt(kjt)).values(), col(kb).values())
    again = LookupCollection.from_torchrec(ebc, state_dict=col.state_dict())
    torch.testing.assert_close(again(kb).values(), col(kb).values())
    with pytest.raises(InputValueError, match="no TorchRec equivalent"):
        _collection("sqrtn").to_torchrec(is_weighted=False)


def test_from_kjt_refuses_what_it_cannot_read_exactly():
    """Lengths that are not the bags the strides say: refused, naming it, and the KJT left as
    it was."""
    torchrec = pytest.importorskip("torchrec")
    odd = torchrec.KeyedJaggedTensor(keys=["a", "b"], values=torch.arange(4),
                                     lengths=torch.tensor([1, 1, 1, 1]), stride=1)
    values, lengths = odd.values().clone(), odd.lengths().clone()
    with pytest.raises(InputValueError, match=r"strides \[1, 1\] per key, so 2 bags, but 4"):
        KeyedBags.from_kjt(odd)
    assert torch.equal(odd.values(), values) and torch.equal(odd.lengths(), lengths)
    longer = torchrec.KeyedJaggedTensor(keys=["a", "b"], values=torch.arange(6),
                                        offsets=torch.tensor([0, 1, 2, 3, 4]))
    with pytest.raises(InputValueError, match="lengths sum to 4"):
        KeyedBags.from_kjt(longer)


@settings(max_examples=40, deadline=None)
@given(strides=st.lists(st.integers(0, 3), min_size=1, max_size=3), data=st.data(),
       weighted=st.booleans())
def test_from_kjt_reads_what_torchrec_reads(strides, data, weighted):
    """Any per-key strides are read as TorchRec reads each key (values, lengths, weights),
    and to_kjt gives TorchRec's batch back, strides included."""
    torchrec = pytest.importorskip("torchrec")
    keys = [f"k{i}" for i in range(len(strides))]
    lengths = data.draw(st.lists(st.integers(0, 3), min_size=sum(strides),
                                 max_size=sum(strides)))
    nnz = sum(lengths)
    kjt = torchrec.KeyedJaggedTensor(
        keys=keys, values=torch.arange(nnz), lengths=torch.tensor(lengths, dtype=torch.long),
        weights=torch.rand(nnz) if weighted else None,
        stride_per_key_per_rank=[[n] for n in strides])
    kb = KeyedBags.from_kjt(kjt)
    assert kb.stride_per_key() == strides
    back = kb.to_kjt()
    assert back.stride_per_key_per_rank() == [[n] for n in strides]
    for k in keys:
        for theirs in (kjt, back):
            assert torch.equal(kb[k].indices, theirs[k].values())
            assert torch.equal(kb[k].lengths(), theirs[k].lengths().long())
            if weighted:
                assert torch.equal(kb[k].weights, theirs[k].weights())

@pytest.mark.parametrize("is_weighted", [False, True])
def test_is_weighted_round_trips_equal_torchrec(is_weighted):
    """TorchRec's is_weighted carried both ways: from_torchrec(ebc)(kb) == ebc(kjt) and
    col.to_torchrec()(kjt) == col(kb), on weighted batches (weights ignored for False) and
    on unweighted ones (refused by both for True)."""
    torchrec = pytest.importorskip("torchrec")
    torch.manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(tables=[
        torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="user",
                                    feature_names=["user"]),
        torchrec.EmbeddingBagConfig(num_embeddings=8, embedding_dim=3, name="item",
                                    feature_names=["item", "last_item"])],
        is_weighted=is_weighted)
    col = LookupCollection.from_torchrec(ebc, sparse=True)
    assert col.is_weighted is is_weighted
    again = col.to_torchrec()
    assert again.is_weighted() is is_weighted
    weighted = _batch(weighted=True)
    for theirs in (ebc, again):
        torch.testing.assert_close(col(weighted).values(), theirs(weighted.to_kjt()).values())
    report = check_equivalence(col, weighted)
    assert report.ok, str(report)
    plain = _batch(weighted=False)
    if is_weighted:
        with pytest.raises(AssertionError):  # TorchRec's refusal
            ebc(plain.to_kjt())
        with pytest.raises(InputValueError, match="is_weighted=True"):
            col(plain)
    else:
        torch.testing.assert_close(col(plain).values(), ebc(plain.to_kjt()).values())
    # the quantized collection reads the batch's weights as the collection does
    torch.testing.assert_close(col.quantize("float16")(weighted).values(),
                               col(weighted).values().detach(), rtol=1e-2, atol=1e-2)


def test_is_weighted_default_uses_weights_and_converts_by_choice():
    pytest.importorskip("torchrec")
    col = _collection()
    assert col.is_weighted is None and col.to_torchrec(is_weighted=False).is_weighted() is False
    assert col.to_torchrec(is_weighted=True).is_weighted() is True
    kb = _batch(weighted=True)
    torch.testing.assert_close(col(kb).values(), _dense_out(col, kb))
    with pytest.raises(InputTypeError, match="is_weighted"):
        LookupCollection([TableConfig("a", 3, 2, ["a"])], is_weighted="yes")  # type: ignore


def test_float16_tables_give_float32_as_torchrec():
    """TorchRec's EBC casts each pooled fp16 output to float32: so does the collection (and its
    quantized copy), equal to TorchRec's values, and a float32 layer takes them."""
    pytest.importorskip("torchrec")
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 10, 4, ["user"], dtype=torch.float16),
                            TableConfig("item", 8, 3, ["item", "last_item"], mode="mean",
                                        dtype=torch.float16)], sparse=True)
    kb = _batch()
    out = col(kb).values()
    theirs = col.to_torchrec(is_weighted=False)(kb.to_kjt()).values()
    assert out.dtype == theirs.dtype == torch.float32
    torch.testing.assert_close(out, theirs, rtol=1e-3, atol=1e-3)  # pooled in float16 both
    torch.nn.Linear(10, 1)(out).sum().backward()  # a float32 layer downstream
    assert col.table_groups[0].grad.dtype == torch.float16
    assert col.quantize("float16")(kb).values().dtype == torch.float32


def _float16_and_float32_tables(dtype: torch.dtype) -> list[TableConfig]:
    """Tables of ``dtype`` of one width (a shared feature; mean, sqrtn and sum; padding; a
    ``"qr"`` table) beside a float32 table."""
    return [TableConfig("m", 10, 3, ["f1", "f2"], mode="mean", dtype=dtype),
            TableConfig("s", 10, 3, ["f3"], mode="sqrtn", padding_idx=2, dtype=dtype),
            TableConfig("p", 10, 3, ["f2"], padding_idx=1, dtype=dtype),
            TableConfig("q", 10, 3, ["f4"], hashing="qr", qr_buckets=4, dtype=dtype),
            TableConfig("o", 10, 3, ["f5"])]


@pytest.mark.parametrize("keys", [["f1", "f2", "f3", "f4", "f5"], ["f5", "f4", "f3", "f2", "f1"]])
def test_float16_sparse_tables_weights_needing_grad_equal_the_dense_and_float32_paths(keys):
    """float16 tables with ``sparse=True``, several features in one parameter, per-entry weights
    that need their gradient (beside a float32 table; the batch's keys in the tables' order or
    not): the backward runs (one row-sparse gradient per parameter: PyTorch's CPU sparse add
    has no float16 kernel); the outputs those of ``sparse=False`` to the bit, the weights' and
    tables' gradients within float16 rounding of theirs and of float32 tables'."""
    torch.manual_seed(0)
    half = LookupCollection(_float16_and_float32_tables(torch.float16), sparse=True)
    dense = LookupCollection(_float16_and_float32_tables(torch.float16))
    full = LookupCollection(_float16_and_float32_tables(torch.float32), sparse=True)
    dense.load_state_dict(half.state_dict())
    full.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 4, (5 * 6,), generator=gen)
    values = torch.randint(0, 10, (int(lengths.sum()),), generator=gen)
    weights = torch.rand(values.numel(), generator=gen).half() + 0.5
    upstream = torch.randn(6, 18, generator=gen)
    got = {}
    for name, col in [("half", half), ("dense", dense), ("full", full)]:
        w = weights.to(col.table_groups[0].dtype, copy=True).requires_grad_()
        out = col(KeyedBags(keys, values, lengths=lengths, weights=w)).values()
        (out * upstream).sum().backward()
        assert w.grad is not None
        grads = {t: col.table_groups[g].grad.to_dense()[off:off + col[t].in_features].float()
                 for t, (g, off, _) in col._places.items()}
        got[name] = (out.detach(), w.grad.float(), grads)
    assert torch.equal(got["half"][0], got["dense"][0])
    torch.testing.assert_close(got["half"][0], got["full"][0], rtol=1e-3, atol=1e-2)
    for other in ("dense", "full"):
        torch.testing.assert_close(got["half"][1], got[other][1], rtol=1e-3, atol=1e-2)
        for t, grad in got["half"][2].items():
            torch.testing.assert_close(grad, got[other][2][t], rtol=1e-3, atol=1e-2, msg=t)


def test_float16_sparse_max_table_of_two_features_with_weights_needing_grad_takes_the_max():
    """A float16 ``max`` table with ``sparse=True`` read by two features, its per-entry weights
    (of 1) needing their gradient: each bag's output is the max of its rows, as without the
    weights' gradient (a max's gradient is dense: its lookups are not one summing lookup)."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("t", 10, 4, ["f1", "f2"], mode="max",
                                        dtype=torch.float16)], sparse=True)
    kb = KeyedBags.from_dict({"f1": [[1, 2], [3]], "f2": [[4], [5, 6]]})
    w = torch.ones(kb.values.numel(), requires_grad=True)
    out = col(KeyedBags(kb.keys(), kb.values, lengths=kb.lengths(), weights=w)).values()
    assert torch.equal(out, col(kb).values())
    out.sum().backward()
    assert col.table_groups[0].grad is not None


def test_float16_sparse_unpooled_lookups_of_one_parameter_equal_dense_gradients():
    """{feature: index tensor} lookups of float16 tables of one width with ``sparse=True`` (a
    table read by two features, two tables with padding rows, a ``"qr"`` table, one keyed by an
    ``IdMap``, all in one parameter): the backward runs (one row-sparse gradient per parameter:
    PyTorch's CPU sparse add has no float16 kernel); the rows those of ``sparse=False`` to the
    bit, the gradient theirs within float16 rounding, the padding rows left out of it."""
    def tables() -> list[TableConfig]:
        return [TableConfig("a", 10, 3, ["f1", "f2"], dtype=torch.float16),
                TableConfig("p", 10, 3, ["f3"], padding_idx=2, dtype=torch.float16),
                TableConfig("r", 10, 3, ["f4"], padding_idx=0, dtype=torch.float16),
                TableConfig("q", 10, 3, ["f5"], hashing="qr", qr_buckets=4,
                            dtype=torch.float16),
                TableConfig("u", 8, 3, ["f6"], hashing="map", dtype=torch.float16)]

    torch.manual_seed(0)
    sparse, dense = LookupCollection(tables(), sparse=True), LookupCollection(tables())
    dense.load_state_dict(sparse.state_dict())
    gen = torch.Generator().manual_seed(0)
    ids = {f: torch.randint(0, 10, (2, 3), generator=gen) for f in ["f1", "f2", "f3", "f4"]}
    ids["f3"][0, 0] = 2
    ids["f4"][1, 2] = 0
    ids.update(f5=torch.tensor([[123, 7]]), f6=torch.tensor([40, 41, 40]))
    got = {}
    for name, col in [("sparse", sparse), ("dense", dense)]:
        out = col(ids)
        assert len(col.table_groups) == 1
        sum((v * torch.linspace(-1, 1, v.numel()).view_as(v)).sum() for v in out.values()
            ).backward()
        got[name] = (out, col.table_groups[0].grad)
    (rows, grad), (want, dense_grad) = got["sparse"], got["dense"]
    assert list(rows) == list(want)
    for key in want:
        assert torch.equal(rows[key], want[key]), key
    assert grad.is_sparse
    torch.testing.assert_close(grad.to_dense().float(), dense_grad.float(), rtol=1e-3, atol=1e-2)
    padding = [sparse._places[t].offset + sparse._places[t].config.padding_idx for t in "pr"]
    assert not torch.isin(grad.coalesce().indices(), torch.tensor(padding)).any()


def test_from_torchrec_keeps_each_tables_dtype():
    torchrec = pytest.importorskip("torchrec")
    from torchrec.types import DataType

    torch.manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(tables=[
        torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=3, name=name,
                                    feature_names=[name], data_type=data_type)
        for name, data_type in (("a", DataType.FP16), ("b", DataType.FP32))])
    col = LookupCollection.from_torchrec(ebc)
    for name in "ab":
        theirs = ebc.embedding_bags[name].weight
        assert col[name].weight.dtype == theirs.dtype
        assert torch.equal(col[name].weight, theirs)
    assert [t.data_type for t in col.to_torchrec().embedding_bag_configs()] == [
        DataType.FP16, DataType.FP32]
    kb = KeyedBags.from_dict({"a": [[1, 2], [3]], "b": [[4], []]})
    torch.testing.assert_close(col(kb).values(), ebc(kb.to_kjt()).values())


@pytest.mark.parametrize("sparse", [False, True])
def test_learned_pooling_weights_equal_torchrec_gradients(sparse):
    """Weights that require grad (learned pooling weights): the collection's gradients of the
    weights and of the tables equal TorchRec's weighted EBC's."""
    pytest.importorskip("torchrec")
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 10, 4, ["user"]),
                            TableConfig("item", 8, 3, ["item", "last_item"])],
                           sparse=sparse, is_weighted=True)
    ebc = col.to_torchrec()
    kb = _batch(weighted=True)
    ours_w = kb.weights.clone().requires_grad_(True)
    theirs_w = kb.weights.clone().requires_grad_(True)
    upstream = torch.randn(4, 10)
    out = col(KeyedBags(kb.keys(), kb.values, offsets=kb.offsets, weights=ours_w)).values()
    (out * upstream).sum().backward()
    kjt = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets, weights=theirs_w).to_kjt()
    theirs = ebc(kjt).values()
    (theirs * upstream).sum().backward()
    torch.testing.assert_close(out, theirs)
    torch.testing.assert_close(ours_w.grad, theirs_w.grad)
    for name in ("user", "item"):
        g, off, cfg = col._places[name]
        got = col.table_groups[g].grad
        assert got.is_sparse is sparse
        torch.testing.assert_close(got.to_dense()[off:off + cfg.num_embeddings],
                                   ebc.embedding_bags[name].weight.grad)


@pytest.mark.parametrize("mode", ["mean", "sqrtn"])
def test_learned_pooling_weights_sparse_equal_dense_gradients(mode):
    """Other modes with learned weights (TorchRec weighs sums only): sparse=True gives the
    gradients sparse=False gives, which check_equivalence holds to the dense path."""
    kb = _batch(weighted=True)
    grads = []
    for sparse in (False, True):
        col = _collection(mode, sparse=sparse, dtype=torch.float64)
        w = kb.weights.double().clone().requires_grad_(True)
        batch = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets, weights=w)
        if sparse:
            report = check_equivalence(col, batch)
            assert report.ok, str(report)
        col(batch).values().pow(2).sum().backward()
        grads.append([w.grad, *(p.grad.to_dense() for p in col.parameters())])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("fused", [False, True])
def test_max_table_beside_sparse_tables(fused):
    """sparse=True with a mode="max" table: the max table gets a dense gradient, the others
    row-sparse ones, and training equals sparse=False's."""
    tables = [TableConfig("m", 10, 3, ["m"], mode="max"), TableConfig("s", 10, 3, ["s"]),
              TableConfig("t", 7, 2, ["t"], mode="mean")]
    kb = KeyedBags.from_dict({"m": [[1, 2], [3], []], "s": [[3], [4, 5], [1]],
                              "t": [[6, 0], [1], [2]]})
    target = torch.randn(3, 8)
    trained = []
    for sparse in (False, True):
        torch.manual_seed(0)
        col = LookupCollection(tables, sparse=sparse)
        if sparse:
            report = check_equivalence(col, kb)
            assert report.ok, str(report)
            assert col["m"].sparse is False and col["s"].sparse is True
        opt = optim.SGD(col.parameters(), lr=0.1, fused=fused)
        for _ in range(3):
            opt.zero_grad()
            (col(kb).values() - target).pow(2).sum().backward()
            opt.step()
        if sparse and not fused:
            layouts = {n: col.table_groups[col._places[n].group].grad.is_sparse for n in "mst"}
            assert layouts == {"m": False, "s": True, "t": True}
            # DistributedDataParallel reduces the row-sparse ones itself, the max one as DDP
            groups = {f"table_groups.{col._places[n].group}" for n in "st"}
            assert set(sparse_tables(col)) == groups
        trained.append([p.detach().clone() for p in col.parameters()])
    for a, b in zip(*trained, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("opt_name", ["SGD", "RowWiseAdagrad", "Adam"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_id_per_feature(opt_name, backend):
    """The usual categorical batch (one ID per feature, keys in table order) is looked up as
    an (N, F) index tensor: equal to the dense path, checked, fused equal to unfused."""
    kb = KeyedBags.from_dict({"a": [[3], [0], [1]], "b": [[2], [2], [0]], "c": [[2], [1], [0]]})
    tables = [TableConfig("a", 4, 2, ["a"], dtype=torch.float64),
              TableConfig("b", 3, 2, ["b", "c"], dtype=torch.float64)]
    with use_backend(backend):
        assert check_equivalence(LookupCollection(tables), kb).ok
        ends = []
        for fused in (False, True):
            torch.manual_seed(0)
            col = LookupCollection(tables, sparse=True)
            opt = getattr(optim, opt_name)(col.parameters(), lr=0.1, fused=fused)
            for _ in range(3):
                opt.zero_grad()
                col(kb).values().pow(2).sum().backward()
                opt.step()
            ends.append(col.table_groups[0].detach().clone())
        assert torch.equal(*ends)
        with pytest.raises(LookupIndexError, match="kb\\['c'\\]"):
            col(KeyedBags.from_dict({"a": [[3]], "b": [[2]], "c": [[3]]}))



@pytest.mark.parametrize("dims", [(2, 2), (2, 3)])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_of_no_examples(dims, mode, backend):
    col = LookupCollection([TableConfig("a", 5, dims[0], ["a"], mode=mode),
                            TableConfig("b", 3, dims[1], ["b"], mode=mode)],
                           sparse=mode != "max")
    empty = torch.zeros(0, dtype=torch.long)
    kb = KeyedBags(["a", "b"], empty, lengths=empty)
    with use_backend(backend):
        assert col(kb).values().shape == (0, sum(dims))
        assert check_equivalence(col, kb).ok
        only_empty_bags = KeyedBags.from_dict({"a": [[], []], "b": [[], []]})
        assert not col(only_empty_bags).values().any()


@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=st.integers(1, 4), one_id=st.booleans(),
       backend=st.sampled_from(BACKEND_NAMES))
def test_widths_interleaved_in_feature_order(data, n, one_id, backend):
    """Tables of two widths whose features alternate in the output (groups [a, c, d] and [b]):
    each group one lookup, the outputs put in feature order; equal to the dense path, fused
    equal to unfused, an ID out of range named by its feature."""
    tables = [TableConfig("a", 5, 2, ["a"], dtype=torch.float64),
              TableConfig("b", 4, 3, ["b"], dtype=torch.float64),
              TableConfig("c", 3, 2, ["c", "d"], dtype=torch.float64)]
    rows = {"a": 5, "b": 4, "c": 3, "d": 3}
    size = st.integers(1, 1) if one_id else st.integers(0, 3)
    kb = KeyedBags.from_dict({
        f: [data.draw(st.lists(st.integers(0, r - 1), min_size=k, max_size=k))
            for k in data.draw(st.lists(size, min_size=n, max_size=n))]
        for f, r in rows.items()
    })
    with use_backend(backend):
        for sparse in (False, True):
            col = LookupCollection(tables, sparse=sparse)
            assert col(kb).values().shape == (n, 9)
            report = check_equivalence(col, kb)
            assert report.ok, str(report)
        ends = []
        for fused in (False, True):
            torch.manual_seed(0)
            col = LookupCollection(tables, sparse=True)
            opt = optim.RowWiseAdagrad(col.parameters(), lr=0.1, fused=fused)
            for _ in range(2):
                opt.zero_grad()
                col(kb).values().pow(2).sum().backward()
                opt.step()
            ends.append([p.detach().clone() for p in col.parameters()])
        assert all(torch.equal(x, y) for x, y in zip(*ends, strict=True))
        bad = {f: [[0]] * n for f in rows} | {"d": [[0]] * (n - 1) + [[3]]}
        with pytest.raises(LookupIndexError, match="kb\\['d'\\]"):
            col(KeyedBags.from_dict(bad))


@c_by_default
@pytest.mark.parametrize("one_id", [True, False])
def test_all_widths_in_one_kernel_call(monkeypatch, one_id):
    """Tables of three widths and one of another dtype, bound to a fused optimizer: the fused
    optimizer's update is one operator call for all tables, whatever their widths, and the
    lookups are the operators ``fused=False`` calls; the weights equal ``fused=False``'s to
    the bit."""
    import lookuplinear.ops._rows as rows_module

    calls: list[str] = []
    function, op = rows_module.function, rows_module._op

    def counted_function(name, variant=""):
        fn = function(name, variant)
        symbol = f"{name}_{variant}" if variant else name
        return lambda *args: (calls.append(symbol), fn(*args))[1]

    def counted_op(name):
        fn = op(name)
        return lambda *args: (calls.append(name), fn(*args))[1]

    monkeypatch.setattr(rows_module, "function", counted_function)
    monkeypatch.setattr(rows_module, "_op", counted_op)
    for dtypes in ([torch.float64] * 4, [torch.float64] * 3 + [torch.float32]):
        tables = [TableConfig(f"t{i}", 7 + d, d, [f"f{i}"], dtype=t)
                  for i, (d, t) in enumerate(zip((2, 3, 5, 3), dtypes, strict=True))]
        ids = [[[i % 7] for i in range(4)], [[1], [2, 3], [], [6]]][not one_id]
        kb = KeyedBags.from_dict({f"f{i}": ids for i in range(4)})
        ends = []
        for fused in (False, True):
            torch.manual_seed(0)
            col = LookupCollection(tables, sparse=True)
            opt = optim.Adam(col.parameters(), lr=0.1, fused=fused)
            for _ in range(2):
                opt.zero_grad()
                calls.clear()
                col(kb).values().pow(2).sum().backward()
                opt.step()
            ends.append([p.detach().clone() for p in col.parameters()])
            updates = [c for c in calls if c == "rows_fused_"]
            if fused:  # the operator, once for the tables of every width and dtype
                assert updates == ["rows_fused_"]
            else:
                assert not updates
            # the operators: bag_lookup for bags, gather_groups for one ID over one dtype (the
            # same C kernel, called by the Python registration's kernel through this module,
            # by the C++ one directly)
            forward = [c for c in calls if c.startswith("ll_gather_into")]
            same = one_id and len(set(dtypes)) == 1
            assert forward in (([], ["ll_gather_into_f64"]) if same else ([],))
        assert all(torch.equal(x, y) for x, y in zip(*ends, strict=True))


@pytest.mark.parametrize("one_id", [True, False])
def test_widths_interleaved_keep_the_graph(one_id):
    """``create_graph=True`` through outputs of two widths put in feature order: the gradient
    can be differentiated again, and both orders equal the dense path's."""
    tables = [TableConfig("a", 5, 2, ["a"], dtype=torch.float64),
              TableConfig("b", 4, 3, ["b"], dtype=torch.float64),
              TableConfig("c", 3, 2, ["c", "d"], dtype=torch.float64)]
    feats = ({"a": [[4], [0]], "b": [[1], [3]], "c": [[2], [2]], "d": [[0], [1]]} if one_id else
             {"a": [[4, 4], []], "b": [[1], [3, 0]], "c": [[2], [2, 1]], "d": [[], [1]]})
    kb = KeyedBags.from_dict(feats)
    col = LookupCollection(tables, sparse=True)
    params = list(col.parameters())
    grads = torch.autograd.grad(col(kb).values().pow(2).sum(), params, create_graph=True)
    second = torch.autograd.grad(sum(g.to_dense().pow(2).sum() for g in grads), params)

    dense = [p.detach().clone().requires_grad_() for p in params]
    outs = []
    for f in ["a", "b", "c", "d"]:
        g, off, cfg = col._places[col._table_of[f]]
        outs.append(kb[f].to_dense(cfg.num_embeddings).double()
                    @ dense[g][off:off + cfg.num_embeddings])
    want = torch.autograd.grad(torch.cat(outs, 1).pow(2).sum(), dense, create_graph=True)
    want_second = torch.autograd.grad(sum(g.pow(2).sum() for g in want), dense)
    for x, y in zip(grads, want, strict=True):
        torch.testing.assert_close(x.to_dense(), y, rtol=1e-12, atol=1e-12)
    for x, y in zip(second, want_second, strict=True):
        torch.testing.assert_close(x.to_dense() if x.is_sparse else x, y, rtol=1e-12, atol=1e-12)


def test_widths_interleaved_under_torch_compile():
    """Tables of two widths through ``torch.compile`` (Dynamo and AOTAutograd, as the layer's
    compile test): the same outputs and gradients as eager."""
    try:
        import torch._dynamo
    except ImportError as exc:  # pragma: no cover - torch built without dynamo
        pytest.skip(f"torch.compile unavailable: {exc}")
    torch._dynamo.reset()
    tables = [TableConfig("a", 5, 2, ["a"]), TableConfig("b", 4, 3, ["b"]),
              TableConfig("c", 3, 2, ["c"])]
    col = LookupCollection(tables)
    compiled = torch.compile(col, backend="aot_eager")
    for feats in ({"a": [[4], [0]], "b": [[1], [3]], "c": [[2], [2]]},
                  {"a": [[4, 4], []], "b": [[1], [3, 0]], "c": [[2], [2, 1]]}):
        kb = KeyedBags.from_dict(feats)
        out = compiled(kb).values()
        torch.testing.assert_close(out, col(kb).values())
        grads = torch.autograd.grad(out.pow(2).sum(), list(col.parameters()))
        want = torch.autograd.grad(col(kb).values().pow(2).sum(), list(col.parameters()))
        for x, y in zip(grads, want, strict=True):
            torch.testing.assert_close(x, y)
    torch._dynamo.reset()  # compiled frames of this collection are not reused by other tests


@pytest.mark.parametrize("backend", BACKENDS)
def test_tables_of_two_dtypes_side_by_side(backend):
    """A float32 and a float64 table: the output in the promoted dtype (as ``torch.cat``), each
    table's gradient in its own dtype, equal to the dense path's."""
    tables = [TableConfig("a", 5, 2, ["a"], dtype=torch.float32),
              TableConfig("b", 4, 3, ["b"], dtype=torch.float64),
              TableConfig("c", 3, 2, ["c"], dtype=torch.float32)]
    kb = KeyedBags.from_dict({"a": [[4], [0]], "b": [[1], [3]], "c": [[2], [1]]})
    with use_backend(backend):
        col = LookupCollection(tables, sparse=True)
        out = col(kb).values()
        assert out.dtype == torch.float64
        grads = torch.autograd.grad(out.pow(2).sum(), list(col.parameters()))
    want = torch.cat([kb[f].to_dense(col._places[col._table_of[f]].config.num_embeddings).double()
                      @ col[col._table_of[f]].weight.double() for f in "abc"], 1)
    torch.testing.assert_close(out, want)
    for p, g in zip(col.parameters(), grads, strict=True):
        assert g.dtype == p.dtype
    dense_a = torch.zeros(8, 2, dtype=torch.float64)  # group of a (rows 0-4) and c (rows 5-7)
    dense_a.index_add_(0, torch.tensor([4, 0]), 2 * want[:, 0:2])
    dense_a.index_add_(0, torch.tensor([5 + 2, 5 + 1]), 2 * want[:, 5:7])
    torch.testing.assert_close(grads[0].to_dense().double(), dense_a, rtol=1e-6, atol=1e-6)


def _three_tables(widths: tuple[int, int, int]) -> list[TableConfig]:
    """Tables a, b and c (c read by features c and d): one parameter for one width, else a
    parameter per width whose features interleave in the output."""
    return [TableConfig("a", 5, widths[0], ["a"], dtype=torch.float64),
            TableConfig("b", 4, widths[1], ["b"], dtype=torch.float64),
            TableConfig("c", 3, widths[2], ["c", "d"], dtype=torch.float64)]


USUAL_BATCHES = {
    "one-id": {"a": [[4], [0], [4]], "b": [[1], [3], [1]], "c": [[2], [2], [0]],
               "d": [[0], [2], [1]]},
    "bags": {"a": [[4, 4], [], [0]], "b": [[1], [3, 0], [3]], "c": [[2], [2, 1], []],
             "d": [[], [1, 2], [2, 2, 0]]},
}


@pytest.mark.parametrize("batch", list(USUAL_BATCHES))
@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
def test_usual_batch_gradient_is_the_operators(batch, widths):
    """The usual batch of a collection no fused optimizer is bound to (one ID per feature or
    bags; one parameter or several): the output and each parameter's gradient equal the dense
    path's, and the gradient has the operator ``bag_lookup``'s layout, as a single table's,
    which ``lookuplinear.optim`` and ``torch.optim`` read: for bags each distinct row once,
    sorted, its sum (an index lookup's is ``nn.Embedding``'s, one row per entry in order)."""
    kb = KeyedBags.from_dict(USUAL_BATCHES[batch])
    col = LookupCollection(_three_tables(widths), sparse=True)
    params = list(col.parameters())
    out = col(kb).values()
    grads = torch.autograd.grad(out.pow(2).sum(), params)

    dense = [p.detach().clone().requires_grad_() for p in params]
    entries: list[list[torch.Tensor]] = [[] for _ in params]
    outs = []
    for f in "abcd":
        g, off, cfg = col._places[col._table_of[f]]
        outs.append(kb[f].to_dense(cfg.num_embeddings).double()
                    @ dense[g][off:off + cfg.num_embeddings])
        entries[g].append(kb[f].indices + off)
    want = torch.cat(outs, 1)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    want_grads = torch.autograd.grad(want.pow(2).sum(), dense)
    for grad, w, ids in zip(grads, want_grads, entries, strict=True):
        rows = grad._indices()[0]
        if batch == "bags":  # each row once, sorted
            assert torch.equal(rows, torch.unique(torch.cat(ids)))
        else:
            assert rows.numel() == sum(i.numel() for i in ids)
        torch.testing.assert_close(grad.to_dense(), w, rtol=1e-12, atol=1e-12)
    if batch == "one-id":  # the same bits as bag_lookup on each group's rows, put in order
        plan = col._lookup_plan
        ops = torch.ops.lookuplinear
        rows = [torch.stack([kb[f].indices + col._places[col._table_of[f]][1]
                             for f in feats], 1) for _, feats in plan.groups]
        old = ops.in_feature_order(
            [ops.bag_lookup(p, r).view(3, -1) for p, r in zip(params, rows, strict=True)],
            [0] * len(rows), plan._written_segs[True])
        assert torch.equal(out, old)
        for grad, was, r in zip(grads, torch.autograd.grad(old.pow(2).sum(), params), rows,
                                strict=True):
            assert torch.equal(grad._indices(), was._indices())
            assert torch.equal(grad._indices()[0], r.reshape(-1))  # nn.Embedding's order
            assert torch.equal(grad._values(), was._values())


@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
def test_one_id_batch_of_several_groups_is_one_gather_groups_call(widths, monkeypatch):
    """The usual one-ID batch over several groups, no table bound to a fused optimizer: one
    call of the operator ``gather_groups`` writes the output (none of ``bag_lookup`` or
    ``in_feature_order``); one group keeps its one ``bag_lookup``."""
    from lookuplinear.modules import batched

    calls: list[str] = []
    for name in ("_GATHER_GROUPS", "_BAG_LOOKUP", "_IN_FEATURE_ORDER"):
        op = getattr(batched, name)
        monkeypatch.setattr(batched, name, lambda *a, _op=op, _n=name, **k: (
            calls.append(_n), _op(*a, **k))[1])
    col = LookupCollection(_three_tables(widths), sparse=True)
    col(KeyedBags.from_dict(USUAL_BATCHES["one-id"])).values().sum().backward()
    assert calls == (["_BAG_LOOKUP"] if widths == (2, 2, 2) else ["_GATHER_GROUPS"])


@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
def test_sparse_collection_under_torch_compile(widths):
    """A collection with row-sparse gradients through ``torch.compile`` (Dynamo and
    AOTAutograd), one ID per feature and bags: the eager outputs and gradients, each
    gradient densified."""
    try:
        import torch._dynamo
    except ImportError as exc:  # pragma: no cover - torch built without dynamo
        pytest.skip(f"torch.compile unavailable: {exc}")
    torch._dynamo.reset()
    col = LookupCollection(_three_tables(widths), sparse=True)
    compiled = torch.compile(col, backend="aot_eager")
    params = list(col.parameters())
    for feats in USUAL_BATCHES.values():
        kb = KeyedBags.from_dict(feats)
        out = compiled(kb).values()
        eager = col(kb).values()
        torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
        grads = torch.autograd.grad(out.pow(2).sum(), params)
        want = torch.autograd.grad(eager.pow(2).sum(), params)
        for x, y in zip(grads, want, strict=True):
            torch.testing.assert_close(x.to_dense(), y.to_dense(), rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()


@pytest.mark.parametrize("weighted", [False, True], ids=["", "weighted"])
@pytest.mark.parametrize("one_id", [False, True], ids=["bags", "one ID"])
@pytest.mark.parametrize("dims", [(4, 4, 4), (4, 3, 4)], ids=["one group", "two groups"])
def test_dense_collection_is_one_aten_lookup_per_group_equal_to_per_table_bags(
        one_id: bool, dims: tuple[int, int, int], weighted: bool) -> None:
    """``sparse=False`` (dense gradients) over the usual batch: one ATen lookup per group of
    tables (``F.embedding`` of one-ID rows, ``F.embedding_bag`` of bags or weighted bags), not
    one slice of the batch per feature; outputs and dense table gradients (and the weights'
    gradient) those of one ``nn.EmbeddingBag`` per table on the same weights."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    names = ["a", "b", "c"]
    torch.manual_seed(0)
    col = LookupCollection([TableConfig(k, 9 + i, d, [k]) for i, (k, d) in
                            enumerate(zip(names, dims, strict=True))])
    lists = ([[[1], [8]], [[0], [9]], [[4], [10]]] if one_id else
             [[[1, 2], [], [8, 8, 1]], [[0], [9, 3], [2]], [[4, 10], [5], []]])
    kb = KeyedBags.from_dict(dict(zip(names, lists, strict=True)))
    if weighted:
        kb = KeyedBags(names, kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel()).requires_grad_())
    with Seen() as seen:
        out = col(kb).values()
    groups = len(col.table_groups)
    assert groups == len(set(dims))
    lookups = [op for op in seen.ops if "embedding" in op]
    assert lookups == (["aten.embedding.default"] * groups if one_id and not weighted else
                       ["aten._embedding_bag.default"] * groups)
    ours = [op for op in seen.ops if op.startswith("lookuplinear.")]  # the shift (ctypes
    assert ours[-1:] == ["lookuplinear.in_feature_order.default"]  # without the extension)
    assert not any("bag_lookup" in op for op in ours)
    stock = [torch.nn.EmbeddingBag.from_pretrained(col[k].weight.detach().clone(),
                                                   freeze=False, mode="sum") for k in names]
    bags = [kb[k] for k in names]
    psw = [None if b.weights is None else b.weights.detach().clone().requires_grad_()
           for b in bags]
    ref = torch.cat([e(b.indices, b.offsets[:-1], per_sample_weights=w)
                     for e, b, w in zip(stock, bags, psw, strict=True)], 1)
    assert torch.equal(out, ref)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref.backward(grad_out)
    if weighted:
        assert kb.weights is not None and kb.weights.grad is not None
        assert torch.equal(kb.weights.grad, torch.cat([w.grad for w in psw]))
    for k, e in zip(names, stock, strict=True):
        g, first, cfg = col._places[k]
        grad = col.table_groups[g].grad
        assert grad is not None and not grad.is_sparse
        assert torch.equal(grad[first:first + cfg.num_embeddings], e.weight.grad)


_LOOKUPS = ("lookuplinear.bag_lookup", "lookuplinear.gather_groups", "aten.embedding.",
            "aten._embedding_bag.")


class _Seen:
    """The operators a forward dispatches, by name (a ``TorchDispatchMode``)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        seen = self.ops = []  # type: list[str]

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                seen.append(str(func))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self) -> _Seen:
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)

    def lookups(self) -> list[str]:
        return [op for op in self.ops if op.startswith(_LOOKUPS)]


@pytest.mark.parametrize("weighted", [False, True], ids=["", "weighted"])
@pytest.mark.parametrize("batch", list(USUAL_BATCHES))
@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("modes", [("mean",) * 3, ("sqrtn",) * 3, ("sum", "mean", "sqrtn"),
                                   ("mean", "sum", "mean")],
                         ids=["mean", "sqrtn", "sum-mean-sqrtn", "mean-sum-mean"])
def test_mean_and_sqrtn_tables_take_the_one_lookup_path(
        modes: tuple[str, str, str], sparse: bool, widths: tuple[int, int, int], batch: str,
        weighted: bool) -> None:
    """A collection of ``mean``/``sqrtn`` tables (alone or beside sums) over the usual batch,
    weighted or not, with dense or row-sparse gradients: one lookup per group of tables (or
    one kernel call for all), the modes folded into per-entry weights over the whole batch
    (one ``mode_weights`` per mode), not one lookup per feature. Output and gradients are
    the feature-by-feature reference's, and the dense equivalent's."""
    tables = [dataclasses.replace(t, mode=m)
              for t, m in zip(_three_tables(widths), modes, strict=True)]
    torch.manual_seed(0)
    col = LookupCollection(tables, sparse=sparse)
    kb = KeyedBags.from_dict(USUAL_BATCHES[batch])
    if weighted:
        kb = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel(), dtype=torch.float64))
    with _Seen() as seen:
        out = col(kb).values()
    groups = len(col.table_groups)
    lookups = seen.lookups()
    assert len(lookups) == groups or lookups == ["lookuplinear.gather_groups.default"]
    folds = [op for op in seen.ops if op == "lookuplinear.mode_weights.default"]
    assert len(folds) <= len(set(modes) - {"sum"})
    params = list(col.parameters())
    ref = col._lookup_plan._per_group(kb, col.table_groups, sparse, col)
    torch.testing.assert_close(out, ref, rtol=1e-14, atol=1e-14)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, params, grad_out)
    want = torch.autograd.grad(ref, params, grad_out)
    for got, w in zip(grads, want, strict=True):
        assert got.is_sparse == sparse
        torch.testing.assert_close(got.to_dense(), w.to_dense(), rtol=1e-14, atol=1e-14)
    assert check_equivalence(col, kb).ok


@pytest.mark.parametrize("weighted", [False, True], ids=["", "weighted"])
@pytest.mark.parametrize("one_id", [False, True], ids=["bags", "one ID"])
@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("hashed", [(True, True, True), (True, False, True)],
                         ids=["all hashed", "hashed beside plain"])
@pytest.mark.parametrize("kind", ["mod", "map"])
def test_hashed_tables_take_the_one_lookup_path(kind: str, hashed: tuple[bool, bool, bool],
                                                sparse: bool, widths: tuple[int, int, int],
                                                one_id: bool, weighted: bool) -> None:
    """Tables with ``hashing="mod"`` or an ``IdMap`` (alone or beside plain ones, one a
    mean): the batch's raw IDs turned into their rows first (one hash of every value; each
    table's map), then the usual one lookup per group, not one per feature; output and
    gradients the feature-by-feature reference's (which hashes or maps feature by feature),
    and the dense equivalent's."""
    tables = [dataclasses.replace(t, hashing=kind if h else None,
                                  mode="mean" if t.name == "c" else "sum")
              for t, h in zip(_three_tables(widths), hashed, strict=True)]
    torch.manual_seed(0)
    col = LookupCollection(tables, sparse=sparse)
    sizes = [1, 1, 1] if one_id else [2, 0, 3]  # bags: an empty one, a repeated ID
    raw = {}
    for k, h in zip("abcd", (*hashed, hashed[2]), strict=True):  # d reads table c
        first = 10**12 + ord(k) if h else 1  # raw IDs where the table hashes, else rows
        raw[k] = [[first + (i * j) % 2 for j in range(size)] for i, size in enumerate(sizes)]
    kb = KeyedBags.from_dict(raw)
    if weighted:
        kb = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel(), dtype=torch.float64))
    with _Seen() as seen:
        out = col(kb).values()
    lookups = seen.lookups()
    assert len(lookups) == len(col.table_groups) or lookups == [
        "lookuplinear.gather_groups.default"]
    params = list(col.parameters())
    ref = col._lookup_plan._per_group(kb, list(col.table_groups), sparse, col)
    torch.testing.assert_close(out, ref, rtol=1e-14, atol=1e-14)
    grad_out = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, params, grad_out),
                         torch.autograd.grad(ref, params, grad_out), strict=True):
        torch.testing.assert_close(got.to_dense(), want.to_dense(), rtol=1e-14, atol=1e-14)
    assert check_equivalence(col, kb).ok


@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_weights_that_need_a_gradient_over_the_usual_batch(widths: tuple[int, int, int],
                                                           mode: str) -> None:
    """Per-entry weights that need their gradient, row-sparse tables: a sum takes the
    one-lookup path (one lookup per group, the weights' gradient through it); a (weighted)
    mean, whose folded factors carry no gradient, the feature-by-feature one. Either way the
    weights' and tables' gradients are the dense equivalent's."""
    tables = [dataclasses.replace(t, mode=mode) for t in _three_tables(widths)]
    torch.manual_seed(0)
    col = LookupCollection(tables, sparse=True)
    plain = KeyedBags.from_dict(USUAL_BATCHES["bags"])
    weights = torch.rand(plain.values.numel(), dtype=torch.float64, requires_grad=True)
    kb = KeyedBags(plain.keys(), plain.values, offsets=plain.offsets, weights=weights)
    with _Seen() as seen:
        out = col(kb).values()
    n_lookups = len(seen.lookups())
    assert n_lookups == (len(col.table_groups) if mode == "sum" else 4)
    grad_out = torch.randn_like(out)
    params = list(col.parameters())
    grads = torch.autograd.grad(out, [weights, *params], grad_out)
    dense = [p.detach().clone().requires_grad_() for p in params]
    w = weights.detach().clone().requires_grad_()
    wkb = KeyedBags(plain.keys(), plain.values, offsets=plain.offsets, weights=w)
    outs = []
    for f in "abcd":
        g, off, cfg = col._places[col._table_of[f]]
        rows = wkb[f].to_dense(cfg.num_embeddings)
        if mode == "mean":  # the weighted mean: over the bag's sum of weights
            total = rows.sum(1, keepdim=True)
            rows = torch.where(total > 0, rows / total.where(total > 0, 1), 0)
        outs.append(rows @ dense[g][off:off + cfg.num_embeddings])
    ref = torch.cat(outs, 1)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    want = torch.autograd.grad(ref, [w, *dense], grad_out)
    for got, x in zip(grads, want, strict=True):
        torch.testing.assert_close(got.to_dense(), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("widths", [(2, 2, 2), (2, 3, 2)], ids=["one-group", "groups"])
@pytest.mark.parametrize("mode", ["mean", "sqrtn"])
def test_a_forward_mode_tangent_of_the_batchs_weights_is_never_dropped(
        widths: tuple[int, int, int], mode: str, sparse: bool) -> None:
    """Per-entry weights that are a dual tensor are not folded with the modes' factors (a C
    pass that reads their values only): their tangent reaches ATen's ``embedding_bag``, which
    refuses it (it has no forward AD) as it refuses it on a sum, never an output without its
    tangent."""
    from torch.autograd import forward_ad

    tables = [dataclasses.replace(t, mode=mode) for t in _three_tables(widths)]
    col = LookupCollection(tables, sparse=sparse)
    plain = KeyedBags.from_dict(USUAL_BATCHES["bags"])
    weights = torch.rand(plain.values.numel(), dtype=torch.float64)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(weights, torch.randn_like(weights))
        kb = KeyedBags(plain.keys(), plain.values, offsets=plain.offsets, weights=dual)
        with pytest.raises(NotImplementedError, match="forward AD") as peer:
            torch.nn.functional.embedding_bag(kb.values, col.table_groups[0], kb.offsets,
                                              mode="sum", per_sample_weights=dual,
                                              include_last_offset=True)
        with pytest.raises(type(peer.value), match="forward AD"):
            col(kb)


@pytest.mark.parametrize("dims", [(4, 4), (4, 3)], ids=["one group", "two groups"])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_batch_of_no_examples_or_empty_bags(dims: tuple[int, int], sparse: bool) -> None:
    """Batches of no examples (weighted or not), of one-ID bags, and of empty bags, on every
    lookup path (dense and row-sparse gradients, one group and two): the dense equivalent's
    output, zeros where the bags are empty, and a backward."""
    col = LookupCollection([TableConfig("a", 5, dims[0], ["a"]),
                            TableConfig("b", 5, dims[1], ["b"])], sparse=sparse)
    none = torch.zeros(0, dtype=torch.long)
    for kb in (KeyedBags(["a", "b"], none, lengths=none),
               KeyedBags(["a", "b"], none, lengths=none, weights=torch.zeros(0)),
               KeyedBags.from_dict({"a": [[1]], "b": [[2]]}),
               KeyedBags.from_dict({"a": [[]], "b": [[]]})):
        out = col(kb).values()
        want = torch.cat([kb[k].to_dense(5) @ col[k].weight for k in ("a", "b")], 1)
        torch.testing.assert_close(out, want)
        out.sum().backward()


@pytest.mark.parametrize("sparse", [False, True])
def test_a_refused_batch_leaves_the_id_maps_as_they_were(sparse: bool) -> None:
    """A batch with an ID past a plain table, beside a table keyed by an ``IdMap`` in training
    mode: the ``LookupIndexError`` comes before the map takes the batch's new IDs, so the
    maps, tables and optimizer state are as they were."""
    col = LookupCollection([TableConfig("u", 8, 4, ["u"], hashing="map"),
                            TableConfig("p", 5, 4, ["p"])], sparse=sparse)
    opt = optim.RowWiseAdagrad(col.parameters(), lr=0.1, fused=sparse) if sparse else None
    col(KeyedBags.from_dict({"u": [[3]], "p": [[1]]}))  # the map holds one ID
    before = snapshot(col, *([opt] if opt else []))
    with pytest.raises(LookupIndexError, match=r"kb\['p'\]"):
        col(KeyedBags.from_dict({"u": [[10**12], [7]], "p": [[1], [9]]}))
    assert_unchanged(before, col, *([opt] if opt else []))


def _mapped_beside(table: TableConfig, **kw) -> LookupCollection:
    """A collection of a table keyed by an ``IdMap`` (feature ``u``, one ID held) and
    ``table``, in training mode."""
    col = LookupCollection([TableConfig("u", 8, 4, ["u"], hashing="map"), table], **kw)
    col({"u": torch.tensor([3]), **{f: torch.tensor([1]) for f in table.feature_names}})
    return col


def test_a_batch_refused_after_mapping_leaves_the_id_maps_as_they_were() -> None:
    """The lookup's other refusals come before the maps take the batch's new IDs too: a
    ``max`` bag's entry of weight other than 1, weights that require grad where a
    ``hashing="qr"`` table folds its mean into them."""
    col = _mapped_beside(TableConfig("m", 5, 4, ["m"], mode="max"))
    before = snapshot(col)
    ones = torch.ones(4, dtype=torch.long)
    kb = KeyedBags(["u", "m"], torch.tensor([10**12, 7, 1, 2]), lengths=ones,
                   weights=torch.tensor([1.0, 1.0, 1.0, 2.0]))
    with pytest.raises(InputValueError, match=r"entry 1 has weight 2\.0"):
        col(kb)
    assert_unchanged(before, col)
    col = _mapped_beside(TableConfig("q", 50, 4, ["q"], mode="mean", hashing="qr",
                                     qr_buckets=8))
    before = snapshot(col)
    with pytest.raises(InputValueError, match="weights that require grad"):
        col(KeyedBags(["u", "q"], torch.tensor([10**12, 7, 1, 2]), lengths=ones,
                      weights=torch.ones(4, requires_grad=True)))
    assert_unchanged(before, col)


def test_an_unpooled_input_refused_leaves_the_id_maps_as_they_were() -> None:
    """Unpooled inputs (a ``{feature: IDs}`` dict): the maps' outputs come last, so an ID past
    a plain table, or a bad input of a second map, leaves every map as it was."""
    col = _mapped_beside(TableConfig("p", 5, 4, ["p"]))
    before = snapshot(col)
    with pytest.raises(LookupIndexError):
        col({"u": torch.tensor([10**12, 7]), "p": torch.tensor([1, 9])})
    assert_unchanged(before, col)
    col = _mapped_beside(TableConfig("v", 8, 4, ["v"], hashing="map"))
    before = snapshot(col)
    with pytest.raises(InputTypeError, match="integer tensor"):
        col({"u": torch.tensor([10**12, 7]), "v": torch.tensor([1.0, 2.0])})
    assert_unchanged(before, col)
    out = col({"v": torch.tensor([9]), "u": torch.tensor([10**12])})  # then taken, in the
    assert list(out) == col.embedding_names == ["u", "v"]  # order of the outputs
    assert len(col.id_maps["u"]) == len(col.id_maps["v"]) == 2


def test_an_unpooled_batch_maps_each_table_once_as_a_keyed_batch_does() -> None:
    """Two features of one ``hashing="map"`` table as a ``{feature: IDs}`` dict: the table's
    map takes both features' IDs in one call, so a new ID of one feature never takes a row the
    other reads in the batch (the last free row and an old ID's row go to the first new IDs,
    the next falls back), and the rows, map, re-drawn rows and gradients are the KeyedBags
    path's."""
    def trained(batches: list) -> LookupCollection:
        torch.manual_seed(0)
        col = LookupCollection([TableConfig("item", 4, 2, ["item", "last"], hashing="map")])
        for batch in batches:
            out = col(batch)
            values = out.values() if isinstance(out, KeyedTensor) else torch.cat(list(
                out.values()))
            values.sum().backward()
        return col

    col = trained([{"item": torch.tensor([5])},
                   {"item": torch.tensor([10, 20]), "last": torch.tensor([30, 40])}])
    keyed = trained([KeyedBags.from_dict({"item": [[5]], "last": [[]]}),
                     KeyedBags.from_dict({"item": [[10], [20]], "last": [[30], [40]]})])
    m = col.id_maps["item"]
    assert m.row_id.tolist() == [30, 10, 20] and m.evicted.tolist() == [1]  # 5's row
    assert m.eval()(torch.tensor([10, 20, 30, 40])).tolist() == [2, 3, 1, 0]
    want = keyed.state_dict()
    for key, value in col.state_dict().items():
        assert torch.equal(value, want[key]), key
    torch.testing.assert_close(col.table_groups[0].grad, keyed.table_groups[0].grad)
    strs = LookupCollection([TableConfig("s", 4, 2, ["a", "b"], hashing="map", key_type="str")])
    out = strs({"a": ["x", "y"], "b": np.array([["y"], ["z"]])})  # in each input's shape
    assert out["a"].shape == (2, 2) and out["b"].shape == (2, 1, 2)
    assert strs.id_maps["s"].eval()(["x", "y", "z"]).tolist() == [1, 2, 3]


def test_functional_call_takes_the_parameter_names_not_the_state_dict_names() -> None:
    """``functional_call`` with ``named_parameters()``'s names computes with the given tensors;
    the state dict's (TorchRec's ``embedding_bags.<t>.weight``) are no attribute of the
    collection, which ``functional_call`` says (docs/collection.md names the fix)."""
    from torch.func import functional_call

    coll = LookupCollection([TableConfig("a", 10, 4, ["fa"]), TableConfig("b", 7, 4, ["fb"])])
    kb = KeyedBags.from_dict({"fa": [[1, 2], [3]], "fb": [[0, 1], []]})
    params = {n: 2 * p.detach() for n, p in coll.named_parameters()}
    assert list(params) == ["table_groups.0"]
    out = functional_call(coll, params, (kb,))
    torch.testing.assert_close(out.values(), 2 * coll(kb).values().detach())
    with pytest.raises(AttributeError, match="embedding_bags"):
        functional_call(coll, coll.state_dict(), (kb,))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("other", [torch.float16, torch.float64])
def test_a_mean_table_is_exact_beside_a_table_of_another_dtype(sparse: bool,
                                                               other: torch.dtype) -> None:
    """A float32 mean table's outputs are ``F.embedding_bag(mode="mean")``'s to the bit in a
    collection that also holds a table of another dtype (its group looked up apart): the
    exact means are decided group by group, by each group's dtype."""
    coll = LookupCollection([TableConfig("m", 20, 4, ["f0"], mode="mean"),
                             TableConfig("s", 10, 4, ["f1"], dtype=other)], sparse=sparse)
    g = torch.Generator().manual_seed(0)
    feats = {"f0": [torch.randint(0, 20, (int(torch.randint(0, 8, (), generator=g)),),
                                  generator=g).tolist() for _ in range(64)],
             "f1": [[1, 2]] * 64}
    kb = KeyedBags.from_dict(feats)
    bags = kb["f0"]
    want = torch.nn.functional.embedding_bag(bags.indices, coll["m"].weight.detach(),
                                             bags.offsets[:-1], mode="mean")
    assert torch.equal(coll(kb)["f0"].detach(), want)


@pytest.mark.parametrize("sparse", [False, True])
def test_an_empty_batch_of_a_group_of_mean_and_sum_tables_gives_no_rows(sparse: bool) -> None:
    """A batch of no examples through a group of a mean and a sum table, its keys in another
    order than the collection's (a batch looked up group by group), gives ``(0, width)``, as
    ``nn.EmbeddingBag`` gives no rows for no bags."""
    coll = LookupCollection([TableConfig("a", 10, 4, ["f0"], mode="mean"),
                             TableConfig("b", 10, 4, ["f1"])], sparse=sparse)
    empty = torch.zeros(0, dtype=torch.long)
    kb = KeyedBags(["f1", "f0"], empty, lengths=empty)
    assert coll(kb).values().shape == (0, 8)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_bfloat16_table_with_padding_pools_as_nn_embedding_bag_to_the_bit(
        weighted: bool, sparse: bool) -> None:
    """A bfloat16 sum table with ``padding_idx`` beside another: its bags and gradient are
    ``nn.EmbeddingBag(padding_idx=...)``'s to the bit (ATen's CPU kernel rounds a bfloat16 sum
    otherwise once the padding entries are dropped, 1/64 apart here), as ``LookupLinear``'s."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("a", 50, 8, ["a"], padding_idx=3, dtype=torch.bfloat16),
                            TableConfig("b", 50, 8, ["b"], dtype=torch.bfloat16)], sparse=sparse)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(0, 6, (32,), generator=g)
    values = torch.randint(0, 50, (int(lengths.sum()),), generator=g)
    values[::3] = 3
    w = torch.rand(values.numel(), generator=g).to(torch.bfloat16) if weighted else None
    kb = KeyedBags(["a", "b"], values, lengths=lengths, weights=w)
    stock = torch.nn.EmbeddingBag(50, 8, mode="sum", padding_idx=3, sparse=sparse,
                                  include_last_offset=True,
                                  _weight=col["a"].weight.detach().clone())
    a = kb["a"]
    out, ref = col(kb)["a"], stock(a.indices, a.offsets, per_sample_weights=a.weights)
    assert torch.equal(out, ref)
    up = torch.randn(out.shape, generator=g).to(torch.bfloat16)
    (out * up).sum().backward()
    (ref * up).sum().backward()
    ours, theirs = col.table_groups[0].grad, stock.weight.grad
    assert ours is not None and theirs is not None
    assert torch.equal(ours.to_dense()[:50], theirs.to_dense())
