"""The bench matrix: input forms x sizes x methods x phases, timed side by side.

For every case (input form, index distribution, ``in_features``, ``out_features``, batch) the
methods of :mod:`lookuplinear.report.methods` run interleaved: one warm-up round, then
``repeats`` rounds in which every method runs once; the median of its rounds is its time, and the
upper over the lower quartile of its rounds is its ``spread``. Where a method's rounds disagree by
more than ``noise_ratio``, or other processes used more than ``busy_share`` of the machine's CPU
time while the case ran (a steady load slows every round alike), the case is measured again (all
its methods, interleaved), up to ``retries`` times; a method still over either is ``noisy``: the
machine was too busy for that number, and the headlines say so instead of drawing on it. A method
whose estimated memory exceeds ``max_memory`` is not run: its result says why. Then each method
runs once more to measure its peak memory (:func:`~lookuplinear.report.memory.measure_peak`).

Phases: ``forward`` (under ``torch.no_grad``), ``forward+backward`` (the weight gradient), and
``train`` (zero_grad, forward, MSE loss, backward, optimizer step) per optimizer: the lookup with
``sparse=True`` gradients and ``lookuplinear.optim`` (when it is importable) against
``nn.EmbeddingBag`` with dense gradients and the ``torch.optim`` optimizer of the same name.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from ..modules.layer import LookupLinear
from ..sparse.bags import Bags
from .machine import cpu_ticks, others_share
from .memory import measure_peak
from .methods import FORMS, LINEAR, LOOKUP_OF_FORM, Method, make_input, methods_for

__all__ = [
    "FULL",
    "MIN_ROUNDS",
    "OPTIMIZERS",
    "QUICK",
    "SCHEMA_VERSION",
    "BenchResult",
    "Grid",
    "crossovers",
    "grid_dict",
    "quartiles",
    "run_matrix",
    "to_json",
]

SCHEMA_VERSION = 2
OPTIMIZERS = ("SGD", "Adagrad", "RowWiseAdagrad", "Adam", "AdamW")
PHASES = ("forward", "forward+backward", "train")
LR = 0.01
#: the fewest timed rounds a faster/slower verdict is drawn from: with fewer, the range their
#: rounds allow is one round's ratio (or the two rounds), too few to tell a difference from noise
MIN_ROUNDS = 3


@dataclass(frozen=True)
class Grid:
    """The sizes of a bench run."""

    in_features: tuple[int, ...]
    out_features: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    cases: tuple[tuple[str, str], ...]  # (form, distribution)
    bag_size: int = 20
    repeats: int = 7
    warmup: int = 1
    train_in_features: tuple[int, ...] = ()
    #: rounds disagree when their upper quartile exceeds the lower one by more than this ratio
    noise_ratio: float = 1.25
    #: a case is busy when other processes used more than this share of all cores meanwhile
    busy_share: float = 0.2
    #: how many times a case whose rounds disagree (or that ran busy) is measured again
    retries: int = 2


QUICK = Grid(
    in_features=(100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000),
    out_features=(16,),
    batch_sizes=(256,),
    cases=(("indices", "uniform"), ("bags", "uniform"), ("bags", "zipf"), ("csr", "uniform"),
           ("dense", "uniform")),
    train_in_features=(10_000, 1_000_000),
)

FULL = Grid(
    in_features=(100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000),
    out_features=(16, 64, 256),
    batch_sizes=(64, 1024),
    cases=tuple((f, d) for f in FORMS for d in ("uniform", "zipf")),
    train_in_features=(1_000, 100_000, 1_000_000, 10_000_000),
)


@dataclass
class BenchResult:
    """One row of ``results.json``: a method on a case in a phase."""

    form: str
    dist: str
    in_features: int
    out_features: int
    batch: int
    bag_size: int
    nnz: int
    method: str
    phase: str
    optimizer: str | None = None
    status: str = "ok"  # "ok", "skipped" or "failed"
    reason: str | None = None
    median_s: float | None = None
    min_s: float | None = None
    spread: float | None = None
    others_cpu: float | None = None
    noisy: bool = False
    attempts: int = 0
    times_s: list[float] = field(default_factory=list)
    throughput_rows_per_s: float | None = None
    peak_bytes: int | None = None
    input_bytes: int = 0
    estimated_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema of docs/report.md)."""
        return asdict(self)


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB"


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _estimate(m: Method, phase: str, n: int, d: int, batch: int, nnz: int) -> int:
    """Bytes a method needs beyond the weight: its input, output and weight gradient."""
    est = m.input_bytes + batch * d * 4
    if phase != "forward":
        est += n * d * 4 if m.dense_grad else nnz * (d * 4 + 8)
    return est


def quartiles(times: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of a measurement's rounds (both the time for one round).

    Examples
    --------
    >>> quartiles([1.0, 1.0, 2.0, 9.0])
    (1.0, 3.75)
    """
    if len(times) < 2:
        return times[0], times[0]
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q1, q3


def _timed_rounds(
    fns: dict[str, Callable[[], None]], grid: Grid, device: str, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """Run every function once per round, interleaved; return the timed rounds' durations."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(grid.warmup + grid.repeats):
        for name, fn in fns.items():
            _sync(device)
            t0 = clock()
            fn()
            _sync(device)
            dt = clock() - t0
            if r >= grid.warmup:
                times[name].append(dt)
    return times


def _spread(times: list[float]) -> float:
    q1, q3 = quartiles(times)
    return q3 / q1 if q1 > 0 else float("inf")


Ticks = Callable[[], "tuple[int, int, int] | None"]


def _measure(
    fns: dict[str, Callable[[], None]],
    rows: dict[str, BenchResult],
    grid: Grid,
    device: str,
    clock: Callable[[], float],
    ticks: Ticks,
) -> None:
    """Time ``fns`` side by side, again while the machine is busy; fill in their rows."""
    attempts = 0
    while True:
        attempts += 1
        before = ticks()
        times = _timed_rounds(fns, grid, device, clock)
        others = others_share(before, ticks())
        busy = others is not None and others > grid.busy_share
        calm = not busy and all(_spread(t) <= grid.noise_ratio for t in times.values())
        if calm or attempts > grid.retries:
            break
    batch = next(iter(rows.values())).batch if rows else 0
    for name, fn in fns.items():
        row = rows[name]
        row.times_s = times[name]
        row.median_s = statistics.median(times[name])
        row.min_s = min(times[name])
        row.spread = _spread(times[name])
        row.others_cpu = others
        row.noisy = busy or row.spread > grid.noise_ratio
        row.attempts = attempts
        row.throughput_rows_per_s = batch / row.median_s if row.median_s > 0 else None
        row.peak_bytes = measure_peak(fn, device)


def _phase_fn(m: Method, phase: str, W: torch.Tensor, G: torch.Tensor) -> Callable[[], None]:
    if phase == "forward":

        def fwd() -> None:
            with torch.no_grad():
                m.run()

        return fwd

    def fwd_bwd() -> None:
        out = m.run()
        if m.backward is not None:
            m.backward(out)
        else:
            out.backward(G)
        W.grad = None

    return fwd_bwd


def _run_case(
    form: str, dist: str, n: int, d: int, batch: int, grid: Grid, W: torch.Tensor, device: str,
    max_memory: int, clock: Callable[[], float], ticks: Ticks,
) -> list[BenchResult]:
    x = make_input(form, dist, n, batch, grid.bag_size)
    methods = methods_for(form, x, W, device)
    G = torch.ones(batch, d, device=device)
    results: list[BenchResult] = []
    for phase in ("forward", "forward+backward"):
        base = dict(form=form, dist=dist, in_features=n, out_features=d, batch=batch,
                    bag_size=1 if form == "indices" else grid.bag_size, nnz=int(x.nnz),
                    phase=phase)
        runnable: dict[str, Callable[[], None]] = {}
        rows: dict[str, BenchResult] = {}
        for m in methods:
            if phase == "forward" and m.name.endswith("(sparse grad)"):
                continue  # its forward is the lookup's
            est = _estimate(m, phase, n, d, batch, x.nnz)
            row = BenchResult(method=m.name, input_bytes=m.input_bytes, estimated_bytes=est,
                              **base)  # type: ignore[arg-type]
            rows[m.name] = row
            results.append(row)
            if m.cpu_only and device != "cpu":
                row.status, row.reason = "skipped", f"{m.name} runs on the CPU only"
            elif est > max_memory:
                what = "the dense input" if m.needs_dense_input else "the dense weight gradient"
                row.status = "skipped"
                row.reason = (f"needs ~{_gib(est)} ({what}), over --max-memory "
                              f"{_gib(max_memory)}")
            else:
                try:
                    if m.build is not None:
                        m.build()
                    fn = _phase_fn(m, phase, W, G)
                    fn()  # fails here, not inside the timed rounds
                    runnable[m.name] = fn
                except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                    row.status, row.reason = "failed", f"{type(e).__name__}: {e}"[:300]
        _measure(runnable, {k: rows[k] for k in runnable}, grid, device, clock, ticks)
    return results


def _optimizer_class(source: str, name: str) -> tuple[type | None, str | None]:
    """(class, None) or (None, the reason it is unavailable)."""
    try:
        module = importlib.import_module(source)
    except ImportError as e:
        return None, f"{source} is not importable ({e})"
    cls = getattr(module, name, None)
    if cls is None:
        return None, f"{source} has no {name}"
    return cls, None


def _train_case(
    n: int, d: int, batch: int, grid: Grid, device: str, max_memory: int,
    clock: Callable[[], float], ticks: Ticks,
) -> list[BenchResult]:
    """One train step per optimizer: sparse lookup + lookuplinear.optim vs dense EmbeddingBag."""
    x = make_input("bags", "uniform", n, batch, grid.bag_size)
    bags = Bags.from_scipy(x).to(device)
    target = torch.randn(batch, d, device=device)
    torch.manual_seed(0)
    init = torch.randn(n, d, device=device)
    base = dict(form="bags", dist="uniform", in_features=n, out_features=d, batch=batch,
                bag_size=grid.bag_size, nnz=int(x.nnz), phase="train")
    results: list[BenchResult] = []
    for opt_name in OPTIMIZERS:  # one pair of models alive at a time, timed side by side
        runnable: dict[str, Callable[[], None]] = {}
        rows: dict[str, BenchResult] = {}
        used = 0
        for method, source, sparse in (
            ("LookupLinear (sparse grad)", "lookuplinear.optim", True),
            ("nn.EmbeddingBag (dense grad)", "torch.optim", False),
        ):
            state = 2 if opt_name.startswith("Adam") else (0 if opt_name == "SGD" else 1)
            est = n * d * 4 * (1 + (0 if sparse else 1) + state)
            row = BenchResult(method=method, optimizer=f"{source}.{opt_name}",
                              estimated_bytes=est, input_bytes=x.nnz * 20,
                              **base)  # type: ignore[arg-type]
            results.append(row)
            cls, why = _optimizer_class(source, opt_name)
            if cls is None:
                row.status, row.reason = "skipped", why
                continue
            if used + est > max_memory:
                row.status = "skipped"
                row.reason = (f"needs ~{_gib(est)} (table + gradient + optimizer state"
                              + (f", plus {_gib(used)} for the model timed beside it"
                                 if used else "") + "), over --max-memory")
                continue
            try:
                fn = _train_step(cls, init, bags, target, sparse)
                fn()
            except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                row.status, row.reason = "failed", f"{type(e).__name__}: {e}"[:300]
                continue
            used += est
            runnable[method] = fn
            rows[method] = row
        _measure(runnable, rows, grid, device, clock, ticks)
    return results


def _train_step(
    cls: type, init: torch.Tensor, bags: Bags, target: torch.Tensor, sparse: bool
) -> Callable[[], None]:
    model: nn.Module
    if sparse:
        model = LookupLinear(init.shape[0], init.shape[1], bias=False, sparse=True,
                             init=lambda w: w.copy_(init), device=init.device)
    else:
        model = nn.EmbeddingBag(init.shape[0], init.shape[1], mode="sum", _weight=init.clone())
        model = model.to(init.device)
    opt = cls(model.parameters(), lr=LR)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if sparse:
            out = model(bags)
        else:
            out = model(bags.indices, bags.offsets[:-1], per_sample_weights=bags.weights)
        loss = torch.nn.functional.mse_loss(out, target)
        loss.backward()
        opt.step()

    return step


def _cases(grid: Grid) -> Iterator[tuple[int, int, int, str, str]]:
    for n in grid.in_features:
        for d in grid.out_features:
            for batch in grid.batch_sizes:
                for form, dist in grid.cases:
                    yield n, d, batch, form, dist


def run_matrix(
    grid: Grid,
    *,
    device: str = "cpu",
    max_memory: int = 2**31,
    progress: bool | None = None,
    clock: Callable[[], float] = time.perf_counter,
    ticks: Ticks = cpu_ticks,
) -> list[BenchResult]:
    """Run the whole matrix; returns one :class:`BenchResult` per (case, method, phase).

    ``clock`` reads the time in seconds and ``ticks`` the CPU time of the machine and of this
    process (:func:`~lookuplinear.report.machine.cpu_ticks`); stand-ins test the noise handling.

    Examples
    --------
    >>> tiny = Grid((100,), (4,), (8,), (("bags", "uniform"),), bag_size=3, repeats=1)
    >>> rows = run_matrix(tiny, progress=False)
    >>> sorted({r.phase for r in rows})
    ['forward', 'forward+backward']
    >>> all(r.status == "ok" for r in rows)
    True
    """
    from tqdm.auto import tqdm

    from .machine import available_memory

    table_limit = min(available_memory() // 2, 2 * max_memory)

    results: list[BenchResult] = []
    cases = list(_cases(grid))
    train = [(n, d, b) for n in grid.train_in_features for d in grid.out_features[:1]
             for b in grid.batch_sizes[:1]]
    bar = tqdm(total=len(cases) + len(train), desc="bench", unit="case",
               disable=None if progress is None else not progress)
    weights: dict[tuple[int, int], torch.Tensor] = {}
    for n, d, batch, form, dist in cases:
        bar.set_postfix_str(f"{form}/{dist} in={n:.0e} out={d} N={batch}")
        if n * d * 4 > table_limit:
            results.append(BenchResult(
                form, dist, n, d, batch, grid.bag_size, 0, "*", "*", status="skipped",
                reason=f"the weight table alone needs {_gib(n * d * 4)}, over "
                f"{_gib(table_limit)} (2 x --max-memory, at most half the available memory)",
                estimated_bytes=n * d * 4))
            bar.update()
            continue
        if (n, d) not in weights:
            weights.clear()  # one table alive at a time
            gen = torch.Generator().manual_seed(n + d)
            weights[n, d] = torch.randn(n, d, generator=gen).to(device).requires_grad_(True)
        results += _run_case(form, dist, n, d, batch, grid, weights[n, d], device, max_memory,
                             clock, ticks)
        bar.update()
    weights.clear()
    for n, d, batch in train:
        bar.set_postfix_str(f"train in={n:.0e} out={d} N={batch}")
        results += _train_case(n, d, batch, grid, device, max_memory, clock, ticks)
        bar.update()
    bar.close()
    return results


def crossovers(results: list[BenchResult]) -> list[dict[str, Any]]:
    """Per (form, dist, out, batch, phase): the lookup's speedup over ``nn.Linear`` by size.

    ``speedup_by_in_features`` is the ratio of the medians; ``speedup_range_by_in_features``
    the range the rounds allow (``nn.Linear``'s lower quartile over the lookup's upper one, and
    the reverse). Sizes where either time is ``noisy`` are left out of both and listed in
    ``noisy_in_features``. ``crossover_in_features`` is the smallest measured ``in_features``
    from which on the lookup is faster at every larger measured size, the whole range above 1
    (None when it never is, or when a size had fewer than :data:`MIN_ROUNDS` timed rounds).
    """
    groups: dict[tuple[Any, ...], dict[int, dict[str, BenchResult]]] = {}
    for r in results:
        if r.status != "ok" or r.median_s is None or r.phase == "train":
            continue
        lookup = LOOKUP_OF_FORM[r.form]
        if r.method not in (LINEAR, lookup):
            continue
        key = (r.form, r.dist, r.out_features, r.batch, r.phase)
        groups.setdefault(key, {}).setdefault(r.in_features, {})[r.method] = r
    out = []
    for (form, dist, d, batch, phase), by_n in sorted(groups.items()):
        lookup = LOOKUP_OF_FORM[form]
        speedups: dict[int, float] = {}
        ranges: dict[int, tuple[float, float]] = {}
        noisy: list[int] = []
        rounds = MIN_ROUNDS
        for n, t in sorted(by_n.items()):
            if LINEAR not in t or lookup not in t:
                continue
            lin, look = t[LINEAR], t[lookup]
            if lin.noisy or look.noisy:
                noisy.append(n)
                continue
            (l1, l3), (k1, k3) = quartiles(lin.times_s), quartiles(look.times_s)
            assert lin.median_s is not None and look.median_s is not None
            speedups[n] = lin.median_s / look.median_s
            ranges[n] = (l1 / k3, l3 / k1)
            rounds = min(rounds, len(lin.times_s), len(look.times_s))
        sizes = sorted(speedups) if rounds >= MIN_ROUNDS else []
        cross = None
        for i, n in enumerate(sizes):
            if all(ranges[m][0] > 1 for m in sizes[i:]):
                cross = n
                break
        out.append(dict(form=form, dist=dist, out_features=d, batch=batch, phase=phase,
                        lookup_method=lookup,
                        speedup_by_in_features={str(k): v for k, v in speedups.items()},
                        speedup_range_by_in_features={str(k): list(v)
                                                      for k, v in ranges.items()},
                        noisy_in_features=noisy, crossover_in_features=cross))
    return out


def to_json(
    results: list[BenchResult], *, machine: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Any]:
    """The ``results.json`` document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine,
        "settings": settings,
        "results": [r.to_dict() for r in results],
        "crossovers": crossovers(results),
    }


def grid_dict(grid: Grid) -> dict[str, Any]:
    """The grid as JSON."""
    d = asdict(grid)
    d["cases"] = [list(c) for c in grid.cases]
    return d

