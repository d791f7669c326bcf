"""``lookuplinear quantize``: a model file with its table quantized, for inference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "quantize",
        help="quantize a model's table (int8, int4 or float16) for inference",
        description=(
            "Read MODEL (written by `lookuplinear train`), store its table row by row as int8 "
            "(the default), int4 or float16, and write the smaller model to -o. `test` and "
            "`predict` read it as any model; it cannot be trained further. fastText's "
            "`quantize -output NAME` reads NAME.bin and writes NAME.ftz."
        ),
    )
    p.add_argument("model", metavar="MODEL", nargs="?", default=None,
                   help="model file written by `lookuplinear train` (with -output NAME: "
                        "NAME.bin when not given)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="OUT",
                   help="quantized model file to write, as given; or -output NAME to write "
                        "NAME.ftz as fastText does")
    p.add_argument("-output", dest="output_prefix", type=Path, default=None,
                   help=argparse.SUPPRESS)
    # fastText's quantize takes its training file, read only to retrain (not done here)
    p.add_argument("-input", dest="input_opt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="int8", choices=["int8", "int4", "float16"],
                   help="storage of each table value (default int8)")
    return p


def run(args: argparse.Namespace) -> int:
    from ..errors import InputValueError
    from ..sklearn import load_model, save_model
    from ._args import fasttext_stem, output_path
    from .train import check_output

    args.output = output_path(args.output, args.output_prefix, ".ftz")
    if args.model is None:
        if args.output_prefix is None:
            raise InputValueError(
                "give the model to quantize: quantize MODEL -o OUT, or fastText's "
                "quantize -output NAME (reads NAME.bin, writes NAME.ftz)."
            )
        stem = fasttext_stem(args.output_prefix)
        args.model = str(stem.with_name(stem.name + ".bin"))
    check_output(Path(args.output), args.model)
    model = load_model(args.model)
    if hasattr(model.estimator.model_.lookup, "packed"):
        raise InputValueError(f"{args.model} is quantized already; quantize the float model.")
    model.estimator.quantize(args.dtype)
    save_model(args.output, model.estimator, vectorizer=model.vectorizer, labels=model.labels)
    before, after = Path(args.model).stat().st_size, Path(args.output).stat().st_size
    print(f"{args.model} ({before / 1e6:.1f} MB) -> {args.output} ({after / 1e6:.1f} MB, "
          f"{args.dtype})", file=sys.stderr)
    return 0
