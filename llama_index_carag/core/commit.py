"""A folder's files replaced as one: written beside it first, then moved in under a record a crash rolls forward.

A full ``persist`` rewrites several files (LlamaIndex's ``docstore.json``, ``index_store.json``, the vector
store, the retriever's state).  Each is atomic on its own (:mod:`~llama_index_carag.core.atomic`), but a
process killed between two of them would leave the new docstore beside the old state.  :func:`replace_files`
makes the set atomic:

1. everything is written into a staging folder inside the target (:data:`STAGING`); a crash here leaves the
   folder's files as they were (the next writer deletes the staging folder);
2. the commit: one record (:data:`RECORD`, written atomically) lists the staged files to move in, in order,
   and the files to delete after them;
3. the files are moved in with ``os.replace`` (same file system: no copy), then the deletions, then the
   record and the staging folder go.

Steps 2 and 3, the *switch*, run under the folder's exclusive lock
(:func:`~llama_index_carag.core.writer_lock.switching`): a load holds it shared while it reads the folder
(:func:`~llama_index_carag.core.writer_lock.reading`), so it reads the whole old version or the whole new one and
no file is deleted under it.  A switch that cannot have the lock in time is not made (``IndexBusyError``; the
staged files are dropped, the folder is as it was).

:func:`roll_forward` finishes a commit whose record exists (moving what is still staged; every step can be
repeated, and two processes may run it at once).  Readers call it before they read the folder, so a crash at any
point leaves either the whole old version or the whole new one; a staging folder without a record (and a
record's temporary file whose write was killed) is deleted by the next writer.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from llama_index_carag.core.atomic import atomic_write_text, fsync_dir, fsync_file
from llama_index_carag.core.writer_lock import IndexBusyError, switching

logger = logging.getLogger(__name__)

#: The folder the new files are written into, inside the target folder.
STAGING = ".carag-staging"
#: The commit record: ``{"moves": [relative paths], "deletes": [relative paths]}``.
RECORD = ".carag-commit.json"


def replace_files(
    folder: str | os.PathLike[str],
    write: Callable[[Path], Sequence[str]],
    *,
    last: Sequence[str] = (),
) -> None:
    """Write new files with ``write(staging)`` and move them into ``folder`` as one commit.

    Args:
        folder: the target folder (created if missing).
        write: writes the new files under the staging folder it is given (the same relative paths they take in
            ``folder``) and returns the paths, relative to ``folder``, to delete once they are in.
        last: relative paths moved after every other file, in this order (a manifest that names the others).

    A failure in ``write`` leaves ``folder`` untouched (the staging folder is removed).

    Raises:
        IndexBusyError: loads read the folder for all of ``SWITCH_WAIT_S``: nothing was moved in.
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    roll_forward(target, writer=True)
    staging = target / STAGING
    staging.mkdir()
    try:
        deletes = list(write(staging))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staged = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    ordered = [p for p in staged if p not in last] + [p for p in last if p in staged]
    for relative in {*ordered, *deletes}:  # a corrupt record must not move or delete outside the folder
        _inside(target, relative)
    _sync_tree(staging)
    try:
        with switching(target):  # no load reads the folder while its files are switched
            atomic_write_text(target / RECORD, json.dumps({"moves": ordered, "deletes": deletes}, indent=1))
            fsync_dir(target)
            roll_forward(target)
    except IndexBusyError:  # the switch was not made: the staged files go
        shutil.rmtree(staging, ignore_errors=True)
        raise


def roll_forward(folder: str | os.PathLike[str], *, writer: bool = False) -> bool:
    """Finish an interrupted :func:`replace_files` in ``folder``.

    A staging folder without a commit record is a write that never committed: the next writer (``writer=True``)
    deletes it; a reader leaves it (it may be another process's write in progress).

    Returns:
        whether a commit was finished.

    Raises:
        ValueError: a commit record that cannot be read or names paths outside the folder.
    """
    target = Path(folder)
    record = target / RECORD
    staging = target / STAGING
    if not record.is_file():
        if writer and staging.exists():
            logger.info("Dropping %s: a write into %s was interrupted before its commit.", staging, target)
            shutil.rmtree(staging, ignore_errors=True)
        if writer:  # a record whose atomic write was killed before its rename: a temporary file, never read
            for orphan in target.glob(f".{RECORD}.*.tmp"):
                orphan.unlink(missing_ok=True)
        return False
    try:
        plan = json.loads(record.read_text(encoding="utf-8"))
        moves, deletes = [str(p) for p in plan["moves"]], [str(p) for p in plan["deletes"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"The commit record {record} is unreadable ({exc}).") from None
    for relative in moves:
        source, destination = _inside(staging, relative), _inside(target, relative)
        if source.is_file():  # not yet moved
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                _move(source, destination)
            except FileNotFoundError:  # another reader finishing the same commit moved it first
                continue
            fsync_dir(destination.parent)
    for relative in deletes:
        _inside(target, relative).unlink(missing_ok=True)
    fsync_dir(target)
    record.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    logger.info("Committed %d files into %s.", len(moves), target)
    return True


def _move(source: Path, destination: Path) -> None:
    os.replace(source, destination)


def _inside(folder: Path, relative: str) -> Path:
    path = (folder / relative).resolve()
    if not path.is_relative_to(folder.resolve()) or path == folder.resolve():
        raise ValueError(f"The commit names {relative!r}, which is not a file inside {folder}.")
    return path


def _sync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` to disk (what the commit record makes reachable)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fsync_file(path)
    for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        fsync_dir(path)
