"""The ``carag`` command: index, check, check-text, graph, chat, demo, serve, train-verifier.

User mistakes (bad paths, bad values, missing columns, a state that does not
match its index, …) print one line ``carag: error: …`` and exit with status 2;
``--debug`` (or ``CARAG_DEBUG=1``) shows the traceback instead.

This module builds the parser (one function per sub-command) and runs the
command; the commands live in :mod:`~llama_index_carag.cli.index` (index),
:mod:`~llama_index_carag.cli.demo` (demo), :mod:`~llama_index_carag.cli.check` (check, chat, graph),
:mod:`~llama_index_carag.cli.check_text` (check-text) and :mod:`~llama_index_carag.cli.serve` (serve); the
benchmarks and the papers' tables and figures are research code beside the package (``python -m research.…``).
Shared pieces are in :mod:`~llama_index_carag.cli.common`, among them the stage lines: while a command loads
models and checks, it says what it is doing on stderr, one line per stage (``-q``/``--quiet`` silences them);
standard output is unchanged.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from llama_index_carag.cli.check import cmd_chat, cmd_check, cmd_graph
from llama_index_carag.cli.check_text import cmd_check_text
from llama_index_carag.cli.common import (
    CLIError,
    _clusters,
    _count_arg,
    _positive_int,
    _presets,
    _unit_float,
    write_stderr,
)
from llama_index_carag.cli.demo import cmd_demo
from llama_index_carag.cli.index import cmd_index
from llama_index_carag.cli.serve import cmd_serve
from llama_index_carag.core.writer_lock import IndexBusyError

logger = logging.getLogger(__name__)

EXIT_USAGE = 2


def _offline_defaults() -> None:
    # Model names resolve to packaged weights; a hub name must fail fast, not hang.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _quiet_libraries() -> None:
    # Our own bars (embedding, clustering) stay; the weight-loading bars of transformers go.
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


# ------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The ``carag`` argument parser: global options and one sub-parser per command."""
    parser = argparse.ArgumentParser(
        prog="carag",
        description="Context-aware, explainable evidence retrieval for fact checking (CARAG / CARAG-u).",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("-q", "--quiet", action="store_true", help=_QUIET_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_SubParser)
    _add_index_parser(sub)
    _add_check_parser(sub)
    _add_check_text_parser(sub)
    _add_graph_parser(sub)
    _add_chat_parser(sub)
    _add_demo_parser(sub)
    _add_serve_parser(sub)
    _add_train_verifier_parser(sub)
    return parser


def _add_retrieval_overrides(p: argparse.ArgumentParser, *, index_required: bool = True) -> None:
    """``--index`` and the retrieval settings a command may override."""
    p.add_argument("--index", required=index_required, help="folder written by 'carag index'")
    p.add_argument("--alpha", type=_unit_float("--alpha", 0, 1), help="claim weight in [0, 1] (1 = plain RAG)")
    p.add_argument("--delta", type=_unit_float("--delta", -1, 1), help="SOI cosine threshold in [-1, 1]")
    p.add_argument(
        "--soi-min-size", type=_count_arg("--soi-min-size"), help="keep at least this many SOI items (0: delta alone)"
    )
    p.add_argument("--k", type=_positive_int("--k"), help="evidence passages to retrieve")
    p.add_argument("--embed-model", help="override the recorded embed model (must be the same model)")


#: The ``--llm`` forms, as ``--help`` lists them (tests/test_cli.py checks each accepted spelling is here).
LLM_HELP = (
    "the LLM for the verdict: qwen1.5b (the default; also 'qwen'; offline Qwen2.5-Coder-1.5B run by llama.cpp "
    "if installed, else by transformers), qwen1.5b-hf (transformers, float32), qwen1.5b-int8 (transformers, "
    "int8 layers), smollm2 (offline SmolLM2-135M: fast, not reliable; smollm2-hf, smollm2-int8 too), "
    "FILE.gguf (any GGUF, run by llama.cpp), a Hugging Face id or local folder (transformers), or "
    "openai-compatible:URL (your own vLLM, Ollama, LM Studio or llama.cpp server, e.g. "
    "openai-compatible:http://127.0.0.1:8080/v1#MODEL; needs the openai extra)"
)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, without breaking lines inside hyphenated words (``openai-compatible:URL``)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _SubParser(argparse.ArgumentParser):
    """The sub-commands' parser: :class:`_HelpFormatter` unless told otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def _add_llm(p: argparse.ArgumentParser) -> None:
    """``--llm``."""
    p.add_argument("--llm", default=None, metavar="LLM", help=LLM_HELP)


def _add_quiet(p: argparse.ArgumentParser) -> None:
    """``-q/--quiet`` on a sub-command (it also works before the command)."""
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=_QUIET_HELP)


_QUIET_HELP = "no stage lines or progress bars on stderr (errors are still printed)"


def _add_index_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag index`` sub-command."""
    p = sub.add_parser("index", help="build and save an index + clustering from a claim/evidence CSV")
    p.add_argument("data", help="CSV in FactVer's layout (or any layout with --claim-col/--evidence-col)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--embed-model", default="minilm", help="minilm (default), mpnet, or a Hugging Face id/path")
    p.add_argument("--mode", default="unsupervised", choices=["unsupervised", "supervised"])
    p.add_argument(
        "--preset",
        choices=sorted(_presets()),
        default="default",
        help="default: the hybrid pool (dense + BM25) with claim contrast and the thematic term, chosen on "
        "tuning data; paper: the papers' CARAG-u/CARAG exactly; tuned: the earlier dense-only variant",
    )
    p.add_argument(
        "--clusters", type=_clusters, default=None, help="number of clusters t (default 10), or 'auto' (BIC)"
    )
    p.add_argument(
        "--alpha",
        type=_unit_float("--alpha", 0, 1),
        default=None,
        help="the preset's (paper 0.5, default/tuned 0.8)",
    )
    p.add_argument("--delta", type=_unit_float("--delta", -1, 1), default=None, help="default 0.75")
    p.add_argument(
        "--soi-min-size",
        type=_count_arg("--soi-min-size"),
        default=None,
        help="keep at least this many SOI items, the most similar, when fewer pass delta (the preset's; paper 0)",
    )
    p.add_argument("--k", type=_positive_int("--k"), default=None, help="default 6")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a non-empty folder")
    p.add_argument(
        "--docstore",
        default="simple",
        help="where the passages are stored: simple (docstore.json, default), duckdb (docstore.duckdb in --out; "
        "extra [duckdb]) or redis://HOST:PORT[/DB][?namespace=NAME] (shared by processes; extra [redis])",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="fit the index to its archive: the re-ranking weights by leave-one-out over the claims with linked "
        "evidence (the preset is kept when too few are linked or nothing gains), and the claim verifier on the "
        "claims' labels with the passages the retriever gives them (the domain check, a head or a fine-tune, kept "
        "where it wins out of fold; about 10 minutes for 300 labelled claims on 2 cores)",
    )
    p.add_argument(
        "--suggest-labels",
        type=_positive_int("--suggest-labels"),
        metavar="N",
        help="list the N unlabelled claims whose labels would teach the verifier most (where it is torn, spread "
        "over the clusters) and write them to suggested_labels.csv in the index folder",
    )
    p.add_argument("--show-skipped", type=int, default=10, metavar="N", help="list the first N skipped rows")
    for col in ("claim-col", "evidence-col", "claim-id-col", "evidence-id-col", "label-col", "theme-col"):
        p.add_argument(f"--{col}", help="column name (generic CSV layout)")
    p.set_defaults(func=cmd_index)


def _add_check_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag check`` sub-command."""
    p = sub.add_parser("check", help="retrieve evidence for a claim (or a file of claims) and give a verdict")
    p.add_argument("claim", nargs="?", help="the claim (or give --claims FILE)")
    _add_retrieval_overrides(p)
    _add_llm(p)
    p.add_argument("--no-llm", action="store_true", help="retrieval and SOI only, no verdict")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--claims",
        metavar="FILE",
        help="check every claim of FILE (.txt one per line, .csv, .jsonl with a 'claim' field; - = stdin as .txt) "
        "into --out, one model load; a rerun skips the claims already there",
    )
    p.add_argument("--out", metavar="JSONL", help="with --claims: results appended here, one --json record a line")
    p.add_argument("--claim-col", help="with a .csv: the claim column (default: the first of claim, Claim_text, text)")
    p.add_argument(
        "--no-explanation",
        action="store_true",
        help="label + evidence only, at the verifier's speed: no LLM is loaded (with --decision llm: the LLM's "
        "label scoring alone, no explanation generated)",
    )
    _add_decision(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_check)


def _add_check_text_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag check-text`` sub-command."""
    p = sub.add_parser(
        "check-text", help="find the check-worthy claims of a text, check each one, summarise and report"
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="the text (UTF-8), or - for standard input")
    _add_retrieval_overrides(p, index_required=False)
    _add_llm(p)
    p.add_argument("--no-llm", action="store_true", help="retrieval and SOI only, no verdicts")
    p.add_argument("--json", action="store_true", help="the TextCheckResult as JSON on stdout")
    p.add_argument(
        "--report", metavar="OUT", help="write the text with each claim highlighted by its verdict (.md or .html)"
    )
    p.add_argument("--schema", action="store_true", help="print the JSON Schema of --json's output and exit")
    _add_quiet(p)
    p.set_defaults(func=cmd_check_text)


def _add_graph_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag graph`` sub-command."""
    p = sub.add_parser("graph", help="draw the SOI graph of a claim")
    p.add_argument("claim")
    _add_retrieval_overrides(p)
    p.add_argument("--html", help="interactive, self-contained HTML (opens offline)")
    p.add_argument("--png", help="static PNG")
    p.add_argument("--cluster-png", help="PNG of the claim's whole cluster")
    p.add_argument("--edge-threshold", type=_unit_float("--edge-threshold", -1, 1), default=0.5)
    _add_quiet(p)
    p.set_defaults(func=cmd_graph)


def _add_chat_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag chat`` sub-command."""
    p = sub.add_parser("chat", help="interactive fact-check bot")
    _add_retrieval_overrides(p)
    _add_llm(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_chat)


def _add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag demo`` sub-command."""
    p = sub.add_parser("demo", help="offline demo: index the demo corpus, compare RAG and CARAG-u, draw an SOI graph")
    p.add_argument("--out", default="carag_demo_output", help="output folder (default: ./carag_demo_output)")
    p.add_argument(
        "--claims",
        type=_positive_int("--claims"),
        default=3,
        help="claims to check (default 3: one SUPPORTED, one REFUTED, one NOT_ENOUGH_INFO; more take turns by label)",
    )
    p.add_argument("--no-llm", action="store_true", help="skip the verdicts (retrieval only)")
    p.add_argument("--rag-verdicts", action="store_true", help="also give verdicts for the plain-RAG evidence")
    _add_llm(p)
    _add_quiet(p)
    p.set_defaults(func=cmd_demo)


def _add_train_verifier_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag train-verifier`` sub-command (the shipped verifier, reproduced)."""
    p = sub.add_parser(
        "train-verifier",
        help="train the claim verifier from labelled claim-passage pairs (reproduces the shipped model; resumable)",
    )
    p.add_argument("pool", help="pairs.csv: dataset, claim_id, claim, evidence_id, evidence, label")
    p.add_argument("--out", required=True, help="the verifier folder to write (ClaimVerifier(path) loads it)")
    p.add_argument("--work-dir", required=True, help="checkpoints; a rerun with the same folder resumes")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--time-budget", type=float, default=2700.0, help="seconds of training at most (default 2700)")
    p.set_defaults(func=_cmd_train_verifier)


def _cmd_train_verifier(args: argparse.Namespace) -> int:
    from llama_index_carag.verifier.training import TrainingConfig, train_shipped

    record = train_shipped(
        args.pool, args.out, args.work_dir, TrainingConfig(epochs=args.epochs, time_budget_s=args.time_budget)
    )
    figures = record["validation_claim_figures"]
    print(
        f"verifier saved to {args.out}: {record['steps']} steps in {record['seconds'] / 60:.1f} min; validation "
        f"claims accuracy {figures['accuracy']:.3f}, macro-F1 {figures['macro_f1']:.3f}"
    )
    return 0


def _add_serve_parser(sub: argparse._SubParsersAction) -> None:
    """The ``carag serve`` sub-command."""
    p = sub.add_parser("serve", help="HTTP API and chat page over an index (FastAPI on uvicorn)")
    _add_retrieval_overrides(p)
    _add_llm(p)
    from llama_index_carag.serve.command import add_serve_arguments

    add_serve_arguments(p, _positive_int)
    _add_decision(p)
    p.set_defaults(func=cmd_serve)


def _add_decision(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--decision",
        choices=("verifier", "llm"),
        default="verifier",
        help="who decides the label: the claim verifier (default; the LLM explains it) or the LLM itself",
    )


#: The commands after which :func:`run` ends the process at once: they only read their index (a writing
#: command's stores, DuckDB's among them, close as the interpreter ends).
QUICK_EXIT_COMMANDS = frozenset({"check", "check-text", "graph", "chat"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``carag`` command; returns the exit status."""
    return _main(argv)[0]


def _main(argv: Sequence[str] | None) -> tuple[int, str | None]:
    """The command of ``argv`` run: its exit status and name."""
    _offline_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.command:
        parser.print_help()
        return EXIT_USAGE, None
    debug = args.debug or os.environ.get("CARAG_DEBUG") == "1"
    _quiet_libraries()
    if not args.verbose:
        # An unparseable answer is already shown as NOT_ENOUGH_INFO (parsed: false); no log line needed.
        logging.getLogger("llama_index_carag.verdicts.parsing").setLevel(logging.ERROR)
    try:
        return int(args.func(args) or 0), args.command
    except KeyboardInterrupt:
        write_stderr("carag: interrupted\n")
        return 130, args.command
    except (CLIError, ValueError, TypeError, OSError, IndexBusyError) as exc:  # IndexBusyError: another writer
        if debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        write_stderr(f"carag: error: {message}\n")
        return EXIT_USAGE, args.command


def run() -> NoReturn:
    """The ``carag`` console script: the command of ``sys.argv``, whose status the process exits with.

    After a command of :data:`QUICK_EXIT_COMMANDS` the process ends at once (``os._exit``; logs, Python's and C's
    standard streams flushed first) unless a child process or another non-daemon thread is still at work: the
    interpreter's teardown of torch's, transformers' and llama.cpp's modules adds about 1.4 s and finishes
    nothing such a command started (its output files are written and closed when it returns).  Other commands,
    and those when work is left, exit as usual.
    """
    code, command = _main(None)
    if command not in QUICK_EXIT_COMMANDS or _work_left() or not _flushed():
        sys.exit(code)
    os._exit(code)


def _work_left() -> bool:
    """Whether a child process or a non-daemon thread other than this one is running (the scan pool's threads,
    :data:`~llama_index_carag.core.vectors.SCAN_THREADS`, are idle once a command returns)."""
    import multiprocessing

    from llama_index_carag.core.vectors import SCAN_THREADS

    current = threading.current_thread()
    others = [
        t
        for t in threading.enumerate()
        if t is not current and not t.daemon and t.is_alive() and not t.name.startswith(SCAN_THREADS)
    ]
    return bool(others or multiprocessing.active_children())


def _flushed() -> bool:
    """Flush the logs and the standard streams (Python's and C's); whether all went out (a closed pipe: no)."""
    logging.shutdown()
    try:
        for stream in {id(s): s for s in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__)}.values():
            if stream is not None and not stream.closed:
                stream.flush()
    except (OSError, ValueError):
        return False
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # what native libraries printf-ed
    except (OSError, AttributeError):  # no C library to ask (not a POSIX platform)
        pass
    return True


if __name__ == "__main__":  # pragma: no cover
    run()
