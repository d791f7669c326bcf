"""``DistributedDataParallel`` for models with row-sparse lookuplinear tables.

PyTorch's ``DistributedDataParallel`` reduces gradients in buckets; it expects a sparse gradient
only from ``nn.Embedding`` / ``nn.EmbeddingBag(sparse=True)`` (``_build_params_for_reducer``
checks the module's type), and a sparse gradient from any other module ends its first step in
``NotImplementedError: Cannot access storage of SparseTensorImpl``. This subclass is PyTorch's
class with one change: the tables of ``LookupLinear(sparse=True)`` and
``LookupCollection(sparse=True)`` are left out of its buckets and reduced here instead. At the
end of each backward their row-sparse gradients are all-reduced, in a fixed order, on a process
group of their own (rows merged across processes, duplicates summed), and divided by the world
size as DDP divides its buckets; a table no process read in the step keeps ``grad = None``.
Every other parameter goes through PyTorch's reducer as usual.
Table weights are broadcast from rank 0 at construction, as DDP broadcasts the others; a table
in a file (``storage=``) takes rank 0's seed, drawn flags and drawn rows.

So after ``loss.backward()`` every process holds the same gradients, the ones one process would
compute on the concatenated batches (with a loss averaged over the batch), and any optimizer
steps on them: ``lookuplinear.optim`` row by row.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .._fusion import bound_to, reserve
from ..errors import InputValueError
from ..ops._hooks import WATCHERS, notify
from ..storage.tables import TableStorage, storage_of

__all__ = ["DistributedDataParallel", "sparse_tables"]


def sparse_tables(module: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters of ``module``'s row-sparse lookuplinear tables, by qualified name (a
    ``mode="max"`` table of a ``LookupCollection(sparse=True)`` has a dense gradient: not
    one of them)."""
    from ..modules.collection import LookupCollection
    from ..modules.layer import LookupLinear

    out: dict[str, nn.Parameter] = {}
    for prefix, m in module.named_modules():
        if isinstance(m, LookupLinear | LookupCollection) and m.sparse:
            dense = {f"table_groups.{place.group}" for place in m._places.values()
                     if not m._sparse(place.config)} if isinstance(m, LookupCollection) else set()
            for name, p in m.named_parameters():
                if name in dense:
                    continue
                if p.requires_grad and p.dim() == 2 and p.layout == torch.strided:
                    out[f"{prefix}.{name}" if prefix else name] = p
    return out


class DistributedDataParallel(nn.parallel.DistributedDataParallel):
    """``torch.nn.parallel.DistributedDataParallel`` that also reduces the row-sparse gradients
    of lookuplinear tables; every argument is PyTorch's.

    Dense equivalent: one process training on the concatenation of every process's batch,
    with the loss averaged over the batch (DDP's gradient averaging).

    Raises
    ------
    InputValueError
        No default process group (call ``torch.distributed.init_process_group`` first), or a
        table is bound to a ``fused=True`` optimizer: it would update the table inside the
        backward, before the other processes' gradients arrive. Use ``fused=False``. An
        ``IdMap`` (a ``hashing="map"`` table's) in training mode, at construction or at a
        forward: each process would give rows to the IDs it sees, so one ID would read
        different rows in different processes. Use ``hashing="mod"`` or ``"qr"``, or a map
        trained ahead, the same in every process, in eval mode (it only looks IDs up).
        A float16 row-sparse table on the gloo backend, which cannot sum float16 sparse
        gradients: use bfloat16 or float32, or ``sparse=False``.

    Examples
    --------
    Under ``torchrun --nproc_per_node 2 train.py``::

        dist.init_process_group("gloo")
        model = nn.Sequential(LookupLinear(1_000_000, 64, sparse=True), nn.ReLU(), nn.Linear(64, 2))
        ddp = lookuplinear.parallel.DistributedDataParallel(model)
        opt = lookuplinear.optim.Adam(ddp.parameters(), lr=1e-3)
        loss_fn(ddp(x), y).backward(); opt.step()      # the same model in every process
    """

    def __init__(self, module: nn.Module, *args: Any, **kwargs: Any) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise InputValueError(
                "DistributedDataParallel needs the default process group: call "
                "torch.distributed.init_process_group('gloo') (or 'nccl' on GPUs) first, in "
                "every process (torchrun sets the environment it reads)."
            )
        from ..ids.idmap import IdMap

        id_maps = [(n, m) for n, m in module.named_modules() if isinstance(m, IdMap)]
        _check_maps(id_maps)
        tables = sparse_tables(module)
        # every parameter: a table PyTorch's reducer handles (lookuplinear.Embedding is an
        # nn.Embedding) is updated too early as well
        for name, p in module.named_parameters():
            if bound_to(p) is not None:
                raise InputValueError(
                    f"the parameter {name} is bound to a fused=True optimizer, which updates it "
                    "inside the backward, before the other processes' gradients arrive. Build "
                    "the optimizer with fused=False for data-parallel training."
                )
        # DDP names a parameter of the root module ".weight" when it checks this list
        group = kwargs.get("process_group")
        backend = str(dist.get_backend(group))
        wanted = {"gloo": "cpu", "nccl": "cuda"}.get(backend)
        for name, p in tables.items():
            if wanted is not None and p.device.type != wanted:
                raise InputValueError(
                    f"the table {name} is on {p.device}, but the process group's backend is "
                    f"{backend!r}, which reduces sparse gradients of {wanted} tensors. Move the "
                    f"model to {wanted} (model.to(...)) or use the "
                    f"{'nccl' if wanted == 'cpu' else 'gloo'} backend."
                )
        half = [name for name, p in tables.items() if p.dtype == torch.float16]
        if half and backend == "gloo":
            raise InputValueError(
                f"the row-sparse tables {half} are float16, and the gloo backend cannot sum "
                "float16 sparse gradients (PyTorch's DDP fails the same way with a float16 "
                "nn.EmbeddingBag(sparse=True)). Make them bfloat16 or float32, or build them "
                "with sparse=False (their gradients are then dense, reduced by PyTorch's "
                "buckets)."
            )
        ignored = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ())) | set(tables)
        ignored |= {f".{name}" for name in tables if "." not in name}
        nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            module, sorted(ignored)
        )
        dense = [p for n, p in module.named_parameters() if p.requires_grad and n not in tables]
        if dense:
            super().__init__(module, *args, **kwargs)
        else:  # tables only: PyTorch's reducer would have nothing to do, and refuses to start
            nn.Module.__init__(self)
            self.module = module
            self.require_backward_grad_sync = True
        self._tables_only = not dense
        ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
        # a group of their own: these reductions never interleave with the buckets' ones
        self._table_group = dist.new_group(ranks=ranks)
        self._src = ranks[0]
        self._tables = [tables[name] for name in sorted(tables)]
        self._table_task = -1
        self._id_maps = id_maps
        #: whether the next backward reduces the tables: read by the forward, as PyTorch's
        #: forward reads require_backward_grad_sync (no_sync() around the forward decides)
        self._sync_tables = True
        files = _files(module, self._table_group)
        with torch.no_grad():
            for p in self._tables:
                if id(p) not in files:
                    dist.broadcast(p.data, src=self._src, group=self._table_group)
            # a table in a file draws its rows from its seed at their first lookup: the values
            # alone (PyTorch's broadcast of a table in its buckets) would leave this process's
            # seed and drawn flags, and it would draw rows the first process holds
            for storage in files.values():
                storage.broadcast(self._src, self._table_group)
        #: tables only: the buffers PyTorch's forward broadcasts from the first rank (its
        #: constructor broadcasts them and the frozen parameters)
        self._buffers_synced: list[torch.Tensor] = []
        if self._tables_only:
            skip = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ())) | set(tables)
            if kwargs.get("broadcast_buffers", args[3] if len(args) > 3 else True):
                self._buffers_synced = [t for n, t in module.named_buffers() if n not in skip]
            self._sync([t for n, t in module.named_parameters() if n not in skip]
                       + self._buffers_synced)
        # this wrapper (or PyTorch's reducer) handles the gradients in the backward: a fused
        # optimizer made later refuses them
        reserve([p for p in module.parameters() if p.requires_grad],
                "lookuplinear.parallel.DistributedDataParallel")
        # The hooks reach this wrapper through a weak reference: a tensor's hooks are held in
        # C++, where the garbage collector cannot see a cycle, so a bound method there would
        # keep the wrapper, PyTorch's reducer and both process groups alive until the
        # interpreter ends, and gloo's threads would then be torn down with it (SIGABRT,
        # "terminate called without an active exception"). Dropped, the wrapper takes its
        # hooks with it.
        ready = _weak_hook(weakref.ref(self))
        handles = [p.register_post_accumulate_grad_hook(ready) for p in self._tables]
        weakref.finalize(self, _remove, handles)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """As PyTorch's; a model of tables only is called as it is. A synchronised forward's
        backward reduces the tables whether it reads them or not (:meth:`_reduced_by`)."""
        _check_maps(self._id_maps)
        synced = torch.is_grad_enabled() and self.require_backward_grad_sync
        if torch.is_grad_enabled():
            self._sync_tables = self.require_backward_grad_sync
        if self._tables_only:
            if synced:
                self._sync(self._buffers_synced)  # as PyTorch's forward syncs the buffers
            out = self.module(*inputs, **kwargs)
        else:
            out = super().forward(*inputs, **kwargs)
        if synced and self._tables:
            self._reduced_by(out)
        return out

    def _reduced_by(self, out: Any) -> None:
        """Make the backward through ``out`` (a synchronised forward's output) reduce the
        tables at its end, in every process, whether it reads a table or not: gradients that
        ``no_sync()`` steps left on a table are then averaged over the processes, as
        PyTorch's reducer averages a parameter's accumulated gradient, and every process
        takes part in the same reductions (a table's gradient hook alone fires only in the
        processes whose step read it)."""
        hook = _weak_hook(weakref.ref(self))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(hook)

    @torch.no_grad()
    def _sync(self, tensors: list[torch.Tensor]) -> None:
        """Broadcast ``tensors`` from the first rank of the group."""
        for t in tensors:
            dist.broadcast(t.data, src=self._src, group=self._table_group)

    def _table_grad_ready(self, _: torch.Tensor) -> None:
        """Queue :meth:`_reduce_tables` at the end of the running backward (once), where the
        forward was synchronised: a table's gradient accumulated, or the gradient of a
        synchronised forward's output arrived."""
        task = torch._C._current_graph_task_id()
        if task == self._table_task or not self._sync_tables:
            return
        self._table_task = task
        torch.autograd.Variable._execution_engine.queue_callback(self._reduce_tables)

    @torch.no_grad()
    def _reduce_tables(self) -> None:
        """All-reduce every table's gradient that some process has (an empty one where this
        process has none); a table no process has a gradient for keeps ``grad = None``, as one
        process on the whole batch leaves it (an optimizer skips it). Whoever follows a
        table's rows (a :class:`~lookuplinear.Checkpoint`'s tracker) is told the reduced rows:
        the gradient hook it relies on saw this process's rows only."""
        self._table_task = -1
        world = dist.get_world_size(self._table_group)
        used = torch.tensor([p.grad is not None for p in self._tables], dtype=torch.int32,
                            device=self._tables[0].device)
        dist.all_reduce(used, group=self._table_group)
        for p, anyone in zip(self._tables, used.tolist(), strict=True):
            if not anyone:
                continue
            g = p.grad
            if g is None:
                g = torch.sparse_coo_tensor(
                    torch.zeros(1, 0, dtype=torch.long, device=p.device),
                    torch.zeros(0, *p.shape[1:], dtype=p.dtype, device=p.device), p.shape,
                    check_invariants=False)
            elif not g.is_sparse:
                raise InputValueError(
                    "a row-sparse table got a dense gradient (dense rows of shape (..., "
                    "in_features) give one); under DistributedDataParallel pass index, bag or "
                    "sparse input to sparse=True tables."
                )
            dist.all_reduce(g, group=self._table_group)
            g = g.coalesce()
            p.grad = torch.sparse_coo_tensor(g.indices(), g.values() / world, p.shape,
                                             is_coalesced=True, check_invariants=False)
            if WATCHERS:  # the other processes' rows change here too: a checkpoint's tracker
                notify(p, g.indices()[0])  # saw only this process's local gradient


def _files(module: nn.Module, group: Any) -> dict[int, TableStorage]:
    """The tables of ``module`` in files (``storage=``), by parameter id.

    Raises
    ------
    InputValueError
        (in every process) Not the same parameters are in files in every process of
        ``group``.
    """
    files = {id(p): (name, s) for name, p in module.named_parameters()
             if (s := storage_of(p)) is not None}
    names = sorted(name for name, _ in files.values())
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, names, group=group)
    if any(other != names for other in every):
        raise InputValueError(
            f"the tables in files (storage=) differ between the processes: {every} (by "
            "process). Build the same model in every process, each table in a file (a path of "
            "its own per process) or in memory in all of them."
        )
    return {key: s for key, (_, s) in files.items()}


def _check_maps(id_maps: Sequence[tuple[str, nn.Module]]) -> None:
    """Refuse an ``IdMap`` (of ``(name, map)`` pairs) in training mode: it gives rows to the IDs
    this process sees."""
    training = [name for name, m in id_maps if m.training]
    if training:
        raise InputValueError(
            f"the IdMaps {training} (hashing='map' tables) are in training mode under "
            "DistributedDataParallel: each process would give rows to the IDs it sees, so one "
            "ID would read different rows in different processes and the all-reduce would "
            "merge different IDs' gradients. Use hashing='mod' or 'qr' (the same rows in every "
            "process), or train the map ahead, load it in every process (one state_dict) and "
            "put it in eval mode, where it only looks IDs up: e.g. collection.id_maps.eval(), "
            "again after every model.train()."
        )


def _weak_hook(ref: weakref.ref[DistributedDataParallel]) -> Callable[[torch.Tensor], None]:
    """A tables' post-accumulate-grad hook (and an output's gradient hook) that calls the
    wrapper ``ref`` names while it lives (returning None: the gradient as it is)."""
    def ready(tensor: torch.Tensor) -> None:
        ddp = ref()
        if ddp is not None:
            ddp._table_grad_ready(tensor)
    return ready


def _remove(handles: list[Any]) -> None:
    for handle in handles:
        handle.remove()
