"""The environment variables lookuplinear reads when a process starts, read strictly.

A value a variable does not take is an :class:`~lookuplinear.errors.InputValueError` naming the
variable, the value and the values it takes, not a silent default: ``LOOKUPLINEAR_NO_C=0``
must not turn the C kernels off, nor ``LOOKUPLINEAR_HUGEPAGES=OFF`` leave huge pages on. An
empty variable is an unset one.

* :func:`choice`: one of some names (``LOOKUPLINEAR_BACKEND``, ``LOOKUPLINEAR_OPS``), as given;
* :func:`flag`: on or off, ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` in
  any case (``LOOKUPLINEAR_NO_C``, ``LOOKUPLINEAR_HUGEPAGES``). setup.py reads
  ``LOOKUPLINEAR_NO_C`` with its own copy of these words (a build cannot import the package).
"""

from __future__ import annotations

import os

from .errors import InputValueError

__all__ = ["OFF", "ON", "choice", "flag", "one_of"]

#: the words that turn a :func:`flag` on, and off (in any case)
ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def one_of(value: str, choices: tuple[str, ...], where: str, advice: str, *,
           any_case: bool = False) -> str:
    """``value`` (lower-cased where ``any_case``), which must be one of ``choices``.

    Raises
    ------
    InputValueError
        It is not: the message names ``where`` (the variable, or the argument), the value and
        ``choices``, and ends with ``advice``.

    Examples
    --------
    >>> one_of("torch", ("auto", "torch"), "LOOKUPLINEAR_BACKEND", "Use 'auto'.")
    'torch'
    >>> one_of("numba", ("auto", "torch"), "LOOKUPLINEAR_BACKEND", "Use 'auto'.")
    Traceback (most recent call last):
        ...
    lookuplinear.errors.InputValueError: LOOKUPLINEAR_BACKEND must be one of auto, torch, got ...
    """
    word = value.lower() if any_case else value
    if word not in choices:
        raise InputValueError(
            f"{where} must be one of {', '.join(choices)}{' (any case)' if any_case else ''}, "
            f"got {value!r}. {advice}"
        )
    return word


def choice(name: str, choices: tuple[str, ...], default: str, advice: str) -> str:
    """Environment variable ``name``, one of ``choices`` (unset or empty: ``default``).

    Raises
    ------
    InputValueError
        It holds another value (:func:`one_of`).
    """
    return one_of(os.environ.get(name) or default, choices, name, advice)


def flag(name: str, default: bool) -> bool:
    """Environment variable ``name`` as on or off: one of :data:`ON` or :data:`OFF` in any
    case (unset or empty: ``default``).

    Raises
    ------
    InputValueError
        It holds another value (``2``, ``disabled``).

    Examples
    --------
    >>> import os
    >>> os.environ["LOOKUPLINEAR_EXAMPLE"] = "Off"
    >>> flag("LOOKUPLINEAR_EXAMPLE", default=True)
    False
    >>> os.environ["LOOKUPLINEAR_EXAMPLE"] = "2"
    >>> flag("LOOKUPLINEAR_EXAMPLE", default=True)
    Traceback (most recent call last):
        ...
    lookuplinear.errors.InputValueError: LOOKUPLINEAR_EXAMPLE must be one of 1, true, yes, ...
    >>> del os.environ["LOOKUPLINEAR_EXAMPLE"]
    """
    value = os.environ.get(name) or ""
    if not value:
        return default
    word = one_of(value, ON + OFF, name,
                  f"{'/'.join(ON)} turn it on, {'/'.join(OFF)} off; unset or empty, it is "
                  f"{'on' if default else 'off'}.", any_case=True)
    return word in ON
