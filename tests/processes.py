"""A process group for tests that run in this one process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch.distributed as dist


@contextmanager
def one_process(tmp_path: Path) -> Iterator[None]:
    """A default process group of this one process (gloo), destroyed afterwards."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
