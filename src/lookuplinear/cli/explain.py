"""``lookuplinear explain``: the equivalence worked through on any sizes, in text and
pictures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._args import output_dir, positive_int

__all__ = ["add_parser", "run"]

#: refuse to print a one-hot matrix with more entries than this
MAX_DENSE_ENTRIES = 20_000_000
#: refuse to build a weight table with more entries than this (400 MB of float32, built twice:
#: the layer's table and nn.Linear's copy)
MAX_TABLE_ENTRIES = 100_000_000
#: the seeds torch.manual_seed takes (a negative one is read modulo 2**64)
SEED_RANGE = (-(2**63), 2**64 - 1)


def _index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer index, got {text!r}") from None


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    low, high = SEED_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"expected a seed from -2**63 to 2**64 - 1 (what torch.manual_seed takes), got "
            f"{text!r}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "explain",
        help="show that the lookup equals nn.Linear on one-hot input, on any sizes",
        description=(
            "The equivalence worked through: the weight table, the one-hot matrix, X @ W.T, "
            "the lookup, a weighted CSR row, and the verdict of check_equivalence. With no size "
            "options: a 4 x 5 table drawn after torch.manual_seed(123), idx = 2 3 1, and three "
            "more small examples."
        ),
    )
    p.add_argument("--in-features", type=positive_int, default=None, metavar="N",
                   help="rows of the table (vocabulary size); default 4")
    p.add_argument("--out-features", type=positive_int, default=None, metavar="D",
                   help="columns of the table; default 5")
    p.add_argument("--indices", type=_index, nargs="+", default=None, metavar="I",
                   help="rows to look up; default 2 3 1 for 4 rows, else 3 random rows")
    p.add_argument("--seed", type=_seed, default=None, metavar="S",
                   help="torch.manual_seed for the table (-2**63 to 2**64 - 1); default 123")
    p.add_argument("--png", type=Path, default=None, metavar="DIR",
                   help="also draw the pictures as PNG files into DIR")
    return p


def table_shape(args: argparse.Namespace) -> tuple[int, int]:
    """(in_features, out_features) from the parsed arguments."""
    from ..report.walkthrough import SEED_IN_FEATURES, SEED_OUT_FEATURES

    return args.in_features or SEED_IN_FEATURES, args.out_features or SEED_OUT_FEATURES


def resolve(args: argparse.Namespace) -> tuple[bool, int, int, list[int], int]:
    """(seeds' defaults?, in_features, out_features, indices, seed) from the parsed arguments."""
    from ..report.walkthrough import SEED, SEED_IN_FEATURES, SEED_INDICES, seed_rng

    names = ("in_features", "out_features", "indices", "seed")
    seeds = all(getattr(args, k) is None for k in names)
    n, d = table_shape(args)
    seed = SEED if args.seed is None else args.seed
    if args.indices is not None:
        indices = list(args.indices)
    elif n == SEED_IN_FEATURES:
        indices = list(SEED_INDICES)
    else:
        indices = sorted(seed_rng(seed).choice(n, size=min(3, n), replace=False))
        indices = [int(i) for i in indices]
    return seeds, n, d, indices, seed


def run(args: argparse.Namespace) -> int:
    from ..report.walkthrough import custom_walkthrough, render_markdown, seed_walkthrough

    n, d = table_shape(args)
    if n * d > MAX_TABLE_ENTRIES:  # before anything is drawn from it
        print(f"lookuplinear explain: error: the table would have {n} x {d} entries (over "
              f"{MAX_TABLE_ENTRIES:,}); explain builds it, so pass a smaller --in-features or "
              "--out-features.", file=sys.stderr)
        return 2
    seeds, n, d, indices, seed = resolve(args)
    bad = [i for i in indices if not 0 <= i < n]
    if bad:
        print(f"lookuplinear explain: error: --indices {bad} outside [0, {n}) "
              f"(--in-features {n}); pass indices from 0 to {n - 1}.", file=sys.stderr)
        return 2
    if len(indices) * n > MAX_DENSE_ENTRIES:
        print(f"lookuplinear explain: error: the one-hot matrix would have "
              f"{len(indices)} x {n} entries (over {MAX_DENSE_ENTRIES:,}); explain prints it, "
              "so pass fewer indices or a smaller --in-features.", file=sys.stderr)
        return 2
    output_dir(args._parser, args.png, "--png")
    steps = custom_walkthrough(n, d, indices, seed)
    shown = seed_walkthrough() if seeds else steps
    print(render_markdown(shown))
    if args.png is not None:
        paths = draw(steps, indices, args.png)
        for path in paths:
            print(f"picture written to {path}")
    return 0 if all(s.ok for s in shown + steps) else 1


def draw(steps: list[Any], indices: list[int], out: Path) -> list[Path]:
    """The three pictures of a :func:`custom_walkthrough` into ``out``."""
    from ..report.pictures import draw_explain

    weight = next(iter(steps[0].tensors.values()))
    cols = steps[1].tensors["CSR indices per row"]
    values = steps[1].tensors["CSR values per row"]
    half = len(cols) // 2  # row 1: the same columns with random values
    return draw_explain(
        weight, indices, cols[half:].tolist(), [round(float(v), 2) for v in values[half:]], out
    )
