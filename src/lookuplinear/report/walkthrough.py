"""The equivalence worked through on small examples: embedding == linear on one-hot.

Each example shows its numbers (the examples of the seed notebooks in ``shared/seeds/``): the
weight table, the one-hot matrix, ``X @ W.T`` through ``nn.Linear``, the lookup through
``LookupLinear``, and the verdict of :func:`~lookuplinear.check_equivalence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from ..check import EquivalenceReport, check_equivalence
from ..ids.vocab import Vocab
from ..modules.layer import LookupLinear
from ..sparse.bags import Bags

__all__ = ["SEED_INDICES", "Step", "custom_walkthrough", "render_markdown", "seed_rng",
           "seed_walkthrough"]

#: the seeds' example: ``nn.Embedding(4, 5)`` after ``torch.manual_seed(123)``, ``idx = [2, 3, 1]``
SEED_IN_FEATURES, SEED_OUT_FEATURES, SEED_INDICES, SEED = 4, 5, (2, 3, 1), 123


@dataclass
class Step:
    """One part of the walkthrough: a title, some prose, tensors shown, and equivalence checks."""

    title: str
    text: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    checks: list[EquivalenceReport] = field(default_factory=list)
    equal: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check passed and every stated equality holds."""
        return all(c.ok for c in self.checks) and all(self.equal.values())


def _seeded_table(seed: int = SEED) -> LookupLinear:
    torch.manual_seed(seed)
    return LookupLinear(4, 5, bias=False)


def seed_walkthrough() -> list[Step]:
    """Reproduce seeds 000-004 with the library; returns the steps in order."""
    steps: list[Step] = []

    # seeds 001/003: torch.manual_seed(123); nn.Embedding(4, 5); idx = [2, 3, 1]
    layer = _seeded_table()
    torch.manual_seed(123)
    emb = nn.Embedding(4, 5)
    idx = torch.tensor([2, 3, 1])
    onehot = F.one_hot(idx, 4)
    linear = layer.to_linear()
    with torch.no_grad():
        steps.append(
            Step(
                "Looking up rows of nn.Embedding's table is nn.Linear on one-hot rows",
                "After torch.manual_seed(123), LookupLinear(4, 5, bias=False) draws the same "
                "table as nn.Embedding(4, 5). Looking up idx = [2, 3, 1] equals nn.Linear (weight "
                "= table.T) applied to one_hot(idx).",
                {
                    "weight (4 x 5)": layer.weight,
                    "idx": idx,
                    "one_hot(idx)": onehot,
                    "nn.Linear(one_hot(idx))  [X @ W.T]": linear(onehot.float()),
                    "LookupLinear(idx)  [lookup]": layer(idx),
                },
                [check_equivalence(layer, idx)],
                {
                    "table == nn.Embedding(4, 5).weight": torch.equal(layer.weight, emb.weight),
                    "lookup == nn.Embedding(idx)": torch.equal(layer(idx), emb(idx)),
                    "lookup == linear(one_hot)": torch.equal(layer(idx), linear(onehot.float())),
                },
            )
        )

    # seed 000: idx = [3, 2, 0, 1], the table above
    idx0 = torch.tensor([3, 2, 0, 1])
    with torch.no_grad():
        steps.append(
            Step(
                "Every row once: the one-hot matrix is a permutation",
                "idx = [3, 2, 0, 1] selects every row once: the one-hot matrix is a permutation "
                "matrix and X @ W.T reorders the table.",
                {
                    "one_hot(idx)": F.one_hot(idx0, 4),
                    "LookupLinear(idx)": layer(idx0),
                },
                [check_equivalence(layer, idx0)],
                {
                    "lookup == linear(one_hot)": torch.equal(
                        layer(idx0), linear(F.one_hot(idx0, 4).float())
                    )
                },
            )
        )

    # seed 002: a CSR training set, rows summed, values honoured
    x_train = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]]))
    torch.manual_seed(0)
    lin = nn.Linear(4, 3, bias=False)
    bag_layer = LookupLinear.from_linear(lin)
    tfidf = x_train.astype(np.float64).multiply(np.array([[0.5, 2.0, 1.0, 0.25]])).tocsr()
    with torch.no_grad():
        dense = torch.tensor(x_train.toarray(), dtype=torch.float32)
        dense_tfidf = torch.tensor(tfidf.toarray(), dtype=torch.float32)
        steps.append(
            Step(
                "A scipy CSR matrix is a batch of bags",
                "Each CSR row is a bag of column indices with the stored values as weights. "
                "The layer sums the looked-up rows, weighted by the values, so it equals "
                "nn.Linear on the dense rows (the notebook's `.sum(0)` done for every row at "
                "once). With TF-IDF-like values the weights matter: the notebook's lookup would "
                "ignore them, the layer does not.",
                {
                    "X_train (CSR, dense view)": dense,
                    "nn.Linear(X_train)": lin(dense),
                    "LookupLinear(X_train)": bag_layer(x_train),
                    "X weighted (CSR values != 1)": dense_tfidf,
                    "nn.Linear(X weighted)": lin(dense_tfidf),
                    "LookupLinear(X weighted)": bag_layer(tfidf),
                },
                [check_equivalence(bag_layer, x_train), check_equivalence(bag_layer, tfidf)],
                {
                    "row 0 == embedding(row.indices).sum(0)": torch.allclose(
                        bag_layer(x_train)[0],
                        F.embedding(
                            torch.from_numpy(x_train[[0]].indices).long(), bag_layer.weight
                        ).sum(0),
                    ),
                },
            )
        )

    # seed 004: characters; the same CSR rows as a float tensor
    vocab = Vocab.characters()
    text = "WTF does nn.Embedding do?"
    x = vocab.encode(text).unsqueeze(0)  # (1, 25)
    chars = LookupLinear(len(vocab), 10, bias=False)
    x4 = torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.float32)
    with torch.no_grad():
        out = chars(x)
        steps.append(
            Step(
                "Characters as indices, multi-hot rows as bags",
                f"Vocab.characters() holds the {len(vocab)} characters of string.printable. "
                f"{text!r} encodes to a (1, 25) index tensor; the layer maps it to (1, 25, 10). "
                "The multi-hot float rows give the same result as their bags.",
                {
                    "encoded": x,
                    "output shape": torch.tensor(out.shape),
                    "LookupLinear(multi-hot rows)": bag_layer(x4),
                    "LookupLinear(Bags of the rows)": bag_layer(Bags.from_dense(x4)),
                },
                [check_equivalence(chars, x), check_equivalence(bag_layer, Bags.from_dense(x4))],
                {
                    "output shape == (1, 25, 10)": tuple(out.shape) == (1, 25, 10),
                    "decode(encode(text)) == text": vocab.decode(x[0]) == text,
                },
            )
        )
    return steps


def seed_rng(seed: int) -> np.random.Generator:
    """numpy's generator for a ``torch.manual_seed`` seed: a negative one is read as torch reads
    it, modulo 2**64 (numpy refuses negative seeds).

    Examples
    --------
    >>> int(seed_rng(-1).integers(100)) == int(seed_rng(2**64 - 1).integers(100))
    True
    """
    return np.random.default_rng(seed % 2**64)


def custom_walkthrough(
    in_features: int = SEED_IN_FEATURES,
    out_features: int = SEED_OUT_FEATURES,
    indices: Sequence[int] = SEED_INDICES,
    seed: int = SEED,
) -> list[Step]:
    """The walkthrough on any sizes: the lookup and a weighted CSR row against ``nn.Linear``.

    The table is ``LookupLinear(in_features, out_features, bias=False)`` drawn after
    ``torch.manual_seed(seed)`` (the same table as ``nn.Embedding``). Step 1 looks up
    ``indices`` and compares with ``nn.Linear`` on ``one_hot(indices)``; step 2 puts the same
    indices into one CSR row twice, once with values 1 (multi-hot counts) and once with random
    positive values, and compares with ``nn.Linear`` on the dense rows.

    Parameters
    ----------
    in_features, out_features : int
        Table shape ``(in_features, out_features)``; ``nn.Linear(in_features, out_features)``.
    indices : sequence of int
        Rows to look up, each in ``[0, in_features)``.
    seed : int
        Seed of the table and of the CSR values, as ``torch.manual_seed`` takes it (from
        ``-2**63`` to ``2**64 - 1``).

    Returns
    -------
    list of Step
        Two steps, each with its tensors, its ``check_equivalence`` reports and stated equalities.

    Raises
    ------
    LookupIndexError
        An index outside ``[0, in_features)``.

    Examples
    --------
    >>> steps = custom_walkthrough(10, 3, [7, 7, 0], seed=1)
    >>> [s.ok for s in steps]
    [True, True]
    """
    torch.manual_seed(seed)
    layer = LookupLinear(in_features, out_features, bias=False)
    linear = layer.to_linear()
    idx = torch.as_tensor(list(indices), dtype=torch.long)
    with torch.no_grad():
        lookup = layer(idx)  # raises LookupIndexError before any dense matrix is built
        onehot = F.one_hot(idx, in_features)
        product = linear(onehot.float())
    step1 = Step(
        f"The lookup of {len(idx)} rows is nn.Linear on their one-hot rows",
        f"After torch.manual_seed({seed}), LookupLinear({in_features}, {out_features}, "
        "bias=False) draws the same table as nn.Embedding. Row k of one_hot(idx) has a single 1 "
        "in column idx[k], so X @ W.T (nn.Linear, weight = table.T) selects row idx[k] of the "
        "table: the lookup.",
        {
            f"weight ({in_features} x {out_features})": layer.weight.detach(),
            "idx": idx,
            "one_hot(idx)": onehot,
            "nn.Linear(one_hot(idx))  [X @ W.T]": product,
            "LookupLinear(idx)  [lookup]": lookup,
        },
        [check_equivalence(layer, idx)],
        {"lookup == linear(one_hot)": torch.equal(lookup, product)},
    )

    rng = seed_rng(seed)
    n = len(idx)
    values = np.concatenate([np.ones(n), rng.uniform(0.25, 2.0, n).round(2)])
    cols = np.concatenate([idx.numpy(), idx.numpy()])
    csr = sp.csr_matrix((values, cols, np.array([0, n, 2 * n])), shape=(2, in_features))
    csr.sum_duplicates()
    with torch.no_grad():
        dense = torch.tensor(csr.toarray(), dtype=torch.float32)
        bags = Bags.from_scipy(csr)
        w = (bags.weights if bags.weights is not None else torch.ones(bags.nnz)).float()
        weighted_rows = w[:, None] * layer.weight[bags.indices]  # (nnz, out)
        row1 = weighted_rows[bags.offsets[1] :].sum(0)
        out = layer(csr)
        step2 = Step(
            "A CSR row is a bag: the weighted rows of the table, summed",
            "Row 0 holds the indices with value 1 (a multi-hot row; a repeated index counts "
            "twice), row 1 the same indices with other values. The layer looks up the stored "
            "columns and sums the rows weighted by the stored values, which is nn.Linear on the "
            "dense rows.",
            {
                "CSR indices per row": bags.indices,
                "CSR values per row": w,
                "X (CSR, dense view)": dense,
                "nn.Linear(X)": linear(dense),
                "LookupLinear(X)": out,
            },
            [check_equivalence(layer, csr)],
            {"row 1 == sum of value * weight[index]": torch.allclose(out[1], row1, atol=1e-5)},
        )
    return [step1, step2]


def _fmt(t: torch.Tensor) -> str:
    with np.printoptions(precision=4, suppress=True, linewidth=100):
        return str(t.detach().cpu().numpy())


def render_markdown(steps: list[Step]) -> str:
    """The walkthrough as Markdown: tensors in code blocks, a verdict per step."""
    lines = ["# An embedding layer is a linear layer", ""]
    for s in steps:
        lines += [f"## {s.title}", "", s.text, ""]
        for name, t in s.tensors.items():
            lines += [f"**{name}**", "", "```", _fmt(t), "```", ""]
        for name, ok in s.equal.items():
            lines.append(f"- {'✅' if ok else '❌'} {name}")
        for c in s.checks:
            lines += ["", "```", str(c), "```"]
        lines.append("")
    verdict = all(s.ok for s in steps)
    lines.append(f"**Verdict: {'all equivalent' if verdict else 'MISMATCH'}** ({len(steps)} steps)")
    return "\n".join(lines) + "\n"
