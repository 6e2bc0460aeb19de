"""Fit an index's archive decision on its labelled corpus claims, each retrieved as a new claim would be.

:func:`fit_archive_decision` is what ``carag index --calibrate`` and ``from_index(..., calibrate=True)``
users call (no LLM: the LLM's part, its label lean, is the
:class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior`).  Every labelled claim is retrieved
by a retriever refitted without the claim's fold (:data:`FOLDS` folds), so neither the claim nor its own
evidence links are in the retriever's corpus when it is checked: the decision is fitted on the evidence a
new claim gets, which is what it will judge.  :func:`save_archive_decision` / :func:`saved_archive_decision`
keep it beside the index as :data:`DECISION_FILE`, with the encoder it was fitted with (its features are
that encoder's embeddings and cosines).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.labels.archive_decision import ArchiveDecision
from llama_index_carag.verdicts.labels.archive_features import (
    DECLARED_GROUPS,
    ClaimSignals,
    archive_features,
    feature_names,
)
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "DECISION_FILE",
    "FOLDS",
    "labelled_claims",
    "archive_signals",
    "fit_archive_decision",
    "save_archive_decision",
    "saved_archive_decision",
]

#: The archive decision's file in an index folder.
DECISION_FILE = "verdict_decision.json"
#: Folds of the leave-claims-out retrieval.
FOLDS = 5
_FORMAT = "carag-index-verdict-decision/1"


def labelled_claims(claim_nodes: Sequence[Any], label_key: str = "label") -> list[tuple[Any, VerdictLabel]]:
    """The claims whose ``metadata[label_key]`` is a verdict label (T/F/N or a full name), with that label."""
    out = []
    for node in claim_nodes:
        raw = (node.metadata or {}).get(label_key)
        if raw in (None, ""):
            continue
        try:
            out.append((node, VerdictLabel.from_fever(str(raw))))
        except ValueError:
            logger.debug("claim %s: label %r is not a verdict label", node.node_id, raw)
    return out


def _embedded(retriever: Any, nodes: Sequence[Any]) -> list[Any]:
    missing = [n for n in nodes if n.embedding is None]
    if missing:
        vectors = retriever.embed_model.get_text_embedding_batch([n.get_content() for n in missing])
        filled = {n.node_id: list(map(float, v)) for n, v in zip(missing, vectors)}
        nodes = [n if n.embedding is not None else n.model_copy(update={"embedding": filled[n.node_id]}) for n in nodes]
    return list(nodes)


def archive_signals(
    retriever: Any,
    claim_nodes: Sequence[Any],
    targets: Sequence[Any],
    *,
    folds: int = FOLDS,
    random_state: int = 0,
    show_progress: bool = False,
) -> list[ClaimSignals]:
    """Each of ``targets`` (claim nodes) retrieved by ``retriever``'s settings refitted on ``claim_nodes`` without
    the target's fold; the signals in ``targets`` order."""
    from llama_index.core.schema import QueryBundle
    from tqdm.auto import tqdm

    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    corpus = _embedded(retriever, claim_nodes)
    by_id = {n.node_id: n for n in corpus}
    targets = [by_id.get(t.node_id) or _embedded(retriever, [t])[0] for t in targets]
    order = np.random.default_rng(random_state).permutation(len(targets))
    out: dict[int, ClaimSignals] = {}
    bar = tqdm(total=len(targets), desc="archive claims retrieved", disable=not show_progress)
    for fold in range(min(folds, len(targets))):
        members = [int(i) for i in order[fold::folds]]
        held = {targets[i].node_id for i in members}
        refit = ContextAwareRetriever.from_index(
            retriever.index,
            retriever.settings,
            claim_nodes=[n for n in corpus if n.node_id not in held] or None,
            embed_model=retriever.embed_model,
            theme_key=retriever.theme_key,
            claim_key=retriever.claim_key,
        )
        for i in members:
            claim = targets[i]
            hits = refit.retrieve(QueryBundle(claim.get_content(), embedding=claim.embedding))
            out[i] = ClaimSignals.from_nodes(claim.get_content(), claim.embedding, hits)
            bar.update(1)
    bar.close()
    return [out[i] for i in range(len(targets))]


def fit_archive_decision(
    retriever: Any,
    claim_nodes: Sequence[Any],
    *,
    label_key: str = "label",
    folds: int = FOLDS,
    random_state: int = 0,
    show_progress: bool = False,
    **params: Any,
) -> ArchiveDecision:
    """The archive decision of ``retriever``'s index, fitted on the labelled ones of ``claim_nodes``.

    ``params``: :class:`ArchiveDecision` parameters.  Below its minimum of labelled claims the decision is
    fitted without a model (the LLM's lean-free scores then decide alone), and says so in its reason.
    """
    t0 = time.perf_counter()
    labelled = labelled_claims(claim_nodes, label_key)
    signals = archive_signals(
        retriever,
        claim_nodes,
        [n for n, _ in labelled],
        folds=folds,
        random_state=random_state,
        show_progress=show_progress,
    )
    dim = len(signals[0].embedding) if signals else 0
    x = archive_features(signals) if signals else np.zeros((0, 1))
    names = feature_names(DECLARED_GROUPS, dim) if signals else ["none"]
    decision = ArchiveDecision(random_state=random_state, **params)
    decision.fit(x if len(x) else np.zeros((0, 1)), [label for _, label in labelled], feature_names=names)
    decision.fit_seconds_ = time.perf_counter() - t0
    return decision


def save_archive_decision(persist_dir: str | Path, decision: ArchiveDecision, encoder: str) -> Path:
    """Write ``<persist_dir>/verdict_decision.json`` atomically; returns the file."""
    from llama_index_carag.core.atomic import atomic_write_bytes

    path = Path(persist_dir) / DECISION_FILE
    state = {"format": _FORMAT, "encoder": encoder, "decision": decision.get_state()}
    atomic_write_bytes(path, (json.dumps(state) + "\n").encode("utf-8"))
    return path


def saved_archive_decision(persist_dir: str | Path, encoder: str | None = None) -> ArchiveDecision | None:
    """The archive decision saved in ``persist_dir`` (``None`` if there is none).

    ``encoder``: the retriever's encoder name; a decision fitted with another encoder is not used (its
    features are that encoder's), with a one-line warning.
    """
    path = Path(persist_dir) / DECISION_FILE
    if not path.is_file():
        return None
    state = json.loads(path.read_text(encoding="utf-8"))
    if state.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a {_FORMAT} file (format {state.get('format')!r}).")
    if encoder is not None and state.get("encoder") != encoder:
        logger.warning(
            "The archive decision in %s was fitted with the encoder %s, not %s: not used (re-run carag index --calibrate).",
            persist_dir,
            state.get("encoder"),
            encoder,
        )
        return None
    return ArchiveDecision.from_state(state["decision"])


def index_archive_decision(persist_dir: str | Path, embed_model: Any) -> ArchiveDecision | None:
    """The archive decision saved with the index in ``persist_dir`` for its encoder ``embed_model``, or ``None``
    with a one-line hint (logged once per folder) on how to fit one."""
    from llama_index_carag.models.resolve import embed_model_name

    decision = saved_archive_decision(persist_dir, embed_model_name(embed_model))
    if decision is None and str(persist_dir) not in _HINTED:
        _HINTED.add(str(persist_dir))
        logger.warning(
            "%s has no archive decision: verdicts are the LLM's arg-max (near chance on our benchmarks); "
            "`carag index DATA --calibrate` fits one on the index's labelled claims.",
            persist_dir,
        )
    return decision


_HINTED: set[str] = set()
