"""The child side of ``carag serve``'s LLM workers: a process that owns the language model.

The server keeps the index, retrieval and chat sessions; each worker builds the LLM and the verdict
synthesizers from a picklable :class:`LLMWorkerSpec` (exactly as ``carag serve --llm-in-process`` builds
them: :func:`build_llm`, :func:`serve_synthesizers`) and answers one request at a time over a
``multiprocessing`` pipe.  A native crash of the model (llama.cpp) kills only the worker;
:mod:`~llama_index_carag.serve.llm_pool` notices and starts another.

Messages are tuples; ``rid`` is the server's request id:

* server → worker: ``(rid, op, args)`` with ``op`` one of :data:`OPS`; ``(rid, "cancel", None)``
  stops a stream between two pieces; ``None`` (or the pipe closing) ends the worker.
* worker → server: once at start ``(0, "ready", info)`` (:func:`model_info`) or ``(0, "failed", message)``;
  per request ``(rid, "part", piece)``… (streams) then one final ``(rid, kind, payload)`` with ``kind``
  in :data:`FINAL`: ``"result"``, ``"error"`` (``"Type: message"``) or ``"cancelled"``.

The worker also exits when the server process dies (its parent id changes), even mid-generation.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

#: Requests a worker answers: verdicts (the synthesizers) and raw LLM calls (the chat sessions' proxy LLM).
OPS = ("verdict", "stream_verdict", "chat", "stream_chat", "complete", "stream_complete")
#: Reply kinds that end a request.
FINAL = ("result", "error", "cancelled")
_PARENT_POLL_S = 1.0


@dataclass(frozen=True)
class LLMWorkerSpec:
    """What a worker builds (pickled into the child).

    Attributes:
        llm: a ``resolve_llm`` name (``None`` or ``"default"``: the offline default).
        llm_factory: ``MODULE:CALLABLE`` returning a LlamaIndex LLM (replaces ``llm``).
        log_level: logging level of the worker (its records go to the server's stderr).
        index_dir: the index folder whose archive verifier the worker loads
            (``get_fact_check_synthesizer(index=)``), or ``None`` (the shipped verifier, nothing fitted).
        decision: who decides the label, ``"verifier"`` (default) or ``"llm"`` (``carag serve --decision``).
    """

    llm: str | None = None
    llm_factory: str | None = None
    log_level: int = logging.WARNING
    index_dir: str | None = None
    decision: str = "verifier"


class _Cancelled(Exception):
    """The server cancelled the request being answered."""


class _Stop(Exception):
    """The server asked the worker to exit, or went away."""


# ------------------------------------------------------------------ building
def build_llm(spec: LLMWorkerSpec) -> Any:
    """The LlamaIndex LLM of ``spec`` (``--llm-factory`` or ``--llm``)."""
    if spec.llm_factory:
        from llama_index_carag.serve.command import load_llm_factory

        return load_llm_factory(spec.llm_factory)
    from llama_index_carag.models.resolve import resolve_llm

    return resolve_llm(None if spec.llm in (None, "default") else spec.llm)


def serve_synthesizers(llm: Any, index_dir: str | None = None, decision: str = "verifier") -> tuple[Any, Any]:
    """``(synthesizer, streaming synthesizer)`` of ``carag serve`` — the one place they are built, in the server
    (``--llm-in-process``) and in a worker alike, with the verifier saved in ``index_dir``
    (``get_fact_check_synthesizer(index=)``; ``None``: the shipped verifier, nothing fitted); ``decision``:
    ``"verifier"`` or ``"llm"`` (the LLM's own label)."""
    from llama_index_carag.verdicts.decision import VerifierDecision
    from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer

    def build(**options: Any) -> Any:
        return get_fact_check_synthesizer(llm, index=index_dir, decision=decision, **options)

    synthesizer = build()
    verifier = synthesizer.decision.verifier if isinstance(synthesizer.decision, VerifierDecision) else None
    if verifier is not None:  # its weights load now, before the server (or the worker) says it is ready
        verifier.cross_encoder  # noqa: B018
        from llama_index_carag.verdicts.label_scores import hold_prompt_opening

        hold_prompt_opening(llm)  # and a local LLM's prompt opening: the first request starts after it
    return synthesizer, build(streaming=True)


def model_info(llm: Any) -> dict[str, Any]:
    """``{"name", "metadata", "system_prompt", "query_wrapper_prompt", "pid"}`` of the worker's LLM:
    what the server's proxy LLM needs (``metadata.model_name`` is the ``llm_name`` of the model)."""
    from llama_index_carag.models.resolve import llm_name

    name = llm_name(llm)
    metadata = {**llm.metadata.model_dump(), "model_name": name}
    wrapper = getattr(llm, "query_wrapper_prompt", None)
    try:
        pickle.dumps(wrapper)
    except Exception:
        wrapper = None
    return {
        "name": name,
        "metadata": metadata,
        "system_prompt": getattr(llm, "system_prompt", None),
        "query_wrapper_prompt": wrapper,
        "pid": os.getpid(),
    }


# ------------------------------------------------------------------ serving
class _Model:
    """The worker's LLM and synthesizers, and what each op does with them."""

    def __init__(self, llm: Any, synthesizer: Any, stream_synthesizer: Any) -> None:
        self.llm, self.synthesizer, self.stream_synthesizer = llm, synthesizer, stream_synthesizer

    @classmethod
    def build(cls, spec: LLMWorkerSpec) -> _Model:
        llm = build_llm(spec)
        return cls(
            llm,
            *serve_synthesizers(llm, spec.index_dir, spec.decision),
        )

    def run(self, op: str, args: tuple[Any, ...], emit: Callable[[Any], None]) -> Any:
        """Answer ``op``; stream pieces go to ``emit``; the return value is the final result."""
        if op == "verdict":
            claim, nodes = args
            response = self.synthesizer.synthesize(claim, nodes)
            return str(response.response), response.metadata["verdict"]
        if op == "stream_verdict":
            claim, nodes = args
            response = self.stream_synthesizer.synthesize(claim, nodes)
            for delta in response.response_gen:
                emit(delta)
            return response.metadata["verdict"]
        if op in ("chat", "complete"):
            return _plain(getattr(self.llm, op)(*args[:-1], **args[-1]))
        if op in ("stream_chat", "stream_complete"):
            for piece in getattr(self.llm, op)(*args[:-1], **args[-1]):
                emit(_plain(piece))
            return None
        raise ValueError(f"unknown LLM worker op {op!r}")


def _plain(response: Any) -> Any:
    """A chat/completion response without its backend-specific ``raw`` object (tensors, handles)."""
    return response.model_copy(update={"raw": None}) if getattr(response, "raw", None) is not None else response


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def _send(conn: Connection, message: Any) -> None:
    try:
        conn.send(message)
    except (BrokenPipeError, EOFError, OSError):
        raise _Stop() from None


def _recv(conn: Connection) -> Any:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _serve(conn: Connection, model: _Model) -> None:
    """Answer requests until told to stop or the pipe closes."""
    backlog: deque[Any] = deque()
    while True:
        message = backlog.popleft() if backlog else _recv(conn)
        if message is None:
            return
        rid, op, args = message
        if op == "cancel":
            continue  # that request has already ended
        _answer(conn, model, rid, op, args, backlog)


def _answer(conn: Connection, model: _Model, rid: int, op: str, args: Any, backlog: deque[Any]) -> None:
    def emit(piece: Any) -> None:
        while conn.poll():  # between two pieces: a cancel for this request, or a stop
            message = _recv(conn)
            if message is None:
                raise _Stop()
            if message[0] == rid and message[1] == "cancel":
                raise _Cancelled()
            backlog.append(message)
        _send(conn, (rid, "part", piece))

    try:
        reply: tuple[Any, ...] = (rid, "result", model.run(op, args, emit))
    except _Cancelled:
        reply = (rid, "cancelled", None)
    except _Stop:
        raise
    except Exception as exc:
        logger.warning("LLM worker: %s failed: %s", op, _describe(exc))
        reply = (rid, "error", _describe(exc))
    try:
        pickle.dumps(reply)
    except Exception as exc:
        reply = (rid, "error", f"the LLM worker could not send its answer ({_describe(exc)})")
    _send(conn, reply)


def _exit_with_parent() -> None:
    """Leave (``os._exit``) as soon as the server process is gone, even in the middle of a call."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="carag-llm-parent-watch", daemon=True).start()


def _configure_logging(level: int) -> None:
    """The server's log format and level (``carag`` quiets the same libraries unless ``--verbose``)."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s [llm worker %(process)d]: %(message)s")
    if level > logging.INFO:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        # An unparseable answer is already a NOT_ENOUGH_INFO verdict (parsed: false); no log line needed.
        logging.getLogger("llama_index_carag.verdicts.parsing").setLevel(logging.ERROR)


def worker_main(conn: Connection, spec: LLMWorkerSpec) -> None:
    """Entry point of a worker process (the ``multiprocessing`` target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's: it stops its workers itself
    _configure_logging(spec.log_level)
    _exit_with_parent()
    try:
        model = _Model.build(spec)
        ready = (0, "ready", model_info(model.llm))
    except Exception as exc:
        try:
            _send(conn, (0, "failed", _describe(exc)))
        except _Stop:
            pass
        return
    try:
        _send(conn, ready)
        _serve(conn, model)
    except _Stop:
        pass
    finally:
        conn.close()
