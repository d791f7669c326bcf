"""Names every doctest in src/ may use without importing them."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict) -> None:
    doctest_namespace.update(torch=torch, nn=nn, F=F, np=np, sp=sp)
