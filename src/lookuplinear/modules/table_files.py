"""A collection's table kept in a file (``TableConfig(storage=...)``): its parameter, opened
or created as a :class:`~lookuplinear.TableStorage`."""

from __future__ import annotations

import os

import torch
from torch import nn

from ..errors import InputValueError
from ..storage.tables import TableStorage, attach
from .table_config import TableConfig

__all__ = ["file_table"]


def file_table(cfg: TableConfig, dtype: torch.dtype,
                device: torch.device | str | None) -> nn.Parameter:
    """The parameter of a table in a file: opened where ``cfg.storage`` holds one of this
    shape and these settings (``init``, ``padding_idx``, ``mode``), else created (seed drawn
    from PyTorch's generator).

    Raises
    ------
    InputValueError
        ``cfg.storage`` holds a table of another shape, dtype or settings.
    """
    if torch.device(device or "cpu").type != "cpu":
        raise InputValueError(
            f"TableConfig {cfg.name!r}: storage= keeps the table in a memory-mapped file, which "
            f"is CPU memory; got device={device!r}."
        )
    path = os.fspath(cfg.storage)  # type: ignore[arg-type]
    if os.path.exists(path):
        storage = TableStorage.open(path, writable=True)
        m = storage.meta
        if (m["rows"], m["dim"], storage.dtype) != (cfg.stored_rows, cfg.embedding_dim, dtype):
            raise InputValueError(
                f"TableConfig {cfg.name!r}: {path} holds a {m['rows']} x {m['dim']} "
                f"{m['dtype']} table, the config asks for {cfg.stored_rows} x "
                f"{cfg.embedding_dim} {dtype}. Give another path, or remove it."
            )
        # what the file's rows were drawn and kept by: the config's own would be ignored
        asked = {"init": str(cfg.init), "padding_idx": cfg.padding_idx, "mode": cfg.mode}
        differ = [f"{k}={m.get(k, v)!r} (the config asks for {k}={v!r})"
                  for k, v in asked.items() if m.get(k, v) != v]
        if differ:
            raise InputValueError(
                f"TableConfig {cfg.name!r}: {path} holds a table made with "
                f"{', '.join(differ)}; its rows are drawn and kept by the settings it was made "
                "with. Give the config the table's settings to go on from it, or give another "
                "path for a new table."
            )
    else:
        layer = {"bias": False, "mode": cfg.mode, "padding_idx": cfg.padding_idx,
                 "sparse": True, "include_last_offset": False}
        storage = TableStorage.create(path, cfg.stored_rows, cfg.embedding_dim, dtype=dtype,
                                      init=str(cfg.init), seed=int(torch.randint(0, 2**62, ())),
                                      layer=layer)
    param = nn.Parameter(storage.weight)
    attach(param, storage)
    return param
