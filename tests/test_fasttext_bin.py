"""fastText's own .bin/.ftz files: read, and predicted with as the fasttext module does.

Three ways to be compared with fastText: tiny models trained by fastText, committed with the
predictions its module returned (tests/data/fasttext, always run); models written here in
fastText's format (``write_fasttext`` follows ``FastText::saveModel``), read, quantized and
predicted with by the ``fasttext`` module (``fasttext-numpy2`` or ``fasttext-wheel``), skipped
when it is not installed; and bad files, refused with the version or the offset.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from lookuplinear.errors import ModelFileError
from lookuplinear.sklearn import FastTextModel, load_fasttext

DATA = Path(__file__).parent / "data" / "fasttext"
MAGIC = 793712314
LOSS = {"hs": 1, "ns": 2, "softmax": 3, "ova": 4}
WORDS = ["good", "great", "fine", "bad", "awful", "film", "movie", "plot", "café", "naïve", "日本",
         "ok", "</s>"]
TEXTS = ["good film", "bad bad movie plot", "café naïve 日本", "unseen wörd", "", "x",
         "__label__a good", "great\tfine  ok", "awful film good great fine bad", "ok ok ok",
         "good </s> bad plot", "</s>", "bad\u00a0film \u3000 ok"]


def cli_examples(lines: list[str]) -> list[str]:
    """The examples fastText's CLI (`predict`, `print-sentence-vectors`) reads from ``lines``,
    each ended by a newline: a `</s>` token ends one and the rest of its line is the next (the
    `fasttext` module's `predict` reads a text only up to that token)."""
    out = []
    for line in lines:
        part: list[str] = []
        for token in re.split("[ \t\n\v\f\r\0]+", line):
            if token == "</s>":
                out.append(" ".join(part))
                part = []
            elif token:
                part.append(token)
        out.append(" ".join(part))
    return out


def write_fasttext(path: Path, *, loss: str = "softmax", dim: int = 6, bucket: int = 300,
                   minn: int = 0, maxn: int = 0, word_ngrams: int = 1, n_labels: int = 4,
                   version: int = 12, model: int = 3, seed: int = 0,
                   label: str = "__label__", words: list[str | bytes] | None = None,
                   labels: list[str | bytes] | None = None) -> Path:
    """A model in fastText's format, with random weights (``FastText::saveModel``: magic,
    version, Args, Dictionary, quant flag, input DenseMatrix, qout flag, output); ``model``:
    3 supervised (an output row per label), 1 cbow or 2 skipgram (word vectors: an output row
    per word); ``label``: the prefix of its labels (fastText's ``-label``); ``words`` and
    ``labels`` (str or raw bytes) replace ``WORDS`` and the ``n_labels`` labels."""
    rng = np.random.default_rng(seed)
    labels = labels if labels is not None else [f"{label}{c}" for c in range(n_labels)]
    n_labels = len(labels)
    words = words if words is not None else WORDS
    out = struct.pack("<ii", MAGIC, version)
    out += struct.pack("<12id", dim, 5, 5, 1, 5, word_ngrams, LOSS[loss], model, bucket, minn,
                       maxn, 100, 1e-4)
    counts = [int(c) for c in rng.integers(1, 50, len(words) + n_labels)]
    out += struct.pack("<iiiqq", len(words) + n_labels, len(words), n_labels, sum(counts), -1)
    for i, w in enumerate(words + labels):
        raw = w if isinstance(w, bytes) else w.encode()
        out += raw + b"\0" + struct.pack("<qb", counts[i], int(i >= len(words)))
    rows = len(words) + bucket
    for m in (rows, n_labels if model == 3 else len(words)):
        out += struct.pack("<?qq", False, m, dim)
        out += rng.normal(0, 1.5, (m, dim)).astype("<f4").tobytes()
    path.write_bytes(out)
    return path


def same_as(expected: list[list[str]], expected_p: list, got: list[list[str]],
            got_p: list) -> None:
    assert [list(x) for x in expected] == got
    for a, b in zip(expected_p, got_p, strict=True):
        np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                                   rtol=2e-6, atol=0)


# ---------------------------------------------------------------------- fastText's own files
@pytest.mark.parametrize("name", ["softmax.bin", "hs_sub.bin", "ova_sub.bin"])
def test_trained_by_fasttext(name: str) -> None:
    """Models trained by fastText (softmax; hs with 1..3-char n-grams; ova with 3..5-char
    n-grams, non-ASCII words): its module's predictions, labels and ties included."""
    ref = json.loads((DATA / "predictions.json").read_text(encoding="utf-8"))
    model = load_fasttext(DATA / name)
    for key, rows in ref["predictions"][name].items():
        k, thr = int(key.split()[0]), float(key.split()[1])
        labels, probs = model.top_k(ref["texts"], k if k > 0 else len(model.labels), thr)
        same_as([r[0] for r in rows], [r[1] for r in rows], labels, probs)
        # TextModel.predict, as the fasttext module's: a list of lines, and one line
        labels, probs = model.predict(ref["texts"], k if k > 0 else -1, thr)
        same_as([r[0] for r in rows], [r[1] for r in rows], labels, probs)
        one, p_one = model.predict(ref["texts"][0], k if k > 0 else -1, thr)
        assert isinstance(one, tuple) and p_one.dtype == np.float64
        same_as([rows[0][0]], [rows[0][1]], [list(one)], [p_one])


def test_a_text_with_a_newline_is_refused_as_the_fasttext_module_refuses_it(
        tmp_path: Path) -> None:
    """The fasttext module's predict and get_sentence_vector raise ValueError("predict
    processes one line at a time (remove '\\n')") for a text holding "\\n"
    (python/fasttext_module/fasttext/FastText.py): top_k, scores and sentence_vectors refuse
    it too (InputValueError, a ValueError), naming the text, instead of reading the lines as
    one example; a word-vector model's sentence_vectors as well. Where the module is
    installed, it is checked to refuse the same texts."""
    from lookuplinear.errors import InputValueError

    classifier = load_fasttext(DATA / "softmax.bin")
    vectors = load_fasttext(write_fasttext(tmp_path / "sg.bin", model=2, loss="ns"))
    texts = ["good film", "good\nfilm"]
    calls = {"top_k": lambda: classifier.top_k(texts, 2),
             "scores": lambda: classifier.scores(texts),
             "sentence_vectors": lambda: classifier.sentence_vectors(texts),
             "predict": lambda: classifier.predict(texts)}
    for what, call in calls.items():
        with pytest.raises(InputValueError, match=rf"^{what} processes one line at a time "
                           r"\(remove '\\n'\) \(texts\[1\] holds one\); pass a list of lines"):
            call()
    with pytest.raises(InputValueError, match="one line at a time"):
        vectors.sentence_vectors(texts)
    assert classifier.top_k(iter(texts[:1]), 1)[0] == classifier.top_k(texts[:1], 1)[0]
    try:
        import fasttext
    except ImportError:
        return
    ft = fasttext.load_model(str(DATA / "softmax.bin"))
    for call in (lambda: ft.predict(texts[1]), lambda: ft.predict(texts),
                 lambda: ft.get_sentence_vector(texts[1])):
        with pytest.raises(ValueError, match="one line at a time"):
            call()


def test_load_model_and_cli_take_a_fasttext_file(tmp_path: Path, capsys) -> None:
    """`load_model`, `lookuplinear predict` and `test` read a fastText file where a
    lookuplinear model goes (it used to be refused as 'MODEL and INPUT swapped?')."""
    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    model = load_model(DATA / "softmax.bin")
    assert isinstance(model, FastTextModel)
    texts = ["good film", "awful boring plot", "fun story"]
    (tmp_path / "in.txt").write_text("".join(f"__label__pos {t}\n" for t in texts))
    assert main(["predict", str(DATA / "softmax.bin"), str(tmp_path / "in.txt"), "2"]) == 0
    labels, probs = model.top_k(texts, 2)
    assert capsys.readouterr().out.splitlines() == [" ".join(x) for x in labels]
    assert main(["predict-prob", str(DATA / "softmax.bin"), str(tmp_path / "in.txt"), "-1"]) == 0
    labels, probs = model.top_k(texts, len(model.labels))  # fastText's order, ties included
    assert capsys.readouterr().out.splitlines() == [
        " ".join(f"{n} {float(v):g}" for n, v in zip(x, p, strict=True))
        for x, p in zip(labels, probs, strict=True)]
    assert main(["test", str(DATA / "softmax.bin"), str(tmp_path / "in.txt")]) == 0
    hits = sum(x[0] == "__label__pos" for x in model.top_k(texts, 1)[0])
    assert capsys.readouterr().out.split() == ["N", "3", "P@1", f"{hits / 3:.3g}", "R@1",
                                               f"{hits / 3:.3g}"]


def test_last_line_without_newline_has_no_eos_as_in_fasttext(tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    """A last line with no final '\\n' gets no `</s>` row, as fastText's `readWord` reads it at
    the end of the file: `predict`, `test` and `print-sentence-vectors` give fastText's CLI
    output, and a whitespace-only last line predicts nothing (an empty line). The expected
    lines were printed by fastText's CLI (`fasttext`, built from facebookresearch/fastText) on
    tests/data/fasttext/softmax.bin."""
    import io

    from lookuplinear.cli import main

    model = str(DATA / "softmax.bin")
    path = tmp_path / "in.txt"
    # printf 'good film\n__label__pos good boring film' | fasttext predict-prob MODEL - -1
    path.write_text("good film\n__label__pos good boring film", encoding="utf-8")
    assert main(["predict-prob", model, str(path), "-1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "__label__pos 0.464379 __label__neg 0.224183 __label__multi 0.168464 __label__meh "
        "0.143014",
        "__label__pos 0.575749 __label__neg 0.195444 __label__multi 0.127928 __label__meh "
        "0.10092"]  # with its "\n": __label__pos 0.623905 ...
    # printf 'good film\n \t' | fasttext predict-prob MODEL - 2
    path.write_text("good film\n \t", encoding="utf-8")
    assert main(["predict-prob", model, str(path), "2"]) == 0
    assert capsys.readouterr().out == "__label__pos 0.464379 __label__neg 0.224183\n\n"
    # printf '__label__pos good film\n__label__neg qqqq' | fasttext test MODEL - : the last
    # line has no row without its "</s>", and is skipped
    path.write_text("__label__pos good film\n__label__neg qqqq", encoding="utf-8")
    assert main(["test", model, str(path)]) == 0
    assert capsys.readouterr().out.split() == ["N", "1", "P@1", "1", "R@1", "1"]
    # printf 'good boring film' | fasttext print-sentence-vectors MODEL
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good boring film")))
    assert main(["print-sentence-vectors", model]) == 0
    assert capsys.readouterr().out == ("-0.24153 0.23188 -0.18249 -0.059231 0.14491 0.036967 "
                                       "0.18087 0.0068762 \n")


def test_eos_token_in_a_line_starts_another_output_line_as_in_fasttext(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """A `</s>` token inside a line ends an example there, and fastText's CLI `predict` and
    `print-sentence-vectors` read the rest of the line as another one, with its own output
    line. The expected lines were printed by fastText's CLI (`fasttext`, built from
    facebookresearch/fastText) on tests/data/fasttext/softmax.bin."""
    import io

    from lookuplinear.cli import main

    model = str(DATA / "softmax.bin")
    text = b"good </s> boring film\nawful\n"
    (tmp_path / "in.txt").write_bytes(text)
    # fasttext predict-prob MODEL in.txt 2
    assert main(["predict-prob", model, str(tmp_path / "in.txt"), "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "__label__pos 0.353887 __label__neg 0.242874",   # good
        "__label__pos 0.803867 __label__neg 0.111595",   # boring film
        "__label__pos 0.317112 __label__neg 0.248053"]   # awful
    # fasttext print-sentence-vectors MODEL < in.txt
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert main(["print-sentence-vectors", model]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "-0.090318 0.075391 -0.062858 -0.022529 0.045073 0.008611 0.065656 0.002402 ",
        "-0.43248 0.43162 -0.33458 -0.10551 0.2727 0.073753 0.32674 0.012558 ",
        "-0.028935 0.075474 -0.044548 -0.0054963 0.055771 0.026392 0.030011 0.0015375 "]


def test_quantize_refuses_a_fasttext_file_and_names_fasttexts_quantize(
        tmp_path: Path, capsys) -> None:
    """`quantize` of a model fastText wrote (`-output NAME` reads NAME.bin, or MODEL -o OUT)
    stops with one line naming fastText's own quantize, exit status 1, nothing written."""
    from lookuplinear.cli import main

    write_fasttext(tmp_path / "m.bin")
    for argv in (["-output", str(tmp_path / "m")],
                 [str(tmp_path / "m.bin"), "-o", str(tmp_path / "q.ll")],
                 [str(DATA / "softmax.bin"), "-o", str(tmp_path / "q.ll"), "-cutoff", "5"]):
        assert main(["quantize", *argv]) == 1
        err = capsys.readouterr().err
        assert err.startswith("lookuplinear quantize: error: ") and err.count("\n") == 1
        assert "is a model fastText wrote" in err and "fasttext quantize -output NAME" in err
        assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin"]


# ---------------------------------------------------------------------- the dense equivalent
@pytest.mark.parametrize("loss", ["softmax", "hs", "ova"])
def test_layers_equal_scores(tmp_path: Path, loss: str) -> None:
    """The model as lookuplinear's layers (count matrix -> lookup_linear mean -> output) and
    the dense path (densified counts, row mean, matmul) give `scores` to float32 rounding."""
    model = load_fasttext(write_fasttext(tmp_path / "m.bin", loss=loss, minn=2, maxn=4,
                                         word_ngrams=2))
    X = model.vectorizer.transform(TEXTS)
    layers = model.estimator.predict_proba(X)
    np.testing.assert_allclose(layers, model.scores(TEXTS), rtol=1e-5)
    dense = X.toarray().astype(np.float64)
    hidden = dense @ model.input_matrix / dense.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(hidden, model.hidden(TEXTS)[0], rtol=1e-5, atol=1e-6)
    for i, text in enumerate(TEXTS):  # the counts are the rows fastText averages
        assert sorted(np.repeat(X[i].indices, X[i].data.astype(int))) == sorted(model.rows(text))


# ---------------------------------------------------------------------- the fasttext module
@pytest.fixture(scope="module")
def fasttext():  # the module, when installed
    try:
        import fasttext as ft
    except ImportError:
        pytest.skip("the fasttext module is not installed (pip install fasttext-numpy2): the "
                    "comparison with it is skipped; the committed fastText files still run")
    return ft


CASES = {
    "softmax": {"loss": "softmax"},
    "softmax-ngrams": {"loss": "softmax", "minn": 2, "maxn": 4, "word_ngrams": 2},
    "hs-words": {"loss": "hs", "word_ngrams": 3, "n_labels": 7},
    "hs-chars": {"loss": "hs", "minn": 1, "maxn": 3, "n_labels": 5},
    "ova": {"loss": "ova", "minn": 3, "maxn": 5, "word_ngrams": 2},
    "ns": {"loss": "ns", "word_ngrams": 2},
}


@pytest.mark.parametrize("quant", [None, "q", "qnorm-cutoff"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equal_to_fasttext_module(tmp_path: Path, fasttext, case: str, quant: str | None
                                  ) -> None:
    """fastText's module reading the same .bin (and the .ftz its quantize writes, with norms
    and a pruned dictionary): the same labels in the same order, the same probabilities."""
    path = write_fasttext(tmp_path / "m.bin", **CASES[case])
    if quant is not None:
        ft = fasttext.load_model(str(path))
        ft.quantize(qnorm=quant != "q", cutoff=280 if quant != "q" else 0, retrain=False,
                    dsub=2)
        path = tmp_path / "m.ftz"
        ft.save_model(str(path))
    ft = fasttext.load_model(str(path))
    model = load_fasttext(path)
    for k, thr in ((1, 0.0), (3, 0.0), (-1, 0.0), (5, 0.15)):
        labels, probs = ft.predict(TEXTS, k=k, threshold=thr)
        got, got_p = model.top_k(TEXTS, k, thr)  # k=-1: every label, as fastText's
        same_as(labels, probs, got, got_p)


def test_quantized_output_equal_to_fasttext_module(tmp_path: Path, fasttext) -> None:
    """-qout: the output matrix product-quantized with norms (256 labels at least)."""
    path = write_fasttext(tmp_path / "m.bin", n_labels=260, word_ngrams=2, dim=4)
    ft = fasttext.load_model(str(path))
    ft.quantize(qnorm=True, qout=True, retrain=False, dsub=2)
    ft.save_model(str(tmp_path / "m.ftz"))
    ft = fasttext.load_model(str(tmp_path / "m.ftz"))
    model = load_fasttext(tmp_path / "m.ftz")
    assert model.output_norms is not None
    for k in (1, 5):
        labels, probs = ft.predict(TEXTS, k=k)
        same_as(labels, probs, *model.top_k(TEXTS, k))


def test_hash_and_subword_rows_equal_fasttext(tmp_path: Path, fasttext) -> None:
    """Character n-gram rows of known and unknown words (UTF-8 characters, '<' '>')."""
    path = write_fasttext(tmp_path / "m.bin", minn=1, maxn=4)
    ft = fasttext.load_model(str(path))
    model = load_fasttext(path)
    for word in ["good", "naïve", "日本", "unseen", "wörd", "a"]:
        ids = ft.get_subwords(word)[1].tolist()
        assert model.rows(word)[:len(ids)] == ids, word
    # a lone surrogate (which the fasttext module cannot take) is read as its
    # "surrogatepass" bytes, the bytes fastText reads from a file, not a UnicodeEncodeError
    assert len(model.rows("a \ud800b")) == len(model.rows("a \u0800b"))
    assert model.word_vectors(["\ud800"]).shape == (1, 6)


# ---------------------------------------------------------------------- bad files
@pytest.mark.parametrize("version", [10, 13])
def test_unsupported_version(tmp_path: Path, version: int) -> None:
    path = write_fasttext(tmp_path / "m.bin", version=version)
    with pytest.raises(ModelFileError, match=f"format version {version}; this reader reads "
                                             "versions 11, 12"):
        load_fasttext(path)


def test_version_11_has_no_char_ngrams(tmp_path: Path) -> None:
    """fastText reads a version-11 supervised model with maxn = 0, whatever the file says."""
    old = load_fasttext(write_fasttext(tmp_path / "a.bin", version=11, minn=2, maxn=4))
    new = load_fasttext(write_fasttext(tmp_path / "b.bin", version=12))
    assert old.args is not None and old.args.maxn == 0
    np.testing.assert_array_equal(old.scores(TEXTS), new.scores(TEXTS))


def test_word_vector_model_reads_and_refuses_what_needs_labels(tmp_path: Path,
                                                              capsys) -> None:
    """A skipgram/cbow model loads, with no labels (nlabels 0) or with the label-prefixed
    tokens of its text; predict, predict-prob, test, test-label, quantize and the Python
    prediction methods refuse it with one line naming what it is and what takes it."""
    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    (tmp_path / "in.txt").write_text("__label__0 good film\n")
    for kind, name, labels in ((2, "skipgram", []), (1, "cbow", ["__label__x"])):
        path = write_fasttext(tmp_path / f"{name}.bin", model=kind, loss="ns", minn=2, maxn=4,
                              labels=labels)
        model = load_model(path)
        assert isinstance(model, FastTextModel) and not model.is_classifier
        assert model.labels == labels and model.output_matrix.shape == (len(WORDS), 6)
        assert model.word_vectors(["good", "unseen"]).shape == (2, 6)
        message = (rf"{name}.bin is a fastText word-vector model \(-model {name}\), not a "
                   r"classifier: it has no labels, so {} cannot run on it\. Its vectors are "
                   r"read by print-word-vectors, print-sentence-vectors, print-ngrams, nn, "
                   r"analogies and dump")
        for call, what in ((lambda m: m.predict("good film"), "predict"),
                           (lambda m: m.top_k(["good film"]), "top_k"),
                           (lambda m: m.scores(["good film"]), "scores"),
                           (lambda m: m.estimator.predict_proba(m.vectorizer.transform(["a"])),
                            "predict_proba")):
            with pytest.raises(ModelFileError, match=message.format(what)):
                call(model)
        for argv in (["predict", str(path), str(tmp_path / "in.txt")],
                     ["predict-prob", str(path), str(tmp_path / "in.txt"), "-1"],
                     ["test", str(path), str(tmp_path / "in.txt")],
                     ["test-label", str(path), str(tmp_path / "in.txt")],
                     ["quantize", str(path), "-o", str(tmp_path / "q.ll")]):
            assert main(argv) == 1
            out = capsys.readouterr()
            assert out.out == "" and out.err.count("\n") == 1, argv
            what = {"predict-prob": "predict"}.get(argv[0], argv[0])
            assert re.search(message.format(what), out.err), argv
        assert not (tmp_path / "q.ll").exists()


def test_word_vector_model_sentence_vector_is_the_mean_of_unit_word_vectors(
        tmp_path: Path) -> None:
    """fastText's unsupervised getSentenceVector: the line's words (split at ASCII whitespace,
    `</s>` and labels words too) each scaled to length 1, averaged; a word with a zero
    vector (unknown, no n-gram) is left out, a line of none is zeros."""
    model = load_fasttext(write_fasttext(tmp_path / "m.bin", model=2, loss="ns", n_labels=1))
    words = model.word_vectors(["good", "</s>", "__label__0", "film"])
    unit = words / np.linalg.norm(words, axis=1, keepdims=True)
    got = model.sentence_vectors(["good </s> __label__0\tfilm unseen", "unseen", ""])
    np.testing.assert_allclose(got[0], unit.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1:], 0)


def test_word_vector_model_files_checked_as_classifiers(tmp_path: Path) -> None:
    """A word-vector model's output has a row per word, a classifier's a row per label (and at
    least one label); version 11 keeps a word-vector model's character n-grams, as fastText
    does (it drops only a version-11 classifier's)."""
    data = write_fasttext(tmp_path / "m.bin", model=2, loss="ns", n_labels=0).read_bytes()
    for cut in (60, len(data) - 5):
        (tmp_path / "cut.bin").write_bytes(data[:cut])
        with pytest.raises(ModelFileError, match=r"is truncated: .* offset \d+"):
            load_fasttext(tmp_path / "cut.bin")
    wrong = bytearray(write_fasttext(tmp_path / "sup.bin").read_bytes())
    wrong[8 + 7 * 4:8 + 8 * 4] = struct.pack("<i", 2)  # -model skipgram: 4 label rows
    (tmp_path / "wrong.bin").write_bytes(bytes(wrong))
    with pytest.raises(ModelFileError, match=r"13 output rows \(-model skipgram\)"):
        load_fasttext(tmp_path / "wrong.bin")
    none = bytearray(data)
    none[8 + 7 * 4:8 + 8 * 4] = struct.pack("<i", 3)  # supervised without labels
    (tmp_path / "none.bin").write_bytes(bytes(none))
    with pytest.raises(ModelFileError, match="with 13 words and 0 labels"):
        load_fasttext(tmp_path / "none.bin")
    old = load_fasttext(write_fasttext(tmp_path / "v11.bin", model=1, loss="ns", version=11,
                                       minn=2, maxn=4, n_labels=0))
    assert old.args is not None and old.args.maxn == 4 and len(old.subwords("good")[0]) > 1


@pytest.mark.parametrize("cut", [6, 40, 80, 120, 300, -7, -1])
def test_truncated_file_names_the_offset(tmp_path: Path, cut: int, capsys) -> None:
    """A truncated file: ModelFileError naming the offset; `predict` writes nothing."""
    from lookuplinear.cli import main

    data = write_fasttext(tmp_path / "full.bin", minn=2, maxn=3).read_bytes()
    path = tmp_path / "m.bin"
    path.write_bytes(data[:cut])
    with pytest.raises(ModelFileError, match=r"is truncated: .* offset \d+"):
        load_fasttext(path)
    (tmp_path / "in.txt").write_text("good film\n")
    assert main(["predict", str(path), str(tmp_path / "in.txt")]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "offset" in out.err


def test_damaged_content_refused(tmp_path: Path) -> None:
    data = bytearray(write_fasttext(tmp_path / "m.bin").read_bytes())
    data[8 + 56 + 28 + len(b'good\0') + 8] = 1  # the first word's type byte: a label
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="dictionary entry 0 has type 1"):
        load_fasttext(tmp_path / "bad.bin")
    (tmp_path / "long.bin").write_bytes((tmp_path / "m.bin").read_bytes() + b"\0")
    with pytest.raises(ModelFileError, match="1 bytes after the output matrix"):
        load_fasttext(tmp_path / "long.bin")


def test_predict_prints_a_line_for_every_input_line(tmp_path: Path, fasttext, capsys) -> None:
    """Blank and whitespace-only lines get a prediction too (fastText reads them as `</s>`),
    so that output line i answers input line i."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin")
    lines = ["good film", "", "bad plot", "   \t", "__label__1", "ok"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    assert main(["predict", str(path), str(tmp_path / "in.txt"), "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [" ".join(ft.predict(t, k=2)[0])
                                                    for t in lines]


@pytest.mark.parametrize("command", [["predict"], ["predict-prob"], ["predict", "--prob"]])
def test_predict_of_no_line_prints_nothing(tmp_path: Path, capsys, monkeypatch,
                                           command: list[str]) -> None:
    """An empty input (a pipeline whose grep matched nothing) gets no prediction and exit
    status 0, as fastText's predict loop ends at the end of its input."""
    import io

    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin")
    (tmp_path / "empty.txt").write_bytes(b"")
    assert main([*command, str(path), str(tmp_path / "empty.txt")]) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"))
    assert main([*command, str(path), "-"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("case", ["softmax-ngrams", "hs-chars"])
def test_word_and_sentence_vectors_equal_fasttext(tmp_path: Path, fasttext, case: str,
                                                  capsys, monkeypatch) -> None:
    """`word_vectors` / `sentence_vectors` and `print-word-vectors` / `print-sentence-vectors`
    on a fastText file: its module's `get_word_vector` / `get_sentence_vector`."""
    import io

    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    path = write_fasttext(tmp_path / "m.bin", **CASES[case])
    ft = fasttext.load_model(str(path))
    model = load_model(path)
    words = ["good", "naïve", "日本", "unseen", "wörd", "a", "</s>", "__label__1"]
    want = np.array([ft.get_word_vector(w) for w in words])
    np.testing.assert_allclose(model.word_vectors(words), want, rtol=1e-5, atol=1e-6)
    want = np.array([ft.get_sentence_vector(t) for t in TEXTS])
    np.testing.assert_allclose(model.sentence_vectors(TEXTS), want, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(" ".join(words).encode())))
    assert main(["print-word-vectors", str(path)]) == 0
    out = [line.split(" ") for line in capsys.readouterr().out.splitlines()]
    assert [o[0] for o in out] == words
    np.testing.assert_allclose(np.array([o[1:-1] for o in out], float),
                               [ft.get_word_vector(w) for w in words], rtol=1e-4, atol=1e-5)
    lines = [t for t in TEXTS if t]
    monkeypatch.setattr("sys.stdin",  # get_sentence_vector reads the text with its "\n"
                        io.TextIOWrapper(io.BytesIO(("\n".join(lines) + "\n").encode())))
    assert main(["print-sentence-vectors", str(path)]) == 0
    out = [line.split(" ")[:-1] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(np.array(out, float),
                               [ft.get_sentence_vector(t) for t in cli_examples(lines)],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["softmax", "softmax-ngrams", "hs-chars"])
def test_print_ngrams_nn_and_analogies_print_as_fasttext(tmp_path: Path, fasttext, case: str,
                                                         capsys, monkeypatch) -> None:
    """`print-ngrams`, `nn` and `analogies` on a fastText file print what fastText's do: its
    module's `get_subwords` rows (5 digits), `get_nearest_neighbors` and `get_analogies`
    (6 digits, fastText's order; without n-grams an unknown word's zero query ties every
    word, which fastText's heap orders)."""
    import io

    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", **CASES[case])
    ft = fasttext.load_model(str(path))
    for word in ["good", "naïve", "unseen"]:
        assert main(["print-ngrams", str(path), word]) == 0
        names, rows = ft.get_subwords(word)
        assert capsys.readouterr().out == "".join(
            f"{n} " + "".join(f"{float(v):.5g} " for v in ft.get_input_vector(r)) + "\n"
            for n, r in zip(names, rows, strict=True))

    def printed(found: list) -> str:
        return "".join(f"{w} {float(s):g}\n" for s, w in found)

    queries = ["good", "unseen", "日本"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(" ".join(queries).encode())))
    assert main(["nn", str(path), "5"]) == 0
    prompt = "Query word? "
    assert capsys.readouterr().out == prompt + "".join(
        printed(ft.get_nearest_neighbors(q, 5)) + prompt for q in queries)
    # k = -1: every word but the query, as fastText's getNN (it was refused as not positive)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good")))
    assert main(["nn", str(path), "-1"]) == 0
    every = capsys.readouterr().out
    assert every == prompt + printed(ft.get_nearest_neighbors("good", -1)) + prompt
    assert every.count("\n") == len(ft.words) - 1
    triplets = [("good", "bad", "film"), ("unseen", "x", "café")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        "\n".join(" ".join(t) for t in triplets).encode())))
    assert main(["analogies", str(path), "3"]) == 0
    prompt = "Query triplet (A - B + C)? "
    assert capsys.readouterr().out == f"Loading model {path}\n{prompt}" + "".join(
        printed(ft.get_analogies(*t, k=3)) + prompt for t in triplets)


@pytest.mark.parametrize("kind", [1, 2])
def test_word_vector_model_commands_print_as_fasttext(tmp_path: Path, fasttext, kind: int,
                                                      capsys, monkeypatch) -> None:
    """On a cbow (1) / skipgram (2) model: `word_vectors`, `sentence_vectors` and
    print-word-vectors, print-sentence-vectors (a vector per line, `</s>` a word), print-ngrams,
    nn, analogies and dump print what the fasttext module gives: `get_word_vector`,
    `get_sentence_vector` (unsupervised: the mean of the unit word vectors), `get_subwords`,
    `get_nearest_neighbors`, `get_analogies`, its arguments (`model sg`/`cbow`), words and
    matrices."""
    import io

    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    path = write_fasttext(tmp_path / "m.bin", model=kind, loss="ns", minn=2, maxn=4, n_labels=0)
    ft = fasttext.load_model(str(path))
    model = load_model(path)
    words = ["good", "naïve", "日本", "unseen", "</s>", "x"]
    np.testing.assert_allclose(model.word_vectors(words),
                               [ft.get_word_vector(w) for w in words], rtol=1e-5, atol=1e-6)
    lines = ["good film", "bad  </s> movie\tplot", "", "unseen wörd", "café naïve 日本 x"]
    want = [ft.get_sentence_vector(t) for t in lines]
    np.testing.assert_allclose(model.sentence_vectors(lines), want, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(" ".join(words).encode())))
    assert main(["print-word-vectors", str(path)]) == 0
    out = [line.split(" ") for line in capsys.readouterr().out.splitlines()]
    assert [o[0] for o in out] == words
    np.testing.assert_allclose(np.array([o[1:-1] for o in out], float),
                               [ft.get_word_vector(w) for w in words], rtol=1e-4, atol=1e-5)
    monkeypatch.setattr("sys.stdin",
                        io.TextIOWrapper(io.BytesIO(("\n".join(lines) + "\n").encode())))
    assert main(["print-sentence-vectors", str(path)]) == 0
    out = [line.split(" ")[:-1] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(np.array(out, float), want, rtol=1e-4, atol=1e-5)
    for word in ["good", "unseen"]:
        assert main(["print-ngrams", str(path), word]) == 0
        names, rows = ft.get_subwords(word)
        assert capsys.readouterr().out == "".join(
            f"{n} " + "".join(f"{float(v):.5g} " for v in ft.get_input_vector(r)) + "\n"
            for n, r in zip(names, rows, strict=True))

    def printed(found: list) -> str:
        return "".join(f"{w} {float(s):g}\n" for s, w in found)

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good unseen")))
    assert main(["nn", str(path), "4"]) == 0
    assert capsys.readouterr().out == "Query word? " + "".join(
        printed(ft.get_nearest_neighbors(q, 4)) + "Query word? " for q in ["good", "unseen"])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good bad film\n")))
    assert main(["analogies", str(path), "3"]) == 0
    prompt = "Query triplet (A - B + C)? "
    assert capsys.readouterr().out == (f"Loading model {path}\n{prompt}"
                                       + printed(ft.get_analogies("good", "bad", "film", 3))
                                       + prompt)
    assert main(["dump", str(path), "args"]) == 0
    assert capsys.readouterr().out.splitlines()[6:8] == [
        "loss ns", f"model {'sg' if kind == 2 else 'cbow'}"]
    assert main(["dump", str(path), "dict"]) == 0
    got, counts = ft.get_words(include_freq=True)
    assert capsys.readouterr().out.splitlines() == [str(len(got))] + [
        f"{w} {c} word" for w, c in zip(got, counts, strict=True)]
    for option, m in (("input", ft.get_input_matrix()), ("output", ft.get_output_matrix())):
        assert main(["dump", str(path), option]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == f"{m.shape[0]} {m.shape[1]}"
        assert out[1:] == [" ".join(f"{float(v):g}" for v in row) for row in m]


_TRAIN_SKIPGRAM = """
import json, sys
import fasttext
lines = ["the good film was good", "a bad film and a bad plot", "the movie was fine",
         "café naïve 日本 film", "good good bad fine ok", "__label__x the plot"] * 5
with open(sys.argv[1] + ".txt", "w", encoding="utf-8") as f:
    f.write("\\n".join(lines) + "\\n")
m = fasttext.train_unsupervised(sys.argv[1] + ".txt", model="skipgram", dim=10, epoch=1,
                                minCount=1, minn=2, maxn=4, thread=1, bucket=2000, verbose=0)
m.save_model(sys.argv[1] + ".bin")
words = ["good", "naïve", "unseen", "</s>", "__label__x"]
sentences = ["good film", "the bad plot unseen", "", "zz", "good </s> __label__x film"]
json.dump({"words": words, "sentences": sentences,
           "word": [m.get_word_vector(w).tolist() for w in words],
           "sentence": [m.get_sentence_vector(s).tolist() for s in sentences],
           "subwords": [[list(m.get_subwords(w)[0]), m.get_subwords(w)[1].tolist()]
                        for w in words],
           "nn": m.get_nearest_neighbors("good", 5),
           "analogies": m.get_analogies("good", "bad", "film", 3)},
          open(sys.argv[1] + ".json", "w", encoding="utf-8"))
"""


def test_skipgram_trained_by_fasttext(tmp_path: Path, fasttext, capsys, monkeypatch) -> None:
    """A skipgram model fastText trains (in a subprocess: its training can give NaN once torch
    is imported), with `</s>` in its dictionary and a label token in its text (nlabels 1):
    the word and sentence vectors, subwords, nn and analogies of the fasttext module."""
    import io
    import subprocess
    import sys

    from lookuplinear.cli import main

    stem = tmp_path / "vecs"
    subprocess.run([sys.executable, "-c", _TRAIN_SKIPGRAM, str(stem)], check=True,
                   timeout=60, capture_output=True)
    ref = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    model = load_fasttext(stem.with_suffix(".bin"))
    assert model.labels == ["__label__x"] and not model.is_classifier
    assert np.isfinite(ref["word"]).all() and np.isfinite(ref["sentence"]).all()
    np.testing.assert_allclose(model.word_vectors(ref["words"]), ref["word"], rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(model.sentence_vectors(ref["sentences"]), ref["sentence"],
                               rtol=1e-5, atol=1e-7)
    assert [list(model.subwords(w))[::-1] for w in ref["words"]] == [
        [names, ids] for names, ids in ref["subwords"]]
    path = str(stem.with_suffix(".bin"))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good")))
    assert main(["nn", path, "5"]) == 0
    assert capsys.readouterr().out == "Query word? " + "".join(
        f"{w} {s:g}\n" for s, w in ref["nn"]) + "Query word? "
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"good bad film")))
    assert main(["analogies", path, "3"]) == 0
    prompt = "Query triplet (A - B + C)? "
    assert capsys.readouterr().out == f"Loading model {path}\n{prompt}" + "".join(
        f"{w} {s:g}\n" for s, w in ref["analogies"]) + prompt


@pytest.mark.parametrize("k", ["-1", "3"])
def test_test_counts_the_labels_predict_prints(tmp_path: Path, fasttext, capsys,
                                               k: str) -> None:
    """`test` on a -loss hs model: fastText's search drops labels under log(1e-5), in `test`
    as in `predict`; N, P@k and R@k are fastText's."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", loss="hs", n_labels=7, dim=12)
    texts = [t for t in TEXTS if t and not t.startswith("__label__")]
    lines = [f"__label__{i % 7} {t}" for i, t in enumerate(texts * 3)]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    n, p, r = fasttext.load_model(str(path)).test(str(tmp_path / "t.txt"), k=int(k))
    assert main(["test", str(path), str(tmp_path / "t.txt"), k]) == 0
    assert capsys.readouterr().out.split() == ["N", str(n), f"P@{k}", f"{p:.3g}", f"R@{k}",
                                               f"{r:.3g}"]


def test_test_reads_labels_with_the_models_prefix(tmp_path: Path, fasttext, capsys) -> None:
    """A model trained with -label '#': `test` (and `predict`) read '#' tokens as its labels,
    as fastText's test does, without --label."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", label="#", n_labels=3)
    texts = [t for t in TEXTS if t]
    lines = [f"#{i % 3} {t}" for i, t in enumerate(texts)]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    n, p, r = ft.test(str(tmp_path / "t.txt"), k=2)
    assert main(["test", str(path), str(tmp_path / "t.txt"), "2"]) == 0
    assert capsys.readouterr().out.split() == ["N", str(n), "P@2", f"{p:.3g}", "R@2",
                                               f"{r:.3g}"]
    assert main(["predict", str(path), str(tmp_path / "t.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == [ft.predict(t)[0][0]
                                                    for t in cli_examples(lines)]


def test_input_of_a_model_trained_with_another_label_read_as_fasttext(
        tmp_path: Path, fasttext, capsys) -> None:
    """A model trained with -label '#': fastText's file keeps its labels, not '#', so its
    predict and test take a token for a label only when it is one of the model's ('#0');
    '#tag' is a word, an unknown '__label__x' is left out. `predict` prints the fasttext
    module's predictions line by line and `test` its N, P@k and R@k; --label '#' also leaves
    the unknown '#' tokens out, as fastText's -label '#' does."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", label="#", minn=2, maxn=3, word_ngrams=2)
    lines = ["#0 good film", "#tag good film", "#unseen good", "good #1 film", "#1",
             "__label__x good", "good", "#2 #tag bad plot #2"]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    assert main(["predict", str(path), str(tmp_path / "t.txt"), "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [" ".join(ft.predict(t, k=2)[0])
                                                    for t in lines]
    for k in ("1", "-1"):
        n, p, r = ft.test(str(tmp_path / "t.txt"), k=int(k))
        assert main(["test", str(path), str(tmp_path / "t.txt"), k]) == 0
        out, err = capsys.readouterr()
        assert out.split() == ["N", str(n), f"P@{k}", f"{p:.3g}", f"R@{k}", f"{r:.3g}"]
        assert "4 line(s)" in err and "skipped, as fastText's test skips them" in err
    assert main(["predict", str(path), str(tmp_path / "t.txt"), "2", "--label", "#"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == " ".join(ft.predict("good film", k=2)[0])


def test_a_bom_starts_a_token_for_a_fasttext_model_and_is_skipped_for_ours(
        tmp_path: Path, fasttext, capsys) -> None:
    """A UTF-8 byte order mark at the start of INPUT: on a model fastText wrote, `test` and
    `predict` keep it as fastText does ('\\ufeff__label__0' is no label, so fastText's test
    skips that line, and '\\ufeffgood' no known word); on a lookuplinear model it is skipped,
    as `train` skips it."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", n_labels=2, minn=2, maxn=3, word_ngrams=2)
    lines = ["__label__0 good film", "__label__1 bad film", "__label__0 fine"]
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    ft = fasttext.load_model(str(path))
    n, p, r = ft.test(str(bom))
    assert n == len(lines) - 1  # the first line has no label for fastText
    assert main(["test", str(path), str(bom)]) == 0
    assert capsys.readouterr().out.split() == ["N", str(n), "P@1", f"{p:.3g}", "R@1", f"{r:.3g}"]
    starts = tmp_path / "starts.txt"
    starts.write_bytes(b"\xef\xbb\xbfgood film\nbad film\n")
    for file in (bom, starts):
        assert main(["predict-prob", str(path), str(file), "2"]) == 0
        texts = file.read_bytes().decode().splitlines()
        assert texts[0].startswith("\ufeff")
        assert capsys.readouterr().out.splitlines() == [
            " ".join(f"{lab} {float(np.float32(v)):g}" for lab, v in zip(*ft.predict(t, k=2),
                                                                        strict=True))
            for t in texts]
    # the check has teeth: '\ufeffgood' is another token than 'good'
    assert not np.array_equal(ft.predict("\ufeffgood film", k=2)[1],
                              ft.predict("good film", k=2)[1])
    # a model lookuplinear trained: the BOM is skipped, the first line is labelled
    train = tmp_path / "t.txt"
    train.write_text("\n".join(lines * 20) + "\n", encoding="utf-8")
    assert main(["supervised", "-input", str(train), "-output", str(tmp_path / "ours"),
                 "-dim", "4", "-epoch", "2", "-verbose", "0"]) == 0
    assert main(["test", str(tmp_path / "ours.bin"), str(bom)]) == 0
    assert capsys.readouterr().out.split()[:2] == ["N", str(len(lines))]
    assert main(["predict-prob", str(tmp_path / "ours.bin"), str(starts)]) == 0
    with_bom = capsys.readouterr().out
    starts.write_text("good film\nbad film\n", encoding="utf-8")
    assert main(["predict-prob", str(tmp_path / "ours.bin"), str(starts)]) == 0
    assert capsys.readouterr().out == with_bom


def test_bytes_that_are_not_utf8_are_read_as_fasttext_reads_them(
        tmp_path: Path, fasttext, capsysbinary, monkeypatch) -> None:
    """A latin-1 file on a model whose words and labels hold those bytes: `test` gives
    fastText's N, P@k and R@k, `predict` its labels (written back as the same bytes), and the
    vectors are its own (the bytes' character n-grams), where reading U+FFFD would match no
    such word or label and hash other n-grams."""
    import io

    from lookuplinear.cli import main

    words: list[str | bytes] = [*WORDS, b"caf\xe9", b"na\xefve", b"d\xe9j\xe0"]
    labels: list[str | bytes] = [b"__label__a", b"__label__\xe9t\xe9", b"__label__b"]
    path = write_fasttext(tmp_path / "m.bin", words=words, labels=labels, minn=2, maxn=3,
                          word_ngrams=2)
    lines = [b"__label__\xe9t\xe9 caf\xe9 na\xefve", b"__label__a good d\xe9j\xe0 film",
             b"__label__b caf\xe9", b"__label__\xe9t\xe9 bad", b"__label__a na\xefve plot",
             b"__label__\xe9t\xe9 unseen\xff d\xe9j\xe0", b"__label__b good"]
    file = tmp_path / "t.txt"
    file.write_bytes(b"\n".join(lines) + b"\n")
    ft = fasttext.load_model(str(path))
    for k in ("1", "2", "-1"):
        n, p, r = ft.test(str(file), k=int(k))
        assert n == len(lines)
        assert main(["test", str(path), str(file), k]) == 0
        assert capsysbinary.readouterr().out.split() == [
            b"N", str(n).encode(), f"P@{k}".encode(), f"{p:.3g}".encode(),
            f"R@{k}".encode(), f"{r:.3g}".encode()]
    assert main(["predict", str(path), str(file), "2"]) == 0
    want = [b" ".join(lab.encode("utf-8", "surrogateescape")
                      for _, lab in ft.f.predict(line + b"\n", 2, 0.0, "surrogateescape"))
            for line in lines]
    assert capsysbinary.readouterr().out.splitlines() == want
    assert b"__label__\xe9t\xe9" in b" ".join(want)
    tokens = [b"caf\xe9", b"d\xe9j\xe0", b"unseen\xff"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b" ".join(tokens))))
    assert main(["print-word-vectors", str(path)]) == 0
    out = [line.split(b" ") for line in capsysbinary.readouterr().out.splitlines()]
    assert [o[0] for o in out] == tokens
    import fasttext_pybind

    want_v = []
    for t in tokens:  # the fasttext module's get_word_vector, on bytes
        vec = fasttext_pybind.Vector(6)
        ft.f.getWordVector(vec, t)
        want_v.append(np.array(vec))
    np.testing.assert_allclose(np.array([o[1:-1] for o in out], float), want_v, rtol=1e-4,
                               atol=1e-5)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n")))
    assert main(["print-sentence-vectors", str(path)]) == 0
    out = [line.split(b" ")[:-1] for line in capsysbinary.readouterr().out.splitlines()]
    want_v = []
    for line in lines:
        vec = fasttext_pybind.Vector(6)
        ft.f.getSentenceVector(vec, line + b"\n")
        want_v.append(np.array(vec))
    np.testing.assert_allclose(np.array(out, float), want_v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("k", "threshold"), [("1", "0"), ("2", "0"), ("-1", "0"),
                                              ("2", "0.2"), ("1", "0.99")])
def test_test_counts_as_fasttexts_test(tmp_path: Path, fasttext, capsys, k: str,
                                       threshold: str) -> None:
    """`test` on a fastText model gives fastText's N, P@k and R@k: a label the model does not
    know is no label, a line without a known label is skipped (not refused), a repeated label
    counts twice among the true ones, and a '</s>' token starts a new example."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", n_labels=3, minn=2, maxn=3, word_ngrams=2)
    lines = ["__label__0 good film", "__label__1 __label__zz bad movie __label__zz",
             "__label__zz plot", "ok great", "", "__label__2 x __label__2 film",
             "good film __label__1 </s> __label__0 fine", "__label__0 </s>",
             "__label__1 café naïve 日本", "__label__2 __label__0 awful"]
    (tmp_path / "t.txt").write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    n, p, r = fasttext.load_model(str(path)).test(str(tmp_path / "t.txt"), int(k),
                                                  float(threshold))
    assert main(["test", str(path), str(tmp_path / "t.txt"), k, threshold]) == 0
    assert capsys.readouterr().out.split() == ["N", str(n), f"P@{k}", f"{p:.3g}",
                                               f"R@{k}", f"{r:.3g}"]
    (tmp_path / "none.txt").write_text("good film\n__label__zz bad\n", encoding="utf-8")
    assert fasttext.load_model(str(path)).test(str(tmp_path / "none.txt"))[0] == 0
    assert main(["test", str(path), str(tmp_path / "none.txt")]) == 0
    assert capsys.readouterr().out.split() == ["N", "0", "P@1", "nan", "R@1", "nan"]


@pytest.mark.parametrize(("k", "threshold"), [("1", "0"), ("2", "0.2")])
def test_test_label_prints_each_labels_scores_as_fasttext(tmp_path: Path, fasttext, capsys,
                                                          k: str, threshold: str) -> None:
    """`test-label`: a line per label of the model, in its order, with the F1-score,
    precision and recall the fasttext module's test_label gives (6 decimals, '--------' where
    undefined: a label no example has), then N, P@k and R@k with 3 decimals, as fastText's
    `test-label` prints them."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", n_labels=4, minn=2, maxn=3, word_ngrams=2)
    lines = ["__label__0 good film", "__label__1 __label__zz bad movie __label__1",
             "ok great", "__label__2 x __label__2 film", "good film __label__1 </s> __label__0",
             "__label__1 café naïve 日本", "__label__2 __label__0 awful"]
    (tmp_path / "t.txt").write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    n, p, r = ft.test(str(tmp_path / "t.txt"), int(k), float(threshold))
    scores = ft.test_label(str(tmp_path / "t.txt"), int(k), float(threshold))

    def shown(v: float) -> str:
        return "--------" if np.isnan(v) else f"{v:.6f}"

    want = [f"F1-Score : {shown(s['f1score'])}  Precision : {shown(s['precision'])}  "
            f"Recall : {shown(s['recall'])}   {lab}"
            for lab, s in ((lab, scores[lab]) for lab in ft.get_labels())]
    want += [f"N\t{n}", f"P@{k}\t{p:.3f}", f"R@{k}\t{r:.3f}"]
    assert main(["test-label", str(path), str(tmp_path / "t.txt"), k, threshold]) == 0
    assert capsys.readouterr().out.splitlines() == want
    assert "Recall : --------   __label__3" in want[3]


def test_dump_prints_args_dict_and_matrices_as_fasttext(tmp_path: Path, fasttext,
                                                        capsys) -> None:
    """`dump MODEL args|dict|input|output` on a fastText model: fastText's Args::dump lines,
    the dictionary's count then `entry count word|label` lines, and `rows cols` then the
    matrix's rows (%g values), the numbers the fasttext module reads; a quantized model has
    no matrix to dump."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", loss="ova", minn=2, maxn=3, dim=2)
    ft = fasttext.load_model(str(path))
    assert main(["dump", str(path), "args"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "dim 2", "ws 5", "epoch 5", "minCount 1", "neg 5", "wordNgrams 1", "loss one-vs-all",
        "model sup", "bucket 300", "minn 2", "maxn 3", "lrUpdateRate 100", "t 0.0001"]
    assert main(["dump", str(path), "dict"]) == 0
    words, word_counts = ft.get_words(include_freq=True)
    labels, label_counts = ft.get_labels(include_freq=True)
    assert capsys.readouterr().out.splitlines() == [str(len(words) + len(labels))] + [
        f"{w} {c} {kind}" for ws, cs, kind in ((words, word_counts, "word"),
                                               (labels, label_counts, "label"))
        for w, c in zip(ws, cs, strict=True)]
    for option, m in (("input", ft.get_input_matrix()), ("output", ft.get_output_matrix())):
        assert main(["dump", str(path), option]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == f"{m.shape[0]} {m.shape[1]}" and len(out) == m.shape[0] + 1
        assert out[1:] == [" ".join(f"{float(v):g}" for v in row) for row in m]
    ft.quantize(retrain=False, dsub=1)
    ft.save_model(str(tmp_path / "m.ftz"))
    assert main(["dump", str(tmp_path / "m.ftz"), "input"]) == 1
    assert "quantized" in capsys.readouterr().err
    assert main(["dump", str(tmp_path / "m.ftz"), "args"]) == 0


def test_predict_prob_prints_probabilities_as_fasttext(tmp_path: Path, fasttext,
                                                       capsys) -> None:
    """predict-prob writes each probability as fastText's C++ ostream does (6 significant
    digits, 1.02239e-05), not with fixed decimals."""
    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", loss="hs", n_labels=7)
    texts = [t for t in TEXTS if t]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    assert main(["predict-prob", str(path), str(tmp_path / "in.txt"), "-1"]) == 0
    out = capsys.readouterr().out.splitlines()
    want = [" ".join(f"{n} {float(np.float32(v)):g}" for n, v in zip(*ft.predict(t, k=-1),
                                                                     strict=True))
            for t in cli_examples(texts)]
    assert out == want
    assert any("e-" in line for line in out)  # a small probability in exponent form


def test_a_diverged_hs_model_predicts_as_fasttext_without_a_warning(tmp_path: Path, fasttext,
                                                                    capsys) -> None:
    """An hs model whose logits pass +-709 (fastText's expf is inf there, its sigmoid 0 or 1):
    predict-prob prints fastText's labels and probabilities, and no numpy overflow warning."""
    import warnings

    from lookuplinear.cli import main

    path = write_fasttext(tmp_path / "m.bin", loss="hs", n_labels=7)
    data = bytearray(path.read_bytes())
    cut = len(data) - 7 * 6 * 4  # the output matrix: the last rows x dim float32 values
    data[cut:] = (np.frombuffer(bytes(data[cut:]), "<f4") * 1e4).astype("<f4").tobytes()
    path.write_bytes(bytes(data))
    texts = [t for t in TEXTS if t]
    model = load_fasttext(path)
    logits = model.logits(model.hidden(texts)[0])
    assert logits.min() < -709 and logits.max() > 709
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    ft = fasttext.load_model(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["predict-prob", str(path), str(tmp_path / "in.txt"), "-1"]) == 0
    out = capsys.readouterr()
    want = [" ".join(f"{n} {float(np.float32(v)):g}" for n, v in zip(*ft.predict(t, k=-1),
                                                                     strict=True))
            for t in cli_examples(texts)]
    assert out.out.splitlines() == want and "Warning" not in out.err


def test_file_tokens_split_where_fasttext_splits(tmp_path: Path, fasttext) -> None:
    """read_fasttext splits tokens where fastText does: a no-break space or U+3000 is inside
    a token, so '__label__1\\u00a0bad' is one (label) token, as fastText's getLine reads it."""
    from lookuplinear.text import read_fasttext

    ft = fasttext.load_model(str(write_fasttext(tmp_path / "m.bin")))
    lines = ["__label__1\u00a0bad film", "__label__2 good\u3000film\x1cok \x85x", "a\tb\vc\fd"]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = read_fasttext(tmp_path / "t.txt")
    for line, labels, text in zip(lines, data.labels, data.texts, strict=True):
        words, want = ft.get_line(line)  # its known labels; its words, then "</s>"
        assert [lab for lab in labels if lab in ft.labels] == want
        assert text.split(" ") == words[:-1]
    assert data.labels[0] == ["__label__1\u00a0bad"]  # one token: a label, unknown


def test_train_keeps_the_tokens_fasttext_reads(tmp_path: Path, fasttext) -> None:
    """`supervised` trains on fastText's tokens: a no-break space, U+3000, U+2028, U+0085 or
    \\x1c inside a word is part of it (the vectorizer does not split the line again at Unicode
    whitespace), in the model's vocabulary and in what `predict` reads."""
    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    ft = fasttext.load_model(str(write_fasttext(tmp_path / "ft.bin")))
    lines = ["__label__a new\u00a0york rocks", "__label__b x\u3000y z",
             "__label__a p\u2028q r\x85s", "__label__b s\x1ct u\x1fv w"] * 3
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["supervised", "-input", str(tmp_path / "t.txt"), "-output", str(tmp_path / "m"),
                 "-dim", "4", "-epoch", "1", "-verbose", "0", "-minn", "2", "-maxn", "3",
                 "-wordNgrams", "2", "-bucket", "100"]) == 0
    words = {w for line in lines for w in ft.get_line(line)[0][:-1]}  # without "</s>"
    lazy = load_model(tmp_path / "m.bin", lazy=True)  # predict's transform, without sklearn
    features = lazy._file.features()
    vectorizer = load_model(tmp_path / "m.bin").vectorizer
    assert set(vectorizer.vocabulary_) == set(features.vocabulary) == words
    vocab = features.vocabulary
    for transform in (vectorizer.transform, features.transform):
        X = transform(["new\u00a0york x\u3000y"])
        assert set(X[0, : len(vocab)].nonzero()[1]) == {vocab["new\u00a0york"], vocab["x\u3000y"]}


def test_supervised_takes_the_arguments_and_lines_fasttext_takes(tmp_path: Path, fasttext,
                                                                 capsys) -> None:
    """-minCount 0 (every word), -bucket 0 without n-grams and lines without a label (skipped
    in training, their words in the vocabulary) train, as fastText's supervised trains on
    them: the same words and labels."""
    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    lines = ["__label__a good fine film", "no label here", "__label__b bad awful plot",
             "__label__a good", "just words"] * 3
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["supervised", "-input", str(path), "-output", str(tmp_path / "m"), "-dim",
                 "4", "-epoch", "1", "-minCount", "0", "-bucket", "0"]) == 0
    assert ("6 of 15 examples have no label (first: line 2) and are skipped"
            in capsys.readouterr().err)
    model = load_model(tmp_path / "m.bin")
    # epoch=0: fastText's dictionary without its training, which on so few lines often stops
    # with "Encountered NaN." (the module's, at random); the words and labels are the dictionary's
    for _ in range(20):
        try:
            ft = fasttext.train_supervised(input=str(path), dim=4, epoch=0, minCount=0,
                                           bucket=0, verbose=0, thread=1)
        except RuntimeError:
            continue
        assert set(model.vectorizer.vocabulary_) == set(ft.words) - {"</s>"}
        assert model.labels == sorted(ft.labels)
        break
    else:
        pytest.fail("fastText's training stopped with 'Encountered NaN' 20 times")


def test_softmax_on_lines_with_several_labels_keeps_every_label(tmp_path: Path,
                                                                 fasttext) -> None:
    """`-loss softmax` on lines with two labels: every label is in the model (the second one
    was dropped) and a text of those lines splits its probability between them, as fastText's
    model (trained on one label drawn per line and epoch) does."""
    from lookuplinear.cli import main
    from lookuplinear.sklearn import load_model

    lines = ["__label__sport __label__football goal match team",
             "__label__politics vote election party"] * 100
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["supervised", "-input", str(path), "-output", str(tmp_path / "m"), "-loss",
                 "softmax", "-dim", "4", "-epoch", "10", "-verbose", "0"]) == 0
    model = load_model(tmp_path / "m.bin")
    assert model.labels == ["__label__football", "__label__politics", "__label__sport"]
    got = dict(zip(*model.predict("goal match", k=-1), strict=True))
    # the two labels of those lines share nearly all the probability, about evenly, as the
    # expectation of fastText's draw gives (its own model's split varies with its random
    # draws, from even to one label only: not asked)
    assert got["__label__sport"] + got["__label__football"] > 0.9
    assert abs(got["__label__sport"] - got["__label__football"]) < 0.3
    for _ in range(20):  # epoch=0: fastText's labels, without its training (see above)
        try:
            ft = fasttext.train_supervised(input=str(path), loss="softmax", dim=4, epoch=0,
                                           lr=0.1, verbose=0, thread=1)
        except RuntimeError:
            continue
        assert sorted(ft.labels) == model.labels  # every label kept, as fastText keeps it
        break


def test_one_string_where_a_list_is_taken_is_refused(tmp_path: Path) -> None:
    """``top_k``, ``scores``, ``sentence_vectors`` and ``word_vectors`` take lists: one
    ``str`` (or ``bytes``) is refused naming the fix, where it was read one character at a
    time (``top_k("good film")`` answered for 9 one-character texts)."""
    from lookuplinear.errors import InputTypeError

    classifier = load_fasttext(DATA / "softmax.bin")
    for call in (lambda: classifier.top_k("good film"), lambda: classifier.scores("good film"),
                 lambda: classifier.sentence_vectors(b"good film"),
                 lambda: classifier.word_vectors("good")):
        with pytest.raises(InputTypeError, match=r"takes a list of (texts|words), got one"):
            call()
    assert classifier.top_k(["good film"])[0] == classifier.top_k(("good film",))[0]
