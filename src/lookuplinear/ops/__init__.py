"""The kernel layer: every loop over a batch's entries or a table's rows that torch has no op for.

One interface, two implementations: C (``csrc/*.c``, compiled by the package's install, called
through ctypes) for CPU tensors, and torch ops for everything else (CUDA, other dtypes, a
``torch.jit.trace``, an install without a C compiler). ``LOOKUPLINEAR_BACKEND`` (``auto``,
``c``, ``torch``) picks between them (:mod:`._backend`). Whichever runs, the results are
the same (tests/test_kernels.py holds them to each other and to the dense path). While
``torch.compile`` or ``torch.export`` records a graph, the kernels are PyTorch operators
(:mod:`.library`), which run the same C or torch ops where the graph runs.
"""

from . import _torch_version  # noqa: F401 - first: an older torch stops here, clearly
from ._asserts import assert_bags
from ._backend import BACKENDS, backend, c_available, capturing, use_backend, use_c, values_known
from ._columns import (
    deinterleave,
    interleave,
    segment_tensor,
    segment_triples,
    segments,
)
from ._inputs import drop_entries, mode_weights, offsets_ok, one_id_rows, shifted_rows
from ._ngrams import Tokens, count_matrix, ngram_column, token_ids
from ._rows import (
    KERNELS,
    FusedTable,
    fused_rows,
    gather_into,
    gather_rows,
    group_rows,
    grouped_rows,
    summed_runs,
    unique_sums,
    update_rows,
)
from .autograd import bag_max
from .library import decompositions

__all__ = [
    "BACKENDS",
    "KERNELS",
    "FusedTable",
    "Tokens",
    "assert_bags",
    "backend",
    "bag_max",
    "c_available",
    "capturing",
    "count_matrix",
    "decompositions",
    "deinterleave",
    "drop_entries",
    "fused_rows",
    "gather_into",
    "gather_rows",
    "group_rows",
    "grouped_rows",
    "interleave",
    "mode_weights",
    "ngram_column",
    "offsets_ok",
    "one_id_rows",
    "segment_tensor",
    "segment_triples",
    "segments",
    "shifted_rows",
    "summed_runs",
    "token_ids",
    "unique_sums",
    "update_rows",
    "use_backend",
    "use_c",
    "values_known",
]
