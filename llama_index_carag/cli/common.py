"""Shared by the ``carag`` sub-commands: the user-error type, argument value types, and loading data, index and LLM."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def _positive_int(name: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            out = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {value!r}") from None
        if out < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, not {value}")
        return out

    return parse


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


def _load_retriever(args: argparse.Namespace) -> Any:
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    folder = Path(args.index)
    if not folder.is_dir():
        raise CLIError(f"no index at {folder} (build one with: carag index DATA.csv --out {folder})")
    retriever = ContextAwareRetriever.from_persist_dir(folder, embed_model=getattr(args, "embed_model", None))
    changes = _setting_args(args, alpha="alpha", delta="delta", similarity_top_k="k")
    return retriever.with_settings(**changes) if changes else retriever


def _setting_args(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """``{settings field: value}`` of the command-line arguments that were given (``field=arg name``)."""
    return {field: getattr(args, arg) for field, arg in names.items() if getattr(args, arg, None) is not None}


def _llm(args: argparse.Namespace) -> Any:
    from llama_index_carag.models.resolve import resolve_llm

    return resolve_llm(None if args.llm in (None, "default") else args.llm)
