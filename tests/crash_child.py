"""The training run of the checkpoint crash test: deterministic, resumable, killable.

``python tests/crash_child.py DIR STEPS EVERY`` trains a table in a file (``DIR/table``) with a
fused Adam, saving a :class:`lookuplinear.Checkpoint` (``DIR/ckpt``) every ``EVERY`` steps and
printing ``saved <generation> <step>`` once each save has returned. When ``DIR/ckpt`` holds a
checkpoint, it restores it and goes on from the step after it. Batch ``i`` depends only on
``i``, so an interrupted run that resumes ends as an uninterrupted one.

``python tests/crash_child.py --fork DIR STEPS EVERY`` imports all that once, then starts one
such run per line it reads, each in a process of its own forked from it (to be killed without
paying for the imports again): the run prints ``ready <pid>`` once it has restored, and when it
has ended this process prints ``ended <exit code>`` (``-9``: killed by ``SIGKILL``).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from lookuplinear import Bags, Checkpoint, LookupLinear, optim

ROWS, DIM, BATCH = 5_000, 8, 64


def batch(step: int) -> tuple[Bags, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    lengths = torch.randint(1, 6, (BATCH,), generator=g)
    zipf = torch.empty(int(lengths.sum())).exponential_(generator=g)
    idx = (zipf * 500).long().clamp_(max=ROWS - 1)  # a few hot rows, a long tail
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    return Bags(idx, offsets), torch.randn(BATCH, DIM, generator=g)


def build(root: Path) -> tuple[torch.nn.Module, torch.optim.Optimizer, Checkpoint]:
    table = root / "table"
    if table.exists():
        layer = LookupLinear.open(table, writable=True)
    else:
        layer = LookupLinear(ROWS, DIM, mode="mean", sparse=True, storage=table, seed=7)
    opt = optim.Adam(layer.parameters(), lr=0.05, fused=True)
    return layer, opt, Checkpoint(root / "ckpt", layer, opt, compact_ratio=1.5)


OnSave = Callable[[int, torch.nn.Module, torch.optim.Optimizer], None]


def train(root: Path, steps: int, every: int, on_save: OnSave | None = None) -> Checkpoint:
    """Run (or resume) the training to ``steps``; returns the checkpoint, restored or saved."""
    model, opt, ckpt = build(root)
    start = 0
    if (root / "ckpt" / "MANIFEST.json").exists():
        start = int(ckpt.restore()["step"]) + 1
    else:  # a run killed before its first save left rows in the table: start it over
        model.reset_parameters()
    print(f"ready {os.getpid()}", flush=True)
    for step in range(start, steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step % every == every - 1 or step == steps - 1:
            g = ckpt.save(step=step)
            if on_save is not None:
                on_save(g, model, opt)
            print(f"saved {g} {step}", flush=True)
    return ckpt


def snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every bit the run depends on: table, drawn flags, bias, Adam's moments and step."""
    layer = model
    assert isinstance(layer, LookupLinear) and layer.storage is not None
    out = {"weight": layer.weight.detach().clone(), "drawn": layer.storage.drawn.clone()}
    assert layer.bias is not None
    out["bias"] = layer.bias.detach().clone()
    for name, p in (("table", layer.weight), ("bias", layer.bias)):
        state = opt.state.get(p, {})
        for key, value in state.items():
            out[f"{name}.{key}"] = value.clone() if isinstance(value, torch.Tensor) else \
                torch.tensor(value)
    return out


def fork_runs(root: Path, steps: int, every: int) -> None:
    """One run of :func:`train` per line of stdin, each in a forked process writing to this
    one's stdout; then ``ended <exit code>``."""
    for _ in sys.stdin:
        pid = os.fork()
        if pid == 0:  # the run: its lines go to the same pipe, this process writes none meanwhile
            code = 1
            try:
                train(root, steps, every)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(f"ended {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    # one thread, set before anything runs: the forked runs start from a process with no pool
    torch.set_num_threads(1)
    fork = sys.argv[1] == "--fork"
    root, steps, every = Path(sys.argv[1 + fork]), int(sys.argv[2 + fork]), int(sys.argv[3 + fork])
    if fork:
        fork_runs(root, steps, every)
    else:
        train(root, steps, every)
