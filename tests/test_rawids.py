"""Raw IDs of any type: IdMap over strings (against a Python dict), numpy / list / pandas input,
hash_ids over object arrays, missing and mixed IDs refused with nothing written, state round
trips (state_dict, Checkpoint)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from forms import needs_c
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import Checkpoint, IdMap, InputTypeError, InputValueError, hash_ids

pd = pytest.importorskip("pandas")

STRS = st.text(max_size=6)  # the empty string, unicode, lone surrogates
SCALARS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.none(),
                    st.booleans(), STRS)


def _same_state(a: IdMap, b: IdMap) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@settings(max_examples=60, deadline=None)
@given(stream=st.lists(st.lists(STRS, max_size=30), min_size=1, max_size=6),
       admit_after=st.integers(1, 2))
def test_strings_against_a_python_dict(stream, admit_after):
    """Every string keeps one row of its own, as a dict from strings to rows would give."""
    distinct = {s for batch in stream for s in batch}
    m = IdMap(len(distinct) + 3, fallback_rows=2, key_type="str", admit_after=admit_after)
    ref: dict[str, int] = {}
    for batch in stream:
        rows = m(batch).tolist()
        for s, r in zip(batch, rows, strict=True):
            if r >= 2:
                assert ref.setdefault(s, r) == r  # a string keeps its row
            else:  # not admitted yet: the fallback row hash_ids gives the string itself
                assert s not in ref and r == int(hash_ids([s], 2)[0])
    assert len(set(ref.values())) == len(ref) == len(m)  # no two strings share a row
    if admit_after == 1:
        assert len(m) == len(distinct)


def test_strings_with_the_same_hash_get_their_own_rows():
    """No hash decides a string's row: strings are compared whole."""
    m = IdMap(5, fallback_rows=1, key_type="str")
    # "Aa" and "BB": one Java hashCode; strings are told apart whole
    assert m(["Aa", "BB", "", "\udc80"]).tolist() == [1, 2, 3, 4]
    assert m(["BB", "Aa", "\udc80"]).tolist() == [2, 1, 4]


@pytest.mark.parametrize("form", ["list", "tuple", "numpy_str", "numpy_object", "series_object",
                                  "series_string", "series_category", "index"])
def test_every_form_of_string_ids_reads_the_same_rows(form):
    ids = ["b", "a", "b", "c"]
    x = {
        "list": lambda: ids, "tuple": lambda: tuple(ids), "numpy_str": lambda: np.array(ids),
        "numpy_object": lambda: np.array(ids, dtype=object),
        "series_object": lambda: pd.Series(ids, dtype=object),
        "series_string": lambda: pd.Series(ids, dtype="string"),
        "series_category": lambda: pd.Series(ids, dtype="category"),
        "index": lambda: pd.Index(ids),
    }[form]()
    m = IdMap(10, fallback_rows=2, key_type="str")
    assert m(x).tolist() == [2, 3, 2, 4]
    assert m(np.array([["c", "a"], ["b", "z"]])).tolist() == [[4, 3], [2, 5]]  # 2-D: its shape


@pytest.mark.parametrize("form", ["tensor", "int64", "int32", "uint64", "list", "series",
                                  "series_Int64", "index"])
def test_every_form_of_int_ids_reads_the_same_rows(form):
    ids = [7, 2**40, 7, 3]
    x = {
        "tensor": lambda: torch.tensor(ids), "int64": lambda: np.array(ids),
        "int32": lambda: np.array([7, 5, 7, 3], dtype=np.int32),
        "uint64": lambda: np.array(ids, dtype=np.uint64), "list": lambda: ids,
        "series": lambda: pd.Series(ids), "series_Int64": lambda: pd.Series(ids, dtype="Int64"),
        "index": lambda: pd.Index(ids),
    }[form]()
    m = IdMap(10, fallback_rows=2)
    rows = m(x)
    assert rows.dtype == torch.int64 and rows.tolist() == [2, 3, 2, 4]
    # hash_ids reads every form as the tensor of the same values
    assert torch.equal(hash_ids(x, 97), hash_ids(torch.tensor(np.asarray(x, np.int64)), 97))


@pytest.mark.parametrize("form", ["list", "numpy", "tensor", "strided tensor"])
def test_unsigned_ids_from_2_63_are_refused_in_every_form(form):
    """A uint64 ID from 2**63 on has no int64 value: refused by hash_ids and an IdMap (which
    changes nothing), whether a list, a numpy array or a torch tensor holds it; below 2**63
    a uint64 tensor reads as the int64 tensor of the same values."""
    ids = [3, 2**63 + 5]
    x = {"list": lambda: ids, "numpy": lambda: np.array(ids, dtype=np.uint64),
         "tensor": lambda: torch.tensor(ids, dtype=torch.uint64),
         "strided tensor": lambda: torch.tensor([[3, 2**63 + 5, 1]], dtype=torch.uint64).T,
         }[form]()
    m = IdMap(10, fallback_rows=2)
    m([5])
    before = copy.deepcopy(m)
    for call in (m, lambda ids: hash_ids(ids, 1000)):
        with pytest.raises(InputValueError, match="must fit in int64"):
            call(x)
    _same_state(m, before)
    small = torch.tensor([3, 2**63 - 1], dtype=torch.uint64)
    assert torch.equal(hash_ids(small, 97), hash_ids(torch.tensor([3, 2**63 - 1]), 97))
    assert m(small).tolist() == [3, 4]


def test_hash_ids_takes_object_arrays_and_pandas_columns_of_str():
    from sklearn.utils import murmurhash3_32

    ids = ["user42", "", "é", "user42"]
    want = [abs(murmurhash3_32(s, seed=0)) % 1000 for s in ids]
    for x in (ids, np.array(ids, dtype=object), np.array(ids), pd.Series(ids),
              pd.Series(ids, dtype="string"), pd.Series(ids, dtype="category")):
        assert hash_ids(x, 1000).tolist() == want
    assert hash_ids(np.array([["a", "b"]], dtype=object), 10).shape == (1, 2)
    assert hash_ids([], 10).shape == (0,)


def test_hash_ids_takes_pyarrow_string_columns_as_str():
    """A pandas column of pyarrow strings (``pd.read_parquet(..., dtype_backend="pyarrow")``)
    holds string IDs: hashed as the same strings in an object column, mapped by a string
    map, refused (as strings) by an int map."""
    from sklearn.utils import murmurhash3_32

    pa = pytest.importorskip("pyarrow")
    ids = ["user42", "", "é", "user42"]
    want = [abs(murmurhash3_32(s, seed=0)) % 1000 for s in ids]
    for t in (pa.string(), pa.large_string()):
        col = pd.Series(ids, dtype=pd.ArrowDtype(t))
        assert hash_ids(col, 1000).tolist() == want
        assert IdMap(10, key_type="str")(col).tolist() == [1, 2, 3, 1]
        with pytest.raises(InputTypeError, match="IDs must be integers"):
            IdMap(10)(col)
    with pytest.raises(InputValueError, match="missing"):
        hash_ids(pd.Series(["a", None], dtype=pd.ArrowDtype(pa.string())), 10)


@pytest.mark.parametrize("bad", [
    ["a", None], ["a", float("nan")], pd.Series(["a", None]), pd.Series(["a", pd.NA],
                                                                        dtype="string"),
    pd.Series(["a", None], dtype="category"),
])
def test_missing_string_ids_are_refused_and_nothing_is_written(bad):
    m = IdMap(10, fallback_rows=2, key_type="str")
    m(["z"])
    before = copy.deepcopy(m)
    with pytest.raises(InputValueError, match="missing"):
        m(bad)
    with pytest.raises(InputValueError, match="missing"):
        hash_ids(bad, 10)
    _same_state(m, before)


@pytest.mark.parametrize("bad", [
    [1, None], [1, float("nan")], pd.Series([1, None]), pd.Series([1, None], dtype="Int64"),
    np.array([1.0, np.nan]),
])
def test_missing_int_ids_are_refused_and_nothing_is_written(bad):
    m = IdMap(10, fallback_rows=2)
    m([5])
    before = copy.deepcopy(m)
    with pytest.raises(InputValueError, match="missing"):
        m(bad)
    with pytest.raises(InputValueError, match="missing"):
        hash_ids(bad, 10)
    _same_state(m, before)


@pytest.mark.parametrize(("key_type", "bad", "error"), [
    ("str", ["a", 1], InputTypeError),                 # an int among strings
    ("str", [1, 2], InputTypeError),
    ("str", torch.tensor([1, 2]), InputTypeError),     # a tensor holds ints
    ("str", np.array([1, 2]), InputTypeError),
    ("str", pd.Series([1, 2]), InputTypeError),
    ("str", "abc", InputTypeError),                    # one string, not a sequence of them
    ("str", [b"a"], InputTypeError),
    ("str", [["a"]], InputTypeError),                  # unhashable
    ("int", ["a", "b"], InputTypeError),               # strings in an int map
    ("int", np.array(["a"]), InputTypeError),
    ("int", pd.Series(["a"]), InputTypeError),
    ("int", [1, "a"], InputTypeError),
    ("int", [1, 2.5], InputTypeError),                 # no float truncated to an int
    ("int", [1, True], InputTypeError),
    ("int", np.array([1.0, 2.0]), InputTypeError),
    ("int", np.array([True]), InputTypeError),
    ("int", [2**63], InputValueError),                 # huge: outside int64
    ("int", np.array([2**63], dtype=np.uint64), InputValueError),
])
def test_ids_of_another_type_are_refused_and_nothing_is_written(key_type, bad, error):
    m = IdMap(10, fallback_rows=2, key_type=key_type)
    m(["z"] if key_type == "str" else [5])
    before = copy.deepcopy(m)
    with pytest.raises(error) as info:
        m(bad)
    assert "IdMap" in str(info.value)
    _same_state(m, before)


def test_key_type_is_checked_at_construction():
    with pytest.raises(InputValueError, match="key_type"):
        IdMap(10, key_type="bytes")


@settings(max_examples=80, deadline=None)
@given(batch=st.lists(SCALARS, max_size=8))
def test_any_batch_maps_as_a_dict_would_or_is_refused_whole(batch):
    """Empty lists, a batch of one, huge ints, NaN/None, mixed types: a string map gives each
    string its own row or refuses the batch without change."""
    m = IdMap(20, fallback_rows=1, key_type="str")
    m(["x"])
    before = copy.deepcopy(m)
    if all(isinstance(s, str) for s in batch):
        rows = m(batch).tolist()
        ref = {"x": 1}
        for s in batch:
            ref.setdefault(s, len(ref) + 1)
        assert rows == [ref[s] for s in batch]
    else:
        with pytest.raises((InputTypeError, InputValueError)):
            m(batch)
        _same_state(m, before)


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8))
def test_int_lists_and_arrays_map_as_the_tensor(batch):
    a, b, c = IdMap(12, fallback_rows=2), IdMap(12, fallback_rows=2), IdMap(12, fallback_rows=2)
    assert torch.equal(a(batch), b(torch.tensor(batch, dtype=torch.int64)))
    assert torch.equal(a(batch), c(np.array(batch, dtype=np.int64)))


def test_string_state_round_trips_through_state_dict_and_checkpoint(tmp_path):
    def stream(m: IdMap) -> list[list[int]]:
        out = []
        for batch in (["a", "b", "a"], ["c", "é", "\udc80", ""], ["d", "a", "e", "f"]):
            out.append(m(batch).tolist())
        return out

    m = IdMap(5, fallback_rows=1, key_type="str", admit_after=1)  # 4 rows: the LRU evicts
    stream(m)
    saved = m.state_dict()
    other = IdMap(5, fallback_rows=1, key_type="str")
    other.load_state_dict(saved)
    _same_state(other, m)
    assert stream(other) == stream(m)  # the same rows from the same state on

    model = torch.nn.ModuleDict({"ids": IdMap(50, key_type="str")})
    model["ids"](["u1", "u2", "u3"])
    Checkpoint(tmp_path / "ck", model).save()
    model["ids"](["u4"])  # after the save: forgotten by the restore
    fresh = torch.nn.ModuleDict({"ids": IdMap(50, key_type="str")})
    Checkpoint(tmp_path / "ck", fresh).restore()
    fresh.eval()
    assert fresh["ids"](["u3", "u1", "u2", "u4"]).tolist()[:3] == [3, 1, 2]
    assert fresh["ids"](["u4"]).tolist() == hash_ids(["u4"], 1).tolist()  # not in the save


def test_state_of_another_key_type_is_refused():
    s = IdMap(10, key_type="str")
    s(["a"])
    with pytest.raises(RuntimeError, match="key_type='str'"):
        IdMap(10).load_state_dict(s.state_dict())
    with pytest.raises(RuntimeError, match="int map"):
        IdMap(10, key_type="str").load_state_dict(IdMap(10).state_dict())


def test_the_dictionary_forgets_strings_without_a_row():
    """A stream of new strings: the map's dictionary stays bounded by its capacity."""
    m = IdMap(11, fallback_rows=1, key_type="str", admit_after=2)
    for i in range(300):
        m([f"s{i}_{j}" for j in range(20)])
    assert len(m._keys) <= 2 * (m.capacity + m.pending.numel() // 4) + 1024 + 20
    held = m.row_id[: len(m)].tolist()
    assert set(held) <= set(m._keys.values())


def test_a_collection_table_of_string_ids():
    from lookuplinear import KeyedBags, LookupCollection, TableConfig

    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 5, 3, ["user"], hashing="map", key_type="str",
                                        dtype=torch.float64)])
    out = col({"user": pd.Series(["ann", "bob", "ann"])})["user"]
    rows = col.id_maps["user"](["ann", "bob"]).tolist()
    assert rows == [1, 2]
    dense = torch.nn.functional.one_hot(torch.tensor([1, 2, 1]), 5).double() @ col.table_groups[0]
    torch.testing.assert_close(out, dense)  # the dense path: one_hot(row) @ W
    two_d = col({"user": np.array([["bob"]])})["user"]
    assert two_d.shape == (1, 1, 3) and torch.equal(two_d[0, 0], col.table_groups[0][2])
    with pytest.raises(InputTypeError, match="holds string IDs"):
        col(KeyedBags.from_dict({"user": [[1, 2]]}))
    with pytest.raises(InputValueError, match="key_type are for hashing='map'"):
        TableConfig("t", 10, 2, ["f"], key_type="str")
    with pytest.raises(InputValueError, match="missing"):
        col({"user": ["ann", None]})


def test_a_quantized_collection_reads_string_ids_as_the_float_one():
    from lookuplinear import LookupCollection, TableConfig

    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 5, 4, ["user"], hashing="map", key_type="str")])
    col({"user": ["ann", "bob"]})
    q = col.quantize("float16")
    col.eval()
    ids = {"user": ["bob", "ann", "eve"]}
    torch.testing.assert_close(q(ids)["user"], col(ids)["user"], atol=1e-2, rtol=1e-2)


@needs_c
def test_backends_map_strings_the_same():
    from lookuplinear.ops import use_backend

    states, rows = [], []
    for backend in ("c", "torch"):
        with use_backend(backend):
            m = IdMap(6, fallback_rows=1, key_type="str", admit_after=2)
            rows.append([m(b).tolist() for b in (["a", "b", "b"], ["c", "a", "d", "d"],
                                                 ["e", "f", "e", "f", "a", "g"])])
            with pytest.raises(InputTypeError, match="position 1"):
                m(["a", ["unhashable"]])
            states.append(m.state_dict())
    assert rows[0] == rows[1]
    for k, v in states[0].items():
        assert torch.equal(v, states[1][k]), k


def test_bytes_ids_are_refused_naming_the_decode() -> None:
    """A list of bytes IDs is refused with the fix (decode them), as a numpy bytes array is."""
    with pytest.raises(InputTypeError, match=r"got bytes b'a' at position 0\. Decode bytes"):
        hash_ids([b"a"], 10)


@pytest.mark.parametrize("raw", [b"user42", bytearray(b"ab"), memoryview(b"ab")])
def test_one_bytes_object_is_refused_not_read_as_its_byte_values(raw: object) -> None:
    """A ``bytes`` object is a sequence of its byte values: taken as IDs it would be one
    integer ID per byte (and admitted into a map), where scikit-learn's ``murmurhash3_32``
    hashes it as one key. It is refused, naming the decode, and the map is unchanged."""
    from lookuplinear import LookupCollection, TableConfig

    with pytest.raises(InputTypeError, match=r"hash_ids: got one .* sequence of byte values"):
        hash_ids(raw, 1000)
    for key_type in ("int", "str"):
        m = IdMap(10, key_type=key_type)
        before = copy.deepcopy(m.state_dict())
        with pytest.raises(InputTypeError, match=r"decode"):
            m(raw)
        after = m.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
    coll = LookupCollection([TableConfig("u", 10, 2, ["u"], hashing="map")])
    with pytest.raises(InputTypeError, match=r"sequence of byte values"):
        coll({"u": raw})


def test_a_map_tables_config_is_checked_when_made() -> None:
    """A ``hashing="map"`` table's ``key_type`` and rows are checked by its ``TableConfig``,
    whose message names the table (not only when the collection builds its ``IdMap``)."""
    from lookuplinear import TableConfig

    with pytest.raises(InputValueError, match=r"TableConfig 't': key_type must be"):
        TableConfig("t", 5, 2, ["a"], hashing="map", key_type="bytes")
    with pytest.raises(InputValueError, match=r"TableConfig 't': num_embeddings=1 leaves no row"):
        TableConfig("t", 1, 2, ["a"], hashing="map")
    with pytest.raises(InputValueError, match=r"num_embeddings=3 leaves no row .*=3"):
        TableConfig("t", 3, 2, ["a"], hashing="map", fallback_rows=3)
