"""``lookuplinear test`` / ``test-label``: N, P@k and R@k of a model on a labelled file (and
each label's F1-score, precision and recall), as fastText prints them."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from ._args import write_stdout
from ._textinput import add_input_options, add_k, check_labels, load_text_model, read_input

__all__ = ["add_parser", "label_counts", "run"]


def add_parser(sub: Any, name: str = "test") -> argparse.ArgumentParser:
    """``test``, or ``test-label`` (each label's scores first, as fastText's test-label)."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="precision and recall at k of a model on a labelled text file"
        + (", label by label" if name == "test-label" else ""),
        description=(
            "Print the number of examples N, precision at k (correct labels among the k "
            "predicted per example, over all predictions) and recall at k (over all true "
            "labels), as `fasttext test` does; with THRESHOLD only the labels of the k whose "
            "probability reaches it count as predicted."
        ) + (" First, for each label of the model, a line of its F1-score, precision (correct "
             "among the examples it was predicted for) and recall (among the examples that "
             "have it), '--------' where undefined (never predicted, never true), as "
             "`fasttext test-label` prints them; P@k and R@k then have 3 decimals."
             if name == "test-label" else ""),
    )
    p.add_argument("model", metavar="MODEL", help="model file written by `lookuplinear train`")
    p.add_argument("input", metavar="INPUT", help="labelled test file ('-' for stdin)")
    add_k(p, "labels predicted per example",
          "predict only labels with probability >= THRESHOLD (fewer predicted per example)")
    add_input_options(p, labels=True, model=True)
    return p


def run(args: argparse.Namespace) -> int:
    model = load_text_model(args, args.command)
    data = read_input(args, need_labels=True, model=model)
    check_labels(model.labels, data.labels, args)
    # as fastText's test: only the model's labels are labels (the others are left out), and
    # an example with none of them is skipped
    known = set(model.labels)
    examples = [(text, [lab for lab in labels if lab in known])
                for text, labels in zip(data.texts, data.labels, strict=True)]
    kept = [(text, labels) for text, labels in examples if labels]
    if len(kept) < len(examples):
        print(f"lookuplinear test: {len(examples) - len(kept)} of {len(examples)} examples "
              "have no label of the model and are skipped, as fastText's test skips them",
              file=sys.stderr)
    texts, true = [text for text, _ in kept], [labels for _, labels in kept]
    # the labels `predict` prints (a fastText -loss hs model's search drops the unlikely
    # ones, as fastText's test does); fastText's Meter::log: each predicted label is correct
    # when among the example's labels, each of those (repeats included) a true label
    predicted, _ = model.top_k(texts, args.top, args.threshold) if kept else ([], [])
    hits = sum(len(set(t) & set(p)) for t, p in zip(true, predicted, strict=True))
    n_predicted = sum(map(len, predicted))
    n_true = sum(map(len, true))
    p = hits / n_predicted if n_predicted else float("nan")
    r = hits / n_true if n_true else float("nan")
    # fastText's Meter::writeGeneralMetrics: std::setprecision(3), 3 significant digits (1,
    # 0.5, 0.333), printf's %.3g; after test-label's lines, whose std::fixed stays on, 3
    # decimals (1.000, 0.500), printf's %.3f
    number = ".3g"
    if args.command == "test-label":
        write_stdout("".join(_label_lines(model.labels, true, predicted)))
        number = ".3f"
    print(f"N\t{len(kept)}\nP@{args.k}\t{p:{number}}\nR@{args.k}\t{r:{number}}")
    return 0


def label_counts(true: list[list[str]], predicted: list[list[str]]
                 ) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """fastText's ``Meter`` counts, label by label: correct predictions (a predicted label
    among the example's), predictions, and true labels (a label repeated on a line as often
    as it is there)."""
    hits, n_predicted, n_true = Counter[str](), Counter[str](), Counter[str]()
    for t, p in zip(true, predicted, strict=True):
        n_true.update(t)
        n_predicted.update(p)
        hits.update(set(p) & set(t))
    return hits, n_predicted, n_true


def _label_lines(labels: list[str], true: list[list[str]], predicted: list[list[str]]
                 ) -> list[str]:
    """fastText's test-label lines, one per label of the model in its order: F1-score
    ``2 hits / (predicted + true)``, precision ``hits / predicted`` and recall ``hits / true``
    of that label (``true`` counts a label repeated on a line as often as it is there), each
    with 6 decimals (C++'s ``std::fixed``, ``setprecision(6)``) or ``--------`` when
    undefined (0 / 0), each followed by two spaces, then a space and the label."""
    hits, n_predicted, n_true = label_counts(true, predicted)

    def metric(name: str, num: float, den: int) -> str:
        return f"{name} : {num / den:.6f}  " if den else f"{name} : --------  "

    return [metric("F1-Score", 2 * hits[lab], n_predicted[lab] + n_true[lab])
            + metric("Precision", hits[lab], n_predicted[lab])
            + metric("Recall", hits[lab], n_true[lab]) + f" {lab}\n" for lab in labels]
