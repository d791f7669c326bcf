"""The batch types as pytree nodes, as TorchRec registers its ``KeyedJaggedTensor``: so that
``torch.export`` takes them as inputs and returns them (their tensors are the graph's inputs
and outputs, their keys and sizes, the context, part of the program), and saves them as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

__all__ = ["register_node"]


def register_node(
    cls: type,
    leaves: Sequence[str] | Callable[[Any], Sequence[str]],
    context: Callable[[Any], tuple[Any, ...]],
    build: Callable[[Iterable[Any], Any], Any],
) -> None:
    """Register ``cls`` as a pytree node whose leaves are its attributes ``leaves`` (or the
    attributes ``leaves(obj)`` names, for an object whose leaves depend on its kind).

    ``context(obj)`` is what else rebuilds it (keys, sizes: JSON-able tuples); ``build(leaves,
    context)`` rebuilds it. An exported program saves its example inputs: ``cls`` also loads
    with ``torch.load(weights_only=True)``.
    """
    from torch.utils._pytree import GetAttrKey

    def names(obj: Any) -> Sequence[str]:
        return leaves(obj) if callable(leaves) else leaves

    def flatten(obj: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return [getattr(obj, n) for n in names(obj)], context(obj)

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
        return [(GetAttrKey(n), getattr(obj, n)) for n in names(obj)], context(obj)

    torch.utils._pytree.register_pytree_node(
        cls, flatten, build,
        serialized_type_name=f"lookuplinear.{cls.__name__}", flatten_with_keys_fn=flatten_with_keys,
        to_dumpable_context=json.dumps, from_dumpable_context=_loaded_context,
    )
    torch.serialization.add_safe_globals([cls])


def _loaded_context(text: str) -> Any:  # JSON's lists back to the tuples that flattening builds
    def tuples(x: Any) -> Any:
        return tuple(tuples(v) for v in x) if isinstance(x, list) else x

    return tuples(json.loads(text))
