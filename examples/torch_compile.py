"""Compile a LookupLinear with torch.compile (default Inductor backend) and compare with eager.

Run: ``.venv/bin/python examples/torch_compile.py``. It compiles with ``fullgraph=True``, so a
graph break would be an error: the whole forward is one graph, the range check on the indices
included (an ``_assert_async`` op that runs with the graph).
"""

import time

import torch

from lookuplinear import Bags, LookupLinear


def main() -> None:
    layer = LookupLinear(10, 3, mode="mean")
    start = time.perf_counter()
    compiled = torch.compile(layer, fullgraph=True)
    for x in (torch.tensor([[3, 0], [9, 2]]), Bags.from_lists([[3, 1, 3], [], [2, 7]])):
        out = compiled(x)
        (got,) = torch.autograd.grad(out.sum(), [layer.weight])
        (want,) = torch.autograd.grad(layer(x).sum(), [layer.weight])
        print(
            f"{type(x).__name__:>6}: output equal to eager {torch.allclose(out, layer(x))}, "
            f"weight grad equal {torch.allclose(got, want)}"
        )
    print(f"compile + run: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
