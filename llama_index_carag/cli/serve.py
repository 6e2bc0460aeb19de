"""``carag serve``: the HTTP API and chat page over an index (arguments and server in :mod:`llama_index_carag.serve.command`).

By default the LLM runs in supervised worker processes (:mod:`llama_index_carag.serve.llm_pool`), so a
native crash of the model costs a restart, not the server; ``--llm-in-process`` loads it here instead.  The
index is loaded again when another process persists it (:mod:`llama_index_carag.serve.reload`), with the same
retrieval options (:func:`reload_retriever`).
"""

from __future__ import annotations

import argparse
import logging
from functools import partial
from pathlib import Path
from typing import Any

from llama_index_carag.cli.common import CLIError, _llm, _load_retriever, retrieval_overrides
from llama_index_carag.verifier.model import index_verifier


def cmd_serve(args: argparse.Namespace) -> int:
    from llama_index_carag.serve.command import bind_socket, run_server, settings_from_args

    try:
        from llama_index_carag.serve.app import create_app
    except ImportError as exc:
        raise CLIError(f"carag serve needs the serve extra: pip install 'llama-index-carag[serve]' ({exc})") from None
    settings = settings_from_args(args)
    if args.no_llm and (args.llm or args.llm_factory):
        raise CLIError("--no-llm cannot be combined with --llm or --llm-factory")
    if not Path(args.index).is_dir():
        raise CLIError(f"no index at {args.index} (build one with: carag index DATA.csv --out {args.index})")
    from llama_index_carag.serve.access import read_token

    try:
        token = read_token(args.token_file)
        sock = bind_socket(args.host, args.port, token=token is not None, insecure=args.insecure)  # a taken port
    except ValueError as exc:  # fails fast, before the models load
        raise CLIError(str(exc)) from None
    pool = None
    make_app = partial(create_app, token=token, reload_index=partial(reload_retriever, args))
    try:
        if args.no_llm:
            retriever, name = _load_retriever(args), None
            app = make_app(retriever, settings=settings)
        elif args.llm_in_process:
            retriever, app, name = _in_process(args, settings, make_app)
        else:
            retriever, pool = _with_workers(args, settings)
            app, name = make_app(retriever, settings=settings, llm_pool=pool), pool.info["name"]
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        workers = "" if pool is None else f" in {settings.llm_workers} worker process(es)"
        verdicts = ""
        if name is not None and args.decision == "llm":
            verdicts = "; verdicts: the LLM decides the label (--decision llm)"
        elif name is not None:
            adapted = index_verifier(args.index)
            verdicts = (
                f"; verdicts: the index's verifier ({adapted.fitted_by})"
                if adapted is not None
                else "; verdicts: the shipped verifier (carag index --calibrate adapts it to the archive)"
            )
        secured = "; token required" if token is not None else ""
        print(
            f"carag serve: http://{shown}:{port}/ ({retriever.mode}, {retriever.context.n_items_} items, "
            f"{'no LLM' if name is None else 'LLM ' + name + workers}{verdicts}{secured})",
            flush=True,
        )
        run_server(app, sock, log_level="info" if args.verbose else "warning")
    finally:
        if pool is not None:
            pool.close()
        sock.close()
    return 0


def reload_retriever(args: argparse.Namespace, served: Any) -> Any:
    """``--index`` loaded again for a reload of the server: on the served retriever's encoder, with the same
    retrieval options as at start (``--alpha``, ``--k``, ...) over the settings persisted now."""
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    retriever = ContextAwareRetriever.from_persist_dir(args.index, embed_model=served.embed_model)
    changes = retrieval_overrides(args)
    return retriever.with_settings(**changes) if changes else retriever


def _in_process(args: argparse.Namespace, settings: Any, create_app: Any) -> tuple[Any, Any, str]:
    """The LLM and synthesizers in this process (the LLM loads before the index)."""
    from llama_index_carag.serve.command import load_llm_factory
    from llama_index_carag.serve.llm_worker import model_info, serve_synthesizers

    llm = load_llm_factory(args.llm_factory) if args.llm_factory else _llm(args)
    retriever = _load_retriever(args)
    synthesizer, stream_synthesizer = serve_synthesizers(llm, args.index, args.decision)
    app = create_app(retriever, synthesizer, stream_synthesizer=stream_synthesizer, llm=llm, settings=settings)
    return retriever, app, model_info(llm)["name"]


def _with_workers(args: argparse.Namespace, settings: Any) -> tuple[Any, Any]:
    """The index here, the LLM in ``settings.llm_workers`` supervised worker processes (started and ready)."""
    from llama_index_carag.serve.command import check_llm_factory
    from llama_index_carag.serve.llm_pool import LLMPool, LLMStartupError
    from llama_index_carag.serve.llm_worker import LLMWorkerSpec

    if args.llm_factory:
        check_llm_factory(args.llm_factory)  # a typo fails before the index loads
    retriever = _load_retriever(args)
    spec = LLMWorkerSpec(
        llm=args.llm,
        llm_factory=args.llm_factory,
        index_dir=str(args.index),
        decision=args.decision,
        log_level=logging.INFO if args.verbose else logging.WARNING,
    )
    try:
        pool = LLMPool(spec, settings.llm_workers, call_timeout_s=settings.request_timeout_s).start()
    except LLMStartupError as exc:
        raise CLIError(f"the LLM could not be loaded: {exc}") from None
    return retriever, pool
