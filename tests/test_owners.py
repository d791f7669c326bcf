"""State has owners: one marker on a bound parameter, nothing else set on tensors, and the
backend choice held per thread."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from lookuplinear import Checkpoint, KeyedBags, LookupCollection, LookupLinear, TableConfig, optim
from lookuplinear.ops import backend, use_backend
from lookuplinear.ops._hooks import notify
from lookuplinear.storage.rowwatch import RowTracker


def _stamped(t: torch.Tensor) -> set[str]:
    return {k for k in t.__dict__ if k.startswith("_lookuplinear")}


def test_only_the_in_backward_marker_is_set_on_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    col = LookupCollection([TableConfig("ids", 3, 2, ["ids"], hashing="map"),
                            TableConfig("file", 50, 2, ["f"], storage=tmp_path / "file")],
                           sparse=True)
    layer = LookupLinear(20, 2, sparse=True)
    model = torch.nn.ModuleDict({"col": col, "layer": layer})
    opt = optim.Adam(model.parameters(), lr=0.1, fused=True)
    ckpt = Checkpoint(tmp_path / "ckpt", model, opt)
    for step in range(4):  # new IDs evict rows of a 2-row map: their state restarts
        kb = KeyedBags.from_dict({"ids": [[10 * step], [10 * step + 1]], "f": [[step], [1]]})
        opt.zero_grad()
        (col(kb).values().sum() + layer(torch.tensor([step, 3])).sum()).backward()
        ckpt.save(step=step)
    assert col.id_maps["ids"].evicted.numel() > 0
    for p in model.parameters():
        assert _stamped(p) <= {"_lookuplinear_in_backward"}
    assert not any(k.startswith("_lookuplinear") for k in opt.__dict__)
    ckpt.close()


def test_a_row_tracker_follows_its_tables_and_stops_when_closed() -> None:
    table = torch.zeros(6, 2, requires_grad=True)
    tracker = RowTracker({"t": table})
    notify(table[2:], torch.tensor([1, 0]))  # a view's rows are its base's
    sparse = torch.sparse_coo_tensor(torch.tensor([[5]]), torch.ones(1, 2), (6, 2))
    table.backward(sparse)  # a stored gradient reaches the accumulation hook
    assert tracker.touched("t").tolist() == [2, 3, 5]
    tracker.clear("t")
    tracker.close()
    notify(table, torch.tensor([4]))
    assert tracker.touched("t").tolist() == []


def test_use_backend_holds_in_its_thread_only() -> None:
    seen: list[str] = []
    before = backend()
    with use_backend("torch"):
        worker = threading.Thread(target=lambda: seen.append(backend()))
        worker.start()
        worker.join()
        assert backend() == "torch"
    assert seen == [before]
    assert backend() == before
