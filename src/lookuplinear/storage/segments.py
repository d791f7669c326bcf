"""The files of a :class:`~lookuplinear.Checkpoint` directory: its segments and the manifest
that names the complete ones, written so that a crash at any instant leaves the old manifest or
the new one (a temporary file, ``fsync``, an atomic rename, ``fsync`` of the directory), and
read back only after each segment's size and SHA-256 match the manifest."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import nn

from .._atomic import fsync_dir, replacing
from ..errors import ModelFileError
from .tables import read_header

__all__ = ["commit_segment", "former_names", "load_segments", "metadata", "read_manifest",
           "remove_unlisted", "renamed"]

_FORMAT = "lookuplinear-checkpoint"
_VERSION = 1
_MANIFEST = "MANIFEST.json"


def _fsync_dir(path: Path) -> None:
    fsync_dir(path)


def _write_durable(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` on disk, or is unchanged: a temporary file, fsync, rename."""
    with replacing(path, durable=True) as tmp:
        tmp.write_bytes(data)


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
    """The manifest of the checkpoint directory ``path``, checked, or None where none was
    committed.

    Raises
    ------
    ModelFileError
        The manifest is damaged or is not one a save writes: not JSON, another format or
        version, no segments, an entry without its file, generation, size or SHA-256, a
        file name that is not a segment's of this directory, generations that do not
        increase to the manifest's own; or the manifest is a directory, or ``path`` is a
        file.
    """
    try:
        manifest = read_header(path / _MANIFEST, _FORMAT, _VERSION, "checkpoint")
    except FileNotFoundError:
        return None
    _check_manifest(path / _MANIFEST, manifest)
    return manifest


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_manifest(file: Path, manifest: dict[str, Any]) -> None:
    """Refuse a manifest that no save wrote (see :func:`read_manifest`)."""

    def damaged(what: str) -> ModelFileError:
        return ModelFileError(
            f"{file} is damaged: {what}. A save writes a manifest naming a chain of segments, "
            "the first a base, generations increasing to the manifest's own. Restore the "
            "directory from a copy, or start a new checkpoint directory. Nothing was loaded."
        )

    generation, segments = manifest.get("generation"), manifest.get("segments")
    if not _count(generation) or generation < 1:
        raise damaged(f"its generation is {generation!r}, not a count from 1")
    if not isinstance(segments, list) or not segments:
        raise damaged(f"its segments are {segments!r}, not a non-empty list")
    last = 0
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise damaged(f"segment {i} is {seg!r}, not an entry")
        g, name, size, sha = (seg.get(k) for k in ("generation", "file", "bytes", "sha256"))
        if not _count(g) or not _count(size) or not isinstance(sha, str) or len(sha) != 64:
            raise damaged(
                f"segment {i} ({seg!r}) lacks a generation, a size in bytes or a SHA-256")
        if g <= last:
            raise damaged(f"segment {i} is generation {g}, after generation {last}: the "
                          "generations of a chain increase")
        if name != f"seg-{g:08d}.safetensors":
            raise damaged(f"segment {i} is the file {name!r}; generation {g}'s is "
                          f"'seg-{g:08d}.safetensors'")
        last = g
    if last != generation:
        raise damaged(f"its last segment is generation {last}, and the manifest's generation "
                      f"{generation}")


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
    previous = None
    for seg in manifest["segments"]:
        file = path / seg["file"]
        if file.exists() and not file.is_file():
            raise ModelFileError(
                f"{file} is not a file: the checkpoint is damaged. Nothing was loaded.")
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
        # the segment's own record of its place in the chain (checkpoints of earlier versions
        # record its generation only)
        follows = meta.get("previous", previous)
        if meta.get("generation") != seg["generation"] or follows != previous:
            first = "the first, a base" if previous is None else f"after generation {previous}"
            holds = "a base" if follows is None else f"the rows changed after generation " \
                f"{follows}"
            raise ModelFileError(
                f"{path / _MANIFEST} is damaged: it lists {file.name} as generation "
                f"{seg['generation']}, {first}; the segment is generation "
                f"{meta.get('generation')!r} and holds {holds}. Restore the directory from a "
                "copy, or start a new checkpoint directory. Nothing was loaded."
            )
        previous = seg["generation"]
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
