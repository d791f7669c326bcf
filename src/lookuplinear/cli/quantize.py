"""``lookuplinear quantize``: a model file with its table quantized, for inference, and
optionally pruned to its largest rows as fastText's ``quantize -cutoff [-retrain]`` does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._args import add_ignored_flags, check_rate, positive_int
from ._textinput import add_input_options

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "quantize",
        help="quantize a model's table (int8, int4 or float16) for inference",
        description=(
            "Read MODEL (written by `lookuplinear train`), store its table row by row as int8 "
            "(the default), int4 or float16, and write the smaller model to -o. `test` and "
            "`predict` read it as any model; it cannot be trained further. fastText's "
            "`quantize -output NAME` reads NAME.bin and writes NAME.ftz. With -cutoff N only "
            "the N table rows of largest norm are kept (words and n-grams left out are absent "
            "from every text, as in fastText), and -retrain -input TRAIN trains the kept rows "
            "and the output layer again before quantizing. A model fastText wrote is refused: "
            "quantize it with `fasttext quantize`, whose .ftz `test` and `predict` read."
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
    p.add_argument("-input", dest="input", default=None, metavar="TRAIN",
                   help="the training file, read with -retrain (fastText's -input)")
    p.add_argument("--dtype", default=None, choices=["int8", "int4", "float16"],
                   help="storage of each table value (default int8; int4 with fastText's "
                        "-cutoff, -qnorm or -dsub 2, as fastText's default -dsub 2 stores "
                        "4 bits a value)")
    ft = p.add_argument_group("fastText's quantize options")
    ft.add_argument("-cutoff", type=int, default=None, metavar="N",
                    help="keep the N table rows (words and n-gram buckets) of largest L2 norm; "
                         "the others are absent from every text (0, fastText's default: keep "
                         "every row)")
    ft.add_argument("-retrain", action="store_true",
                    help="with -cutoff: train the kept rows and the output layer again on "
                         "-input TRAIN before quantizing")
    ft.add_argument("-epoch", type=positive_int, default=None,
                    help="-retrain's passes over TRAIN (default: the model's training epochs)")
    ft.add_argument("-lr", type=float, default=None,
                    help="-retrain's learning rate (default: the model's / 20: the "
                         "optimizer's state starts anew, and at the model's rate its first "
                         "steps undo much of the training)")
    ft.add_argument("-qnorm", action="store_true",
                    help="quantize each row's norm separately: row-wise quantization always "
                         "keeps each row's scale apart, so the file is the same with or "
                         "without it")
    ft.add_argument("-qout", action="store_true",
                    help="fastText's quantization of the output layer: refused, the output "
                         "layer stays float32 (drop -qout)")
    ft.add_argument("-dsub", type=positive_int, default=None, metavar="D",
                    help="bits per value as fastText's product quantization gives them: 1 is "
                         "int8 (8 bits a value), 2 is int4 (fastText's default, one byte per "
                         "2 values, taken with -cutoff or -qnorm); others are refused")
    ft.add_argument("-thread", type=positive_int, default=None, metavar="N",
                    help="-retrain's torch threads (default: the model's)")
    ft.add_argument("-verbose", type=int, default=None, metavar="LEVEL",
                    help="0: no summary line on stderr")
    add_input_options(p, labels=True, model=True)
    add_ignored_flags(
        p.add_argument_group(
            "fastText's training options (-dim, -ws, -minCount, -minCountLabel, -neg, "
            "-wordNgrams, -loss, -bucket, -minn, -maxn, -t, -lrUpdateRate, -seed, "
            "-pretrainedVectors, -saveOutput, -autotune-*): accepted and ignored, as fastText's "
            "quantize ignores them (the model keeps those it was trained with)"),
        p, argparse.SUPPRESS)
    return p


#: -retrain's default learning rate is the model's divided by this: with fresh optimizer state
#: (row-wise Adagrad's first step moves each row by about lr), retraining at the model's own
#: rate overfits and costs P@1 on the benchmark datasets; at a twentieth of it P@1 stays within
#: the noise of their test splits (docs/performance.md, "Pruned models")
RETRAIN_LR_DIVISOR = 20

#: fastText's -dsub (values per one-byte code) -> the row-wise dtype with as many bits a value
DSUB_DTYPE = {1: "int8", 2: "int4"}


def fasttext_quantize(args: argparse.Namespace) -> bool:
    """Whether fastText's quantize options are given (-cutoff, -qnorm or -dsub): then
    -dsub defaults to fastText's 2 (int4), so that the file is as small as fastText's."""
    return args.cutoff is not None or args.qnorm or args.dsub is not None


def table_dtype(args: argparse.Namespace) -> str:
    """The table's storage from --dtype and -dsub: --dtype, else -dsub's, else int4 with
    fastText's quantize options and int8 without; raises ``InputValueError`` when they
    disagree or -dsub has no row-wise counterpart."""
    from ..errors import InputValueError

    if args.dsub is None and (args.dtype is not None or not fasttext_quantize(args)):
        return args.dtype or "int8"
    if args.dsub is None:  # fastText's own quantize: its default -dsub 2
        return DSUB_DTYPE[2]
    if args.dsub not in DSUB_DTYPE:
        raise InputValueError(
            f"-dsub {args.dsub} has no counterpart here: lookuplinear quantizes each row by "
            "itself (int8: 8 bits a value, int4: 4), not by product quantization's sub-vectors. "
            "Give -dsub 2 (int4, fastText's default size) or -dsub 1 (int8), or --dtype."
        )
    dtype = DSUB_DTYPE[args.dsub]
    if args.dtype is not None and args.dtype != dtype:
        raise InputValueError(
            f"-dsub {args.dsub} means --dtype {dtype}, but --dtype {args.dtype} was given; "
            "give one of them."
        )
    return dtype


def check_int4_width(est: Any, dtype: str, args: argparse.Namespace) -> None:
    """Raise ``InputValueError`` for int4 on a table of an odd width, before any pruning or
    retraining: int4 packs two values a byte (as PyTorch's 4-bit prepack, which refuses odd
    widths too). The message names the flag int4 came from and the flags that store the
    table otherwise."""
    from ..errors import InputValueError

    width = est.model_.lookup.out_features
    if dtype != "int4" or width % 2 == 0:
        return
    if args.dtype == "int4":
        source, fix = "--dtype int4", "Give --dtype int8 or --dtype float16 instead"
    elif args.dsub is not None:
        source, fix = f"-dsub {args.dsub} (int4)", "Give -dsub 1 (int8) instead"
    else:
        flags = [f for f, on in (("-cutoff", args.cutoff is not None), ("-qnorm", args.qnorm))
                 if on]
        source = (f"With {' and '.join(flags)} the default --dtype is int4 (fastText's "
                  "-dsub 2), which")
        fix = "Add --dtype int8 (or -dsub 1), or --dtype float16"
    what = "the model's -dim" if getattr(est, "hidden", None) is not None else "one per output"
    raise InputValueError(
        f"{source} packs two values a byte, so the table's rows must have an even number of "
        f"values ({what}), got {width}. {fix}."
    )


def run(args: argparse.Namespace) -> int:
    from ..errors import InputValueError
    from ..sklearn import load_model, save_model
    from ._args import fasttext_stem, output_path
    from ._textinput import _written_by_fasttext
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
    dtype = table_dtype(args)
    check_pruning(args)
    model = load_model(args.model)
    if _written_by_fasttext(model):
        model.check_classifier("quantize")  # fastText quantizes classifiers only too
        raise InputValueError(
            f"{args.model} is a model fastText wrote; lookuplinear quantizes the models it "
            "trains (`lookuplinear train` or `supervised`). Quantize it with fastText's own "
            "`fasttext quantize -output NAME` (its NAME.ftz is read here as any fastText "
            "model), or train the model with lookuplinear and quantize that."
        )
    if hasattr(model.estimator.model_.lookup, "packed"):
        raise InputValueError(f"{args.model} is quantized already; quantize the float model.")
    check_int4_width(model.estimator, dtype, args)
    note = ""
    if args.cutoff is not None:
        note = prune(model, args)
    model.estimator.quantize(dtype)
    save_model(args.output, model.estimator, vectorizer=model.vectorizer, labels=model.labels,
               input_format=model.input_format)
    before, after = Path(args.model).stat().st_size, Path(args.output).stat().st_size
    if args.verbose is None or args.verbose > 0:
        print(f"{args.model} ({before / 1e6:.1f} MB) -> {args.output} ({after / 1e6:.1f} MB, "
              f"{dtype}{note})", file=sys.stderr)
    return 0


def check_pruning(args: argparse.Namespace) -> None:
    """-retrain, -input, -epoch and -lr only with what they need, and no -qout;
    ``InputValueError`` else."""
    from ..errors import InputValueError

    if args.qout:
        raise InputValueError(
            "-qout (quantize the output layer too) is not built: lookuplinear quantizes the "
            "input table, and the output layer (dim x labels values) stays float32, a small "
            "part of the file. Drop -qout; the rest of the command works as given."
        )
    if args.cutoff is not None and args.cutoff < 0:
        raise InputValueError(
            f"-cutoff must be 0 (keep every row, fastText's default) or a positive number of "
            f"rows to keep, got {args.cutoff}."
        )
    if args.retrain and args.cutoff is None:
        raise InputValueError(
            "-retrain trains the rows -cutoff keeps; give -cutoff N with it (as fastText "
            "retrains only a pruned model)."
        )
    if args.retrain and args.input is None:
        raise InputValueError("-retrain needs the training file: give -input TRAIN.")
    for flag, value in (("-epoch", args.epoch), ("-lr", args.lr)):
        if value is not None and not args.retrain:
            raise InputValueError(f"{flag} sets -retrain's training; give -retrain with it.")
    if args.lr is not None:
        check_rate("-lr", args.lr)


def prune(model: Any, args: argparse.Namespace) -> str:
    """Keep ``args.cutoff`` rows of ``model`` (and retrain them), or all of them when
    ``args.cutoff`` is not below the table's rows (fastText's quantize prunes only below);
    returns a note for the summary line. Raises ``InputValueError`` when the model cannot be
    pruned."""
    import numpy as np

    from ..errors import InputValueError
    from ..sklearn._prune import keep_rows, retrain, select_rows

    est, vec = model.estimator, model.vectorizer
    if vec is None or est.hidden is None:
        raise InputValueError(
            f"-cutoff prunes the embedding table of a text model (`lookuplinear train`); "
            f"{args.model} holds " + ("no text vectorizer." if vec is None else
                                      "a linear model without an embedding table.")
        )
    n_rows = est.model_.lookup.weight.shape[0]
    if args.cutoff == 0 or args.cutoff >= n_rows:  # fastText prunes and retrains only below
        return f", -cutoff {args.cutoff} keeps all {n_rows} rows (nothing pruned or retrained)"
    rows = select_rows(est, args.cutoff)
    data = None
    if args.retrain:  # read before anything changes: a bad file leaves nothing written
        from ._textinput import check_labels, read_input

        data = read_input(args, need_labels=True, model=model)
        check_labels(model.labels, data.labels, args)
    keep_rows(est, rows)
    vec.prune(rows)
    note = f", {len(rows)} rows kept"
    if data is not None:
        known = set(model.labels)
        weight = None
        if est.multilabel_:
            from sklearn.preprocessing import MultiLabelBinarizer

            y = MultiLabelBinarizer(classes=model.labels).fit_transform(
                [[lab for lab in ls if lab in known] for ls in data.labels])
            texts = data.texts
        else:  # softmax: a line once per label of the model's it has, weighted 1/(those),
            # as train weighs it (the expectation of fastText's draw of one label a line)
            per = [[lab for lab in ls if lab in known] for ls in data.labels]
            pick = [i for i, ls in enumerate(per) for _ in ls]
            texts = [data.texts[i] for i in pick]
            y = np.asarray([lab for ls in per for lab in ls])
            counts = np.asarray([len(per[i]) for i in pick])
            weight = None if not counts.size or counts.max() <= 1 else 1.0 / counts
        epochs = args.epoch if args.epoch is not None else max(est.n_iter_, 1)
        lr = args.lr if args.lr is not None else est._learning_rate() / RETRAIN_LR_DIVISOR
        n_jobs = est.n_jobs
        if args.thread is not None:  # -thread: this retraining's threads only
            est.set_params(n_jobs=args.thread)
        try:
            retrain(est, vec.transform(texts), y, epochs=epochs, learning_rate=lr,
                    sample_weight=weight)
        finally:
            est.set_params(n_jobs=n_jobs)
        note += f", retrained {epochs} epochs on {len(texts)} examples"
    return note
