"""One writer per index folder: an advisory lock file that the kernel releases when its process dies.

A persisted index is written by one process at a time.  Two processes that both edit a copy of it and persist
into the same folder lose one another's edits (the second persist rewrites the folder from its own memory), and
two full persists at once share the folder's staging area (:mod:`~llama_index_carag.core.commit`).  So a writer
takes :data:`LOCK_NAME` in the folder with ``flock(LOCK_EX | LOCK_NB)``:

* a second process that asks for it gets :class:`IndexBusyError` at once, naming the holder (its pid, host and
  command line, which the holder writes into the file);
* the lock belongs to the open file, so it is released when the holder calls :func:`release_writer`, closes it,
  or dies in any way (SIGKILL included): a crashed writer never leaves a stale lock behind;
* the lock is the process's: each *owner* in it (a token the caller chooses, one per index object) that asks
  for it is recorded, and the lock goes back when the last one releases it (two index objects in one process
  that edit one folder are kept apart by the state's stamp, not by this lock:
  :mod:`~llama_index_carag.retrieval.shared_index`).  A child forked while the lock is held shares it with its
  parent; releasing it there only closes the child's copy.

Readers never wait for the writer's edits.  They wait only for a *switch*: the moment a full persist moves its new
files into the folder and deletes the old ones (:func:`~llama_index_carag.core.commit.replace_files`).  A load
holds the folder itself (the directory, no file is created) with ``flock(LOCK_SH)`` while it reads its files
(:func:`reading`); a switch holds it with ``LOCK_EX`` (:func:`switching`).  So a load reads the old persist or
the new one, never a mix, and never a file deleted under it.  A switch first takes :data:`SWITCH_INTENT_NAME`
(a file in the folder) exclusively, and a load passes through it shared before it takes the folder: a switch
that waits keeps new loads out, so a steady stream of loads cannot starve it.  Every wait is bounded: a switch
waits at most :data:`SWITCH_WAIT_S` for the loads in progress (past it the switch is not made:
:class:`IndexBusyError`, the folder as it was); a load waits at most :data:`READ_WAIT_S` for a switch's renames
and deletions (milliseconds), and behind a switch that waits for loads at most both bounds together.  A
folder on a read-only file system is read without the lock (no writer can switch it).

``flock`` is advisory and local: it does not protect a folder on a network file system that lacks it (NFS
without ``local_lock``), and on a platform without ``fcntl`` (Windows) nothing is enforced (a warning says so
once).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

#: The lock file inside an index folder.
LOCK_NAME = ".carag-writer.lock"
#: The file a switch holds while it waits for the loads in progress (new ones wait behind it).
SWITCH_INTENT_NAME = ".carag-switch.lock"
#: A load waits at most this long (seconds) for a switch in progress (:func:`reading`).
READ_WAIT_S = 30.0
#: A switch waits at most this long (seconds) for the loads in progress (:func:`switching`).
SWITCH_WAIT_S = 60.0


class IndexBusyError(RuntimeError):
    """Another process is the folder's writer."""


@dataclass
class _Held:
    fd: int
    pid: int  # the process that took it (a forked child sees its parent's pid here)
    owners: set[str]


_HELD: dict[Path, _Held] = {}
_READING: dict[tuple[Path, int], int] = {}  # loads in progress per (folder, thread) in this process
_GUARD = threading.Lock()
_warned_no_fcntl = False


def _key(folder: str | os.PathLike[str]) -> Path:
    return Path(folder).expanduser().resolve()


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another process"
    since = info.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(since))) if since else "?"
    command = " ".join(str(a) for a in info.get("argv") or [])[:200]
    return f"process {info.get('pid')} on {info.get('host')} (since {when}: {command or '?'})"


def _read_info(fd: int) -> dict[str, Any] | None:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8")) if raw else None
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def writer_holder(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Who holds the folder's writer lock now (``{"pid", "host", "since", "argv"}``), or ``None`` when nobody does.

    Probes the lock without taking it for long (a shared lock, at once released); reads only.
    """
    path = _key(folder) / LOCK_NAME
    if fcntl is None or not path.is_file():
        return None
    with _GUARD:
        held = _HELD.get(path.parent)
        if held is not None and held.pid == os.getpid():
            return _read_info(held.fd)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_info(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holds_writer(folder: str | os.PathLike[str], owner: str) -> bool:
    """Whether ``owner`` holds the folder's writer lock in this process."""
    with _GUARD:
        held = _HELD.get(_key(folder))
        return held is not None and owner in held.owners


def acquire_writer(folder: str | os.PathLike[str], owner: str) -> bool:
    """Become the folder's writer; ``True`` when ``owner`` holds it now and did not before.

    Raises:
        IndexBusyError: another process holds it.
        OSError: the folder cannot be created or the lock file opened for writing (a read-only folder).
    """
    global _warned_no_fcntl
    key = _key(folder)
    with _GUARD:
        held = _HELD.get(key)
        if held is not None and (owner in held.owners or held.pid == os.getpid()):
            if owner in held.owners:
                return False
            held.owners.add(owner)  # the process holds it already: one more owner
            return True
        if fcntl is None:  # pragma: no cover - Windows
            if not _warned_no_fcntl:
                logger.warning("No file locks on this platform: one writer per index folder is not enforced.")
                _warned_no_fcntl = True
            _HELD[key] = _Held(-1, os.getpid(), {owner})
            return True
        key.mkdir(parents=True, exist_ok=True)
        fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read_info(fd)
            os.close(fd)
            raise IndexBusyError(
                f"{key} is being edited by {_describe(info)}: one process writes an index at a time. Edit through "
                "that process, or stop it (its lock goes with it) and reload the folder."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "argv": sys.argv[:8]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        _HELD[key] = _Held(fd, os.getpid(), {owner})
    logger.debug("Writer lock of %s taken by %s", key, owner)
    return True


def release_writer(folder: str | os.PathLike[str], owner: str) -> None:
    """Give the folder's writer lock back (no-op when ``owner`` does not hold it)."""
    key = _key(folder)
    with _GUARD:
        held = _HELD.get(key)
        if held is None or owner not in held.owners:
            return
        held.owners.discard(owner)
        if held.owners:
            return
        del _HELD[key]
    if held.fd < 0:  # pragma: no cover - no fcntl
        return
    try:
        if held.pid == os.getpid() and fcntl is not None:  # a forked child only closes its copy
            fcntl.flock(held.fd, fcntl.LOCK_UN)
    finally:
        os.close(held.fd)
    logger.debug("Writer lock of %s released by %s", key, owner)


def release_all(owner: str) -> None:
    """Give back every folder lock ``owner`` holds (its index object is gone)."""
    with _GUARD:
        folders = [key for key, held in _HELD.items() if owner in held.owners]
    for folder in folders:
        release_writer(folder, owner)


# ------------------------------------------------------------------------------- loads and switches
@contextmanager
def reading(folder: str | os.PathLike[str]) -> Iterator[None]:
    """While a load reads ``folder``'s files: the folder's shared lock (any number of loads at once), so that no
    switch moves a new persist in or deletes the old one's files meanwhile.

    Raises:
        IndexBusyError: a switch held the folder for :data:`READ_WAIT_S` (a writer stuck mid-commit).
    """
    key, deadline = (_key(folder), threading.get_ident()), time.monotonic() + READ_WAIT_S
    fd = _open_folder(folder)
    if fd is None:
        yield
        return
    try:
        with _GUARD:
            nested = _READING.get(key, 0) > 0  # this thread reads the folder already: no switch can be between
        if not nested:  # a switch waiting for loads may wait SWITCH_WAIT_S, then switch: wait for both
            _behind_switches(folder, time.monotonic() + SWITCH_WAIT_S + READ_WAIT_S)
        if not _flock(fd, "LOCK_SH", max(0.0, deadline - time.monotonic())):
            raise _stuck_switch(folder)
        with _GUARD:
            _READING[key] = _READING.get(key, 0) + 1
        try:
            yield
        finally:
            with _GUARD:
                _READING[key] -= 1
                if not _READING[key]:
                    del _READING[key]
    finally:
        os.close(fd)  # the lock goes with the descriptor


@contextmanager
def switching(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Around a switch of ``folder`` (a commit's moves and deletions): its exclusive lock, once no load reads it.

    Raises:
        IndexBusyError: loads held the folder for :data:`SWITCH_WAIT_S`: nothing was switched (persist again).
    """
    with _GUARD:
        if _READING.get((_key(folder), threading.get_ident()), 0):
            raise IndexBusyError(
                f"This thread is reading {_key(folder)} (a load in progress): a switch now would wait for itself."
            )
    fd = _open_folder(folder)
    intent = _open_intent(folder, create=True) if fd is not None else None
    try:
        deadline = time.monotonic() + SWITCH_WAIT_S
        if intent is not None and not _flock(intent, "LOCK_EX", SWITCH_WAIT_S):
            raise _loads_hold(folder)  # another switch waited and ran all this time
        if fd is not None and not _flock(fd, "LOCK_EX", max(0.0, deadline - time.monotonic())):
            raise _loads_hold(folder)
        yield
    finally:
        for held in (fd, intent):
            if held is not None:
                os.close(held)


@contextmanager
def hold_folder(folder: str | os.PathLike[str], *, wait_s: float = 0.0) -> Iterator[None]:
    """``folder``'s exclusive lock while the block runs (a staging folder's writer holds its own: a folder nobody
    holds is a dead writer's).

    Raises:
        IndexBusyError: another process held it for ``wait_s``.
        FileNotFoundError: no such folder.
    """
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = _folder_fd(folder)
    try:
        if not _flock(fd, "LOCK_EX", wait_s):
            raise IndexBusyError(f"{folder} is held by another process.")
        yield
    finally:
        os.close(fd)


def held_elsewhere(folder: str | os.PathLike[str]) -> bool:
    """Whether another holder has ``folder``'s exclusive lock (:func:`hold_folder`) now; ``True`` too where it cannot
    be told (no ``flock`` on this file system or platform): a caller about to delete what a living holder uses
    must not guess.

    Raises:
        FileNotFoundError: no such folder.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return True
    fd = _folder_fd(folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or no flock here
        return True
    finally:
        os.close(fd)  # the lock, if taken, goes with it
    return False


def _behind_switches(folder: str | os.PathLike[str], deadline: float) -> None:
    """Wait (until ``deadline``) for a switch that waits or runs: a load passes through its intent file."""
    intent = _open_intent(folder, create=False)
    if intent is None:
        return
    try:
        if not _flock(intent, "LOCK_SH", max(0.0, deadline - time.monotonic())):
            raise IndexBusyError(
                f"{_key(folder)}: a persist from another process has been waiting to switch the folder (or switching "
                f"it) for over {SWITCH_WAIT_S + READ_WAIT_S:g} s ({_describe(writer_holder(folder))}); load it again later."
            )
    finally:
        os.close(intent)


def _stuck_switch(folder: str | os.PathLike[str]) -> IndexBusyError:
    return IndexBusyError(
        f"{_key(folder)} is being switched to a new persist by another process for over {READ_WAIT_S:g} s "
        f"(its writer may be stuck: {_describe(writer_holder(folder))}); load it again later."
    )


def _loads_hold(folder: str | os.PathLike[str]) -> IndexBusyError:
    return IndexBusyError(
        f"{_key(folder)} was being loaded by other processes for over {SWITCH_WAIT_S:g} s: the persist "
        "was not committed (the folder is as it was, the edits are still in memory); persist again."
    )


def _open_intent(folder: str | os.PathLike[str], *, create: bool) -> int | None:
    """The switch-intent file's descriptor; ``None`` where there is none to open (a load of a folder never
    switched, a read-only folder)."""
    flags = (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY
    try:
        return os.open(Path(folder) / SWITCH_INTENT_NAME, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        logger.debug("No switch-intent file in %s: %s", folder, exc)
        return None


def _folder_fd(folder: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the folder itself, to lock (``OSError`` when there is none)."""
    return os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))


def _open_folder(folder: str | os.PathLike[str]) -> int | None:
    """A descriptor of the folder to lock, or ``None`` where it cannot be locked (no ``fcntl``, no folder yet)."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    try:
        return _folder_fd(folder)
    except OSError as exc:  # a missing folder: the load reports it
        logger.debug("Cannot open %s to lock it: %s", folder, exc)
        return None


def _flock(fd: int, kind: str, wait_s: float) -> bool:
    """Take ``fcntl.<kind>`` on ``fd``, waiting at most ``wait_s``; ``False`` when it is still held elsewhere then.

    A file system without ``flock`` on folders (some network ones) is read and switched without it.
    """
    assert fcntl is not None
    flag = getattr(fcntl, kind) | fcntl.LOCK_NB
    deadline, pause, waited = time.monotonic() + wait_s, 0.005, False
    while True:
        try:
            fcntl.flock(fd, flag)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            logger.debug("No lock on this folder (%s): loads and switches are not kept apart.", exc)
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if not waited:
            waited = True
            what = "a switch of the folder to end" if kind == "LOCK_SH" else "the loads reading the folder to end"
            logger.info("Waiting up to %g s for %s.", wait_s, what)
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, 0.1)
