"""Live reload of ``carag serve``'s index: a new copy loaded when another process changed the index since.

The server serves one :class:`~llama_index_carag.verdicts.check.ClaimChecker` (the retriever and the
synthesizers) at a time.  A request takes the current one when it starts (:meth:`IndexReloader.current`) and
finishes on it, however long it runs (a chat session holds only its conversation: each turn takes the current
one); the old copy is freed when its last request ends.  Requests call
:meth:`IndexReloader.poll` as they are admitted: at most every ``interval_s`` seconds it starts one background
thread that asks the retriever whether another writer changed its folder or shared docstore
(``ContextAwareRetriever.changed_elsewhere``: two ``stat`` calls and, on Redis, one ``GET``) and, if so, loads
the index again (``load``) beside the copy being served, then swaps the checker in one assignment.  One reload
runs at a time; while it loads, requests keep the old copy (memory holds two copies until the swap).  A failed
reload logs why, keeps the old copy and is tried again after ``interval_s``, doubled after each failure in a
row (at most :data:`MAX_BACKOFF_S`).

The synthesizers (and so the LLM and the index's verifier) are kept: a persist of edits does not change the
verifier folder (``carag index`` fits it); a re-fitted verifier is used after a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from llama_index_carag.verdicts.check import ClaimChecker

logger = logging.getLogger(__name__)

#: The longest wait (seconds) between two tries after reloads failed in a row.
MAX_BACKOFF_S = 300.0


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class IndexReloader:
    """The checker a new request gets, loaded again when the index changed elsewhere (see the module).

    Args:
        checker: the checker loaded at start.
        load: ``load(current retriever) -> new retriever``; ``None``: never reload.
        interval_s: the least time between two looks for changes (``None``: never reload).
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        checker: ClaimChecker,
        load: Callable[[Any], Any] | None = None,
        interval_s: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checker = checker
        self._load = load if interval_s is not None else None
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._next_look = clock() + (interval_s or 0.0)
        self._failures = 0
        self._loading = False
        self.loaded_at = _now_iso()
        self.reloads = 0
        self.behind: str | None = None
        self.last_error: str | None = None

    def current(self) -> ClaimChecker:
        """The checker a request starting now uses until it ends."""
        return self._checker

    def poll(self) -> None:
        """Cheap, on every admitted request: at most every ``interval_s`` (longer after failures), start the
        background look for changes (and the reload they call for) unless one runs."""
        if self._load is None:
            return
        now = self._clock()
        with self._lock:
            if self._thread is not None or now < self._next_look:
                return
            self._thread = threading.Thread(target=self._look, name="carag-reload", daemon=True)
            self._thread.start()

    def wait(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the look or reload in progress; ``True`` when none runs now."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return self._thread is None

    def status(self) -> dict[str, Any]:
        """The served copy, for ``GET /v1/info``'s ``index``."""
        retriever = self._checker.retriever
        folder = getattr(retriever, "persist_dir", None)
        return {
            "folder": None if folder is None else str(folder),
            "loaded_at": self.loaded_at,
            "reloads": self.reloads,
            "reload_interval_s": self.interval_s if self._load is not None else None,
            "reloading": self._loading,
            "behind": self.behind,
            "last_error": self.last_error,
        }

    def _look(self) -> None:
        try:
            self._reload_if_changed()
        finally:
            with self._lock:
                self._thread = None

    def _reload_if_changed(self) -> None:
        assert self._load is not None and self.interval_s is not None
        current = self._checker
        try:
            self.behind = current.retriever.changed_elsewhere()
            if self.behind is None:
                self._next_look = self._clock() + self.interval_s
                return
            logger.info("Reloading the index: %s", self.behind)
            started, self._loading = time.monotonic(), True
            fresh = self._load(current.retriever)
        except Exception as exc:
            self._loading = False
            self._failed(exc)
            return
        self._checker = replace(current, retriever=fresh)  # requests from now on; those in flight keep theirs
        self.loaded_at, self.reloads, self.behind, self.last_error = _now_iso(), self.reloads + 1, None, None
        self._loading = False
        self._failures = 0
        self._next_look = self._clock() + self.interval_s
        logger.info("Reloaded the index in %.1f s (%d items).", time.monotonic() - started, fresh.context.n_items_)

    def _failed(self, exc: Exception) -> None:
        assert self.interval_s is not None
        self._failures += 1
        delay = min(self.interval_s * 2 ** (self._failures - 1), max(self.interval_s, MAX_BACKOFF_S))
        self._next_look = self._clock() + delay
        error = f"{type(exc).__name__}: {exc}"
        level = logging.WARNING if error != self.last_error else logging.DEBUG
        self.last_error = error
        logger.log(
            level,
            "Could not reload the index (%s); still serving the copy loaded at %s. Trying again in %g s.",
            error,
            self.loaded_at,
            delay,
        )
