"""Run RAG, CARAG and CARAG-u on a dataset with one encoder, with sweeps; write CSV + Markdown.

Everything shares one index and one embed model: the evidence is embedded once
(the index), the claims once, and each clustering is fitted once per
(mode, number of clusters) and reused across ``alpha``/``delta`` settings.

Claims are split into a *tuning* half and a *report* half with a fixed seed
(:func:`split_claims`); choose settings on ``--split tune`` and report on
``--split report``.
"""

from __future__ import annotations

import csv
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.settings import PAPER, TUNED, CaragSettings
from research.retrieval_metrics import (
    RetrievalSummary,
    evaluate_retrieval,
    summarize_retrieval,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EvalSetup",
    "RunSpec",
    "split_claims",
    "paper_specs",
    "sweep_specs",
    "run_specs",
    "write_results",
    "generate_explanations",
    "write_explanations",
    "first_per_theme",
    "markdown_table",
]


#: Result-table column of each settings field (fields not listed keep their name; None: not a column).
_COLUMNS = {
    "n_clusters": "t",
    "rerank_candidates": "rerank",
    "random_state": None,
    "covariance_type": None,
    "similarity_top_k": None,
    "hub_k": None,
}


@dataclass(frozen=True, init=False)
class RunSpec:
    """One retrieval configuration: a name, its :class:`CaragSettings`, the sweep it belongs to.

    ``RunSpec(name, settings=None, *, sweep="methods", **options)``: ``options`` are
    :class:`CaragSettings` fields on top of ``settings`` (default the papers');
    ``mode="rag"`` is plain RAG (``alpha=1``, reported as mode ``rag``).
    """

    name: str
    settings: CaragSettings
    sweep: str
    baseline: bool

    def __init__(
        self, name: str, settings: CaragSettings | None = None, *, sweep: str = "methods", **options: Any
    ) -> None:
        baseline = options.get("mode") == "rag"
        if baseline:
            options["mode"] = "unsupervised"
            options.setdefault("alpha", 1.0)
        object.__setattr__(self, "name", name)
        object.__setattr__(
            self, "settings", CaragSettings.from_options(settings if settings is not None else PAPER, **options)
        )
        object.__setattr__(self, "sweep", sweep)
        object.__setattr__(self, "baseline", baseline)

    @property
    def mode(self) -> str:
        """``"rag"`` for the plain-RAG baseline, else the settings' mode."""
        return "rag" if self.baseline else self.settings.mode

    @property
    def dedupe(self) -> bool:
        return self.settings.dedupe

    def params(self) -> dict[str, Any]:
        """The settings as result-table columns."""
        out: dict[str, Any] = {}
        for name, value in self.settings.model_dump().items():
            column = _COLUMNS.get(name, name)
            if column is not None:
                out[column] = value
        out["mode"] = self.mode
        return out


def split_claims(claims: Sequence[Any], seed: int = 0) -> tuple[list[Any], list[Any]]:
    """``(tune, report)``: a fixed random half each (the report half gets the extra claim), corpus order kept."""
    order = np.random.default_rng(seed).permutation(len(claims))
    tune_idx = set(order[: len(claims) // 2].tolist())
    tune = [c for i, c in enumerate(claims) if i in tune_idx]
    report = [c for i, c in enumerate(claims) if i not in tune_idx]
    return tune, report


def paper_specs() -> list[RunSpec]:
    """RAG, CARAG and CARAG-u at the papers' settings (alpha 0.5, delta 0.75, t 10), and the tuned CARAG-u."""
    return [
        RunSpec("RAG", mode="rag", alpha=1.0),
        RunSpec("CARAG", mode="supervised"),
        RunSpec("CARAG-u", mode="unsupervised"),
        RunSpec("CARAG-u (tuned)", TUNED),
    ]


def sweep_specs() -> list[RunSpec]:
    """The ablation the papers list as future work, plus the variants tried to beat RAG."""
    specs: list[RunSpec] = []
    for mode, label in (("unsupervised", "CARAG-u"), ("supervised", "CARAG")):
        for alpha in (1.0, 0.75, 0.5, 0.25):
            specs.append(RunSpec(f"{label} alpha={alpha}", mode=mode, alpha=alpha, sweep="alpha"))
        for delta in (0.4, 0.5, 0.6, 0.75, 0.85):
            specs.append(RunSpec(f"{label} delta={delta}", mode=mode, delta=delta, sweep="delta"))
        for t in (3, 5, 10, 20, "auto"):
            specs.append(RunSpec(f"{label} t={t}", mode=mode, n_clusters=t, sweep="t"))
    for m in (5, 20):
        for alpha in (0.5, 0.75, 0.9):
            specs.append(
                RunSpec(f"CARAG-u top-{m} alpha={alpha}", alpha=alpha, delta=-1.0, soi_top_m=m, sweep="top-m SOI")
            )
            specs.append(
                RunSpec(
                    f"CARAG-u top-{m} rerank-50 alpha={alpha}",
                    alpha=alpha,
                    delta=-1.0,
                    soi_top_m=m,
                    rerank_candidates=50,
                    sweep="re-rank with T",
                )
            )
    for alpha in (0.7, 0.8, 0.9):
        for lam in (0.0, 0.15, 0.25):
            for m in (0, 1, 2):
                if lam == 0 and m == 0:
                    continue
                specs.append(
                    RunSpec(
                        f"CARAG-u rerank-50 alpha={alpha} hub={lam} claims={m}",
                        alpha=alpha,
                        rerank_candidates=50,
                        hub_penalty=lam,
                        soi_claims=m,
                        sweep="related claims + hubness (re-rank)",
                    )
                )
    for alpha in (1.0, 0.9, 0.8):
        for beta in (0.1, 0.15):
            for m in (0, 1):
                for tau in (0.7, 0.8):
                    if alpha == 1.0 and m:
                        continue  # at alpha=1 the SOI (and so its related claims) has no weight
                    specs.append(
                        RunSpec(
                            f"CARAG-u rerank-50 alpha={alpha} contrast={beta} tau={tau} claims={m}",
                            alpha=alpha,
                            rerank_candidates=50,
                            claim_contrast=beta,
                            contrast_threshold=tau,
                            soi_claims=m,
                            sweep="competing-claim contrast (re-rank)",
                        )
                    )
    specs.append(RunSpec("RAG + dedupe", mode="rag", alpha=1.0, dedupe=True, sweep="dedupe"))
    specs.append(RunSpec("CARAG-u + dedupe", dedupe=True, sweep="dedupe"))
    return specs


@dataclass
class EvalSetup:
    """One index, one embed model, claims embedded once, gold sets, themes."""

    corpus: Any
    embed_model: Any
    index: Any
    claims: list[Any]
    evidence_themes: dict[str, str | None]
    gold: dict[str, set[str]]
    gold_texts: dict[str, set[str]]
    embed_name: str = ""
    _retrievers: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    @classmethod
    def prepare(
        cls, corpus: Any, embed_model: Any, *, cache_dir: str | Path | None = None, show_progress: bool = True
    ) -> EvalSetup:
        """Embed evidence (into a FAISS IndexFlatIP index) and claims once; cached by model name if asked."""
        import faiss
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.core.schema import MetadataMode
        from llama_index.vector_stores.faiss import FaissVectorStore

        from llama_index_carag.models.resolve import embed_model_name

        name = embed_model_name(embed_model)
        evidence = [n.model_copy() for n in corpus.evidence_nodes]
        claims = [n.model_copy() for n in corpus.claim_nodes]
        ids = [n.node_id for n in evidence + claims]
        cache = None
        if cache_dir is not None:
            safe = "".join(ch if ch.isalnum() else "_" for ch in name)
            cache = Path(cache_dir) / f"embeddings_{safe}_{len(ids)}.npz"
        vectors = None
        if cache is not None and cache.is_file():
            data = np.load(cache, allow_pickle=False)
            if list(data["ids"]) == ids:
                vectors = data["vectors"]
        if vectors is None:
            texts = [n.get_content(MetadataMode.EMBED) for n in evidence + claims]
            vectors = np.asarray(embed_model.get_text_embedding_batch(texts, show_progress=show_progress), np.float32)
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                np.savez(cache, ids=np.array(ids), vectors=vectors)
        for node, vector in zip(evidence + claims, vectors):
            node.embedding = vector.tolist()
        store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(vectors.shape[1]))
        index = VectorStoreIndex(
            evidence, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed_model
        )
        gold: dict[str, set[str]] = {}
        gold_texts: dict[str, set[str]] = {}
        for n in evidence:
            cid = n.metadata.get("claim_id")
            if cid is not None:
                gold.setdefault(cid, set()).add(n.node_id)
                gold_texts.setdefault(cid, set()).add(n.get_content())
        return cls(
            corpus=corpus,
            embed_model=embed_model,
            index=index,
            claims=claims,
            evidence_themes={n.node_id: n.metadata.get("theme") for n in evidence},
            gold=gold,
            gold_texts=gold_texts,
            embed_name=name,
        )

    def retriever(self, spec: RunSpec, *, k: int, seed: int = 0) -> Any:
        """A fitted retriever for ``spec`` (clustering reused across alpha/delta)."""
        from llama_index_carag.retrieval.retriever import ContextAwareRetriever

        settings = spec.settings.replace(similarity_top_k=k, random_state=seed)
        key = tuple(settings.fit_options().values())
        if key not in self._retrievers:
            fit = PAPER.replace(**settings.fit_options())
            self._retrievers[key] = ContextAwareRetriever.from_index(self.index, fit, claim_nodes=self.claims)
        return self._retrievers[key].with_settings(settings)  # shares the fitted corpus and its tables


def run_specs(
    setup: EvalSetup, specs: Iterable[RunSpec], claims: Sequence[Any], *, k: int = 6, seed: int = 0
) -> list[tuple[RunSpec, RetrievalSummary]]:
    """Evaluate each spec on ``claims``; returns (spec, summary) pairs."""
    out = []
    for spec in specs:
        t0 = time.perf_counter()
        retriever = setup.retriever(spec, k=k, seed=seed)
        results = evaluate_retrieval(
            retriever, claims, setup.evidence_themes, setup.gold, k=k, gold_texts=setup.gold_texts
        )
        summary = summarize_retrieval(spec.name, k, results, **spec.params())
        logger.info("%s: %s (%.1f s)", spec.name, summary.as_row(), time.perf_counter() - t0)
        out.append((spec, summary))
    return out


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, digits: int = 4, missing: str = ""
) -> str:
    """A Markdown table of ``rows`` (dicts) with ``columns``; floats to ``digits`` places, NaN/``None`` as ``missing``."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return missing if math.isnan(v) else f"{v:.{digits}f}"
        return missing if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_results(
    results: list[tuple[RunSpec, RetrievalSummary]], out_dir: str | Path, *, header: str = "", k: int = 6
) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.md`` (one table per sweep, with deltas vs RAG)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    base = next((s for sp, s in results if sp.mode == "rag" and not sp.dedupe), None)
    for spec, summary in results:
        row = {"sweep": spec.sweep, **summary.as_row()}
        if base is not None:
            row["ΔP vs RAG (pts)"] = round(100 * (summary.theme_precision - base.theme_precision), 2)
            row["ΔR vs RAG (pts)"] = round(100 * (summary.recall - base.recall), 2)
        rows.append(row)
    csv_path = out / "results.csv"
    columns = list(dict.fromkeys(c for r in rows for c in r))
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    shown = [
        "method",
        f"theme_precision@{k}",
        f"annotated_recall@{k}",
        "ΔP vs RAG (pts)",
        "ΔR vs RAG (pts)",
        f"text_recall@{k}",
        "MRR",
        "mean_soi_size",
        "empty_soi_rate",
        "median_ms",
    ]
    parts = [header] if header else []
    for sweep in dict.fromkeys(r["sweep"] for r in rows):
        parts.append(
            f"### {sweep}\n\n"
            + markdown_table([r for r in rows if r["sweep"] == sweep], [c for c in shown if c in columns])
        )
    md_path = out / "results.md"
    md_path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return csv_path, md_path


def generate_explanations(
    setup: EvalSetup, specs: Sequence[RunSpec], claims: Sequence[Any], llm: Any, *, k: int = 6, seed: int = 0
) -> dict[str, Any]:
    """Retrieve with each spec and ask ``llm`` for a verdict + explanation per claim.

    Returns ``{"claims": [...], "themes": [...], "gold": [T/F/N...], "methods": {name: [Verdict, ...]}}``.
    """
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    synth = FactCheckSynthesizer(llm)
    out: dict[str, Any] = {
        "claim_ids": [c.node_id for c in claims],
        "claims": [c.get_content() for c in claims],
        "themes": [c.metadata.get("theme") for c in claims],
        "gold": [c.metadata.get("label") for c in claims],
        "methods": {},
    }
    for spec in specs:
        retriever = setup.retriever(spec, k=k, seed=seed)
        verdicts = []
        for claim in claims:
            nodes = retriever.retrieve(QueryBundle(claim.get_content(), embedding=claim.embedding))
            response = synth.synthesize(claim.get_content(), nodes)
            assert response.metadata is not None  # FactCheckSynthesizer always records the verdict there
            verdicts.append(response.metadata["verdict"])
        out["methods"][spec.name] = verdicts
    return out


def _explanation_column(name: str) -> str:
    return {"CARAG-u": "CARAG_U"}.get(name, name)


def write_explanations(explained: dict[str, Any], out: Path) -> Path:
    path = out / "explanations.csv"
    methods = list(explained["methods"])
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "Claim_id",
                "Claim_text",
                "Theme",
                "Label",
                *[_explanation_column(m) for m in methods],
                *[f"{_explanation_column(m)}_verdict" for m in methods],
            ]
        )
        for i, cid in enumerate(explained["claim_ids"]):
            writer.writerow(
                [cid, explained["claims"][i], explained["themes"][i], explained["gold"][i]]
                + [explained["methods"][m][i].explanation for m in methods]
                + [explained["methods"][m][i].label.to_fever() for m in methods]
            )
    return path


def first_per_theme(claims: Sequence[Any], limit: int | None) -> list[Any]:
    """The first ``limit`` claims taken round-robin over themes (all claims when ``limit`` is None).

    FactVer is sorted by theme, so a plain prefix would hold one theme only.
    """
    if limit is None:
        return list(claims)
    by_theme: dict[Any, list[Any]] = {}
    for c in claims:
        by_theme.setdefault(c.metadata.get("theme"), []).append(c)
    queues = list(by_theme.values())
    out: list[Any] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out
