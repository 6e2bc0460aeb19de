"""``carag serve``: the HTTP API and chat page over an index (arguments and server in :mod:`llama_index_carag.serve.command`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from llama_index_carag.cli.common import CLIError, _llm, _load_retriever


def cmd_serve(args: argparse.Namespace) -> int:
    from llama_index_carag.serve.command import bind_socket, load_llm_factory, run_server, settings_from_args

    try:
        from llama_index_carag.serve.app import create_app
        from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer
    except ImportError as exc:
        raise CLIError(f"carag serve needs the serve extra: pip install 'llama-index-carag[serve]' ({exc})") from None
    settings = settings_from_args(args)
    if args.no_llm and (args.llm or args.llm_factory):
        raise CLIError("--no-llm cannot be combined with --llm or --llm-factory")
    if not Path(args.index).is_dir():
        raise CLIError(f"no index at {args.index} (build one with: carag index DATA.csv --out {args.index})")
    sock = bind_socket(args.host, args.port)  # before loading models: a taken port fails fast
    llm = None
    if args.llm_factory:
        llm = load_llm_factory(args.llm_factory)
    elif not args.no_llm:
        llm = _llm(args)
    retriever = _load_retriever(args)
    app = create_app(
        retriever,
        None if llm is None else get_fact_check_synthesizer(llm, embed_model=retriever.embed_model),
        stream_synthesizer=None if llm is None else get_fact_check_synthesizer(
            llm, streaming=True, embed_model=retriever.embed_model),
        llm=llm,
        settings=settings,
    )
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"carag serve: http://{shown}:{port}/ ({retriever.mode}, {retriever.context.n_items_} items, "
          f"{'no LLM' if llm is None else 'LLM ' + str(getattr(llm.metadata, 'model_name', type(llm).__name__))})",
          flush=True)
    run_server(app, sock, log_level="info" if args.verbose else "warning")
    return 0

