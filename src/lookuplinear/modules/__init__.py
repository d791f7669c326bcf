"""The modules: ``LookupLinear``, ``EmbeddingBag``, ``TableConfig`` + ``LookupCollection``."""
