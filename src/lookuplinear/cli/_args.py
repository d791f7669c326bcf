"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse
import decimal
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["FASTTEXT_FLAGS", "FASTTEXT_SUFFIXES", "CommandParser", "add_ignored_flags",
           "check_rate", "fasttext_seed", "fasttext_stem", "output_path", "positive_int",
           "write_stdout"]

#: the suffixes fastText appends to ``-output NAME``: the model, the quantized model
FASTTEXT_SUFFIXES = (".bin", ".ftz")

#: every flag fastText's ``Args::parseArgs`` reads (``supervised``, ``skipgram``, ``cbow`` and
#: ``quantize`` all parse the whole set), and the type of its value (None: a flag without one)
FASTTEXT_FLAGS: dict[str, type | None] = {
    "-input": str, "-output": str, "-lr": float, "-lrUpdateRate": int, "-dim": int,
    "-ws": int, "-epoch": int, "-minCount": int, "-minCountLabel": int, "-neg": int,
    "-wordNgrams": int, "-loss": str, "-bucket": int, "-minn": int, "-maxn": int,
    "-thread": int, "-t": float, "-label": str, "-verbose": int, "-pretrainedVectors": str,
    "-saveOutput": None, "-seed": int, "-qnorm": None, "-retrain": None, "-qout": None,
    "-cutoff": int, "-dsub": int, "-autotune-validation": str, "-autotune-metric": str,
    "-autotune-predictions": int, "-autotune-duration": int, "-autotune-modelsize": str,
}


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: a single-dash option is read whole, as fastText reads its flags.

    argparse would read an unknown ``-qout`` as the cluster ``-q -o ut`` (and ``-qou`` as an
    abbreviation of ``-qout``); here a single-dash word is an option only when it is one
    exactly, or when it is a one-letter option that takes a value followed by that value
    (``-k5``). Anything else is an unrecognized argument.
    """

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        found: list[Any] = super()._get_option_tuples(option_string)
        if option_string[1:2] not in self.prefix_chars:  # one dash: no clusters, no prefixes
            short = option_string[:2]
            found = [t for t in found if t[1] == short and t[0].nargs != 0]
        return found


def add_ignored_flags(group: Any, parser: argparse.ArgumentParser, note: str) -> None:
    """Add to ``group`` each of :data:`FASTTEXT_FLAGS` that ``parser`` does not take yet,
    accepted and ignored (``note`` says why), as fastText accepts every flag on every command
    that parses them."""
    for flag, kind in FASTTEXT_FLAGS.items():
        if flag in parser._option_string_actions:
            continue
        dest = "ignored_" + flag.lstrip("-").replace("-", "_")
        if kind is None:
            group.add_argument(flag, dest=dest, action="store_true", help=note)
        else:
            group.add_argument(flag, dest=dest, type=kind, default=None, help=note)


def positive_int(text: str) -> int:
    """An argparse type: a positive integer, also written as ``1e6`` or ``2.5e3``; a value that
    is not a whole number (``2.5``, ``1.9e0``) is refused, not rounded.

    Examples
    --------
    >>> positive_int("1e6"), positive_int("2.5e3"), positive_int("32")
    (1000000, 2500, 32)
    """
    refused = argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    try:  # exactly, not through a float: 1e30 is 10**30
        exact = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise refused from None
    # past Python's 4300-digit limit on int(str) (and a costly int())
    if not exact.is_finite() or exact.adjusted() > 4300:
        raise refused
    if exact != exact.to_integral_value():
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, got {text!r}, not a whole number")
    if exact <= 0:
        raise refused
    return int(exact)


def check_rate(flag: str, value: float, *, zero: bool = False) -> None:
    """Raise ``InputValueError`` naming ``flag`` unless ``value`` is a finite number above 0
    (at or above 0 with ``zero``): a learning rate, a decay."""
    from ..errors import InputValueError

    if math.isfinite(value) and (value >= 0 if zero else value > 0):
        return
    raise InputValueError(
        f"{flag} must be a finite number {'>=' if zero else '>'} 0, got {value}; give "
        f"{'0 or ' if zero else ''}a positive number."
    )


#: the seeds fastText's ``-seed`` takes: a C ``int`` (``std::stoi``)
C_INT_RANGE = (-(2**31), 2**31 - 1)


def fasttext_seed(seed: int, flag: str = "-seed") -> int:
    """fastText's ``-seed``, any C ``int``, as a ``random_state`` (0 to 2**32 - 1): the seed
    modulo 2**32, so a seed from 0 to 2**31 - 1 is itself and ``-1`` is 2**32 - 1; raises
    ``InputValueError`` naming ``flag`` for a seed outside a C ``int``, which fastText's
    ``std::stoi`` refuses too.

    Examples
    --------
    >>> fasttext_seed(0), fasttext_seed(7), fasttext_seed(-1)
    (0, 7, 4294967295)
    """
    from ..errors import InputValueError

    low, high = C_INT_RANGE
    if not low <= seed <= high:
        raise InputValueError(
            f"{flag} must be an integer from {low} to {high} (fastText's seed is a C int), "
            f"got {seed}; give a seed in that range."
        )
    return seed % 2**32


def fasttext_stem(name: Path) -> Path:
    """fastText's ``-output NAME`` without a ``.bin``/``.ftz`` the user already wrote.

    fastText appends its suffix to ``NAME`` whatever it ends in (``-output m.bin`` writes
    ``m.bin.bin``); here a suffix already there is not doubled, so ``-output m.bin`` writes the
    ``m.bin`` that ``test m.bin`` reads.

    Examples
    --------
    >>> str(fasttext_stem(Path("out/model"))), str(fasttext_stem(Path("model.bin")))
    ('out/model', 'model')
    """
    return name.with_suffix("") if name.suffix in FASTTEXT_SUFFIXES else name


def output_path(given: Path | None, prefix: Path | None, suffix: str) -> Path:
    """The file to write: ``-o PATH`` as given, or fastText's ``-output NAME`` as
    ``NAME`` + ``suffix``; raises ``InputValueError`` unless exactly one was given."""
    from ..errors import InputValueError

    if (given is None) == (prefix is None):
        raise InputValueError(
            "give the output once: -o PATH (written as given) or -output NAME (writes "
            f"NAME{suffix}, as fastText does), got {'neither' if given is None else 'both'}."
        )
    if given is not None:
        return given
    assert prefix is not None
    stem = fasttext_stem(prefix)
    return stem.with_name(stem.name + suffix)


def output_dir(parser: argparse.ArgumentParser, path: Path | None, flag: str) -> None:
    """Make the output folder ``path`` (with its parents) and prove it writable, before any
    work: a path that cannot be one (it, or a folder above it, is a file; no permission) is a
    usage error (``parser.error``: the usage and the reason, exit code 2), where the command
    would fail at its end, writing its results."""
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        taken = next((p for p in (*reversed(path.parents), path)
                      if p.exists() and not p.is_dir()), None)
        if taken == path:
            why = "is a file"
        elif taken is not None:
            why = f"is inside {str(taken)!r}, a file"
        else:
            why = f"cannot be written to ({e.strerror or e})"
        parser.error(f"{flag} {str(path)!r} {why}; give a folder (created if missing) for the "
                     "results.")


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout; a byte of the input that was not UTF-8 (kept as its surrogate
    escape, as a model fastText wrote reads it) is written back as that byte, as fastText
    writes its words and labels, where the stream's encoding refuses it."""
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            raise
        sys.stdout.flush()
        buffer.write(text.encode(sys.stdout.encoding or "utf-8", "surrogateescape"))
        buffer.flush()
