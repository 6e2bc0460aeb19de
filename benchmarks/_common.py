"""Helpers shared by the benchmark scripts (timing, FactVer and SciFact paths, tables)."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # research/ (beside the package, not in the wheel) imports from the repository root
    sys.path.append(str(REPO))
FACTVER = Path(os.environ.get("CARAG_FACTVER", REPO.parent / "shared" / "data" / "factver" / "factver_master.csv"))
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


def scifact_annotations(folder: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """SciFact's abstract texts by id, and each claim's rationale annotations by claim id (``{abstract id:
    [{"sentences": [...], "label": ...}]}``)."""
    import json

    with (folder / "corpus.jsonl").open(encoding="utf-8") as lines:
        corpus = {row["_id"]: row["text"] for row in map(json.loads, lines)}
    with (folder / "queries.jsonl").open(encoding="utf-8") as lines:
        annotations = {row["_id"]: row["metadata"] for row in map(json.loads, lines)}
    return corpus, annotations


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"


def interleaved(
    variants: dict[str, Callable[[object], object]], inputs: Sequence[object], *, repeats: int = 1, warmup: int = 3
) -> dict[str, list[float]]:
    """Time each variant on each input, alternating variants (A B C A B C ...).

    Returns seconds per call, per variant.
    """
    names = list(variants)
    for x in list(inputs)[:warmup]:
        for name in names:
            variants[name](x)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for i, x in enumerate(inputs):
            order = names if (i + r) % 2 == 0 else names[::-1]
            for name in order:
                t0 = time.perf_counter()
                variants[name](x)
                times[name].append(time.perf_counter() - t0)
    return times


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000.0


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
