"""The minibatch training loop of the estimators' stochastic solvers, and what runs around it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import scipy.sparse as sp
import torch
from torch import nn
from torch.optim import Optimizer

from ._input import CSRBatches
from ._optim import make_schedulers

__all__ = ["Loss", "constant_loss", "n_threads", "progress", "torch_threads", "train_epochs"]

#: ``loss(out, target, weight)``: the mean training loss of a batch
Loss = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def train_epochs(
    model: nn.Module,
    optimizers: Sequence[Optimizer],
    loss_fn: Loss,
    X: sp.csr_matrix,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    batch_size: int,
    epochs: int,
    seed: int,
    schedule: str,
    device: torch.device,
    end_epoch: Callable[[int, float], bool],
    bar: Any = None,
) -> None:
    """``epochs`` passes over the rows of ``X`` in an order shuffled by a generator seeded with
    ``seed``: on each batch of ``batch_size`` rows, ``loss_fn(model(rows), target, weight)``,
    ``backward`` (a fused optimizer updates the table there) and every optimizer's ``step``,
    at ``schedule`` (:func:`~lookuplinear.sklearn._optim.make_schedulers`).

    ``end_epoch(epoch, mean_loss)`` is called after each epoch with the epoch's mean loss
    over its rows, and stops the training when it returns True.
    """
    n = X.shape[0]
    gen = torch.Generator().manual_seed(seed)
    per_epoch = -(-n // batch_size)
    schedulers = make_schedulers(optimizers, schedule, epochs * per_epoch)
    model.train()
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        batches = CSRBatches(X[perm.numpy()])
        t_epoch, w_epoch = target[perm].to(device), None if weight is None else weight[perm]
        total, seen = 0.0, 0
        for a, b in batches.bounds(batch_size):
            w = None if w_epoch is None else w_epoch[a:b].to(device)
            bags = batches.rows(a, b).to(device)
            loss = loss_fn(model(bags), t_epoch[a:b], w)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()  # the fused optimizer updates the table here
            for opt in optimizers:
                opt.step()
            for sched in schedulers:
                sched.step()
            total += float(loss.detach()) * (b - a)
            seen += b - a
            if bar is not None:
                bar.update(b - a)
                bar.set_postfix(epoch=epoch + 1, loss=f"{total / seen:.4f}")
        if end_epoch(epoch, total / max(seen, 1)):
            break


def constant_loss(
    loss_fn: Loss,
    best: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    target: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    rows: int,
) -> float:
    """The training loss of the best constant output, what a model that ignores X reaches:
    ``loss_fn`` at ``best(target, weight)`` (the loss's minimiser over constants, one value
    per output, in closed form) on up to ``rows`` seeded rows of ``target``."""
    n = target.shape[0]
    pick = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:rows]
    t, w = target[pick], None if weight is None else weight[pick]
    const = best(t, w)  # (n_outputs,)
    with torch.no_grad():
        return float(loss_fn(const.expand(len(pick), -1), t, w))


def n_threads(n_jobs: int | None) -> int | None:
    """scikit-learn's ``n_jobs`` as a number of threads: a positive number itself; ``-1``
    every CPU joblib counts for this process, ``-2`` all but one, and so on (at least one:
    ``joblib.effective_n_jobs``); None leaves torch's setting."""
    if n_jobs is None or n_jobs > 0:
        return n_jobs
    from joblib import effective_n_jobs  # scikit-learn's dependency; only where it is needed

    return max(int(effective_n_jobs(n_jobs)), 1)


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads`` to ``n`` (scikit-learn's ``n_jobs``: :func:`n_threads`) inside
    the block, the previous setting after it.

    Minibatch steps on sparse rows are a few small kernels each; on a small or shared machine
    intra-op threads only add synchronisation, so the estimators default to one thread.
    """
    n = n_threads(n)
    if n is None or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def progress(verbose: int, *, total: int) -> Any:
    """A tqdm bar of ``total`` examples on stderr when ``verbose``, else None."""
    if not verbose:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="ex", unit_scale=True, file=sys.stderr, leave=True)
