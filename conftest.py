"""Names every doctest in src/ may use; torch's thread count restored after each test, and a
test that leaves grad mode off fails."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update(torch=torch, nn=nn, F=F, np=np, sp=sp)


@pytest.fixture(autouse=True)
def _restore_threads() -> object:
    """A benchmark's main() sets torch's thread count: the next test gets back the one it had."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _grad_mode_kept(request: pytest.FixtureRequest) -> object:
    """A test that leaves autograd off (a ``no_grad`` entered and never left) fails itself,
    instead of every later test in its process."""
    yield
    if not torch.is_grad_enabled():
        torch.set_grad_enabled(True)
        pytest.fail(f"{request.node.nodeid} left torch's grad mode disabled")
