"""The archives of the two labelled domains, each claim with its evidence on each source
(``benchmarks/verdict_evidence.py`` writes them for the verifier's benchmark).

Per domain, the **archive** is the claims a desk has already checked (FactVer: the tuning half of
``split_claims``; SciFact: the train claims of ``verdicts.jsonl``).  Evidence sources:

* ``annotated`` — the claim's linked evidence (at most ``k`` passages); cosines with the encoder;
* ``retrieved`` — the package default retriever's top ``k``.  An archive claim is retrieved as a *new* claim
  would be: the retriever's corpus claims are the archive without the claim's fold (five folds), so neither
  the claim nor its own evidence links are in the retriever's corpus when it is checked.

One encoder for everything (MiniLM); embeddings are cached in ``cache_dir``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

logger = logging.getLogger(__name__)

__all__ = ["ArchiveClaim", "ClaimSignals", "DomainEvidence", "factver_evidence", "scifact_evidence", "FOLDS"]

#: Folds of the archive's leave-claims-out retrieval.
FOLDS = 5
_FEVER = {"SUPPORTED": "T", "REFUTED": "F", "NOT_ENOUGH_INFO": "N"}


@dataclass(frozen=True)
class ClaimSignals:
    """What one claim check has: the claim, its embedding, its passages' texts and their claim cosines."""

    claim: str
    embedding: Sequence[float]
    texts: Sequence[str]
    cosines: Sequence[float]

    @classmethod
    def from_nodes(cls, claim: str, embedding: Sequence[float], nodes: Sequence[Any]) -> ClaimSignals:
        """The signals of a retrieval: ``nodes`` (``NodeWithScore``) as retrieved, cosines from their provenance
        (``claim_similarity``); a node without one gets its cosine from its own embedding, else ``ValueError``."""
        claim_vec = _unit_rows(embedding)[0]
        cosines = []
        for n in nodes:
            node = getattr(n, "node", n)
            info = (node.metadata or {}).get(CARAG_METADATA_KEY) or {}
            if info.get("claim_similarity") is not None:
                cosines.append(float(info["claim_similarity"]))
            elif node.embedding is not None:
                cosines.append(float(_unit_rows(node.embedding)[0] @ claim_vec))
            else:
                raise ValueError(f"Passage {node.node_id!r} has neither a claim cosine nor an embedding.")
        return cls(claim, list(map(float, embedding)), [getattr(n, "node", n).get_content() for n in nodes], cosines)


@dataclass
class ArchiveClaim:
    """One labelled claim: id, text, gold T/F/N and its signals per evidence source."""

    claim_id: str
    claim: str
    gold: str
    signals: dict[str, ClaimSignals] = field(default_factory=dict)


@dataclass
class DomainEvidence:
    """A domain's archive claims (with signals), its passages' texts and its encoder."""

    name: str
    archive: list[ArchiveClaim]
    texts: Mapping[str, str]
    embed_texts: Callable[[Sequence[str]], np.ndarray]
    embed_claim: Callable[[str], np.ndarray]


def _signals(domain: DomainEvidence, claim: str, texts: Sequence[str]) -> ClaimSignals:
    c = domain.embed_claim(claim)
    vecs = domain.embed_texts(texts) if texts else np.zeros((0, len(c)))
    cosines = (vecs @ c).tolist() if len(texts) else []
    return ClaimSignals(claim, c.tolist(), list(texts), cosines)


def _unit_rows(a: Any) -> np.ndarray:
    m = np.asarray(a, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def _embedder(model: Any) -> tuple[Callable[[Sequence[str]], np.ndarray], Callable[[str], np.ndarray]]:
    memo: dict[str, np.ndarray] = {}

    def texts(items: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(items) if t not in memo]
        if new:
            for t, v in zip(new, _unit_rows(model.get_text_embedding_batch(new))):
                memo[t] = v
        return np.vstack([memo[t] for t in items])

    def claim(text: str) -> np.ndarray:
        return texts([text])[0]

    return texts, claim


def _retrieved_signals(
    claims: Sequence[ArchiveClaim], retriever_without: Callable[[set[str]], Any], cached: Path | None
) -> None:
    """Add each claim's ``retrieved`` signals, fold by fold (``retriever_without(ids)``: the retriever whose
    corpus claims are the archive without ``ids``); read from / written to ``cached`` (JSON) when given."""
    from llama_index.core.schema import QueryBundle

    if cached is not None and cached.is_file():
        saved = json.loads(cached.read_text(encoding="utf-8"))
        if [c.claim_id for c in claims] == saved["ids"]:
            for c, s in zip(claims, saved["signals"]):
                c.signals["retrieved"] = ClaimSignals(c.claim, s["embedding"], s["texts"], s["cosines"])
            return

    order = np.random.default_rng(0).permutation(len(claims))
    for fold in range(FOLDS):
        members = [claims[i] for i in order[fold::FOLDS]]
        retriever = retriever_without({c.claim_id for c in members})
        for c in members:
            emb = list(c.signals["annotated"].embedding)
            hits = retriever.retrieve(QueryBundle(c.claim, embedding=emb))
            c.signals["retrieved"] = ClaimSignals.from_nodes(c.claim, emb, hits)
        logger.info("retrieved fold %d/%d (%d claims)", fold + 1, FOLDS, len(members))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        signals = [
            {"embedding": list(s.embedding), "texts": list(s.texts), "cosines": list(s.cosines)}
            for s in (c.signals["retrieved"] for c in claims)
        ]
        cached.write_text(json.dumps({"ids": [c.claim_id for c in claims], "signals": signals}), encoding="utf-8")


def factver_evidence(csv_path: str | Path, *, k: int = 6, cache_dir: str | None = None) -> DomainEvidence:
    """FactVer: the archive is the tuning half (``split_claims``, seed 0)."""
    from research.verdict_bench import _Bench

    bench = _Bench(csv_path, k=k, cache_dir=cache_dir, seed=0)
    texts_fn, claim_fn = _embedder(bench.setup.embed_model)
    texts = {i: n.get_content() for i, n in bench.nodes.items()}
    domain = DomainEvidence("factver", [], texts, texts_fn, claim_fn)
    for c in bench.tune:
        passages = [n.node.get_content() for n in bench.evidence(c, "annotated")]
        item = ArchiveClaim(c.node_id, c.get_content(), str(c.metadata["label"]))
        item.signals["annotated"] = _signals(domain, item.claim, passages)
        domain.archive.append(item)
    by_id = {c.node_id: c for c in bench.tune}

    def without(ids: set[str]) -> Any:
        bench.fit_retriever([by_id[i] for i in ids])
        return bench.retriever

    _retrieved_signals(domain.archive, without, _cached(cache_dir, "factver", k))
    return domain


def _cached(cache_dir: str | None, name: str, k: int) -> Path | None:
    return None if cache_dir is None else Path(cache_dir) / f"archive_retrieved_{name}_k{k}.json"


def scifact_evidence(folder: str | Path, *, k: int = 6, cache_dir: str | None = None) -> DomainEvidence:
    """SciFact: the archive is the train claims of ``verdicts.jsonl`` with their cited abstracts."""
    import dataclasses

    from llama_index.core.schema import MetadataMode

    from llama_index_carag.models.resolve import resolve_embed_model
    from research.new_claims import beir_task, carag_retrievers, prepare_task

    folder = Path(folder)
    task, model = beir_task(folder), resolve_embed_model("minilm")
    cached = Path(cache_dir) / f"scifact_minilm_{len(task.evidence)}.npy" if cache_dir else None
    vectors = np.load(cached) if cached is not None and cached.is_file() else None
    if vectors is None:
        vectors = np.asarray(
            model.get_text_embedding_batch([n.get_content(MetadataMode.EMBED) for n in task.evidence], True),
            np.float32,
        )
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.save(cached, vectors)
    prepared = prepare_task(task, model, evidence_vectors=vectors)
    texts_fn, claim_fn = _embedder(model)
    texts = {n.node_id: n.get_content() for n in task.evidence}
    domain = DomainEvidence("scifact", [], texts, texts_fn, claim_fn)
    with (folder / "verdicts.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            ids = [str(i) for i in row["evidence_ids"] if str(i) in texts][:k]
            if row["split"] != "train" or not ids:
                continue
            item = ArchiveClaim(f"claim:{row['claim_id']}", row["claim"], _FEVER[row["label"]])
            item.signals["annotated"] = _signals(domain, item.claim, [texts[i] for i in ids])
            domain.archive.append(item)

    def without(ids: set[str]) -> Any:
        kept = [c for c in prepared.corpus_claims if c.node_id not in ids]
        return carag_retrievers(dataclasses.replace(prepared, corpus_claims=kept), {"d": "default"}, k=k)["d"]()

    _retrieved_signals(domain.archive, without, _cached(cache_dir, "scifact", k))
    return domain
