"""What a ``carag`` command is doing while it loads and checks: one line per stage on standard error.

``carag check`` can be silent for minutes the first time (the encoder, the index, the LLM, the llama.cpp
probe, then the verdict); :class:`Stages` says each step as it starts::

    carag: loading the encoder (sentence-transformers/all-MiniLM-L6-v2) …
    carag: loading the index idx …
    carag: loading the LLM qwen1.5b … (first run: checking llama.cpp on this CPU)
    carag: retrieving …
    carag: writing the verdict …

Rules (docs/GUIDE.md, "The carag command"):

* standard output never changes (``--json`` stays clean): stages go to standard error only;
* on a terminal each line ends with the stage's time when it is done, and a long stage (``ticking=True``:
  loading the LLM, writing the verdict) counts its seconds while it runs; elsewhere (a pipe, a log file)
  each stage is one plain line, written when it starts;
* ``-q`` / ``--quiet`` silences them (errors are still printed).

Standard error is looked up on every write, so a caller that redirects ``sys.stderr`` gets the lines.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

logger = logging.getLogger(__name__)

__all__ = ["Stages", "PREFIX"]

#: What every stage line starts with.
PREFIX = "carag: "
#: Seconds between two updates of a ticking stage's counter.
_TICK_S = 1.0


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False


class Stages:
    """Stage lines on standard error (see the module docstring).

    Args:
        quiet: write nothing.
        tty: draw in place with timings (default: whether standard error is a terminal, asked per stage).
    """

    def __init__(self, *, quiet: bool = False, tty: bool | None = None) -> None:
        self.quiet = quiet
        self._tty = tty

    def say(self, message: str) -> None:
        """One line, outside any stage (e.g. a summary)."""
        if not self.quiet:
            print(PREFIX + message, file=sys.stderr, flush=True)

    @contextmanager
    def stage(self, message: str, *, note: str = "", ticking: bool = False) -> Iterator[None]:
        """Say ``message …`` (then ``note``) while the ``with`` block runs; on a terminal, end with its time.

        ``ticking``: on a terminal, count the seconds while the stage runs (for stages that can be long).
        """
        started = time.perf_counter()
        line = f"{PREFIX}{message} …" + (f" {note}" if note else "")
        tty = self._tty if self._tty is not None else _is_tty(sys.stderr)
        if self.quiet:
            yield
            return
        if not tty:
            print(line, file=sys.stderr, flush=True)
            yield
            logger.info("%s: %.1f s", message, time.perf_counter() - started)
            return
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(line, started, stop), daemon=True) if ticking else None
        sys.stderr.write(line)
        sys.stderr.flush()
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            sys.stderr.write(f"\r\x1b[K{line} {time.perf_counter() - started:.1f} s\n")
            sys.stderr.flush()

    @staticmethod
    def _tick(line: str, started: float, stop: threading.Event) -> None:
        """Rewrite ``line`` with the seconds so far, every :data:`_TICK_S`, until ``stop`` is set."""
        while not stop.wait(_TICK_S):
            sys.stderr.write(f"\r\x1b[K{line} {time.perf_counter() - started:.0f} s")
            sys.stderr.flush()
