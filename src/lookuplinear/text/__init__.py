"""Text features for the estimators (the ``[sklearn]`` extra): fastText's bag of words and
hashed n-grams as a scipy.sparse matrix, and the text file formats of the command line.

``FastTextVectorizer`` builds the count matrix ``LookupClassifier(mode="mean", hidden=dim)``
trains fastText's model on; ``read_fasttext`` / ``read_table`` read ``__label__`` files and
CSV/TSV tables; ``precision_recall_at_k`` scores top-k predictions as ``fasttext test`` does.
Each name loads on first use: reading a file does not import scikit-learn.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._files import (
        LABEL_PREFIX,
        LabelledTexts,
        precision_recall_at_k,
        read_fasttext,
        read_table,
        read_word_vectors,
        table_delimiter,
    )
    from ._vectorizer import TOKEN_PATTERN, FastTextVectorizer

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "LABEL_PREFIX": "._files",
    "LabelledTexts": "._files",
    "TOKEN_PATTERN": "._vectorizer",
    "FastTextVectorizer": "._vectorizer",
    "precision_recall_at_k": "._files",
    "read_fasttext": "._files",
    "read_table": "._files",
    "read_word_vectors": "._files",
    "table_delimiter": "._files",
}


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)


__all__ = [
    "LABEL_PREFIX",
    "TOKEN_PATTERN",
    "FastTextVectorizer",
    "LabelledTexts",
    "precision_recall_at_k",
    "read_fasttext",
    "read_table",
    "read_word_vectors",
    "table_delimiter",
]
