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

A state may carry a journal of what changed since it was written (its *base*)::

    carag_journal.json              # the base manifest's SHA-256 and the segments, in order
    journal_<role>-<sha256[:16]>.*  # the files of each segment, named by their content

:func:`append_journal_segment` writes a segment's files first and replaces ``carag_journal.json`` last,
atomically; the manifest and the base's files are not touched.  A journal names the SHA-256 of the
manifest it extends: a journal left beside another manifest (a crash after a full write) names another
one and is ignored.  :func:`read_journal` checks every segment file's SHA-256.  A full write
(:func:`write_state`) removes the journal.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write_bytes, fsync_dir

logger = logging.getLogger(__name__)

MANIFEST_NAME = "carag_manifest.json"
FORMAT_NAME = "llama-index-carag"
FORMAT_VERSION = 1
JOURNAL_NAME = "carag_journal.json"
JOURNAL_FORMAT = "llama-index-carag-journal"
_JOURNAL_PREFIX = "journal_"


class StateError(ValueError):
    """A persisted state folder is missing, truncated, tampered with or does not match."""


def ids_checksum(ids: Any) -> str:
    """SHA-256 of a set of node ids (order-independent)."""
    digest = hashlib.sha256()
    for node_id in sorted(str(i) for i in ids):
        digest.update(node_id.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _array_bytes(array: np.ndarray) -> bytes:
    if array.dtype == object:
        raise TypeError("Object arrays cannot be saved without pickle; convert them to JSON.")
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def write_state(
    directory: str | os.PathLike[str],
    info: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    *,
    switch: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> str:
    """Write ``info`` (JSON-safe) and ``arrays`` into ``directory`` atomically (and drop its journal); returns the
    new manifest's SHA-256 (the token a journal names as its base).

    ``switch()`` is held while the manifest is replaced and the old arrays deleted (the folder's
    :func:`~llama_index_carag.core.writer_lock.switching`, so that no load reads them meanwhile); if it raises,
    the new arrays stay unnamed until the next write deletes them.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    for name, array in arrays.items():
        if not name.replace("_", "").isalnum() or name.startswith(_JOURNAL_PREFIX):
            raise ValueError(
                f"Array name {name!r} must be alphanumeric (underscores allowed), not starting {_JOURNAL_PREFIX!r}."
            )
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
    raw = text.encode("utf-8")
    with switch():
        atomic_write_bytes(manifest_path, raw)
        fsync_dir(folder)
        for stale in stale_state_files(folder, {meta["file"] for meta in files.values()}):
            try:
                stale.unlink(missing_ok=True)
            except OSError:
                logger.debug("Could not remove stale state file %s", stale)
    logger.info("Saved CARAG state to %s (%d arrays)", folder, len(files))
    return hashlib.sha256(raw).hexdigest()


def stale_state_files(folder: Path, keep: set[str]) -> list[Path]:
    """The files of the state folder ``folder`` that a new manifest naming the array files ``keep`` leaves stale:
    other arrays, and the journal (a new manifest starts without one)."""
    stale = [p for p in folder.glob("*.npy") if p.name not in keep]
    return stale + [p for p in [folder / JOURNAL_NAME, *folder.glob(f"{_JOURNAL_PREFIX}*")] if p.is_file()]


def read_state(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """Read a folder written by :func:`write_state` (its journal is not read: see :func:`read_journal`).

    Returns:
        ``(info, arrays, token)``: ``token`` is the manifest's SHA-256 (the one a journal names as its base).

    Raises:
        StateError: no manifest, unknown format/version, a missing, truncated or
            altered array file, or a shape/dtype that differs from the manifest.
    """
    folder = Path(directory)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise StateError(f"No CARAG state in {folder} (missing {MANIFEST_NAME}).")
    raw = manifest_path.read_bytes()
    token = hashlib.sha256(raw).hexdigest()
    try:
        manifest = json.loads(raw.decode("utf-8"))
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
        arr = _load_array(path, expected_sha)
        if arr.shape != shape or arr.dtype.str != dtype:
            raise StateError(
                f"State file {path.name} has shape/dtype {arr.shape}/{arr.dtype.str}; expected {shape}/{dtype}."
            )
        arrays[name] = arr
    info = manifest.get("info")
    if not isinstance(info, dict):
        raise StateError(f"{manifest_path} has no settings block.")
    return info, arrays, token


def _checked_bytes(path: Path, expected_sha: str) -> bytes:
    if not path.is_file():
        raise StateError(f"State file {path.name} is missing from {path.parent}.")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != expected_sha:
        raise StateError(f"State file {path.name} is truncated or was modified (checksum mismatch).")
    return data


def _load_array(path: Path, expected_sha: str) -> np.ndarray:
    data = _checked_bytes(path, expected_sha)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise StateError(f"State file {path.name} cannot be read safely ({exc}).") from None


# ------------------------------------------------------------------------------------------- journal
@dataclass(frozen=True)
class JournalSegment:
    """One committed segment of a journal: its ``meta`` (JSON) and its files by role, read checked."""

    folder: Path
    meta: dict[str, Any]
    files: dict[str, dict[str, str]]

    def data(self, role: str) -> bytes:
        """The bytes of the segment's ``role`` file, checked against its SHA-256.

        Raises:
            StateError: no such file in the segment, or a missing, truncated or altered file.
        """
        try:
            entry = self.files[role]
            path, sha = self.folder / Path(entry["file"]).name, entry["sha256"]
        except (KeyError, TypeError):
            raise StateError(f"A journal segment of {self.folder} has no valid {role!r} file.") from None
        return _checked_bytes(path, sha)

    def array(self, role: str) -> np.ndarray:
        """The segment's ``role`` file as an array (``allow_pickle=False``), checked against its SHA-256."""
        try:
            return np.load(io.BytesIO(self.data(role)), allow_pickle=False)
        except ValueError as exc:
            raise StateError(f"The journal's {role!r} file cannot be read safely ({exc}).") from None


def _read_journal_file(folder: Path) -> dict[str, Any] | None:
    path = folder / JOURNAL_NAME
    if not path.is_file():
        return None
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(f"{path} is not valid JSON ({exc}); the journal is corrupt.") from None
    if not isinstance(journal, dict) or journal.get("format") != JOURNAL_FORMAT or journal.get("version") != 1:
        raise StateError(f"{path} is not a {JOURNAL_FORMAT} file this library reads.")
    if not isinstance(journal.get("segments"), list):
        raise StateError(f"{path} has no segment list; the journal is corrupt.")
    return journal


def read_journal(directory: str | os.PathLike[str], token: str) -> tuple[list[JournalSegment], dict[str, Any]]:
    """The segments journaled on the state whose manifest has SHA-256 ``token``, in order, and the journal's
    ``meta`` (both empty when there is no journal, or a journal of another manifest: it is ignored).

    Raises:
        StateError: a journal of this manifest that is not valid JSON or not in this format.
    """
    folder = Path(directory)
    journal = _read_journal_file(folder)
    if journal is None:
        return [], {}
    if journal.get("base_sha256") != token:
        logger.info("Ignoring %s: it extends another manifest (a full persist replaced it).", folder / JOURNAL_NAME)
        return [], {}
    segments = []
    for entry in journal["segments"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
            raise StateError(f"{folder / JOURNAL_NAME} has a malformed segment; the journal is corrupt.")
        segments.append(JournalSegment(folder, dict(entry.get("meta") or {}), dict(entry["files"])))
    return segments, dict(journal.get("meta") or {})


def append_journal_segment(
    directory: str | os.PathLike[str],
    token: str,
    files: Mapping[str, tuple[str, bytes]],
    meta: Mapping[str, Any],
    *,
    journal_meta: Mapping[str, Any] | None = None,
    expect_segments: int | None = None,
) -> int:
    """Commit one segment to the journal of the state whose manifest has SHA-256 ``token``.

    The segment's files are written first (each named by its content), then ``carag_journal.json`` is
    replaced atomically: a failure at any point leaves the previous journal, and so the previous state.

    Args:
        directory: the state folder.
        token: the manifest's SHA-256 (:func:`write_state`, :func:`read_state`).
        files: ``{role: (suffix, bytes)}``, e.g. ``{"ops": (".jsonl", b"...")}``.
        meta: JSON-safe description of the segment.
        journal_meta: JSON-safe description of the whole journal (kept from the previous one when ``None``).
        expect_segments: the number of segments the journal must hold now (another writer appended: error).

    Returns:
        the number of segments after the append.

    Raises:
        StateError: ``expect_segments`` does not match, or the current journal is unreadable.
    """
    folder = Path(directory)
    current = _read_journal_file(folder)
    if current is not None and current.get("base_sha256") != token:
        current = None  # a journal of another manifest: replaced
    segments = list(current["segments"]) if current is not None else []
    if expect_segments is not None and len(segments) != expect_segments:
        raise StateError(f"The journal of {folder} holds {len(segments)} segments, not {expect_segments}.")
    entries: dict[str, dict[str, str]] = {}
    for role, (suffix, data) in files.items():
        if not role.replace("_", "").isalnum() or not suffix.startswith("."):
            raise ValueError(f"Bad journal file role/suffix {role!r}/{suffix!r}.")
        sha = hashlib.sha256(data).hexdigest()
        name = f"{_JOURNAL_PREFIX}{role}-{sha[:16]}{suffix}"
        target = folder / name
        if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != sha:
            atomic_write_bytes(target, data)
        entries[role] = {"file": name, "sha256": sha}
    segments.append({"meta": dict(meta), "files": entries})
    previous_meta = current.get("meta") if current is not None else None
    journal = {
        "format": JOURNAL_FORMAT,
        "version": 1,
        "base_sha256": token,
        "meta": dict(journal_meta) if journal_meta is not None else dict(previous_meta or {}),
        "segments": segments,
    }
    atomic_write_bytes(folder / JOURNAL_NAME, json.dumps(journal, indent=1, sort_keys=True).encode("utf-8"))
    fsync_dir(folder)
    named = {e["file"] for seg in segments for e in seg["files"].values()}
    for orphan in folder.glob(f"{_JOURNAL_PREFIX}*"):  # files of segments a crash left uncommitted
        if orphan.name not in named:
            orphan.unlink(missing_ok=True)
    logger.info("Journaled a segment in %s (%d segments)", folder, len(segments))
    return len(segments)
