"""All-or-nothing ``load_state_dict``: every entry is checked before any is copied.

``nn.Module.load_state_dict`` copies each entry that fits as it walks the modules and reports
the ones that do not at the end: a state dict with one tensor of another shape, or one
unexpected key, leaves the module half loaded. :func:`check_state_dict` walks the modules the
same way first, copying nothing, and refuses with every problem it finds; a lookuplinear module
(:class:`AllOrNothingLoad`) calls it before PyTorch's load, so a refused load changes nothing.

A module whose ``_load_from_state_dict`` reads more than its parameters and buffers (an
``IdMap``'s strings) or that renames entries (a ``LookupCollection``'s tables) says what it
reads in ``_check_state_entries(state, prefix, local_metadata, strict, missing, unexpected,
errors)`` (the arguments of ``_load_from_state_dict``): it may rename the entries of ``state``
(a copy) as its load would, takes out those it reads itself, and adds each problem to
``missing``, ``unexpected`` or ``errors``; it copies nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .errors import InputTypeError, StateDictError

__all__ = ["AllOrNothingLoad", "check_state_dict", "checked_hook", "entry_problem",
           "own_entry_problems", "run_pre_hooks", "unassignable", "uncopyable"]


def check_state_dict(module: nn.Module, state_dict: Mapping[str, Any], *, strict: bool = True,
                     assign: bool = False) -> None:
    """Refuse, before anything is copied, what ``module.load_state_dict(state_dict, strict,
    assign)`` would refuse after copying the entries that fit.

    Checks, for ``module`` and each submodule: every entry is a tensor of the shape of the
    parameter or buffer it loads into (PyTorch's rule: a 1-element entry loads into a 0-d one;
    the dtype is converted, as PyTorch converts it), with values to copy (not on the meta
    device, of the parameter's layout) unless ``assign``, of a floating point or complex dtype
    for a parameter that requires grad if ``assign``; with ``strict``, no parameter or
    persistent buffer is missing and no key is unexpected; and what each lookuplinear module
    checks itself (``_check_state_entries``). The modules' ``load_state_dict`` pre-hooks run
    first on a copy of the state dict (:func:`run_pre_hooks`), as the load will run them.

    Raises
    ------
    StateDictError
        Naming every problem, each with the shape expected and the shape given.
    InputTypeError
        ``state_dict`` is not a mapping.

    Examples
    --------
    >>> from lookuplinear import LookupLinear
    >>> layer = LookupLinear(10, 3)
    >>> check_state_dict(layer, {"weight": torch.zeros(10, 3), "bias": torch.zeros(4)})
    Traceback (most recent call last):
        ...
    lookuplinear.errors.StateDictError: LookupLinear.load_state_dict: the state dict does not fit
    this module: bias: the state dict's is of shape (4,), this module's (3,). ...
    >>> check_state_dict(layer, {"weight": torch.zeros(10, 3)}, strict=False)  # fits
    """
    if not isinstance(state_dict, Mapping):
        raise InputTypeError(
            f"load_state_dict takes a mapping of names to tensors, got "
            f"{type(state_dict).__name__}. Pass the dict that state_dict() returned."
        )
    metadata = getattr(state_dict, "_metadata", None)
    state: dict[str, Any] = OrderedDict(state_dict)
    errors: list[str] = []
    missing: list[str] = []
    unexpected: list[str] = []

    def visit(m: nn.Module, prefix: str) -> None:
        local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
        if assign:
            local_metadata["assign_to_params_buffers"] = True
        own_check = getattr(m, "_check_state_entries", None)
        if own_check is not None:
            own_check(state, prefix, local_metadata, strict, missing, unexpected, errors)
        run_pre_hooks(m, state, prefix, local_metadata, missing if strict else [],
                      unexpected if strict else [], errors)
        local: dict[str, torch.Tensor] = {k: v for k, v in m._parameters.items()
                                          if v is not None}
        local.update((k, v) for k, v in m._buffers.items()
                     if v is not None and k not in m._non_persistent_buffers_set)
        for name, param in local.items():
            key = prefix + name
            if key not in state:
                if strict:
                    missing.append(key)
                continue
            problem = entry_problem(key, state[key], param, assign)
            if problem is not None:
                errors.append(problem)
        extra = prefix + "_extra_state"
        has_extra = type(m).set_extra_state is not nn.Module.set_extra_state
        if strict and has_extra and extra not in state:
            missing.append(extra)
        if strict:
            for key in state:
                if not key.startswith(prefix) or (has_extra and key == extra):
                    continue
                head, *rest = key[len(prefix):].split(".", 1)
                if (head not in m._modules) if rest else (head not in local):
                    unexpected.append(key)
        for name, child in m._modules.items():
            if child is not None:
                visit(child, prefix + name + ".")

    visit(module, "")
    problems = [e.rstrip(".") for e in errors]
    if missing:
        problems.append("Missing key(s): " + ", ".join(missing))
    if unexpected:
        problems.append("Unexpected key(s): " + ", ".join(unexpected))
    if problems:
        raise StateDictError(
            f"{type(module).__name__}.load_state_dict: the state dict does not fit this "
            f"module: {'; '.join(problems)}. Load a state dict saved from a module built "
            "with the same arguments (strict=False leaves out missing and unexpected keys, not "
            "shapes). Nothing was loaded."
        )


def checked_hook(hook: Any) -> Any:
    """Mark ``hook``, a lookuplinear module's ``load_state_dict`` pre-hook, as checked by the
    module's ``_check_state_entries``: :func:`check_state_dict` does not run it."""
    hook._checked_by_entries = True
    return hook


def run_pre_hooks(module: nn.Module, state: dict[str, Any], prefix: str,
                  local_metadata: dict[str, Any], missing: list[str], unexpected: list[str],
                  errors: list[str]) -> None:
    """Run ``module``'s ``load_state_dict`` pre-hooks (those registered on it, not the
    :func:`checked_hook` ones) on the entries of ``state`` (a copy) under ``prefix``, as
    ``nn.Module``'s load runs them on its copy: a hook that renames an older key is checked
    under the name it loads. ``strict`` is True, as ``nn.Module``'s load passes it."""
    hooks = [h for h in module._load_state_dict_pre_hooks.values()
             if not _checked(getattr(h, "hook", h))]
    if not hooks:
        return
    local = {k: v for k, v in state.items() if k.startswith(prefix)}
    for hook in hooks:
        hook(local, prefix, local_metadata, True, missing, unexpected, errors)
    for key in [k for k in state if k.startswith(prefix)]:
        del state[key]
    state.update(local)


def _checked(hook: Any) -> bool:
    """Whether the pre-hook ``hook`` is checked without running it: a :func:`checked_hook`,
    or a lazy module's (which materializes its parameters: :func:`entry_problem` takes any
    entry for a lazy one)."""
    return (getattr(hook, "_checked_by_entries", False)
            or getattr(hook, "__func__", None) is nn.modules.lazy.LazyModuleMixin._lazy_load_hook)


def entry_problem(key: str, given: Any, param: torch.Tensor, assign: bool) -> str | None:
    """Why ``nn.Module``'s load of the entry ``given`` into ``param`` would fail (not a
    tensor, of another shape, without values to copy: :func:`uncopyable`, or one ``assign``
    cannot make the parameter: :func:`unassignable`), or None. PyTorch's rule: a 1-element
    entry loads into a 0-d one; the dtype is converted unless ``assign``."""
    if not torch.overrides.is_tensor_like(given):
        return f"{key}: expected a tensor, got {type(given).__name__}"
    if nn.parameter.is_lazy(param):
        return None
    problem = unassignable(key, given.dtype, param) if assign else uncopyable(key, given, param)
    if problem is not None:
        return problem
    shape = tuple(given.shape)
    if shape != tuple(param.shape) and not (param.dim() == 0 and shape == (1,)):
        return f"{key}: the state dict's is of shape {shape}, this module's {tuple(param.shape)}"
    return None


def own_entry_problems(module: nn.Module, state_dict: Mapping[str, Any], prefix: str,
                       assign: bool) -> list[str]:
    """:func:`entry_problem` of each of ``module``'s own parameters in ``state_dict`` (not its
    submodules'): what a module whose load writes files (a table in a file) refuses before
    copying any entry, where its load runs inside another module's (``nn.Module``'s, which
    copies each entry that fits first)."""
    problems = []
    for name, param in module._parameters.items():
        key = prefix + name
        if param is not None and key in state_dict:
            problem = entry_problem(key, state_dict[key], param, assign)
            if problem is not None:
                problems.append(problem)
    return problems


def uncopyable(key: str, given: torch.Tensor, param: torch.Tensor) -> str | None:
    """Why the entry ``given`` has no values ``param.copy_`` can take (on the meta device, or
    of another layout: a sparse one into a dense parameter), or None; PyTorch's load fails at
    that copy, after copying the entries before it."""
    if given.is_meta and not param.is_meta:
        return f"{key}: the state dict's is on the meta device, which holds no values to copy"
    if given.layout != param.layout:
        return (f"{key}: the state dict's is a {given.layout} tensor, this module's "
                f"{param.layout} (convert it with .to_dense())")
    return None


def unassignable(key: str, dtype: torch.dtype, param: torch.Tensor) -> str | None:
    """Why an entry of ``dtype`` cannot take the place of ``param`` in an ``assign=True`` load
    (a parameter that requires grad, which an integer or bool tensor cannot), or None;
    PyTorch's load fails there, after assigning the entries before it."""
    if (not isinstance(param, nn.Parameter) or not param.requires_grad
            or dtype.is_floating_point or dtype.is_complex):
        return None
    return (f"{key}: the state dict's is {dtype}, and assign=True makes it the parameter, "
            f"which requires grad: only a floating point or complex tensor can (convert it "
            f"with .to({param.dtype}), or load without assign)")


class AllOrNothingLoad(nn.Module):
    """A module whose ``load_state_dict`` refuses a state dict that does not fit before copying
    any of it (:func:`check_state_dict`), where ``nn.Module``'s copies what fits first."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """As ``nn.Module.load_state_dict``, all or nothing: a state dict that does not fit
        (a missing or unexpected key with ``strict``, an entry of another shape) is refused
        before anything is copied.

        Raises
        ------
        StateDictError
            The state dict does not fit; the module is left as it was. Also a
            ``RuntimeError``, as PyTorch raises.
        """
        check_state_dict(self, state_dict, strict=strict, assign=assign)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)
