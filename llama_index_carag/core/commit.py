"""A folder's files replaced as one: written beside it first, then moved in under a record a crash rolls forward.

A full ``persist`` rewrites several files (LlamaIndex's ``docstore.json``, ``index_store.json``, the vector
store, the retriever's state).  Each is atomic on its own (:mod:`~llama_index_carag.core.atomic`), but a
process killed between two of them would leave the new docstore beside the old state.  :func:`replace_files`
makes the set atomic:

1. everything is written into a staging folder of its own inside the target (:data:`STAGING_PREFIX` and a
   random name), which its writer holds locked while it lives; a crash here leaves the folder's files as they
   were (the next writer deletes a staging folder nobody holds);
2. the commit: one record (:data:`RECORD`, written atomically) names the staging folder, the staged files to
   move in, in order, and the files to delete after them;
3. the files are moved in with ``os.replace`` (same file system: no copy), then the deletions, then the
   record and the staging folder go.

Steps 2 and 3, the *switch*, run under the folder's exclusive lock
(:func:`~llama_index_carag.core.writer_lock.switching`), and so does the writer's clean-up of what a crashed
writer left: a load holds the lock shared while it reads the folder
(:func:`~llama_index_carag.core.writer_lock.reading`), so it reads the whole old version or the whole new one and
no file is moved or deleted under it.  A switch that cannot have the lock in time is not made
(``IndexBusyError``; the staged files are dropped, the folder is as it was).

:func:`roll_forward` finishes a commit whose record exists (moving what is still staged; every step can be
repeated, and two loads may run it at once).  It runs under one of the two locks: a record seen under the shared
one is a dead writer's (a live writer holds the exclusive lock from the record's write to its removal), so loads
finish it before they read, and a crash at any point leaves either the whole old version or the whole new one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from llama_index_carag.core.atomic import atomic_write_text, fsync_dir, fsync_file
from llama_index_carag.core.writer_lock import LOCK_NAME, SWITCH_INTENT_NAME, held_elsewhere, hold_folder, switching

logger = logging.getLogger(__name__)

#: The start of a staging folder's name (one per write, inside the target folder).
STAGING_PREFIX = ".carag-staging-"
#: The commit record: ``{"staging": folder name, "moves": [relative paths], "deletes": [relative paths]}``.
RECORD = ".carag-commit.json"


def is_bookkeeping(relative: str) -> bool:
    """Whether a path relative to a committed folder is the commit's and locks' bookkeeping (a staging folder,
    the record or its temporary file, a lock file), not the folder's content: never copied, never deleted."""
    first = relative.split("/", 1)[0]
    return (
        first.startswith(STAGING_PREFIX)
        or first in (RECORD, LOCK_NAME, SWITCH_INTENT_NAME)
        or first.startswith(f".{RECORD}.")
    )


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

    A failure in ``write`` leaves ``folder`` untouched (the staging folder is removed); a failure during the
    switch leaves the commit for the next load or writer to finish.

    Raises:
        IndexBusyError: loads read the folder for all of ``SWITCH_WAIT_S``: nothing was moved in.
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        with switching(target):  # a crashed writer's leftovers go, and the new staging folder is held, unseen
            roll_forward(target, writer=True)
            staging = stack.enter_context(_staging(target))
        deletes = list(write(staging))
        staged = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        ordered = [p for p in staged if p not in last] + [p for p in last if p in staged]
        for relative in {*ordered, *deletes}:  # a corrupt record must not move or delete outside the folder
            _inside(target, relative)
        _sync_tree(staging)
        plan = {"staging": staging.name, "moves": ordered, "deletes": deletes}
        with switching(target):  # no load reads the folder while its files are switched
            roll_forward(target)  # a commit another writer's failed switch left: finished first, never overwritten
            missing = [p for p in ordered if not (staging / p).is_file()]
            if missing:  # never commit deletions without the files they make room for
                raise RuntimeError(f"The staged files {missing[:3]} of {target} are gone: nothing was committed.")
            atomic_write_text(target / RECORD, json.dumps(plan, indent=1))
            fsync_dir(target)
            roll_forward(target)


@contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A new staging folder in ``target``, locked by this writer while it lives (so that no other writer takes
    it for a crashed one's) and removed at the end, whatever happens (committed, it is empty then).  Made under
    the folder's exclusive lock, where another writer's clean-up cannot see it before it is held."""
    staging = target / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        with hold_folder(staging):
            yield staging
    finally:
        if _pending_staging(target) != staging.name:  # committed but not all moved (an error mid-switch): kept
            shutil.rmtree(staging, ignore_errors=True)


def _pending_staging(target: Path) -> str | None:
    """The staging folder the folder's commit record names, if there is a readable one."""
    try:
        return str(json.loads((target / RECORD).read_text(encoding="utf-8"))["staging"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def roll_forward(folder: str | os.PathLike[str], *, writer: bool = False) -> bool:
    """Finish an interrupted :func:`replace_files` in ``folder``; call it under the folder's lock
    (:func:`~llama_index_carag.core.writer_lock.reading` or :func:`~llama_index_carag.core.writer_lock.switching`).

    A staging folder that no record names is a write that never committed, or one in progress: the next writer
    (``writer=True``, under the exclusive lock) deletes those that no living writer holds; a load leaves them.

    Returns:
        whether a commit was finished.

    Raises:
        ValueError: a commit record that cannot be read or names paths outside the folder.
    """
    target = Path(folder)
    record = target / RECORD
    if not record.is_file():
        if writer:
            _drop_abandoned(target)
        return False
    try:
        plan = json.loads(record.read_text(encoding="utf-8"))
        name, moves, deletes = str(plan["staging"]), [str(p) for p in plan["moves"]], [str(p) for p in plan["deletes"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"The commit record {record} is unreadable ({exc}).") from None
    if not name.startswith(STAGING_PREFIX) or "/" in name or name != Path(name).name:
        raise ValueError(f"The commit record {record} names {name!r}, which is not a staging folder.")
    staging = target / name
    for relative in moves:
        source, destination = _inside(staging, relative), _inside(target, relative)
        if source.is_file():  # not yet moved
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                _move(source, destination)
            except FileNotFoundError:  # another load finishing the same commit moved it first
                continue
            fsync_dir(destination.parent)
    for relative in deletes:
        _inside(target, relative).unlink(missing_ok=True)
    fsync_dir(target)
    record.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    logger.info("Committed %d files into %s.", len(moves), target)
    return True


def _drop_abandoned(target: Path) -> None:
    """Delete the staging folders of writers that died before their commit, and a record's temporary file whose
    atomic write was killed before its rename (never read)."""
    for staging in target.glob(f"{STAGING_PREFIX}*"):
        try:
            if held_elsewhere(staging):  # a living writer's (or no flock here to tell: kept)
                continue
        except FileNotFoundError:
            continue
        logger.info("Dropping %s: a write into %s was interrupted before its commit.", staging, target)
        shutil.rmtree(staging, ignore_errors=True)
    for orphan in target.glob(f".{RECORD}.*.tmp"):
        orphan.unlink(missing_ok=True)


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
