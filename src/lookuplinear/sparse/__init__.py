"""Jagged batches: ``Bags``, ``KeyedBags``, ``KeyedTensor``, and their adapters."""
