"""KeyedBags row selection, cat and construction from columns, against the slow obvious way."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import (
    Bags,
    InputTypeError,
    InputValueError,
    KeyedBags,
    KeyedBagsDataset,
    LookupIndexError,
    LookupLinearError,
)

I64 = st.integers(-(2**63), 2**63 - 1)
IDS = st.one_of(st.integers(0, 20), I64)


def _lists(kb: KeyedBags) -> dict[str, list[list[int]]]:
    """Each feature's bags as Python lists: the obvious reading of a batch."""
    out = {}
    for k in kb:
        b = kb[k]
        off = b.offsets.tolist()
        out[k] = [b.indices[off[i] : off[i + 1]].tolist() for i in range(len(b))]
    return out


def _weights(kb: KeyedBags) -> dict[str, list[list[float]]] | None:
    if kb.weights is None:
        return None
    out = {}
    for k in kb:
        b = kb[k]
        off = b.offsets.tolist()
        out[k] = [b.weights[off[i] : off[i + 1]].tolist() for i in range(len(b))]
    return out


@st.composite
def batches(draw, weighted: bool | None = None):
    n = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=3, unique=True))
    feats = {k: draw(st.lists(st.lists(IDS, max_size=4), min_size=n, max_size=n)) for k in names}
    if weighted is None:
        weighted = draw(st.booleans())
    if not weighted:
        return KeyedBags.from_dict(feats)
    return KeyedBags.from_dict({
        k: Bags.from_lists(v, [[float(i + 1) for i in range(len(b))] for b in v])
        for k, v in feats.items()
    })


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kb=batches())
def test_rows_equal_the_obvious_selection(data, kb):
    n = len(kb)
    form = data.draw(st.sampled_from(["slice", "tensor", "list", "numpy", "numpy32", "read-only",
                                      "mask", "mask list"]))
    if form == "slice":
        sl = slice(data.draw(st.integers(-8, 8)), data.draw(st.integers(-8, 8)),
                   data.draw(st.sampled_from([None, 1, 2, -1])))
        rows, picked = sl, list(range(n))[sl]
    elif form in ("mask", "mask list"):
        mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        rows = mask if form == "mask list" else torch.tensor(mask, dtype=torch.bool)
        picked = [i for i in range(n) if mask[i]]
    else:
        picked = data.draw(st.lists(st.integers(-n, n - 1), max_size=8)) if n else []
        read_only = np.array(picked, dtype=np.int64)
        read_only.flags.writeable = False  # taken without a copy warning
        rows = {"tensor": torch.tensor(picked, dtype=torch.long), "list": picked,
                "numpy": np.array(picked, dtype=np.int64),
                "numpy32": np.array(picked, dtype=np.int32), "read-only": read_only}[form]
    out = kb[rows]
    lists, weights = _lists(kb), _weights(kb)
    assert out.keys() == kb.keys()
    assert _lists(out) == {k: [v[i] for i in picked] for k, v in lists.items()}
    if weights is None:
        assert out.weights is None
    else:
        assert _weights(out) == {k: [v[i] for i in picked] for k, v in weights.items()}
    for k in kb:  # the dense equivalent: rows of each feature's multi-hot matrix
        small = kb[k].indices.clamp(0, 20) if kb[k].nnz else kb[k].indices
        if bool((kb[k].indices == small).all()):
            dense = kb[k].to_dense(21)
            assert torch.equal(out[k].to_dense(21), dense[torch.tensor(picked, dtype=torch.long)])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kb=batches())
def test_cat_of_pieces_is_the_batch(data, kb):
    n = len(kb)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    bounds = [0, *cuts, n]
    pieces = [kb[a:b] for a, b in itertools.pairwise(bounds)]
    if data.draw(st.booleans()):  # a weighted and an unweighted piece side by side
        pieces[0] = pieces[0].unweighted()
    whole = KeyedBags.cat(pieces)
    assert _lists(whole) == _lists(kb)
    if kb.weights is None:
        assert whole.weights is None
    elif len(pieces) > 1 or pieces[0].weights is not None:
        expected = _weights(kb)
        if pieces[0].weights is None:  # the unweighted piece's entries count 1
            expected = {k: [[1.0] * len(b) if i < len(pieces[0]) else w
                            for i, (b, w) in enumerate(zip(_lists(kb)[k], v, strict=True))]
                        for k, v in expected.items()}
        assert _weights(whole) == expected


@pytest.mark.parametrize("unweighted_first", [False, True])
def test_cat_weights_take_every_batchs_dtype(unweighted_first):
    """float16 then float64 weights give float64 (1e-8 kept), as torch.cat of the dense
    matrices does; an unweighted batch counts 1s in that dtype."""
    def one(index, weight, dtype):
        w = None if dtype is None else torch.tensor([weight], dtype=dtype)
        return KeyedBags(["u"], torch.tensor([index]), lengths=torch.tensor([1]), weights=w)

    batches = [one(1, 0.5, torch.float16), one(2, 1e-8, torch.float64)]
    if unweighted_first:
        batches.insert(0, one(0, 1.0, None))
    whole = KeyedBags.cat(batches)
    assert whole.weights is not None and whole.weights.dtype == torch.float64
    dense = [b["u"].to_dense(3, dtype=torch.float64) for b in batches]
    assert torch.equal(whole["u"].to_dense(3), torch.cat(dense))


def test_from_dict_weights_take_every_features_dtype():
    """KeyedBags.from_dict promotes the features' weights as cat does: float16 then float64
    give float64 (1e-8 kept, where the first feature's float16 made it 0)."""
    one = torch.tensor([0, 1])
    kb = KeyedBags.from_dict({
        "a": Bags(torch.tensor([1]), one, torch.tensor([0.5], dtype=torch.float16)),
        "b": Bags(torch.tensor([2]), one, torch.tensor([1e-8], dtype=torch.float64)),
    })
    assert kb.weights is not None and kb.weights.dtype == torch.float64
    assert kb.weights.tolist() == [0.5, 1e-8]


def test_rows_and_cat_errors():
    kb = KeyedBags.from_dict({"user": [[3], [1, 4]], "item": [[7], []]})
    with pytest.raises(LookupIndexError, match=r"row 2 .* out of range for a batch of 2"):
        kb[torch.tensor([0, 2])]
    with pytest.raises(IndexError, match=r"row -3"):
        kb[[-3]]
    with pytest.raises(LookupIndexError, match=r"boolean mask .* shape \(2,\), got shape \(3,\)"):
        kb[torch.tensor([True, False, True])]
    with pytest.raises(InputTypeError, match="rows must be a slice"):
        kb[torch.tensor([0.0])]
    with pytest.raises(KeyError, match="no feature 'query'"):
        kb["query"]
    with pytest.raises(InputValueError, match="no batches"):
        KeyedBags.cat([])
    other = KeyedBags.from_dict({"item": [[7]], "user": [[3]]})
    with pytest.raises(InputValueError, match=r"keys \['item', 'user'\] .* same order"):
        KeyedBags.cat([kb, other])
    with pytest.raises(InputTypeError, match="not a KeyedBags"):
        KeyedBags.cat([kb, {"user": [[1]]}])


# ---------------------------------------------------------------- from columns

try:
    import pyarrow as pa
except ImportError:  # an optional dependency
    pa = None
try:
    import pandas as pd
except ImportError:  # an optional dependency
    pd = None

LIST_FORMS = ["list", "object", "object_of_arrays"] + (["pandas"] if pd else []) + (
    ["pyarrow", "pyarrow_chunked", "pyarrow_sliced", "pyarrow_list_view"] if pa else []) + (
    ["pandas_arrow"] if pd and pa else [])
SCALAR_FORMS = ["list", "numpy", "numpy_int32", "object"] + (["pandas"] if pd else []) + (
    ["pyarrow"] if pa else [])


def _list_column(form: str, bags: list[list[int]]):
    if form == "list":
        return bags
    if form in ("object", "object_of_arrays"):
        col = np.empty(len(bags), dtype=object)
        for i, b in enumerate(bags):
            col[i] = np.array(b, dtype=np.int64) if form == "object_of_arrays" else b
        return col
    if form == "pandas":
        return pd.Series([*bags, [0]], dtype=object).iloc[: len(bags)]
    if form == "pyarrow":
        return pa.array(bags, type=pa.list_(pa.int64()))
    if form == "pyarrow_chunked":
        h = len(bags) // 2
        return pa.chunked_array([pa.array(bags[:h], type=pa.list_(pa.int64())),
                                 pa.array(bags[h:], type=pa.list_(pa.int64()))])
    if form == "pyarrow_sliced":  # offsets that do not start at 0
        return pa.array([[5, 5], *bags], type=pa.list_(pa.int64()))[1:]
    if form == "pyarrow_list_view":  # each row's start and size, rows stored in reverse
        flat = [i for b in reversed(bags) for i in b]
        ends = np.cumsum([len(b) for b in reversed(bags)])[::-1]
        sizes = np.array([len(b) for b in bags], dtype=np.int32)
        return pa.ListViewArray.from_arrays(pa.array((ends - sizes).astype(np.int32)),
                                            pa.array(sizes), pa.array(flat, pa.int64()))
    assert form == "pandas_arrow"
    return pd.Series(bags, dtype=pd.ArrowDtype(pa.list_(pa.int64())))


def _scalar_column(form: str, ids: list[int]):
    if form == "list":
        return ids
    if form in ("numpy", "numpy_int32"):
        return np.array(ids, dtype=np.int32 if form == "numpy_int32" else np.int64)
    if form == "object":
        return np.array(ids, dtype=object)
    if form == "pandas":
        return pd.Series(ids, dtype="int64")
    return pa.array(ids, type=pa.int64())


@settings(max_examples=80, deadline=None)
@given(data=st.data(), n=st.integers(0, 5),
       names=st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True))
def test_from_columns_equals_from_dict(data, n, names):
    columns, expected = {}, {}
    for k in names:
        if data.draw(st.booleans()):
            form = data.draw(st.sampled_from(SCALAR_FORMS))
            small = form == "numpy_int32"
            ids = data.draw(st.lists(st.integers(-(2**31), 2**31 - 1) if small else IDS,
                                     min_size=n, max_size=n))
            columns[k], expected[k] = _scalar_column(form, ids), [[i] for i in ids]
        else:
            form = data.draw(st.sampled_from(LIST_FORMS))
            bags = data.draw(st.lists(st.lists(IDS, max_size=4), min_size=n, max_size=n))
            columns[k], expected[k] = _list_column(form, bags), bags
    kb = KeyedBags.from_columns(columns)
    assert kb.keys() == names
    assert kb.values.dtype == torch.int64
    assert _lists(kb) == expected
    if n:
        assert _lists(kb) == _lists(KeyedBags.from_dict(expected))


@pytest.mark.skipif(pd is None, reason="needs pandas")
def test_from_dataframe_columns():
    df = pd.DataFrame({"user": [3, 1, 2], "tags": [[7, 7, 2], [], [1]], "label": [0.5, 1, 0]})
    kb = KeyedBags.from_dataframe(df, columns=["user", "tags"])
    assert _lists(kb) == {"user": [[3], [1], [2]], "tags": [[7, 7, 2], [], [1]]}
    assert _lists(KeyedBags.from_dataframe(df[["tags", "user"]])) == {
        "tags": [[7, 7, 2], [], [1]], "user": [[3], [1], [2]]}
    with pytest.raises(InputValueError, match=r"no column \['item'\]"):
        KeyedBags.from_dataframe(df, columns=["item"])
    with pytest.raises(InputTypeError, match=r"column 'label'.*float64"):
        KeyedBags.from_dataframe(df)


BAD_COLUMNS = [
    ([1, None], InputValueError, r"column 'x': a missing ID \(None\) at entry 1"),
    (np.array([1.0, np.nan]), InputValueError, r"missing ID \(NaN\) at entry 1"),
    (np.array([1.0, 2.0]), InputTypeError, r"IDs must be integers, got dtype float64"),
    ([[1], [None]], InputValueError, r"list column.*missing ID \(None\)"),
    ([[1], [float("nan")]], InputValueError, r"list column.*missing ID \(NaN\)"),
    ([[1], None], InputValueError, r"row 1 is a missing list"),
    ([[1], [2.5]], InputTypeError, r"list column.*got dtype float64"),
    (["a", "b"], InputTypeError, r"string 'a'.*IdMap\(key_type=\"str\"\)"),
    (np.array(["a", "b"]), InputTypeError, r"strings.*IdMap\(key_type=\"str\"\)"),
    ([["a"], ["b"]], InputTypeError, r"strings.*IdMap"),
    ([True, False], InputTypeError, r"expected an integer ID"),
    (np.array([True]), InputTypeError, r"got dtype bool"),
    ([[1], 5], InputTypeError, r"mixes lists and scalars: row 1 holds 5"),
    ([[[1], [2]]], InputTypeError, r"lists nested in lists"),
    ([[[1], [2, 3]]], InputTypeError, r"lists nested in lists"),
    ([[2**64]], InputValueError, r"ID 18446744073709551616 .* does not fit int64"),
    ([2**63], InputValueError, r"does not fit int64"),
    (np.array([2**63], dtype=np.uint64), InputValueError, r"does not fit int64"),
    (np.zeros((2, 2), dtype=np.int64), InputValueError, r"1-D column .* shape \(2, 2\)"),
]


@pytest.mark.parametrize(("column", "error", "match"), BAD_COLUMNS)
def test_bad_columns_are_clear_errors(column, error, match):
    with pytest.raises(error, match=match) as info:
        KeyedBags.from_columns({"x": column})
    assert isinstance(info.value, LookupLinearError)


def test_bad_column_sets():
    with pytest.raises(InputValueError, match="no columns"):
        KeyedBags.from_columns({})
    with pytest.raises(InputValueError, match=r"\{'a': 2, 'b': 1\} rows per column"):
        KeyedBags.from_columns({"a": [1, 2], "b": [[1]]})


@pytest.mark.skipif(pd is None, reason="needs pandas")
def test_pandas_missing_values_are_clear_errors():
    with pytest.raises(InputValueError, match="missing ID"):
        KeyedBags.from_columns({"x": pd.Series([1, None], dtype="Int64")})
    with pytest.raises(InputValueError, match="missing list"):
        KeyedBags.from_columns({"x": pd.Series([[1], np.nan])})
    with pytest.raises(InputTypeError, match="IdMap"):
        KeyedBags.from_columns({"x": pd.Series(["a", "b"], dtype="category")})


@pytest.mark.skipif(pa is None, reason="needs pyarrow")
def test_arrow_nulls_are_clear_errors():
    with pytest.raises(InputValueError, match="row 1 is a missing list"):
        KeyedBags.from_columns({"x": pa.array([[1], None])})
    with pytest.raises(InputValueError, match=r"missing ID \(null\) at entry 1"):
        KeyedBags.from_columns({"x": pa.array([[1, None]])})
    with pytest.raises(InputValueError, match=r"missing ID"):
        KeyedBags.from_columns({"x": pa.array([1, None])})
    with pytest.raises(InputTypeError, match="nested"):
        KeyedBags.from_columns({"x": pa.array([[[1]]])})



@pytest.mark.skipif(pa is None or not hasattr(pa, "ListViewArray"), reason="needs list_view")
def test_arrow_list_view_reads_only_the_entries_its_rows_reference():
    """A list_view's rows pick ranges of its values: a null in a slot no row references is no
    missing ID (the rows are [[9], [7]]); a null a row references is refused, at its entry."""
    ints = pa.array([0, 2], pa.int32()), pa.array([1, 1], pa.int32())
    kb = KeyedBags.from_columns({"x": pa.ListViewArray.from_arrays(*ints, pa.array([9, None, 7]))})
    assert kb.values.tolist() == [9, 7]
    assert kb.lengths().tolist() == [1, 1]
    referenced = pa.ListViewArray.from_arrays(pa.array([2, 0], pa.int32()),
                                              pa.array([1, 2], pa.int32()), pa.array([9, None, 7]))
    with pytest.raises(InputValueError, match=r"missing ID \(null\) at entry 2"):
        KeyedBags.from_columns({"x": referenced})


# ---------------------------------------------------------------- Dataset


def test_dataset_batches_are_the_rows_they_name():
    kb = KeyedBags.from_columns({"user": np.arange(7) * 10,
                                 "tags": [[i] * (i % 3) for i in range(7)]})
    y = torch.arange(7.0)
    data = KeyedBagsDataset(kb, target=y)
    loader = torch.utils.data.DataLoader(data, batch_size=3, shuffle=True,
                                         collate_fn=KeyedBagsDataset.collate,
                                         generator=torch.Generator().manual_seed(0))
    seen = []
    for x, t in loader:
        rows = t.long().tolist()  # the target is the row number
        assert _lists(x) == {k: [v[i] for i in rows] for k, v in _lists(kb).items()}
        seen += rows
    assert sorted(seen) == list(range(7))
    one_by_one = KeyedBagsDataset.collate([data[4], data[1]])
    x, t = data.__getitems__([4, 1])
    assert _lists(one_by_one[0]) == _lists(x) and torch.equal(one_by_one[1], t)
    assert _lists(KeyedBagsDataset.collate([kb[[2]], kb[[0]]])) == _lists(kb[[2, 0]])
    assert _lists(KeyedBagsDataset(kb)[3]) == _lists(kb[3:4])
    with pytest.raises(InputValueError, match=r"shape \(7, \.\.\.\), got shape \(6,\)"):
        KeyedBagsDataset(kb, target=torch.zeros(6))


@pytest.mark.parametrize("column", [[[1, True], [2]], [np.array([3]), np.array([True])]],
                         ids=["list", "arrays"])
def test_a_bool_beside_integer_ids_is_refused(column: list[object]) -> None:
    """numpy reads True as 1 beside integers; a flag is not an ID."""
    col = np.empty(len(column), dtype=object)
    col[:] = column
    with pytest.raises(InputTypeError, match="holds a bool"):
        KeyedBags.from_columns({"tags": col})
