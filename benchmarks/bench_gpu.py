"""lookuplinear on a GPU: its layers and collection against ``nn.EmbeddingBag`` (and FBGEMM's TBE).

Run by ``benchmarks/gpu.sh`` (build, CUDA tests, then this), or alone from the repository root
on a machine with CUDA:

    PYTHONPATH=src python benchmarks/bench_gpu.py --out OUT_DIR

``--dry-run`` runs the same code on the CPU with tiny sizes (tests/test_gpu.py does, so that
the script is not dead code on machines without a GPU); its times mean nothing.

Cases, all ``mode="sum"``, float32, ``sparse=True`` (row-sparse weight gradients), indices
uniform over the rows:

* ``bags``: one table of 1,000,000 x 64, a batch of 2,048 bags of 20 IDs, called as
  ``emb(indices, offsets)`` (``include_last_offset=True``);
* ``bags, large batch``: the same with 16,384 bags (where the GPU's memory traffic, not the
  calls' launch cost, takes the time);
* ``one ID``: the same table, one ID per example: ``LookupLinear`` called with the IDs alone
  (its index form, ``one_hot(ids) @ weight``), the others with bags of 1;
* ``collection``: 8 tables of 100 to 1,000,000 rows x 64 (2.1M rows), a batch of 2,048
  examples with bags of 1 to 20 IDs per feature: ``LookupCollection`` over a ``KeyedBags``
  against one ``nn.EmbeddingBag`` per table (outputs concatenated).

Models: ``nn.EmbeddingBag`` (the reference), ``lookuplinear.EmbeddingBag`` (the drop-in),
``LookupLinear(bias=False)``, ``LookupCollection``, and FBGEMM's
``SplitTableBatchedEmbeddingBagsCodegen`` on the GPU (``EmbeddingLocation.DEVICE``) where
``fbgemm_gpu`` imports. FBGEMM has no backward without an optimizer: its forward+backward
includes its fused ``EXACT_SGD`` update (learning rate 0, so the table does not change).

Every model gets the reference's weights and its output is compared with the reference's
before any timing (``max_abs_diff``; the forward+backward's weight gradient too, densified,
``grad_max_abs_diff``). Timed: the forward (under ``torch.no_grad``) and forward+backward (the
output's sum). Every model runs once per round, in a rotating order, after warm-up rounds; its
time is the median over the rounds of one round's sample (``inner`` calls, calibrated to
``--sample-ms``), the device synchronized before and after each sample. Written to ``--out``:
``bench_gpu.json`` (the machine with its GPU, the times, the checks, errors) and
``bench_gpu.txt`` (the same as a table of ratios against ``nn.EmbeddingBag``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lookuplinear import EmbeddingBag, KeyedBags, LookupCollection, LookupLinear, TableConfig
from lookuplinear.ops import library
from lookuplinear.report.machine import format_machine, machine_info

REFERENCE = "nn.EmbeddingBag"
TABLE_MODELS = (REFERENCE, "lookuplinear.EmbeddingBag", "LookupLinear", "fbgemm TBE")
COLLECTION_MODELS = (REFERENCE, "LookupCollection", "fbgemm TBE")
PHASES = ("forward", "forward+backward")
#: a model's output against the reference's, float32 sums of at most 20 rows
TOLERANCE = 1e-4


@dataclass(frozen=True)
class Sizes:
    rows: int  # the single table's
    dim: int
    batch: int
    large_batch: int
    bag_size: int  # the ``bags`` cases'
    collection_rows: tuple[int, ...]
    max_bag: int  # the collection's bags: 1 to max_bag IDs


FULL = Sizes(rows=1_000_000, dim=64, batch=2048, large_batch=16_384, bag_size=20,
             collection_rows=(1_000_000, 500_000, 300_000, 100_000, 100_000, 50_000, 10_000, 100),
             max_bag=20)
TINY = Sizes(rows=300, dim=8, batch=6, large_batch=11, bag_size=3, collection_rows=(50, 20, 7),
             max_bag=3)


@dataclass
class Model:
    """One model of a case: its two timed calls, and its tables' gradients (dense, in the
    reference's order) after ``step``."""

    forward: Callable[[], torch.Tensor]
    step: Callable[[], torch.Tensor]
    grads: Callable[[], list[torch.Tensor]]


def model(call: Callable[[], torch.Tensor], params: list[torch.Tensor],
          grads: Callable[[], list[torch.Tensor]] | None = None) -> Model:
    """The model that ``call`` computes with ``params``: its forward under ``torch.no_grad``,
    its step the output's sum differentiated (``params``' gradients reset first)."""
    def forward() -> torch.Tensor:
        with torch.no_grad():
            return call()

    def step() -> torch.Tensor:
        for p in params:
            p.grad = None
        out = call()
        out.sum().backward()
        return out

    def dense_grads() -> list[torch.Tensor]:
        return [_dense(p.grad, p) for p in params]

    return Model(forward, step, grads or dense_grads)


def _dense(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if grad is None:
        return torch.zeros_like(like)
    return grad.to_dense() if grad.is_sparse else grad


def fbgemm() -> tuple[Any, str]:
    """FBGEMM's table-batched module class (None where ``fbgemm_gpu`` does not import, or has
    no GPU build) and a line saying which, or why not."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import fbgemm_gpu
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                SplitTableBatchedEmbeddingBagsCodegen,
            )
    except Exception as e:  # an ImportError, or its CUDA ops failing to load
        return None, f"not importable: {type(e).__name__}: {str(e)[:200]}"
    return SplitTableBatchedEmbeddingBagsCodegen, f"fbgemm_gpu {fbgemm_gpu.__version__}"


def tbe(tables: list[torch.Tensor], device: torch.device) -> nn.Module:
    """FBGEMM's table-batched module over copies of ``tables``, on the GPU."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        EmbeddingLocation,
        PoolingMode,
    )
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    emb = SplitTableBatchedEmbeddingBagsCodegen(
        [(t.shape[0], t.shape[1], EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for t in tables],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.0,
        pooling_mode=PoolingMode.SUM, device=device)
    for mine, theirs in zip(emb.split_embedding_weights(), tables, strict=True):
        mine.data.copy_(theirs)
    return emb


def table_models(names: tuple[str, ...], sizes: Sizes, batch: int, bag_size: int,
                 device: torch.device) -> dict[str, Model]:
    """The single-table cases' models, all with the reference's weights."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(sizes.rows, sizes.dim, generator=g).to(device)
    indices = torch.randint(0, sizes.rows, (batch * bag_size,), generator=g).to(device)
    offsets = (torch.arange(batch + 1) * bag_size).to(device)
    models: dict[str, Model] = {}
    for name in names:
        if name == "fbgemm TBE":
            models[name] = tbe_model(tbe([weight], device), indices, offsets)
            continue
        if name == REFERENCE:
            layer: nn.Module = nn.EmbeddingBag(sizes.rows, sizes.dim, mode="sum", sparse=True,
                                               include_last_offset=True, _weight=weight.clone())
        elif name == "lookuplinear.EmbeddingBag":
            layer = EmbeddingBag(sizes.rows, sizes.dim, mode="sum", sparse=True,
                                 include_last_offset=True, _weight=weight.clone())
        else:
            layer = LookupLinear(sizes.rows, sizes.dim, bias=False, sparse=True,
                                 include_last_offset=True, device=device)
            with torch.no_grad():
                layer.weight.copy_(weight)
        index_form = name == "LookupLinear" and bag_size == 1

        def call(layer: nn.Module = layer, index_form: bool = index_form) -> torch.Tensor:
            out: torch.Tensor = layer(indices) if index_form else layer(indices, offsets)
            return out

        models[name] = model(call, [layer.get_parameter("weight")])
    return models


def tbe_model(emb: nn.Module, indices: torch.Tensor, offsets: torch.Tensor) -> Model:
    """FBGEMM's module as a model: its step's backward applies its fused update (learning rate
    0), so it has no gradient to compare."""
    def call() -> torch.Tensor:
        out: torch.Tensor = emb(indices, offsets)
        return out

    return model(call, [], grads=list)


def collection_models(names: tuple[str, ...], sizes: Sizes, device: torch.device
                      ) -> dict[str, Model]:
    """The collection case's models, all with the reference's weights."""
    g = torch.Generator().manual_seed(1)
    rows = sizes.collection_rows
    tables = [torch.randn(r, sizes.dim, generator=g).to(device) for r in rows]
    lengths = torch.randint(1, sizes.max_bag + 1, (len(rows), sizes.batch), generator=g)
    values = torch.cat([torch.randint(0, r, (int(lengths[t].sum()),), generator=g)
                        for t, r in enumerate(rows)])
    keys = [f"f{t}" for t in range(len(rows))]
    kb = KeyedBags(keys, values, lengths=lengths.reshape(-1)).to(device)
    feats = [kb[k] for k in keys]  # each feature's Bags
    models: dict[str, Model] = {}
    for name in names:
        if name == REFERENCE:
            bags = [nn.EmbeddingBag(r, sizes.dim, mode="sum", sparse=True,
                                    include_last_offset=True, _weight=t.clone())
                    for r, t in zip(rows, tables, strict=True)]

            def ref_call(bags: list[nn.EmbeddingBag] = bags) -> torch.Tensor:
                return torch.cat([e(b.indices, b.offsets) for e, b in
                                  zip(bags, feats, strict=True)], 1)

            models[name] = model(ref_call, [e.weight for e in bags])
        elif name == "LookupCollection":
            ours = LookupCollection([TableConfig(f"t{t}", r, sizes.dim, [k]) for t, (r, k) in
                                     enumerate(zip(rows, keys, strict=True))],
                                    sparse=True, device=device)
            ours.load_state_dict({f"embedding_bags.t{t}.weight": w for t, w in enumerate(tables)})

            def call(ours: LookupCollection = ours) -> torch.Tensor:
                return ours(kb).values()

            def grads(ours: LookupCollection = ours) -> list[torch.Tensor]:
                return table_grads(ours, len(rows))

            models[name] = model(call, list(ours.parameters()), grads)
        else:
            models[name] = tbe_model(tbe(tables, device), kb.values, kb.offsets)
    return models


def table_grads(model: LookupCollection, n_tables: int) -> list[torch.Tensor]:
    """Each table's dense gradient: its rows of its group's (where ``state_dict`` finds its
    weight)."""
    out = []
    for t in range(n_tables):
        g, off, cfg = model._places[f"t{t}"]
        group = model.table_groups[g]
        out.append(_dense(group.grad, group)[off:off + cfg.stored_rows])
    return out


def check(models: dict[str, Model]) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Each model's largest difference from the reference (output, then weight gradient), and
    the models that differ beyond ``TOLERANCE``."""
    ref = models[REFERENCE]
    want = ref.forward()
    ref.step()
    want_grads = ref.grads()
    checks: dict[str, dict[str, float]] = {}
    bad: dict[str, str] = {}
    for name, m in models.items():
        if name == REFERENCE:
            continue
        try:
            out = m.forward()
            found = {"max_abs_diff": float((out.float() - want.float()).abs().max())}
            m.step()
            grads = m.grads()
            if grads:
                found["grad_max_abs_diff"] = max(
                    float((a - b).abs().max()) for a, b in zip(grads, want_grads, strict=True))
        except Exception:  # recorded: the other models still run
            bad[name] = traceback.format_exc(limit=6)
            continue
        checks[name] = found
        if out.shape != want.shape or max(found.values()) > TOLERANCE:
            bad[name] = f"differs from {REFERENCE}: {found} (shape {tuple(out.shape)})"
    return checks, bad


def timed(fn: Callable[[], object], inner: int, sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - start) / inner


def measure(models: dict[str, Model], repeats: int, warmup: int, sample_ms: float,
            sync: Callable[[], None]) -> dict[str, dict[str, float]]:
    """Median seconds per call, ``{phase: {model: seconds}}``, the models interleaved."""
    names = list(models)
    out: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        fns = {m: models[m].forward if phase == "forward" else models[m].step for m in names}
        inner = {}
        for m in names:
            timed(fns[m], 2, sync)  # the first calls: allocations, kernels loaded
            one = max(timed(fns[m], 3, sync), 1e-7)
            inner[m] = max(1, int(sample_ms / 1e3 / one))
        samples: dict[str, list[float]] = {m: [] for m in names}
        for r in range(warmup + repeats):
            for m in names[r % len(names):] + names[:r % len(names)]:
                t = timed(fns[m], inner[m], sync)
                if r >= warmup:
                    samples[m].append(t)
        out[phase] = {m: statistics.median(s) for m, s in samples.items()}
    return out


def run_case(build: Callable[[], dict[str, Model]], repeats: int, warmup: int,
             sample_ms: float, sync: Callable[[], None]) -> dict[str, Any]:
    """One case: its models built, checked, timed; what failed in ``errors`` (the case goes
    on without that model)."""
    result: dict[str, Any] = {"errors": {}}
    try:
        models = build()
        checks, bad = check(models)
        result["checks"], result["errors"] = checks, bad
        result["times"] = measure({m: f for m, f in models.items() if m not in bad}, repeats,
                                  warmup, sample_ms, sync)
    except Exception:  # recorded: the other cases still run
        result["errors"]["case"] = traceback.format_exc(limit=6)
    return result


def profile(models: dict[str, Model], calls: int, sync: Callable[[], None]) -> str:
    """Each model's forward and step, ``calls`` times each, under ``torch.profiler``: the ops
    (and on a GPU the kernels) that take its time, as tables (where a ratio does not say why)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    parts = []
    for name, m in models.items():
        for phase, fn in (("forward", m.forward), ("forward+backward", m.step)):
            fn()
            sync()
            with torch_profile(activities=activities) as prof:
                for _ in range(calls):
                    fn()
                sync()
            table = prof.key_averages().table(sort_by=sort, row_limit=20, max_name_column_width=60)
            parts.append(f"== {name}, {phase}, {calls} calls\n{table}")
    return "\n".join(parts)


def summary(report: dict[str, Any]) -> str:
    """The report as text: the machine, then per case and phase each model's time and its
    ratio to ``nn.EmbeddingBag``'s."""
    lines = [f"machine: {format_machine(report['machine'])}",
             f"GPU: {report['gpu']}; torch {report['torch']}, CUDA {report['cuda']}; "
             f"C++ operators loaded: {report['cpp_operators']}; FBGEMM: {report['fbgemm']}",
             f"sizes: {report['sizes']}", ""]
    for case, result in report["cases"].items():
        lines.append(f"== {case}")
        for phase, times in result.get("times", {}).items():
            base = times.get(REFERENCE)
            for m, t in times.items():
                ratio = f"{t / base:6.2f}x {REFERENCE}" if base else ""
                lines.append(f"{phase:17s} {m:26s} {t * 1e6:10.1f} us  {ratio}")
        for m, found in result.get("checks", {}).items():
            lines.append(f"check {m}: {found}")
        for m, why in result.get("errors", {}).items():
            lines.append(f"ERROR {m}: {why}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="folder for bench_gpu.json/.txt")
    p.add_argument("--dry-run", action="store_true",
                   help="on the CPU, tiny sizes, one round: the code runs, the times mean nothing")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sample-ms", type=float, default=20.0)
    p.add_argument("--profile", action="store_true",
                   help="also write profile.txt to --out: the bags case's models under "
                        "torch.profiler, forward and forward+backward")
    a = p.parse_args(argv)
    if a.dry_run:
        device, sizes = torch.device("cpu"), TINY
        a.repeats, a.warmup, a.sample_ms = 1, 0, 0.01
    elif not torch.cuda.is_available():
        p.error(f"this torch ({torch.__version__}) sees no CUDA device; use --dry-run on a "
                "machine without a GPU")
    else:
        device, sizes = torch.device("cuda"), FULL
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    tbe_class, fbgemm_line = fbgemm() if device.type == "cuda" else (None, "not on the CPU")
    extra = ("fbgemm TBE",) if tbe_class is not None else ()
    tables = tuple(m for m in TABLE_MODELS if m != "fbgemm TBE") + extra
    collection = tuple(m for m in COLLECTION_MODELS if m != "fbgemm TBE") + extra
    report: dict[str, Any] = {
        "machine": machine_info(device.type),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none (dry run)",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cpp_operators": library.CPP, "fbgemm": fbgemm_line,
        "dry_run": a.dry_run, "sizes": asdict(sizes), "cases": {},
    }
    print(f"machine: {format_machine(report['machine'])}; GPU: {report['gpu']}", flush=True)
    builds: dict[str, Callable[[], dict[str, Model]]] = {
        "bags": lambda: table_models(tables, sizes, sizes.batch, sizes.bag_size, device),
        "bags, large batch": lambda: table_models(tables, sizes, sizes.large_batch,
                                                  sizes.bag_size, device),
        "one ID": lambda: table_models(tables, sizes, sizes.batch, 1, device),
        "collection": lambda: collection_models(collection, sizes, device),
    }
    for case, build in builds.items():
        report["cases"][case] = run_case(build, a.repeats, a.warmup, a.sample_ms, sync)
        print(f"{case}: done", flush=True)
    text = summary(report)
    print(text)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "bench_gpu.json").write_text(json.dumps(report, indent=1) + "\n")
        (a.out / "bench_gpu.txt").write_text(text + "\n")
        if a.profile:
            models = builds["bags"]()
            (a.out / "profile.txt").write_text(profile(models, 10, sync) + "\n")
    return report


if __name__ == "__main__":
    failed = any(r["errors"] for r in main()["cases"].values())
    raise SystemExit(1 if failed else 0)
