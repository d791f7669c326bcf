"""scikit-learn estimators on ``LookupLinear`` (the ``[sklearn]`` extra), and their model files.

``LookupClassifier`` and ``LookupRegressor`` train ``X -> LookupLinear -> [nn.Linear]`` straight
from scipy.sparse rows (``CountVectorizer`` / ``TfidfVectorizer`` output), dense arrays or lists
of token ids, without densifying. ``save_model`` / ``load_model`` write and read an estimator
with its text vectorizer as safetensors + JSON; ``load_fasttext`` reads a model fastText wrote
(``.bin``, ``.ftz``) and predicts as fastText. See ``docs/sklearn.md``. Each name loads on
first use: a model file read for prediction (``load_model(path, lazy=True)``) does not import
scikit-learn.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._classifier import LookupClassifier
    from ._fasttext_bin import FastTextModel, load_fasttext
    from ._model import LookupNet
    from ._modelfile import TextModel, load_model, save_model
    from ._regressor import LookupRegressor

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "FastTextModel": "._fasttext_bin",
    "LookupClassifier": "._classifier",
    "LookupNet": "._model",
    "LookupRegressor": "._regressor",
    "TextModel": "._modelfile",
    "load_fasttext": "._fasttext_bin",
    "load_model": "._modelfile",
    "save_model": "._modelfile",
}


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)


__all__ = ["FastTextModel", "LookupClassifier", "LookupNet", "LookupRegressor", "TextModel",
           "load_fasttext", "load_model", "save_model"]
