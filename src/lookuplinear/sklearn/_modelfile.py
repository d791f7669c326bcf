"""Model files: the weights as safetensors, the configuration as JSON in the same file.

One file holds a fitted :class:`~lookuplinear.sklearn.LookupClassifier` or
:class:`~lookuplinear.sklearn.LookupRegressor` and, optionally, the
:class:`~lookuplinear.text.FastTextVectorizer` and label names it was trained with::

    safetensors header  {"lookup.weight": f32 (n_kept, hidden),
                         "lookup.weight.rows": i64 (n_kept,),   # compact tables only
                         "output.weight": ..., ...,
                         "__metadata__": {"format": "lookuplinear-model", "version": "2",
                                          "config": "<JSON: estimator, params, labels,
                                                      input_format, ...>",
                                          "sha256": "<JSON: {tensor name or 'config': hex}>"}}
    data                the tensors, raw little-endian

Format version 2 (written now; version 1 files, which have no checksums, still load, unchecked,
and a file that carries checksums is checked whatever version it claims; a pruned
model is written as version 3, the same format with ``"vectorizer.buckets"``):

- ``sha256`` holds the SHA-256 of every tensor (of its dtype, shape and C-order bytes) and of
  the ``config`` text. Loading recomputes each one and refuses a file where one differs, or
  where the names differ from the tensors stored.
- Compact tables: when fewer than half the rows of the table are kept, only those are stored,
  with their row numbers as ``"<name>.rows"`` (int64); ``config["compact"]`` maps the table's
  name to its full shape, and loading puts the stored rows back among zero rows. A float table
  keeps its nonzero rows (the rows training never touched are zero); a quantized table keeps
  the rows training touched.
- Quantized tables (the estimators' ``quantize(dtype)``): the table is stored as
  ``"lookup.packed"`` instead of ``"lookup.weight"``, in the row-wise format of
  :class:`~lookuplinear.QuantizedLookupLinear` (``uint8`` rows for ``int8`` and ``int4``,
  ``float16`` rows for ``float16``; the rows left out of a compact one are quantized zeros),
  and ``config["quantized"]`` holds its ``dtype``, ``mode``, ``padding_idx`` and
  ``out_features``. Such a model predicts but does not train on.
- Pruned models (``lookuplinear quantize -cutoff``): the table holds the kept rows only, and
  the vectorizer's kept hash buckets (``FastTextVectorizer.buckets_``) are the int32 tensor
  ``"vectorizer.buckets"``; its vocabulary holds the kept words only.
- ``config["params"]``: the estimator's parameters (``get_params()`` without ``random_state``
  and ``device``); a ``class_weight`` dict as ``[label, weight]`` pairs, whose labels keep
  their type (JSON's keys are strings). Files written before hold the dict itself.
- ``config["classes_dtype"]`` (a classifier): the dtype of ``classes_`` (numpy's ``dtype.str``,
  ``"<i4"``, ``"|u1"``, ``"|O"``), which ``predict`` answers in; files written before it was
  recorded load their ``classes`` as JSON reads them (ints as int64, strings as ``<U``).
- ``config["y_offset"]`` (a regressor): the targets' float64 offset, which ``predict`` and
  ``intercept_`` add to the float32 network's outputs; absent from files written before it was
  kept apart (their bias holds the whole intercept, and they load with an offset of zero).
- ``config["feature_names_in"]``: the column names of the DataFrame the estimator was fitted
  on (``feature_names_in_``), restored as the object array scikit-learn keeps, so that the
  loaded estimator checks a DataFrame's columns as the fitted one does; absent for an estimator
  fitted without names and from files written before it was recorded.
- ``config["input_format"]``: how ``lookuplinear train`` read its file (fastText lines and
  their label prefix, or a table's text and label columns and delimiter), so that ``predict``
  and ``test`` read theirs the same way; absent from files written before it was recorded
  (they still load, and ``predict`` asks for ``--text-column`` on a file named like a table).

Loading reads that header and the raw tensors only: nothing in the file is executed (no pickle).
A file that is corrupt, truncated, fails a checksum, is not a lookuplinear model, or has a
format version this loader does not read (a newer one) raises
:class:`~lookuplinear.errors.ModelFileError`.

Requires the ``[sklearn]`` extra.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from .._atomic import replacing
from ..errors import InputTypeError, ModelFileError
from ..text._files import FASTTEXT_WHITESPACE
from ._predict import class_scores, raw_output

__all__ = ["FORMAT", "VERSION", "TextModel", "load_model", "save_model"]

#: estimator parameters renamed to scikit-learn's names: a file written before reads the same
_RENAMED = {"epochs": "max_iter", "weight_decay": "alpha", "n_threads": "n_jobs"}

FORMAT = "lookuplinear-model"
VERSION = "2"
#: the version of a pruned model's file (its vectorizer keeps some hash buckets only), so that
#: a lookuplinear that cannot read one says so instead of calling the file damaged
PRUNED_VERSION = "3"
#: versions this loader reads: 1 wrote no checksums
READS = ("1", "2", "3")
#: the tensor of a pruned vectorizer's hash buckets (``FastTextVectorizer.buckets_``)
_BUCKETS = "vectorizer.buckets"
#: the whitespace fastText splits a line at, kept (a captured group): dropping a label token
#: leaves every other token as fastText and the vectorizer read it
_SPACES = re.compile(f"([{FASTTEXT_WHITESPACE}]+)")


def check_one_line(texts: str | Sequence[str], method: str) -> None:
    """Raise ``InputValueError`` naming ``method`` when a text holds ``"\\n"``, as the
    ``fasttext`` module's ``predict`` and ``get_sentence_vector`` raise ``ValueError``: fastText
    reads one line per example, a ``"\\n"`` ends it. ``texts``: one text, or a list of them
    (the message then names the first with ``"\\n"``)."""
    from ..errors import InputValueError

    one = isinstance(texts, str)
    for i, text in enumerate([texts] if one else texts):
        if isinstance(text, str) and "\n" in text:
            where = "" if one else f" (texts[{i}] holds one)"
            raise InputValueError(
                f"{method} processes one line at a time (remove '\\n'){where}; pass a list "
                "of lines for several."
            )


class TextModel:
    """A fitted estimator with the vectorizer and label names of its training data.

    ``labels[j]`` names column ``j`` of ``estimator.predict_proba``; without a vectorizer the
    estimator takes feature matrices directly. ``predict`` and ``test`` read their input as
    ``input_format`` says unless told otherwise.

    A model read by ``load_model(path, lazy=True)`` builds ``estimator`` and ``vectorizer``
    (scikit-learn objects) on first use; :meth:`scores` needs neither, and computes what they
    would (the same functions, on the same network).
    """

    def __init__(self, estimator: Any, vectorizer: Any = None, labels: list[str] | None = None,
                 input_format: dict[str, Any] | None = None) -> None:
        self._estimator = estimator
        self._vectorizer = vectorizer
        self.labels: list[str] = list(labels) if labels is not None else []
        #: how ``lookuplinear train`` read its file: ``{"format": "fasttext", "label": prefix}``
        #: or ``{"format": "table", "text_column", "label_column", "sep"}``; None in files
        #: written before models recorded it, or by ``save_model`` without ``input_format``
        self.input_format = input_format
        self._file: _ModelParts | None = None

    @property
    def estimator(self) -> Any:
        """The fitted ``LookupClassifier`` or ``LookupRegressor``."""
        if self._estimator is None and self._file is not None:
            self._estimator = _guarded(self._file.path, self._file.estimator)
        return self._estimator

    @property
    def vectorizer(self) -> Any:
        """The fitted ``FastTextVectorizer``, or None."""
        if self._vectorizer is None and self._file is not None and self._file.vectorizer:
            self._vectorizer = _guarded(self._file.path, self._file.full_vectorizer)
        return self._vectorizer

    @property
    def has_vectorizer(self) -> bool:
        """Whether the model holds a text vectorizer (without building it)."""
        if self._vectorizer is None and self._file is not None:
            return self._file.vectorizer is not None
        return self._vectorizer is not None

    def scores(self, texts: list[str]) -> np.ndarray:
        """Label probabilities of each text, shape (n_texts, len(labels)); the decision values
        for a model without probabilities (``loss="squared_hinge"``): the same ranking."""
        part = self._file
        if part is not None and self._estimator is None and part.classifier is not None:
            X = (part.features() if self._vectorizer is None else self._vectorizer).transform(
                texts)
            binary, multilabel, proba = part.classifier
            d = class_scores(raw_output(part.net, X, part.n_outputs, device="cpu",
                                        n_jobs=part.n_jobs),
                             binary=binary, multilabel=multilabel, proba=proba)
        else:
            X = self._text_vectorizer("scores").transform(texts)
            if hasattr(self.estimator, "predict_proba"):
                return np.asarray(self.estimator.predict_proba(X))
            d = np.asarray(self.estimator.decision_function(X))
        return d if d.ndim == 2 else np.column_stack([-d, d])

    def predict(
        self, text: str | list[str], k: int = 1, threshold: float = 0.0
    ) -> tuple[Any, Any]:
        """The ``k`` most likely labels of a line and their probabilities, as fastText's
        ``model.predict(text, k, threshold)`` returns them.

        Dense equivalent: ``scores([text])[0]`` sorted from the largest, its first ``k``
        entries that are ``>= threshold``. Tokens with the label prefix (``__label__`` or the
        one the model was trained with) are not text, as fastText drops them.

        Parameters
        ----------
        text : str or list of str
            One line (no ``"\\n"``), or a list of lines (bytes are read as UTF-8, as the
            vectorizer reads them).
        k : int, default 1
            Labels per line; -1: every label.
        threshold : float, default 0.0
            Only labels with probability ``>= threshold`` are returned, in [0, 1].

        Returns
        -------
        labels : tuple of str, or list of lists of str
            For a str, a tuple of label names (``__label__`` included when the training file
            had it), best first; for a list, one list per line.
        probabilities : ndarray of shape (n_kept,), or list of such arrays
            float64 for a str, float32 per line for a list, as fastText gives them (fastText
            reports ``p + 1e-05``, its ``exp(log(p + 1e-05))``; here ``p`` itself).

        Raises
        ------
        InputValueError
            A line holds ``"\\n"`` or is missing (None, NaN), ``k`` is neither >= 1 nor -1,
            ``threshold`` is outside [0, 1], or the model has no vectorizer and labels (also
            ``ValueError``).
        InputTypeError
            A line that is neither str nor bytes.

        Examples
        --------
        >>> from lookuplinear.sklearn import LookupClassifier
        >>> from lookuplinear.text import FastTextVectorizer
        >>> texts, y = ["good film", "bad film"] * 4, ["__label__pos", "__label__neg"] * 4
        >>> vec = FastTextVectorizer()
        >>> clf = LookupClassifier(loss="log_loss", hidden=4, mode="mean", max_iter=50,
        ...                        learning_rate_init=0.5, random_state=0)
        >>> model = TextModel(clf.fit(vec.fit_transform(texts), y), vec, ["__label__neg",
        ...                                                             "__label__pos"])
        >>> labels, probs = model.predict("a good film", k=-1)
        >>> labels, probs.dtype, bool(probs[0] > probs[1])
        (('__label__pos', '__label__neg'), dtype('float64'), True)
        >>> model.predict(["good", "bad"])[0]
        [['__label__pos'], ['__label__neg']]
        """
        from ..errors import InputValueError
        from ..text._features import _not_text_error
        from ..text._files import check_threshold

        one = isinstance(text, str | bytes)
        lines: list[Any] = [text] if one else list(text)
        for i, line in enumerate(lines):  # as the vectorizer reads documents
            if isinstance(line, bytes):
                lines[i] = line.decode("utf-8")
            elif not isinstance(line, str):
                raise _not_text_error(line, i)
        check_one_line(lines[0] if one else lines, "predict")
        if k < 1 and k != -1:
            raise InputValueError(f"k must be >= 1, or -1 for every label, got {k}.")
        check_threshold(threshold)
        if not self.labels:
            raise InputValueError(
                "predict needs the model's label names; this TextModel has none (a regressor, "
                "or labels=[]). Use estimator.predict on vectorizer.transform(texts)."
            )
        texts = [self._without_labels(line) for line in lines]
        labels, probs = self.top_k(texts, len(self.labels) if k == -1 else k, threshold)
        if one:
            return tuple(labels[0]), probs[0].astype(np.float64)
        return labels, probs

    def _without_labels(self, line: str) -> str:
        """``line`` without its label tokens (those with the model's label prefix), every
        other token and the whitespace fastText splits at kept."""
        prefix = (self.input_format or {}).get("label") or "__label__"
        return "".join(t for t in _SPACES.split(line) if not t.startswith(prefix))

    def top_k(self, texts: list[str], k: int = 1, threshold: float = 0.0
              ) -> tuple[list[list[str]], list[np.ndarray]]:
        """The ``k`` best labels of each text whose score reaches ``threshold``, best first
        (equal scores in label order), and their scores (float32): the ranking of
        :meth:`scores` that :meth:`predict` and ``lookuplinear predict`` give. ``k=-1``:
        every label, as fastText's ``k=-1``; otherwise ``k`` must be >= 1."""
        from ..errors import InputValueError

        if k == -1:
            k = len(self.labels)
        if k < 1:
            raise InputValueError(f"k must be >= 1, or -1 for every label, got {k}.")
        scores = self.scores(texts)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        kept = [p[row[p] >= threshold] for row, p in zip(scores, top, strict=True)]
        labels = [[self.labels[j] for j in p] for p in kept]
        return labels, [row[p].astype(np.float32) for row, p in zip(scores, kept, strict=True)]

    def sentence_vectors(self, texts: list[str]) -> np.ndarray:
        """Each text's vector as fastText's ``print-sentence-vectors`` gives a supervised
        model's: the mean of the table rows of its words and n-grams, the input of the output
        layer; shape (n_texts, dim), float32.

        Dense equivalent: ``(X / X.sum(1)) @ W`` for ``X = vectorizer.transform(texts)`` and
        the table ``W`` (``estimator.model_.lookup.weight``); a text with no known feature is
        the zero vector. Raises ``InputValueError`` for a model without an embedding table.
        """
        return self._hidden(self._text_vectorizer("sentence_vectors").transform(texts),
                            "sentence_vectors")

    def word_vectors(self, words: list[str]) -> np.ndarray:
        """Each word's vector as fastText's ``print-word-vectors`` gives it: the mean of the
        rows of the word and its character n-grams (zero for an unknown word without them);
        shape (n_words, dim), float32. Equals ``sentence_vectors`` of the one-word texts.
        """
        return self._hidden(self._text_vectorizer("word_vectors").transform(words), "word_vectors")

    def _text_vectorizer(self, method: str) -> Any:
        from ..errors import InputValueError

        if self.vectorizer is None:
            raise InputValueError(
                f"TextModel.{method} needs a text vectorizer; this model was saved without one "
                "(save_model(..., vectorizer=...)). Pass feature matrices to the estimator."
            )
        return self.vectorizer

    def _hidden(self, X: Any, method: str) -> np.ndarray:
        """The table's mean rows of ``X`` (the output layer's input), float32 numpy."""
        from ..errors import InputValueError
        from ._input import CSRBatches
        from ._predict import PREDICT_BATCH

        net = self.estimator.model_
        if net.output is None:
            raise InputValueError(
                f"TextModel.{method}: the model is linear (hidden=None), it has no word "
                "vectors; train with hidden=DIM (`lookuplinear train --dim`)."
            )
        Xc = self.estimator._prepare_x(X, reset=False)
        device = self.estimator._model_device()
        outs = [np.zeros((0, net.output.in_features), dtype=np.float32)]
        with torch.no_grad():
            for _, _, bags in CSRBatches(Xc).batches(PREDICT_BATCH):
                outs.append(net.lookup(bags.to(device)).float().cpu().numpy())
        return np.concatenate(outs)


def save_model(
    path: str | Path,
    estimator: Any,
    *,
    vectorizer: Any = None,
    labels: list[str] | None = None,
    input_format: dict[str, Any] | None = None,
) -> Path:
    """Write ``estimator`` (fitted), and optionally its vectorizer, label names and the format
    of its training file (``TextModel.input_format``), to ``path``.

    ``labels`` defaults to a classifier's ``classes_`` (as strings), so that every classifier's
    ``TextModel.labels`` names its ``predict_proba`` columns. Parameters holding numpy scalars
    (``hidden=np.int64(2)``, as ``GridSearchCV`` over ``np.arange`` sets it) are stored as the
    Python numbers they hold.

    Raises
    ------
    ModelFileError
        ``estimator`` is not fitted.
    InputTypeError
        ``random_state`` is neither an int nor None (a ``RandomState``, whose state the file
        cannot hold), or another parameter holds a value JSON cannot (also ``TypeError``).

    Examples
    --------
    >>> import tempfile, os
    >>> from lookuplinear.sklearn import LookupClassifier
    >>> clf = LookupClassifier(hidden=4, learning_rate_init=0.1, random_state=0).fit(
    ...     [[0, 1], [2]], [0, 1])
    >>> path = save_model(os.path.join(tempfile.mkdtemp(), "m.ll"), clf)
    >>> loaded = load_model(path).estimator
    >>> np.allclose(loaded.decision_function([[0, 1]]), clf.decision_function([[0, 1]]))
    True
    """
    from safetensors.torch import save_file

    est = estimator
    if not hasattr(est, "model_"):
        raise ModelFileError(
            f"{type(est).__name__} is not fitted; call fit before save_model."
        )
    params = {k: _stored_param(k, v) for k, v in est.get_params().items()
              if k not in ("random_state", "device")}
    config: dict[str, Any] = {
        "estimator": type(est).__name__,
        "params": params,
        "random_state": _stored_seed(est.random_state),
        "n_features_in": int(est.n_features_in_),
        "n_outputs": int(est._n_outputs()),
        "loss_curve": [float(x) for x in est.loss_curve_],
        "n_iter": int(est.n_iter_),
        "labels": [str(x) for x in (labels if labels is not None else _classes(est))] or None,
        "vectorizer": None if vectorizer is None else vectorizer.get_config(),
        "input_format": input_format,
        "token_lists": bool(getattr(est, "_token_lists", False)),
        "max_row_norm": float(getattr(est, "_max_row_norm", 1.0)),
    }
    if hasattr(est, "feature_names_in_"):  # fitted on a DataFrame: its column names
        config["feature_names_in"] = [str(x) for x in est.feature_names_in_]
    if type(est).__name__ == "LookupClassifier":
        config["classes"] = est.classes_.tolist()
        config["classes_dtype"] = est.classes_.dtype.str  # JSON reads ints as int64
        config["multilabel"] = bool(est.multilabel_)
        config["y_sparse"] = bool(getattr(est, "_y_sparse", False))
    else:
        config["y_2d"] = bool(est._y_2d)
        config["y_offset"] = [float(v) for v in est._offset()]  # float64, exact in JSON
    tensors = {k: v.detach().cpu().contiguous() for k, v in est.model_.state_dict().items()}
    buckets = None if config["vectorizer"] is None else config["vectorizer"].pop("buckets", None)
    if buckets is not None:  # a pruned vectorizer's hash buckets: int32 in the data, not JSON
        tensors[_BUCKETS] = torch.as_tensor(np.asarray(buckets, dtype=np.int32))
    lookup = est.model_.lookup
    quantized = getattr(lookup, "dtype", None) if hasattr(lookup, "packed") else None
    name = "lookup.packed" if quantized else "lookup.weight"
    table = tensors[name]
    touched = getattr(est, "_touched", None)
    rows = (torch.nonzero(table.any(dim=1)).flatten() if not quantized else
            torch.arange(table.shape[0]) if touched is None or len(touched) != table.shape[0]
            else torch.from_numpy(np.flatnonzero(touched)))
    if rows.numel() < table.shape[0] // 2:  # most rows zero (never touched): store the others
        tensors[name] = table.index_select(0, rows).contiguous()
        tensors[f"{name}.rows"] = rows
        config["compact"] = {name: list(table.shape)}
    if quantized:
        config["quantized"] = {"dtype": quantized, "mode": lookup.mode,
                               "padding_idx": lookup.padding_idx,
                               "out_features": lookup.out_features}
    text = json.dumps(config, default=_plain)
    sums = {k: _sha256(v) for k, v in tensors.items()}
    sums["config"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    meta = {"format": FORMAT, "version": PRUNED_VERSION if _BUCKETS in tensors else VERSION,
            "config": text,
            "sha256": json.dumps(sums, sort_keys=True)}
    out = Path(path)
    # a reader (or a crash) never sees half a file, and an old model stays whole until the
    # new one is complete
    with replacing(out) as tmp:
        save_file(tensors, tmp, metadata=meta)
        _sort_header(tmp)
    return out


def _sort_header(path: Path) -> None:
    """Write the safetensors file ``path``'s header again with its keys in sorted order, in
    place: safetensors writes ``__metadata__``'s keys in an order that changes from process to
    process, and the same model should give the same bytes. The header keeps its length (the
    same JSON, compact, padded with spaces as safetensors pads it), so nothing else moves; a
    header that would not fit is left as written."""
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        text = json.dumps(header, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")
        if len(text) <= n:
            f.seek(8)
            f.write(text + b" " * (n - len(text)))


def _plain(value: Any) -> Any:
    """A numpy scalar (``np.int64(2)`` from a search over ``np.arange``) as the Python number
    it holds, for ``json.dumps``; anything else JSON does not hold raises ``TypeError``."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _stored_param(name: str, value: Any) -> Any:
    """An estimator parameter as the configuration's JSON holds it: a ``class_weight`` dict as
    ``[label, weight]`` pairs, since JSON's keys are strings and the labels keep their type.

    Raises ``InputTypeError`` for a value JSON cannot hold (numpy scalars become Python ones).
    """
    if name == "class_weight" and isinstance(value, dict):
        value = [[label, weight] for label, weight in value.items()]
    try:
        json.dumps(value, default=_plain)
    except (TypeError, ValueError):
        raise InputTypeError(
            f"save_model cannot store the parameter {name}={value!r} "
            f"({type(value).__name__}): a model file holds numbers, strings, bools, None and "
            f"lists of them. Set a plain value with set_params({name}=...) and save again."
        ) from None
    return value


def _stored_seed(random_state: Any) -> int | None:
    """``random_state`` as a model file stores it: an int seed (numpy's included) or None."""
    if random_state is None or isinstance(random_state, numbers.Integral):
        return None if random_state is None else int(random_state)
    raise InputTypeError(
        f"save_model stores random_state as an int seed or None, got a "
        f"{type(random_state).__name__}, whose state a model file cannot hold. The fitted "
        "weights do not depend on it: set_params(random_state=<int>) (the seed a later "
        "partial_fit draws from) and save again."
    )


def _classes(est: Any) -> list[Any]:
    """A classifier's ``classes_`` (the labels of ``predict_proba``'s columns); [] else."""
    classes = getattr(est, "classes_", None)
    return [] if classes is None else classes.tolist()


def load_model(path: str | Path, *, lazy: bool = False) -> TextModel:
    """Read a model file written by :func:`save_model`, or by fastText (``.bin``/``.ftz``,
    read by :func:`lookuplinear.sklearn.load_fasttext`); never executes anything from it.

    ``lazy=True`` reads the network and checks the file as fully, but builds the estimator and
    vectorizer (importing scikit-learn, about a second) only when they are first used:
    ``TextModel.scores`` runs without them (``lookuplinear predict`` and ``test`` load so).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ModelFileError
        The file is corrupt, truncated, not a lookuplinear or fastText model, or of a newer
        version.
    """
    from safetensors import safe_open

    from ._fasttext_bin import is_fasttext, load_fasttext

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no model file at {p}; train one with `lookuplinear train`.")
    if is_fasttext(p):  # a model written by fastText itself (.bin, .ftz)
        return load_fasttext(p)
    _check_header(p)
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
    except Exception as e:  # safetensors raises its own error type for every malformed file
        raise ModelFileError(
            f"{p} is not a readable safetensors file ({e}). It is corrupt or truncated; "
            "train it again or copy it again."
        ) from None
    if meta.get("format") != FORMAT:
        raise ModelFileError(
            f"{p} is a safetensors file but not a lookuplinear model (metadata format="
            f"{meta.get('format')!r}, expected {FORMAT!r})."
        )
    if meta.get("version") not in READS:
        raise ModelFileError(
            f"{p} has model format version {meta.get('version')!r}; this lookuplinear reads "
            f"versions {', '.join(READS)}. Upgrade lookuplinear or retrain the model."
        )
    # version 1 was written before the checksums: such a file loads unchecked, but one that
    # carries checksums is checked whatever version its header claims
    if meta.get("version") != "1" or "sha256" in meta:
        _verify(p, meta, tensors)
    parts = _guarded(p, lambda: _read(p, json.loads(meta["config"]), tensors, lazy=lazy))
    labels = parts.config.get("labels") or parts.config.get("classes") or []
    model = TextModel(None, None, [str(x) for x in labels], parts.input_format)
    model._file = parts
    if not lazy:
        _ = model.estimator, model.vectorizer
    return model


def _guarded(p: Path, build: Callable[[], Any]) -> Any:
    """``build()``, any error but ``ModelFileError`` said as a damaged configuration of ``p``."""
    try:
        return build()
    except ModelFileError:
        raise
    except Exception as e:  # a well-formed header with inconsistent content
        raise ModelFileError(
            f"{p} has an invalid configuration ({type(e).__name__}: {e}); the file was "
            "damaged or written by another program. Train it again."
        ) from None


def _sha256(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (C order), its dtype and shape."""
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _verify(p: Path, meta: dict[str, str], tensors: dict[str, torch.Tensor]) -> None:
    """Every tensor and the configuration against the checksums written with them."""
    try:
        sums = json.loads(meta["sha256"])
    except (KeyError, ValueError):
        raise ModelFileError(
            f"{p} has no readable checksums; the file was damaged. Train it again."
        ) from None
    names = set(tensors) | {"config"}
    if set(sums) != names:
        raise ModelFileError(
            f"{p} holds tensors {sorted(names - {'config'})} but its checksums name "
            f"{sorted(set(sums) - {'config'})}; the file was damaged. Train it again."
        )
    if not isinstance(meta.get("config"), str):
        raise ModelFileError(
            f"{p} has no configuration (its metadata names {sorted(meta)}); the file was "
            "damaged. Train it again."
        )
    got = {k: _sha256(v) for k, v in tensors.items()}
    got["config"] = hashlib.sha256(meta["config"].encode("utf-8")).hexdigest()
    bad = sorted(k for k in names if got[k] != sums[k])
    if bad:
        raise ModelFileError(
            f"{p} fails its checksum for {bad}: the bytes changed after it was written "
            "(a damaged copy or disk). Copy it again or train it again."
        )


def _check_header(p: Path) -> None:
    """A file that cannot be a safetensors file at all (a text file, most often the INPUT
    given in MODEL's place) says so, before safetensors reports a malformed header."""
    with open(p, "rb") as f:
        head = f.read(9)
    n = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
    if len(head) < 9 or n <= 0 or head[8:9] != b"{":  # a short file reads as truncated
        raise ModelFileError(
            f"{p} is not a lookuplinear model file (are MODEL and INPUT swapped?): it does not "
            "start with a safetensors header nor fastText's magic number. Give the file "
            "`lookuplinear train -o` wrote, or a fastText .bin/.ftz."
        )


@dataclass
class _ModelParts:
    """A model file's content, read without scikit-learn: the network with its weights, the
    estimator's parameters and the vectorizer's configuration."""

    path: Path
    config: dict[str, Any]
    params: dict[str, Any]
    net: Any
    vectorizer: dict[str, Any] | None
    input_format: dict[str, Any] | None
    _features: Any = None

    @property
    def n_outputs(self) -> int:
        return int(self.config["n_outputs"])

    @property
    def n_jobs(self) -> int | None:
        return cast("int | None", self.params.get("n_jobs", 1))

    @property
    def classifier(self) -> tuple[bool, bool, bool] | None:
        """A classifier's ``(binary, multilabel, proba)`` (what ``class_scores`` takes), None
        for a regressor."""
        if self.config["estimator"] != "LookupClassifier":
            return None
        multilabel = bool(self.config["multilabel"])
        binary = not multilabel and len(self.config["classes"]) == 2
        return binary, multilabel, self.params["loss"] == "log_loss"

    def features(self) -> Any:
        """The vectorizer's transform, without scikit-learn (``TextFeatures``)."""
        if self._features is None:
            from ..text._features import TextFeatures

            self._features = TextFeatures.from_config(cast(dict, self.vectorizer))
        return self._features

    def full_vectorizer(self) -> Any:
        from ..text import FastTextVectorizer

        return FastTextVectorizer.from_config(cast(dict, self.vectorizer))

    def estimator(self) -> Any:
        """The fitted estimator around :attr:`net` (imports scikit-learn)."""
        from ._classifier import LookupClassifier
        from ._regressor import LookupRegressor

        config, net = self.config, self.net
        kinds = {"LookupClassifier": LookupClassifier, "LookupRegressor": LookupRegressor}
        est: Any = kinds[config["estimator"]](**self.params,
                                              random_state=config["random_state"])
        est.n_features_in_ = int(config["n_features_in"])
        names = _feature_names(config.get("feature_names_in"), est.n_features_in_)
        if names is not None:  # absent: fitted without names, or a file written before
            est.feature_names_in_ = names
        est._token_lists = bool(config.get("token_lists", False))
        est._max_row_norm = float(config.get("max_row_norm", 1.0))
        est.model_ = net.eval()
        quantized = config.get("quantized")
        if not quantized:
            est._touched = net.lookup.weight.detach().any(dim=1).numpy()
        est.loss_curve_ = list(config["loss_curve"])
        est.n_iter_ = int(config["n_iter"])
        est.validation_scores_ = []
        est._seed_ = est._seed()
        est._built = est._built_with()
        est._optimizers = [] if quantized else est._make_optimizers()
        if config["estimator"] == "LookupClassifier":
            dtype = config.get("classes_dtype")  # files written before: as JSON reads them
            est.classes_ = np.asarray(config["classes"],
                                      dtype=None if dtype is None else np.dtype(dtype))
            est.multilabel_ = bool(config["multilabel"])
            est._y_sparse = bool(config.get("y_sparse", False))
        else:
            est._y_2d = bool(config["y_2d"])
            if "y_offset" in config:  # older files: the bias holds the whole intercept
                est._y_offset = np.asarray(config["y_offset"], dtype=np.float64)
        return est


#: the estimators' defaults of the parameters that shape the network, for files that lack them
_NET_DEFAULTS = {"hidden": None, "mode": "sum", "n_jobs": 1}


def _read(p: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor], *,
          lazy: bool) -> _ModelParts:
    """The network and configuration of a model file; ``lazy``: the vectorizer's
    configuration checked here (the estimator's vectorizer checks it otherwise)."""
    from ..quant.layer import QuantizedLookupLinear
    from ._model import LookupNet

    kinds = ("LookupClassifier", "LookupRegressor")
    name = config["estimator"]
    if name not in kinds:
        raise ModelFileError(f"unknown estimator {name!r}; expected one of {sorted(kinds)}.")
    params = {_RENAMED.get(k, k): v for k, v in config["params"].items()}
    if isinstance(params.get("class_weight"), list):  # [label, weight] pairs
        params["class_weight"] = {label: weight for label, weight in params["class_weight"]}
    if name == "LookupClassifier":
        params.setdefault("loss", "log_loss")  # what files without the parameter trained with
    net_params = {**_NET_DEFAULTS, **{k: params[k] for k in _NET_DEFAULTS if k in params}}
    n_features = int(config["n_features_in"])
    with torch.device("meta"):  # no memory, no random draw: the file's weights are assigned
        net = LookupNet(n_features, int(config["n_outputs"]), hidden=net_params["hidden"],
                        mode=net_params["mode"])
    tensors = dict(tensors)
    buckets = tensors.pop(_BUCKETS, None)
    quantized = config.get("quantized")
    for key, shape in (config.get("compact") or {}).items():  # rows stored, the rest zero
        full = torch.zeros(*shape, dtype=tensors[key].dtype)
        if quantized:  # a zero row in the quantized format
            zero = torch.zeros(1, int(quantized["out_features"]))
            full[:] = QuantizedLookupLinear.pack(zero, quantized["dtype"])
        full.index_copy_(0, tensors.pop(f"{key}.rows"), tensors[key])
        tensors[key] = full
    if quantized:  # the table as stored; the rest of the network loads as usual
        net.lookup = cast(Any, QuantizedLookupLinear.from_packed(
            tensors["lookup.packed"], quantized["dtype"], in_features=n_features,
            out_features=int(quantized["out_features"]), bias=tensors.get("lookup.bias"),
            mode=quantized["mode"],
            padding_idx=quantized["padding_idx"]))
    try:
        net.load_state_dict(tensors, strict=True, assign=True)
    except RuntimeError as e:
        raise ModelFileError(
            f"the weights do not match the configuration: {str(e).splitlines()[0]} ... "
            "The file was damaged or edited; train it again."
        ) from None
    vec = config.get("vectorizer")
    if vec is not None and buckets is not None:
        vec = {**vec, "buckets": buckets.numpy()}
    parts = _ModelParts(p, config, params, net.eval(), vec,
                        _input_format(config.get("input_format")))
    if vec is not None and lazy:
        parts.features()
    return parts


def _feature_names(names: Any, n_features: int) -> np.ndarray | None:
    """The recorded ``feature_names_in_`` as scikit-learn keeps it (an object array of str),
    checked: one str per feature; None where the file records none."""
    if names is None:
        return None
    if not (isinstance(names, list) and len(names) == n_features
            and all(isinstance(x, str) for x in names)):
        raise ModelFileError(
            f"the recorded feature_names_in {names!r} is not a list of {n_features} strings "
            "(one per feature)."
        )
    return np.asarray(names, dtype=object)


def _input_format(fmt: Any) -> dict[str, Any] | None:
    """The recorded input format, checked: a file that holds another shape is refused."""
    if fmt is None:
        return None
    keys = {"fasttext": {"format", "label"},
            "table": {"format", "text_column", "label_column", "sep"}}
    if not (isinstance(fmt, dict) and set(fmt) == keys.get(fmt.get("format"))  # type: ignore[arg-type]
            and all(v is None or isinstance(v, str) for v in fmt.values())):
        raise ModelFileError(f"the recorded input format {fmt!r} is not one this loader reads.")
    return dict(fmt)
