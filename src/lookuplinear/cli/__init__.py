"""The ``lookuplinear`` command line: one module per subcommand.

Each subcommand module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and
``run(args) -> int`` (the exit code). Heavy imports (matplotlib, scikit-learn) stay inside
``run`` so that ``lookuplinear --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

#: subcommand name -> module (under lookuplinear.cli) that implements it
COMMANDS: dict[str, str] = {
    "report": "report",
    "explain": "explain",
    "bench": "bench",
    "train": "train",
    "predict": "predict",
    "test": "test",
}

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="lookuplinear",
        description="An embedding layer is a linear layer: show it, measure it, train with it.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        mod = importlib.import_module(f"{__name__}.{module}")
        p = mod.add_parser(sub)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 error, 2 bad usage)."""
    from ..errors import LookupLinearError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args))
    except (LookupLinearError, FileNotFoundError, PermissionError) as e:
        print(f"lookuplinear {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
