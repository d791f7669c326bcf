"""``QuantizedLookupLinear``: a trained ``LookupLinear`` with a row-wise quantized table, for
inference.

Each row of the table is stored in FBGEMM's fused row-wise format, as PyTorch's quantized
embedding-bag ops take it: ``int8`` (one byte per value, then the row's float32 scale and
offset) or ``int4`` (two values per byte, then a float16 scale and offset), or plainly as
``float16``. For ``int8`` and ``int4`` a value ``w`` of row ``r`` is stored as
``q = round((w - min_r) / scale_r)`` and read back as ``q * scale_r + min_r``,
``scale_r = (max_r - min_r) / (2**bits - 1)``, so it moves by at most half a step,
``scale_r / 2``; plus ``1e-8`` for ``int8`` (FBGEMM divides by ``max_r - min_r + 1e-8`` as it
quantizes), and for ``int4``, which keeps ``min_r`` and ``scale_r`` as float16, plus their
float16 rounding, ``h(min_r) + 15 * h(scale_r)`` (``h(v) = 2**-11 * |v|``, ``2**-25`` for
``|v| < 2**-14``). ``float16`` rounds each value to 11 significant bits: it moves by at most
``2**-11 * |w|`` (``2**-25`` below float16's normal range, ``|w| < 2**-14``). A row that
float16 storage cannot hold (a value, or int4's offset or step, beyond 65504) is refused, not
stored as inf; so is an ``int8`` or ``int4`` row whose range ``max_r - min_r`` is beyond
float32's (3.4e38, in which they compute it), which would read back as NaN, and a NaN or inf
value for ``int8`` and ``int4`` (``float16`` keeps them).
The dense equivalent is ``nn.Linear`` on the dequantized table.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from .. import hugepages
from .._loading import AllOrNothingLoad
from ..errors import InputTypeError, InputValueError
from ..functional import (
    check_not_nested,
    check_weights_have_offsets,
    lookup_linear,
    range_checked,
)
from ..modes import ENTRYWISE_MODES
from ..modules.embedding_bag import EmbeddingBag, bag_input
from ..ops import capturing
from ..ops.library import mode_weights
from ..sparse.adapters import as_bags
from ..sparse.bags import Bags
from ..sparse.offsets import csr_offsets
from ._fake import register_4bit_fakes

__all__ = ["DTYPES", "QuantizedEmbeddingBag", "QuantizedLookupLinear"]

register_4bit_fakes()  # int4 layers can be exported and compiled, as int8 ones

#: the storage kinds and their bits per value
DTYPES = {"int8": 8, "int4": 4, "float16": 16}

def _qformat(dtype: str, out_features: int) -> torch.Tensor:
    """The ``qformat`` buffer: bits per value and columns, int64."""
    return torch.tensor([DTYPES[dtype], out_features], dtype=torch.int64)


def _first_bad(bad: torch.Tensor) -> tuple[int, str]:
    """The first row ``bad`` marks, and the note on how many more it marks."""
    rows_bad = torch.nonzero(bad).flatten()
    more = f" (and {rows_bad.numel() - 1} more rows)" if rows_bad.numel() > 1 else ""
    return int(rows_bad[0]), more


def _check_finite(rows: torch.Tensor, dtype: str) -> None:
    """Raise ``InputValueError`` for a table with a NaN or inf value quantized to ``int8`` or
    ``int4``: a row's scale and offset come from its min and max, so FBGEMM's format stores a
    NaN as a finite value and an inf as a row of NaN. ``float16`` keeps each value as it is."""
    if dtype == "float16" or rows.numel() == 0:
        return
    bad = ~torch.isfinite(rows).all(dim=1)
    if bool(bad.any()):
        r, more = _first_bad(bad)
        value = float(rows[r][~torch.isfinite(rows[r])][0])
        fate = ("a NaN would read back as a finite number" if math.isnan(value)
                else "an inf would turn the whole row to NaN")
        raise InputValueError(
            f"quantize({dtype!r}): row {r}{more} holds {value}, and {dtype} stores a row as "
            f"steps from its min to its max, so {fate}. Fix those rows of the table, or "
            "quantize as 'float16', which keeps NaN and inf as they are."
        )


def _check_float32_range(rows: torch.Tensor, dtype: str) -> None:
    """Raise ``InputValueError`` for the finite rows of an ``int8`` or ``int4`` table whose
    range ``max_r - min_r``, which the packing computes in float32, overflows it (as do a
    float64 table's values beyond float32's range): the row's step would be inf, and it
    would read back as NaN. ``float16`` stores the values themselves."""
    if dtype == "float16" or rows.numel() == 0:
        return
    lo, hi = rows.aminmax(dim=1)
    bad = ~torch.isfinite(hi.float() - lo.float())
    if bool(bad.any()):
        r, more = _first_bad(bad)
        raise InputValueError(
            f"quantize({dtype!r}): row {r}{more} holds values from {float(lo[r]):g} to "
            f"{float(hi[r]):g}, and {dtype} stores a row as steps from its min to its max, "
            "computed in float32, whose largest is 3.4e+38: the row's range (max - min) is "
            "beyond it, and the row would read back as NaN. Scale the table down "
            "(weight / s, then multiply the output by s)."
        )


def _check_float16_range(rows: torch.Tensor, dtype: str) -> None:
    """Raise ``InputValueError`` for what float16 storage cannot hold: for ``float16`` a
    finite value beyond its range (rounded to float32 first, as it is stored), which would
    read back as inf; for ``int4`` (its rows finite, :func:`_check_finite`) the row's offset
    ``min_r`` and step ``(max_r - min_r) / 15``, which FBGEMM keeps as float16 (from the
    offset rounded to float16, as it computes the step). ``int8`` keeps them as float32
    (:func:`_check_float32_range`)."""
    if dtype == "int8" or rows.numel() == 0:
        return
    if dtype == "float16":
        over = torch.isfinite(rows) & ~torch.isfinite(rows.float().half())
        bad = over.any(1)
        if not bool(bad.any()):
            return
        r, more = _first_bad(bad)
        row = rows[r].float()
        int8_fits = bool(torch.isfinite(row.amax() - row.amin()))
        held = (f"holds {float(rows[r][over[r]][0]):g}, and its values are stored as float16, "
                "whose largest is 65504: it would read back as inf")
    else:
        lo, hi = rows.float().aminmax(dim=1)
        step = (hi - lo.half().float()) / (2 ** DTYPES[dtype] - 1)
        bad = ~torch.isfinite(torch.stack([lo, step], 1).half()).all(1)
        if not bool(bad.any()):
            return
        r, more = _first_bad(bad)
        int8_fits = True  # its range fits float32 (_check_float32_range)
        held = (f"holds values from {float(lo[r]):g} to {float(hi[r]):g}, and int4 stores "
                "its offset (the row's min) and step ((max - min) / 15) as float16, whose "
                "largest is 65504: the row would read back as inf or NaN")
    fix = "Quantize as 'int8' (float32 scale and offset), or scale" if int8_fits else "Scale"
    raise InputValueError(
        f"quantize({dtype!r}): row {r}{more} {held}. {fix} the table down (weight / s, then "
        "multiply the output by s)."
    )


_OPS = {
    "int8": ("embedding_bag_byte_prepack", "embedding_bag_byte_unpack",
             "embedding_bag_byte_rowwise_offsets"),
    "int4": ("embedding_bag_4bit_prepack", "embedding_bag_4bit_unpack",
             "embedding_bag_4bit_rowwise_offsets"),
}


class QuantizedLookupLinear(AllOrNothingLoad):
    """A ``LookupLinear`` for inference whose table is quantized row by row.

    Dense equivalent: ``nn.Linear`` with ``weight = dequantize().weight.T`` (and the layer's
    bias) on the densified input, as for the float layer; ``check_equivalence`` compares the
    forward against it. Every input form and mode of the float layer; int8 and int4 ``sum``,
    ``mean`` and ``sqrtn`` bags run PyTorch's quantized embedding-bag kernels, everything else
    dequantizes only the rows the input names. Build one with ``LookupLinear.quantize``.
    It stays an inference layer in any mode, as PyTorch's quantized ``EmbeddingBag`` does:
    ``train()`` sets ``training`` (a training loop calls it on the model that holds the layer)
    and changes nothing else; the table is a buffer, so the layer has no parameters for an
    optimizer (torch's ``optimizer got an empty parameter list``) and its output records no
    gradient (``backward`` through it raises).

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(1000, 16, mode="mean")
    >>> q = layer.quantize("int8")
    >>> x = Bags.from_lists([[1, 5, 5], [], [999]])
    >>> bool((q(x) - layer(x)).abs().max() < 0.05)
    True
    """

    packed: torch.Tensor  # (rows, bytes per row) uint8, or (rows, out_features) float16
    bias: torch.Tensor | None
    qformat: torch.Tensor  # (bits per value, out_features): what ``packed`` holds

    def __init__(self, layer: Any, dtype: str = "int8") -> None:
        super().__init__()
        if dtype not in DTYPES:
            raise InputValueError(
                f"quantize: dtype must be one of {sorted(DTYPES)}, got {dtype!r}."
            )
        weight = layer.weight.detach()
        if weight.device.type != "cpu":
            raise InputValueError(
                f"quantize: the table is on {weight.device}; PyTorch's quantized embedding-bag "
                "kernels run on the CPU. Call layer.cpu().quantize(...)."
            )
        if dtype == "int4" and layer.out_features % 2:
            raise InputValueError(
                f"quantize('int4') packs two values a byte, so out_features must be even, got "
                f"{layer.out_features}. Use 'int8' or 'float16' for this layer."
            )
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.mode, self.padding_idx = layer.mode, layer.padding_idx
        self.include_last_offset = layer.include_last_offset
        self.dtype = dtype
        # huge pages, as the float table has (lookuplinear.hugepages): a lookup reads rows
        # scattered over the table, a TLB miss each on 4 KiB pages
        packed = hugepages.place(self.pack(weight, dtype))
        self.register_buffer("packed", packed)
        bias = None if layer.bias is None else layer.bias.detach().float().clone()
        self.register_buffer("bias", bias)
        self.register_buffer("qformat", _qformat(dtype, self.out_features))
        self.training = False

    @classmethod
    def from_packed(cls, packed: torch.Tensor, dtype: str, *, in_features: int,
                    out_features: int, bias: torch.Tensor | None, mode: str,
                    padding_idx: int | None, include_last_offset: bool = False
                    ) -> QuantizedLookupLinear:
        """A layer around a table packed already (as a model file stores it)."""
        if dtype not in DTYPES:
            raise InputValueError(
                f"quantized table: dtype must be one of {sorted(DTYPES)}, got {dtype!r}."
            )
        q = cls.__new__(cls)
        nn.Module.__init__(q)
        q.in_features, q.out_features = in_features, out_features
        q.mode, q.padding_idx, q.include_last_offset = mode, padding_idx, include_last_offset
        q.dtype = dtype
        q.register_buffer("packed", hugepages.place(packed))
        q.register_buffer("bias", bias)
        q.register_buffer("qformat", _qformat(dtype, out_features))
        q.training = False
        if q.rows(torch.zeros(1, dtype=torch.long)).shape != (1, out_features):
            raise InputValueError(
                f"quantized table: {tuple(packed.shape)} {packed.dtype} is not a {dtype} table "
                f"of {out_features} columns."
            )
        return q

    @staticmethod
    def pack(rows: torch.Tensor, dtype: str) -> torch.Tensor:
        """``rows`` (float, ``(n, out_features)``, rounded to float32) in the storage of
        ``dtype``.

        Raises
        ------
        InputValueError
            A row with a NaN or inf value for ``"int8"`` and ``"int4"`` (``"float16"`` keeps
            them); a finite row that the storage cannot hold, which would read back as inf or
            NaN: for ``"int8"`` and ``"int4"`` a range (max - min) beyond float32's (3.4e38),
            in which they compute the row's step; a value beyond float16's range
            (``|w| > 65504``) for ``"float16"``, an offset or step beyond it for ``"int4"``
            (whose scale and offset are float16).
        """
        _check_finite(rows, dtype)
        _check_float32_range(rows, dtype)
        _check_float16_range(rows, dtype)
        rows = rows.float().contiguous()
        if dtype == "float16":
            return rows.half()
        return getattr(torch.ops.quantized, _OPS[dtype][0])(rows)

    def rows(self, indices: torch.Tensor) -> torch.Tensor:
        """The dequantized rows ``indices`` (float32, ``(len(indices), out_features)``).

        int8 and int4: PyTorch's quantized embedding-bag kernel with one entry a bag (as
        :meth:`_index_rows`), whose values are ``embedding_bag_*_unpack``'s; Inductor keeps
        that kernel as it is, where it lowers the unpack op itself and rounds otherwise, so a
        compiled layer gives eager's bits."""
        if self.dtype == "float16":
            return self.packed.index_select(0, indices).float()
        ends = torch.arange(indices.numel() + 1, dtype=indices.dtype, device=indices.device)
        return getattr(torch.ops.quantized, _OPS[self.dtype][2])(
            self.packed, indices, ends, False, 0, False, None, None, True)

    def _table(self) -> torch.Tensor:
        """The whole dequantized table (float32, ``(in_features, out_features)``)."""
        return self.rows(torch.arange(self.in_features))

    def dequantize(self) -> Any:
        """The float ``LookupLinear`` of the dequantized table (the dense reference's layer)."""
        from ..modules.layer import LookupLinear

        table = self._table()
        layer = LookupLinear(self.in_features, self.out_features, bias=self.bias is not None,
                             mode=self.mode, padding_idx=self.padding_idx,
                             include_last_offset=self.include_last_offset)
        with torch.no_grad():
            layer.weight.copy_(table)
            if self.bias is not None and layer.bias is not None:
                layer.bias.copy_(self.bias)
        return layer.eval()

    @torch.no_grad()
    def forward(
        self,
        input: Any,
        offsets: torch.Tensor | None = None,
        per_sample_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``densify(input) @ dequantized table + bias``, as ``LookupLinear.forward``: computed
        in float32, the dequantized table's dtype, and given in that dtype promoted with the
        bias's (float64 after ``model.double()``), whatever the input's form."""
        out = self._lookup(input, offsets, per_sample_weights)
        if self.bias is None or self.bias.dtype == out.dtype:
            return out
        return out.to(torch.promote_types(out.dtype, self.bias.dtype))

    def _bias32(self) -> torch.Tensor | None:
        """The bias the float32 lookup adds (a model's dtype conversion converts the bias,
        not the table)."""
        return None if self.bias is None else self.bias.float()

    def _lookup(
        self,
        input: Any,
        offsets: torch.Tensor | None,
        per_sample_weights: torch.Tensor | None,
    ) -> torch.Tensor:
        """The float32 lookup of :meth:`forward`."""
        if isinstance(input, torch.Tensor):
            check_not_nested(input)
        if offsets is None:
            check_weights_have_offsets(per_sample_weights)
        if isinstance(input, torch.Tensor) and input.layout == torch.strided and offsets is None:
            if input.dtype.is_floating_point or input.dtype == torch.bool:  # dense rows
                return lookup_linear(input, self._table(),
                                     self._bias32(), mode=self.mode,
                                     padding_idx=self.padding_idx)
            if input.dtype.is_complex:
                raise InputTypeError(f"input must be indices or real rows, got {input.dtype}.")
            return self._index_rows(input)
        if offsets is not None:
            ends = csr_offsets(input, offsets, self.include_last_offset,
                               last_to_end=self.padding_idx is not None or self.mode == "max")
            bags = Bags(input, ends, per_sample_weights)
        else:
            bags = as_bags(input, self.in_features, merge=self.mode in ENTRYWISE_MODES)
        bags.check_indices(self.in_features)
        if self.padding_idx is not None:
            if capturing() and self.mode == "max":
                return self._padded_max(bags)
            # a recorded graph keeps the padding entries (_padded_bags); so does eager float16
            # (lookup_linear's weighted mean rounds apart from its unweighted one): equal bits
            if capturing() or (self.dtype not in _OPS and self.mode != "max"):
                bags = self._padded_bags(bags)
            else:
                bags = bags.drop_index(self.padding_idx)
        if self.dtype in _OPS and self.mode != "max" and not (
            bags.weights is not None and bags.weights.requires_grad
        ):
            w = None if bags.weights is None else bags.weights.float()  # the ops' dtype
            if self.mode != "sum":
                w = mode_weights(bags.offsets, w, self.mode == "sqrtn", torch.float32,
                                 bags.indices.numel())
            out = getattr(torch.ops.quantized, _OPS[self.dtype][2])(
                self.packed, bags.indices.long(), bags.offsets.long(), False, 0, False,
                w, None, True)
            bias = self._bias32()
            return out if bias is None else out + bias
        return self._bag_rows(bags)

    def _index_rows(self, index: torch.Tensor) -> torch.Tensor:
        """``one_hot(index) @ W + b`` on the dequantized table, shape ``(*index.shape,
        out_features)``: the dequantized row of each index (``padding_idx`` included: it reads
        the padding row, as ``nn.Embedding`` does), as ``LookupLinear`` on an index tensor.
        int8 and int4: PyTorch's quantized embedding-bag kernel with one entry a bag, as
        torch.ao's quantized ``nn.Embedding`` runs it (the row read and dequantized in one pass);
        float16: the rows ``index`` names, one per entry. No ``torch.unique``, whose size
        depends on the values, so a recorded graph (``torch.export``,
        ``torch.compile(fullgraph=True)``) takes the same path."""
        flat = index.reshape(-1)
        if flat.dtype not in (torch.int32, torch.int64):
            flat = flat.long()
        if self.dtype in _OPS:
            ends = torch.arange(flat.numel() + 1, dtype=flat.dtype, device=flat.device)
            op = getattr(torch.ops.quantized, _OPS[self.dtype][2])
            out = range_checked(
                lambda: op(self.packed, flat, ends, False, 0, False, None, None, True),
                flat, self.in_features, "input")
        else:
            out = range_checked(lambda: self.rows(flat), flat, self.in_features, "input")
        out = out.reshape(*index.shape, self.out_features)
        bias = self._bias32()
        return out if bias is None else out.add_(bias)

    def _padded_bags(self, bags: Bags) -> Bags:
        """``bags`` with weight 0 on their padding entries, for a recorded graph (how many
        there are is a property of one batch, and a graph takes no branch on the values) and
        for float16's eager lookups, which then compute as the graph does, to the bit:
        for ``sum``/``mean``/``sqrtn``, the same sums and factors as the bags without them (an
        entry of weight 1 adds its row as an unweighted one does)."""
        keep = bags.indices != self.padding_idx
        w = bags.weights
        return Bags.from_checked(bags.indices, bags.offsets,
                                 keep.float() if w is None else w.masked_fill(~keep, 0))

    def _padded_max(self, bags: Bags) -> torch.Tensor:
        """The ``max`` lookup of ``bags`` with their padding entries, for a recorded graph: each
        entry's dequantized row (:meth:`_bag_rows`), a padding entry's ``-inf`` (weight 1),
        so that it is never a bag's max; a bag of padding alone gives 0, as an empty one (a
        bag told by its count of non-padding entries: a row's own ``-inf`` stays its max)."""
        keep = bags.indices != self.padding_idx
        rows = self.rows(bags.indices.long()).masked_fill(~keep.unsqueeze(1), -torch.inf)
        entries = torch.arange(bags.indices.numel(), device=bags.indices.device)
        w = None if bags.weights is None else bags.weights.masked_fill(~keep, 1)
        out = lookup_linear(Bags.from_checked(entries, bags.offsets, w), rows, None, mode="max")
        # each bag's count of non-padding entries: the running count at its offsets (ops that
        # ONNX takes as they are: its index_add keeps one of a bag's entries, not their sum)
        seen = torch.cat([keep.new_zeros(1, dtype=torch.long), keep.long().cumsum(0)])
        at = seen.index_select(0, bags.offsets)
        out = out.masked_fill((at[1:] == at[:-1]).unsqueeze(1), 0)
        bias = self._bias32()
        return out if bias is None else out + bias

    def _bag_rows(self, bags: Bags) -> torch.Tensor:
        """The float lookup of ``bags`` (checked, ``padding_idx`` dropped or of weight 0) on the
        dequantized rows of its entries, one per entry (see ``_index_rows``); a padding
        entry's row reads as zeros, so that a padding row holding NaN or inf adds nothing."""
        entries = torch.arange(bags.indices.numel(), device=bags.indices.device)
        rows = self.rows(bags.indices.long())
        if self.padding_idx is not None:
            rows = rows.masked_fill((bags.indices == self.padding_idx).unsqueeze(1), 0)
        return lookup_linear(Bags(entries, bags.offsets, bags.weights), rows, self._bias32(),
                             mode=self.mode)

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        """``Module.to``, ``float()``, ``bfloat16()``, ``type()``, ``cuda()``, ... applied to
        the layer: the packed table is storage (an int8 or int4 table's bytes, a float16
        table's values), so it keeps its dtype through a model's dtype conversion (as PyTorch's
        quantized modules keep their packed params) and moves with the model. A float16 table
        is seen by the conversion as int16 bits, which a float dtype conversion leaves as they
        are; ``Module.type`` converts integer tensors too, and the table is then moved only."""
        packed = self._buffers.get("packed")
        if packed is None:
            return super()._apply(fn, recurse)
        if packed.dtype == torch.float16:
            self._buffers["packed"] = packed.view(torch.int16)
        try:
            super()._apply(fn, recurse)
        finally:
            moved = cast(torch.Tensor, self._buffers["packed"])
            if packed.dtype == torch.float16 and moved.dtype == torch.int16:
                moved = moved.view(torch.float16)
            elif moved.dtype != packed.dtype:  # Module.type: the storage moved, not converted
                moved = packed.to(moved.device)
            self._buffers["packed"] = moved
        return self

    def _check_state_entries(self, state: dict[str, Any], prefix: str,
                             local_metadata: dict[str, Any], strict: bool,
                             missing_keys: list[str], unexpected_keys: list[str],
                             error_msgs: list[str]) -> None:
        """What :meth:`_load_from_state_dict` refuses (:meth:`_format_problems`), refused
        before a load copies anything (:func:`lookuplinear._loading.check_state_dict`)."""
        error_msgs += self._format_problems(state, prefix)

    def _format_problems(self, state: dict[str, Any], prefix: str) -> list[str]:
        """A table packed as another dtype or width (an int4 table of ``2k + 8`` columns
        packs to as many bytes a row as an int8 one of ``k``); a state without the format
        (saved before the layer kept it) is read as this layer's, and given it, where its
        packed table has this layer's dtype (a float16 table's values would otherwise be cast
        to or from an integer table's bytes)."""
        if prefix + "qformat" not in state:
            packed = state.get(prefix + "packed")
            if isinstance(packed, torch.Tensor) and packed.dtype != self.packed.dtype:
                mine = "float16 values" if self.packed.dtype == torch.float16 else "uint8 rows"
                theirs = ("float16 values" if packed.dtype == torch.float16
                          else f"{packed.dtype} entries")
                return [f"{prefix}packed: the state dict's table holds {theirs} and no "
                        f"{prefix}qformat, this {self.dtype} layer's {mine}: it was packed as "
                        "another dtype. Quantize the layer as the state was saved, or save "
                        "the state again with a lookuplinear that writes qformat"]
        given = state.setdefault(prefix + "qformat", self.qformat)
        if not isinstance(given, torch.Tensor) or given.shape != self.qformat.shape:
            return []  # the shape check names it
        if torch.equal(given.cpu().long(), self.qformat):
            return []
        bits, width = (int(v) for v in given.tolist())
        kind = {b: d for d, b in DTYPES.items()}.get(bits, f"{bits}-bit")
        return [f"{prefix}packed: the state dict's table is {kind} of {width} columns, this "
                f"layer's {self.dtype} of {self.out_features}: quantize the layer as the state "
                "was saved"]

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              local_metadata: dict[str, Any], strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """A table of another format (:meth:`_format_problems`) is refused before any of the
        layer's entries is copied, where the load is a model's (``nn.Module``'s) too."""
        problems = self._format_problems(state_dict, prefix)
        if problems:
            error_msgs.extend(problems)
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def extra_repr(self) -> str:
        return (f"{self.in_features}, {self.out_features}, dtype={self.dtype}, "
                f"mode={self.mode}, bias={self.bias is not None}")


class QuantizedEmbeddingBag(QuantizedLookupLinear):
    """A :class:`~lookuplinear.EmbeddingBag` for inference whose table is quantized row by row,
    called as ``nn.EmbeddingBag`` is (``(B, N)`` bags, or 1-D indices with ``offsets``).

    Dense equivalent: the float ``EmbeddingBag`` on the dequantized table. Build one with
    ``EmbeddingBag.quantize``.

    Examples
    --------
    >>> bag = EmbeddingBag(1000, 16)
    >>> q = bag.quantize("int4")
    >>> x = torch.tensor([[1, 5, 5], [3, 2, 999]])
    >>> q(x).shape, bool((q(x) - bag(x)).abs().max() < 0.2)
    (torch.Size([2, 16]), True)
    """

    @classmethod
    def from_float(cls, bag: EmbeddingBag, dtype: str = "int8") -> QuantizedEmbeddingBag:
        """The quantized copy of ``bag``'s table.

        Raises
        ------
        InputValueError
            ``max_norm`` or ``scale_grad_by_freq`` is set (they rewrite a float table or its
            gradient), or ``dtype`` is unknown.
        """
        from ..modules.layer import LookupLinear

        return cls(LookupLinear.from_embedding(bag), dtype)

    def dequantize(self) -> EmbeddingBag:
        """The float :class:`~lookuplinear.EmbeddingBag` of the dequantized table, with this
        layer's ``mode``, ``padding_idx`` and ``include_last_offset`` (the padding row as it is
        stored): called as this layer is (``(B, N)`` bags, 1-D indices with ``offsets``,
        ``per_sample_weights``), it reads the input as this layer does, and is the dense
        reference's layer. (``from_float`` refuses ``max_norm`` and ``scale_grad_by_freq``, so
        the bag has neither.)

        Examples
        --------
        >>> bag = EmbeddingBag(10, 4, mode="sum", padding_idx=0)
        >>> back = bag.quantize("int8").dequantize()
        >>> back
        EmbeddingBag(10, 4, mode='sum', padding_idx=0)
        >>> back(torch.tensor([[1, 2, 3], [4, 5, 0]])).shape
        torch.Size([2, 4])
        """
        return EmbeddingBag(self.in_features, self.out_features, mode=self.mode,
                            _weight=self._table(), include_last_offset=self.include_last_offset,
                            padding_idx=self.padding_idx).eval()

    @torch.no_grad()
    def forward(
        self,
        input: Any,
        offsets: torch.Tensor | None = None,
        per_sample_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The bags' reduced rows of the dequantized table, as ``EmbeddingBag.forward``."""
        return super().forward(*bag_input(input, offsets, per_sample_weights, self.mode))
