"""scikit-learn estimators on ``LookupLinear`` (the ``[sklearn]`` extra).

``LookupClassifier`` and ``LookupRegressor`` train ``X -> LookupLinear -> [nn.Linear]`` straight
from scipy.sparse rows (``CountVectorizer`` / ``TfidfVectorizer`` output), dense arrays or lists
of token ids, without densifying. See ``docs/sklearn.md``.
"""

from ._classifier import LookupClassifier
from ._model import LookupNet
from ._regressor import LookupRegressor

__all__ = ["LookupClassifier", "LookupNet", "LookupRegressor"]
