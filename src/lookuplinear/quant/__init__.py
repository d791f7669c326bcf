"""Quantized modules, built from float ones (``from_float``)."""
