"""Safe, atomic on-disk state: one JSON manifest plus ``.npy`` arrays, no pickle.

Layout of a state folder::

    carag_manifest.json          # format, version, settings, checksums
    <name>-<sha256[:16]>.npy     # one file per array, named by its content

Writing puts every array under its content hash first and replaces the
manifest last with an atomic ``os.replace``; a crash at any point leaves the
previous manifest, and the files it names, intact and loadable.  Files no
manifest names any more are removed afterwards.

Loading checks the format name and version, each file's SHA-256, and loads
arrays with ``allow_pickle=False``; any mismatch raises :class:`StateError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write_bytes

logger = logging.getLogger(__name__)

__all__ = [
    "StateError",
    "persist_state",
    "state_from_persist_dir",
    "MANIFEST_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ids_checksum",
]

MANIFEST_NAME = "carag_manifest.json"
FORMAT_NAME = "llama-index-carag"
FORMAT_VERSION = 1


class StateError(ValueError):
    """A persisted state folder is missing, truncated, tampered with or does not match."""


def ids_checksum(ids: Any) -> str:
    """SHA-256 of a set of node ids (order-independent)."""
    digest = hashlib.sha256()
    for node_id in sorted(str(i) for i in ids):
        digest.update(node_id.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _array_bytes(array: np.ndarray) -> bytes:
    if array.dtype == object:
        raise TypeError("Object arrays cannot be saved without pickle; convert them to JSON.")
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def persist_state(directory: str | os.PathLike[str], info: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Path:
    """Write ``info`` (JSON-safe) and ``arrays`` into ``directory`` atomically.

    Returns:
        the manifest's path.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    for name, array in arrays.items():
        if not name.replace("_", "").isalnum():
            raise ValueError(f"Array name {name!r} must be alphanumeric (underscores allowed).")
        arr = np.asarray(array)
        data = _array_bytes(arr)
        sha = hashlib.sha256(data).hexdigest()
        file_name = f"{name}-{sha[:16]}.npy"
        target = folder / file_name
        if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != sha:
            atomic_write_bytes(target, data)
        files[name] = {"file": file_name, "sha256": sha, "shape": list(arr.shape), "dtype": arr.dtype.str}
    manifest = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "info": info, "arrays": files}
    try:
        text = json.dumps(manifest, indent=1, sort_keys=True, allow_nan=True)
    except TypeError as exc:
        raise TypeError(f"State info is not JSON-serialisable: {exc}") from None
    manifest_path = folder / MANIFEST_NAME
    atomic_write_bytes(manifest_path, text.encode("utf-8"))
    _fsync_dir(folder)
    keep = {meta["file"] for meta in files.values()}
    for stale in folder.glob("*.npy"):
        if stale.name not in keep:
            try:
                stale.unlink()
            except OSError:
                logger.debug("Could not remove stale state file %s", stale)
    logger.info("Saved CARAG state to %s (%d arrays)", folder, len(files))
    return manifest_path


def state_from_persist_dir(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a folder written by :func:`persist_state`.

    Returns:
        ``(info, arrays)``.

    Raises:
        StateError: no manifest, unknown format/version, a missing, truncated or
            altered array file, or a shape/dtype that differs from the manifest.
    """
    folder = Path(directory)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise StateError(f"No CARAG state in {folder} (missing {MANIFEST_NAME}).")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(f"{manifest_path} is not valid JSON ({exc}); the state is corrupt.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise StateError(f"{manifest_path} is not a {FORMAT_NAME} state file.")
    if manifest.get("version") != FORMAT_VERSION:
        raise StateError(
            f"{manifest_path} has format version {manifest.get('version')!r}; this library reads version {FORMAT_VERSION}."
        )
    arrays: dict[str, np.ndarray] = {}
    for name, meta in (manifest.get("arrays") or {}).items():
        try:
            path = folder / Path(meta["file"]).name
            expected_sha, shape, dtype = meta["sha256"], tuple(meta["shape"]), meta["dtype"]
        except (KeyError, TypeError):
            raise StateError(f"{manifest_path}: malformed entry for array {name!r}.") from None
        if not path.is_file():
            raise StateError(f"State file {path.name} is missing from {folder}.")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != expected_sha:
            raise StateError(f"State file {path.name} is truncated or was modified (checksum mismatch).")
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as exc:
            raise StateError(f"State file {path.name} cannot be read safely ({exc}).") from None
        if arr.shape != shape or arr.dtype.str != dtype:
            raise StateError(
                f"State file {path.name} has shape/dtype {arr.shape}/{arr.dtype.str}; expected {shape}/{dtype}."
            )
        arrays[name] = arr
    info = manifest.get("info")
    if not isinstance(info, dict):
        raise StateError(f"{manifest_path} has no settings block.")
    return info, arrays
