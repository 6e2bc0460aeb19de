"""Atomic file writing: a file is either its old content or its whole new content, never a part.

The new content goes into a temporary file beside the target (same folder, so the same file
system), is flushed to disk, gets the mode of the file it replaces (else ``0o644``: ``mkstemp``
alone would leave ``0o600``) and is moved onto the target with ``os.replace``.  If writing
fails the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then move it onto ``path``.

    ``write`` may raise (after checking what it wrote, say): nothing is left behind and the
    exception propagates.  The parent folder is created when missing.

    Returns:
        the resolved path.
    """
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = (target.stat().st_mode & 0o777) if target.is_file() else 0o644
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        fsync_file(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    logger.debug("Wrote %s", target)
    return target.resolve()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write` of ``text`` as UTF-8."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def fsync_file(path: Path) -> None:
    """Flush a file's content to disk."""
    fd = os.open(path, os.O_RDWR)  # writable: fsync needs it on some systems
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename into it, say) to disk; a no-op where the file system cannot."""
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
