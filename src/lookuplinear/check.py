"""``check_equivalence``: prove on your own data that the lookup equals ``nn.Linear``."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.weight_norm import WeightNorm

from .errors import InputTypeError, InputValueError, LookupLinearError
from .modules.collection import LookupCollection, weighted_as
from .modules.embedding_bag import bag_input
from .modules.layer import LookupLinear
from .reference import (
    REFERENCE_BYTES,
    TouchedReference,
    dense_reference,
    reference_bytes,
    touched_reference,
)
from .sparse.adapters import as_bags
from .sparse.bags import Bags
from .sparse.keyed import KeyedBags, KeyedTensor
from .sparse.offsets import csr_offsets

__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "EquivalenceError",
    "EquivalenceReport",
    "check_equivalence",
]

#: ``(rtol, atol)`` per dtype of the layer. The reference is computed in float64, so these bound
#: the layer's own rounding of a value; the rounding of a sum of many terms is allowed on top
#: (:func:`_rounding_allowance`).
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


class EquivalenceError(LookupLinearError, AssertionError):
    """The layer and its dense reference differ beyond tolerance, or the rounding allowed
    leaves a quantity undecided (:attr:`Comparison.decisive`)."""


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
    #: the most terms a compared value sums (0: not counted); the rounding of such a sum is
    #: allowed on top of ``rtol`` and ``atol`` (:func:`_rounding_allowance`)
    terms: int = 0
    #: False where the rounding allowed each value is at least the reference's value: any
    #: value of the right size passes (zero, negated), so a pass proves nothing
    decisive: bool = True

    def __str__(self) -> str:
        skipped = f", {self.nonfinite} not finite" if self.nonfinite else ""
        summed = f", + rounding of sums of up to {self.terms} terms" if self.terms > 1 else ""
        tolerances = (f"max|diff|={self.max_abs_diff:.3g}  max rel={self.max_rel_diff:.3g}  "
                      f"(rtol={self.rtol:g}, atol={self.atol:g}{summed}{skipped})")
        if self.ok and not self.decisive:
            return (f"--   {self.name:<14} not decisive: the rounding allowed (sums of up to "
                    f"{self.terms} terms) is at least the reference's values; check in float32 "
                    f"(layer.float()){_fewer_terms(self.name)}. {tolerances}")
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name:<14} {tolerances}"


def _is_output(name: str) -> bool:
    """Whether the comparison ``name`` is of the forward's output (a collection's may be one
    per feature, ``output['f']``)."""
    return name == "output" or name.startswith("output[")


def _fewer_terms(name: str) -> str:
    """How to make the sums behind the comparison ``name`` shorter, as a clause."""
    if _is_output(name):
        return " or with fewer entries per bag"
    if name.endswith("weight.grad"):
        return " or with fewer uses per row (a part of the batch)"
    if name == "bias.grad":
        return " or with fewer bags (a part of the batch)"
    return ""


@dataclass(frozen=True)
class EquivalenceReport:
    """What :func:`check_equivalence` compared, and whether every comparison passed.

    A comparison whose rounding allowance is at least its reference's values would pass any
    value (zero, negated): it is listed as not decisive, and the report is not ``ok``.

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
        """True when every quantity is within tolerance, every value is finite and every
        comparison is decisive (:attr:`Comparison.decisive`)."""
        return (not self.nonfinite
                and all(c.ok and c.decisive for c in self.comparisons))

    @property
    def not_decisive(self) -> list[str]:
        """The quantities that passed only because the rounding allowed them exceeds their
        reference values (:attr:`Comparison.decisive`)."""
        return [c.name for c in self.comparisons if c.ok and not c.decisive]

    def raise_if_failed(self) -> None:
        """Raise :class:`EquivalenceError` listing the failed quantities and those the check
        could not decide."""
        if not self.ok:
            raise EquivalenceError(str(self))

    def __str__(self) -> str:
        undecided = self.not_decisive
        decided = [c.name for c in self.comparisons if c.decisive]
        verdict = "EQUIVALENT"
        if self.nonfinite:
            verdict = "NOT COMPARABLE, values are not finite"
        elif not all(c.ok for c in self.comparisons):
            verdict = "DIFFERENT"
        elif undecided:
            verdict = (f"NOT DECISIVE (not decisive: {', '.join(undecided)}"
                       + (f"; equivalent: {', '.join(decided)})" if decided else ")"))
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


#: how many standard deviations of random rounding errors :func:`_rounding_allowance` covers
_ROUNDING_SPREAD = 5.0


def _rounding_allowance(magnitude: torch.Tensor, terms: torch.Tensor | int,
                       dtype: torch.dtype) -> torch.Tensor:
    """What rounding in ``dtype`` may add to sums of ``terms`` products whose absolute values
    sum to ``magnitude`` (both broadcast), in whatever order they are added.

    The smaller of the worst case ``gamma_n * magnitude`` (``gamma_n = n u / (1 - n u)``,
    Higham, *Accuracy and Stability of Numerical Algorithms*, 4.2) and the bound that holds
    with probability ``1 - 2 exp(-_ROUNDING_SPREAD**2 / 2)`` for independent rounding errors,
    ``_ROUNDING_SPREAD * sqrt(n) * u * magnitude`` (Higham and Mary, *A New Approach to
    Probabilistic Rounding Error Analysis*, 2019), ``u`` the unit roundoff of ``dtype`` and
    ``n`` the terms plus two roundings (a product's, a mean's scale). A bfloat16 table
    whose row a batch reads 1,000 times sums 1,000 gradient terms with 8 mantissa bits, as
    ``nn.Embedding`` does: its gradient may be off by several percent, which ``rtol`` alone
    would call a difference.
    """
    u = torch.finfo(dtype).eps / 2
    n = torch.as_tensor(terms, dtype=torch.float64) + 2
    worst = torch.where(n * u < 1, n * u / (1 - n * u).clamp_min(u), torch.inf)
    likely = _ROUNDING_SPREAD * n.sqrt() * u
    return torch.minimum(worst, likely) * magnitude


def _compare(
    name: str, got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float,
    allowance: torch.Tensor | None = None, terms: int = 0,
) -> Comparison:
    """``got`` against ``ref``: ``|got - ref| <= atol + rtol * |ref| + allowance`` (the
    rounding of sums of up to ``terms`` terms, broadcast to ``ref``)."""
    got = (got.to_dense() if got.layout != torch.strided else got).detach().double()
    ref = (ref.to_dense() if ref.layout != torch.strided else ref).detach().double()
    if got.shape != ref.shape:
        return Comparison(name, float("inf"), float("inf"), rtol, atol, False, 0, terms)
    if got.numel() == 0:
        return Comparison(name, 0.0, 0.0, rtol, atol, True, 0, terms)
    finite = torch.isfinite(got) & torch.isfinite(ref)
    skipped = int((~finite).sum())
    if skipped == finite.numel():
        return Comparison(name, 0.0, 0.0, rtol, atol, False, skipped, terms)
    bound = atol + rtol * ref.abs()
    if allowance is not None:
        bound = bound + allowance.double().expand_as(ref)
    got, ref, bound = got[finite], ref[finite], bound[finite]
    diff = (got - ref).abs()
    ok = bool((diff <= bound).all()) and skipped == 0
    rel = diff / ref.abs().clamp_min(torch.finfo(torch.float64).tiny)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    decisive = allowance is None or _decides(allowance.double().expand_as(finite)[finite], ref)
    return Comparison(name, float(diff.max()), float(rel.max()), rtol, atol, ok, skipped, terms,
                      decisive)


def _decides(allowance: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether a wrong value can fail: some reference value exceeds the rounding allowed it,
    or is allowed no rounding (an exactly zero sum, such as an unused bias's gradient)."""
    return bool(((allowance == 0) | (allowance < ref.abs())).any())


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
    offsets: torch.Tensor | None = None,
    per_sample_weights: torch.Tensor | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    max_bytes: int = REFERENCE_BYTES,
) -> EquivalenceReport:
    """Run ``x`` through ``layer`` and through its dense reference; compare forward and backward.

    The reference is ``nn.Linear`` with the layer's weight (``weight.T``) and bias, in float64,
    applied to the densified ``x`` (:func:`lookuplinear.densify`: one-hot / multi-hot rows,
    padding column dropped, rows scaled by ``mode``; for ``mode="max"`` the max over present
    rows, of tied rows the first in the bag taking the gradient, as ``nn.EmbeddingBag``'s).
    It is computed on the columns the batch touches, a few bags at a time: every other
    column of the densified input is zero, so it changes no output, and the gradient of every
    other weight row is zero, which is checked of the layer's gradient too. Both are
    back-propagated with the same random upstream gradient. Compared: ``output``,
    ``weight.grad``, ``bias.grad`` (where the layer has a bias) and, when ``x``'s values
    (``Bags.weights``, ``per_sample_weights``, a dense ``x`` or a torch sparse ``x``) require
    grad, ``input.grad``. The layer's own ``.grad`` fields are left untouched.

    Memory: the reference holds at most ``max_bytes`` (1 GiB by default) beyond the layer's own
    forward and backward: ``c * 8 * (3 * N * out + 3 * nnz * out + 4 * nnz)`` bytes for the
    whole batch (``N`` bags or index positions of ``nnz`` entries; ``c = 2``, the reference and
    the one on absolute values that sizes the rounding allowed, 3 for ``max``), the rest for
    the densified pieces. A batch whose share alone passes the bound is refused up front
    (:class:`~lookuplinear.InputValueError`, with the estimate and the number of bags that
    fit), as is a dense ``x`` (or a torch sparse ``x`` that requires grad) whose
    ``(N, in_features)`` float64 copy would pass it: those are densified whole.

    Parameters
    ----------
    layer : LookupLinear, EmbeddingBag, LookupCollection or a quantized layer
        For a collection, ``x`` is a :class:`~lookuplinear.KeyedBags`; the reference is each
        feature's table as ``nn.Linear`` on its multi-hot rows, ``output`` is the collection's
        ``(N, sum of dims)`` values and there is one ``<table>.weight.grad`` per table (the sum
        over the features that read it) and, where the ``KeyedBags`` weights require grad, one
        ``input.grad['<feature>']`` per feature (the sum over the tables that read it). A
        quantized layer is compared on the forward only, against ``nn.Linear`` on its
        dequantized table (it has no gradient); a ``QuantizedLookupCollection`` is refused
        (check each of its ``layers``).
    x : any input form the layer accepts
    offsets, per_sample_weights : torch.Tensor, optional
        As the layer's forward takes them (``nn.EmbeddingBag``'s 1-D input with offsets).
    rtol, atol : float, optional
        Tolerances of ``|got - ref| <= atol + rtol * |ref| + rounding``; defaults per dtype
        in :data:`DEFAULT_TOLERANCES`. ``rounding`` is what summing each value's terms in
        the layer's dtype may add: the smaller of the worst case and the probabilistic bound
        of that many roundings, on the sum of the terms' absolute values (a gradient row
        read 1,000 times sums 1,000 terms, as ``nn.Embedding``'s backward does).
    seed : int
        Seed of the upstream gradient.
    max_bytes : int, default 2**30
        The most the reference may hold at once.

    Returns
    -------
    EquivalenceReport
        ``report.ok``, ``report.raise_if_failed()``, one :class:`Comparison` per quantity.

    Raises
    ------
    InputValueError
        The reference would need more than ``max_bytes`` (the message gives the estimate and
        a smaller call), or an ``EmbeddingBag`` with ``scale_grad_by_freq=True`` (its gradient
        is scaled by each row's count in the batch, which ``nn.Linear``'s is not).
    InputTypeError
        A ``QuantizedLookupCollection``, or a collection given something else than ``KeyedBags``.

    Examples
    --------
    >>> layer = LookupLinear(1000, 8, mode="mean")
    >>> report = check_equivalence(layer, Bags.from_lists([[1, 5, 5], [], [999]]))
    >>> report.ok
    True
    >>> [c.name for c in report.comparisons]
    ['output', 'weight.grad', 'bias.grad']
    """
    from .quant.collection import QuantizedLookupCollection
    from .quant.layer import QuantizedLookupLinear

    if isinstance(layer, QuantizedLookupCollection):
        raise InputTypeError(
            "check_equivalence compares a QuantizedLookupCollection's tables one by one: call "
            "check_equivalence(q.layers[table], kb[feature]) for each feature of a table "
            "without hashing (the quantized table against nn.Linear on its dequantized "
            "values), or check the float collection it was quantized from."
        )
    if isinstance(layer, QuantizedLookupLinear):  # inference only: the forward is compared
        rtol = 1e-5 if rtol is None else rtol
        atol = 1e-5 if atol is None else atol
        got = layer(x, offsets, per_sample_weights)
        if isinstance(x, torch.Tensor) and x.layout == torch.strided and (
                x.dtype.is_floating_point or x.dtype == torch.bool):  # dense rows
            _dense_fits(x, layer.in_features, layer.out_features, max_bytes)
            return EquivalenceReport(_describe(x), [_compare(
                "output", got, dense_reference(layer.dequantize(), x), rtol, atol)],
                [*_input_nonfinite(x), *_nonfinite("output", got, "bags")])
        bags, lead = _reference_bags(layer, x, offsets, per_sample_weights, layer.in_features)
        mode = _mode_of(layer, lead)
        _fits(bags, layer.out_features, mode, max_bytes)
        compact = _compact(bags)
        pad = None if lead is not None else _compact_pad(bags, layer.padding_idx)
        rows = layer.rows(torch.unique(bags.indices.long()))
        none = torch.zeros(len(bags), layer.out_features)
        ref = touched_reference(rows, layer.bias, compact, mode, pad, none,
                                max_bytes=max_bytes).out
        allow = _allowances(rows, layer.bias, compact, mode, pad, none, got.dtype,
                            weights_grad=False, max_bytes=max_bytes)
        return EquivalenceReport(_describe(x), [
            _compare("output", got.detach().cpu(), ref.reshape(got.shape), rtol, atol,
                     allow.out.reshape(got.shape), allow.terms["output"])],
            [*_input_nonfinite(x), *_nonfinite("output", got, "bags")])
    with torch.enable_grad():  # the check needs gradients even when called under no_grad
        if isinstance(layer, LookupCollection):
            if offsets is not None or per_sample_weights is not None:
                raise InputValueError(
                    "check_equivalence of a LookupCollection takes the KeyedBags alone: its "
                    "weights and offsets are in the KeyedBags.")
            return _check_collection(layer, x, rtol, atol, seed, max_bytes)
        return _check(layer, x, offsets, per_sample_weights, rtol, atol, seed, max_bytes)


def _probe(layer: Any, copy_table: bool = False) -> Any:
    """A shallow copy of ``layer`` whose parameters are new leaves on the same storage (on a
    copy with ``copy_table``: an ``EmbeddingBag``'s ``max_norm`` renorms rows in place): its
    backward reaches neither the layer's ``.grad`` nor a ``fused=True`` optimizer bound to the
    layer's parameters, so checking never changes the layer or an optimizer's state.

    A parametrized layer (``torch.nn.utils.parametrize``) is checked on its computed
    parameters: the probe is of the layer's own class, holding them as plain parameters."""
    probe = _plain_copy(layer)
    probe._parameters = {
        name: None if p is None else nn.Parameter(
            p.detach().clone() if copy_table else p.detach(), requires_grad=True)
        for name, p in probe._parameters.items()
    }
    return probe


def _plain_copy(layer: Any) -> Any:
    """A shallow copy of ``layer``; of a parametrized layer (which ``copy.copy`` refuses), one
    of its own class with the computed parametrized tensors in place of the parametrizations;
    of a layer under the older ``torch.nn.utils.weight_norm`` (a forward pre-hook that computes
    ``weight`` from ``weight_g`` and ``weight_v``), a copy holding the computed weight as its
    parameter, without that hook."""
    probe: Any
    norms = [h for h in layer._forward_pre_hooks.values() if isinstance(h, WeightNorm)]
    if norms:
        probe = copy.copy(layer)
        probe._forward_pre_hooks = OrderedDict(
            (k, h) for k, h in layer._forward_pre_hooks.items() if not isinstance(h, WeightNorm))
        computed = {h.name: h.compute_weight(layer) for h in norms}
        for name in computed:  # the hook's attribute, now a parameter
            probe.__dict__.pop(name, None)
        hidden = {f"{h.name}{part}" for h in norms for part in ("_g", "_v")}
        probe._parameters = {**computed, **{k: p for k, p in layer._parameters.items()
                                            if k not in hidden}}
        return probe
    if not parametrize.is_parametrized(layer):
        return copy.copy(layer)
    # parametrize swaps the layer's class for a subclass of it that computes the tensors
    probe = object.__new__(type(layer).__bases__[0])
    probe.__dict__ = dict(layer.__dict__)
    probe._modules = {k: m for k, m in layer._modules.items() if k != "parametrizations"}
    probe._parameters = {**layer._parameters,
                         **{name: getattr(layer, name) for name in layer.parametrizations}}
    return probe


def _mode_of(layer: Any, lead: tuple[int, ...] | None) -> str:
    """The reference's mode: index input (``lead``, its shape) is one entry per position."""
    return "sum" if lead is not None else str(layer.mode)


def _reference_bags(layer: Any, x: Any, offsets: torch.Tensor | None,
                    per_sample_weights: torch.Tensor | None, in_features: int
                    ) -> tuple[Bags, tuple[int, ...] | None]:
    """``x`` as the layer reads it, as CPU ``Bags``; and for index input (one lookup per
    position, ``LookupLinear``'s) its shape, else None."""
    from .quant.layer import QuantizedEmbeddingBag

    if isinstance(layer, nn.EmbeddingBag | QuantizedEmbeddingBag):  # (B, N) input: B bags
        x, offsets, per_sample_weights = bag_input(x, offsets, per_sample_weights, layer.mode)
    if offsets is not None:
        x = Bags(x, csr_offsets(x, offsets, layer.include_last_offset), per_sample_weights)
    if isinstance(x, torch.Tensor) and x.layout == torch.strided:
        flat = x.detach().reshape(-1).cpu()
        return Bags(flat, torch.arange(flat.numel() + 1)), tuple(x.shape)
    return as_bags(x, in_features).to("cpu"), None


def _compact(bags: Bags) -> Bags:
    """``bags`` with each index replaced by its rank among the distinct indices."""
    rows = torch.unique(bags.indices.long())
    return Bags(torch.searchsorted(rows, bags.indices.long()), bags.offsets, bags.weights)


def _compact_pad(bags: Bags, padding_idx: int | None) -> int | None:
    if padding_idx is None:
        return None
    rows = torch.unique(bags.indices.long())
    at = int(torch.searchsorted(rows, torch.tensor(padding_idx)))
    return at if at < rows.numel() and int(rows[at]) == padding_idx else None


def _copies(mode: str) -> int:
    """How many references of a batch the check holds at once: the reference, its absolute
    values (:func:`_allowances`) and, for ``max``, the gradients routed by the real rows."""
    return 3 if mode == "max" else 2


def _fits(bags: Bags, out_features: int, mode: str, max_bytes: int) -> None:
    """Raise :class:`InputValueError` where the references of ``bags`` need more than
    ``max_bytes``, with the estimate and the number of bags that fit."""
    fixed, piece = reference_bytes(bags, out_features, mode)
    need = _copies(mode) * fixed + piece
    if need <= max_bytes:
        return
    fit = max(1, int(len(bags) * max_bytes / (2 * need)))
    raise InputValueError(
        f"check_equivalence: the dense reference of this batch ({len(bags)} bags, {bags.nnz} "
        f"entries, {out_features} outputs) needs about {need / 2**20:.0f} MiB, more "
        f"than max_bytes={max_bytes} ({max_bytes / 2**20:.0f} MiB). Check a part of the batch "
        f"(its first {fit} bags or rows), or pass a larger max_bytes."
    )


def _dense_fits(x: torch.Tensor, in_features: int, out_features: int, max_bytes: int) -> None:
    """Raise where a dense ``x`` densified whole (float64, with its gradient) passes the
    bound."""
    rows = x.numel() // in_features if x.layout == torch.strided else x.shape[0]
    need = 8 * (4 * rows * in_features + 3 * _copies("max") * in_features * out_features)
    if need <= max_bytes:
        return
    fit = max(1, int(rows * max_bytes / (2 * need)))
    raise InputValueError(
        f"check_equivalence: a {'dense' if x.layout == torch.strided else 'torch sparse'} "
        f"input of {rows} rows of {in_features} values is densified whole for its gradient, "
        f"about {need / 2**20:.0f} MiB in float64, more than max_bytes={max_bytes} "
        f"({max_bytes / 2**20:.0f} MiB). Check its first {fit} rows (x[:{fit}]), pass "
        "the rows as Bags (Bags.from_dense) or a sparse matrix without requires_grad, or "
        "pass a larger max_bytes."
    )


def _grad_rows(grad: torch.Tensor | None, first: int, n_rows: int, rows: torch.Tensor
               ) -> tuple[torch.Tensor, float]:
    """Rows ``rows`` of a layer's weight gradient (its rows ``first .. first + n_rows`` of a
    table stored in a larger parameter), in float64, and the largest ``|value|`` of the
    others (0.0 where they are all exactly zero, as the dense gradient's are)."""
    dim = 0 if grad is None else grad.shape[1]
    if grad is None:
        return torch.zeros(rows.numel(), dim, dtype=torch.float64), 0.0
    grad = grad.detach().cpu()
    if grad.layout == torch.strided:
        table = grad[first:first + n_rows]
        untouched = torch.ones(n_rows, dtype=torch.bool)
        untouched[rows] = False
        peak = table.abs().amax(1)[untouched] if dim else table.new_zeros(0)
        return table.index_select(0, rows).double(), float(peak.max()) if peak.numel() else 0.0
    g = grad.coalesce()
    idx, vals = g.indices()[0] - first, g.values()
    inside = (idx >= 0) & (idx < n_rows)
    pos = torch.searchsorted(rows, idx).clamp(max=max(rows.numel() - 1, 0))
    touched = inside & (rows[pos] == idx) if rows.numel() else torch.zeros_like(inside)
    got = torch.zeros(rows.numel(), dim, dtype=torch.float64)
    got.index_add_(0, pos[touched], vals[touched].double())
    other = vals[inside & ~touched]
    return got, float(other.abs().max()) if other.numel() else 0.0


def _compare_rows(name: str, got: torch.Tensor, untouched: float, want: torch.Tensor,
                  rtol: float, atol: float, allowance: torch.Tensor | None = None,
                  terms: int = 0) -> Comparison:
    """:func:`_compare` on the touched rows; a non-zero gradient in another row fails."""
    c = _compare(name, got, want, rtol, atol, allowance, terms)
    if untouched == 0.0:
        return c
    return Comparison(name, max(c.max_abs_diff, untouched), float("inf"), rtol, atol, False,
                      c.nonfinite, terms)


@dataclass(frozen=True)
class _Allowances:
    """The rounding allowed each quantity of a lookup's reference (:func:`_rounding_allowance`),
    with the most terms a value of it sums."""

    out: torch.Tensor  #: (N, out)
    weight_grad: torch.Tensor  #: (k, out)
    bias_grad: torch.Tensor  #: (out,)
    weights_grad: torch.Tensor | None  #: (nnz,)
    terms: dict[str, int]


def _allowances(weight: torch.Tensor, bias: torch.Tensor | None, bags: Bags, mode: str,
                padding_idx: int | None, upstream: torch.Tensor, dtype: torch.dtype, *,
                weights_grad: bool, max_bytes: int) -> _Allowances:
    """The rounding a layer in ``dtype`` may add to each value :func:`touched_reference`
    computes: the reference again on absolute values gives each sum's magnitude (for ``max``,
    the gradients routed by the real rows), and the terms are counted: a bag's entries, a
    row's uses, the batch's bags, the output's columns."""
    absolute = Bags(bags.indices, bags.offsets, None if bags.weights is None
                    else bags.weights.detach().abs())
    up = upstream.abs()
    fixed, _ = reference_bytes(bags, weight.shape[1], mode)  # each reference held
    size = touched_reference(weight.detach().abs(), None if bias is None else
                             bias.detach().abs(), absolute, mode, padding_idx, up,
                             weights_grad=weights_grad, max_bytes=max_bytes - fixed)
    grads = size if mode != "max" else touched_reference(
        weight, bias, absolute, mode, padding_idx, up, max_bytes=max_bytes - 2 * fixed)
    lengths = bags.offsets.long().diff().unsqueeze(1)  # (N, 1)
    uses = torch.bincount(torch.searchsorted(size.rows, bags.indices.long()),
                          minlength=size.rows.numel()).unsqueeze(1)  # (k, 1)
    width = weight.shape[1]
    terms = {"output": int(lengths.max()) + 1 if len(bags) else 1,
             "weight.grad": int(uses.max()) if uses.numel() else 0,
             "bias.grad": len(bags), "input.grad": width}
    return _Allowances(
        _rounding_allowance(size.out, lengths + 1, dtype),
        _rounding_allowance(grads.weight_grad, uses, dtype),
        _rounding_allowance(grads.bias_grad if grads.bias_grad is not None
                            else torch.zeros(width), len(bags), dtype),
        None if size.weights_grad is None
        else _rounding_allowance(size.weights_grad, width, dtype),
        terms)


def _check(
    layer: Any, x: Any, offsets: torch.Tensor | None, per_sample_weights: torch.Tensor | None,
    rtol: float | None, atol: float | None, seed: int, max_bytes: int,
) -> EquivalenceReport:
    if getattr(layer, "scale_grad_by_freq", False):
        raise InputValueError(
            "check_equivalence: an EmbeddingBag with scale_grad_by_freq=True scales each row's "
            "gradient by its count in the batch, which nn.Linear's gradient is not. Check a "
            "copy built with scale_grad_by_freq=False (the same forward).")
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(layer.weight.dtype, (1e-5, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    in_features, out_features = layer.weight.shape
    bias = getattr(layer, "bias", None)
    whole = isinstance(x, torch.Tensor) and (
        (x.layout == torch.strided and (x.dtype.is_floating_point or x.dtype == torch.bool))
        or (x.layout != torch.strided and x.requires_grad))
    if whole:  # the input's values have a gradient in every column: densified whole
        _dense_fits(x, in_features, out_features, max_bytes)
        return _check_whole(layer, x, rtol, atol, seed)
    bags, lead = _reference_bags(layer, x, offsets, per_sample_weights, in_features)
    mode = _mode_of(layer, lead)
    _fits(bags, out_features, mode, max_bytes)

    probe = _probe(layer, copy_table=getattr(layer, "max_norm", None) is not None)
    params = [p for p in (probe.weight, getattr(probe, "bias", None)) if p is not None]
    # the weights' gradient where they require it (with offsets, or beside (B, N) input),
    # else the input's own values'
    leaf = (per_sample_weights if per_sample_weights is not None
            and per_sample_weights.requires_grad else
            _value_leaf(x) if offsets is None else None)
    out = probe(x) if offsets is None and per_sample_weights is None else probe(
        x, offsets, per_sample_weights)
    upstream = _upstream(out, seed)
    inputs = params + ([leaf] if leaf is not None else [])
    grads = torch.autograd.grad(
        out, inputs, upstream.to(out.dtype).to(out.device), allow_unused=True
    )
    # the table the forward should read: max_norm renorms the rows the batch names (the
    # reference's own copy, as nn.Embedding(Bag) does; the probe's copy is compared with it)
    renormed = _renormed(layer, bags.indices)
    table = probe.weight if renormed is None else renormed
    # an index lookup reads the padding row, which gets no gradient (nn.Embedding); bags drop
    # padding entries (nn.EmbeddingBag)
    pad = None if lead is not None else layer.padding_idx
    up = upstream.reshape(-1, out_features)
    ref = touched_reference(table, bias, bags, mode, pad, up,
                            weights_grad=leaf is not None, max_bytes=max_bytes)
    allow = _allowances(table, bias, bags, mode, pad, up, out.dtype,
                        weights_grad=leaf is not None, max_bytes=max_bytes)
    if lead is not None and layer.padding_idx is not None:
        ref.weight_grad[ref.rows == layer.padding_idx] = 0

    nonfinite = [*_input_nonfinite(x), *_nonfinite("weight", layer.weight),
                 *_nonfinite("bias", bias), *_nonfinite("output", out, "bags")]
    terms = allow.terms
    comparisons = [_compare("output", out.detach().cpu(), ref.out.reshape(out.shape), rtol,
                            atol, allow.out.reshape(out.shape), terms["output"])]
    got, untouched = _grad_rows(grads[0], 0, in_features, ref.rows)
    comparisons.append(_compare_rows("weight.grad", got, untouched, ref.weight_grad, rtol,
                                     atol, allow.weight_grad, terms["weight.grad"]))
    if bias is not None:
        got_b = grads[1]
        assert ref.bias_grad is not None
        comparisons.append(_compare("bias.grad", torch.zeros(out_features) if got_b is None
                                    else got_b.cpu(), ref.bias_grad, rtol, atol,
                                    allow.bias_grad, terms["bias.grad"]))
    if leaf is not None:
        got_w = grads[-1]
        want_w = ref.weights_grad
        assert want_w is not None and allow.weights_grad is not None
        comparisons.append(_compare("input.grad", torch.zeros(leaf.shape) if got_w is None
                                    else got_w.cpu(), want_w.reshape(leaf.shape), rtol, atol,
                                    allow.weights_grad.reshape(leaf.shape),
                                    terms["input.grad"]))
    if renormed is not None:  # the table after the forward: renormed as the reference's
        comparisons.append(_compare("weight.renorm", probe.weight.cpu(), renormed.cpu(),
                                    rtol, atol))
    return EquivalenceReport(_describe(x), comparisons, nonfinite)


def _renormed(layer: Any, indices: torch.Tensor) -> torch.Tensor | None:
    """A copy of the layer's table with the rows ``indices`` names renormed to its
    ``max_norm`` in the table's dtype, as ``nn.Embedding`` and ``nn.EmbeddingBag`` renorm
    theirs before the lookup (None without ``max_norm``)."""
    max_norm = getattr(layer, "max_norm", None)
    if max_norm is None:
        return None
    table = layer.weight.detach().clone()
    with torch.no_grad():
        torch.embedding_renorm_(table, indices.to(table.device).contiguous(), max_norm,
                                layer.norm_type)
    return table


def _upstream(out: torch.Tensor, seed: int) -> torch.Tensor:
    """The random upstream gradient for ``out``, in float64, holding values of ``out``'s dtype
    (the layer and the reference are given the same numbers)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype).double()


def _check_whole(
    layer: Any, x: torch.Tensor, rtol: float, atol: float, seed: int
) -> EquivalenceReport:
    """Dense ``x`` (or torch sparse ``x`` whose values require grad): the reference on the
    whole densified input."""
    probe = _probe(layer)
    bias = getattr(probe, "bias", None)
    params = [p for p in (probe.weight, bias) if p is not None]
    leaf = _value_leaf(x)
    out = probe(x)
    upstream = _upstream(out, seed)
    inputs = params + ([leaf] if leaf is not None else [])
    grads = torch.autograd.grad(
        out, inputs, upstream.to(out.dtype).to(out.device), allow_unused=True
    )

    def reference(absolute: bool, up: torch.Tensor) -> list[torch.Tensor]:
        """The dense reference's output and gradients (weight's transposed back, zeros for
        none); on absolute values, each sum's magnitude."""
        lin = nn.Linear(layer.weight.shape[0], layer.weight.shape[1], bias=bias is not None,
                        dtype=torch.float64)
        with torch.no_grad():
            w = layer.weight.detach()
            lin.weight.copy_((w.abs() if absolute else w).T)
            if bias is not None and lin.bias is not None:
                lin.bias.copy_(bias.detach().abs() if absolute else bias.detach())
        x_ref: Any = x.to("cpu")
        ref_leaf = None
        if leaf is not None:
            ref_leaf = leaf.detach().double().cpu()
            ref_leaf = (ref_leaf.abs() if absolute else ref_leaf).requires_grad_(True)
            x_ref = ref_leaf
        elif absolute and x_ref.dtype != torch.bool:
            x_ref = x_ref.abs()
        ref = dense_reference(layer, x_ref, linear=lin)
        ref_inputs = [lin.weight] + ([lin.bias] if lin.bias is not None else [])
        ref_inputs += [ref_leaf] if ref_leaf is not None else []
        found = torch.autograd.grad(ref, ref_inputs, up, allow_unused=True)
        wanted = [torch.zeros(t.shape, dtype=torch.float64) if g is None else g
                  for t, g in zip(ref_inputs, found, strict=True)]
        return [ref.detach(), wanted[0].T, *wanted[1:]]

    refs = reference(False, upstream)
    sizes = reference(True, upstream.abs())
    if layer.mode == "max":  # the gradients as the real rows route them
        sizes[1:] = reference(False, upstream.abs())[1:]
    present = (x.detach().cpu().to_dense() != 0).reshape(-1, layer.weight.shape[0])
    n_rows = present.shape[0]
    per_row = present.sum(1, keepdim=True)  # (N, 1)
    per_col = present.sum(0).unsqueeze(1)  # (in, 1)
    width = layer.weight.shape[1]
    counts: list[tuple[torch.Tensor | int, int]] = [
        (per_row + 1, int(per_row.max()) + 1 if n_rows else 1),
        (per_col, int(per_col.max()) if per_col.numel() else 0)]
    counts += [(n_rows, n_rows)] if bias is not None else []
    counts += [(width, width)] if leaf is not None else []

    nonfinite = [*_input_nonfinite(x), *_nonfinite("weight", layer.weight),
                 *_nonfinite("bias", getattr(layer, "bias", None))]
    nonfinite += _nonfinite("output", out, "bags")
    names = ["output", *["weight.grad", "bias.grad"][: len(params)]] + (
        ["input.grad"] if leaf is not None else [])
    got_all = [out.detach(), *grads]
    comparisons = []
    for i, name in enumerate(names):
        want, size = refs[i], sizes[i]
        got = torch.zeros(want.shape) if got_all[i] is None else got_all[i].cpu()
        n, terms = counts[i]
        if name == "output":
            n = n.reshape(*want.shape[:-1], 1) if isinstance(n, torch.Tensor) else n
        allowance = _rounding_allowance(size.to_dense() if size.layout != torch.strided
                                        else size, n, out.dtype)
        comparisons.append(_compare(name, got, want, rtol, atol, allowance, terms))
    return EquivalenceReport(_describe(x), comparisons, nonfinite)


def _check_collection(
    collection: LookupCollection, kb: Any, rtol: float | None, atol: float | None, seed: int,
    max_bytes: int,
) -> EquivalenceReport:
    if not isinstance(kb, KeyedBags):
        raise InputTypeError(
            f"check_equivalence of a LookupCollection takes a KeyedBags, got "
            f"{type(kb).__name__}. Build one with KeyedBags.from_dict({{name: bags}})."
        )
    maps = list(collection.id_maps.values())
    modes = [m.training for m in maps]
    for m in maps:  # ID maps look up only: the check adds no ID
        m.eval()
    try:
        return _compare_collection(collection, kb, rtol, atol, seed, max_bytes)
    finally:
        for m, training in zip(maps, modes, strict=True):
            m.train(training)


def _compare_collection(
    collection: LookupCollection, kb: KeyedBags, rtol: float | None, atol: float | None,
    seed: int, max_bytes: int,
) -> EquivalenceReport:
    # fresh leaves on the tables' storage (as _probe for a layer): nothing reaches the
    # collection's .grad or a fused optimizer bound to its parameters
    # a variable batch per key: its dense equivalent is the batch of N bags per key
    # (keys without inverse_indices rows left out: the collection reads none of them, or its
    # forward below refuses the batch)
    kb = weighted_as(kb, collection.is_weighted, "check_equivalence")
    # the weights' gradient where they require it: the reference's, on a float64 copy that
    # the per-feature bags below are computed from (expanded, repeated as the tables read it)
    leaf = kb.weights if kb.weights is not None and kb.weights.requires_grad else None
    ref_leaf = None if leaf is None else leaf.detach().cpu().double().requires_grad_(True)
    kb_cpu = kb.to("cpu") if ref_leaf is None else _with_weights(kb.to("cpu"), ref_leaf)
    kb_cpu = kb_cpu._inverted_only().full_batch()
    names = [t.name for t in collection.tables]
    tables = {n: collection[n] for n in names}
    features = [(f, collection._table_of[f]) for f in collection.embedding_names]
    bags = {f: collection.rows(kb_cpu, f) for f, _ in features}
    for f, t in features:
        _fits(bags[f], tables[t].out_features, tables[t].mode, max_bytes)
    probe = copy.copy(collection)
    probe._modules = dict(collection._modules)
    leaves = [nn.Parameter(p.detach(), requires_grad=True) for p in collection.table_groups]
    probe.table_groups = nn.ParameterList(leaves)
    out = cast(KeyedTensor, probe(kb)).values()
    upstream = _upstream(out, seed)
    grads = torch.autograd.grad(out, [*leaves, *([leaf] if leaf is not None else [])],
                                upstream.to(out.dtype).to(out.device), allow_unused=True)

    def tolerances(table: str) -> tuple[float, float]:
        """The given tolerances, else those of the table's dtype (tables of several dtypes:
        each judged by its own)."""
        r, a = DEFAULT_TOLERANCES.get(tables[table].weight.dtype, (1e-5, 1e-5))
        return (r if rtol is None else rtol), (a if atol is None else atol)

    refs, allow_out, at = [], [], 0
    per_table: dict[str, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {
        n: [] for n in names}
    terms_out, terms_grad = 1, dict.fromkeys(names, 0)
    weights_grad = None if ref_leaf is None else _WeightsGrad(ref_leaf)
    for f, t in features:  # each feature's table as nn.Linear on its rows, its own columns
        table = tables[t]
        width = table.out_features
        up = upstream[:, at:at + width]
        read = weights_grad is not None and bags[f].weights is not None
        ref = touched_reference(table.weight, table.bias, bags[f], table.mode,
                                table.padding_idx, up, weights_grad=read, max_bytes=max_bytes)
        allow = _allowances(table.weight, table.bias, bags[f], table.mode, table.padding_idx,
                            up, table.weight.dtype, weights_grad=read, max_bytes=max_bytes)
        if weights_grad is not None and read:
            feature = collection._collection_plan.feature_of[f]
            weights_grad.add(feature, t, bags[f], ref, allow)
        refs.append(ref.out)
        allow_out.append(allow.out)
        per_table[t].append((ref.rows, ref.weight_grad, allow.weight_grad))
        terms_out = max(terms_out, allow.terms["output"])
        terms_grad[t] += allow.terms["weight.grad"]
        at += width
    nonfinite = [*(m for f in collection.feature_names
                   for m in _input_nonfinite_named(kb[f], f)),
                 *(m for n in names for m in _nonfinite(f"table {n!r}", tables[n].weight)),
                 *_nonfinite("output", out, "bags")]
    got_out = out.detach().cpu()
    if len({tolerances(t) for _, t in features}) == 1:
        comparisons = [_compare("output", got_out, torch.cat(refs, dim=1),
                                *tolerances(features[0][1]), torch.cat(allow_out, dim=1),
                                terms_out)]
    else:  # each feature's columns within its table's tolerances
        comparisons, at = [], 0
        for (f, t), ref_out, allowed in zip(features, refs, allow_out, strict=True):
            width = ref_out.shape[1]
            comparisons.append(_compare(f"output[{f!r}]", got_out[:, at:at + width], ref_out,
                                        *tolerances(t), allowed, terms_out))
            at += width
    for n in names:  # a table's gradient: the sum over the features that read it
        parts = per_table[n]
        rows = torch.unique(torch.cat([r for r, _, _ in parts]))
        want = torch.zeros(rows.numel(), tables[n].out_features, dtype=torch.float64)
        allowed = torch.zeros_like(want)
        for r, g, a in parts:
            at_rows = torch.searchsorted(rows, r)
            want.index_add_(0, at_rows, g)
            allowed.index_add_(0, at_rows, a)
        group, first, cfg = collection._places[n]
        got, untouched = _grad_rows(grads[group], first, cfg.stored_rows, rows)
        comparisons.append(_compare_rows(f"{n}.weight.grad", got, untouched, want,
                                         *tolerances(n), allowed, terms_grad[n]))
    if weights_grad is not None:
        comparisons += weights_grad.compare(kb, grads[-1], tolerances)
    return EquivalenceReport(repr(kb), comparisons, nonfinite)


def _with_weights(kb: KeyedBags, weights: torch.Tensor) -> KeyedBags:
    """``kb`` with ``weights`` (one per entry) in place of its own."""
    return KeyedBags.from_checked(kb.keys(), kb.values, kb.offsets, weights,
                                  stride_per_key_per_rank=kb._strides,
                                  inverse_indices=kb.inverse_indices,
                                  inverse_keys=kb._inverse_keys)


class _WeightsGrad:
    """The reference gradient of a collection's batch weights (``leaf``: a float64 copy the
    features' bags were computed from), and its rounding allowance: each feature's, taken
    back through the expansion to the batch's entries, summed over the tables reading it."""

    def __init__(self, leaf: torch.Tensor) -> None:
        self.leaf = leaf
        self.want = torch.zeros_like(leaf, requires_grad=False)  # (nnz,) of the batch
        self.allowed = torch.zeros_like(self.want)
        self.tables: dict[str, list[str]] = {}
        self.width: dict[str, int] = {}

    def add(self, feature: str, table: str, bags: Bags, ref: TouchedReference,
            allow: _Allowances) -> None:
        """Add the reference and allowance of ``feature`` read by ``table`` (``bags``)."""
        assert bags.weights is not None and ref.weights_grad is not None
        assert allow.weights_grad is not None
        for total, part in ((self.want, ref.weights_grad), (self.allowed, allow.weights_grad)):
            back, = torch.autograd.grad(bags.weights, self.leaf, part.reshape(-1),
                                        retain_graph=True)
            total += back.abs() if total is self.allowed else back
        self.tables.setdefault(feature, []).append(table)
        self.width[feature] = self.width.get(feature, 0) + int(ref.out.shape[1])

    def compare(self, kb: KeyedBags, got: torch.Tensor | None,
                tolerances: Callable[[str], tuple[float, float]]) -> list[Comparison]:
        """One ``input.grad[feature]`` per feature the collection reads: its entries'
        gradient against the reference, within the loosest tolerances of its tables."""
        got = torch.zeros_like(self.want) if got is None else got.detach().cpu().double()
        bounds = kb.offset_per_key()
        out = []
        for i, key in enumerate(kb.keys()):
            if key not in self.tables:
                continue
            rtol, atol = (max(v) for v in zip(*map(tolerances, self.tables[key]), strict=True))
            a, b = bounds[i], bounds[i + 1]
            out.append(_compare(f"input.grad[{key!r}]", got[a:b], self.want[a:b], rtol, atol,
                                self.allowed[a:b], self.width[key]))
        return out


def _input_nonfinite_named(bags: Bags, feature: str) -> list[str]:
    return [m.replace("the input", f"the input of feature {feature!r}", 1)
            for m in _input_nonfinite(bags)]
