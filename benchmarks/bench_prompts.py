"""Prompt variants for the offline Qwen under llama.cpp, compared on FactVer's tuning half only.

    python benchmarks/bench_prompts.py collect --tune-per-label 12     # ~25 min on 2 cores
    python benchmarks/bench_prompts.py content-free /tmp/prompt_variants.json  # ~1 min
    python benchmarks/bench_prompts.py analyze /tmp/prompt_variants.json

``collect`` scores the three labels for a balanced tuning-half subset, each claim with its
annotated evidence and with the package default retriever's top-6 (corpus claims: the rest of
the tuning half), once per prompt variant:

* ``zero-shot``: the package prompt as it was (system instructions, then the claim and passages);
* ``few-shot``: the same, after :data:`~llama_index_carag.verdicts.few_shot.DEFAULT_EXAMPLES` (three
  domain-neutral worked examples, one per label, written for the package).

``content-free`` adds the label scores of three content-free inputs per variant (claim and
passage "N/A", "[MASK]", empty), for contextual calibration (Zhao et al., 2021): subtracting
that prior needs no labels at all.

It also stores the cosines between the claim and its passages (the encoder's), the evidence
relevance a NOT_ENOUGH_INFO rule could use.  ``analyze`` compares, per variant, by grouped
5-fold cross-validation (claims never split across folds): the raw arg-max, CV-fitted
REFUTED/NOT_ENOUGH_INFO offsets, and a logistic regression on the three log-likelihoods plus the
max and mean cosine.  The rule for the package default was declared before any number was
seen (docs/VERDICTS.md): few-shot replaces zero-shot only if its raw arg-max gains at least 0.03
macro-F1 out of fold without losing accuracy; a learned rule is adopted only if it gains 0.03
macro-F1 over the chosen variant's raw arg-max.  No report-half claim is used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))
from _common import FACTVER
from bench_label_rules import L, Offsets, Raw, X_main, metrics

VARIANTS = ("zero-shot", "few-shot")


def collect(args: argparse.Namespace) -> None:
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.core.vectors import l2_normalize
    from llama_index_carag.models.resolve import llm_name, resolve_llm
    from llama_index_carag.stores.vector_stores import get_node_embeddings
    from llama_index_carag.verdicts.few_shot import DEFAULT_EXAMPLES
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
    from research.verdict_bench import _Bench, balanced_subset

    out = Path(args.out)
    bench = _Bench(FACTVER, Path(args.work), k=6, cache_dir=args.cache_dir, seed=0)
    tune = balanced_subset(bench.tune, args.tune_per_label)
    bench.fit_retriever(tune)
    llm = resolve_llm(args.llm)
    print("LLM:", llm_name(llm), flush=True)
    evidence = {}
    for claim in tune:
        for source in ("annotated", "retrieved"):
            nodes = (
                bench.evidence(claim, "annotated")
                if source == "annotated"
                else bench.retriever.retrieve(QueryBundle(claim.get_content(), embedding=claim.embedding))
            )
            ids = [n.node.node_id for n in nodes]
            cos = []
            if ids:
                _, mat = get_node_embeddings(bench.setup.index, ids)
                cos = (l2_normalize(mat) @ l2_normalize(np.asarray(claim.embedding, np.float32))).tolist()
            evidence[claim.node_id, source] = (nodes, cos)
    rows = json.loads(out.read_text()) if out.is_file() else []
    done = {(r["variant"], r["claim_id"], r["evidence"]) for r in rows}
    for variant in args.variants.split(","):
        synth = FactCheckSynthesizer(
            llm, label_bias={}, show_ids=False, examples=DEFAULT_EXAMPLES if variant == "few-shot" else None
        )
        for claim in tune:
            for source in ("annotated", "retrieved"):
                if (variant, claim.node_id, source) in done:
                    continue
                nodes, cos = evidence[claim.node_id, source]
                t0 = time.perf_counter()
                scores = synth.score_labels(claim.get_content(), nodes)
                rows.append(
                    {
                        "variant": variant,
                        "llm": llm_name(llm),
                        "claim_id": claim.node_id,
                        "evidence": source,
                        "gold": claim.metadata["label"],
                        "scores": scores.as_dict(),
                        "cos": cos,
                        "n": len(nodes),
                        "t_score": round(time.perf_counter() - t0, 2),
                    }
                )
                out.write_text(json.dumps(rows, indent=1))
                print(
                    variant,
                    source,
                    claim.metadata["label"],
                    max(scores.logprobs, key=scores.logprobs.get).value,
                    rows[-1]["t_score"],
                    flush=True,
                )
    print(f"{len(rows)} rows in {out}")


#: Content-free inputs (Zhao et al. 2021, "Calibrate before use"): what the model says with nothing to check.
CONTENT_FREE = (("N/A", ["N/A"]), ("[MASK]", ["[MASK]"]), ("", [""]))


def content_free(args: argparse.Namespace) -> None:
    """Append, per variant, the label scores of the content-free inputs (rows with ``"content_free": true``)."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.models.resolve import llm_name, resolve_llm
    from llama_index_carag.verdicts.few_shot import DEFAULT_EXAMPLES
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    out = Path(args.rows)
    rows = [r for r in json.loads(out.read_text()) if not r.get("content_free")]
    llm = resolve_llm(args.llm)
    for variant in VARIANTS:
        synth = FactCheckSynthesizer(
            llm, label_bias={}, show_ids=False, examples=DEFAULT_EXAMPLES if variant == "few-shot" else None
        )
        for claim, passages in CONTENT_FREE:
            nodes = [NodeWithScore(node=TextNode(text=t), score=None) for t in passages]
            scores = synth.score_labels(claim, nodes)
            rows.append({"variant": variant, "llm": llm_name(llm), "content_free": True, "scores": scores.as_dict()})
            print(variant, repr(claim), scores.as_dict(), flush=True)
    out.write_text(json.dumps(rows, indent=1))


class ContentFreeCalibration:
    """Subtract the mean label distribution of the content-free inputs (nothing fitted on labels)."""

    name = "content-free calibration"

    def __init__(self, prior: np.ndarray) -> None:
        self.prior = prior

    def fit(self, R):
        return self

    def predict(self, R):
        return np.argmax(np.array([X_main(r) for r in R]) - self.prior, 1)


class LRCos:
    name = "logistic (3 logprobs + max/mean cos)"

    def feats(self, R):
        return np.array([[*X_main(r), max(r["cos"] or [0.0]), float(np.mean(r["cos"] or [0.0]))] for r in R])

    def fit(self, R):
        from sklearn.linear_model import LogisticRegression

        y = [L.index(r["gold"]) for r in R]
        self.m = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced").fit(self.feats(R), y)
        return self

    def predict(self, R):
        return self.m.predict(self.feats(R))


class CosGate:
    """NOT_ENOUGH_INFO when the best passage's cosine to the claim is under ``t``; else the arg-max over S/R (+ offset)."""

    name = "cos gate (max cos < t: N) + S/R offset"

    def fit(self, R):
        import itertools

        from bench_label_rules import GRID, f1

        X, m = np.array([X_main(r) for r in R]), np.array([max(r["cos"] or [0.0]) for r in R])
        y, best = np.array([L.index(r["gold"]) for r in R]), None
        for t, a in itertools.product(np.round(np.arange(0.2, 0.95, 0.02), 2), GRID):
            p = np.where(m < t, 2, np.where(X[:, 0] >= X[:, 1] + a, 0, 1))
            k = (f1(y, p), float(np.mean(p == y)), -abs(a))
            if best is None or k > best[0]:
                best = (k, t, a)
        self.t, self.a = best[1], best[2]
        return self

    def predict(self, R):
        X, m = np.array([X_main(r) for r in R]), np.array([max(r["cos"] or [0.0]) for r in R])
        return np.where(m < self.t, 2, np.where(X[:, 0] >= X[:, 1] + self.a, 0, 1))


class LR3(LRCos):
    name = "logistic (3 logprobs)"

    def feats(self, R):
        return np.array([X_main(r) for r in R])


#: The declared margin (docs/VERDICTS.md): a learned rule must beat the raw arg-max by this much out of fold.
MARGIN = 0.03
RULES_FILE = Path(__file__).resolve().parents[1] / "llama_index_carag" / "data" / "label_rules.json"


def fit_rule(args: argparse.Namespace) -> None:
    """Fit the package's EvidenceLabelRule on the zero-shot tuning rows; keep it only past :data:`MARGIN`.

    The cosines are recomputed exactly as the synthesizer computes them (the retriever's encoder on
    the claim text and the passages' LLM text), grouped 5-fold CV is reported, and the rule fitted on
    every row is written to ``llama_index_carag/data/label_rules.json`` if it passed.
    """
    from bench_label_rules import f1
    from llama_index.core.schema import QueryBundle
    from sklearn.model_selection import GroupKFold

    from llama_index_carag.models.resolve import embed_model_name
    from llama_index_carag.verdicts import VerdictLabel
    from llama_index_carag.verdicts.labels.rules import EvidenceLabelRule, evidence_cosines, rule_features
    from llama_index_carag.verdicts.prompts import evidence_texts
    from research.verdict_bench import _Bench, balanced_subset

    rows = [
        r
        for r in json.loads(Path(args.rows).read_text())
        if r.get("variant") == args.variant and not r.get("content_free")
    ]
    bench = _Bench(FACTVER, Path(args.work), k=6, cache_dir=args.cache_dir, seed=0)
    tune = balanced_subset(bench.tune, args.tune_per_label)
    bench.fit_retriever(tune)
    embed, claims = bench.retriever.embed_model, {c.node_id: c for c in tune}
    X, y, groups = [], [], []
    for r in rows:
        claim = claims[r["claim_id"]]
        nodes = (
            bench.evidence(claim, "annotated")
            if r["evidence"] == "annotated"
            else bench.retriever.retrieve(QueryBundle(claim.get_content(), embedding=claim.embedding))
        )
        cos = evidence_cosines(embed, claim.get_content(), evidence_texts(nodes))
        X.append(rule_features({VerdictLabel(k): v for k, v in r["scores"].items()}, cos))
        y.append(L.index(r["gold"]))
        groups.append(r["claim_id"])
    X, y = np.asarray(X), np.asarray(y)
    raw, rule = np.argmax(X[:, :3], 1), np.empty(len(y), int)
    for tr, te in GroupKFold(5).split(X, y, groups):
        fitted = EvidenceLabelRule.fit(X[tr], [L[i] for i in y[tr]], encoder="-")
        rule[te] = [L.index(label.to_fever()) for label in fitted.predict_features(X[te])]
    f_raw, f_rule = f1(y, raw), f1(y, rule)
    print(f"{len(y)} rows; grouped 5-fold CV: raw arg-max {metrics(y, raw)}; rule {metrics(y, rule)}")
    keep = f_rule >= f_raw + MARGIN
    print(f"rule {'kept' if keep else 'NOT kept'}: macro-F1 {f_rule:.3f} vs raw {f_raw:.3f} (margin {MARGIN})")
    if not keep:
        return
    info = {
        "fitted_on": f"FactVer tuning half, {len(set(groups))} balanced claims x (annotated, default top-6)",
        "prompt": args.variant,
        "cv_macro_F1": round(f_rule, 4),
        "cv_macro_F1_raw_argmax": round(f_raw, 4),
        "cv_accuracy": round(float(np.mean(rule == y)), 4),
        "command": "python benchmarks/bench_prompts.py fit-rule",
    }
    fitted = EvidenceLabelRule.fit(X, [L[i] for i in y], encoder=embed_model_name(embed), **info)
    stored = json.loads(RULES_FILE.read_text()) if RULES_FILE.is_file() else {}
    stored[rows[0]["llm"]] = fitted.to_dict()
    RULES_FILE.write_text(json.dumps(stored, indent=1) + "\n")
    print(f"wrote the rule for {rows[0]['llm']} to {RULES_FILE}")


def analyze(args: argparse.Namespace) -> None:
    from sklearn.model_selection import GroupKFold

    rows = json.loads(Path(args.rows).read_text())
    for variant in VARIANTS:
        free = [r for r in rows if r.get("content_free") and r["variant"] == variant]
        prior = np.mean([X_main(r) for r in free], 0) if free else None
        for src in ("annotated", "retrieved", "both"):
            part = [
                r
                for r in rows
                if not r.get("content_free") and r["variant"] == variant and (src == "both" or r["evidence"] == src)
            ]
            if len(set(r["claim_id"] for r in part)) < 5:
                continue
            y, groups = np.array([L.index(r["gold"]) for r in part]), [r["claim_id"] for r in part]
            print(f"\n== {variant}, {src}, n={len(part)}, {np.mean([r['t_score'] for r in part]):.1f} s/row")
            rules = [Raw(), Offsets(), LR3(), LRCos(), CosGate()] + (
                [ContentFreeCalibration(prior)] if prior is not None else []
            )
            for rule in rules:
                pred = np.empty(len(part), int)
                for tr, te in GroupKFold(5).split(part, y, groups):
                    pred[te] = rule.fit([part[i] for i in tr]).predict([part[i] for i in te])
                print(f"{rule.name:40s} CV {metrics(y, pred)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--llm", default="qwen1.5b")
    c.add_argument("--tune-per-label", type=int, default=12)
    c.add_argument("--cache-dir", default=".cache/eval")
    c.add_argument("--work", default="/tmp/prompt_bench")
    c.add_argument("--out", default="/tmp/prompt_variants.json")
    c.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated prompt variants to score")
    a = sub.add_parser("analyze")
    a.add_argument("rows")
    r = sub.add_parser("fit-rule")
    r.add_argument("rows")
    r.add_argument("--variant", default="zero-shot")
    r.add_argument("--tune-per-label", type=int, default=12)
    r.add_argument("--cache-dir", default=".cache/eval")
    r.add_argument("--work", default="/tmp/prompt_bench")
    f = sub.add_parser("content-free")
    f.add_argument("rows")
    f.add_argument("--llm", default="qwen1.5b")
    args = p.parse_args()
    {"collect": collect, "analyze": analyze, "content-free": content_free, "fit-rule": fit_rule}[args.command](args)


if __name__ == "__main__":
    main()
