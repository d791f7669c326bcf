"""The first half of :meth:`~lookuplinear.Checkpoint.restore`: everything before it writes.

A restore is all or nothing. :class:`Restore` checks the loaded segments against the model and
its optimizers (every table's full shape and dtype and each segment's rows, which table sits at
which rows of a ``LookupCollection``'s group, the other parameters and buffers, the entries
modules write themselves such as an ``IdMap``'s strings, the optimizers' number, classes, groups
and state tensors, the random generator state), then stages the optimizers' restored state
beside the state they hold. A checkpoint that does not fit is a ``ModelFileError`` and changes
nothing. What :meth:`~lookuplinear.Checkpoint.restore` does then are copies into tensors of
checked shapes.

:mod:`lookuplinear.storage.checkpoint` holds the saving, what a segment holds and those copies;
:mod:`lookuplinear.storage.segments` the files and the manifest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._loading import check_state_dict
from ..errors import InputValueError, LookupLinearError, ModelFileError, StateDictError
from ..ops._hooks import state_tensor
from .tables import storage_of

__all__ = ["Restore", "registered_names", "row_sparse", "table_layouts"]

Segments = list[tuple[dict[str, Any], dict[str, torch.Tensor]]]
"""The loaded chain, first to last: each segment's metadata and tensors."""

Staged = list[dict[torch.Tensor, dict[str, Any]] | None]
"""Each optimizer's restored state by parameter (None: a ``torch.optim`` optimizer, loaded)."""


def _zeros(p: torch.Tensor, key: str, shape: tuple[int, ...], dtype: torch.dtype
           ) -> torch.Tensor:
    """A zero state tensor ``key`` of ``shape`` in ``dtype`` for ``p``, placed as the optimizer
    places its state (a table in a file: a file beside it)."""
    from ..optim._base import zeros_like

    if shape == tuple(p.shape) and dtype == p.dtype:
        return zeros_like(p, name=key)
    provided = state_tensor(p, key, shape, dtype=dtype)
    return provided if provided is not None else torch.zeros(shape, dtype=dtype,
                                                             device=p.device)


def registered_names(module: nn.Module) -> set[str]:
    """The names of the module's parameters and buffers (their shapes are the model's)."""
    return {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}


def table_layouts(module: nn.Module) -> dict[str, list[list[Any]]]:
    """Which table sits at which rows of each ``LookupCollection`` group parameter, by the
    parameter's name in ``module``: ``[table, first row, rows, columns, dtype]`` per table,
    by first row (a group's shape alone does not tell its tables apart)."""
    from ..modules.collection import LookupCollection

    layouts: dict[str, list[list[Any]]] = {}
    for prefix, m in module.named_modules():
        if not isinstance(m, LookupCollection):
            continue
        for g, param in enumerate(m.table_groups):
            places = sorted((place.offset, name, place.config.stored_rows)
                            for name, place in m._places.items() if place.group == g)
            layouts[f"{prefix}.table_groups.{g}" if prefix else f"table_groups.{g}"] = [
                [name, offset, rows, param.shape[1], str(param.dtype)[6:]]
                for offset, name, rows in places]
    return layouts


def _layout_text(layout: list[list[Any]] | None) -> str:
    """A group's tables as a refusal names them: ``a (rows 0-9), b (rows 10-29), 4 columns
    (float32)``."""
    if not layout:
        return "no collection's tables"
    tables = ", ".join(f"{name!r} (rows {first}-{first + rows - 1})"
                       for name, first, rows, _, _ in layout)
    return f"{tables}, {layout[0][3]} columns ({layout[0][4]})"


def row_sparse(module: nn.Module, p: torch.Tensor) -> bool:
    """Whether ``p`` belongs to a layer with row-sparse gradients (``sparse=True``): a
    ``LookupLinear``'s table, or a ``LookupCollection``'s group (held by its ``ParameterList``)
    whose tables all get row-sparse gradients."""
    from ..modules.collection import LookupCollection

    for m in module.modules():  # a collection comes before the ParameterList it holds
        if isinstance(m, LookupCollection):
            sparse = m._group_sparse(p)
            if sparse is not None:
                return sparse
        if any(q is p for q in m._parameters.values()):
            return bool(getattr(m, "sparse", False))
    return False


class Restore:
    """The checks and the staged optimizer state of one restore into ``module``.

    Parameters
    ----------
    path : Path
        The checkpoint directory (named by the refusals).
    module : nn.Module
        The model the checkpoint is restored into.
    optimizers : sequence of optimizers
        Its optimizers, in the order the checkpoint was saved with.
    names : dict of int to str
        Each optimized parameter's name in ``module``, by ``id``.
    tables : dict of str to Tensor
        The tables saved by rows, by name.
    whole : dict of str to Tensor
        Everything else the checkpoint saves whole, by name: the other parameters, the buffers,
        then the entries modules write into their ``state_dict`` themselves.
    """

    def __init__(self, path: Path, module: nn.Module,
                 optimizers: Sequence[torch.optim.Optimizer], names: Mapping[int, str],
                 tables: Mapping[str, torch.Tensor], whole: Mapping[str, torch.Tensor]) -> None:
        self.path = path
        self.module = module
        self.optimizers = optimizers
        self.names = names
        self.tables = tables
        self.whole = whole
        #: what :meth:`stage` changes, for :meth:`unstage`: each optimizer's state, groups and
        #: their values; each module's attributes (where modules load entries themselves)
        self._held: list[tuple[torch.optim.Optimizer, Any, list[dict[str, Any]],
                               list[dict[str, Any]]]] = []
        self._attributes: list[tuple[nn.Module, dict[str, Any]]] = []

    def refusal(self, what: str) -> ModelFileError:
        """The error refusing this checkpoint: ``what`` it holds that does not fit."""
        return ModelFileError(f"the checkpoint at {self.path} {what}. Nothing was loaded.")

    # ------------------------------------------------------------------ checks
    def check(self, segments: Segments) -> None:
        """Everything :meth:`~lookuplinear.Checkpoint.restore` will write, checked against the
        model and optimizers before anything is written."""
        last_meta, last = segments[-1]
        self._check_allocated()
        if last_meta["tables"] != sorted(self.tables):
            self._check_gradients(last_meta["tables"])
            raise self.refusal(
                f"holds the tables {last_meta['tables']}, this model has {sorted(self.tables)}: "
                "it is another model's checkpoint. Restore it into the model it was saved from"
            )
        for name, p in self.tables.items():
            self._check_table(name, p, segments)
        self._check_whole(last)
        self._check_layouts(last_meta.get("layouts"))
        for i, opt in enumerate(self.optimizers):
            if i < len(last_meta["optimizers"]):
                self._check_optimizer(i, opt, segments)
        saved, have = len(last_meta["optimizers"]), len(self.optimizers)
        if saved != have:
            raise self.refusal(
                f"holds the state of {saved} optimizer{'s' * (saved != 1)}, and "
                f"{have} {'was' if have == 1 else 'were'} given: build the Checkpoint with the "
                "optimizers it was saved with, in the same order"
            )
        rng = last.get("rng/torch")
        if rng is None or rng.dtype != torch.uint8 or rng.shape != torch.get_rng_state().shape:
            raise self.refusal("holds no random generator state PyTorch can take")

    def _check_allocated(self) -> None:
        """Refuse a model on the ``meta`` device: a copy into a meta tensor copies nothing
        (``load_state_dict`` warns, and loads nothing)."""
        for name, t in [*self.module.named_parameters(), *self.module.named_buffers()]:
            if t.is_meta:
                raise InputValueError(
                    f"Checkpoint.restore: this model's {name} is on the meta device, which "
                    f"holds no values: the checkpoint at {self.path} would be copied into "
                    "nothing. Allocate the model first, model.to_empty(device='cpu') (or the "
                    "device it trains on), then restore. Nothing was loaded."
                )

    def _check_gradients(self, saved: list[str]) -> None:
        """Refuse, naming the fix, a checkpoint that holds by rows a table this model has with
        dense gradients (``sparse=False``), which a checkpoint saves whole."""
        params = dict(self.module.named_parameters())
        dense = [n for n in saved if n not in self.tables and n in params]
        if dense:
            raise self.refusal(
                f"holds {dense[0]!r} as a table with row-sparse gradients (sparse=True), saved "
                f"by rows; this model's {dense[0]!r} gets dense gradients (sparse=False), "
                "which a checkpoint saves whole. Build the layer with sparse=True, as it was "
                "saved (a LookupCollection: sparse=True), to restore it"
            )

    def _check_table(self, name: str, p: torch.Tensor, segments: Segments) -> None:
        """The table's full shape (recorded since checkpoints record it; earlier ones: every
        saved row exists in the model's table), dtype, and each segment's rows."""
        shape, dtype = tuple(p.shape), p.dtype
        recorded = segments[-1][0].get("shapes", {}).get(name)
        saved_dtype = segments[-1][1][f"table/{name}"].dtype
        if (recorded is not None and tuple(recorded) != shape) or saved_dtype != dtype:
            saved_shape = tuple(recorded) if recorded is not None else f"(?, {p.shape[1]})"
            raise self.refusal(
                f"holds table {name!r} of shape {saved_shape} ({str(saved_dtype)[6:]}); this "
                f"model's is {shape} ({str(dtype)[6:]}): it is another model's checkpoint. A "
                "restore sets every value of a table as saved and never resizes or converts "
                "one: build the model with the "
                "checkpoint's shapes and dtypes to restore it (to start a larger table from "
                "its rows, see 'Resizing a table' in docs/storage.md)"
            )
        storage = storage_of(p)
        if storage is not None and not storage.writable:
            raise self.refusal(
                f"would write table {name!r}, whose file {storage.path} is open read-only, "
                "for serving: open it with LookupLinear.open(path, writable=True)"
            )
        draws = segments[-1][0].get("draws", {}).get(name)
        if storage is None and draws is not None:
            raise self.refusal(
                f"holds table {name!r} of a table in a file: it saved only the rows that held "
                f"values, and the others are drawn with seed={draws['seed']}, "
                f"init={draws['init']!r} at their first lookup. This model's table is in "
                "memory, where those rows would keep its own values, so training on would not "
                "be the saved run. Build the table in a file drawing them the same way: "
                f"LookupLinear(..., storage=path, seed={draws['seed']}, "
                f"init={draws['init']!r}) (a LookupCollection: TableConfig(..., storage=path) "
                "opening the saved run's table, or created under the torch.manual_seed the "
                "saved run's was)"
            )
        if storage is not None and draws is not None:
            mine = {"seed": storage.meta["seed"], "init": storage.meta["init"]}
            if mine != draws:
                raise self.refusal(
                    f"holds table {name!r} of a table in a file whose rows not saved are drawn "
                    f"with seed={draws['seed']}, init={draws['init']!r}; this model's table "
                    f"({storage.path}) draws them with seed={mine['seed']}, "
                    f"init={mine['init']!r}, so training on would not be the saved run. "
                    f"Build the table with seed={draws['seed']} and init={draws['init']!r} "
                    "(LookupLinear(..., storage=path, seed=..., init=...); a new table in a "
                    "file of a LookupCollection draws its seed from torch's generator)"
                )
        for _, tensors in segments:
            rows, values = tensors[f"rows/{name}"], tensors[f"table/{name}"]
            if rows.dim() != 1 or rows.dtype != torch.int64 or \
                    tuple(values.shape) != (rows.numel(), *shape[1:]) or values.dtype != dtype:
                raise self.refusal(
                    f"holds rows of table {name!r} of shape {tuple(values.shape)} "
                    f"({str(values.dtype)[6:]}) for {rows.numel()} rows; this model's table is "
                    f"{shape} ({str(dtype)[6:]}): it is another model's checkpoint"
                )
            if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= shape[0]):
                raise self.refusal(
                    f"holds row {int(rows.max())} of table {name!r}, and this model's table "
                    f"has {shape[0]} rows (shape {shape}): it is a larger table's checkpoint. "
                    "Build the model with the checkpoint's table sizes to restore it (see "
                    "'Resizing a table' in docs/storage.md)"
                )

    def _check_layouts(self, saved: dict[str, list[list[Any]]] | None) -> None:
        """Each ``LookupCollection`` group holds the tables it held at the save, at the same
        rows (its shape, checked with the other tables', does not tell: ``a`` of 10 rows then
        ``b`` of 20 has the shape of ``b`` then ``a``, or of one table of 30). A checkpoint
        that recorded no layouts is checked by shapes only."""
        if saved is None:
            return
        mine = table_layouts(self.module)
        for name in sorted(saved.keys() | mine.keys()):
            if saved.get(name) != mine.get(name):
                raise self.refusal(
                    f"holds {name} as the tables {_layout_text(saved.get(name))}; this "
                    f"model's {name} holds {_layout_text(mine.get(name))}: a restore would "
                    "put one table's rows in another. Build the LookupCollection with the "
                    "checkpoint's tables, in its order, to restore it (then copy tables by "
                    "name into another collection with load_state_dict)"
                )

    def _check_whole(self, last: dict[str, torch.Tensor]) -> None:
        """The other parameters and buffers (shape and dtype), and the entries modules write
        themselves (an ``IdMap``'s strings): the same names as the model's, each loadable."""
        registered = registered_names(self.module)
        mine = self.whole
        saved = {k[len("whole/"):] for k in last if k.startswith("whole/")}
        if saved != set(mine):
            raise self.refusal(
                f"holds {sorted(saved - set(mine)) or 'no other entries'} that this model has "
                f"not, and has not {sorted(set(mine) - saved) or 'the others'}: it is another "
                "model's checkpoint (an IdMap of another key_type, for one, has other "
                "key_ entries). Restore it into the model it was saved from"
            )
        own = {}
        for name, t in mine.items():
            value = last[f"whole/{name}"]
            if name not in registered:
                own[name] = value
            elif value.shape != t.shape or value.dtype != t.dtype:
                raise self.refusal(
                    f"holds {name} of shape {tuple(value.shape)} ({str(value.dtype)[6:]}); "
                    f"this model's is {tuple(t.shape)} ({str(t.dtype)[6:]}): it is another "
                    "model's checkpoint. Restore it into the model it was saved from"
                )
            flags = last.get(f"drawn/{name}")
            if flags is not None and (storage_of(t) is None or flags.dtype != torch.uint8
                                      or tuple(flags.shape) != tuple(t.shape[:1])):
                raise self.refusal(
                    f"holds the drawn rows of {name} as a table in a file of "
                    f"{flags.shape[0] if flags.dim() == 1 else '?'} rows; this model's "
                    f"{name} is {'not in a file' if storage_of(t) is None else tuple(t.shape)}"
                    ": it is another model's checkpoint. Restore it into the model it was "
                    "saved from"
                )
        try:
            check_state_dict(self.module, own, strict=False)
        except StateDictError as e:
            raise self.refusal(f"does not load into this model: {e}") from None

    def _check_optimizer(self, i: int, opt: torch.optim.Optimizer, segments: Segments) -> None:
        """The class, the groups (their number and options), and the parameters whose state
        is saved (this optimizer's; for ``lookuplinear.optim``, each state tensor's shape)."""
        from ..optim._base import RowSparseOptimizer

        meta = segments[-1][0]["optimizers"][i]
        cls = type(opt).__name__
        if meta["type"] != cls:
            raise self.refusal(
                f"holds optimizer {i} as {meta['type']}, and it is given as {cls}: its state "
                f"would not be {cls}'s. Build optimizer {i} as {meta['type']} to restore it "
                f"(to train on with {cls}, restore with {meta['type']}, then start a new {cls})"
            )
        if len(meta["groups"]) != len(opt.param_groups):
            raise self.refusal(
                f"holds {len(meta['groups'])} parameter groups of {cls} {i}, and it has "
                f"{len(opt.param_groups)}: build it with the groups it was saved with"
            )
        for g, (saved_names, group) in enumerate(zip(meta.get("members", []), opt.param_groups,
                                                     strict=False)):
            mine = [self.names[id(p)] for p in group["params"]]
            if sorted(saved_names) != sorted(mine):
                raise self.refusal(
                    f"holds {cls} {i}'s parameter group {g} as {saved_names}, and this {cls}'s "
                    f"group {g} holds {mine}: its options (lr, ...) would go to other "
                    "parameters (torch.optim's load_state_dict refuses groups of other sizes). "
                    "Build the optimizer with the groups it was saved with"
                )
        if isinstance(opt, RowSparseOptimizer):
            try:
                for saved, group in zip(meta["groups"], opt.param_groups, strict=True):
                    opt._loadable_group(saved, group)
            except InputValueError as e:
                raise self.refusal(f"does not load into {cls} {i}: {e}") from None
            self._check_starts(i, opt, meta.get("starts"))
        params = {self.names[id(p)]: p for g in opt.param_groups for p in g["params"]}
        for pname in meta["state"]:
            if pname not in params:
                raise self.refusal(
                    f"holds {cls} {i}'s state of {pname}, which this {cls} does not optimize "
                    f"(it has {sorted(params)}): build it over the parameters it was saved with"
                )
        if not isinstance(opt, RowSparseOptimizer):
            return
        for _, tensors in segments:
            for key, value in tensors.items():
                if not key.startswith(f"opt{i}/"):
                    continue
                pname, _, state_key = key[len(f"opt{i}/"):].rpartition("/")
                p = params.get(pname)
                shape = None if p is None else opt._state_shapes(p).get(state_key)
                if shape is not None and pname in self.tables:
                    rows = tensors[f"rows/{pname}"].numel()
                    shape = (rows, *shape[1:])
                # the class's dtype, or the parameter's (a row-wise Adagrad sum of a float16
                # table saved before it was kept in float32: cast up when restored)
                dtype = None if p is None else opt._state_dtype(p, state_key)
                if p is None or shape is None or tuple(value.shape) != shape or \
                        value.dtype not in (dtype, p.dtype):
                    expected = "none" if p is None or shape is None else \
                        f"{shape} ({str(dtype)[6:]})"
                    raise self.refusal(
                        f"holds {cls} {i}'s state {state_key!r} of {pname} of shape "
                        f"{tuple(value.shape)} ({str(value.dtype)[6:]}), where this {cls} "
                        f"keeps {expected}: it is another optimizer's checkpoint"
                    )

    def _check_starts(self, i: int, opt: Any, saved: dict[str, Any] | None) -> None:
        """The options a new state starts from that no group holds (Adagrad's constructor
        ``initial_accumulator_value``) are the saved optimizer's: the rows the checkpoint does
        not hold (a table in a file's rows never drawn) and those an ``IdMap`` gives new IDs
        start from them. A checkpoint that recorded none is not checked."""
        mine = opt._starts()
        if saved is None or saved == mine:
            return
        cls = type(opt).__name__

        def text(starts: dict[str, Any]) -> str:
            return ", ".join(f"{k}={v!r}" for k, v in sorted(starts.items())) or "no such options"

        raise self.refusal(
            f"holds {cls} {i} built with {text(saved)}, and this {cls} is built with "
            f"{text(mine)}: the state of the rows the checkpoint does not hold (a table in a "
            "file's rows never drawn, rows an IdMap gives new IDs) would start at another "
            f"value than in the saved run. Build {cls} {i} with {text(saved)} to restore it"
        )

    # ------------------------------------------------------------------ staging
    def stage(self, segments: Segments) -> Staged:
        """The optimizers' restored state, built beside the one they hold, and the checked
        entries that modules read themselves loaded (an ``IdMap``'s strings, through its
        load); should either fail, every optimizer and module gets back what it held, as
        :meth:`unstage` gives it back after a later failure of the restore.

        The returned state is each ``lookuplinear.optim`` optimizer's (None for the others,
        whose state their ``load_state_dict`` sets here, replacing their state and groups by
        new objects: :meth:`unstage` puts the old ones back).
        """
        last = segments[-1][1]
        registered = registered_names(self.module)
        own = {name: last[f"whole/{name}"] for name in self.whole if name not in registered}
        self._held = [(opt, opt.state, opt.param_groups, [dict(g) for g in opt.param_groups])
                      for opt in self.optimizers]
        # a module's load of its own entries sets its attributes (an IdMap's strings)
        self._attributes = [(m, dict(m.__dict__)) for m in self.module.modules()] if own else []
        try:
            staged = self._stage_optimizers(segments)
            if own:
                self.module.load_state_dict(own, strict=False)
        except BaseException as e:
            self.unstage()
            if isinstance(e, LookupLinearError | RuntimeError):
                raise self.refusal(f"does not load: {e}") from e
            raise
        return staged

    def unstage(self) -> None:
        """Give back what :meth:`stage` changed: each optimizer's state and groups as they
        were, and the attributes of the modules (an ``IdMap``'s strings)."""
        for opt, state, groups, values in self._held:
            opt.__dict__.update(state=state, param_groups=groups)
            for group, value in zip(groups, values, strict=True):
                group.clear()
                group.update(value)
        for m, attributes in self._attributes:
            m.__dict__.clear()
            m.__dict__.update(attributes)

    def _stage_optimizers(self, segments: Segments) -> Staged:
        """The restored state of each ``lookuplinear.optim`` optimizer, built beside the one it
        holds (None for the others, whose state their ``load_state_dict`` sets here, replacing
        their state and groups by new objects: :meth:`stage` keeps the old ones)."""
        from ..optim._base import RowSparseOptimizer

        staged: Staged = [None] * len(self.optimizers)
        # torch.optim's first, in memory: what may still fail fails before a lookuplinear
        # optimizer allocates the state of a table in a file (a new file beside the table)
        for i, opt in enumerate(self.optimizers):
            if not isinstance(opt, RowSparseOptimizer):
                self._restore_whole(i, opt, segments[-1])
        for i, opt in enumerate(self.optimizers):
            if isinstance(opt, RowSparseOptimizer):
                staged[i] = self._staged_rowwise(i, opt, segments)
        return staged

    def _staged_rowwise(self, i: int, opt: Any, segments: Segments
                        ) -> dict[torch.Tensor, dict[str, Any]]:
        """Fresh state (as the optimizer starts it with the saved options, then laid out as it
        was saved) for each parameter the checkpoint has state of; a table's rows come from
        the segments, the rest from the last one."""
        meta = segments[-1][0]["optimizers"][i]
        last = segments[-1][1]
        layouts = meta.get("layout")
        staged: dict[torch.Tensor, dict[str, Any]] = {}
        for group, saved in zip(opt.param_groups, meta["groups"], strict=True):
            options = {**group, **opt._loadable_group(saved, group)}
            for p in group["params"]:
                pname = self.names[id(p)]
                if pname not in meta["state"]:
                    continue
                prefix = f"opt{i}/{pname}/"
                if pname in self.tables:  # rows from every segment (a row's state or none)
                    saved = {k[len(prefix):] for _, seg in segments for k in seg
                             if k.startswith(prefix)}
                else:  # whole, in the last segment
                    saved = {k[len(prefix):] for k in last if k.startswith(prefix)}
                state: dict[str, Any] = {}
                opt._init_state(p, state, options)
                state.update(meta["state"][pname])
                # the state tensors the saved run held, which its options need not start (SGD's
                # buffer, kept after momentum was set to 0, as torch.optim.SGD keeps it); each
                # is one this class keeps (checked), zero where no segment holds its rows
                shapes = opt._state_shapes(p)
                for key in sorted(saved):
                    if not isinstance(state.get(key), torch.Tensor):
                        state[key] = _zeros(p, key, shapes[key], opt._state_dtype(p, key))
                if pname not in self.tables:  # whole: exactly the saved tensors
                    for key in [k for k, v in state.items()
                                if isinstance(v, torch.Tensor) and k not in saved]:
                        del state[key]
                if layouts is not None:
                    opt._lay_out(p, state, layouts.get(pname))
                elif not row_sparse(self.module, p):  # saved by an earlier version: as
                    opt._lay_out(p, state, None)         # torch.optim's (dense gradients)
                if pname in self.tables:
                    for _, seg in segments:
                        rows = seg[f"rows/{pname}"].to(p.device)
                        for key in saved:
                            values = seg.get(prefix + key)
                            if values is not None:
                                state[key][rows] = values.to(p.device, state[key].dtype)
                else:
                    for key in saved:
                        state[key].copy_(last[prefix + key].to(p.device))
                staged[p] = state
        return staged

    def _restore_whole(self, i: int, opt: torch.optim.Optimizer, last_segment: tuple[
            dict[str, Any], dict[str, torch.Tensor]]) -> None:
        """``torch.optim`` optimizer ``i``'s state, through its ``load_state_dict``."""
        meta, last = last_segment[0]["optimizers"][i], last_segment[1]
        index = {self.names[id(p)]: k for k, p in
                 enumerate(p for g in opt.param_groups for p in g["params"])}
        state: dict[int, dict[str, Any]] = {}
        for pname, scalars in meta["state"].items():
            entry: dict[str, Any] = dict(scalars)
            prefix = f"opt{i}/{pname}/"
            for key, value in last.items():
                if key.startswith(prefix):
                    entry[key[len(prefix):]] = value
            state[index[pname]] = entry
        sd = opt.state_dict()
        opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
