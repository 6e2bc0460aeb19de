"""The SOI graph's nodes, edges and positions: the claim at the centre, its Subset of Interest around it.

With the check's evidence, the retrieved passages join the graph: an SOI item that was retrieved
takes the passage's rank and stance, a retrieved passage outside the SOI is a node of its own
(kind ``"retrieved_evidence"``); :func:`read_passages` reads the check's evidence in each of its forms
(``NodeWithScore``, result rows, dicts) into id, text, rank, cosine to the claim and stance.  Drawing lives in
:mod:`~llama_index_carag.visualize.soi_plots`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.soi import SOI_LIST_KEYS
from llama_index_carag.visualize.styles import _KIND_ORDER, SOI_KIND_OF_KEY
from llama_index_carag.visualize.text import _fmt_sim

if TYPE_CHECKING:  # pragma: no cover - typing only
    import networkx

    from llama_index_carag.core.soi import SOIItem, SubsetOfInterest


logger = logging.getLogger(__name__)

#: Node → ``(x, y)``, as :func:`soi_layout` returns them.
Positions = Mapping[Hashable, tuple[float, float]]


def _unique_node(graph: networkx.Graph, wanted: str, kind: str) -> str:
    """``wanted`` if free in ``graph``, else a suffixed variant (logged)."""
    if wanted not in graph:
        return wanted
    candidate, n = f"{wanted} ({kind})", 2
    while candidate in graph:
        candidate, n = f"{wanted} ({kind} {n})", n + 1
    logger.warning("SOI node id %r is used twice; the %s item is named %r in the graph.", wanted, kind, candidate)
    return candidate


def soi_graph(soi: SubsetOfInterest, *, evidence: Iterable[Any] | None = None) -> networkx.Graph:
    """The SOI as a star graph around its claim, with the check's retrieved passages when given.

    Nodes (attributes ``kind``, ``text``, ``similarity``, ``item_id``, ``in_soi``,
    ``rank``, ``stance``, ``stance_score``, ``stance_excerpt``):

    * the claim: id ``soi.claim_id`` or ``"query"``, ``kind="claim"``,
      ``similarity=1.0``, ``in_soi=False``;
    * one node per SOI item, keyed by its id, ``kind`` from the SOI key holding it
      (see :data:`SOI_KIND_OF_KEY`), ``claim_id`` as in the item, ``in_soi=True``.
      An id used twice (or equal to the claim's) gets a suffixed key; ``item_id``
      keeps the original;
    * with ``evidence`` (``NodeWithScore``, ``EvidenceRow`` or its dict, best
      first; see :func:`~llama_index_carag.visualize.soi_nodes.read_passages`): an
      SOI item that was retrieved takes the passage's ``rank``, ``stance``,
      ``stance_score`` and ``stance_excerpt``; a passage outside the SOI is a node of kind
      ``"retrieved_evidence"`` with ``in_soi=False`` and its cosine to the claim
      from the ``carag`` provenance.  ``rank``/``stance``/``stance_score``/``stance_excerpt``
      are ``None`` where unknown.

    Edges:

    * claim – item, ``weight`` = the item's cosine similarity to the claim,
      ``label`` = ``f"{sim:.2f}"``, ``relation="similarity"``;
    * related claim – thematic evidence when the evidence's ``claim_id`` is a related
      claim of the SOI, ``relation="annotated_for"``.  Its ``weight`` is the
      *evidence's* similarity to the query claim (the SOI holds no
      claim-to-evidence similarity), so the edge reads "this passage, at this
      similarity to the query, backs that related claim".

    Graph attributes: ``claim_node``, ``claim``, ``mode``, ``delta``, ``min_size``, ``threshold`` (the lowest
    cosine kept, ``None`` when empty), ``cluster``, ``theme``, ``cluster_size``, ``soi_size``, ``n_retrieved``
    (0 without evidence).
    """
    import networkx as nx

    graph = nx.Graph()
    claim_node = str(soi.claim_id) if soi.claim_id is not None else "query"
    passages = read_passages(evidence) if evidence is not None else []
    graph.graph.update(
        claim_node=claim_node,
        claim=soi.claim,
        mode=soi.mode,
        delta=float(soi.delta),
        min_size=int(soi.min_size),
        threshold=soi.threshold,
        cluster=soi.cluster,
        theme=soi.theme,
        cluster_size=int(soi.cluster_size),
        soi_size=len(soi),
        n_retrieved=len(passages),
    )
    graph.add_node(
        claim_node,
        kind="claim",
        text=str(soi.claim),
        similarity=1.0,
        item_id=claim_node,
        claim_id=soi.claim_id,
        **_unscored(in_soi=False),
    )
    _add_soi_items(graph, soi)
    _add_passages(graph, passages)
    return graph


def _unscored(*, in_soi: bool) -> dict[str, Any]:
    """The attributes of a node no retrieved passage has matched yet."""
    return {"in_soi": in_soi, "rank": None, "stance": None, "stance_score": None, "stance_excerpt": None}


def _add_soi_items(graph: networkx.Graph, soi: SubsetOfInterest) -> None:
    """One node per SOI item, linked to the claim; related claims linked to their thematic evidence."""
    claim_node = graph.graph["claim_node"]
    related_nodes: dict[str, str] = {}
    thematic: list[tuple[str, SOIItem]] = []
    for key in SOI_LIST_KEYS:
        kind = SOI_KIND_OF_KEY[key]
        for item in getattr(soi, key):
            node = _unique_node(graph, str(item.id), kind)
            sim = float(item.similarity)
            attrs = {"text": str(item.text), "similarity": sim, "item_id": str(item.id), "claim_id": item.claim_id}
            graph.add_node(node, kind=kind, **attrs, **_unscored(in_soi=True))
            graph.add_edge(claim_node, node, weight=sim, label=_fmt_sim(sim), relation="similarity")
            if kind == "related_claim":
                related_nodes.setdefault(str(item.id), node)
            elif kind == "thematic_evidence":
                thematic.append((node, item))
    for node, item in thematic:
        owner = related_nodes.get(str(item.claim_id)) if item.claim_id is not None else None
        if owner is not None:
            sim = float(item.similarity)
            graph.add_edge(owner, node, weight=sim, label=_fmt_sim(sim), relation="annotated_for")


def _add_passages(graph: networkx.Graph, passages: Sequence[Passage]) -> None:
    """The retrieved passages: rank and stance onto the SOI item of the same id, else a node of their own."""
    claim_node = graph.graph["claim_node"]
    members: dict[str, Hashable] = {}
    for node, data in graph.nodes(data=True):
        if data["in_soi"] and data["kind"] != "related_claim":
            members.setdefault(data["item_id"], node)
    for passage in passages:
        scored = {
            "rank": passage.rank,
            "stance": passage.stance,
            "stance_score": passage.stance_score,
            "stance_excerpt": passage.stance_excerpt,
        }
        if passage.id in members:
            graph.nodes[members[passage.id]].update(scored)
            continue
        node = _unique_node(graph, passage.id, "retrieved_evidence")
        sim = passage.similarity
        graph.add_node(
            node,
            kind="retrieved_evidence",
            text=passage.text,
            similarity=sim,
            item_id=passage.id,
            claim_id=None,
            in_soi=False,
            **scored,
        )
        graph.add_edge(claim_node, node, weight=sim, label=_fmt_sim(sim), relation="similarity")


def _item_groups(graph: networkx.Graph) -> list[list[Hashable]]:
    """Item nodes in angular layout order, as groups separated by a gap.

    Groups: the annotated evidence; then each related claim followed by its
    thematic evidence (consecutive related claims without evidence share one
    group); then thematic evidence of claims not in the SOI; then refined
    evidence; then the retrieved passages outside the SOI.  Within a group nodes
    keep the SOI's order (by similarity), retrieved passages their rank.
    """
    claim_node = graph.graph["claim_node"]
    items = [n for n in graph.nodes if n != claim_node]
    by_kind = {kind: [n for n in items if graph.nodes[n]["kind"] == kind] for kind in _KIND_ORDER}
    evidence_of: dict[Hashable, list[Hashable]] = {n: [] for n in by_kind["related_claim"]}
    orphans: list[Hashable] = []
    for node in by_kind["thematic_evidence"]:
        owners = [m for m in graph.neighbors(node) if graph.edges[node, m].get("relation") == "annotated_for"]
        (evidence_of[owners[0]] if owners else orphans).append(node)
    groups: list[list[Hashable]] = [by_kind["annotated_evidence"]]
    for related in by_kind["related_claim"]:
        block = [related, *evidence_of[related]]
        previous = groups[-1]
        if len(block) == 1 and previous and all(graph.nodes[n]["kind"] == "related_claim" for n in previous):
            previous.append(related)
        else:
            groups.append(block)
    groups.extend([orphans, by_kind["refined_evidence"], by_kind["retrieved_evidence"]])
    return [g for g in groups if g]


def _slots(groups: Sequence[Sequence[Hashable]]) -> tuple[list[int], int]:
    """Each item's angular slot, and the number of slots round the circle (one empty slot between groups)."""
    slots: list[int] = []
    slot = 0
    for index, group in enumerate(groups):
        slot += 1 if index else 0  # the gap before every group but the first
        for _ in group:
            slots.append(slot)
            slot += 1
    return slots, slot + (1 if len(groups) > 1 else 0)  # and the gap closing the circle


def slot_count(graph: networkx.Graph) -> int:
    """The number of angular slots :func:`soi_layout` divides the circle into (0 for a claim alone)."""
    return _slots(_item_groups(graph))[1]


def soi_layout(graph: networkx.Graph) -> dict[Hashable, tuple[float, float]]:
    """Deterministic positions for :func:`soi_graph`'s nodes.

    The claim sits at ``(0, 0)``.  Items go round it clockwise from 12 o'clock in
    the groups of :func:`_item_groups` (annotated evidence; each related claim
    next to its thematic evidence; refined evidence; retrieved passages outside
    the SOI), one empty slot between groups.  An item's distance to the centre grows as its similarity falls, from
    0.45 (most similar item of the SOI) to 1.0 (least similar, or unknown).

    Returns:
        node → ``(x, y)``.
    """
    claim_node = graph.graph["claim_node"]
    pos: dict[Hashable, tuple[float, float]] = {claim_node: (0.0, 0.0)}
    groups = _item_groups(graph)
    if not groups:
        return pos
    order = [n for g in groups for n in g]
    slots, total = _slots(groups)
    sims = np.array([graph.nodes[n]["similarity"] for n in order], dtype=float)
    finite = sims[np.isfinite(sims)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    for node, s, sim in zip(order, slots, sims):
        if not math.isfinite(sim):
            radius = 1.0
        elif hi - lo < 1e-9:
            radius = 0.7
        else:
            radius = 0.45 + 0.55 * (hi - sim) / (hi - lo)
        angle = math.pi / 2 - 2 * math.pi * s / total
        pos[node] = (radius * math.cos(angle), radius * math.sin(angle))
    return pos


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    Attributes:
        id: node id.
        text: the passage text.
        rank: 1-based rank in the evidence.
        similarity: cosine similarity to the claim (``nan`` when the provenance does not say).
        stance: ``"SUPPORTED"``, ``"REFUTED"``, ``"NOT_ENOUGH_INFO"``, or ``None`` when not scored.
        stance_score: the probability of that stance, or ``None``.
        stance_excerpt: for a long passage, the part its stance was read from, or ``None``.
    """

    id: str
    text: str
    rank: int
    similarity: float = math.nan
    stance: str | None = None
    stance_score: float | None = None
    stance_excerpt: str | None = None


def read_passages(evidence: Iterable[Any]) -> list[Passage]:
    """``evidence`` (``NodeWithScore``, ``EvidenceRow`` or its dict, best first) as :class:`Passage` objects.

    Raises:
        TypeError: an element is none of the three forms.
    """
    return [_passage(hit, rank) for rank, hit in enumerate(evidence, start=1)]


def _passage(hit: Any, rank: int) -> Passage:
    """One element of the evidence; a row's own ``rank`` wins over its position."""
    if hasattr(hit, "node") and hasattr(hit.node, "node_id"):
        # Deferred: the stage imports LlamaIndex (and Pillow), which a NodeWithScore has loaded already; importing
        # the visualize package stays light.
        from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

        provenance = dict(hit.node.metadata.get(CARAG_METADATA_KEY) or {})
        row: Mapping[str, Any] = {"id": hit.node.node_id, "text": hit.node.get_content(), "carag": provenance}
    elif hasattr(hit, "model_dump"):
        row = hit.model_dump()
    elif isinstance(hit, Mapping):
        row = hit
    else:
        raise TypeError(f"evidence holds NodeWithScore, EvidenceRow or dict items; got {type(hit).__name__}.")
    provenance = dict(row.get("carag") or {})
    stance = row.get("stance") or provenance.get("stance")
    score = row.get("stance_score", provenance.get("stance_score"))
    return Passage(
        id=str(row["id"]),
        text=str(row.get("text", "")),
        rank=int(row.get("rank") or rank),
        similarity=_number(provenance.get("claim_similarity")),
        stance=_stance(stance),
        stance_score=None if score is None else _number(score),
        stance_excerpt=row.get("stance_excerpt") or provenance.get("stance_excerpt"),
    )


def _number(value: Any) -> float:
    """``float(value)``, ``nan`` for ``None`` or anything not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _stance(value: Any) -> str | None:
    """A stance label (``T``/``F``/``N`` or a full name) as a :class:`VerdictLabel` value; ``None`` if unknown."""
    from llama_index_carag.verdicts.types import VerdictLabel

    if value is None:
        return None
    try:
        return VerdictLabel.from_fever(value).value
    except ValueError:
        logger.warning("Unknown stance %r; the passage is drawn as not scored.", value)
        return None
