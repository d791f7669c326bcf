"""What calling a C kernel through a registered PyTorch operator would cost, beside the call.

Run from the repository root:

    .venv/bin/python benchmarks/bench_dispatch.py

One C kernel (the row gather, ``ll_gather_rows_f32``, on 4 rows) called three ways: directly
through ctypes, as a ``torch.library.Library`` operator with a Python CPU implementation, and
as a ``torch.library.custom_op``; beside them one DLRM table's forward
(``LookupLinear(100_000, 16, sparse=True)``, 128 bags of 10 indices).
Every method runs once per round in the same order after a warm-up; each time is the median
over the rounds of this thread's CPU time per call, on one torch thread.

Then per training step of that table (forward, backward, ``Adagrad(fused=True)`` step, and
``fused=False``): the step's time, the C calls it makes through ctypes (counted by wrapping
every entry point the kernels look up; none where the C++ operators are loaded), and what the
step would cost more if each of those calls went through a Python-implemented operator (calls
x the operator's extra time per call).

Last, the same table's lookup as the ``lookuplinear::bag_lookup`` operator itself, registered
from C++ (``ops/csrc/ops.cpp``) where the extension is built, else from Python (the line says
which), under ``torch.inference_mode`` (no autograd layer) and with the table requiring grad
(its C++ autograd kernel, or the Python formula registered around it), beside
``nn.EmbeddingBag``'s forward on the same bags (``mode="sum"``).

And two host passes each called both ways: the offsets check that every batch constructor
runs (``ll_offsets_ok`` on 129 offsets: through ctypes, as the constructors call it, and as the
operator ``lookuplinear::offsets_ok``), and a one-ID keyed batch of 26 features x 128 examples
turned into rows (``lookuplinear.ops.one_id_rows``, which calls the operator
``lookuplinear::one_id_rows`` where the extension is loaded, against its ctypes path).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from lookuplinear import LookupLinear
from lookuplinear.ops import _clib, _extension, _inputs, one_id_rows
from lookuplinear.ops._clib import function
from lookuplinear.optim import Adagrad
from lookuplinear.report.machine import format_machine, machine_info


def _count_c_calls(step: Callable[[], object]) -> int:
    """The C calls one run of ``step`` makes: every module of the package that looked up
    :func:`lookuplinear.ops._clib.function` gets a counting one for the run."""
    calls = 0

    def counting(name: str, variant: str = "") -> Callable[..., object]:
        fn = function(name, variant)

        def call(*args: object) -> object:
            nonlocal calls
            calls += 1
            return fn(*args)
        return call

    users = [m for name, m in list(sys.modules.items())
             if name.startswith("lookuplinear.") and getattr(m, "function", None) is function]
    for m in users:
        m.function = counting  # type: ignore[attr-defined]
    try:
        step()
    finally:
        for m in users:
            m.function = function  # type: ignore[attr-defined]
    return calls


def _step(fused: bool) -> Callable[[], object]:
    """One training step of a DLRM table: forward, backward, the optimizer's step."""
    torch.manual_seed(0)
    table = LookupLinear(100_000, 16, bias=False, sparse=True)
    opt = Adagrad(table.parameters(), lr=0.01, fused=fused)
    indices, offsets = torch.randint(0, 100_000, (1280,)), torch.arange(0, 1280, 10)

    def step() -> None:
        table(indices, offsets).sum().backward()
        opt.step()
        opt.zero_grad()
    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=2000, help="calls per timed sample")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(format_machine(machine_info()))
    assert _clib.load() is not None, "the C kernels are not built"
    gather = function("ll_gather_rows", "f32")

    def direct(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        out = torch.empty(*r.shape, w.shape[1], dtype=w.dtype)
        gather(w.data_ptr(), w.shape[0], w.shape[1], r.data_ptr(), r.numel(), out.data_ptr())
        return out

    lib = torch.library.Library("lookuplinear_bench", "FRAGMENT")
    lib.define("gather_rows(Tensor weight, Tensor rows) -> Tensor")
    lib.impl("gather_rows", direct, "CPU")
    library_op = torch.ops.lookuplinear_bench.gather_rows.default

    @torch.library.custom_op("lookuplinear_bench::gather_rows_custom", mutates_args=())
    def custom(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return direct(w, r)

    torch.manual_seed(0)
    w, r = torch.randn(1000, 16), torch.randint(0, 1000, (4,))
    table = LookupLinear(100_000, 16, bias=False, sparse=True)
    indices, offsets = torch.randint(0, 100_000, (1280,)), torch.arange(0, 1280, 10)
    weight = table.weight
    csr = torch.cat([offsets, torch.tensor([indices.numel()])])
    bag_op = torch.ops.lookuplinear.bag_lookup.default
    stock = torch.nn.EmbeddingBag.from_pretrained(weight.detach().clone(), freeze=False,
                                                  mode="sum")

    def op_inference() -> object:
        with torch.inference_mode():
            return bag_op(weight, indices, csr)

    check = function("ll_offsets_ok", "i64")
    n_feat = 26
    ids, ones = torch.randint(0, 1000, (n_feat * 128,)), torch.arange(n_feat * 128 + 1)
    shift, limit = torch.arange(n_feat) * 1000, torch.full((n_feat,), 1000)
    methods: dict[str, Callable[[], object]] = {
        "C kernel, direct (ctypes)": lambda: direct(w, r),
        "C kernel, torch.library.Library op": lambda: library_op(w, r),
        "C kernel, torch.library.custom_op": lambda: custom(w, r),
        "DLRM table forward": lambda: table(indices, offsets),
        "DLRM table step, Adagrad(fused=True)": _step(True),
        "DLRM table step, Adagrad(fused=False)": _step(False),
        "bag_lookup operator, inference_mode": op_inference,
        "bag_lookup operator, table requires grad": lambda: bag_op(weight, indices, csr),
        "nn.EmbeddingBag forward (sum)": lambda: stock(indices, offsets),
        "offsets check, ctypes": lambda: check(csr.data_ptr(), csr.numel(), 1280, True),
        "offsets check, operator": lambda: torch.ops.lookuplinear.offsets_ok.default(
            csr, 1280, True),
        "one-ID rows 26 x 128, ops.one_id_rows": lambda: one_id_rows(ids, ones, n_feat, shift,
                                                                     limit),
        "one-ID rows 26 x 128, ctypes": lambda: _inputs.direct_one_id_rows(
            ids, ones, n_feat, shift, limit),
    }
    calls = {k: _count_c_calls(f) for k, f in methods.items() if k.startswith("DLRM table step")}
    times: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(args.rounds):
        for name, f in methods.items():
            for _ in range(50):
                f()
            start = time.thread_time()
            for _ in range(args.calls):
                f()
            times[name].append((time.thread_time() - start) / args.calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("lookuplinear operators registered from "
          + ("C++ (the _C extension)" if _extension.LOADED else
             f"Python ({_extension.PROBLEM or 'LOOKUPLINEAR_OPS=python'})"))
    for name, us in med.items():
        print(f"{name:41s} {us:7.2f} us")
    base, fwd = med["C kernel, direct (ctypes)"], med["DLRM table forward"]
    for name in ("C kernel, torch.library.Library op", "C kernel, torch.library.custom_op"):
        extra = med[name] - base
        print(f"{name}: +{extra:.2f} us a call, {100 * extra / fwd:.0f}% of a table's forward")
        for step, n in calls.items():
            print(f"  {step}: {n} C calls, +{n * extra:.2f} us, "
                  f"{100 * n * extra / med[step]:.1f}% of its {med[step]:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
