"""fastText-style features, labelled text files, P@k/R@k, model files and the train / predict /
test commands, on small files the tests write."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("sklearn")
pytest.importorskip("safetensors")

from forms import BACKENDS

from lookuplinear import InputTypeError, InputValueError, LookupLinearError, ModelFileError
from lookuplinear.cli import main
from lookuplinear.ops import _ngrams
from lookuplinear.sklearn import LookupClassifier, LookupRegressor, load_model, save_model
from lookuplinear.text import FastTextVectorizer, precision_recall_at_k, read_fasttext, read_table
from lookuplinear.text._features import TextFeatures

#: tests of a mechanism on a few rows and epochs, where the model learns nothing and fit says so
NOT_LEARNING = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

LINES = [
    "__label__pos a great film , truly great",
    "__label__neg an awful film , truly bad",
    "__label__pos great acting and a fine story",
    "__label__neg bad acting and an awful story",
    "__label__pos a fine and great story",
    "__label__neg bad and boring",
]


@pytest.fixture
def ft_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.txt"
    path.write_text("\n".join(LINES * 5) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.csv"
    rows = ["id,review,sentiment"]
    for i, line in enumerate(LINES * 5):
        label, text = line.split(" ", 1)
        rows.append(f'{i},"{text}",{label.removeprefix("__label__")}')
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------- features
def test_vectorizer_counts_words_and_hashed_ngrams() -> None:
    vec = FastTextVectorizer(word_ngrams=2, bucket=64)
    X = vec.fit_transform(["b a b", "a c"])
    assert X.shape == (2, 3 + 64) and X.dtype == np.float32 and sp.issparse(X)
    a, b = vec.vocabulary_["a"], vec.vocabulary_["b"]
    assert X[0, a] == 1 and X[0, b] == 2
    assert X[0, 3:].sum() == 2 and X[1, 3:].sum() == 1  # "b a", "a b" / "a c"
    words_only = FastTextVectorizer().fit(["b a b", "a c"])
    assert words_only.n_features_out_ == 3


def test_vectorizer_min_count_char_ngrams_and_config_round_trip() -> None:
    texts = ["the cat", "the dog", "the cat sat"]
    vec = FastTextVectorizer(min_count=2, minn=2, maxn=3, bucket=128).fit(texts)
    assert sorted(vec.vocabulary_) == ["cat", "the"]
    again = FastTextVectorizer.from_config(json.loads(json.dumps(vec.get_config())))
    diff = again.transform([*texts, "unseen words"]) - vec.transform([*texts, "unseen words"])
    assert diff.nnz == 0
    assert vec.transform(["zzz"])[0, :2].sum() == 0  # unknown word: only its char n-grams
    with pytest.raises(InputValueError, match="min_count"):
        FastTextVectorizer(min_count=10).fit(texts)


@NOT_LEARNING
def test_minn_zero_and_minn_above_maxn_are_fasttexts_lengths(ft_file: Path, tmp_path: Path
                                                            ) -> None:
    """As fastText takes them: -minn 0 is -minn 1 (n-grams of 1 to maxn characters), and
    -minn above -maxn gives no character n-gram (the bucket columns stay), in the vectorizer
    and in `train`/`supervised`."""
    texts = ["good film", "bad movie", "good good plot"]
    one = FastTextVectorizer(minn=1, maxn=3, bucket=64).fit(texts).transform(texts)
    zero = FastTextVectorizer(minn=0, maxn=3, bucket=64).fit(texts).transform(texts)
    assert (one != zero).nnz == 0 and one[:, 5:].nnz > 0
    none = FastTextVectorizer(minn=4, maxn=3, bucket=64).fit(texts).transform(texts)
    words = FastTextVectorizer(bucket=64).fit(texts).transform(texts)
    assert none.shape == (3, 5 + 64) and none[:, 5:].nnz == 0
    assert (none[:, :5] != words).nnz == 0
    for minn, maxn in (("0", "3"), ("4", "3")):
        assert main(["supervised", "-input", str(ft_file), "-output", str(tmp_path / "m"),
                     "-minn", minn, "-maxn", maxn, "-epoch", "1", "-bucket", "64", "-dim", "4",
                     "-verbose", "0"]) == 0
        vec = load_model(tmp_path / "m.bin").vectorizer
        assert (vec.minn, vec.maxn) == (int(minn), int(maxn))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
@example(b"")
@example(b"\xff\xfe\xfd")  # bytes >= 0x80 in the tail
def test_murmurhash_equals_scikit_learns(data: bytes) -> None:
    from sklearn.utils import murmurhash3_32

    assert _ngrams.murmur(data) == murmurhash3_32(data, seed=0)


@pytest.mark.parametrize("bucket", [1, 2, 7, 1000, 2_000_000, 2**31 - 1])
def test_bucket_of_every_hash_as_feature_hasher_defines_it(bucket: int) -> None:
    """``abs(h) % bucket``, and ``abs(-2**31)`` taken as ``2**31`` (scikit-learn's
    ``_hashing_fast``); -2**31 is hard to reach through a string, so it is checked here."""
    for h in (0, 1, -1, 12345, -12345, 2**31 - 1, -(2**31) + 1):
        assert _ngrams.bucket(h, bucket) == abs(h) % bucket
    assert _ngrams.bucket(-(2**31), bucket) == (2**31) % bucket


WORDS = st.text(st.characters(blacklist_categories=["Zs", "Zl", "Zp", "Cc", "Cs"]),
                min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(st.builds(str.join, st.sampled_from([" ", "\t", "\n ", "\u00a0", "\u3000",
                                                        "\x1c"]),
                             st.lists(st.sampled_from(["a", "b", "été", "日本", "🙂x"]) | WORDS,
                                      max_size=8)), min_size=1, max_size=8),
    word_ngrams=st.integers(1, 4),
    bucket=st.sampled_from([1, 3, 64, 2_000_000]),
)
def test_vectorizer_equals_scikit_learn_on_any_text(texts: list[str], word_ngrams: int,
                                                    bucket: int) -> None:
    """Any words (multi-byte UTF-8, repeats, empty texts, one bucket for every n-gram): the
    words' counts equal CountVectorizer's and the n-grams' HashingVectorizer's, canonical CSR."""
    from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer

    vec = FastTextVectorizer(word_ngrams=word_ngrams, bucket=bucket)
    try:
        X = vec.fit_transform(texts)
    except InputValueError:  # every text empty: no vocabulary, as CountVectorizer says
        assert not "".join(texts).split()
        return
    assert X.has_canonical_format and X.dtype == np.float32
    expect = [CountVectorizer(token_pattern=r"\S+", lowercase=False,
                              vocabulary=vec.vocabulary_).transform(texts)]
    if word_ngrams > 1:
        expect.append(HashingVectorizer(token_pattern=r"\S+", lowercase=False, norm=None,
                                        ngram_range=(2, word_ngrams), n_features=bucket,
                                        alternate_sign=False).transform(texts))
    assert X.shape == (len(texts), vec.n_features_out_)
    assert abs(X - sp.hstack(expect)).max() == 0
    words = [w for t in texts for w in t.split()]
    assert sorted(vec.vocabulary_) == sorted(set(words)) == list(vec.vocabulary_)
    for text in texts[:2]:  # one n-gram's bucket, by itself
        w = text.split()
        if word_ngrams > 1 and len(w) >= 2:
            column = len(vec.vocabulary_) + _ngrams.ngram_column(w[:2], bucket)
            assert X[texts.index(text), column] >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_vectorizer_hashes_a_lone_surrogate_as_hash_ids_does(backend: str) -> None:
    """A lone surrogate, which strict UTF-8 cannot encode, is part of a word as for
    CountVectorizer; an n-gram holding one (word or character n-gram) goes to the bucket
    ``hash_ids`` gives its string (its "surrogatepass" bytes), on both kernel backends."""
    from sklearn.feature_extraction.text import CountVectorizer

    from lookuplinear import hash_ids
    from lookuplinear.ops import use_backend
    from lookuplinear.text._features import _char_wb_ngrams

    texts = ["a \ud800b c", "\udfff", "a"]
    words = CountVectorizer(token_pattern=r"\S+", lowercase=False).fit(texts)
    with use_backend(backend):
        vec = FastTextVectorizer(word_ngrams=2, bucket=97)
        X = vec.fit_transform(texts)
        chars = FastTextVectorizer(minn=1, maxn=3, bucket=97).fit_transform(texts)
    n = len(vec.vocabulary_)
    assert vec.vocabulary_ == words.vocabulary_
    assert (X[:, :n] != words.transform(texts)).nnz == 0

    def counts(grams: list[str]) -> list[float]:
        return np.bincount(hash_ids(grams, 97).numpy(), minlength=97).astype(float).tolist()

    assert X[0, n:].toarray()[0].tolist() == counts(["a \ud800b", "\ud800b c"])
    assert _ngrams.ngram_column(["a", "\ud800b"], 97) == hash_ids(["a \ud800b"], 97).item()
    for i, text in enumerate(texts):
        assert chars[i, n:].toarray()[0].tolist() == counts(_char_wb_ngrams(text.split(), 1, 3))


def test_words_split_where_the_token_pattern_splits() -> None:
    """The vectorizer takes a text's words with ``str.split()``: the tokens of its
    ``TOKEN_PATTERN`` (``\\S+``, scikit-learn's ``token_pattern``), every code point tried as a
    separator."""
    import re
    import sys

    from lookuplinear.text._vectorizer import TOKEN_PATTERN

    text = "".join(f"{chr(c)}w{c}" for c in range(sys.maxunicode + 1))
    assert re.findall(TOKEN_PATTERN, text) == text.split()
    assert len(text.split()) > 1  # some code points are whitespace


def test_whitespace_fasttext_keeps_unicode_spaces_inside_tokens() -> None:
    """``whitespace="fasttext"`` splits at fastText's seven characters only: a token with a
    no-break space is one word and its character n-grams are char_wb's of that word; on text
    without other Unicode whitespace it is the default (scikit-learn's) matrix. A configuration
    without the parameter (an older model file) splits as before."""
    from sklearn.feature_extraction import FeatureHasher

    from lookuplinear.text._features import _char_wb_ngrams

    params = {"word_ngrams": 2, "minn": 2, "maxn": 3, "bucket": 97}
    plain = ["the cat\tsat", "a\vdog \f ran\r", "cat  dog"]  # (str.split keeps NUL)
    ft = FastTextVectorizer(**params, whitespace="fasttext")
    assert (ft.fit_transform(plain) != FastTextVectorizer(**params).fit_transform(plain)).nnz == 0
    texts = ["new\u00a0york x\u3000y", "p\u2028q r\x85s s\x1ct"]
    X = FastTextVectorizer(whitespace="fasttext", minn=2, maxn=3, bucket=97).fit_transform(texts)
    vec = FastTextVectorizer(whitespace="fasttext").fit(texts)
    assert sorted(vec.vocabulary_) == sorted(t for text in texts for t in text.split(" "))
    assert len(FastTextVectorizer().fit(texts).vocabulary_) == 9  # str.split(): 9 words
    chars = FeatureHasher(97, input_type="string", alternate_sign=False).transform(
        [_char_wb_ngrams(["new\u00a0york", "x\u3000y"], 2, 3)])
    np.testing.assert_array_equal(X[0, len(vec.vocabulary_):].toarray(), chars.toarray())
    config = vec.get_config()
    assert config["whitespace"] == "fasttext"
    del config["whitespace"]
    assert FastTextVectorizer.from_config(config).whitespace == "unicode"
    with pytest.raises(InputValueError, match="whitespace must be one of"):
        FastTextVectorizer(whitespace="ascii").fit(texts)


def test_vectorizer_refuses_a_single_string_as_scikit_learn_does() -> None:
    """A bare string is one text, not an iterable of texts: fit, fit_transform and transform
    refuse it with CountVectorizer's message (not one document per character)."""
    from sklearn.feature_extraction.text import CountVectorizer

    with pytest.raises(ValueError) as sk:
        CountVectorizer(token_pattern=r"\S+").fit(["the cat"]).transform("the cat")
    vec = FastTextVectorizer().fit(["the cat sat", "a dog"])
    for call in (vec.transform, FastTextVectorizer().fit, FastTextVectorizer().fit_transform):
        with pytest.raises(ValueError, match=str(sk.value)):
            call("the cat")


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("whitespace", ["unicode", "fasttext"])
def test_vectorizer_refuses_documents_that_are_not_text(lowercase: bool,
                                                        whitespace: str) -> None:
    """A missing document (None, any float NaN, pd.NA) or a number is refused, as
    CountVectorizer refuses it, with the position of the first one and the fix, not counted
    as the word "None", "nan", "<NA>" or "5"; bytes (decoded as UTF-8) and numpy string arrays
    are texts."""
    import pandas as pd

    vec = FastTextVectorizer(lowercase=lowercase, whitespace=whitespace)
    fitted = FastTextVectorizer(lowercase=lowercase, whitespace=whitespace).fit(["good film"])
    for missing in (None, float("nan"), np.float32("nan"), pd.NA):
        docs = ["good film", "bad", missing, None]
        for call in (vec.fit, vec.fit_transform, fitted.transform):
            with pytest.raises(InputValueError, match=r"missing value .* at position 2\..*"
                                                      r"fillna\(\"\"\)"):
                call(docs)
    with pytest.raises(InputValueError, match="position 1"):
        vec.fit(pd.Series(["good film", pd.NA], dtype="string"))
    with pytest.raises(InputTypeError, match=r"got int 5 at position 1\. Convert"):
        vec.fit(["good film", 5])
    expect = FastTextVectorizer(lowercase=lowercase).fit_transform(["café film", "x y"])
    for docs in ([b"caf\xc3\xa9 film", b"x y"], np.array(["café film", "x y"])):
        assert (FastTextVectorizer(lowercase=lowercase).fit_transform(docs) != expect).nnz == 0


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None])
def test_vectorizer_refuses_a_lowercase_that_is_not_a_bool(value: Any) -> None:
    """scikit-learn's CountVectorizer refuses a non-bool lowercase at fit; so does this one
    ("no" was taken as true)."""
    from sklearn.feature_extraction.text import CountVectorizer

    with pytest.raises(ValueError, match="lowercase"):
        CountVectorizer(lowercase=value).fit(["a b"])
    for fit in (FastTextVectorizer(lowercase=value).fit,
                FastTextVectorizer(lowercase=value).fit_transform):
        with pytest.raises(InputValueError, match=f"lowercase must be a bool, got {value!r}"):
            fit(["A b"])
    assert FastTextVectorizer(lowercase=np.True_).fit(["A b"]).vocabulary_ == {"a": 0, "b": 1}


def test_vectorizer_feature_names() -> None:
    """get_feature_names_out names the columns as CountVectorizer does (the words), then one
    'bucket B' per hash bucket column (the kept ones after prune)."""
    from sklearn.feature_extraction.text import CountVectorizer

    docs = ["the cat sat", "a dog", "The Dog"]
    want = CountVectorizer(token_pattern=r"\S+", lowercase=False).fit(docs)
    names = FastTextVectorizer().fit(docs).get_feature_names_out()
    np.testing.assert_array_equal(names, want.get_feature_names_out())
    assert names.dtype == object
    vec = FastTextVectorizer(word_ngrams=2, bucket=5)
    X = vec.fit_transform(docs)
    names = vec.get_feature_names_out()
    assert len(names) == X.shape[1] == vec.n_features_out_
    assert names[len(vec.vocabulary_):].tolist() == [f"bucket {b}" for b in range(5)]
    vec.prune([0, len(vec.vocabulary_) + 1, len(vec.vocabulary_) + 3])
    assert vec.get_feature_names_out().tolist() == ["Dog", "bucket 1", "bucket 3"]


def test_vectorizer_output_is_sparse_as_scikit_learns_vectorizers() -> None:
    """As CountVectorizer, the vectorizer opts out of scikit-learn's output wrapping: under
    ``transform_output="pandas"`` it returns its CSR matrix and a Pipeline or ColumnTransformer
    around it fits and predicts; an explicit ``set_output`` fails as CountVectorizer's does; its
    input tags are CountVectorizer's (texts, not a 2-D array)."""
    import sklearn
    from sklearn.base import clone
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    pd = pytest.importorskip("pandas")
    docs, y = ["good film", "bad film", "fine one", "dull one"] * 4, [1, 0, 1, 0] * 4
    frame = pd.DataFrame({"text": docs, "n": np.arange(16.0)})
    ours, peer = FastTextVectorizer(), CountVectorizer(token_pattern=r"\S+", lowercase=False)
    with sklearn.config_context(transform_output="pandas"):
        for vec in (ours, peer):
            assert sp.issparse(vec.fit_transform(docs)) and sp.issparse(vec.transform(docs))
        got, want = (make_pipeline(vec, LogisticRegression()).fit(docs, y).predict(docs)
                     for vec in (clone(ours), clone(peer)))
        np.testing.assert_array_equal(got, want)
        got, want = (ColumnTransformer([("t", vec, "text"), ("n", "passthrough", ["n"])])
                     .fit_transform(frame) for vec in (clone(ours), clone(peer)))
        assert isinstance(got, pd.DataFrame) and isinstance(want, pd.DataFrame)
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    for vec in (ours, peer):
        assert not hasattr(vec, "set_output")
        with pytest.raises(ValueError, match="set_output` is not available"):
            make_pipeline(vec, LogisticRegression()).set_output(transform="pandas")
    assert ours.__sklearn_tags__().input_tags == peer.__sklearn_tags__().input_tags


def test_vectorizer_n_features_out_is_transforms_width_after_set_params() -> None:
    """``n_features_out_`` is the width ``transform`` and ``get_feature_names_out`` give with
    the parameters as they are: a ``set_params`` after ``fit`` left it at the fitted width (4
    where transform gave 14)."""
    vec = FastTextVectorizer().fit(["the cat sat", "the dog"])
    assert vec.n_features_out_ == 4
    for params in ({"word_ngrams": 2, "bucket": 10}, {"maxn": 3, "minn": 2, "bucket": 7},
                   {"word_ngrams": 1, "maxn": 0}):
        vec.set_params(**params)
        width = vec.transform(["the cat"]).shape[1]
        assert vec.n_features_out_ == width == len(vec.get_feature_names_out()), params
    pruned = FastTextVectorizer(word_ngrams=2, bucket=10).fit(["the cat sat"]).prune([0, 3, 5])
    assert pruned.n_features_out_ == pruned.transform(["the cat"]).shape[1] == 3
    assert not hasattr(FastTextVectorizer(), "n_features_out_")


def test_vectorizer_wider_than_int32_keeps_int64_columns() -> None:
    """More than 2**31 - 1 columns: the column indices stay int64, none wraps around."""
    vec = FastTextVectorizer(word_ngrams=2, bucket=2**31 + 5)
    X = vec.fit_transform(["b a b", "a"])
    assert X.indices.dtype == np.int64 and X.shape == (2, 2 + 2**31 + 5)
    want = sorted(2 + _ngrams.ngram_column(g.split(), 2**31 + 5) for g in ("b a", "a b"))
    assert X[0].indices.tolist() == [0, 1, *want] and X[0].data.tolist() == [1, 2, 1, 1]


def test_vectorizer_char_ngram_column_past_int32_does_not_wrap() -> None:
    """A character n-gram's column n_words + bucket past 2**31 - 1 stays positive: the hashed
    columns (int32) are widened before the words' count is added."""
    from sklearn.utils import murmurhash3_32

    n, bucket = 100_000, 2**31 - 1
    vec = FastTextVectorizer(minn=6, maxn=6, bucket=bucket)
    vec.fit([" ".join(f"w{i}" for i in range(n))])
    b = _ngrams.bucket(murmurhash3_32(" dzcq ", positive=False), bucket)  # its only 6-gram
    assert n + b > 2**31 - 1
    X = vec.transform(["dzcq"])
    assert X.shape == (1, n + bucket) and X.indices.dtype == np.int64
    assert X.indices.tolist() == [n + b] and X.data.tolist() == [1]


@pytest.mark.parametrize(
    "params",
    [
        {"word_ngrams": 1},
        {"word_ngrams": 2, "bucket": 97},
        {"word_ngrams": 3, "minn": 2, "maxn": 4, "bucket": 1000, "min_count": 2,
         "lowercase": True},
    ],
)
def test_vectorizer_equals_scikit_learns_vectorizers(params: dict[str, int]) -> None:
    """One tokenizing pass gives what CountVectorizer + HashingVectorizer give with theirs."""
    from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer

    rng = np.random.default_rng(0)
    words = ["a", "B", "cat", "Cat", "dog,", "été", "x-y", "42"]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 9))) + rng.choice(["", "\t z"])
             for _ in range(60)]
    train, test = texts[:40], [*texts[40:], "", "unseen words only"]
    vec = FastTextVectorizer(**params)
    X = vec.fit_transform(train)
    assert abs(X - vec.fit(train).transform(train)).max() == 0
    lower = params.get("lowercase", False)
    words = CountVectorizer(token_pattern=r"\S+", lowercase=lower)
    totals = np.asarray(words.fit_transform(train).sum(0)).ravel()
    kept = words.get_feature_names_out()[totals >= params.get("min_count", 1)]
    assert list(vec.vocabulary_) == kept.tolist()
    common = {"n_features": params.get("bucket", 2_000_000), "alternate_sign": False,
              "norm": None, "lowercase": lower}
    for docs in (train, test):
        expect = [CountVectorizer(token_pattern=r"\S+", lowercase=lower,
                                  vocabulary=vec.vocabulary_).transform(docs)]
        if params["word_ngrams"] > 1:
            ngrams = HashingVectorizer(token_pattern=r"\S+",
                                       ngram_range=(2, params["word_ngrams"]), **common)
            hashed = ngrams.transform(docs)
            if params.get("maxn"):
                hashed = hashed + HashingVectorizer(
                    analyzer="char_wb", ngram_range=(params["minn"], params["maxn"]), **common
                ).transform(docs)
            expect.append(hashed)
        got = vec.transform(docs)
        assert got.shape == (len(docs), vec.n_features_out_) and got.dtype == np.float32
        assert abs(got - sp.hstack(expect)).max() == 0

# ---------------------------------------------------------------------- files and metrics
def test_precision_recall_at_k_by_hand() -> None:
    # example 0: truth {0},    top-2 = [2, 0]  -> 1 hit
    # example 1: truth {1, 2}, top-2 = [1, 0]  -> 1 hit
    # example 2: truth {1},    top-2 = [0, 2]  -> 0 hits
    scores = np.array([[0.3, 0.1, 0.6], [0.3, 0.6, 0.1], [0.5, 0.2, 0.3]])
    truth = [[0], [1, 2], [1]]
    assert precision_recall_at_k(truth, scores, k=2) == pytest.approx((2 / 6, 2 / 4))
    assert precision_recall_at_k(truth, scores, k=1) == pytest.approx((1 / 3, 1 / 4))
    assert precision_recall_at_k(truth, scores, k=5) == pytest.approx((4 / 9, 4 / 4))
    # fastText's threshold: of the top k, only labels scoring >= 0.3 are predicted (2 + 2 + 2)
    assert precision_recall_at_k(truth, scores, k=2, threshold=0.3) == pytest.approx(
        (2 / 6, 2 / 4))
    assert precision_recall_at_k(truth, scores, k=2, threshold=0.5) == pytest.approx(
        (1 / 3, 1 / 4))  # predicted: [2], [1], [0]
    p, r = precision_recall_at_k(truth, scores, k=2, threshold=0.9)
    assert np.isnan(p) and r == 0.0  # nothing predicted: fastText prints nan
    p, r = precision_recall_at_k([[], []], scores[:2], k=1)  # no label: R@k is nan too
    assert p == 0.0 and np.isnan(r)
    assert all(np.isnan(precision_recall_at_k([], np.zeros((0, 3)))))
    with pytest.raises(InputValueError, match=r"threshold is a probability in \[0, 1\]"):
        precision_recall_at_k(truth, scores, threshold=float("nan"))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 4), st.integers(1, 5), st.integers(1, 6),
       st.sampled_from([0.0, 0.2, 0.25, 0.5, 1.0]))
def test_precision_recall_threshold_counts_as_fasttext(
    data: st.DataObject, n_labels: int, k: int, n: int, threshold: float
) -> None:
    """fastText's Meter, one example at a time: of the k best labels those scoring >=
    threshold are predicted; P = right / predicted (nan for none), R = right / true."""
    scores = np.asarray(data.draw(st.lists(
        st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]), min_size=n_labels,
                 max_size=n_labels), min_size=n, max_size=n)))
    truth = data.draw(st.lists(st.lists(st.integers(0, n_labels - 1), min_size=1, max_size=3,
                                        unique=True), min_size=n, max_size=n))
    right = predicted = 0
    for row, true in zip(scores, truth, strict=True):
        best = sorted(range(n_labels), key=lambda j: (-row[j], j))[:k]
        kept = [j for j in best if row[j] >= threshold]
        predicted += len(kept)
        right += len(set(kept) & set(true))
    p, r = precision_recall_at_k(truth, scores, k, threshold)
    assert r == right / sum(map(len, truth))
    assert (np.isnan(p) and predicted == 0) or p == right / predicted


def test_readers(ft_file: Path, csv_file: Path) -> None:
    ft = read_fasttext(ft_file)
    assert len(ft) == 30 and ft.labels[0] == ["__label__pos"]
    assert ft.texts[0] == "a great film , truly great"
    table = read_table(csv_file, text_column="review", label_column="2")
    assert table.texts == ft.texts and table.labels[1] == ["neg"]
    with pytest.raises(InputValueError, match="is not a column"):
        read_table(csv_file, text_column="body", label_column=None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(
    ["__label__a", "__label__bc", "a", "bc", "a__label__b", "__label__", "x", "  ", "\t"]),
    max_size=6), max_size=5))
def test_read_fasttext_takes_every_label_token_wherever_it_is(
        tmp_path_factory: pytest.TempPathFactory, lines: list[list[str]]) -> None:
    path = tmp_path_factory.mktemp("ft") / "in.txt"
    path.write_text("\n".join(" ".join(t) for t in lines) + "\n", encoding="utf-8")
    data = read_fasttext(path)
    tokens = [line.split() for line in (" ".join(t) for t in lines) if line.split()]
    assert data.labels == [[t for t in ts if t.startswith("__label__")] for ts in tokens]
    assert data.texts == [" ".join(t for t in ts if not t.startswith("__label__"))
                          for ts in tokens]


# ---------------------------------------------------------------------- model files
@pytest.mark.parametrize("words", [["a", "a", "b"], ["1", 1]])
def test_a_configuration_with_a_repeated_or_non_string_word_is_refused(words: list[Any]) -> None:
    """A vectorizer's configuration lists distinct words (CountVectorizer(vocabulary=...)
    refuses a repeat): a damaged one is refused, where a repeat left a column unused and
    counted its word in another's."""
    config = FastTextVectorizer().fit(["a b"]).get_config() | {"vocabulary": words}
    for cls in (FastTextVectorizer, TextFeatures):
        with pytest.raises(InputValueError, match=r"entry 1, .* The configuration was damaged"):
            cls.from_config(config)


@NOT_LEARNING
def test_model_file_round_trip(tmp_path: Path) -> None:
    texts = [line.split(" ", 1)[1] for line in LINES] * 5
    y = [line.split(" ", 1)[0] for line in LINES] * 5
    vec = FastTextVectorizer(word_ngrams=2, bucket=256)
    X = vec.fit_transform(texts)
    clf = LookupClassifier(loss="log_loss", hidden=4, mode="mean", max_iter=5,
                           random_state=0).fit(X, y)
    path = save_model(tmp_path / "m.ll", clf, vectorizer=vec, labels=clf.classes_.tolist())
    model = load_model(path)
    np.testing.assert_array_equal(model.scores(texts), clf.predict_proba(X))
    assert model.labels == ["__label__neg", "__label__pos"]
    assert model.estimator.get_params() == clf.get_params()
    model.estimator.partial_fit(X, y)  # a loaded model trains on

    reg = LookupRegressor(random_state=0).fit(X, np.arange(len(texts), dtype=float))
    reg_model = load_model(save_model(tmp_path / "r.ll", reg))
    np.testing.assert_array_equal(reg_model.estimator.predict(X), reg.predict(X))
    assert reg_model.vectorizer is None

    # lines that are not text are refused as the vectorizer refuses documents; bytes are read
    # as UTF-8
    assert model.predict([texts[0].encode()]) == model.predict([texts[0]])
    assert model.predict(texts[0].encode())[0] == model.predict(texts[0])[0]
    with pytest.raises(InputValueError, match="missing value None at position 1"):
        model.predict([texts[0], None])  # type: ignore[list-item]
    with pytest.raises(InputTypeError, match="got int 5 at position 0"):
        model.predict([5])  # type: ignore[list-item]


def test_corrupt_truncated_or_foreign_model_file(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    clf = LookupClassifier(random_state=0).fit([[0, 1], [2]], [0, 1])
    path = save_model(tmp_path / "m.ll", clf)
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) - 7],
        "header cut": data[:40],
    }
    for name, content in cases.items():
        bad = tmp_path / f"{name}.ll"
        bad.write_bytes(content)
        with pytest.raises(ModelFileError, match="corrupt or truncated") as e:
            load_model(bad)
        assert isinstance(e.value, LookupLinearError) and isinstance(e.value, ValueError)
    for name, content in {"text": b"__label__a good movie\n", "garbage": b"\x00" * 5 + b"x",
                          "empty": b""}.items():
        bad = tmp_path / f"{name}.ll"
        bad.write_bytes(content)
        with pytest.raises(ModelFileError, match=r"are MODEL and INPUT swapped\?"):
            load_model(bad)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))
    with pytest.raises(ModelFileError, match="not a lookuplinear model"):
        load_model(foreign)
    # one flipped byte anywhere in the weights: the checksum names the tensor
    header_len = int.from_bytes(data[:8], "little")
    for at in (8 + header_len, len(data) - 1):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        bad = tmp_path / "flipped.ll"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(ModelFileError, match="fails its checksum"):
            load_model(bad)
    # a header edited to claim the first version (no checksums then) is still checked: the
    # file carries checksums, and they are verified whatever version it claims
    claimed = bytearray(data)
    at = data.index(b'"version":"2"') + len(b'"version":"')
    claimed[at:at + 1] = b"1"
    claimed[8 + header_len] ^= 0x01
    bad = tmp_path / "claims-v1.ll"
    bad.write_bytes(bytes(claimed))
    with pytest.raises(ModelFileError, match="fails its checksum"):
        load_model(bad)
    # one flipped bit in the header's name of the configuration ("config" -> "bonfig")
    renamed = bytearray(data)
    renamed[data.index(b'"config"') + 1] ^= 0x01
    bad = tmp_path / "renamed.ll"
    bad.write_bytes(bytes(renamed))
    with pytest.raises(ModelFileError, match="has no configuration"):
        load_model(bad)
    # a valid file whose tensors do not fit its configuration (checksums rewritten to match)
    header = json.loads(data[8 : 8 + header_len])
    meta = header["__metadata__"]
    config = json.loads(meta["config"])
    config["n_features_in"] = 99
    meta["config"] = json.dumps(config)
    sums = json.loads(meta["sha256"])
    sums["config"] = hashlib.sha256(meta["config"].encode()).hexdigest()
    meta["sha256"] = json.dumps(sums)
    raw = json.dumps(header).encode()
    edited = tmp_path / "edited.ll"
    edited.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + header_len :])
    with pytest.raises(ModelFileError, match="do not match the configuration"):
        load_model(edited)
    # a file of the first version (no checksums) still loads
    del meta["sha256"]
    meta["version"] = "1"
    meta["config"] = json.dumps(json.loads(json.loads(data[8 : 8 + header_len])
                                           ["__metadata__"]["config"]))
    raw = json.dumps(header).encode()
    old = tmp_path / "v1.ll"
    old.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + header_len :])
    assert load_model(old).estimator.n_features_in_ == clf.n_features_in_
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.ll")


def test_model_file_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    clf = LookupClassifier(random_state=0).fit([[0, 1], [2]], [0, 1])
    data = save_model(tmp_path / "m.ll", clf).read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_len])
    header["__metadata__"]["version"] = "99"
    raw = json.dumps(header).encode()
    newer = tmp_path / "v99.ll"
    newer.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + header_len :])
    with pytest.raises(ModelFileError, match=r"version '99'.*reads versions 1, 2, 3\. Upgrade"):
        load_model(newer)


# ---------------------------------------------------------------------- the commands
def test_train_predict_test_on_fasttext_lines(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.ll"
    assert main(["train", str(ft_file), "-o", str(model), "--dim", "8", "--epoch", "20",
                 "--wordNgrams", "2", "--bucket", "1000"]) == 0
    err = capsys.readouterr().err
    assert "ex/s" in err and "loss" in err and "model written to" in err
    assert main(["predict", str(model), str(ft_file), "-k", "2", "--prob"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split()
    assert first[0] == "__label__pos" and len(first) == 4
    assert main(["test", str(model), str(ft_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "N\t30" and out[1] == "P@1\t1" and out[2] == "R@1\t1"


def test_train_and_test_on_csv(
    csv_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.ll"
    cols = ["--text-column", "review", "--label-column", "sentiment"]
    assert main(["train", str(csv_file), "-o", str(model), "--dim", "4", "--epoch", "10",
                 "-q", *cols]) == 0
    assert main(["test", str(model), str(csv_file), "-k", "2", *cols]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["N\t30", "P@2\t0.5", "R@2\t1"]  # 2 labels: top-2 always holds the truth


def test_command_errors(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.ll"
    unlabelled = tmp_path / "u.txt"
    unlabelled.write_text("no label\n\nno label here\n", encoding="utf-8")
    assert main(["train", str(unlabelled), "-o", str(model), "-q"]) == 1
    assert "none of the 2 examples of " in capsys.readouterr().err
    assert main(["train", str(ft_file), "-o", str(model), "--label-column", "x", "-q"]) == 1
    assert "--label-column needs --text-column" in capsys.readouterr().err
    broken = tmp_path / "broken.ll"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    assert main(["test", str(broken), str(ft_file)]) == 1
    assert "corrupt or truncated" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "none.ll"), str(ft_file)]) == 1
    assert "no model file" in capsys.readouterr().err


# ---------------------------------------------------------------------- fastText's ways, safe files
def test_fasttext_spellings_and_positional_k(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "r52"
    assert main(["train", "-input", str(ft_file), "-output", str(model), "-dim", "8",
                 "-epoch", "20", "-lr", "0.2", "-wordNgrams", "2", "-minCount", "1",
                 "-bucket", "1000", "-minn", "0", "-maxn", "0", "-loss", "softmax",
                 "-thread", "1", "-verbose", "0"]) == 0
    model = tmp_path / "r52.bin"  # -output NAME writes NAME.bin, as fastText does
    assert model.is_file() and not (tmp_path / "utput").exists()
    assert capsys.readouterr().err == ""  # -verbose 0 is quiet
    assert main(["test", str(model), str(ft_file), "2"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "P@2\t0.5"
    assert main(["predict", str(model), str(ft_file), "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()[0].split()) == 2
    assert main(["predict-prob", str(model), str(ft_file), "1"]) == 0
    label, prob = capsys.readouterr().out.splitlines()[0].split()
    assert label == "__label__pos" and 0.5 < float(prob) <= 1.0
    assert main(["test", str(model), str(ft_file), "2", "-k", "3"]) == 1
    assert "k given twice" in capsys.readouterr().err


@NOT_LEARNING
def test_fasttext_documented_commands(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commands as fastText's documentation writes them: ``supervised -output model``
    writes model.bin and model.vec, ``quantize -output model`` reads model.bin and writes
    model.ftz, and ``predict``/``predict-prob``/``test`` take ``k`` and a threshold after the
    file."""
    monkeypatch.chdir(tmp_path)
    train = ft_file.name
    assert main(["supervised", "-input", train, "-output", "model", "-dim", "8",
                 "-epoch", "20", "-lr", "0.2", "-verbose", "0"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "model.vec", "train.txt"]
    assert main(["test", "model.bin", train, "2"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "P@2\t0.5"
    assert main(["test-label", "model.bin", train, "2"]) == 0  # per label, then 3 decimals
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in out[:2]] == ["__label__neg", "__label__pos"]
    assert out[1].startswith("F1-Score : 0.666667  Precision : 0.500000  Recall : 1.000000   ")
    assert out[2:] == ["N\t30", "P@2\t0.500", "R@2\t1.000"]
    assert main(["dump", "model.bin", "args"]) == 0  # a lookuplinear model: what it records
    assert capsys.readouterr().out.splitlines() == [
        "dim 8", "wordNgrams 1", "minCount 1", "bucket 2000000", "minn 0", "maxn 0"]
    assert main(["dump", "model.bin", "output"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "1 8"  # two labels: one output
    assert main(["dump", "model.bin", "dict"]) == 1
    assert "without word counts" in capsys.readouterr().err
    assert main(["predict-prob", "model.bin", train, "2"]) == 0
    pairs = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert all(len(p) == 4 for p in pairs)
    best = [float(p[1]) for p in pairs]
    th = sorted(best)[len(best) // 2]  # keeps the best label of about half the lines, no second
    assert main(["predict-prob", "model.bin", train, "2", str(th)]) == 0
    kept = capsys.readouterr().out.split("\n")[: len(pairs)]
    assert kept == [" ".join(p[:2]) if b >= th else "" for p, b in zip(pairs, best, strict=True)]
    assert main(["predict", "model.bin", train, "2", str(th)]) == 0
    assert capsys.readouterr().out.split("\n")[: len(pairs)] == [
        p[0] if b >= th else "" for p, b in zip(pairs, best, strict=True)]
    assert main(["predict", "model.bin", train, "1", "--threshold", str(th)]) == 0
    capsys.readouterr()
    # test k threshold: only the kept labels are predicted (here the best label of a line
    # when it reaches th, and it is right: the model separates the training lines)
    truth = [line.split()[0] for line in ft_file.read_text().splitlines()]
    n_kept = sum(b >= th for b in best)
    hits = sum(b >= th and p[0] == t for p, b, t in zip(pairs, best, truth, strict=True))
    assert main(["test", "model.bin", train, "2", str(th)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"P@2\t{hits / n_kept:.3g}", f"R@2\t{hits / len(truth):.3g}"]
    assert main(["quantize", "-input", train, "-output", "model"]) == 0
    assert (tmp_path / "model.ftz").is_file() and not (tmp_path / "model.ftz.bin").exists()
    capsys.readouterr()
    assert main(["test", "model.ftz", train, "2"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "P@2\t0.5"
    # a .bin or .ftz already written is not doubled (fastText would write model.bin.bin)
    assert main(["train", train, "-output", "again.bin", "-epoch", "1", "-q"]) == 0
    assert main(["quantize", "-output", "again.bin"]) == 0
    assert (tmp_path / "again.bin").is_file() and (tmp_path / "again.ftz").is_file()
    # -o and --output are written as given, with a suffix or without
    assert main(["train", train, "-o", "plain", "-epoch", "1", "-q"]) == 0
    assert main(["quantize", "plain", "--output", "plain.q8"]) == 0
    assert main(["quantize", "plain", "-output", "named"]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"plain", "plain.q8", "named.ftz"} <= names and "plain.bin" not in names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "{train}", "-o", "a", "-output", "b"], "give the output once"),
        (["supervised", "-input", "{train}"], "got neither"),
        (["quantize", "-o", "out.ftz"], "give the model to quantize"),
        (["quantize", "-output", "missing"], "no model file at missing.bin"),
        (["quantize", "model.bin", "-o", "a", "-output", "b"], "give the output once"),
        (["predict", "model.bin", "{train}", "1", "1.5"], "threshold is a probability in [0, 1]"),
        (["predict", "model.bin", "{train}", "1", "nan"], "threshold is a probability"),
        (["predict-prob", "model.bin", "{train}", "1", "0.2", "--threshold", "0.3"],
         "threshold given twice"),
        (["test", "model.bin", "{train}", "1", "-0.1"], "threshold is a probability"),
        (["quantize", "model.bin", "-o", "q", "-dsub", "4"], "-dsub 4 has no counterpart"),
        (["quantize", "model.bin", "-o", "q", "-qout"], "Drop -qout"),
        (["quantize", "model.bin", "-o", "q", "-dsub", "1", "--dtype", "int4"],
         "-dsub 1 means --dtype int8"),
        (["quantize", "model.bin", "-o", "q", "-retrain", "-input", "{train}"],
         "give -cutoff N with it"),
        (["quantize", "model.bin", "-o", "q", "-cutoff", "5", "-retrain"], "give -input TRAIN"),
        (["quantize", "model.bin", "-o", "q", "-cutoff", "5", "-epoch", "2"],
         "give -retrain with it"),
        (["quantize", "model.bin", "-o", "q", "-cutoff", "5", "-retrain", "-input", "{train}",
          "-lr", "0"], "-lr must be a finite number > 0"),
        (["quantize", "model.bin", "-o", "q", "-cutoff", "5", "-retrain", "-input", "{train}",
          "-lr", "inf"], "-lr must be a finite number > 0, got inf"),
        (["quantize", "model.bin", "-o", "q", "-cutoff", "5", "-retrain", "-input", "nope.txt"],
         "nope.txt"),
    ],
)
@NOT_LEARNING
def test_fasttext_spellings_bad_input(
    argv: list[str], message: str, ft_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each a one-line error (exit status 1) that says what to type; nothing is written."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", ft_file.name, "-o", "model.bin", "-epoch", "1", "-q"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([a.format(train=ft_file.name) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lookuplinear {argv[0]}: error:") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_usage_errors_name_the_subcommand(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", str(ft_file), "-o", str(tmp_path / "m"), "-nonsense", "3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: lookuplinear train")
    assert "unrecognized arguments: -nonsense" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lr", "-1"], "--lr must be a finite number > 0, got -1.0"),
        (["-lr", "inf"], "--lr must be a finite number > 0, got inf"),
        (["--weight-decay", "nan"], "--weight-decay must be a finite number >= 0, got nan"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0, got inf"),
        (["--seed", "4294967296"], "--seed must be an integer from -2147483648 to 2147483647"),
        (["-seed", "-2147483649"], "(fastText's seed is a C int), got -2147483649"),
        (["-bucket", "0", "-maxn", "3"], "--bucket 0 leaves no rows for the n-grams of "
                                         "--wordNgrams 1 --maxn 3"),
        (["--minCount", "-1"], "--minCount must be >= 0, got -1"),
        (["--epoch", "0"], "--epoch must be >= 1, got 0"),
        (["--device", "gpu"], "--device 'gpu' is not a device"),
        (["--device", "meta"], "lookuplinear trains on cpu or cuda"),
    ],
)
def test_bad_values_are_one_line_errors(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
    message: str,
) -> None:
    model = tmp_path / "m.ll"
    assert main(["train", str(ft_file), "-o", str(model), "-q", *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lookuplinear train: error: ") and message in err
    assert err.count("\n") == 1 and not model.exists()


def test_cuda_without_cuda_is_an_error(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", str(ft_file), "-o", str(tmp_path / "m"), "--device", "cuda"]) == 1
    assert "sees no CUDA device" in capsys.readouterr().err


def test_output_is_checked_before_training_and_written_whole(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    data = ft_file.read_bytes()
    assert main(["train", str(ft_file), "-o", str(ft_file), "-q"]) == 1
    assert "is the training file itself" in capsys.readouterr().err
    assert ft_file.read_bytes() == data  # the data is untouched
    assert main(["train", str(ft_file), "-o", str(tmp_path), "-q"]) == 1
    assert "is a directory" in capsys.readouterr().err
    assert main(["train", str(ft_file), "-o", str(tmp_path / "no" / "m.ll"), "-q"]) == 1
    assert "does not exist" in capsys.readouterr().err
    old = os.umask(0o022)
    try:
        assert main(["train", str(ft_file), "-o", str(tmp_path / "m.ll"), "-q"]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "m.ll").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_labels_the_model_never_saw(
    ft_file: Path, csv_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.ll"
    assert main(["train", str(ft_file), "-o", str(model), "-q", "--epoch", "1"]) == 0
    cols = ["--text-column", "review", "--label-column", "sentiment"]
    assert main(["test", str(model), str(csv_file), *cols]) == 1  # labels without the prefix
    err = capsys.readouterr().err
    assert "none of the 2 labels" in err and "['neg', 'pos']" in err
    assert "'__label__neg', '__label__pos'" in err and "prefix '__label__'" in err
    mixed = tmp_path / "mixed.txt"  # as fastText's test: unknown labels left out, an
    # example left with none skipped, and an unlabelled line skipped
    mixed.write_text("__label__pos great\n__label__meh fine\n__label__neg __label__meh bad\n"
                     "no label here\n", encoding="utf-8")
    assert main(["test", str(model), str(mixed), "1"]) == 0
    captured = capsys.readouterr()
    assert "1 of the input's 3 labels are unknown to the model and left out" in captured.err
    assert "__label__meh" in captured.err
    assert "2 of 4 examples have no label of the model and are skipped" in captured.err
    n, p, r = (line.split("\t")[1] for line in captured.out.splitlines())
    assert n == "2" and p == r  # one prediction and one true label per kept example


def test_help_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, lookuplinear.cli as c; c.build_parser(); "
            "print('torch' in sys.modules, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_training_imports_do_not_load_dynamo() -> None:
    """What ``train`` imports, the layer, a collection and the optimizers leave
    ``torch._dynamo`` (1.5 s of a process's start) to ``torch.compile``."""
    import subprocess
    import sys

    code = ("import sys, torch, lookuplinear, lookuplinear.sklearn, lookuplinear.text, "
            "lookuplinear.optim; from lookuplinear import LookupLinear, LookupCollection; "
            "layer = LookupLinear(10, 2, sparse=True); "
            "lookuplinear.optim.Adam(layer.parameters(), fused=True); "
            "layer(torch.tensor([1, 2])).sum().backward(); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]


def test_predict_and_test_do_not_import_scikit_learn(ft_file: Path, tmp_path: Path) -> None:
    """A model read for ``predict`` / ``test`` is scored without scikit-learn (a second of
    imports, with scipy.stats and pandas), and prints what the estimator computes."""
    import subprocess
    import sys

    model = tmp_path / "m.ll"
    assert main(["train", str(ft_file), "-o", str(model), "--dim", "4", "--epoch", "20",
                 "--wordNgrams", "2", "--bucket", "1000", "-q"]) == 0
    code = ("import sys; from lookuplinear.cli import main; "
            "[main([c, sys.argv[1], sys.argv[2]]) for c in ('test', 'predict-prob')]; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'sklearn', 'pandas', 'matplotlib'}), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(model), str(ft_file)],
                         capture_output=True, text=True, check=True)
    assert out.stderr.splitlines()[-1] == "[]"
    loaded = load_model(model)
    texts = [line.split(" ", 1)[1] for line in LINES * 5]
    proba = loaded.estimator.predict_proba(loaded.vectorizer.transform(texts))
    best = np.asarray(loaded.labels)[proba.argmax(axis=1)]
    assert [line.split()[0] for line in out.stdout.splitlines()[3:]] == best.tolist()


@NOT_LEARNING
@pytest.mark.parametrize("kind", ["binary", "multiclass", "multilabel", "squared_hinge",
                                  "chars", "pruned", "int4"])
def test_a_model_read_lazily_scores_as_its_estimator(tmp_path: Path, kind: str) -> None:
    texts = [line.split(" ", 1)[1] for line in LINES] * 5
    y: Any = [line.split(" ", 1)[0] for line in LINES] * 5
    if kind == "multiclass":
        y = [f"{lab}{i % 3}" for i, lab in enumerate(y)]
    if kind == "multilabel":
        y = np.array([[i % 2, i % 3 == 0, 1] for i in range(len(texts))], dtype=int)
    vec = FastTextVectorizer(word_ngrams=2, bucket=512, **(
        {"minn": 2, "maxn": 3} if kind == "chars" else {}))
    X = vec.fit_transform(texts)
    clf = LookupClassifier(loss="squared_hinge" if kind == "squared_hinge" else "log_loss",
                           hidden=4, mode="mean", max_iter=3, random_state=0).fit(X, y)
    if kind == "pruned":
        vec.prune(np.flatnonzero(np.asarray(X.sum(axis=0)).ravel() > 1))
        clf.model_.lookup.weight.data = clf.model_.lookup.weight.data[
            np.flatnonzero(np.asarray(X.sum(axis=0)).ravel() > 1)]
        clf.n_features_in_ = vec.n_features_out_
    if kind == "int4":
        clf = clf.quantize("int4")
    path = save_model(tmp_path / "m.ll", clf, vectorizer=vec,
                      labels=[str(c) for c in range(3)] if kind == "multilabel"
                      else clf.classes_.tolist())
    unseen = [*texts, "an unseen pair of words", ""]
    lazy = load_model(path, lazy=True)
    assert lazy.has_vectorizer and lazy._estimator is None and lazy._vectorizer is None
    scores = lazy.scores(unseen)
    assert lazy._estimator is None and lazy._vectorizer is None  # neither was built
    np.testing.assert_array_equal(scores, load_model(path).scores(unseen))
    expected = (clf.predict_proba(vec.transform(unseen)) if kind != "squared_hinge" else
                np.column_stack([-(d := clf.decision_function(vec.transform(unseen))), d]))
    np.testing.assert_array_equal(scores, expected)
    np.testing.assert_array_equal(lazy.estimator.predict(vec.transform(unseen)),
                                  clf.predict(vec.transform(unseen)))


@NOT_LEARNING
def test_model_file_size_follows_the_data(tmp_path: Path) -> None:
    """Only the rows training touched are stored: the size does not grow with bucket, and the
    loaded model predicts as the fitted one, also on n-grams training never saw."""
    texts = [line.split(" ", 1)[1] for line in LINES] * 5
    y = [line.split(" ", 1)[0] for line in LINES] * 5
    unseen = ["an unseen pair of words", "great boring story fine"]
    sizes = []
    for bucket in (1_000, 200_000):
        vec = FastTextVectorizer(word_ngrams=2, bucket=bucket)
        X = vec.fit_transform(texts)
        clf = LookupClassifier(loss="log_loss", hidden=8, mode="mean", max_iter=3,
                               random_state=0).fit(X, y)
        table = clf.model_.lookup.weight.detach()
        touched = np.unique(X.indices)
        assert not table[np.setdiff1d(np.arange(X.shape[1]), touched)].any()
        assert table[touched].any(dim=1).all()
        path = save_model(tmp_path / f"m{bucket}.ll", clf, vectorizer=vec, labels=["a", "b"])
        sizes.append(path.stat().st_size)
        loaded = load_model(path)
        np.testing.assert_array_equal(loaded.scores(texts + unseen),
                                      clf.predict_proba(vec.transform(texts + unseen)))
        assert torch.equal(loaded.estimator.model_.lookup.weight, clf.model_.lookup.weight)
    assert abs(sizes[1] - sizes[0]) < 0.1 * sizes[0]  # 200x the buckets, the same file
    # partial_fit: rows touched by any call so far stay
    clf = LookupClassifier(hidden=4, random_state=0)
    X = sp.csr_matrix(np.eye(6, dtype=np.float32))
    clf.partial_fit(X[:3], [0, 1, 0], classes=[0, 1])
    clf.partial_fit(X[3:5], [1, 0])
    rows = clf.model_.lookup.weight.detach().any(dim=1).tolist()
    assert rows == [True] * 5 + [False]


@pytest.mark.parametrize("dtype", ["int8", "int4", "float16"])
def test_quantized_models_save_load_and_run(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    model, small = tmp_path / "m.ll", tmp_path / f"m.{dtype}.ll"
    assert main(["train", str(ft_file), "-o", str(model), "--dim", "8", "--epoch", "20",
                 "--wordNgrams", "2", "--bucket", "100000", "-q"]) == 0
    assert main(["quantize", str(model), "-o", str(small), "--dtype", dtype]) == 0
    assert "MB" in capsys.readouterr().err
    assert small.stat().st_size < model.stat().st_size
    assert main(["test", str(small), str(ft_file)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "P@1\t1"
    float_model, q = load_model(model), load_model(small)
    texts = [line.split(" ", 1)[1] for line in LINES]
    diff = np.abs(q.scores(texts) - float_model.scores(texts)).max()
    assert 0 <= diff < (0.05 if dtype == "int4" else 0.01)
    direct = float_model.estimator.quantize(dtype)  # the same bytes as the file's
    np.testing.assert_array_equal(direct.predict_proba(float_model.vectorizer.transform(texts)),
                                  q.scores(texts))
    with pytest.raises(InputValueError, match="quantized for inference"):
        q.estimator.partial_fit(float_model.vectorizer.transform(texts),
                                [line.split(" ", 1)[0] for line in LINES])
    assert main(["quantize", str(small), "-o", str(tmp_path / "again.ll")]) == 1
    assert "quantized already" in capsys.readouterr().err


@settings(max_examples=30, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=6)
                      .map(" ".join), min_size=1, max_size=6),
       pick=st.lists(st.booleans(), min_size=80, max_size=80), chars=st.booleans())
@example(texts=[""], pick=[False] * 80, chars=False)
def test_vectorizer_prune_keeps_the_columns_given(
    texts: list[str], pick: list[bool], chars: bool
) -> None:
    """A pruned vectorizer's matrix is the one before with only those columns (a word left
    out is unknown but still in n-grams); twice pruned is pruned once by the composition."""
    vec = FastTextVectorizer(word_ngrams=2, bucket=64, minn=2 if chars else 0,
                             maxn=3 if chars else 0)
    X = vec.fit_transform(["a b c d e f", *texts])
    cols = np.flatnonzero(pick[: X.shape[1]])
    again = FastTextVectorizer.from_config(vec.get_config())
    vec.prune(cols)
    Y = vec.transform(texts)
    assert Y.shape == (len(texts), len(cols)) and vec.n_features_out_ == len(cols)
    np.testing.assert_array_equal(Y.toarray(), X[1:][:, cols].toarray())
    restored = FastTextVectorizer.from_config(vec.get_config())
    np.testing.assert_array_equal(restored.transform(texts).toarray(), Y.toarray())
    half = cols[::2]
    np.testing.assert_array_equal(vec.prune(np.arange(0, len(cols), 2)).transform(texts)
                                  .toarray(), X[1:][:, half].toarray())
    with pytest.raises(IndexError, match=r"columns must lie in \[0, "):
        again.prune([X.shape[1]])
    with pytest.raises(InputTypeError, match="must be integers"):
        again.prune([1.7])
    # a boolean mask keeps its True columns, as X[:, mask] does
    mask = np.zeros(X.shape[1], dtype=bool)
    mask[cols] = True
    np.testing.assert_array_equal(again.prune(mask).transform(texts).toarray(),
                                  X[1:][:, cols].toarray())


@NOT_LEARNING
def test_quantize_cutoff_at_or_above_the_rows_prunes_nothing_as_fasttext(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fastText's quantize prunes (and retrains) only when -cutoff is below the table's rows
    and above 0 (its default): at or above them, or 0, the file is the one quantize writes
    without -cutoff; a negative -cutoff is a one-line error."""
    model = tmp_path / "m.bin"
    assert main(["supervised", "-input", str(ft_file), "-output", str(model), "-dim", "4",
                 "-epoch", "1", "-verbose", "0"]) == 0
    rows = load_model(model).estimator.model_.lookup.weight.shape[0]
    assert main(["quantize", str(model), "-o", str(tmp_path / "all.ftz"), "--dtype",
                 "int4"]) == 0
    want = load_model(tmp_path / "all.ftz")
    texts = [line.split(" ", 1)[1] for line in LINES]
    for cutoff, extra in ((rows, []), (0, ["-retrain", "-input", str(ft_file)]),
                          (10**9, ["-retrain", "-input", str(ft_file)])):
        out = tmp_path / f"c{cutoff}.ftz"
        assert main(["quantize", str(model), "-o", str(out), "-cutoff", str(cutoff),
                     *extra]) == 0
        assert f"keeps all {rows} rows (nothing pruned or retrained)" in capsys.readouterr().err
        got = load_model(out)
        assert got.vectorizer.vocabulary_ == want.vectorizer.vocabulary_
        np.testing.assert_array_equal(got.scores(texts), want.scores(texts))
    assert main(["quantize", str(model), "-o", str(tmp_path / "neg.ftz"), "-cutoff", "-1"]) == 1
    assert "-cutoff must be 0 (keep every row" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_quantize_cutoff_is_the_dense_model_without_the_pruned_rows(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    """``quantize -cutoff N`` keeps the N rows of largest norm; the others are absent from
    every text, as in fastText: the model is the dense one (``nn.Linear`` on the densified
    input) on the kept columns only, the mean over the features kept."""
    model, small = tmp_path / "m.bin", tmp_path / "m.ftz"
    assert main(["supervised", "-input", str(ft_file), "-output", str(model), "-dim", "8",
                 "-epoch", "20", "-wordNgrams", "2", "-bucket", "1000", "-q"]) == 0
    full = load_model(model)
    weight = full.estimator.model_.lookup.weight.detach()
    n_nonzero = int(weight.any(dim=1).sum())
    cutoff = n_nonzero // 3
    assert main(["quantize", str(model), "-o", str(small), "-cutoff", str(cutoff),
                 "--dtype", dtype]) == 0
    assert f"{cutoff} rows kept" in capsys.readouterr().err
    norms = weight.norm(dim=1)
    rows = torch.sort(torch.argsort(norms, descending=True, stable=True)[:cutoff]).values
    pruned = load_model(small)
    table = pruned.estimator.model_.lookup.dequantize().weight.detach()  # (cutoff, 8)
    assert table.shape == (cutoff, 8)
    torch.testing.assert_close(table, weight[rows], atol=0.02 * norms.max().item(), rtol=0)
    texts = [line.split(" ", 1)[1] for line in LINES] + ["great unseen words", "zzz"]
    x = torch.from_numpy(full.vectorizer.transform(texts).toarray())[:, rows]  # kept columns
    dense = torch.nn.Linear(cutoff, 8, bias=False)
    dense.weight.data = table.T.contiguous()
    h = dense(x) / x.sum(dim=1, keepdim=True).clamp(min=1)  # mean over kept features; 0: none
    z = full.estimator.model_.output(h).detach()  # (texts, 1): two classes, a sigmoid
    expected = torch.cat([1 - torch.sigmoid(z), torch.sigmoid(z)], dim=1).numpy()
    np.testing.assert_allclose(pruned.scores(texts), expected, atol=1e-5)
    assert pruned.vectorizer.n_features_out_ == cutoff
    assert json.loads(json.dumps(pruned.input_format)) == full.input_format
    # the file holds the kept rows: far smaller than without -cutoff
    assert main(["quantize", str(model), "-o", str(tmp_path / "all.ftz"), "--dtype",
                 dtype]) == 0
    assert small.stat().st_size < (tmp_path / "all.ftz").stat().st_size


@NOT_LEARNING
def test_quantize_retrain_qnorm_dsub(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastText's ``quantize -input TRAIN -output NAME -cutoff N -retrain -qnorm -dsub 2``:
    the kept rows and the output layer train again on TRAIN; -dsub 2 is int4; -qnorm changes
    nothing in a row-wise file (each row keeps its own scale)."""
    monkeypatch.chdir(tmp_path)
    assert main(["supervised", "-input", ft_file.name, "-output", "m", "-dim", "8",
                 "-epoch", "20", "-lr", "0.2", "-wordNgrams", "2", "-bucket", "1000",
                 "-q"]) == 0
    assert main(["quantize", "-output", "m", "-cutoff", "12", "-dsub", "2"]) == 0
    plain, size = load_model("m.ftz"), Path("m.ftz").stat().st_size
    assert main(["quantize", "-output", "m", "-cutoff", "12", "-dsub", "2", "-qnorm"]) == 0
    qnorm = load_model("m.ftz")
    assert Path("m.ftz").stat().st_size == size
    assert qnorm.estimator.model_.lookup.dtype == "int4"
    assert torch.equal(qnorm.estimator.model_.lookup.packed, plain.estimator.model_.lookup.packed)
    # fastText's options without -dsub: its default -dsub 2 (int4); plain quantize stays int8
    assert main(["quantize", "-output", "m", "-cutoff", "12"]) == 0
    assert load_model("m.ftz").estimator.model_.lookup.dtype == "int4"
    assert main(["quantize", "-output", "m"]) == 0
    assert load_model("m.ftz").estimator.model_.lookup.dtype == "int8"
    texts = [line.split(" ", 1)[1] for line in LINES]
    np.testing.assert_array_equal(qnorm.scores(texts), plain.scores(texts))
    capsys.readouterr()
    assert main(["quantize", "-input", ft_file.name, "-output", "m", "-cutoff", "12",
                 "-retrain", "-epoch", "3", "-lr", "0.1", "-qnorm", "-dsub", "2"]) == 0
    assert "retrained 3 epochs on 30 examples" in capsys.readouterr().err
    retrained = load_model("m.ftz")
    assert retrained.vectorizer.vocabulary_ == plain.vectorizer.vocabulary_  # the same rows
    np.testing.assert_array_equal(retrained.vectorizer.buckets_, plain.vectorizer.buckets_)
    assert not torch.equal(retrained.estimator.model_.output.weight,
                           plain.estimator.model_.output.weight)
    assert retrained.estimator.get_params() == plain.estimator.get_params()
    assert main(["test", "m.ftz", ft_file.name]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "P@1\t1"


@NOT_LEARNING
def test_quantize_int4_on_an_odd_dim_names_the_flag_it_came_from(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """int4 packs two values a byte, so a model of odd -dim is refused, as PyTorch's 4-bit
    prepack refuses it, before anything is pruned, retrained or written; the error names the
    flag int4 came from (fastText's options default to it) and the command-line fix, and
    that fix quantizes the model."""
    monkeypatch.chdir(tmp_path)
    assert main(["supervised", "-input", ft_file.name, "-output", "m", "-dim", "5",
                 "-epoch", "2", "-verbose", "0"]) == 0
    with pytest.raises(RuntimeError):  # the peer: PyTorch's own 4-bit prepack
        torch.ops.quantized.embedding_bag_4bit_prepack(torch.zeros(3, 5))
    import lookuplinear.cli.quantize as cli_quantize

    monkeypatch.setattr(cli_quantize, "prune", lambda *a: pytest.fail("pruned before refusing"))
    for flags, fix in ((["-cutoff", "3"], "Add --dtype int8 (or -dsub 1), or --dtype float16"),
                       (["-qnorm"], "Add --dtype int8 (or -dsub 1), or --dtype float16"),
                       (["-cutoff", "3", "-retrain", "-input", ft_file.name],
                        "Add --dtype int8"),
                       (["-dsub", "2"], "Give -dsub 1 (int8) instead"),
                       (["--dtype", "int4"], "Give --dtype int8 or --dtype float16 instead")):
        capsys.readouterr()
        assert main(["quantize", "m.bin", "-o", "q.ftz", *flags]) == 1
        err = capsys.readouterr().err
        assert fix in err and "got 5" in err and "-dim" in err, err
        assert "quantize('int4')" not in err and not Path("q.ftz").exists()
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert main(["quantize", "m.bin", "-o", "q.ftz", "-cutoff", "3", "--dtype", "int8",
                 "-verbose", "0"]) == 0
    assert load_model("q.ftz").estimator.model_.lookup.dtype == "int8"


@NOT_LEARNING
def test_quantize_retrain_weighs_a_softmax_line_per_label_as_train_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """-retrain on lines of several labels: each line once per label the model has, weighted
    1/(those labels), as supervised trains it (it took each line's first label only)."""
    import lookuplinear.sklearn._prune as prune

    lines = ["__label__sport __label__football goal match team",
             "__label__politics vote election party"] * 20
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["supervised", "-input", "t.txt", "-output", "m", "-loss", "softmax",
                 "-dim", "4", "-epoch", "2", "-verbose", "0"]) == 0
    seen: dict[str, Any] = {}
    real = prune.retrain

    def spy(est: Any, X: Any, y: Any, **kw: Any) -> Any:
        seen.update(y=list(y), weight=kw.get("sample_weight"))
        return real(est, X, y, **kw)

    monkeypatch.setattr(prune, "retrain", spy)
    assert main(["quantize", "-input", "t.txt", "-output", "m", "-cutoff", "5", "-retrain",
                 "-epoch", "1"]) == 0
    assert seen["y"][:3] == ["__label__sport", "__label__football", "__label__politics"]
    assert len(seen["y"]) == 60
    np.testing.assert_array_equal(seen["weight"][:3], [0.5, 0.5, 1.0])


# ---------------------------------------------------------------------- input as trained
@pytest.fixture
def tsv_file(tmp_path: Path) -> Path:
    """A TSV with a header, the label column first: read as fastText lines, the header would be
    an example and every label a word of its text."""
    path = tmp_path / "train.tsv"
    rows = ["label\ttext"]
    rows += [f"{line.split(' ', 1)[0].removeprefix('__label__')}\t{line.split(' ', 1)[1]}"
             for line in LINES * 5]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_predict_and_test_read_a_table_as_the_model_was_trained(
    tsv_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.ll"
    cols = ["--text-column", "text", "--label-column", "label"]
    assert main(["train", str(tsv_file), "-o", str(model), "--dim", "4", "--epoch", "10", "-q",
                 *cols]) == 0
    assert load_model(model).input_format == {"format": "table", "text_column": "text",
                                              "label_column": "label", "sep": "\t"}
    capsys.readouterr()
    assert main(["predict", str(model), str(tsv_file), "--prob"]) == 0
    implicit = capsys.readouterr().out.splitlines()
    assert main(["predict", str(model), str(tsv_file), "--prob", "--text-column", "text"]) == 0
    explicit = capsys.readouterr().out.splitlines()
    assert implicit == explicit and len(implicit) == len(LINES) * 5  # no header line, no shift
    assert main(["test", str(model), str(tsv_file)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"N\t{len(LINES) * 5}"
    # from stdin (no file name to tell the delimiter): the model's
    stdin = tmp_path / "stdin.txt"
    stdin.write_bytes(tsv_file.read_bytes())
    with open(stdin, "rb") as f, pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", type("S", (), {"buffer": f})())
        assert main(["predict", str(model), "-", "--prob"]) == 0
    assert capsys.readouterr().out.splitlines() == implicit


def test_an_older_model_file_refuses_a_table_it_cannot_tell_how_to_read(
    tsv_file: Path, ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model file written before models recorded their input format: a file named like a
    table is refused (naming the flag), fastText lines read as before."""
    model = tmp_path / "m.ll"
    assert main(["train", str(ft_file), "-o", str(model), "--dim", "4", "-q"]) == 0
    old = load_model(model)
    save_model(model, old.estimator, vectorizer=old.vectorizer, labels=old.labels)  # none
    assert load_model(model).input_format is None
    capsys.readouterr()
    assert main(["predict", str(model), str(tsv_file)]) == 1
    err = capsys.readouterr().err
    assert "--text-column COL" in err and "does not record" in err
    assert main(["predict", str(model), str(tsv_file), "--text-column", "text"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(LINES) * 5
    assert main(["predict", str(model), str(ft_file)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(LINES) * 5


def test_a_label_prefix_of_training_is_the_default_of_predict_and_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "t.txt"
    data.write_text("\n".join(line.replace("__label__", "#") for line in LINES * 5) + "\n")
    model = tmp_path / "m.ll"
    assert main(["train", str(data), "-o", str(model), "--label", "#", "--dim", "4",
                 "--epoch", "10", "-q"]) == 0
    assert main(["test", str(model), str(data)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"N\t{len(LINES) * 5}"


# ---------------------------------------------------------------------- reading files
def test_undecodable_bytes_and_a_bom_read_as_fasttext_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [line.encode() for line in LINES * 5]
    lines[2] = lines[2] + b" caf\xe9"  # Latin-1, not UTF-8
    lines[7] = lines[7] + b" \xff"
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    data = read_fasttext(path)
    assert len(data) == len(LINES) * 5 and data.undecodable == [3, 8]
    assert data.labels[0] == ["__label__pos"]  # the BOM is not part of line 1's label
    assert data.texts[2].endswith("caf\ufffd")
    model = tmp_path / "m.ll"
    assert main(["train", str(path), "-o", str(model), "--dim", "4", "-q"]) == 0, (
        capsys.readouterr().err)
    err = capsys.readouterr().err
    assert "2 line(s) hold bytes that are not UTF-8, read as U+FFFD (line 3, 8)" in err
    table = tmp_path / "t.csv"
    table.write_bytes(b"\xef\xbb\xbfid,text\n1,hello\n")
    assert read_table(table, text_column="id", label_column=None).texts == ["1"]


def test_lines_end_at_newline_only_and_errors_name_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Form feeds, U+2028 and \\r inside a line do not split it (fastText splits at \\n);
    a form feed splits tokens, U+2028 does not (as in fastText); the examples keep their line
    numbers past blank lines and quoted multi-line fields."""
    path = tmp_path / "t.txt"
    path.write_text("__label__a x\x0cy\r\n\n__label__b p\u2028q\n\nno label here\n",
                    encoding="utf-8")
    data = read_fasttext(path)
    assert data.texts == ["x y", "p\u2028q", "no label here"] and data.lines == [1, 3, 5]
    assert main(["train", str(path), "-o", str(tmp_path / "m.ll"), "--epoch", "1"]) == 0
    assert ("1 of 3 examples have no label (first: line 5) and are skipped"
            in capsys.readouterr().err)
    table = tmp_path / "t.csv"
    table.write_text('label,text\na,"two\nlines"\nb\n', encoding="utf-8")
    with pytest.raises(InputValueError, match=r"t\.csv:4: the row has 1 fields"):
        read_table(table, text_column="text", label_column="label")


def test_a_quoted_field_spanning_lines_keeps_its_line_breaks_as_the_csv_module_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """read_table gives each cell as Python's csv module reads the file (opened with
    newline=''): a quoted field over several lines keeps its line breaks, so its words stay
    apart. `predict` on a fastText model (which reads one line per example) reads them as
    spaces, as it predicts the cell on one line."""
    import csv

    table = tmp_path / "t.csv"
    table.write_text('text,label\n"bad\nboring plot",x\n"a\n\nb",y\nplain,x\n',
                     encoding="utf-8")
    with open(table, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    data = read_table(table, text_column="text", label_column="label")
    assert data.texts == [r[0] for r in rows] and data.lines == [2, 4, 7]
    softmax = Path(__file__).parent / "data" / "fasttext" / "softmax.bin"

    def predicted(path: Path) -> str:
        assert main(["predict-prob", str(softmax), str(path), "-1",
                     "--text-column", "text"]) == 0
        return capsys.readouterr().out

    one = tmp_path / "one.csv"
    one.write_text("text\nbad boring plot\na b\nplain\n", encoding="utf-8")
    assert predicted(table) == predicted(one)


def test_ctrl_c_during_train_is_one_line_and_keeps_the_model(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "m.ll"
    model.write_bytes(b"the previous model")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(LookupClassifier, "fit", interrupted)
    assert main(["train", str(ft_file), "-o", str(model), "-q"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "was not written" in err
    assert model.read_bytes() == b"the previous model"


# ---------------------------------------------------------------------- fastText users' habits
#: every option fastText's Args::parseArgs takes (src/args.cc), with a value where it takes one
FASTTEXT_FLAGS: dict[str, str | None] = {
    "-input": "{train}", "-output": "model", "-lr": "0.2", "-lrUpdateRate": "100", "-dim": "8",
    "-ws": "5", "-epoch": "5", "-minCount": "1", "-minCountLabel": "0", "-neg": "5",
    "-wordNgrams": "1", "-loss": "softmax", "-bucket": "1000", "-minn": "0", "-maxn": "0",
    "-thread": "1", "-t": "1e-4", "-label": "__label__", "-verbose": "0",
    "-pretrainedVectors": "{vec}", "-saveOutput": None, "-seed": "0",
    "-qnorm": None, "-retrain": None, "-qout": None, "-cutoff": "0", "-dsub": "2",
    "-autotune-validation": "{train}", "-autotune-metric": "f1", "-autotune-predictions": "1",
    "-autotune-duration": "1", "-autotune-modelsize": "2M",
}
#: those of training that are refused, each with the words of what to use instead
REFUSED = {"-autotune-modelsize": "lookuplinear quantize -cutoff N"}
#: fastText's quantize options (supervised takes them and ignores them, as fastText's does)
QUANTIZE_ONLY = ("-qnorm", "-retrain", "-qout", "-cutoff", "-dsub")


def write_vec(path: Path, vectors: dict[str, list[float]]) -> Path:
    """A .vec file as fastText writes one (saveVectors): 'count dim', then 'word v1 ... vd'."""
    dim = len(next(iter(vectors.values())))
    path.write_text(f"{len(vectors)} {dim}\n" + "".join(
        f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()), encoding="utf-8")
    return path


@NOT_LEARNING
def test_every_fasttext_training_flag_is_taken_or_refused_by_name(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastText's supervised takes each of its flags (its quantize options too, ignored); so
    does `supervised` here, or it stops with one line naming what to use instead."""
    monkeypatch.chdir(tmp_path)
    vec = write_vec(tmp_path / "v.vec", {"great": [0.1] * 8})
    taken = []
    for flag, value in FASTTEXT_FLAGS.items():
        if flag in ("-input", "-output"):
            continue
        args = [flag] if value is None else [flag, value.format(train=ft_file.name, vec=vec)]
        if flag == "-autotune-validation":  # 300 s of search by default
            args += ["-autotune-duration", "1"]
        code = main(["supervised", "-input", ft_file.name, "-output", "model", "-dim", "8",
                     "-epoch", "1", "-verbose", "0", *args])
        err = capsys.readouterr().err
        if flag in REFUSED:
            assert code == 1 and REFUSED[flag] in err, (flag, err)
            assert err.startswith("lookuplinear supervised: error: ") and err.count("\n") == 1
        else:
            assert code == 0, (flag, err)
            taken.append(args)
    # all of them at once, as a fastText command line is written
    assert main(["supervised", "-input", ft_file.name, "-output", "model",
                 *[a for args in taken for a in args]]) == 0
    assert load_model(tmp_path / "model.bin").estimator.hidden == 8
    # quantize takes its own, and every other one of fastText's (ignored, as fastText's
    # quantize ignores them), -qout and the refused training flags aside
    others = [a for args in taken if args[0] not in (*QUANTIZE_ONLY, "-epoch", "-lr", "-label")
              for a in args]
    capsys.readouterr()
    assert main(["quantize", "-input", ft_file.name, "-output", "model", "-qnorm", "-dsub", "2",
                 "-cutoff", "10", "-retrain", "-label", "__label__", "-saveOutput",
                 "-autotune-duration", "10", *others]) == 0
    assert "-verbose" in others and capsys.readouterr().err == ""  # -verbose 0: no summary


@NOT_LEARNING
def test_a_single_dash_flag_is_never_read_as_a_cluster_of_short_options(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`-qout` is fastText's flag, not `-q -o ut` (which wrote the model to ./ut), `-qnorm` not
    `-q -n orm`; a single-dash word that is no flag is refused whole, never split or taken as
    an abbreviation."""
    monkeypatch.chdir(tmp_path)
    train = ["supervised", "-input", ft_file.name, "-dim", "4", "-epoch", "1", "-verbose", "0"]
    for flags in (["-o", "model.bin", "-qout"], ["-output", "m", "-qnorm", "-qout"],
                  ["-output", "m", "-cutoff", "5", "-retrain", "-dsub", "2"]):
        assert main([*train, *flags]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin", "m.vec", "model.bin",
                                                          "train.txt"]
    for word in ("-qou", "-qoutx", "-qx"):
        with pytest.raises(SystemExit) as e:
            main([*train, "-output", "m2", word])
        assert e.value.code == 2
        assert f"unrecognized arguments: {word}" in capsys.readouterr().err
    assert not Path("m2.bin").exists() and not Path("ut").exists()
    # fastText's quantize takes -thread and -verbose
    assert main(["quantize", "-output", "m", "-thread", "2", "-verbose", "2"]) == 0
    assert "m.ftz" in capsys.readouterr().err and Path("m.ftz").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-loss", "hs"], "Use -loss softmax"),
        (["-loss", "ns"], "Use -loss softmax"),
        (["-minCountLabel", "1000"], "-minCountLabel 1000 drops every label"),
        (["-pretrainedVectors", "{vec}"], "dimension 8, the model's is 100: pass -dim 8"),
        (["-pretrainedVectors", "{train}"], "starts with 'COUNT DIM'"),
    ],
)
def test_fasttext_training_flags_bad_values(
    argv: list[str], message: str, ft_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vec = write_vec(tmp_path / "v.vec", {"great": [0.1] * 8})
    out = tmp_path / "m"
    args = [a.format(vec=vec, train=ft_file) for a in argv]
    assert main(["supervised", "-input", str(ft_file), "-output", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.with_suffix(".bin").exists()


def _pairs_corpus(path: Path) -> Path:
    """Lines where "cat" and "dog" always share their contexts, "apple" and "pear" theirs."""
    rng = np.random.default_rng(0)
    templates = ["we feed the {} every morning", "the old {} sleeps near the door",
                 "she eats a ripe {} with lunch", "a sweet {} grows on this tree"]
    pairs = [["cat", "dog"], ["cat", "dog"], ["apple", "pear"], ["apple", "pear"]]
    lines = []
    for _ in range(200):
        k = int(rng.integers(4))
        lines.append(templates[k].format(pairs[k][int(rng.integers(2))]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["skipgram", "cbow"])
def test_skipgram_and_cbow_write_fasttexts_files(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`skipgram`/`cbow` train word vectors and write NAME.bin (fastText's format: read by
    load_fasttext and the fasttext module, the same vectors) and NAME.vec (fastText's text
    format); words that share their contexts are each other's nearest (`nn`)."""
    import io

    from lookuplinear.sklearn import load_fasttext

    corpus = _pairs_corpus(tmp_path / "text.txt")
    stem = tmp_path / "vecs"
    assert main([command, "-input", str(corpus), "-output", str(stem), "-dim", "16",
                 "-minCount", "1", "-bucket", "1000", "-minn", "3", "-maxn", "4", "-t", "1",
                 "-epoch", "4", "-lr", "0.1", "--batch-size", "16", "-verbose", "0"]) == 0
    assert capsys.readouterr().err == ""
    model = load_fasttext(stem.with_suffix(".bin"))
    assert not model.is_classifier and model.args is not None
    assert (model.args.model, model.args.loss, model.args.dim, model.version) == (
        command, "ns", 16, 12)
    words = [w.decode() for w in model.words[:model.n_words]]
    assert "</s>" in words and model.input_matrix.shape == (len(words) + 1000, 16)
    assert model.counts[:model.n_words] == sorted(model.counts[:model.n_words], reverse=True)
    vectors = model.word_vectors(words)
    assert np.isfinite(vectors).all()
    lines = stem.with_suffix(".vec").read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"{len(words)} 16" and len(lines) == len(words) + 1
    assert lines[1] == f"{words[0]} " + "".join(f"{float(v):.5g} " for v in vectors[0])
    try:
        import fasttext
    except ImportError:
        pass
    else:  # fastText reads the file and gives the same vectors
        ft = fasttext.load_model(str(stem.with_suffix(".bin")))
        assert ft.words == words
        np.testing.assert_allclose(np.stack([ft.get_word_vector(w) for w in words]), vectors,
                                   rtol=1e-5, atol=1e-7)
    for query, friend in (("cat", "dog"), ("dog", "cat"), ("apple", "pear")):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(query.encode())))
        assert main(["nn", str(stem.with_suffix(".bin")), "1"]) == 0
        assert capsys.readouterr().out.split()[2] == friend


def test_skipgram_writes_fasttexts_args_for_its_command_line(tmp_path: Path) -> None:
    """The .bin's arguments are those fastText writes for the same command line: no n-gram
    rows (bucket 0) without word or character n-grams, -t read as a float32 (fastText's
    std::stof); -maxn 0 with -wordNgrams 2 keeps fastText's bucket rows (the write refused
    its table after training)."""
    from lookuplinear.sklearn import load_fasttext

    corpus = _pairs_corpus(tmp_path / "text.txt")
    common = ["-input", str(corpus), "-dim", "4", "-minCount", "1", "-epoch", "1",
              "-verbose", "0"]
    assert main(["skipgram", *common, "-output", str(tmp_path / "a"), "-maxn", "0",
                 "-t", "1e-3"]) == 0
    a = load_fasttext(tmp_path / "a.bin")
    assert a.args is not None and a.args.bucket == 0 and a.args.t == float(np.float32(1e-3))
    assert a.input_matrix.shape[0] == a.n_words
    assert main(["skipgram", *common, "-output", str(tmp_path / "b"), "-maxn", "0",
                 "-wordNgrams", "2", "-bucket", "100"]) == 0
    b = load_fasttext(tmp_path / "b.bin")
    assert b.args is not None and b.args.bucket == 100
    assert b.input_matrix.shape[0] == b.n_words + 100


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_word_vector_steps_made_at_once_are_each_steps_pairs(model: str) -> None:
    """The steps made for many positions at once hold, step by step, the pairs of the step's
    own positions: skipgram, each context word a target of its center's word bag (the center
    word's rows); cbow, each center with a context the target of the mean of its context
    words' rows (their word bags weighted by one over those rows' count); every target with
    its negatives, none equal to it."""
    from lookuplinear.sklearn import _wordvectors as wv

    args = wv.WordVectorArgs(model=model, dim=4, min_count=1, bucket=50, ws=3, neg=2,
                             batch_size=4)
    d = wv.build_dictionary(b"a b c d e f\ng h a b\nc\nd e f g h a b c d\nq\n", args)
    rng = np.random.default_rng(0)
    seg_of = np.zeros(len(d.stream), np.int64)
    seg_of[d.starts] = 1
    kept = np.flatnonzero(d.stream < d.n_words)
    ids, seg = d.stream[kept], np.cumsum(seg_of)[kept]
    bound = rng.integers(1, args.ws + 1, len(ids))
    lo = 4  # a chunk that does not start the stream: its windows reach before it
    steps = wv._steps(d, args, rng, wv._negatives(d.counts[:d.n_words]), ids, seg, bound, lo,
                      len(ids))

    def rows(word: int) -> list[int]:
        return d.rows[d.ptr[word]:d.ptr[word + 1]].tolist()

    n_steps = 0
    for s, first in enumerate(range(lo, len(ids), args.batch_size)):
        c, x = wv._pairs(seg, bound, first, min(first + args.batch_size, len(ids)), args.ws)
        t0, t1 = steps.tgt_ptr[s], steps.tgt_ptr[s + 1]
        b0, b1 = steps.bag_lo[s], steps.bag_hi[s]
        flat = steps.flat[steps.row_ptr[b0]:steps.row_ptr[b1]]
        offsets = steps.offsets[steps.off_ptr[s]:steps.off_ptr[s + 1]]
        assert offsets[0] == 0 and len(offsets) == b1 - b0
        bags = [b.tolist() for b in np.split(flat, offsets[1:])]
        if model == "skipgram":
            assert steps.tgt[t0:t1, 0].tolist() == ids[x].tolist()
            assert [bags[o] for o in steps.owner[t0:t1]] == [rows(ids[k]) for k in c]
        else:
            centers = np.unique(c)
            assert steps.tgt[t0:t1, 0].tolist() == ids[centers].tolist()
            p0, p1 = steps.pair_ptr[s], steps.pair_ptr[s + 1]
            ctx = np.split(steps.ctx[p0:p1], steps.ctx_offsets[t0 + 1:t1])
            assert [sorted(r for k in bag for r in bags[k]) for bag in ctx] == [
                sorted(r for k in x[c == m] for r in rows(ids[k])) for m in centers]
            n = [len(rows(ids[k])) for k in x]
            np.testing.assert_allclose(steps.rows[t0:t1], [
                sum(n[i] for i in np.flatnonzero(c == m)) for m in centers])
            np.testing.assert_allclose(steps.ctx_weights[p0:p1], [
                1 / steps.rows[t0 + list(centers).index(m)] for m in c])
        n_steps += t1 > t0
    assert n_steps > 1 and len(steps.tgt_ptr) == s + 2
    assert (steps.tgt[:, 1:] != steps.tgt[:, :1]).all()


def test_word_vectors_lines_run_on_without_an_end_of_line_word() -> None:
    """fastText's getLine ends at a "</s>" of the dictionary: with fewer lines than
    -minCount (no "</s>" entry) a line's end does not end it, and windows cross it; each
    line was one getLine."""
    from lookuplinear.sklearn import _wordvectors as wv

    text = b"p p p\nq q q\n" * 2
    few = wv.build_dictionary(text, wv.WordVectorArgs(min_count=5, maxn=0))
    assert b"</s>" not in few.words and few.starts.tolist() == [0]
    many = wv.build_dictionary(text, wv.WordVectorArgs(min_count=1, maxn=0))
    assert b"</s>" in many.words and many.starts.tolist() == [0, 4, 8, 12]


def test_word_vectors_are_the_same_for_a_seed() -> None:
    from lookuplinear.sklearn import _wordvectors as wv

    data = b"the cat sat on the mat\nthe dog sat on the log\n" * 30

    def train(seed: int) -> tuple[np.ndarray, np.ndarray, float]:
        args = wv.WordVectorArgs(dim=8, min_count=1, bucket=100, epoch=2, seed=seed,
                                 batch_size=8, t=1.0)
        return wv.train_word_vectors(wv.build_dictionary(data, args), args)

    first, again, other = train(3), train(3), train(4)
    assert all(np.array_equal(a, b) for a, b in zip(first[:2], again[:2], strict=True))
    assert first[2] == again[2] and not np.array_equal(first[0], other[0])


@pytest.mark.parametrize(("argv", "message"), [
    (["-loss", "hs"], "-loss hs: only negative sampling (-loss ns"),
    (["-bucket", "0"], "-bucket 0 rows: give -bucket >= 1, or -maxn 0 for no n-grams."),
    (["-dim", "0"], "-dim must be >= 1, got 0."),
    (["-lr", "inf"], "-lr must be a finite number > 0, got inf"),
    (["-seed", "2147483648"], "-seed must be an integer from -2147483648 to 2147483647"),
    (["-pretrainedVectors", "v.vec"], "-pretrainedVectors is not built for word vectors"),
    (["-minCount", "1000"], "no word is seen -minCount 1000 times in the input (the most "
                            "frequent is seen"),
])
def test_skipgram_refuses_bad_arguments(argv: list[str], message: str, ft_file: Path,
                                        tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vecs"
    assert main(["skipgram", "-input", str(ft_file), "-output", str(out), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lookuplinear skipgram: error: ") and message in err
    assert err.count("\n") == 1 and not out.with_suffix(".bin").exists()
    assert main(["cbow", "-input", str(ft_file)]) == 1
    assert "needs -input FILE (the text) and -output NAME" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["skipgram", "cbow"])
def test_skipgram_takes_minn_zero_and_minn_above_maxn_as_fasttext(
        command: str, ft_file: Path, tmp_path: Path) -> None:
    """fastText takes -minn 0 and -minn above -maxn (Dictionary::computeSubwords emits the
    n-grams of n = 1..maxn characters with n >= minn): -minn 0 gives what -minn 1 gives (the
    same NAME.vec, as fastText's single-thread runs of both were), and -minn 5 -maxn 3 no
    character n-gram: each word's input is its own row (fastText's print-ngrams on such a
    model prints the word alone)."""
    def train(name: str, minn: str, maxn: str = "3") -> Path:
        out = tmp_path / name
        assert main([command, "-input", str(ft_file), "-output", str(out), "-dim", "4",
                     "-epoch", "1", "-verbose", "0", "-minCount", "1", "-bucket", "100",
                     "-minn", minn, "-maxn", maxn]) == 0
        return out

    assert (train("zero", "0").with_suffix(".vec").read_bytes()
            == train("one", "1").with_suffix(".vec").read_bytes())
    model = load_model(train("above", "5").with_suffix(".bin"))
    words = model.words[:model.n_words]
    assert all(model.subwords(w.decode()) == ([i], [w.decode()]) for i, w in enumerate(words))
    np.testing.assert_array_equal(model.word_vectors([w.decode() for w in words]),
                                  model.input_matrix[:len(words)])
    try:
        import fasttext
    except ImportError:
        return
    ft = fasttext.load_model(str(tmp_path / "above.bin"))
    assert all(ft.get_subwords(w.decode())[0] == [w.decode()] for w in words[1:])


def test_skipgram_min_count_zero_keeps_every_word_as_one(ft_file: Path, tmp_path: Path) -> None:
    """fastText's -minCount 0 keeps every word, as -minCount 1 does: the same vectors."""
    def train(name: str, min_count: str) -> bytes:
        out = tmp_path / name
        assert main(["skipgram", "-input", str(ft_file), "-output", str(out), "-dim", "4",
                     "-epoch", "1", "-verbose", "0", "-minCount", min_count]) == 0
        return out.with_suffix(".vec").read_bytes()

    assert train("zero", "0") == train("one", "1")


@NOT_LEARNING
@pytest.mark.parametrize("command", ["supervised", "skipgram"])
def test_a_negative_seed_is_taken_as_fasttext_takes_it(command: str, ft_file: Path,
                                                      tmp_path: Path) -> None:
    """fastText's -seed is any C int: -1 and -2**31 train, each the same vectors twice."""
    def train(name: str, seed: str) -> bytes:
        out = tmp_path / name
        assert main([command, "-input", str(ft_file), "-output", str(out), "-dim", "4",
                     "-epoch", "1", "-minCount", "1", "-verbose", "0", "-seed", seed]) == 0
        return out.with_suffix(".vec").read_bytes()

    for seed in ("-1", str(-(2**31))):
        assert train("a", seed) == train("b", seed)


@NOT_LEARNING
def test_loss_one_vs_all_is_ova_and_seed_is_seed(ft_file: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    base = ["supervised", "-input", str(ft_file), "-dim", "4", "-epoch", "2", "-verbose", "0"]
    assert main([*base, "-output", str(a), "-loss", "one-vs-all", "-seed", "3"]) == 0
    assert main([*base, "-output", str(b), "--loss", "ova", "--seed", "3"]) == 0
    ma, mb = load_model(a.with_suffix(".bin")), load_model(b.with_suffix(".bin"))
    texts = [line.split(" ", 1)[1] for line in LINES]
    np.testing.assert_array_equal(ma.scores(texts), mb.scores(texts))
    assert ma.estimator.multilabel_


@NOT_LEARNING
def test_supervised_defaults_to_softmax_as_fasttext(tmp_path: Path) -> None:
    """`supervised` without -loss trains a softmax on lines with several labels, as fastText's
    `supervised` (its default -loss softmax): a text's probabilities sum to 1. `train`'s
    default (--loss auto) trains one-vs-all on the same file."""
    lines = ["__label__sport __label__football goal match team",
             "__label__politics vote election party", "__label__sport run race"] * 10
    data = tmp_path / "t.txt"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["supervised", "-input", str(data), "-output", str(tmp_path / "ft"), "-dim",
                 "4", "-epoch", "2", "-verbose", "0"]) == 0
    model = load_model(tmp_path / "ft.bin")
    assert not model.estimator.multilabel_
    np.testing.assert_allclose(model.scores(["goal match"]).sum(), 1.0, rtol=1e-5)
    assert main(["train", str(data), "-o", str(tmp_path / "ll.bin"), "--dim", "4", "--epoch",
                 "2", "-q"]) == 0
    assert load_model(tmp_path / "ll.bin").estimator.multilabel_


@NOT_LEARNING
def test_loss_auto_reads_a_repeated_label_as_one_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line that repeats its one label (`__label__a __label__a`) has one label, as fastText
    draws its target among the line's label tokens: `train`'s --loss auto trains the softmax
    that --loss softmax trains (probabilities that sum to 1), without the note on stderr that
    a line with two different labels gets."""
    data = tmp_path / "d.txt"
    data.write_text("__label__a __label__a good fine\n__label__b bad awful\n"
                    "__label__c so so\n" * 3, encoding="utf-8")
    base = ["train", str(data), "--dim", "4", "--epoch", "2"]
    assert main([*base, "-o", str(tmp_path / "auto.ll")]) == 0
    assert "one-vs-all" not in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "softmax.ll"), "--loss", "softmax", "-q"]) == 0
    auto, softmax = load_model(tmp_path / "auto.ll"), load_model(tmp_path / "softmax.ll")
    assert not auto.estimator.multilabel_
    texts = ["good", "bad awful", "so"]
    np.testing.assert_array_equal(auto.scores(texts), softmax.scores(texts))
    np.testing.assert_allclose(auto.scores(texts).sum(axis=1), 1.0, rtol=1e-5)
    data.write_text("__label__a __label__b good fine\n__label__b bad awful\n", encoding="utf-8")
    assert main([*base, "-o", str(tmp_path / "ova.ll")]) == 0
    assert ("--loss auto trains one-vs-all (multilabel: each label's probability apart), as a "
            "line has several labels (__label__a __label__b)") in capsys.readouterr().err


@NOT_LEARNING
def test_save_output_writes_the_output_layer_as_fasttext(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-saveOutput writes NAME.output as fastText's saveOutput: 'labels dim', then each label
    and its output row (5 significant digits, each value followed by a space). A two-label
    softmax (one output row) gets a row of zeros for its first label, the same softmax; the
    bias, which fastText's output layer has not, is named on stderr."""
    base = ["supervised", "-input", str(ft_file), "-dim", "4", "-epoch", "2", "-saveOutput"]
    assert main([*base, "-output", str(tmp_path / "two")]) == 0
    assert "model_.output.bias" in capsys.readouterr().err
    model = load_model(tmp_path / "two.bin")
    weight = model.estimator.model_.output.weight.detach().double().numpy()
    lines = (tmp_path / "two.output").read_text(encoding="utf-8").split("\n")
    assert lines[0] == "2 4" and lines[-1] == "" and len(lines) == 4
    assert lines[1] == "__label__neg 0 0 0 0 "
    assert lines[2] == "__label__pos " + "".join(f"{v:.5g} " for v in weight[0])
    three = tmp_path / "three.txt"
    three.write_text("__label__a x y\n__label__b y z\n__label__c z w\n" * 5, encoding="utf-8")
    assert main(["supervised", "-input", str(three), "-output", str(tmp_path / "three"),
                 "-dim", "3", "-epoch", "2", "-saveOutput", "-verbose", "0"]) == 0
    weight = load_model(tmp_path / "three.bin").estimator.model_.output.weight.detach()
    rows = (tmp_path / "three.output").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "3 3"
    assert [r.split()[0] for r in rows[1:]] == ["__label__a", "__label__b", "__label__c"]
    np.testing.assert_allclose([[float(v) for v in r.split()[1:]] for r in rows[1:]],
                               weight.double().numpy(), rtol=1e-4, atol=1e-8)
    assert "model_.output.bias" not in capsys.readouterr().err  # -verbose 0
    # -o PATH names no NAME for NAME.output
    assert main([*base, "-o", str(tmp_path / "m.bin")]) == 1
    assert "give -output NAME instead of -o" in capsys.readouterr().err
    assert not (tmp_path / "m.bin").exists()


def _trials(err: str) -> list[tuple[dict[str, str], float]]:
    """Each trial's arguments and score from the lines -verbose 3 prints."""
    out = []
    for block in err.split("Trial = ")[1:]:
        pairs = dict(line.split(" = ", 1) for line in block.split("\n")[1:] if " = " in line
                     and not line.startswith(("Progress", "Best")))
        score = pairs.pop("currentScore")
        out.append((pairs, float(score)))
    return out


_SEARCHED_ARGS = ("epoch", "lr", "dim", "wordNgrams", "minn", "maxn", "bucket")


def test_autotune_trains_the_best_trial_again(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-autotune-validation: the first trial is the arguments as given, each trial's F1 on the
    validation file is printed, and the model written is the best trial's arguments trained
    again: the model `supervised` trains with those arguments given (and the same seed)."""
    out = tmp_path / "m"
    assert main(["supervised", "-input", str(ft_file), "-output", str(out),
                 "-autotune-validation", str(ft_file), "-autotune-duration", "1",
                 "-bucket", "1000", "-seed", "3", "-verbose", "3"]) == 0
    err = capsys.readouterr().err
    assert "Warning : bucket is manually set to a specific value." in err
    assert "Progress: 100.0% Trials:" in err and "Training again with best arguments" in err
    trials = _trials(err.split("Training again")[0])
    best_block = err.split("Best selected args = 0\n")[1].split("\n")
    best = dict(line.split(" = ") for line in best_block if " = " in line)
    first_args, first_score = trials[0]
    assert first_args == {"epoch": "5", "lr": "0.2", "dim": "100", "minCount": "1",
                          "wordNgrams": "1", "minn": "0", "maxn": "0", "bucket": "1000",
                          "loss": "softmax"}
    scores = {tuple(a.items()): s for a, s in trials}
    assert tuple(best.items()) in scores and scores[tuple(best.items())] >= first_score
    assert scores[tuple(best.items())] == max(scores.values())
    assert all(a["bucket"] == "1000" for a, _ in trials)
    model = load_model(out.with_suffix(".bin"))
    assert model.estimator.hidden == int(best["dim"])
    assert model.estimator.max_iter == int(best["epoch"])
    again = tmp_path / "again"
    assert main(["supervised", "-input", str(ft_file), "-output", str(again), "-seed", "3",
                 "-verbose", "0", *[a for name in _SEARCHED_ARGS
                                    for a in (f"-{name}", best[name])]]) == 0
    texts = [line.split(" ", 1)[1] for line in LINES]
    np.testing.assert_allclose(model.scores(texts),
                               load_model(again.with_suffix(".bin")).scores(texts), rtol=1e-6)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-autotune-metric", "f1:__label__nope"], "'__label__nope' is not a label"),
        (["-autotune-metric", "precision"], "expected f1 (over all labels) or f1:LABEL"),
        (["-autotune-duration", "0"], "-autotune-duration must be >= 1"),
        (["-autotune-predictions", "0"], "-autotune-predictions must be >= 1"),
        (["-autotune-modelsize", "2M"], "lookuplinear quantize -cutoff N"),
    ],
)
def test_autotune_bad_values(
    argv: list[str], message: str, ft_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "m"
    assert main(["supervised", "-input", str(ft_file), "-output", str(out),
                 "-autotune-validation", str(ft_file), "-autotune-duration", "1", "-dim", "4",
                 *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.with_suffix(".bin").exists()


def test_autotune_metric_of_one_label(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-autotune-metric f1:LABEL scores that label's F1 (1 when every text is right)."""
    assert main(["supervised", "-input", str(ft_file), "-output", str(tmp_path / "m"),
                 "-autotune-validation", str(ft_file), "-autotune-duration", "1",
                 "-autotune-metric", "f1:__label__neg", "-autotune-predictions", "2",
                 "-bucket", "1000", "-dim", "8", "-epoch", "20", "-lr", "0.5"]) == 0
    err = capsys.readouterr().err
    assert "Best score:  " in err and (tmp_path / "m.bin").exists()
    # two predictions of two labels: each label is predicted for every text, so the F1 of
    # one is 2 * 10 / (20 + 10)
    assert "Best score:  0.666667" in err


def test_predict_and_test_with_k_minus_one_take_every_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fastText: k = -1 predicts every label (Model::predict), and test prints 'P@-1'."""
    data = tmp_path / "three.txt"
    data.write_text("\n".join([*LINES, "__label__meh so so , fine"] * 5) + "\n")
    model = tmp_path / "m.bin"
    assert main(["train", str(data), "-o", str(model), "--dim", "4", "-q"]) == 0
    assert main(["predict-prob", str(model), str(data), "-1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 35 and all(sorted(r[::2]) == ["__label__meh", "__label__neg",
                                                      "__label__pos"] for r in rows)
    scores = load_model(model).scores([line.split(" ", 1)[1] for line in data.read_text()
                                       .splitlines()])
    for r, s in zip(rows, scores, strict=True):
        np.testing.assert_allclose([float(p) for p in r[1::2]], np.sort(s)[::-1], atol=5e-6)
    assert main(["predict", str(model), str(data), "-k", "-1", "--threshold", "0.2"]) == 0
    kept = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert kept == [[lab for lab, p in zip(r[::2], r[1::2], strict=True) if float(p) >= 0.2]
                    for r in rows]
    assert main(["test", str(model), str(data), "-1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["N\t35", "P@-1\t0.333", "R@-1\t1"]
    assert main(["predict", str(model), str(data), "-2"]) == 1
    assert "k must be >= 1, or -1 for every label" in capsys.readouterr().err


def _vector_lines(out: str) -> list[list[str]]:
    """Lines as fastText prints vectors: every value followed by one space."""
    lines = out.split("\n")
    assert lines[-1] == "" and all(line.endswith(" ") for line in lines[:-1])
    return [line[:-1].split(" ") for line in lines[:-1]]


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    import io

    monkeypatch.setattr("sys.stdin", type("S", (), {"buffer": io.BytesIO(data)})())


@NOT_LEARNING
def test_print_word_and_sentence_vectors_are_the_mean_table_rows(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastText's print-word-vectors prints 'word v1 ... vd ' (getWordVector: the mean of the
    rows of the word and its subwords), print-sentence-vectors 'v1 ... vd ' per line (for a
    supervised model, the mean of the rows of the line's words and n-grams, labels left out);
    each value as C++ prints a float at setprecision(5). The reference: the dense mean of the
    table's rows over the vectorizer's counts."""
    model_path = tmp_path / "m.bin"
    assert main(["train", str(ft_file), "-o", str(model_path), "--dim", "6", "--wordNgrams",
                 "2", "--minn", "2", "--maxn", "3", "--bucket", "500", "-q"]) == 0
    model = load_model(model_path)
    W = model.estimator.model_.lookup.weight.detach().double().numpy()  # (features, 6)

    def dense_mean(texts: list[str]) -> np.ndarray:
        X = model.vectorizer.transform(texts).toarray().astype(np.float64)
        total = X.sum(axis=1, keepdims=True)
        return (X / np.where(total == 0, 1, total)) @ W

    words = ["great", "film", "unseen", "été", "é"]
    _stdin(monkeypatch, " ".join(words[:2]).encode() + b"\n\t" +
           " ".join(words[2:]).encode() + b"\n")
    assert main(["print-word-vectors", str(model_path)]) == 0
    rows = _vector_lines(capsys.readouterr().out)
    assert [r[0] for r in rows] == words
    expected = dense_mean(words)
    for r, e in zip(rows, expected, strict=True):
        assert r[1:] == [f"{v:.5g}" for v in np.float32(e)]  # as printed: 5 digits
    np.testing.assert_allclose(model.word_vectors(words), expected, rtol=1e-5, atol=1e-7)

    lines = ["__label__pos a great film , truly great", "", "great film __label__neg",
             "nothing known"]
    _stdin(monkeypatch, "\n".join(lines).encode() + b"\n")
    assert main(["print-sentence-vectors", str(model_path)]) == 0
    rows = _vector_lines(capsys.readouterr().out)
    texts = ["a great film , truly great", "", "great film", "nothing known"]
    expected = dense_mean(texts)
    assert len(rows) == 4 and [len(r) for r in rows] == [6] * 4
    for r, e in zip(rows, expected, strict=True):
        np.testing.assert_allclose([float(v) for v in r], e, rtol=1e-4, atol=1e-8)
    assert rows[1] == ["0"] * 6  # a blank line: no feature
    np.testing.assert_allclose(model.sentence_vectors(texts), expected, rtol=1e-5, atol=1e-7)
    # the sentence vector is what the output layer reads: its logits are the model's
    out = model.estimator.model_.output
    logits = model.sentence_vectors(texts[:1]) @ out.weight.detach().numpy().T + (
        out.bias.detach().numpy())
    np.testing.assert_allclose(logits, model.estimator.decision_function(
        model.vectorizer.transform(texts[:1])).reshape(1, -1), rtol=1e-5, atol=1e-6)


@NOT_LEARNING
def test_print_ngrams_and_nn_on_a_lookuplinear_model(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """print-ngrams: the word's row, then one row per char n-gram (its vectorizer's); nn: the
    cosine similarity of the word vectors of the vocabulary, the query left out."""
    model_path = tmp_path / "m.bin"
    assert main(["train", str(ft_file), "-o", str(model_path), "--dim", "5", "--minn", "2",
                 "--maxn", "3", "--bucket", "500", "-q"]) == 0
    model = load_model(model_path)
    W = model.estimator.model_.lookup.weight.detach().numpy()
    assert main(["print-ngrams", str(model_path), "great"]) == 0
    lines = capsys.readouterr().out.splitlines()
    word = W[model.vectorizer.vocabulary_["great"]]
    assert lines[0] == "great " + "".join(f"{v:.5g} " for v in word)
    # the n-grams of " great " (spaces mark a word's ends), 2 and 3 characters long
    assert lines[1].startswith(" g ") and lines[2].startswith("gr ") and len(lines) == 1 + 6 + 5
    vocab = sorted(model.vectorizer.vocabulary_, key=model.vectorizer.vocabulary_.__getitem__)
    V = model.word_vectors(vocab).astype(np.float64)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    sims = V @ V[vocab.index("film")]
    order = [i for i in np.argsort(-sims, kind="stable") if vocab[i] != "film"][:3]
    _stdin(monkeypatch, b"film\n")
    assert main(["nn", str(model_path), "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Query word? ") and out.endswith("Query word? ")
    got = [line.split(" ") for line in out[len("Query word? "):-len("Query word? ")].splitlines()]
    assert [g[0] for g in got] == [vocab[i] for i in order]
    np.testing.assert_allclose([float(g[1]) for g in got], sims[order], rtol=1e-5)


@NOT_LEARNING
def test_pretrained_vectors_start_the_rows_and_join_the_vocabulary(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastText's -pretrainedVectors (getInputMatrixFromFile): the .vec's words join the
    dictionary, their rows start from the vectors, the other rows are drawn as usual; a word
    no training line has keeps its vector."""
    vectors = {"great": [0.5, -0.25, 0.125, 1.0], "awful": [-1.0, 0.0, 2.0, 0.5],
               "superb": [0.3, 0.2, 0.1, 0.0]}
    vec = write_vec(tmp_path / "v.vec", vectors)
    model_path = tmp_path / "m.bin"
    # a learning rate so small that training moves no row measurably: the start is seen
    assert main(["supervised", "-input", str(ft_file), "-output", str(model_path), "-dim", "4",
                 "-epoch", "1", "-lr", "1e-9", "-pretrainedVectors", str(vec),
                 "-verbose", "0"]) == 0
    model = load_model(model_path)
    vocab = model.vectorizer.vocabulary_
    assert "superb" in vocab and "great" in vocab
    W = model.estimator.model_.lookup.weight.detach().numpy()
    for word, v in vectors.items():
        np.testing.assert_allclose(W[vocab[word]], v, atol=1e-6)
    other = [c for w, c in vocab.items() if w not in vectors]
    assert np.abs(W[other]).max() <= 1 / 4 and np.abs(W[other]).min() > 0  # drawn, 1/dim
    _stdin(monkeypatch, b"superb\n")
    assert main(["print-word-vectors", str(model_path)]) == 0
    assert capsys.readouterr().out == "superb 0.3 0.2 0.1 0 \n"


@NOT_LEARNING
@NOT_LEARNING
def test_output_name_writes_the_word_vectors_as_fasttext_does(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`supervised -output m` writes m.bin and then m.vec, as fastText's main.cc does: 'n_words
    dim', then each word and its vector as print-word-vectors prints it, the words (and
    fastText's `</s>`) in fastText's order, by descending count; -pretrainedVectors reads it
    back. `-o PATH` writes the one file given."""
    monkeypatch.chdir(tmp_path)
    assert main(["supervised", "-input", ft_file.name, "-output", "m", "-dim", "4",
                 "-epoch", "2", "-minn", "2", "-maxn", "3", "-bucket", "50", "-verbose", "0"]) == 0
    lines = Path("m.vec").read_text(encoding="utf-8").splitlines()
    words = [line.split(" ")[0] for line in lines[1:]]
    # the words of fastText's own m.vec: fasttext supervised -input train.txt -output m -dim 4
    # -epoch 1 -minn 2 -maxn 3 -bucket 50; cut -d' ' -f1 m.vec
    assert words == ["</s>", "great", "and", "a", "bad", "story", "film", ",", "truly", "an",
                     "awful", "acting", "fine", "boring"]
    assert lines[0] == f"{len(words)} 4"
    monkeypatch.setattr("sys.stdin", __import__("io").TextIOWrapper(
        __import__("io").BytesIO(" ".join(words).encode())))
    assert main(["print-word-vectors", "m.bin"]) == 0
    assert lines[1:] == capsys.readouterr().out.splitlines()
    assert main(["supervised", "-input", ft_file.name, "-output", "m2", "-dim", "4",
                 "-epoch", "1", "-verbose", "0", "-pretrainedVectors", "m.vec"]) == 0
    assert main(["supervised", "-input", ft_file.name, "-o", "m3.bin", "-dim", "4",
                 "-epoch", "1", "-verbose", "0"]) == 0
    assert not Path("m3.vec").exists()


@NOT_LEARNING
@pytest.mark.parametrize(("text", "min_count", "expected"), [
    # fastText, built from its sources: printf TEXT > t.txt; fasttext supervised -input t.txt
    # -output m -dim 2 -epoch 1 -bucket 0 -minCount N; cut -d' ' -f1 m.vec (past line 1)
    ("__label__a w w w w w\n\n\n\n\n\n\n__label__b w w w w w\n", 5, ["w", "</s>"]),
    ("__label__a w w w w w\n \n\t\n\n__label__b w w w w w", 4, ["w", "</s>"]),
    ("__label__a w w w w w\n \n\t\n\n__label__b w w w w w", 5, ["w"]),
    ("\n\n__label__a x y\n__label__b x y\n", 1, ["</s>", "x", "y"]),
])
def test_output_name_counts_the_end_of_line_word_per_newline_as_fasttext_does(
    tmp_path: Path, text: str, min_count: int, expected: list[str],
) -> None:
    """fastText's Dictionary::readWord reads "</s>" for every "\\n" of the training file,
    blank and whitespace-only lines' too, and none after a last line without one: NAME.vec
    orders "</s>" by that count, and -minCount keeps or drops it by that count."""
    data = tmp_path / "t.txt"
    data.write_bytes(text.encode())
    assert main(["supervised", "-input", str(data), "-output", str(tmp_path / "m"), "-dim",
                 "2", "-epoch", "1", "-bucket", "0", "-minCount", str(min_count),
                 "-verbose", "0"]) == 0
    lines = (tmp_path / "m.vec").read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"{len(expected)} 2"
    assert [line.split(" ")[0] for line in lines[1:]] == expected


def test_min_count_label_drops_rare_labels_and_their_lines(
    ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "rare.txt"
    data.write_text(ft_file.read_text() + "__label__rare once only\n"
                    "__label__pos __label__rare2 great again\n")
    model = tmp_path / "m"
    assert main(["supervised", "-input", str(data), "-output", str(model), "-dim", "4",
                 "-epoch", "1", "-minCountLabel", "2", "-loss", "ova"]) == 0
    assert "1 lines left without a label are skipped" in capsys.readouterr().err
    assert load_model(model.with_suffix(".bin")).labels == ["__label__neg", "__label__pos"]


def test_min_count_label_keeps_the_words_of_every_line_in_the_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fastText's dictionary counts the words of every line before -minCountLabel drops
    labels: 'foo' (3 times, twice on lines of the dropped label) passes -minCount 3, and with
    -minCount 1 'baz' and 'qux', only on those lines, are words too."""
    data = tmp_path / "t.txt"
    data.write_text("__label__a foo bar\n__label__rare foo baz\n__label__rare foo qux\n"
                    "__label__a bar x\n__label__b bar y\n__label__b bar\n__label__b bar\n"
                    "__label__a bar\n", encoding="utf-8")
    for min_count, words in (("3", ["bar", "foo"]),
                             ("1", ["bar", "baz", "foo", "qux", "x", "y"])):
        model = tmp_path / f"m{min_count}.bin"
        assert main(["train", str(data), "-o", str(model), "--dim", "4", "--epoch", "1", "-q",
                     "-minCount", min_count, "-minCountLabel", "3"]) == 0
        got = load_model(model)
        assert sorted(got.vectorizer.vocabulary_) == words
        assert got.labels == ["__label__a", "__label__b"]


def _check_predict_as_fasttext(predict: object, learned: bool = True) -> None:
    """What fastText's model.predict returns (python/fasttext_module/fasttext/FastText.py):
    a str gives (tuple of labels, float64 array), a list ([labels...] per line, float32 array
    per line); k=-1 every label; a threshold no label reaches gives ((), empty array); k=0
    and a newline are ValueErrors. ``learned``: the model also ranks the two test lines as
    their words say (fastText's own training here is too erratic to hold it to that)."""
    labels, probs = predict("a great film , truly great")  # type: ignore[operator]
    assert isinstance(labels, tuple) and len(labels) == 1
    assert labels == ("__label__pos",) or not learned
    assert isinstance(probs, np.ndarray) and probs.dtype == np.float64 and probs.shape == (1,)
    labels, probs = predict("a great film , truly great", k=-1)  # type: ignore[operator]
    assert sorted(labels) == ["__label__neg", "__label__pos"] and probs[0] >= probs[1]
    assert labels == ("__label__pos", "__label__neg") or not learned
    assert abs(float(probs.sum()) - 1) < 1e-3
    # a threshold above the best label's probability (fastText reports p + 1e-05 and compares
    # p): nothing; "unknown words" leaves fastText only its end-of-line row, rarely certain
    best = float(predict("unknown words")[1][0])  # type: ignore[operator]
    if best + 2e-5 <= 1.0:
        labels, probs = predict("unknown words", k=5, threshold=best + 2e-5)  # type: ignore[operator]
        assert labels == () and probs.dtype == np.float64 and probs.shape == (0,)
    many, per_line = predict(["a great film", "bad and boring"], k=2)  # type: ignore[operator]
    assert isinstance(many, list) and all(isinstance(x, list) for x in many)
    assert [x[0] for x in many] == ["__label__pos", "__label__neg"] or not learned
    assert isinstance(per_line, list) and all(p.dtype == np.float32 and p.shape == (2,)
                                              for p in per_line)
    with pytest.raises(ValueError, match="one line at a time"):
        predict("two\nlines")  # type: ignore[operator]
    with pytest.raises(ValueError, match="k"):
        predict("a great film", k=0)  # type: ignore[operator]


def test_text_model_predict_as_fasttexts_model_predict(ft_file: Path, tmp_path: Path) -> None:
    model_path = tmp_path / "m.bin"
    assert main(["train", str(ft_file), "-o", str(model_path), "--dim", "8", "--epoch", "20",
                 "-q"]) == 0
    ours = load_model(model_path)
    _check_predict_as_fasttext(ours.predict)
    texts = [line.split(" ", 1)[1] for line in LINES]
    labels, probs = ours.predict(texts, k=-1)
    scores = ours.scores(texts)
    for ls, p, s in zip(labels, probs, scores, strict=True):
        assert ls == [ours.labels[j] for j in np.argsort(-s, kind="stable")]
        np.testing.assert_allclose(p, np.sort(s)[::-1], rtol=1e-6)
    # a label token in the text is not text, as in fastText
    assert ours.predict("__label__neg a great film")[0] == ours.predict("a great film")[0]


def test_fasttexts_own_predict_answers_as_the_check_says(ft_file: Path) -> None:
    """The contract above, checked on fastText's own module (the dev extra installs it)."""
    fasttext = pytest.importorskip(
        "fasttext", reason="fastText's Python module (pip install fasttext-numpy2) is absent")
    for _ in range(10):  # fasttext-numpy2's training stops at random on its NaN check here
        try:
            ft = fasttext.train_supervised(str(ft_file), dim=4, epoch=25, lr=0.5, verbose=0,
                                           thread=1)
            break
        except RuntimeError as e:
            assert "NaN" in str(e)
    else:
        pytest.skip("fastText's training stopped on its NaN check 10 times in a row")
    _check_predict_as_fasttext(ft.predict, learned=False)
    # fastText's sentence vector of a supervised model: the mean of its line's input rows
    # (words and the end-of-line token; no n-grams at these settings), as print-sentence-vectors
    words = ["a", "great", "film"]
    ids = [ft.get_word_id(w) for w in [*words, "</s>"]]
    np.testing.assert_allclose(ft.get_sentence_vector("a great film"),
                               ft.get_input_matrix()[ids].mean(axis=0), rtol=1e-5, atol=1e-7)


@NOT_LEARNING
def test_labels_are_saved_with_every_classifier(tmp_path: Path) -> None:
    texts = [line.split(" ", 1)[1] for line in LINES]
    y = [line.split(" ", 1)[0] for line in LINES]
    vec = FastTextVectorizer()
    clf = LookupClassifier(loss="log_loss", hidden=4, mode="mean", max_iter=2,
                           random_state=0).fit(vec.fit_transform(texts), y)
    model = load_model(save_model(tmp_path / "m.ll", clf, vectorizer=vec))  # no labels=
    assert model.labels == ["__label__neg", "__label__pos"] == clf.classes_.tolist()
    assert model.predict(texts[0])[0][0] in model.labels


@NOT_LEARNING
def test_a_table_model_on_fasttext_lines_and_a_tsv_without_columns_say_what_to_do(
    tsv_file: Path, ft_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model trained on a TSV, tested on a .txt of fastText lines with a long first line:
    one short error naming --label (not the whole line as a 'header'); with --label the
    lines are read as fastText's, their prefix dropped to match the model's labels. `train
    x.tsv` without --text-column names --text-column."""
    model = tmp_path / "m.ll"
    assert main(["train", str(tsv_file), "-o", str(model), "--dim", "4", "-q",
                 "--text-column", "text", "--label-column", "label"]) == 0
    long = tmp_path / "long.txt"
    long.write_text("__label__pos " + "word " * 600 + "\n" + ft_file.read_text())
    assert main(["test", str(model), str(long)]) == 1
    err = capsys.readouterr().err
    assert "add --label __label__" in err and "(3013 characters)" in err and len(err) < 800
    assert main(["test", str(model), str(long), "--label", "__label__"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"N\t{len(LINES) * 5 + 1}\n")
    assert "'__label__' of" in captured.err and "dropped to match" in captured.err
    assert main(["predict", str(model), str(long), "-label", "__label__"]) == 0
    assert set(capsys.readouterr().out.split()) <= {"pos", "neg"}
    assert main(["train", str(tsv_file), "-o", str(tmp_path / "x.ll"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "named like a CSV/TSV table" in err and "--text-column COL --label-column COL" in err
