"""The FactVer verdict benchmark's claims and summaries: the balanced subset, the evidence, the metrics.

:class:`_Bench` holds FactVer's corpus split into its tuning and report halves
(:func:`research.runner.split_claims`) and the package default retriever (MiniLM; its corpus claims the tuning
half without the claims held out: new-claims protocol); :meth:`_Bench.evidence` gives a claim its annotated
evidence (at most k passages, corpus order) or the retriever's top k (``benchmarks/verdict_evidence.py`` and
:mod:`research.archive_evidence` read the claims and their evidence through it).  :func:`balanced_subset` takes
``per_label`` claims of each of T, F, N, round-robin over the themes.

:func:`summarize_rows` gives, per group of benchmark rows: parse rate, accuracy, macro-F1, per-class recall,
seconds per verdict, citation validity (share of verdicts whose model text cited only shown passages; after the
repair it is checked to be 1), the share of repaired explanations and the mean cosine (mpnet) between the
explanation and FactVer's human ``Reason``; :func:`_summaries` adds a majority-class line
(``benchmarks/verdict_subset.py`` summarises the committed rows, ``docs/results/verdicts_rows.csv``, with it).
"""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from research.verdict_metrics import LABELS, accuracy, macro_f1

logger = logging.getLogger(__name__)

__all__ = [
    "balanced_subset",
    "factver_reasons",
    "summarize_rows",
]


def balanced_subset(claims: Sequence[Any], per_label: int) -> list[Any]:
    """``per_label`` claims of each FactVer label (T, F, N), each taken round-robin over the themes, corpus order."""
    out: list[Any] = []
    for label in LABELS:
        by_theme: dict[Any, list[Any]] = {}
        for c in claims:
            if c.metadata.get("label") == label:
                by_theme.setdefault(c.metadata.get("theme"), []).append(c)
        queues = list(by_theme.values())
        picked: list[Any] = []
        while len(picked) < per_label and any(queues):
            for q in queues:
                if q and len(picked) < per_label:
                    picked.append(q.pop(0))
        out.extend(picked)
    return out


def factver_reasons(csv_path: str | Path) -> dict[str, str]:
    """FactVer's human ``Reason`` per claim: the most common non-empty reason among its rows."""
    counts: dict[str, Counter[str]] = {}
    with open(csv_path, newline="", encoding="utf-8-sig") as fh:
        for row in csv.DictReader(fh):
            reason = " ".join((row.get("Reason") or "").split())
            if reason:
                counts.setdefault(row["Claim_topic_id"], Counter())[reason] += 1
    return {cid: c.most_common(1)[0][0] for cid, c in counts.items()}


def _recall(gold: list[str], pred: list[str], label: str) -> float:
    hits = [p == label for g, p in zip(gold, pred) if g == label]
    return sum(hits) / len(hits) if hits else float("nan")


def summarize_rows(rows: Sequence[dict[str, Any]], cosines: Sequence[float] | None = None) -> dict[str, Any]:
    """Metrics of one (LLM, evidence) group of benchmark rows (see the module docstring)."""
    gold, pred = [r["gold"] for r in rows], [r["pred"] for r in rows]
    out: dict[str, Any] = {
        "claims": len(rows),
        "parse_rate": np.mean([str(r["parsed"]) == "True" for r in rows]) if rows else float("nan"),
        "accuracy": accuracy(gold, pred),
        "macro_F1": macro_f1(gold, pred),
        **{f"recall_{c}": _recall(gold, pred, c) for c in LABELS},
        "s_per_verdict": np.mean([float(r["seconds"]) for r in rows]) if rows else float("nan"),
    }
    if rows and "invalid_citations" in rows[0]:
        out["citation_validity_raw"] = np.mean([not json.loads(r["invalid_citations"] or "[]") for r in rows])
        out["citation_validity"] = np.mean(
            [all(1 <= n <= int(r["n_passages"]) for n in json.loads(r["cited"] or "[]")) for r in rows]
        )
        out["cites_passage"] = np.mean([bool(json.loads(r["cited"] or "[]")) for r in rows])
        out["repaired"] = np.mean([str(r["repaired"]) == "True" for r in rows])
    if cosines is not None and len(cosines):
        out["cos_reason_mpnet"] = float(np.mean(cosines))
    return {k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


# ------------------------------------------------------------------ running
class _Bench:
    """Holds the corpus, the retriever and the output folder (``out``, created; ``None``: no files) of one run."""

    def __init__(self, data: str | Path, out: Path | None = None, *, k: int, cache_dir: str | None, seed: int) -> None:
        from llama_index_carag.datasets import load_factver
        from llama_index_carag.models.resolve import resolve_embed_model
        from research.runner import EvalSetup, split_claims

        self.k, self.out = k, out
        corpus = load_factver(data)
        self.setup = EvalSetup.prepare(corpus, resolve_embed_model("minilm"), cache_dir=cache_dir)
        self.tune, self.report = split_claims(self.setup.claims, seed)
        self.nodes = {n.node_id: n for n in corpus.evidence_nodes}
        self.retriever: Any = None
        self.reasons = factver_reasons(data)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def fit_retriever(self, held_out: Sequence[Any]) -> None:
        """The package default retriever, its corpus claims the tuning half without ``held_out``.

        New-claims protocol: no claim a verdict is asked for (report half, tuning subset) is a
        corpus claim.
        """
        from llama_index_carag.retrieval.retriever import ContextAwareRetriever

        skip = {c.node_id for c in held_out}
        self.retriever = ContextAwareRetriever.from_index(
            self.setup.index,
            "default",
            claim_nodes=[c for c in self.tune if c.node_id not in skip],
            random_state=0,
            similarity_top_k=self.k,
        )

    def evidence(self, claim: Any, source: str) -> list[Any]:
        from llama_index.core.schema import NodeWithScore, QueryBundle

        if source == "annotated":
            ids = [i for i in self.nodes if i in self.setup.gold.get(claim.node_id, set())][: self.k]
            return [NodeWithScore(node=self.nodes[i], score=None) for i in ids]
        return self.retriever.retrieve(QueryBundle(claim.get_content(), embedding=claim.embedding))


def _done_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _summaries(rows: list[dict[str, str]], majority: str, report_ids: list[str]) -> list[dict[str, Any]]:
    from llama_index_carag.models.resolve import resolve_embed_model

    wanted = set(report_ids)
    rows = [r for r in rows if r["claim_id"] in wanted]
    cos: list[float] = [float("nan")] * len(rows)
    if rows:
        mpnet = resolve_embed_model("mpnet")
        a = np.asarray(mpnet.get_text_embedding_batch([r["explanation"] for r in rows]), np.float32)
        b = np.asarray(mpnet.get_text_embedding_batch([r["reason"] or " " for r in rows]), np.float32)
        cos = list(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12))
    out = []
    groups = dict.fromkeys((r["llm"], r["evidence"]) for r in rows)
    for llm, source in groups:
        idx = [i for i, r in enumerate(rows) if (r["llm"], r["evidence"]) == (llm, source)]
        out.append(
            {
                "llm": llm,
                "evidence": source,
                **summarize_rows([rows[i] for i in idx], [cos[i] for i in idx if rows[i]["reason"]]),
            }
        )
        plain = [_argmax_row(rows[i]) for i in idx]
        # rows of earlier rounds, where a label rule or offsets decided: their plain arg-max beside them
        if any(p["pred"] != rows[i]["pred"] for p, i in zip(plain, idx)):
            out.append({"llm": f"{llm} [plain arg-max]", "evidence": source, **summarize_rows(plain)})
    ids = list(dict.fromkeys(r["claim_id"] for r in rows))
    gold = {r["claim_id"]: r["gold"] for r in rows}
    majority_rows = [{"gold": gold[i], "pred": majority, "parsed": True, "seconds": 0.0} for i in ids]
    out.append({"llm": f"majority class ({majority})", "evidence": "-", **summarize_rows(majority_rows)})
    return out


def _argmax_row(row: dict[str, str]) -> dict[str, str]:
    """``row`` with ``pred`` replaced by the arg-max of its label scores (unchanged if it has none)."""
    scores = json.loads(row.get("scores") or "null")
    if not scores:
        return row
    from llama_index_carag.verdicts import VerdictLabel

    return {**row, "pred": VerdictLabel(max(scores, key=scores.get)).to_fever()}


_COLUMNS = [
    "llm",
    "evidence",
    "claims",
    "parse_rate",
    "accuracy",
    "macro_F1",
    "recall_T",
    "recall_F",
    "recall_N",
    "s_per_verdict",
    "citation_validity_raw",
    "citation_validity",
    "cites_passage",
    "repaired",
    "cos_reason_mpnet",
]
