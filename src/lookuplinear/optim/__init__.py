"""Row-wise optimizers: a training step costs what the batch touches, not the vocabulary.

With ``LookupLinear(..., sparse=True)`` the weight gradient holds one row per unique index of
the batch; these optimizers update only those rows and their state, in one pass. Dense
parameters in the same model get the ``torch.optim`` update of the same name::

    layer = LookupLinear(1_000_000, 64, sparse=True)
    opt = lookuplinear.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(); loss.backward(); opt.step()

==================  ===========================================  ===============================
optimizer           sparse-gradient update equals                state added
==================  ===========================================  ===============================
``SGD``             ``torch.optim.SGD`` (momentum: lazy)         momentum: 1 value per element
``Adagrad``         ``torch.optim.Adagrad`` (sparse)             1 value per element
``RowWiseAdagrad``  FBGEMM ``EXACT_ROWWISE_ADAGRAD``             1 value per row
``Adam``            ``torch.optim.SparseAdam`` (lazy)            2 values per element
``AdamW``           lazy AdamW (decay of touched rows)           2 values per element
==================  ===========================================  ===============================
"""

from ._base import RowSparseOptimizer, row_sparse_parts
from .adagrad import Adagrad, RowWiseAdagrad
from .adam import Adam, AdamW
from .sgd import SGD

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "RowSparseOptimizer",
    "RowWiseAdagrad",
    "row_sparse_parts",
]
