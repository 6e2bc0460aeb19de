"""Self-calibration of the re-ranking stage per corpus, from the corpus claims' linked evidence.

When the corpus claims come with the evidence their checkers linked (FactVer's annotations, a BEIR
set's train qrels, a fact-check desk's archive), the stage's weights can be chosen for *this* corpus:

1. **Leave one out** (:class:`LeaveOneOutTerms`): every linked corpus claim is retrieved as a new
   claim against the others — its pool is searched by the retriever's own sources, its SOI never
   holds itself, and its own claim vector counts as "the query itself" in the claim-contrast table
   (cosine 1 > ``contrast_threshold``), like the new-claims protocol.  Each candidate's term values
   (claim and thematic similarity, BM25, claim contrast, …: the stage's scorers) are computed
   **once**; a candidate setting only re-weights them, so scoring it is one product per claim.
2. **A small search space declared in code** (:class:`StageCalibrator`, before any report number was
   looked at): the preset's weight of every registered term with a calibration grid times that grid
   (:class:`~llama_index_carag.ranking.rerank_term.RerankTerm` ``grid``: BM25 and claim contrast
   ``{0, .5, 1, 2}``, capped at the top of their ranges), the thematic weight ``1 - alpha`` times
   ``{0, 1}`` — 32 settings, the pool and the other settings those of the preset.  Each is scored by
   nDCG@10 of every linked claim against its own links.
3. **Shrinkage towards the global preset**: fewer than ``min_claims`` (50) linked claims, or no
   candidate whose mean gain over the preset exceeds ``z`` paired standard errors (``z = 0``: any
   gain), or a selection rule that does not gain out of fold (5-fold cross-validation of the whole
   rule, claims shuffled with a fixed seed): the preset is kept.  Among candidates within ``tie``
   (0.001 nDCG) of the best, the one with the fewest terms wins, then the one closest to the preset —
   a term that does not help gets weight 0.

The result (:class:`~llama_index_carag.retrieval.calibration_result.Calibration`) is the chosen settings plus what backs them (the gains, their
standard error, the cross-validated gain, every candidate's score, the links); the retriever uses its
settings, persists it in its state and writes a summary into ``node.metadata["carag"]["calibration"]``.
Queries cost the same as with any fixed setting (the weights are fitted once).

Supported in CARAG-u (``mode="unsupervised"``): supervised CARAG's SOI is built from a claim's own
annotated evidence, which a left-out claim must not see.  The clustering itself is not refitted per
claim (it uses no labels).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_carag.datasets import LINKS_KEY
from llama_index_carag.ranking.assembly import active_terms, default_sources, settings_scorers, term_sources
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.sources import CandidateSource
from llama_index_carag.ranking.stage import RerankStage
from llama_index_carag.retrieval.calibration_result import (
    THEMATIC_WEIGHT,
    Calibration,
    calibrated_terms,
    calibrated_weights,
)
from llama_index_carag.retrieval.fitted_corpus import FittedCorpus
from llama_index_carag.retrieval.query_plan import plan_query
from llama_index_carag.settings import CaragSettings

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

# LINKS_KEY (:mod:`llama_index_carag.datasets`): the claim-node metadata key of the ids of the evidence passages
# linked to the claim (a list of node ids; the loaders write it).  Links are also read from the evidence side:
# an evidence node whose ``claim_key`` metadata names a corpus claim (what supervised CARAG reads) is linked to it.

#: The calibration scores each candidate by nDCG at this depth.
NDCG_K = 10


# ---------------------------------------------------------------------------------------------- links
def claim_links(
    index: VectorStoreIndex,
    corpus: FittedCorpus,
    claim_nodes: Sequence[BaseNode] | None,
    *,
    links: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, list[str]]:
    """``{claim node id: [evidence id, …]}`` of the corpus claims that have linked evidence in the index.

    Links come from ``links`` (claim node id → evidence ids), from each claim node's
    ``metadata[LINKS_KEY]``, and from evidence nodes whose ``metadata[corpus.claim_key]`` names a
    claim (its ``claim_key`` metadata, or its node id).  Evidence not in the fitted corpus is dropped.

    Raises:
        TypeError: a claim's ``LINKS_KEY`` metadata is not a list of ids.
    """
    known = set(corpus.evidence_ids())
    out: dict[str, set[str]] = {cid: set() for cid in corpus.claim_ids}
    for cid, ids in (links or {}).items():
        if cid in out:
            out[cid].update(str(i) for i in ids)
    claim_of: dict[str, str] = {}
    for node in claim_nodes or []:
        if node.node_id not in out:
            continue
        claim_of[str(node.metadata.get(corpus.claim_key) or node.node_id)] = node.node_id
        claim_of.setdefault(node.node_id, node.node_id)
        value = node.metadata.get(LINKS_KEY)
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise TypeError(
                f"Claim {node.node_id!r}: metadata[{LINKS_KEY!r}] must be a list of evidence node ids; "
                f"got {type(value).__name__}."
            )
        out[node.node_id].update(str(i) for i in value)
    if claim_of and known:
        ids = sorted(known)
        for node_id, node in zip(ids, index.docstore.get_nodes(ids, raise_error=False)):
            value = None if node is None else node.metadata.get(corpus.claim_key)
            target = None if value is None else claim_of.get(str(value))
            if target is not None:
                out[target].add(node_id)
    return {cid: sorted(ids & known) for cid, ids in out.items() if ids & known}


# ------------------------------------------------------------------------------------ per-claim terms
@dataclass
class _ClaimTerms:
    """One left-out claim: its query, its pool's term values and which pool rows are gold."""

    query: RankQuery
    terms: np.ndarray  # (n_scorers, pool size) float64
    known: np.ndarray  # (pool size,) bool
    found_by: dict[str, np.ndarray]  # source name -> (pool size,) bool
    gold: np.ndarray  # (pool size,) bool
    ideal: float  # ideal DCG@k of the claim's links


class LeaveOneOutTerms:
    """The stage's term values for every linked corpus claim queried as a new claim (computed once).

    Args:
        index: the vector index.
        corpus: the fitted corpus (its tables fitted for ``settings``).
        settings: the global preset; its pool, sources and scorers are the ones scored.
        embed_model: the index's query model (used only for claims without a saved vector).
        sources: candidate sources (default: the retriever's defaults for ``settings``).

    Attributes (after :meth:`fit`):
        claim_ids_: the claims scored, length ``m``.
        scorers_: the stage's scorers (their ``weight(settings, query)`` re-weights the terms).
        claims_: per-claim term tables.
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        corpus: FittedCorpus,
        settings: CaragSettings,
        *,
        embed_model: BaseEmbedding | None = None,
        sources: Sequence[CandidateSource] | None = None,
        k: int = NDCG_K,
    ) -> None:
        self.index = index
        self.corpus = corpus
        self.settings = settings
        self.embed_model = embed_model
        self.sources = sources
        self.k = k

    def fit(self, links: Mapping[str, Sequence[str]], *, show_progress: bool = False) -> LeaveOneOutTerms:
        """Search and score every claim of ``links`` (claim node id → its linked evidence ids)."""
        s = self.settings
        if s.rerank_candidates is None:
            raise ValueError("Calibration re-weights the re-ranking terms: the settings need rerank_candidates.")
        for term in active_terms(s):
            if term.leave_one_out_check is not None:
                term.leave_one_out_check(s)
        embed_model = self.embed_model or self.index._embed_model
        sources = (
            list(self.sources)
            if self.sources is not None
            else default_sources(self.index, embed_model, self.corpus, self.corpus.tables, s)
        )
        stage = RerankStage(s, settings_scorers(s, self.corpus.tables, sources))
        self.scorers_ = stage.scorers
        self._sources = sources
        context = self.corpus.context
        rows = {cid: r for r, cid in enumerate(self.corpus.claim_ids)}
        todo = [cid for cid in links if cid in rows]
        claims: Iterable[str] = todo
        if show_progress:
            from tqdm.auto import tqdm

            claims = tqdm(todo, desc="calibration (leave one out)", unit="claim")
        self.claim_ids_: list[str] = []
        self.claims_: list[_ClaimTerms] = []
        for cid in claims:
            vector = np.asarray(self.corpus.claim_vectors[rows[cid]], dtype=np.float32)
            self.claim_ids_.append(cid)
            self.claims_.append(self.claim_terms(context.claim_text(cid), vector, links[cid]))
        return self

    def claim_terms(self, text: str, vector: np.ndarray, gold_ids: Iterable[str]) -> _ClaimTerms:
        """The pool and term values of one query claim (``vector`` its raw embedding, shape ``(d,)``).

        A corpus claim is located in its own cluster and never enters its own SOI (CARAG-u's SOI holds
        evidence and *other* claims); its own vector is "the query itself" in the contrast table.
        """
        s, context, sources = self.settings, self.corpus.context, self._sources
        plan = plan_query(s, context, text, np.asarray(vector, dtype=np.float32).tolist())
        plan.n = max(int(s.rerank_candidates or 0), s.similarity_top_k)  # the pool of every candidate
        found: list[list[str]] = [
            src.search_ids(plan.request, plan.n) if hasattr(src, "search_ids") else _hit_ids(src, plan)
            for src in sources
        ]
        ids = [i for hits in found for i in hits]
        pool = CandidatePool.from_ids(ids, plan.query.unit, context.vectors_and_clusters, _no_nodes)
        terms = np.zeros((len(self.scorers_), len(pool)), dtype=np.float64)
        for j, scorer in enumerate(self.scorers_):
            terms[j] = np.asarray(scorer.scores(pool, plan.query), dtype=np.float64)
        position = {node_id: r for r, node_id in enumerate(pool.ids)}
        found_by: dict[str, np.ndarray] = {}
        for src, hits in zip(sources, found):
            mask = found_by.setdefault(src.name, np.zeros(len(pool), dtype=bool))
            mask[[position[i] for i in hits]] = True
        gold_set = set(gold_ids)
        gold = np.array([i in gold_set for i in pool.ids], dtype=bool)
        ideal = float(sum(1.0 / math.log2(r + 2) for r in range(min(len(gold_set), self.k))))
        return _ClaimTerms(plan.query, terms, pool.known, found_by, gold, ideal)

    def ndcg(self, candidates: Sequence[CaragSettings]) -> np.ndarray:
        """nDCG@k of every claim under every candidate, shape ``(m, len(candidates))``.

        A candidate's pool is the rows found by the sources it would use (those of the tables of the terms it
        switches on: BM25's only when its ``lexical_weight > 0``), ranked by ``sum(weight * term)`` exactly as
        the stage ranks them.
        """
        uses = [self._source_names(c) for c in candidates]
        discount = 1.0 / np.log2(np.arange(self.k) + 2.0)
        out = np.zeros((len(self.claims_), len(candidates)), dtype=np.float64)
        for i, claim in enumerate(self.claims_):
            weights = np.array(
                [[scorer.weight(c, claim.query) for scorer in self.scorers_] for c in candidates], dtype=np.float64
            )
            totals = weights @ claim.terms  # (c, pool)
            for ci, names in enumerate(uses):
                in_pool = np.zeros(claim.terms.shape[1], dtype=bool)
                for name in names:
                    in_pool |= claim.found_by.get(name, False)
                total = np.where(in_pool & claim.known, totals[ci], -np.inf)
                order = np.argsort(-total, kind="stable")[: self.k]
                order = order[np.isfinite(total[order])]
                dcg = float((claim.gold[order] * discount[: len(order)]).sum())
                out[i, ci] = dcg / claim.ideal if claim.ideal > 0 else 0.0
        return out

    def _source_names(self, candidate: CaragSettings) -> set[str]:
        """The sources ``candidate`` searches: the dense one and those of the tables it uses."""
        return {"dense"} | {src.name for src in term_sources(candidate, self.corpus.tables, self.corpus)}


def _no_nodes(ids: list[str]) -> list[BaseNode | None]:
    return [None] * len(ids)


def _hit_ids(source: CandidateSource, plan: Any) -> list[str]:
    return [h.node.node_id for h in source.search(plan.request, plan.n)]


# ------------------------------------------------------------------------------------------ the choice
class StageCalibrator:
    """Chooses the stage's weights from leave-one-out nDCG@10 (the rule in the module docstring).

    The search space and the rule are declared here; ``z`` and ``min_claims`` were chosen on the tuning sets only
    (FactVer's tuning half, SciFact's two train halves; docs/RESULTS.md §0.5).

    Args:
        grids: ``{term name: multiples of the preset's weight tried}`` (capped at the top of the weight's range),
            for the calibrated terms (those with a ``grid``); a term not named here uses its own ``grid``.
        thematic_factors: multiples of the preset's thematic weight ``1 - alpha`` tried.
        min_claims: fewer linked claims keep the preset.
        z: a candidate must beat the preset by ``z`` paired standard errors of its mean gain.
        tie: candidates within ``tie`` nDCG of the best count as tied; the one with fewest terms wins,
            then the one closest to the preset.
        folds: folds of the cross-validation of the rule (its out-of-fold gain must be > 0).
        seed: shuffles the claims into folds.

    Attributes (after :meth:`fit`):
        calibration_: the :class:`Calibration`.
        scores_: nDCG@10 per claim and candidate, shape ``(m, n_candidates)``.
        candidates_: the candidate settings (the preset first).
    """

    def __init__(
        self,
        *,
        grids: Mapping[str, Sequence[float]] | None = None,
        thematic_factors: Sequence[float] = (0.0, 1.0),
        min_claims: int = 50,
        z: float = 0.0,
        tie: float = 0.001,
        folds: int = 5,
        seed: int = 0,
    ) -> None:
        self.grids = grids
        self.thematic_factors = tuple(thematic_factors)
        self.min_claims = min_claims
        self.z = z
        self.tie = tie
        self.folds = folds
        self.seed = seed

    def candidate_space(self, base: CaragSettings) -> tuple[list[CaragSettings], list[dict[str, float]]]:
        """``(settings, factors)`` of every candidate, the preset first (duplicates removed).

        The grid is enumerated with the thematic factor varying fastest, then the calibrated terms in
        registry order (the last registered varies slowest); ``factors`` are keyed by weight name and
        ``"thematic"``.
        """
        grids = dict(self.grids or {})
        terms = calibrated_terms()
        unknown = sorted(set(grids) - {t.name for t in terms})
        if unknown:
            raise ValueError(f"grids names no calibrated term: {unknown} (calibrated: {[t.name for t in terms]}).")
        axes = [tuple(self.thematic_factors)] + [tuple(grids.get(t.name, t.grid)) for t in terms]
        names = ["thematic"] + [t.weight_name for t in terms]
        out: list[CaragSettings] = [base]
        factors: list[dict[str, float]] = [dict.fromkeys(reversed(names), 1.0)]
        seen = {_weights_key(base)}
        for combo in itertools.product(*reversed(axes)):
            picked = dict(zip(reversed(names), combo))
            cand = base.replace(**{THEMATIC_WEIGHT: 1.0 - (1.0 - base.alpha) * picked["thematic"]})
            for term in terms:
                cand = term.with_weight(cand, term.weight(base) * picked[term.weight_name])
            key = _weights_key(cand)
            if key not in seen:
                seen.add(key)
                out.append(cand)
                factors.append(picked)
        return out, factors

    def fit(
        self, terms: LeaveOneOutTerms, base: CaragSettings, *, links: Mapping[str, Sequence[str]]
    ) -> StageCalibrator:
        """Score every candidate on the left-out claims and choose (``terms`` fitted on ``links``)."""
        t0 = time.perf_counter()
        candidates, factors = self.candidate_space(base)
        n = len(terms.claims_)
        scores = terms.ndcg(candidates) if n else np.zeros((0, len(candidates)))
        self.candidates_, self.scores_ = candidates, scores
        if n < self.min_claims:
            choice, reason = 0, f"too few linked claims ({n} < {self.min_claims}): the global preset"
            cv_gain = 0.0
        else:
            choice = self._choose(scores, candidates)
            cv_gain = self._cv_gain(scores, candidates)
            if choice == 0:
                reason = "no candidate beats the global preset by z standard errors: the global preset"
            elif cv_gain <= 0:
                reason = f"the rule does not gain out of fold (cv gain {cv_gain:+.4f}): the global preset"
                choice = 0
            else:
                reason = "calibrated"
        gains = scores - scores[:, :1] if n else scores
        rows = []
        for c, (cand, fac) in enumerate(zip(candidates, factors)):
            rows.append(
                {
                    "factors": fac,
                    "weights": calibrated_weights(cand),
                    "ndcg": round(float(scores[:, c].mean()), 5) if n else None,
                    "gain": round(float(gains[:, c].mean()), 5) if n else None,
                    "se": round(_se(gains[:, c]), 5) if n else None,
                }
            )
        self.calibration_ = Calibration(
            base=base,
            settings=candidates[choice],
            n_claims=n,
            base_ndcg=float(scores[:, 0].mean()) if n else math.nan,
            ndcg=float(scores[:, choice].mean()) if n else math.nan,
            gain=float(gains[:, choice].mean()) if n else 0.0,
            se=_se(gains[:, choice]) if n else 0.0,
            cv_gain=float(cv_gain),
            reason=reason,
            candidates=rows,
            links={k: list(v) for k, v in links.items()},
            seconds=time.perf_counter() - t0,
        )
        return self

    def _choose(self, scores: np.ndarray, candidates: Sequence[CaragSettings]) -> int:
        """The rule on the claims of ``scores`` (rows): the index of the chosen candidate (0 = the preset)."""
        gains = scores - scores[:, :1]
        mean = gains.mean(axis=0)
        se = np.array([_se(gains[:, c]) for c in range(gains.shape[1])])
        qualified = [0] + [
            c for c in range(1, len(candidates)) if mean[c] > self.z * se[c] or (se[c] == 0 and mean[c] >= 0)
        ]
        best = max(mean[c] for c in qualified)
        tied = [c for c in qualified if mean[c] >= best - self.tie]
        base = candidates[0]
        return min(tied, key=lambda c: (_n_terms(candidates[c]), _distance(candidates[c], base), c))

    def _cv_gain(self, scores: np.ndarray, candidates: Sequence[CaragSettings]) -> float:
        n = scores.shape[0]
        folds = max(2, min(self.folds, n))
        order = np.random.default_rng(self.seed).permutation(n)
        held = np.zeros(n, dtype=np.float64)
        for f in range(folds):
            test = order[f::folds]
            train = np.setdiff1d(order, test)
            c = self._choose(scores[train], candidates)
            held[test] = scores[test, c] - scores[test, 0]
        return float(held.mean())


def _se(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def _weights_key(s: CaragSettings) -> tuple[float, ...]:
    return tuple(round(value, 9) for value in calibrated_weights(s).values())


def _n_terms(s: CaragSettings) -> int:
    """The terms on besides the claim similarity: the thematic one (``alpha < 1``) and the active registered ones."""
    return int(s.alpha < 1.0) + len(active_terms(s))


def _distance(s: CaragSettings, base: CaragSettings) -> float:
    mine, theirs = calibrated_weights(s), calibrated_weights(base)
    return sum(abs(mine[name] - theirs.get(name, 0.0)) for name in mine)


# ----------------------------------------------------------------------------------------- one call
def calibrate_corpus(
    index: VectorStoreIndex,
    corpus: FittedCorpus,
    base: CaragSettings,
    *,
    claim_nodes: Sequence[BaseNode] | None = None,
    links: Mapping[str, Iterable[str]] | None = None,
    embed_model: BaseEmbedding | None = None,
    calibrator: StageCalibrator | None = None,
    show_progress: bool = False,
) -> Calibration:
    """Calibrate the stage's weights on ``corpus`` from its claims' links, starting from ``base``.

    Without linked claims (or with fewer than ``min_claims``) the result keeps ``base``.

    Raises:
        ValueError: supervised mode (a left-out claim would see its own annotated evidence), or
            settings without a re-ranking pool.
    """
    if corpus.context.mode != "unsupervised":
        raise ValueError(
            "Calibration is available in CARAG-u (mode='unsupervised'): supervised CARAG builds a claim's SOI "
            "from its own annotated evidence, which a left-out claim must not see."
        )
    t0 = time.perf_counter()
    found = claim_links(index, corpus, claim_nodes, links=links)
    corpus.fit_tables(base)  # the preset's tables (a refit of calibrated settings may lack some)
    terms = LeaveOneOutTerms(index, corpus, base, embed_model=embed_model).fit(found, show_progress=show_progress)
    chooser = (calibrator or StageCalibrator()).fit(terms, base, links=found)
    result = chooser.calibration_
    result.seconds = time.perf_counter() - t0
    logger.info(
        "Calibration on %d linked claims: %s (LOO nDCG@10 %.4f -> %.4f, gain %+.4f ± %.4f, cv gain %+.4f) in %.2f s.",
        result.n_claims,
        result.weights,
        result.base_ndcg,
        result.ndcg,
        result.gain,
        result.se,
        result.cv_gain,
        result.seconds,
    )
    return result
