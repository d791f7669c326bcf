"""A click model on a pandas DataFrame, end to end, with lookuplinear.

    python examples/recommender.py [--rows 200000] [--steps 1000] [--out DIR]

The data is a click log as a recommender sees it (``make_clicks``, seeded, no download): a raw
int64 ``user_id`` up to 2**40, a string ``item_id``, a small ``category``, a multi-valued
``tags`` list column and a ``click`` label that depends on all four. The model: one
``LookupCollection`` (users through its own ``IdMap``, items through a string ``IdMap``,
a plain category table, hashed tags pooled as a mean), an MLP on the pooled features, fused
Adam, AUC on held-out rows, a ``Checkpoint`` every ``--every`` steps (run it again: it resumes),
int8 tables, and a served model saved as safetensors + JSON that loads without running code.
``examples/recommender_torch.py`` is the same model in plain PyTorch; docs/recommender.md
shows both with their timings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.utils.data import DataLoader

from lookuplinear import (
    Checkpoint,
    IdMap,
    KeyedBags,
    KeyedBagsDataset,
    LookupCollection,
    TableConfig,
    optim,
)


def make_clicks(rows: int = 200_000, seed: int = 0) -> pd.DataFrame:
    """A seeded click log: ``user_id`` (int64 < 2**40), ``item_id`` (str), ``category``
    (int, 20 values), ``tags`` (a list of 0 to 5 int tag IDs) and ``click`` (0 or 1).

    A click is drawn with probability ``sigmoid(b + item_bias + category_bias + mean tag
    effect + <user taste, item factors>)``; users and items are Zipf-popular, so most users
    and items are seen more than once."""
    rng = np.random.default_rng(seed)
    n_users, n_items, n_tags = max(rows // 8, 2), max(rows // 40, 2), 500
    user_ids = rng.integers(0, 2**40, n_users)
    item_ids = np.array([f"item-{i:06x}" for i in rng.permutation(16**6)[:n_items]], dtype=object)
    item_category = rng.integers(0, 20, n_items)
    user = (rng.zipf(1.3, rows) - 1) % n_users
    item = (rng.zipf(1.2, rows) - 1) % n_items
    lengths = rng.integers(0, 6, rows)
    flat = rng.integers(0, n_tags, int(lengths.sum()))
    tags = np.split(flat, np.cumsum(lengths)[:-1])
    taste, factors = rng.normal(0, 1, (n_users, 4)), rng.normal(0, 1, (n_items, 4))
    tag_sum = np.bincount(np.repeat(np.arange(rows), lengths),
                          rng.normal(0, 1, n_tags)[flat], minlength=rows)
    logit = (-1.0 + rng.normal(0, 1, n_items)[item] + rng.normal(0, 1, 20)[item_category[item]]
             + tag_sum / np.maximum(lengths, 1) + (taste[user] * factors[item]).sum(1))
    click = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return pd.DataFrame({"user_id": user_ids[user], "item_id": item_ids[item],
                         "category": item_category[item], "tags": tags, "click": click})


def batches(data: KeyedBagsDataset, size: int, start: int) -> Iterator[Any]:
    """Mini-batches from step ``start + 1`` on, as an uninterrupted run reads them."""
    per_epoch = -(-len(data) // size)
    for epoch in itertools.count(start // per_epoch):
        loader = DataLoader(data, batch_size=size, shuffle=True,
                            generator=torch.Generator().manual_seed(epoch),
                            collate_fn=KeyedBagsDataset.collate)
        yield from itertools.islice(loader, start % per_epoch if epoch == start // per_epoch
                                    else 0, None)


class Recommender(nn.Module):
    """Click logit = MLP(user, item, category and mean-of-tags embeddings)."""

    def __init__(self, users: int, items: int, dim: int = 16) -> None:
        super().__init__()
        self.config = {"users": users, "items": items, "dim": dim}
        self.items = IdMap(items, key_type="str")  # string item IDs -> rows, no collisions
        self.tables = LookupCollection([
            TableConfig("user", users, dim, ["user_id"], hashing="map"),  # raw int64 IDs
            TableConfig("item", items, dim, ["item"]),
            TableConfig("category", 64, dim, ["category"]),  # IDs below 64
            TableConfig("tags", 2048, dim, ["tags"], hashing="mod", mode="mean"),
        ], sparse=True)
        self.mlp = nn.Sequential(nn.Linear(4 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def features(self, df: pd.DataFrame) -> KeyedBags:
        """The batch of ``df``'s rows (in eval mode, unknown items read the fallback row)."""
        return KeyedBags.from_dataframe(df.assign(item=self.items(df["item_id"]).numpy()),
                                        columns=["user_id", "item", "category", "tags"])

    def forward(self, kb: KeyedBags) -> torch.Tensor:
        return self.mlp(self.tables(kb).values()).squeeze(1)  # (N,)


@torch.no_grad()
def auc(model: Recommender, df: pd.DataFrame) -> float:
    """Held-out AUC, in eval mode: the maps add no ID, unknown IDs read the fallback row."""
    model.eval()
    return float(roc_auc_score(df["click"], model(model.features(df))))


def save_served(model: Recommender, out: Path) -> None:
    """int8 tables, saved as tensors + JSON: loading runs no code (no pickle)."""
    model.tables = model.tables.quantize("int8")
    # torch.export: once LookupCollection exports, save torch.export.export(model, (kb,)) here
    save_file(model.state_dict(), out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(model.config))


def load_served(out: Path) -> Recommender:
    model = Recommender(**json.loads((out / "config.json").read_text())).eval()
    model.tables = model.tables.quantize("int8")
    model.load_state_dict(load_file(out / "model.safetensors"))
    return model


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--every", type=int, default=250, help="checkpoint every N steps")
    p.add_argument("--out", type=Path, default=Path("recommender-out"))
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())

    df = make_clicks(args.rows)
    train, test = df[: len(df) * 9 // 10], df[len(df) * 9 // 10:]
    torch.manual_seed(0)
    model = Recommender(users=train["user_id"].nunique() + 1,
                        items=train["item_id"].nunique() + 1)
    data = KeyedBagsDataset(model.features(train), target=torch.tensor(train["click"].values))
    opt = optim.Adam(model.parameters(), lr=3e-3, fused=True)  # tables updated in backward
    args.out.mkdir(exist_ok=True)
    ckpt = Checkpoint(args.out / "checkpoint", model, opt)
    start = ckpt.restore()["step"] if ckpt.exists() else 0
    t = time.perf_counter()
    for step, (x, y) in enumerate(itertools.islice(batches(data, args.batch, start),
                                                   max(args.steps - start, 0)), start + 1):
        opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(model(x), y).backward()
        opt.step()
        if step % args.every == 0 or step == args.steps:
            ckpt.save(step=step)
    seconds = time.perf_counter() - t
    result = {"resumed_from": start, "steps_per_s": (args.steps - start) / max(seconds, 1e-9),
              "auc": auc(model, test)}
    save_served(model, args.out)
    served = load_served(args.out)
    result["auc_int8"] = auc(served, test)
    print(f"lookuplinear: steps {start + 1}..{args.steps} at {result['steps_per_s']:.1f} "
          f"steps/s, test AUC {result['auc']:.4f}, served int8 AUC {result['auc_int8']:.4f}")
    return result


if __name__ == "__main__":
    main()
