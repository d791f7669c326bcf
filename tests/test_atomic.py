"""Files replaced in one step: the new file whole, or the old one untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lookuplinear._atomic import replacing


@pytest.mark.parametrize("durable", [False, True])
def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="disk full"), replacing(target, durable=durable) as tmp:
        tmp.write_bytes(b"half")
        raise OSError("disk full")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


@pytest.mark.parametrize("durable", [False, True])
def test_a_write_that_ends_replaces_the_file_with_the_umasks_mode(
        tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    old = os.umask(0o027)
    try:
        with replacing(target, durable=durable) as tmp:
            assert tmp.parent == tmp_path and tmp != target
            assert target.read_bytes() == b"old"  # nothing replaced before the block ends
            tmp.write_bytes(b"new")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]
