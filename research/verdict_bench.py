"""Verdict benchmark on FactVer: labels, explanations and speed, per LLM and evidence source.

The FactVer-only benchmark (``python -m research.eval --verdicts`` runs the two-domain one,
:mod:`research.verdict_decisions`).  :func:`run_verdict_bench` runs,
for each LLM (default the offline Qwen2.5-Coder-1.5B-Instruct and SmolLM2-135M):

1. **tuning** (label-scoring LLMs only) — a balanced subset of FactVer's tuning
   half (:func:`research.runner.split_claims`), each claim
   with its annotated evidence and with the retriever's top-k; the three label
   log-likelihoods are computed (no explanation) and
   :class:`research.label_bias.LabelBiasCalibrator` picks the
   REFUTED / NOT_ENOUGH_INFO offsets (the NOT_ENOUGH_INFO rule);
2. **report** — a balanced subset of the report half (``--per-label`` claims of
   each of T, F, N, round-robin over the themes), each claim (a) with its
   annotated evidence (at most k passages, corpus order) and (b) with the
   retriever's top-k (the package default, MiniLM; its corpus claims are the tuning
   half without the tuning subset, so no claim checked is a corpus claim), through the
   public :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer` with the
   tuned offsets.

Per (LLM, evidence): parse rate, accuracy, macro-F1, per-class recall, seconds
per verdict (load excluded), citation validity (share of verdicts whose model
text cited only shown passages; after the repair it is checked to be 1), label
agreement of the explanation, and the mean cosine (mpnet) between the
explanation and FactVer's human ``Reason``.  A majority-class line (the most
frequent label of the tuning half) is added.  Rows are appended to
``verdicts_rows.csv`` as they are produced, so an interrupted run resumes.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from research.verdict_metrics import LABELS, accuracy, macro_f1

logger = logging.getLogger(__name__)

__all__ = [
    "balanced_subset",
    "factver_reasons",
    "summarize_rows",
    "run_verdict_bench",
]

_ROW_FIELDS = [
    "llm",
    "evidence",
    "claim_id",
    "gold",
    "pred",
    "parsed",
    "method",
    "seconds",
    "n_passages",
    "cited",
    "invalid_citations",
    "repaired",
    "explanation",
    "reason",
    "scores",
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


def _tune_bias(bench: _Bench, synth: Any, claims: Sequence[Any], name: str) -> dict[str, Any]:
    """Label scores on the tuning subset and the fitted offsets (cached in ``verdicts_tuning_<name>.json``)."""
    from llama_index_carag.verdicts import VerdictLabel
    from research.label_bias import LabelBiasCalibrator

    if bench.out is None:
        raise ValueError("The tuning scores are cached in the benchmark's output folder; this one has none.")
    path = bench.out / f"verdicts_tuning_{_file_stem(name)}.json"
    cached = json.loads(path.read_text()) if path.is_file() else {"scores": []}
    done = {(r["claim_id"], r["evidence"]) for r in cached["scores"]}
    from tqdm.auto import tqdm

    for claim in tqdm(claims, desc=f"tuning {name}"):
        for source in ("annotated", "retrieved"):
            if (claim.node_id, source) in done:
                continue
            scores = synth.score_labels(claim.get_content(), bench.evidence(claim, source))
            cached["scores"].append(
                {
                    "claim_id": claim.node_id,
                    "evidence": source,
                    "gold": claim.metadata["label"],
                    "scores": scores.as_dict(),
                }
            )
            path.write_text(json.dumps(cached, indent=1))
    rows = cached["scores"]
    cal = LabelBiasCalibrator().fit(
        [{VerdictLabel(k): v for k, v in r["scores"].items()} for r in rows],
        [r["gold"] for r in rows],
        groups=[r["claim_id"] for r in rows],
    )
    cached.update(
        bias={k.value: v for k, v in cal.bias_.items()},
        tune_macro_F1=cal.score_,
        tune_accuracy=cal.accuracy_,
        n=len(rows),
        cv_macro_F1=cal.cv_scores_,
    )
    path.write_text(json.dumps(cached, indent=1))
    return cached


def _file_stem(name: str) -> str:
    """A model name as a file-name part: ``"Qwen2.5 (Q4_K_M, llama.cpp)"`` → ``"Qwen2.5_Q4_K_M_llama.cpp"`` (pure)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "llm"


def _done_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _report(bench: _Bench, synth: Any, claims: Sequence[Any], name: str, rows_path: Path) -> None:
    from tqdm.auto import tqdm

    done = {(r["llm"], r["evidence"], r["claim_id"]) for r in _done_rows(rows_path)}
    new_file = not rows_path.is_file() or rows_path.stat().st_size == 0  # an interrupted run may leave it empty
    with rows_path.open("a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=_ROW_FIELDS)
        if new_file:
            writer.writeheader()
            fh.flush()
        for source in ("annotated", "retrieved"):
            for claim in tqdm(claims, desc=f"{name} {source}"):
                if (name, source, claim.node_id) in done:
                    continue
                nodes = bench.evidence(claim, source)
                t0 = time.perf_counter()
                v = synth.synthesize(claim.get_content(), nodes).metadata["verdict"]
                writer.writerow(
                    {
                        "llm": name,
                        "evidence": source,
                        "claim_id": claim.node_id,
                        "gold": claim.metadata["label"],
                        "pred": v.to_fever(),
                        "parsed": v.parsed,
                        "method": v.method,
                        "seconds": round(time.perf_counter() - t0, 2),
                        "n_passages": len(nodes),
                        "cited": json.dumps(v.cited_passages),
                        "invalid_citations": json.dumps(v.invalid_citations),
                        "repaired": v.explanation_repaired,
                        "explanation": v.explanation,
                        "reason": bench.reasons.get(claim.node_id, ""),
                        "scores": json.dumps(v.label_scores),
                    }
                )
                fh.flush()


def run_verdict_bench(
    data: str | Path,
    out: str | Path,
    *,
    llms: Sequence[str] = ("qwen1.5b", "smollm2"),
    per_label: int = 10,
    tune_per_label: int = 6,
    k: int = 6,
    cache_dir: str | None = None,
    split_seed: int = 0,
    load_llm: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark (module docstring); returns ``{"summary": [...], "files": [...], "meta": {...}}``."""
    from llama_index_carag.models.resolve import llm_name, resolve_llm
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    out = Path(out)
    bench = _Bench(data, out, k=k, cache_dir=cache_dir, seed=split_seed)
    report, tune = balanced_subset(bench.report, per_label), balanced_subset(bench.tune, tune_per_label)
    bench.fit_retriever(tune)
    rows_path = out / "verdicts_rows.csv"
    meta: dict[str, Any] = {"report_claims": len(report), "tune_claims": len(tune), "k": k, "llms": {}}
    for alias in llms:
        t0 = time.perf_counter()
        llm = (load_llm or resolve_llm)(alias)
        load_s = time.perf_counter() - t0
        name = llm_name(llm)  # rows and tuning scores: filed under the model and its runtime, not the alias
        embed = bench.retriever.embed_model  # the measured label rule's cosines, if the LLM has one
        synth = FactCheckSynthesizer(llm, decision="rule", show_ids=False, embed_model=embed)
        info: dict[str, Any] = {
            "alias": alias,
            "load_s": round(load_s, 1),
            "label_mode": synth.label_mode,
            "label_rule": getattr(synth.decision, "rule", None) is not None,
        }
        if synth.label_mode == "score" and tune_per_label > 0:
            tuned = _tune_bias(bench, synth, tune, name)
            info.update(bias=tuned["bias"], tune_macro_F1=round(tuned["tune_macro_F1"], 4), tune_n=tuned["n"])
            synth = FactCheckSynthesizer(
                llm, decision="rule", label_bias=tuned["bias"], show_ids=False, embed_model=embed
            )
        _report(bench, synth, report, name, rows_path)
        meta["llms"][name] = info
        del synth, llm
    tune_labels = Counter(c.metadata.get("label") for c in bench.tune)
    meta["majority_label"] = tune_labels.most_common(1)[0][0]
    summary = _summaries(_done_rows(rows_path), meta["majority_label"], [c.node_id for c in report])
    files = _write_summary(summary, meta, out)
    return {"summary": summary, "files": [str(rows_path), *map(str, files)], "meta": meta}


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
        if any(p["pred"] != rows[i]["pred"] for p, i in zip(plain, idx)):  # a label rule or offsets decided
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


def _write_summary(summary: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> list[Path]:
    csv_path, md_path = out / "verdicts_summary.csv", out / "verdicts_summary.md"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(summary)

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in _COLUMNS) + " |" for row in summary]
    text = (
        f"FactVer report half, balanced subset of {meta['report_claims']} claims; k={meta['k']}; "
        f"NOT_ENOUGH_INFO offsets tuned on {meta['tune_claims']} tuning-half claims.\n\n"
        f"LLMs: {json.dumps(meta['llms'])}\n\n" + "\n".join(lines) + "\n"
    )
    md_path.write_text(text, encoding="utf-8")
    return [csv_path, md_path]
