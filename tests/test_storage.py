"""Tables in files: the memory-mapped table against an in-memory one holding the same rows
(same steps, same bits), the lazy initialisation, read-only serving, and the errors."""

from __future__ import annotations

import copy
import os
import pickle
import warnings
from pathlib import Path

import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from unchanged import assert_unchanged, snapshot

from lookuplinear import (
    Bags,
    InputValueError,
    LookupIndexError,
    LookupLinear,
    ModelFileError,
    TableStorage,
    optim,
)
from lookuplinear.storage.tables import draw_rows

OPTIMIZERS = {
    "adam": lambda ps, fused: optim.Adam(ps, lr=0.05, fused=fused),
    "adagrad": lambda ps, fused: optim.Adagrad(ps, lr=0.1, fused=fused),
    "sgd-momentum": lambda ps, fused: optim.SGD(ps, lr=0.1, momentum=0.9, fused=fused),
    "rowwise-adagrad": lambda ps, fused: optim.RowWiseAdagrad(ps, lr=0.1, fused=fused),
}


def _twin(layer: LookupLinear) -> LookupLinear:
    """An in-memory layer holding the file table's lazy initial values."""
    twin = LookupLinear(layer.in_features, layer.out_features, mode=layer.mode,
                        bias=layer.bias is not None, padding_idx=layer.padding_idx,
                        sparse=layer.sparse)
    assert layer.storage is not None
    meta = layer.storage.meta
    with torch.no_grad():
        twin.weight.copy_(draw_rows(torch.arange(layer.in_features), layer.out_features,
                                    seed=meta["seed"], init=meta["init"],
                                    in_features=layer.in_features))
        if layer.padding_idx is not None:
            twin.weight[layer.padding_idx] = 0
        if layer.bias is not None and twin.bias is not None:
            twin.bias.copy_(layer.bias)
    return twin


def _batches(n: int, rows: int, steps: int) -> list[Bags]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        lengths = torch.randint(0, 5, (n,), generator=g)
        idx = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
        out.append(Bags(idx, torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])))
    return out


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_trains_as_the_in_memory_table(tmp_path: Path, name: str, fused: bool, mode: str) -> None:
    layer = LookupLinear(200, 6, mode=mode, sparse=True, storage=tmp_path / "t", seed=3,  # type: ignore
                         padding_idx=0)
    twin = _twin(layer)
    opt_a = OPTIMIZERS[name](layer.parameters(), fused)
    opt_b = OPTIMIZERS[name](twin.parameters(), fused)
    target = torch.randn(16, 6, generator=torch.Generator().manual_seed(0))
    for bags in _batches(16, 200, 12):
        for model, opt in ((layer, opt_a), (twin, opt_b)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(bags), target).backward()
            opt.step()
    assert layer.storage is not None
    drawn = layer.storage.drawn.bool()
    assert torch.equal(layer.weight[drawn], twin.weight[drawn])  # same steps, same bits
    assert not layer.weight[~drawn].any()  # rows never looked up were never written
    assert torch.equal(layer.bias, twin.bias)
    state_files = sorted(p.name for p in (tmp_path / "t").glob("state-*.bin"))
    assert state_files  # the optimizer's row state lives beside the table


@pytest.mark.parametrize(("name", "files"), [
    ("adam", {"exp_avg": "moments", "exp_avg_sq": "moments"}),
    ("adagrad", {"sum": "sum"}),
    ("sgd-momentum", {"momentum_buffer": "momentum_buffer"}),
    ("rowwise-adagrad", {"sum": "rowwise_sum"}),
])
def test_a_loaded_optimizer_state_lives_in_the_state_files(
        tmp_path: Path, name: str, files: dict[str, str]) -> None:
    import numpy as np

    a = LookupLinear(200, 6, sparse=True, storage=tmp_path / "a", seed=3)
    b = LookupLinear(200, 6, sparse=True, storage=tmp_path / "b", seed=3)
    opt_a = OPTIMIZERS[name](a.parameters(), False)
    batches = _batches(8, 200, 4)
    for bags in batches[:2]:
        opt_a.zero_grad()
        a(bags).square().sum().backward()
        opt_a.step()
    b.load_state_dict(a.state_dict())
    opt_b = OPTIMIZERS[name](b.parameters(), False)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # a saved one: nothing shared
    state = opt_b.state[b.weight]
    for key, file in files.items():
        kept, loaded = state[key], opt_a.state[a.weight][key]
        assert torch.equal(kept, loaded)
        kept.add_(1)  # written through to the file: the state is the file's memory
        on_disk = torch.from_numpy(
            np.fromfile(tmp_path / "b" / f"state-{file}.bin", dtype=np.float32))
        if file == "moments":  # Adam's, paired: a row's m, then its v
            on_disk = on_disk.view(200, 2, 6)[:, 0 if key == "exp_avg" else 1]
        assert torch.equal(on_disk.reshape(kept.shape), kept)
        kept.copy_(loaded)
    # no other state file: a state is not kept twice on the disk
    assert {f.name for f in (tmp_path / "b").glob("state-*.bin")} == {
        f"state-{file}.bin" for file in files.values()}
    for bags in batches[2:]:  # and trains on as the source
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            model(bags).square().sum().backward()
            opt.step()
    assert torch.equal(a.weight, b.weight)


def test_a_refused_optimizer_load_into_a_read_only_table_changes_nothing(tmp_path: Path) -> None:
    """Loading an optimizer's state over a table opened read-only (no state files to give) is
    refused, and the optimizer keeps its groups and its state, as every refused load does."""
    a = LookupLinear(50, 4, sparse=True, storage=tmp_path / "a", seed=1)
    opt = optim.Adagrad(a.parameters(), lr=0.5)
    a(torch.tensor([[1, 2], [3, 4]])).sum().backward()
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    del opt, a
    served = LookupLinear.open(tmp_path / "a", writable=False)
    reader = optim.Adagrad(served.parameters(), lr=0.1)
    with pytest.raises(InputValueError, match="read-only"):
        reader.load_state_dict(saved)
    assert not reader.state and reader.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_an_optimizer_load_that_fails_part_way_through_the_files_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A load whose second state file cannot be made (a full disk) leaves every state file's
    bytes and the optimizer's state as they were, and the next step is the one an optimizer
    that never saw the load takes: the load is all or nothing across the files."""
    import errno

    from lookuplinear.storage import tables

    model = torch.nn.ModuleList([
        LookupLinear(50, 4, sparse=True, bias=False, storage=tmp_path / n, seed=i)
        for i, n in enumerate("ab")])
    opt = OPTIMIZERS[name](model.parameters(), False)
    batches = _batches(6, 50, 4)

    def train(m: torch.nn.Module, o: torch.optim.Optimizer, bags: Bags) -> None:
        o.zero_grad()
        sum(layer(bags).square().sum() for layer in m).backward()  # type: ignore[union-attr]
        o.step()

    train(model, opt, batches[0])
    saved = copy.deepcopy(opt.state_dict())
    train(model, opt, batches[1])  # the optimizer moves on from the saved state
    before = copy.deepcopy(opt.state_dict())
    files = sorted((tmp_path).glob("*/state-*.bin"))
    assert len(files) == 2
    on_disk = [f.read_bytes() for f in files]

    made = []
    real = tables._map

    def full_disk(path: Path, *args: object, create: bool, **kwargs: object) -> object:
        if create and "state-" in path.name:
            made.append(path)
            if len(made) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, *args, create=create, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tables, "_map", full_disk)
    with pytest.raises(OSError, match="No space left") as raised:
        opt.load_state_dict(saved)
    monkeypatch.undo()
    assert len(made) == 2
    assert [f.read_bytes() for f in files] == on_disk
    assert sorted(tmp_path.glob("*/state-*")) == files  # no staged file left behind
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for i, state in before["state"].items():
        assert state.keys() == after["state"][i].keys()
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][i][key]))
    assert "Nothing was loaded" in " ".join(getattr(raised.value, "__notes__", []))
    # the next step: as an optimizer (over a copy in memory) that never saw the failed load
    twin = torch.nn.ModuleList([LookupLinear(50, 4, sparse=True, bias=False) for _ in "ab"])
    twin.load_state_dict(model.state_dict())
    opt_twin = OPTIMIZERS[name](twin.parameters(), False)
    opt_twin.load_state_dict(before)
    for m, o in ((model, opt), (twin, opt_twin)):
        train(m, o, batches[2])
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
        for key, value in opt_twin.state[q].items():
            assert torch.equal(torch.as_tensor(opt.state[p][key]), torch.as_tensor(value))
    for layer, file in zip(model, files, strict=True):  # a reopen reads the live state
        layer.storage.flush()  # type: ignore[union-attr]
        held = {bytes(t.untyped_storage()) for t in opt.state[layer.weight].values()
                if isinstance(t, torch.Tensor) and t.dim()}
        assert held == {file.read_bytes()}


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_first_step_whose_state_file_cannot_be_made_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fused: bool) -> None:
    """The first step makes the optimizer's state files beside the table; one that cannot be
    made (a full disk) raises the ``OSError`` and leaves no state started part way: the next
    step starts it afresh and trains as a run that never failed."""
    import errno

    from lookuplinear.storage import tables

    def build(path: Path) -> tuple[LookupLinear, torch.optim.Optimizer]:
        layer = LookupLinear(50, 4, sparse=True, storage=path, seed=0)
        return layer, OPTIMIZERS[name](layer.parameters(), fused)

    def step(layer: LookupLinear, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        layer(torch.tensor([[1, 2], [3, 7]])).square().sum().backward()
        opt.step()

    layer, opt = build(tmp_path / "a")
    real = tables._map

    def full_disk(path: Path, *args: object, create: bool, **kwargs: object) -> object:
        if create and "state-" in path.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, *args, create=create, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tables, "_map", full_disk)
    with pytest.raises(OSError, match="No space left"):
        step(layer, opt)
    monkeypatch.undo()
    assert not any(opt.state.values())  # no state started part way
    clean, clean_opt = build(tmp_path / "b")
    for _ in range(2):
        step(layer, opt)
        step(clean, clean_opt)
    assert torch.equal(layer.weight, clean.weight)
    for key, value in clean_opt.state[clean.weight].items():
        assert torch.equal(torch.as_tensor(opt.state[layer.weight][key]), torch.as_tensor(value))


@pytest.mark.parametrize(("links", "failing"), [
    *((True, n) for n in range(1, 5)), *((False, n) for n in range(1, 7))])
def test_an_optimizer_load_whose_rename_fails_changes_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool, failing: int) -> None:
    """Loading an optimizer over two tables in files, the ``failing``-th rename fails: making
    the first or second staged file (1, 2), putting the first or the second table's state in
    place (3, 4; on a file system without hard links, moving the file in use aside first: 3
    and 5). Every file's bytes and name, and the optimizer, are as they were (the first
    table's state file put in place is put back), and the next load succeeds."""
    import errno
    import hashlib

    model = torch.nn.ModuleList([
        LookupLinear(50, 4, sparse=True, bias=False, storage=tmp_path / n, seed=i)
        for i, n in enumerate("ab")])
    opt = optim.Adam(model.parameters(), lr=0.1)

    def step(rows: list[int]) -> None:
        opt.zero_grad()
        sum(layer(torch.tensor(rows)).sum() for layer in model).backward()  # type: ignore
        opt.step()

    def files() -> dict[str, tuple[int, str]]:
        return {str(f.relative_to(tmp_path)): (f.stat().st_ino,
                                                hashlib.sha256(f.read_bytes()).hexdigest())
                for f in sorted(tmp_path.rglob("*")) if f.is_file()}

    step([1, 2])
    saved = copy.deepcopy(opt.state_dict())
    step([3, 4])
    on_disk, before = files(), snapshot(model, opt)
    real, calls = os.replace, []

    def replace(*args: object, **kwargs: object) -> None:
        calls.append(args)
        if len(calls) == failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args, **kwargs)  # type: ignore[arg-type]

    def link(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "replace", replace)
    if not links:
        monkeypatch.setattr(os, "link", link)
    with pytest.raises(OSError, match="No space left"):
        opt.load_state_dict(saved)
    monkeypatch.setattr(os, "replace", real)
    assert files() == on_disk
    assert_unchanged(before, model, opt)
    opt.load_state_dict(saved)
    after = opt.state_dict()
    for i, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][i][key]))
    assert sorted(f.name for f in (tmp_path / "a").iterdir()) == sorted(
        name.split("/")[-1] for name in on_disk if name.startswith("a/"))


@pytest.mark.parametrize("form", ["index", "offsets", "bags", "scipy", "torch-csr"])
def test_every_input_form_draws_its_rows(tmp_path: Path, form: str) -> None:
    layer = LookupLinear(100, 4, storage=tmp_path / "t", seed=0)
    lists = [[1, 5, 5], [], [99, 7]]
    bags = Bags.from_lists(lists)
    dense = bags.to_dense(100)
    x: object = {
        "index": torch.tensor([1, 5, 99, 7]),
        "bags": bags,
        "scipy": sp.csr_matrix(dense.numpy()),
        "torch-csr": dense.to_sparse_csr(),
        "offsets": None,
    }[form]
    out = layer(bags.indices, bags.offsets[:-1]) if x is None else layer(x)
    assert layer.storage is not None
    assert layer.storage.drawn.nonzero().squeeze(1).tolist() == [1, 5, 7, 99]
    ref = layer.to_linear()(dense) if form != "index" else layer.to_linear()(
        torch.nn.functional.one_hot(torch.tensor([1, 5, 99, 7]), 100).float())
    torch.testing.assert_close(out, ref)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 10**9 - 1), min_size=1, max_size=20), st.integers(0, 2**40))
def test_a_rows_value_depends_only_on_seed_and_row(rows: list[int], seed: int) -> None:
    t = torch.tensor(rows)
    once = draw_rows(t, 5, seed=seed, init="normal", in_features=10**9)
    alone = torch.cat([draw_rows(t[i:i + 1], 5, seed=seed, init="normal", in_features=10**9)
                       for i in range(len(rows))])
    assert torch.equal(once, alone)
    assert torch.isfinite(once).all()


def test_lazy_rows_follow_the_in_memory_distributions() -> None:
    rows = torch.arange(20_000)
    normal = draw_rows(rows, 16, seed=0, init="normal", in_features=20_000)
    assert abs(float(normal.mean())) < 0.01 and abs(float(normal.std()) - 1) < 0.01
    linear = draw_rows(rows, 16, seed=0, init="linear", in_features=400)
    assert float(linear.abs().max()) <= 1 / 20 and float(linear.std()) > 0.9 / (20 * 3**0.5)
    assert not torch.equal(draw_rows(rows[:3], 16, seed=1, init="normal", in_features=3),
                           normal[:3])


def test_creating_a_huge_table_writes_nothing(tmp_path: Path) -> None:
    import contextlib

    st = os.statvfs(tmp_path)  # a disk smaller than the table: creating it says so
    small = st.f_bavail * st.f_frsize < 10**9 * 64 * 4
    with pytest.warns(UserWarning, match="SIGBUS") if small else contextlib.nullcontext():
        layer = LookupLinear(10**9, 64, storage=tmp_path / "t", bias=False, seed=0)  # 256 GB
    layer(torch.tensor([0, 10**9 - 1]))
    assert (tmp_path / "t" / "weight.bin").stat().st_size == 10**9 * 64 * 4
    used = sum(p.stat().st_blocks * 512 for p in (tmp_path / "t").iterdir())
    # what this file system takes for one written page of a sparse file (2 MiB on a tmpfs with
    # huge pages): the table's files hold a few such pages
    probe = tmp_path / "probe"
    with probe.open("wb") as f:
        f.truncate(1 << 30)
        f.write(b"x")
    assert used < max(1 << 20, 16 * probe.stat().st_blocks * 512)


def test_serving_read_only_shares_the_file_and_keeps_its_writes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    layer = LookupLinear(1000, 4, storage=tmp_path / "t", mode="mean")
    x = Bags.from_lists([[1, 2], [3]])
    y = layer(x)
    assert layer.storage is not None
    layer.storage.flush()
    before = (tmp_path / "t" / "weight.bin").read_bytes()
    served = LookupLinear.open(tmp_path / "t")
    assert served.mode == "mean" and not served.weight.requires_grad
    assert torch.equal(served(x), y)
    served(torch.tensor([500]))  # drawn in the serving process only
    assert (tmp_path / "t" / "weight.bin").read_bytes() == before
    assert served.storage is not None and not served.storage.writable
    with pytest.raises(InputValueError, match="read-only"):
        served.storage.state("exp_avg", (1000, 4))
    again = LookupLinear.open(tmp_path / "t", writable=True)
    assert torch.equal(again(torch.tensor([500])), served(torch.tensor([500])))


def test_reset_parameters_undraws_every_row(tmp_path: Path) -> None:
    layer = LookupLinear(50, 3, storage=tmp_path / "t", seed=5, padding_idx=2)
    first = layer(torch.tensor([4, 7])).detach()
    layer.reset_parameters()
    assert layer.storage is not None
    assert layer.storage.drawn.nonzero().squeeze(1).tolist() == [2]  # the padding row only
    assert torch.equal(layer(torch.tensor([4, 7])), first)


@pytest.mark.parametrize("fused", [False, True])
def test_reset_parameters_leaves_the_optimizer_state(tmp_path: Path, fused: bool) -> None:
    """The optimizer's state files are the optimizer's: reset_parameters of a table in a file
    redraws its rows and leaves Adam's moments as they are, as an in-memory table does."""
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    layer = LookupLinear(20, 4, sparse=True, bias=False, storage=tmp_path / "t", seed=0)
    coll = LookupCollection([TableConfig("a", 20, 4, ["f"], storage=tmp_path / "c")],
                            sparse=True)
    opts = [optim.Adam(m.parameters(), lr=0.1, fused=fused) for m in (layer, coll)]
    for _ in range(2):
        for opt in opts:
            opt.zero_grad()
        layer(torch.tensor([1, 2])).sum().backward()
        coll(KeyedBags.from_dict({"f": [[1, 2]]})).values().sum().backward()
        for opt in opts:
            opt.step()
    before = [{k: torch.as_tensor(v).clone() for k, v in s.items()}
              for opt in opts for s in opt.state.values()]
    assert all(bool(s["exp_avg"].abs().sum() > 0) for s in before)
    layer.reset_parameters()
    coll.reset_parameters()
    after = [s for opt in opts for s in opt.state.values()]
    for old, new in zip(before, after, strict=True):
        assert all(torch.equal(old[k], torch.as_tensor(new[k])) for k in old)
    assert layer.storage is not None and layer.storage.drawn_rows().numel() == 0


def test_errors(tmp_path: Path) -> None:
    LookupLinear(10, 2, storage=tmp_path / "t")
    with pytest.raises(InputValueError, match="exists"):
        LookupLinear(10, 2, storage=tmp_path / "t")
    with pytest.raises(InputValueError, match="does not exist"):
        LookupLinear(10, 2, storage=tmp_path / "missing" / "t")
    with pytest.raises(InputValueError, match="init"):
        LookupLinear(10, 2, storage=tmp_path / "u", init=torch.nn.init.zeros_)
    with pytest.raises(InputValueError, match="CPU"):
        LookupLinear(10, 2, storage=tmp_path / "u", device="meta")
    layer = LookupLinear(10, 2, storage=tmp_path / "v")
    with pytest.raises(InputValueError, match="dense rows"):
        layer(torch.randn(3, 10))
    with pytest.raises(LookupIndexError):
        layer(torch.tensor([10]))
    with pytest.raises(ModelFileError, match="not a lookuplinear table"):
        LookupLinear.open(tmp_path)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "meta.json").mkdir()
    with pytest.raises(ModelFileError, match=r"meta\.json is not a file.*damaged"):
        LookupLinear.open(tmp_path / "w")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelFileError, match="is a file, not a lookuplinear table directory"):
        LookupLinear.open(tmp_path / "file")
    os.truncate(tmp_path / "t" / "weight.bin", 7)
    with pytest.raises(ModelFileError, match="bytes"):
        LookupLinear.open(tmp_path / "t")
    assert "storage=" in repr(layer) and "TableStorage(" in repr(layer.storage)
    with pytest.raises(TypeError, match=r"LookupLinear\.open"):
        copy.deepcopy(layer)
    with pytest.raises(TypeError, match=r"LookupLinear\.open"):
        pickle.dumps(layer)
    assert isinstance(layer.storage, TableStorage)


@pytest.mark.parametrize(("change", "named"), [
    ({"dtype": "int8"}, r"'dtype' is 'int8', expected one of float32"),
    ({"rows": None}, "no 'rows' field"),
    ({"rows": 100.0}, r"'rows' is 100\.0, expected a positive integer"),
    ({"rows": "100"}, r"'rows' is '100'"),
    ({"dim": 0}, "'dim' is 0"),
    ({"seed": -1}, r"'seed' is -1, expected an integer in \[0, 2\*\*64\)"),
    ({"bias": "yes"}, "'bias' is 'yes', expected true or false"),
    ({"init": "uniform"}, "'init' is 'uniform'"),
    ({"mode": "median"}, "'mode' is 'median'"),
    ({"padding_idx": 100}, r"'padding_idx' is 100, expected null or a row index"),
])
def test_a_damaged_meta_json_is_a_model_file_error_naming_the_field(
        tmp_path: Path, change: dict[str, object], named: str) -> None:
    import json

    LookupLinear(100, 4, storage=tmp_path / "t", seed=0)(torch.arange(10))
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    meta.update(change)
    meta = {k: v for k, v in meta.items() if not (k == "rows" and v is None)}
    (tmp_path / "t" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match=named):
        LookupLinear.open(tmp_path / "t")


@pytest.mark.parametrize("seed", [2**64, 2**70], ids=["2**64", "2**70"])
def test_a_seed_of_2_pow_64_or_more_is_refused_before_anything_is_written(
        tmp_path: Path, seed: int) -> None:
    with pytest.raises(InputValueError, match=r"seed must be an integer in \[0, 2\*\*64\), got"):
        LookupLinear(100, 4, storage=tmp_path / "t", seed=seed)
    assert list(tmp_path.iterdir()) == []
    top = LookupLinear(100, 4, storage=tmp_path / "t", seed=2**64 - 1)
    top(torch.arange(10))
    assert LookupLinear.open(tmp_path / "t").storage.meta["seed"] == 2**64 - 1


def test_a_collection_table_in_a_file_trains_as_in_memory(tmp_path: Path) -> None:
    from lookuplinear import Checkpoint, KeyedBags, LookupCollection, TableConfig

    def tables(storage: Path | None) -> list[TableConfig]:
        return [TableConfig("user", 300, 4, ["u"], mode="mean", storage=storage),
                TableConfig("item", 200, 4, ["i", "j"])]

    torch.manual_seed(0)
    filed = LookupCollection(tables(tmp_path / "user"), sparse=True)
    torch.manual_seed(0)
    memory = LookupCollection(tables(None), sparse=True)
    storage = filed["user"].storage
    assert storage is not None
    with torch.no_grad():  # the in-memory twin holds the file table's lazy initial values
        memory._rows("user").copy_(draw_rows(torch.arange(300), 4, seed=storage.meta["seed"],
                                             init="normal", in_features=300))
        memory._rows("item").copy_(filed._rows("item"))
    opts = [optim.Adam(c.parameters(), lr=0.1, fused=True) for c in (filed, memory)]
    ckpt = Checkpoint(tmp_path / "ckpt", filed, opts[0])
    for step in range(6):
        kb = KeyedBags.from_dict({"u": [[step, 299], []], "i": [[step * 7 % 200], [3]],
                                  "j": [[1, 1], [step]]})
        for coll, opt in zip((filed, memory), opts, strict=True):
            opt.zero_grad()
            coll(kb).values().pow(2).sum().backward()
        if step == 3:
            ckpt.save(step=step)
            saved = filed._rows("user").detach().clone()
    drawn = storage.drawn.bool()
    assert drawn.nonzero().squeeze(1).tolist() == [0, 1, 2, 3, 4, 5, 299]  # the rows named
    assert torch.equal(filed._rows("user")[drawn], memory._rows("user")[drawn])
    assert torch.equal(filed._rows("item"), memory._rows("item"))
    assert ckpt.restore() == {"step": 3}
    assert torch.equal(filed._rows("user"), saved)
    again = LookupCollection(tables(tmp_path / "user"), sparse=True)  # the path exists: opened
    assert torch.equal(again._rows("user"), saved)
    with pytest.raises(InputValueError, match="holds a 300 x 4"):
        LookupCollection([TableConfig("user", 301, 4, ["u"], storage=tmp_path / "user")])
    for other, named in [({"init": "linear"}, "init='normal'.*init='linear'"),
                         ({"padding_idx": 5}, "padding_idx=None.*padding_idx=5"),
                         ({"mode": "sum"}, "mode='mean'.*mode='sum'")]:
        with pytest.raises(InputValueError, match=named + ".*another path"):
            LookupCollection([TableConfig("user", 300, 4, ["u"], **{"mode": "mean", **other},
                                          storage=tmp_path / "user")])
    view = filed["user"]  # a LookupLinear on the same file: it draws rows as the collection does
    assert view.storage is storage
    assert torch.equal(view(torch.tensor([150])), filed({"u": torch.tensor([150])})["u"])
    assert 150 in storage.drawn_rows().tolist()


def test_under_torch_compile_rows_are_drawn_as_in_eager(tmp_path: Path) -> None:
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    layer = LookupLinear(100, 4, storage=tmp_path / "t", seed=0, mode="mean")
    compiled = torch.compile(layer, backend="eager")
    x = Bags.from_lists([[5, 7], [9]])
    y = compiled(x)
    assert layer.storage is not None and layer.storage.drawn_rows().tolist() == [5, 7, 9]
    assert torch.equal(y, layer(x))
    coll = LookupCollection([TableConfig("t", 100, 4, ["f"], storage=tmp_path / "c")])
    kb = KeyedBags.from_dict({"f": [[3], [4, 3]]})
    out = torch.compile(coll, backend="eager")(kb).values()
    assert torch.equal(out, coll(kb).values()) and bool(out.abs().sum() > 0)


def test_under_torch_compile_rows_are_drawn_after_another_compiled_collection(
        tmp_path: Path) -> None:
    """A collection compiled after another one (of two widths, on bags) draws its table's rows:
    the frame that decides to draw may run eagerly after a graph break while the lookup runs
    compiled, and the rows were then left undrawn (zeros)."""
    import torch._dynamo

    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    torch._dynamo.reset()
    other = LookupCollection([TableConfig("a", 5, 2, ["a"]), TableConfig("b", 4, 3, ["b"])])
    torch.compile(other, backend="eager")(KeyedBags.from_dict({"a": [[4, 4], []],
                                                               "b": [[1], [3, 0]]}))
    coll = LookupCollection([TableConfig("t", 100, 4, ["f"], storage=tmp_path / "c")])
    kb = KeyedBags.from_dict({"f": [[3], [4, 3]]})
    out = torch.compile(coll, backend="eager")(kb).values()
    storage = coll["t"].storage
    assert storage is not None and storage.drawn_rows().tolist() == [3, 4]
    assert torch.equal(out, coll(kb).values()) and bool(out.abs().sum() > 0)
    torch._dynamo.reset()


def test_a_table_larger_than_the_free_disk_warns_when_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse, memory-mapped file written past the free space ends the process (SIGBUS):
    creating a table larger than the space free says so first."""
    from types import SimpleNamespace

    monkeypatch.setattr(os, "statvfs", lambda _: SimpleNamespace(f_bavail=1, f_frsize=4096))
    with pytest.warns(UserWarning, match=r"needs up to 6,400 bytes .* has 4,096 free.*SIGBUS"):
        LookupLinear(100, 16, storage=tmp_path / "big", seed=0)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LookupLinear(100, 16, storage=tmp_path / "fits", seed=0)


def test_optimizer_state_larger_than_the_free_disk_warns_when_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that fits the disk whose optimizer state does not: the state file's creation
    warns, before any row of it is written (a SIGBUS otherwise ends training)."""
    from types import SimpleNamespace

    monkeypatch.setattr(os, "statvfs", lambda _: SimpleNamespace(f_bavail=2, f_frsize=4096))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer = LookupLinear(100, 16, sparse=True, bias=False, storage=tmp_path / "t", seed=0)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    layer(torch.tensor([1, 2])).sum().backward()
    # Adam's 12,800 bytes and what of the table's 6,500 is not written yet
    with pytest.warns(UserWarning, match=r"optimizer state .* needs up to 1\d,\d{3} bytes .* "
                                         r"has 8,192 free.*SIGBUS"):
        opt.step()


@pytest.mark.parametrize("nested", [False, True])
def test_a_collection_refused_load_writes_none_of_its_table_files(tmp_path: Path,
                                                                  nested: bool) -> None:
    """A collection with a table in a file, loaded with another table's entry on the meta
    device: neither its own load nor PyTorch's around it (inside a model) copies the file's
    table or marks its rows written."""
    import hashlib

    from lookuplinear import LookupCollection, TableConfig

    coll = LookupCollection([TableConfig("a", 50, 4, ["a"], storage=tmp_path / "a"),
                             TableConfig("b", 8, 4, ["b"])])
    coll({"a": torch.tensor([1, 2]), "b": torch.tensor([3])})
    prefix = "0." if nested else ""
    state = {prefix + k: v for k, v in coll.state_dict().items()}
    state[prefix + "embedding_bags.a.weight"] = torch.zeros(50, 4)
    state[prefix + "embedding_bags.b.weight"] = torch.zeros(8, 4, device="meta")

    def files() -> dict[str, str]:
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted((tmp_path / "a").iterdir())}

    before, table = files(), coll["a"].weight.detach().clone()
    model = torch.nn.Sequential(coll) if nested else coll
    with pytest.raises(RuntimeError, match="meta device"):
        model.load_state_dict(state)
    assert files() == before
    assert torch.equal(coll["a"].weight, table)


@pytest.mark.parametrize("nested", [False, True])
def test_a_refused_load_writes_none_of_the_table_files(tmp_path: Path, nested: bool) -> None:
    """An entry the load cannot copy (a meta tensor) is refused before the weight is copied
    into the file, by the layer's own load and inside a model whose load is PyTorch's."""
    import hashlib

    layer = LookupLinear(100, 4, storage=tmp_path / "t", seed=0)
    layer(torch.tensor([1, 2, 3]))  # rows drawn: weight.bin and drawn.bin hold values

    def files() -> dict[str, str]:
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted((tmp_path / "t").iterdir())}

    before, weight = files(), layer.weight.detach().clone()
    model = torch.nn.Sequential(layer) if nested else layer
    prefix = "0." if nested else ""
    with pytest.raises(RuntimeError, match=r"bias: .*meta device"):
        model.load_state_dict({f"{prefix}weight": torch.zeros(100, 4),
                               f"{prefix}bias": torch.empty(4, device="meta")})
    assert files() == before
    assert torch.equal(layer.weight, weight)


@pytest.mark.parametrize("fused", [False, True])
def test_rowwise_adagrad_keeps_a_half_tables_sums_in_float32_beside_it(tmp_path: Path,
                                                                       fused: bool) -> None:
    """A float16 table in a file: RowWiseAdagrad's sums are a float32 file beside it (FBGEMM's
    state dtype), which large gradients do not overflow."""
    layer = LookupLinear(50, 4, sparse=True, storage=tmp_path / "t", seed=3,  # type: ignore
                         dtype=torch.float16)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, fused=fused)
    for _ in range(3):
        opt.zero_grad()
        (300 * layer(Bags.from_lists([[1], [2, 2]]))).sum().backward()
        opt.step()
    sums = opt.state[layer.weight]["sum"]
    assert sums.dtype == torch.float32 and sums[2].item() == 3 * 600.0**2
    assert (tmp_path / "t" / "state-rowwise_sum.bin").stat().st_size == 50 * 4


DENSE_OPTIMIZERS = {
    "sgd-decay": lambda ps: optim.SGD(ps, lr=0.5, weight_decay=1.0),
    "adagrad-decay": lambda ps: optim.Adagrad(ps, lr=0.1, weight_decay=0.5),
    "adamw": lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.5),
    "torch-sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                     weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(DENSE_OPTIMIZERS))
def test_dense_gradients_train_as_the_in_memory_table(tmp_path: Path, name: str) -> None:
    """A dense gradient's update (weight decay, momentum) changes every row, so the first
    lookup that records one draws every row first: the rows never looked up decay as in
    memory, and the whole table equals the in-memory one to the bit."""
    layer = LookupLinear(30, 4, sparse=False, storage=tmp_path / "t", seed=3)
    twin = _twin(layer)
    opts = [DENSE_OPTIMIZERS[name](m.parameters()) for m in (layer, twin)]
    with torch.no_grad():
        layer(torch.tensor([1]))
    assert layer.storage is not None and layer.storage.drawn_rows().tolist() == [1]
    for bags in _batches(4, 30, 3):
        for model, opt in zip((layer, twin), opts, strict=True):
            opt.zero_grad()
            model(bags).pow(2).sum().backward()
            opt.step()
    assert int(layer.storage.drawn.sum()) == 30
    assert torch.equal(layer.weight, twin.weight)
    assert torch.equal(layer(torch.tensor([17])), twin(torch.tensor([17])))


def test_a_max_table_in_a_file_trains_as_in_memory(tmp_path: Path) -> None:
    """A collection's ``mode="max"`` table gets a dense gradient: as the layer's above."""
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    def tables(storage: Path | None) -> list[TableConfig]:
        return [TableConfig("t", 20, 4, ["f"], mode="max", storage=storage)]

    torch.manual_seed(0)
    filed = LookupCollection(tables(tmp_path / "t"), sparse=True)
    memory = LookupCollection(tables(None), sparse=True)
    storage = filed["t"].storage
    assert storage is not None
    with torch.no_grad():
        memory._rows("t").copy_(draw_rows(torch.arange(20), 4, seed=storage.meta["seed"],
                                          init="normal", in_features=20))
    opts = [optim.AdamW(c.parameters(), lr=0.1, weight_decay=0.5) for c in (filed, memory)]
    for step in range(3):
        kb = KeyedBags.from_dict({"f": [[step, 7], [3]]})
        for coll, opt in zip((filed, memory), opts, strict=True):
            opt.zero_grad()
            coll(kb).values().pow(2).sum().backward()
            opt.step()
    assert torch.equal(filed._rows("t"), memory._rows("t"))


def test_a_checkpoint_save_draws_nothing(tmp_path: Path) -> None:
    """A table saved whole (dense gradients, a torch.optim optimizer) is read as it is: the
    save draws no row."""
    from lookuplinear import Checkpoint

    layer = LookupLinear(1000, 4, sparse=False, storage=tmp_path / "t", seed=0)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    with torch.no_grad():
        layer(torch.tensor([3]))
    Checkpoint(tmp_path / "ckpt", layer, opt).save()
    assert layer.storage is not None and layer.storage.drawn_rows().tolist() == [3]


def test_converting_or_sharing_a_table_in_a_file_is_refused(tmp_path: Path) -> None:
    """``.double()``, ``.half()``, ``.to(dtype)``, ``share_memory()`` and ``to_empty()`` would
    put the table in new memory the file no longer follows: refused before anything changes
    (also inside a model, and for a collection); what leaves it in place (``.cpu()``,
    ``.float()``) passes."""
    from lookuplinear import LookupCollection, TableConfig

    layer = LookupLinear(10, 4, storage=tmp_path / "t", seed=0)
    coll = LookupCollection([TableConfig("t", 10, 4, ["f"], storage=tmp_path / "c")])
    assert layer.storage is not None
    for module in (layer, torch.nn.Sequential(layer), coll):
        params = [p.data_ptr() for p in module.parameters()]
        for convert in (lambda m: m.double(), lambda m: m.half(),
                        lambda m: m.to(torch.float64)):
            with pytest.raises(InputValueError, match=r"float.*create the table with that dtype"):
                convert(module)
        with pytest.raises(InputValueError, match=r"already shared.*LookupLinear.open"):
            module.share_memory()
        # new memory of the same dtype and device (the file would no longer follow it)
        with pytest.raises(InputValueError, match=r"to_empty\(\).*leave the table out"):
            module.to_empty(device="cpu")
        module.cpu().float().to(torch.float32).to("cpu")
        assert [p.data_ptr() for p in module.parameters()] == params
    assert layer.weight.data_ptr() == layer.storage.weight.data_ptr()
    assert layer.weight.dtype == torch.float32
