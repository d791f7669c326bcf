"""TorchRec's own cases side by side with its ``EmbeddingBagCollection``: a feature read by
several tables, variable batches per key (``stride_per_key_per_rank``, ``inverse_indices``),
and what ``to_torchrec`` refuses because the EBC would compute it differently."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import (
    InputTypeError,
    InputValueError,
    KeyedBags,
    KeyedTensor,
    LookupCollection,
    LookupLinearError,
    StateDictError,
    TableConfig,
    check_equivalence,
    optim,
)

torchrec = pytest.importorskip("torchrec")
KJT = torchrec.KeyedJaggedTensor


def _ebc(tables: list[tuple[str, int, int, list[str]]], *, is_weighted: bool = False,
         mean: tuple[str, ...] = (), **config: Any) -> torchrec.EmbeddingBagCollection:
    """The EBC of ``tables`` (``mean``: the names of its mean tables; ``config``: more
    ``EmbeddingBagConfig`` arguments, every table's)."""
    torch.manual_seed(0)
    return torchrec.EmbeddingBagCollection(tables=[
        torchrec.EmbeddingBagConfig(
            name=name, num_embeddings=rows, embedding_dim=dim, feature_names=feats,
            pooling=torchrec.PoolingType.MEAN if name in mean else torchrec.PoolingType.SUM,
            **config)
        for name, rows, dim, feats in tables], is_weighted=is_weighted)


#: the tables of the mean tests: a mean width with a sum table, a mean width alone, f1 shared
MEAN_TABLES = [("t1", 50, 4, ["f1", "f2"]), ("t2", 40, 4, ["f3", "f1"]), ("t3", 30, 8, ["f4"])]


def _mean_batch(gen: torch.Generator) -> KeyedBags:
    """64 bags of 0 to 8 IDs per feature of :data:`MEAN_TABLES` (empty bags among them)."""
    return KeyedBags.from_dict({
        f: [torch.randint(0, rows, (int(torch.randint(0, 9, (), generator=gen)),),
                          generator=gen).tolist() for _ in range(64)]
        for f, rows in [("f1", 40), ("f2", 50), ("f3", 40), ("f4", 30)]})


def _table_grads(col: LookupCollection) -> dict[str, torch.Tensor]:
    out = {}
    for name, (g, off, cfg) in col._places.items():
        grad = col.table_groups[g].grad
        out[name] = grad.to_dense()[off:off + cfg.num_embeddings]
    return out


def _assert_equal_to_ebc(col: LookupCollection, ebc, kb: KeyedBags, kjt) -> None:
    """Same keys, lengths per key, values, and gradients of every table (a random upstream
    gradient), the collection on ``kb``, the EBC on ``kjt``; and the dense reference."""
    ours, theirs = col(kb), ebc(kjt)
    assert ours.keys() == theirs.keys()
    assert ours.length_per_key() == theirs.length_per_key()
    torch.testing.assert_close(ours.values(), theirs.values())
    upstream = torch.randn(theirs.values().shape, generator=torch.Generator().manual_seed(1))
    col.zero_grad()
    ebc.zero_grad()
    (ours.values() * upstream).sum().backward()
    (theirs.values() * upstream).sum().backward()
    grads = _table_grads(col)
    for name, bag in ebc.embedding_bags.items():
        want = bag.weight.grad if bag.weight.grad is not None else torch.zeros_like(bag.weight)
        torch.testing.assert_close(grads[name], want, msg=f"table {name}")
    report = check_equivalence(col, kb)
    assert report.ok, str(report)


def test_a_kjt_call_ported_positionally_is_refused() -> None:
    """``KeyedJaggedTensor(keys, values, weights, lengths)`` takes the weights third: the
    same call on ``KeyedBags`` is refused, never read with the lengths as offsets."""
    keys, values = ["a", "b"], torch.tensor([1, 2, 3])
    lengths = torch.tensor([0, 1, 2, 0])
    kjt = torchrec.KeyedJaggedTensor(keys, values, None, lengths)
    assert kjt.lengths().tolist() == [0, 1, 2, 0]
    with pytest.raises(TypeError, match="positional"):
        KeyedBags(keys, values, None, lengths)
    kb = KeyedBags(keys, values, lengths=lengths)
    assert torch.equal(KeyedBags.from_kjt(kjt).offsets, kb.offsets)


def test_from_kjt_off_the_cpu_keeps_torchrecs_offset_per_key() -> None:
    """A ``KeyedJaggedTensor`` off the CPU that holds its ``offset_per_key`` on the host gives a
    batch whose keys slice without reading offsets back (the meta device has none to read),
    with the CPU's slices; one without it reads them, as TorchRec's own split."""
    kjt = KJT.from_lengths_sync(keys=["a", "b"], values=torch.tensor([1, 2, 3, 4, 5]),
                                lengths=torch.tensor([2, 0, 1, 2]))
    assert kjt.offset_per_key() == [0, 2, 5]  # computed on the CPU, kept by .to()
    kb = KeyedBags.from_kjt(kjt.to(torch.device("meta")))
    col = LookupCollection([TableConfig("a", 10, 4, ["a"], mode="mean"),
                            TableConfig("b", 7, 3, ["b"])], device="meta")
    assert col(kb).values().shape == (2, 7)
    cpu = KeyedBags.from_kjt(kjt)
    for key in ("a", "b"):
        assert (kb[key].nnz, len(kb[key])) == (cpu[key].nnz, len(cpu[key]))
    # and back: the KeyedJaggedTensor of a moved batch holds them, as TorchRec's .to() keeps
    assert kb.offset_per_key() == cpu.offset_per_key() == [0, 2, 5]
    assert cpu.to("meta").to_kjt().offset_per_key_or_none() == [0, 2, 5]
    bare = KJT(keys=["a", "b"], values=torch.tensor([1, 2, 3, 4, 5], device="meta"),
               lengths=torch.tensor([2, 0, 1, 2], device="meta"))
    assert bare.offset_per_key_or_none() is None
    with pytest.raises(RuntimeError, match="meta"):
        KeyedBags.from_kjt(bare)["b"]


# ---------------------------------------------------------------------- shared features
@pytest.mark.parametrize("sparse", [False, True])
def test_shared_features_equal_torchrec(sparse):
    """TorchRec's ``test_shared_features``: f1 read by t1 (dim 3) and t2 (dim 4) gives outputs
    f1@t1, f1@t2 at [0, 3, 7), equal in values and table gradients, through a KJT and
    through the collection's own KeyedBags; the conversions both ways keep it."""
    ebc = _ebc([("t1", 10, 3, ["f1"]), ("t2", 10, 4, ["f1"])])
    kjt = KJT.from_offsets_sync(keys=["f1"], values=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]),
                                offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    assert col.feature_names == ["f1"] and col.embedding_names == ["f1@t1", "f1@t2"]
    assert col(KeyedBags.from_kjt(kjt)).values().shape == (6, 7)
    _assert_equal_to_ebc(col, ebc, KeyedBags.from_kjt(kjt), kjt)
    # the collection's own batch, built from lists, and the EBC converted back
    kb = KeyedBags.from_dict({"f1": [[0, 1], [], [2], [3], [4], [5, 6, 7]]})
    again = col.to_torchrec()
    _assert_equal_to_ebc(col, again, kb, kb.to_kjt())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_shared_and_plain_features_mixed_equal_torchrec(weighted, sparse):
    """A shared feature beside plain ones, in tables of one width (one group: the plan's
    (feature, table) pairs) and of another width, sum and mean tables, weighted batches."""
    tables = [("t1", 10, 3, ["f1", "f2"]), ("t2", 12, 4, ["f3", "f1"]), ("t3", 9, 3, ["f1"])]
    ebc = _ebc(tables, is_weighted=weighted, mean=() if weighted else ("t3",))
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    assert col.embedding_names == ["f1@t1", "f2", "f3", "f1@t2", "f1@t3"]
    gen = torch.Generator().manual_seed(0)
    feats = {"f2": [[1], [2, 2], []], "f1": [[0, 8, 3], [], [5]], "f3": [[11], [4], [0, 1]]}
    kb = KeyedBags.from_dict(feats)
    if weighted:
        kb = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel(), generator=gen))
    _assert_equal_to_ebc(col, ebc, kb, kb.to_kjt())
    # unpooled lookups and the quantized copy key the outputs as the pooled ones
    ids = torch.tensor([[1, 2], [3, 4]])
    unpooled = col({"f1": ids, "f2": ids})
    assert list(unpooled) == ["f1@t1", "f2", "f1@t2", "f1@t3"]  # embedding_names' order
    torch.testing.assert_close(unpooled["f1@t2"], col["t2"].weight[ids])
    q = col.quantize("float16")
    assert q(kb).keys() == col.embedding_names
    torch.testing.assert_close(q(kb).values(), col(kb).values().detach(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("sparse", [False, True])
def test_mean_tables_pool_as_torchrec_to_the_bit(sparse):
    """An unweighted batch's mean tables (in a group with a sum table, alone in another
    width, a shared feature, empty bags) pool as the EBC's ``nn.EmbeddingBag(mode="mean")``
    does, to the bit: the sums divided by the bag sizes, not a weighted sum of folded factors;
    the gradients within rounding (the EBC adds each feature's gradient apart)."""
    ebc = _ebc(MEAN_TABLES, mean=("t1", "t3"))
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    kb = _mean_batch(torch.Generator().manual_seed(0))
    ours, theirs = col(kb), ebc(kb.to_kjt())
    keys = ours.keys()
    assert keys == theirs.keys()
    for key in keys:
        assert torch.equal(ours[key], theirs[key]), key
    _assert_equal_to_ebc(col, ebc, kb, kb.to_kjt())


@pytest.mark.parametrize("sparse", [False, True])
def test_float16_mean_tables_pool_as_torchrec_to_the_bit(sparse):
    """float16 mean tables (alone in a width, beside a sum table, a shared feature) pool as
    the EBC's half ``nn.EmbeddingBag(mode="mean")``: the half sums divided by the bag sizes, to
    the bit (not each entry scaled by a half 1/size first); the gradients within rounding (the
    EBC adds each feature's gradient apart)."""
    ebc = _ebc(MEAN_TABLES, mean=("t1", "t3"), data_type=torchrec.DataType.FP16)
    with torch.no_grad():  # values whose means round differently when each entry is scaled
        for bag in ebc.embedding_bags.values():
            bag.weight.mul_(30)
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    gen = torch.Generator().manual_seed(0)
    kb = _mean_batch(gen)
    ours, theirs = col(kb), ebc(kb.to_kjt())
    assert ours.values().dtype == theirs.values().dtype
    assert ours.keys() == theirs.keys()
    for key in ours.keys():  # noqa: SIM118 (a list, not a dict)
        assert torch.equal(ours[key], theirs[key]), key
    upstream = torch.randn(theirs.values().shape, generator=gen, dtype=theirs.values().dtype)
    (ours.values() * upstream).sum().backward()
    (theirs.values() * upstream).sum().backward()
    grads = _table_grads(col)
    for name, bag in ebc.embedding_bags.items():  # within a float16 step of the largest
        torch.testing.assert_close(grads[name].float(), bag.weight.grad.float(), rtol=1e-3,
                                   atol=1e-2, msg=f"table {name}")


@pytest.mark.parametrize("keys", [["f1", "f2", "f3"], ["f3", "f2", "f1"]])
def test_float16_sparse_tables_weights_needing_grad_equal_torchrec(keys):
    """float16 tables with ``sparse=True`` and per-entry weights that need their gradient,
    several features in one parameter (a batch in the tables' feature order or not): one
    row-sparse gradient per parameter (PyTorch's CPU sparse add has no float16 kernel, so
    autograd could not add one per feature), the outputs the EBC's to the bit, the weights'
    and tables' gradients within rounding."""
    ebc = _ebc([("t1", 10, 3, ["f1", "f2"]), ("t2", 10, 3, ["f3"])], is_weighted=True,
               data_type=torchrec.DataType.FP16)
    col = LookupCollection.from_torchrec(ebc, sparse=True)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 4, (3 * 5,), generator=gen)
    values = torch.randint(0, 10, (int(lengths.sum()),), generator=gen)
    both = torch.rand(values.numel(), generator=gen).half()
    theirs_w, ours_w = both.clone().requires_grad_(), both.clone().requires_grad_()
    ours = col(KeyedBags(keys, values, lengths=lengths, weights=ours_w))
    theirs = ebc(KJT(keys=keys, values=values, lengths=lengths, weights=theirs_w))
    assert ours.keys() == theirs.keys()
    for key in ours.keys():  # noqa: SIM118 (a list, not a dict)
        assert torch.equal(ours[key], theirs[key]), key
    upstream = torch.randn(theirs.values().shape, generator=gen)
    (ours.values() * upstream).sum().backward()
    (theirs.values() * upstream).sum().backward()
    assert ours_w.grad is not None and theirs_w.grad is not None
    torch.testing.assert_close(ours_w.grad.float(), theirs_w.grad.float(), rtol=1e-3, atol=1e-2)
    grads = _table_grads(col)
    for name, bag in ebc.embedding_bags.items():
        torch.testing.assert_close(grads[name].float(), bag.weight.grad.float(), rtol=1e-3,
                                   atol=1e-2, msg=f"table {name}")


def test_shared_feature_names_and_refusals():
    """An output is named by table only where the feature is shared; a feature listed
    twice in one table is refused, and a shared feature names no single table."""
    col = LookupCollection([TableConfig("a", 5, 2, ["x", "y"]), TableConfig("b", 5, 3, ["x"])])
    assert col.embedding_names == ["x@a", "y", "x@b"]
    assert col.table_of("x@b") is not None and col.table_of("y").out_features == 2
    with pytest.raises(KeyError, match=r"read by several tables, as \['x@a', 'x@b'\]"):
        col.table_of("x")
    with pytest.raises(InputValueError, match="lists feature 'x' twice"):
        LookupCollection([TableConfig("a", 5, 2, ["x", "x"])])
    kb = KeyedBags.from_dict({"y": [[1]], "z": [[0]]})
    with pytest.raises(InputValueError, match=r"no feature \['x'\]"):
        col(kb)


# ---------------------------------------------------------------------- variable batches
def _vbe_cases():
    """TorchRec's variable-batch KJTs (``test_key_lookup_vb`` / ``test_pytree_kjt`` of its
    KeyedJaggedTensor tests): keys of 2 and 4 bags expanded to 3 or 4 examples, and one
    stride for both keys expanded to 3."""
    values = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
    offsets = torch.IntTensor([0, 2, 2, 3, 4, 5, 8])
    weights = torch.tensor([1.0, 0.5, 1.5, 1.0, 0.5, 1.0, 1.0, 1.5])
    keys = ["index_0", "index_1"]
    return {
        "pytree": KJT(values=values, keys=keys, offsets=offsets, weights=weights,
                      stride_per_key_per_rank=[[2], [4]],
                      inverse_indices=(keys, torch.tensor([[0, 1, 0], [0, 0, 0]]))),
        "key_lookup": KJT(keys=keys, values=torch.tensor([0, 1, 2, 3, 4, 5]),
                          lengths=torch.tensor([2, 0, 1, 1, 1, 1]),
                          stride_per_key_per_rank=[[2], [4]],
                          inverse_indices=(keys, torch.tensor([[0, 1, 1, 0], [0, 1, 2, 3]]))),
        "one_stride": KJT(keys=["index_1", "index_0"], values=torch.arange(4),
                          lengths=torch.tensor([1, 1, 1, 1]),
                          stride_per_key_per_rank=[[2], [2]],
                          inverse_indices=(keys, torch.tensor([[0, 1, 1], [0, 1, 0]]))),
    }


@pytest.mark.parametrize("case", ["pytree", "key_lookup", "one_stride"])
@pytest.mark.parametrize("sparse", [False, True])
def test_variable_batches_equal_torchrec(case, sparse):
    """TorchRec's VBE KJTs through from_kjt, the collection and to_kjt: the outputs expanded
    to the full batch per key as its EBC expands them, with its table gradients."""
    kjt = _vbe_cases()[case]
    weighted = kjt.weights_or_none() is not None
    ebc = _ebc([("t0", 10, 3, ["index_0"]), ("t1", 10, 2, ["index_1", "index_0"])],
               is_weighted=weighted)
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    kb = KeyedBags.from_kjt(kjt)
    assert kb.batch_size == kjt.stride() and kb.stride_per_key() == kjt.stride_per_key()
    back = kb.to_kjt()
    assert back.stride_per_key_per_rank() == kjt.stride_per_key_per_rank()
    assert back.inverse_indices()[0] == kjt.keys()
    _assert_equal_to_ebc(col, ebc, kb, kjt)
    _assert_equal_to_ebc(col, ebc, kb, back)
    # the same batch of N bags per key gives the same outputs
    torch.testing.assert_close(col(kb.full_batch()).values(), col(kb).values())


def test_variable_batch_without_inverse_indices_is_refused():
    """Keys of 2 and 4 bags and no inverse_indices: TorchRec's EBC fails putting (2, d) and
    (4, d) side by side; the collection refuses naming the fix, and the batch still
    converts both ways."""
    kjt = KJT(keys=["index_0", "index_1"], values=torch.tensor([0, 1, 2, 3, 4, 5]),
              lengths=torch.tensor([2, 0, 1, 1, 1, 1]), stride_per_key_per_rank=[[2], [4]])
    ebc = _ebc([("t0", 10, 3, ["index_0"]), ("t1", 10, 2, ["index_1"])])
    col = LookupCollection.from_torchrec(ebc)
    kb = KeyedBags.from_kjt(kjt)
    assert kb.to_kjt().stride_per_key_per_rank() == [[2], [4]]
    with pytest.raises(RuntimeError):
        ebc(kjt)
    with pytest.raises(InputValueError, match=r"stride_per_key \[2, 4\].*Give inverse_indices="):
        col(kb)
    with pytest.raises(InputValueError, match="no inverse_indices"):
        kb.full_batch()
    with pytest.raises(InputValueError, match="no inverse_indices"):
        kb[[0]]


@settings(max_examples=20, deadline=None)
@given(data=st.data(), weighted=st.booleans(), ranks=st.integers(1, 2), sparse=st.booleans())
def test_any_variable_batch_equals_torchrec(data, weighted, ranks, sparse):
    """Random strides per key and rank, bags, inverse_indices (rows in any key order), a
    shared feature: the collection equals TorchRec's EBC, values and table gradients."""
    keys = ["a", "b", "c"]
    strides = [[data.draw(st.integers(1, 3)) for _ in range(ranks)] for _ in keys]
    per_key = [sum(r) for r in strides]
    lengths = data.draw(st.lists(st.integers(0, 3), min_size=sum(per_key),
                                 max_size=sum(per_key)))
    nnz = sum(lengths)
    n = data.draw(st.integers(1, 5))
    order = data.draw(st.permutations(keys))
    inverse = torch.stack([torch.tensor(data.draw(st.lists(
        st.integers(0, per_key[keys.index(k)] - 1), min_size=n, max_size=n)),
        dtype=torch.long) for k in order]).reshape(len(keys), n)
    kjt = KJT(keys=keys, values=torch.randint(0, 7, (nnz,)),
              lengths=torch.tensor(lengths, dtype=torch.long),
              weights=torch.rand(nnz) if weighted else None,
              stride_per_key_per_rank=strides, inverse_indices=(list(order), inverse))
    ebc = _ebc([("t0", 7, 3, ["a", "c"]), ("t1", 7, 2, ["b", "a"])], is_weighted=weighted)
    col = LookupCollection.from_torchrec(ebc, sparse=sparse)
    kb = KeyedBags.from_kjt(kjt)
    assert kb.batch_size == n
    _assert_equal_to_ebc(col, ebc, kb, kjt)


def test_variable_batch_with_inverse_rows_only_for_the_keys_read_equals_torchrec():
    """inverse_indices with rows only for the keys the EBC reads (a key "extra" no table reads
    has none): pooled as TorchRec's EBC pools it, the rows kept by name both ways; a collection
    that reads a key without a row, and full_batch, refuse the batch naming the key."""
    kjt = KJT(keys=["f1", "f2", "extra"], values=torch.tensor([1, 2, 3, 4, 5]),
              lengths=torch.tensor([2, 1, 1, 1]), stride_per_key_per_rank=[[1], [2], [1]],
              inverse_indices=(["f2", "f1"], torch.tensor([[1, 0, 1], [0, 0, 0]])))
    ebc = _ebc([("t", 10, 3, ["f1", "f2"])])
    col = LookupCollection.from_torchrec(ebc)
    kb = KeyedBags.from_kjt(kjt)
    assert kb.inverse_keys == ["f1", "f2"] and kb.batch_size == 3
    assert kb.inverse_indices.tolist() == [[0, 0, 0], [1, 0, 1]]
    _assert_equal_to_ebc(col, ebc, kb, kjt)
    back = kb.to_kjt()
    assert back.inverse_indices()[0] == ["f1", "f2"]
    assert torch.equal(back.inverse_indices()[1], kb.inverse_indices)
    for moved in (kb[[2, 0]], kb.to("meta"), kb.unweighted(),
                  torch.utils._pytree.tree_unflatten(*torch.utils._pytree.tree_flatten(kb))):
        assert moved.inverse_keys == ["f1", "f2"]
    same = KeyedBags(kb.keys(), kb.values, lengths=kb.lengths(),
                     stride_per_key_per_rank=[[1], [2], [1]],
                     inverse_indices=(["f2", "f1"], torch.tensor([[1, 0, 1], [0, 0, 0]])))
    assert same.inverse_keys == ["f1", "f2"] and torch.equal(col(same).values(),
                                                             col(kb).values())
    reads_extra = LookupCollection([TableConfig("t", 10, 3, ["f1", "extra"])])
    with pytest.raises(InputValueError, match=r"rows for keys \['f1', 'f2'\], none for "
                                              r"\['extra'\], which the tables read"):
        reads_extra(kb)
    with pytest.raises(InputValueError, match=r"no row for keys \['extra'\]"):
        kb.full_batch()
    with pytest.raises(InputValueError, match=r"\['nope'\] are not keys"):
        KeyedBags(["a"], torch.arange(2), lengths=torch.tensor([2]),
                  inverse_indices=(["nope"], torch.tensor([[0]])))


def test_variable_batch_keyed_bags():
    """The KeyedBags of a variable batch: checked when built, rows picked through
    inverse_indices, moved and unweighted with them, refused by cat, a pytree node."""
    kb = KeyedBags(["u", "i"], torch.tensor([3, 1, 7, 7, 2]), lengths=torch.tensor([2, 3, 0]),
                   weights=torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]),
                   stride_per_key_per_rank=[[1], [2]],
                   inverse_indices=torch.tensor([[0, 0, 0], [1, 0, 1]]))
    assert kb["u"].lengths().tolist() == [2] and kb["i"].lengths().tolist() == [3, 0]
    full = kb.full_batch()
    assert full.batch_size == 3 and full.lengths().tolist() == [2, 2, 2, 0, 3, 0]
    assert full.weights.tolist() == [1.0, 2.0] * 3 + [3.0, 4.0, 5.0]
    picked = kb[[2, 1]]
    assert picked.inverse_indices.tolist() == [[0, 0], [1, 0]]
    assert torch.equal(picked.full_batch().values, full[[2, 1]].values)
    assert kb.unweighted().inverse_indices is kb.inverse_indices
    assert kb.to("meta").full_batch is not None and kb.to("meta").stride_per_key() == [1, 2]
    leaves, spec = torch.utils._pytree.tree_flatten(kb)
    again = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert again.stride_per_key() == [1, 2] and torch.equal(again.inverse_indices,
                                                            kb.inverse_indices)
    with pytest.raises(InputValueError, match="full_batch"):
        KeyedBags.cat([kb, kb])
    with pytest.raises(InputValueError, match=r"says 4 bags, but lengths .* give 3"):
        KeyedBags(["u", "i"], torch.arange(5), lengths=torch.tensor([2, 3, 0]),
                  stride_per_key_per_rank=[[2], [2]])
    with pytest.raises(InputValueError, match=r"inverse_indices\[1\] \(key 'i'\) must name "
                                              r"bags in \[0, 2\), the key's bags, got values "
                                              r"in \[0, 2\]"):
        KeyedBags(["u", "i"], torch.arange(5), lengths=torch.tensor([2, 3, 0]),
                  stride_per_key_per_rank=[[1], [2]], inverse_indices=[[0, 0], [2, 0]])
    with pytest.raises(InputValueError, match=r"shape \(F, N\) = \(2, N\)"):
        KeyedBags(["u", "i"], torch.arange(5), lengths=torch.tensor([2, 3, 0]),
                  stride_per_key_per_rank=[[1], [2]], inverse_indices=[0, 0])


# ---------------------------------------------------------------------- to_torchrec refusals
def test_to_torchrec_refuses_an_unchosen_is_weighted():
    """A collection with is_weighted=None reads weights when a batch has them; no EBC does.
    The EBC made with TorchRec's default would differ on weighted batches, silently: refused,
    naming the choice, which then gives an EBC equal on its batches."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 10, 4, ["user"]),
                            TableConfig("item", 8, 3, ["item"])])
    with pytest.raises(LookupLinearError, match=r"is_weighted=None.*to_torchrec\(is_weighted="
                                                r"True\) for weighted batches") as info:
        col.to_torchrec()
    assert isinstance(info.value, ValueError)
    kb = KeyedBags(["user", "item"], torch.tensor([3, 1, 4, 7, 2]),
                   lengths=torch.tensor([1, 2, 2, 0]),
                   weights=torch.tensor([0.5, 2.0, 1.5, 3.0, 0.1]))
    torch.testing.assert_close(col.to_torchrec(is_weighted=True)(kb.to_kjt()).values(),
                               col(kb).values())
    plain = kb.unweighted()
    torch.testing.assert_close(col.to_torchrec(is_weighted=False)(plain.to_kjt()).values(),
                               col(plain).values())
    fixed = LookupCollection(col.tables, is_weighted=False)
    with pytest.raises(InputValueError, match=r"to_torchrec\(is_weighted=True\): the collection "
                                              r"has is_weighted=False.*Call to_torchrec\(\)"):
        fixed.to_torchrec(is_weighted=True)
    assert fixed.to_torchrec().is_weighted() is False


@pytest.mark.parametrize("is_weighted", [True, None])
def test_to_torchrec_refuses_mean_with_weights(is_weighted):
    """A weighted EBC with a MEAN table raises NotImplementedError on every weighted batch
    (nn.EmbeddingBag has no weights with mean): refused when converting, naming the fix."""
    col = LookupCollection([TableConfig("user", 10, 4, ["user"]),
                            TableConfig("item", 8, 3, ["item"], mode="mean")],
                           is_weighted=is_weighted)
    with pytest.raises(InputValueError, match=r"tables \['item'\] have mode='mean'.*"
                                              r"NotImplementedError.*mode='sum'"):
        col.to_torchrec(is_weighted=True if is_weighted is None else None)
    unweighted = col.to_torchrec(is_weighted=False) if is_weighted is None else None
    if unweighted is not None:
        kb = KeyedBags.from_dict({"user": [[1]], "item": [[2, 3]]})
        torch.testing.assert_close(unweighted(kb.to_kjt()).values(), col(kb).values())


def test_from_torchrec_refuses_mean_in_a_weighted_ebc():
    """The EBC fails on every weighted batch there (PyTorch: weights only with sum), so a
    collection that computed a weighted mean would have no result to equal: refused."""
    ebc = _ebc([("user", 10, 4, ["user"]), ("item", 8, 3, ["item"])], is_weighted=True,
               mean=("item",))
    with pytest.raises(InputValueError, match=r"table 'item' pools with MEAN in a weighted.*"
                                              r"is_weighted=False"):
        LookupCollection.from_torchrec(ebc)
    plain = _ebc([("user", 10, 4, ["user"]), ("item", 8, 3, ["item"])], mean=("item",))
    assert LookupCollection.from_torchrec(plain).tables[1].mode == "mean"


@pytest.mark.parametrize("one_id", [True, False])
def test_shared_features_take_the_batched_path(one_id, monkeypatch):
    """A batch of the plan's features, one read by several tables of two widths: taken once
    per (feature, table) pair by the one-kernel lookup (not group by group), equal to
    TorchRec's EBC, and an ID outside a table is refused naming its feature."""
    from lookuplinear import LookupIndexError
    from lookuplinear.modules.batched import BatchedLookup

    ebc = _ebc([("t1", 10, 3, ["f1", "f2"]), ("t2", 10, 4, ["f1"]), ("t3", 6, 3, ["f3"])])
    col = LookupCollection.from_torchrec(ebc, sparse=True)
    bags = {"f1": [[1], [9], [0]], "f2": [[2], [2], [5]], "f3": [[5], [0], [3]]}
    if not one_id:
        bags["f1"] = [[1, 9], [], [0, 0, 4]]
    kb = KeyedBags.from_dict(bags)

    def refused(*args, **kwargs):
        raise AssertionError("the batch went group by group")

    monkeypatch.setattr(BatchedLookup, "_per_group", refused)
    _assert_equal_to_ebc(col, ebc, kb, kb.to_kjt())
    monkeypatch.undo()
    bad = KeyedBags.from_dict({**bags, "f3": [[5], [6], [3]]})
    with pytest.raises(LookupIndexError, match=r"kb\['f3'\]"):
        col(bad)
    with pytest.raises(LookupIndexError, match=r"kb\['f1'\]\[1\].*in_features=10"):
        col(KeyedBags.from_dict({**bags, "f1": [[1], [10], [0]]}))


# ---------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unpooled_rows_are_float32_as_torchrecs_embedding_collection(dtype):
    """A {feature: index tensor} lookup of a float16/bfloat16 table gives float32 rows, as
    TorchRec's EmbeddingCollection."""
    data_type = {torch.float16: torchrec.DataType.FP16,
                 torch.bfloat16: torchrec.DataType.BF16}[dtype]
    torch.manual_seed(0)
    ec = torchrec.EmbeddingCollection(tables=[
        torchrec.EmbeddingConfig(name="t1", num_embeddings=10, embedding_dim=4,
                                 feature_names=["f1", "f2"], data_type=data_type),
        torchrec.EmbeddingConfig(name="t2", num_embeddings=10, embedding_dim=4,
                                 feature_names=["f3"])])
    col = LookupCollection([TableConfig("t1", 10, 4, ["f1", "f2"], dtype=dtype),
                            TableConfig("t2", 10, 4, ["f3"])])
    col.load_state_dict({k.replace("embeddings.", "embedding_bags."): v
                         for k, v in ec.state_dict().items()})
    with torch.no_grad():  # TorchRec's unsharded BF16 table is not bfloat16: the same values
        ec.embeddings["t1"].weight.copy_(col.state_dict()["embedding_bags.t1.weight"])
    kjt = KJT.from_lengths_sync(keys=["f1", "f2", "f3"], values=torch.tensor([1, 2, 3, 4, 5]),
                                lengths=torch.tensor([2, 1, 0, 1, 1, 0]))
    want = ec(kjt)
    kb = KeyedBags.from_kjt(kjt)
    got = col({f: kb[f].indices for f in kb.keys()})  # noqa: SIM118 (a list, not a dict)
    for key, rows in got.items():
        assert rows.dtype == want[key].values().dtype == torch.float32
        assert torch.equal(rows, want[key].values())

def test_unpooled_outputs_are_ordered_as_torchrecs_embedding_collection():
    """A {feature: index tensor} lookup returns its outputs in ``embedding_names`` order (table
    after table, a shared feature's under each table), as TorchRec's EmbeddingCollection orders
    its dict, whatever order the input's keys come in."""
    torch.manual_seed(0)
    configs = [torchrec.EmbeddingConfig(name="t1", num_embeddings=10, embedding_dim=3,
                                        feature_names=["f2", "f1"]),
               torchrec.EmbeddingConfig(name="t2", num_embeddings=7, embedding_dim=3,
                                        feature_names=["f3", "f1"])]
    ec = torchrec.EmbeddingCollection(tables=configs)
    col = LookupCollection([TableConfig(c.name, c.num_embeddings, c.embedding_dim,
                                        list(c.feature_names)) for c in configs])
    col.load_state_dict({k.replace("embeddings.", "embedding_bags.", 1): v
                         for k, v in ec.state_dict().items()})
    kjt = KJT.from_lengths_sync(keys=["f1", "f2", "f3"],
                                values=torch.tensor([1, 2, 3, 4, 5, 6, 0, 1, 2, 3]),
                                lengths=torch.tensor([2, 1, 0, 1, 3, 3]))
    want = ec(kjt)
    got = col({f: jt.values() for f, jt in kjt.to_dict().items()})
    assert list(got) == list(want) == col.embedding_names
    for key in want:
        assert torch.equal(got[key], want[key].values()), key


@pytest.mark.parametrize("fused", [None, False, True])
def test_float16_sparse_unpooled_lookups_equal_torchrecs_embedding_collection(fused):
    """A {feature: index tensor} lookup of float16 tables of one width with ``sparse=True`` (two
    tables, one read by two features: one parameter) trains as TorchRec's EmbeddingCollection:
    one row-sparse gradient per parameter (PyTorch's CPU sparse add has no float16 kernel, so
    autograd could not add one per lookup), the rows the EC's to the bit, the tables'
    gradients, and an SGD step (fused or not), within float16 rounding of the EC's."""
    torch.manual_seed(0)
    ec = torchrec.EmbeddingCollection(tables=[
        torchrec.EmbeddingConfig(name=name, num_embeddings=10, embedding_dim=3,
                                 feature_names=feats, data_type=torchrec.DataType.FP16)
        for name, feats in [("t1", ["f1", "f3"]), ("t2", ["f2"])]])
    col = LookupCollection([TableConfig("t1", 10, 3, ["f1", "f3"], dtype=torch.float16),
                            TableConfig("t2", 10, 3, ["f2"], dtype=torch.float16)], sparse=True)
    col.load_state_dict({k.replace("embeddings.", "embedding_bags.", 1): v
                         for k, v in ec.state_dict().items()})
    ours = None if fused is None else optim.SGD(col.parameters(), lr=0.5, fused=fused)
    theirs = torch.optim.SGD(ec.parameters(), lr=0.5)
    kjt = KJT.from_lengths_sync(keys=["f1", "f2", "f3"],
                                values=torch.tensor([1, 2, 3, 4, 1, 0, 9, 2]),
                                lengths=torch.tensor([2, 1, 1, 1, 2, 1]))
    want = ec(kjt)
    got = col({f: jt.values() for f, jt in kjt.to_dict().items()})
    assert list(got) == list(want)
    for key in want:
        assert torch.equal(got[key], want[key].values()), key
    upstream = {k: torch.randn(v.values().shape, generator=torch.Generator().manual_seed(i))
                for i, (k, v) in enumerate(want.items())}
    sum((got[k] * u).sum() for k, u in upstream.items()).backward()
    sum((want[k].values() * u).sum() for k, u in upstream.items()).backward()
    if ours is None:
        for name, grad in _table_grads(col).items():
            torch.testing.assert_close(grad.float(), ec.embeddings[name].weight.grad.float(),
                                       rtol=1e-3, atol=1e-2, msg=name)
        return
    ours.step()
    theirs.step()
    for name in ("t1", "t2"):
        torch.testing.assert_close(col[name].weight.detach().float(),
                                   ec.embeddings[name].weight.detach().float(),
                                   rtol=1e-3, atol=1e-2, msg=name)


def test_to_torchrec_refuses_float16_tables_with_weights():
    """A weighted EBC with a float16 table fails on every weighted batch (nn.EmbeddingBag takes
    weights only in the table's dtype): refused when converting, naming the fix."""
    col = LookupCollection([TableConfig("t", 10, 4, ["f"], dtype=torch.float16),
                            TableConfig("u", 10, 4, ["g"])], is_weighted=True)
    kjt = KJT.from_lengths_sync(keys=["f", "g"], values=torch.tensor([1, 2, 3, 4]),
                                lengths=torch.tensor([2, 0, 1, 1]),
                                weights=torch.tensor([0.5, 2.0, 1.5, 3.0]))
    with pytest.raises(InputValueError, match=r"tables \['t'\] are float16 and the EBC would "
                                              r"be weighted.*float32 tables.*is_weighted=False"):
        col.to_torchrec()
    plain = col.to_torchrec(is_weighted=False) if col.is_weighted is None else None
    assert plain is None
    col.float()
    torch.testing.assert_close(col.to_torchrec()(kjt).values(),
                               col(KeyedBags.from_kjt(kjt)).values())


# ---------------------------------------------------------------------- from_torchrec weights
@pytest.mark.parametrize("shape", [(1, 3), (3,), (5, 1), (4, 3), (5, 3, 1)])
def test_from_torchrec_refuses_a_state_dict_of_another_shape(shape):
    """A table of another shape is refused as TorchRec's load_state_dict refuses it ("size
    mismatch"), before anything is built: (1, 3), (3,) and (5, 1) would broadcast into the
    (5, 3) table, copies of one row or column."""
    ebc = _ebc([("t", 5, 3, ["f"]), ("u", 4, 2, ["g"])])
    good = ebc.state_dict()
    with pytest.raises(RuntimeError, match="size mismatch"):
        ebc.load_state_dict({**good, "embedding_bags.t.weight": torch.ones(shape)})
    with pytest.raises(StateDictError, match=r"size mismatch for embedding_bags\.t\.weight: "
                                             r"the state dict holds .*table 't' is \(5, 3\)"):
        LookupCollection.from_torchrec(
            ebc, state_dict={**good, "embedding_bags.t.weight": torch.ones(shape)})


def test_from_torchrec_names_a_missing_table():
    ebc = _ebc([("t", 5, 3, ["f"])])
    with pytest.raises(StateDictError, match=r"missing embedding_bags\.t\.weight.*'module\.'"):
        LookupCollection.from_torchrec(
            ebc, state_dict={"module.embedding_bags.t.weight": torch.ones(5, 3)})
    col = LookupCollection.from_torchrec(
        ebc, state_dict={"embedding_bags.t.weight": torch.full((5, 3), 2.0)})
    assert torch.equal(col.state_dict()["embedding_bags.t.weight"], torch.full((5, 3), 2.0))


@pytest.mark.parametrize("given", [torch.float32, torch.float64])
def test_from_torchrec_casts_a_state_dict_to_the_ebcs_table_dtypes(given):
    """A state dict in another dtype than the EBC's tables is cast to them, as the EBC's
    load_state_dict casts it: the collection equals the EBC that loaded it, and goes back."""
    from torchrec.types import DataType

    ebc = torchrec.EmbeddingBagCollection(tables=[
        torchrec.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name=name,
                                    feature_names=[name], data_type=data_type)
        for name, data_type in (("a", DataType.FP16), ("b", DataType.FP32))])
    torch.manual_seed(1)
    sd = {f"embedding_bags.{name}.weight": torch.randn(10, 4, dtype=given) for name in "ab"}
    ebc.load_state_dict(sd)
    col = LookupCollection.from_torchrec(ebc, state_dict=sd)
    assert [col[name].weight.dtype for name in "ab"] == [torch.float16, torch.float32]
    for name in "ab":
        assert torch.equal(col[name].weight, ebc.embedding_bags[name].weight)
    kb = KeyedBags.from_dict({"a": [[1, 2, 3], [4]], "b": [[5], [6, 7]]})
    assert torch.equal(col(kb).values(), ebc(kb.to_kjt()).values())
    back = col.to_torchrec()
    assert [t.data_type for t in back.embedding_bag_configs()] == [DataType.FP16, DataType.FP32]


def test_from_torchrec_refuses_an_embedding_collection():
    """An EmbeddingCollection (unpooled) is no EmbeddingBagCollection: named, with the way to
    build the collection whose dict lookups give its rows."""
    ec = torchrec.EmbeddingCollection(tables=[torchrec.EmbeddingConfig(
        name="t", num_embeddings=10, embedding_dim=4, feature_names=["a"])])
    with pytest.raises(InputTypeError, match=r"got EmbeddingCollection \(unpooled.*"
                                             r"'embeddings\.'.*'embedding_bags\.'"):
        LookupCollection.from_torchrec(ec)


@pytest.mark.parametrize("qdtype", [torch.qint8, torch.quint4x2])
def test_from_torchrec_refuses_a_quantized_ebc_naming_the_float_one(qdtype):
    """TorchRec's quantized EBC (torchrec.quant) holds packed uint8 rows: named, with the
    float EBC to pass instead, never read as a float table nor blamed on a size mismatch;
    its state dict, passed beside the float EBC, is refused for its dtype."""
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC

    ebc = _ebc([("t", 30, 8, ["f"])])
    ebc.qconfig = torch.ao.quantization.QConfig(
        activation=torch.ao.quantization.PlaceholderObserver.with_args(dtype=torch.float),
        weight=torch.ao.quantization.PlaceholderObserver.with_args(dtype=qdtype))
    qebc = QuantEBC.from_float(ebc)
    with pytest.raises(InputTypeError, match=r"got the quantized torchrec\.quant\..*"
                                             r"Pass the float EmbeddingBagCollection"):
        LookupCollection.from_torchrec(qebc)
    packed = qebc.state_dict()["embedding_bags.t.weight"]
    with pytest.raises(StateDictError, match=r"size mismatch"):
        LookupCollection.from_torchrec(ebc, state_dict={"embedding_bags.t.weight": packed})
    with pytest.raises(StateDictError, match=r"holds torch\.uint8 values, not a float table"):
        LookupCollection.from_torchrec(ebc, state_dict={
            "embedding_bags.t.weight": torch.zeros(30, 8, dtype=torch.uint8)})
    col = LookupCollection.from_torchrec(ebc)
    assert col.state_dict()["embedding_bags.t.weight"].dtype == torch.float32


def test_a_kjt_passed_directly_points_to_from_kjt():
    col = LookupCollection([TableConfig("t", 10, 3, ["a"])])
    kjt = KJT.from_lengths_sync(keys=["a"], values=torch.tensor([1, 2]),
                                lengths=torch.tensor([1, 1]))
    with pytest.raises(InputTypeError, match=r"got KeyedJaggedTensor\. Convert it with "
                                             r"KeyedBags\.from_kjt\(kjt\)"):
        col(kjt)
    torch.testing.assert_close(col(KeyedBags.from_kjt(kjt)).values(),
                               col.to_torchrec(is_weighted=False)(kjt).values())


# ---------------------------------------------------------------------- initialisation
def test_from_torchrec_keeps_each_tables_initialisation():
    """weight_init_min/max (and init_fn) carry over: reset_parameters draws within them, as
    the EBC's does; to_torchrec gives them back."""
    torch.manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(tables=[
        torchrec.EmbeddingBagConfig(name="t", num_embeddings=1000, embedding_dim=8,
                                    feature_names=["f"], weight_init_min=-0.01,
                                    weight_init_max=0.01),
        torchrec.EmbeddingBagConfig(name="u", num_embeddings=100, embedding_dim=4,
                                    feature_names=["g"],
                                    init_fn=lambda w: torch.nn.init.constant_(w, 0.5))])
    col = LookupCollection.from_torchrec(ebc)
    col.reset_parameters()
    t, u = col.state_dict()["embedding_bags.t.weight"], col.state_dict()["embedding_bags.u.weight"]
    assert t.abs().max() <= 0.01 and t.std() > 0.004  # uniform in [-0.01, 0.01]
    assert bool((u == 0.5).all())
    back = col.to_torchrec(is_weighted=False)
    config = back.embedding_bag_configs()[0]
    assert (config.get_weight_init_min(), config.get_weight_init_max()) == (-0.01, 0.01)
    back.reset_parameters()
    assert bool((back.embedding_bags["u"].weight == 0.5).all())
    assert back.embedding_bags["t"].weight.abs().max() <= 0.01


def test_to_torchrec_carries_each_tables_initialisation():
    """"linear" is uniform within +-1/sqrt(num_embeddings) (TorchRec's default bounds),
    "normal" nn.Embedding's N(0, 1), as the EBC's init_fn."""
    col = LookupCollection([TableConfig("lin", 400, 8, ["a"], init="linear"),
                            TableConfig("nor", 400, 8, ["b"], init="normal")])
    ebc = col.to_torchrec(is_weighted=False)
    lin = ebc.embedding_bag_configs()[0]
    assert (lin.get_weight_init_min(), lin.get_weight_init_max()) == (-0.05, 0.05)
    torch.manual_seed(0)
    ebc.reset_parameters()
    assert ebc.embedding_bags["lin"].weight.abs().max() <= 0.05
    assert ebc.embedding_bags["nor"].weight.abs().max() > 2  # a normal's tails
    torch.testing.assert_close(ebc.embedding_bags["nor"].weight.std().item(), 1.0, rtol=0.1,
                               atol=0)
    assert LookupCollection.from_torchrec(ebc).tables[1].init is torch.nn.init.normal_


# ---------------------------------------------------------------------- KeyedTensor
def _kts():
    ebc = _ebc([("t1", 10, 3, ["f1", "f2"]), ("t2", 12, 4, ["f3", "f1"])], mean=("t2",))
    col = LookupCollection.from_torchrec(ebc)
    kjt = KJT.from_lengths_sync(keys=["f2", "f1", "f3"],
                                values=torch.tensor([1, 2, 3, 5, 0, 0, 9, 8, 7, 6]),
                                lengths=torch.tensor([2, 1, 1, 0, 2, 4]))
    other = torchrec.KeyedTensor(["g"], [2], torch.arange(4.0).reshape(2, 2))
    return col(KeyedBags.from_kjt(kjt)), ebc(kjt), other


def test_keyed_tensor_has_torchrecs_offsets_and_key_dim():
    ours, theirs, _ = _kts()
    assert ours.offset_per_key() == theirs.offset_per_key() == [0, 3, 6, 10, 14]
    assert ours.key_dim() == theirs.key_dim() == 1


@pytest.mark.parametrize("groups", [[["f3", "f1@t1"], ["f2", "f1@t2"]],        # each key once
                                    [["f3", "f3"], ["g", "f1@t2", "f2"]],      # repeated
                                    [["g"], ["f1@t1"]]])                       # some keys
def test_keyed_tensor_regroup_equals_torchrecs(groups):
    """Our regroup and regroup_as_dict on our KeyedTensors equal TorchRec's on its own (of the
    same values), and TorchRec's regroup takes ours, one or several."""
    from torchrec.sparse.jagged_tensor import KeyedTensor as TorchRecKT

    ours, theirs, other = _kts()
    mine = KeyedTensor(other.keys(), other.length_per_key(), other.values())
    want = TorchRecKT.regroup([theirs, other], groups)
    for got in (KeyedTensor.regroup([ours, mine], groups),
                TorchRecKT.regroup([ours, mine], groups)):
        assert len(got) == len(want)
        for x, y in zip(got, want, strict=True):
            assert torch.equal(x, y)
    named = KeyedTensor.regroup_as_dict([ours, mine], groups, ["x", "y"])
    want_named = TorchRecKT.regroup_as_dict([theirs, other], groups, ["x", "y"])
    assert list(named) == list(want_named)
    assert all(torch.equal(named[k], want_named[k]) for k in named)


def test_keyed_tensor_regroup_of_empty_groups_gives_no_columns() -> None:
    """An empty group is ``(N, 0)`` (as TorchRec gives it beside other groups), also when every
    group is empty (TorchRec's ``torch.cat`` of no tensors raises), in the tensors' dtype."""
    ours, _, _ = _kts()
    n = ours.values().shape[0]
    for got in (KeyedTensor.regroup([ours], [[]]), KeyedTensor.regroup([ours], [["f2"], []])):
        assert got[-1].shape == (n, 0) and got[-1].dtype == ours.values().dtype


def test_keyed_tensor_regroup_refusals():
    ours, _, _ = _kts()
    with pytest.raises(InputValueError, match=r"no keyed tensor holds key 'nope'"):
        KeyedTensor.regroup([ours], [["f2", "nope"]])
    with pytest.raises(InputValueError, match=r"one name per group; got 1 keys"):
        KeyedTensor.regroup_as_dict([ours], [["f2"], ["f3"]], ["x"])


# ---------------------------------------------------------------------- torch.func
TORCH_FUNC_BATCHES = {
    "one-id": {"user": [[3], [1], [2]], "item": [[7], [0], [2]]},
    "bags": {"user": [[3], [1, 4], []], "item": [[7, 7, 2], [], [1]]},
}


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # torch's vmap
@pytest.mark.parametrize("batch", list(TORCH_FUNC_BATCHES))
@pytest.mark.parametrize("dims", [(4, 4), (4, 3)], ids=["one-group", "groups"])
@pytest.mark.parametrize(("mode", "weighted"), [("sum", False), ("sum", True),
                                                ("mean", False)])
@pytest.mark.parametrize("sparse", [False, True])
def test_torch_func_transforms_equal_torchrec(batch: str, dims: tuple[int, int], mode: str,
                                              weighted: bool, sparse: bool) -> None:
    """``torch.func.grad`` and ``vjp`` over ``functional_call`` give the output and every
    table's gradient of TorchRec's EBC (which takes them), one group or several, one ID a bag
    or bags; ``vmap`` over a batch of parameters gives each one's eager output. While a
    transform is active the outputs are put in feature order by torch ops (the transform sees
    through them, not through the operators' C++ autograd)."""
    from torch.func import functional_call, grad, vjp, vmap

    col = LookupCollection([TableConfig("user", 10, dims[0], ["user"], mode=mode),
                            TableConfig("item", 8, dims[1], ["item"], mode=mode)],
                           sparse=sparse, is_weighted=weighted)
    ebc = col.to_torchrec()
    kb = KeyedBags.from_dict(TORCH_FUNC_BATCHES[batch])
    if weighted:
        kb = KeyedBags(kb.keys(), kb.values, offsets=kb.offsets,
                       weights=torch.rand(kb.values.numel(), generator=torch.Generator()
                                          .manual_seed(2)))
    kjt = kb.to_kjt()
    upstream = torch.randn(3, sum(dims), generator=torch.Generator().manual_seed(1))
    ours = {n: p.detach() for n, p in col.named_parameters()}
    theirs = {n: p.detach() for n, p in ebc.named_parameters()}

    def table_grads(grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {name: grads[f"table_groups.{g}"].to_dense()[off:off + cfg.num_embeddings]
                for name, (g, off, cfg) in col._places.items()}

    got = table_grads(grad(lambda p: (functional_call(col, p, (kb,)).values()
                                      * upstream).sum())(ours))
    want = grad(lambda p: (functional_call(ebc, p, (kjt,)).values() * upstream).sum())(theirs)
    out, pullback = vjp(lambda p: functional_call(col, p, (kb,)).values(), ours)
    torch.testing.assert_close(out, ebc(kjt).values())
    from_vjp = table_grads(pullback(upstream)[0])
    for name in col._places:
        torch.testing.assert_close(got[name], want[f"embedding_bags.{name}.weight"])
        torch.testing.assert_close(from_vjp[name], want[f"embedding_bags.{name}.weight"])
    stacked = {n: torch.stack([p, 2 * p]) for n, p in ours.items()}
    outs = vmap(lambda p: functional_call(col, p, (kb,)).values())(stacked)
    for k in range(2):
        torch.testing.assert_close(
            outs[k], functional_call(col, {n: p[k] for n, p in stacked.items()}, (kb,)).values())


def test_a_frozen_ebc_converts_to_a_frozen_collection_and_back() -> None:
    """TorchRec tables with ``requires_grad=False`` (pretrained, frozen) stay frozen through
    ``from_torchrec`` and ``to_torchrec``: an optimizer over the converted module's parameters
    leaves them as they are, as over the EBC's; a mix of frozen and trainable tables (which a
    collection's shared parameters cannot hold) is refused."""
    ebc = _ebc([("t1", 10, 4, ["f1"]), ("t2", 8, 4, ["f2"])])
    ebc.requires_grad_(False)
    coll = LookupCollection.from_torchrec(ebc)
    assert not any(p.requires_grad for p in coll.parameters())
    back = coll.to_torchrec()
    assert not any(p.requires_grad for p in back.parameters())
    assert all(p.requires_grad for p in LookupCollection.from_torchrec(
        _ebc([("t1", 10, 4, ["f1"])])).to_torchrec().parameters())
    mixed = _ebc([("t1", 10, 4, ["f1"]), ("t2", 8, 4, ["f2"])])
    mixed.embedding_bags["t2"].weight.requires_grad_(False)
    with pytest.raises(InputValueError, match=r"tables \['t2'\] are frozen"):
        LookupCollection.from_torchrec(mixed)
