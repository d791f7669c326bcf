"""fastText's ``-autotune-*``: the training arguments that score best on a validation file,
found by fastText's random search (``AutotuneStrategy``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["SEARCHED", "Given", "check_autotune", "search"]

#: the arguments the search draws, each left as it is when given on the command line
SEARCHED = ("epoch", "lr", "dim", "wordNgrams", "minn", "maxn", "bucket")
#: fastText's choices of ``-minn`` (``-maxn`` is ``minn + 3``, or 0 with ``minn`` 0)
_MINN_CHOICES = (0, 2, 3)
#: fastText's first ``bucket`` to perturb while the arguments use none
_BUCKET = 2_000_000


class Given(argparse._StoreAction):
    """Store the value and record its option as given (``namespace.given``): the search leaves
    an argument given on the command line as it is, as fastText's ``isManual``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def check_autotune(args: argparse.Namespace) -> None:
    """The ``-autotune-*`` values, before anything is read: one ``InputValueError`` naming the
    option. Without ``-autotune-validation`` the others change nothing, as in fastText."""
    from ..errors import InputValueError

    if args.autotune_modelsize is not None:
        raise InputValueError(
            f"-autotune-modelsize {args.autotune_modelsize} is not built: fastText picks its "
            "quantization (-cutoff, -dsub, -qout) from the byte layout of its own .ftz file, "
            "which a lookuplinear model file does not have. Search without it, then "
            "`lookuplinear quantize -cutoff N -retrain -input TRAIN -output NAME` (NAME.ftz) "
            "with the N rows that fit your size."
        )
    metric = args.autotune_metric
    if metric != "f1" and not (metric.startswith("f1:") and len(metric) > 3):
        raise InputValueError(
            f"-autotune-metric {metric!r}: expected f1 (over all labels) or f1:LABEL (the F1 "
            "of one label, e.g. f1:__label__pos)."
        )
    if args.autotune_predictions < 1:
        raise InputValueError(
            f"-autotune-predictions must be >= 1 (labels predicted per example), got "
            f"{args.autotune_predictions}."
        )
    if args.autotune_duration < 1:
        raise InputValueError(
            f"-autotune-duration must be >= 1 (seconds of search), got "
            f"{args.autotune_duration}."
        )


def _perturbed(rng: Any, value: float, low: float, high: float, start: float, end: float,
               t: float, linear: bool, whole: bool) -> Any:
    """fastText's ``updateArgGauss``: ``value`` plus (``linear``) or times 2 to the power of
    (otherwise) a normal draw whose deviation goes from ``start`` to ``end`` over the middle
    half of the search (``t`` from 0.25 to 0.75), truncated to an integer when ``whole``, then
    clipped to ``[low, high]``."""
    sigma = start - (start - end) / 0.5 * min(0.5, max(t - 0.25, 0.0))
    c = float(rng.normal(0.0, sigma))
    out = value + c if linear else value * 2.0 ** c
    if whole:
        out = int(out) if math.isfinite(out) else high
    return min(max(out, low), high)


class _Strategy:
    """fastText's ``AutotuneStrategy``: the first trial is the arguments as given, each later
    one the best so far with each argument not given perturbed (``dsub`` aside: it only
    matters to ``-autotune-modelsize``)."""

    def __init__(self, start: dict[str, Any], given: frozenset[str], seed: int) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)
        self.given = given
        self.bucket = start["bucket"]  # the one given, kept when -bucket was given
        self.trials = 0
        self.best_bucket = _BUCKET
        self.update(start)

    def update(self, best: dict[str, Any]) -> None:
        self.best = dict(best)
        self.best_minn = _MINN_CHOICES.index(best["minn"]) if best["minn"] in _MINN_CHOICES \
            else 0
        if best["wordNgrams"] > 1 or best["maxn"] > 0:  # fastText's bucket is 0 otherwise
            self.best_bucket = best["bucket"]

    def ask(self, t: float) -> dict[str, Any]:
        self.trials += 1
        args = dict(self.best)
        if self.trials == 1:
            return args
        rng, free = self.rng, (lambda name: name not in self.given)
        if free("epoch"):
            args["epoch"] = _perturbed(rng, args["epoch"], 1, 100, 2.8, 2.5, t, False, True)
        if free("lr"):
            args["lr"] = _perturbed(rng, args["lr"], 0.01, 5.0, 1.9, 1.0, t, False, False)
        if free("dim"):
            args["dim"] = _perturbed(rng, args["dim"], 1, 1000, 1.4, 0.3, t, False, True)
        if free("wordNgrams"):
            args["wordNgrams"] = _perturbed(rng, args["wordNgrams"], 1, 5, 4.3, 2.4, t, True,
                                            True)
        if free("minn"):
            index = _perturbed(rng, self.best_minn, 0, len(_MINN_CHOICES) - 1, 4.0, 1.4, t,
                               True, True)
            args["minn"] = _MINN_CHOICES[index]
        if free("maxn"):
            args["maxn"] = 0 if args["minn"] == 0 else args["minn"] + 3
        args["bucket"] = (_perturbed(rng, self.best_bucket, 10_000, 10_000_000, 2.0, 1.5, t,
                                     False, True) if free("bucket") else self.bucket)
        return args


def _table_fits(args: dict[str, Any]) -> bool:
    """Whether the table of these arguments (``bucket`` rows of ``dim`` float32 values, and
    as many for the optimizer) takes at most a quarter of the machine's memory: a trial that
    asks more is skipped, as fastText skips one whose memory cannot be allocated."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return True
    return 8 * args["bucket"] * args["dim"] <= memory // 4


def _f1(model: Any, texts: list[str], true: list[list[str]], k: int,
        label: str | None) -> float:
    """fastText's ``Meter::f1Score`` of ``model``'s top ``k`` labels on ``texts``: over all
    labels, or of ``label``; 0 where undefined (no correct prediction)."""
    from .test import label_counts

    predicted, _ = model.top_k(texts, k, 0.0)
    hits, n_predicted, n_true = label_counts(true, predicted)
    if label is not None:
        h, total = hits[label], n_predicted[label] + n_true[label]
    else:
        h, total = sum(hits.values()), sum(n_predicted.values()) + sum(n_true.values())
    return 2 * h / total if h else 0.0


def _clock(seconds: float) -> str:
    """fastText's ``ClockPrint``: ``  0h 4m 5s``."""
    s = max(int(seconds), 0)
    return f"{s // 3600:3d}h{s % 3600 // 60:2d}m{s % 60:2d}s"


def _arg_lines(args: dict[str, Any], min_count: int, loss: str) -> str:
    """The arguments as fastText's ``Autotune::printArgs`` prints them, one ``name = value``
    a line."""
    values = {"epoch": args["epoch"], "lr": f"{args['lr']:g}", "dim": args["dim"],
              "minCount": min_count, "wordNgrams": args["wordNgrams"], "minn": args["minn"],
              "maxn": args["maxn"], "bucket": args["bucket"], "loss": loss}
    return "".join(f"{name} = {value}\n" for name, value in values.items())


def search(args: argparse.Namespace, texts: list[str], label_lists: list[list[str]], *,
           pretrained: tuple[list[str], Any] | None, vocabulary_texts: list[str],
           validation: tuple[Sequence[str], Sequence[Sequence[str]]],
           labels: set[str]) -> dict[str, Any]:
    """fastText's ``Autotune::train``: train with the arguments the search draws until
    ``args.autotune_duration`` seconds are spent (a trial started before then runs to its end;
    Ctrl-C ends the search), score each on ``validation`` (texts, label lists) and return the
    best trial's arguments (:data:`SEARCHED`). Progress goes to stderr as fastText prints it,
    each trial's arguments too with ``-verbose`` above 2. Raises ``InputValueError`` when no
    trial trained (each diverged or asked too much memory)."""
    from ..errors import InputValueError, TrainingDivergedError
    from ..sklearn import TextModel
    from .train import DEFAULT_LR, fit_text_classifier

    metric_label = args.autotune_metric[3:] or None
    if metric_label is not None and metric_label not in labels:
        raise InputValueError(
            f"-autotune-metric {args.autotune_metric}: {metric_label!r} is not a label of the "
            f"training file; its labels are {', '.join(sorted(labels)[:10])}"
            + (", ..." if len(labels) > 10 else "") + "."
        )
    # as fastText's test: the labels the model has not are left out, and a text with none
    # of them is skipped
    valid = [(t, [lab for lab in ls if lab in labels])
             for t, ls in zip(*validation, strict=True)]
    valid_texts = [t for t, ls in valid if ls]
    valid_true = [ls for _, ls in valid if ls]
    if not valid_texts:
        raise InputValueError(
            f"-autotune-validation {args.autotune_validation} has no example with a label of "
            "the training file; give a validation file labelled as the training file is."
        )
    given: frozenset[str] = getattr(args, "given", frozenset())
    if pretrained is not None:  # -pretrainedVectors fixes the dimension
        given |= {"dim"}
    verbose = 0 if args.quiet else (2 if args.verbose is None else args.verbose)
    if verbose > 0:
        for name in ("epoch", "lr", "dim", "wordNgrams", "loss", "bucket", "minn", "maxn"):
            if name in given:
                print(f"Warning : {name} is manually set to a specific value. It will not be "
                      "automatically optimized.", file=sys.stderr)
    start = {name: getattr(args, name) for name in SEARCHED}
    if start["lr"] is None:
        start["lr"] = DEFAULT_LR[args.optimizer]
    strategy = _Strategy(start, given, args.seed)
    duration = args.autotune_duration
    best: dict[str, Any] | None = None
    best_score = -1.0
    t0 = time.perf_counter()
    elapsed = 0.0
    try:
        while elapsed < duration:
            trial = strategy.ask(min(1.0, elapsed / duration))
            if verbose > 2:
                print(f"Trial = {strategy.trials}\n" + _arg_lines(trial, args.minCount,
                                                                 args.loss),
                      end="", file=sys.stderr)
            score = math.nan
            if _table_fits(trial):
                trial_args = argparse.Namespace(**{**vars(args), **trial, "quiet": True})
                try:
                    with contextlib.redirect_stderr(io.StringIO()):  # fastText's verbose 0
                        vec, clf, names, *_ = fit_text_classifier(
                            texts, label_lists, trial_args, pretrained=pretrained,
                            vocabulary_texts=vocabulary_texts)
                except (TrainingDivergedError, MemoryError):
                    pass  # as fastText's search goes on past a diverged or too large trial
                else:
                    score = _f1(TextModel(clf, vec, names), valid_texts, valid_true,
                                args.autotune_predictions, metric_label)
            if not math.isnan(score) and (best is None or score > best_score):
                best, best_score = trial, score
                strategy.update(trial)
            elapsed = time.perf_counter() - t0
            if verbose > 2:
                print(f"currentScore = {'NaN' if math.isnan(score) else score}",
                      file=sys.stderr)
            if verbose > 0:
                shown = "  unknown" if best is None else f"{best_score:9.6f}"
                print(f"\rProgress: {min(100.0, elapsed * 100 / duration):5.1f}% Trials: "
                      f"{strategy.trials:4d} Best score: {shown} ETA: "
                      f"{_clock(duration - elapsed)}", end="", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # as fastText's first Ctrl-C: the best so far is trained again
        print("\nAborting autotune...", file=sys.stderr)
    if best is None:
        raise InputValueError(
            f"no trial of the search trained a model in -autotune-duration {duration} s (each "
            "diverged, asked too much memory or was interrupted); increase -autotune-duration "
            "or give -lr lower."
        )
    if verbose > 0:
        print("\nTraining again with best arguments\nBest selected args = 0\n"
              + _arg_lines(best, args.minCount, args.loss), end="", file=sys.stderr)
    return best
