"""A snapshot of every tensor of a model and its optimizers, and the check that a refused load
left each one as it was, to the bit: values, dtypes, shapes, where each lives in memory (an
optimizer state tensor replaced by an equal one is a change), a table in a file's drawn rows,
an ``IdMap``'s strings, the optimizers' hyperparameters and PyTorch's random generator."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from lookuplinear import IdMap
from lookuplinear.storage.tables import storage_of


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().clone()
    return t.reshape(-1).view(torch.uint8) if t.dim() and t.numel() else t.reshape(-1)


def snapshot(model: nn.Module, *optimizers: torch.optim.Optimizer) -> dict[str, Any]:
    """Deep copies of everything a load or a restore could write (without reading a table in a
    file through ``state_dict()``, which would draw its rows)."""
    out: dict[str, Any] = {"rng": torch.get_rng_state()}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        out[f"model/{name}"] = (t.dtype, tuple(t.shape), t.data_ptr(), _bits(t))
        storage = storage_of(t)
        if storage is not None:
            out[f"drawn/{name}"] = storage.drawn.clone()
            out[f"seen/{name}"] = storage._seen.clone()
    for name, m in model.named_modules():
        if isinstance(m, IdMap):
            out[f"idmap/{name}"] = (dict(m._keys), m._next_key, m.evicted.clone())
    for i, opt in enumerate(optimizers):
        out[f"opt{i}/groups"] = copy.deepcopy(
            [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
        out[f"opt{i}/params"] = [[id(p) for p in g["params"]] for g in opt.param_groups]
        out[f"opt{i}/has"] = sorted(id(p) for p in opt.state)
        for p, state in opt.state.items():
            for key, value in state.items():
                where = f"opt{i}/{id(p)}/{key}"
                if isinstance(value, torch.Tensor):
                    out[where] = (value.dtype, tuple(value.shape), value.data_ptr(),
                                  _bits(value))
                else:
                    out[where] = copy.deepcopy(value)
    return out


def assert_unchanged(before: dict[str, Any], model: nn.Module,
                     *optimizers: torch.optim.Optimizer) -> None:
    """Every entry of :func:`snapshot` is as it was, bit for bit."""
    after = snapshot(model, *optimizers)
    assert before.keys() == after.keys(), sorted(set(before) ^ set(after))
    for key, was in before.items():
        now = after[key]
        if isinstance(was, tuple) and len(was) == 4 and isinstance(was[3], torch.Tensor):
            assert was[:3] == now[:3], key
            assert torch.equal(was[3], now[3]), key
        elif isinstance(was, torch.Tensor):
            assert torch.equal(was, now), key
        elif key.startswith("idmap/"):
            assert was[:2] == now[:2] and torch.equal(was[2], now[2]), key
        else:
            assert was == now, key
