"""How a table's values are drawn: ``LookupLinear``'s ``init`` (``nn.Embedding``'s or
``nn.Linear``'s distribution, or a callable). The layers and ``IdMap``'s renewed rows draw
through :func:`init_weight_`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["Init", "init_weight_"]

Init = str | Callable[[torch.Tensor], Any]


def init_weight_(weight: torch.Tensor, init: Init, padding_idx: int | None) -> None:
    """Draw a ``(in_features, out_features)`` table in place as ``LookupLinear``'s ``init`` says.

    ``"normal"``: ``nn.Embedding``'s standard normal; ``"linear"``: ``nn.Linear``'s weight under
    the same RNG calls, transposed; a callable: called on ``weight``. The ``padding_idx`` row is
    zeroed. A table on the ``meta`` device has no values to draw and is left as it is.
    """
    if weight.is_meta:  # drawing on meta loads PyTorch's reference decompositions (seconds)
        return
    with torch.no_grad():
        if init == "linear":
            # nn.Linear.reset_parameters on a (out, in) tensor, then transposed
            w_t = weight.new_empty(weight.shape[1], weight.shape[0])
            nn.init.kaiming_uniform_(w_t, a=math.sqrt(5))
            weight.copy_(w_t.T)
        elif callable(init):
            init(weight)
        else:
            nn.init.normal_(weight)
        if padding_idx is not None:
            weight[padding_idx].fill_(0)
