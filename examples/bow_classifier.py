"""A bag-of-words classifier on a large vocabulary: LookupLinear + lookuplinear.optim.Adam.

    python examples/bow_classifier.py [--vocab 1000000] [--steps 200]

Documents are bags of token ids drawn from a Zipf distribution (no download); a document's
class is decided by a hidden score per token. The model is fastText's: mean of the tokens'
embeddings, then a linear layer. The table has ``--vocab`` rows, but each step reads and writes
only the rows its batch names, so a step costs what the batch touches. Prints the loss, the
median step time, and the held-out accuracy next to the share of the most common class (the
classes are not balanced, so that share, not ``1 / classes``, is what guessing scores).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import lookuplinear
from lookuplinear import Bags, LookupLinear


def make_batch(
    rng: np.random.Generator, vocab: int, batch: int, classes: int
) -> tuple[Bags, torch.Tensor]:
    lengths = rng.integers(5, 40, size=batch)
    tokens = (rng.zipf(1.2, size=int(lengths.sum())) - 1) % vocab
    score = (tokens * 2654435761 % 2**32) / 2**32  # hidden per-token score, by hashing
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    mean = np.add.reduceat(score, offsets[:-1]) / lengths
    y = np.minimum((mean * classes * 2 - classes / 2).astype(np.int64), classes - 1).clip(0)
    return Bags(torch.from_numpy(tokens), torch.from_numpy(offsets)), torch.from_numpy(y)


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-2)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = nn.Sequential(
        LookupLinear(args.vocab, args.dim, mode="mean", sparse=True),  # the bag of words
        nn.Linear(args.dim, args.classes),
    )
    opt = lookuplinear.optim.Adam(model.parameters(), lr=args.lr)  # table and head alike
    test_x, test_y = make_batch(rng, args.vocab, 2048, args.classes)
    times, losses = [], []
    for step in range(1, args.steps + 1):
        x, y = make_batch(rng, args.vocab, args.batch, args.classes)
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
        if step % max(args.steps // 10, 1) == 0 or step == args.steps:
            print(f"step {step:5d}  loss {statistics.mean(losses[-20:]):.4f}  "
                  f"median step {statistics.median(times) * 1e3:.2f} ms")
    with torch.no_grad():
        acc = (model(test_x).argmax(1) == test_y).float().mean().item()
    # the classes are not balanced: the baseline is always answering the most common one
    majority = torch.bincount(test_y, minlength=args.classes).max().item() / len(test_y)
    table = model[0].weight
    print(f"table {tuple(table.shape)} = {table.numel() * 4 / 2**20:.0f} MiB, Adam state "
          f"{2 * table.numel() * 4 / 2**20:.0f} MiB; held-out accuracy {acc:.3f} "
          f"(majority class {majority:.3f})")
    return acc


if __name__ == "__main__":
    main()
