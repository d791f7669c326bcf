"""``load_state_dict`` of every lookuplinear module and optimizer is all or nothing: a state dict
that does not fit is refused before anything is copied (``nn.Module.load_state_dict`` copies
every entry that fits, then raises), with a ``LookupLinearError`` that is also the builtin
PyTorch raises, naming what was expected and what came; the module and optimizer are left as
they were, to the bit (tests/unchanged.py)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lookuplinear import (
    Embedding,
    EmbeddingBag,
    IdMap,
    InputValueError,
    LookupCollection,
    LookupLinear,
    LookupLinearError,
    StateDictError,
    TableConfig,
    optim,
)

sys.path.insert(0, str(Path(__file__).parent))
from unchanged import assert_unchanged, snapshot


def _refused(module: nn.Module, state: Any, match: str, **kw: Any) -> StateDictError:
    before = snapshot(module)
    with pytest.raises(StateDictError, match=match) as err:
        module.load_state_dict(state, **kw)
    assert isinstance(err.value, RuntimeError) and isinstance(err.value, LookupLinearError)
    assert "Nothing was loaded" in str(err.value)
    assert_unchanged(before, module)
    return err.value


@pytest.mark.parametrize("in_file", [False, True])
def test_a_layer_refuses_a_state_dict_with_one_entry_of_another_shape(
        tmp_path: Path, in_file: bool) -> None:
    """The weight fits, the bias does not: PyTorch's load would copy the weight first (and a
    table in a file would mark every row written)."""
    layer = LookupLinear(10, 3, storage=tmp_path / "t" if in_file else None, seed=0)
    layer(torch.tensor([1, 2]))
    _refused(layer, {"weight": torch.ones(10, 3), "bias": torch.ones(4)},
             r"bias: the state dict's is of shape \(4,\), this module's \(3,\)")
    _refused(layer, {"weight": torch.ones(10, 3), "bias": torch.ones(3), "scale": torch.ones(1)},
             "Unexpected key.*scale")
    _refused(layer, {"weight": torch.ones(10, 3)}, "Missing key.*bias")
    layer.load_state_dict({"weight": torch.ones(10, 3)}, strict=False)   # as PyTorch's
    assert torch.equal(layer.weight, torch.ones(10, 3))


def test_a_layer_refuses_nn_linears_state_dict_naming_the_layout() -> None:
    """``nn.Linear`` keeps ``weight`` as ``(out, in)``, the layer ``(in, out)``: a square one
    would load transposed without a word, so its version (1) is refused; a transposed shape
    names the layout; a plain dict (no version) and a layer's own state dict load."""
    err = _refused(LookupLinear(5, 5), nn.Linear(5, 5).state_dict(), "marked version 1")
    assert "from_linear" in str(err) and "_metadata['']['version'] = 2" in str(err)
    err = _refused(LookupLinear(6, 4), nn.Linear(6, 4).state_dict(),
                   r"\(4, 6\), nn.Linear's layout \(out_features, in_features\)")
    assert "from_linear" in str(err) and "linear.weight.T" in str(err)
    # inside a module whose load is PyTorch's: the same refusal, before the copy
    with pytest.raises(RuntimeError, match="marked version 1"):
        nn.Sequential(LookupLinear(5, 5)).load_state_dict(nn.Sequential(nn.Linear(5, 5))
                                                         .state_dict())
    saved = LookupLinear(5, 5)
    state = saved.state_dict()
    assert state._metadata[""]["version"] == 2  # type: ignore[attr-defined]
    layer = LookupLinear(5, 5)
    layer.load_state_dict(state)
    assert torch.equal(layer.weight, saved.weight)
    state._metadata[""]["version"] = 1  # type: ignore[attr-defined]  # an older lookuplinear's
    _refused(LookupLinear(5, 5), state, "older lookuplinear")
    state._metadata[""]["version"] = 2  # type: ignore[attr-defined]  # marked as the message says
    LookupLinear(5, 5).load_state_dict(state)
    lin = nn.Linear(5, 5)
    layer.load_state_dict({"weight": lin.weight.T, "bias": lin.bias})  # plain dict: as given
    x = torch.tensor([0, 3])
    torch.testing.assert_close(layer(x), lin(nn.functional.one_hot(x, 5).float()))


def test_embedding_bag_refuses_as_nn_embedding_bag_does_without_copying() -> None:
    """Same refusals as ``nn.EmbeddingBag`` (a ``RuntimeError``), where the peer has copied the
    weight by then; a state dict that fits loads as the peer's."""
    bag, peer = EmbeddingBag(6, 2), nn.EmbeddingBag(6, 2)
    state = {"weight": torch.ones(6, 2), "offsets": torch.zeros(1)}
    with pytest.raises(RuntimeError, match="Unexpected key"):
        peer.load_state_dict(state)
    err = _refused(bag, state, "Unexpected key.*offsets")
    assert isinstance(err, RuntimeError)
    bag.load_state_dict({"weight": torch.ones(6, 2)})
    assert torch.equal(bag.weight, peer.weight)


def test_embedding_refuses_as_nn_embedding_does_without_copying() -> None:
    """``lookuplinear.Embedding`` too: ``nn.Embedding`` copies the weight, then raises."""
    emb, peer = Embedding(6, 2), nn.Embedding(6, 2)
    state = {"weight": torch.ones(6, 2), "junk": torch.zeros(1)}
    with pytest.raises(RuntimeError, match="Unexpected key"):
        peer.load_state_dict(state)
    assert torch.equal(peer.weight, torch.ones(6, 2))  # the peer's half-applied load
    _refused(emb, state, "Unexpected key.*junk")


@pytest.mark.parametrize("cls", [Embedding, EmbeddingBag, LookupLinear])
def test_a_load_pre_hook_that_renames_an_entry_is_run_by_the_check(cls: type) -> None:
    """A ``load_state_dict`` pre-hook that renames an older key loads as with ``nn.Embedding``:
    the check runs it on its copy, as the load does; what it renames to is checked (a wrong
    shape refused before anything is copied), and the caller's dict is left as it was."""
    def rename(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
        if prefix + "table" in state:
            state[prefix + "weight"] = state.pop(prefix + "table")

    module = cls(10, 3, bias=False) if cls is LookupLinear else cls(10, 3)
    module.register_load_state_dict_pre_hook(rename)
    state = {"table": torch.ones(10, 3)}
    module.load_state_dict(state)
    assert torch.equal(module.weight, torch.ones(10, 3)) and list(state) == ["table"]
    _refused(module, {"table": torch.zeros(10, 4)}, r"weight: the state dict's is of shape")
    model = nn.Sequential(nn.Linear(3, 3), module)
    model.load_state_dict({**{f"0.{k}": v for k, v in nn.Linear(3, 3).state_dict().items()},
                           "1.table": torch.full((10, 3), 2.0)})
    assert torch.equal(module.weight, torch.full((10, 3), 2.0))


@pytest.mark.parametrize("in_file", [False, True])
@pytest.mark.parametrize("kind", ["meta", "sparse"])
def test_an_entry_without_values_to_copy_is_refused_before_any_is_copied(
        tmp_path: Path, in_file: bool, kind: str) -> None:
    """An entry on the meta device or of another layout fits by shape, and PyTorch's copy of
    it fails after the entries before it were copied; it is refused first (``assign=True``
    takes it as PyTorch does)."""
    layer = LookupLinear(10, 3, storage=tmp_path / "t" if in_file else None, seed=0)
    layer(torch.tensor([1, 2]))
    bias = torch.ones(3, device="meta") if kind == "meta" else torch.ones(3).to_sparse()
    words = "meta device" if kind == "meta" else "sparse_coo tensor"
    _refused(layer, {"weight": torch.ones(10, 3), "bias": bias}, f"bias: .*{words}")
    collection = _collection(tmp_path / "c" if in_file else None)
    state = collection.state_dict()
    last = list(state)[-1]
    state[last] = (state[last].to("meta") if kind == "meta"
                   else state[last].to_sparse())
    _refused(collection, state, words)


def test_an_entry_assign_cannot_make_a_parameter_is_refused_before_any_is_assigned() -> None:
    """``assign=True`` makes each entry the parameter, which fails for an integer entry of a
    parameter that requires grad after the entries before it were assigned; it is refused
    first, in a collection's group too; a parameter that does not require grad takes it."""
    layer = LookupLinear(10, 3)
    err = _refused(layer, {"weight": torch.ones(10, 3), "bias": torch.tensor([1, 2, 3])},
                   r"bias: the state dict's is torch.int64, .*requires grad", assign=True)
    assert ".to(torch.float32)" in str(err)
    collection = _collection()
    state = collection.state_dict()
    state["embedding_bags.ids.weight"] = state["embedding_bags.ids.weight"].long()  # own group
    _refused(collection, state, r"embedding_bags\.ids\.weight: the state dict's is torch.int64",
             assign=True)
    layer.bias.requires_grad_(False)
    layer.load_state_dict({"weight": torch.ones(10, 3, dtype=torch.float64),
                           "bias": torch.tensor([1, 2, 3])}, assign=True)
    assert layer.weight.dtype == torch.float64 and layer.bias.dtype == torch.int64


def _collection(storage: Path | None = None) -> LookupCollection:
    torch.manual_seed(0)
    return LookupCollection([
        TableConfig("user", 10, 4, ["u"], storage=storage),
        TableConfig("item", 8, 4, ["i"]),
        TableConfig("ids", 12, 3, ["s"], hashing="map", key_type="str"),
    ])


@pytest.mark.parametrize("in_file", [False, True])
def test_a_collection_refuses_a_table_of_another_shape_naming_it(
        tmp_path: Path, in_file: bool) -> None:
    coll = _collection(tmp_path / "user" if in_file else None)
    coll({"u": torch.tensor([1]), "i": torch.tensor([2]), "s": ["a", "b"]})
    good = _collection().state_dict()
    wider = dict(good, **{"embedding_bags.item.weight": torch.ones(8, 5)})  # torch.cat crashed
    _refused(coll, wider, r"table 'item' is of shape \(8, 4\) in this collection, the state "
                          r"dict's is \(8, 5\)")
    longer = dict(good, **{"embedding_bags.item.weight": torch.ones(9, 4)})
    _refused(coll, longer, r"table 'item' is of shape \(8, 4\).*\(9, 4\)")
    _refused(coll, {"embedding_bags.user.weight": torch.ones(10, 4)},
             "Missing key.*embedding_bags.item.weight")
    if in_file:  # the file's rows no lookup drew have no values to keep
        _refused(coll, {"embedding_bags.item.weight": torch.ones(8, 4)},
                 "left out of a strict=False load, but its group is a table in a file",
                 strict=False)
    damaged = dict(good, **{"id_maps.ids.key_strings": torch.tensor([0xFF], dtype=torch.uint8),
                            "id_maps.ids.key_offsets": torch.tensor([0, 1]),
                            "id_maps.ids.key_codes": torch.tensor([5])})
    _refused(coll, damaged, "not UTF-8")  # the tables fit: PyTorch's load had copied them
    coll.load_state_dict(good)
    for name in ("user", "item", "ids"):
        assert torch.equal(coll[name].weight, _collection()[name].weight)


def test_a_collection_loads_the_tables_given_with_strict_false_as_torchrec() -> None:
    """``strict=False`` with some tables left out loads the others and reports the ones left
    out as missing, by their ``embedding_bags.<table>.weight`` names, keeping their values, as
    TorchRec's ``EmbeddingBagCollection`` (any module's parameters) does: tables sharing a
    group parameter were refused ("loads every table or none")."""
    coll = _collection()
    with torch.no_grad():
        coll["item"].weight.add_(1.0)  # values a load that copied the state's would lose
    before = coll["item"].weight.detach().clone()
    state = _collection().state_dict()
    state["embedding_bags.user.weight"] = torch.ones(10, 4)
    del state["embedding_bags.item.weight"]
    result = coll.load_state_dict(state, strict=False)
    assert result.missing_keys == ["embedding_bags.item.weight"]
    assert result.unexpected_keys == []
    assert torch.equal(coll["user"].weight, torch.ones(10, 4))
    assert torch.equal(coll["item"].weight, before)
    assert torch.equal(coll["ids"].weight, _collection()["ids"].weight)
    state["embedding_bags.user.weight"] = torch.zeros(10, 4)
    _refused(coll, state, "Missing key.*embedding_bags.item.weight")  # strict: nothing loaded
    assert torch.equal(coll["user"].weight, torch.ones(10, 4))
    # a str-keyed IdMap left out with its table too: kept as it is and reported missing (it
    # was read as an int map's state, "the state has no strings", and refused)
    coll({"u": torch.tensor([1]), "i": torch.tensor([2]), "s": ["a", "b"]})
    mapped = coll.id_maps["ids"].state_dict()
    without = {k: v for k, v in _collection().state_dict().items()
               if not k.startswith(("id_maps.", "embedding_bags.ids."))}
    result = coll.load_state_dict(without, strict=False)
    assert sorted(result.missing_keys) == sorted(
        ["embedding_bags.ids.weight", *(f"id_maps.ids.{k}" for k in mapped)])
    for key, value in coll.id_maps["ids"].state_dict().items():
        assert torch.equal(value, mapped[key]), key
    _refused(coll, without, "Missing key")


def test_a_quantized_layer_and_collection_refuse_before_copying() -> None:
    q = LookupLinear(20, 4).quantize("int8")
    state = q.state_dict()
    _refused(q, dict(state, bias=torch.ones(5)), r"bias.*\(5,\).*\(4,\)")
    coll = LookupCollection([TableConfig("a", 20, 4, ["a"]), TableConfig("b", 6, 4, ["b"])])
    qc = coll.quantize("int8")
    bad = dict(qc.state_dict(), **{"layers.b.packed": torch.ones(7, 12, dtype=torch.uint8)})
    _refused(qc, bad, r"layers\.b\.packed.*\(7, 12\).*\(6, 12\)")


def test_a_quantized_table_of_another_dtype_and_width_is_refused_though_its_bytes_fit() -> None:
    """An int4 table of 16 columns packs to 12 bytes a row, as an int8 one of 4 does: the
    layer keeps its format (``qformat``) and refuses the other's, inside a model too; a state
    saved without the format loads as before."""
    torch.manual_seed(0)
    int4 = LookupLinear(10, 16, bias=False).quantize("int4")
    int8 = LookupLinear(10, 4, bias=False).quantize("int8")
    assert int4.packed.shape == int8.packed.shape
    _refused(int8, int4.state_dict(), "packed: the state dict's table is int4 of 16 columns, "
             "this layer's int8 of 4")
    # inside a module whose load is PyTorch's: the same refusal, before the layer's copy
    model = nn.Sequential(int8)
    before = snapshot(model)
    with pytest.raises(RuntimeError, match=r"0\.packed: the state dict's table is int4 of 16"):
        model.load_state_dict(nn.Sequential(int4).state_dict())
    assert_unchanged(before, model)
    coll = LookupCollection([TableConfig("a", 10, 16, ["a"])])
    other = LookupCollection([TableConfig("a", 10, 4, ["a"])])
    _refused(other.quantize("int8"), coll.quantize("int4").state_dict(), "int4 of 16 columns")
    older = {k: v for k, v in int8.state_dict().items() if k != "qformat"}
    fresh = LookupLinear(10, 4, bias=False).quantize("int8")
    fresh.load_state_dict(older)
    assert torch.equal(fresh.packed, int8.packed)
    # without qformat, a float16 table's values and an integer table's bytes do not mix: the
    # load cast one into the other (an int4 table of 8 columns and a float16 one are both
    # (10, 8)), and the layer read garbage
    int4_8 = LookupLinear(10, 8, bias=False).quantize("int4")
    half = LookupLinear(10, 8, bias=False).quantize("float16")
    assert int4_8.packed.shape == half.packed.shape
    for src, dst, says in ((int4_8, half, "holds torch.uint8 entries"),
                           (half, int4_8, "holds float16 values")):
        older = {k: v for k, v in src.state_dict().items() if k != "qformat"}
        _refused(dst, older, f"packed: the state dict's table {says} and no qformat")
        with pytest.raises(RuntimeError, match=r"no 0\.qformat"):
            nn.Sequential(dst).load_state_dict({"0." + k: v for k, v in older.items()})


def test_an_id_map_refuses_another_kind_of_map_before_copying_its_buffers() -> None:
    strs = IdMap(10, key_type="str")
    strs(["a", "b"])
    ints = IdMap(10)
    ints(torch.tensor([7, 8, 9]))
    _refused(ints, strs.state_dict(), "key_type='str'")
    strs2 = IdMap(10, key_type="str")
    strs2(["z"])
    _refused(strs2, ints.state_dict(), "int map")


# ---------------------------------------------------------------------- optimizers
def _trained_adam() -> tuple[nn.Module, optim.Adam]:
    torch.manual_seed(0)
    model = nn.Sequential(LookupLinear(20, 3, sparse=True), nn.Linear(3, 1))
    opt = optim.Adam(model.parameters(), lr=0.1)
    model(torch.tensor([1, 4])).sum().backward()
    opt.step()
    return model, opt


def _opt_refused(opt: torch.optim.Optimizer, model: nn.Module, state: dict[str, Any],
                 match: str) -> None:
    before = snapshot(model, opt)
    with pytest.raises(InputValueError, match=match) as err:
        opt.load_state_dict(state)
    assert "Nothing was loaded" in str(err.value)
    assert_unchanged(before, model, opt)


def test_an_optimizer_refuses_another_optimizers_groups_before_loading() -> None:
    model, opt = _trained_adam()
    other, other_opt = _trained_adam()
    state = other_opt.state_dict()
    two = {"state": {}, "param_groups": [dict(state["param_groups"][0], params=[0, 1]),
                                         dict(state["param_groups"][0], params=[2, 3])]}
    _opt_refused(opt, model, two, "2 parameter groups, this optimizer 1")
    fewer = {"state": {}, "param_groups": [dict(state["param_groups"][0], params=[0, 1])]}
    _opt_refused(opt, model, fewer, "group 0 has 2 parameters, this optimizer's 4")
    adagrad = optim.Adagrad(other.parameters(), lr=0.1)
    _opt_refused(opt, model, adagrad.state_dict(), "no betas")


def test_an_optimizer_refuses_a_state_without_the_tensors_it_keeps() -> None:
    """Adam's state without ``exp_avg_sq`` loaded, then failed at the next step with a
    KeyError; a ``step`` that is not a count is refused too."""
    model, opt = _trained_adam()
    state = opt.state_dict()
    lacking = {"param_groups": state["param_groups"],
               "state": {k: {n: v for n, v in s.items() if n != "exp_avg_sq"}
                         for k, s in state["state"].items()}}
    _opt_refused(opt, model, lacking, "has no exp_avg_sq")
    steps = {"param_groups": state["param_groups"],
             "state": {k: dict(s, step=torch.tensor([1, 2])) for k, s in state["state"].items()}}
    _opt_refused(opt, model, steps, "not a count")
    for bad_step in (torch.tensor(2.7), -5, 2.5):
        odd = {"param_groups": state["param_groups"],
               "state": {k: dict(s, step=bad_step) for k, s in state["state"].items()}}
        _opt_refused(opt, model, odd, "not a count")
    meta = {"param_groups": state["param_groups"],
            "state": {k: dict(s, exp_avg=s["exp_avg"].to("meta"))
                      for k, s in state["state"].items()}}
    _opt_refused(opt, model, meta, "has no exp_avg with values")
    for key, value, words in (("lr", "abc", "lr must be a number"), ("lr", -1.0, "lr must be"),
                              ("eps", None, "eps must be"),
                              ("betas", (1.5, 0.9), r"betas must both be in \[0, 1\)")):
        group = dict(state["param_groups"][0], **{key: value})
        _opt_refused(opt, model, {"param_groups": [group], "state": state["state"]}, words)
    momentum = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with_buffer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.tensor([1])).sum().backward()
    with_buffer.step()
    sd = copy.deepcopy(with_buffer.state_dict())
    for s in sd["state"].values():
        s["momentum_buffer"] = None   # as torch.optim.SGD(momentum=0) saves it
    _opt_refused(momentum, model, sd, "has no momentum_buffer")
    momentum.load_state_dict(with_buffer.state_dict())   # the whole state loads
