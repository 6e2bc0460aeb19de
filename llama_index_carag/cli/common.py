"""Shared by the ``carag`` sub-commands: the user-error type, argument value types, loading data, index and LLM,
and :class:`Stages`, what a command is doing while it loads and checks (one line per stage on standard error,
never on standard output; ``-q``/``--quiet`` silences them)."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _clusters(value: str) -> int | str:
    if value == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--clusters must be a positive integer or 'auto', not {value!r}") from None


def _unit_float(name: str, low: float, high: float) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            out = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, not {value!r}") from None
        if not low <= out <= high:
            raise argparse.ArgumentTypeError(f"{name} must be in [{low:g}, {high:g}], not {value}")
        return out

    return parse


def _positive_int(name: str, least: int = 1) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            out = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {value!r}") from None
        if out < least:
            raise argparse.ArgumentTypeError(f"{name} must be >= {least}, not {value}")
        return out

    return parse


def _count_arg(name: str) -> Callable[[str], int]:
    """An integer ``>= 0`` (a count that may be zero)."""
    return _positive_int(name, least=0)


def _presets() -> dict[str, Any]:
    from llama_index_carag.settings import PRESETS

    return PRESETS


def _load_corpus(path: str, args: argparse.Namespace) -> Any:
    from llama_index_carag.datasets import load_claim_evidence_csv, load_factver

    if getattr(args, "claim_col", None) or getattr(args, "evidence_col", None):
        return load_claim_evidence_csv(
            path,
            claim_col=args.claim_col or "claim",
            evidence_col=args.evidence_col or "evidence",
            claim_id_col=args.claim_id_col,
            evidence_id_col=args.evidence_id_col,
            label_col=args.label_col,
            theme_col=args.theme_col,
        )
    return load_factver(path)


def _stages(args: argparse.Namespace) -> Stages:
    """The stage lines of a command (silent with ``--quiet``)."""
    return Stages(quiet=bool(getattr(args, "quiet", False)))


def _recorded_embed_model(folder: Path) -> str | None:
    """The encoder an index was built with (its state's manifest), or ``None`` when unreadable (the load says why)."""
    import json

    from llama_index_carag.core.persistence import MANIFEST_NAME
    from llama_index_carag.retrieval.retriever import STATE_SUBDIR

    try:
        name = json.loads((folder / STATE_SUBDIR / MANIFEST_NAME).read_text(encoding="utf-8"))["info"]["embed_model"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def _load_retriever(args: argparse.Namespace, stages: Stages | None = None) -> Any:
    """The retriever of ``--index``: its encoder, then the index (a stage line each when ``stages`` is given)."""
    from llama_index_carag.models.resolve import resolve_embed_model
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    stages = stages or Stages(quiet=True)
    folder = Path(args.index)
    if not folder.is_dir():
        raise CLIError(f"no index at {folder} (build one with: carag index DATA.csv --out {folder})")
    name = getattr(args, "embed_model", None) or _recorded_embed_model(folder)
    model = None
    if name is not None:
        with stages.stage(f"loading the encoder ({name})"):
            model = resolve_embed_model(name)
    with stages.stage(f"loading the index {folder}"):
        retriever = ContextAwareRetriever.from_persist_dir(folder, embed_model=model)
    changes = retrieval_overrides(args)
    return retriever.with_settings(**changes) if changes else retriever


def retrieval_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The retrieval settings given on the command line (``--alpha``, ``--delta``, ``--soi-min-size``, ``--k``)."""
    return _setting_args(args, alpha="alpha", delta="delta", soi_min_size="soi_min_size", similarity_top_k="k")


def _setting_args(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """``{settings field: value}`` of the command-line arguments that were given (``field=arg name``)."""
    return {field: getattr(args, arg) for field, arg in names.items() if getattr(args, arg, None) is not None}


def _llm_spec(args: argparse.Namespace) -> str | None:
    """``--llm`` as :func:`~llama_index_carag.models.resolve.resolve_llm` takes it (``None``: the default)."""
    return None if args.llm in (None, "default") else args.llm


def _llm(args: argparse.Namespace, stages: Stages | None = None) -> Any:
    """The LLM of ``--llm`` (a stage line when ``stages`` is given, as its backend describes the load: its name,
    and a first llama.cpp probe)."""
    from llama_index_carag.models.resolve import load_description, resolve_llm

    spec = _llm_spec(args)
    if stages is None or stages.quiet:
        return resolve_llm(spec)
    message, note = load_description(spec)
    with stages.stage(message, note=note, ticking=True):
        return resolve_llm(spec)


def retriever_and_llm(
    args: argparse.Namespace, stages: Stages, load_llm: bool = True, hold_opening: bool = True
) -> tuple[Any, Any | None]:
    """``(retriever, llm)`` of ``--index`` and ``--llm`` (``llm`` ``None`` unless ``load_llm``).

    The LLM loads on a worker thread while the encoder and the index load — llama.cpp's and torch's work runs
    outside the GIL, so on two cores they overlap — and its stage line counts what is left to wait.  With
    ``hold_opening`` (the verifier decides, the LLM explains) it also evaluates the fact-check prompt's opening
    turn there (:func:`~llama_index_carag.verdicts.label_scores.hold_prompt_opening`).  The thread is a daemon: a
    command that fails before the LLM is needed exits at once.
    """
    if not load_llm:
        return _load_retriever(args, stages), None
    from llama_index_carag.models.resolve import load_description, resolve_llm
    from llama_index_carag.verdicts.label_scores import hold_prompt_opening

    spec = _llm_spec(args)
    message, note = load_description(spec)  # before the load: its first llama.cpp probe is still to come
    pending: Future[Any] = Future()

    def load() -> None:
        try:
            llm = resolve_llm(spec)
            if hold_opening:
                hold_prompt_opening(llm)
            pending.set_result(llm)
        except BaseException as exc:  # raised in the main thread, where the LLM is waited for
            pending.set_exception(exc)

    threading.Thread(target=load, name="carag-llm-load", daemon=True).start()
    retriever = _load_retriever(args, stages)
    with stages.stage(message, note=note, ticking=True):
        return retriever, pending.result()


def write_stderr(text: str) -> None:
    """``text`` on standard error, flushed — not while a model load has the process's streams silenced
    (:data:`~llama_index_carag.models.llamacpp.SILENCED_STREAMS`)."""
    from llama_index_carag.models.llamacpp import SILENCED_STREAMS

    with SILENCED_STREAMS:
        sys.stderr.write(text)
        sys.stderr.flush()


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
            write_stderr(PREFIX + message + "\n")

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
            write_stderr(line + "\n")
            yield
            logger.info("%s: %.1f s", message, time.perf_counter() - started)
            return
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(line, started, stop), daemon=True) if ticking else None
        write_stderr(line)
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            write_stderr(f"\r\x1b[K{line} {time.perf_counter() - started:.1f} s\n")

    @staticmethod
    def _tick(line: str, started: float, stop: threading.Event) -> None:
        """Rewrite ``line`` with the seconds so far, every :data:`_TICK_S`, until ``stop`` is set."""
        while not stop.wait(_TICK_S):
            write_stderr(f"\r\x1b[K{line} {time.perf_counter() - started:.0f} s")
