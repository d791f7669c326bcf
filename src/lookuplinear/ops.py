"""What a program exported from a lookuplinear model needs to run: import this, not the modules.

``torch.export`` records a lookuplinear model as ATen ops (the lookups as ``embedding_bag`` and
``index_select``, the range checks as ``_assert_async``), so its program runs with PyTorch
alone, as one exported from ``nn.EmbeddingBag`` does. A program whose inputs or outputs are a
:class:`~lookuplinear.KeyedBags` or :class:`~lookuplinear.KeyedTensor` also needs those two types
registered as pytree nodes (as TorchRec registers its ``KeyedJaggedTensor``): importing this module
does that, and loads none of the layers, collections, optimizers or estimators.

Examples
--------
>>> import torch, lookuplinear.ops
>>> from lookuplinear.ops import KeyedBags
>>> kb = KeyedBags(["user"], torch.tensor([3, 1]), lengths=torch.tensor([2]))
>>> torch.utils._pytree.tree_flatten(kb)[0]          # its tensors: the program's inputs
[tensor([3, 1]), tensor([0, 2]), None]
"""

import torch

from ._keyed import KeyedBags, KeyedTensor

__all__ = ["KeyedBags", "KeyedTensor"]

# an exported program saves its example inputs: load them with torch.load(weights_only=True)
torch.serialization.add_safe_globals([KeyedBags, KeyedTensor])
