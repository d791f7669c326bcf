"""The kernel layer: every loop over a batch's entries or a table's rows that torch has no op for.

One interface, two implementations: C (``csrc/*.c``, compiled by the package's install, called
through ctypes) for CPU tensors, and torch ops for everything else (CUDA, other dtypes, inside
``torch.compile``, an install without a C compiler). ``LOOKUPLINEAR_BACKEND`` (``auto``,
``c``, ``torch``) picks between them (:mod:`._backend`). Whichever runs, the results are
the same (tests/test_kernels.py holds them to each other and to the dense path).
"""

from ._backend import BACKENDS, backend, c_available, capturing, use_backend, use_c, values_known
from ._bagmax import bag_max
from ._columns import deinterleave, interleave, segments, split_blocks
from ._inputs import drop_entries, mode_weights, offsets_ok, one_id_rows, shifted_rows
from ._ngrams import Tokens, count_matrix, ngram_column, token_ids
from ._rows import (
    KERNELS,
    FusedTable,
    bag_sum_into,
    fused_rows,
    gather_into,
    gather_rows,
    group_rows,
    update_rows,
)

__all__ = [
    "BACKENDS",
    "KERNELS",
    "FusedTable",
    "Tokens",
    "backend",
    "bag_max",
    "bag_sum_into",
    "c_available",
    "capturing",
    "count_matrix",
    "deinterleave",
    "drop_entries",
    "fused_rows",
    "gather_into",
    "gather_rows",
    "group_rows",
    "interleave",
    "mode_weights",
    "ngram_column",
    "offsets_ok",
    "one_id_rows",
    "segments",
    "shifted_rows",
    "split_blocks",
    "token_ids",
    "update_rows",
    "use_backend",
    "use_c",
    "values_known",
]
