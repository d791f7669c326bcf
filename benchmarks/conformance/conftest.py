"""Rebind PyTorch's embedding classes to lookuplinear's drop-ins before a test module imports.

pytest imports this file before the test modules beside it, so every ``torch.*`` name of
``nn.EmbeddingBag`` (``torch.nn.EmbeddingBag``, ``torch.nn.modules.EmbeddingBag``,
``torch.nn.modules.sparse.EmbeddingBag``...) is ``lookuplinear.EmbeddingBag`` when
``test_embedding.py`` runs ``nn.EmbeddingBag(...)``; the same for ``nn.Embedding``. The
functionals (``F.embedding``, ``F.embedding_bag``) stay PyTorch's.

``LOOKUPLINEAR_REBIND`` names the classes to rebind, comma-separated: ``EmbeddingBag,Embedding``
(the default), one of them, or empty for PyTorch's own classes (the stock run).
"""

from __future__ import annotations

import os
import sys

from torch import nn

import lookuplinear

REBIND = [name for name in os.environ.get("LOOKUPLINEAR_REBIND",
                                          "EmbeddingBag,Embedding").split(",") if name]


def rebind(name: str) -> int:
    """Point every ``torch.*`` module attribute holding ``nn.<name>`` at ``lookuplinear.<name>``;
    the number of names rebound."""
    stock, ours = getattr(nn, name), getattr(lookuplinear, name)
    assert issubclass(ours, stock) and ours is not stock, (name, ours, stock)
    count = 0
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "torch" or module_name.startswith("torch.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is stock:
                setattr(module, attr, ours)
                count += 1
    return count


REBOUND = {name: rebind(name) for name in REBIND}


def pytest_report_header() -> str:
    if not REBOUND:
        return "lookuplinear conformance: PyTorch's own classes (nothing rebound)"
    names = ", ".join(f"nn.{n} -> lookuplinear.{n} ({k} names)" for n, k in REBOUND.items())
    return f"lookuplinear conformance: {names}"
