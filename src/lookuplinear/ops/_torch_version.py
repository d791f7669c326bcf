"""The oldest torch lookuplinear runs on, checked when the kernel layer is first imported.

The operators are registered with ``torch.library``'s API (``register_fake``,
``register_autograd``, ``get_ctx``), and the suite has run on torch 2.11 (CUDA) and 2.13 (CPU):
an older torch gets one clear ``ImportError`` here rather than an ``AttributeError`` from
inside the registration.
"""

from __future__ import annotations

import torch

__all__ = ["MINIMUM"]

#: the oldest torch version lookuplinear runs on (pyproject.toml declares the same)
MINIMUM = "2.11"

if torch.__version__ < MINIMUM:  # a TorchVersion: compared as a version, not as text
    raise ImportError(
        f"lookuplinear needs torch {MINIMUM} or later; this is torch {torch.__version__}. "
        f"Upgrade it (pip install 'torch>={MINIMUM}'), or install lookuplinear in an "
        "environment with a newer torch."
    )
