"""The files of a :class:`~lookuplinear.Checkpoint` directory: its segments and the manifest
that names the complete ones, written so that a crash at any instant leaves the old manifest or
the new one (a temporary file, ``fsync``, an atomic rename, ``fsync`` of the directory), and
read back only after each segment's size and SHA-256 match the manifest."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ModelFileError
from .tables import read_header

__all__ = ["commit_segment", "former_names", "load_segments", "metadata", "read_manifest",
           "remove_unlisted", "renamed"]

_FORMAT = "lookuplinear-checkpoint"
_VERSION = 1
_MANIFEST = "MANIFEST.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` on disk, or is unchanged: a temporary file, fsync, rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def commit_segment(path: Path, g: int, data: bytes, previous: list[dict[str, Any]],
                   committed: Callable[[list[dict[str, Any]]], None]) -> None:
    """Write segment ``g`` (``data``), then the manifest naming ``previous`` and it.

    ``committed(segments)`` is called with the new manifest's segments as soon as the manifest
    is renamed into place (the commit point), before anything that may still fail (the
    ``fsync`` of the directory): whoever saves next sees the committed manifest, even when this
    call raises after it, and never writes a file it names.
    """
    name = f"seg-{g:08d}.safetensors"
    _write_durable(path / name, data)
    _fsync_dir(path)
    entry = {"file": name, "generation": g, "bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}
    segments = [*previous, entry]
    manifest = {"format": _FORMAT, "version": _VERSION, "generation": g, "segments": segments}
    _write_durable(path / _MANIFEST, json.dumps(manifest, indent=1).encode())
    committed(segments)
    _fsync_dir(path)


def remove_unlisted(path: Path, segments: list[dict[str, Any]]) -> None:
    """Delete the segments (and temporary files) the manifest no longer names."""
    keep = {s["file"] for s in segments}
    for f in path.iterdir():
        if (f.name.startswith("seg-") and f.name not in keep) or f.name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of the checkpoint directory ``path``, or None where none was committed."""
    try:
        return read_header(path / _MANIFEST, _FORMAT, _VERSION, "checkpoint")
    except FileNotFoundError:
        return None


def load_segments(path: Path, manifest: dict[str, Any], renames: dict[str, str] | None = None
                  ) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
    """Each segment the manifest names, as ``(metadata, tensors)``, in order, with the names
    saved under a former name renamed (``renames``: :func:`renamed`).

    Raises
    ------
    ModelFileError
        A segment is missing, torn or damaged (its size or SHA-256 is not the manifest's).
    """
    from safetensors.torch import load

    out = []
    for seg in manifest["segments"]:
        file = path / seg["file"]
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise ModelFileError(f"{file} is missing: the checkpoint is damaged.") from None
        if len(data) != seg["bytes"] or hashlib.sha256(data).hexdigest() != seg["sha256"]:
            raise ModelFileError(
                f"{file} is torn or damaged: {len(data)} bytes whose SHA-256 is not the one "
                "the manifest recorded. Nothing was loaded."
            )
        try:
            tensors = load(data)
            meta = json.loads(metadata(data)["checkpoint"])
        except Exception as exc:  # a file with the right hash is ours: this is a bug
            raise ModelFileError(f"{file} cannot be read: {exc}.") from None
        out.append((meta, tensors))
    return renamed(out, renames or {})


def metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file held in memory."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta: dict[str, str] = header.get("__metadata__", {})
    return meta


def former_names(module: nn.Module) -> dict[str, str]:
    """The former qualified names of the module's renamed attributes (a submodule's
    ``_former_names``, as ``{"weights": "table_groups"}``), to their names now: a checkpoint
    saved under a former name restores."""
    out = {}
    for prefix, m in module.named_modules():
        for old, new in getattr(type(m), "_former_names", {}).items():
            out[f"{prefix}.{old}" if prefix else old] = f"{prefix}.{new}" if prefix else new
    return out


def renamed(segments: list[tuple[dict[str, Any], dict[str, torch.Tensor]]],
            renames: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
    """``segments`` with every parameter named by a former name under its name now:
    ``renames`` maps a former qualified prefix to the current one (``"emb.weights"`` ->
    ``"emb.table_groups"``), and a name is renamed where it is that prefix or starts with
    it and a dot. The tensors' keys (``rows/<name>``, ``table/<name>``, ``whole/<name>``,
    ``opt<i>/<name>/<key>``), the tables and the optimizers' state and layouts are renamed."""
    if not renames:
        return segments

    def name(n: str) -> str:
        for old, new in renames.items():
            if n == old or n.startswith(old + "."):
                return new + n[len(old):]
        return n

    def key(k: str) -> str:
        kind, _, rest = k.partition("/")
        if not rest or kind == "rng":
            return k
        if kind.startswith("opt"):
            pname, _, state = rest.rpartition("/")
            return f"{kind}/{name(pname)}/{state}"
        return f"{kind}/{name(rest)}"

    out = []
    for meta, tensors in segments:
        meta = dict(meta, tables=sorted(name(n) for n in meta["tables"]), optimizers=[
            dict(opt, state={name(n): v for n, v in opt["state"].items()},
                 **({"layout": {name(n): v for n, v in opt["layout"].items()}}
                    if opt.get("layout") is not None else {}))
            for opt in meta["optimizers"]])
        out.append((meta, {key(k): t for k, t in tensors.items()}))
    return out
