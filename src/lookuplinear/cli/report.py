"""``lookuplinear report``: the main job (for now: the seeds' walkthrough)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "report",
        help="show the equivalence on the seeds' examples and write a report",
        description="Reproduce the seed notebooks through the library and write the walkthrough.",
    )
    p.add_argument("--out", type=Path, default=Path("out/report"), help="output folder")
    return p


def run(args: argparse.Namespace) -> int:
    from ..walkthrough import render_markdown, seed_walkthrough

    steps = seed_walkthrough()
    text = render_markdown(steps)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "walkthrough.md"
    path.write_text(text, encoding="utf-8")
    print(text)
    print(f"report written to {path}")
    return 0 if all(s.ok for s in steps) else 1
