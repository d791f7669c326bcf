"""The click model of examples/recommender.py in plain PyTorch, for comparison.

    python examples/recommender_torch.py [--rows 200000] [--steps 1000] [--out DIR]

The same data (``make_clicks``), features, model, schedule and steps: ``nn.EmbeddingBag``
tables, raw IDs turned into rows by ``pd.Index.get_indexer`` over the training rows' IDs
(unknown IDs read row 0), category and tags by modulo, the tags padded to the longest list;
``SparseAdam`` for the tables and ``Adam`` for the MLP; ``torch.save`` checkpoints with resume;
int8 tables by ``torch.ao.quantization``; the served model as a ``state_dict`` read back with
``torch.load(weights_only=True)`` and its ID lists in JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from recommender import make_clicks
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.ao.quantization import convert, float_qparams_weight_only_qconfig, prepare
from torch.utils.data import DataLoader, TensorDataset


def batches(data: TensorDataset, size: int, start: int) -> Iterator[Any]:
    """Mini-batches from step ``start + 1`` on, as an uninterrupted run reads them."""
    per_epoch = -(-len(data) // size)
    for epoch in itertools.count(start // per_epoch):
        loader = DataLoader(data, batch_size=size, shuffle=True,
                            generator=torch.Generator().manual_seed(epoch))
        yield from itertools.islice(loader, start % per_epoch if epoch == start // per_epoch
                                    else 0, None)


class Recommender(nn.Module):
    """Click logit = MLP(user, item, category and mean-of-tags embeddings)."""

    def __init__(self, users: list[int], items: list[str], dim: int = 16) -> None:
        super().__init__()
        self.config = {"users": users, "items": items, "dim": dim}
        self.users, self.items = pd.Index(users), pd.Index(items)  # raw IDs -> rows - 1
        self.user = nn.EmbeddingBag(len(users) + 1, dim, sparse=True)
        self.item = nn.EmbeddingBag(len(items) + 1, dim, sparse=True)
        self.category = nn.EmbeddingBag(64, dim, sparse=True)
        self.tags = nn.EmbeddingBag(2048, dim, mode="sum", sparse=True)
        self.mlp = nn.Sequential(nn.Linear(4 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def features(self, df: pd.DataFrame) -> tuple[torch.Tensor, ...]:
        """User, item and category rows ``(N, 1)``; the tags' rows padded to ``(N, longest)``
        and their weights, ``1 / length`` (0 on padding): their weighted sum is their mean."""
        lengths = df["tags"].map(len).to_numpy()
        tags = np.zeros((len(df), max(lengths.max(), 1)), dtype=np.int64)
        real = np.arange(tags.shape[1]) < lengths[:, None]
        tags[real] = np.concatenate([*df["tags"], []]).astype(np.int64) % 2048
        return (*(torch.from_numpy(np.asarray(x).reshape(-1, 1)) for x in (
            self.users.get_indexer(df["user_id"]) + 1, self.items.get_indexer(df["item_id"]) + 1,
            df["category"].to_numpy() % 64)), torch.from_numpy(tags),
            torch.from_numpy((real / np.maximum(lengths, 1)[:, None]).astype(np.float32)))

    def forward(self, user: torch.Tensor, item: torch.Tensor, category: torch.Tensor,
                tags: torch.Tensor, tag_weights: torch.Tensor) -> torch.Tensor:
        # int8 EmbeddingBags ignore mode="mean" and padding_idx, and take only 1-D weights:
        # the mean is a weighted sum over flat bags of the padded width
        flat = torch.arange(0, tags.numel(), tags.shape[1])
        pooled = [self.user(user), self.item(item), self.category(category),
                  self.tags(tags.flatten(), flat, per_sample_weights=tag_weights.flatten())]
        return self.mlp(torch.cat(pooled, 1)).squeeze(1)  # (N,)

    def quantize(self) -> Recommender:
        for table in (self.user, self.item, self.category, self.tags):
            table.qconfig = float_qparams_weight_only_qconfig
        return convert(prepare(self.eval()))


@torch.no_grad()
def auc(model: Recommender, df: pd.DataFrame) -> float:
    """Held-out AUC, in eval mode."""
    model.eval()
    return float(roc_auc_score(df["click"], model(*model.features(df))))


def save_served(model: Recommender, out: Path) -> None:
    """int8 tables, saved as a state_dict + JSON, read back without unpickling code."""
    served = model.quantize()  # alive while saved: its state_dict's scales point into it
    torch.save(served.state_dict(), out / "model.pt")
    (out / "config.json").write_text(json.dumps(model.config))


def load_served(out: Path) -> Recommender:
    model = Recommender(**json.loads((out / "config.json").read_text())).quantize()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    return model


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--every", type=int, default=250, help="checkpoint every N steps")
    p.add_argument("--out", type=Path, default=Path("recommender-torch-out"))
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())

    df = make_clicks(args.rows)
    train, test = df[: len(df) * 9 // 10], df[len(df) * 9 // 10:]
    torch.manual_seed(0)
    model = Recommender(users=train["user_id"].unique().tolist(),
                        items=train["item_id"].unique().tolist())
    data = TensorDataset(*model.features(train), torch.tensor(train["click"].values))
    tables = [p for name, p in model.named_parameters() if not name.startswith("mlp.")]
    opts = [torch.optim.SparseAdam(tables, lr=3e-3),
            torch.optim.Adam(model.mlp.parameters(), lr=3e-3)]
    args.out.mkdir(exist_ok=True)
    ckpt, start = args.out / "checkpoint.pt", 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        for opt, opt_state in zip(opts, state["opts"], strict=True):
            opt.load_state_dict(opt_state)
        start = state["step"]
    t = time.perf_counter()
    for step, (*x, y) in enumerate(itertools.islice(batches(data, args.batch, start),
                                                    max(args.steps - start, 0)), start + 1):
        for opt in opts:
            opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(model(*x), y).backward()
        for opt in opts:
            opt.step()
        if step % args.every == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "opts": [o.state_dict() for o in opts],
                        "step": step}, ckpt.with_suffix(".tmp"))
            os.replace(ckpt.with_suffix(".tmp"), ckpt)  # a crash never leaves half a file
    seconds = time.perf_counter() - t
    result = {"resumed_from": start, "steps_per_s": (args.steps - start) / max(seconds, 1e-9),
              "auc": auc(model, test)}
    save_served(model, args.out)
    served = load_served(args.out)
    result["auc_int8"] = auc(served, test)
    print(f"plain PyTorch: steps {start + 1}..{args.steps} at {result['steps_per_s']:.1f} "
          f"steps/s, test AUC {result['auc']:.4f}, served int8 AUC {result['auc_int8']:.4f}")
    return result


if __name__ == "__main__":
    main()
