"""IdMap: collision-free rows for unbounded IDs, admission, LRU eviction, state, backends."""

from __future__ import annotations

import copy

import pytest
import torch
from forms import BACKENDS, needs_c
from hypothesis import given, settings
from hypothesis import strategies as st

from lookuplinear import (
    IdMap,
    InputTypeError,
    InputValueError,
    KeyedBags,
    LookupCollection,
    StateDictError,
    TableConfig,
    check_equivalence,
    hash_ids,
    optim,
)
from lookuplinear.ops import _idmap as table_ops
from lookuplinear.ops import use_backend

IDS = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(stream=st.lists(st.lists(IDS, max_size=30), min_size=1, max_size=6))
def test_no_collisions_below_capacity(stream):
    distinct = {i for batch in stream for i in batch}
    m = IdMap(len(distinct) + 4, fallback_rows=3)  # one row to spare
    seen: dict[int, int] = {}
    for batch in stream:
        rows = m(torch.tensor(batch, dtype=torch.int64)).tolist()
        for i, r in zip(batch, rows, strict=True):
            assert 3 <= r < m.num_embeddings
            assert seen.setdefault(i, r) == r  # an ID keeps its row
    assert len(set(seen.values())) == len(seen) == len(m)  # no two IDs share a row
    assert m.evicted.numel() == 0


def test_admission_after_k_sightings():
    m = IdMap(10, fallback_rows=2, admit_after=3)
    x = torch.tensor([42, 42, 7])
    fallback = hash_ids(torch.tensor([42, 7]), 2).tolist()
    assert m(x).tolist() == [fallback[0], fallback[0], fallback[1]]  # 42 seen twice, 7 once
    assert m(torch.tensor([42])).tolist() == [2] and len(m) == 1   # the third sighting
    assert m(torch.tensor([7, 7])).tolist() == [3, 3]              # 1 + 2 sightings
    assert m(torch.tensor([8])).tolist() == hash_ids(torch.tensor([8]), 2).tolist()


def test_lru_eviction_is_deterministic_and_spares_rows_in_use():
    m = IdMap(4, fallback_rows=1)                  # 3 rows for IDs: table rows 1, 2, 3
    assert m(torch.tensor([10, 20, 30])).tolist() == [1, 2, 3]
    assert m(torch.tensor([20])).tolist() == [2]   # 10 and 30 are older; 10 the lower row
    assert m(torch.tensor([30, 40])).tolist() == [3, 1]  # 40 takes 10's row (least recent)
    assert m.evicted.tolist() == [1]
    assert m(torch.tensor([10, 20, 30, 40])).tolist()[1:] == [2, 3, 1]
    # every row was read in that call: 10 could take none and read a fallback row
    assert m(torch.tensor([10, 20, 30, 40])).tolist()[0] == 0
    twin = IdMap(4, fallback_rows=1)
    for batch in ([10, 20, 30], [20], [30, 40], [10, 20, 30, 40], [10, 20, 30, 40]):
        twin(torch.tensor(batch))
    for k, v in m.state_dict().items():
        assert torch.equal(v, twin.state_dict()[k]), k


@pytest.mark.parametrize("key_type", ["int", "str"])
def test_new_ids_take_the_rows_left_in_order_of_first_appearance(key_type: str) -> None:
    """With admit_after=1, as documented: when fewer rows are left than new IDs, the IDs
    that appear first in the call get them, whatever their values (or string keys)."""
    def ids(*values: int) -> torch.Tensor | list[str]:
        return torch.tensor(values) if key_type == "int" else [f"id{v}" for v in values]

    m = IdMap(3, fallback_rows=1, key_type=key_type)  # two rows
    m(ids(10, 20))
    rows = m(ids(10, 99, 5))  # one row to take (20's): 99 appears before 5
    assert rows[1] != 0 and rows[2] == 0
    m = IdMap(4, fallback_rows=1, key_type=key_type)
    m(ids(10, 20, 30))
    assert m(ids(99, 5)).tolist() == [1, 2]  # the LRU rows, ties to the lower row, in order


def test_a_call_that_finds_every_id_marks_its_rows_used():
    m = IdMap(4, fallback_rows=1)                  # 3 rows for IDs: table rows 1, 2, 3
    assert m(torch.tensor([10, 20, 30])).tolist() == [1, 2, 3]
    assert m(torch.tensor([10, 10])).tolist() == [1, 1]  # every ID found: 10 now the newest
    assert m(torch.tensor([40])).tolist() == [2]   # 20 the least recent (the lower row of two)
    assert m.evicted.tolist() == [2]
    assert m(torch.tensor([], dtype=torch.int64)).tolist() == []  # nothing to mark
    assert m(torch.tensor([50])).tolist() == [3]   # then 30
    assert m.last_used.tolist() == [1, 2, 4]


def test_eval_mode_changes_nothing_and_state_dict_round_trip():
    m = IdMap(8, fallback_rows=2)
    m(torch.tensor([5, -5, 2**40]))
    before = copy.deepcopy(m.state_dict())
    m.eval()
    rows = m(torch.tensor([5, 99]))
    assert rows[0] == 2 and rows[1] == hash_ids(torch.tensor([99]), 2)[0]
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k])
    other = IdMap(8, fallback_rows=2)
    other.load_state_dict(m.state_dict())
    other.eval()
    assert torch.equal(other(torch.tensor([2**40, -5, 5])), m(torch.tensor([2**40, -5, 5])))


@pytest.mark.parametrize("name", ["table", "pending"])
def test_a_damaged_hash_table_is_refused_at_load(name: str) -> None:
    """A state whose hash table has more slots filled than a map fills (every one here: no
    empty slot, where a lookup's probe ends) is refused with StateDictError, the map left as
    it was (before: loaded, then the next lookup of an absent ID never ended)."""
    m = IdMap(8, fallback_rows=2, admit_after=2)
    m(torch.arange(4))
    state = m.state_dict()
    state[name] = state[name].clone()
    state[name][1::2] = 0  # every slot "filled"
    other = IdMap(8, fallback_rows=2, admit_after=2)
    before = copy.deepcopy(other.state_dict())
    with pytest.raises(StateDictError, match=f"{name}: 16 of its 16 slots are filled"):
        other.load_state_dict(state)
    with pytest.raises(StateDictError, match="the state is damaged"):  # PyTorch's own load
        torch.nn.Module.load_state_dict(other, state)
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k]), k


def _slot_of(table: torch.Tensor, key: int) -> int:
    """The slot of ``table`` that holds ``key``."""
    return int(((table[0::2] == key) & (table[1::2] >= 0)).nonzero()[0])


def _damage(state: dict[str, torch.Tensor], how: str) -> None:
    """Break one invariant of the state of ``IdMap(8, fallback_rows=2, admit_after=2)`` that
    holds IDs 0 to 3 in rows 0 to 3 (``assigned`` 4 of its 6 rows), two IDs pending."""
    for name in state:
        state[name] = state[name].clone()
    table = state["table"]
    if how in ("row past the capacity", "row not given out"):
        table[2 * _slot_of(table, 1) + 1] = 6 if how == "row past the capacity" else 4
    elif how == "negative assigned":
        state["assigned"].fill_(-1)
    elif how == "assigned past the capacity":
        state["assigned"].fill_(7)
    elif how == "row_id of another ID":
        state["row_id"][2] = 99
    elif how == "an ID in two slots":
        free = int((table[1::2] < 0).nonzero()[0])
        table[2 * free], table[2 * free + 1] = 1, int(table[2 * _slot_of(table, 1) + 1])
    elif how == "last use after the clock":
        state["last_used"][0] = int(state["clock"])
    else:  # "pending count off"
        state["pending_used"].add_(1)


@pytest.mark.parametrize("how, entry", [
    ("row past the capacity", "table: ID 1 is mapped to row 6"),
    ("row not given out", "table: ID 1 is mapped to row 4, outside the 4 rows given out"),
    ("negative assigned", r"assigned: -1 rows given out, outside \[0, 6\]"),
    ("assigned past the capacity", r"assigned: 7 rows given out, outside \[0, 6\]"),
    ("row_id of another ID", "row_id: row 2 holds ID 99, where table maps ID 2 to it"),
    ("an ID in two slots", "table: ID 1 fills 2 slots"),
    ("last use after the clock", r"last_used: .* outside \[-1, clock = 3\)"),
    ("pending count off", "pending_used: 3, where 2 slots of pending are filled"),
])
def test_a_state_that_breaks_the_maps_invariants_is_refused_at_load(how: str, entry: str
                                                                     ) -> None:
    """A state whose rows do not hold together (a row past the map's, which a collection
    reads in another table; a row no ID was given, or that row_id gives another ID; an ID in
    two slots; ``assigned`` outside ``[0, capacity]``; a last use after the clock; a pending
    count off) is refused with StateDictError naming the entry, the map left as it was."""
    m = IdMap(8, fallback_rows=2, admit_after=2)
    m(torch.arange(4))
    m(torch.arange(4))
    m(torch.tensor([10, 11]))
    state = m.state_dict()
    _damage(state, how)
    other = IdMap(8, fallback_rows=2, admit_after=2)
    before = copy.deepcopy(other.state_dict())
    with pytest.raises(StateDictError, match=f"{entry}.*the state is damaged"):
        other.load_state_dict(state)
    with pytest.raises(StateDictError, match="the state is damaged"):  # PyTorch's own load
        torch.nn.Module.load_state_dict(other, state)
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k]), k
    other.load_state_dict(m.state_dict())  # the undamaged state loads


def test_a_string_map_whose_strings_share_a_key_is_refused_at_load() -> None:
    m = IdMap(8, fallback_rows=2, key_type="str")
    m(["a", "b", "c"])
    state = m.state_dict()
    state["key_codes"] = state["key_codes"].clone()
    state["key_codes"][1] = state["key_codes"][0]  # "b" would read "a"'s row
    with pytest.raises(StateDictError, match="key_codes"):
        IdMap(8, fallback_rows=2, key_type="str").load_state_dict(state)


def test_a_collection_refuses_a_map_state_with_a_row_past_the_maps() -> None:
    """A map row past the map's rows reads another table of the group: refused, with nothing
    of the collection loaded."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("m", 4, 2, ["u"], hashing="map"),
                            TableConfig("x", 10, 2, ["x"])])
    col(KeyedBags.from_dict({"u": [[10**12]], "x": [[3]]}))
    state = col.state_dict()
    table = state["id_maps.m.table"] = state["id_maps.m.table"].clone()
    table[2 * _slot_of(table, 10**12) + 1] = 6  # the map has 3 rows
    before = copy.deepcopy(col.state_dict())
    with pytest.raises(StateDictError, match=r"id_maps\.m\.table: ID 1000000000000 is mapped "
                                             r"to row 6"):
        col.load_state_dict(state)
    for k, v in col.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_probe_of_a_table_without_an_empty_slot_ends(backend: str) -> None:
    """The probe walks a table at most once around: a full table finds its keys, reads an
    absent one as absent, gives it no new slot, and refuses to store it."""
    table = table_ops.empty_table(4)
    table_ops.set_values(table, torch.tensor([10, 11, 12, 13]), torch.tensor([0, 1, 2, 3]))
    with use_backend(backend):
        assert table_ops.find(table, torch.tensor([12, 99])).tolist() == [2, -1]
        assert table_ops.assign(table, torch.tensor([99]), 4, 8)[0].tolist() == [-1]
        with pytest.raises(InputValueError, match="no empty slot"):
            table_ops.set_values(table, torch.tensor([99]), torch.tensor([4]))
        with pytest.raises(InputValueError, match="no empty slot"):
            table_ops.add(table, torch.tensor([99]), torch.tensor([1]))
        assert table_ops.erase(table.clone(), torch.tensor([99])) == 0


@needs_c
def test_backends_build_the_same_table():
    states = []
    for backend in ("c", "torch"):
        with use_backend(backend):
            m = IdMap(6, fallback_rows=1, admit_after=2)
            for batch in ([1, 2, 2, 3], [3, 4, 1], [5, 6, 7, 1, 3, 5, 6], [8, 8, 9, 9, 2]):
                m(torch.tensor(batch))
            states.append(m.state_dict())
    for k, v in states[0].items():
        assert torch.equal(v, states[1][k]), k


def test_errors():
    with pytest.raises(InputValueError, match="no row for IDs"):
        IdMap(3, fallback_rows=3)
    with pytest.raises(InputValueError, match="admit_after"):
        IdMap(3, admit_after=0)
    with pytest.raises(InputTypeError, match="integer"):
        IdMap(3)(torch.tensor([1.0]))
    with pytest.raises(InputValueError, match="for hashing='map'"):
        TableConfig("t", 10, 2, ["f"], admit_after=2)


def test_map_table_in_a_collection():
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 4, 3, ["user", "friend"], hashing="map",
                                        dtype=torch.float64)], sparse=True)
    kb = KeyedBags.from_dict({"user": [[10**15], [-3, 10**15]], "friend": [[7], []]})
    assert check_equivalence(col, kb).ok  # looks up only: nothing is added
    assert len(col.id_maps["user"]) == 0
    out = col(kb)["user"]  # 3 IDs get rows 1, 2, 3 (row 0 is the fallback)
    w = col["user"].weight
    torch.testing.assert_close(out, torch.stack([w[1], w[2] + w[1]]))
    assert check_equivalence(col, kb).ok
    assert set(col.state_dict()) >= {"embedding_bags.user.weight", "id_maps.user.table"}
    # a fourth ID takes the least recently used row: re-drawn, and its optimizer state fresh
    opt = optim.RowWiseAdagrad(col.parameters(), lr=0.1)
    for batch in (kb, KeyedBags.from_dict({"user": [[-3], [10**15]], "friend": [[-3], []]})):
        opt.zero_grad()
        col(batch).values().pow(2).sum().backward()
        opt.step()
    old = col["user"].weight[3].clone()  # row of 7, used least recently
    new = KeyedBags.from_dict({"user": [[99]], "friend": [[]]})
    opt.zero_grad()
    col(new).values().pow(2).sum().backward()
    assert col.id_maps["user"].evicted.tolist() == [3]
    assert not torch.equal(col["user"].weight[3], old)
    g = col.table_groups[0].grad.coalesce()
    g3 = g.values()[g.indices()[0].tolist().index(3)]
    opt.step()
    state = opt.state[col.table_groups[0]]["sum"]
    torch.testing.assert_close(state[3], g3.pow(2).mean())  # not the old ID's sum plus it


@pytest.mark.parametrize(("name", "kw"), [("SGD", {"momentum": 0.9}),
                                          ("Adagrad", {"initial_accumulator_value": 0.5}),
                                          ("RowWiseAdagrad", {}), ("Adam", {})])
def test_a_fused_update_starts_evicted_rows_afresh_as_step_does(name, kw):
    """Rows given to new IDs get fresh optimizer state in a ``fused=True`` update (which asks
    for the rows of all its tables at once) as in ``step()``: the same weights and state, to
    the bit, beside a table that evicts nothing."""
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        col = LookupCollection([TableConfig("ids", 3, 2, ["ids"], hashing="map"),
                                TableConfig("other", 8, 3, ["f"])], sparse=True)
        opt = getattr(optim, name)(col.parameters(), lr=0.1, fused=fused, **kw)
        for step in range(4):  # new IDs evict rows of a 2-row map
            kb = KeyedBags.from_dict({"ids": [[10 * step], [10 * step + 1, 7]],
                                      "f": [[step], [1]]})
            opt.zero_grad()
            col(kb).values().pow(2).sum().backward()
            opt.step()
        assert col.id_maps["ids"].evicted.numel() > 0
        runs.append((col, opt))
    (a, oa), (b, ob) = runs
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
        sa, sb = oa.state[pa], ob.state[pb]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key


def test_the_map_stays_on_the_cpu_when_its_model_moves() -> None:
    """The map is a host structure: ``.to(device)`` (and dtype casts) leave its state on the
    CPU, int64, while the tables move; ``share_memory()`` still reaches it; and it maps as
    before."""
    col = LookupCollection([TableConfig("user", 40, 4, ["user"], hashing="map"),
                            TableConfig("item", 30, 4, ["item"])])
    col(KeyedBags.from_dict({"user": [[10**12], [7]], "item": [[1], [2]]}))
    before = {n: b.clone() for n, b in col.named_buffers()}
    col.to("meta")
    assert all(p.device.type == "meta" for p in col.parameters())
    col.to(torch.float64)
    for name, buf in col.named_buffers():
        assert buf.device.type == "cpu" and torch.equal(buf, before[name]), name
    ids = col.id_maps["user"]
    ids.share_memory()
    assert all(b.is_shared() for b in ids.buffers())
    ids.eval()
    assert ids(torch.tensor([10**12, 7, 5])).tolist()[:2] == [1, 2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("training", [False, True])
def test_an_id_mapped_collection_on_cuda_equals_the_cpu_one(training: bool) -> None:
    """A collection keyed by an IdMap, moved to CUDA: its map stays on the CPU, and its
    forward (admitting IDs in training mode, looking up in eval mode) equals the CPU one's."""
    batches = [KeyedBags.from_dict({"user": [[10**12, 3], [7]], "item": [[1], [2, 2]]}),
               KeyedBags.from_dict({"user": [[5], [10**12]], "item": [[0], []]})]
    outs = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        col = LookupCollection([TableConfig("user", 40, 4, ["user"], hashing="map"),
                                TableConfig("item", 30, 4, ["item"])]).to(device)
        col.train(training)
        assert col.id_maps["user"].table.device.type == "cpu"
        outs.append([col(kb.to(device)).values().cpu() for kb in batches])
    for cpu, cuda in zip(*outs, strict=True):
        torch.testing.assert_close(cuda, cpu)
