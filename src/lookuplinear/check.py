"""``check_equivalence``: prove on your own data that the lookup equals ``nn.Linear``."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from .errors import InputTypeError, LookupLinearError
from .modules.collection import LookupCollection, weighted_as
from .modules.layer import LookupLinear
from .reference import dense_reference
from .sparse.bags import Bags
from .sparse.keyed import KeyedBags, KeyedTensor

__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "EquivalenceError",
    "EquivalenceReport",
    "check_equivalence",
]

#: ``(rtol, atol)`` per dtype of the layer. The reference is computed in float64, so these bound
#: the layer's own rounding: a different summation order than the matmul, in the layer's dtype.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


class EquivalenceError(LookupLinearError, AssertionError):
    """The layer and its dense reference differ beyond tolerance."""


@dataclass(frozen=True)
class Comparison:
    """One quantity compared: the layer's value against the dense reference's."""

    name: str
    max_abs_diff: float
    max_rel_diff: float
    rtol: float
    atol: float
    ok: bool
    #: values that are NaN or infinite in either: left out of the differences, and a FAIL
    nonfinite: int = 0

    def __str__(self) -> str:
        verdict = "ok  " if self.ok else "FAIL"
        skipped = f", {self.nonfinite} not finite" if self.nonfinite else ""
        return (
            f"{verdict} {self.name:<14} max|diff|={self.max_abs_diff:.3g}  "
            f"max rel={self.max_rel_diff:.3g}  (rtol={self.rtol:g}, atol={self.atol:g}{skipped})"
        )


@dataclass(frozen=True)
class EquivalenceReport:
    """What :func:`check_equivalence` compared, and whether every comparison passed.

    Examples
    --------
    >>> report = check_equivalence(LookupLinear(5, 2), torch.tensor([4, 0]))
    >>> print(report)  # doctest: +ELLIPSIS
    LookupLinear vs nn.Linear on the dense input (index tensor of shape (2,)): EQUIVALENT
      ok   output         max|diff|=...
      ok   weight.grad    max|diff|=...
      ok   bias.grad      max|diff|=...
    >>> report.raise_if_failed()  # nothing to raise
    """

    input_form: str
    comparisons: list[Comparison] = field(default_factory=list)
    #: where NaN or infinity was found: in the input's values, a weight, a bias or the output
    nonfinite: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every quantity is within tolerance and every value is finite."""
        return not self.nonfinite and all(c.ok for c in self.comparisons)

    def raise_if_failed(self) -> None:
        """Raise :class:`EquivalenceError` listing the failed quantities."""
        if not self.ok:
            raise EquivalenceError(str(self))

    def __str__(self) -> str:
        verdict = "EQUIVALENT" if self.ok else "DIFFERENT"
        if self.nonfinite:
            verdict = "NOT COMPARABLE, values are not finite"
        head = f"LookupLinear vs nn.Linear on the dense input ({self.input_form}): {verdict}"
        found = [f"  {where}" for where in self.nonfinite]
        if any(" the output" not in w for w in self.nonfinite):  # not the output alone
            found.append("  (the dense reference multiplies every weight row, and 0 * NaN is "
                         "NaN; below, the finite values are compared. Fix the NaN where it was "
                         "written: the data, or the step that diverged)")
        elif found:
            found.append("  (the inputs are finite: the output overflowed the layer's dtype; "
                         "compute in a wider dtype or scale the weights)")
        return "\n".join([head, *found, *(f"  {c}" for c in self.comparisons)])


def _compare(
    name: str, got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float
) -> Comparison:
    got = (got.to_dense() if got.layout != torch.strided else got).detach().double()
    ref = (ref.to_dense() if ref.layout != torch.strided else ref).detach().double()
    if got.shape != ref.shape:
        return Comparison(name, float("inf"), float("inf"), rtol, atol, False)
    if got.numel() == 0:
        return Comparison(name, 0.0, 0.0, rtol, atol, True)
    finite = torch.isfinite(got) & torch.isfinite(ref)
    skipped = int((~finite).sum())
    if skipped == finite.numel():
        return Comparison(name, 0.0, 0.0, rtol, atol, False, skipped)
    got, ref = got[finite], ref[finite]
    diff = (got - ref).abs()
    ok = bool((diff <= atol + rtol * ref.abs()).all()) and skipped == 0
    rel = diff / ref.abs().clamp_min(torch.finfo(torch.float64).tiny)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    return Comparison(name, float(diff.max()), float(rel.max()), rtol, atol, ok, skipped)


def _nonfinite(where: str, t: torch.Tensor | None, rows: str = "rows") -> list[str]:
    """``["NaN in the weight: rows [3, 7] (2 of 10)"]`` where ``t`` holds NaN or infinity (by
    its first dimension), else ``[]``."""
    if t is None or not t.dtype.is_floating_point:
        return []
    t = (t.to_dense() if t.layout != torch.strided else t).detach()
    bad = ~torch.isfinite(t)
    if not bad.any():
        return []
    what = "NaN" if torch.isnan(t).any() else "infinity"
    if t.dim() == 0:
        return [f"{what} in the {where}"]
    at = torch.nonzero(bad.reshape(t.shape[0], -1).any(dim=1)).flatten().tolist()
    shown = ", ".join(map(str, at[:10])) + (", ..." if len(at) > 10 else "")
    return [f"{what} in the {where}: {rows} [{shown}] ({len(at)} of {t.shape[0]})"]


def _input_nonfinite(x: Any) -> list[str]:
    """Where the input's values are NaN or infinite, by bag (row of the batch)."""
    if isinstance(x, Bags):
        if x.weights is None:
            return []
        bad = ~torch.isfinite(x.weights.detach())
        if not bad.any():
            return []
        entries = torch.nonzero(bad).flatten().cpu()
        bags = torch.searchsorted(x.offsets.cpu()[1:], entries, right=True).unique()
        per_bag = torch.zeros(len(x), dtype=torch.float64)
        per_bag[bags] = float("nan")
        return _nonfinite("input (per_sample_weights)", per_bag, "bags")
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        return _nonfinite("input", x)
    return []


def _describe(x: Any) -> str:
    if isinstance(x, Bags):
        return f"Bags, {len(x)} bags, {x.nnz} entries"
    if isinstance(x, torch.Tensor):
        kind = "index" if not (x.dtype.is_floating_point or x.dtype == torch.bool) else "dense"
        if x.layout != torch.strided:
            kind = f"torch {str(x.layout).removeprefix('torch.')}"
        return f"{kind} tensor of shape {tuple(x.shape)}"
    return (
        f"{type(x).__module__.split('.')[0]}.{type(x).__name__} of shape {getattr(x, 'shape', '?')}"
    )


def _value_leaf(x: Any) -> torch.Tensor | None:
    """The input's own differentiable values, if the user asked for their gradient."""
    if isinstance(x, Bags) and x.weights is not None and x.weights.requires_grad:
        return x.weights
    if isinstance(x, torch.Tensor) and x.requires_grad:  # dense, or torch sparse values
        return x
    return None


def _with_values(x: Any, values: torch.Tensor) -> Any:
    return Bags(x.indices, x.offsets, values) if isinstance(x, Bags) else values


def check_equivalence(
    layer: LookupLinear | LookupCollection | Any,
    x: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> EquivalenceReport:
    """Run ``x`` through ``layer`` and through its dense reference; compare forward and backward.

    The reference is ``layer.to_linear()`` in float64 applied to the densified ``x``
    (:func:`lookuplinear.densify`: one-hot / multi-hot rows, padding column dropped, rows scaled
    by ``mode``; for ``mode="max"`` the max over present rows). Both are back-propagated with the
    same random upstream gradient. Compared: ``output``, ``weight.grad``, ``bias.grad`` and, when
    ``x``'s values (``Bags.weights``, a dense ``x`` or a torch sparse ``x``) require grad,
    ``input.grad``. The layer's own ``.grad`` fields are left untouched.

    Parameters
    ----------
    layer : LookupLinear or LookupCollection
        For a collection, ``x`` is a :class:`~lookuplinear.KeyedBags`; the reference is each
        feature's table as ``nn.Linear`` on its multi-hot rows, ``output`` is the collection's
        ``(N, sum of dims)`` values and there is one ``<table>.weight.grad`` per table (the sum
        over the features that read it).
    x : any input form the layer accepts
    rtol, atol : float, optional
        Tolerances of ``|got - ref| <= atol + rtol * |ref|``; defaults per dtype in
        :data:`DEFAULT_TOLERANCES`.
    seed : int
        Seed of the upstream gradient.

    Returns
    -------
    EquivalenceReport
        ``report.ok``, ``report.raise_if_failed()``, one :class:`Comparison` per quantity.

    Examples
    --------
    >>> layer = LookupLinear(1000, 8, mode="mean")
    >>> report = check_equivalence(layer, Bags.from_lists([[1, 5, 5], [], [999]]))
    >>> report.ok
    True
    >>> [c.name for c in report.comparisons]
    ['output', 'weight.grad', 'bias.grad']
    """
    from .quant.layer import QuantizedLookupLinear

    if isinstance(layer, QuantizedLookupLinear):  # inference only: the forward is compared
        rtol = 1e-5 if rtol is None else rtol
        atol = 1e-5 if atol is None else atol
        got = layer(x)
        ref = dense_reference(layer.dequantize(), x.to("cpu") if isinstance(x, Bags) else x)
        return EquivalenceReport(_describe(x), [_compare("output", got, ref, rtol, atol)],
                                 [*_input_nonfinite(x), *_nonfinite("output", got, "bags")])
    with torch.enable_grad():  # the check needs gradients even when called under no_grad
        if isinstance(layer, LookupCollection):
            return _check_collection(layer, x, rtol, atol, seed)
        return _check(layer, x, rtol, atol, seed)


def _probe(layer: LookupLinear) -> LookupLinear:
    """A shallow copy of ``layer`` whose parameters are new leaves on the same storage: its
    backward reaches neither the layer's ``.grad`` nor a ``fused=True`` optimizer bound to the
    layer's parameters, so checking never changes the layer or an optimizer's state."""
    probe = copy.copy(layer)
    probe._parameters = {
        name: None if p is None else nn.Parameter(p.detach(), requires_grad=True)
        for name, p in layer._parameters.items()
    }
    return probe


def _check(
    layer: LookupLinear, x: Any, rtol: float | None, atol: float | None, seed: int
) -> EquivalenceReport:
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(layer.weight.dtype, (1e-5, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol

    probe = _probe(layer)
    params = [p for p in (probe.weight, probe.bias) if p is not None]
    leaf = _value_leaf(x)
    out = probe(x)
    gen = torch.Generator().manual_seed(seed)
    upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    inputs = params + ([leaf] if leaf is not None else [])
    grads = torch.autograd.grad(
        out, inputs, upstream.to(out.dtype).to(out.device), allow_unused=True
    )

    lin = copy.deepcopy(layer.to_linear(strict=False)).double().cpu()
    ref_leaf = None
    x_ref = x
    if leaf is not None:
        ref_leaf = leaf.detach().double().cpu().requires_grad_(True)
        x_ref = _with_values(x, ref_leaf)
        if isinstance(x, Bags):
            x_ref = Bags(x.indices.cpu(), x.offsets.cpu(), ref_leaf)
    elif isinstance(x, Bags | torch.Tensor):
        x_ref = x.to("cpu")
    ref = dense_reference(layer, x_ref, linear=lin)
    ref_inputs = [lin.weight] + ([lin.bias] if lin.bias is not None else [])
    ref_inputs += [ref_leaf] if ref_leaf is not None else []
    ref_grads = torch.autograd.grad(ref, ref_inputs, upstream, allow_unused=True)

    nonfinite = [*_input_nonfinite(x), *_nonfinite("weight", layer.weight),
                 *_nonfinite("bias", layer.bias)]
    nonfinite += _nonfinite("output", out, "bags")
    comparisons = [_compare("output", out.cpu(), ref, rtol, atol)]
    names = ["weight.grad", "bias.grad"][: len(params)] + (
        ["input.grad"] if leaf is not None else []
    )
    for i, name in enumerate(names):
        got, want = grads[i], ref_grads[i]
        if name == "weight.grad" and want is not None:
            want = want.T
        got = torch.zeros(inputs[i].shape) if got is None else got.cpu()
        want = (
            torch.zeros(ref_inputs[i].shape).T
            if want is None and name == "weight.grad"
            else (torch.zeros(ref_inputs[i].shape) if want is None else want)
        )
        comparisons.append(_compare(name, got, want, rtol, atol))
    return EquivalenceReport(_describe(x), comparisons, nonfinite)


def _check_collection(
    collection: LookupCollection, kb: Any, rtol: float | None, atol: float | None, seed: int
) -> EquivalenceReport:
    if not isinstance(kb, KeyedBags):
        raise InputTypeError(
            f"check_equivalence of a LookupCollection takes a KeyedBags, got "
            f"{type(kb).__name__}. Build one with KeyedBags.from_dict({{name: bags}})."
        )
    dtype = collection.table_groups[0].dtype
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(dtype, (1e-5, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol

    maps = list(collection.id_maps.values())
    modes = [m.training for m in maps]
    for m in maps:  # ID maps look up only: the check adds no ID
        m.eval()
    try:
        return _compare_collection(collection, kb, rtol, atol, seed)
    finally:
        for m, training in zip(maps, modes, strict=True):
            m.train(training)


def _compare_collection(
    collection: LookupCollection, kb: KeyedBags, rtol: float, atol: float, seed: int
) -> EquivalenceReport:
    # fresh leaves on the tables' storage (as _probe for a layer): nothing reaches the
    # collection's .grad or a fused optimizer bound to its parameters
    probe = copy.copy(collection)
    probe._modules = dict(collection._modules)
    leaves = [nn.Parameter(p.detach(), requires_grad=True) for p in collection.table_groups]
    probe.table_groups = nn.ParameterList(leaves)
    out = cast(KeyedTensor, probe(kb)).values()
    gen = torch.Generator().manual_seed(seed)
    upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, upstream.to(out.dtype).to(out.device),
                                allow_unused=True)

    names = [t.name for t in collection.tables]
    tables = {n: collection[n] for n in names}
    lins = {n: copy.deepcopy(tables[n].to_linear(strict=False)).double().cpu() for n in names}
    # a variable batch per key: its dense equivalent is the batch of N bags per key
    kb_cpu = weighted_as(kb, collection.is_weighted, "check_equivalence").to("cpu").full_batch()
    refs = [dense_reference(tables[t], collection.rows(kb_cpu, f), linear=lins[t])
            for f, t in ((f, collection._table_of[f]) for f in collection.embedding_names)]
    ref = torch.cat(refs, dim=1)
    ref_grads = torch.autograd.grad(ref, [lins[n].weight for n in names], upstream,
                                    allow_unused=True)
    nonfinite = [*(m for f in collection.feature_names
                   for m in _input_nonfinite_named(kb[f], f)),
                 *(m for n in names for m in _nonfinite(f"table {n!r}", tables[n].weight)),
                 *_nonfinite("output", out, "bags")]
    comparisons = [_compare("output", out.detach().cpu(), ref, rtol, atol)]
    for n, want in zip(names, ref_grads, strict=True):
        g, off, cfg = collection._places[n]
        rows = cfg.stored_rows
        got_all = grads[g]
        got = (torch.zeros(rows, cfg.embedding_dim) if got_all is None else
               got_all.cpu().to_dense()[off : off + rows])
        want = torch.zeros(rows, cfg.embedding_dim) if want is None else want.T
        comparisons.append(_compare(f"{n}.weight.grad", got, want, rtol, atol))
    return EquivalenceReport(repr(kb), comparisons, nonfinite)


def _input_nonfinite_named(bags: Bags, feature: str) -> list[str]:
    return [m.replace("the input", f"the input of feature {feature!r}", 1)
            for m in _input_nonfinite(bags)]
