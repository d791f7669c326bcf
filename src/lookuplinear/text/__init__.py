"""Text features for the estimators (the ``[sklearn]`` extra): fastText's bag of words and
hashed n-grams as a scipy.sparse matrix, and the text file formats of the command line.

``FastTextVectorizer`` builds the count matrix ``LookupClassifier(mode="mean", hidden=dim)``
trains fastText's model on; ``read_fasttext`` / ``read_table`` read ``__label__`` files and
CSV/TSV tables; ``precision_recall_at_k`` scores top-k predictions as ``fasttext test`` does.
"""

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
