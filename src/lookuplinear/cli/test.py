"""``lookuplinear test``: N, P@k and R@k of a model on a labelled file, as fastText prints."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._textinput import add_input_options, add_k, check_labels, load_text_model, read_input

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "test",
        help="precision and recall at k of a model on a labelled text file",
        description=(
            "Print the number of examples N, precision at k (correct labels among the k "
            "predicted per example, over all predictions) and recall at k (over all true "
            "labels), as `fasttext test` does; with THRESHOLD only the labels of the k whose "
            "probability reaches it count as predicted."
        ),
    )
    p.add_argument("model", metavar="MODEL", help="model file written by `lookuplinear train`")
    p.add_argument("input", metavar="INPUT", help="labelled test file ('-' for stdin)")
    add_k(p, "labels predicted per example",
          "predict only labels with probability >= THRESHOLD (fewer predicted per example)")
    add_input_options(p, labels=True, model=True)
    return p


def run(args: argparse.Namespace) -> int:
    model = load_text_model(args, "test")
    data = read_input(args, need_labels=True, model=model, skip_unlabelled=True)
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
    # 0.5, 0.333), printf's %.3g
    print(f"N\t{len(kept)}\nP@{args.k}\t{p:.3g}\nR@{args.k}\t{r:.3g}")
    return 0
