"""Tables in files: a ``LookupLinear`` table and its optimizer state memory-mapped from disk.

A table of ``rows x dim`` values lives in a directory::

    table/
      meta.json         # shape, dtype, init, seed, the layer's settings
      weight.bin        # rows * dim values, row-major (sparse: undrawn rows take no disk)
      drawn.bin         # one byte per row: 1 once the row holds a value (drawn or written)
      bias.bin          # the bias, when the layer has one
      state-<name>.bin  # an optimizer's row state (Adam's moments, Adagrad's sums), same rows

Each file is mapped with ``mmap`` (``MAP_SHARED``, ``MADV_RANDOM``): the operating system keeps
the rows in use in memory and writes changed pages back, so a table larger than the machine's
memory trains as one that fits, and nothing reads the whole table.

**Lazy initialisation.** A row's initial value depends only on ``(seed, row)``: it is drawn the
first time a lookup names the row (:meth:`TableStorage.materialize`), so creating a 50 GB table
writes nothing. ``init="normal"`` draws a standard normal (``nn.Embedding``'s distribution),
``init="linear"`` a uniform on ``[-1/sqrt(in_features), 1/sqrt(in_features)]``
(``nn.Linear``'s), from a counter-based generator: SplitMix64 of ``(seed, row, pair)``, two
32-bit uniforms per hash, Box-Muller for the normal (pair ``j``'s two values fill columns ``j``
and ``pairs + j``). The values follow the distribution of
an in-memory table's, not its exact numbers (PyTorch's generator draws a whole table in one
sequence). Reading ``weight`` directly shows zeros for rows never looked up.

**What is written is kept.** A row that holds a value is never drawn over: ``load_state_dict``
and a checkpoint's ``restore`` mark what they write (:meth:`TableStorage.mark_written`), and a
row not marked yet that holds a non-zero value was written directly and is kept at its first
lookup. What is exported (``state_dict``, ``to_linear``, ``quantize``, ...) reads every row, so
the layer first draws every row not drawn yet (:meth:`TableStorage.materialize_all`): the copy
equals the layer.

**Serving.** :meth:`TableStorage.open` maps an existing table read-only (``MAP_PRIVATE``): opening
costs the same for 1 MB or 50 GB, processes that open the same file share its pages, and rows
drawn while serving stay private to the process.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import hugepages
from .._atomic import replacing
from .._sizes import as_size
from ..errors import InputTypeError, InputValueError, ModelFileError
from ..modes import MODES
from ..ops._hooks import after_accumulation, provide_state
from ..sparse.adapters import as_bags
from ..sparse.bags import Bags, check_index_range

__all__ = [
    "FORMAT",
    "TableStorage",
    "attach",
    "draw_rows",
    "drawn_eagerly",
    "drawn_input",
    "lookup_rows",
    "read_header",
    "refuse_assign",
    "refuse_conversion",
    "storage_of",
]

FORMAT = "lookuplinear-table"
_VERSION = 1
#: the TableStorage of each table parameter that lives in a file (held weakly by parameter:
#: the module that made the parameter owns it; a copy of the parameter is in memory)
_FILES: WeakIdKeyDictionary = WeakIdKeyDictionary()
_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
#: Linux's MAP_NORESERVE (Python's mmap module names it only from 3.13 on)
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: a table's seed is a uint64 (the generator's word): [0, _SEED_END)
_SEED_END = 2**64
_SEED_RANGE = "an integer in [0, 2**64)"


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (a bijection of uint64)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def draw_rows(
    rows: torch.Tensor, dim: int, *, seed: int, init: str, in_features: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The initial values of ``rows`` of a lazily initialised table, shape ``(len(rows), dim)``.

    Row ``r``'s values depend only on ``(seed, r)``: the same in every process and call.

    Examples
    --------
    >>> a = draw_rows(torch.tensor([7, 3]), 4, seed=1, init="normal", in_features=10)
    >>> b = draw_rows(torch.tensor([3]), 4, seed=1, init="normal", in_features=10)
    >>> torch.equal(a[1], b[0])
    True
    """
    pairs = (dim + 1) // 2
    r = rows.reshape(-1, 1).to(torch.int64).numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        key = r * np.uint64(pairs) + np.arange(pairs, dtype=np.uint64)  # (k, pairs)
        salt = _mix64(np.array([seed], dtype=np.uint64) * _GOLDEN + _GOLDEN)
        h = _mix64((key ^ salt) + _GOLDEN)
    # each hash: two 32-bit uniforms in (0, 1), low word then high word (little-endian)
    u = torch.from_numpy(h.view(np.uint32).astype(np.float64)).add_(0.5).mul_(2.0**-32)
    u = u.view(len(r), pairs, 2)
    lo, hi = u[..., 0], u[..., 1]
    # columns [0, pairs) from each pair's first value, [pairs, 2 * pairs) from its second
    out = torch.empty(len(r), 2 * pairs, dtype=dtype)
    if init == "linear":
        bound = 1.0 / math.sqrt(in_features)
        torch.mul(hi.mul(2).sub_(1), bound, out=out[:, :pairs])
        torch.mul(lo.mul(2).sub_(1), bound, out=out[:, pairs:])
    else:  # Box-Muller: two independent standard normals per pair of uniforms
        radius = hi.log().mul_(-2).sqrt_()
        angle = lo.mul(2 * math.pi)
        torch.mul(radius, angle.cos(), out=out[:, :pairs])
        torch.mul(radius, angle.sin_(), out=out[:, pairs:])
    return out[:, :dim].contiguous() if dim < 2 * pairs else out


def _map(path: Path, shape: tuple[int, ...], dtype: torch.dtype, *, writable: bool,
         create: bool) -> tuple[torch.Tensor, mmap.mmap]:
    """``path`` as a tensor of ``shape`` (a new sparse file of zeros when ``create``)."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if create:
        tmp = path.with_name(path.name + ".new")
        try:
            with open(tmp, "wb") as f:
                f.truncate(nbytes)  # a hole: reads as zeros, takes no disk until written
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ModelFileError(f"{path} is missing: the table directory is incomplete.") from None
    if size != nbytes:
        raise ModelFileError(
            f"{path} holds {size} bytes; a {shape} {dtype} table needs {nbytes}. The table "
            "directory is damaged or from another table."
        )
    fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        if writable:
            mm = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE)
        else:  # copy-on-write, and no memory reserved for copies of pages never written
            mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE | _MAP_NORESERVE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    if hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_RANDOM)  # rows are read scattered: no read-ahead around them
    return torch.frombuffer(mm, dtype=dtype).view(shape), mm


def _anonymous_zeros(n: int) -> torch.Tensor:
    """``n`` zero bytes of anonymous memory whose pages appear on first touch (no memset), on
    huge pages where the system allows (:mod:`lookuplinear.hugepages`'s policy)."""
    mm = mmap.mmap(-1, max(n, 1))
    if hugepages.enabled() and hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # a hint: ordinary pages where the kernel says no
            mm.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(mm, dtype=torch.uint8)[:n]


def _zero(t: torch.Tensor, mm: mmap.mmap) -> None:
    """Set a mapped file to zeros, giving its blocks back to the file system where it can."""
    try:
        mm.madvise(mmap.MADV_REMOVE)  # punches a hole: zeros without writing them
    except (AttributeError, OSError, ValueError):
        flat = t.data.view(-1)
        for start in range(0, flat.numel(), 1 << 24):
            flat[start:start + (1 << 24)].zero_()


class TableStorage:
    """A table, its bias and its optimizer state in memory-mapped files of one directory.

    Create one through ``LookupLinear(..., storage=path)``, open one with
    :meth:`LookupLinear.open <lookuplinear.LookupLinear.open>`. See the module's description
    for the layout, the lazy initialisation and read-only serving.

    Attributes
    ----------
    path : Path
    weight : Tensor of shape (rows, dim), memory-mapped
    drawn : uint8 Tensor of shape (rows,): 1 where the row holds a value (drawn or written)
    bias : Tensor of shape (dim,) or None
    writable : bool
    """

    def __init__(self, path: Path, meta: dict[str, Any], *, writable: bool, create: bool) -> None:
        self.path = path
        self.meta = meta
        self.writable = writable
        rows, dim = meta["rows"], meta["dim"]
        self.dtype = _DTYPES[meta["dtype"]]
        self._maps: dict[str, tuple[torch.Tensor, mmap.mmap]] = {}
        #: state files made while a restore or an optimizer's load stages
        #: (:meth:`stage_states`): name -> their staging path and mapping, put in place by
        #: :meth:`commit_states`
        self._staged: dict[str, tuple[Path, torch.Tensor, mmap.mmap]] | None = None
        #: the state files :meth:`commit_states` replaced, until :meth:`finish_states`: name ->
        #: the old file's second name (None: there was none) and the mapping in use before
        self._replaced: dict[str, tuple[Path | None, tuple[torch.Tensor, mmap.mmap] | None]] = {}
        self.weight = self._file("weight", (rows, dim), self.dtype, create)
        self.drawn = self._file("drawn", (rows,), torch.uint8, create)
        self.bias = self._file("bias", (dim,), self.dtype, create) if meta["bias"] else None
        # a training process reads the flags from a copy in memory (huge pages where the
        # system gives them): one flag a lookup, scattered over a mapping of 4 KiB pages, cost a
        # TLB miss each; the file keeps them for the next process
        self._seen = self.drawn
        self._complete = False  # every row holds a value (materialize_all has run since)
        if writable:
            self._seen = _anonymous_zeros(rows)
            if not create:  # copy the flags set; the rest stays untouched zero pages
                for start in range(0, rows, 1 << 24):
                    chunk = self.drawn[start:start + (1 << 24)]
                    if bool(chunk.any()):
                        self._seen[start:start + (1 << 24)] = chunk
        if create and meta["padding_idx"] is not None:
            self._mark(torch.tensor([meta["padding_idx"]]))  # the padding row stays zero

    def _file(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
              create: bool) -> torch.Tensor:
        t, mm = _map(self.path / f"{name}.bin", shape, dtype, writable=self.writable,
                     create=create)
        self._maps[name] = (t, mm)
        return t

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(cls, path: str | os.PathLike[str], rows: int, dim: int, *, dtype: torch.dtype,
               init: str, seed: int, layer: dict[str, Any]) -> TableStorage:
        """A new table directory at ``path`` (which must not exist; its parent must)."""
        path = Path(path)
        # plain ints for the JSON file (a numpy integer would fail there, half created)
        rows, dim = as_size(rows, "rows", where="storage="), as_size(dim, "dim", where="storage=")
        seed = as_size(seed, "seed", low=0, where="storage=")
        if seed >= _SEED_END:  # meta.json would hold a seed no draw (nor a reopen) takes
            raise InputValueError(
                f"storage=: seed must be {_SEED_RANGE}, got {seed}. Pass a seed below 2**64 "
                "(seed % 2**64, for one)."
            )
        name = next((k for k, v in _DTYPES.items() if v == dtype), None)
        if name is None:
            raise InputTypeError(
                f"a table in a file takes dtype {', '.join(_DTYPES)}, got {dtype}."
            )
        if path.exists():
            raise InputValueError(
                f"storage={str(path)!r} exists. A new table needs a new path (nothing is "
                "overwritten): open the existing one with LookupLinear.open(path), restore a "
                "lookuplinear.Checkpoint into it, or remove it first."
            )
        if not path.parent.is_dir():
            raise InputValueError(
                f"storage={str(path)!r}: the directory {str(path.parent)!r} does not exist. "
                "Create it first."
            )
        _warn_if_it_may_not_fit(path.parent, rows * dim * dtype.itemsize, "the table")
        meta = {"format": FORMAT, "version": _VERSION, "rows": rows, "dim": dim, "dtype": name,
                "init": init, "seed": seed, **layer}
        tmp = path.with_name(path.name + ".new")
        if tmp.is_dir():  # left by a process killed while creating this table
            shutil.rmtree(tmp)
        tmp.mkdir()
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        storage = cls(tmp, meta, writable=True, create=True)
        os.replace(tmp, path)  # the directory appears whole
        storage.path = path
        return storage

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, writable: bool = False) -> TableStorage:
        """Map the table directory at ``path``; read-only (``MAP_PRIVATE``) unless ``writable``.

        Raises
        ------
        ModelFileError
            ``path`` is not a lookuplinear table directory, or its files are damaged: a file
            missing or of the wrong size, a ``meta.json`` field missing or out of its range.
        """
        path = Path(path)
        try:
            meta = read_header(path / "meta.json", FORMAT, _VERSION, "table")
        except FileNotFoundError:
            raise ModelFileError(
                f"{str(path)!r} is not a lookuplinear table directory (no meta.json). Create "
                "one with LookupLinear(..., storage=path)."
            ) from None
        return cls(path, _checked_meta(path / "meta.json", meta), writable=writable,
                   create=False)

    # ------------------------------------------------------------------ rows
    def materialize(self, rows: torch.Tensor) -> None:
        """Give the ``rows`` that hold no value yet their initial value, drawn from ``(seed,
        row)``; indices outside the table raise ``LookupIndexError``, as the lookup would.

        A row not yet marked that holds a non-zero value was written directly (``weight.copy_``,
        ``weight[rows] = v``) and is kept, not drawn over.
        """
        rows = rows.reshape(-1)
        if rows.numel() == 0:
            return
        if rows.dtype != torch.int64:
            rows = rows.long()
        check_index_range(rows, self.meta["rows"], where="indices")
        fresh = rows[self._seen[rows] == 0]
        if fresh.numel() == 0:
            return
        fresh = torch.unique(fresh)
        undrawn = fresh[self.weight[fresh].eq(0).all(1)]
        values = draw_rows(undrawn, self.meta["dim"], seed=self.meta["seed"],
                           init=self.meta["init"], in_features=self.meta["rows"],
                           dtype=self.dtype)
        # ``.data``: no version bump; no graph has read these rows (they held no value)
        self.weight.data[undrawn] = values
        self._mark(fresh)

    def mark_written(self, rows: torch.Tensor | None = None) -> None:
        """Record ``rows`` (every row when ``None``) as holding values the lookup keeps.

        ``load_state_dict`` and a checkpoint's ``restore`` call it for what they write; a
        direct write of non-zero values is noticed at the row's next lookup. Call it after
        writing a row directly that a lookup has not read yet *and* whose values are all zero:
        unmarked, such a row reads as one never drawn, and its first lookup draws it.

        Raises
        ------
        LookupIndexError
            A row outside ``[0, rows)``.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> from lookuplinear import LookupLinear
        >>> layer = LookupLinear(1000, 4, bias=False, seed=0,
        ...                      storage=pathlib.Path(tempfile.mkdtemp()) / "t")
        >>> with torch.no_grad():
        ...     layer.weight[[3, 7]] = 0.0          # zeros: not told from a row never drawn
        >>> layer.storage.mark_written(torch.tensor([3, 7]))
        >>> layer(torch.tensor([3, 7])).abs().sum().item()
        0.0
        """
        if rows is None:
            self.drawn.data.fill_(1)
            if self._seen is not self.drawn:
                self._seen.fill_(1)
            self._complete = True
            return
        rows = rows.reshape(-1).long()
        check_index_range(rows, self.meta["rows"], where="rows")
        self._mark(rows)

    def _mark(self, rows: torch.Tensor) -> None:
        self.drawn.data[rows] = 1
        if self._seen is not self.drawn:
            self._seen[rows] = 1

    def broadcast(self, src: int, group: Any = None) -> None:
        """Make this table the table of process ``src`` (a global rank) of ``group``, as
        ``torch.distributed.broadcast`` makes a tensor; every process of the group calls it.

        The seed and init its rows are drawn by (``meta.json`` rewritten where the table is
        writable), which rows hold values, and their values: rows this table holds that
        ``src``'s does not are zero and undrawn again, so each process draws a row where
        ``src`` would. Only the flags (one byte a row) and the rows holding values travel, a
        chunk of rows at a time: not the zeros of rows never drawn. A row written directly and
        not marked (:meth:`mark_written`) nor looked up yet holds no value here and does not
        travel. The bias and the optimizer state files stay as they are (the bias is a
        parameter of its own).
        """
        import torch.distributed as dist

        box = [[self.meta["seed"], self.meta["init"]]]
        dist.broadcast_object_list(box, src=src, group=group)
        seed, init = box[0]
        if (seed, init) != (self.meta["seed"], self.meta["init"]):
            self.meta = {**self.meta, "seed": seed, "init": init}
            if self.writable:
                with replacing(self.path / "meta.json") as tmp:
                    tmp.write_text(json.dumps(self.meta, indent=1))
        mine = dist.get_rank() == src
        rows, dim = self.meta["rows"], self.meta["dim"]
        for start in range(0, rows, 1 << 20):
            flags = self._seen[start:start + (1 << 20)].clone()
            dist.broadcast(flags, src=src, group=group)
            held = flags.nonzero().squeeze(1) + start
            if not mine:
                ours = self._seen[start:start + (1 << 20)]
                gone = ((ours != 0) & (flags == 0)).nonzero().squeeze(1) + start
                if gone.numel():
                    self.weight.data[gone] = 0
                    self.drawn.data[gone] = 0
                    if self._seen is not self.drawn:
                        self._seen[gone] = 0
            if held.numel() == 0:
                continue
            values = (self.weight.data[held] if mine
                      else torch.empty(len(held), dim, dtype=self.dtype))
            dist.broadcast(values, src=src, group=group)
            if not mine:
                self.weight.data[held] = values
                self._mark(held)
        if not mine:
            self._complete = False

    def holding(self, rows: torch.Tensor) -> torch.Tensor:
        """The entries of ``rows`` (int64, in ``[0, rows)``) that hold values (drawn or
        written), in their order: what a checkpoint saves of them."""
        return rows[self._seen[rows] != 0]

    def drawn_rows(self) -> torch.Tensor:
        """The rows drawn so far (int64, sorted), read a chunk at a time."""
        found = []
        for start in range(0, self.meta["rows"], 1 << 24):
            chunk = self._seen[start:start + (1 << 24)]
            if bool(chunk.any()):
                found.append(chunk.nonzero().squeeze(1) + start)
        return torch.cat(found) if found else torch.zeros(0, dtype=torch.long)

    def materialize_all(self) -> None:
        """Draw every row that holds no value yet (writes the whole table; once: again, it
        costs nothing until :meth:`clear`)."""
        if self._complete:
            return
        for start in range(0, self.meta["rows"], 1 << 16):
            self.materialize(torch.arange(start, min(start + (1 << 16), self.meta["rows"])))
        self._complete = True

    def state(self, name: str, shape: tuple[int, ...], fill: float = 0.0,
              dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new optimizer-state file ``state-<name>.bin`` of ``shape`` in ``dtype`` (None: the
        table's), filled with ``fill`` (zeros cost nothing; another fill writes the whole
        file)."""
        if not self.writable:
            raise InputValueError(
                f"the table at {self.path} is open read-only, for serving; an optimizer cannot "
                "keep state beside it. Open it with LookupLinear.open(path, writable=True)."
            )
        dtype = dtype or self.dtype
        _warn_if_it_may_not_fit(
            self.path, self._unwritten() + math.prod(shape) * dtype.itemsize,
            f"the table with its optimizer state (a new state-{name}.bin)")
        if self._staged is None:
            t = self._file(f"state-{name}", shape, dtype, create=True)
        else:  # beside the file in use, which stays until the restore commits
            staging = self.path / f"state-{name}.bin.staged"
            try:
                t, mm = _map(staging, shape, dtype, writable=True, create=True)
            except BaseException:
                staging.unlink(missing_ok=True)
                raise
            self._staged[f"state-{name}"] = (staging, t, mm)
        if fill != 0:
            t.fill_(fill)
        return t

    def _unwritten(self) -> int:
        """The bytes the table's files (staged ones too) take on disk once every page is
        written, less what they take now: what writing rows may still need."""
        paths = [self.path / f"{name}.bin" for name in self._maps]
        paths += [staging for staging, _, _ in (self._staged or {}).values()]
        total = 0
        for path in paths:
            with contextlib.suppress(OSError):
                st = path.stat()
                total += max(st.st_size - getattr(st, "st_blocks", 0) * 512, 0)
        return total

    def stage_states(self) -> None:
        """Until :meth:`finish_states` or :meth:`abort_states`, new state files (a restore's
        staged optimizer state, an optimizer's loaded one) are made beside the ones in use,
        which stay as they are: a restore or a load refused part way changes no file."""
        self._staged, self._replaced = {}, {}

    def commit_states(self) -> None:
        """Put the staged state files in place of the ones in use (a rename each), each file
        in use kept under a second name (``state-<name>.bin.old``) until :meth:`finish_states`
        drops it or :meth:`abort_states` puts it back: a commit that fails part way, or one
        of several tables' commits, is undone by :meth:`abort_states`."""
        for name, (staging, t, mm) in (self._staged or {}).items():
            target = self.path / f"{name}.bin"
            aside = target.with_name(target.name + ".old")
            kept: Path | None = aside
            try:
                os.link(target, aside)
            except FileNotFoundError:
                kept = None  # no file in use: the staged one is the first
            except OSError:  # a file system without hard links: moved aside instead
                os.replace(target, aside)
            self._replaced[name] = (kept, self._maps.get(name))
            os.replace(staging, target)
            self._maps[name] = (t, mm)

    def finish_states(self) -> None:
        """End the staging :meth:`commit_states` committed: the replaced state files' second
        names are removed (the files live on while the old state maps them)."""
        replaced, self._replaced, self._staged = self._replaced, {}, None
        for aside, _ in replaced.values():
            if aside is not None:
                with contextlib.suppress(OSError):  # committed: a file left over is harmless
                    aside.unlink()

    def abort_states(self) -> None:
        """Undo the staging: every state file :meth:`commit_states` replaced is put back, with
        the mapping in use before, and every staged file is removed; the files are as they
        were before :meth:`stage_states`. Each step is tried; the first that fails is raised
        once the others are done."""
        staged, self._staged = self._staged or {}, None
        replaced, self._replaced = self._replaced, {}
        failed: OSError | None = None
        for name, (aside, mapping) in replaced.items():
            target = self.path / f"{name}.bin"
            try:
                if aside is None:
                    target.unlink(missing_ok=True)
                elif target.exists() and os.path.samefile(aside, target):
                    aside.unlink()  # not replaced yet (a rename onto itself would do nothing)
                else:
                    os.replace(aside, target)
            except OSError as e:
                failed = failed or e
            if mapping is None:
                self._maps.pop(name, None)
            else:
                self._maps[name] = mapping
        for staging, _, _ in staged.values():
            try:
                staging.unlink(missing_ok=True)
            except OSError as e:
                failed = failed or e
        if failed is not None:
            raise failed

    def fresh_flags(self) -> torch.Tensor | None:
        """New zero drawn flags for :meth:`clear` (anonymous memory: new zero pages, not a
        memset of the old ones), or None where the flags are read from the file (read-only).
        Allocated before anything is cleared: a failure here changes nothing."""
        return None if self._seen is self.drawn else _anonymous_zeros(self.meta["rows"])

    def clear(self, *, flags: torch.Tensor | None = None) -> None:
        """Every row undrawn, as when created (the bias zero too). The optimizer state files
        stay as they are: they belong to the optimizer, as an in-memory table's state does
        (a checkpoint's restore replaces them, :meth:`stage_states`). ``flags``: the new
        flags :meth:`fresh_flags` gave, for a caller that allocates before it changes any
        file (made here otherwise, before any file is zeroed)."""
        if flags is None:
            flags = self.fresh_flags()
        for name, (t, mm) in self._maps.items():
            if not name.startswith("state-"):
                _zero(t, mm)
        if flags is not None:
            self._seen = flags
        self._complete = False
        if self.meta["padding_idx"] is not None:
            self._mark(torch.tensor([self.meta["padding_idx"]]))

    def flush(self) -> None:
        """Write the changed pages to disk now (``msync``); the OS does it anyway, later."""
        if self.writable:
            for _, mm in self._maps.values():
                mm.flush()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise InputTypeError(
            f"a table in a file ({self.path}) cannot be pickled or deep-copied: its values live "
            "in the file, which a copy would share. Open it again in the other process with "
            "LookupLinear.open(path), or copy its values with layer.state_dict()."
        )

    def __repr__(self) -> str:
        m = self.meta
        mode = "r+" if self.writable else "r"
        return f"TableStorage({str(self.path)!r}, {m['rows']}x{m['dim']} {m['dtype']}, {mode})"


def read_header(file: Path, fmt: str, version: int, kind: str) -> dict[str, Any]:
    """The JSON header of a lookuplinear directory (a table's ``meta.json``, a checkpoint's
    ``MANIFEST.json``), checked: its format and version.

    Raises
    ------
    FileNotFoundError
        ``file`` is missing (the caller says what that means).
    ModelFileError
        It is damaged, of another format, or of another version; it is a directory; or its
        directory is a file.
    """
    try:
        text = file.read_bytes()
    except IsADirectoryError:
        raise ModelFileError(
            f"{file} is not a file: the {kind} directory {file.parent} is damaged. Restore it "
            f"from a copy, or start a new {kind} directory."
        ) from None
    except NotADirectoryError:
        raise ModelFileError(
            f"{file.parent} is a file, not a lookuplinear {kind} directory. Give the path of a "
            f"{kind} directory, or a path where nothing exists yet to start one."
        ) from None
    try:
        header = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{file} is damaged: {exc}.") from None
    if not isinstance(header, dict) or header.get("format") != fmt:
        raise ModelFileError(f"{file.parent} is not a lookuplinear {kind} directory.")
    if header.get("version") != version:
        raise ModelFileError(
            f"{file.parent} is {kind} format version {header.get('version')!r}; this "
            f"lookuplinear reads version {version}. Upgrade lookuplinear."
        )
    return header


def _checked_meta(file: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (a table's ``meta.json``, read from ``file``), its fields checked: present, of
    their type and range. A field damaged or edited by hand is a ``ModelFileError`` naming it,
    not an error at the first lookup."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    rows: Any = meta.get("rows")
    checks: dict[str, tuple[Any, str]] = {
        "rows": (whole(rows) and rows > 0, "a positive integer"),
        "dim": (whole(meta.get("dim")) and meta["dim"] > 0, "a positive integer"),
        "dtype": (meta.get("dtype") in _DTYPES, f"one of {', '.join(_DTYPES)}"),
        "init": (meta.get("init") in ("normal", "linear"), "'normal' or 'linear'"),
        "seed": (whole(meta.get("seed")) and 0 <= meta["seed"] < _SEED_END, _SEED_RANGE),
        "bias": (isinstance(meta.get("bias"), bool), "true or false"),
        "sparse": (isinstance(meta.get("sparse"), bool), "true or false"),
        "include_last_offset": (isinstance(meta.get("include_last_offset"), bool),
                                "true or false"),
        "mode": (meta.get("mode") in MODES, f"one of {', '.join(MODES)}"),
        "padding_idx": (meta.get("padding_idx") is None or (
            whole(meta["padding_idx"]) and whole(rows) and 0 <= meta["padding_idx"] < rows),
            "null or a row index in [0, rows)"),
    }
    for key, (ok, expected) in checks.items():
        if key not in meta:
            raise ModelFileError(
                f"{file} is damaged: it has no {key!r} field. A table's meta.json is written "
                "by LookupLinear(..., storage=path); restore the directory from a copy."
            )
        if not ok:
            raise ModelFileError(
                f"{file} is damaged: its {key!r} is {meta[key]!r}, expected {expected}. A "
                "table's meta.json is written by LookupLinear(..., storage=path); restore the "
                "directory from a copy."
            )
    return meta


def storage_of(param: torch.Tensor) -> TableStorage | None:
    """The :class:`TableStorage` a table parameter (or a view of one) lives in, if any."""
    if not _FILES:
        return None
    base = param._base if param._base is not None else param
    found: TableStorage | None = _FILES.get(base)
    return found


# torch's lazy form of ``torch.compiler.disable``, which would import ``torch._dynamo`` here,
# seconds of every process that imports the layer; this one imports it on the first call, which
# happens only inside a compiled graph (dynamo is loaded there already)
@torch._disable_dynamo
def drawn_eagerly(storage: TableStorage, input: Any, offsets: torch.Tensor | None = None) -> Any:
    """:func:`drawn_input` outside any ``torch.compile`` graph (a graph break): a compiled
    layer or collection over a table in a file draws its rows as an eager one does."""
    return drawn_input(storage, input, offsets)


def drawn_input(storage: TableStorage, input: Any, offsets: torch.Tensor | None = None) -> Any:
    """Draw the rows of the table in ``storage`` that ``input`` reads for the first time;
    returns the input (matrix input converted to ``Bags`` once). The module that owns the
    table calls it before its lookup: the lookup itself reads rows, it draws none."""
    if torch.jit.is_tracing():  # a trace records lookups, not the draw of their new rows
        if storage.drawn_rows().numel() < storage.meta["rows"]:
            raise InputValueError(
                "torch.jit.trace of a table in a file (storage=) whose rows are not all drawn: "
                "the trace would record the lookup but not the drawing of the rows a later "
                "batch reads for the first time, and those would read as zeros. Draw every row "
                "first (layer.storage.materialize_all()), then trace."
            )
        return input
    if offsets is not None:  # a 1-D index tensor with offsets: every entry is a row
        storage.materialize(input)
        return input
    input, rows = lookup_rows(input, storage.weight.shape[0])
    storage.materialize(rows)
    return input


def refuse_assign(local_metadata: dict[str, Any], key: str) -> None:
    """Refuse ``load_state_dict(..., assign=True)`` into a table in a file: assigning would put
    the given tensor in place of the mapped table, and the file would no longer follow."""
    if local_metadata.get("assign_to_params_buffers", False):
        raise InputValueError(
            f"load_state_dict(..., assign=True): {key!r} is a table in a file, and assigning "
            "would replace it by the given tensor (the file would no longer follow the layer). "
            "Load without assign=True: the values are copied into the file."
        )


def refuse_conversion(fn: Any, param: torch.Tensor, where: str) -> None:
    """Refuse an ``nn.Module._apply`` of ``fn`` (``.to``, ``.double()``, ``.cuda()``,
    ``share_memory()``, ...) that would put table ``param``, which lives in a file, in new
    memory: the file would no longer follow the layer. ``fn`` is tried on a one-element tensor
    of the table's dtype and device, so a refusal copies nothing; what leaves it where it is
    (``.cpu()``, ``.to`` its own dtype: the tensor itself, or a view of its memory) passes, and
    anything else, ``to_empty()`` included, is refused."""
    probe = torch.empty(1, dtype=param.dtype, device=param.device)
    out = fn(probe)
    if not probe.is_shared() and (out is probe or (
            out.device == probe.device
            and out.untyped_storage().data_ptr() == probe.untyped_storage().data_ptr())):
        return
    if out.is_shared():
        what, fix = ("share_memory()", "a table in a file is already shared between processes "
                     "through its file: open it in each with LookupLinear.open(path)")
    elif out.dtype == param.dtype and out.device == param.device:
        what, fix = ("to_empty() (or another function giving the table new memory)",
                     "leave the table out of it: a table in a file is allocated already (its "
                     "rows are drawn from (seed, row) or read from its file); call to_empty() "
                     "on the model's other modules only")
    else:
        what = f"a conversion to {out.dtype} on {out.device}"
        fix = (f"create the table with that dtype (dtype={out.dtype}, storage=a new path) and "
               "copy the values (load_state_dict), or drop storage= for a table in memory")
    raise InputValueError(
        f"{where}: {what} would copy the table, which lives in a file ({param.dtype} on "
        f"{param.device}), into new memory, and the file would no longer follow the layer. "
        f"Instead, {fix}."
    )


def _warn_if_it_may_not_fit(directory: Path, nbytes: int, what: str) -> None:
    """Warn when the file system of ``directory`` has less space free than ``what`` (a new
    table; a table and its optimizer state, when a state file is added) may still take as its
    rows are written, ``nbytes``: its files are sparse and memory-mapped, and a page written
    past the free space cannot be reported as an error (the kernel ends the process with
    SIGBUS)."""
    try:
        st = os.statvfs(directory)
    except (AttributeError, OSError):  # not a POSIX system, or the call is refused
        return
    free = st.f_bavail * st.f_frsize
    if free < nbytes:
        warnings.warn(
            f"{what} needs up to {nbytes:,} bytes at {str(directory)!r} as its rows are "
            f"written (sparse files: taken as rows are written), and that file system has "
            f"{free:,} free; the files are memory-mapped, so a row written once the disk is "
            "full ends the process (SIGBUS), not with an exception. Free space, or put the "
            "table on a larger disk (an optimizer's state files take as much as the table "
            "again, or twice for Adam).",
            UserWarning, stacklevel=3)


def attach(param: torch.Tensor, storage: TableStorage) -> None:
    """Record that ``param`` lives in ``storage``, for as long as ``param`` lives; its optimizer
    state goes there too (``storage.state`` is the allocator the table provides its optimizers,
    and ``storage`` stages what it makes for a load: :func:`lookuplinear.ops._hooks.provide_state`).

    A dense gradient of ``param`` draws every row before any update reads it (the hook runs
    before those of optimizers, registered later): its update changes every row (weight decay,
    momentum), and an in-memory table holds every row from the start, so the table trains to
    the same bits as in memory."""
    _FILES[param] = storage

    def dense_gradient(p: torch.Tensor) -> None:
        if p.grad is not None and p.grad.layout == torch.strided:
            storage.materialize_all()

    if param.is_leaf:
        after_accumulation(param, dense_gradient)
    provide_state(param, storage.state, storage)


def lookup_rows(input: Any, in_features: int) -> tuple[Any, torch.Tensor]:
    """``(input, rows)``: the rows of the table a lookup of ``input`` reads (matrix input
    converted to ``Bags`` once, so the lookup does not convert it again).

    Raises
    ------
    InputValueError
        Dense floating rows: they read every row of the table.
    """
    if isinstance(input, Bags):
        return input, input.indices
    if isinstance(input, torch.Tensor) and input.layout == torch.strided:
        if input.dtype.is_floating_point or input.dtype == torch.bool:
            raise InputValueError(
                "a table in a file takes index, bag or sparse input; dense rows of shape "
                f"(..., in_features) (got {input.dtype} of shape {tuple(input.shape)}) would "
                "read every row. Pass Bags.from_dense(x) or x.to_sparse_csr()."
            )
        return input, input
    bags = as_bags(input, in_features)
    return bags, bags.indices
