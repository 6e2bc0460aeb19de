"""The Subset of Interest (SOI) of a claim, and the two ways to build it.

The SOI is the part of a claim's thematic cluster that is close to the claim
(cosine similarity above ``delta``).  Its items' mean embedding is the
thematic embedding ``T`` that CARAG blends into the retrieval query.

``min_size`` keeps the SOI from being empty when nothing passes ``delta``: the
``min_size`` items of the cluster most similar to the claim are kept instead
(``0``: the papers' rule, ``delta`` alone).  A count does not depend on the
encoder's cosine scale, which a fixed ``delta`` does: a new claim's cosines to its
cluster are often all below the papers' 0.75 (MiniLM's more than mpnet's).

* :func:`build_supervised_soi` (CARAG): from the claim's cluster *within its
  theme*, the claim's annotated evidence, the other claims ("related claims")
  and the annotated evidence of those related claims.
* :func:`build_unsupervised_soi` (CARAG-u, Algorithm 1 of the CARAG-u paper):
  every evidence passage of the claim's cluster, no labels used.

Both are pure functions of the cluster's members (:class:`ClusterMembers`) and
the claim vector; the clustering itself lives in
:mod:`llama_index_carag.core.clustering` and the bookkeeping that finds a claim's
cluster in :mod:`llama_index_carag.core.context`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from llama_index_carag.core.vectors import as_vector, cosine_similarities, thematic_embedding

logger = logging.getLogger(__name__)

Mode = Literal["supervised", "unsupervised"]

#: The SOI's list-valued keys, in the papers' order.
SOI_LIST_KEYS = (
    "annotated_evidences",
    "related_claims",
    "thematic_cluster_evidences",
    "refined_cluster_evidences",
)


@dataclass(frozen=True)
class SOIItem:
    """One member of an SOI: node id, text, cosine similarity to the claim, and for
    evidence the claim it is annotated for (``None`` when unknown/unsupervised)."""

    id: str
    text: str
    similarity: float
    claim_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "text": self.text}
        if self.claim_id is not None:
            out["claim_id"] = self.claim_id
        return out


@dataclass
class SubsetOfInterest:
    """A claim's Subset of Interest, with the papers' keys.

    Attributes:
        claim_id: id of the claim when it is a corpus claim, else ``None``.
        claim: the claim text (the query).
        annotated_evidences: (CARAG) the claim's own annotated evidence in its cluster.
        related_claims: (CARAG) other claims of the cluster.
        thematic_cluster_evidences: (CARAG) annotated evidence of the related claims.
        refined_cluster_evidences: (CARAG-u) evidence of the cluster.
        similarities: item id → cosine similarity to the claim.
        mode: ``"supervised"`` (CARAG) or ``"unsupervised"`` (CARAG-u).
        delta: the similarity threshold used (items kept have similarity ``> delta``).
        min_size: the fewest items kept when the cluster has them (the most similar, below ``delta`` if need be;
            ``0``: ``delta`` alone, as in the papers).
        filled: how many items ``min_size`` added below ``delta`` (they explain; the thematic term's weight in
            ranking is ``(1 - alpha)`` times the share of the other items).
        cluster: the claim's cluster (within ``theme`` for CARAG).
        theme: the claim's theme (CARAG), else ``None``.
        cluster_size: number of items in the cluster before the ``delta`` filter.
        thematic_embedding: ``T``, mean of the items' unit embeddings, shape ``(d,)``,
            or ``None`` when the SOI is empty.  Not part of :meth:`to_dict`.
    """

    claim_id: str | None
    claim: str
    annotated_evidences: list[SOIItem] = field(default_factory=list)
    related_claims: list[SOIItem] = field(default_factory=list)
    thematic_cluster_evidences: list[SOIItem] = field(default_factory=list)
    refined_cluster_evidences: list[SOIItem] = field(default_factory=list)
    similarities: dict[str, float] = field(default_factory=dict)
    mode: Mode = "unsupervised"
    delta: float = 0.75
    cluster: int | None = None
    theme: str | None = None
    cluster_size: int = 0
    min_size: int = 0
    filled: int = 0
    thematic_embedding: np.ndarray | None = field(default=None, repr=False, compare=False)

    def items(self) -> Iterator[SOIItem]:
        """All items, in key order (annotated, related claims, thematic, refined)."""
        for key in SOI_LIST_KEYS:
            yield from getattr(self, key)

    @property
    def item_ids(self) -> list[str]:
        """Ids of all items, in key order."""
        return [item.id for item in self.items()]

    def __len__(self) -> int:
        return sum(len(getattr(self, key)) for key in SOI_LIST_KEYS)

    @property
    def threshold(self) -> float | None:
        """The lowest cosine kept (below ``delta`` when ``min_size`` widened the SOI); ``None`` when empty."""
        return min(self.similarities.values(), default=None)

    @property
    def is_empty(self) -> bool:
        """True when no item passed the threshold (retrieval then falls back to the claim vector)."""
        return len(self) == 0

    def kinds(self) -> dict[str, str]:
        """``{item id: SOI key}`` for all items (one pass; use it for many lookups)."""
        return {item.id: key for key in SOI_LIST_KEYS for item in getattr(self, key)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with the papers' keys plus ``mode``, ``delta``, ``min_size``, ``threshold`` (the lowest
        cosine kept), ``cluster``, ``theme``, ``cluster_size``."""
        out: dict[str, Any] = {"claim_id": self.claim_id, "claim": self.claim}
        for key in SOI_LIST_KEYS:
            out[key] = [item.to_dict() for item in getattr(self, key)]
        out["similarities"] = {k: float(v) for k, v in self.similarities.items()}
        out.update(
            mode=self.mode,
            delta=float(self.delta),
            min_size=int(self.min_size),
            filled=int(self.filled),
            threshold=None if (low := self.threshold) is None else float(low),
            cluster=None if self.cluster is None else int(self.cluster),
            theme=self.theme,
            cluster_size=int(self.cluster_size),
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubsetOfInterest:
        """Inverse of :meth:`to_dict` (the thematic embedding is not restored).

        Raises:
            ValueError: a required key is missing or an item lacks ``id``/``text``.
        """
        if "claim" not in data:
            raise ValueError("An SOI dict needs at least the key 'claim'.")
        sims = {str(k): float(v) for k, v in (data.get("similarities") or {}).items()}
        lists: dict[str, Any] = {}
        for key in SOI_LIST_KEYS:
            items = []
            for raw in data.get(key) or []:
                if not isinstance(raw, Mapping) or "id" not in raw or "text" not in raw:
                    raise ValueError(f"Every item of '{key}' needs 'id' and 'text'; got {raw!r}.")
                item_id = str(raw["id"])
                items.append(SOIItem(item_id, str(raw["text"]), sims.get(item_id, float("nan")), raw.get("claim_id")))
            lists[key] = items
        mode = data.get(
            "mode", "supervised" if lists["annotated_evidences"] or lists["related_claims"] else "unsupervised"
        )
        if mode not in ("supervised", "unsupervised"):
            raise ValueError(f"Unknown SOI mode {mode!r}.")
        return cls(
            claim_id=data.get("claim_id"),
            claim=str(data["claim"]),
            similarities=sims,
            mode=mode,
            delta=float(data.get("delta", 0.75)),
            min_size=int(data.get("min_size", 0)),
            filled=int(data.get("filled", 0)),
            cluster=None if data.get("cluster") is None else int(data["cluster"]),
            theme=data.get("theme"),
            cluster_size=int(data.get("cluster_size", 0)),
            **lists,
        )


@dataclass(frozen=True)
class ClusterMembers:
    """The members of one cluster, as the SOI builders need them.

    Attributes:
        ids: node ids, length ``m``.
        texts: their texts, length ``m`` (any indexable sequence; may be lazy), or
            ``None`` to build an SOI without texts (items get ``""``; the fast path
            used during retrieval, where only ids and vectors matter).
        unit: their L2-normalised embeddings, shape ``(m, d)``.
        is_claim: shape ``(m,)`` bool, True for claims, False for evidence.
        claim_of: for evidence, the id of the claim it is annotated for (or
            ``None``); for claims, their own claim id.  Length ``m``.
        live: shape ``(m,)`` bool, False for rows a delete marked dead (never part of an SOI, not counted
            in the cluster's size), or ``None``: every row is live.
    """

    ids: Sequence[str]
    texts: Sequence[str] | None
    unit: np.ndarray
    is_claim: np.ndarray
    claim_of: Sequence[str | None]
    live: np.ndarray | None = None

    def __post_init__(self) -> None:
        m = len(self.ids)
        if self.unit.ndim != 2 or self.unit.shape[0] != m or len(self.is_claim) != m or len(self.claim_of) != m:
            raise ValueError("ClusterMembers fields must all describe the same m items.")
        if self.live is not None and len(self.live) != m:
            raise ValueError("ClusterMembers.live must have one flag per item.")

    def alive(self, mask: np.ndarray) -> np.ndarray:
        """``mask`` restricted to the live rows."""
        return mask if self.live is None else mask & self.live


def _items(members: ClusterMembers, rows: np.ndarray, sims: np.ndarray) -> list[SOIItem]:
    texts = members.texts
    return [
        SOIItem(str(members.ids[r]), "" if texts is None else str(texts[r]), float(sims[r]), members.claim_of[r])
        for r in rows
    ]


@dataclass(frozen=True)
class SOICore:
    """An SOI as row indices into its :class:`ClusterMembers` (no per-item objects).

    What retrieval needs on its hot path; :func:`build_unsupervised_soi` and
    :func:`build_supervised_soi` turn it into a :class:`SubsetOfInterest`.

    Attributes:
        rows: SOI key → row indices, each sorted by decreasing similarity.
        sims: cosine similarity of every member to the claim, shape ``(m,)``.
        thematic_embedding: ``T`` (mean unit embedding of all kept rows) or ``None``.
        cluster_size: items of the cluster before the ``delta`` filter (claim excluded).
        filled: rows kept only because of ``min_size`` (their cosine is not above ``delta``).
    """

    rows: dict[str, np.ndarray]
    sims: np.ndarray
    thematic_embedding: np.ndarray | None
    cluster_size: int
    filled: int = 0

    def __len__(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def kinds(self, members: ClusterMembers) -> dict[str, str]:
        """``{item id: SOI key}`` for the kept rows."""
        return {str(members.ids[r]): key for key, rows in self.rows.items() for r in rows.tolist()}


def check_soi_query(claim_vector: Any, dim: int | None, delta: Any, top_m: Any, min_size: Any = 0) -> np.ndarray:
    """The claim vector of an SOI query as a finite, non-zero float32 vector of dimension ``dim`` (any, if
    ``None``), once ``delta`` (a cosine), ``top_m`` (``None`` or a positive integer) and ``min_size`` (an
    integer ``>= 0``) are checked."""
    from llama_index_carag.core.validation import check_count, check_delta, check_top_k

    check_delta(delta)
    if top_m is not None:
        check_top_k(top_m, "top_m")
    check_count(min_size, "min_size")
    q = as_vector(claim_vector, dim=dim, name="claim vector")
    if not np.any(q):
        raise ValueError("The claim vector is all zeros; cosine similarity is undefined.")
    return q


def _check_inputs(
    claim_vector: np.ndarray, members: ClusterMembers, delta: float, top_m: int | None, min_size: int
) -> np.ndarray:
    dim = members.unit.shape[1] if members.unit.shape[0] else None
    return check_soi_query(claim_vector, dim, delta, top_m, min_size)


def _passing(sims: np.ndarray, eligible: np.ndarray, delta: float, min_size: int) -> np.ndarray:
    """Which rows stay: eligible rows above ``delta``, or the ``min_size`` most similar eligible rows when fewer
    pass (ties broken by row order)."""
    passes = eligible & (sims > delta)
    if min_size <= 0 or int(passes.sum()) >= min_size:
        return passes
    out = np.zeros(len(sims), dtype=bool)
    out[most_similar(sims, np.flatnonzero(eligible), min_size)] = True
    return out


def most_similar(sims: np.ndarray, rows: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` of ``rows`` (ascending) with the highest ``sims``, ties broken by row order: the first ``m`` of
    a stable sort by decreasing similarity, as a set (ascending), found by a partition (O(len(rows)))."""
    if m >= rows.size:
        return rows
    values = sims[rows]
    cut = -np.partition(-values, m - 1)[m - 1]  # the m-th highest similarity
    above = np.flatnonzero(values > cut)
    tied = np.flatnonzero(values == cut)[: m - above.size]  # the first in row order, as a stable sort keeps
    return rows[np.union1d(above, tied)]


def _core(
    rows: dict[str, np.ndarray], sims: np.ndarray, members: ClusterMembers, cluster_size: int, filled: int = 0
) -> SOICore:
    kept = np.concatenate([r for r in rows.values()]) if rows else np.zeros(0, dtype=np.int64)
    return SOICore(rows, sims, thematic_embedding(members.unit[kept]), cluster_size, filled)


def _filled(sims: np.ndarray, rows: Sequence[np.ndarray], delta: float, min_size: int) -> int:
    """How many of ``rows`` are kept only because of ``min_size`` (cosine not above ``delta``)."""
    return sum(int((sims[r] <= delta).sum()) for r in rows) if min_size > 0 else 0


def unsupervised_core(
    claim_vector: np.ndarray,
    members: ClusterMembers,
    delta: float,
    *,
    claim_id: str | None = None,
    top_m: int | None = None,
    min_size: int = 0,
    n_related_claims: int = 0,
    unit: bool = False,
) -> SOICore:
    """The rows of CARAG-u's SOI (see :func:`build_unsupervised_soi` for the rules).

    ``unit=True``: ``claim_vector`` is a checked unit vector and ``delta``/``top_m``/``min_size`` are valid.
    """
    if not unit:
        claim_vector = _check_inputs(claim_vector, members, delta, top_m, min_size)
    sims = cosine_similarities(claim_vector, members.unit, normalized=unit)
    is_claim = np.asarray(members.is_claim, dtype=bool)
    evidence = members.alive(~is_claim)
    keep = np.flatnonzero(_passing(sims, evidence, delta, min_size))
    keep = keep[np.argsort(-sims[keep], kind="stable")]
    if top_m is not None:
        keep = keep[:top_m]
    related = np.zeros(0, dtype=np.int64)
    if n_related_claims > 0:
        claim_of = np.asarray(members.claim_of, dtype=object)
        others = members.alive(is_claim & ((claim_of != claim_id) if claim_id is not None else True))
        related = np.flatnonzero(others)
        related = related[np.argsort(-sims[related], kind="stable")][:n_related_claims]
    rows = {"refined_cluster_evidences": keep, "related_claims": related}
    return _core(rows, sims, members, int(evidence.sum()), _filled(sims, [keep], delta, min_size))


def supervised_core(
    claim_vector: np.ndarray,
    members: ClusterMembers,
    delta: float,
    *,
    claim_id: str | None = None,
    top_m: int | None = None,
    min_size: int = 0,
    unit: bool = False,
) -> SOICore:
    """The rows of CARAG's SOI (see :func:`build_supervised_soi` for the rules; ``unit`` as in
    :func:`unsupervised_core`)."""
    if not unit:
        claim_vector = _check_inputs(claim_vector, members, delta, top_m, min_size)
    sims = cosine_similarities(claim_vector, members.unit, normalized=unit)
    is_claim = np.asarray(members.is_claim, dtype=bool)
    claim_of = np.asarray(members.claim_of, dtype=object)
    is_self = is_claim & (claim_of == claim_id) if claim_id is not None else np.zeros(len(is_claim), dtype=bool)
    is_self = members.alive(is_self)
    related_mask = members.alive(is_claim & ~is_self)
    related_ids = list(set(claim_of[related_mask].tolist()))
    annotated_mask = members.alive(
        (~is_claim & (claim_of == claim_id)) if claim_id is not None else np.zeros(len(is_claim), dtype=bool)
    )
    thematic_mask = members.alive(~is_claim & np.isin(claim_of, np.asarray(related_ids, dtype=object)))
    passes = _passing(sims, annotated_mask | related_mask | thematic_mask, delta, min_size)

    def pick(mask: np.ndarray) -> np.ndarray:
        keep = np.flatnonzero(mask & passes)
        return keep[np.argsort(-sims[keep], kind="stable")]

    annotated, related, thematic = pick(annotated_mask), pick(related_mask), pick(thematic_mask)
    if top_m is not None:
        pooled = np.concatenate([annotated, related, thematic])
        best = pooled[np.argsort(-sims[pooled], kind="stable")[:top_m]]
        annotated, related, thematic = (r[np.isin(r, best)] for r in (annotated, related, thematic))
    rows = {"annotated_evidences": annotated, "related_claims": related, "thematic_cluster_evidences": thematic}
    filled = _filled(sims, list(rows.values()), delta, min_size)
    n_live = len(is_claim) if members.live is None else int(members.live.sum())
    return _core(rows, sims, members, n_live - int(is_self.sum()), filled)


def materialize_soi(
    core: SOICore,
    members: ClusterMembers,
    *,
    mode: Mode,
    claim: str,
    claim_id: str | None,
    delta: float,
    cluster: int | None,
    theme: str | None = None,
    min_size: int = 0,
) -> SubsetOfInterest:
    """Turn an :class:`SOICore` into a :class:`SubsetOfInterest` (item objects, texts, similarities)."""
    lists: dict[str, Any] = {key: _items(members, rows, core.sims) for key, rows in core.rows.items()}
    soi = SubsetOfInterest(
        claim_id=claim_id,
        claim=claim,
        mode=mode,
        delta=float(delta),
        cluster=cluster,
        theme=theme,
        cluster_size=core.cluster_size,
        min_size=int(min_size),
        filled=core.filled,
        **lists,
    )
    soi.thematic_embedding = core.thematic_embedding
    soi.similarities = {item.id: item.similarity for item in soi.items()}
    return soi


def build_unsupervised_soi(
    claim_vector: np.ndarray,
    members: ClusterMembers,
    delta: float,
    *,
    claim: str = "",
    claim_id: str | None = None,
    cluster: int | None = None,
    top_m: int | None = None,
    min_size: int = 0,
    n_related_claims: int = 0,
) -> SubsetOfInterest:
    """CARAG-u's SOI: the evidence of the claim's cluster with cosine similarity ``> delta``.

    Args:
        claim_vector: the claim (query) embedding, shape ``(d,)``.
        members: the members of the claim's cluster (claims among them are ignored:
            CARAG-u's SOI holds evidence only).
        delta: similarity threshold in ``[-1, 1]``.
        claim, claim_id, cluster: recorded in the SOI.
        top_m: keep at most the ``top_m`` most similar of those items (``None``:
            all above ``delta``, as in the paper).  A count, unlike ``delta``,
            does not depend on the encoder's similarity scale.
        min_size: when fewer than ``min_size`` items pass ``delta``, keep the ``min_size`` most similar
            evidence items of the cluster instead (``0``: ``delta`` alone, as in the paper).
        n_related_claims: also put the ``n`` claims of the cluster most similar to
            the claim (itself excluded, no ``delta`` filter) into ``related_claims``
            (an extension; the paper's CARAG-u uses evidence only, ``0``).  Uses no
            annotations: the claims are clustered corpus items like the evidence.

    Returns:
        the SOI, with ``refined_cluster_evidences`` (and ``related_claims``)
        sorted by decreasing similarity and ``thematic_embedding`` = the mean
        unit embedding of all its items.
    """
    core = unsupervised_core(
        claim_vector,
        members,
        delta,
        claim_id=claim_id,
        top_m=top_m,
        min_size=min_size,
        n_related_claims=n_related_claims,
    )
    return materialize_soi(
        core,
        members,
        mode="unsupervised",
        claim=claim,
        claim_id=claim_id,
        delta=delta,
        cluster=cluster,
        min_size=min_size,
    )


def build_supervised_soi(
    claim_vector: np.ndarray,
    members: ClusterMembers,
    delta: float,
    *,
    claim: str = "",
    claim_id: str | None = None,
    cluster: int | None = None,
    theme: str | None = None,
    top_m: int | None = None,
    min_size: int = 0,
) -> SubsetOfInterest:
    """CARAG's SOI from the claim's cluster within its theme.

    From ``members`` (the claim's cluster, already restricted to its theme):

    * ``annotated_evidences``: evidence annotated for ``claim_id``;
    * ``related_claims``: the other claims of the cluster;
    * ``thematic_cluster_evidences``: evidence annotated for one of those related claims;

    each kept only when its cosine similarity to the claim is ``> delta``
    (the filter applies to every item on its own, so a related claim's
    evidence may stay when the claim itself does not).  The claim itself is
    never an item.  A claim that is not in the corpus (``claim_id=None``) has no
    annotated evidence.  ``top_m`` keeps only the ``top_m`` most similar items
    over all three lists (``None``: all above ``delta``); when fewer than ``min_size`` items of the three
    lists pass ``delta``, the ``min_size`` most similar of them are kept instead.

    Returns:
        the SOI; each list sorted by decreasing similarity; ``thematic_embedding`` =
        mean unit embedding of all kept items (Equation 1 of the CARAG paper).
    """
    core = supervised_core(claim_vector, members, delta, claim_id=claim_id, top_m=top_m, min_size=min_size)
    return materialize_soi(
        core,
        members,
        mode="supervised",
        claim=claim,
        claim_id=claim_id,
        delta=delta,
        cluster=cluster,
        theme=theme,
        min_size=min_size,
    )
