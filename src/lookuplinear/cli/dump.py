"""``lookuplinear dump``: a model's arguments, dictionary or matrices, as fastText dumps them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_parser", "run"]

OPTIONS = ("args", "dict", "input", "output")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "dump",
        help="print a model's arguments, dictionary, or input or output matrix",
        description=(
            "Print what OPTION names, as `fasttext dump` does: args, one 'name value' line "
            "per training argument; dict, the number of entries then 'entry count word|label' "
            "lines; input or output, a 'rows cols' line then each row's values (6 significant "
            "digits, separated by spaces). A model fastText wrote prints fastText's output; a "
            "quantized one has no input or output matrix to print. A lookuplinear model prints "
            "its vectorizer's arguments and its table (input) and output layer weights; its "
            "file records no word counts, so dict is refused."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="model file (lookuplinear's or fastText's)")
    p.add_argument("option", metavar="OPTION", choices=OPTIONS, help="one of " + ", ".join(OPTIONS))
    return p


def _matrix(m: Any) -> list[str]:
    """fastText's ``DenseMatrix::dump``: ``rows cols``, then each row, values as C++'s
    ``ostream`` prints a float (printf's ``%g``) separated by spaces."""
    return [f"{m.shape[0]} {m.shape[1]}"] + [" ".join(f"{float(v):g}" for v in row) for row in m]


def _fasttext(model: Any, option: str) -> list[str]:
    from ..errors import InputValueError
    from ..sklearn._fasttext_bin import as_text

    if option == "args":  # Args::dump
        a = model.args
        loss = {"ova": "one-vs-all"}.get(a.loss, a.loss)
        kind = {"supervised": "sup", "skipgram": "sg"}.get(a.model, a.model)
        return [f"dim {a.dim}", f"ws {a.ws}", f"epoch {a.epoch}", f"minCount {a.min_count}",
                f"neg {a.neg}", f"wordNgrams {a.word_ngrams}", f"loss {loss}", f"model {kind}",
                f"bucket {a.bucket}", f"minn {a.minn}", f"maxn {a.maxn}",
                f"lrUpdateRate {a.lr_update_rate}", f"t {a.t:g}"]
    if option == "dict":  # Dictionary::dump
        return [str(len(model.words))] + [
            f"{as_text(w)} {c} {'word' if i < model.n_words else 'label'}"
            for i, (w, c) in enumerate(zip(model.words, model.counts, strict=True))]
    if model.quantized:
        raise InputValueError(
            f"{model.path} is a quantized fastText model (.ftz): its {option} matrix is stored "
            "as codes, which fastText's dump does not print either (\"Not supported for "
            "quantized models.\"); dump the .bin it was quantized from.")
    return _matrix(model.input_matrix if option == "input" else model.output_matrix)


def _lookuplinear(model: Any, args: argparse.Namespace) -> list[str]:
    from ..errors import InputValueError

    vec = model.vectorizer
    if args.option == "dict" or (args.option == "args" and vec is None):
        raise InputValueError(
            f"{args.model} is a lookuplinear model: its file records "
            + ("no vectorizer" if vec is None else "its vocabulary without word counts")
            + f", so there is no fastText {args.option} to dump; `dump {args.model} args` "
            "prints its arguments and `dump MODEL input|output` its matrices"
            + ("" if vec is None else
               " (the words are load_model(MODEL).vectorizer.vocabulary_)") + ".")
    net = getattr(model.estimator, "model_", None)
    if args.option == "args":
        dim = getattr(net, "hidden", None)
        return [f"dim {dim}", f"wordNgrams {vec.word_ngrams}", f"minCount {vec.min_count}",
                f"bucket {vec.bucket}", f"minn {vec.minn}", f"maxn {vec.maxn}"]
    layer = (getattr(net, "lookup", None) if args.option == "input"
             else getattr(net, "output", None))
    weight = getattr(layer, "weight", None)
    if weight is None or not hasattr(weight, "detach"):
        raise InputValueError(
            f"{args.model} has no {args.option} matrix to dump (a linear model without an "
            "output layer, or a quantized table); `dump MODEL args` prints its arguments.")
    return _matrix(weight.detach().float().cpu().numpy())


def run(args: argparse.Namespace) -> int:
    from ..sklearn import load_model
    from ..sklearn._fasttext_bin import FastTextModel
    from ._args import write_stdout

    model = load_model(args.model)
    lines = (_fasttext(model, args.option) if isinstance(model, FastTextModel)
             else _lookuplinear(model, args))
    try:
        write_stdout("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
