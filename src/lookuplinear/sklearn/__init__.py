"""scikit-learn estimators on ``LookupLinear`` (the ``[sklearn]`` extra), and their model files.

``LookupClassifier`` and ``LookupRegressor`` train ``X -> LookupLinear -> [nn.Linear]`` straight
from scipy.sparse rows (``CountVectorizer`` / ``TfidfVectorizer`` output), dense arrays or lists
of token ids, without densifying. ``save_model`` / ``load_model`` write and read an estimator
with its text vectorizer as safetensors + JSON; ``load_fasttext`` reads a model fastText wrote
(``.bin``, ``.ftz``) and predicts as fastText. See ``docs/sklearn.md``.
"""

from ._classifier import LookupClassifier
from ._fasttext_bin import FastTextModel, load_fasttext
from ._model import LookupNet
from ._modelfile import TextModel, load_model, save_model
from ._regressor import LookupRegressor

__all__ = ["FastTextModel", "LookupClassifier", "LookupNet", "LookupRegressor", "TextModel",
           "load_fasttext", "load_model", "save_model"]
