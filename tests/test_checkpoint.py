"""Checkpoint: restore gives the last completed save bit for bit (tables in memory and in files,
every optimizer, collections), saves cost the rows that changed, damaged files are refused, and
a run killed at random instants always reopens at its last completed checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lookuplinear import (
    Checkpoint,
    InputValueError,
    KeyedBags,
    LookupCollection,
    LookupLinear,
    ModelFileError,
    TableConfig,
    optim,
)

sys.path.insert(0, str(Path(__file__).parent))
import crash_child

OPTIMIZERS = {
    "adam": lambda ps, fused: optim.Adam(ps, lr=0.05, fused=fused),
    "adagrad": lambda ps, fused: optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.1,
                                               fused=fused),
    "sgd-momentum": lambda ps, fused: optim.SGD(ps, lr=0.1, momentum=0.9, fused=fused),
    "rowwise-adagrad": lambda ps, fused: optim.RowWiseAdagrad(ps, lr=0.1, fused=fused),
}


class Model(nn.Module):
    """A table with row-sparse gradients and a dense layer above it."""

    def __init__(self, storage: Path | None = None) -> None:
        super().__init__()
        self.table = LookupLinear(500, 6, mode="mean", sparse=True, storage=storage, seed=1)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.table(x)))


def _step(model: nn.Module, opts: list[torch.optim.Optimizer], step: int) -> None:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, 40 + 20 * step, (8, 3), generator=g).clamp_(max=499)
    y = torch.randn(8, 3, 2, generator=g)
    for opt in opts:
        opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    for opt in opts:
        opt.step()


def _bits(model: nn.Module, opts: list[torch.optim.Optimizer]) -> dict[str, torch.Tensor]:
    out = {f"p.{n}": p.detach().clone() for n, p in model.named_parameters()}
    names = {id(p): n for n, p in model.named_parameters()}
    for i, opt in enumerate(opts):
        for p, state in opt.state.items():
            for key, value in state.items():
                out[f"o{i}.{names[id(p)]}.{key}"] = (
                    value.clone() if isinstance(value, torch.Tensor) else torch.tensor(value))
    return out


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_torch_optimizer_holding_a_state_no_group_lists_saves_and_restores(
        tmp_path: Path) -> None:
    """torch.optim keeps a loaded state entry under an index no group lists (no parameter
    steps with it); a checkpoint saves the parameters' state and leaves it out, as
    lookuplinear's optimizers leave it out of a load."""
    torch.manual_seed(0)
    model = Model()
    opts = [optim.Adam(model.table.parameters(), lr=0.05),
            torch.optim.Adam(model.head.parameters(), lr=0.01)]
    _step(model, opts, 0)
    stray = opts[1].state_dict()
    stray["state"][7] = dict(stray["state"][0])
    opts[1].load_state_dict(stray)
    assert 7 in opts[1].state
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    ckpt.save(step=0)
    saved = _bits(model, opts[:1]), {k: v for k, v in opts[1].state.items()
                                     if isinstance(k, torch.Tensor)}
    fresh = Model()
    fresh_opts = [optim.Adam(fresh.table.parameters(), lr=0.05),
                  torch.optim.Adam(fresh.head.parameters(), lr=0.01)]
    assert Checkpoint(tmp_path / "ckpt", fresh, fresh_opts).restore() == {"step": 0}
    _assert_same(_bits(fresh, fresh_opts[:1]), saved[0])
    for p, q in zip(model.head.parameters(), fresh.head.parameters(), strict=True):
        assert torch.equal(p, q)
        for key, value in saved[1][p].items():
            assert torch.equal(torch.as_tensor(fresh_opts[1].state[q][key]),
                               torch.as_tensor(value))


def test_an_optimizer_whose_groups_hold_other_parameters_is_refused(tmp_path: Path) -> None:
    """A restore sets each group's options by position: an optimizer built with the
    parameters split into groups otherwise took the saved groups' lr for other parameters
    without a word (torch.optim's load_state_dict refuses groups of other sizes); refused,
    naming both groups, and nothing changed; the same split restores."""
    from unchanged import assert_unchanged, snapshot

    def build(m: Model, split: int) -> torch.optim.Optimizer:
        params = list(m.parameters())
        return torch.optim.SGD([{"params": params[:split], "lr": 0.1},
                                {"params": params[split:], "lr": 0.01}])

    torch.manual_seed(0)
    model = Model()
    opt = build(model, 1)
    _step(model, [opt], 0)
    Checkpoint(tmp_path / "ckpt", model, [opt]).save()
    other = Model()
    other_opt = build(other, 2)
    before = snapshot(other, other_opt)
    with pytest.raises(ModelFileError, match=r"parameter group 0 as \['table\.weight'\], and "
                       r"this SGD's group 0 holds \['table\.weight', 'table\.bias'\]"):
        Checkpoint(tmp_path / "ckpt", other, [other_opt]).restore()
    assert_unchanged(before, other, other_opt)
    same_opt = build(other, 1)
    Checkpoint(tmp_path / "ckpt", other, [same_opt]).restore()
    assert [g["lr"] for g in same_opt.param_groups] == [0.1, 0.01]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("in_file", [False, True])
def test_restore_is_the_last_save_bit_for_bit(tmp_path: Path, name: str, fused: bool,
                                              in_file: bool) -> None:
    torch.manual_seed(0)
    model = Model(tmp_path / "table" if in_file else None)
    opt = OPTIMIZERS[name](model.table.parameters(), fused)
    head_opt = torch.optim.Adam(model.head.parameters(), lr=0.01)  # PyTorch's, saved whole
    opts = [opt, head_opt]
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    for step in range(3):
        _step(model, opts, step)
    ckpt.save(step=2)
    for step in range(3, 6):
        _step(model, opts, step)
        ckpt.save(step=step)
    saved = _bits(model, opts)
    lr = opt.param_groups[0]["lr"]
    for step in range(6, 9):  # then the run goes on, and the process dies
        _step(model, opts, step)
    opt.param_groups[0]["lr"] = 123.0
    assert ckpt.restore() == {"step": 5}
    assert opt.param_groups[0]["lr"] == lr
    _assert_same(_bits(model, opts), saved)
    # a new process: a new model and optimizers restore the same bits, and go on as the first
    for step in range(6, 9):
        _step(model, opts, step)
    after = _bits(model, opts)
    if in_file:
        del model, opt, head_opt, opts, ckpt
        fresh = Model.__new__(Model)
        nn.Module.__init__(fresh)
        fresh.table = LookupLinear.open(tmp_path / "table", writable=True)
        fresh.head = nn.Linear(6, 2)
    else:
        fresh = Model()
    fresh_opt = OPTIMIZERS[name](fresh.table.parameters(), fused)
    fresh_opts = [fresh_opt, torch.optim.Adam(fresh.head.parameters(), lr=0.01)]
    assert Checkpoint(tmp_path / "ckpt", fresh, fresh_opts).restore() == {"step": 5}
    _assert_same(_bits(fresh, fresh_opts), saved)
    for step in range(6, 9):
        _step(fresh, fresh_opts, step)
    _assert_same(_bits(fresh, fresh_opts), after)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("train_after", [False, True], ids=["saved at once", "trained on"])
def test_a_chain_through_model_double_restores(tmp_path: Path, name: str,
                                              train_after: bool) -> None:
    """``model.double()`` between saves: a save before the next step holds the optimizer's
    state in the dtype the next update converts it to (``torch.optim`` casts a loaded state to
    the parameter's dtype), and a save after it starts a new chain (a chain's segments hold one
    dtype per table); either restores, into the very objects and into fresh float64 ones, to
    the bits of what was saved."""
    torch.manual_seed(0)
    model = Model()
    opt = OPTIMIZERS[name](model.parameters(), False)
    _step(model, [opt], 0)
    ckpt = Checkpoint(tmp_path / "ck", model, opt)
    ckpt.save(step=0)
    model.double()
    if train_after:
        _step(model, [opt], 1)
    ckpt.save(step=1)
    saved = _bits(model, [opt])
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(model, [opt]), saved)
    fresh = Model().double()
    fresh_opt = OPTIMIZERS[name](fresh.parameters(), False)
    assert Checkpoint(tmp_path / "ck", fresh, fresh_opt).restore() == {"step": 1}
    _assert_same(_bits(fresh, [fresh_opt]), saved)


def test_a_save_costs_the_rows_that_changed(tmp_path: Path) -> None:
    layer = LookupLinear(100_000, 16, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    layer(torch.tensor([1, 2, 3])).sum().backward()
    ckpt.save()
    base = max((tmp_path / "ckpt").glob("seg-*"), key=lambda p: p.stat().st_mtime_ns)
    opt.zero_grad()
    layer(torch.tensor([5, 3])).sum().backward()
    ckpt.save()
    manifest = json.loads((tmp_path / "ckpt" / "MANIFEST.json").read_text())
    sizes = [s["bytes"] for s in manifest["segments"]]
    assert len(sizes) == 2 and sizes[0] == base.stat().st_size
    # all rows and moments, then rows 3 and 5 (and the 5 KB random generator state)
    assert sizes[0] > 3 * 100_000 * 16 * 4 and sizes[1] < 8192


def test_compaction_bounds_the_chain(tmp_path: Path) -> None:
    layer = LookupLinear(1000, 4, sparse=True)
    opt = optim.SGD(layer.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt, compact_ratio=1.5)
    for step in range(60):
        opt.zero_grad()
        layer(torch.tensor([step % 7, 500 + step % 3])).sum().backward()
        ckpt.save(step=step)
        manifest = json.loads((tmp_path / "ckpt" / "MANIFEST.json").read_text())
        listed = {s["file"] for s in manifest["segments"]}
        on_disk = {p.name for p in (tmp_path / "ckpt").glob("seg-*")}
        assert listed == on_disk  # replaced segments are deleted
        assert sum(s["bytes"] for s in manifest["segments"]) < 1.5 * 1000 * 4 * 4 + 20_000
    saved = layer.weight.detach().clone()
    opt.zero_grad()
    layer(torch.tensor([1])).sum().backward()
    assert ckpt.restore() == {"step": 59}
    assert torch.equal(layer.weight, saved)


def test_a_collection_saves_its_tables_by_rows(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tables = [TableConfig("user", 300, 4, ["u"]), TableConfig("item", 200, 4, ["item"]),
              TableConfig("ids", 50, 4, ["ids"], hashing="map")]
    coll = LookupCollection(tables, sparse=True)
    opt = optim.Adam(coll.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", coll, opt)
    assert set(ckpt.tables) == {n for n, _ in coll.named_parameters()}

    def step(i: int) -> None:
        kb = KeyedBags.from_dict({"u": [[i, i + 1], [7]], "item": [[i * 3 % 200], []],
                                  "ids": [[10**12 + i], [i * 999]]})
        opt.zero_grad()
        coll(kb).values().pow(2).sum().backward()

    step(0)
    ckpt.save(step=0)
    step(1)
    ckpt.save(step=1)
    saved = _bits(coll, [opt])
    step(2)
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(coll, [opt]), saved)


def test_damaged_checkpoints_are_refused(tmp_path: Path) -> None:
    layer = LookupLinear(100, 4, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    with pytest.raises(FileNotFoundError, match="no completed checkpoint"):
        ckpt.restore()
    ckpt.save()
    seg = next((tmp_path / "ckpt").glob("seg-*"))
    good = seg.read_bytes()
    for bad in (good[:-10], good[:200] + bytes([good[200] ^ 1]) + good[201:]):
        seg.write_bytes(bad)
        with pytest.raises(ModelFileError, match="torn or damaged"):
            ckpt.restore()
    seg.unlink()
    with pytest.raises(ModelFileError, match="missing"):
        ckpt.restore()
    seg.write_bytes(good)
    other = LookupLinear(100, 5, sparse=True)
    with pytest.raises(ModelFileError, match="another model"):
        Checkpoint(tmp_path / "ckpt", other).restore()
    (tmp_path / "ckpt" / "MANIFEST.json").write_text("{")
    with pytest.raises(ModelFileError, match="damaged"):
        Checkpoint(tmp_path / "ckpt", layer)
    with pytest.raises(InputValueError, match="JSON"):
        Checkpoint(tmp_path / "c2", layer).save(when=object())
    with pytest.raises(InputValueError, match="not in the module"):
        Checkpoint(tmp_path / "c3", LookupLinear(3, 2), opt)
    with pytest.raises(InputValueError, match="does not exist"):
        Checkpoint(tmp_path / "no" / "ckpt", layer)


def test_a_manifest_that_is_a_directory_or_a_path_that_is_a_file_is_refused(
        tmp_path: Path) -> None:
    """A directory where ``MANIFEST.json`` is, or a checkpoint path that is a file: a
    ``ModelFileError`` naming it, as for a segment that is a directory."""
    layer = LookupLinear(10, 2)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "MANIFEST.json").mkdir()
    with pytest.raises(ModelFileError, match=r"MANIFEST\.json is not a file.*damaged"):
        Checkpoint(tmp_path / "ckpt", layer)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelFileError, match="is a file, not a lookuplinear checkpoint "
                                             "directory"):
        Checkpoint(tmp_path / "file", layer)


def test_killed_at_random_instants_reopens_at_the_last_completed_checkpoint(
        tmp_path: Path) -> None:
    steps, every, kills = 400, 4, 20
    refs: dict[int, dict[str, torch.Tensor]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (tmp_path / "ref").mkdir()
        crash_child.train(tmp_path / "ref", steps, every,
                          lambda g, m, o: refs.__setitem__(g, crash_child.snapshot(m, o)))
    finally:
        torch.set_num_threads(threads)
    run = tmp_path / "run"
    run.mkdir()
    rng = random.Random(0)
    # each run a process forked from one that has imported lookuplinear, killed with SIGKILL
    runs = [sys.executable, crash_child.__file__, "--fork", str(run), str(steps), str(every)]
    reopened = []
    last = 0
    with subprocess.Popen(runs, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as fork:
        assert fork.stdin is not None and fork.stdout is not None
        for kill in range(kills + 1):
            fork.stdin.write("run\n")
            fork.stdin.flush()
            ready = fork.stdout.readline()
            assert ready.startswith("ready "), ready
            seen = ""
            if kill < kills:  # the first kill lands before the run's first save
                # after 0-3 more saves (so the run moves on however slow the machine is),
                # at a random instant of the steps and saves that follow
                for _ in range(0 if kill == 0 else rng.randint(0, 3)):
                    seen += fork.stdout.readline()
                time.sleep(0.008 if kill == 0 else rng.uniform(0.0, 0.03))
                with contextlib.suppress(ProcessLookupError):  # unless it has ended
                    os.kill(int(ready.split()[1]), signal.SIGKILL)
            out = seen
            while not (line := fork.stdout.readline()).startswith("ended"):
                assert line, "the forking process ended"
                out += line
            assert int(line.split()[1]) in (0, -signal.SIGKILL)
            logged = [int(line.split()[1]) for line in out.splitlines()
                      if line.startswith("saved")]
            expected = logged[-1] if logged else last
            model, opt, ckpt = crash_child.build(run)
            if expected:
                ckpt.restore()
            # the last save that printed, or one that completed just before the kill
            assert ckpt.generation in (expected, expected + 1)
            if ckpt.generation:
                got = crash_child.snapshot(model, opt)
                _assert_same(got, refs[ckpt.generation])
            last = ckpt.generation
            reopened.append(last)
            ckpt.close()
            del model, opt, ckpt
        fork.stdin.close()
    assert fork.returncode == 0
    print("reopened at generations", reopened)
    assert reopened[-1] == max(refs)  # the last run resumed and finished as the reference
    assert len(set(reopened)) > 5  # the kills landed at many points of the run


# 16 GB of table and 32 GB of Adam moments (sparse files: a few pages written) may not fit the
# disk: the warning that says so is ignored by the suite's configuration
def test_a_billion_row_table_in_a_file_checkpoints_its_touched_rows(tmp_path: Path) -> None:
    layer = LookupLinear(10**9, 4, storage=tmp_path / "t", bias=False, seed=0, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    layer(torch.tensor([5, 10**9 - 1])).sum().backward()
    ckpt.save(step=0)
    opt.zero_grad()
    layer(torch.tensor([7, 5])).sum().backward()
    ckpt.save(step=1)
    kept = layer.weight[[5, 7, 10**9 - 1]].detach().clone()
    opt.zero_grad()
    layer(torch.tensor([8, 5])).sum().backward()
    assert ckpt.restore() == {"step": 1}
    assert torch.equal(layer.weight[[5, 7, 10**9 - 1]], kept)
    assert layer.storage is not None
    assert layer.storage.drawn_rows().tolist() == [5, 7, 10**9 - 1]  # row 8 undrawn again
    sizes = [s["bytes"] for s in json.loads((tmp_path / "ckpt" / "MANIFEST.json").read_text())[
        "segments"]]
    assert max(sizes) < 8192  # the rows touched, not the table's


class Ranker(nn.Module):
    """Several tables (one through an IdMap that evicts), dense layers between and above."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = LookupCollection(
            [TableConfig("user", 60, 8, ["u"]), TableConfig("item", 40, 8, ["item"]),
             TableConfig("ids", 12, 8, ["ids"], hashing="map")], sparse=True)
        self.mix = nn.Linear(64, 64)
        self.head = nn.Sequential(nn.Linear(3 * 8, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, kb: KeyedBags) -> torch.Tensor:
        h = self.head[1](self.head[0](self.tables(kb).values()))  # (B, 64)
        return self.head[2](self.mix(h)).squeeze(1)


def _ranker_step(model: Ranker, opts: list[torch.optim.Optimizer], step: int) -> None:
    g = torch.Generator().manual_seed(step)
    kb = KeyedBags.from_dict({
        "u": [torch.randint(0, 60, (3,), generator=g).tolist() for _ in range(4)],
        "item": [torch.randint(0, 40, (2,), generator=g).tolist() for _ in range(4)],
        "ids": [[10**12 + int(i)] for i in torch.randint(0, 30, (4,), generator=g)],
    })
    for opt in opts:
        opt.zero_grad()
    nn.functional.mse_loss(model(kb), torch.randn(4, generator=g)).backward()
    for opt in opts:
        opt.step()


RANKER_OPTIMIZERS = {
    "adam": lambda m, fused: [optim.Adam(m.parameters(), lr=0.01, fused=fused)],
    "adamw+sgd": lambda m, fused: [
        optim.AdamW([*m.tables.parameters(), *m.mix.parameters()], lr=0.01, fused=fused),
        optim.SGD(m.head.parameters(), lr=0.05, momentum=0.9, fused=fused)],
}


@pytest.mark.parametrize("name", sorted(RANKER_OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True])
def test_restore_then_training_is_the_uninterrupted_run(tmp_path: Path, name: str,
                                                       fused: bool) -> None:
    """A fresh model and optimizers restored from a checkpoint train on as the run that was
    never interrupted, to the bit: each optimizer state comes back in the layout it was saved
    in (a dense layer's Adam moments apart, a table's paired), so each update takes the path
    it took."""
    torch.manual_seed(0)
    model = Ranker()
    opts = RANKER_OPTIMIZERS[name](model, fused)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    for step in range(6):
        _ranker_step(model, opts, step)
        if step in (2, 5):
            ckpt.save(step=step)
    for step in range(6, 10):
        _ranker_step(model, opts, step)
    uninterrupted = _bits(model, opts)

    torch.manual_seed(1)
    fresh = Ranker()
    fresh_opts = RANKER_OPTIMIZERS[name](fresh, fused)
    restored = Checkpoint(tmp_path / "ckpt", fresh, fresh_opts)
    assert restored.restore() == {"step": 5}
    for step in range(6, 10):
        _ranker_step(fresh, fresh_opts, step)
    _assert_same(_bits(fresh, fresh_opts), uninterrupted)


def test_restore_with_nothing_saved_is_a_clear_error(tmp_path: Path) -> None:
    from lookuplinear import CheckpointNotFoundError, LookupLinearError

    layer = LookupLinear(10, 2, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    assert not ckpt.exists()
    before = layer.weight.detach().clone()
    with pytest.raises(CheckpointNotFoundError, match=r"exists\(\)") as err:
        ckpt.restore()
    assert isinstance(err.value, LookupLinearError) and isinstance(err.value, FileNotFoundError)
    assert torch.equal(layer.weight, before) and not opt.state
    ckpt.save()
    assert ckpt.exists() and Checkpoint(tmp_path / "ckpt", layer, opt).exists()


def _as_written_before(path: Path) -> None:
    """Rewrite the checkpoint at ``path`` as earlier versions wrote it: ``fused=True`` under
    torch's ``"fused"`` key, no state layouts, no ``decoupled_weight_decay``."""
    import hashlib

    from safetensors.torch import load, save

    from lookuplinear.storage.segments import metadata as _metadata

    manifest = json.loads((path / "MANIFEST.json").read_text())
    for seg in manifest["segments"]:
        data = (path / seg["file"]).read_bytes()
        meta = json.loads(_metadata(data)["checkpoint"])
        meta.pop("previous")
        meta.pop("draws")
        for opt in meta["optimizers"]:
            opt.pop("layout")
            for group in opt["groups"]:
                group["fused"] = group.pop("in_backward")
                group.pop("decoupled_weight_decay", None)
        data = save(load(data), metadata={"checkpoint": json.dumps(meta)})
        (path / seg["file"]).write_bytes(data)
        seg["bytes"], seg["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("fused", [False, True])
def test_a_checkpoint_of_earlier_versions_restores(tmp_path: Path, fused: bool) -> None:
    """Restored, and trained on as the run that wrote it (its dense layers' Adam moments
    apart, as they were)."""
    torch.manual_seed(0)
    model = Model()
    opt = optim.Adam(model.parameters(), lr=0.05, fused=fused)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opt)
    for step in range(3):
        _step(model, [opt], step)
    ckpt.save(step=2)
    saved = _bits(model, [opt])
    for step in range(3, 6):
        _step(model, [opt], step)
    _as_written_before(tmp_path / "ckpt")
    fresh = Model()
    fresh_opt = optim.Adam(fresh.parameters(), lr=0.05, fused=fused)
    assert Checkpoint(tmp_path / "ckpt", fresh, fresh_opt).restore() == {"step": 2}
    _assert_same(_bits(fresh, [fresh_opt]), saved)
    group = fresh_opt.param_groups[0]
    assert "fused" not in group and group["in_backward"] is fused
    assert not group["decoupled_weight_decay"]
    for step in range(3, 6):
        _step(fresh, [fresh_opt], step)
    _assert_same(_bits(fresh, [fresh_opt]), _bits(model, [opt]))


def _with_former_names(path: Path) -> None:
    """Rewrite the checkpoint at ``path`` as it was written while a ``LookupCollection``'s
    parameters were named ``weights.<g>`` (now ``table_groups.<g>``)."""
    import hashlib

    from safetensors.torch import load, save

    from lookuplinear.storage.segments import metadata as _metadata

    def old(text: str) -> str:
        return text.replace("table_groups.", "weights.")

    manifest = json.loads((path / "MANIFEST.json").read_text())
    for seg in manifest["segments"]:
        data = (path / seg["file"]).read_bytes()
        meta = json.loads(_metadata(data)["checkpoint"])
        meta["tables"] = sorted(old(n) for n in meta["tables"])
        for opt in meta["optimizers"]:
            opt["state"] = {old(n): v for n, v in opt["state"].items()}
            opt["layout"] = {old(n): v for n, v in opt["layout"].items()}
        tensors = {old(k): t for k, t in load(data).items()}
        assert any("weights." in k for k in tensors)
        data = save(tensors, metadata={"checkpoint": json.dumps(meta)})
        (path / seg["file"]).write_bytes(data)
        seg["bytes"], seg["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


class Tables(nn.Module):
    """A collection with two groups (widths 4 and 3), one in a file where ``storage`` is given,
    below a dense layer."""

    def __init__(self, storage: Path | None, sparse: bool) -> None:
        super().__init__()
        self.tables = LookupCollection(
            [TableConfig("user", 60, 4, ["u"]), TableConfig("item", 40, 4, ["item"]),
             TableConfig("tag", 30, 3, ["tag"], storage=storage, init="normal")], sparse=sparse)
        self.head = nn.Linear(11, 1)

    def forward(self, kb: KeyedBags) -> torch.Tensor:
        return self.head(self.tables(kb).values()).squeeze(1)


def _tables_step(model: Tables, opt: torch.optim.Optimizer, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    kb = KeyedBags.from_dict({
        "u": [torch.randint(0, 60, (3,), generator=g).tolist() for _ in range(4)],
        "item": [torch.randint(0, 40, (2,), generator=g).tolist() for _ in range(4)],
        "tag": [torch.randint(0, 30, (2,), generator=g).tolist() for _ in range(4)],
    })
    opt.zero_grad()
    nn.functional.mse_loss(model(kb), torch.randn(4, generator=g)).backward()
    opt.step()


@pytest.mark.parametrize("in_file", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_checkpoint_of_a_collection_under_its_former_names_restores(
        tmp_path: Path, in_file: bool, sparse: bool) -> None:
    """A checkpoint whose collection parameters are named ``weights.<g>`` (as they were) restores
    into ``table_groups.<g>`` bit for bit, and trains on as the run that wrote it: tables saved
    by rows (``sparse=True``) or whole, in memory or in a file."""
    torch.manual_seed(0)
    model = Tables(tmp_path / "tag" if in_file else None, sparse)
    opt = optim.Adam(model.parameters(), lr=0.05)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opt)
    for step in range(3):
        _tables_step(model, opt, step)
        ckpt.save(step=step)
    saved = _bits(model, [opt])
    for step in range(3, 5):
        _tables_step(model, opt, step)
    _with_former_names(tmp_path / "ckpt")

    torch.manual_seed(0)  # a file table's seed: the rows no save holds are drawn as they were
    fresh = Tables(tmp_path / "tag2" if in_file else None, sparse)
    fresh_opt = optim.Adam(fresh.parameters(), lr=0.05)
    assert Checkpoint(tmp_path / "ckpt", fresh, fresh_opt).restore() == {"step": 2}
    _assert_same(_bits(fresh, [fresh_opt]), saved)
    for step in range(3, 5):
        _tables_step(fresh, fresh_opt, step)
    _assert_same(_bits(fresh, [fresh_opt]), _bits(model, [opt]))


# ---------------------------------------------------------------------- all or nothing
from unchanged import assert_unchanged, snapshot  # noqa: E402


def _saved_layer(path: Path, rows: int = 1000, dtype: torch.dtype = torch.float32,
                 opt: type[torch.optim.Optimizer] = optim.Adam) -> None:
    layer = LookupLinear(rows, 4, sparse=True, dtype=dtype)
    o = opt(layer.parameters(), lr=0.1)
    layer(torch.tensor([3, 7, rows - 1])).sum().backward()
    o.step()
    Checkpoint(path, layer, o).save(step=2)


def _trained(layer: nn.Module, opt: torch.optim.Optimizer) -> None:
    """A step, so that the optimizer holds state a refused restore must keep."""
    layer(torch.tensor([1, 2])).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("rows", [2000, 500])
@pytest.mark.parametrize("in_file", [False, True])
def test_a_table_of_another_size_is_refused_before_anything_is_written(
        tmp_path: Path, rows: int, in_file: bool) -> None:
    """More rows than saved (rows 1000+ would keep their values) or fewer (row 999 has no
    place): refused, naming the table and both shapes; the model and its optimizer are as they
    were, to the bit."""
    from lookuplinear import LookupLinearError

    _saved_layer(tmp_path / "ckpt")
    layer = LookupLinear(rows, 4, sparse=True, storage=tmp_path / "t" if in_file else None)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    _trained(layer, opt)
    before = snapshot(layer, opt)
    with pytest.raises(ModelFileError) as err:
        Checkpoint(tmp_path / "ckpt", layer, opt).restore()
    assert isinstance(err.value, LookupLinearError)
    message = str(err.value)
    assert "'weight'" in message and "(1000, 4)" in message and f"({rows}, 4)" in message
    assert "Nothing was loaded" in message
    assert_unchanged(before, layer, opt)


def test_another_optimizer_class_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Saved with Adam, restored with Adagrad: refused before the weights are written."""
    _saved_layer(tmp_path / "ckpt")
    layer = LookupLinear(1000, 4, sparse=True)
    opt = optim.Adagrad(layer.parameters(), lr=0.1)
    _trained(layer, opt)
    before = snapshot(layer, opt)
    with pytest.raises(ModelFileError, match=r"Adam.*Adagrad.*Nothing was loaded"):
        Checkpoint(tmp_path / "ckpt", layer, opt).restore()
    assert_unchanged(before, layer, opt)
    torch_opt = torch.optim.Adagrad(layer.parameters(), lr=0.1)   # a torch.optim one too
    before = snapshot(layer, torch_opt)
    with pytest.raises(ModelFileError, match="Adagrad"):
        Checkpoint(tmp_path / "ckpt", layer, torch_opt).restore()
    assert_unchanged(before, layer, torch_opt)


def test_another_dtype_is_refused(tmp_path: Path) -> None:
    _saved_layer(tmp_path / "ckpt", dtype=torch.float64)
    layer = LookupLinear(1000, 4, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    before = snapshot(layer, opt)
    with pytest.raises(ModelFileError, match=r"float64.*float32"):
        Checkpoint(tmp_path / "ckpt", layer, opt).restore()
    assert_unchanged(before, layer, opt)


def test_other_optimizers_are_refused(tmp_path: Path) -> None:
    """Fewer or more optimizers than saved, or an optimizer over other parameters."""
    torch.manual_seed(0)
    model = Model()
    opt = optim.Adam(model.parameters(), lr=0.05)
    _step(model, [opt], 0)
    Checkpoint(tmp_path / "ckpt", model, opt).save(step=0)
    fresh = Model()
    for opts, match in (
            ([], "1 optimizer"),
            ([optim.Adam(fresh.parameters(), lr=0.05), optim.SGD(fresh.parameters(), lr=0.1)],
             "2"),
            ([optim.Adam(fresh.table.parameters(), lr=0.05)], "head.weight")):
        before = snapshot(fresh, *opts)
        with pytest.raises(ModelFileError, match=match):
            Checkpoint(tmp_path / "ckpt", fresh, opts).restore()
        assert_unchanged(before, fresh, *opts)


def test_a_collection_with_a_table_of_another_size_is_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tables(None, True)
    opt = optim.Adam(model.parameters(), lr=0.05)
    _tables_step(model, opt, 0)
    Checkpoint(tmp_path / "ckpt", model, opt).save(step=0)
    other = Tables(None, True)
    other.tables = LookupCollection(
        [TableConfig("user", 60, 4, ["u"]), TableConfig("item", 50, 4, ["item"]),
         TableConfig("tag", 30, 3, ["tag"])], sparse=True)
    other_opt = optim.Adam(other.parameters(), lr=0.05)
    _tables_step(other, other_opt, 0)
    before = snapshot(other, other_opt)
    with pytest.raises(ModelFileError, match=r"tables\.table_groups\.0.*\(100, 4\).*\(110, 4\)"):
        Checkpoint(tmp_path / "ckpt", other, other_opt).restore()
    assert_unchanged(before, other, other_opt)


def _two_tables(tables: list[tuple[str, int]], sparse: bool) -> LookupCollection:
    """A collection of width-4 tables (one group parameter), ``(name, rows)`` in order."""
    return LookupCollection([TableConfig(name, rows, 4, [f"f{name}"]) for name, rows in tables],
                            sparse=sparse)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("tables", [[("a", 20), ("b", 10)], [("b", 20), ("a", 10)],
                                    [("a", 30)], [("c", 10), ("d", 20)]],
                         ids=["other-sizes", "other-order", "one-table", "renamed"])
def test_a_collection_whose_group_holds_other_tables_is_refused(
        tmp_path: Path, sparse: bool, tables: list[tuple[str, int]]) -> None:
    """Saved as tables a (10 rows) then b (20) in one group parameter of 30 rows: a collection
    whose group has that shape but other tables at its rows (other sizes, another order, one
    table, other names) is refused, naming both layouts; nothing is written. Row-sparse
    (lookuplinear.optim, saved by rows) and dense (torch.optim, saved whole) alike."""
    def opt_of(m: LookupCollection) -> torch.optim.Optimizer:
        return optim.Adam(m.parameters(), lr=0.1) if sparse else \
            torch.optim.SGD(m.parameters(), lr=0.1)

    torch.manual_seed(0)
    saved = _two_tables([("a", 10), ("b", 20)], sparse)
    Checkpoint(tmp_path / "ckpt", saved, opt_of(saved)).save(step=1)
    torch.manual_seed(1)
    other = _two_tables(tables, sparse)
    opt = opt_of(other)
    before = snapshot(other, opt)
    with pytest.raises(ModelFileError) as err:
        Checkpoint(tmp_path / "ckpt", other, opt).restore()
    message = str(err.value)
    assert "table_groups.0 as the tables 'a' (rows 0-9), 'b' (rows 10-29)" in message
    mine = ", ".join(f"{name!r} (rows {sum(r for _, r in tables[:i])}-"
                     f"{sum(r for _, r in tables[:i + 1]) - 1})"
                     for i, (name, _) in enumerate(tables))
    assert f"this model's table_groups.0 holds {mine}, 4 columns (float32)" in message
    assert "Nothing was loaded" in message
    assert_unchanged(before, other, opt)
    torch.manual_seed(2)
    same = _two_tables([("a", 10), ("b", 20)], sparse)
    assert Checkpoint(tmp_path / "ckpt", same, opt_of(same)).restore() == {"step": 1}
    assert torch.equal(same.table_groups[0], saved.table_groups[0])


def _rewrite_meta(path: Path, key: str) -> None:
    """Rewrite the checkpoint at ``path`` as versions that did not record ``key`` in each
    segment's metadata wrote it."""
    import hashlib

    from safetensors.torch import load, save

    from lookuplinear.storage.segments import metadata as _metadata

    manifest = json.loads((path / "MANIFEST.json").read_text())
    for seg in manifest["segments"]:
        data = (path / seg["file"]).read_bytes()
        meta = json.loads(_metadata(data)["checkpoint"])
        meta.pop(key, None)
        data = save(load(data), metadata={"checkpoint": json.dumps(meta)})
        (path / seg["file"]).write_bytes(data)
        seg["bytes"], seg["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


def test_a_checkpoint_without_table_layouts_restores_where_shapes_fit(tmp_path: Path) -> None:
    """Written before checkpoints recorded which table sits at which rows of a group: restored
    into the collection it was saved from, bit for bit; its tables' layout cannot be checked
    (the group's shape is)."""
    torch.manual_seed(0)
    saved = _two_tables([("a", 10), ("b", 20)], True)
    opt = optim.Adam(saved.parameters(), lr=0.1)
    saved(KeyedBags.from_dict({"fa": [[1, 2]], "fb": [[3]]})).values().sum().backward()
    opt.step()
    Checkpoint(tmp_path / "ckpt", saved, opt).save(step=1)
    _rewrite_meta(tmp_path / "ckpt", "layouts")
    torch.manual_seed(1)
    fresh = _two_tables([("a", 10), ("b", 20)], True)
    fresh_opt = optim.Adam(fresh.parameters(), lr=0.1)
    assert Checkpoint(tmp_path / "ckpt", fresh, fresh_opt).restore() == {"step": 1}
    _assert_same(_bits(fresh, [fresh_opt]), _bits(saved, [opt]))
    bigger = _two_tables([("a", 10), ("b", 21)], True)
    with pytest.raises(ModelFileError, match=r"\(30, 4\).*\(31, 4\)"):
        Checkpoint(tmp_path / "ckpt", bigger, optim.Adam(bigger.parameters(), lr=0.1)).restore()


def test_id_maps_of_another_kind_are_refused(tmp_path: Path) -> None:
    """A string map's checkpoint into an int map (its strings would be dropped and its keys read
    as IDs), and the reverse: refused, nothing written."""
    def model(key_type: str) -> LookupCollection:
        torch.manual_seed(0)
        return LookupCollection([TableConfig("ids", 20, 4, ["u"], hashing="map",
                                             key_type=key_type)], sparse=True)

    strs = model("str")
    strs({"u": ["a", "b", "c"]})
    Checkpoint(tmp_path / "s", strs).save()
    ints = model("int")
    ints({"u": torch.tensor([5, 6, 7])})
    Checkpoint(tmp_path / "i", ints).save()
    for target, path in ((model("int"), "s"), (model("str"), "i")):
        target.train()
        before = snapshot(target)
        with pytest.raises(ModelFileError, match="key_"):
            Checkpoint(tmp_path / path, target).restore()
        assert_unchanged(before, target)


def test_a_damaged_id_map_string_state_is_refused(tmp_path: Path) -> None:
    """Strings that do not decode (a segment rewritten with a valid checksum): refused before the
    tables are written."""
    import hashlib

    from safetensors.torch import load, save

    from lookuplinear.storage.segments import metadata as _metadata

    torch.manual_seed(0)
    coll = LookupCollection([TableConfig("ids", 20, 4, ["u"], hashing="map", key_type="str")],
                            sparse=True)
    opt = optim.Adam(coll.parameters(), lr=0.1)
    coll({"u": ["a", "b", "c"]})["u"].sum().backward()
    opt.step()
    Checkpoint(tmp_path / "ckpt", coll, opt).save()
    manifest = json.loads((tmp_path / "ckpt" / "MANIFEST.json").read_text())
    seg = manifest["segments"][-1]
    data = (tmp_path / "ckpt" / seg["file"]).read_bytes()
    tensors = load(data)
    tensors["whole/id_maps.ids.key_strings"] = torch.tensor([0xFF, 0xFE, 0xFF], dtype=torch.uint8)
    data = save(tensors, metadata=_metadata(data))
    (tmp_path / "ckpt" / seg["file"]).write_bytes(data)
    seg["bytes"], seg["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (tmp_path / "ckpt" / "MANIFEST.json").write_text(json.dumps(manifest))
    fresh = LookupCollection([TableConfig("ids", 20, 4, ["u"], hashing="map", key_type="str")],
                             sparse=True)
    fresh_opt = optim.Adam(fresh.parameters(), lr=0.1)
    before = snapshot(fresh, fresh_opt)
    with pytest.raises(ModelFileError, match="IdMap"):
        Checkpoint(tmp_path / "ckpt", fresh, fresh_opt).restore()
    assert_unchanged(before, fresh, fresh_opt)


def test_a_checkpoint_without_table_shapes_still_refuses_rows_past_the_table(
        tmp_path: Path) -> None:
    """Written before checkpoints recorded each table's shape: a row past the model's table is
    refused, not an IndexError after half the writes."""
    _saved_layer(tmp_path / "ckpt")
    _rewrite_meta(tmp_path / "ckpt", "shapes")
    layer = LookupLinear(500, 4, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    before = snapshot(layer, opt)
    with pytest.raises(ModelFileError, match=r"row 999.*500 rows"):
        Checkpoint(tmp_path / "ckpt", layer, opt).restore()
    assert_unchanged(before, layer, opt)
    same = LookupLinear(1000, 4, sparse=True)
    assert Checkpoint(tmp_path / "ckpt", same, optim.Adam(same.parameters(), lr=0.1)
                      ).restore() == {"step": 2}


def test_a_failure_while_the_optimizer_state_is_built_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory while the second optimizer's state is built (after the first, a
    torch.optim one, has loaded its own): both are given back what they held, and nothing of
    the model was written."""
    torch.manual_seed(0)
    model = Model()
    opts = [torch.optim.Adam(model.head.parameters(), lr=0.05),
            optim.Adam(model.table.parameters(), lr=0.05)]
    for step in range(2):
        _step(model, opts, step)
    Checkpoint(tmp_path / "ckpt", model, opts).save(step=1)
    _step(model, opts, 2)
    before = snapshot(model, *opts)

    def no_memory(*args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(optim.Adam, "_init_state", no_memory)
    with pytest.raises(MemoryError):
        Checkpoint(tmp_path / "ckpt", model, opts).restore()
    assert_unchanged(before, model, *opts)
    monkeypatch.undo()
    assert Checkpoint(tmp_path / "ckpt", model, opts).restore() == {"step": 1}


def test_a_save_that_fails_after_its_commit_point_is_followed_by_the_next_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync of the directory after the manifest's rename fails: the save raises, yet it
    has committed; the next save writes a new generation and never a segment the committed
    manifest names, so a crash during it leaves the committed checkpoint readable."""
    from lookuplinear.storage import segments

    torch.manual_seed(0)
    model = Model()
    opts: list[torch.optim.Optimizer] = [optim.Adam(model.parameters(), lr=0.05)]
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    _step(model, opts, 0)
    ckpt.save(step=0)
    _step(model, opts, 1)
    saved = _bits(model, opts)
    fsync = segments._fsync_dir
    calls: list[Path] = []

    def failing_after_commit(path: Path) -> None:
        calls.append(path)
        if len(calls) == 2:  # the one after the manifest's rename
            raise OSError(5, "I/O error")
        fsync(path)

    monkeypatch.setattr(segments, "_fsync_dir", failing_after_commit)
    with pytest.raises(OSError, match="I/O error"):
        ckpt.save(step=1)
    monkeypatch.undo()
    assert ckpt.generation == 2
    _step(model, opts, 2)
    write = segments._write_durable

    def killed_before_the_manifest(path: Path, data: bytes) -> None:
        if path.name == "MANIFEST.json":
            raise KeyboardInterrupt
        write(path, data)

    monkeypatch.setattr(segments, "_write_durable", killed_before_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(step=2)
    monkeypatch.undo()
    assert Checkpoint(tmp_path / "ckpt", model, opts).restore() == {"step": 1}
    _assert_same(_bits(model, opts), saved)
    assert ckpt.save(step=1) == 3  # the killed save committed nothing


def _tampered(manifest: dict[str, Any], how: str, path: Path) -> None:
    segs = manifest["segments"]
    if how == "no segments":
        manifest["segments"] = []
    elif how == "no segments key":
        del manifest["segments"]
    elif how == "no generation":
        del manifest["generation"]
    elif how == "an entry without its hash":
        del segs[-1]["sha256"]
    elif how == "base dropped":
        manifest["segments"] = segs[1:]
    elif how == "middle dropped":
        manifest["segments"] = [segs[0], segs[2]]
    elif how == "reversed":
        manifest["segments"] = segs[::-1]
    elif how == "a generation behind":
        manifest["generation"] = segs[-1]["generation"] - 1
    elif how == "a file outside":
        segs[-1]["file"] = "../" + segs[-1]["file"]
    elif how == "a directory":
        seg = path / segs[-1]["file"]
        seg.unlink()
        seg.mkdir()


@pytest.mark.parametrize("how", [
    "no segments", "no segments key", "no generation", "an entry without its hash",
    "base dropped", "middle dropped", "reversed", "a generation behind", "a file outside",
    "a directory"])
def test_a_manifest_no_save_wrote_is_refused_and_changes_nothing(tmp_path: Path,
                                                                 how: str) -> None:
    torch.manual_seed(0)
    layer = LookupLinear(500, 4, sparse=True)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt, compact_ratio=100.0)
    for step in range(3):
        opt.zero_grad()
        layer(torch.tensor([step, 10])).sum().backward()
        opt.step()
        ckpt.save(step=step)
    path = tmp_path / "ckpt"
    manifest = json.loads((path / "MANIFEST.json").read_text())
    assert len(manifest["segments"]) == 3
    _tampered(manifest, how, path)
    (path / "MANIFEST.json").write_text(json.dumps(manifest))
    files = {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}
    before = snapshot(layer, opt)
    with pytest.raises(ModelFileError, match=r"damaged|not a file"):
        ckpt.restore()
    with pytest.raises(ModelFileError, match=r"damaged|not a file"):
        Checkpoint(path, layer, opt).restore()
    assert_unchanged(before, layer, opt)
    assert {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()} == files


@pytest.mark.parametrize("other", [{"seed": 2}, {"seed": 1, "init": "linear"}])
def test_a_table_in_a_file_drawing_other_rows_is_refused(tmp_path: Path,
                                                         other: dict[str, Any]) -> None:
    """The rows a checkpoint of a table in a file does not hold are drawn again after a
    restore: into a table of another seed or init, training on would not be the saved run."""

    def steps(layer: LookupLinear, opt: torch.optim.Optimizer, batches: list[list[int]]) -> None:
        for rows in batches:
            opt.zero_grad()
            layer(torch.tensor(rows)).pow(2).sum().backward()
            opt.step()

    a = LookupLinear(100, 4, sparse=True, storage=tmp_path / "a", seed=1)
    opt_a = optim.Adam(a.parameters(), lr=0.1)
    steps(a, opt_a, [[1, 2], [3]])
    Checkpoint(tmp_path / "ckpt", a, opt_a).save()
    b = LookupLinear(100, 4, sparse=True, storage=tmp_path / "b", **other)
    opt_b = optim.Adam(b.parameters(), lr=0.1)
    steps(b, opt_b, [[7]])
    files = {f.name: f.read_bytes() for f in (tmp_path / "b").iterdir()}
    before = snapshot(b, opt_b)
    with pytest.raises(ModelFileError, match="seed=1, init='normal'"):
        Checkpoint(tmp_path / "ckpt", b, opt_b).restore()
    assert_unchanged(before, b, opt_b)
    assert {f.name: f.read_bytes() for f in (tmp_path / "b").iterdir()} == files
    same = LookupLinear(100, 4, sparse=True, storage=tmp_path / "same", seed=1)
    opt_same = optim.Adam(same.parameters(), lr=0.1)
    Checkpoint(tmp_path / "ckpt", same, opt_same).restore()
    steps(a, opt_a, [[50, 1], [60]])
    steps(same, opt_same, [[50, 1], [60]])
    assert torch.equal(same.weight, a.weight)


@pytest.mark.parametrize("collection", [False, True])
def test_a_table_in_a_file_restored_into_memory_is_refused(tmp_path: Path,
                                                           collection: bool) -> None:
    """A checkpoint of a table in a file holds only the rows that held values; the others are
    drawn from ``(seed, row)``. A table in memory would keep its own values there, where the
    saved run draws them: refused, naming the seed, nothing changed. A table in a file of the
    saved seed then restores to the saved run's values on every row."""

    def build(storage: Path | None, seed: int = 7) -> nn.Module:
        if collection:
            torch.manual_seed(seed)  # a new table in a file draws its seed from torch's
            kw = {"storage": storage} if storage is not None else {}
            return LookupCollection([TableConfig("a", 100, 4, ["f"], **kw)], sparse=True)
        if storage is None:
            return LookupLinear(100, 4, sparse=True)
        return LookupLinear(100, 4, sparse=True, storage=storage, seed=seed)

    def look(model: nn.Module, rows: list[int]) -> torch.Tensor:
        if collection:
            return model(KeyedBags.from_dict({"f": [[r] for r in rows]})).values()
        return model(torch.tensor(rows))

    filed = build(tmp_path / "t")
    opt = optim.Adam(filed.parameters(), lr=0.1)
    look(filed, [1, 2]).sum().backward()
    opt.step()
    Checkpoint(tmp_path / "ckpt", filed, opt).save(step=1)
    from lookuplinear.storage.tables import storage_of

    seed = storage_of(next(filed.parameters())).meta["seed"]
    memory = build(None)
    memory_opt = optim.Adam(memory.parameters(), lr=0.1)
    _trained_on(memory, memory_opt, look)
    before = snapshot(memory, memory_opt)
    with pytest.raises(ModelFileError, match=rf"in memory.*storage=path, seed={seed}"):
        Checkpoint(tmp_path / "ckpt", memory, memory_opt).restore()
    assert_unchanged(before, memory, memory_opt)
    again = build(tmp_path / "again")
    again_opt = optim.Adam(again.parameters(), lr=0.1)
    assert Checkpoint(tmp_path / "ckpt", again, again_opt).restore() == {"step": 1}
    assert torch.equal(look(again, [1, 2, 50]), look(filed, [1, 2, 50]))


@pytest.mark.parametrize("fused", [False, True])
def test_adagrad_of_another_initial_accumulator_value_is_refused(tmp_path: Path,
                                                                 fused: bool) -> None:
    """Adagrad's sums start at its constructor's ``initial_accumulator_value``, which no group
    holds: the rows a checkpoint of a table in a file does not hold start from it after a
    restore. Another value is refused, nothing changed; the saved one trains on as the
    saved run, rows never saved included."""

    def build(tag: str, start: float) -> tuple[LookupLinear, torch.optim.Optimizer]:
        layer = LookupLinear(50, 4, sparse=True, storage=tmp_path / tag, seed=1)
        return layer, optim.Adagrad(layer.parameters(), lr=0.1,
                                    initial_accumulator_value=start, fused=fused)

    def step(layer: LookupLinear, opt: torch.optim.Optimizer, rows: list[int]) -> None:
        opt.zero_grad()
        layer(torch.tensor([rows])).pow(2).sum().backward()
        opt.step()

    saved, saved_opt = build("a", 0.5)
    step(saved, saved_opt, [1, 2])
    Checkpoint(tmp_path / "ckpt", saved, saved_opt).save()
    other, other_opt = build("b", 0.0)
    step(other, other_opt, [4])
    before = snapshot(other, other_opt)
    with pytest.raises(ModelFileError, match=r"initial_accumulator_value=0\.5.*"
                                             r"initial_accumulator_value=0\.0"):
        Checkpoint(tmp_path / "ckpt", other, other_opt).restore()
    assert_unchanged(before, other, other_opt)
    same, same_opt = build("c", 0.5)
    Checkpoint(tmp_path / "ckpt", same, same_opt).restore()
    for layer, opt in ((saved, saved_opt), (same, same_opt)):
        step(layer, opt, [3, 1])  # row 3: no save holds it
    assert torch.equal(same.weight, saved.weight)
    assert torch.equal(same_opt.state[same.weight]["sum"], saved_opt.state[saved.weight]["sum"])


def test_a_sparse_tables_checkpoint_into_a_dense_layer_names_sparse(tmp_path: Path) -> None:
    """A ``sparse=True`` table is saved by rows, a ``sparse=False`` one whole: the same layer
    built with ``sparse=False`` is refused, naming the difference and the fix, nothing
    changed; built with ``sparse=True`` it restores."""
    _saved_layer(tmp_path / "ckpt")
    dense = LookupLinear(1000, 4, sparse=False)
    opt = optim.Adam(dense.parameters(), lr=0.1)
    _trained(dense, opt)
    before = snapshot(dense, opt)
    with pytest.raises(ModelFileError, match=r"'weight' gets dense gradients \(sparse=False\)"
                                             r".*Build the layer with sparse=True"):
        Checkpoint(tmp_path / "ckpt", dense, opt).restore()
    assert_unchanged(before, dense, opt)
    sparse = LookupLinear(1000, 4, sparse=True)
    assert Checkpoint(tmp_path / "ckpt", sparse, optim.Adam(sparse.parameters(), lr=0.1)
                      ).restore() == {"step": 2}


def test_a_model_on_the_meta_device_is_refused(tmp_path: Path) -> None:
    """A copy into a meta tensor copies nothing (``load_state_dict`` warns): refused, naming
    ``to_empty``; the model allocated with it restores the saved values."""
    torch.manual_seed(0)
    saved = LookupLinear(1000, 4, sparse=True)
    opt = optim.Adam(saved.parameters(), lr=0.1)
    _trained(saved, opt)
    Checkpoint(tmp_path / "ckpt", saved, opt).save(step=2)
    with torch.device("meta"):
        meta = LookupLinear(1000, 4, sparse=True)
    meta_opt = optim.Adam(meta.parameters(), lr=0.1)
    with pytest.raises(InputValueError, match=r"weight is on the meta device.*to_empty"):
        Checkpoint(tmp_path / "ckpt", meta, meta_opt).restore()
    assert meta.weight.is_meta and not meta_opt.state
    meta.to_empty(device="cpu")
    meta_opt = optim.Adam(meta.parameters(), lr=0.1)
    assert Checkpoint(tmp_path / "ckpt", meta, meta_opt).restore() == {"step": 2}
    assert torch.equal(meta.weight, saved.weight) and torch.equal(meta.bias, saved.bias)


def _trained_on(model: nn.Module, opt: torch.optim.Optimizer, look: Any) -> None:
    """A step through ``look(model, rows)``: state a refused restore must keep."""
    look(model, [3, 4]).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("in_file", [False, True])
def test_sgd_momentum_set_to_zero_keeps_its_buffers_through_a_restore(
        tmp_path: Path, in_file: bool) -> None:
    """SGD keeps its buffers after momentum is set to 0 (as torch.optim.SGD does): a
    checkpoint holding them restores them, and training on is the uninterrupted run."""
    torch.manual_seed(0)
    model = Model(tmp_path / "table" if in_file else None)
    opts: list[torch.optim.Optimizer] = [optim.SGD(model.parameters(), lr=0.1, momentum=0.9)]
    for step in range(2):
        _step(model, opts, step)
    opts[0].param_groups[0]["momentum"] = 0.0
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    ckpt.save(step=1)
    saved = _bits(model, opts)
    assert any(k.endswith("momentum_buffer") for k in saved)
    for step in range(2, 4):
        _step(model, opts, step)
    uninterrupted = _bits(model, opts)
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(model, opts), saved)
    for step in range(2, 4):
        _step(model, opts, step)
    _assert_same(_bits(model, opts), uninterrupted)


def test_a_restore_refused_while_staging_leaves_the_state_files_of_a_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch.optim optimizer's state fails to load while the restore is staged: the state
    file of a table in a file, kept by a lookuplinear optimizer listed before it, is neither
    replaced nor written."""
    torch.manual_seed(0)
    model = Model(tmp_path / "table")
    opts: list[torch.optim.Optimizer] = [
        optim.SGD(model.table.parameters(), lr=0.1, momentum=0.9),
        torch.optim.SGD(model.head.parameters(), lr=0.1, momentum=0.9)]
    for step in range(2):
        _step(model, opts, step)
    Checkpoint(tmp_path / "ckpt", model, opts).save(step=1)
    _step(model, opts, 2)
    file = tmp_path / "table" / "state-momentum_buffer.bin"
    inode, data = file.stat().st_ino, file.read_bytes()
    before = snapshot(model, *opts)

    def refused(state_dict: object) -> None:
        raise RuntimeError("refused")

    monkeypatch.setattr(opts[1], "load_state_dict", refused)
    with pytest.raises(ModelFileError, match="refused"):
        Checkpoint(tmp_path / "ckpt", model, opts).restore()
    assert file.stat().st_ino == inode and file.read_bytes() == data
    assert_unchanged(before, model, *opts)


def test_a_restore_refused_at_a_second_tables_state_leaves_the_first_tables_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tables in files under one lookuplinear optimizer: making the second table's staged
    state fails, and the first table's state file (staged already) is neither replaced nor
    written, no staging file is left, and the next restore succeeds."""
    from lookuplinear.storage import tables as storage_tables

    torch.manual_seed(0)
    a = LookupLinear(20, 4, sparse=True, storage=tmp_path / "a", seed=1)  # type: ignore
    b = LookupLinear(20, 4, sparse=True, storage=tmp_path / "b", seed=2)  # type: ignore
    model = nn.ModuleDict({"a": a, "b": b})
    opt = optim.Adam(model.parameters(), lr=0.1)

    def step(rows: list[int]) -> None:
        opt.zero_grad()
        (a(torch.tensor(rows)) + b(torch.tensor(rows))).sum().backward()
        opt.step()

    step([1, 2])
    Checkpoint(tmp_path / "ckpt", model, opt).save(step=1)
    saved = _bits(model, [opt])
    step([3])
    file = tmp_path / "a" / "state-moments.bin"
    inode, data = file.stat().st_ino, file.read_bytes()
    before = snapshot(model, opt)
    real_map = storage_tables._map

    def failing(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.parent.name == "b" and path.name.startswith("state-"):
            raise OSError(24, "Too many open files")
        return real_map(path, *args, **kwargs)

    monkeypatch.setattr(storage_tables, "_map", failing)
    with pytest.raises(OSError, match="Too many open files"):
        Checkpoint(tmp_path / "ckpt", model, opt).restore()
    assert file.stat().st_ino == inode and file.read_bytes() == data
    assert_unchanged(before, model, opt)
    assert not [f for d in ("a", "b") for f in (tmp_path / d).iterdir() if "staged" in f.name]
    monkeypatch.setattr(storage_tables, "_map", real_map)
    Checkpoint(tmp_path / "ckpt", model, opt).restore()
    _assert_same(_bits(model, [opt]), saved)


@pytest.mark.parametrize("failing", ["flags", 1, 2, 3, 4])
def test_a_restore_failing_after_staging_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str | int) -> None:
    """A restore staged in full fails before it writes: the new drawn flags cannot be
    allocated ("flags"), or the ``failing``-th rename fails (making the first or second table's
    staged state file, 1 and 2; putting the first or second table's in place, 3 and 4). The
    IdMap's strings, the torch.optim optimizer's state (loaded while staging), the tables, the
    lookuplinear optimizer's state and every file are as they were; the next restore is the
    save's."""
    import errno
    import hashlib

    from lookuplinear import IdMap
    from lookuplinear.storage.tables import TableStorage

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ids = IdMap(40, key_type="str")
            self.a = LookupLinear(50, 4, sparse=True, storage=tmp_path / "a", seed=1)
            self.b = LookupLinear(50, 4, sparse=True, storage=tmp_path / "b", seed=2)
            self.head = nn.Linear(4, 1)

        def forward(self, names: list[str]) -> torch.Tensor:
            rows = self.ids(names)
            return self.head(self.a(rows[:, None]) + self.b(rows[:, None])).sum()

    torch.manual_seed(0)
    model = Named().train()
    opts: list[torch.optim.Optimizer] = [
        optim.Adam([model.a.weight, model.b.weight], lr=0.1),
        torch.optim.Adam([*model.head.parameters(), model.a.bias, model.b.bias], lr=0.1)]

    def step(names: list[str]) -> None:
        for opt in opts:
            opt.zero_grad()
        model(names).backward()
        for opt in opts:
            opt.step()

    def files() -> dict[str, tuple[int, str]]:
        return {str(f.relative_to(tmp_path)): (f.stat().st_ino,
                                                hashlib.sha256(f.read_bytes()).hexdigest())
                for f in sorted(tmp_path.rglob("*")) if f.is_file()}

    step(["x", "y"])
    ckpt = Checkpoint(tmp_path / "ckpt", model, opts)
    ckpt.save(step=1)
    saved = _bits(model, opts)
    step(["z", "w", "x"])
    step(["v"])
    on_disk, before = files(), snapshot(model, *opts)
    if failing == "flags":
        def no_memory(self: TableStorage) -> None:
            raise MemoryError("no memory for the new flags")

        monkeypatch.setattr(TableStorage, "fresh_flags", no_memory)
    else:
        real, calls = os.replace, []

        def replace(*args: Any, **kwargs: Any) -> None:
            calls.append(args)
            if len(calls) == failing:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(*args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(MemoryError if failing == "flags" else OSError):
        ckpt.restore()
    monkeypatch.undo()
    assert files() == on_disk
    assert_unchanged(before, model, *opts)
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(model, opts), saved)


def test_a_half_tables_float32_rowwise_sums_restore_unrounded(tmp_path: Path) -> None:
    """RowWiseAdagrad keeps a float16 table's sums in float32: a checkpoint restores them as
    they were, past float16's largest value."""
    layer = LookupLinear(20, 4, sparse=True, bias=False, dtype=torch.float16)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    for rows in ([1, 2, 2], [2, 5]):
        opt.zero_grad()
        (300 * layer(torch.tensor(rows))).sum().backward()
        ckpt.save()
    fresh = LookupLinear(20, 4, sparse=True, bias=False, dtype=torch.float16)
    fresh_opt = optim.RowWiseAdagrad(fresh.parameters(), lr=0.1, fused=True)
    Checkpoint(tmp_path / "ckpt", fresh, fresh_opt).restore()
    got, want = fresh_opt.state[fresh.weight]["sum"], opt.state[layer.weight]["sum"]
    assert got.dtype == torch.float32 and got.max() > 65504
    assert torch.equal(got, want) and torch.equal(fresh.weight, layer.weight)


# ---------------------------------------------------------------------- tables in files
def _first_draw(storage: Any, row: int) -> torch.Tensor:
    """Row ``row`` of the table in ``storage`` as its first lookup draws it."""
    from lookuplinear.storage.tables import draw_rows

    m = storage.meta
    return draw_rows(torch.tensor([row]), m["dim"], seed=m["seed"], init=m["init"],
                     in_features=m["rows"], dtype=storage.dtype)


@pytest.mark.parametrize("fused", [False, True])
def test_a_collection_table_in_a_file_is_saved_by_rows_whatever_the_optimizer(
        tmp_path: Path, fused: bool) -> None:
    """Its group is followed by rows (a ParameterList holds it, the collection says it is
    row-sparse); a row first drawn after the save is undrawn again after the restore, and its
    next lookup draws it as the first did."""
    from lookuplinear.storage.tables import storage_of

    torch.manual_seed(0)
    coll = LookupCollection([TableConfig("t", 10, 4, ["f"], storage=tmp_path / "t")],
                            sparse=True)
    opt = optim.Adam(coll.parameters(), lr=0.1, fused=fused)
    ckpt = Checkpoint(tmp_path / "ckpt", coll, opt)
    assert list(ckpt.tables) == ["table_groups.0"]

    def step(rows: list[int]) -> None:
        opt.zero_grad()
        coll(KeyedBags.from_dict({"f": [rows]})).values().sum().backward()
        opt.step()

    step([0])
    ckpt.save(step=1)
    saved = _bits(coll, [opt])
    step([5])  # row 5 first drawn after the save; then the process dies
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(coll, [opt]), saved)
    storage = storage_of(coll.table_groups[0])
    assert storage.drawn_rows().tolist() == [0]
    out = coll(KeyedBags.from_dict({"f": [[5]]})).values()
    assert torch.equal(out, _first_draw(storage, 5))


def test_a_table_in_a_file_saved_whole_restores_its_drawn_rows(tmp_path: Path) -> None:
    """A table with dense gradients under a torch.optim optimizer is saved whole: the restore
    empties its file, writes the saved values and marks the rows that held values then, so a
    row first drawn after the save is drawn again, not read as zeros."""
    layer = LookupLinear(10, 4, bias=False, storage=tmp_path / "t", seed=0)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    assert not ckpt.tables
    with torch.no_grad():
        layer(torch.tensor([3]))
    ckpt.save(step=0)
    saved = layer.weight.detach().clone()
    opt.zero_grad()
    layer(torch.tensor([0])).sum().backward()
    opt.step()
    assert ckpt.restore() == {"step": 0}
    assert torch.equal(layer.weight, saved)
    assert layer.storage.drawn_rows().tolist() == [3]
    assert torch.equal(layer(torch.tensor([0])).detach(), _first_draw(layer.storage, 0))


def test_torch_sgd_with_momentum_over_a_row_sparse_table_is_refused(tmp_path: Path) -> None:
    """torch.optim.SGD's momentum moves, at every step, rows the step's gradient did not name,
    which a save by rows would miss: refused when the checkpoint is built, and at save() when
    momentum is set later; without momentum it is saved and restored."""
    layer = LookupLinear(50, 4, sparse=True, bias=False)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.tensor([1, 2])).pow(2).sum().backward()
    opt.step()
    with pytest.raises(InputValueError, match=r"SGD with momentum=0\.9.*'weight'.*"
                                              r"lookuplinear\.optim\.SGD.*momentum=0"):
        Checkpoint(tmp_path / "ckpt", layer, opt)
    plain = torch.optim.SGD(layer.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, plain)
    assert ckpt.save(step=0) == 1
    plain.param_groups[0]["momentum"] = 0.5
    with pytest.raises(InputValueError, match=r"momentum=0\.5"):
        ckpt.save(step=1)
    assert ckpt.generation == 1
    Checkpoint(tmp_path / "ckpt2", layer, optim.SGD(layer.parameters(), lr=0.1,
                                                    momentum=0.9)).save()


@pytest.mark.parametrize("in_file", [False, True])
def test_a_collection_saved_whole_by_earlier_versions_restores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_file: bool) -> None:
    """Earlier versions saved a collection trained by an optimizer that is not fused whole: its
    checkpoint restores bit for bit, and the next save begins a chain that holds its rows."""
    torch.manual_seed(0)
    model = Tables(tmp_path / "tag" if in_file else None, sparse=True)
    opt = optim.Adam(model.parameters(), lr=0.05)
    with monkeypatch.context() as m:
        m.setattr(Checkpoint, "_by_rows", staticmethod(lambda module, p: False))
        written = Checkpoint(tmp_path / "ckpt", model, opt)
        for step in range(2):
            _tables_step(model, opt, step)
        written.save(step=1)
    saved = _bits(model, [opt])
    _tables_step(model, opt, 2)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opt)
    assert len(ckpt.tables) == 2
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(model, [opt]), saved)
    _tables_step(model, opt, 2)
    ckpt.save(step=2)
    saved = _bits(model, [opt])
    _tables_step(model, opt, 3)
    assert Checkpoint(tmp_path / "ckpt", model, opt).restore() == {"step": 2}
    _assert_same(_bits(model, [opt]), saved)


def test_rows_named_that_were_never_drawn_stay_undrawn(tmp_path: Path) -> None:
    """Rows the tracker was told of that hold no value (as a dense gradient names every row)
    are not saved: after a restore a row never drawn is drawn at its first lookup, not read
    as zeros."""
    layer = LookupLinear(10, 4, bias=False, sparse=True, storage=tmp_path / "t", seed=0)
    opt = optim.Adam(layer.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    layer(torch.tensor([0])).sum().backward()
    opt.step()
    ckpt._tracker.add("weight", None)  # every row may have changed
    ckpt.save(step=1)
    saved = layer.weight.detach().clone()
    assert ckpt.restore() == {"step": 1}
    assert torch.equal(layer.weight, saved)
    assert layer.storage is not None and layer.storage.drawn_rows().tolist() == [0]
    assert torch.equal(layer(torch.tensor([5])).detach(), _first_draw(layer.storage, 5))


@pytest.mark.parametrize("in_file", [False, True])
def test_a_table_frozen_when_the_checkpoint_is_built_is_followed_once_trained(
        tmp_path: Path, in_file: bool) -> None:
    """Frozen for a warm-up, unfrozen later: the rows trained then are saved and restored."""
    layer = LookupLinear(2000, 4, bias=False, sparse=True,
                         storage=tmp_path / "t" if in_file else None, seed=0)
    layer.weight.requires_grad_(False)
    opt = optim.Adam(layer.parameters(), lr=0.1)
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    ckpt.save(step=0)
    layer.weight.requires_grad_(True)
    for step, row in ((1, 3), (2, 4)):
        opt.zero_grad()
        layer(torch.tensor([row])).sum().backward()
        opt.step()
        if step == 1:
            ckpt.save(step=1)
            saved = _bits(layer, [opt])
    assert ckpt.restore() == {"step": 1}
    _assert_same(_bits(layer, [opt]), saved)


def test_a_restore_that_cannot_allocate_changes_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory for the second table's new drawn flags: raised before any file is
    emptied, every table and flag as it was; ``reset_parameters`` the same."""
    from lookuplinear.storage import tables as storage_tables

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = LookupLinear(20, 4, sparse=True, storage=tmp_path / "a", seed=1)
            self.b = LookupLinear(20, 4, sparse=True, storage=tmp_path / "b", seed=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    model = Two()
    opt = optim.Adam(model.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opt)
    model(torch.tensor([1, 2])).sum().backward()
    opt.step()
    ckpt.save(step=1)
    model(torch.tensor([1, 3])).sum().backward()
    opt.step()
    before = snapshot(model, opt)
    allocate = storage_tables._anonymous_zeros
    calls = []

    def second_fails(n: int) -> torch.Tensor:
        calls.append(n)
        if len(calls) == 2:
            raise MemoryError
        return allocate(n)

    monkeypatch.setattr(storage_tables, "_anonymous_zeros", second_fails)
    with pytest.raises(MemoryError):
        ckpt.restore()
    assert_unchanged(before, model, opt)
    for layer in (model.a, model.b):
        assert layer.storage is not None and layer.storage.drawn_rows().tolist() == [1, 2, 3]
    calls.clear()
    calls.append(0)  # the next allocation fails
    with pytest.raises(MemoryError):
        model.a.reset_parameters()
    assert_unchanged(before, model, opt)
    monkeypatch.undo()
    assert ckpt.restore() == {"step": 1}


def test_info_json_would_change_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ckpt = Checkpoint(tmp_path / "ckpt", LookupLinear(10, 2))
    for info in ({"positions": {0: 100}}, {"shape": (2, 3)}, {"flags": {True: 1}}):
        with pytest.raises(InputValueError, match="would come back"):
            ckpt.save(**info)
        assert not ckpt.exists()
    ckpt.save(step=3, positions={"0": 100}, shape=[2, 3])
    assert ckpt.restore() == {"step": 3, "positions": {"0": 100}, "shape": [2, 3]}


def test_info_holding_nan_is_saved_and_comes_back(tmp_path: Path) -> None:
    """JSON keeps NaN (a diverged loss): saved and returned, though nan != nan."""
    import math

    ckpt = Checkpoint(tmp_path / "ckpt", LookupLinear(10, 2))
    ckpt.save(loss=float("nan"), history=[1.0, float("nan")], best={"loss": float("inf")})
    back = ckpt.restore()
    assert math.isnan(back["loss"]) and math.isnan(back["history"][1])
    assert back["history"][0] == 1.0 and back["best"] == {"loss": float("inf")}
    with pytest.raises(InputValueError, match="would come back"):
        ckpt.save(losses=(float("nan"),))


def test_a_tensor_learning_rate_is_a_clear_error(tmp_path: Path) -> None:
    from lookuplinear import InputTypeError

    layer = LookupLinear(10, 2)
    opt = torch.optim.Adam(layer.parameters(), lr=torch.tensor(0.01))
    ckpt = Checkpoint(tmp_path / "ckpt", layer, opt)
    with pytest.raises(InputTypeError, match=r"'lr' is a tensor.*lr=0.01"):
        ckpt.save(step=1)
    assert not ckpt.exists()
