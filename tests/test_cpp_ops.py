"""The C++ operators (``lookuplinear.ops._C``, ``csrc/ops.cpp``): the same bits as the Python
registration on the CPU, a stale build never loaded, and an AOTInductor package that runs where
lookuplinear cannot be imported (``make test`` runs the operator tests on the other registration
too)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmark_scripts import setup_py
from forms import SPLIT_BACKENDS

import lookuplinear
import lookuplinear.ops.library as library
from lookuplinear import KeyedBags, LookupCollection, TableConfig
from lookuplinear.ops import (
    _clib,
    _dualcd,
    _extension,
    _idmap,
    one_id_rows,
    segment_triples,
    token_ids,
)

ops = torch.ops.lookuplinear
ROOT = Path(__file__).resolve().parent.parent
needs_cpp = pytest.mark.skipif(not library.CPP, reason="the C++ operators are not loaded "
                               f"({_extension.PROBLEM})")


def _same_bits(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)):  # every output
        return len(a) == len(b) and all(_same_bits(x, y) for x, y in zip(a, b, strict=True))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(-1).view(torch.uint8) if a.is_floating_point() else a,
        b.view(-1).view(torch.uint8) if b.is_floating_point() else b)


def op_cases() -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    g = torch.Generator().manual_seed(3)
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for dtype in (torch.float32, torch.float64):
        w = torch.randn(50, 16, dtype=dtype, generator=g)
        idx = torch.randint(0, 50, (40,), generator=g)
        off = torch.tensor([0, 3, 3, 10, 22, 40])
        psw = torch.rand(40, dtype=dtype, generator=g)
        cases += [
            ("bag_lookup", (w, idx), {}),
            ("bag_lookup", (w, idx.reshape(8, 5).int()), {}),
            ("bag_lookup", (w, idx, off, psw, int(idx[0])), {}),
            ("bag_lookup", (w, idx, off[:-1]), {"include_last_offset": False}),
            ("bag_max", (w, idx, off), {}),
            ("bag_max", (w, idx.int(), off.int()), {}),
            ("bag_max_arg", (w, idx, off), {}),
            ("bag_max_arg", (w, idx.int(), off.int()), {}),
            ("bag_max_backward", (torch.randn(5, 16, dtype=dtype, generator=g),
                                  library._bag_max_arg_twin(w, idx, off)[1], 50), {}),
            ("mode_weights", (off, psw, True, dtype, 40), {}),
            ("mode_weights", (off.int(), None, False, dtype, 40), {}),
            ("row_sums", (torch.randn(5, 16, dtype=dtype, generator=g), idx, off, psw, None, 50),
             {}),
            ("row_sums", (torch.randn(40, 16, dtype=dtype, generator=g), idx, None, None,
                          int(idx[1]), 50), {}),
        ]
    a, b = torch.randn(6, 2), torch.randn(3, 3)
    cases.append(("in_feature_order", ([a, b], [2, 0], list(segment_triples(
        [(0, 2), (2, 3), (1, 2)], [2, 2, 3]))), {}))
    cases.append(("in_feature_order", ([a, b], [2, 0], []), {}))  # no columns: (N, 0)
    cases.append(("in_feature_order_backward", (torch.randn(3, 7), [2, 0], list(segment_triples(
        [(0, 2), (2, 3), (1, 2)], [2, 2, 3]))), {}))
    for dtype in (torch.float32, torch.float64):
        cases.append(("gather_groups", ([torch.randn(9, 2, dtype=dtype, generator=g),
                                         torch.randn(6, 3, dtype=dtype, generator=g)],
                                        [torch.randint(0, 9, (4, 2), generator=g),
                                         torch.randint(0, 6, (4, 1), generator=g).int()],
                                        [0, 5, 2], 7), {}))
    table = _idmap.empty_table(16)
    _idmap.set_values(table, torch.tensor([5, 10**12, -3]), torch.tensor([0, 1, 2]))
    keys = torch.tensor([[10**12, 7], [-3, 5]])
    cases.append(("idmap_find", (table, keys), {}))
    cases.append(("idmap_rows", (torch.tensor([3, -1, 0, -1, -1]),
                                 torch.tensor([10, 10**12, 7, -5, -(2**63)]), 7), {}))
    for dtype in (torch.int64, torch.int32):  # 2 features of 3 bags, an empty bag among them
        cases.append(("shifted_rows", (torch.tensor([4, 0, 1, 2, 2, 0, 1], dtype=dtype),
                                       torch.tensor([0, 2, 2, 3, 5, 6, 7], dtype=dtype), 2,
                                       torch.tensor([0, 5]), torch.tensor([5, 3])), {}))
        # 3 features of 2 bags of one ID: example order, and placed for two groups
        one = (torch.tensor([4, 0, 1, 2, 2, 0], dtype=dtype), torch.arange(7, dtype=dtype), 3,
               torch.tensor([0, 5, 0]), torch.tensor([5, 3, 4]))
        cases.append(("one_id_rows", one, {}))
        cases.append(("one_id_rows", (*one, torch.tensor([[0, 2], [1, 2], [4, 1]])), {}))
        # 3 features of 2 bags (empty ones among them) in two groups: features 2, 0 and 1
        for offsets_dtype in (dtype, torch.int64 if dtype == torch.int32 else torch.int32):
            cases.append(("group_order", (torch.tensor([4, 0, 1, 2, 2, 0, 7], dtype=dtype),
                                          torch.tensor([0, 2, 2, 3, 6, 6, 7],
                                                       dtype=offsets_dtype),
                                          3, [2, 0, 1], [2, 1]), {}))
    return cases


PYTHON_CPU = {"bag_lookup": library._bag_lookup_cpu, "bag_max": library._bag_max_cpu,
              "bag_max_arg": library._bag_max_arg_cpu,
              "bag_max_backward": library._bag_max_backward_cpu,
              "mode_weights": library._mode_weights_cpu, "row_sums": library._row_sums_cpu,
              "in_feature_order": library._in_feature_order_cpu,
              "in_feature_order_backward": library._in_feature_order_backward_cpu,
              "gather_groups": library._gather_groups_cpu,
              "idmap_find": _idmap.find, "idmap_rows": library._idmap_rows_cpu,
              "shifted_rows": library._shifted_rows_cpu, "one_id_rows": library._one_id_rows_cpu,
              "group_order": library._group_order_cpu}


def test_bag_lookup_refuses_weights_without_offsets() -> None:
    """Per-entry weights scale the entries of bags: without offsets (an index lookup) the
    operator refuses them, its CPU kernel and every other device's alike (the forward ignored
    them and the backward applied them; weights requiring grad ended the process)."""
    w = torch.randn(5, 3, requires_grad=True)
    idx, psw = torch.tensor([1, 2, 1]), torch.tensor([2.0, 0.0, -1.0], requires_grad=True)
    other = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
    for call in (ops.bag_lookup.default,
                 lambda *a: ops.bag_lookup.default.redispatch(other, *a)):
        with pytest.raises(ValueError, match="weights and no offsets"):
            call(w, idx, None, psw)


@pytest.mark.parametrize(("name", "args", "kw"), op_cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(op_cases())])
def test_every_other_devices_kernel_equals_the_cpu_one(
        name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    """The kernel every device but the CPU runs (its torch-op twin: CUDA's, of the
    registration loaded) equals the CPU kernel, up to float rounding (the C kernels fuse
    multiply-adds), on CPU tensors: dispatched to a backend with no kernel of its own
    (``PrivateUse1``), as a GPU's tensors are. A suite without a GPU checks them so."""
    other = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
    twin = getattr(ops, name).default.redispatch(other, *args, **kw)
    cpu = getattr(ops, name)(*args, **kw)
    if isinstance(cpu, torch.Tensor):
        twin, cpu = (twin,), (cpu,)
    assert len(twin) == len(cpu)
    for t, c in zip(twin, cpu, strict=True):
        torch.testing.assert_close(t, c, rtol=1e-6, atol=1e-6)


@needs_cpp
@pytest.mark.parametrize(("name", "args", "kw"), op_cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(op_cases())])
def test_cpp_operator_equals_the_python_registration_to_the_bit(
        name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    if SPLIT_BACKENDS and name == "row_sums":
        pytest.skip("LOOKUPLINEAR_BACKEND=torch: the Python registration's row sums are torch "
                    "ops, the C++ kernel's C (fused multiply-adds): equal to rounding only")
    ours = getattr(ops, name)(*args, **kw)
    python = PYTHON_CPU[name](*args, **kw)
    assert _same_bits(ours, python), name
    torch.library.opcheck(getattr(ops, name).default, args, kw)


OPERATORS = sorted({c[0] for c in op_cases()} | {"assert_bags"})
#: the dispatch key set of a CUDA tensor: redispatched with it, an operator runs its CUDA
#: kernel (on CPU tensors here, where the CUDA kernel is a torch-op twin)
CUDA_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)


def test_every_operator_has_a_cuda_kernel_in_the_library_alone() -> None:
    """In a process that loads the shared library and nothing of lookuplinear (an AOTInductor
    package served on a GPU), every operator has a kernel for CUDA tensors."""
    if _extension.library_path() is None or not library.CPP:
        pytest.skip(f"the C++ operators are not loaded ({_extension.PROBLEM})")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["lookuplinear"] = None  # cannot be imported
        import torch
        torch.ops.load_library({_extension.library_path()!r})
        for name in {OPERATORS!r}:
            assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(
                "lookuplinear::" + name, "CUDA"), name
        print("every operator")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "every operator" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize(("name", "args", "kw"), op_cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(op_cases())])
def test_cuda_kernel_equals_the_cpu_one(name: str, args: tuple[Any, ...], kw: dict[str, Any]
                                        ) -> None:
    """Each operator's CUDA kernel (its torch-op twin, on either registration), run on CPU
    tensors: the CPU kernel's result (to the bit for the integer operators)."""
    op = getattr(ops, name).default
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(op.name(), "CUDA")
    cudas = op.redispatch(CUDA_KEYS, *args, **kw)
    cpus = op(*args, **kw)
    if isinstance(cpus, torch.Tensor):  # row_sums: (rows, values)
        cudas, cpus = (cudas,), (cpus,)
    for cuda, cpu in zip(cudas, cpus, strict=True):
        if cpu.is_floating_point():
            torch.testing.assert_close(cuda, cpu, rtol=1e-12 if cpu.dtype == torch.float64
                                       else 1e-5, atol=1e-6)
        else:
            assert _same_bits(cuda, cpu), name


@pytest.mark.parametrize("fallback_rows", [1, 7, 1000, 2**31 + 11])
def test_idmap_rows_cuda_kernel_hashes_as_the_cpu_one(fallback_rows: int) -> None:
    """The torch-op MurmurHash3 of the CUDA kernel: the C one's rows, over the whole int64
    range of keys (the extremes too)."""
    g = torch.Generator().manual_seed(8)
    keys = torch.cat([torch.randint(-2**63, 2**63 - 1, (5000,), generator=g),
                      torch.tensor([0, -1, 2**63 - 1, -2**63, 2**32, -2**32])])
    found = torch.where(keys % 3 == 0, keys.abs() % 100, -1)
    cuda = ops.idmap_rows.default.redispatch(CUDA_KEYS, found, keys, fallback_rows)
    assert _same_bits(cuda, ops.idmap_rows(found, keys, fallback_rows))


@needs_cpp
def test_idmap_rows_cuda_kernel_without_fallback_rows() -> None:
    """``fallback_rows=0``: right where every key is found, else the CPU kernel's error."""
    keys = torch.tensor([4, 5])
    out = ops.idmap_rows.default.redispatch(CUDA_KEYS, torch.tensor([1, 0]), keys, 0)
    assert out.tolist() == [1, 0]
    with pytest.raises((ValueError, RuntimeError), match="fallback_rows, which must be >= 1"):
        ops.idmap_rows.default.redispatch(CUDA_KEYS, torch.tensor([1, -1]), keys, 0)


class PythonBagLookup(torch.autograd.Function):
    """``bag_lookup`` with the Python registration's backward (``library._bag_lookup_backward``),
    to compare with the C++ one."""

    @staticmethod
    def forward(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
                weights: torch.Tensor | None, padding_idx: int | None, mode: int,
                include_last_offset: bool) -> torch.Tensor:
        return library._bag_lookup_cpu(weight, indices, offsets, weights, padding_idx, mode,
                                       include_last_offset=include_last_offset)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        library._bag_lookup_setup(ctx, inputs[:6], {"include_last_offset": inputs[6]}, output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return (*library._bag_lookup_backward(ctx, grad), None, None)


def backward_cases() -> list[tuple[str, dict[str, Any]]]:
    idx = torch.randint(0, 30, (40,), generator=torch.Generator().manual_seed(5))
    off = torch.tensor([0, 3, 3, 10, 22, 40])
    return [
        ("index", {"indices": idx}),
        ("index 2-D int32", {"indices": idx.reshape(8, 5).int()}),
        ("index padding", {"indices": idx, "padding_idx": int(idx[0])}),
        ("bags", {"indices": idx, "offsets": off}),
        ("bags weighted padding", {"indices": idx, "offsets": off, "weights": True,
                                   "padding_idx": int(idx[1])}),
        ("bags weighted", {"indices": idx.int(), "offsets": off.int(), "weights": True}),
        ("start offsets", {"indices": idx, "offsets": off[:-1], "include_last_offset": False}),
        ("start offsets weighted", {"indices": idx, "offsets": off[:-1], "weights": True,
                                    "include_last_offset": False}),
        ("bags mean", {"indices": idx, "offsets": off, "mode": 1}),
        ("bags mean padding", {"indices": idx, "offsets": off, "padding_idx": int(idx[1]),
                               "mode": 1}),
        ("start offsets mean", {"indices": idx.int(), "offsets": off[:-1].int(),
                                "include_last_offset": False, "mode": 1}),
    ]


def _grads(lookup: Any, dtype: torch.dtype, kw: dict[str, Any], create_graph: bool
           ) -> list[torch.Tensor]:
    """The weight's gradient (its indices and values, uncoalesced), the per-entry weights'
    where they are given, and, under ``create_graph``, their gradients in turn."""
    g = torch.Generator().manual_seed(6)
    weight = torch.randn(30, 7, dtype=dtype, generator=g).requires_grad_()
    psw = (torch.rand(40, dtype=dtype, generator=g).requires_grad_() if kw.get("weights")
           else None)
    out = lookup(weight, kw["indices"], kw.get("offsets"), psw, kw.get("padding_idx"),
                 mode=kw.get("mode", 0), include_last_offset=kw.get("include_last_offset", True))
    inputs = [weight] if psw is None else [weight, psw]
    grad_out = torch.randn(out.shape, dtype=dtype, generator=g).requires_grad_(create_graph)
    grads = torch.autograd.grad(out, inputs, grad_out, create_graph=create_graph)
    gw = grads[0]
    found = [gw._indices(), gw._values(), *grads[1:]]
    if create_graph:  # the gradient's own gradient (values(): differentiable, once coalesced)
        total = gw.coalesce().values().square().sum() + sum(t.square().sum() for t in grads[1:])
        found += torch.autograd.grad(total, [grad_out, *inputs], allow_unused=True,
                                     materialize_grads=True)
    return found


@needs_cpp
@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("name", "kw"), backward_cases(), ids=[c[0] for c in backward_cases()])
def test_cpp_backward_equals_the_python_one_to_the_bit(
        name: str, kw: dict[str, Any], dtype: torch.dtype, create_graph: bool) -> None:
    """``bag_lookup``'s C++ autograd kernel: the Python ``register_autograd`` formula's bits,
    the sparse weight gradient one row per entry, the per-entry weights' gradient, and under
    ``create_graph=True`` a gradient that differentiates to the same bits."""
    ours = _grads(ops.bag_lookup, dtype, kw, create_graph)
    python = _grads(lambda *args, mode, include_last_offset: PythonBagLookup.apply(
        *args, mode, include_last_offset), dtype, kw, create_graph)
    assert len(ours) == len(python)
    for a, b in zip(ours, python, strict=True):
        assert _same_bits(a.to_dense() if a.is_sparse else a,
                          b.to_dense() if b.is_sparse else b), name


class Densified(torch.autograd.Function):
    """The identity, whose backward densifies a sparse gradient (``gradcheck`` compares
    strided ones)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad.to_dense()


@pytest.mark.parametrize(("name", "kw"), backward_cases(), ids=[c[0] for c in backward_cases()])
def test_bag_lookup_gradcheck_and_opcheck(name: str, kw: dict[str, Any]) -> None:
    """float64 gradients against finite differences (the weight's, densified, and the per-entry
    weights'), and ``opcheck``; on whichever registration is loaded."""
    g = torch.Generator().manual_seed(7)
    weight = torch.randn(30, 4, dtype=torch.float64, generator=g, requires_grad=True)
    psw = (torch.rand(40, dtype=torch.float64, generator=g, requires_grad=True)
           if kw.get("weights") else None)
    rest = (kw.get("offsets"), psw, kw.get("padding_idx"), kw.get("mode", 0))
    last = {"include_last_offset": kw.get("include_last_offset", True)}

    def call(w: torch.Tensor, p: torch.Tensor | None = None) -> torch.Tensor:
        return ops.bag_lookup(Densified.apply(w), kw["indices"], rest[0], p, *rest[2:], **last)

    if kw.get("offsets") is not None or kw.get("padding_idx") is None:
        # (an index input reads the padding row, which gets no gradient: F.embedding's)
        assert torch.autograd.gradcheck(call, (weight,) if psw is None else (weight, psw))
    utils = ["test_schema", "test_faketensor"]
    if kw.get("padding_idx") is None:  # data-dependent shapes (test_library.py)
        utils.append("test_aot_dispatch_dynamic")
        if kw.get("offsets") is None and psw is None:
            utils.append("test_aot_dispatch_static")
    torch.library.opcheck(ops.bag_lookup.default, (weight, kw["indices"], *rest), last,
                          test_utils=utils)


@needs_cpp
def test_bag_lookup_has_no_python_autograd_layer() -> None:
    """With the extension loaded, the table's gradient comes from the C++ autograd kernel."""
    weight = torch.randn(10, 3, requires_grad=True)
    out = ops.bag_lookup(weight, torch.tensor([1, 2]), torch.tensor([0, 1, 2]))
    assert type(out.grad_fn).__name__ == "CppFunction"


@needs_cpp
@pytest.mark.parametrize("batch", [{"a": [[1], [2]], "b": [[3], [4]]},
                                   {"a": [[1, 2], [2]], "b": [[3], [4, 5, 5]]}],
                         ids=["one ID", "bags"])
def test_fused_tables_are_looked_up_by_the_cpp_operators(batch: dict[str, Any]) -> None:
    """A collection bound to a ``fused=True`` optimizer is looked up by the C++ operators,
    whose backward (no Python autograd node) hands the tables' gradients to the optimizer:
    no ``.grad``, and the weights of ``fused=False`` to the bit."""
    tables = [TableConfig("a", 10, 2, ["a"]), TableConfig("b", 10, 3, ["b"])]
    kb = KeyedBags.from_dict(batch)
    ends = []
    for fused in (False, True):
        torch.manual_seed(0)
        col = LookupCollection(tables, sparse=True)
        opt = lookuplinear.optim.RowWiseAdagrad(col.parameters(), lr=0.1, fused=fused)
        out = col(kb).values()
        nodes, seen = [out.grad_fn], []
        while nodes:  # every node between the output and the tables is C++
            node = nodes.pop()
            if node is not None and type(node).__name__ != "AccumulateGrad":
                seen.append(type(node).__name__)
                nodes += [fn for fn, _ in node.next_functions]
        assert seen and set(seen) == {"CppFunction"}
        out.pow(2).sum().backward()
        assert all((p.grad is None) == fused for p in col.parameters())
        opt.step()
        ends.append([p.detach().clone() for p in col.parameters()])
    assert all(_same_bits(x, y) for x, y in zip(*ends, strict=True))


def test_fused_binding_of_a_table_gone_is_forgotten() -> None:
    """The operators' record of tables bound to a fused optimizer keeps no table alive, and a
    new table (at whatever address) is not taken for a bound one that is gone."""
    import gc
    import weakref

    layer = lookuplinear.LookupLinear(10, 2, sparse=True, bias=False)
    opt = lookuplinear.optim.SGD(layer.parameters(), lr=0.1, fused=True)
    gone = weakref.ref(layer.weight)
    del layer, opt
    gc.collect()
    assert gone() is None
    for _ in range(20):  # fresh tables: their gradient is stored, never deferred
        weight = torch.nn.Parameter(torch.ones(10, 2))
        ops.bag_lookup(weight, torch.tensor([1, 1]), torch.tensor([0, 2])).sum().backward()
        assert weight.grad is not None and weight.grad.is_sparse


def test_routed_maps_the_operators_errors_to_the_projects(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Where Python calls the operator (a graph being recorded), an index outside the table is
    a LookupIndexError, on either registration."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    routed = library.routed("bag_lookup")(lambda *args, **kwargs: None)
    weight = torch.randn(10, 3, requires_grad=True)
    with pytest.raises(lookuplinear.LookupIndexError, match=r"index 12 at indices\[1\]"):
        routed(weight, torch.tensor([1, 12]))
    with pytest.raises(lookuplinear.OffsetsError, match="offsets must start at 0"):
        library.routed("bag_max")(lambda *args: None)(weight, torch.tensor([1, 2]),
                                                       torch.tensor([0, 3]))


@needs_cpp
def test_eager_calls_of_the_read_only_operators_are_the_cpp_operators() -> None:
    """Where the extension is loaded, lookuplinear's eager ``mode_weights``, ``idmap_find`` and
    ``idmap_rows`` call the C++ operators, with no Python frame between (an ``Autograd``
    fallthrough: the outputs never require grad), equal to the direct path to the bit, and
    their errors are the project's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    from lookuplinear.ops import _inputs
    off, w = torch.tensor([0, 2, 2, 5]), torch.rand(5, requires_grad=True)
    table = _idmap.empty_table(8)
    _idmap.set_values(table, torch.tensor([7, 99]), torch.tensor([0, 1]))
    keys = torch.tensor([99, 5, 7])
    found = _idmap.find(table, keys)
    calls = {
        "mode_weights": (lambda: library.mode_weights(off, w, True, torch.float32, 5),
                         _inputs.mode_weights(off, w, True, torch.float32, 5)),
        "idmap_find": (lambda: library.idmap_find(table, keys), found),
        "idmap_rows": (lambda: library.idmap_rows(found, keys, 3),
                       library._idmap_rows_cpu(found, keys, 3)),
    }
    for name, (call, direct) in calls.items():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"lookuplinear::{name}",
                                                               "Autograd")
        with Seen() as seen:
            out = call()
        assert seen.ops == [f"lookuplinear.{name}.default"], seen.ops
        assert not out.requires_grad and _same_bits(out, direct)
    with pytest.raises(lookuplinear.OffsetsError, match="offsets must start at 0"):
        library.mode_weights(torch.tensor([0, 2, 9]), None, False, torch.float32, 5)
    with pytest.raises(lookuplinear.InputValueError, match=r"fallback_rows .* must be >= 0"):
        library.idmap_rows(found, keys, -1)


def test_the_source_distribution_ships_every_source_the_build_compiles() -> None:
    """MANIFEST.in takes every source of ``csrc`` that setup.py compiles (the C kernels,
    ``ops.cpp``, the ``.cu`` files) into the sdist: an install from it builds what an install
    from the repository builds."""
    import fnmatch

    csrc = "src/lookuplinear/ops/csrc"
    patterns = [line.split()[2:] for line in (ROOT / "MANIFEST.in").read_text().splitlines()
                if line.split()[:2] == ["recursive-include", csrc]]
    assert len(patterns) == 1, patterns
    sources = sorted(p.name for p in (ROOT / csrc).iterdir() if p.is_file()
                     and p.suffix in (".c", ".h", ".cpp", ".cu"))
    assert {".c", ".cpp", ".cu"} <= {Path(s).suffix for s in sources}
    left_out = [s for s in sources if not any(fnmatch.fnmatch(s, p) for p in patterns[0])]
    assert left_out == []


def test_a_build_for_another_torch_is_never_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version written beside the library is compared before it is opened."""
    monkeypatch.setattr(_clib, "NO_C", False)
    monkeypatch.setattr(_extension, "library_path", lambda: "/nonexistent/_C.so")
    monkeypatch.setattr(_extension, "torch_version", lambda path: "1.0.0")
    loaded, why = _extension._load()
    assert not loaded and why is not None and "built for torch 1.0.0" in why
    monkeypatch.setattr(_extension, "library_path", lambda: None)
    monkeypatch.setattr(_extension, "REFUSAL", "/nonexistent/_C.refused")
    assert "was not built" in str(_extension._load()[1])


def test_a_build_left_out_is_named_with_the_reason_the_build_wrote(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the install's build refused the library (setup.py's probe), the loader's reason
    is the one the build wrote beside the package (``_C.refused``), not "not built"."""
    monkeypatch.setattr(_clib, "NO_C", False)
    monkeypatch.setattr(_extension, "library_path", lambda: None)
    refusal = tmp_path / "_C.refused"
    refusal.write_text("the C++ extension built at install time was left out: it did not "
                       "survive an error one of its operators raised (exit status -11)\n")
    monkeypatch.setattr(_extension, "REFUSAL", str(refusal))
    loaded, why = _extension._load()
    assert not loaded and why is not None and why.endswith("(exit status -11)"), why


@needs_cpp
def test_a_build_whose_errors_crash_is_not_installed(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """The build makes one operator of the library it built raise, in a process of its own:
    the library is installed only where the error reaches Python (a compiler whose C++ runtime
    differs from torch's can build one whose first error kills the process)."""
    raise_crashes = setup_py(monkeypatch)["raise_crashes"]
    assert raise_crashes(_extension.library_path()) is None
    not_a_library = tmp_path / "_C.so"
    not_a_library.write_bytes(b"\x7fELF broken")
    why = raise_crashes(str(not_a_library))
    assert why is not None and "exit status 1" in why, why
    monkeypatch.setitem(raise_crashes.__globals__, "RAISE_PROBE",
                        "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    why = raise_crashes(_extension.library_path())
    assert why is not None and f"exit status {-11}" in why, why


@needs_cpp
@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None,
                    reason="needs g++ and nm")
def test_a_refused_build_with_a_cxx_runtime_of_its_own_names_the_compiler_to_use(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the compiler linked a libstdc++ into the library (a ``-static-libstdc++`` build:
    hundreds of the runtime's own symbols in it), the refusal says so and names a compiler
    that links the shared one; a library linked as usual defines none of them."""
    setup = setup_py(monkeypatch)
    own = setup["own_cxx_runtime"]
    assert own(_extension.library_path()) == 0
    source = tmp_path / "fmt.cpp"
    source.write_text("#include <sstream>\n#include <string>\n"
                      "std::string f(long x) { std::ostringstream s; s << x; return s.str(); }\n")
    static = tmp_path / "static.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-static-libstdc++", str(source), "-o",
                    str(static)], check=True, capture_output=True)
    assert own(str(static)) > 100
    monkeypatch.setitem(setup, "raise_crashes", lambda library: "exit status -11: no message")
    builder = types.SimpleNamespace(build_temp=str(tmp_path),
                                    version_file=setup["BuildKernels"].version_file)
    refusal = tmp_path / "_C.refused"
    with pytest.raises(setup["CompileError"], match="CC=gcc CXX=g\\+\\+"):
        setup["BuildKernels"].check_operators(builder, str(static), str(refusal))
    assert "a libstdc++ of its own" in refusal.read_text()


FEATURES = ["user", "item", "tag"]


def served_batch(n: int, seed: int, raw: bool = False) -> KeyedBags:
    """``n`` examples of the three features, 0 to 3 IDs a bag; ``raw``: the user IDs are large
    raw IDs (an IdMap's), some never seen in training, and every entry has a weight."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (3 * n,), generator=g)
    values = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
    if not raw:
        return KeyedBags(FEATURES, values, lengths=lengths)
    n_user = int(lengths[:n].sum())
    values[:n_user] = values[:n_user] * 10**12 + 7
    return KeyedBags(FEATURES, values, lengths=lengths,
                     weights=torch.rand(values.numel(), generator=g))


class Served(torch.nn.Module):
    """Every kind of table a served model holds, side by side: a layer with a sparse sum table
    and one with a max table; a collection of a sum, a mean and a max table; its copy quantized
    to int8 and int4; a collection whose user table is keyed by an IdMap (raw IDs, weighted
    bags, a sqrtn table that two features share). Its inputs are tensors: a package runs with
    them where the batch types are not registered (``KeyedBags`` is built inside)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.sums = lookuplinear.LookupLinear(100, 4, sparse=True)
        self.maxes = lookuplinear.LookupLinear(30, 3, mode="max")
        self.tables = LookupCollection([TableConfig("user", 20, 4, ["user"]),
                                        TableConfig("item", 30, 4, ["item"], mode="mean"),
                                        TableConfig("tag", 25, 4, ["tag"], mode="max")])
        self.quantized = self.tables.quantize({"user": "int8", "item": "int4", "tag": "int8"})
        self.mapped = LookupCollection([
            TableConfig("user", 40, 4, ["user"], hashing="map", fallback_rows=3),
            TableConfig("item", 30, 4, ["item", "tag"], mode="sqrtn")])
        with torch.no_grad():
            self.mapped(served_batch(6, 0, raw=True))  # in training mode the map takes IDs

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, other: torch.Tensor,
                other_offsets: torch.Tensor, values: torch.Tensor, kb_offsets: torch.Tensor,
                raw: torch.Tensor, raw_offsets: torch.Tensor, raw_weights: torch.Tensor
                ) -> torch.Tensor:
        kb = KeyedBags(FEATURES, values, offsets=kb_offsets)
        raw_kb = KeyedBags(FEATURES, raw, offsets=raw_offsets, weights=raw_weights)
        return torch.cat([self.sums(ids, offsets), self.maxes(other, other_offsets),
                          self.tables(kb).values(), self.quantized(kb).values(),
                          self.mapped(raw_kb).values()], 1)


def served_args(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The inputs of :class:`Served` for ``n`` examples (nn.EmbeddingBag's start offsets for
    the layers, some bags empty)."""
    g = torch.Generator().manual_seed(seed)

    def starts(nnz: int) -> torch.Tensor:
        inner = torch.sort(torch.randint(0, nnz + 1, (n - 1,), generator=g)).values
        return torch.cat([torch.zeros(1, dtype=torch.long), inner])

    ids = torch.randint(0, 100, (3 * n,), generator=g)
    other = torch.randint(0, 30, (n,), generator=g)
    kb, raw = served_batch(n, seed), served_batch(n, seed + 100, raw=True)
    assert raw.weights is not None
    return (ids, starts(3 * n), other, starts(n), kb.values, kb.offsets, raw.values, raw.offsets,
            raw.weights)


def bad_served_args(args: tuple[torch.Tensor, ...]) -> dict[str, tuple[torch.Tensor, ...]]:
    """``args`` of :class:`Served` with the offsets of the sparse layer's bags or of the keyed
    batch bad in one way each."""
    layer, keyed = args[1], args[5]

    def with_keyed(offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*args[:5], offsets, *args[6:])

    decreasing = keyed.clone()
    decreasing[1] = keyed[-1] + 1
    return {
        "layer: decreasing": (args[0], torch.flip(layer, [0]), *args[2:]),
        "layer: past the indices": (args[0], layer + args[0].numel(), *args[2:]),
        "keyed: decreasing": with_keyed(decreasing),
        "keyed: first not 0": with_keyed(keyed.clamp(min=1)),
        "keyed: last past the values": with_keyed(torch.cat([keyed[:-1], keyed[-1:] + 1])),
        "keyed: last short of the values": with_keyed(keyed.clamp(max=int(keyed[-1]) - 1)),
        "keyed: bags not a multiple of the keys": with_keyed(keyed[:-1].clone()),
    }


@needs_cpp
def test_aoti_package_runs_where_lookuplinear_cannot_be_imported(tmp_path: Path) -> None:
    """A model of every kind of table (:class:`Served`), exported with dynamic batch sizes,
    compiled by AOTInductor into one package and run in a fresh process that loads the
    extension's shared library alone (``import lookuplinear`` fails there): the module's
    outputs to the bit, on the example batch and on a batch of another size. The package,
    which reads no input constraint, raises on offsets that do not cut the entries into bags
    and on a keyed batch whose bags are not N per key."""
    model = Served().eval()
    args = served_args(4, 0)
    auto = torch.export.Dim.AUTO
    program = torch.export.export(model, args, dynamic_shapes=tuple({0: auto} for _ in args))
    targets = {str(n.target) for m in program.graph_module.modules()
               if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes}
    assert {"lookuplinear.bag_lookup.default", "lookuplinear.bag_max.default",
            "lookuplinear.mode_weights.default", "lookuplinear.in_feature_order.default",
            "lookuplinear.idmap_find.default",
            "quantized.embedding_bag_4bit_rowwise_offsets.default"} <= targets, targets
    # the int8 rows dequantized by PyTorch's kernel, as the module does (not by generated code);
    # the wrapper, which calls the kernels and the operators, unoptimised: 7 s less to build
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "served.pt2"),
        inductor_configs={"fallback_embedding_bag_byte_unpack": True,
                          "aot_inductor.compile_wrapper_opt_level": "O0"})
    batches = [args, served_args(7, 1)]
    with torch.no_grad():
        expected = [model(*b) for b in batches]
    torch.save({"batches": batches, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["lookuplinear"] = None  # cannot be imported
        import torch
        try:
            import lookuplinear.ops
        except ImportError:
            pass
        else:
            raise AssertionError("lookuplinear was imported")
        torch.ops.load_library({_extension.library_path()!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        runner = torch._inductor.aoti_load_package({package!r})
        for batch, expected in zip(io["batches"], io["expected"]):
            out = runner(*batch)
            assert out.shape == expected.shape and torch.equal(
                out.view(torch.int32), expected.view(torch.int32)), (out - expected).abs().max()
        assert not [m for m in sys.modules if m.startswith("lookuplinear")
                    and sys.modules[m] is not None]
        print("served")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "served" in run.stdout, run.stdout + run.stderr
    runner = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        for name, bad in bad_served_args(args).items():
            with pytest.raises(RuntimeError):
                runner(*bad)
                pytest.fail(name)


# ---- the host operators (hashing, n-grams, input checks, dual coordinate descent) ---------------


def _bytes_operands(items: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.tensor(list(b"".join(items)), dtype=torch.uint8)
    starts = torch.tensor([0, *itertools.accumulate(map(len, items))], dtype=torch.int64)
    return data, starts


def _count_rows_operands(texts: list[list[str]], word_ngrams: int, buckets: int,
                         index_dtype: torch.dtype) -> tuple[Any, ...]:
    """``count_rows``' operands for tokenized texts, every other distinct word a column."""
    tokens = token_ids(texts)
    data, starts = _bytes_operands([w.encode() for w in tokens.unique])
    column = torch.tensor([k // 2 if k % 2 == 0 else -1 for k in range(len(tokens.unique))],
                          dtype=torch.int64)
    n_words = (len(tokens.unique) + 1) // 2
    return (torch.from_numpy(tokens.ids), torch.from_numpy(tokens.doc_ptr), column, data,
            starts, word_ngrams, buckets, n_words, index_dtype)


def _dual_cd_operands(loss: int, n_out: int, index_dtype: torch.dtype,
                      per_output: bool = False) -> tuple[Any, ...]:
    """One epoch's operands, half-way through a solve (nonzero duals and weights);
    ``per_output``: one ``diag`` a row and output, a quarter of them inf (held at 0)."""
    g = torch.Generator().manual_seed(11)
    n, n_features = 12, 9
    lengths = torch.randint(0, 4, (n,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(index_dtype)
    indices = torch.randint(0, n_features, (int(lengths.sum()),), generator=g).to(index_dtype)
    data = torch.rand(indices.numel(), generator=g)
    target = (torch.randint(0, 2, (n, n_out), generator=g) * 2 - 1).double()
    dual = torch.rand(n, n_out, dtype=torch.float64, generator=g) * (loss == 0)
    diag = torch.full((n,), 0.5, dtype=torch.float64)
    if per_output:
        diag = torch.rand(n, n_out, dtype=torch.float64, generator=g) + 0.2
        fixed = torch.rand(n, n_out, generator=g) < 0.25
        diag[fixed], dual[fixed] = torch.inf, 0.0
    return (torch.randn(n_features, n_out, generator=g) * 0.1,
            torch.randn(n_out, generator=g) * 0.1, indptr, indices, data,
            torch.randperm(n, generator=g), n - 2,
            torch.rand(n, dtype=torch.float64, generator=g) + 1,
            target, diag, dual, loss, 0.3)


def _admit_operands(capacity: int, keys: list[int], before: list[int] | None = None
                    ) -> tuple[Any, ...]:
    """``idmap_admit_``'s operands: a map of ``capacity`` rows (in a table of 16 slots, two
    fallback rows, 3 calls so far) holding ``before``'s keys, and ``keys`` to admit."""
    state = (_idmap.empty_table(16), torch.zeros(capacity, dtype=torch.long),
             torch.full((capacity,), -1, dtype=torch.long), torch.tensor(0), torch.tensor(3))
    table, row_id, last_used, assigned, clock = state
    if before:
        library.HOST_TWINS["idmap_admit_"](table, torch.tensor(before, dtype=torch.long),
                                           row_id, last_used, assigned, clock, 2)
    return table, torch.tensor(keys, dtype=torch.long), row_id, last_used, assigned, clock, 2


def host_op_cases() -> list[tuple[str, tuple[Any, ...]]]:
    strings = [b"", b"a", b"ab", b"abc", b"abcd", b"a b", "\u00e9t\u00e9 \u65e5\u672c".encode(),
               bytes(range(256)), b"x" * 37]
    texts = [["a", "b", "a", "c"], [], ["b"], ["d", "e", "f", "a", "b", "c", "a", "b"]]
    int32_range = [0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 2**31, 2**32 + 3, 2**63 - 1, -(2**63)]
    idx = torch.tensor([3, 0, 1, 0, 2, 0])
    off = torch.tensor([0, 3, 3, 4, 6])
    return [
        ("murmur3_32", _bytes_operands(strings)),
        ("murmur3_32", _bytes_operands([b"", b""])),
        ("splitmix64", (torch.tensor([[0, 1, -1], [2**63 - 1, -(2**63), 12345]]),)),
        ("ngram_bucket", (torch.tensor(int32_range), 10)),
        ("ngram_bucket", (torch.tensor(int32_range), 2**31 + 11)),
        ("renumber_ids", (torch.tensor([0, 0, 2, 1, 2, 5, 0]),)),
        ("count_rows", _count_rows_operands(texts, 3, 7, torch.int32)),
        ("count_rows", _count_rows_operands(texts, 1, 7, torch.int64)),
        ("count_rows", _count_rows_operands([], 2, 7, torch.int32)),
        ("offsets_ok", (off, 6)),
        ("offsets_ok", (off.int(), 6, False)),
        ("offsets_ok", (off[:-1], 6, False)),
        ("offsets_ok", (torch.tensor([0, 3, 2, 6]), 6)),
        ("offsets_ok", (torch.tensor([1, 6]).int(), 6)),
        ("offsets_ok", (torch.tensor([0, 2**40]), 2**40)),
        ("offsets_ok", (torch.zeros(0, dtype=torch.long), 0)),
        ("drop_entries", (idx, off, 0)),
        ("drop_entries", (idx.int(), off.int(), 0)),
        ("drop_entries", (idx, off, 9)),
        ("drop_entries", (idx.int(), off.int(), 2**40)),
        *[("dual_cd_epoch", _dual_cd_operands(loss, n_out, dtype))
          for loss in (0, 1) for n_out in (1, 3) for dtype in (torch.int32, torch.int64)],
        *[("dual_cd_epoch", _dual_cd_operands(loss, 3, torch.int32, per_output=True))
          for loss in (0, 1)],
        ("idmap_admit_", _admit_operands(5, [7, -(2**63), 7, 2**63 - 1, 0, 7])),
        ("idmap_admit_", _admit_operands(5, [])),
        ("idmap_admit_", _admit_operands(5, [9, 7, 8, 1], before=[7, 8])),  # 2 held, 2 new
        ("idmap_admit_", _admit_operands(3, [4, 5, 6, 4, 2, 1], before=[4])),  # 2 without a row
    ]


def _cloned(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _assert_same(a: Any, b: Any, exact: bool) -> None:
    """The same value: tensors of the same dtype and shape, to the bit (``exact``) or up to
    float rounding; Python scalars, tuples and None alike."""
    if isinstance(a, torch.Tensor) and a.numel() == 0:
        assert isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
    elif isinstance(a, torch.Tensor):
        if exact or not a.is_floating_point():
            assert _same_bits(a, b), (a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y, exact)
    elif isinstance(a, float) and not exact:
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6)
    else:
        assert type(a) is type(b) and a == b, (a, b)


HOST_IDS = [f"{c[0]}-{i}" for i, c in enumerate(host_op_cases())]


@needs_cpp
@pytest.mark.parametrize(("name", "args"), host_op_cases(), ids=HOST_IDS)
def test_cpp_host_operator_equals_its_python_twin(name: str, args: tuple[Any, ...]) -> None:
    """Each host operator's C++ kernel: its Python twin's result and, for an operator that
    writes its operands, the same operands after it, to the bit (``dual_cd_epoch``'s Python
    kernel calls the same C kernel through ctypes); the dual coordinate descent's numpy loop,
    run where the C kernels are not, up to rounding (numpy sums a row's products in another
    order)."""
    ours_args, twin_args, numpy_args = _cloned(args), _cloned(args), _cloned(args)
    ours = getattr(ops, name).default(*ours_args)
    twin = library.HOST_TWINS[name](*twin_args)
    _assert_same(ours, twin, True)
    _assert_same(ours_args, twin_args, True)
    if name == "dual_cd_epoch":
        _assert_same(ours, _dualcd.dual_cd_twin(*numpy_args), False)
        _assert_same(ours_args, numpy_args, False)


@pytest.mark.parametrize(("name", "args"), host_op_cases(), ids=HOST_IDS)
def test_host_operator_opcheck(name: str, args: tuple[Any, ...]) -> None:
    """``opcheck`` of each host operator, on whichever registration is loaded: the schema
    (what it writes declared), no autograd, and the fake where the output's shape follows from
    the inputs (``murmur3_32``, ``splitmix64``, ``ngram_bucket``, ``renumber_ids``)."""
    utils = ["test_schema", "test_autograd_registration"]
    if name in ("murmur3_32", "splitmix64", "ngram_bucket", "renumber_ids"):
        utils += ["test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic"]
    torch.library.opcheck(getattr(ops, name).default, _cloned(args), test_utils=utils)


def test_murmur3_32_is_scikit_learns() -> None:
    """The operator and its twin, each string: scikit-learn's ``murmurhash3_32``."""
    from sklearn.utils import murmurhash3_32

    strings = [b"", b"a", b"abcde", "\u00e9t\u00e9".encode(), bytes(range(200))]
    want = [murmurhash3_32(s, seed=0, positive=False) for s in strings]
    data, starts = _bytes_operands(strings)
    assert ops.murmur3_32(data, starts).tolist() == want
    assert library.HOST_TWINS["murmur3_32"](data, starts).tolist() == want


def test_shifted_rows_opcheck_and_fake_on_either_registration() -> None:
    _, args, _ = next(c for c in op_cases() if c[0] == "shifted_rows")
    torch.library.opcheck(ops.shifted_rows.default, args)
    assert ops.shifted_rows(*args).tolist() == [4, 0, 1, 7, 7, 5, 6]


def test_group_order_on_either_registration_and_its_twin() -> None:
    """``group_order`` puts features 2, 0 and 1 (groups of 2 and 1) of a batch of 3 features
    x 2 bags in that order: each group's entries one after the other, its offsets from 0;
    the same on the registration loaded, its twin (every other device's kernel) and the meta
    device; ``opcheck``."""
    for _, args, _ in (c for c in op_cases() if c[0] == "group_order"):
        torch.library.opcheck(ops.group_order.default, args)
        values, offsets = ops.group_order(*args)
        assert values.tolist() == [7, 4, 0, 1, 2, 2, 0] and values.dtype == args[0].dtype
        # group (2, 0): bags [], [7], [4, 0], [];  group (1,): [1], [2, 2, 0]
        assert offsets.tolist() == [0, 0, 1, 3, 3, 0, 1, 4] and offsets.dtype == torch.int64
        twin = library._group_order_twin(*args)
        assert [t.tolist() for t in twin] == [values.tolist(), offsets.tolist()]
        meta = ops.group_order(args[0].to("meta"), args[1].to("meta"), *args[2:])
        assert [tuple(t.shape) for t in meta] == [(7,), (8,)]


@pytest.mark.parametrize(("order", "groups", "match"), [
    ([0, 0, 1], [2, 1], "each of the 3 features once"),
    ([0, 1], [1, 1], "each of the 3 features once"),
    ([2, 0, 1], [2, 2], "add up to the 3 features"),
    ([2, 0, 1], [3, 0], "every group has a feature"),
])
def test_group_order_refuses_what_it_cannot_read(order: list[int], groups: list[int],
                                                 match: str) -> None:
    """Either registration, and the twin: an order that is not a permutation of the
    features, or groups that do not cover them, is a ValueError naming the fix; so are
    offsets that leave the values (before the pass reads them)."""
    values, offsets = torch.tensor([4, 0, 1, 2, 2, 0, 7]), torch.tensor([0, 2, 2, 3, 6, 6, 7])
    for fn in (ops.group_order, library._group_order_twin):
        with pytest.raises(ValueError, match=match):
            fn(values, offsets, 3, order, groups)
    with pytest.raises(ValueError, match="offsets must start at 0"):
        ops.group_order(values, torch.tensor([0, 2, 2, 3, 6, 6, 9]), 3, [2, 0, 1], [2, 1])


def test_one_id_rows_opcheck_and_fake_on_either_registration() -> None:
    for _, args, _ in (c for c in op_cases() if c[0] == "one_id_rows"):
        torch.library.opcheck(ops.one_id_rows.default, args)
    one = next(c[1] for c in op_cases() if c[0] == "one_id_rows")
    assert ops.one_id_rows(*one).tolist() == [[4, 6, 2], [0, 7, 0]]
    placed = ops.one_id_rows(*one, torch.tensor([[0, 2], [1, 2], [4, 1]]))
    assert placed.tolist() == [4, 6, 0, 7, 2, 0]
    twin = library._one_id_rows_twin(*one, torch.tensor([[0, 2], [1, 2], [4, 1]]))
    assert twin.tolist() == placed.tolist()


@pytest.mark.parametrize(("bad", "feature"), [(5, 0), (-1, 0), (3, 1)])
def test_one_id_rows_refuses_what_it_cannot_read_and_names_an_id_out_of_range(
        bad: int, feature: int) -> None:
    """Either registration: an ID outside its table is a RuntimeError naming it (as
    ``F.embedding_bag`` raises; the Python registration's ``LookupIndexError`` is one), a bag
    that is not one ID a ValueError (the eager caller's general path), and a place that would
    write outside the output a ValueError, before the C pass writes; the eager function
    returns the position, and None, as it did through ctypes."""
    values, offsets = torch.tensor([4, 0, 1, 2, 2, 0]), torch.arange(7)
    shift, limit = torch.tensor([0, 5, 0]), torch.tensor([5, 3, 4])
    at = 1 if feature == 0 else 3
    values[at] = bad
    with pytest.raises(RuntimeError,
                       match=rf"ID {bad} at values\[{at}\] \(feature {feature}\)"):
        ops.one_id_rows(values, offsets, 3, shift, limit)
    assert one_id_rows(values, offsets, 3, shift, limit) == at
    uneven = torch.tensor([0, 2, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="every bag must hold one ID"):
        ops.one_id_rows(values.clamp(0, 2), uneven, 3, shift, limit)
    assert one_id_rows(values.clamp(0, 2), uneven, 3, shift, limit) is None
    with pytest.raises(ValueError, match=r"place\[2\] = \(5, 1\) puts feature 2's rows outside"):
        ops.one_id_rows(values.clamp(0, 2), offsets, 3, shift, limit,
                        torch.tensor([[0, 2], [1, 2], [5, 1]]))
    with pytest.raises(ValueError, match="one ID per bag; got 5 IDs for 6 bags"):
        ops.one_id_rows(values[:5], offsets, 3, shift, limit)


@pytest.mark.parametrize(("bad", "feature", "limit"), [(5, 0, 5), (-1, 0, 5), (3, 1, 3)])
def test_shifted_rows_names_an_id_outside_its_table(bad: int, feature: int, limit: int
                                                    ) -> None:
    """On the CPU (either registration) an ID outside its feature's table is a RuntimeError
    naming it, its position and its feature; offsets that are not the entries' CSR offsets are
    refused before the C pass reads them; and the collection's eager call names the feature
    by its name, as it did through ctypes."""
    values = torch.tensor([4, 0, 1, 2, 2, 0, 1])
    at = 1 if feature == 0 else 5
    values[at] = bad
    offsets = torch.tensor([0, 2, 2, 3, 5, 6, 7])
    with pytest.raises(RuntimeError, match=rf"ID {bad} at values\[{at}\] \(feature {feature}\) "
                       rf"is outside its feature's table, rows \[0, {limit}\)"):
        ops.shifted_rows(values, offsets, 2, torch.tensor([0, 5]), torch.tensor([5, 3]))
    with pytest.raises(ValueError, match="offsets must start at 0, never decrease"):
        ops.shifted_rows(values, torch.tensor([0, 2, 2, 3, 5, 6, 9]), 2, torch.tensor([0, 5]),
                         torch.tensor([5, 3]))
    col = LookupCollection([TableConfig("a", 5, 2, ["a"]), TableConfig("b", 3, 2, ["b"])],
                           sparse=True)
    kb = KeyedBags(["a", "b"], values, offsets=offsets)
    with pytest.raises(lookuplinear.LookupIndexError, match=f"kb\\['{'ab'[feature]}'\\]"):
        col(kb)


@needs_cpp
@pytest.mark.parametrize(("name", "args", "match"), [
    ("murmur3_32", (torch.zeros(4, dtype=torch.uint8), torch.tensor([0, 3, 2])), "starts"),
    ("murmur3_32", (torch.zeros(4, dtype=torch.uint8), torch.tensor([0, 5])), "starts"),
    ("murmur3_32", (torch.zeros(4), torch.tensor([0, 4])), "data must be"),
    ("renumber_ids", (torch.tensor([0, 2, 1]),), "first occurrence"),
    ("count_rows", (torch.tensor([0, 3]), torch.tensor([0, 2]), torch.tensor([0, 1]),
                    torch.zeros(2, dtype=torch.uint8), torch.tensor([0, 1, 2]), 2, 5, 2,
                    torch.int32), r"every id must be in \[0, 2\)"),
    ("count_rows", (torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([0, 1]),
                    torch.zeros(2, dtype=torch.uint8), torch.tensor([0, 1, 2]), 2, 0, 2,
                    torch.int32), "buckets >= 1"),
    ("drop_entries", (torch.tensor([0, 1]), torch.tensor([0, 3]), 0), "offsets must"),
    ("dual_cd_epoch", (torch.zeros(3, 1), torch.zeros(1), torch.tensor([0, 1]),
                       torch.tensor([0]), torch.ones(1), torch.tensor([0]), 1,
                       torch.ones(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                       torch.ones(1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64),
                       0, 1.0), "dual must be"),
    ("dual_cd_epoch", (torch.zeros(3, 1), torch.zeros(1), torch.tensor([0, 1]),
                       torch.tensor([0]), torch.ones(1), torch.tensor([0]), 1,
                       torch.ones(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                       torch.ones(1, 2, dtype=torch.float64),
                       torch.zeros(1, 1, dtype=torch.float64), 0, 1.0), "diag must be"),
    # a full table would never end a probe; a fallback row is needed for the keys without one
    ("idmap_admit_", _admit_operands(16, [1]), "more than the map's 16 rows"),
    ("idmap_admit_", (*_admit_operands(5, [1])[:6], 0), "fallback_rows, which must be >= 1"),
    ("idmap_admit_", (*_admit_operands(5, [1])[:4], torch.tensor(6), torch.tensor(0), 2),
     r"assigned counts the rows given out, in \[0, 5\]"),
    ("idmap_admit_", (*_admit_operands(5, [1])[:3], torch.zeros(4, dtype=torch.long),
                      *_admit_operands(5, [1])[4:]), "one entry per row"),
    ("idmap_admit_", (*_admit_operands(5, [1])[:1], torch.tensor([1.0]),
                      *_admit_operands(5, [1])[2:]), "keys must be a 1-D Long"),
])
def test_cpp_host_operators_refuse_what_their_c_kernels_cannot_read(
        name: str, args: tuple[Any, ...], match: str) -> None:
    """A C kernel reads the bytes, entries and rows its operands name: the operator checks
    them first (a ValueError naming the operand), rather than read past a buffer."""
    with pytest.raises(ValueError, match=match):
        getattr(ops, name).default(*args)


def _bad_operand_cases() -> list[tuple[str, str, tuple[Any, ...], type[Exception], str]]:
    """(what, operator, operands, the project's error, message) of operands each registration
    refuses: an int outside the range its kernel reads, a dtype no kernel computes in."""
    w, idx, off = torch.randn(10, 4), torch.tensor([1, 8, 9]), torch.tensor([0, 1, 3])
    pad = r"padding_idx must be a row of the table, in \[0, 10\), or None; got "
    cases = []
    for p in (-1, -2, 10, 12):
        cases += [(f"bag_lookup bags padding_idx {p}", "bag_lookup", (w, idx, off, None, p),
                   lookuplinear.PaddingIdxError, pad + str(p)),
                  (f"bag_lookup padding_idx {p}", "bag_lookup", (w, idx, None, None, p),
                   lookuplinear.PaddingIdxError, pad + str(p)),
                  (f"row_sums padding_idx {p}", "row_sums",
                   (torch.ones(2, 4), idx, off, None, p, 10), lookuplinear.PaddingIdxError,
                   pad + str(p))]
    cases += [
        ("row_sums index past num_rows", "row_sums", (torch.ones(2, 4), idx, off, None, None, 5),
         lookuplinear.LookupIndexError, r"row_sums: index 8 at indices\[1\]"),
        ("row_sums negative index", "row_sums",
         (torch.ones(2, 4), torch.tensor([1, -3, 2]), off, None, None, 10),
         lookuplinear.LookupIndexError, r"row_sums: index -3 at indices\[1\]"),
        ("row_sums int64 gradient", "row_sums",
         (torch.ones(2, 4, dtype=torch.long), idx, off, None, None, 10),
         lookuplinear.InputValueError, "grad must be a real floating dtype"),
        ("idmap_rows negative fallback_rows", "idmap_rows",
         (torch.tensor([0, 2]), torch.tensor([5, 6]), -3), lookuplinear.InputValueError,
         "fallback_rows .* must be >= 0; got -3"),
        ("idmap_rows absent key, no fallback rows", "idmap_rows",
         (torch.tensor([0, -1]), torch.tensor([5, 6]), 0), lookuplinear.InputValueError,
         "which must be >= 1; got 0"),
        ("ngram_bucket negative buckets", "ngram_bucket", (torch.tensor([5]), -1),
         lookuplinear.InputValueError, "buckets must be >= 1; got -1"),
    ]
    cases += [(f"mode_weights {dtype}", "mode_weights", (off, None, False, dtype, 3),
               lookuplinear.InputValueError, "dtype must be a real floating dtype")
              for dtype in (torch.int64, torch.bool, torch.complex64)]
    return cases


@pytest.mark.parametrize(("what", "name", "args", "error", "match"), _bad_operand_cases(),
                         ids=[c[0] for c in _bad_operand_cases()])
def test_operators_refuse_ints_out_of_range_and_dtypes_they_do_not_compute_in(
        what: str, name: str, args: tuple[Any, ...], error: type[Exception], match: str,
        ) -> None:
    """Called directly, on either registration (tests/test_cpp_ops.py runs under both): the
    builtin error that the project's maps to, naming the operand (before: a silent result,
    the two registrations' different from each other, or a crash deep in PyTorch)."""
    builtin = IndexError if issubclass(error, IndexError) else ValueError
    with pytest.raises(builtin, match=match) as e:
        getattr(ops, name).default(*args)
    mapped = library.project_error(e.value) or e.value
    assert isinstance(mapped, error)


@pytest.mark.parametrize("where", ["CPU", "CompositeExplicitAutograd"])
def test_every_device_kernel_refuses_a_padding_idx_past_the_table(where: str) -> None:
    """The kernels of the other devices (the twins, redispatched on CPU tensors here) check
    ``padding_idx`` as the CPU's."""
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, where))
    w, idx, off = torch.randn(10, 4), torch.tensor([1, 8, 9]), torch.tensor([0, 1, 3])
    with pytest.raises(ValueError, match="padding_idx must be a row"):
        ops.bag_lookup.default.redispatch(keys, w, idx, off, None, 10)
    with pytest.raises(ValueError, match="padding_idx must be a row"):
        ops.row_sums.default.redispatch(keys, torch.ones(2, 4), idx, off, None, 10, 10)
    with pytest.raises(ValueError, match="dtype must be a real floating"):
        ops.mode_weights.default.redispatch(keys, off, None, False, torch.int64, 3)
    with pytest.raises(ValueError, match="fallback_rows"):
        ops.idmap_rows.default.redispatch(keys, torch.tensor([0, 2]), torch.tensor([5, 6]), -3)


def test_an_older_torch_is_told_the_version_lookuplinear_needs() -> None:
    """pyproject.toml declares the minimum the kernel layer checks; a torch older than it gets
    one ImportError naming both versions (not an AttributeError from torch.library)."""
    from lookuplinear.ops._torch_version import MINIMUM

    root = Path(__file__).resolve().parent.parent
    assert f'"torch>={MINIMUM}",' in (root / "pyproject.toml").read_text()
    code = textwrap.dedent("""
        import torch
        torch.__version__ = torch.torch_version.TorchVersion("2.9.1+cu128")
        try:
            import lookuplinear.ops
        except ImportError as e:
            print(e)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert done.stdout.startswith(f"lookuplinear needs torch {MINIMUM} or later; this is torch "
                                  "2.9.1+cu128."), done.stdout + done.stderr


#: a process that makes each call of argv[1] (a JSON list of expressions) and prints, as JSON,
#: each outcome: ["ok", repr] or [the project's error class, message]
_CALLS = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch
    import lookuplinear.ops.library as library
    from lookuplinear.ops import group_rows, one_id_rows, shifted_rows
    ops = torch.ops.lookuplinear
    out = []
    for call in json.loads(sys.argv[1]):
        try:
            out.append(["ok", repr(eval(call))])
        except Exception as e:
            e = library.project_error(e) or e
            out.append([type(e).__name__, str(e)])
    print(json.dumps(out))
""")


def _on_both_registrations(calls: list[str], no_c: bool = False) -> list[list[list[str]]]:
    """Each call's outcome (:data:`_CALLS`) with the C++ operators (where built), with the
    operators registered from Python (``LOOKUPLINEAR_OPS=python``) and, with ``no_c``, in an
    install without a compiler (``LOOKUPLINEAR_NO_C=1``), each in a process of its own (a
    crash or a hang there fails the test, not the session)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("LOOKUPLINEAR_OPS", "LOOKUPLINEAR_NO_C")}
    base["PYTHONPATH"] = str(ROOT / "src")
    outcomes = []
    sides: list[dict[str, str]] = [{}, {"LOOKUPLINEAR_OPS": "python"}]
    for extra in sides + ([{"LOOKUPLINEAR_NO_C": "1"}] if no_c else []):
        run = subprocess.run([sys.executable, "-c", _CALLS, json.dumps(calls)],
                             env={**base, **extra}, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"{extra}: rc {run.returncode}\n{run.stderr[-2000:]}"
        outcomes.append(json.loads(run.stdout.strip().splitlines()[-1]))
    return outcomes


def _refused_alike(calls: dict[str, tuple[str, str]], no_c: bool = False) -> None:
    """Each call (the expression: its error class and a part of its message) refused alike by
    both registrations (and, with ``no_c``, without the C library)."""
    cpp, *others = _on_both_registrations(list(calls), no_c)
    for (call, (error, message)), c, *o in zip(calls.items(), cpp, *others, strict=True):
        assert all(c == p for p in o), (call, c, o)
        assert c[0] == error and message in c[1], (call, c)


def test_row_sums_and_group_rows_refuse_what_their_c_kernel_cannot_read() -> None:
    """Offsets that do not cover the entries (or point past them), a gradient without one row
    per bag (per entry), weights not one per entry: refused by both registrations with one
    message, and by ``group_rows`` (before: garbage rows read from memory, or a crash)."""
    off = "offsets must start at 0, never decrease and end at the number of entries, 2; got "
    _refused_alike({
        "ops.row_sums(torch.arange(3.).reshape(1, 3), torch.tensor([1, 2]), torch.tensor([0, 1]),"
        " None, None, 6)": ("OffsetsError", "lookuplinear::row_sums: " + off + "[0, 1]"),
        "ops.row_sums(torch.ones(1, 3), torch.tensor([1, 2]), torch.tensor([0, 50_000_000]), "
        "None, None, 6)": ("OffsetsError", "lookuplinear::row_sums: " + off + "[0, 50000000]"),
        "ops.row_sums(torch.ones(1, 3), torch.tensor([1, 2]), torch.tensor([0, 1, 2]), None, "
        "None, 6)": ("InputValueError", "lookuplinear::row_sums: the gradient is 2-D, one row "
                     "per bag, 2; got shape [1, 3]"),
        "ops.row_sums(torch.ones(1, 3), torch.tensor([1, 2]), None, None, None, 6)":
            ("InputValueError", "lookuplinear::row_sums: the gradient is 2-D, one row per "
             "entry, 2; got shape [1, 3]"),
        "ops.row_sums(torch.ones(1, 3), torch.tensor([1, 2]), torch.tensor([0, 2]), "
        "torch.ones(1), None, 6)": ("InputValueError", "lookuplinear::row_sums: weights must "
                                    "hold one value per entry, 2; got 1"),
        "group_rows(torch.ones(1, 3), 6, torch.tensor([1, 2, 3, 4]))":
            ("InputValueError", "lookuplinear::group_rows: the gradient is 2-D, one row per "
             "entry, 4; got shape [1, 3]"),
        "group_rows(torch.ones(1, 3), 6, torch.tensor([1, 2]), torch.tensor([0, 1]))":
            ("OffsetsError", "lookuplinear::group_rows: " + off + "[0, 1]"),
    })


def test_bag_max_backward_refuses_a_gradient_or_rows_it_cannot_scatter() -> None:
    """Both registrations and the twin (other devices, no C library) check the gradient's
    shape (``arg``'s, one row per bag), with the C++ kernel's message; the CPU kernels refuse
    ``arg`` that is not int64 or names a row outside the table (the C kernel would write
    there); ``bag_max`` names itself in an index out of range."""
    grad = ("InputValueError", "lookuplinear::bag_max_backward: the gradient has one row per "
            "bag, [5, 3]; got [1, 3]")
    arg = "torch.zeros(5, 3, dtype=torch.long)"
    _refused_alike({
        f"ops.bag_max_backward(torch.ones(1, 3), {arg}, 6)": grad,
        f"library._bag_max_backward_twin(torch.ones(1, 3), {arg}, 6)": grad,
        "ops.bag_max_backward(torch.ones(2, 3), torch.tensor([[0, 6, 1], [-1, 0, 0]]), 6)":
            ("LookupIndexError", "lookuplinear::bag_max_backward: arg holds rows of a table of "
             "6 rows, or -1 for an empty bag; got values in [-1, 6]"),
        "ops.bag_max_backward(torch.ones(1, 3), torch.tensor([[0, -2, 1]]), 6)":
            ("LookupIndexError", "got values in [-2, 1]"),
        "ops.bag_max_backward(torch.ones(1, 3), torch.tensor([[0, 2, 1]]).int(), 6)":
            ("InputValueError", "lookuplinear::bag_max_backward: arg is bag_max_arg's, 2-D "
             "int64; got Int of 2 dimensions"),
        "ops.bag_max(torch.arange(18.).reshape(6, 3), torch.tensor([1, 6]), torch.tensor([0, 2]))":
            ("LookupIndexError", "lookuplinear::bag_max: index 6 at indices[1] is out of range"),
        "ops.bag_max_arg(torch.arange(18.).reshape(6, 3), torch.tensor([1, 6]), "
        "torch.tensor([0, 2]))":
            ("LookupIndexError", "lookuplinear::bag_max: index 6 at indices[1] is out of range"),
    })


_MAX_GRADIENTS = textwrap.dedent("""
    import json, warnings
    warnings.simplefilter("ignore")
    import torch
    import torch.nn.functional as F
    from torch import nn
    import lookuplinear.ops.library as library
    ops = torch.ops.lookuplinear
    out = {"cpp": library.CPP}
    # the rows the forward chose, the table changed before the backward: nn.EmbeddingBag's
    w = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    x, offsets = torch.tensor([1, 2, 3, 3, 7, 1]), torch.tensor([0, 3, 3, 6])
    ref = F.embedding_bag(x, w, offsets, mode="max", include_last_offset=True)
    g = torch.randn(ref.shape, dtype=torch.float64)
    (want,) = torch.autograd.grad(ref, w, g)
    grads = []
    for op in (ops.bag_max, lambda *a: ops.bag_max_arg(*a)[0]):
        y = op(w, x, offsets)
        with torch.no_grad():
            w.neg_()
        grads.append(torch.equal(torch.autograd.grad(y, w, g)[0], want))
        with torch.no_grad():
            w.neg_()
    out["rows"] = grads
    # a penalty on the gradient: the second derivative of F.embedding then max
    totals = []
    for pool in (lambda: ops.bag_max(w, x, offsets),
                 lambda: F.embedding(x[:3], w).max(0).values.unsqueeze(0)):
        y = pool()[:1]
        task = y.pow(2).sum()
        (first,) = torch.autograd.grad(task, w, create_graph=True)
        totals.append(torch.autograd.grad(task + first.pow(2).sum(), w)[0])
    out["second"] = torch.allclose(totals[0], totals[1], rtol=1e-12, atol=1e-12)
    print(json.dumps(out))
""")


@needs_cpp  # the suite's pass without a compiler would run the same three processes again
def test_bag_max_gradient_is_the_forwards_rows_on_every_registration() -> None:
    """On the C++ operators, the Python registration and an install without a compiler:
    ``bag_max``'s (and ``bag_max_arg``'s) gradient goes to the rows that gave each maximum
    when the forward ran (the table changed before the backward: ATen's gradient), and under
    ``create_graph=True`` it differentiates again, to what ``F.embedding`` then ``max`` give
    (before: the rows were found again from the changed table, and the gradient had no graph,
    so a penalty on it was silently dropped)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("LOOKUPLINEAR_OPS", "LOOKUPLINEAR_NO_C")}
    base["PYTHONPATH"] = str(ROOT / "src")
    for extra in ({}, {"LOOKUPLINEAR_OPS": "python"}, {"LOOKUPLINEAR_NO_C": "1"}):
        run = subprocess.run([sys.executable, "-c", _MAX_GRADIENTS], env={**base, **extra},
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"{extra}: rc {run.returncode}\n{run.stderr[-2000:]}"
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert not (extra and out["cpp"]), (extra, out)
        assert out["rows"] == [True, True] and out["second"], (extra, out)


def test_idmap_find_refuses_a_table_it_cannot_probe() -> None:
    """A table that is not 1-D int64, or not a power of 2 of (key, value) slots: refused by
    both registrations with one message (before: the Python registration read an int32
    table as int64, out of bounds, and probed forever)."""
    not_int64 = ("InputValueError", "lookuplinear::idmap_find: the table is 1-D int64; got Int "
                 "of 1 dimensions")
    _refused_alike({
        "ops.idmap_find(torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([5]))":
            not_int64,
        "library._idmap_find_twin(torch.tensor([1, 2, 3], dtype=torch.int32), "
        "torch.tensor([5]))": not_int64,
        "ops.idmap_find(torch.full((6,), -1), torch.tensor([5]))":
            ("InputValueError", "lookuplinear::idmap_find: the table holds a power of 2 of "
             "(key, value) slots; got 6 entries"),
        "ops.idmap_find(torch.zeros(0, dtype=torch.long), torch.tensor([5]))":
            ("InputValueError", "lookuplinear::idmap_find: the table holds a power of 2 of "
             "(key, value) slots; got 0 entries"),
    })


def test_idmap_rows_and_splitmix64_refuse_alike_on_both_registrations() -> None:
    """Checks the C++ kernels made and the Python registration did not: found values not one
    per key, int32 keys for splitmix64 (before: torch's IndexError, or hashed as they came)."""
    _refused_alike({
        "ops.idmap_rows(torch.tensor([-1, 2]), torch.tensor([5]), 1)":
            ("InputValueError", "lookuplinear::idmap_rows: one found value per key; got 2 "
             "values for 1 keys"),
        "ops.splitmix64(torch.tensor([1], dtype=torch.int32))":
            ("InputValueError", "lookuplinear::splitmix64: keys must be int64; got Int"),
    })


@pytest.mark.parametrize("state", [torch.zeros(1), torch.zeros(0), torch.zeros(6, 3)])
def test_sgd_without_momentum_takes_any_state_in_the_twins(state: torch.Tensor) -> None:
    """SGD without momentum reads no state, so ``rows_update_`` and ``rows_fused_`` take any
    (the C kernel's contract): the twins (another device, the torch backend) update the rows
    as the operator does (before: they viewed a non-empty state as (N, dim) and failed)."""
    from lookuplinear.ops import _updates

    scalars = [0.1, 0.0, 0.0, 1.0, 0.0]
    want = torch.arange(18.).reshape(6, 3)
    ops.rows_update_(want, state.clone(), torch.tensor([1, 3]), torch.ones(2, 3), "sgd", scalars)
    twin = torch.arange(18.).reshape(6, 3)
    _updates.rows_update_twin(twin, state.clone(), torch.tensor([1, 3]), torch.ones(2, 3), "sgd",
                              scalars)
    assert torch.equal(twin, want)
    fused = torch.arange(18.).reshape(6, 3)
    _updates.rows_fused_twin([fused], [state.clone()], [torch.ones(2, 3)],
                             [torch.tensor([1, 3])], [None], [None], [-1], "sgd", scalars)
    assert torch.equal(fused, want)


def test_keyed_passes_and_murmur3_refuse_operands_alike_on_every_side() -> None:
    """``shifted_rows``, ``one_id_rows`` (the eager functions) and the operator ``murmur3_32``
    refuse what their C pass cannot read with one error and message on the C++ operators,
    the Python registration and without the C library (before: the Python sides skipped the
    checks, returning uninitialised memory, a torch error from deep inside, or a hash of
    decreasing bounds)."""
    ids, one, shift, limit = ("torch.tensor([3, 1, 0, 2])", "torch.arange(5)",
                              "torch.tensor([0, 4])", "torch.tensor([4, 3])")
    _refused_alike({
        f"shifted_rows(torch.tensor([3, 1, 0]), torch.arange(4), 2, {shift}, {limit})":
            ("InputValueError", "lookuplinear::shifted_rows: n_features must divide the 3 "
             "bags; got 2"),
        f"shifted_rows({ids}, torch.tensor([0, 2, 1, 3, 4]), 2, {shift}, {limit})":
            ("OffsetsError", "lookuplinear::shifted_rows: offsets must start at 0, never "
             "decrease and end at the number of entries, 4; got [0, 2, 1, 3, 4]"),
        f"shifted_rows({ids}, {one}, 2, torch.tensor([0]), {limit})":
            ("InputValueError", "lookuplinear::shifted_rows: shift and limit must be int64 of "
             "shape (2,); got Long [1]"),
        f"one_id_rows({ids}, {one}, 2, {shift}, torch.tensor([4, 3, 1]))":
            ("InputValueError", "lookuplinear::one_id_rows: shift and limit must be int64 of "
             "shape (2,); got Long [3]"),
        f"one_id_rows({ids}, {one}, 2, {shift}, {limit}, torch.tensor([[0, 1], [9, 1]]))":
            ("InputValueError", "lookuplinear::one_id_rows: place[1] = (9, 1) puts feature "
             "1's rows outside the 4 outputs"),
        f"one_id_rows({ids}, torch.tensor([1, 2, 3, 4, 5]), 2, {shift}, {limit})":
            ("ok", "None"),
        "ops.murmur3_32(torch.tensor(list(b'abcd'), dtype=torch.uint8), torch.tensor([3, 1]))":
            ("InputValueError", "lookuplinear::murmur3_32: starts must be at least one bound, "
             "never decreasing, within [0, 4]"),
        "ops.murmur3_32(torch.tensor(list(b'abcd'), dtype=torch.uint8), torch.tensor([0, 5]))":
            ("InputValueError", "within [0, 4]"),
        "ops.murmur3_32(torch.tensor(list(b'abcd')), torch.tensor([0, 4]))":
            ("InputValueError", "lookuplinear::murmur3_32: data must be a 1-D Byte CPU tensor; "
             "got Long of shape [4] on cpu"),
    }, no_c=True)


_DUAL_CD_FIT = textwrap.dedent("""
    import json, warnings
    warnings.simplefilter("ignore")
    import numpy as np
    from scipy import sparse
    import lookuplinear.ops.library as library
    from lookuplinear.sklearn import LookupClassifier
    X = sparse.random(60, 25, density=0.15, random_state=1, format="csr", dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 3, 60)
    model = LookupClassifier(random_state=0).fit(X, y)
    coef = np.asarray(model.coef_, dtype=np.float32)
    print(json.dumps({"cpp": library.CPP, "coef": coef.view(np.int32).ravel().tolist(),
                      "bias": np.asarray(model.intercept_, np.float32).view(np.int32).tolist()}))
""")


@needs_cpp  # without the C++ operators both processes would run the same registration
def test_dual_cd_fit_gives_the_same_bits_on_both_registrations() -> None:
    """``LookupClassifier``'s default solver (dual coordinate descent) gives the same
    ``coef_`` and ``intercept_`` bits with the C++ operators and with the operators registered
    from Python, which call the same C kernel through ctypes (docs/serving.md: "Both give the
    same bits on the CPU"; before: the Python registration ran the numpy loop, off in the last
    bits)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("LOOKUPLINEAR_OPS", "LOOKUPLINEAR_NO_C")}
    base["PYTHONPATH"] = str(ROOT / "src")
    fits = []
    for extra in ({}, {"LOOKUPLINEAR_OPS": "python"}):
        run = subprocess.run([sys.executable, "-c", _DUAL_CD_FIT], env={**base, **extra},
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{extra}: rc {run.returncode}\n{run.stderr[-2000:]}"
        fits.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert fits[0]["cpp"] and not fits[1]["cpp"]
    assert fits[0]["coef"] == fits[1]["coef"] and fits[0]["bias"] == fits[1]["bias"]
