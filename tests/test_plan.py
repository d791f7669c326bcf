"""The plan of a collection, alone: groups, table places and output columns from the configs."""

from __future__ import annotations

import pytest
import torch

from lookuplinear import TableConfig
from lookuplinear.errors import InputTypeError, InputValueError
from lookuplinear.modules.plan import plan_collection


def test_tables_of_one_width_and_dtype_share_a_group_row_after_row() -> None:
    plan = plan_collection([TableConfig("a", 4, 2, ["a"]), TableConfig("b", 3, 8, ["b"]),
                            TableConfig("c", 5, 2, ["c", "d"])])
    assert [(g.dim, g.rows, g.tables, g.kernel) for g in plan.groups] == [
        (2, 9, ("a", "c"), "sum"), (8, 3, ("b",), "sum")]
    assert {t: (p.group, p.offset) for t, p in plan.places.items()} == {
        "a": (0, 0), "b": (1, 0), "c": (0, 4)}
    assert plan.feature_names == ("a", "b", "c", "d")
    assert plan.dims == (2, 8, 2, 2) and plan.columns == (0, 2, 10, 12) and plan.width == 14
    assert plan.feature_group == (0, 1, 0, 0)
    assert plan.groups[0].features == ("a", "c", "d")
    assert plan.groups[0].positions == (0, 2, 3) and plan.groups[0].columns == (0, 10, 12)
    assert plan.groups[1].first == 3  # group 1's block follows group 0's three features
    assert plan.place_of("d").config.name == "c"
    assert plan.plain


def test_one_id_place_steps_through_each_groups_rows() -> None:
    plan = plan_collection([TableConfig("a", 4, 2, ["a"]), TableConfig("b", 3, 8, ["b"]),
                            TableConfig("c", 5, 2, ["c"])])
    # group 0 holds a, c (first 0, two features); group 1 holds b (first 2)
    assert plan.one_id_place() == [(0, 0, 2), (2, 0, 1), (0, 1, 2)]


def test_dtype_max_and_file_tables_get_groups_of_their_own(tmp_path) -> None:
    plan = plan_collection([
        TableConfig("a", 4, 2, ["a"]), TableConfig("b", 4, 2, ["b"], dtype=torch.float64),
        TableConfig("m", 4, 2, ["m"], mode="max"), TableConfig("n", 4, 2, ["n"], mode="max"),
        TableConfig("f", 4, 2, ["f"], storage=tmp_path / "f"), TableConfig("s", 4, 2, ["s"])])
    assert [(g.tables, g.kernel) for g in plan.groups] == [
        (("a", "s"), "sum"), (("b",), "sum"), (("m",), "max"), (("n",), "max"),
        (("f",), "file")]
    assert plan.groups[1].dtype == torch.float64
    assert not (tmp_path / "f").exists()  # planning creates no files


def test_qr_tables_take_their_stored_rows_and_hashing_is_not_plain() -> None:
    plan = plan_collection([TableConfig("q", 100, 4, ["q"], hashing="qr", qr_buckets=10),
                            TableConfig("r", 7, 4, ["r"])])
    assert plan.groups[0].rows == 20 + 7 and plan.places["r"].offset == 20
    assert not plan.plain


@pytest.mark.parametrize(("tables", "error", "match"), [
    ([], InputValueError, "at least one"),
    (["a"], InputTypeError, "TableConfig objects"),
    ([TableConfig("a", 3, 2, ["x"]), TableConfig("a", 3, 2, ["y"])], InputValueError,
     "distinct"),
    ([TableConfig("a", 3, 2, ["x", "y", "x"])], InputValueError,
     r"table 'a' lists feature 'x' twice"),
    ([TableConfig("a", 3, 2, ["x"]), TableConfig("b", 3, 2, ["x", "x@a"])], InputValueError,
     r"the outputs \['x@a'\] would have one name twice"),
])
def test_bad_tables_are_refused(tables: list, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        plan_collection(tables)


def test_a_collection_reuses_its_layout_only_for_the_same_batch_size() -> None:
    """The per-batch layout (row shifts, one-ID places) is cached by device and batch size:
    batches of other sizes in between change nothing."""
    from lookuplinear import KeyedBags, LookupCollection

    tables = [TableConfig("a", 5, 2, ["a"]), TableConfig("b", 7, 3, ["b", "c"])]
    torch.manual_seed(0)
    col = LookupCollection(tables, sparse=True)

    def batch(n: int) -> KeyedBags:
        return KeyedBags.from_dict({f: [[(i * 3 + k) % 5] for i in range(n)]
                                    for k, f in enumerate("abc")})

    first = col(batch(3)).values().detach()
    for n in (5, 1, 3):
        out = col(batch(n)).values().detach()
        dense = torch.cat([col[col._collection_plan.table_of[f]].weight[
            torch.tensor([(i * 3 + k) % 5 for i in range(n)])] for k, f in enumerate("abc")],
            dim=1)
        assert torch.equal(out, dense.detach())
    assert torch.equal(col(batch(3)).values().detach(), first)


def test_a_collection_takes_its_tables_from_any_iterable() -> None:
    from lookuplinear import LookupCollection

    col = LookupCollection(t for t in [TableConfig("a", 5, 2, ["a"]), TableConfig("b", 3, 2,
                                                                                   ["b"])])
    assert [t.name for t in col.tables] == ["a", "b"] and col.feature_names == ["a", "b"]


@pytest.mark.parametrize("one_id", [True, False])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_plan_runs_on_the_parameters_each_call_is_given(one_id: bool, sparse: bool) -> None:
    """The plan's execution holds no parameter: given other ``table_groups`` (here the
    collection's doubled), its lookup equals the dense reference on those, in feature order."""
    from torch import nn

    from lookuplinear import KeyedBags, LookupCollection
    from lookuplinear.modules.batched import BatchedLookup

    tables = [TableConfig("a", 5, 2, ["a"]), TableConfig("b", 7, 3, ["b", "c"]),
              TableConfig("d", 4, 2, ["d"])]
    torch.manual_seed(0)
    col = LookupCollection(tables, sparse=sparse)
    bags = [[1], [3]] if one_id else [[1, 3], []]
    kb = KeyedBags.from_dict({f: bags for f in "abcd"})
    doubled = nn.ParameterList(nn.Parameter(p.detach() * 2) for p in col.table_groups)
    run = BatchedLookup(col._collection_plan)
    out = run.lookup(kb, doubled, sparse, col)
    want = torch.cat([kb[f].to_dense(col._places[col._table_of[f]].config.num_embeddings)
                      @ (2 * col[col._table_of[f]].weight.detach()) for f in "abcd"], 1)
    torch.testing.assert_close(out.detach(), want)
    out.sum().backward()
    assert all(p.grad is not None for p in doubled) and col.table_groups[0].grad is None


def test_the_plan_execution_is_no_module_state() -> None:
    """Its tensors and caches are neither buffers nor ``state_dict`` entries, and survive a
    change of dtype and a deep copy (each copy runs on its own tables)."""
    import copy

    from lookuplinear import KeyedBags, LookupCollection

    tables = [TableConfig("a", 5, 2, ["a"]), TableConfig("b", 7, 3, ["b", "c"])]
    col = LookupCollection(tables, sparse=True)
    kb = KeyedBags.from_dict({"a": [[1], [4]], "b": [[0], [6]], "c": [[2], [2]]})
    col(kb)  # fills the caches
    assert list(col.buffers()) == []
    assert sorted(col.state_dict()) == ["embedding_bags.a.weight", "embedding_bags.b.weight"]
    other = copy.deepcopy(col).double()
    with torch.no_grad():
        for p in other.table_groups:
            p.mul_(3)
    torch.testing.assert_close(other(kb).values().detach(),
                               3 * col(kb).values().detach().double())


def test_a_feature_read_by_several_tables_is_one_output_per_table() -> None:
    """(feature, table) pairs: a shared feature is an output per table, keyed feature@table
    (TorchRec's names), placed in its table's group like any other output."""
    plan = plan_collection([TableConfig("t1", 10, 3, ["f1", "f2"]),
                            TableConfig("t2", 10, 4, ["f1"]), TableConfig("t3", 6, 3, ["f1"])])
    assert plan.embedding_names == ("f1@t1", "f2", "f1@t2", "f1@t3")
    assert plan.inputs == ("f1", "f2", "f1", "f1") and plan.feature_names == ("f1", "f2")
    assert plan.outputs_of("f1") == ["f1@t1", "f1@t2", "f1@t3"]
    assert [(g.tables, g.features) for g in plan.groups] == [
        (("t1", "t3"), ("f1@t1", "f2", "f1@t3")), (("t2",), ("f1@t2",))]
    assert plan.columns == (0, 3, 6, 10) and plan.width == 13
    assert plan.place_of("f1@t3").offset == 10 and plan.feature_of["f1@t3"] == "f1"
