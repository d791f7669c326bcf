"""The one check of a training device, shared by the estimators and the command line."""

from __future__ import annotations

import torch

from .errors import InputValueError

__all__ = ["check_device"]


def check_device(device: str | torch.device, *, flag: str | None = None) -> torch.device:
    """``torch.device(device)`` after checking that this torch can train there: ``cpu``, or
    ``cuda``/``cuda:N`` with a CUDA device ``N`` visible.

    ``flag`` names the command-line option (``"--device"``) in the message; without it the
    message names the estimator parameter (``device='cuda'``).

    Raises
    ------
    InputValueError
        ``device`` is not a device name, is neither cpu nor cuda, or is cuda on a torch that
        sees no (or not that) CUDA device.

    Examples
    --------
    >>> check_device("cpu")
    device(type='cpu')
    >>> check_device("gpu", flag="--device")
    Traceback (most recent call last):
    ...
    lookuplinear.errors.InputValueError: --device 'gpu' is not a device; use cpu, cuda or cuda:N.
    """
    given = f"{flag} {str(device)!r}" if flag else f"device={str(device)!r}"
    on_cpu = f"{flag} cpu" if flag else "device='cpu'"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise InputValueError(f"{given} is not a device; use cpu, cuda or cuda:N.") from None
    if dev.type not in ("cpu", "cuda"):
        raise InputValueError(f"{given}: lookuplinear trains on cpu or cuda; use {on_cpu}.")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputValueError(
                f"{given}: this torch ({torch.__version__}) sees no CUDA device (a CPU build of "
                f"torch, or no GPU); use {on_cpu}."
            )
        if dev.index is not None and dev.index >= count:
            raise InputValueError(
                f"{given}: this torch sees {count} CUDA device{'s' * (count != 1)} "
                f"(cuda:0 to cuda:{count - 1}); use one of them."
            )
    return dev
