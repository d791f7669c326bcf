"""``lookuplinear train``: a fastText-style text classifier from a labelled file."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._args import add_ignored_flags, check_rate, fasttext_seed, output_path
from ._autotune import Given, check_autotune
from ._textinput import add_input_options, input_format, read_input

if TYPE_CHECKING:
    from ..text import LabelledTexts

__all__ = ["DEFAULT_LR", "add_parser", "run"]

#: ``--lr`` when not given, per ``--optimizer``. Row-wise Adagrad at 0.2 (the default) was more
#: accurate than Adagrad at 0.5 on the validation splits of both benchmark datasets, at dim 10
#: and at dim 100, with one state value per row instead of one per weight (docs/performance.md)
DEFAULT_LR = {"rowwise_adagrad": 0.2, "adagrad": 0.5, "sgd": 0.5, "adam": 0.05, "adamw": 0.05}
#: ``--bucket`` when not given, fastText's ``-bucket``
DEFAULT_BUCKET = 2_000_000
#: fastText's end-of-line token, a word of its dictionary
_EOS = "</s>"


def add_parser(sub: Any, name: str = "train") -> argparse.ArgumentParser:
    """``train``, or ``supervised`` (fastText's name for it, with fastText's default
    ``-loss softmax`` where ``train`` picks one-vs-all for lines with several labels)."""
    fasttext = name == "supervised"
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="train a fastText-style text classifier (safetensors model file)"
        + (" (fastText's name for train, with its default -loss softmax)" if fasttext
           else ""),
        description=(
            "Train FastTextVectorizer -> LookupClassifier(mode='mean', hidden=DIM) on INPUT "
            "(fastText lines '__label__x some text', or CSV/TSV with --text-column and "
            "--label-column) and write one model file: safetensors weights with the vectorizer, "
            "labels and input format as JSON (predict and test read their input the same way). "
            + ("The loss is softmax unless -loss one-vs-all (multilabel) is given, as in "
               "fastText. " if fasttext else
               "Lines with several different labels train one-vs-all (multilabel). ")
            + "Bytes that are not UTF-8 "
            "read as U+FFFD (their lines listed on stderr); Ctrl-C leaves MODEL as it was."
        ),
    )
    # fastText's own spellings (-input, -output, -dim, ...) work beside the double-dash ones
    p.add_argument("input", metavar="INPUT", nargs="?", default=None,
                   help="training file ('-' for stdin); or -input INPUT")
    p.add_argument("-input", dest="input_opt", metavar="INPUT", help=argparse.SUPPRESS)
    p.add_argument("-o", "--output", type=Path, default=None, metavar="MODEL",
                   help="model file to write, as given; or -output NAME to write NAME.bin "
                        "as fastText does")
    p.add_argument("-output", dest="output_prefix", type=Path, default=None,
                   help=argparse.SUPPRESS)
    p.add_argument("--dim", "-dim", type=int, action=Given, default=100,
                   help="embedding size (default 100)")
    p.add_argument("--epoch", "-epoch", type=int, action=Given, default=5,
                   help="passes over the data (default 5)")
    p.add_argument("--lr", "-lr", type=float, action=Given, default=None,
                   help="learning rate of the batch mean loss (default: 0.2 for "
                        "rowwise_adagrad, 0.5 for sgd/adagrad, 0.05 for adam/adamw)")
    p.add_argument("--optimizer", default="rowwise_adagrad",
                   choices=["rowwise_adagrad", "adagrad", "adam", "adamw", "sgd"],
                   help="default rowwise_adagrad: one state value per table row")
    p.add_argument("--lr-schedule", default="linear", choices=["linear", "constant"],
                   help="linear decay to zero, as fastText (default), or constant")
    p.add_argument("--wordNgrams", "-wordNgrams", type=int, action=Given, default=1,
                   help="max word n-gram length")
    p.add_argument("--minn", "-minn", type=int, action=Given, default=0,
                   help="min char n-gram length (0: none)")
    p.add_argument("--maxn", "-maxn", type=int, action=Given, default=0,
                   help="max char n-gram length (0: none)")
    p.add_argument("--bucket", "-bucket", type=int, action=Given, default=DEFAULT_BUCKET,
                   help="n-gram hash buckets (0 only without n-grams, as in fastText)")
    p.add_argument("--minCount", "-minCount", type=int, default=1,
                   help="min word count (0 keeps every word, as 1)")
    p.add_argument("--batch-size", type=int, default=256, help="examples per step")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--loss", "-loss", action=Given, default="softmax" if fasttext else "auto",
                   choices=["auto", "softmax", "ova", "one-vs-all", "hs", "ns"],
                   help="softmax (a line with several labels counts once per label, weighted "
                        "1/labels), ova or one-vs-all (multilabel); auto "
                        "picks ova when some line has several different labels (default: "
                        + ("softmax, as fastText's supervised" if fasttext else "auto")
                        + "); fastText's hs and ns are refused (softmax is computed exactly)")
    p.add_argument("--seed", "-seed", type=int, default=0,
                   help="random seed (same seed, same model)")
    p.add_argument("--thread", "-thread", type=int, default=1,
                   help="torch threads (default 1)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verbose", "-verbose", type=int, default=None, metavar="LEVEL",
                   help="fastText's verbosity: 0 is --quiet")
    p.add_argument("--pretrained-vectors", "-pretrainedVectors", default=None, metavar="VEC",
                   help="start the rows of these words from a .vec file (fastText's text "
                        "format: a 'count dim' line, then 'word v1 ... vdim'); its words join "
                        "the vocabulary, as in fastText; dim must equal --dim")
    p.add_argument("--min-count-label", "-minCountLabel", type=int, default=0, metavar="N",
                   help="drop labels seen fewer than N times, and the lines left without a "
                        "label (default 0: keep all)")
    ft = p.add_argument_group(
        "fastText's options without an effect on a supervised model (accepted, as fastText "
        "accepts them)")
    ft.add_argument("-ws", type=int, default=None, help="context window of skipgram/cbow")
    ft.add_argument("-neg", type=int, default=None, help="negatives sampled by -loss ns")
    ft.add_argument("-t", type=float, default=None, help="skipgram/cbow's sampling threshold")
    ft.add_argument("-lrUpdateRate", type=int, default=None,
                    help="fastText updates its linear decay every N tokens; here the learning "
                         "rate decays every batch (--batch-size), so N changes nothing")
    at = p.add_argument_group(
        "fastText's -saveOutput and hyperparameter search (-autotune-*)")
    at.add_argument("-saveOutput", action="store_true",
                    help="with -output NAME: also write the output layer's weights to "
                         "NAME.output, one line per label (fastText's .vec text format)")
    at.add_argument("-autotune-validation", dest="autotune_validation", default=None,
                    metavar="FILE",
                    help="search the arguments not given (-lr, -dim, -epoch, -wordNgrams, "
                         "-minn/-maxn, -bucket) that score best on FILE, as fastText's "
                         "autotune, then train the model with them")
    at.add_argument("-autotune-metric", dest="autotune_metric", default="f1",
                    metavar="METRIC", help="f1 (default) or f1:LABEL (that label's F1)")
    at.add_argument("-autotune-predictions", dest="autotune_predictions", type=int, default=1,
                    metavar="K", help="labels predicted per example to score (default 1)")
    at.add_argument("-autotune-duration", dest="autotune_duration", type=int, default=300,
                    metavar="SECONDS", help="seconds of search (default 300)")
    at.add_argument("-autotune-modelsize", dest="autotune_modelsize", default=None,
                    metavar="SIZE", help="refused: quantize the model found with "
                                         "`lookuplinear quantize -cutoff N`")
    p.set_defaults(given=frozenset())
    add_input_options(p, labels=True)
    add_ignored_flags(
        p.add_argument_group(
            "fastText's quantize options (-qnorm, -qout, -retrain, -cutoff N, -dsub N): "
            "accepted and ignored, as fastText's supervised ignores them"),
        p, argparse.SUPPRESS)
    return p


def refuse_fasttext_options(args: argparse.Namespace) -> None:
    """fastText's options that have no counterpart: one ``InputValueError`` naming what to use
    instead."""
    from ..errors import InputValueError

    if args.loss in ("hs", "ns"):
        name = "hierarchical softmax" if args.loss == "hs" else "negative sampling"
        raise InputValueError(
            f"-loss {args.loss} ({name}) approximates the softmax to train faster on many "
            "labels; lookuplinear computes the softmax exactly over all labels. Use -loss "
            "softmax (one label per line) or -loss one-vs-all (several)."
        )
    check_autotune(args)
    if args.saveOutput and args.output_prefix is None:
        raise InputValueError(
            "-saveOutput writes NAME.output beside the model of -output NAME, as fastText "
            "does; with -o there is no NAME: give -output NAME instead of -o."
        )


def check_args(args: argparse.Namespace) -> None:
    """Every value the user typed, before anything is read or trained: one error naming the
    option (``InputValueError``)."""
    from ..errors import InputValueError

    if (args.input is None) == (args.input_opt is None):
        raise InputValueError(
            "give the training file once: INPUT or -input INPUT, got "
            f"{'neither' if args.input is None else 'both'}."
        )
    args.input = args.input if args.input is not None else args.input_opt
    args.output = output_path(args.output, args.output_prefix, ".bin")
    if args.verbose is not None:
        args.quiet = args.quiet or args.verbose <= 0
    refuse_fasttext_options(args)
    if args.loss == "one-vs-all":
        args.loss = "ova"
    if args.lrUpdateRate is not None and not args.quiet:
        print("lookuplinear train: note: -lrUpdateRate has no counterpart: the learning rate "
              "decays every batch (--batch-size).", file=sys.stderr)
    for name in ("dim", "epoch", "wordNgrams", "batch_size", "thread"):
        if getattr(args, name) < 1:
            raise InputValueError(f"--{name.replace('_', '-')} must be >= 1, got "
                                  f"{getattr(args, name)}.")
    for name in ("minn", "maxn", "min_count_label", "minCount", "bucket"):
        if getattr(args, name) < 0:
            raise InputValueError(f"--{name.replace('_', '-')} must be >= 0, got "
                                  f"{getattr(args, name)}.")
    args.minCount = max(args.minCount, 1)  # fastText's -minCount 0 keeps every word, as 1
    check_bucket(args)
    if args.lr is not None:
        check_rate("--lr", args.lr)
    check_rate("--weight-decay", args.weight_decay, zero=True)
    args.seed = fasttext_seed(args.seed, "--seed")
    from .._device import check_device

    check_device(args.device, flag="--device")
    check_output(Path(args.output), args.input)


def check_bucket(args: argparse.Namespace) -> None:
    """``--bucket 0``: taken without n-grams, where it changes nothing (fastText's
    ``Args::parseArgs`` sets 0 itself then), as the default (which ``-autotune-validation``
    searches); refused with word or character n-grams, which hash into the buckets
    (``InputValueError``)."""
    from ..errors import InputValueError

    if args.bucket != 0:
        return
    if args.wordNgrams > 1 or args.maxn > 0:
        raise InputValueError(
            f"--bucket 0 leaves no rows for the n-grams of --wordNgrams {args.wordNgrams} "
            f"--maxn {args.maxn}, which hash into --bucket rows: give --bucket >= 1 (default "
            f"{DEFAULT_BUCKET}), or --wordNgrams 1 --maxn 0 for words alone."
        )
    args.bucket = DEFAULT_BUCKET
    args.given = getattr(args, "given", frozenset()) - {"bucket"}


def check_output(output: Path, input_path: str) -> None:
    """Refuse an output that would destroy the input, is a directory, or cannot be created."""
    from ..errors import InputValueError

    if output.is_dir():
        raise InputValueError(f"-o {output} is a directory; give a file name for the model.")
    if not output.parent.is_dir():
        raise InputValueError(
            f"-o {output}: the directory {output.parent} does not exist; create it first."
        )
    if input_path != "-" and output.exists() and Path(input_path).exists() and (
        output.samefile(input_path)
    ):
        raise InputValueError(
            f"-o {output} is the training file itself; writing the model there would destroy "
            "the data. Choose another name."
        )


def run(args: argparse.Namespace) -> int:
    from ..sklearn import save_model

    check_args(args)
    # the model file is replaced in one step (save_model) after training: until then, Ctrl-C
    # leaves the one there as it was
    args._interrupted_note = f"; {args.output} was not written (a model there is unchanged)"
    t0 = time.perf_counter()
    data = read_input(args, need_labels=True)
    pretrained = None
    if args.pretrained_vectors is not None:  # read before training: a bad file costs nothing
        pretrained = read_pretrained(args.pretrained_vectors, args.dim)
    texts, label_lists = drop_rare_labels(*skip_unlabelled(data, args), args)
    pick_loss(label_lists, args)
    search_s = 0.0
    if args.autotune_validation is not None:  # fastText's search, then the best arguments
        from ._autotune import search

        valid = read_input(argparse.Namespace(**{**vars(args),
                                                 "input": args.autotune_validation}),
                           need_labels=True)
        vars(args).update(search(args, texts, label_lists, pretrained=pretrained,
                                 vocabulary_texts=data.texts,
                                 validation=(valid.texts, valid.labels),
                                 labels={lab for ls in label_lists for lab in ls}))
        search_s = time.perf_counter() - t0
    # fastText's dictionary counts the words of every line, -minCountLabel's dropped ones too
    vec, clf, labels, X, _y, train_s = fit_text_classifier(texts, label_lists, args,
                                                           pretrained=pretrained,
                                                           vocabulary_texts=data.texts)
    setup_s = time.perf_counter() - t0 - train_s - search_s
    save_model(args.output, clf, vectorizer=vec, labels=labels,
               input_format=input_format(args))
    args._interrupted_note = f"; {args.output} was written"
    vectors = None
    if args.output_prefix is not None:  # fastText's -output NAME: NAME.bin, then NAME.vec
        from ._args import fasttext_stem

        stem = fasttext_stem(args.output_prefix)
        vectors = stem.with_name(stem.name + ".vec")
        write_word_vectors(vectors, clf, vec, labels, data)
        if args.saveOutput:
            write_output_matrix(stem.with_name(stem.name + ".output"), clf, labels,
                                quiet=args.quiet)
    if not args.quiet:
        print(f"Read {len(texts)} examples, {len(vec.vocabulary_)} words, {len(labels)} labels; "
              f"{X.shape[1]} features in {setup_s:.2f} s. Trained in {train_s:.2f} s "
              f"({len(texts) * args.epoch / max(train_s, 1e-9):,.0f} examples/s), final loss "
              f"{clf.loss_curve_[-1]:.4f}.", file=sys.stderr)
        print(f"model written to {args.output}"
              + (f", word vectors to {vectors}" if vectors is not None else ""), file=sys.stderr)
    return 0


def write_word_vectors(path: Path, clf: Any, vec: Any, labels: list[str],
                       data: LabelledTexts) -> None:
    """Write the vocabulary's word vectors to ``path`` as fastText's ``saveVectors`` writes
    ``NAME.vec``: a line ``n_words dim``, then one line per word, the word and its vector as
    ``print-word-vectors`` prints it (the mean of the rows of the word and its character
    n-grams, 5 significant digits, each value followed by a space). The file is replaced in
    one step.

    The words are in fastText's dictionary order: by descending count in ``data`` (the
    training file's ``LabelledTexts``), ties in the order they first appear, with fastText's
    end-of-line token ``</s>`` among them (this model has no row of its own for it: its vector
    is what ``print-word-vectors`` prints for ``</s>``), then the words only
    ``-pretrainedVectors`` gave. ``</s>`` counts once per ``\\n`` of the file, blank lines'
    included, as ``Dictionary::readWord`` reads them (a table's: once per row)."""
    from collections import Counter

    from .._atomic import replacing
    from ..sklearn import TextModel
    from ..text._files import _fasttext_split
    from .vectors import format_vector

    # in order of first appearance: "</s>" after line 1's words, first when line 1 is blank
    counts: Counter[str] = Counter()
    table = data.newlines is None  # its rows read as lines
    before = 1 if table or data.lines[:1] == [1] else 0  # texts before the first "\n"
    for text in data.texts[:before]:
        counts.update(_fasttext_split(text))
    newlines = len(data.texts) if table else data.newlines
    if newlines:
        counts[_EOS] = newlines
    for text in data.texts[before:]:
        counts.update(_fasttext_split(text))
    kept = [w for w in sorted(counts, key=lambda w: -counts[w])  # stable: ties as they came
            if w in vec.vocabulary_ or (w == _EOS and counts[w] >= vec.min_count)]
    words = kept + [w for w in sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
                    if w not in counts]
    values = TextModel(clf, vec, labels).word_vectors(words)
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"{len(words)} {values.shape[1]}\n")
        f.writelines(f"{w} {format_vector(v)}\n" for w, v in zip(words, values, strict=True))


def write_output_matrix(path: Path, clf: Any, labels: list[str], *, quiet: bool) -> None:
    """Write the output layer's weights to ``path`` as fastText's ``saveOutput`` writes
    ``NAME.output``: a line ``n_labels dim``, then one line per label in the model's order,
    the label and its row as ``format_vector`` writes it. A two-label softmax model has one
    output row (the second label's logit minus the first's): the file gives the first label a
    row of zeros and the second that row, the same softmax. The output layer's bias, which
    fastText's has not, is left out (stderr says so unless ``quiet``). The file is replaced in
    one step."""
    import numpy as np

    from .vectors import write_vec

    weight = clf.model_.output.weight.detach().cpu().double().numpy()  # (n_outputs, dim)
    if len(weight) == 1 and len(labels) == 2:
        weight = np.vstack([np.zeros_like(weight), weight])
    write_vec(path, [lab.encode("utf-8") for lab in labels], weight)
    if not quiet:
        print(f"lookuplinear train: note: {path} holds the output layer's weights; its bias "
              "(one value per label, which fastText's output layer has not) is in the model "
              "file only: load_model(MODEL).estimator.model_.output.bias.", file=sys.stderr)


def read_pretrained(path: str, dim: int) -> tuple[list[str], Any]:
    """``-pretrainedVectors``: the words and vectors of a .vec file whose dimension is
    ``--dim``; raises ``InputValueError`` otherwise (fastText's check)."""
    from ..errors import InputValueError
    from ..text import read_word_vectors

    words, vectors = read_word_vectors(path)
    if vectors.shape[1] != dim:
        raise InputValueError(
            f"-pretrainedVectors {path} holds vectors of dimension {vectors.shape[1]}, the "
            f"model's is {dim}: pass -dim {vectors.shape[1]}."
        )
    return words, vectors


def skip_unlabelled(data: Any, args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """The texts and label lists of ``data`` (``LabelledTexts``) that have a label, as
    fastText's supervised training skips a line without one; stderr says how many were
    skipped and the first one's line, unless quiet."""
    pick = [i for i, ls in enumerate(data.labels) if ls]
    if len(pick) < len(data.labels) and not args.quiet:
        first = next(n for n, ls in zip(data.lines, data.labels, strict=True) if not ls)
        print(f"lookuplinear {getattr(args, 'command', 'train')}: "
              f"{len(data.labels) - len(pick)} of {len(data.labels)} examples have no label "
              f"(first: line {first}) and are skipped, as fastText's supervised skips them; "
              "their words still count in the vocabulary.", file=sys.stderr)
    return [data.texts[i] for i in pick], [data.labels[i] for i in pick]


def drop_rare_labels(
    texts: list[str], label_lists: list[list[str]], args: argparse.Namespace
) -> tuple[list[str], list[list[str]]]:
    """``-minCountLabel N``: the labels seen fewer than N times dropped, and the lines left
    without one (fastText trains on none of them); raises ``InputValueError`` when no line
    is left."""
    from collections import Counter

    from ..errors import InputValueError

    if args.min_count_label <= 1:
        return texts, label_lists
    counts = Counter(lab for ls in label_lists for lab in ls)
    kept = [[lab for lab in ls if counts[lab] >= args.min_count_label] for ls in label_lists]
    pick = [i for i, ls in enumerate(kept) if ls]
    if not pick:
        raise InputValueError(
            f"-minCountLabel {args.min_count_label} drops every label (the most frequent is "
            f"seen {max(counts.values())} times); lower it."
        )
    if not args.quiet and len(pick) < len(texts):
        print(f"lookuplinear train: -minCountLabel {args.min_count_label}: "
              f"{len(texts) - len(pick)} lines left without a label are skipped.",
              file=sys.stderr)
    return [texts[i] for i in pick], [kept[i] for i in pick]


def pick_loss(label_lists: list[list[str]], args: argparse.Namespace) -> None:
    """``--loss auto`` made ``ova`` when some line has two different labels (stderr says so
    and names them, unless quiet), ``softmax`` otherwise; a label repeated on a line is one
    label (in fastText's softmax a line's target is drawn among its label tokens, so
    ``__label__a __label__a`` trains ``a`` alone)."""
    if args.loss != "auto":
        return
    several = next((ls for ls in label_lists if len(set(ls)) > 1), None)
    args.loss = "softmax" if several is None else "ova"
    if several is not None and not args.quiet:
        print(f"lookuplinear train: note: --loss auto trains one-vs-all (multilabel: each "
              f"label's probability apart), as a line has several labels "
              f"({' '.join(dict.fromkeys(several))}); give --loss softmax for probabilities "
              "that sum to 1.", file=sys.stderr)


def start_from_pretrained(clf: Any, vec: Any, pretrained: tuple[list[str], Any]) -> Any:
    """Make ``clf.fit`` start the table rows of the pretrained words from their vectors, as
    fastText's ``-pretrainedVectors`` does (the other rows are drawn as usual); returns a
    function to call after ``fit``, which puts back the rows of the words no training line
    has (``fit`` leaves untouched rows at zero; in fastText they keep their vectors)."""
    import numpy as np
    import torch

    words, vectors = pretrained
    where = dict(zip(words, range(len(words)), strict=True))  # a repeated word: its last row
    rows = np.fromiter((vec.vocabulary_[w] for w in where), np.int64, len(where))
    values = torch.from_numpy(vectors[list(where.values())])
    build = clf._init_model

    def init_model(n_outputs: int, seed: int, X: Any) -> None:
        build(n_outputs, seed, X)
        with torch.no_grad():
            weight = clf.model_.lookup.weight
            weight[torch.from_numpy(rows).to(weight.device)] = values.to(weight)

    clf._init_model = init_model

    def after_fit() -> None:
        del clf._init_model  # the class's method again
        untouched = ~clf._touched[rows]
        with torch.no_grad():
            weight = clf.model_.lookup.weight
            idx = torch.from_numpy(rows[untouched]).to(weight.device)
            weight[idx] = values[torch.from_numpy(untouched)].to(weight)
        clf._touched[rows] = True

    return after_fit


def fit_text_classifier(
    texts: list[str], label_lists: list[list[str]], args: argparse.Namespace,
    *, pretrained: tuple[list[str], Any] | None = None,
    vocabulary_texts: list[str] | None = None,
) -> tuple[Any, Any, list[str], Any, Any, float]:
    """(vectorizer, classifier, label names, X, y, seconds of ``fit``) trained as the options
    say; ``pretrained`` (words, vectors): their words join the vocabulary and their rows start
    from the vectors (``-pretrainedVectors``); ``vocabulary_texts``: the texts whose words
    are counted for the vocabulary and ``-minCount`` (default ``texts``), every line of the
    file as fastText's dictionary counts them, those whose labels ``-minCountLabel`` dropped
    included."""
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.preprocessing import MultiLabelBinarizer

    from ..sklearn import LookupClassifier
    from ..text import FastTextVectorizer

    pick_loss(label_lists, args)
    ova = args.loss == "ova"
    weight = None
    if ova:
        mlb = MultiLabelBinarizer()
        y = mlb.fit_transform(label_lists)
        labels = [str(x) for x in mlb.classes_]
    else:
        # softmax on lines with several labels: fastText trains on one of a line's labels drawn
        # at random each epoch; here a line is repeated once per label, each copy weighted
        # 1 / (its labels), the expectation of that draw (every label is in the model)
        counts = np.fromiter(map(len, label_lists), np.int64, len(label_lists))
        rows = np.repeat(np.arange(len(label_lists)), counts)
        weight = None if counts.max() <= 1 else np.repeat(1.0 / counts, counts)
        y = np.asarray([lab for ls in label_lists for lab in ls])
        labels = sorted(set(y.tolist()))
    # fastText's tokens: the words read_fasttext split, whole (a no-break space inside one)
    vec = FastTextVectorizer(word_ngrams=args.wordNgrams, minn=args.minn, maxn=args.maxn,
                             bucket=args.bucket, min_count=args.minCount, whitespace="fasttext")
    if vocabulary_texts is None or vocabulary_texts is texts:
        X = vec.fit_transform(texts)
    else:
        X = vec.fit(vocabulary_texts).transform(texts)
    if pretrained is not None:  # fastText adds the .vec's words to its dictionary
        config = vec.get_config()
        config["vocabulary"] = sorted(set(config["vocabulary"]).union(pretrained[0]))
        vec = FastTextVectorizer.from_config(config)
        X = vec.transform(texts)
    if not ova and weight is not None:
        X = X[rows]
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    clf = LookupClassifier(
        loss="log_loss", hidden=args.dim, mode="mean", solver=args.optimizer, learning_rate_init=lr,
        learning_rate=args.lr_schedule, max_iter=args.epoch, batch_size=args.batch_size,
        alpha=args.weight_decay, random_state=args.seed, verbose=0 if args.quiet else 1,
        device=args.device, n_jobs=args.thread,
    )
    if not ova and len(labels) < 2:
        from ..errors import InputValueError

        raise InputValueError(
            f"INPUT has a single label ({labels[0]!r}); a classifier needs at least 2."
        )
    after_fit = None if pretrained is None else start_from_pretrained(clf, vec, pretrained)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(X, y, sample_weight=None if ova else weight)
    if after_fit is not None:
        after_fit()
    for w in caught:  # one line each, in the options' names
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        text = str(w.message)
        if args.optimizer == "rowwise_adagrad":  # the solver it would suggest is this one
            text = text.replace(", or use solver='auto'.", ".")
        for name, option in (("learning_rate_init", "--lr"), ("max_iter", "--epoch"),
                             ("solver='auto'", "--optimizer rowwise_adagrad")):
            text = text.replace(name, option)
        print(f"lookuplinear train: warning: {text}", file=sys.stderr)
    return vec, clf, labels, X, y, time.perf_counter() - t0
