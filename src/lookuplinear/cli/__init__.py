"""The ``lookuplinear`` command line: one module per subcommand.

Each subcommand module defines ``add_parser(subparsers) -> argparse.ArgumentParser`` and
``run(args) -> int`` (the exit code). Heavy imports (matplotlib, scikit-learn) stay inside
``run`` so that ``lookuplinear --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

#: subcommand name -> module (under lookuplinear.cli) that implements it
COMMANDS: dict[str, str] = {
    "report": "report",
    "explain": "explain",
    "bench": "bench",
    "train": "train",
    "supervised": "train",
    "predict": "predict",
    "predict-prob": "predict",
    "test": "test",
    "test-label": "test",
    "quantize": "quantize",
    "print-word-vectors": "vectors",
    "print-sentence-vectors": "vectors",
    "print-ngrams": "nearest",
    "nn": "nearest",
    "analogies": "nearest",
    "skipgram": "unsupervised",
    "cbow": "unsupervised",
    "dump": "dump",
}

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: the shell's code for a command ended by SIGINT (128 + 2)
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="lookuplinear",
        description="An embedding layer is a linear layer: show it, measure it, train with it.",
    )
    from ._args import CommandParser

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=CommandParser)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"{__name__}.{module}")
        p = mod.add_parser(sub, name) if name != module else mod.add_parser(sub)
        p.set_defaults(_run=mod.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 error, 2 bad usage, 130
    interrupted by Ctrl-C)."""
    from ..errors import LookupLinearError

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    # the command line as given, for a command to record what ran (bench's results.json)
    args._command_line = "lookuplinear " + shlex.join(argv)
    if getattr(args, "_takes_any", False):  # a refused command: its message, not usage
        args.rest = [*args.rest, *extra]
    elif extra:  # the subcommand's usage, not the top level's, names what it takes
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args._run(args))
    except (LookupLinearError, OSError) as e:  # a file that cannot be read or written
        print(f"lookuplinear {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print(f"lookuplinear {args.command}: interrupted"
              + getattr(args, "_interrupted_note", ""), file=sys.stderr)
        return EXIT_INTERRUPTED
