"""The input kernels (offsets check, dropping an index, mean/sqrtn weights), ``mode="max"`` and
the hashed n-gram counts: C against the torch/Python fallback and against an obviously-right
reference written here with lists, numpy and ATen's own ops.

Every test that runs C skips where the C kernels are not built; the fallback tests run
everywhere (``use_backend("torch")``).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from forms import needs_c
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lookuplinear import Bags, LookupIndexError, LookupLinear
from lookuplinear.ops import (
    _ngrams,
    bag_max,
    c_available,
    count_matrix,
    drop_entries,
    mode_weights,
    ngram_column,
    offsets_ok,
    token_ids,
    use_backend,
)

BACKENDS = ["c", "torch"]
INT_DTYPES = [torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float32, torch.float64]
#: weights exact in float32, so every bag's sum (and sum of squares) is exact in float64 and "sums
#: to 0" really is 0 on both backends
DYADIC = [-2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0]


def in_backend(name: str) -> Any:
    """``use_backend(name)``, the test skipped where it asks for C and C is not built."""
    if name == "c" and not c_available():
        pytest.skip("the C kernels are not built")
    return use_backend(name)


@st.composite
def bag_lists(draw: st.DrawFn, max_index: int = 9) -> list[list[int]]:
    """A batch of bags: none, empty ones, repeats."""
    return draw(
        st.lists(st.lists(st.integers(0, max_index), max_size=6), max_size=6)
    )


def csr(lists: list[list[int]], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, offsets)`` of a list of bags, both of ``dtype``."""
    offsets = np.cumsum([0] + [len(b) for b in lists])
    indices = [i for b in lists for i in b]
    return torch.tensor(indices, dtype=dtype), torch.tensor(offsets, dtype=dtype)


# ---------------------------------------------------------------------- offsets_ok
def offsets_ok_reference(offsets: list[int], nnz: int, include_last: bool) -> bool:
    if not offsets:
        return False
    ends = offsets[-1] == nnz if include_last else offsets[-1] <= nnz
    return offsets[0] == 0 and ends and all(a <= b for a, b in pairwise(offsets))


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(
    offsets=st.lists(st.integers(-3, 12), max_size=8),
    nnz=st.integers(0, 12),
    dtype=st.sampled_from(INT_DTYPES),
    include_last=st.booleans(),
)
@example(offsets=[], nnz=0, dtype=torch.int64, include_last=True)  # no offsets at all
@example(offsets=[], nnz=0, dtype=torch.int32, include_last=False)
@example(offsets=[0], nnz=0, dtype=torch.int64, include_last=True)  # an empty batch
@example(offsets=[0, 2, 2, 5], nnz=5, dtype=torch.int32, include_last=True)  # an empty bag
@example(offsets=[0, 2, 2], nnz=5, dtype=torch.int64, include_last=False)  # starts only
@example(offsets=[0, 3, 2, 5], nnz=5, dtype=torch.int64, include_last=True)  # one decrease
@example(offsets=[0, 5, 5], nnz=4, dtype=torch.int32, include_last=False)  # starts past nnz
def test_offsets_ok_equals_its_definition(
    name: str, offsets: list[int], nnz: int, dtype: torch.dtype, include_last: bool
) -> None:
    """Contiguous and strided tensors, and numpy arrays, on each backend."""
    want = offsets_ok_reference(offsets, nnz, include_last)
    t = torch.tensor(offsets, dtype=dtype)
    with in_backend(name):
        assert offsets_ok(t, nnz, include_last=include_last) is want
        strided = t.repeat_interleave(2)[::2]  # the same values through a non-contiguous view
        assert offsets_ok(strided, nnz, include_last=include_last) is want
        assert offsets_ok(t.numpy(), nnz, include_last=include_last) is want
        assert offsets_ok(strided.numpy(), nnz, include_last=include_last) is want


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_offsets_ok_at_the_limits_of_the_dtype(name: str, dtype: torch.dtype) -> None:
    """Offsets near the dtype's largest value, ``nnz`` beyond int32, and a long valid run whose
    only fault is at the very end or start (the C loop has no early exit to get wrong)."""
    top = torch.iinfo(dtype).max
    with in_backend(name):
        assert offsets_ok(torch.tensor([0, top], dtype=dtype), top)
        assert not offsets_ok(torch.tensor([0, top], dtype=dtype), top - 1)
        start = min(top, 2**40 - 1)  # a last start below an nnz that int32 cannot hold
        assert offsets_ok(torch.tensor([0, start], dtype=dtype), 2**40, include_last=False)
        assert not offsets_ok(torch.tensor([0, top, 0], dtype=dtype), 0)
        long = torch.arange(0, 4100, dtype=dtype)
        assert offsets_ok(long, 4099)
        long[-2] = 4099 + 1
        assert not offsets_ok(long, 4099)
        long = torch.arange(0, 4100, dtype=dtype)
        long[0] = 1
        assert not offsets_ok(long, 4099)


def test_offsets_ok_of_other_dtypes_runs_torch_and_numpy_ops() -> None:
    """int16 offsets (no C entry point) are checked with torch or numpy ops."""
    o = torch.tensor([0, 2, 2, 5], dtype=torch.int16)
    assert offsets_ok(o, 5) and not offsets_ok(o, 4)
    assert offsets_ok(o.numpy(), 5) and not offsets_ok(o.numpy(), 4)


# ---------------------------------------------------------------------- drop_entries
def drop_reference(
    lists: list[list[int]], value: int
) -> tuple[list[int], list[int], list[int]] | None:
    kept, indices, offsets, k = [], [], [0], 0
    for bag in lists:
        for i in bag:
            if i != value:
                kept.append(k)
                indices.append(i)
            k += 1
        offsets.append(len(indices))
    return None if len(kept) == k else (kept, indices, offsets)


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(lists=bag_lists(), value=st.integers(0, 9), dtype=st.sampled_from(INT_DTYPES))
@example(lists=[], value=0, dtype=torch.int64)  # no bags
@example(lists=[[], []], value=0, dtype=torch.int32)  # only empty bags
@example(lists=[[1, 1], [1]], value=1, dtype=torch.int32)  # every entry dropped
@example(lists=[[0, 2], []], value=1, dtype=torch.int64)  # nothing to drop
def test_drop_entries_equals_its_definition(
    name: str, lists: list[list[int]], value: int, dtype: torch.dtype
) -> None:
    indices, offsets = csr(lists, dtype)
    want = drop_reference(lists, value)
    with in_backend(name):
        got = drop_entries(indices, offsets, value)
    if want is None:
        assert got is None
        return
    assert got is not None
    kept, new_indices, new_offsets = got
    assert kept.dtype == torch.int64
    assert new_indices.dtype == new_offsets.dtype == dtype
    assert (kept.tolist(), new_indices.tolist(), new_offsets.tolist()) == want


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_drop_entries_of_huge_index_values(name: str, dtype: torch.dtype) -> None:
    """Indices at the dtype's limits, and values no entry of the dtype can hold."""
    info = torch.iinfo(dtype)
    lists = [[info.max, 3], [info.min, info.max], []]
    indices, offsets = csr(lists, dtype)
    with in_backend(name):
        got = drop_entries(indices, offsets, info.max)
        assert got is not None
        assert [t.tolist() for t in got] == [[1, 2], [3, info.min], [0, 1, 2, 2]]
        assert drop_entries(indices, offsets, 2**63) is None  # beyond int64
        assert drop_entries(indices, offsets, -(2**63) - 1) is None
        if dtype == torch.int32:
            assert drop_entries(indices, offsets, 2**40) is None  # beyond int32


@pytest.mark.parametrize("name", BACKENDS)
def test_drop_entries_of_a_value_beyond_int32_drops_no_zero(name: str) -> None:
    """int32 entries and a value beyond int32 whose low 32 bits are 0: nothing is dropped (the
    torch ops compared the value wrapped to int32, and dropped the zeros)."""
    indices, offsets = csr([[0, 3], [0]], torch.int32)
    with in_backend(name):
        assert drop_entries(indices, offsets, 2**40) is None


@needs_c
def test_drop_entries_of_strided_or_mixed_dtypes_equals_torch_ops() -> None:
    """Non-contiguous indices (read through a copy) and offsets of another dtype (torch ops)."""
    indices = torch.tensor([3, 0, 1, 0, 2, 0], dtype=torch.int64)[::2]  # [3, 1, 2]
    for offsets in (torch.tensor([0, 1, 3]), torch.tensor([0, 1, 3], dtype=torch.int32)):
        with use_backend("c"):
            got = drop_entries(indices, offsets, 1)
        with use_backend("torch"):
            want = drop_entries(indices, offsets, 1)
        assert got is not None and want is not None
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b) and a.dtype == b.dtype


# ---------------------------------------------------------------------- mode_weights
@st.composite
def weighted_bags(draw: st.DrawFn) -> tuple[list[list[int]], list[list[float]] | None]:
    lists = draw(bag_lists())
    if draw(st.booleans()):
        return lists, None
    weights = [[draw(st.sampled_from(DYADIC)) for _ in bag] for bag in lists]
    return lists, weights


def mode_weights_reference(
    lists: list[list[int]], weights: list[list[float]] | None, sqrt: bool
) -> list[float]:
    out: list[float] = []
    for b, bag in enumerate(lists):
        w = np.ones(len(bag)) if weights is None else np.array(weights[b], np.float64)
        denom = np.sqrt((w * w).sum()) if sqrt else w.sum()
        out += (w / denom if denom != 0 else np.zeros_like(w)).tolist()
    return out


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(
    data=weighted_bags(),
    sqrt=st.booleans(),
    dtype=st.sampled_from(FLOAT_DTYPES),
    int_dtype=st.sampled_from(INT_DTYPES),
)
@example(data=([], None), sqrt=False, dtype=torch.float32, int_dtype=torch.int64)  # no bags
@example(data=([[0, 1], [], [2]], [[1.0, -1.0], [], [0.0]]), sqrt=False, dtype=torch.float32,
         int_dtype=torch.int32)  # a zero sum, an empty bag, a zero weight
@example(data=([[0, 1]], [[0.0, 0.0]]), sqrt=True, dtype=torch.float64,
         int_dtype=torch.int64)  # a zero sum of squares
def test_mode_weights_equal_their_definition(
    name: str,
    data: tuple[list[list[int]], list[list[float]] | None],
    sqrt: bool,
    dtype: torch.dtype,
    int_dtype: torch.dtype,
) -> None:
    lists, weights = data
    _, offsets = csr(lists, int_dtype)
    w = None if weights is None else torch.tensor([x for b in weights for x in b], dtype=dtype)
    with in_backend(name):
        got = mode_weights(offsets, w, sqrt, dtype)
    assert got.dtype == dtype and got.shape == (int(offsets[-1]),)
    want = torch.tensor(mode_weights_reference(lists, weights, sqrt), dtype=torch.float64)
    # w * (1 / d) against w / d, then a rounding to dtype: one unit in the last place apart
    rtol = 1.2e-7 if dtype == torch.float32 else 1e-15
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=0)


@needs_c
@settings(max_examples=50, deadline=None)
@given(data=weighted_bags(), sqrt=st.booleans(), seed=st.integers(0, 2**16))
def test_mode_weights_of_any_float_weights_equal_torch_ops(
    data: tuple[list[list[int]], list[list[float]] | None], sqrt: bool, seed: int
) -> None:
    """Random (not dyadic) float64 weights: C and torch ops agree to rounding (C may fuse a
    multiply-add in the sum of squares), and float32 weights read as float32."""
    lists, _ = data
    _, offsets = csr(lists, torch.int64)
    w = torch.randn(int(offsets[-1]), generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    for dtype in FLOAT_DTYPES:
        with use_backend("c"):
            got = mode_weights(offsets, w.to(dtype), sqrt, dtype)
        with use_backend("torch"):
            want = mode_weights(offsets, w.to(dtype), sqrt, dtype)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- bag_max
@needs_c
@settings(max_examples=100, deadline=None)
@given(
    lists=bag_lists(max_index=5),
    dtype=st.sampled_from(FLOAT_DTYPES),
    int_dtype=st.sampled_from(INT_DTYPES),
    dim=st.sampled_from([1, 3, 16, 33]),
    nan=st.booleans(),
)
@example(lists=[[1, 1], [], [0, 2, 0]], dtype=torch.float32, int_dtype=torch.int64, dim=3,
         nan=False)  # duplicates, an empty bag
@example(lists=[[0, 1], [1, 0], [2]], dtype=torch.float64, int_dtype=torch.int32, dim=5,
         nan=True)  # a NaN first and a NaN later
@example(lists=[], dtype=torch.float32, int_dtype=torch.int64, dim=4, nan=False)  # no bags
def test_bag_max_equals_atens_max_forward_and_backward(
    lists: list[list[int]], dtype: torch.dtype, int_dtype: torch.dtype, dim: int, nan: bool
) -> None:
    """Forward to the bit (NaN where ATen has NaN) and the gradient, against ATen's
    ``F.embedding_bag(mode="max")``; ties between rows keep the first entry on both."""
    gen = torch.Generator().manual_seed(dim)
    W = torch.randn(6, dim, generator=gen, dtype=dtype)
    W[0] = W[1]  # a tie between two rows
    if nan:
        W[1, 0] = float("nan")  # row 1 first: NaN kept; row 1 later: NaN never wins
        W[2, dim - 1] = float("nan")
    W.requires_grad_(True)
    indices, offsets = csr(lists, int_dtype)
    with use_backend("c"):
        out = bag_max(W, indices, offsets)
    assert out is not None
    ref = F.embedding_bag(indices.long(), W, offsets.long(), mode="max", include_last_offset=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)
    g = torch.randn(out.shape, generator=gen, dtype=dtype)
    (grad,) = torch.autograd.grad(out, W, g)
    (grad_ref,) = torch.autograd.grad(ref, W, g)
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=0)


@needs_c
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bag_max_names_the_first_entry_out_of_range(dtype: torch.dtype) -> None:
    """Huge and negative indices: IndexError at the first bad entry, nothing read outside the
    table (a read there would crash or give garbage rather than raise)."""
    W = torch.randn(10, 4)
    for bad in (-1, 10, torch.iinfo(dtype).max, torch.iinfo(dtype).min):
        indices, offsets = csr([[1, 2], [bad, 3], [4]], dtype)
        with use_backend("c"), pytest.raises(IndexError, match=r"indices\[2\]"):
            bag_max(W, indices, offsets)


@needs_c
def test_bag_max_declines_what_c_does_not_take() -> None:
    """None (the caller then runs ATen's max): the torch backend, a dtype C has no kernel for, a
    non-contiguous table; mixed index dtypes are read as int64."""
    W = torch.randn(5, 3)
    indices, offsets = csr([[0, 4], [2]], torch.int64)
    with use_backend("torch"):
        assert bag_max(W, indices, offsets) is None
    with use_backend("c"):
        assert bag_max(W.half(), indices, offsets) is None
        assert bag_max(W.t().contiguous().t(), indices, offsets) is None
        out = bag_max(W, indices.int(), offsets)
    ref = F.embedding_bag(indices, W, offsets, mode="max", include_last_offset=True)
    assert out is not None and torch.equal(out, ref)


@needs_c
def test_bag_max_backward_differentiates_again() -> None:
    """Under ``create_graph=True`` the C kernels' gradient keeps its graph (the scatter by
    torch ops): a penalty on it gives the second derivative of ATen's max over the same
    bags, never silently 0."""
    W = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    indices, offsets = csr([[0, 4], [], [2, 0]], torch.int64)
    rows = F.embedding(indices, W)
    totals = []
    with use_backend("c"):
        for out in (bag_max(W, indices, offsets),
                    torch.stack([rows[:2].max(0).values, torch.zeros(3, dtype=torch.float64),
                                 rows[2:].max(0).values])):
            assert out is not None
            task = out.pow(2).sum()
            (g,) = torch.autograd.grad(task, W, create_graph=True)
            assert g.requires_grad
            totals.append(torch.autograd.grad(task + g.pow(3).sum(), W)[0])
    torch.testing.assert_close(totals[0], totals[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_layer_on_both_backends_gives_the_same_output_and_gradient(
    mode: str, padding_idx: int | None
) -> None:
    """The layer end to end (offsets check, padding dropped, mean/sqrtn weights, max) on C and
    torch ops, and ``max`` against ATen's directly."""
    if not c_available():
        pytest.skip("the C kernels are not built")
    gen = torch.Generator().manual_seed(0)
    lists = [[3, 0, 1], [0], [], [2, 2, 4, 0], [5]]
    results = []
    for name in BACKENDS:
        layer = LookupLinear(6, 4, mode=mode, padding_idx=padding_idx, bias=False)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(6, 4, generator=torch.Generator().manual_seed(1)))
        with use_backend(name):
            out = layer(Bags.from_lists(lists))
            g = torch.randn(out.shape, generator=gen.manual_seed(2))
            out.backward(g)
        grad = layer.weight.grad
        assert grad is not None
        results.append((out.detach(), grad.to_dense() if grad.is_sparse else grad))
    (out_c, grad_c), (out_t, grad_t) = results
    torch.testing.assert_close(out_c, out_t)
    torch.testing.assert_close(grad_c, grad_t)


def test_layer_max_names_an_index_out_of_range_on_both_backends() -> None:
    for name in BACKENDS:
        if name == "c" and not c_available():
            continue
        with use_backend(name):
            layer = LookupLinear(10, 3, mode="max")
            with pytest.raises(LookupIndexError, match="index 2147483648 at indices\\[2\\]"):
                layer(Bags.from_lists([[1, 2], [2**31, 3]]))


# ---------------------------------------------------------------------- n-grams
WORDS = st.text(st.characters(blacklist_categories=["Zs", "Zl", "Zp", "Cc", "Cs"]),
                min_size=1, max_size=6)
TEXTS = st.lists(st.lists(st.sampled_from(["a", "b", "été", "日本", "🙂x"]) | WORDS,
                          max_size=8).map(" ".join), max_size=8)


def vectorize(texts: list[str], word_ngrams: int, bucket: int) -> tuple[sp.csr_matrix, int]:
    """:func:`count_matrix` of the texts with every word a column (in order of first
    occurrence): ``(matrix, number of words)``."""
    tokens = token_ids(t.split() for t in texts)
    n_words = len(tokens.unique)
    column = np.arange(n_words, dtype=np.int64)
    n_columns = n_words + (bucket if word_ngrams > 1 else 0)
    return count_matrix(tokens, column, word_ngrams, bucket, n_words, n_columns), n_words


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(texts=TEXTS, word_ngrams=st.integers(1, 4),
       bucket=st.sampled_from([1, 3, 64, 2_000_000]))
@example(texts=[], word_ngrams=2, bucket=64)  # no texts
@example(texts=["", "a"], word_ngrams=3, bucket=64)  # an empty text, a text shorter than n
@example(texts=["a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a"], word_ngrams=2,
         bucket=5)  # one n-gram repeated: the row's sort sees one value many times
def test_count_matrix_equals_scikit_learns_vectorizers(
    name: str, texts: list[str], word_ngrams: int, bucket: int
) -> None:
    """Words equal ``CountVectorizer``'s counts, n-grams ``HashingVectorizer(ngram_range=(2,
    n), alternate_sign=False, norm=None)``'s; canonical float32 CSR, on both backends."""
    text_mod = pytest.importorskip("sklearn.feature_extraction.text")
    with in_backend(name):
        X, n_words = vectorize(texts, word_ngrams, bucket)
    assert X.has_canonical_format and X.dtype == np.float32
    assert X.shape == (len(texts), n_words + (bucket if word_ngrams > 1 else 0))
    if X.shape[0] * X.shape[1] == 0:  # no texts, or no words and no n-gram columns
        return
    vocabulary = {w: i for i, w in enumerate(dict.fromkeys(w for t in texts for w in t.split()))}
    words = text_mod.CountVectorizer(token_pattern=r"\S+", lowercase=False,
                                     vocabulary=vocabulary or {"": 0}).transform(texts)
    expect = [words[:, :n_words]]
    if word_ngrams > 1:
        expect.append(text_mod.HashingVectorizer(
            token_pattern=r"\S+", lowercase=False, norm=None, ngram_range=(2, word_ngrams),
            n_features=bucket, alternate_sign=False).transform(texts))
    assert abs(X - sp.hstack(expect)).max() == 0


@pytest.mark.parametrize("wide", [False, True])
def test_count_matrix_of_c_equals_the_python_fallback_array_for_array(wide: bool) -> None:
    """The same CSR arrays, index dtype included (int64 beyond int32 columns)."""
    if not c_available():
        pytest.skip("the C kernels are not built")
    pytest.importorskip("sklearn")
    texts = ["the cat sat on the mat", "", "the the the", "日本 語 🙂 x y z w"]
    bucket = 2**31 + 5 if wide else 1000
    with use_backend("c"):
        X, _ = vectorize(texts, 4, bucket)
    with use_backend("torch"):
        Y, _ = vectorize(texts, 4, bucket)
    assert X.indices.dtype == Y.indices.dtype == (np.int64 if wide else np.int32)
    for a, b in ((X.indices, Y.indices), (X.indptr, Y.indptr), (X.data, Y.data)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", BACKENDS)
def test_count_matrix_of_long_texts_equals_scikit_learns(name: str) -> None:
    """Rows of thousands of columns with many repeats: the row sort past its short-range case."""
    text_mod = pytest.importorskip("sklearn.feature_extraction.text")
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(40)])
    texts = [" ".join(rng.choice(vocab, size=n)) for n in (3000, 700, 25, 26, 0, 1)]
    with in_backend(name):
        X, _ = vectorize(texts, 3, 50)
    assert X.has_canonical_format
    vocabulary = {w: i for i, w in enumerate(dict.fromkeys(w for t in texts for w in t.split()))}
    expect = sp.hstack([
        text_mod.CountVectorizer(token_pattern=r"\S+", lowercase=False,
                                 vocabulary=vocabulary).transform(texts),
        text_mod.HashingVectorizer(token_pattern=r"\S+", lowercase=False, norm=None,
                                   ngram_range=(2, 3), n_features=50,
                                   alternate_sign=False).transform(texts),
    ])
    assert abs(X - expect).max() == 0


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.lists(st.sampled_from(["a", "b", "c", "dd", "é"]), max_size=6),
                       max_size=5))
def test_token_ids_number_tokens_in_order_of_first_occurrence(
    name: str, tokens: list[list[str]]
) -> None:
    with in_backend(name):
        t = token_ids(iter(tokens))
    unique = list(dict.fromkeys(w for words in tokens for w in words))
    assert t.unique == unique
    assert t.ids.tolist() == [unique.index(w) for words in tokens for w in words]
    assert t.doc_ptr.tolist() == np.cumsum([0] + [len(w) for w in tokens]).tolist()


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=40))
@example(data=b"")
@example(data=b"\xff\xfe\xfd")  # bytes >= 0x80 in the tail
def test_murmur_equals_scikit_learns(name: str, data: bytes) -> None:
    utils = pytest.importorskip("sklearn.utils")
    with in_backend(name):
        assert _ngrams.murmur(data) == utils.murmurhash3_32(data, seed=0, positive=False)


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 2**31 - 1, 2**31, 2**31 + 5, 2**40])
def test_bucket_is_feature_hashers_column(name: str, n: int) -> None:
    """``abs(h) % n``, ``abs(-2**31)`` taken as ``2**31`` (hard to reach through a string)."""
    with in_backend(name):
        for h in (0, 1, -1, 12345, -12345, 2**31 - 1, -(2**31) + 1):
            assert _ngrams.bucket(h, n) == abs(h) % n
        assert _ngrams.bucket(-(2**31), n) == (2**31) % n
        assert ngram_column(["a", "b"], n) == _ngrams.bucket(_ngrams.murmur(b"a b"), n)
