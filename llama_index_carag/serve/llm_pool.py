"""Supervised LLM worker processes for ``carag serve`` (the child side: :mod:`.llm_worker`).

:class:`LLMPool` starts ``n_workers`` children (``multiprocessing`` "spawn" context, one pipe each),
gives each blocking call to an idle ready one, and watches them:

* a child that dies (EOF on its pipe) fails its in-flight call with :class:`LLMUnavailable` and is
  started again by the supervisor thread — at once, or after a doubling back-off (``backoff_s`` …
  ``max_backoff_s``) when it died again within ``stable_s`` of being ready;
* while no worker is ready, every call fails at once with :class:`LLMUnavailable` (its
  ``retry_after_s`` estimates when one will be);
* a call still running after ``call_timeout_s`` has its child killed and restarted
  (:class:`LLMCallTimeout`); replies also carry their request id, so a late reply can never
  answer a later request.

A worker is ``starting`` (process up, model loading), ``ready`` (idle or busy) or ``dead`` (waiting
for its restart).  :meth:`LLMPool.close` ends the children; a child also ends itself when the
server process dies.
"""

from __future__ import annotations

import itertools
import logging
import math
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from llama_index_carag.serve.llm_worker import FINAL, LLMWorkerSpec, worker_main

logger = logging.getLogger(__name__)

_GRACE_S = 30.0  # how much longer than call_timeout_s a caller waits for the supervisor to act


class LLMUnavailable(RuntimeError):
    """No LLM worker is ready (one is starting or restarting); retry in ``retry_after_s`` seconds."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LLMCallTimeout(TimeoutError):
    """A call ran past ``call_timeout_s`` (its worker was restarted), or no worker was free in time."""


class LLMCallError(RuntimeError):
    """The model raised in the worker (``"Type: message"``), or the request could not be sent."""


class LLMStartupError(RuntimeError):
    """No worker could build the LLM when the pool started (the model's own error message)."""


def restart_delay(quick_deaths: int, backoff_s: float, max_backoff_s: float) -> float:
    """Seconds before restarting a worker that died ``quick_deaths`` times in a row soon after
    starting: 0 for the first, then ``backoff_s``, doubling, at most ``max_backoff_s``."""
    return 0.0 if quick_deaths <= 1 else min(max_backoff_s, backoff_s * 2.0 ** (quick_deaths - 2))


@dataclass
class _Request:
    rid: int
    replies: queue.SimpleQueue[tuple[str, Any]] = field(default_factory=queue.SimpleQueue)
    started: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Worker:
    """The server's view of one worker slot (its current process, if any)."""

    index: int
    process: Any = None
    conn: Any = None
    state: str = "dead"
    spawned: int = 0
    started_at: float = 0.0
    ready_at: float | None = None
    request: _Request | None = None
    quick_deaths: int = 0
    next_start: float = math.inf
    kill_reason: str | None = None
    failure: str | None = None
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def public(self) -> dict[str, Any]:
        pid = self.process.pid if self.process is not None and self.state != "dead" else None
        return {"pid": pid, "state": self.state, "restarts": max(0, self.spawned - 1), "busy": self.request is not None}


class LLMPool:
    """LLM worker processes, supervised.

    Args:
        spec: what each worker builds.
        n_workers: worker processes (each loads its own copy of the model).
        call_timeout_s: a call running longer gets its worker killed and restarted.
        start_timeout_s: a worker still loading its model after this long is killed and restarted.
        backoff_s, max_backoff_s, stable_s: restart back-off (:func:`restart_delay`); a worker ready for
            ``stable_s`` before it died restarts at once.
    """

    def __init__(
        self,
        spec: LLMWorkerSpec,
        n_workers: int = 1,
        *,
        call_timeout_s: float = 300.0,
        start_timeout_s: float = 900.0,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        stable_s: float = 60.0,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1; got {n_workers}.")
        self.spec, self.call_timeout_s, self.start_timeout_s = spec, call_timeout_s, start_timeout_s
        self.backoff_s, self.max_backoff_s, self.stable_s = backoff_s, max_backoff_s, stable_s
        self._ctx = multiprocessing.get_context("spawn")
        self._cond = threading.Condition()
        self._workers = [_Worker(i) for i in range(n_workers)]
        self._ids = itertools.count(1)
        self._closing = False
        self._startup_s = 10.0  # the last measured start, for Retry-After
        self.info: dict[str, Any] | None = None  # the latest ready worker's model_info

    # ---------------------------------------------------------------- lifecycle
    def start(self, timeout: float | None = None) -> LLMPool:
        """Start the workers; return once one is ready.

        Raises:
            LLMStartupError: every worker failed to build the LLM (or none was ready within ``timeout``).
        """
        for worker in self._workers:
            self._spawn(worker)
        threading.Thread(target=self._supervise, name="carag-llm-supervisor", daemon=True).start()
        with self._cond:
            self._cond.wait_for(lambda: self.info is not None or all(w.state == "dead" for w in self._workers), timeout)
            failures = [w.failure for w in self._workers if w.failure]
            if self.info is not None:
                now = time.monotonic()
                for worker in self._workers:  # one failed while another came up: retry it
                    if worker.state == "dead" and math.isinf(worker.next_start):
                        self._schedule_restart(worker, now)
                self._cond.notify_all()
        if self.info is None:
            self.close()
            raise LLMStartupError(failures[0] if failures else f"no LLM worker was ready after {timeout:g} s")
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker (asked, then SIGTERM, then SIGKILL) and wait for them; idempotent."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
            live = [(w, w.process, w.conn) for w in self._workers if w.state != "dead"]
        for worker, _, conn in live:
            self._send(worker, conn, None)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):  # the readers reap them and mark them dead
            with self._cond:
                running = [p for w, p, _ in live if w.process is p and w.state != "dead"]
            if sig is not None:
                for process in running:
                    self._signal(process, sig)
            with self._cond:
                if self._cond.wait_for(
                    lambda: all(w.process is not p or w.state == "dead" for w, p, _ in live), timeout
                ):
                    return
        logger.warning("LLM workers %s did not exit", [p.pid for w, p, _ in live if w.state != "dead"])

    def __enter__(self) -> LLMPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _spawn(self, worker: _Worker) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=worker_main, args=(child, self.spec), daemon=True, name=f"carag-llm-worker-{worker.index}"
        )
        try:
            process.start()
        finally:
            child.close()  # ours closed: the child's death gives EOF on ``parent``
        with self._cond:
            worker.process, worker.conn, worker.state, worker.spawned = process, parent, "starting", worker.spawned + 1
            worker.started_at, worker.ready_at, worker.kill_reason, worker.failure = time.monotonic(), None, None, None
            if self._closing:  # close() ran while this one was being started
                self._signal(process, signal.SIGKILL)
        logger.info("LLM worker %d started (pid %d)", worker.index, process.pid)
        threading.Thread(
            target=self._read, args=(worker, process, parent), daemon=True, name=f"carag-llm-reader-{worker.index}"
        ).start()

    @staticmethod
    def _signal(process: Any, sig: int) -> None:
        try:
            if sig == signal.SIGKILL:
                process.kill()
            else:
                process.terminate()
        except (OSError, ValueError):  # already gone
            pass

    # ------------------------------------------------------------- the readers
    def _read(self, worker: _Worker, process: Any, conn: Any) -> None:
        """One thread per child: route its replies, then (EOF) record its death."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            except Exception as exc:
                self._deliver(worker, process, None, "error", f"unreadable reply from the LLM worker ({exc})")
                continue
            rid, kind, payload = message
            if rid == 0:
                self._on_startup(worker, process, kind, payload)
            else:
                self._deliver(worker, process, rid, kind, payload)
        process.join(5)
        if process.exitcode is None:  # closed its pipe but still running: not a usable worker
            self._signal(process, signal.SIGKILL)
            process.join()
        conn.close()
        self._on_exit(worker, process)

    def _on_startup(self, worker: _Worker, process: Any, kind: str, payload: Any) -> None:
        with self._cond:
            if worker.process is not process:
                return
            if kind == "ready":
                worker.state, worker.ready_at, worker.failure = "ready", time.monotonic(), None
                self._startup_s = worker.ready_at - worker.started_at
                self.info = payload
                logger.info(
                    "LLM worker %d ready (pid %d, %.1f s): %s",
                    worker.index,
                    process.pid,
                    self._startup_s,
                    payload.get("name"),
                )
            else:
                worker.failure = str(payload)
            self._cond.notify_all()

    def _deliver(self, worker: _Worker, process: Any, rid: int | None, kind: str, payload: Any) -> None:
        with self._cond:
            request = worker.request
            if worker.process is not process or request is None or rid not in (None, request.rid):
                logger.debug("LLM worker %d: dropped a %s reply to request %s", worker.index, kind, rid)
                return
            request.replies.put((kind, payload))
            if kind in FINAL:
                worker.request = None
                self._cond.notify_all()

    def _on_exit(self, worker: _Worker, process: Any) -> None:
        now = time.monotonic()
        with self._cond:
            if worker.process is not process:
                return
            worker.state, worker.conn = "dead", None
            reason = self._exit_reason(worker, process.exitcode)
            reported = worker.failure if worker.ready_at is None else None  # the model's error, from the child
            if worker.ready_at is None and worker.failure is None:
                worker.failure = f"the LLM worker {reason} while loading the model"
            request, worker.request = worker.request, None
            if request is not None:
                request.replies.put(("died", (worker.kill_reason or "crash", f"the LLM worker {reason}")))
            self._schedule_restart(worker, now)
            self._cond.notify_all()
        expected = self._closing or self.info is None  # stopped, or a failed first start (start() reports it)
        delay = worker.next_start - now
        logger.log(
            logging.INFO if expected else logging.WARNING,
            "LLM worker %d (pid %d) %s%s%s",
            worker.index,
            process.pid,
            reason,
            f" ({reported})" if reported else "",
            "" if math.isinf(delay) else f"; restarting it in {delay:.1f} s",
        )

    @staticmethod
    def _exit_reason(worker: _Worker, code: int | None) -> str:
        if worker.kill_reason == "timeout":
            return "was killed: a call ran past the time limit"
        if worker.kill_reason == "start_timeout":
            return "was killed: loading the model took too long"
        if code is not None and code < 0:
            try:
                return f"died of signal {signal.Signals(-code).name}"
            except ValueError:
                return f"died of signal {-code}"
        return f"exited with status {code}"

    def _schedule_restart(self, worker: _Worker, now: float) -> None:
        worker.next_start = math.inf
        if self._closing or self.info is None:  # never ready yet: start() reports the failure
            return
        healthy = worker.ready_at is not None and now - worker.ready_at >= self.stable_s
        worker.quick_deaths = 1 if healthy else worker.quick_deaths + 1
        worker.next_start = now + restart_delay(worker.quick_deaths, self.backoff_s, self.max_backoff_s)

    # ----------------------------------------------------------- the supervisor
    def _supervise(self) -> None:
        """Restart dead workers when due; kill overdue calls and stuck starts."""
        while True:
            with self._cond:
                if self._closing:
                    return
                now = time.monotonic()
                self._kill_overdue(now)
                due = [w for w in self._workers if w.state == "dead" and w.next_start <= now]
                for worker in due:  # claimed: starting from now on
                    worker.next_start, worker.state, worker.process, worker.started_at = math.inf, "starting", None, now
                if not due:
                    waits = [w.next_start - now for w in self._workers if w.state == "dead"]
                    self._cond.wait(max(0.05, min([1.0, *waits])))
                    continue
            for worker in due:
                self._restart(worker)

    def _kill_overdue(self, now: float) -> None:
        for worker in self._workers:
            if worker.kill_reason is not None or worker.process is None:
                continue
            if worker.request is not None and now - worker.request.started > self.call_timeout_s:
                worker.kill_reason = "timeout"
            elif worker.state == "starting" and now - worker.started_at > self.start_timeout_s:
                worker.kill_reason = "start_timeout"
            else:
                continue
            logger.warning(
                "LLM worker %d (pid %d) %s", worker.index, worker.process.pid, self._exit_reason(worker, None)
            )
            self._signal(worker.process, signal.SIGKILL)

    def _restart(self, worker: _Worker) -> None:
        try:
            self._spawn(worker)
        except Exception:
            logger.exception("could not restart LLM worker %d", worker.index)
            with self._cond:
                worker.state = "dead"
                worker.quick_deaths += 1
                worker.next_start = time.monotonic() + max(
                    self.backoff_s, restart_delay(worker.quick_deaths, self.backoff_s, self.max_backoff_s)
                )
                self._cond.notify_all()

    # ------------------------------------------------------------------ calls
    def check_available(self) -> None:
        """Raise :class:`LLMUnavailable` now if no worker is ready."""
        with self._cond:
            self._raise_if_unavailable()

    def _raise_if_unavailable(self) -> None:
        if self._closing:
            raise LLMUnavailable("the server is shutting down", 5)
        if not any(w.state == "ready" for w in self._workers):
            states = ", ".join(w.state for w in self._workers)
            raise LLMUnavailable(
                f"the language model is restarting (workers: {states}); retry shortly", self._retry_after()
            )

    def _retry_after(self) -> int:
        now, waits = time.monotonic(), []
        for w in self._workers:
            if w.state == "starting":
                waits.append(w.started_at + self._startup_s - now)
            elif w.state == "dead" and not math.isinf(w.next_start):
                waits.append(w.next_start - now + self._startup_s)
        return max(1, math.ceil(min(waits))) if waits else 5

    def retry_after_s(self) -> int:
        """Seconds until a worker is expected to be ready (``Retry-After``; at least 1)."""
        with self._cond:
            return self._retry_after()

    def state(self) -> dict[str, Any]:
        """``{"workers": [{"pid", "state", "restarts", "busy"}]}`` (``GET /v1/info``)."""
        with self._cond:
            return {"workers": [w.public() for w in self._workers]}

    def call(self, op: str, *args: Any) -> Any:
        """Run ``op`` (:data:`~llama_index_carag.serve.llm_worker.OPS`) in a worker; its result."""
        exchange = self._exchange(op, args)
        while True:
            try:
                next(exchange)
            except StopIteration as stop:
                return stop.value

    def stream(self, op: str, *args: Any) -> Generator[Any, None, Any]:
        """Run a streaming ``op``: yields its pieces; returns (``yield from``) its final result.
        Closing the generator early cancels the request in the worker."""
        return (yield from self._exchange(op, args))

    def _exchange(self, op: str, args: tuple[Any, ...]) -> Generator[Any, None, Any]:
        worker, conn, request = self._acquire()
        try:
            self._send(worker, conn, (request.rid, op, args))
        except Exception as exc:
            self._release(worker, request)
            raise LLMCallError(f"the request could not be sent to the LLM worker ({exc})") from exc
        finished = False
        try:
            for kind, payload in self._replies(worker, request):
                if kind == "part":
                    yield payload
                    continue
                finished = True
                return self._final(kind, payload)
        finally:
            if not finished:
                self._cancel(worker, conn, request)
        raise AssertionError("unreachable")  # pragma: no cover

    def _acquire(self) -> tuple[_Worker, Any, _Request]:
        deadline = time.monotonic() + self.call_timeout_s
        with self._cond:
            while True:
                self._raise_if_unavailable()
                idle = next((w for w in self._workers if w.state == "ready" and w.request is None), None)
                if idle is not None:
                    idle.request = _Request(next(self._ids))
                    return idle, idle.conn, idle.request
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LLMCallTimeout(f"no LLM worker was free within {self.call_timeout_s:g} s")
                self._cond.wait(remaining)

    @staticmethod
    def _send(worker: _Worker, conn: Any, message: Any) -> None:
        """Send on ``conn``; a dead child is ignored here (its reader fails the request)."""
        with worker.send_lock:
            try:
                conn.send(message)
            except (BrokenPipeError, EOFError, OSError):
                pass

    def _release(self, worker: _Worker, request: _Request) -> None:
        with self._cond:
            if worker.request is request:
                worker.request = None
                self._cond.notify_all()

    def _replies(self, worker: _Worker, request: _Request) -> Iterator[tuple[str, Any]]:
        while True:
            try:
                yield request.replies.get(timeout=self.call_timeout_s + _GRACE_S)
            except queue.Empty:  # the supervisor should have killed it by now
                with self._cond:
                    if worker.request is request and worker.kill_reason is None:
                        worker.kill_reason = "timeout"
                        self._signal(worker.process, signal.SIGKILL)
                yield "died", ("timeout", "the LLM worker did not answer in time")

    def _final(self, kind: str, payload: Any) -> Any:
        if kind == "result":
            return payload
        if kind == "cancelled":
            return None
        if kind == "error":
            raise LLMCallError(str(payload))
        reason, message = payload
        if reason == "timeout":
            raise LLMCallTimeout(f"{message}; it was restarted")
        raise LLMUnavailable(f"{message}; it is being restarted", self.retry_after_s())

    def _cancel(self, worker: _Worker, conn: Any, request: _Request) -> None:
        with self._cond:
            current = worker.request is request
        if current:
            self._send(worker, conn, (request.rid, "cancel", None))
