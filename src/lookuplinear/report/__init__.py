"""The report: pictures of the equivalence, the benchmark matrix, the training demonstration.

Used by the ``explain``, ``bench`` and ``report`` subcommands; needs the ``report`` extra
(matplotlib, tqdm). Nothing here is imported by ``import lookuplinear``.
"""

__all__: list[str] = []
