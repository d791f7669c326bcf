"""LookupLinear + SGD follows nn.Linear on the densified input step for step.

    python examples/same_loss_curve.py [--vocab 500] [--steps 50]

Two models start from the same weights: ``nn.Linear(vocab, dim)`` trained on the multi-hot
matrix of each batch, and ``LookupLinear(vocab, dim, sparse=True)`` trained on the bags
themselves with ``lookuplinear.optim.SGD``; each is followed by the same head. Both see the
same batches; the script prints both loss curves and their largest difference, and exits with
status 1 if they part (beyond float32 rounding) or a loss becomes NaN.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

import lookuplinear
from lookuplinear import Bags, LookupLinear


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=500)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.5)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    lookup = nn.Sequential(LookupLinear(args.vocab, args.dim, sparse=True, init="linear"),
                           nn.Tanh(), nn.Linear(args.dim, 2))
    linear = nn.Sequential(lookup[0].to_linear(), nn.Tanh(), nn.Linear(args.dim, 2))
    linear[2].load_state_dict(lookup[2].state_dict())
    opt_lookup = lookuplinear.optim.SGD(lookup.parameters(), lr=args.lr)
    opt_linear = torch.optim.SGD(linear.parameters(), lr=args.lr)

    g = torch.Generator().manual_seed(0)
    diffs = []
    print(" step   LookupLinear      nn.Linear   |difference|")
    for step in range(1, args.steps + 1):
        lists = [torch.randint(0, args.vocab, (int(n),), generator=g).tolist()
                 for n in torch.randint(0, 12, (32,), generator=g)]
        bags = Bags.from_lists(lists)
        y = torch.tensor([sum(b) % 2 for b in lists])
        losses = []
        for model, opt, x in ((lookup, opt_lookup, bags),
                              (linear, opt_linear, bags.to_dense(args.vocab))):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        diff = abs(losses[0] - losses[1])
        diffs.append(diff)
        if step <= 5 or step % 10 == 0:
            print(f"{step:5d}  {losses[0]:13.7f}  {losses[1]:13.7f}  {diff:12.2e}")
    worst = float(torch.tensor(diffs).max())  # NaN if a loss became NaN (max() would skip it)
    print(f"largest difference over {args.steps} steps: {worst:.2e}")
    return worst


if __name__ == "__main__":
    sys.exit(0 if main() < 1e-5 else 1)
