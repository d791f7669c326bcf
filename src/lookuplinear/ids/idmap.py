"""``IdMap``: unbounded IDs to the rows of a table, without collisions, as IDs keep arriving."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from .._loading import AllOrNothingLoad
from .._rowreset import RESETS
from .._sizes import as_size
from .._tableinit import init_weight_
from ..errors import InputValueError, StateDictError
from ..ops import _idmap as table_ops
from ..ops import values_known
from ..ops.library import idmap_find, idmap_rows
from .hashing import as_hash_rows, hash_ids
from .rawids import as_int_ids, as_str_ids, check_strs

#: an int64 map's call in training with ``admit_after=1``, in place on its state
_ADMIT = torch.ops.lookuplinear.idmap_admit_.default
#: why a recorded graph breaks at a map's call in training (``fullgraph=True`` says it)
_OUTSIDE_GRAPHS = ("an IdMap in training mode gives rows to new IDs, changing its state on the "
                   "host at every call: it runs outside a recorded graph (compile without "
                   "fullgraph=True, or put the map in eval mode, which records its lookup)")

__all__ = ["IdMap"]


#: the state_dict entries of a ``key_type="str"`` map's strings (its own str -> key dictionary)
_STR_STATE = ("key_strings", "key_offsets", "key_codes", "key_next")


class IdMap(AllOrNothingLoad):
    """A managed, collision-free map from int64 or string IDs to the rows of a table.

    Rows ``[0, fallback_rows)`` are shared fallback rows; the other ``capacity = num_embeddings -
    fallback_rows`` rows are each given to one ID. In training mode a call:

    1. looks every ID up; an ID with a row reads its row;
    2. counts the IDs without one; an ID seen ``admit_after`` times in all (this call included)
       is admitted: it gets a free row (in order of first appearance in the call, or of ID
       value with ``admit_after > 1``), or, when every row is taken, the row of the least
       recently used ID (LRU: the one whose last call is the oldest, ties to the lower row),
       which is then forgotten; rows used in this call are never taken;
    3. maps every other ID to a fallback row, ``hash_ids(id, fallback_rows)``.

    A map holds one type of ID, chosen at construction: ``key_type="int"`` (int64 values) or
    ``"str"``. A string map keeps a dictionary of its own from each string it holds (or counts)
    to an int64 key, so strings are compared exactly: no two strings share a row below
    ``capacity``, whatever their hashes. Its strings are in its ``state_dict`` as UTF-8 bytes
    and offsets (tensors only: it loads without executing code). Strings without a row read
    ``hash_ids(string, fallback_rows)``, the row ``hash_ids`` gives the string itself.

    Below ``capacity`` distinct admitted IDs, no two IDs share a row. :attr:`evicted` lists the
    rows the last call gave to new IDs after taking them from others (their values and optimizer
    state belong to the old ID: a :class:`~lookuplinear.LookupCollection` re-initialises them).
    In eval mode a call only looks up (unknown IDs read their fallback row) and changes nothing.
    The map's state stays on the CPU when a model moves to another device (``model.cuda()``):
    IDs are looked up on the host, and the rows go back to the IDs' device.
    The map is deterministic for a given sequence of calls, and its state (``state_dict``:
    the hash table, each row's ID and last use, the admission counts) is saved and loaded with
    the model; ``load_state_dict`` refuses a damaged state with ``StateDictError``: a hash
    table with more slots filled than the map fills (whose lookups could never end), rows that
    do not hold together (an ID mapped to a row past the ``assigned`` ones or in two slots,
    a row that ``row_id`` gives another ID, ``assigned`` outside ``[0, capacity]``), last uses
    after the clock, a pending count off, strings sharing a key.

    As a matrix the map is, at any moment, a 0/1 matrix ``M`` with one 1 per ID, so a table
    read through it is ``nn.Linear`` on ``one_hot(id) @ M``.

    Parameters
    ----------
    num_embeddings : int
        Rows of the table the map indexes, at most ``2**63 - 1`` (rows are int64).
    fallback_rows : int, default 1
        Rows shared by IDs not (yet) admitted; ``1 <= fallback_rows < num_embeddings``.
    admit_after : int, default 1
        Calls-worth of sightings an ID needs before it gets a row (frequency admission: rare IDs
        never take a row from frequent ones). Counts of IDs not yet admitted are kept in a table
        of ``2 * capacity`` entries, cleared when it fills. With ``admit_after > 1`` the IDs
        admitted in one call take rows in order of ID value (of first sighting for strings).
    key_type : {"int", "str"}, default "int"
        The IDs the map holds. ``"int"``: an integer tensor (any shape and device), a numpy
        integer array, a list or pandas column of ints. ``"str"``: a numpy ``str`` or object
        array, a list of str, a pandas column of str (object, ``string`` or categorical).

    Raises
    ------
    InputValueError
        ``num_embeddings <= fallback_rows`` (no capacity), a count below 1,
        ``num_embeddings`` above ``2**63 - 1``, an unknown
        ``key_type``; a missing ID (None, NaN, pandas' NA) or an int outside int64 in a call.
    InputTypeError
        IDs of another type than ``key_type`` (floats, booleans, ints in a string map, strings
        in an int map). A call that raises changes nothing.
    StateDictError
        ``load_state_dict`` of a state that does not fit the map (another shape, a damaged
        state); nothing is loaded.

    Examples
    --------
    >>> ids = IdMap(6, fallback_rows=2)              # 4 rows for IDs, 2 fallback rows
    >>> ids(torch.tensor([10**12, -7, 10**12]))      # first sight: rows 2 and 3
    tensor([2, 3, 2])
    >>> ids(torch.tensor([-7, 55]))
    tensor([3, 4])
    >>> names = IdMap(6, fallback_rows=2, key_type="str")
    >>> names(["user_b", "user_a", "user_b"])
    tensor([2, 3, 2])
    """

    table: torch.Tensor  # the hash table: ID -> row among the capacity (ops/_idmap.py)
    row_id: torch.Tensor  # (capacity,) the ID holding each row
    last_used: torch.Tensor  # (capacity,) the call that last read each row (-1: never)
    assigned: torch.Tensor  # rows given out so far (never-used rows come first)
    clock: torch.Tensor  # calls in training mode so far
    pending: torch.Tensor  # admission counts of IDs without a row (a hash table)
    pending_used: torch.Tensor  # IDs in ``pending``

    def __init__(self, num_embeddings: int, *, fallback_rows: int = 1,
                 admit_after: int = 1, key_type: str = "int") -> None:
        super().__init__()
        num_embeddings = as_hash_rows(num_embeddings, "num_embeddings", where="IdMap")
        fallback_rows = as_size(fallback_rows, "fallback_rows", where="IdMap")
        admit_after = as_size(admit_after, "admit_after", where="IdMap")
        if num_embeddings <= fallback_rows:
            raise InputValueError(
                f"IdMap: num_embeddings={num_embeddings} leaves no row for IDs after "
                f"fallback_rows={fallback_rows}; the capacity is num_embeddings - fallback_rows. "
                "Give the table more rows than fallback rows."
            )
        if key_type not in ("int", "str"):
            raise InputValueError(
                f"IdMap: key_type must be 'int' or 'str' (the IDs the map holds), got "
                f"{key_type!r}."
            )
        self.num_embeddings = num_embeddings
        self.key_type = key_type
        #: a string map's own dictionary: each string it holds or counts -> its int64 key
        self._keys: dict[str, int] = {}
        self._next_key = 0
        self.fallback_rows = fallback_rows
        self.admit_after = admit_after
        capacity = num_embeddings - fallback_rows
        size = 16
        while size < 2 * capacity:  # load at most one half
            size *= 2
        self.register_buffer("table", table_ops.empty_table(size))
        self.register_buffer("row_id", torch.zeros(capacity, dtype=torch.int64))
        self.register_buffer("last_used", torch.full((capacity,), -1, dtype=torch.int64))
        self.register_buffer("assigned", torch.zeros((), dtype=torch.int64))
        self.register_buffer("clock", torch.zeros((), dtype=torch.int64))
        self.register_buffer("pending", table_ops.empty_table(size if admit_after > 1 else 16))
        self.register_buffer("pending_used", torch.zeros((), dtype=torch.int64))
        self.evicted = torch.zeros(0, dtype=torch.int64)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
               ) -> IdMap:
        """``Module.to``, ``cuda()``, ``share_memory()``, ... applied to the map's state, which
        stays on the CPU: the map is a host structure (its IDs are looked up on the CPU and the
        rows sent to the IDs' device), so a model moved to a GPU keeps its map where its
        probes run."""
        def on_cpu(t: torch.Tensor) -> torch.Tensor:
            moved = fn(t)
            return moved if moved.device.type == "cpu" else t
        super()._apply(on_cpu, recurse)
        return self

    @property
    def capacity(self) -> int:
        """Rows for IDs: ``num_embeddings - fallback_rows``."""
        return self.num_embeddings - self.fallback_rows

    def __len__(self) -> int:
        """IDs that hold a row."""
        return int(self.assigned)

    def forward(self, ids: Any) -> torch.Tensor:
        """The row of every ID, int64: the shape and device of a tensor ``ids``, the shape of
        a numpy array, ``(len(ids),)`` for a list or pandas column (on the CPU)."""
        strs: list[Any] | np.ndarray = []
        if self.key_type == "str":
            strs, shape = as_str_ids(ids, "IdMap(key_type='str')")
            flat, device = self._keys_of(strs), torch.device("cpu")
        else:
            ids = as_int_ids(ids, "IdMap")
            shape, device = ids.shape, ids.device
            flat = ids.reshape(-1).to("cpu", torch.int64).contiguous()
        if values_known() and self.evicted.numel():  # a recorded graph (eval mode) evicts
            self.evicted = torch.zeros(0, dtype=torch.int64)  # nothing
        if not self.training:
            rows = idmap_rows(idmap_find(self.table, flat), flat, self.fallback_rows)
        else:
            if torch.compiler.is_compiling():  # a graph being recorded: the call runs outside
                from torch._dynamo import graph_break  # loaded, as it records (not at import)

                graph_break(msg=_OUTSIDE_GRAPHS)
            rows = self._train_rows(flat)
        if self.key_type == "str":  # the strings themselves hashed, where the map has none
            miss = rows < self.fallback_rows
            if bool(miss.any()):
                at = torch.nonzero(miss).reshape(-1).tolist()
                rows[miss] = hash_ids([strs[i] for i in at], self.fallback_rows)
        if self.key_type == "str" and self.training:
            self._forget_unused_keys()
        return rows.reshape(shape).to(device)

    def _train_rows(self, flat: torch.Tensor) -> torch.Tensor:
        """A call in training mode: the rows of the int64 keys ``flat``, new keys admitted."""
        if self.admit_after == 1:  # one pass: new IDs take free rows as they first appear
            rows, missing = _ADMIT(self.table, flat, self.row_id, self.last_used, self.assigned,
                                   self.clock, self.fallback_rows)
            if missing:  # every row taken: the least recently used ones go to new IDs
                self._take_rows(_first_appearance(flat[rows < self.fallback_rows]),
                                int(self.clock) - 1)
                rows = idmap_rows(idmap_find(self.table, flat), flat, self.fallback_rows)
            return rows
        return idmap_rows(self._admit(flat, idmap_find(self.table, flat)), flat,
                          self.fallback_rows)

    def check(self, ids: Any) -> None:
        """Raise what :meth:`forward` raises for ``ids`` (IDs of the wrong type, missing or
        out of int64), changing nothing: a caller that maps several inputs checks them all
        before the first map takes new IDs."""
        if self.key_type == "str":
            check_strs(as_str_ids(ids, "IdMap(key_type='str')")[0], "IdMap(key_type='str')")
        else:
            as_int_ids(ids, "IdMap")

    def _keys_of(self, strs: list[Any] | np.ndarray) -> torch.Tensor:
        """The int64 key of every string (``-1`` for one without a key in eval mode); in
        training mode strings new to the map get new keys, in order of first appearance.
        Checks every string the dictionary does not hold before adding any."""
        try:
            keys = table_ops.dict_keys(self._keys, strs)
        except TypeError:  # an unhashable ID
            check_strs(strs, "IdMap(key_type='str')")
            raise
        new = np.flatnonzero(keys < 0).tolist()
        if new:
            check_strs([strs[i] for i in new], "IdMap(key_type='str')", new)
            if self.training:
                for i in new:
                    key = self._keys.setdefault(strs[i], self._next_key)
                    self._next_key += key == self._next_key
                    keys[i] = key
        return torch.from_numpy(keys)

    def _forget_unused_keys(self) -> None:
        """Drop the strings that hold no row and no admission count from the dictionary,
        once it holds twice as many strings as can be in use (amortised over calls)."""
        in_use = self.capacity + self.pending.numel() // 4
        if len(self._keys) <= 2 * in_use + 1024:
            return
        live = set(self.row_id[: int(self.assigned)].tolist())
        live.update(self.pending[0::2][self.pending[1::2] >= 0].tolist())
        self._keys = {s: k for s, k in self._keys.items() if k in live}

    def _admit(self, flat: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
        """A call in training with ``admit_after > 1``: the rows read stamped with this call,
        the sightings of the IDs without one counted, those now admitted given rows; the
        value of every ID of ``flat`` in the map after it (``-1``: none)."""
        # (no grad mode entered: every tensor here is an integer one, which autograd never
        # records, and the context manager costs a tenth of a call)
        now = int(self.clock)
        self.clock.add_(1)  # in place (a buffer's += goes through Module.__setattr__)
        hit = found >= 0
        if bool(hit.all()):  # every ID holds a row (no mask to apply)
            self.last_used.index_fill_(0, found, now)
            return found
        self.last_used[found[hit]] = now  # rows read in this call are never taken
        new, seen = torch.unique(flat[~hit], return_counts=True)  # sorted: deterministic
        if self._take_rows(self._count(new, seen), now):
            return idmap_find(self.table, flat)
        return found

    def _take_rows(self, new: torch.Tensor, now: int) -> bool:
        """Give rows to the IDs ``new`` (admitted in call ``now``, each once, in order), free
        rows first, then the least recently used ones (never one used in this call); whether
        any ID got one."""
        if new.numel() == 0:
            return False
        rows = self._free_rows(new.numel(), now)
        new = new[: rows.numel()]  # the rest stays unmapped (every row was used in this call)
        if new.numel():
            table_ops.set_values(self.table, new, rows)
            self.row_id[rows] = new
            self.last_used[rows] = now
        return bool(new.numel())

    def _count(self, new: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """Add this call's sightings to the pending counts; the IDs now admitted. The counts
        live in a table of at most half load: when this call's IDs would pass it, the counts
        so far are forgotten, and IDs past it in this call are not counted."""
        room = self.pending.numel() // 4  # half of the slots
        if int(self.pending_used) + new.numel() > room:
            self.pending.copy_(table_ops.empty_table(self.pending.numel() // 2))
            self.pending_used.zero_()
            new, seen = new[:room], seen[:room]
        counts, added = table_ops.add(self.pending, new, seen)
        self.pending_used.add_(added)
        admitted = new[counts >= self.admit_after]
        self.pending_used.sub_(table_ops.erase(self.pending, admitted))
        return admitted

    def _free_rows(self, n: int, now: int) -> torch.Tensor:
        """``n`` rows for new IDs: never-used rows first, then the least recently used ones."""
        start = int(self.assigned)
        fresh = torch.arange(start, min(start + n, self.capacity), dtype=torch.int64)
        self.assigned.add_(fresh.numel())
        if fresh.numel() == n:
            return fresh
        # LRU: the oldest last use first, ties to the lower row; never a row used now
        order = torch.argsort(self.last_used[:start], stable=True)
        order = order[self.last_used[order] < now][: n - fresh.numel()]
        if order.numel():
            table_ops.erase(self.table, self.row_id[order])
            self.evicted = order + self.fallback_rows
        return torch.cat([fresh, order])

    def renew(self, weight: torch.Tensor, offset: int = 0,
              init: str | Callable[[torch.Tensor], Any] = "normal") -> None:
        """Re-draw the rows that the last call took from evicted IDs (:attr:`evicted`) in the
        table this map indexes, rows ``offset`` on of ``weight``, as ``init`` draws a table
        (``"linear"`` draws them as ``"normal"``), and mark their optimizer
        state for a fresh start (:data:`lookuplinear._rowreset.RESETS`). Nothing when the
        last call evicted no ID."""
        if not self.evicted.numel():  # (no grad mode entered then: an exported graph has none)
            return
        with torch.no_grad():
            fresh = weight.new_empty(self.evicted.numel(), weight.shape[1])
            init_weight_(fresh, "normal" if init == "linear" else init, None)
            at = self.evicted.to(weight.device) + offset
            weight.index_copy_(0, at, fresh)
        RESETS.add(weight, at)

    def extra_repr(self) -> str:
        kind = ", key_type='str'" if self.key_type == "str" else ""
        return (f"{self.num_embeddings}, fallback_rows={self.fallback_rows}, "
                f"admit_after={self.admit_after}{kind}, ids={len(self)}")

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.key_type != "str":
            return
        encoded = [s.encode("utf-8", "surrogatepass") for s in self._keys]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        destination[prefix + "key_strings"] = torch.from_numpy(
            np.frombuffer(b"".join(encoded), dtype=np.uint8).copy())
        destination[prefix + "key_offsets"] = torch.from_numpy(
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        destination[prefix + "key_codes"] = torch.tensor(list(self._keys.values()),
                                                         dtype=torch.int64)
        destination[prefix + "key_next"] = torch.tensor(self._next_key, dtype=torch.int64)

    def _strings(self, state_dict: dict[str, Any], prefix: str, missing_keys: list[str],
                 unexpected_keys: list[str], error_msgs: list[str]
                 ) -> tuple[list[str], tuple[dict[str, int], int] | None]:
        """The string entries of ``state_dict`` (``_STR_STATE``) and the dictionary they hold
        (None where there is none, or a message in ``error_msgs``); copies nothing."""
        names = [prefix + n for n in _STR_STATE]
        given = [n for n in names if n in state_dict]
        keys: tuple[dict[str, int], int] | None = None
        if self.key_type == "str" and len(given) < len(names):
            missing_keys.extend(n for n in names if n not in given)
            if not given and prefix + "table" not in state_dict:
                return given, None  # the map left out (strict=False keeps it as it is)
            error_msgs.append(f"IdMap at {prefix!r} holds str IDs (key_type='str'); the state "
                              "has no strings: it is an int map's.")
        elif self.key_type == "str":
            keys = _decode_keys([state_dict[n] for n in names], error_msgs)
        elif given:
            unexpected_keys.extend(given)
            error_msgs.append(f"IdMap at {prefix!r} holds int IDs; the state has strings: it is "
                              "a key_type='str' map's. Build IdMap(..., key_type='str').")
        return given, keys

    def _check_state_entries(self, state_dict: dict[str, Any], prefix: str,
                             local_metadata: dict[str, Any], strict: bool,
                             missing_keys: list[str], unexpected_keys: list[str],
                             error_msgs: list[str]) -> None:
        """The strings checked (they decode, and the map holds strings) and taken out of
        ``state_dict``, before a load copies anything
        (:func:`lookuplinear._loading.check_state_dict`)."""
        given, _ = self._strings(state_dict, prefix, [], [], error_msgs)
        for name in given:
            del state_dict[name]
        error_msgs.extend(self._table_problems(state_dict, prefix))

    def _table_problems(self, state_dict: dict[str, Any], prefix: str) -> list[str]:
        """Why the state of ``state_dict`` cannot be this map's, the map's invariants that a
        lookup relies on: the hash tables (``table``, ``pending``) with no more slots filled
        than the map ever fills (its capacity, half of the pending slots: a lookup probes until
        an empty slot, and a table without one would never end it); ``assigned`` in
        ``[0, capacity]``; each ID in one slot of ``table``, mapped to a row among the
        ``assigned`` ones, which ``row_id`` says it holds (another row would read another ID's
        values, or past the map's rows another table's); ``last_used`` in ``[-1, clock)``;
        ``pending_used`` the count of filled ``pending`` slots. An entry the state dict lacks
        is the map's own (a load with ``strict=False`` keeps it); one of another shape is left
        to the shape check."""
        problems = []
        state: dict[str, torch.Tensor] = {}
        for name in ("table", "pending", "row_id", "last_used", "assigned", "clock",
                     "pending_used"):
            own = getattr(self, name)
            given = state_dict.get(prefix + name, own)
            if (isinstance(given, torch.Tensor) and not given.is_meta
                    and given.shape == own.shape):
                state[name] = given.detach().to("cpu", torch.int64)
        for name, most in (("table", self.capacity), ("pending", self.pending.numel() // 4)):
            if name not in state:
                continue
            filled = int((state[name][1::2] >= 0).sum())
            if filled > most:
                problems.append(
                    f"{prefix}{name}: {filled} of its {state[name].numel() // 2} slots are "
                    f"filled; this IdMap fills at most {most}: the state is damaged")
        if "pending" in state and "pending_used" in state:
            filled = int((state["pending"][1::2] >= 0).sum())
            if int(state["pending_used"]) != filled:
                problems.append(
                    f"{prefix}pending_used: {int(state['pending_used'])}, where {filled} "
                    "slots of pending are filled: the state is damaged")
        if "clock" in state and "last_used" in state:
            clock, used = int(state["clock"]), state["last_used"]
            if clock < 0 or bool(((used < -1) | (used >= clock)).any()):
                problems.append(
                    f"{prefix}last_used: a row last used at call {int(used.min())} or "
                    f"{int(used.max())}, outside [-1, clock = {clock}): the state is damaged")
        if "assigned" in state:
            assigned = int(state["assigned"])
            if not 0 <= assigned <= self.capacity:
                problems.append(
                    f"{prefix}assigned: {assigned} rows given out, outside [0, "
                    f"{self.capacity}] (this IdMap's capacity): the state is damaged")
            elif "table" in state:
                problems.extend(self._row_problems(state, prefix, assigned))
        return problems

    def _row_problems(self, state: dict[str, torch.Tensor], prefix: str, assigned: int
                      ) -> list[str]:
        """Why the IDs of ``state["table"]`` do not hold the ``assigned`` rows as ``row_id``
        says (see :meth:`_table_problems`)."""
        filled = state["table"][1::2] >= 0
        keys, rows = state["table"][0::2][filled], state["table"][1::2][filled]
        outside = rows >= assigned
        if bool(outside.any()):
            at = int(outside.nonzero()[0])
            return [f"{prefix}table: ID {int(keys[at])} is mapped to row {int(rows[at])}, "
                    f"outside the {assigned} rows given out (assigned; capacity "
                    f"{self.capacity}): the state is damaged"]
        distinct, counts = torch.unique(keys, return_counts=True)
        if bool((counts > 1).any()):
            key = int(distinct[counts > 1][0])
            return [f"{prefix}table: ID {key} fills {int(counts.max())} slots: the state is "
                    "damaged"]
        if "row_id" in state:
            wrong = state["row_id"][rows] != keys
            if bool(wrong.any()):
                at = int(wrong.nonzero()[0])
                return [f"{prefix}row_id: row {int(rows[at])} holds ID "
                        f"{int(state['row_id'][rows[at]])}, where table maps ID "
                        f"{int(keys[at])} to it: the state is damaged"]
        return []

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              local_metadata: dict[str, Any], strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        problems = self._table_problems(state_dict, prefix)
        if problems:  # (before anything is copied)
            raise StateDictError(
                f"IdMap.load_state_dict: the state dict does not fit this module: "
                f"{'; '.join(problems)}. Load a state dict saved from an IdMap built with the "
                "same arguments. The map was not loaded.")
        given, keys = self._strings(state_dict, prefix, missing_keys, unexpected_keys,
                                    error_msgs)
        rest = {k: v for k, v in state_dict.items() if k not in given}
        n_errors = len(error_msgs)
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        loaded = any(k.startswith(prefix) for k in rest)  # (a map left out is kept as it is)
        if len(error_msgs) == n_errors and (loaded or keys is not None):
            if keys is not None:
                self._keys, self._next_key = keys
            self.evicted = torch.zeros(0, dtype=torch.int64)


def _decode_keys(state: list[torch.Tensor], error_msgs: list[str]
                 ) -> tuple[dict[str, int], int] | None:
    """A string map's dictionary from its state (``_STR_STATE``: UTF-8 bytes, offsets, keys,
    next key), or None with a message in ``error_msgs`` where it does not hold together."""
    data, offsets, codes, nxt = state
    if not all(isinstance(t, torch.Tensor) for t in state) or nxt.numel() != 1:
        error_msgs.append("IdMap: the saved strings (key_strings, key_offsets, key_codes, "
                          "key_next) are not one tensor each: the state is damaged.")
        return None
    off = offsets.reshape(-1).tolist()
    if (data.dtype != torch.uint8 or data.dim() != 1 or len(off) != codes.numel() + 1
            or (off and (off[0] != 0 or off[-1] != data.numel()))
            or any(b < a for a, b in pairwise(off))):
        error_msgs.append("IdMap: the saved strings (key_strings, key_offsets, key_codes) do "
                          "not hold together: the state is damaged.")
        return None
    raw = data.cpu().numpy().tobytes()
    try:
        strs = [raw[a:b].decode("utf-8", "surrogatepass") for a, b in pairwise(off)]
    except UnicodeDecodeError:
        error_msgs.append("IdMap: the saved strings are not UTF-8: the state is damaged.")
        return None
    nxt_key, key_list = int(nxt), codes.reshape(-1).tolist()
    if len(set(key_list)) < len(key_list) or any(not 0 <= k < nxt_key for k in key_list):
        error_msgs.append(f"IdMap: the saved string keys (key_codes) are not distinct keys in "
                          f"[0, key_next = {nxt_key}): two strings would share a row; the "
                          "state is damaged.")
        return None
    return dict(zip(strs, key_list, strict=True)), nxt_key


def _first_appearance(ids: torch.Tensor) -> torch.Tensor:
    """The distinct values of the 1-D ``ids`` in order of their first appearance."""
    distinct, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((distinct.numel(),), ids.numel(), dtype=torch.int64).scatter_reduce_(
        0, inverse, torch.arange(ids.numel()), "amin")
    return distinct[first.argsort()]
