"""``lookuplinear skipgram`` / ``cbow``: fastText's unsupervised word vectors, trained on
lookuplinear's tables and written as fastText writes them (``NAME.bin``, ``NAME.vec``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ._args import add_ignored_flags, check_rate, fasttext_seed, fasttext_stem

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str = "skipgram") -> argparse.ArgumentParser:
    """``skipgram`` or ``cbow``, with fastText's flags and defaults."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=f"train fastText's {name} word vectors (writes NAME.bin and NAME.vec)",
        description=(
            f"Train fastText's unsupervised `{name}` word vectors (negative sampling) on "
            "INPUT, a text file, in minibatches on lookuplinear's tables (EmbeddingBag "
            "mode='mean' input, sparse SGD), and write NAME.bin (fastText's format, read by "
            "fastText and by print-word-vectors, nn, analogies, ...) and NAME.vec (a "
            "'words dim' line, then 'word v1 ... vdim'). The dictionary, n-gram hashing and "
            "defaults are fastText's."
        ),
    )
    p.add_argument("-input", dest="input", metavar="INPUT", default=None,
                   help="training file ('-' for stdin)")
    p.add_argument("-output", dest="output", type=Path, default=None, metavar="NAME",
                   help="writes NAME.bin and NAME.vec")
    p.add_argument("-lr", type=float, default=0.05, help="learning rate (default 0.05)")
    p.add_argument("-lrUpdateRate", type=int, default=100,
                   help="kept in the model file; the rate decays every step here")
    p.add_argument("-dim", type=int, default=100, help="vector size (default 100)")
    p.add_argument("-ws", type=int, default=5, help="context window (default 5)")
    p.add_argument("-epoch", type=int, default=5, help="passes (default 5)")
    p.add_argument("-minCount", type=int, default=5, help="min word count (default 5)")
    p.add_argument("-minCountLabel", type=int, default=0, help="min label count (default 0)")
    p.add_argument("-neg", type=int, default=5, help="negatives per target (default 5)")
    p.add_argument("-wordNgrams", type=int, default=1,
                   help="kept in the model file (no effect on word vectors, as in fastText)")
    p.add_argument("-loss", default="ns", help="ns (negative sampling), the one built")
    p.add_argument("-bucket", type=int, default=2_000_000, help="n-gram rows (default 2000000)")
    p.add_argument("-minn", type=int, default=3,
                   help="min char n-gram length (default 3; 0 is 1, above -maxn: none)")
    p.add_argument("-maxn", type=int, default=6,
                   help="max char n-gram length (default 6; 0: no n-grams)")
    p.add_argument("-thread", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("-t", type=float, default=1e-4,
                   help="sampling threshold of frequent words (default 1e-4)")
    p.add_argument("-label", default="__label__", help="labels prefix (default __label__)")
    p.add_argument("-verbose", type=int, default=2, help="0: no progress line (default 2)")
    p.add_argument("-seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("-saveOutput", action="store_true",
                   help="also write the output rows to NAME.output")
    p.add_argument("-pretrainedVectors", default=None, help="refused: not built for word vectors")
    p.add_argument("-autotune-validation", dest="autotune_validation", default=None,
                   help="refused: autotune needs labels")
    p.add_argument("--batch-size", type=int, default=64, metavar="N",
                   help="word positions per SGD step (default 64); 1 is fastText's order")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    add_ignored_flags(
        p.add_argument_group("fastText's other flags: accepted and ignored, as fastText's "
                             f"{name} ignores them"), p, argparse.SUPPRESS)
    return p


def check_args(args: argparse.Namespace) -> None:
    """Every value given, before anything is read: one ``InputValueError`` naming the flag,
    what came and what to give."""
    from ..errors import InputValueError

    if args.input is None or args.output is None:
        raise InputValueError(
            f"{args.command} needs -input FILE (the text) and -output NAME (writes NAME.bin "
            f"and NAME.vec); missing {'-input' if args.input is None else '-output'}.")
    if args.loss != "ns":
        raise InputValueError(
            f"-loss {args.loss}: only negative sampling (-loss ns, fastText's default for "
            f"{args.command}) is built here. Drop -loss, or train with fastText itself for "
            f"-loss {args.loss}.")
    if args.pretrainedVectors is not None:
        raise InputValueError(
            "-pretrainedVectors is not built for word vectors: train from scratch (drop it), "
            "or use fastText itself to start from a .vec.")
    if args.autotune_validation is not None:
        raise InputValueError(
            "-autotune-validation searches arguments by their validation score of labels; "
            f"{args.command} learns word vectors without labels. Drop it.")
    for flag in ("dim", "ws", "epoch", "lrUpdateRate", "wordNgrams", "thread", "batch_size"):
        if getattr(args, flag) < 1:
            raise InputValueError(f"-{flag.replace('_', '-')} must be >= 1, got "
                                  f"{getattr(args, flag)}.")
    for flag in ("neg", "minn", "maxn", "minCount", "minCountLabel", "bucket"):
        if getattr(args, flag) < 0:
            raise InputValueError(f"-{flag} must be >= 0, got {getattr(args, flag)}.")
    # -minn 0 is 1 and -minn above -maxn gives no n-grams, as in fastText (char_ngrams)
    if args.maxn > 0 and args.bucket < 1:
        raise InputValueError(
            f"character n-grams of -minn {args.minn} to -maxn {args.maxn} characters into "
            f"-bucket {args.bucket} rows: give -bucket >= 1, or -maxn 0 for no n-grams.")
    check_rate("-lr", args.lr)
    if not args.t > 0:
        raise InputValueError(f"-t must be > 0, got {args.t}; give a positive number.")
    args.seed = fasttext_seed(args.seed)
    if args.input != "-" and not Path(args.input).is_file():
        raise InputValueError(f"-input {args.input}: no such file; give the training text.")
    stem = fasttext_stem(args.output)
    if not stem.parent.is_dir():
        raise InputValueError(f"-output {args.output}: the directory {stem.parent} does not "
                              "exist; create it first.")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..sklearn._fasttext_bin import FastTextArgs, mean_rows, save_fasttext
    from ..sklearn._minibatch import torch_threads
    from ..sklearn._wordvectors import (
        WordVectorArgs,
        build_dictionary,
        progress_printer,
        train_word_vectors,
    )
    from .vectors import write_vec

    check_args(args)
    # as fastText's Args::parseArgs: no n-gram rows without word or character n-grams, and
    # -t read as a float (std::stof)
    if args.wordNgrams <= 1 and args.maxn == 0:
        args.bucket = 0
    args.t = float(np.float32(args.t))
    quiet = args.quiet or args.verbose <= 0
    stem = fasttext_stem(args.output)
    paths = {s: stem.with_name(stem.name + s) for s in (".bin", ".vec", ".output")}
    args._interrupted_note = f"; {paths['.bin']} was not written"
    t0 = time.perf_counter()
    data = sys.stdin.buffer.read() if args.input == "-" else Path(args.input).read_bytes()
    wv = WordVectorArgs(
        model=args.command, dim=args.dim, ws=args.ws, epoch=args.epoch,
        min_count=args.minCount, min_count_label=args.minCountLabel, neg=args.neg,
        word_ngrams=args.wordNgrams, bucket=args.bucket, minn=args.minn, maxn=args.maxn,
        lr=args.lr, lr_update_rate=args.lrUpdateRate, t=args.t, label=args.label,
        seed=args.seed, batch_size=args.batch_size)
    d = build_dictionary(data, wv)
    read_s = time.perf_counter() - t0
    if not quiet:
        print(f"Read {d.ntokens / 1e6:.1f}M words\nNumber of words:  {d.n_words}\n"
              f"Number of labels: {len(d.words) - d.n_words}", file=sys.stderr)
    show, end = progress_printer(args.epoch * d.ntokens, quiet)
    t1 = time.perf_counter()
    with torch_threads(args.thread):
        inp, out, loss = train_word_vectors(d, wv, show)
    train_s = time.perf_counter() - t1
    show(args.epoch * d.ntokens, 0.0, loss, True)
    end()
    ft_args = FastTextArgs(dim=args.dim, ws=args.ws, epoch=args.epoch, min_count=args.minCount,
                           neg=args.neg, word_ngrams=args.wordNgrams, loss="ns",
                           model=args.command, bucket=args.bucket, minn=args.minn,
                           maxn=args.maxn, lr_update_rate=args.lrUpdateRate, t=args.t)
    save_fasttext(paths[".bin"], ft_args, d.words, d.counts.tolist(), d.n_words, d.ntokens,
                  inp, out)
    args._interrupted_note = f"; {paths['.bin']} was written"
    vectors = mean_rows(inp, [d.rows[d.ptr[i]:d.ptr[i + 1]].tolist()  # getWordVector
                              for i in range(d.n_words)])
    write_vec(paths[".vec"], d.words[:d.n_words], vectors)
    if args.saveOutput:
        write_vec(paths[".output"], d.words[:d.n_words], out)
    if not quiet:
        print(f"Read {d.ntokens} tokens, {d.n_words} words in {read_s:.2f} s. Trained in "
              f"{train_s:.2f} s ({args.epoch * d.ntokens / max(train_s, 1e-9):,.0f} words/s), "
              f"final loss {loss:.4f}.", file=sys.stderr)
        print(f"model written to {paths['.bin']}, word vectors to {paths['.vec']}"
              + (f", output rows to {paths['.output']}" if args.saveOutput else ""),
              file=sys.stderr)
    return 0
