"""The ``carag serve`` sub-command: its arguments, the LLM factory option, and the uvicorn server.

Only :func:`run_server` imports FastAPI/uvicorn, so building the ``carag`` parser stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from llama_index_carag.serve.settings import ServeSettings

logger = logging.getLogger(__name__)


def add_serve_arguments(p: argparse.ArgumentParser, positive_int: Callable[[str], Callable[[str], int]]) -> None:
    """The serve-only options (the caller adds ``--index``, the retrieval overrides and ``--llm``)."""
    p.add_argument(
        "--llm-factory",
        metavar="MODULE:CALLABLE",
        help="a Python callable returning any LlamaIndex LLM (MODULE is imported from the current folder "
        "or the installed packages); replaces --llm",
    )
    p.add_argument("--no-llm", action="store_true", help="retrieval, SOI and graph only: no verdicts, no chat")
    p.add_argument(
        "--llm-in-process",
        action="store_true",
        help="run the LLM in the server process (default: in supervised worker processes, restarted "
        "if the model crashes; chat sessions survive the restart)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1, this machine only; another address needs --token-file or --insecure)",
    )
    _add_access_arguments(p)
    d = ServeSettings()
    p.add_argument(
        "--retrieval-workers",
        type=positive_int("--retrieval-workers"),
        default=d.retrieval_workers,
        help=f"checks retrieving at once (default {d.retrieval_workers})",
    )
    p.add_argument(
        "--llm-workers",
        type=positive_int("--llm-workers"),
        default=d.llm_workers,
        help=f"LLM calls at once: one worker process each, each with its own copy of the model "
        f"(default {d.llm_workers})",
    )
    p.add_argument(
        "--max-pending",
        type=positive_int("--max-pending"),
        default=d.max_pending,
        help=f"requests admitted at once before 503 (default {d.max_pending})",
    )
    _add_durations(p)
    p.add_argument(
        "--max-client-requests",
        type=positive_int("--max-client-requests"),
        default=None,
        help="requests one client may have running at once before 429 (default: half the retrieval workers, "
        "at least 1)",
    )
    _add_size_limits(p, positive_int)


def _add_durations(p: argparse.ArgumentParser) -> None:
    """The request timeout and the index's reload interval."""
    d = ServeSettings()
    p.add_argument(
        "--timeout",
        type=float,
        default=d.request_timeout_s,
        help=f"seconds before a request gets 504 (default {d.request_timeout_s:g})",
    )
    p.add_argument(
        "--reload-interval",
        type=float,
        metavar="SECONDS",
        default=d.reload_interval_s,
        help="look for another process's persist of the index at most this often (on requests) and load it "
        f"again; requests in flight finish on the old copy (default {d.reload_interval_s:g}; 0: never)",
    )


def _add_access_arguments(p: argparse.ArgumentParser) -> None:
    """Who may use the server: the token and the escape hatch for an open non-loopback bind."""
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="require this file's token (one line, 16+ characters) on every request: Authorization: Bearer TOKEN, "
        "or the page's sign-in; default: the CARAG_SERVE_TOKEN environment variable, if set",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without a token (anyone who reaches the port can use the API)",
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port, printed at start)")


#: The size limits as options: (flag, the ServeSettings field it sets, what it bounds).
_SIZE_LIMITS = (
    ("--max-sessions", "max_sessions", "chat sessions open at once"),
    ("--max-claim-chars", "max_claim_chars", "longest claim or chat message"),
    ("--max-text-chars", "max_text_chars", "longest text for POST /v1/check-text"),
    ("--max-text-claims", "max_text_claims", "check-worthy claims one text may have (POST /v1/check-text)"),
    ("--max-batch-claims", "max_batch_claims", "claims in one POST /v1/check-batch"),
)


def _add_size_limits(p: argparse.ArgumentParser, positive_int: Callable[[str], Callable[[str], int]]) -> None:
    d = ServeSettings()
    for flag, field, what in _SIZE_LIMITS:
        default = getattr(d, field)
        p.add_argument(flag, type=positive_int(flag), default=default, help=f"{what} (default {default})")


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    """:class:`ServeSettings` from the parsed options (ValueError on a bad value)."""
    return ServeSettings(
        retrieval_workers=args.retrieval_workers,
        llm_workers=args.llm_workers,
        max_pending=args.max_pending,
        request_timeout_s=args.timeout,
        reload_interval_s=args.reload_interval or None,
        max_sessions=args.max_sessions,
        max_claim_chars=args.max_claim_chars,
        max_message_chars=args.max_claim_chars,
        max_text_chars=args.max_text_chars,
        max_text_claims=args.max_text_claims,
        max_batch_claims=args.max_batch_claims,
        max_client_requests=args.max_client_requests or max(1, args.retrieval_workers // 2),
    )


def check_llm_factory(spec: str) -> Callable[[], Any]:
    """The callable ``MODULE:CALLABLE`` names (imported, not called).

    Raises:
        ValueError: a malformed spec, a missing module or attribute, or an attribute that is not callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--llm-factory must look like MODULE:CALLABLE, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--llm-factory {spec}: {exc}") from None
    if not callable(factory):
        raise ValueError(f"--llm-factory {spec} is a {type(factory).__name__}, not a callable")
    return factory


def load_llm_factory(spec: str) -> Any:
    """Call ``MODULE:CALLABLE`` and return the LlamaIndex LLM it makes.

    Raises:
        ValueError: a malformed spec, a missing module or attribute, or a result that is not an LLM.
    """
    from llama_index.core.llms import LLM

    llm = check_llm_factory(spec)()
    if not isinstance(llm, LLM):
        raise ValueError(f"--llm-factory {spec} returned {type(llm).__name__}, not a LlamaIndex LLM")
    return llm


def bind_socket(host: str, port: int, *, token: bool = False, insecure: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one).

    Raises:
        ValueError: a port out of range, or a non-loopback ``host`` without a ``token`` unless ``insecure``.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], not {port}")
    if not _is_loopback(host) and not token and not insecure:
        raise ValueError(
            f"--host {host} is reachable from other machines and the API has no token: pass --token-file FILE "
            f"(or set CARAG_SERVE_TOKEN), or --insecure to serve it open"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    if not _is_loopback(host) and not token:
        logger.warning("listening on %s with no token (--insecure): anyone who can reach it can use the API", host)
    return sock


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_server(app: Any, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` with uvicorn until interrupted."""
    import uvicorn

    config = uvicorn.Config(
        app, log_level=log_level, access_log=log_level in ("info", "debug"), timeout_graceful_shutdown=5, lifespan="off"
    )
    uvicorn.Server(config).run(sockets=[sock])
