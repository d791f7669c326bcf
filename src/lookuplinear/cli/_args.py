"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["FASTTEXT_SUFFIXES", "fasttext_stem", "output_path", "positive_int"]

#: the suffixes fastText appends to ``-output NAME``: the model, the quantized model
FASTTEXT_SUFFIXES = (".bin", ".ftz")


def positive_int(text: str) -> int:
    """An argparse type: a positive integer, also written as ``1e6``.

    Examples
    --------
    >>> positive_int("1e6"), positive_int("32")
    (1000000, 32)
    """
    try:
        value = int(float(text)) if "e" in text.lower() else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


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
