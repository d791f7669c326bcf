"""Batches built without a host synchronisation off the CPU, checked where they are read.

``Bags`` and ``KeyedBags`` on another device check types, shapes and devices only; their values
are checked by ``validate()`` (today's errors) and by the lookup's device-side asserts. Without
a GPU, "another device" is the meta device (no values: any read would fail) and CPU tensors
with the CPU taken off the host devices (values: the asserts fire at once, as ``RuntimeError``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmark_scripts import load
from torch.utils._python_dispatch import TorchDispatchMode

from lookuplinear import (
    Bags,
    InputValueError,
    KeyedBags,
    LookupCollection,
    LookupIndexError,
    LookupLinear,
    OffsetsError,
    TableConfig,
    lookup_linear,
)
from lookuplinear.functional import range_checked
from lookuplinear.ops import library
from lookuplinear.ops._asserts import assert_offsets_twin
from lookuplinear.sparse import offsets as offsets_module
from lookuplinear.sparse.offsets import csr_offsets

aten = torch.ops.aten


class HostReads(TorchDispatchMode):
    """Records every op that reads a tensor's values on the host: a scalar read (``.item()``,
    ``int(t)``, ``bool(t)``), a copy from another device to the CPU, and ops whose output size
    depends on the values (``nonzero``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        off_host = any(t.device.type != "cpu" for t in tensors) or fake_device.active
        if func is aten._local_scalar_dense.default and off_host:
            self.reads.append("scalar read")
        elif func in (aten.nonzero.default, aten.masked_select.default) and off_host:
            self.reads.append(str(func))
        elif func is aten._to_copy.default and kwargs.get("device") is not None:
            if torch.device(kwargs["device"]).type == "cpu" and tensors[0].device.type != "cpu":
                self.reads.append("copy to the CPU")
        elif func is aten.copy_.default and args[0].device.type == "cpu" and \
                args[1].device.type != "cpu":
            self.reads.append("copy to the CPU")
        return func(*args, **kwargs)


class _FakeDevice:
    active = False


fake_device = _FakeDevice()


@contextmanager
def cpu_off_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """CPU tensors read as another device's: value checks deferred, asserts on the device."""
    monkeypatch.setattr(offsets_module, "_CPU_IS_HOST", False)
    fake_device.active = True
    try:
        yield
    finally:
        fake_device.active = False


def no_host_reads(build: Any) -> Any:
    with HostReads() as mode:
        out = build()
    assert mode.reads == [], mode.reads
    return out


def meta(*values: Any) -> list[torch.Tensor]:
    return [torch.tensor(v, device="meta") for v in values]


# ---- the meta device: no values at all ------------------------------------------------------


def test_the_mode_sees_a_host_read() -> None:
    """The detector itself: ``int()`` and ``.cpu()`` of a non-CPU tensor are caught."""
    with HostReads() as mode:
        t = torch.tensor([1, 2])
        with pytest.raises(RuntimeError):
            int(t.to("meta").sum())  # meta: no value to read
    assert mode.reads == ["scalar read"]


def test_bags_on_meta_build_without_reading_values() -> None:
    idx, off, w = meta([3, 1, 2], [0, 2, 3], [0.5, 1.0, 2.0])
    bags = no_host_reads(lambda: Bags(idx, off, w))
    assert (len(bags), bags.nnz, bags.device.type) == (2, 3, "meta")
    no_host_reads(lambda: Bags(idx.int(), off))  # int32 indices with int64 offsets
    no_host_reads(lambda: Bags.from_padded(torch.zeros(3, 4, dtype=torch.long, device="meta"),
                                           padding_idx=None))
    no_host_reads(lambda: Bags.from_lists([[1], [2, 3]]).to("meta"))
    no_host_reads(lambda: bags.validate(in_features=4))  # meta: no values to check


def test_keyed_bags_on_meta_build_without_reading_values() -> None:
    """Lengths, offsets and inverse_indices on the meta device: before, the lengths were read
    (``int(lens.min())``), which fails on meta."""
    vals, lens = meta([3, 1, 4, 7, 7, 2], [1, 2, 3, 0])
    kb = no_host_reads(lambda: KeyedBags(["user", "item"], vals, lengths=lens))
    assert (kb.batch_size, kb.device.type) == (2, "meta")
    (off,) = meta([0, 1, 3, 6, 6])
    no_host_reads(lambda: KeyedBags(["user", "item"], vals, offsets=off))
    inv = torch.tensor([[0, 0, 0], [1, 0, 1]], device="meta")
    vkb = no_host_reads(lambda: KeyedBags(
        ["user", "item"], vals[:5], lengths=lens[:3], stride_per_key_per_rank=[[1], [2]],
        inverse_indices=inv))
    assert vkb.batch_size == 3
    no_host_reads(lambda: KeyedBags.from_dict({"a": Bags(*meta([1, 2], [0, 1, 2])),
                                               "b": Bags(*meta([5], [0, 0, 1]))}))
    no_host_reads(kb.validate)


def test_sparse_tensors_on_meta_build_without_reading_values() -> None:
    """A coalesced COO tensor's row offsets by a search (a bincount reads the largest row)."""
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 0, 2], [1, 2, 0]]), torch.ones(3),
                                  (3, 4)).coalesce()
    bags = no_host_reads(lambda: Bags.from_torch_sparse(coo.to("meta")))
    assert len(bags) == 3
    csr = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse_csr()
    no_host_reads(lambda: Bags.from_torch_sparse(csr.to("meta")))


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("last_to_end", [False, True])
def test_csr_offsets_on_meta_read_no_values(include_last_offset: bool, last_to_end: bool
                                            ) -> None:
    idx, off = meta([1, 2, 3, 4], [0, 2, 4] if include_last_offset else [0, 2])
    ends = no_host_reads(lambda: csr_offsets(idx, off, include_last_offset,
                                             last_to_end=last_to_end))
    assert ends.shape == (3,)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_lookup_on_meta_reads_no_values(mode: str) -> None:
    """The lookup's checks are device-side asserts: before, the range check read the smallest
    and largest index on the host (which fails on meta)."""
    bags = Bags(*meta([3, 1, 2], [0, 2, 3]))
    weight = torch.empty(5, 4, device="meta")
    out = no_host_reads(lambda: lookup_linear(bags, weight, mode=mode))
    assert out.shape == (2, 4)
    out = no_host_reads(lambda: lookup_linear(torch.tensor([[1, 2]], device="meta"), weight))
    assert out.shape == (1, 2, 4)
    layer = LookupLinear(5, 4, device="meta")
    assert no_host_reads(lambda: layer(bags)).shape == (2, 4)


@pytest.mark.parametrize("lengths", [[1, 1, 1, 1, 1, 1], [2, 0, 1, 1, 3, 1]],
                         ids=["one ID a bag", "bags"])
def test_collection_lookup_on_meta_reads_no_values(lengths: list[int]) -> None:
    """Off the CPU a collection's lookup reads no values: whether every bag holds one ID is
    not asked (a host synchronisation at every call: the general path runs), and each
    feature's ID range is asserted on the device."""
    col = LookupCollection([TableConfig("a", 10, 4, ["a"]), TableConfig("b", 7, 4, ["b"])],
                           sparse=True, device="meta")
    kb = KeyedBags(["a", "b"], torch.zeros(sum(lengths), dtype=torch.long, device="meta"),
                   lengths=torch.tensor(lengths, device="meta"))
    out = no_host_reads(lambda: col(kb))
    assert out.values().shape == (3, 8)


@pytest.mark.parametrize("variable", [False, True], ids=["N per key", "variable batch"])
def test_a_keyed_batch_moved_from_the_cpu_slices_its_keys_without_reading(
        monkeypatch: pytest.MonkeyPatch, variable: bool) -> None:
    """A batch moved off the CPU keeps each key's first entry, which the host knew (TorchRec's
    ``offset_per_key``): ``kb[key]``, and a collection's forward with tables that are not a
    plain sum (mean, sqrtn, max, weighted bags), read no offsets back; the slices are the
    CPU's."""
    strides = [[2], [1]] if variable else None
    lengths = [2, 0, 3] if variable else [2, 0, 3, 1]
    values = torch.arange(sum(lengths)) % 5
    kb = KeyedBags(["a", "b"], values, lengths=torch.tensor(lengths),
                   weights=torch.rand(sum(lengths)), stride_per_key_per_rank=strides)
    moved = kb.to("meta")
    assert moved.offset_per_key() == kb.offset_per_key() == [0, 2, 5 if variable else 6]
    for key in ("a", "b"):
        bags = no_host_reads(lambda key=key: moved[key])
        assert (bags.nnz, len(bags)) == (kb[key].nnz, len(kb[key]))
    if not variable:
        for mode in ("mean", "sqrtn", "max"):
            col = LookupCollection([TableConfig("a", 10, 4, ["a"], mode=mode),
                                    TableConfig("b", 7, 3, ["b"])], device="meta")
            out = no_host_reads(lambda col=col: col(moved))
            assert out.values().shape == (2, 7)
            out = no_host_reads(lambda col=col: col(moved.unweighted()))
    with cpu_off_host(monkeypatch):  # the same bounds on tensors with values: the same slices
        checked = KeyedBags.from_checked(["a", "b"], kb.values, kb.offsets, kb.weights,
                                         stride_per_key_per_rank=strides)
        checked._keep_bounds(moved.offset_per_key())
        for key in ("a", "b"):
            got = no_host_reads(lambda key=key: checked[key])
            assert got.indices.tolist() == kb[key].indices.tolist()
            assert got.offsets.tolist() == kb[key].offsets.tolist()
            assert torch.equal(got.weights, kb[key].weights)


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_embedding_bags_call_off_the_host_takes_its_offsets_as_they_are(
        monkeypatch: pytest.MonkeyPatch, include_last_offset: bool, sparse: bool,
        weighted: bool) -> None:
    """``layer(indices, offsets)`` off the CPU: the offsets as given (no CSR offsets built),
    asserted with the indices by one ``assert_bags`` call, then the lookup:
    ``nn.EmbeddingBag``'s output and gradient."""
    idx = torch.tensor([1, 4, 4, 9, 0, 2])
    off = torch.tensor([0, 2, 2, 5, 6] if include_last_offset else [0, 2, 2, 5])
    psw = torch.rand(6, generator=torch.Generator().manual_seed(0)) if weighted else None
    stock = torch.nn.EmbeddingBag(10, 3, mode="sum", sparse=sparse,
                                  include_last_offset=include_last_offset)
    ours = LookupLinear(10, 3, bias=False, sparse=sparse,
                        include_last_offset=include_last_offset)
    with torch.no_grad():
        ours.weight.copy_(stock.weight)
    with cpu_off_host(monkeypatch), Dispatched() as seen:
        out = ours(idx, off, per_sample_weights=psw)
    expected = stock(idx, off, per_sample_weights=psw)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(g)
    expected.backward(g)
    assert ours.weight.grad is not None and stock.weight.grad is not None
    torch.testing.assert_close(ours.weight.grad.to_dense(), stock.weight.grad.to_dense())
    if library.CPP:
        assert seen.ops[0] == "lookuplinear.assert_bags.default", seen.ops
        assert len(seen.ops) == 2 if sparse else len(seen.ops) <= 3, seen.ops


@pytest.mark.parametrize(("indices", "offsets", "include_last_offset", "message"), [
    ([1, 2, 3], [0, 3, 2], False, "Bags offsets are not the start offsets of its 3 entries"),
    ([1, 2, 3], [0, 4], False, "not the start offsets"),
    ([1, 2, 3], [1, 2], False, "not the start offsets"),
    ([1, 2, 3], [0, 2, 2], True, "Bags offsets are not the CSR offsets of its 3 entries"),
    ([1, 2, 10], [0, 2], False, "an index of indices is out of range for in_features=10"),
])
def test_embedding_bags_call_off_the_host_asserts_what_it_reads(
        monkeypatch: pytest.MonkeyPatch, indices: list[int], offsets: list[int],
        include_last_offset: bool, message: str) -> None:
    layer = LookupLinear(10, 3, sparse=True, include_last_offset=include_last_offset)
    with cpu_off_host(monkeypatch), pytest.raises(RuntimeError, match=message):
        layer(torch.tensor(indices), torch.tensor(offsets))


def test_a_forward_off_the_cpu_dispatches_few_ops() -> None:
    """``benchmarks/structure.py``'s count of the ops a forward dispatches from Python off the
    CPU (each a kernel launch at least on a GPU): with the C++ operators, a layer's lookup is
    ``assert_bags`` and the lookup, a collection's ``shifted_rows``, the lookup and
    ``in_feature_order``; a collection of 8 tables dispatches fewer than 8
    ``nn.EmbeddingBag``; and it reads no values on the way (the meta device has none)."""
    counts = load("structure").device_ops_per_forward()
    assert counts["nn.EmbeddingBag, bags"] == 1
    if library.CPP:
        for form in ("Bags", "(indices, offsets)", "one ID"):
            assert counts[f"LookupLinear, {form}"] == 2, counts
        assert counts["lookuplinear.EmbeddingBag, bags"] == 2, counts
        for form in ("one ID", "bags"):
            assert counts[f"LookupCollection, 8 tables, {form}"] <= 4, counts
        for form in ("one ID", "bags"):
            assert (counts[f"LookupCollection, 8 tables, {form}"]
                    < counts["8 x nn.EmbeddingBag, one ID"]), counts
    else:  # the checks' torch ops from Python: the batch's offsets asserted on the device
        # (stock's kernel checks its own inside) beside fewer ops than 8 tables' lookups
        assert counts["LookupLinear, Bags"] > 2, counts
        with Dispatched() as check:
            assert_offsets_twin(torch.zeros(9, dtype=torch.long, device="meta"), 8, "KeyedBags")
        for form in ("one ID", "bags"):
            assert (counts[f"LookupCollection, 8 tables, {form}"] - len(check.ops)
                    < counts["8 x nn.EmbeddingBag, one ID"]), (counts, check.ops)


@pytest.mark.skipif(not library.CPP, reason="counts the calls around the C++ operators")
def test_python_calls_per_step_are_the_documented_counts() -> None:
    """``benchmarks/structure.py``'s count of the library's Python calls in a layer's forward,
    a collection's, and a collection's backward with its fused update and ``step()``: within
    the goals (at most 5, 20 and 20), and the counts docs/performance.md states."""
    counts = load("structure").calls_per_step()
    layer, collection = counts["layer_forward_calls"], counts["forward_calls"]
    backward = counts["backward_and_update_calls"]
    assert max(layer.values()) <= 5 and collection <= 20 and backward <= 20, counts
    doc = (Path(__file__).resolve().parents[1] / "docs" / "performance.md").read_text()
    stated = {"bags": r"`LookupLinear`, bags \(`layer_forward_calls`, `bags`\) \| (\d+)",
              "index": r"`LookupLinear`, index tensor \(`layer_forward_calls`, `index`\) \| (\d+)",
              "collection": r"fused optimizer bound \(`forward_calls`, in \d+ modules\) \| (\d+)",
              "unfused": r"\(`collection_forward_calls_unfused`\) \| (\d+)",
              "backward": r"`step\(\)` after it make (\d+) calls"}
    found = {k: re.search(v, doc) for k, v in stated.items()}
    assert all(found.values()), {k: v for k, v in found.items() if v is None}
    measured = {"bags": layer["bags"], "index": layer["index"], "collection": collection,
                "unfused": counts["collection_forward_calls_unfused"], "backward": backward}
    assert {k: int(m.group(1)) for k, m in found.items() if m} == measured


# ---- values off the host: deferred checks, validate() and the asserts -----------------------


BAD_OFFSETS = [
    ([0, 2, 1, 3], "offsets must be non-decreasing"),
    ([1, 2, 3], "offsets must start at 0"),
    ([0, 2, 4], r"offsets must end at len\(indices\)=3"),
]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("lengths", [[1, 1, 1, 1], [2, 0, 3, 1]], ids=["one ID a bag", "bags"])
def test_a_collection_of_several_groups_reads_nothing_of_a_batch_moved_from_the_cpu(
        sparse: bool, lengths: list[int]) -> None:
    """Tables of two widths (two groups): the usual batch is split into the groups' bags at
    its keys' bounds, which a batch moved from the CPU keeps (``offset_per_key``): no value
    read back, with dense or row-sparse gradients, and the CPU's output."""
    tables = [TableConfig("a", 10, 4, ["a"]), TableConfig("b", 7, 3, ["b"])]
    host = KeyedBags(["a", "b"], torch.tensor([1, 2, 3, 4, 5, 6][:sum(lengths)]),
                     lengths=torch.tensor(lengths))
    col = LookupCollection(tables, sparse=sparse, device="meta")
    out = no_host_reads(lambda: col(host.to("meta")))
    assert out.values().shape == (2, 7)
    cpu = LookupCollection(tables, sparse=sparse)
    want = torch.cat([host[k].to_dense(r) @ cpu[k].weight for k, r in (("a", 10), ("b", 7))], 1)
    torch.testing.assert_close(cpu(host).values(), want)


@pytest.mark.parametrize("modes", [("sum", "sum"), ("mean", "sum")], ids=["sum", "mean+sum"])
@pytest.mark.parametrize("dims", [(4, 4), (4, 3)], ids=["one group", "two groups"])
def test_a_variable_batch_moved_from_the_cpu_reads_nothing(dims: tuple[int, int],
                                                          modes: tuple[str, str]) -> None:
    """A variable batch per key (strides and ``inverse_indices``) moved from the CPU: its
    bags are padded to one stride from the host strides and keep their keys' bounds, so a
    collection that splits by feature or folds a mean reads no value back; the CPU equals its
    full batch's output."""
    tables = [TableConfig("f1", 8, dims[0], ["f1"], mode=modes[0]),  # type: ignore[arg-type]
              TableConfig("f2", 8, dims[1], ["f2"], mode=modes[1])]  # type: ignore[arg-type]
    host = KeyedBags(["f1", "f2"], torch.tensor([3, 1, 7, 5, 2]), lengths=torch.tensor([2, 3, 0]),
                     stride_per_key_per_rank=[[1], [2]],
                     inverse_indices=torch.tensor([[0, 0, 0], [1, 0, 1]]))
    col = LookupCollection(tables, sparse=True, device="meta")
    out = no_host_reads(lambda: col(host.to("meta")))
    assert out.values().shape == (3, sum(dims))
    cpu = LookupCollection(tables, sparse=True)
    torch.testing.assert_close(cpu(host).values(), cpu(host.full_batch()).values())


def test_kept_key_bounds_follow_the_offsets_they_were_read_from() -> None:
    """``offset_per_key`` is kept for the offsets it was read from: offsets changed in place,
    or other offsets (or values) given to the batch, are read again, never sliced with stale
    bounds."""
    kb = KeyedBags(["a", "b"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 1, 2, 0]))
    assert kb.offset_per_key() == [0, 2, 4] and kb["b"].indices.tolist() == [3, 4]
    kb.offsets[2] = 1  # a: bags [1], []; b: [2, 3, 4], []
    assert kb.offset_per_key() == [0, 1, 4] and kb["b"].indices.tolist() == [2, 3, 4]
    kb.offsets = torch.tensor([0, 0, 0, 1, 4])
    assert kb.offset_per_key() == [0, 0, 4] and kb["a"].nnz == 0
    with torch.inference_mode():  # inference tensors have no version counter
        frozen = KeyedBags(["a"], torch.tensor([5, 6]), lengths=torch.tensor([2]))
        assert frozen.offset_per_key() == [0, 2] and frozen["a"].nnz == 2


def _forward_and_grads(col: LookupCollection, kb: KeyedBags
                       ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """``col(kb)``'s values and, after a backward of a fixed gradient, each table group's
    gradient."""
    out = col(kb).values()
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
    return out, [p.grad for p in col.table_groups]


def _assert_same_grads(got: list[torch.Tensor | None], want: list[torch.Tensor | None]) -> None:
    """The same gradients to the bit, in the same layout (a row-sparse one: the same rows,
    in the same order, coalesced or not alike)."""
    for g, w in zip(got, want, strict=True):
        assert g is not None and w is not None
        assert g.layout == w.layout
        if w.is_sparse:
            assert g.is_coalesced() == w.is_coalesced()
            assert torch.equal(g._indices(), w._indices())
            assert torch.equal(g._values(), w._values())
        else:
            assert torch.equal(g, w)


def _off_the_cpu_as_on_it(
        monkeypatch: pytest.MonkeyPatch, configs: list[TableConfig], sparse: bool,
        kb: KeyedBags, width: int, moved: Callable[[], KeyedBags] | None = None,
) -> tuple[LookupCollection, torch.Tensor]:
    """A collection of ``configs`` on the meta device reads no value of ``kb`` in its
    forward (of ``width`` columns); with the CPU's values taken as another device's (the
    batch ``moved()`` gives there, ``kb`` by default), its outputs and gradients are the
    CPU's to the bit. The CPU's collection and output, for a check against a peer."""
    col = LookupCollection(configs, sparse=sparse, device="meta")
    out = no_host_reads(lambda: col(kb.to("meta")))
    assert out.values().shape == (kb.batch_size, width)
    torch.manual_seed(0)
    cpu = LookupCollection(configs, sparse=sparse)
    off = LookupCollection(configs, sparse=sparse)
    off.load_state_dict(cpu.state_dict())
    want, want_grads = _forward_and_grads(cpu, kb)
    with cpu_off_host(monkeypatch):
        got, got_grads = _forward_and_grads(off, kb if moved is None else moved())
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    _assert_same_grads(got_grads, want_grads)
    return cpu, want


PADDED_TABLES = {  # (mode, padding_idx) of tables a, b (rows 6, 7) and c (rows 8)
    "one padded table": [("sum", 0), ("sum", None), ("sum", None)],
    "two in one group": [("mean", 2), ("sum", 0), ("sqrtn", None)],
    "every table": [("sum", 0), ("mean", 0), ("sqrtn", 3)],
}


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense grad", "sparse grad"])
@pytest.mark.parametrize("dims", [(4, 4, 4), (4, 3, 4)], ids=["one group", "two groups"])
@pytest.mark.parametrize("tables", list(PADDED_TABLES), ids=list(PADDED_TABLES))
def test_a_collection_with_padding_reads_nothing_of_a_batch_moved_from_the_cpu(
        monkeypatch: pytest.MonkeyPatch, tables: str, dims: tuple[int, int, int],
        sparse: bool, weighted: bool) -> None:
    """Tables with a ``padding_idx`` in a collection: off the CPU the padding entries are
    not dropped (which reads how many there are back to the host) but left out by the
    lookup, given its group's padding row as ``padding_idx``; a group of several padded
    tables gives all their padding entries that row. On the meta device the forward reads
    no value; on the CPU's values taken as another device's, the outputs and the gradients
    (their sparse layout too) are the CPU's, whose padding entries are dropped."""
    configs = [TableConfig(name, rows, dim, [name], mode=mode, padding_idx=pad)
               for name, rows, dim, (mode, pad) in zip(
                   "abc", (6, 7, 8), dims, PADDED_TABLES[tables], strict=True)]
    lengths = [2, 0, 3, 1, 2, 2, 1, 0, 3]
    values = torch.tensor([0, 3, 0, 1, 2, 0, 1, 0, 5, 0, 0, 2, 3, 0])
    weights = torch.rand(14, generator=torch.Generator().manual_seed(2)) if weighted else None
    kb = KeyedBags(["a", "b", "c"], values, lengths=torch.tensor(lengths), weights=weights)
    cpu, want = _off_the_cpu_as_on_it(monkeypatch, configs, sparse, kb, sum(dims))
    first = 0
    for name, dim, (mode, pad) in zip("abc", dims, PADDED_TABLES[tables], strict=True):
        if mode == "sum" or (mode == "mean" and not weighted):  # the peer: nn.EmbeddingBag
            ref = torch.nn.EmbeddingBag.from_pretrained(cpu[name].weight.detach(), mode=mode,
                                                        padding_idx=pad)
            torch.testing.assert_close(want[:, first:first + dim], ref(
                kb[name].indices, kb[name].offsets[:-1], per_sample_weights=kb[name].weights))
        first += dim


@pytest.mark.parametrize("sparse", [False, True], ids=["dense grad", "sparse grad"])
@pytest.mark.parametrize("dims", [(4, 4), (4, 3)], ids=["one group", "two groups"])
@pytest.mark.parametrize("modes", [("sum", "sum"), ("mean", "sum")], ids=["sum", "mean+sum"])
def test_shared_features_read_nothing_of_a_batch_moved_from_the_cpu(
        monkeypatch: pytest.MonkeyPatch, modes: tuple[str, str], dims: tuple[int, int],
        sparse: bool) -> None:
    """A feature read by two tables (TorchRec's shared feature): the batch of one key per
    (feature, table) pair keeps its keys' bounds, which the host knows from the batch's own,
    so the forward of a batch moved from the CPU reads none of its new offsets back (as
    TorchRec's collection of a ``KeyedJaggedTensor`` whose lengths it knows); with the CPU's
    values taken as another device's, the CPU's outputs and gradients."""
    configs = [TableConfig("t1", 10, dims[0], ["a", "b"], mode=modes[0]),  # type: ignore[arg-type]
               TableConfig("t2", 10, dims[1], ["a"], mode=modes[1])]  # type: ignore[arg-type]
    kb = KeyedBags(["a", "b"], torch.tensor([0, 1, 2, 3, 4, 9]),
                   lengths=torch.tensor([2, 1, 2, 1]))
    def moved() -> KeyedBags:
        batch = KeyedBags.from_checked(["a", "b"], kb.values, kb.offsets)
        batch._keep_bounds(kb.offset_per_key())  # as kb.to(device) keeps them
        return batch

    cpu, want = _off_the_cpu_as_on_it(monkeypatch, configs, sparse, kb,
                                      dims[0] * 2 + dims[1], moved)
    reference = torch.cat([  # the peer: each (feature, table) pair's nn.EmbeddingBag
        torch.nn.EmbeddingBag.from_pretrained(cpu[t].weight.detach(), mode=mode)(
            kb[f].indices, kb[f].offsets[:-1])
        for f, t, mode in (("a", "t1", modes[0]), ("b", "t1", modes[0]),
                           ("a", "t2", modes[1]))], 1)
    torch.testing.assert_close(want, reference)


class HostCopies(TorchDispatchMode):
    """Records every copy of host data to another device: a tensor made there from Python
    data (``torch.tensor`` or ``torch.as_tensor`` with a device, or a Python list indexing a
    tensor there: torch makes these below the dispatcher, out of a dispatch mode's sight), a
    CPU tensor copied there, a CPU index into a tensor there (copied first). On CUDA such a
    copy from pageable memory waits for the device."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.copies: list[str] = []
        for name in ("tensor", "as_tensor"):
            made = getattr(torch, name)

            def making(data: Any, *args: Any, made: Any = made, name: str = name,
                       **kwargs: Any) -> Any:
                device = kwargs.get("device")
                if device is not None and torch.device(device).type != "cpu" and not (
                        isinstance(data, torch.Tensor) and data.device.type != "cpu"):
                    self.copies.append(f"torch.{name}")
                return made(data, *args, **kwargs)

            monkeypatch.setattr(torch, name, making)
        getitem = torch.Tensor.__getitem__

        def indexing(t: torch.Tensor, index: Any) -> Any:
            parts = index if isinstance(index, tuple) else (index,)
            if t.device.type != "cpu" and any(isinstance(p, list) for p in parts):
                self.copies.append("a Python list indexing a device tensor")
            return getitem(t, index)

        monkeypatch.setattr(torch.Tensor, "__getitem__", indexing)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if func is aten._to_copy.default and first is not None and first.is_cpu and \
                kwargs.get("device") is not None and torch.device(kwargs["device"]).type != "cpu":
            self.copies.append("a CPU tensor copied to the device")
        elif func is aten.copy_.default and not args[0].is_cpu and args[1].is_cpu:
            self.copies.append("a CPU tensor copied into a device tensor")
        elif func in (aten.index.Tensor, aten.index_select.default) and first is not None \
                and not first.is_cpu:
            index = args[1] if func is aten.index.Tensor else [args[2]]
            if any(isinstance(i, torch.Tensor) and i.is_cpu and i.dim() > 0 for i in index):
                self.copies.append("a CPU index into a device tensor")
        return func(*args, **kwargs)


def _copies_of(monkeypatch: pytest.MonkeyPatch, forward: Any) -> list[str]:
    """The host copies :class:`HostCopies` sees in ``forward()``, once its first call built
    what it keeps per device."""
    forward()
    with monkeypatch.context() as patch, HostCopies(patch) as mode:
        forward()
    return mode.copies


@pytest.mark.parametrize("sparse", [False, True], ids=["dense grad", "sparse grad"])
@pytest.mark.parametrize("tables", [
    [TableConfig("a", 10, 4, ["a"], mode="mean"), TableConfig("b", 7, 4, ["b"])],
    [TableConfig("a", 10, 4, ["a"], hashing="mod"), TableConfig("b", 7, 4, ["b"])],
    [TableConfig("t1", 10, 4, ["a", "b"]), TableConfig("t2", 10, 3, ["a"])],
], ids=["mean beside a sum", "hashing", "a shared feature"])
def test_a_collection_copies_no_host_constant_to_the_device_each_forward(
        monkeypatch: pytest.MonkeyPatch, tables: list[TableConfig], sparse: bool) -> None:
    """What a collection's forward derives from its tables alone (which outputs are exact
    means, the rows each hashed output takes, the feature each shared output reads) is on
    the batch's device after the first forward, kept per device, or made there: no copy from
    the host in each forward."""
    col = LookupCollection(tables, sparse=sparse, device="meta")
    kb = KeyedBags(["a", "b"], torch.tensor([0, 1, 2, 3, 4, 5]),
                   lengths=torch.tensor([2, 1, 2, 1])).to("meta")
    assert _copies_of(monkeypatch, lambda: col(kb)) == []


def test_a_variable_batch_copies_no_more_than_its_padding_each_forward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable batch per key: each output's rows gathered by its key's ``inverse_indices``
    without copying the tables' widths or the outputs' keys to the device; what is copied is
    the batch's own padding to one stride (its strides, the batch's)."""
    tables = [TableConfig("f1", 8, 4, ["f1"]), TableConfig("f2", 8, 3, ["f2"])]
    kb = KeyedBags(["f1", "f2"], torch.tensor([3, 1, 7, 5, 2]), lengths=torch.tensor([2, 3, 0]),
                   stride_per_key_per_rank=[[1], [2]],
                   inverse_indices=torch.tensor([[0, 0, 0], [1, 0, 1]])).to("meta")
    col = LookupCollection(tables, sparse=True, device="meta")
    assert _copies_of(monkeypatch, lambda: col(kb)) == _copies_of(monkeypatch, kb._padded)


def test_dense_rows_with_padding_copy_nothing_to_the_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Dense rows with a ``padding_idx``: the padding column is zeroed by an index made on
    the rows' device, and on the CPU the result is ``nn.Linear``'s on the rows with that
    column zeroed."""
    layer = LookupLinear(6, 3, padding_idx=2, device="meta")
    x = torch.rand(4, 6, device="meta")
    assert _copies_of(monkeypatch, lambda: layer(x)) == []
    cpu = LookupLinear(6, 3, padding_idx=2)
    rows = torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
    zeroed = rows.clone()
    zeroed[:, 2] = 0
    torch.testing.assert_close(cpu(rows), zeroed @ cpu.weight + cpu.bias)


def test_max_over_weights_other_than_one_off_the_host_is_a_device_assert(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``mode="max"`` refuses weights other than 1: on the host with the entry named, off it
    by an assert where the device runs (no read back), which raises when it runs there."""
    bags = Bags(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3]), torch.tensor([1.0, 2.0, 1.0]))
    with pytest.raises(InputValueError, match=r"entry 1 has weight 2\.0"):
        lookup_linear(bags, torch.randn(5, 2), mode="max")
    with cpu_off_host(monkeypatch), pytest.raises(RuntimeError, match="every entry must have"):
        lookup_linear(bags, torch.randn(5, 2), mode="max")
    ones = Bags(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3]), torch.ones(3))
    with cpu_off_host(monkeypatch):
        torch.testing.assert_close(lookup_linear(ones, torch.eye(5, 2), mode="max"),
                                   lookup_linear(Bags(ones.indices, ones.offsets), torch.eye(5, 2),
                                                 mode="max"))


@pytest.mark.parametrize(("offsets", "message"), BAD_OFFSETS)
def test_bad_offsets_on_the_cpu_are_refused_when_built(offsets: list[int], message: str
                                                       ) -> None:
    """The CPU keeps its checks at construction (reading the values there is free)."""
    with pytest.raises(OffsetsError, match=message):
        Bags(torch.tensor([1, 2, 3]), torch.tensor(offsets))


@pytest.mark.parametrize(("offsets", "message"), BAD_OFFSETS)
def test_bad_offsets_off_the_host_wait_for_validate_or_the_lookup(
        monkeypatch: pytest.MonkeyPatch, offsets: list[int], message: str) -> None:
    with cpu_off_host(monkeypatch):
        bags = no_host_reads(lambda: Bags(torch.tensor([1, 2, 3]), torch.tensor(offsets)))
        with pytest.raises(OffsetsError, match=message):  # today's error and message
            bags.validate()
        with pytest.raises(RuntimeError, match="offsets are not the CSR offsets"):
            lookup_linear(bags, torch.randn(4, 2), mode="mean")


def test_good_bags_off_the_host_pass_validate_and_look_up_as_on_the_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    weight = torch.randn(5, 3)
    expected = lookup_linear(Bags.from_lists([[3, 1], [], [2, 2, 0]]), weight, mode="mean")
    with cpu_off_host(monkeypatch):
        bags = Bags.from_lists([[3, 1], [], [2, 2, 0]])
        assert bags.validate(in_features=5) is bags
        out = no_host_reads(lambda: range_checked(
            lambda: lookup_linear(bags, weight, mode="mean"), bags.indices, 5, "indices",
            bags.offsets))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_an_index_out_of_range_off_the_host_is_a_device_assert(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with cpu_off_host(monkeypatch):
        bags = Bags(torch.tensor([3, 7]), torch.tensor([0, 1, 2]))
        with pytest.raises(LookupIndexError, match=r"index 7 at Bags\.indices"):
            bags.validate(in_features=5)
        with pytest.raises(LookupIndexError, match=r"index 7 at Bags\.indices"):
            bags.check_indices(5)  # an explicit check reads the values on any device
        with pytest.raises(RuntimeError, match="an index of indices is out of range"):
            lookup_linear(bags, torch.randn(5, 2), mode="mean")
        with pytest.raises(RuntimeError, match="an index of input is out of range"):
            lookup_linear(torch.tensor([1, 5]), torch.randn(5, 2))


class Dispatched(TorchDispatchMode):
    """Records every op dispatched from Python (an operator's own torch ops, called from C++
    inside it, are not seen)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("form", ["bags", "index"])
def test_a_lookup_off_the_host_checks_its_batch_in_one_operator_call(
        monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """Off the host the batch's checks are one call of ``lookuplinear::assert_bags`` where the
    C++ operators are loaded (on CUDA one kernel launch, where the build compiled it), not a
    dozen torch ops dispatched from Python, one launch each; registered from Python, those
    ops. Either way the lookup is PyTorch's."""
    bags = Bags(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3]))
    weight = torch.randn(10, 4)
    with cpu_off_host(monkeypatch), Dispatched() as seen:
        out = (lookup_linear(bags, weight, mode="mean") if form == "bags"
               else lookup_linear(torch.tensor([[1, 2]]), weight, mode="mean"))
    if library.CPP:
        assert seen.ops.count("lookuplinear.assert_bags.default") == 1, seen.ops
        assert "aten._assert_async.msg" not in seen.ops, seen.ops
    else:
        assert seen.ops.count("aten._assert_async.msg") == (2 if form == "bags" else 1), \
            seen.ops
    expected = (lookup_linear(bags, weight, mode="mean") if form == "bags"
                else lookup_linear(torch.tensor([[1, 2]]), weight, mode="mean"))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"lengths": [2, -1, 2, 0]}, InputValueError, r"lengths must be >= 0, got lengths\[1\] = -1"),
    ({"lengths": [1, 1, 1, 1]}, InputValueError, "lengths sum to 4 but values holds 3"),
    ({"offsets": [0, 2, 1, 3, 3]}, OffsetsError, "offsets must be non-decreasing"),
    ({"offsets": [0, 1, 2, 3, 4]}, OffsetsError, r"offsets must end at len\(values\)=3"),
])
def test_bad_keyed_bags_off_the_host_wait_for_validate(
        monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, list[int]], error: type,
        message: str) -> None:
    """``validate()`` raises what the CPU constructor raises, with the same message."""
    given = {k: torch.tensor(v) for k, v in kwargs.items()}
    values = torch.tensor([1, 2, 3])
    with pytest.raises(error, match=message):
        KeyedBags(["a", "b"], values, **given)
    with cpu_off_host(monkeypatch):
        kb = no_host_reads(lambda: KeyedBags(["a", "b"], values, **given))
        with pytest.raises(error, match=message):
            kb.validate()


def test_bad_inverse_indices_off_the_host_wait_for_validate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    args: dict[str, Any] = {"lengths": torch.tensor([2, 3, 0]),
                            "stride_per_key_per_rank": [[1], [2]],
                            "inverse_indices": torch.tensor([[0, 0, 0], [1, 0, 2]])}
    values = torch.tensor([3, 1, 7, 7, 2])
    message = r"inverse_indices\[1\] \(key 'item'\) must name bags in \[0, 2\)"
    with pytest.raises(InputValueError, match=message):
        KeyedBags(["user", "item"], values, **args)
    with cpu_off_host(monkeypatch):
        kb = no_host_reads(lambda: KeyedBags(["user", "item"], values, **args))
        with pytest.raises(InputValueError, match=message):
            kb.validate()


def test_a_key_read_past_its_values_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kb[key]`` reads every key's first entry (``offset_per_key``) to slice the values:
    offsets that run past them (or back before 0) are refused there, for any key, never
    sliced as Python slices."""
    with cpu_off_host(monkeypatch):
        kb = KeyedBags(["a", "b"], torch.tensor([1, 2, 3]),
                       offsets=torch.tensor([0, 1, 2, 5, 5]))
        for key in ("a", "b"):
            with pytest.raises(OffsetsError, match=r"must end at len\(values\)=3"):
                kb[key]
        kb = KeyedBags(["a", "b"], torch.tensor([1, 2, 3]),
                       offsets=torch.tensor([0, 1, 2, 2, 3]))
        assert kb["a"].indices.tolist() == [1, 2] and kb["b"].indices.tolist() == [3]
        kb = KeyedBags(["a", "b"], torch.tensor([1, 2, 3]),
                       offsets=torch.tensor([0, 1, -2, -1, 3]))
        for key in ("a", "b"):  # a: values[0:-2], b: values[-2:3] as Python slices
            with pytest.raises(OffsetsError, match="KeyedBags: offsets must be non-decr"):
                kb[key]


@pytest.mark.parametrize("include_last_offset", [False, True])
def test_csr_offsets_off_the_host_equal_the_cpu_ones(
        monkeypatch: pytest.MonkeyPatch, include_last_offset: bool) -> None:
    """The same CSR offsets with and without reading the values, for offsets in range, a last
    offset short of the end (run to the end with ``last_to_end``) and one past it."""
    indices = torch.tensor([1, 2, 3, 4])
    cases = ([[0, 2, 4], [0, 3, 3], [0, 1, 5], [0, 0, 0]] if include_last_offset
             else [[0, 2], [0, 4], [0, 0]])
    for given in cases:
        for last_to_end in (False, True):
            off = torch.tensor(given)
            host = csr_offsets(indices, off, include_last_offset, last_to_end=last_to_end)
            with cpu_off_host(monkeypatch):
                elsewhere = no_host_reads(lambda o=off, e=last_to_end: csr_offsets(
                    indices, o, include_last_offset, last_to_end=e))
            assert elsewhere.tolist() == host.tolist(), (given, last_to_end)


def test_start_offsets_past_the_end_off_the_host_fail_as_csr_offsets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nn.EmbeddingBag-style start offsets past ``len(indices)``: named on the CPU; elsewhere
    they make the CSR offsets decrease, which validate() and the lookup refuse."""
    indices, off = torch.tensor([1, 2, 3]), torch.tensor([0, 5])
    with pytest.raises(OffsetsError, match=r"offsets\[1\]=5 is past len\(indices\)=3"):
        csr_offsets(indices, off, False)
    with cpu_off_host(monkeypatch):
        bags = Bags(indices, csr_offsets(indices, off, False))
        with pytest.raises(OffsetsError, match="non-decreasing"):
            bags.validate()


def test_from_torch_sparse_and_from_dense_offsets_are_the_bincount_ones() -> None:
    """The row offsets by a search equal the bincount's, empty rows and an empty matrix
    included."""
    gen = torch.Generator().manual_seed(0)
    for shape in [(5, 4), (1, 3), (0, 2), (6, 1)]:
        x = (torch.rand(shape, generator=gen) < 0.4).float() * torch.rand(shape, generator=gen)
        expected = torch.zeros(shape[0] + 1, dtype=torch.long)
        rows = torch.nonzero(x, as_tuple=True)[0]
        torch.cumsum(torch.bincount(rows, minlength=shape[0]), 0, out=expected[1:])
        for bags in (Bags.from_dense(x), Bags.from_torch_sparse(x.to_sparse())):
            assert bags.offsets.tolist() == expected.tolist()
            torch.testing.assert_close(bags.to_dense(shape[1]), x, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_build_and_look_up_without_a_host_synchronisation() -> None:
    """On CUDA, PyTorch's own sync detector: an error on any synchronising call. A collection
    of tables of one width reads nothing of a batch built on the GPU; tables of two widths
    split the batch at its keys' bounds, which a batch moved from the CPU keeps (one read,
    a synchronisation, for a batch built on the GPU, as TorchRec's without its
    ``offset_per_key``)."""
    idx = torch.tensor([3, 1, 2, 2, 0], device="cuda")
    off = torch.tensor([0, 2, 2, 5], device="cuda")
    lens = torch.tensor([1, 1, 3, 0], device="cuda")
    weight = torch.randn(5, 4, device="cuda")
    col = LookupCollection([TableConfig("a", 5, 4, ["a"]), TableConfig("b", 6, 4, ["b"])],
                           sparse=True, device="cuda")
    widths = LookupCollection([TableConfig("a", 5, 4, ["a"]), TableConfig("b", 6, 3, ["b"])],
                              device="cuda")
    ones = torch.ones(4, dtype=torch.long, device="cuda")
    # tables that are not a plain sum, fed a weighted batch moved from the CPU (its keys'
    # bounds known on the host)
    mixed = LookupCollection([TableConfig("a", 5, 4, ["a"], mode="mean"),
                              TableConfig("b", 6, 3, ["b"], mode="max")], device="cuda")
    host = KeyedBags(["a", "b"], idx.cpu(), lengths=lens.cpu(), weights=torch.ones(5))
    moved = host.to("cuda")  # a copy from the host: synchronising, as every such copy
    for model in (mixed, widths):  # a first call per batch size copies the collection's
        model(moved)  # layout to the device (each table's first row and rows, once)
    col(KeyedBags(["a", "b"], idx, lengths=lens))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        bags = Bags(idx, off)
        kb = KeyedBags(["a", "b"], idx, lengths=lens)
        out = lookup_linear(bags, weight)
        pooled = col(kb).values()
        one_id = col(KeyedBags(["a", "b"], idx[:4], lengths=ones)).values()
        mixed_out = mixed(moved).values()
        widths_out = widths(moved).values()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(mixed_out.cpu(), mixed.to("cpu")(host).values())
    torch.testing.assert_close(widths_out.cpu(), widths.to("cpu")(host).values())
    assert kb.validate() is kb and bags.validate(in_features=5) is bags
    torch.testing.assert_close(out, lookup_linear(bags.to("cpu"), weight.cpu()).cuda())
    cpu = col.to("cpu")
    torch.testing.assert_close(pooled.cpu(), cpu(kb.to("cpu")).values())
    torch.testing.assert_close(one_id.cpu(), cpu(KeyedBags(["a", "b"], idx[:4].cpu(),
                                                           lengths=ones.cpu())).values())


def _cuda_syncs(fn: Any) -> int:
    """How many synchronising CUDA calls ``fn()`` makes (PyTorch's sync detector, warning)."""
    torch.cuda.synchronize()
    with _recorded() as seen:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing CUDA operation" in str(w.message) for w in seen)


@contextmanager
def _recorded() -> Iterator[list[Any]]:
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sparse_backward_synchronises_no_more_than_nn_embedding_bag() -> None:
    """A ``sparse=True`` bag lookup's backward on CUDA: no more synchronising calls than
    ``nn.EmbeddingBag(sparse=True)``'s on the same bags, and the
    same gradient."""
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 1000, (2048 * 20,), generator=g).cuda()
    off = torch.arange(0, 2048 * 20 + 1, 20).cuda()
    ours = LookupLinear(1000, 16, bias=False, sparse=True, include_last_offset=True,
                        device="cuda")
    stock = torch.nn.EmbeddingBag(1000, 16, mode="sum", sparse=True, include_last_offset=True,
                                  _weight=ours.weight.detach().clone())
    for m in (ours, stock):
        m(idx, off).sum().backward()  # warm: allocations, kernels loaded
        m.zero_grad(set_to_none=True)
    outs = {m: m(idx, off) for m in (ours, stock)}
    counts = {m: _cuda_syncs(lambda m=m: outs[m].sum().backward()) for m in (ours, stock)}
    assert counts[ours] <= counts[stock], counts
    torch.testing.assert_close(ours.weight.grad.to_dense(), stock.weight.grad.to_dense())
