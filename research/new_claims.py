"""The retrieval benchmark protocol: new claims, one encoder, stock baselines in the same run.

A :class:`RetrievalTask` is evidence passages, *corpus claims* (the already-checked claims a
retriever may use: clustering, related claims, claim contrast), *query claims* (never among the
corpus claims) and the gold passages of each query.

- FactVer (:func:`factver_task`): passages de-duplicated by text; claims split in two halves by
  the parity of ``sha256(claim id)``; the report half's claims are the queries and the tuning
  half's the corpus claims (``queries="tune"`` swaps them, for choosing settings).
- BEIR folders (:func:`beir_task`, e.g. SciFact): the test split's queries, the train split's
  queries as corpus claims; ``tune_half=0|1`` splits the train queries in two instead.

:func:`evaluate_methods` runs any LlamaIndex retrievers on a :class:`PreparedTask` (one FAISS
index, one BM25 index, query embeddings computed once and served from a cache so that every
method's latency is its retrieval alone) and scores nDCG@10, recall@6, MRR@10 and, on FactVer,
theme precision@6.
"""

from __future__ import annotations

import hashlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from llama_index_carag.core.validation import normalize_text

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.base_retriever import BaseRetriever

logger = logging.getLogger(__name__)

__all__ = [
    "RetrievalTask",
    "PreparedTask",
    "factver_task",
    "beir_task",
    "prepare_task",
    "stock_retrievers",
    "evaluate_methods",
    "ndcg_at_k",
    "claim_half",
    "CaragMethod",
]

NDCG_K = 10
RECALL_K = 6


@dataclass
class RetrievalTask:
    """One benchmark: evidence, corpus claims, query claims and their gold passages."""

    name: str
    evidence: list[TextNode]
    corpus_claims: list[TextNode]
    queries: list[TextNode]
    gold: dict[str, set[str]]
    evidence_themes: dict[str, str | None] | None = None
    query_themes: dict[str, str | None] | None = None

    def __post_init__(self) -> None:
        overlap = {q.node_id for q in self.queries} & {c.node_id for c in self.corpus_claims}
        if overlap:
            raise ValueError(f"{self.name}: {len(overlap)} query claims are also corpus claims (new-claims protocol).")
        missing = [q.node_id for q in self.queries if not self.gold.get(q.node_id)]
        if missing:
            raise ValueError(f"{self.name}: {len(missing)} query claims have no gold passage (e.g. {missing[0]!r}).")


def claim_half(claim_id: str) -> int:
    """0 (tuning half) or 1 (report half): the parity of ``sha256(claim_id)``."""
    return int(hashlib.sha256(claim_id.encode("utf-8", "surrogatepass")).hexdigest(), 16) % 2


def _claim_node(node_id: str, text: str, theme: str | None = None, links: Iterable[str] | None = None) -> TextNode:
    from llama_index_carag.datasets import LINKS_KEY

    metadata: dict[str, Any] = {} if theme is None else {"theme": theme}
    if links is not None:  # the corpus claim's linked evidence (read only by calibration)
        metadata[LINKS_KEY] = sorted(links)
    return TextNode(
        id_=node_id,
        text=text,
        metadata=metadata,
        excluded_embed_metadata_keys=list(metadata),
        excluded_llm_metadata_keys=list(metadata),
    )


def factver_task(path: Any, *, queries: str = "report") -> RetrievalTask:
    """FactVer under the new-claims protocol (see the module docstring).

    Args:
        path: FactVer's CSV (``load_factver``'s argument).
        queries: ``"report"`` (report-half claims are the queries) or ``"tune"``.
    """
    from llama_index_carag.datasets import CLAIM_KEY, THEME_KEY, load_factver

    if queries not in ("report", "tune"):
        raise ValueError(f"queries must be 'report' or 'tune'; got {queries!r}.")
    corpus = load_factver(path)
    kept: dict[str, TextNode] = {}
    canonical: dict[str, str] = {}
    gold: dict[str, set[str]] = {}
    themes: dict[str, str | None] = {}
    for node in corpus.evidence_nodes:
        key = normalize_text(node.get_content(MetadataMode.NONE))
        if key not in kept:
            kept[key] = node
            themes[node.node_id] = node.metadata.get(THEME_KEY)
        canonical[node.node_id] = kept[key].node_id
        claim = node.metadata.get(CLAIM_KEY)
        if claim is not None:
            gold.setdefault(str(claim), set()).add(kept[key].node_id)
    want = 1 if queries == "report" else 0
    q_nodes, c_nodes = [], []
    for claim in corpus.claim_nodes:
        node = _claim_node(claim.node_id, claim.get_content(MetadataMode.NONE), claim.metadata.get(THEME_KEY))
        if claim_half(claim.node_id) == want:
            if gold.get(claim.node_id):
                q_nodes.append(node)
        else:
            c_nodes.append(
                _claim_node(
                    claim.node_id,
                    claim.get_content(MetadataMode.NONE),
                    claim.metadata.get(THEME_KEY),
                    links=gold.get(claim.node_id, set()),
                )
            )
    return RetrievalTask(
        name=f"FactVer ({queries} half)",
        evidence=list(kept.values()),
        corpus_claims=c_nodes,
        queries=q_nodes,
        gold={q.node_id: gold[q.node_id] for q in q_nodes},
        evidence_themes=themes,
        query_themes={q.node_id: q.metadata.get("theme") for q in q_nodes},
    )


def beir_task(
    folder: Any, *, split: str = "test", claims_split: str = "train", tune_half: int | None = None
) -> RetrievalTask:
    """A BEIR folder under the new-claims protocol.

    Args:
        folder: the BEIR folder (``load_beir``).
        split: queries and gold come from ``qrels/<split>.tsv``.
        claims_split: the corpus claims are this split's queries.
        tune_half: ``0`` or ``1``: ignore ``split``; the queries are the ``claims_split`` queries
            with ``claim_half == tune_half`` and the corpus claims the other half.
    """
    from pathlib import Path

    from research.beir import load_beir

    data = load_beir(folder)
    docs = {d.node_id for d in data.documents}
    if tune_half is None:
        query_ids = sorted(data.split(split))
        claim_ids = sorted(set(data.split(claims_split)) - set(query_ids)) if claims_split in data.qrels else []
        qrels = data.split(split)
        name = f"{Path(data.source).name} {split}"
    else:
        pool = sorted(data.split(claims_split))
        query_ids = [q for q in pool if claim_half(q) == tune_half]
        claim_ids = [q for q in pool if claim_half(q) != tune_half]
        qrels = data.split(claims_split)
        name = f"{Path(data.source).name} {claims_split} half {tune_half}"
    gold = {q: {d for d in qrels[q] if d in docs} for q in query_ids}
    claim_qrels = data.qrels.get(claims_split, {})
    query_ids = [q for q in query_ids if gold[q] and q in data.queries]
    return RetrievalTask(
        name=name,
        evidence=data.documents,
        corpus_claims=[
            _claim_node(f"claim:{q}", data.queries[q], links={d for d in claim_qrels.get(q, {}) if d in docs})
            for q in claim_ids
            if q in data.queries
        ],
        queries=[_claim_node(q, data.queries[q]) for q in query_ids],
        gold={q: gold[q] for q in query_ids},
    )


class CachedQueryEmbedding(BaseEmbedding):
    """Serves precomputed query embeddings (and delegates anything else), so that every method's
    measured latency is its retrieval alone and every method sees the same query vectors."""

    _inner: BaseEmbedding = PrivateAttr()
    _cache: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, inner: BaseEmbedding, cache: Mapping[str, Sequence[float]]) -> None:
        super().__init__(model_name=inner.model_name, embed_batch_size=inner.embed_batch_size)
        self._inner = inner
        self._cache = {k: list(v) for k, v in cache.items()}

    @classmethod
    def class_name(cls) -> str:
        return "CachedQueryEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        hit = self._cache.get(query)
        return list(hit) if hit is not None else self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.get_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._inner.get_text_embedding_batch(texts)


@dataclass
class PreparedTask:
    """A task with its FAISS index, claim embeddings and query-embedding cache built once."""

    task: RetrievalTask
    index: VectorStoreIndex
    embed_model: BaseEmbedding
    corpus_claims: list[TextNode]
    query_embed_ms: float
    extra: dict[str, Any] = field(default_factory=dict)


def prepare_task(
    task: RetrievalTask,
    embed_model: BaseEmbedding,
    *,
    evidence_vectors: np.ndarray | None = None,
    show_progress: bool = False,
) -> PreparedTask:
    """Embed (or take) the evidence vectors, build the FAISS index, embed the claims once.

    Args:
        evidence_vectors: precomputed embeddings of ``task.evidence`` in order, shape ``(n, d)``
            (e.g. from an on-disk cache); embedded here when ``None``.
    """
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    if evidence_vectors is None:
        texts = [n.get_content(MetadataMode.EMBED) for n in task.evidence]
        evidence_vectors = np.asarray(
            embed_model.get_text_embedding_batch(texts, show_progress=show_progress), np.float32
        )
    nodes = [n.model_copy(update={"embedding": v.tolist()}) for n, v in zip(task.evidence, evidence_vectors)]
    cache: dict[str, list[float]] = {}
    times: list[float] = []
    for query in task.queries:  # one at a time, as a user's query is embedded
        t0 = time.perf_counter()
        cache[query.get_content()] = embed_model.get_query_embedding(query.get_content())
        times.append(time.perf_counter() - t0)
    query_ms = statistics.median(times) * 1000 if times else math.nan
    claim_vectors = embed_model.get_text_embedding_batch(
        [c.get_content(MetadataMode.EMBED) for c in task.corpus_claims]
    )
    claims = [c.model_copy(update={"embedding": list(v)}) for c, v in zip(task.corpus_claims, claim_vectors)]
    cached = CachedQueryEmbedding(embed_model, cache)
    store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(evidence_vectors.shape[1]))
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=cached
    )
    return PreparedTask(task=task, index=index, embed_model=cached, corpus_claims=claims, query_embed_ms=query_ms)


def stock_retrievers(prepared: PreparedTask, k: int = NDCG_K) -> dict[str, Callable[[], BaseRetriever]]:
    """The stock LlamaIndex baselines, as factories: dense, BM25 and hybrid RRF (dense + BM25)."""
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
    from llama_index.retrievers.bm25 import BM25Retriever

    from llama_index_carag.ranking.bm25 import import_bm25s

    import_bm25s()  # quietens bm25s's DEBUG logger, which BM25Retriever's import turned on

    def dense() -> BaseRetriever:
        return prepared.index.as_retriever(similarity_top_k=k)

    def bm25() -> BaseRetriever:
        if "bm25" not in prepared.extra:
            prepared.extra["bm25"] = BM25Retriever.from_defaults(nodes=list(prepared.task.evidence), similarity_top_k=k)
        return prepared.extra["bm25"]

    def hybrid() -> BaseRetriever:
        return QueryFusionRetriever(
            [dense(), bm25()],
            mode=FUSION_MODES.RECIPROCAL_RANK,
            num_queries=1,
            llm=MockLLM(),
            similarity_top_k=k,
            use_async=False,
        )

    return {
        "dense (index.as_retriever)": dense,
        "BM25 (BM25Retriever)": bm25,
        "hybrid RRF (QueryFusionRetriever)": hybrid,
    }


def ndcg_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int = NDCG_K) -> float:
    """Binary-gain nDCG@k (duplicated ids count once, at their first rank)."""
    gold = set(gold)
    if not gold:
        return math.nan
    seen: set[str] = set()
    dcg = 0.0
    for rank, node_id in enumerate(retrieved[:k]):
        if node_id in gold and node_id not in seen:
            dcg += 1.0 / math.log2(rank + 2)
        seen.add(node_id)
    ideal = sum(1.0 / math.log2(r + 2) for r in range(min(len(gold), k)))
    return dcg / ideal


def _score_query(
    ids: list[str], gold: set[str], themes: Mapping[str, str | None] | None, theme: str | None
) -> dict[str, float]:
    first = next((r for r, i in enumerate(ids[:NDCG_K]) if i in gold), None)
    row = {
        f"nDCG@{NDCG_K}": ndcg_at_k(ids, gold),
        f"recall@{RECALL_K}": len(set(ids[:RECALL_K]) & gold) / len(gold),
        f"MRR@{NDCG_K}": 0.0 if first is None else 1.0 / (first + 1),
    }
    if themes is not None and theme is not None:
        top = ids[:RECALL_K]
        row[f"theme_precision@{RECALL_K}"] = sum(themes.get(i) == theme for i in top) / RECALL_K if top else 0.0
    return row


def evaluate_methods(
    prepared: PreparedTask,
    methods: Mapping[str, Callable[[], BaseRetriever]],
    *,
    show_progress: bool = False,
) -> list[dict[str, Any]]:
    """Build each method, run every query claim through its public ``retrieve``, score and time it.

    Returns:
        one row per method: ``method``, the metrics (means over queries), ``median_ms`` and
        ``p95_ms`` (retrieval only; the query embedding is served from the cache) and
        ``build_s`` (constructing/fitting the method).
    """
    task = prepared.task
    rows = []
    for name, factory in methods.items():
        t0 = time.perf_counter()
        retriever = factory()
        build_s = time.perf_counter() - t0
        per_query: list[dict[str, float]] = []
        seconds: list[float] = []
        queries: Iterable[TextNode] = task.queries
        if show_progress:
            from tqdm.auto import tqdm

            queries = tqdm(task.queries, desc=name, unit="claim")
        for query in queries:
            t1 = time.perf_counter()
            hits = retriever.retrieve(QueryBundle(query.get_content()))
            seconds.append(time.perf_counter() - t1)
            ids = [h.node.node_id for h in hits]
            theme = None if task.query_themes is None else task.query_themes.get(query.node_id)
            per_query.append(_score_query(ids, task.gold[query.node_id], task.evidence_themes, theme))
        row: dict[str, Any] = {"method": name, "queries": len(per_query)}
        for key in per_query[0] if per_query else ():
            row[key] = round(statistics.fmean(r[key] for r in per_query), 4)
        row["median_ms"] = round(statistics.median(seconds) * 1000, 2) if seconds else math.nan
        row["p95_ms"] = round(float(np.percentile(seconds, 95)) * 1000, 2) if seconds else math.nan
        row["build_s"] = round(build_s, 2)
        rows.append(row)
        logger.info("%s: %s", name, row)
    return rows


@dataclass(frozen=True)
class CaragMethod:
    """A CARAG row of the table: settings (a ``CaragSettings`` or preset name), whether the corpus
    claims are given (``claims=False``: fitted without any), and whether the stage is calibrated on
    them (``from_index(..., calibrate=True)``)."""

    settings: Any
    calibrate: bool = False
    claims: bool = True


def carag_retrievers(
    prepared: PreparedTask, presets: Mapping[str, Any], k: int = NDCG_K
) -> dict[str, Callable[[], BaseRetriever]]:
    """``ContextAwareRetriever`` factories, one per named settings (a ``CaragSettings``, a preset
    name or a :class:`CaragMethod`), fitted on the task's index with its corpus claims (never its
    query claims)."""
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.settings import CaragSettings

    def factory(method: Any) -> Callable[[], BaseRetriever]:
        spec = method if isinstance(method, CaragMethod) else CaragMethod(method)
        resolved = CaragSettings.from_options(spec.settings, similarity_top_k=k)
        claims = (prepared.corpus_claims or None) if spec.claims else None
        if claims is None:
            resolved = resolved.replace(claim_contrast=0.0)

        def build() -> BaseRetriever:
            return ContextAwareRetriever.from_index(
                prepared.index, resolved, claim_nodes=claims, calibrate=spec.calibrate
            )

        return build

    return {name: factory(settings) for name, settings in presets.items()}
