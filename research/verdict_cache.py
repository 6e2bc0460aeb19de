"""The verdict benchmark's LLM outputs, collected once into a JSONL cache (two labelled domains).

Every decision rule (:mod:`~llama_index_carag.verdicts.decision`) is compared on the same LLM
outputs: :func:`collect` scores (:func:`collect_domains`: both domains' claims, as the command line
``python -m research.verdict_cache OUT.jsonl`` does), per claim and evidence source,

* ``joint`` — the three label log-likelihoods of the whole-evidence fact-check prompt (what the
  synthesizer scored before: arg-max and the old ``EvidenceLabelRule`` decide from it);
* ``passages`` — the label log-likelihoods of each passage's own stance prompt
  (:func:`~llama_index_carag.verdicts.labels.stance.stance_messages`), raw;
* ``claim_only`` — the stance prompt with the claim and the passage ``"N/A"`` (a per-claim prior);
* ``cosines`` — claim-passage cosines with the retriever's encoder (the old rule's features);
* ``passage_gold`` — each passage's gold stance where the data has one (SciFact's rationales);
* the seconds the passages' prompts took.

A ``{"kind": "prior"}`` line holds each content-free input's label log-likelihoods per model.
Lines are appended as they are produced, so an interrupted run resumes where it stopped.

Domains (:func:`domain_claims`): ``factver`` — a balanced subset of FactVer's report half
(``per_label`` claims of T, F, N, round-robin over the themes, as before); ``scifact`` — the first
``per_label`` test claims of each label in ``verdicts.jsonl`` (file order), evidence = the cited
abstracts (title and text).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["BenchClaim", "domain_claims", "collect", "collect_domains", "read_cache", "SCIFACT_STANCE"]

_FEVER = {"SUPPORTED": "T", "REFUTED": "F", "NOT_ENOUGH_INFO": "N"}
#: SciFact rationale labels as stances (T/F; N for a cited abstract without a rationale).
SCIFACT_STANCE = {"SUPPORT": "T", "CONTRADICT": "F"}


@dataclass
class BenchClaim:
    """One benchmark claim: id, text, gold T/F/N, and its evidence per source (texts, ids, gold stances)."""

    domain: str
    claim_id: str
    claim: str
    gold: str
    evidence: dict[str, tuple[list[str], list[str], Sequence[str | None] | None]] = field(default_factory=dict)
    #: ``"report"`` (a benchmark claim) or ``"archive"`` (an already-checked claim of the same domain, sampled
    #: without looking at labels; label-free calibration reads its scores, never its gold label).
    split: str = "report"


def _scifact_retrieved(claims: list[BenchClaim], folder: Path, k: int, cache_dir: str | None = None) -> None:
    """Add each claim's ``"retrieved"`` evidence: the package default retriever's top-``k`` over the SciFact
    corpus, its corpus claims the train split (new-claims protocol, as ``carag eval --beir``); gold stances
    for the cited abstracts among them (others ``None``: no gold)."""
    import io

    import numpy as np
    from llama_index.core.schema import MetadataMode, QueryBundle

    from llama_index_carag.core.atomic import atomic_write_bytes
    from llama_index_carag.evaluation.new_claims import beir_task, carag_retrievers, prepare_task
    from llama_index_carag.models.resolve import resolve_embed_model

    task, model = beir_task(folder), resolve_embed_model("minilm")
    cached = Path(cache_dir) / f"scifact_minilm_{len(task.evidence)}.npy" if cache_dir else None
    if cached is not None and cached.is_file():
        vectors = np.load(cached)
    else:
        texts = [n.get_content(MetadataMode.EMBED) for n in task.evidence]
        vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=True), np.float32)
        if cached is not None:
            buf = io.BytesIO()
            np.save(buf, vectors)
            atomic_write_bytes(cached, buf.getvalue())
    prepared = prepare_task(task, model, evidence_vectors=vectors, show_progress=True)
    retriever = carag_retrievers(prepared, {"default": "default"}, k=k)["default"]()
    for claim in claims:
        _, cited, stances = claim.evidence["annotated"]
        gold = dict(zip(cited, stances or []))
        hits = retriever.retrieve(QueryBundle(claim.claim))
        ids = [h.node.node_id for h in hits]
        claim.evidence["retrieved"] = ([h.node.get_content() for h in hits], ids, [gold.get(i) for i in ids])


def _scifact_claims(folder: Path, per_label: int, *, split: str = "report") -> list[BenchClaim]:
    """``split="report"``: the first ``per_label`` test claims of each label; ``"archive"``: the first
    ``3 * per_label`` train claims in file order, whatever their labels (an unlabeled archive sample)."""
    from llama_index_carag.evaluation.beir import load_beir

    data = load_beir(folder)
    docs = {d.node_id: d.get_content() for d in data.documents}
    rationales = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            rationales[str(row["_id"])] = row.get("metadata") or {}
    picked: dict[str, list[BenchClaim]] = {"T": [], "F": [], "N": []}
    archive: list[BenchClaim] = []
    with (folder / "verdicts.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            gold = _FEVER[row["label"]]
            if split == "archive":
                if row["split"] != "train" or len(archive) >= 3 * per_label:
                    continue
            elif row["split"] != "test" or len(picked[gold]) >= per_label:
                continue
            ids = [str(i) for i in row["evidence_ids"] if str(i) in docs]
            meta = rationales.get(str(row["claim_id"]), {})
            stances = [SCIFACT_STANCE[meta[i][0]["label"]] if meta.get(i) else "N" for i in ids]
            claim = BenchClaim("scifact", str(row["claim_id"]), row["claim"], gold, split=split)
            claim.evidence["annotated"] = ([docs[i] for i in ids], ids, stances)
            (archive if split == "archive" else picked[gold]).append(claim)
    return archive if split == "archive" else [c for label in "TFN" for c in picked[label]]


def _factver_claims(
    csv_path: Path, per_label: int, k: int, cache_dir: str | None, retrieved: bool, *, split: str = "report"
) -> list[BenchClaim]:
    """``split="report"``: the balanced report-half subset; ``"archive"``: ``3 * per_label`` tuning-half claims
    in a seeded random order, whatever their labels (retrieved among all tuning-half claims, as
    ``carag calibrate-verdicts`` retrieves an index's own claims)."""
    import numpy as np

    from research.verdict_bench import _Bench, balanced_subset

    bench = _Bench(csv_path, k=k, cache_dir=cache_dir, seed=0)
    sources = ["annotated"]
    if split == "archive":
        order = np.random.default_rng(0).permutation(len(bench.tune))
        picked = [bench.tune[i] for i in order[: 3 * per_label]]
        if retrieved:  # as carag calibrate-verdicts does: archive claims retrieved among the corpus claims
            bench.fit_retriever([])
            sources.append("retrieved")
    else:
        picked = balanced_subset(bench.report, per_label)
        if retrieved:
            bench.fit_retriever(balanced_subset(bench.tune, 6))
            sources.append("retrieved")
    out = []
    for c in picked:
        claim = BenchClaim("factver", c.node_id, c.get_content(), c.metadata["label"], split=split)
        for source in sources:
            nodes = bench.evidence(c, source)
            claim.evidence[source] = ([n.node.get_content() for n in nodes], [n.node.node_id for n in nodes], None)
        out.append(claim)
    return out


def domain_claims(
    domain: str,
    path: str | Path,
    per_label: int,
    *,
    k: int = 6,
    cache_dir: str | None = None,
    retrieved: bool = False,
    split: str = "report",
) -> list[BenchClaim]:
    """The benchmark claims of ``domain`` (``"factver"``: the CSV; ``"scifact"``: the BEIR folder).

    ``split="report"``: balanced, ``per_label`` of each label; ``"archive"``: ``3 * per_label`` claims of the
    domain's other split (FactVer tuning half, SciFact train), chosen without their labels.
    """
    if per_label < 1:
        raise ValueError("per_label must be >= 1")
    if split not in ("report", "archive"):
        raise ValueError(f"split must be 'report' or 'archive'; got {split!r}")
    if domain == "factver":
        return _factver_claims(Path(path), per_label, k, cache_dir, retrieved, split=split)
    if domain == "scifact":
        claims = _scifact_claims(Path(path), per_label, split=split)
        if retrieved:
            _scifact_retrieved(claims, Path(path), k, cache_dir)
        return claims
    raise ValueError(f"domain must be 'factver' or 'scifact'; got {domain!r}")


def read_cache(path: str | Path) -> list[dict[str, Any]]:
    """All lines of a cache file (empty if it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _as_dict(logprobs: Any) -> dict[str, float]:
    return {k.value: round(float(v), 4) for k, v in logprobs.items()}


def _prior_row(scorer: Any, model: str) -> dict[str, Any]:
    from llama_index_carag.verdicts.labels.stance import CONTENT_FREE_INPUTS, stance_scores

    inputs = [
        {"claim": c, "passage": p, "logprobs": _as_dict(stance_scores(scorer, c, [p])[0])}
        for c, p in CONTENT_FREE_INPUTS
    ]
    return {"kind": "prior", "model": model, "inputs": inputs}


def _claim_row(
    synth: Any,
    embed: Any,
    claim: BenchClaim,
    source: str,
    model: str,
    known_joint: dict[str, float] | None = None,
    joint_only: bool = False,
) -> dict[str, Any]:
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.verdicts.labels.rules import evidence_cosines
    from llama_index_carag.verdicts.labels.stance import stance_scores

    texts, ids, gold = claim.evidence[source]
    scorer = synth._scorer
    nodes = [NodeWithScore(node=TextNode(id_=i, text=t), score=None) for t, i in zip(texts, ids)]
    t0 = time.perf_counter()
    joint = None
    if nodes and known_joint is None:
        joint = _as_dict(synth.score_labels(claim.claim, nodes).logprobs)
    t1 = time.perf_counter()
    passages = None if joint_only else [_as_dict(s) for s in stance_scores(scorer, claim.claim, texts)]
    t2 = time.perf_counter()
    claim_only = None if joint_only else _as_dict(stance_scores(scorer, claim.claim, ["N/A"])[0])
    return {
        "kind": "claim",
        "model": model,
        "domain": claim.domain,
        "evidence": source,
        "claim_id": claim.claim_id,
        "claim": claim.claim,
        "gold": claim.gold,
        "split": claim.split,
        "passage_ids": ids,
        "passage_gold": gold,
        "joint": known_joint if known_joint is not None else joint,
        "joint_reused": known_joint is not None,
        "passages": passages,
        "claim_only": claim_only,
        "cosines": [round(float(c), 5) for c in evidence_cosines(embed, claim.claim, texts)],
        "seconds_joint": None if known_joint is not None else round(t1 - t0, 2),
        "seconds_passages": None if joint_only else round(t2 - t1, 2),
        "prompt_chars": [len(t) for t in texts],
    }


def collect(
    claims: Iterable[BenchClaim],
    llm: Any,
    embed: Any,
    path: str | Path,
    joints: dict[tuple[str, str, str], dict[str, float]] | None = None,
    joint_only: bool = False,
) -> Path:
    """Score ``claims`` with ``llm`` into the cache at ``path`` (appending; done rows are skipped).

    ``joints``: whole-evidence scores already measured (``(llm, evidence, claim_id)`` keys), reused.
    ``joint_only``: only the whole-evidence prompt (``passages`` and ``claim_only`` are ``null``; the stance
    decisions are then not reported for those rows).
    """
    from llama_index_carag.models.resolve import llm_name
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = llm_name(llm)
    rows = read_cache(path)
    done = {
        (r["model"], r["domain"], r["evidence"], r["claim_id"], r.get("split", "report"))
        for r in rows
        if r["kind"] == "claim"
    }
    synth = FactCheckSynthesizer(llm, label_bias={}, show_ids=False)
    if synth.label_mode != "score":
        raise ValueError(f"The verdict cache needs a label-scoring LLM; {model} is in {synth.label_mode!r} mode.")
    with path.open("a", encoding="utf-8") as fh:
        if not any(r["kind"] == "prior" and r["model"] == model for r in rows):
            fh.write(json.dumps(_prior_row(synth._scorer, model)) + "\n")
            fh.flush()
        claims = list(claims)
        sources = list(dict.fromkeys(s for c in claims for s in c.evidence))  # annotated first: all claims
        for source, claim in ((s, c) for s in sources for c in claims if s in c.evidence):
            if (model, claim.domain, source, claim.claim_id, claim.split) in done:
                continue
            known = (joints or {}).get((model, source, claim.claim_id))
            row = _claim_row(synth, embed, claim, source, model, known, joint_only=joint_only)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            logger.info(
                "%s %s %s: %.1f s",
                claim.domain,
                source,
                claim.claim_id,
                (row["seconds_joint"] or 0.0) + (row["seconds_passages"] or 0.0),
            )
    return path


def collect_domains(
    out: str | Path,
    llm: Any,
    *,
    factver: str | Path | None = None,
    scifact: str | Path | None = None,
    per_label: int = 10,
    retrieved: bool = False,
    cache_dir: str | None = None,
    split: str = "report",
    sources: Iterable[str] | None = None,
    joint_only: bool = False,
    joints: dict[tuple[str, str, str], dict[str, float]] | None = None,
) -> Path:
    """Collect the benchmark claims of both domains into the cache ``out`` (:func:`collect`; resumed).

    Args:
        llm: a label-scoring LLM, or its name for :func:`~llama_index_carag.models.resolve.resolve_llm`.
        factver, scifact: the FactVer CSV and the SciFact BEIR folder; a domain without one is skipped.
        per_label, retrieved, cache_dir, split: as :func:`domain_claims` (``cache_dir``: FactVer's embeddings).
        sources: only these evidence sources (default all), e.g. only ``"retrieved"`` in a second worker.
        joint_only, joints: as :func:`collect`.

    Claims are scored T, F, N in turn, the domains interleaved (an ``"archive"`` split in its own order,
    never sorted by label), so a run cut short stays balanced.
    """
    from llama_index_carag.models.resolve import resolve_embed_model, resolve_llm

    sci = domain_claims("scifact", scifact, per_label, retrieved=retrieved, split=split) if scifact else []
    fv = (
        domain_claims("factver", factver, per_label, cache_dir=cache_dir, retrieved=retrieved, split=split)
        if factver
        else []
    )
    if sources is not None:
        keep = set(sources)
        for c in [*fv, *sci]:
            c.evidence = {k: v for k, v in c.evidence.items() if k in keep}
    order = list if split == "archive" else _round_robin
    if isinstance(llm, str):
        llm = resolve_llm(llm)
    embed = resolve_embed_model("minilm")
    return collect(_interleaved([order(fv), order(sci)]), llm, embed, out, joints=joints, joint_only=joint_only)


def _parser() -> Any:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out")
    p.add_argument("--factver", default="../shared/data/factver/factver_master.csv")
    p.add_argument("--scifact", default="../shared/data/scifact")
    p.add_argument("--per-label", type=int, default=10)
    p.add_argument("--llm", default="qwen1.5b")
    p.add_argument("--retrieved", action="store_true", help="also with the default retriever's top-6")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (1 is faster on a loaded machine)")
    p.add_argument("--domains", default="factver,scifact", help="comma-separated: factver, scifact")
    p.add_argument(
        "--split",
        choices=("report", "archive"),
        default="report",
        help="archive: 3 x per-label already-checked claims of each domain, chosen without labels (calibration)",
    )
    p.add_argument("--sources", default=None, help="comma-separated evidence sources to collect (default all)")
    p.add_argument("--joint-only", action="store_true", help="only the whole-evidence prompt (no per-passage stances)")
    p.add_argument(
        "--joint-from",
        default=None,
        help="verdict benchmark rows CSV (docs/results/verdicts_rows.csv) "
        "whose whole-evidence scores of the same LLM, claim and evidence are reused instead of recomputed",
    )
    return p


def _main(argv: Sequence[str] | None = None) -> None:
    """``python -m research.verdict_cache OUT.jsonl`` (both domains, annotated first)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    llm: Any = args.llm
    if args.threads and args.llm == "qwen1.5b":
        from llama_index_carag.models.files import qwen_gguf_path
        from llama_index_carag.models.llamacpp import load_llamacpp

        llm = load_llamacpp(str(qwen_gguf_path()), context_window=4096, max_new_tokens=128, n_threads=args.threads)
    domains = {d.strip() for d in args.domains.split(",") if d.strip()}
    collect_domains(
        args.out,
        llm,
        factver=args.factver if "factver" in domains else None,
        scifact=args.scifact if "scifact" in domains else None,
        per_label=args.per_label,
        retrieved=args.retrieved,
        cache_dir=args.cache_dir,
        split=args.split,
        sources=args.sources.split(",") if args.sources else None,
        joint_only=args.joint_only,
        joints=_old_joints(args.joint_from) if args.joint_from else {},
    )


def _old_joints(path: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """``(llm, evidence, claim_id) -> whole-evidence label scores`` from an earlier benchmark's rows CSV."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return {
            (r["llm"], r["evidence"], r["claim_id"]): json.loads(r["scores"])
            for r in csv.DictReader(fh)
            if r.get("scores") and r["scores"] != "null"
        }


def _round_robin(claims: Sequence[BenchClaim]) -> list[BenchClaim]:
    """T, F, N, T, F, N, ... so that a run cut short stays balanced."""
    return _interleaved([[c for c in claims if c.gold == label] for label in "TFN"])


def _interleaved(lists: Sequence[Sequence[BenchClaim]]) -> list[BenchClaim]:
    out: list[BenchClaim] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


if __name__ == "__main__":
    _main()
