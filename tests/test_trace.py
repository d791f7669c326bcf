"""Traced and exported layers (``torch.jit.trace``, ``torch.onnx.export``, ``torch.export``)
compute on every batch what the eager layer computes: no value of the trace batch (its entry
count, a C kernel's result) becomes a constant of the graph.

The reference is the eager layer on the same batch; each graph is built on one batch and run on
batches with more and fewer bags and entries. onnxruntime (and onnxscript for the dynamo-based
exporter) are optional test dependencies: those tests skip without them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lookuplinear import LookupLinear
from lookuplinear.errors import InputValueError

IN, OUT = 20, 4

#: (layer keyword arguments, whether the batches carry per-sample weights)
CONFIGS: dict[str, tuple[dict[str, Any], bool]] = {
    "sum sparse (DLRM)": ({"bias": False, "sparse": True}, True),
    "sum sparse unweighted": ({"bias": False, "sparse": True}, False),
    "sum dense grad": ({"sparse": False}, True),
    "mean sparse": ({"mode": "mean", "sparse": True}, False),
    "sqrtn": ({"mode": "sqrtn"}, True),
    "max": ({"mode": "max"}, False),
    "padding sparse": ({"padding_idx": 0, "sparse": True}, False),
    "padding mean": ({"padding_idx": 0, "mode": "mean"}, False),
    "CSR offsets": ({"include_last_offset": True, "sparse": True}, False),
}


def batch(
    n_bags: int, nnz: int, weighted: bool, include_last_offset: bool, seed: int
) -> tuple[torch.Tensor, ...]:
    """``nnz`` indices (index 0, the padding index of some configs, among them) in ``n_bags``
    bags of uneven sizes, one of them empty, as ``nn.EmbeddingBag`` takes them."""
    g = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, IN, (nnz,), generator=g)
    indices[::3] = 0
    starts = torch.sort(torch.randint(0, nnz + 1, (n_bags - 1,), generator=g)).values
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), starts])
    if include_last_offset:
        offsets = torch.cat([offsets, torch.tensor([nnz])])
    if not weighted:
        return indices, offsets
    return indices, offsets, torch.rand(nnz, generator=g)


def batches(config: str) -> tuple[tuple[torch.Tensor, ...], list[tuple[torch.Tensor, ...]]]:
    """The trace batch and three others: larger, smaller, and of one entry."""
    kwargs, weighted = CONFIGS[config]
    csr = kwargs.get("include_last_offset", False)
    trace = batch(4, 12, weighted, csr, seed=0)
    others = [batch(7, 30, weighted, csr, 1), batch(2, 5, weighted, csr, 2),
              batch(1, 1, weighted, csr, 3)]
    return trace, others


def make_layer(config: str) -> LookupLinear:
    torch.manual_seed(0)
    return LookupLinear(IN, OUT, **CONFIGS[config][0])


def traced(layer: nn.Module, example: tuple[torch.Tensor, ...]) -> Any:
    with warnings.catch_warnings():  # torch's deprecation notice and checks on the trace batch
        warnings.simplefilter("ignore")
        return torch.jit.trace(layer, example)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_jit_trace_equals_eager_on_other_batches(config: str) -> None:
    layer = make_layer(config)
    example, others = batches(config)
    graph = traced(layer, example)  # check_trace runs too: the graph is the same every time
    for b in [example, *others]:
        torch.testing.assert_close(graph(*b), layer(*b), rtol=1e-6, atol=1e-6)


def test_two_bag_trace_regression() -> None:
    """DLRM's call: ``nn.EmbeddingBag``-style start offsets, ``sparse=True``. Traced on two bags
    of two entries, the graph read the last bag of a larger batch only up to entry 4."""
    layer = make_layer("sum sparse unweighted")
    graph = traced(layer, (torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2])))
    indices, offsets = torch.tensor([1, 2, 3, 4, 5, 6, 7]), torch.tensor([0, 2])
    want = layer.weight[[1, 2]].sum(0), layer.weight[[3, 4, 5, 6, 7]].sum(0)
    torch.testing.assert_close(graph(indices, offsets), torch.stack(want))
    fewer = torch.tensor([1, 2, 3])  # the last bag: one entry, not an error
    torch.testing.assert_close(graph(fewer, offsets), layer(fewer, offsets))


@pytest.mark.parametrize("config", ["sum sparse (DLRM)", "sum dense grad"])
def test_trace_under_no_grad_keeps_the_gradient(config: str) -> None:
    """A graph traced under ``torch.no_grad`` (as exporters do) records no detach of the
    weight: run with grad enabled, it gives the eager layer's weight gradient."""
    layer = make_layer(config)
    example, others = batches(config)
    with torch.no_grad():
        graph = traced(layer, example)
    for b in others:
        graph(*b).square().sum().backward()
        got = layer.weight.grad
        layer.weight.grad = None
        layer(*b).square().sum().backward()
        want = layer.weight.grad
        layer.weight.grad = None
        assert got is not None and want is not None
        torch.testing.assert_close(got.to_dense(), want.to_dense())


def _output_and_grad(module: Any, weight: torch.Tensor, b: tuple[torch.Tensor, ...],
                     grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``module(*b)`` and the densified gradient ``weight`` gets from ``grad_out``."""
    weight.grad = None
    out = module(*b)
    (out * grad_out).sum().backward()
    assert weight.grad is not None
    grad = weight.grad.to_dense()
    weight.grad = None
    return out.detach(), grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 0])
@pytest.mark.parametrize("drop_in", [True, False], ids=["EmbeddingBag", "LookupLinear"])
def test_traced_sparse_mean_equals_eager_and_nn_embedding_bag_to_the_bit(
        drop_in: bool, padding_idx: int | None, dtype: torch.dtype) -> None:
    """``mode="mean", sparse=True``: a traced layer's output and weight gradient are the eager
    layer's and ``nn.EmbeddingBag``'s bits (ATen's mean: its backward multiplies the output's
    gradient by ``1 / size``), on a batch other than the traced one."""
    from lookuplinear import EmbeddingBag

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"mode": "mean", "sparse": True, "padding_idx": padding_idx,
                              "dtype": dtype}
    layer: nn.Module = (EmbeddingBag(IN, OUT, **kwargs) if drop_in
                        else LookupLinear(IN, OUT, bias=False, **kwargs))
    stock = nn.EmbeddingBag(IN, OUT, **kwargs)
    with torch.no_grad():
        stock.weight.copy_(layer.weight)
    graph = traced(layer, batch(4, 12, False, False, seed=0))
    g = torch.Generator().manual_seed(5)
    for b in (batch(7, 300, False, False, seed=1), batch(2, 5, False, False, seed=2)):
        grad_out = torch.randn(b[1].numel(), OUT, generator=g, dtype=dtype)
        want = _output_and_grad(stock, stock.weight, b, grad_out)
        for module in (layer, graph):
            got = _output_and_grad(module, layer.weight, b, grad_out)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("kwargs", [{"sparse": True}, {"sparse": True, "padding_idx": 0},
                                    {"sparse": False}])
def test_jit_trace_of_index_input_equals_eager(kwargs: dict[str, Any]) -> None:
    """An index tensor of shape (N, L): the row gather is C's in eager, torch's in the trace."""
    torch.manual_seed(0)
    layer = LookupLinear(IN, OUT, **kwargs)
    graph = traced(layer, (torch.tensor([[1, 0, 2], [3, 4, 5]]),))
    g = torch.Generator().manual_seed(1)
    for shape in ((5, 4), (1, 1), (3, 3)):
        x = torch.randint(0, IN, shape, generator=g)
        x[0, 0] = 0
        torch.testing.assert_close(graph(x), layer(x))


def test_trace_of_a_table_in_a_file_needs_every_row_drawn(tmp_path: Path) -> None:
    layer = LookupLinear(50, 3, storage=tmp_path / "t", seed=0, bias=False)
    example = (torch.tensor([1, 2, 3]), torch.tensor([0, 1]))
    with pytest.raises(InputValueError, match="materialize_all"):
        traced(layer, example)
    assert layer.storage is not None
    layer.storage.materialize_all()
    graph = traced(layer, example)
    b = (torch.tensor([7, 8, 9, 40, 41]), torch.tensor([0, 2, 2]))
    torch.testing.assert_close(graph(*b), layer(*b))


def _onnx_inputs(b: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    names = ("indices", "offsets", "weights")[: len(b)]
    return {name: t.numpy() for name, t in zip(names, b, strict=True)}


def _ort_outputs(path: Path, others: list[tuple[torch.Tensor, ...]]) -> Iterator[torch.Tensor]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for b in others:
        yield torch.from_numpy(session.run(None, _onnx_inputs(b))[0])


ONNX_CONFIGS = ["sum sparse (DLRM)", "sum dense grad", "mean sparse", "max"]


@pytest.mark.parametrize("config", ONNX_CONFIGS)
def test_onnx_torchscript_export_equals_eager(config: str, tmp_path: Path) -> None:
    """The TorchScript-based exporter (DLRM's ``--save-onnx``), run in onnxruntime."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    layer = make_layer(config).eval()
    example, others = batches(config)
    names = ["indices", "offsets", "weights"][: len(example)]
    path = tmp_path / "layer.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            layer, example, str(path), dynamo=False, input_names=names, output_names=["out"],
            dynamic_axes={"indices": {0: "nnz"}, "offsets": {0: "bags"}, "weights": {0: "nnz"}},
        )
    for b, got in zip(others, _ort_outputs(path, others), strict=True):
        torch.testing.assert_close(got, layer(*b).detach(), rtol=1e-5, atol=1e-6)


def test_onnx_export_of_a_float16_max_layer_with_padding_equals_eager(tmp_path: Path) -> None:
    """A float16-quantized ``max`` layer with ``padding_idx`` (TorchScript-based exporter, run
    in onnxruntime): a bag of padding alone gives 0, a row's own ``-inf`` stays its bag's max,
    on batches of other sizes than the example's."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    layer = LookupLinear(4, 2, bias=False, mode="max", padding_idx=0)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.0, 0.0], [-torch.inf, 1.0], [3.0, 3.0], [4, 4]]))
    q = layer.quantize("float16")
    example = (torch.tensor([1, 0, 2, 3]), torch.tensor([0, 2]))
    others = [example, (torch.tensor([0, 1, 0, 0, 1, 2]), torch.tensor([0, 2, 2, 4, 5]))]
    path = tmp_path / "layer.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(q, example, str(path), dynamo=False, input_names=["indices", "offsets"],
                          output_names=["out"],
                          dynamic_axes={"indices": {0: "nnz"}, "offsets": {0: "bags"}})
    for b, got in zip(others, _ort_outputs(path, others), strict=True):
        assert torch.equal(got, q(*b)), b


@pytest.mark.parametrize("config", ["sum sparse (DLRM)", "padding sparse"])
def test_onnx_dynamo_export_equals_eager(config: str, tmp_path: Path) -> None:
    """The ``torch.export``-based exporter, with the batch sizes dynamic."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    layer = make_layer(config).eval()
    example, others = batches(config)
    nnz, bags = torch.export.Dim("nnz"), torch.export.Dim("bags")
    shapes = ({0: nnz}, {0: bags}, {0: nnz})[: len(example)]
    path = tmp_path / "layer.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(layer, example, dynamo=True, dynamic_shapes=shapes,
                                    input_names=["indices", "offsets", "weights"][: len(example)])
    assert program is not None
    program.save(str(path))
    for b, got in zip(others, _ort_outputs(path, others), strict=True):
        torch.testing.assert_close(got, layer(*b).detach(), rtol=1e-5, atol=1e-6)


def test_onnx_torchscript_export_of_index_input_equals_eager(tmp_path: Path) -> None:
    """The exporter inlines the lookup's autograd function: the row gather must be a torch op
    there, not C's result on the trace batch."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    layer = LookupLinear(IN, OUT, sparse=True).eval()
    path = tmp_path / "index.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(layer, (torch.tensor([[1, 0, 2], [3, 4, 5]]),), str(path),
                          dynamo=False, input_names=["x"], output_names=["out"],
                          dynamic_axes={"x": {0: "n", 1: "length"}})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(1)
    for shape in ((5, 4), (1, 1)):
        x = torch.randint(0, IN, shape, generator=g)
        got = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
        torch.testing.assert_close(got, layer(x).detach())


class _Keyed(nn.Module):
    """A collection over a keyed batch built from plain tensors (what a trace takes)."""

    def __init__(self, collection: nn.Module) -> None:
        super().__init__()
        self.collection = collection

    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        from lookuplinear import KeyedBags

        return self.collection(KeyedBags(["a", "b", "c"], values, lengths=lengths)).values()


def _keyed(seed: int, one_id: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = (torch.ones(9, dtype=torch.long) if one_id
               else torch.randint(0, 4, (9,), generator=g))
    return torch.randint(0, 5, (int(lengths.sum()),), generator=g), lengths


@pytest.mark.parametrize("modes", ["sum", "mean"])
@pytest.mark.parametrize("one_id", [True, False], ids=["traced on one ID", "traced on bags"])
def test_jit_trace_of_a_collection_of_one_width_equals_eager(one_id: bool, modes: str) -> None:
    """A collection whose batch is one lookup (one width, dense gradients) traces: the graph
    takes no branch on the trace batch (one ID per bag or not), so later batches of either
    kind give the eager outputs; so does one whose sum and mean tables share the lookup (the
    means' sums divided by their bag sizes)."""
    from lookuplinear import LookupCollection, TableConfig

    torch.manual_seed(0)
    mode = {"a": "mean", "c": "mean"} if modes == "mean" else {}
    model = _Keyed(LookupCollection([TableConfig(k, 6, 4, [k], mode=mode.get(k, "sum"))
                                     for k in "abc"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(model, _keyed(0, one_id), check_trace=False)
    for seed, later_one_id in [(1, True), (2, False), (3, False)]:
        x = _keyed(seed, later_one_id)
        torch.testing.assert_close(traced(*x), model(*x))


@pytest.mark.parametrize("kind", ["sparse", "two widths", "mixed modes"])
def test_jit_trace_of_a_collection_split_by_feature_is_refused(kind: str) -> None:
    """A collection that cuts its batch by feature (each feature's bounds read from the
    offsets) cannot be traced: the trace would keep the trace batch's bounds and cut every
    later batch at them, a wrong result without an error. It is refused, naming
    ``torch.export``."""
    from lookuplinear import LookupCollection, TableConfig

    dims = {"a": 4, "b": 3 if kind == "two widths" else 4, "c": 4}
    modes = {"a": "sqrtn", "b": "sum", "c": "sqrtn"} if kind == "mixed modes" else {}
    col = LookupCollection([TableConfig(k, 6, dims[k], [k], mode=modes.get(k, "sum"))
                            for k in "abc"], sparse=kind == "sparse")
    with warnings.catch_warnings(), pytest.raises(
            InputValueError, match=r"torch\.jit\.trace.*torch\.export\.export"):
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.jit.trace(_Keyed(col), _keyed(0, False), check_trace=False)
