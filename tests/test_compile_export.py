"""``torch.compile`` and ``torch.export`` of lookuplinear models.

A compiled training step (``fullgraph=True``: no graph break) equals the eager step to the bit;
a program exported from a trained model holds lookuplinear's operators, equals the module on
batches of other sizes, and runs after ``torch.export.save`` / ``load`` in a fresh process that
imports only the batch types (``from lookuplinear import KeyedBags``: no layer, collection or
optimizer code), or, for a program of tensors, only the operators (``lookuplinear.ops``).
Decomposed (``lookuplinear.ops.decompositions()``), a program is ATen ops only, equals the
module too, and runs in a fresh process that imports no lookuplinear code.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from forms import same_kernel
from torch import nn

from lookuplinear import (
    Bags,
    Embedding,
    EmbeddingBag,
    KeyedBags,
    LookupCollection,
    LookupLinear,
    QuantizedLookupCollection,
    TableConfig,
)
from lookuplinear.errors import InputTypeError, InputValueError, OffsetsError
from lookuplinear.ops import decompositions

needs_compiler = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile's inductor needs a C compiler",
)
AUTO = torch.export.Dim.AUTO
#: a KeyedBags argument's dynamic shapes: values, offsets (weights: none)
KB_DYNAMIC = [{0: AUTO}, {0: AUTO}, None]


def bags_batch(n_bags: int, nnz: int, seed: int, rows: int = 50) -> tuple[torch.Tensor, ...]:
    """``nnz`` indices in ``n_bags`` bags (nn.EmbeddingBag's start offsets), one of them empty."""
    g = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, rows, (nnz,), generator=g)
    starts = torch.sort(torch.randint(0, nnz + 1, (n_bags - 1,), generator=g)).values
    return indices, torch.cat([torch.zeros(1, dtype=torch.long), starts])


def keyed_batch(n: int, seed: int, user_ids: bool = False) -> KeyedBags:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (2 * n,), generator=g)
    values = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
    if user_ids:  # raw IDs for the mapped feature: large, some never seen in training
        n_user = int(lengths[:n].sum())
        values[:n_user] = values[:n_user] * 10**12 + 7
    return KeyedBags(["user", "item"], values, lengths=lengths)


def collection(hashing: str | None = None, sparse: bool = True) -> LookupCollection:
    torch.manual_seed(0)
    user = (TableConfig("user", 40, 4, ["user"], hashing="map") if hashing
            else TableConfig("user", 20, 4, ["user"]))
    return LookupCollection([user, TableConfig("item", 30, 4, ["item"])], sparse=sparse)


class Head(nn.Module):
    """A collection's pooled features through a dense head."""

    def __init__(self, tables: nn.Module, width: int = 8) -> None:
        super().__init__()
        self.tables, self.head = tables, nn.Linear(width, 1)

    def forward(self, kb: KeyedBags) -> torch.Tensor:
        out: torch.Tensor = self.head(self.tables(kb).values())
        return out


def grads(model: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.to_dense() for p in model.parameters()]


def train_both(model: nn.Module, loss: Callable[[nn.Module, Any], torch.Tensor],
               batches: list[Any], backend: str = "aot_eager") -> None:
    """Train ``model`` eagerly and a copy with the loss compiled (``fullgraph=True``: one graph,
    its backward compiled by AOTAutograd) on the same batches with ``torch.optim.SGD``.

    With ``aot_eager`` (the graph's ATen kernels) every loss and gradient equals the eager one
    to the bit, and so does every parameter after a step. A sparse gradient too: the compiled
    graph's has one row per entry where the eager one is coalesced, but its rows are summed by
    the eager backward's kernel (``lookuplinear::row_sums``), so it densifies, and ``SGD`` adds
    it, to the same bits; summed in torch ops instead, the weighted rows of a mean table would
    differ in the last bit (C fuses each multiply-add). ``inductor``'s generated kernels sum in
    another order (so they do for ``nn.EmbeddingBag``): equal to float rounding.
    """
    torch._dynamo.reset()  # one compiled loss per test: the recompile limit is per code object
    twin = copy.deepcopy(model)
    compiled = torch.compile(lambda b: loss(twin, b), fullgraph=True, dynamic=False,
                             backend=backend)
    opt, opt_twin = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    exact = backend == "aot_eager"
    for b in batches:
        opt.zero_grad()
        opt_twin.zero_grad()
        if exact:  # the same parameters in: the same bits out
            for p, q in zip(model.parameters(), twin.parameters(), strict=True):
                q.data.copy_(p.data)
        eager, fast = loss(model, b), compiled(b)
        eager.backward()
        fast.backward()
        same = torch.equal if exact else lambda a, b: torch.allclose(a, b, atol=1e-6)
        assert same(eager, fast)
        for g, g_twin in zip(grads(model), grads(twin), strict=True):
            assert (g is None and g_twin is None) or same(g, g_twin)
        opt.step()
        opt_twin.step()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            assert same(p, q)


def layer_loss(m: nn.Module, b: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return m[2](m[1](m[0](*b))).square().mean()


def layer_model(sparse: bool, mode: str = "sum") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(LookupLinear(50, 8, sparse=sparse, mode=mode), nn.ReLU(),
                         nn.Linear(8, 1))


@same_kernel  # a graph calls the operators, whose CPU kernels run C whatever the backend
@pytest.mark.parametrize(("sparse", "mode"), [(False, "sum"), (True, "sum"), (False, "mean"),
                                              (True, "mean"), (False, "sqrtn"), (False, "max")])
def test_compiled_layer_step_equals_eager(sparse: bool, mode: str) -> None:
    train_both(layer_model(sparse, mode), layer_loss,
               [bags_batch(4, 12, 0), bags_batch(4, 12, 1)])


@needs_compiler
def test_inductor_layer_step_equals_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    # with CI set, Inductor refuses an implicit fallback for an operator that has a
    # decomposition in PyTorch's table (ours have, for ONNX): the operators are explicit ones
    monkeypatch.setenv("CI", "true")
    import torch._inductor.config

    # lowered anew (no FX graph cache; identical kernels may come from the code cache);
    # config.patch, not monkeypatch.setattr: after the latter's undo, a later Inductor compile in
    # the same process failed reading the option (AttributeError)
    with torch._inductor.config.patch(fx_graph_cache=False):
        train_both(layer_model(True), layer_loss, [bags_batch(4, 12, 0)], backend="inductor")


@needs_compiler
def test_inductor_builds_a_weighted_max_lookup() -> None:
    """The weights of a max bag are asserted to be 1 where the graph runs: Inductor writes the
    assert's message into C++ source, so the message holds no double quote."""
    torch.manual_seed(0)
    layer = LookupLinear(20, 4, mode="max")
    idx, off = torch.tensor([1, 2, 3, 7]), torch.tensor([0, 1])
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="inductor")
    with torch.no_grad():
        assert torch.equal(compiled(idx, off, torch.ones(4)), layer(idx, off, torch.ones(4)))
        with pytest.raises(RuntimeError, match="weight 1"):
            compiled(idx, off, torch.full((4,), 2.0))


def tables_of(kind: str, sparse: bool) -> tuple[LookupCollection, int]:
    """A collection of ``kind`` and its output width: ``plain`` (two sum tables of width 4),
    ``mixed`` (a mean table of width 4 beside a sum table of width 6: two groups), ``mean``
    and ``mean-sqrtn`` (two tables of width 4 of those modes: one group) or ``shared`` (both
    features read one table)."""
    if kind == "plain":
        return collection(sparse=sparse), 8
    torch.manual_seed(0)
    if kind.startswith("mean"):
        modes = kind.split("-") * 2
        return LookupCollection([TableConfig("user", 20, 4, ["user"], mode=modes[0]),
                                 TableConfig("item", 30, 4, ["item"], mode=modes[1])],
                                sparse=sparse), 8
    if kind == "mixed":
        return LookupCollection([TableConfig("user", 20, 4, ["user"], mode="mean"),
                                 TableConfig("item", 30, 6, ["item"])], sparse=sparse), 10
    return LookupCollection([TableConfig("both", 30, 4, ["user", "item"])], sparse=sparse), 8


@pytest.mark.parametrize(("sparse", "kind"), [
    (True, "plain"), (True, "mixed"), (True, "mean"), (True, "mean-sqrtn"), (True, "shared"),
    (False, "mixed"), (False, "mean-sqrtn")])
def test_compiled_collection_step_equals_eager(sparse: bool, kind: str) -> None:
    def loss(m: nn.Module, kb: KeyedBags) -> torch.Tensor:
        return m(kb).square().mean()

    model = Head(*tables_of(kind, sparse))
    train_both(model, loss, [keyed_batch(5, 0), keyed_batch(5, 1)])


@pytest.mark.parametrize("modes", [("sum", "sum"), ("sqrtn", "mean")])
def test_compiled_sparse_collection_of_two_groups_trains_learned_weights_as_eager(
        modes: tuple[str, str]) -> None:
    """Per-entry weights that need their gradient, over ``sparse=True`` tables of two widths
    (two group parameters, one read by two features, one of them padded): the compiled graph
    builds (one row-sparse gradient per group parameter), and its outputs and the weights' and
    tables' gradients equal eager's to the bit."""
    torch.manual_seed(0)
    model = LookupCollection([TableConfig("t", 10, 4, ["f1", "f2"], mode=modes[0], padding_idx=0),
                              TableConfig("s", 10, 3, ["f3"], mode=modes[1])], sparse=True)
    base = KeyedBags.from_dict({"f1": [[1, 2], [3]], "f2": [[4], [5, 5, 0]], "f3": [[1], []]})
    w = torch.rand(base.values.numel(), requires_grad=True)
    kb = KeyedBags(base.keys(), base.values, lengths=base.lengths(), weights=w)
    scale = torch.randn(2, 11)
    torch._dynamo.reset()
    step = torch.compile(lambda b: model(b).values(), fullgraph=True, backend="aot_eager")
    got = []
    for run in (lambda b: model(b).values(), step):
        out = run(kb)
        got.append((out, torch.autograd.grad((out * scale).square().sum(),
                                             [*model.parameters(), w])))
    (eager, eager_grads), (fast, fast_grads) = got
    assert torch.equal(fast, eager)
    for g, g_eager in zip(fast_grads, eager_grads, strict=True):
        assert torch.equal(g.to_dense(), g_eager.to_dense())


@needs_compiler
@pytest.mark.parametrize(("mode", "sparse", "dynamic"), [("max", True, True),
                                                     ("mean", False, False)])
def test_inductor_collection_whose_shared_feature_another_table_reads_on_its_own(
        mode: str, sparse: bool, dynamic: bool) -> None:
    """A feature read by a group's sum table and by a table looked up feature by feature (a
    ``max``, a padded ``mean``): compiled by Inductor, its forward and gradients equal the
    eager ones (the feature sliced out of the batch once, so the backward's sizes are of
    symbols the graph has)."""
    torch.manual_seed(0)
    pad = {"padding_idx": 3} if mode == "mean" else {}
    model = LookupCollection([TableConfig("I", 20, 3, ["i", "c"]),
                              TableConfig("C", 20, 2, ["c"], mode=mode, **pad)], sparse=sparse)
    twin = copy.deepcopy(model)
    kb = KeyedBags.from_dict({"i": [[4, 4], [], [2]], "c": [[1, 2, 3], [3], []]})
    scale = torch.randn(8)
    torch._dynamo.reset()
    step = torch.compile(lambda b: twin(b).values(), fullgraph=True, dynamic=dynamic)
    eager, fast = model(kb).values(), step(kb)
    (eager * scale).square().sum().backward()
    (fast * scale).square().sum().backward()
    assert torch.allclose(eager, fast)
    for g, g_twin in zip(grads(model), grads(twin), strict=True):
        assert g is not None and g_twin is not None
        assert torch.allclose(g, g_twin, atol=1e-6)


def trained(model: nn.Module, batch: KeyedBags) -> nn.Module:
    """``model`` after one SGD step on ``batch``, in eval mode."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(batch).square().mean().backward()
    opt.step()
    return model.eval()


def models() -> dict[str, tuple[nn.Module, Callable[[int, int], KeyedBags]]]:
    float_model = trained(Head(collection()), keyed_batch(6, 0))
    mapped = trained(Head(collection("map")), keyed_batch(6, 0, user_ids=True))
    quantized = Head(QuantizedLookupCollection(copy.deepcopy(float_model.tables))).eval()
    return {
        "LookupCollection": (float_model, lambda n, s: keyed_batch(n, s)),
        "QuantizedLookupCollection": (quantized, lambda n, s: keyed_batch(n, s)),
        "IdMap-keyed": (mapped, lambda n, s: keyed_batch(n, s, user_ids=True)),
    }


def lookuplinear_ops(program: torch.export.ExportedProgram) -> set[str]:
    return {str(node.target) for node in program.graph.nodes
            if str(node.target).startswith("lookuplinear.")}


@pytest.mark.parametrize("decomposed", [False, True])
@pytest.mark.parametrize("name", ["LookupCollection", "QuantizedLookupCollection", "IdMap-keyed"])
def test_exported_collection_equals_module_on_other_batches(name: str, decomposed: bool
                                                            ) -> None:
    model, make = models()[name]
    program = torch.export.export(model, (make(4, 0),), dynamic_shapes=(KB_DYNAMIC,))
    if name == "IdMap-keyed":
        assert "lookuplinear.idmap_find.default" in lookuplinear_ops(program)
    if name == "LookupCollection":  # the input's shift: one operator, as eagerly
        assert "lookuplinear.shifted_rows.default" in lookuplinear_ops(program)
    if decomposed:
        program = program.run_decompositions(decompositions())
        assert not lookuplinear_ops(program)
    # a dynamic dimension of an exported program is >= 2 (PyTorch specializes sizes 0 and 1)
    for n, seed in [(9, 1), (2, 2), (3, 3)]:
        kb = make(n, seed)
        with torch.no_grad():
            assert torch.equal(program.module()(kb), model(kb))


@pytest.mark.parametrize("decomposed", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_exported_layer_equals_module_on_other_batches(sparse: bool, decomposed: bool) -> None:
    torch.manual_seed(0)
    layer = LookupLinear(50, 8, sparse=sparse).eval()
    nnz, bags = torch.export.Dim("nnz"), torch.export.Dim("bags")
    program = torch.export.export(layer, bags_batch(4, 12, 0),
                                  dynamic_shapes=({0: nnz}, {0: bags}))
    if decomposed:
        program = program.run_decompositions(decompositions())
    assert bool(lookuplinear_ops(program)) == (sparse and not decomposed)
    for n_bags, n, seed in [(7, 30, 1), (2, 5, 2), (3, 3, 3)]:
        b = bags_batch(n_bags, n, seed)
        with torch.no_grad():
            assert torch.equal(program.module()(*b), layer(*b))


@pytest.mark.parametrize("form", ["index tensor", "bags"])
@pytest.mark.parametrize("dtype", ["int8", "int4", "float16"])
def test_quantized_layer_exports_and_compiles_as_the_float_layer(dtype: str, form: str) -> None:
    """A quantized layer records as the float layer does, on an index tensor (one row per index,
    a padding index among them) and on bags: no data-dependent guard, the program and the
    compiled module equal to the module on batches of other sizes."""
    torch.manual_seed(0)
    padding_idx = 3 if form == "index tensor" else None
    q = LookupLinear(50, 8, padding_idx=padding_idx).eval().quantize(dtype)

    def batch(n: int, seed: int) -> tuple[torch.Tensor, ...]:
        if form == "bags":
            return bags_batch(n, 3 * n, seed)
        index = torch.randint(0, 50, (n, 3), generator=torch.Generator().manual_seed(seed))
        index[0, 0] = 3  # the padding index: its row is left out, the bias remains
        return (index,)

    program = torch.export.export(q, batch(4, 0),
                                  dynamic_shapes=tuple({0: AUTO} for _ in batch(4, 0)))
    compiled = torch.compile(q, fullgraph=True, backend="aot_eager", dynamic=True)
    for n, seed in [(7, 1), (2, 2), (3, 3)]:
        b = batch(n, seed)
        assert torch.equal(program.module()(*b), q(*b))
        assert torch.equal(compiled(*b), q(*b))


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_inductor_int8_max_layer_equals_eager_to_the_bit(padding_idx: int | None,
                                                          index_dtype: torch.dtype) -> None:
    """A quantized int8 ``max`` layer compiled by Inductor dequantizes its rows by the kernel
    eager runs (Inductor would lower ``embedding_bag_byte_unpack`` itself, rounding
    otherwise): the compiled layer's bits are eager's."""
    from lookuplinear import EmbeddingBag

    torch.manual_seed(0)
    q = EmbeddingBag(20, 8, mode="max", padding_idx=padding_idx).quantize("int8")
    indices = torch.tensor([1, 3, 3, 3, 5, 6, 3, 1, 1, 7, 3], dtype=index_dtype)
    offsets = torch.tensor([0, 2, 4, 5, 5, 9], dtype=index_dtype)
    torch._dynamo.reset()
    compiled = torch.compile(q, fullgraph=True)
    assert torch.equal(compiled(indices, offsets), q(indices, offsets))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_a_program_exported_under_no_grad_trains_its_table(mode: str) -> None:
    """As ``nn.EmbeddingBag``'s: the program holds no detach of the table, so its module,
    fine-tuned later, has a gradient for it."""
    torch.manual_seed(0)
    layer = LookupLinear(20, 4, mode=mode, bias=False)
    idx, off = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2])
    with torch.no_grad():
        program = torch.export.export(layer, (idx, off))
    assert not any("detach" in str(n.target) for n in program.graph.nodes)
    module = program.module()
    module(idx, off).sum().backward()
    grad = next(module.parameters()).grad
    assert grad is not None and bool(grad.to_dense().ne(0).any())


def test_exported_program_checks_the_index_range() -> None:
    """An ID outside its table is a RuntimeError, as ``F.embedding_bag`` raises: on the CPU
    the operator's, naming the ID and its feature; decomposed to ATen, the assert's."""
    model, make = models()["LookupCollection"]
    program = torch.export.export(model, (make(4, 0),), dynamic_shapes=(KB_DYNAMIC,))
    kb = make(3, 1)
    kb.values[-1] = 30  # item has 30 rows
    with pytest.raises(RuntimeError, match=r"ID 30 at values\[\d+\] \(feature 1\) is outside "
                       "its feature's table"):
        program.module()(kb)
    aten = program.run_decompositions(decompositions())
    with pytest.raises(RuntimeError, match="outside its feature's table"):
        aten.module()(kb)


FRESH = """
import sys, torch
from lookuplinear import KeyedBags
program = torch.export.load(sys.argv[1])
batches = [KeyedBags(["user", "item"], v, offsets=o) for v, o in torch.load(sys.argv[2])]
torch.save([program.module()(kb) for kb in batches], sys.argv[3])
loaded = sorted(m for m in sys.modules if m.startswith("lookuplinear."))
print(" ".join(loaded))
"""


def test_saved_program_runs_in_a_fresh_process_with_only_the_batch_types(
    tmp_path: Path,
) -> None:
    model, make = models()["IdMap-keyed"]
    program = torch.export.export(model, (make(4, 0),), dynamic_shapes=(KB_DYNAMIC,))
    torch.export.save(program, tmp_path / "model.pt2")
    inputs = [make(7, 1), make(2, 2)]
    torch.save([(kb.values, kb.offsets) for kb in inputs], tmp_path / "inputs.pt")
    run = subprocess.run(
        [sys.executable, "-c", FRESH, str(tmp_path / "model.pt2"), str(tmp_path / "inputs.pt"),
         str(tmp_path / "out.pt")], capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    loaded = set(run.stdout.split())
    assert "lookuplinear.sparse.keyed" in loaded
    assert not loaded & {"lookuplinear.modules.layer", "lookuplinear.modules.collection",
                         "lookuplinear.quant.collection", "lookuplinear.ids.idmap"}
    with torch.no_grad():
        expected = [model(kb) for kb in inputs]
    for got, want in zip(torch.load(tmp_path / "out.pt"), expected, strict=True):
        assert torch.equal(got, want)


FRESH_TENSORS = """
import sys, torch
{imports}
program = torch.export.load(sys.argv[1])
torch.save([program.module()(*b) for b in torch.load(sys.argv[2])], sys.argv[3])
print(" ".join(sorted(m for m in sys.modules if m.startswith("lookuplinear"))))
"""


@pytest.mark.parametrize("decomposed", [False, True])
def test_saved_layer_program_runs_with_only_the_operators_or_only_pytorch(
    tmp_path: Path, decomposed: bool
) -> None:
    """With lookuplinear's operators, a fresh process imports ``lookuplinear.ops`` (the
    operators and the kernels they call) and nothing else of lookuplinear; decomposed, it
    imports nothing of lookuplinear."""
    torch.manual_seed(0)
    layer = LookupLinear(50, 8, sparse=True).eval()
    program = torch.export.export(layer, bags_batch(4, 12, 0), dynamic_shapes=(
        {0: torch.export.Dim("nnz")}, {0: torch.export.Dim("bags")}))
    assert lookuplinear_ops(program) == {"lookuplinear.bag_lookup.default"}
    if decomposed:
        program = program.run_decompositions(decompositions())
    torch.export.save(program, tmp_path / "layer.pt2")
    inputs = [bags_batch(7, 30, 1), bags_batch(2, 5, 2)]
    torch.save(inputs, tmp_path / "inputs.pt")
    script = FRESH_TENSORS.format(imports="" if decomposed else "import lookuplinear.ops")
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "layer.pt2"), str(tmp_path / "inputs.pt"),
         str(tmp_path / "out.pt")], capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    loaded = set(run.stdout.split())
    if decomposed:
        assert not loaded
    else:
        assert "lookuplinear.ops.library" in loaded
        assert not {m.split(".")[1] for m in loaded if "." in m} & {
            "functional", "modules", "sparse", "quant", "optim", "sklearn", "text"}
    with torch.no_grad():
        expected = [layer(*b) for b in inputs]
    for got, want in zip(torch.load(tmp_path / "out.pt"), expected, strict=True):
        assert torch.equal(got, want)


def test_exported_max_layer_refuses_offsets_that_do_not_cover_its_entries() -> None:
    """The C max reads the entries the offsets name: an exported program checks them where it
    runs (the eager layer checks them in Bags; the program asserts what Bags checks, before
    the operator, whose kernel checks them too), rather than reading past the indices."""
    layer = LookupLinear(50, 4, mode="max").eval()
    idx, off = torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([0, 2, 4])
    served = torch.export.export(layer, (idx, off), dynamic_shapes=({0: AUTO}, {0: AUTO})).module()
    assert torch.equal(served(idx, off), layer(idx, off))
    for bad in ([0, 3, 1], [0, 2, 40], [2, 3, 4]):
        with pytest.raises(RuntimeError, match="must start at 0, never decrease"):
            served(idx, torch.tensor(bad))


@pytest.mark.parametrize("kind", [EmbeddingBag, LookupLinear])
def test_compiled_sum_refuses_the_offsets_eager_refuses(kind: type[nn.Module]) -> None:
    """A compiled ``sparse=False`` sum (eager's CPU fast path, which reads the offsets on the
    host) asserts its offsets where the graph runs, as eager refuses them: decreasing start
    offsets, and CSR offsets short of the end (``nn.EmbeddingBag`` reads both as they come)."""
    idx = torch.tensor([1, 2, 3, 4])
    for include_last_offset, good, bad in ((False, [0, 1, 3], [0, 2, 1]),
                                           (True, [0, 1, 4], [0, 1, 2])):
        torch._dynamo.reset()
        layer = kind(10, 4, mode="sum", include_last_offset=include_last_offset)
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(idx, torch.tensor(good)), layer(idx, torch.tensor(good)))
        with pytest.raises(OffsetsError):
            layer(idx, torch.tensor(bad))
        with pytest.raises(RuntimeError, match="must start at 0, never decrease"):
            compiled(idx, torch.tensor(bad))


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_a_graph_on_an_index_tensor_refuses_an_index_out_of_range_with_a_runtime_error(
        padding_idx: int | None) -> None:
    """An index tensor's lookup asserts its range in a recorded graph, as eager checks it: a
    compiled or exported LookupLinear raises the RuntimeError docs/serving.md promises (eager's
    LookupIndexError is one too), naming lookuplinear, where ATen's kernel raised a bare
    IndexError."""
    torch._dynamo.reset()
    layer = LookupLinear(20, 4, padding_idx=padding_idx).eval()
    good, bad = torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 25], [3, 4]])
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    program = torch.export.export(layer, (good,), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    with torch.no_grad():
        assert torch.equal(compiled(good), layer(good))
        assert torch.equal(program.module()(good), layer(good))
        for run in (layer, compiled, program.module()):
            with pytest.raises(RuntimeError, match="out of range for in_features=20"):
                run(bad)


@pytest.mark.parametrize(("dtype", "rows", "top"), [(torch.uint8, 300, 255),
                                                     (torch.int16, 40_000, 30_000)])
def test_a_graph_takes_narrow_indices_of_a_table_wider_than_their_dtype(
        dtype: torch.dtype, rows: int, top: int) -> None:
    """uint8 and int16 indices of a table with more rows than the dtype holds (every index is
    then in range): a compiled or exported layer gives eager's output, as eager widens them;
    its range check compared them with the row count in their dtype, where 300 is 44 in
    uint8, and refused valid indices."""
    from lookuplinear.ops._asserts import assert_bags_twin

    torch._dynamo.reset()
    layer = LookupLinear(rows, 3).eval()
    x = torch.tensor([[1, top], [top - 1, 0]], dtype=dtype)
    with torch.no_grad():
        want = layer(x)
        assert torch.equal(torch.compile(layer, fullgraph=True, backend="aot_eager")(x), want)
        assert torch.equal(torch.export.export(layer, (x,)).module()(x), want)
    assert_bags_twin(x, None, rows, "input", "Bags")  # both registrations' check
    torch.ops.lookuplinear.assert_bags(x, None, rows, "input", "Bags")
    with pytest.raises(RuntimeError, match="out of range for in_features=200"):
        torch.ops.lookuplinear.assert_bags(torch.tensor([250], dtype=torch.uint8), None, 200,
                                           "input", "Bags")


def test_compiled_max_and_padding_run_short_csr_offsets_to_the_end_as_eager() -> None:
    """``include_last_offset=True`` offsets whose last entry falls short of the indices' end:
    with ``mode="max"`` or a ``padding_idx`` the last bag runs to the end, in
    ``nn.EmbeddingBag``, eagerly and in a compiled graph alike, ``nn.EmbeddingBag``'s to the
    bit."""
    idx, short = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 1, 2])
    for kwargs in ({"mode": "max"}, {"mode": "sum", "padding_idx": 0},
                   {"mode": "mean", "padding_idx": 0}):
        torch._dynamo.reset()
        torch.manual_seed(0)
        layer = EmbeddingBag(10, 4, include_last_offset=True, **kwargs)
        stock = nn.EmbeddingBag(10, 4, include_last_offset=True, **kwargs,
                                _weight=layer.weight.detach().clone())
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        with torch.no_grad():
            want = stock(idx, short)
            assert torch.equal(layer(idx, short), want), kwargs
            assert torch.equal(compiled(idx, short), want), kwargs


def weighted_batch(n: int, seed: int, max_weight: float = 1.0) -> KeyedBags:
    """Weighted bags of raw user IDs (some never seen) and item and tag indices; the tag
    entries (a max table's) weigh ``max_weight``."""
    kb = keyed_batch(n, seed, user_ids=True)
    tags = keyed_batch(n, seed + 50)["item"]
    g = torch.Generator().manual_seed(seed)
    values = torch.cat([kb.values, tags.indices])
    weights = torch.cat([torch.rand(kb.values.numel(), generator=g),
                         torch.full((tags.indices.numel(),), max_weight)])
    return KeyedBags(["user", "item", "tag"], values,
                     lengths=torch.cat([kb.lengths(), tags.lengths()]), weights=weights)


@pytest.mark.parametrize("quantized", [False, True])
def test_exported_weighted_collection_with_a_map_and_a_max_table(quantized: bool) -> None:
    """Weighted batches through an IdMap-keyed table and a max table export (no guard on the
    batch's values) and equal the module; a max entry of weight other than 1 is refused where
    the program runs, as the module refuses it."""
    torch.manual_seed(0)
    model = Head(LookupCollection([
        TableConfig("user", 40, 4, ["user"], hashing="map", fallback_rows=3),
        TableConfig("item", 30, 4, ["item"], mode="mean"),
        TableConfig("tag", 30, 4, ["tag"], mode="max")]), width=12)
    with torch.no_grad():
        model(weighted_batch(6, 0))  # the map takes IDs
    model.eval()
    if quantized:
        model.tables = model.tables.quantize({"user": "int8", "item": "int4", "tag": "int8"})
    program = torch.export.export(model, (weighted_batch(4, 1),),
                                  dynamic_shapes=([{0: AUTO}, {0: AUTO}, {0: AUTO}],))
    programs = [program]
    if not quantized:  # the weighted mean table's weights decompose to functional ATen ops
        programs.append(program.run_decompositions(decompositions()))
        assert not lookuplinear_ops(programs[-1])
    for n, seed in [(7, 2), (2, 3)]:
        kb = weighted_batch(n, seed)
        with torch.no_grad():
            for p in programs:
                assert torch.equal(p.module()(kb), model(kb))
    with pytest.raises(InputValueError, match="every entry must have weight 1"):
        model(weighted_batch(3, 4, max_weight=2.0))
    # (under no_grad, as the calls above: the program turns grad mode off around the
    # quantized tables and raises before turning it on again)
    with pytest.raises(RuntimeError, match="every entry must have weight 1"), torch.no_grad():
        program.module()(weighted_batch(3, 4, max_weight=2.0))


def test_compiled_sparse_embedding_equals_eager() -> None:
    """``lookuplinear.Embedding(sparse=True)`` records its lookup as ``LookupLinear`` does
    (its eager path asks the table's binding, which a recorded graph does not read)."""
    torch.manual_seed(0)
    emb = Embedding(10, 3, sparse=True)
    x = torch.tensor([[1, 2, 2], [9, 1, 0]])
    torch._dynamo.reset()
    assert torch.equal(torch.compile(emb, fullgraph=True)(x), emb(x))


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_embedding_with_padding_trains_as_nn_embedding(fullgraph: bool) -> None:
    """``Embedding(padding_idx=0, sparse=True)`` in a compiled training step, with and without
    ``fullgraph=True``: one graph, whose gradient keeps the padding position with values of
    zero (one row per position, in input order: no size decided by the values), densified and
    after each ``SGD`` step ``nn.Embedding``'s to the bit (docs/serving.md)."""
    torch.manual_seed(0)
    stock = nn.Embedding(30, 8, padding_idx=0, sparse=True)
    emb = Embedding(30, 8, padding_idx=0, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(stock.weight)
    x = torch.tensor([[1, 2, 2], [3, 0, 4]])
    torch._dynamo.reset()
    step = torch.compile(lambda b: emb(b).square().sum(), fullgraph=fullgraph,
                         backend="aot_eager")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (stock, emb)]
    for _ in range(2):
        for opt in opts:
            opt.zero_grad()
        stock(x).square().sum().backward()
        step(x).backward()
        g = emb.weight.grad
        assert torch.equal(g._indices(), x.reshape(1, -1))
        assert not g._values()[x.reshape(-1) == 0].any()
        assert torch.equal(g.to_dense(), stock.weight.grad.to_dense())
        for opt in opts:
            opt.step()
        assert torch.equal(emb.weight, stock.weight)


@needs_compiler
@pytest.mark.parametrize("kind", [Embedding, LookupLinear])
@pytest.mark.parametrize("shape", [(1, 1), (1, 1, 1), (2, 1), (3,)])
def test_inductor_gradient_of_a_padded_sparse_lookup_is_eager_and_nn_embeddings(
        kind: type[nn.Module], shape: tuple[int, ...]) -> None:
    """A padded ``sparse=True`` lookup compiled by Inductor: its weight gradient densifies to
    the eager one and ``nn.Embedding``'s, a batch of one entry in several dimensions too (the
    gradient's values an ``(entries, dim)`` buffer of its own, not a view of the output's)."""
    torch.manual_seed(0)
    stock = nn.Embedding(10, 3, padding_idx=2, sparse=True)
    no_bias: dict[str, Any] = {"bias": False} if kind is LookupLinear else {}
    ours = kind(10, 3, padding_idx=2, sparse=True, **no_bias)
    with torch.no_grad():
        ours.weight.copy_(stock.weight)
    twin = copy.deepcopy(ours)
    x = torch.tensor([1, 2, 5])[:torch.Size(shape).numel()].reshape(shape)
    scale = torch.randn(*shape, 3)
    torch._dynamo.reset()
    step = torch.compile(lambda m: (m(x) * scale).square().sum(), fullgraph=True)
    (stock(x) * scale).square().sum().backward()
    (ours(x) * scale).square().sum().backward()
    step(twin).backward()
    want = stock.weight.grad.to_dense()
    assert want[1].any()
    assert torch.allclose(ours.weight.grad.to_dense(), want)
    assert torch.allclose(twin.weight.grad.to_dense(), want)


def test_a_frame_compiled_on_its_own_reads_a_tables_binding() -> None:
    """The binding check of an eager ``Embedding(sparse=True)`` forward, which
    ``torch.compile`` records as a frame of its own where it runs that forward outside a graph
    (after a graph break): None for a table no optimizer took, a ``fused=True`` optimizer's
    binding for its table."""
    from lookuplinear import optim
    from lookuplinear._fusion import binding

    emb = Embedding(30, 4, padding_idx=0, sparse=True)
    torch._dynamo.reset()
    assert torch.compile(binding, backend="eager")(emb.weight) is None
    optim.Adam(emb.parameters(), lr=0.1, fused=True)
    torch._dynamo.reset()
    found = torch.compile(binding, backend="eager")(emb.weight)
    assert found is not None and found is binding(emb.weight)


def test_a_map_in_training_mode_runs_outside_a_recorded_graph() -> None:
    """An IdMap-keyed collection in training: the map's call breaks the graph (the same rows
    and map as eager), and with fullgraph=True the error says why."""
    torch.manual_seed(0)
    eager = LookupCollection([TableConfig("user", 8, 4, ["user"], hashing="map")])
    compiled = copy.deepcopy(eager)
    kb = KeyedBags.from_dict({"user": [[10**12], [55], [7, -3]]})
    torch._dynamo.reset()
    with pytest.raises(Exception, match="IdMap in training mode"):  # Dynamo's own class
        torch.compile(compiled, fullgraph=True)(kb)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(compiled)(kb).values(), eager(kb).values())
    assert len(compiled.id_maps["user"]) == len(eager.id_maps["user"]) == 4


@needs_compiler
def test_inductor_backward_of_a_mapped_table_beside_another_equals_eager() -> None:
    """An IdMap-keyed table in eval mode beside another table, compiled by Inductor: the
    forward and the gradient equal eager's (each feature's bags sliced out of the batch once,
    for the map and the lookup, so the backward's sizes are of symbols its graph has)."""
    torch.manual_seed(0)
    model = LookupCollection([TableConfig("u", 10, 4, ["u"], hashing="map"),
                              TableConfig("i", 20, 4, ["i"])])
    kb = KeyedBags.from_dict({"u": [[10**12], [7, 7], [3]], "i": [[1], [2], [3]]})
    model(kb)  # the map takes the IDs
    model.eval()
    eager = model(kb).values()
    (g_eager,) = torch.autograd.grad(eager.square().sum(), list(model.parameters()))
    torch._dynamo.reset()
    fast = torch.compile(lambda b: model(b).values(), fullgraph=True)(kb)
    (g_fast,) = torch.autograd.grad(fast.square().sum(), list(model.parameters()))
    assert torch.equal(fast, eager)
    assert torch.allclose(g_fast, g_eager, atol=1e-6)


def test_a_compiled_fused_loss_updates_only_where_it_accumulates() -> None:
    """Compiled with fullgraph=True, a loss over a fused table: ``torch.autograd.grad`` of the
    table returns its gradient and moves nothing (the table and the optimizer state), a
    second ``backward()`` before ``step()`` warns as eager does."""
    import warnings

    from lookuplinear import FusedAccumulationWarning, optim

    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = LookupLinear(30, 4, bias=False, sparse=True)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, fused=True)
    idx, off = torch.tensor([3, 1, 3, 7]), torch.tensor([0, 2, 4])
    compiled = torch.compile(lambda: layer(idx, off).square().sum(), fullgraph=True,
                             dynamic=False, backend="aot_eager")
    compiled().backward()  # the state exists
    before = layer.weight.detach().clone()
    state = opt.state[layer.weight]["sum"].clone()
    (g,) = torch.autograd.grad(compiled(), [layer.weight])
    assert g.is_sparse and torch.equal(layer.weight, before)
    assert torch.equal(opt.state[layer.weight]["sum"], state) and layer.weight.grad is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled().backward()
    assert any(issubclass(w.category, FusedAccumulationWarning) for w in caught)
    assert not torch.equal(layer.weight, before) and layer.weight.grad is None


@pytest.mark.parametrize("name", ["RowWiseAdagrad", "Adam"])
def test_compiled_fused_step_equals_eager(name: str) -> None:
    """A fused=True optimizer over a layer and a collection: a loss compiled with
    fullgraph=True updates the tables at the end of its backward as the eager loss does (the
    recorded operators' gradient taken from the tables' gradient accumulation), to the bits,
    leaving no gradient; step() has nothing left to do for them."""
    from lookuplinear import optim

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.ModuleDict({
        "layer": LookupLinear(30, 4, bias=False, sparse=True),
        "coll": LookupCollection([TableConfig("user", 20, 4, ["user"]),
                                  TableConfig("item", 40, 4, ["item"])], sparse=True)})
    twin = copy.deepcopy(model)
    start = [p.detach().clone() for p in model.parameters()]

    def loss(m: nn.Module, b: tuple[torch.Tensor, torch.Tensor, KeyedBags]) -> torch.Tensor:
        idx, off, kb = b
        return m["layer"](idx, off).square().sum() + m["coll"](kb).values().sin().sum()

    compiled = torch.compile(lambda b: loss(twin, b), fullgraph=True, dynamic=False,
                             backend="aot_eager")
    opts = [getattr(optim, name)(m.parameters(), lr=0.1, fused=True) for m in (model, twin)]
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        idx = torch.randint(0, 30, (12,), generator=g)  # repeated rows
        b = (idx, torch.tensor([0, 3, 7, 12]), keyed_batch(6, seed=step))
        for o in opts:
            o.zero_grad()
        loss(model, b).backward()
        compiled(b).backward()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            assert p.grad is None and q.grad is None  # applied in the backward, both
            assert torch.equal(p, q)
        for o in opts:
            o.step()
    assert not any(torch.equal(p, s) for p, s in zip(twin.parameters(), start, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("sparse", [False, True])
def test_compiled_layer_on_cuda_equals_eager(sparse: bool) -> None:
    """On CUDA, where the operators run their torch-op twins: a layer compiled whole
    (``fullgraph=True``, Inductor) gives the eager output and weight gradient, to float
    rounding."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 1000, (256 * 20,), generator=g).cuda()
    off = torch.arange(0, 256 * 20 + 1, 20).cuda()
    layer = LookupLinear(1000, 16, sparse=sparse, include_last_offset=True, device="cuda")
    found = []
    for call in (layer, torch.compile(layer, fullgraph=True)):
        layer.zero_grad(set_to_none=True)
        out = call(idx, off)
        out.square().sum().backward()
        assert layer.weight.grad is not None and layer.weight.grad.is_sparse == sparse
        found.append((out.detach(), layer.weight.grad.to_dense()))
    for eager, compiled in zip(*found, strict=True):
        # a row's gradient sums its ~5 entries' (of magnitude ~5) in the order the GPU's
        # atomic adds take, another in each run: a few float32 ulps of the terms, ~1e-5
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


FRESH_COMPILE = """
import torch
import lookuplinear
from lookuplinear import Bags
layer = lookuplinear.LookupLinear(50, 4, mode="mean").eval()
compiled = torch.compile(layer, dynamic=True, fullgraph=True)
bags = Bags(torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2, 2, 5]))
with torch.no_grad():  # to rounding: LOOKUPLINEAR_BACKEND=torch's eager mean is ATen's
    torch.testing.assert_close(compiled(bags), layer(bags))
print("compiled")
"""


def test_a_first_compile_with_dynamic_shapes_in_ci_calls_the_operators(tmp_path: Path) -> None:
    """In a fresh process with ``CI`` set (as GitHub Actions sets it) and an empty Inductor
    cache, a graph with symbolic sizes compiles: its fake tensors run the operators'
    decompositions, not their fakes, and those tell Inductor to call the operators too
    (else Inductor refuses an operator that has a decomposition there)."""
    import os

    env = {**os.environ, "CI": "true", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    run = subprocess.run([sys.executable, "-c", FRESH_COMPILE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "compiled" in run.stdout, run.stderr[-3000:]


class _FromLengths(nn.Module):
    """A collection over a keyed batch the forward builds from values and bag lengths."""

    def __init__(self, collection: nn.Module) -> None:
        super().__init__()
        self.collection = collection

    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.collection(KeyedBags(["user", "item"], values, lengths=lengths)).values()


@pytest.mark.parametrize("kind", ["plain", "mixed", "mean-sqrtn"])
def test_exported_forward_that_builds_its_batch_from_lengths(kind: str) -> None:
    """A ``KeyedBags(keys, values, lengths=...)`` built inside an exported forward: the
    constructor reads no length in the graph (a data-dependent guard would stop the export),
    the program equals the module on other batches, and lengths that do not cut the values
    into bags are refused where it runs, as the eager constructor refuses them."""
    model = _FromLengths(tables_of(kind, sparse=True)[0]).eval()
    first = keyed_batch(4, 0)
    program = torch.export.export(model, (first.values, first.lengths()),
                                  dynamic_shapes=({0: AUTO}, {0: AUTO}))
    with torch.no_grad():
        for n, seed in [(6, 1), (2, 2)]:
            kb = keyed_batch(n, seed)
            torch.testing.assert_close(program.module()(kb.values, kb.lengths()),
                                       model(kb.values, kb.lengths()))
        kb = keyed_batch(5, 3)
        bad = kb.lengths().clone()
        bad[0] += 1  # one entry more than values holds
        with pytest.raises(InputValueError, match="lengths sum to"):
            model(kb.values, bad)
        with pytest.raises((ValueError, RuntimeError), match="offsets"):
            program.module()(kb.values, bad)


def test_exported_forward_of_a_variable_batch_per_key() -> None:
    """A variable batch per key (TorchRec's VBE: a stride per key and ``inverse_indices``)
    built inside an exported forward: its strides are read on the host, never from a tensor,
    so the export takes no data-dependent guard, and the program equals the module; an
    inverse index past its key's bags is refused where it runs."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 6, 4, ["user"]),
                            TableConfig("item", 6, 3, ["item"])]).eval()

    class Variable(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.col = col

        def forward(self, values: torch.Tensor, lengths: torch.Tensor,
                    inverse: torch.Tensor) -> torch.Tensor:
            kb = KeyedBags(["user", "item"], values, lengths=lengths,
                           stride_per_key_per_rank=[[2], [3]], inverse_indices=inverse)
            return self.col(kb).values()

    model = Variable()
    values, lengths = torch.tensor([1, 2, 3, 4, 5, 0]), torch.tensor([2, 1, 1, 1, 1])
    inverse = torch.tensor([[0, 1, 1, 0], [2, 0, 1, 2]])
    program = torch.export.export(model, (values, lengths, inverse))
    with torch.no_grad():
        assert torch.equal(program.module()(values, lengths, inverse),
                           model(values, lengths, inverse))
        other = torch.tensor([[1, 1, 0, 0], [0, 2, 2, 1]])
        assert torch.equal(program.module()(values, lengths, other),
                           model(values, lengths, other))
        bad = inverse.clone()
        bad[0, 0] = 5  # the user key has 2 bags
        with pytest.raises(RuntimeError, match="out of bounds"):
            program.module()(values, lengths, bad)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_collection_takes_a_variable_batch_per_key(dynamic: bool) -> None:
    """A variable batch per key given to a compiled collection: its strides are host ints
    that the graph holds, its padding torch ops, as in eager."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 6, 4, ["user"]),
                            TableConfig("item", 6, 3, ["item"])])
    kb = KeyedBags(["user", "item"], torch.tensor([1, 2, 3, 4, 5, 0]),
                   lengths=torch.tensor([2, 1, 1, 1, 1]), stride_per_key_per_rank=[[2], [3]],
                   inverse_indices=torch.tensor([[0, 1, 1, 0], [2, 0, 1, 2]]))
    torch._dynamo.reset()
    compiled = torch.compile(col, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    with torch.no_grad():
        assert torch.equal(compiled(kb).values(), col(kb).values())


def test_exported_collection_refuses_a_batch_weighted_otherwise(tmp_path: Path) -> None:
    """Whether a batch is weighted is part of the program's input spec: a program exported on
    unweighted bags refuses weighted ones (it would ignore their weights), and the reverse,
    with torch.export's spec error; a saved weighted program loads and runs."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 20, 4, ["user"]),
                            TableConfig("item", 20, 4, ["item"])]).eval()
    plain = KeyedBags.from_dict({"user": [[1], [2, 3]], "item": [[4], [5]]})
    weighted = KeyedBags(plain.keys(), plain.values, offsets=plain.offsets,
                         weights=torch.rand(plain.values.numel()) + 0.5)
    for given, other in [(plain, weighted), (weighted, plain)]:
        program = torch.export.export(col, (given,))
        with torch.no_grad():
            assert torch.equal(program.module()(given).values(), col(given).values())
            with pytest.raises(ValueError, match="tree spec"):
                program.module()(other)
    torch.export.save(program, tmp_path / "weighted.pt2")
    with torch.no_grad():
        served = torch.export.load(tmp_path / "weighted.pt2").module()
        assert torch.equal(served(weighted).values(), col(weighted).values())


def padded_batch(n: int, seed: int, weighted: bool = False) -> KeyedBags:
    """``n`` examples of a user and a padded feature ``p`` whose ID 0 is its padding."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (2 * n,), generator=g)
    values = torch.randint(0, 6, (int(lengths.sum()),), generator=g)
    w = torch.rand(values.numel(), generator=g) + 0.5 if weighted else None
    return KeyedBags(["user", "p"], values, lengths=lengths, weights=w)


@pytest.mark.parametrize(("mode", "weighted", "sparse"), [
    ("sum", False, True), ("sum", True, False), ("mean", True, True), ("sqrtn", False, False)])
def test_collection_with_a_padded_table_exports_and_compiles(mode: str, weighted: bool,
                                                              sparse: bool) -> None:
    """A table with ``padding_idx`` in a recorded graph keeps its padding entries, of weight
    0: the program and the compiled step equal the eager ones to the bit."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("user", 20, 4, ["user"]),
                            TableConfig("p", 30, 4, ["p"], padding_idx=0, mode=mode)],
                           sparse=sparse)
    model = Head(col, 8)
    train_both(model, lambda m, b: m(b).square().sum(),
               [padded_batch(4, 0, weighted), padded_batch(4, 1, weighted)])
    col.eval()
    program = torch.export.export(col, (padded_batch(4, 2, weighted),),
                                  dynamic_shapes=([{0: AUTO}, {0: AUTO},
                                                   {0: AUTO} if weighted else None],))
    with torch.no_grad():
        for n, seed in [(5, 3), (2, 4)]:
            kb = padded_batch(n, seed, weighted)
            assert torch.equal(program.module()(kb).values(), col(kb).values())


@pytest.mark.parametrize(("dtype", "mode"), [
    ("int8", "sum"), ("int8", "max"), ("float16", "mean"), ("float16", "sqrtn")])
def test_quantized_layer_with_padding_exports_and_compiles(dtype: str, mode: str) -> None:
    """A quantized layer's padding entries in a recorded graph: weight 0 (``max``: never a
    bag's max), the same outputs as eager's, which drops them."""
    torch.manual_seed(0)
    q = LookupLinear(20, 4, mode=mode, padding_idx=2).eval().quantize(dtype)
    first = (torch.tensor([2, 5, 5, 2, 7, 1, 2, 3]), torch.tensor([0, 3, 3, 6]))
    other = (torch.tensor([2, 4, 9, 2, 7, 1, 2, 3, 2, 2, 8]), torch.tensor([0, 1, 1, 6, 9]))
    program = torch.export.export(q, first, dynamic_shapes=({0: AUTO}, {0: AUTO}))
    torch._dynamo.reset()
    compiled = torch.compile(q, fullgraph=True, backend="aot_eager", dynamic=True)
    for args in (first, other):
        assert torch.equal(program.module()(*args), q(*args))
        assert torch.equal(compiled(*args), q(*args))


def test_float16_max_layer_with_padding_keeps_a_bags_own_neg_inf_max_when_recorded() -> None:
    """float16 keeps inf: a bag whose max is a row's own ``-inf`` gives ``-inf`` in a recorded
    graph (exported, compiled) as in eager and ``F.embedding_bag``, beside a padding entry;
    only a bag of padding alone (or none) gives 0."""
    layer = EmbeddingBag(4, 2, mode="max", padding_idx=0)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.0, 0.0], [-torch.inf, 1.0], [3.0, 3.0], [4, 4]]))
    q = layer.quantize("float16")
    first = (torch.tensor([1, 0, 2, 3]), torch.tensor([0, 2]))
    other = (torch.tensor([0, 1, 0, 0, 1, 2]), torch.tensor([0, 2, 2, 4, 5]))
    program = torch.export.export(q, first, dynamic_shapes=({0: AUTO}, {0: AUTO})).module()
    torch._dynamo.reset()
    compiled = torch.compile(q, fullgraph=True, backend="aot_eager", dynamic=True)
    table = q.dequantize().weight.detach()
    for idx, offsets in (first, other):
        want = torch.nn.functional.embedding_bag(idx, table, offsets, mode="max",
                                                 padding_idx=0)
        assert torch.equal(q(idx, offsets), want)
        assert torch.equal(program(idx, offsets), want), (idx, offsets)
        assert torch.equal(compiled(idx, offsets), want), (idx, offsets)



@pytest.mark.parametrize("dtype", ["int8", "float16"])
@pytest.mark.parametrize("mode", ["sum", "mean", "sqrtn", "max"])
def test_quantized_layer_with_padding_exports_equal_to_eager_on_random_batches(
        dtype: str, mode: str) -> None:
    """docs/serving.md: a quantized layer's padding equals eager to the bit once exported, on
    batches with padding entries and without (float16 eager takes the graph's 0/1 weights: a
    weighted mean rounds apart from an unweighted one); a float16 padding row of NaN (kept
    as it is) adds nothing in either."""
    torch.manual_seed(0)
    layer = LookupLinear(10, 8, mode=mode, padding_idx=5, bias=False)
    if dtype == "float16":
        with torch.no_grad():
            layer.weight[5] = torch.nan
    q = layer.quantize(dtype)
    example = (torch.tensor([1, 5, 5, 7, 3, 5]), torch.tensor([0, 2, 2, 5]))
    program = torch.export.export(q, example, dynamic_shapes=({0: AUTO}, {0: AUTO})).module()
    batches = [(torch.tensor([8, 4, 4, 9]), torch.tensor([0, 3, 3]))]
    g = torch.Generator().manual_seed(1)
    for _ in range(30):
        n = int(torch.randint(1, 12, (1,), generator=g))
        offsets = torch.randint(0, n + 1, (3,), generator=g).sort().values
        offsets[0] = 0
        batches.append((torch.randint(0, 10, (n,), generator=g), offsets))
    for x, offsets in batches:
        out = q(x, offsets)
        assert torch.equal(program(x, offsets), out) and not out.isnan().any(), (x, offsets)


class _Checked(nn.Module):
    """A layer on start offsets and a collection on a keyed batch built in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = LookupLinear(50, 4, mode="mean")
        self.tables = LookupCollection([TableConfig("user", 20, 4, ["user"]),
                                        TableConfig("item", 30, 4, ["item"], mode="mean")])

    def forward(self, idx: torch.Tensor, off: torch.Tensor, values: torch.Tensor,
                offsets: torch.Tensor) -> torch.Tensor:
        kb = KeyedBags(["user", "item"], values, offsets=offsets)
        return torch.cat([self.layer(idx, off), self.tables(kb).values()], 1)


def bad_offsets_cases() -> tuple[tuple[torch.Tensor, ...], dict[str, tuple[torch.Tensor, ...]]]:
    """A good batch of :class:`_Checked`, and batches whose offsets are bad in one way each."""
    idx, off = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]), torch.tensor([0, 2, 5])
    values, offsets = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), torch.tensor([0, 1, 3, 4, 6, 8, 8])
    good = (idx, off, values, offsets)
    bad = {
        "keyed: decreasing": torch.tensor([0, 3, 1, 4, 6, 8, 8]),
        "keyed: first not 0": torch.tensor([1, 1, 3, 4, 6, 8, 8]),
        "keyed: last past the values": torch.tensor([0, 1, 3, 4, 6, 8, 9]),
        "keyed: last short of the values": torch.tensor([0, 1, 3, 4, 6, 7, 7]),
    }
    cases = {name: (idx, off, values, o) for name, o in bad.items()}
    cases["layer: decreasing"] = (idx, torch.tensor([0, 5, 2]), values, offsets)
    cases["layer: past the indices"] = (idx, torch.tensor([0, 2, 100]), values, offsets)
    return good, cases


def test_decomposed_program_refuses_bad_offsets() -> None:
    """A program decomposed to ATen asserts the offsets of the bags it reads, a layer's and a
    keyed batch's (which the operators' C++ kernels check): ATen's lookups read bad ones as
    they come."""
    model = _Checked().eval()
    good, cases = bad_offsets_cases()
    program = torch.export.export(model, good, dynamic_shapes=tuple({0: AUTO} for _ in good))
    aten = program.run_decompositions(decompositions()).module()
    with torch.no_grad():
        assert torch.equal(aten(*good), model(*good))
        for name, args in cases.items():
            with pytest.raises(RuntimeError, match="offsets"):
                aten(*args)
                pytest.fail(name)
    # a batch given as the program's input is rebuilt unchecked: the lookup's twin asserts
    tables = model.tables
    kb = KeyedBags(["user", "item"], good[2], offsets=good[3])
    aten = torch.export.export(tables, (kb,), dynamic_shapes=(KB_DYNAMIC,)).run_decompositions(
        decompositions()).module()
    with torch.no_grad():
        assert torch.equal(aten(kb).values(), tables(kb).values())
        for name, args in cases.items():
            if name.startswith("keyed"):
                with pytest.raises(RuntimeError, match="offsets"):
                    aten(KeyedBags.from_checked(["user", "item"], args[2], args[3]))
                    pytest.fail(name)


@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_export_refuses_a_torch_sparse_input_clearly(mode: str, layout: str) -> None:
    """torch.export traces a sparse tensor without its entries: the layer refuses it, naming
    the bags' tensors as the program's inputs instead; those export and equal eager."""
    layer = LookupLinear(20, 3, mode=mode).eval()
    x = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1, 3, 3], [2, 5, 7, 2, 9]]),
                                torch.rand(5), (4, 20)).coalesce()
    if layout == "csr":
        x = x.to_sparse_csr()
    with pytest.raises(InputTypeError, match="cannot take a torch sparse tensor"):
        torch.export.export(layer, (x,))

    class FromBags(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, indices: torch.Tensor, offsets: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.layer(Bags(indices, offsets, weights))
            return out

    b = Bags.from_torch_sparse(x)  # its tensors views of x's: copied, as a caller's are
    b = Bags(b.indices.clone(), b.offsets.clone(), b.weights.clone())
    program = torch.export.export(FromBags(), (b.indices, b.offsets, b.weights))
    with torch.no_grad():
        assert torch.equal(program.module()(b.indices, b.offsets, b.weights), layer(x))


@pytest.mark.parametrize(("mode", "weighted"), [("mean", False), ("sum", True)])
def test_a_padded_layer_graph_is_stock_and_eager_within_rounding(mode: str,
                                                                   weighted: bool) -> None:
    """docs/serving.md's exception: bags with ``padding_idx`` and weights. The exported
    program skips the padding entries as ``nn.EmbeddingBag`` does, to its bit; eager drops them
    first and folds the weights, equal within float rounding. An unweighted mean is
    ``nn.EmbeddingBag``'s eagerly too, to the bit."""
    g = torch.Generator().manual_seed(1)
    idx, off = torch.randint(0, 10, (2000,), generator=g), torch.arange(0, 2000, 7)
    args: tuple[torch.Tensor, ...] = (idx, off, torch.rand(2000, generator=g)) if weighted else (
        idx, off)
    torch.manual_seed(0)
    layer = LookupLinear(50, 4, mode=mode, padding_idx=3, bias=False).eval()
    stock = nn.EmbeddingBag(50, 4, mode=mode, padding_idx=3,
                            _weight=layer.weight.detach().clone())
    program = torch.export.export(layer, args)
    with torch.no_grad():
        served, eager = program.module()(*args), layer(*args)
        assert torch.equal(served, stock(*args))
        torch.testing.assert_close(served, eager, rtol=1e-6, atol=1e-6)
        assert torch.equal(served, eager) or weighted


def test_an_exported_program_refuses_bags_not_as_many_for_every_key_by_its_input_guard() -> None:
    """docs/serving.md: an exported program records that the bags are as many for every key
    as a constraint on its inputs, so ``program.module()`` refuses a batch that breaks it with
    torch.export's guard (an AssertionError) before anything runs; eager raises
    InputValueError."""
    keys = ["u", "i", "m"]

    class FromTensors(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t = LookupCollection([TableConfig(k, 20, 4, [k]) for k in keys])

        def forward(self, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            return self.t(KeyedBags(keys, values, offsets=offsets)).values()

    model = FromTensors().eval()
    auto = torch.export.Dim.AUTO
    program = torch.export.export(model, (torch.arange(9), torch.arange(10)),
                                  dynamic_shapes=({0: auto}, {0: auto}))
    values, eight = torch.arange(9), torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 9])  # 8 bags, 3 keys
    with pytest.raises(InputValueError, match="8 bags for 3 keys"):
        model(values, eight)
    with pytest.raises(AssertionError, match="Guard failed"):
        program.module()(values, eight)


@pytest.mark.parametrize("record", ["compile", "export"])
def test_a_recorded_bfloat16_collection_with_padding_pools_as_eager_and_stock(
        record: str) -> None:
    """A bfloat16 table with ``padding_idx`` in a collection, recorded by ``torch.compile``
    (``fullgraph=True``) or ``torch.export``: its bags are eager's and
    ``nn.EmbeddingBag(padding_idx=...)``'s to the bit, its padding row's values whatever they
    are (inf here). The graph takes the kernel's ``padding_idx`` as eager does for such a
    table (its padding entries weighed 0 rounded the sums apart, and made an inf row NaN)."""
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("u", 20, 4, ["u"], dtype=torch.bfloat16),
                            TableConfig("p", 20, 4, ["p"], padding_idx=0,
                                        dtype=torch.bfloat16)]).eval()
    with torch.no_grad():
        col["p"].weight[0] = float("inf")
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(0, 20, (2 * 50,), generator=g)
    values = torch.randint(0, 20, (int(lengths.sum()),), generator=g)
    values[::4] = 0
    kb = KeyedBags(["u", "p"], values, lengths=lengths)
    torch._dynamo.reset()
    recorded = (torch.compile(col, fullgraph=True, backend="aot_eager") if record == "compile"
                else torch.export.export(col, (kb,)).module())
    p = kb["p"]
    stock = nn.EmbeddingBag.from_pretrained(col["p"].weight.detach(), mode="sum",
                                            padding_idx=0, include_last_offset=True)
    with torch.no_grad():
        eager, graph = col(kb)["p"], recorded(kb)["p"]
        assert torch.equal(eager, stock(p.indices, p.offsets))
        assert torch.equal(graph, eager)
    torch._dynamo.reset()
