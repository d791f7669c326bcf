"""The training demonstration: the same loss curve step for step, then a vocabulary too big
for the dense path.

1. :func:`train_side_by_side`: ``LookupLinear`` on indices and ``nn.Linear`` on their one-hot
   rows, from the same initial weights (``init="linear"`` under the same seed), on the same
   batches with the same optimizer: the two loss curves agree step for step.
2. :func:`train_big_vocab`: a hashed-feature classifier on a vocabulary of tens of millions of
   rows with ``sparse=True`` gradients and ``lookuplinear.optim.SGD``: its dense path would
   need one ``batch x in_features`` float matrix per step, far more than the machine's memory.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import optim
from ..modules.layer import LookupLinear
from ..sparse.bags import Bags
from .memory import measure_peak

__all__ = ["LOSS_WINDOW", "BigVocabRun", "SideBySide", "train_big_vocab", "train_side_by_side"]

#: steps averaged at each end of a loss curve to tell whether it fell: one step is noise
LOSS_WINDOW = 20


@dataclass
class SideBySide:
    """Loss curves of the lookup and of ``nn.Linear`` on one-hot input, and their agreement."""

    in_features: int
    out_features: int
    batch: int
    optimizer: str
    loss_lookup: list[float]
    loss_linear: list[float]
    max_abs_diff: float
    weight_max_abs_diff: float
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        """Every step's losses agree within ``atol + rtol * |loss|``."""
        return all(
            abs(a - b) <= self.atol + self.rtol * abs(b)
            for a, b in zip(self.loss_lookup, self.loss_linear, strict=True)
        )


def train_side_by_side(
    in_features: int = 300,
    out_features: int = 5,
    *,
    batch: int = 64,
    steps: int = 80,
    lr: float = 2.0,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> SideBySide:
    """Train ``LookupLinear`` (indices) and ``nn.Linear`` (one-hot) side by side.

    Both start from ``torch.manual_seed(seed)`` with ``nn.Linear``'s initialisation
    (``LookupLinear(init="linear")`` draws the same numbers, transposed), see the same batches
    of indices with the same labels, and take ``torch.optim.SGD`` steps.

    Examples
    --------
    >>> run = train_side_by_side(50, 3, batch=8, steps=5)
    >>> run.ok, len(run.loss_lookup)
    (True, 5)
    """
    torch.manual_seed(seed)
    linear = nn.Linear(in_features, out_features)
    torch.manual_seed(seed)
    lookup = LookupLinear(in_features, out_features, init="linear")
    opt_a = torch.optim.SGD(lookup.parameters(), lr=lr)
    opt_b = torch.optim.SGD(linear.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    labels_of = torch.randint(0, out_features, (in_features,), generator=gen)  # the rule to learn
    losses_a: list[float] = []
    losses_b: list[float] = []
    for _ in range(steps):
        idx = torch.randint(0, in_features, (batch,), generator=gen)  # (B,)
        y = labels_of[idx]
        for model, opt, x, losses in (
            (lookup, opt_a, idx, losses_a),
            (linear, opt_b, F.one_hot(idx, in_features).float(), losses_b),  # (B, in)
        ):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    diff = max(abs(a - b) for a, b in zip(losses_a, losses_b, strict=True))
    wdiff = float((lookup.weight.detach() - linear.weight.detach().T).abs().max())
    return SideBySide(in_features, out_features, batch, "torch.optim.SGD", losses_a, losses_b,
                      diff, wdiff, rtol, atol)


@dataclass
class BigVocabRun:
    """A training run on a vocabulary the dense path cannot hold."""

    in_features: int
    out_features: int
    batch: int
    bag_size: int
    optimizer: str
    losses: list[float]
    accuracy_before: float
    accuracy_after: float
    seconds: float
    table_bytes: int
    dense_batch_bytes: int
    peak_bytes: int | None
    memory_bytes: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def window(self) -> int:
        """Steps averaged at each end of the loss curve: :data:`LOSS_WINDOW`, or half the steps
        when fewer ran (the first and the last steps never overlap)."""
        return min(LOSS_WINDOW, len(self.losses) // 2)

    @property
    def loss_start(self) -> float:
        """The mean loss of the first :attr:`window` steps."""
        return statistics.fmean(self.losses[: self.window])

    @property
    def loss_end(self) -> float:
        """The mean loss of the last :attr:`window` steps."""
        return statistics.fmean(self.losses[-self.window :])

    def loss_text(self) -> str:
        """The loss statistic the verdict rests on, as the report prints it."""
        w = self.window
        return (f"loss {self.loss_start:.3f} -> {self.loss_end:.3f} (mean of the first {w} "
                f"step{'s' * (w != 1)} -> of the last {w})")

    def failures(self) -> list[str]:
        """What shows the run did not learn: a loss that did not fall (:meth:`loss_text`), a
        held-out accuracy that did not rise; empty when it learned.

        Examples
        --------
        >>> run = BigVocabRun(10, 2, 4, 1, "SGD", [0.7, 0.1, 0.9, 0.8], 0.5, 0.6, 0.1, 0, 0,
        ...                   None, None)
        >>> run.failures()  # the last step is below the first, the mean of the last two is not
        ['the loss did not fall: loss 0.400 -> 0.850 (mean of the first 2 steps -> of the last 2)']
        """
        if self.window == 0:
            n = len(self.losses)
            return [f"{n} training step{'s' * (n != 1)}: too few to compare the first steps' "
                    "loss with the last ones'"]
        out = []
        if not self.loss_end < self.loss_start:
            out.append(f"the loss did not fall: {self.loss_text()}")
        if not self.accuracy_after > self.accuracy_before:
            out.append(f"the held-out accuracy did not rise: {self.accuracy_before:.1%} -> "
                       f"{self.accuracy_after:.1%}")
        return out


def _bags(
    rng: np.random.Generator, n: int, batch: int, bag: int, threshold: float = 0.0
) -> tuple[Bags, torch.Tensor, np.ndarray]:
    """Zipf-distributed bags; label 1 when a hidden per-row score summed over the bag exceeds
    ``threshold``. Returns the bags, the labels and the summed scores."""
    cols = (rng.zipf(1.3, size=batch * bag) - 1) % n
    score = (cols * 2654435761 % 2**32) / 2**32 - 0.5  # hidden score of each row, by hashing
    total = score.reshape(batch, bag).sum(1)
    y = (total > threshold).astype(np.int64)
    offsets = torch.arange(0, batch * bag + 1, bag)
    return Bags(torch.from_numpy(cols), offsets), torch.from_numpy(y), total


def train_big_vocab(
    in_features: int = 20_000_000,
    out_features: int = 2,
    *,
    batch: int = 512,
    bag_size: int = 20,
    steps: int = 300,
    lr: float = 0.2,
    seed: int = 0,
) -> BigVocabRun:
    """Train ``LookupLinear(in_features, out_features, sparse=True)`` as a bag classifier.

    The dense path would need a ``batch x in_features`` float32 matrix per step
    (``dense_batch_bytes``); the lookup reads and updates only the rows in the batch.

    Examples
    --------
    >>> run = train_big_vocab(10_000, batch=32, steps=3)
    >>> len(run.losses), run.dense_batch_bytes
    (3, 1280000)
    """
    from .machine import machine_info

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = LookupLinear(in_features, out_features, sparse=True, init=nn.init.zeros_)
    cls, name = optim.SGD, "lookuplinear.optim.SGD"
    opt = cls(model.parameters(), lr=lr)
    threshold = float(np.median(_bags(rng, in_features, 8192, bag_size)[2]))  # balanced labels
    test_x, test_y, _ = _bags(rng, in_features, 4096, bag_size, threshold)

    def accuracy() -> float:
        with torch.no_grad():
            return float((model(test_x).argmax(1) == test_y).float().mean())

    before = accuracy()
    losses: list[float] = []

    def train() -> None:
        for _ in range(steps):
            x, y, _ = _bags(rng, in_features, batch, bag_size, threshold)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())

    t0 = time.perf_counter()
    peak = measure_peak(train)
    seconds = time.perf_counter() - t0
    return BigVocabRun(
        in_features, out_features, batch, bag_size, name, losses, before, accuracy(), seconds,
        table_bytes=model.weight.numel() * model.weight.element_size(),
        dense_batch_bytes=batch * in_features * 4,
        peak_bytes=peak,
        memory_bytes=machine_info().get("memory_bytes"),
    )
