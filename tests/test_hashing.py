"""The hash functions, each defined once: the torch versions equal the C ones and Python's."""

from __future__ import annotations

import pytest
import torch

from lookuplinear.ids.hashing import (
    murmur3_bytes,
    murmur3_int64,
    qr_rows,
    qr_stored_rows,
    splitmix64,
    splitmix64_c,
    splitmix64_int,
)
from lookuplinear.ops import c_available

KEYS = torch.tensor([0, 1, -1, 7, 2**31, -(2**31), 2**62 + 12345, -(2**63), 2**63 - 1,
                     123456789012345])


def _signed(x: int) -> int:
    return x - 2**64 if x >= 2**63 else x


def test_splitmix64_torch_equals_python() -> None:
    want = [_signed(splitmix64_int(int(k))) for k in KEYS]
    assert splitmix64(KEYS).tolist() == want


@pytest.mark.skipif(not c_available(), reason="C kernels not built")
def test_splitmix64_torch_equals_c() -> None:
    keys = torch.cat([KEYS, torch.randint(-(2**63), 2**63 - 1, (1000,))])
    assert torch.equal(splitmix64(keys), splitmix64_c(keys))


def test_murmur3_torch_equals_bytes_hash() -> None:
    from sklearn.utils import murmurhash3_32

    for k in KEYS.tolist():
        data = int(k).to_bytes(8, "little", signed=True)
        assert murmur3_bytes(data) == murmurhash3_32(data, seed=0, positive=False)
        assert int(murmur3_int64(torch.tensor([k]))[0]) == murmur3_bytes(data)


@pytest.mark.skipif(not c_available(), reason="C kernels not built")
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_hash_ids_of_an_integer_tensor_the_c_way_equals_the_torch_way(dtype: torch.dtype
                                                                      ) -> None:
    """``hash_ids`` of integer IDs on the CPU is one call of the C hash over the IDs' bytes;
    the same rows as the torch ops' (``murmur3_int64``), for every shape and int dtype, and
    for an empty tensor."""
    from lookuplinear import hash_ids
    from lookuplinear.ops import use_backend

    info = torch.iinfo(dtype)
    keys = torch.cat([KEYS.clamp(info.min, info.max).to(dtype),
                      torch.randint(info.min, info.max, (999,), dtype=dtype)])
    for ids in (keys, keys[:990].view(10, 99), keys[:0]):
        for rows in (1, 997, 2**31 - 1):
            with use_backend("c"):
                got = hash_ids(ids, rows)
            with use_backend("torch"):
                want = hash_ids(ids, rows)
            assert got.shape == ids.shape and got.dtype == torch.int64
            assert torch.equal(got, want)


def test_qr_rows_cover_the_stored_rows_once_per_pair() -> None:
    n, m = 10, 4
    q, r = qr_rows(torch.arange(n), n, m)
    assert qr_stored_rows(n, m) == 3 + 4
    assert q.max() < 3 <= r.min() and r.max() < qr_stored_rows(n, m)
    pairs = set(zip(q.tolist(), r.tolist(), strict=True))
    assert len(pairs) == n  # every row of the logical table reads its own pair
