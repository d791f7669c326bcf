"""Crash-consistent checkpoints of a model and its optimizers that cost what changed.

A checkpoint directory holds a chain of segments and a manifest that names the complete ones::

    ckpt/
      MANIFEST.json               # generation, and each segment's file, size and SHA-256
      seg-00000001.safetensors    # base: every row of every table (drawn rows of a file table)
      seg-00000004.safetensors    # rows changed since the segment before, and the rest whole

A segment holds, for each table trained by row-sparse gradients (``sparse=True`` or a fused
optimizer), the rows changed since the previous save, their values and their optimizer state
(``lookuplinear.optim``'s rows: moments, sums, momentum: the state each optimizer declares
per row); everything else whole: the other parameters, the buffers and the rest of the
``state_dict`` (as an ``IdMap``'s strings), the optimizers' other state, its layout in memory
and their hyperparameters, PyTorch's CPU random generator state. The changed rows are known
without reading any table: every row-sparse gradient of a lookuplinear table is made by one
backward, which tells the checkpoint its rows
(:mod:`lookuplinear.storage.rowwatch`). A table with dense gradients is saved whole each time.

**Order of writes** (:meth:`Checkpoint.save`): the new segment to a temporary file
(``.seg-N.safetensors.*.tmp``), ``fsync``, rename to ``seg-N.safetensors``, ``fsync`` of the
directory; then the new manifest to ``.MANIFEST.json.*.tmp``, ``fsync``, rename over
``MANIFEST.json`` (the commit point: ``rename`` is atomic), ``fsync`` of the directory; only then
are segments the new manifest no longer names deleted. A process killed at any instant leaves
either the old manifest, whose segments are all still there, or the new one. On
:meth:`Checkpoint.restore` every segment's size and SHA-256 are checked against the manifest before
anything is loaded: a torn or damaged file is a ``ModelFileError``, never loaded. So is a manifest
no save wrote: each segment records its generation and the one it follows (none for a base), and
the manifest's chain must match.

**All or nothing.** :meth:`Checkpoint.restore` checks everything it will write against the model
and optimizers (every table's full shape and dtype, which table sits at which rows of a
``LookupCollection``'s group, the other tensors, the optimizers' classes, groups and state
tensors, the ``IdMap`` strings) and builds the optimizers' new state beside the
old before it writes anything; what is left then are copies into tensors of checked shapes. A
checkpoint that does not fit is a ``ModelFileError`` and changes nothing. A restore never
resizes a table.

**Compaction.** When the segments add up to more than ``compact_ratio`` times one segment of
every row ever saved, the next save writes that one segment instead (the base of a new chain),
so the chain's size stays within a constant factor of the rows training touched.

**Tables in files** (:class:`~lookuplinear.TableStorage`) are changed in place by training, so
after a crash their files hold a mix of steps; :meth:`Checkpoint.restore` empties them (every row
undrawn, as when created) and writes the checkpoint's rows back: the rows a checkpoint never
saw are drawn again from ``(seed, row)`` on their next lookup, as they were before: a segment
records each such table's seed and init, and a restore into a table of others, or into a
table in memory, is refused.

**Where it is.** This module holds :class:`Checkpoint`: the saving, what a segment holds, and
:meth:`Checkpoint.restore`, which writes what :class:`~lookuplinear.storage.restore.Restore`
(:mod:`lookuplinear.storage.restore`) has checked and staged before it; the files and the
manifest are :mod:`lookuplinear.storage.segments`'s, the rows followed between saves
:mod:`lookuplinear.storage.rowwatch`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._fusion import bound_to
from .._rowreset import RESETS
from ..errors import CheckpointNotFoundError, InputTypeError, InputValueError, ModelFileError
from ..ops._hooks import staged_states
from .restore import Restore, registered_names, row_sparse, table_layouts
from .rowwatch import RowTracker
from .segments import commit_segment, former_names, load_segments, read_manifest, remove_unlisted
from .tables import storage_of

__all__ = ["Checkpoint"]

def _json_value(value: Any, key: str = "") -> Any:
    """An optimizer's hyperparameter or state scalar as a JSON value (a tuple as a list)."""
    if isinstance(value, tuple):
        return [_json_value(v, key) for v in value]
    if isinstance(value, torch.Tensor):
        raise InputTypeError(
            f"the optimizer's {key!r} is a tensor ({value!r}); a checkpoint saves "
            "hyperparameters as JSON numbers. Give it as a number (lr=0.01, not "
            "lr=torch.tensor(0.01)); no checkpoint was written."
        )
    return value


def _same_json(back: Any, given: Any) -> bool:
    """Whether ``back`` (``given`` through JSON) equals ``given``, a NaN equal to a NaN (JSON
    keeps it; ``nan != nan`` would refuse it)."""
    if isinstance(back, dict) and isinstance(given, dict):
        return back.keys() == given.keys() and all(_same_json(back[k], given[k]) for k in back)
    if isinstance(back, list) and isinstance(given, list):
        return len(back) == len(given) and all(map(_same_json, back, given))
    if isinstance(back, float) and isinstance(given, float) and back != back:
        return given != given
    return bool(back == given)


class Checkpoint:
    """Crash-consistent, incremental checkpoints of ``module`` and its ``optimizers``.

    ``save()`` writes what changed since the previous save (the rows training touched in each
    table trained by row-sparse gradients, the rest whole); ``restore()`` loads the last save
    that completed, bit for bit, whatever instant the process was killed at. See the module
    description for the layout and the order of writes.

    Parameters
    ----------
    path : path
        The checkpoint directory (created if missing; its parent must exist).
    module : nn.Module
        The model: every parameter and buffer is saved.
    optimizers : optimizer or iterable of optimizers, optional
        Their state and hyperparameters are saved too. ``lookuplinear.optim`` optimizers' row
        state is saved by rows; other optimizers' state whole.
    compact_ratio : float, default 2.0
        Rewrite the chain as one segment when it grows past this many times that segment.

    Raises
    ------
    InputValueError
        An optimizer holds a parameter that is not ``module``'s, or ``path``'s parent is missing;
        or a ``torch.optim.SGD`` with momentum trains a table with row-sparse gradients (its
        momentum moves rows the gradients did not name; use ``lookuplinear.optim.SGD``).
    ModelFileError
        ``path`` is a file, or holds a manifest that is damaged or is not a file.

    Examples
    --------
    >>> import tempfile
    >>> from lookuplinear import LookupLinear
    >>> from lookuplinear.optim import Adam
    >>> model = LookupLinear(1000, 4, sparse=True)
    >>> opt = Adam(model.parameters(), lr=0.1)
    >>> ckpt = Checkpoint(tempfile.mkdtemp() + "/ckpt", model, opt)
    >>> x = torch.tensor([3, 7])
    >>> model(x).sum().backward(); opt.step()
    >>> ckpt.save(step=1)           # the first save holds every row
    1
    >>> opt.zero_grad(); model(x).sum().backward(); opt.step()
    >>> ckpt.save(step=2)           # rows 3 and 7, their Adam moments, the bias
    2
    >>> saved = model.weight.detach().clone()
    >>> opt.zero_grad(); model(x).sum().backward(); opt.step()   # then the process dies...
    >>> ckpt.restore()
    {'step': 2}
    >>> torch.equal(model.weight, saved)
    True
    """

    def __init__(self, path: str | os.PathLike[str], module: nn.Module,
                 optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] = (), *,
                 compact_ratio: float = 2.0) -> None:
        if not isinstance(module, nn.Module):
            raise InputTypeError(f"module must be an nn.Module, got {type(module).__name__}.")
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise InputValueError(
                f"checkpoint path {str(self.path)!r}: the directory {str(self.path.parent)!r} "
                "does not exist. Create it first."
            )
        self.module = module
        if isinstance(optimizers, torch.optim.Optimizer):
            optimizers = [optimizers]
        self.optimizers = list(optimizers)
        self.compact_ratio = float(compact_ratio)
        self._names = {id(p): n for n, p in module.named_parameters(remove_duplicate=False)}
        for opt in self.optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) not in self._names:
                        raise InputValueError(
                            f"{type(opt).__name__} holds a parameter of shape {tuple(p.shape)} "
                            "that is not in the module; a checkpoint could not restore it. "
                            "Pass the module that holds every optimized parameter."
                        )
        self.tables = {n: p for n, p in module.named_parameters() if self._by_rows(module, p)}
        self._refuse_updates_beyond_rows()
        # the rows each table's gradients named since the last save, and the rows the chain's
        # segments hold: what a save costs follows the rows training touched, never the
        # table's size
        self._tracker = RowTracker(self.tables,
                                   {n: self._initial_rows(p) for n, p in self.tables.items()})
        self._ever: dict[str, list[torch.Tensor]] = {n: [] for n in self.tables}  # by segment
        # rows of the chain's first segment (distinct)
        self._base_rows: dict[str, int] = dict.fromkeys(self.tables, 0)
        self._segments: list[dict[str, Any]] = []
        self._chained = False  # whether this object's last save or restore began the chain
        #: each table's dtype in the chain (a table converted since, by ``model.double()``,
        #: starts a new chain: a chain's segments hold one dtype per table)
        self._dtypes: dict[str, torch.dtype] = {n: p.dtype for n, p in self.tables.items()}
        manifest = read_manifest(self.path)
        self.generation = 0 if manifest is None else int(manifest["generation"])

    # ------------------------------------------------------------------ which rows changed
    @staticmethod
    def _by_rows(module: nn.Module, p: torch.Tensor) -> bool:
        """Whether ``p`` changes only in the rows its gradients name: a 2-D table of a layer
        with row-sparse gradients, or one a fused optimizer updates in its backward."""
        if p.dim() != 2:
            return False
        return row_sparse(module, p) or bound_to(p) is not None

    def _refuse_updates_beyond_rows(self) -> None:
        """Refuse an optimizer that changes rows of a table the gradients did not name:
        ``torch.optim.SGD`` with momentum moves every row its (sparse) momentum buffer holds at
        each step, and a save of the rows the gradients named would miss the others."""
        from ..optim._base import RowSparseOptimizer

        tables = {id(p): n for n, p in self.tables.items()}
        for opt in self.optimizers:
            if isinstance(opt, RowSparseOptimizer) or not isinstance(opt, torch.optim.SGD):
                continue
            for group in opt.param_groups:
                named = [tables[id(p)] for p in group["params"] if id(p) in tables]
                if named and group.get("momentum", 0) != 0:
                    raise InputValueError(
                        f"torch.optim.SGD with momentum={group['momentum']} trains table "
                        f"{named[0]!r}, which has row-sparse gradients: its momentum buffer "
                        "moves, at every step, rows the step's gradient did not name, and a "
                        "checkpoint saves the rows the gradients named. Use "
                        "lookuplinear.optim.SGD (momentum moves the rows a gradient names), or "
                        "momentum=0."
                    )

    @staticmethod
    def _initial_rows(p: torch.Tensor) -> torch.Tensor:
        """The rows the first save must hold: all of them, or a file table's drawn rows."""
        storage = storage_of(p)
        if storage is not None:
            return storage.drawn_rows().to(p.device)
        return torch.arange(p.shape[0], device=p.device)

    def _held(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """The ``rows`` of table ``name`` that hold values: a table in a file's drawn ones (a
        dense gradient names every row; a row never drawn stays undrawn through a restore,
        and is drawn from ``(seed, row)`` at its next lookup)."""
        storage = storage_of(self.tables[name])
        return rows if storage is None else storage.holding(rows)

    def _union(self, name: str, delta: torch.Tensor) -> torch.Tensor:
        """Every row the chain holds or this save adds, sorted, once each."""
        return torch.unique(torch.cat([*self._ever[name], delta]))

    def close(self) -> None:
        """Stop following the module's tables (the checkpoint files stay)."""
        self._tracker.close()

    # ------------------------------------------------------------------ save
    def save(self, **info: Any) -> int:
        """Write a checkpoint of the module and optimizers now; returns its generation.

        ``info`` (JSON values: the step, the epoch, the position in the data) is stored with it
        and returned by :meth:`restore`. The first save of a ``Checkpoint`` object that has not
        restored holds every row (a new chain); later ones the rows changed since.

        Raises
        ------
        InputValueError
            ``info`` is not JSON-serialisable, or would not come back as given (a tuple, a
            key that is not a string): refused before anything is written.
            Or a ``torch.optim.SGD`` trains a table with row-sparse gradients with momentum
            (set since the checkpoint was made).
        InputTypeError
            An optimizer's hyperparameter is a tensor (``lr=torch.tensor(0.01)``): give a
            number.
        OSError
            Writing failed. Before the commit point (the manifest's rename) the previous
            checkpoint stays the last one; after it (the ``fsync`` of the directory, the
            removal of old segments) this save has committed, and this object goes on from it:
            no later save writes a file a committed manifest names.
        """
        try:
            back = json.loads(json.dumps(info))
        except (TypeError, ValueError) as exc:
            raise InputValueError(f"checkpoint info must be JSON values: {exc}.") from None
        if not _same_json(back, info):
            raise InputValueError(
                f"checkpoint info {info!r} would come back from restore() as {back!r}: JSON "
                "has no tuples and only string keys. Give lists for tuples and string keys "
                "(str(key)), and convert them back after restore(). Nothing was written."
            )
        self._refuse_updates_beyond_rows()  # a group's momentum may have been set since
        self.path.mkdir(exist_ok=True)
        self._flush_reset_rows()
        delta = {n: self._held(n, self._tracker.touched(n)) for n in self.tables}
        chain_bytes = sum(s["bytes"] for s in self._segments)
        # every row ever saved, once, is at least the base's rows and this delta: only when
        # the chain outgrows that bound is the union computed (what a save costs stays the
        # rows it saves, amortised)
        bound = sum(max(self._base_rows[n], len(delta[n])) * self._row_bytes(n)
                    for n in self.tables)
        compact = not self._chained or any(
            p.dtype != self._dtypes[n] for n, p in self.tables.items())
        if not compact and chain_bytes > self.compact_ratio * max(bound, 1):
            union_bytes = sum(len(self._union(n, delta[n])) * self._row_bytes(n)
                              for n in self.tables)
            compact = chain_bytes > self.compact_ratio * max(union_bytes, 1)
        rows = {n: self._union(n, delta[n]) for n in self.tables} if compact else delta
        g = self.generation + 1
        data = self._segment_bytes(g, rows, info,
                                  None if compact else self._segments[-1]["generation"])

        def committed(segments: list[dict[str, Any]]) -> None:
            # from the commit point on, this object follows the disk: a save that raises after
            # it (the fsync of the directory, the removal of old segments) has committed, and
            # the next save writes generation g + 1, never a file this manifest names
            self._segments, self.generation, self._chained = segments, g, True
            self._dtypes = {n: p.dtype for n, p in self.tables.items()}
            for n in self.tables:
                if compact:
                    self._ever[n], self._base_rows[n] = [rows[n]], len(rows[n])
                else:
                    self._ever[n].append(rows[n])
                self._tracker.clear(n)

        commit_segment(self.path, g, data, [] if compact else self._segments, committed)
        remove_unlisted(self.path, self._segments)
        return g

    def _row_bytes(self, name: str) -> int:
        p = self.tables[name]
        per = p.shape[1] * p.element_size()
        return per * (1 + sum(1 for _ in self._row_state(p)))

    def _row_state(self, p: torch.Tensor) -> Iterable[tuple[int, str, torch.Tensor]]:
        """``(optimizer index, key, tensor)`` of each row-wise state tensor of table ``p``."""
        from ..optim._base import RowSparseOptimizer

        for i, opt in enumerate(self.optimizers):
            if isinstance(opt, RowSparseOptimizer):
                for key in opt._row_state(p):
                    yield i, key, opt.state[p][key]

    def _flush_reset_rows(self) -> None:
        """Rows an ``IdMap`` gave to new IDs: their fresh optimizer state, which the next update
        would start, is started now, so that the checkpoint holds it."""
        for name, p in self.tables.items():
            rows = RESETS.pending(p)
            if rows is None:
                continue
            self._tracker.add(name, rows.to(p.device, torch.long))
            for opt in self.optimizers:
                group = next((g for g in opt.param_groups if any(q is p for q in g["params"])),
                             None)
                if group is not None and opt.state.get(p) and hasattr(opt, "_state"):
                    opt._state(p, group)  # zeroes those rows' state, drops the marker

    def _segment_bytes(self, g: int, rows: dict[str, torch.Tensor], info: dict[str, Any],
                       previous: int | None) -> bytes:
        """Segment ``g``: ``rows`` of each table, the rest whole; ``previous``: the generation
        of the segment it follows in the chain (None: a base, which holds every row)."""
        from safetensors.torch import save

        from ..optim._base import RowSparseOptimizer

        tensors: dict[str, torch.Tensor] = {}
        for name, p in self.tables.items():
            r = rows[name]
            tensors[f"rows/{name}"] = r.cpu()
            tensors[f"table/{name}"] = p.detach()[r].cpu()
        for name, t in self._whole_tensors():
            tensors[f"whole/{name}"] = t.detach().cpu().contiguous()
            storage = storage_of(t)
            if storage is not None:  # a table in a file saved whole: which rows hold values
                tensors[f"drawn/{name}"] = storage.drawn.clone()
        optimizers = []
        for i, opt in enumerate(self.optimizers):
            scalars: dict[str, dict[str, Any]] = {}
            layouts: dict[str, dict[str, Any]] = {}
            for q, state in opt.state.items():
                if not isinstance(q, torch.Tensor):
                    continue  # an index no group lists (torch.optim keeps one it loaded)
                pname = self._names[id(q)]
                by_rows: list[str] = []
                if isinstance(opt, RowSparseOptimizer):
                    # a state made before its parameter was converted (model.double()) in
                    # the dtype the next update would convert it to, as a restore reads it
                    opt._state_in_dtype(q, state)
                    layouts[pname] = opt._layout(q)
                    if pname in self.tables:
                        by_rows = opt._row_state(q)
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        if key in by_rows:
                            value = value[rows[pname]]
                        tensors[f"opt{i}/{pname}/{key}"] = value.detach().cpu().contiguous()
                    else:
                        scalars.setdefault(pname, {})[key] = _json_value(value, key)
                scalars.setdefault(pname, {})
            groups = [{k: _json_value(v, k) for k, v in group.items() if k != "params"}
                      for group in opt.param_groups]
            # which parameters each group holds: a restore sets the groups' options by
            # position, so another split of the parameters would take other options
            members = [[self._names[id(q)] for q in group["params"]]
                       for group in opt.param_groups]
            saved = {"type": type(opt).__name__, "state": scalars, "groups": groups,
                     "layout": layouts, "members": members}
            if isinstance(opt, RowSparseOptimizer):  # what a state not saved starts from
                saved["starts"] = opt._starts()
            optimizers.append(saved)
        tensors["rng/torch"] = torch.get_rng_state()
        # what the rows a table in a file never drew will be drawn from: a restore draws
        # them again, so only a table drawing them the same way continues the saved run
        draws = {n: {"seed": s.meta["seed"], "init": s.meta["init"]}
                 for n, p in self.tables.items() if (s := storage_of(p)) is not None}
        meta = {"generation": g, "previous": previous, "info": info, "optimizers": optimizers,
                "tables": sorted(self.tables), "draws": draws,
                "shapes": {n: list(p.shape) for n, p in self.tables.items()},
                "layouts": table_layouts(self.module)}
        return save(tensors, metadata={"checkpoint": json.dumps(meta)})

    def _whole_tensors(self) -> Iterable[tuple[str, torch.Tensor]]:
        """The module's state but its tables, saved whole: its parameters and buffers, then
        what a module writes into its ``state_dict`` itself (as an ``IdMap``'s strings).

        Not through ``module.state_dict()``: that exports the tables too, and a table in a file
        draws every row it has not drawn yet before it is exported; nor through the
        ``_save_to_state_dict`` of a module holding a table in a file, for that reason (its
        entries are its parameters, saved above): a save draws nothing."""
        for name, p in self.module.named_parameters():
            if name not in self.tables:
                yield name, p
        yield from self.module.named_buffers()
        registered = registered_names(self.module)
        tables = {id(p) for p in self.tables.values()}
        for prefix, m in self.module.named_modules():
            if type(m)._save_to_state_dict is nn.Module._save_to_state_dict or any(
                    id(p) in tables or storage_of(p) is not None
                    for p in m._parameters.values() if p is not None):
                continue
            own: dict[str, Any] = {}
            m._save_to_state_dict(own, f"{prefix}." if prefix else "", True)
            for name, t in own.items():
                if name not in registered and isinstance(t, torch.Tensor):
                    yield name, t

    # ------------------------------------------------------------------ restore
    def exists(self) -> bool:
        """Whether a save has completed at ``path``: what :meth:`restore` would load.

        Examples
        --------
        >>> import tempfile
        >>> from lookuplinear import LookupLinear
        >>> ckpt = Checkpoint(tempfile.mkdtemp() + "/ckpt", LookupLinear(10, 2))
        >>> ckpt.exists()
        False
        >>> ckpt.save()
        1
        >>> ckpt.exists()
        True
        """
        return read_manifest(self.path) is not None

    def restore(self) -> dict[str, Any]:
        """Load the last completed checkpoint into the module and optimizers; returns the
        ``info`` given to its :meth:`save`.

        Tables, optimizer state, other parameters, buffers, hyperparameters and PyTorch's CPU
        random generator state are set to what they were at that save, bit for bit, and each
        ``lookuplinear.optim`` state tensor is laid out in memory as it was (Adam's moments
        paired for a table, apart for a dense layer): the update that follows takes the path
        the saved run's took, so training on is the run that was not interrupted, bit for bit.
        An optimizer keeps its own ``fused=`` binding.

        All or nothing: everything the restore will write is checked first (every segment's
        size and SHA-256; every table's full shape and dtype; which table sits at which rows
        of each ``LookupCollection`` group; every other parameter and buffer; the optimizers'
        number, classes, parameter groups (the parameters each holds) and each state
        tensor's shape; the ``IdMap`` strings; the random generator state), and the
        optimizers' new
        state is built beside the old one; only then is anything written, and what is left
        are copies into tensors of checked shapes. A refused restore, or one that fails before
        those copies (no memory for the new drawn flags, a new optimizer-state file that
        cannot be written or put in place), leaves the module, the optimizers and every file
        as they were, bit for bit. A restore never resizes a table (see "Resizing a table" in
        docs/storage.md).

        Raises
        ------
        CheckpointNotFoundError
            No save has completed at ``path`` (a ``FileNotFoundError`` too; :meth:`exists`
            tells beforehand). Nothing is changed.
        ModelFileError
            A segment is missing, torn or damaged, or the checkpoint does not fit this model
            and these optimizers (a table of another shape or dtype, a collection whose group
            holds other tables at its rows, another optimizer class, another number of
            optimizers or groups...): the message names what the checkpoint
            holds and what this model has. Nothing is changed.
        InputValueError
            A parameter or buffer of the module is on the ``meta`` device (it holds no values
            to restore into): allocate it with ``module.to_empty(device=...)`` first. Nothing
            is changed.
        OSError
            A table in a file's new optimizer-state file could not be written or put in place
            (a full disk). Nothing is changed: free space and restore again.
        """
        manifest = read_manifest(self.path)
        if manifest is None:
            raise CheckpointNotFoundError(
                f"no completed checkpoint at {str(self.path)!r}: no save has finished there "
                "yet, so there is nothing to restore. Check Checkpoint.exists() first and start "
                "from the initial model when it is False."
            )
        segments = load_segments(self.path, manifest, former_names(self.module))
        last_meta, last = segments[-1]
        # a table this object follows by rows that the checkpoint holds whole (saved before
        # its rows were followed): restored whole, and the next save begins a new chain
        held = set(last_meta["tables"])
        by_whole = {n: p for n, p in self.tables.items()
                    if n not in held and f"whole/{n}" in last}
        tables = {n: p for n, p in self.tables.items() if n not in by_whole}
        # every check and the optimizers' new state before the first write
        whole = {**dict(self._whole_tensors()), **by_whole}
        plan = Restore(self.path, self.module, self.optimizers, self._names, tables, whole)
        plan.check(segments)
        registered = registered_names(self.module)
        params = [*tables.values(), *whole.values()]
        files = [s for p in params if (s := storage_of(p))]
        # the tables' state files staged beside the ones in use, put in their place once all
        # are written (or put back as they were); whatever fails up to then, the optimizers
        # and modules get back what stage changed
        try:
            with staged_states(params):
                staged = plan.stage(segments)
                flags = [s.fresh_flags() for s in files]  # allocated before any file is emptied
        except BaseException:
            plan.unstage()
            raise
        # then copies into tensors of checked shapes
        with torch.no_grad():
            for p in self.tables.values():
                RESETS.take(p)  # rows renewed since the save: the save holds their state
            for storage, fresh in zip(files, flags, strict=True):
                storage.clear(flags=fresh)  # the optimizers' state is staged
            for opt, restored in zip(self.optimizers, staged, strict=True):
                if restored is not None:
                    opt.state.clear()
                    opt.state.update(restored)
            for _, tensors in segments:
                self._apply_rows(tables, tensors)
            for name, t in whole.items():
                if name in registered:
                    t.copy_(last[f"whole/{name}"].to(t.device))
                    self._mark_whole(name, t, last)
            for i, opt in enumerate(self.optimizers):
                _set_groups(opt, last_meta["optimizers"][i]["groups"])
        torch.set_rng_state(last["rng/torch"])
        for n, p in self.tables.items():
            self._tracker.clear(n)
            if n in by_whole:  # the next save, a new base, holds its rows
                self._ever[n], self._base_rows[n] = [], 0
                self._tracker.add(n, self._initial_rows(p))
                continue
            self._ever[n] = [tensors[f"rows/{n}"].to(p.device) for _, tensors in segments]
            self._base_rows[n] = len(self._ever[n][0])
        self._segments = list(manifest["segments"])
        self.generation = int(manifest["generation"])
        self._chained = not by_whole
        self._dtypes = {n: p.dtype for n, p in self.tables.items()}
        info: dict[str, Any] = last_meta["info"]
        return info

    @staticmethod
    def _apply_rows(tables: Mapping[str, torch.Tensor],
                    tensors: dict[str, torch.Tensor]) -> None:
        for name, p in tables.items():
            rows = tensors[f"rows/{name}"].to(p.device)
            p[rows] = tensors[f"table/{name}"].to(p.device)
            storage = storage_of(p)
            if storage is not None:
                storage.mark_written(rows)

    @staticmethod
    def _mark_whole(name: str, t: torch.Tensor, last: dict[str, torch.Tensor]) -> None:
        """A table in a file restored whole: the rows that held values at the save are marked
        (a segment without flags: a row is kept by its values, as a direct write is)."""
        storage = storage_of(t)
        flags = last.get(f"drawn/{name}")
        if storage is not None and flags is not None:
            storage.mark_written(flags.nonzero().squeeze(1))


def _set_groups(opt: torch.optim.Optimizer, groups: list[dict[str, Any]]) -> None:
    from ..optim._base import RowSparseOptimizer

    if len(groups) != len(opt.param_groups):
        raise ModelFileError(
            f"the checkpoint's {type(opt).__name__} has {len(groups)} parameter groups, this one "
            f"{len(opt.param_groups)}: it is another optimizer's checkpoint."
        )
    for group, saved in zip(opt.param_groups, groups, strict=True):
        if isinstance(opt, RowSparseOptimizer):  # keeps its binding; earlier versions' keys
            saved = opt._loadable_group(saved, group)
        for key, value in saved.items():
            group[key] = tuple(value) if isinstance(group.get(key), tuple) else value
