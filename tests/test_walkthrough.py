"""The seeds' numbers, reproduced through the library."""

import torch

from lookuplinear import LookupLinear
from lookuplinear.report.walkthrough import render_markdown, seed_walkthrough

SEED_TABLE = torch.tensor(
    [
        [0.3374, -0.1778, -0.3035, -0.5880, 1.5810],
        [1.3010, 1.2753, -0.2010, -0.1606, -0.4015],
        [0.6957, -1.8061, -1.1589, 0.3255, -0.6315],
        [-2.8400, -0.7849, -1.4096, -0.4076, 0.7953],
    ]
)


def test_seed_table_is_nn_embedding_init() -> None:
    torch.manual_seed(123)
    layer = LookupLinear(4, 5, bias=False)
    torch.testing.assert_close(layer.weight.detach(), SEED_TABLE, atol=1e-4, rtol=0)


def test_init_linear_matches_nn_linear_under_same_seed() -> None:
    torch.manual_seed(123)
    lin = torch.nn.Linear(4, 5)
    torch.manual_seed(123)
    layer = LookupLinear(4, 5, init="linear")
    assert torch.equal(layer.weight.detach(), lin.weight.detach().T)
    assert layer.bias is not None
    assert torch.equal(layer.bias.detach(), lin.bias.detach())
    # the seed notebooks print this nn.Linear table
    torch.testing.assert_close(
        layer.weight[:, 0].detach(),
        torch.tensor([-0.2039, 0.0166, -0.2483, 0.1886]),
        atol=1e-4,
        rtol=0,
    )


def test_walkthrough_all_steps_pass() -> None:
    steps = seed_walkthrough()
    assert len(steps) == 4
    failed = [s.title for s in steps if not s.ok]
    assert failed == []
    md = render_markdown(steps)
    assert "Verdict: all equivalent" in md
    assert "0.3374" in md  # seed 001's first table entry is shown
    # headings a newcomer reads without knowing the notebooks the examples come from
    assert not [s.title for s in steps if "seed" in s.title.lower()]
