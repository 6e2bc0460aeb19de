"""Saving and loading a retriever's fitted state (settings as ``CaragSettings`` JSON, context, claims, tables)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from pydantic import ValidationError

from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.retrieval.fitting import FittedCorpus, restore_context
from llama_index_carag.models.resolve import embed_model_name
from llama_index_carag.core.persistence import StateError, ids_checksum, load_state, save_state
from llama_index_carag.ranking.scorers import Hubness
from llama_index_carag.settings import FIT_FIELDS, PAPER, CaragSettings
from llama_index_carag.backends.vector_stores import PERSISTED_KINDS, faiss_metric, get_node_embeddings, index_node_ids, vector_store_kind

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex

    from llama_index_carag.ranking.bm25 import LexicalIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

__all__ = ["save_retriever", "load_retriever", "settings_from_state"]

#: Sub-folder of the state folder that holds the BM25 index.
LEXICAL_SUBDIR = "lexical"
#: Keys kept beside the settings in the state's "settings" block (not options).
_KEYS = ("theme_key", "claim_key", "exclude_ids")


def save_retriever(
    folder: Path, index: "VectorStoreIndex", corpus: FittedCorpus, settings: CaragSettings, embed_model: "BaseEmbedding"
) -> Path:
    """Write the state of a retriever into ``folder``; returns the folder."""
    ctx_info, arrays = corpus.context.get_state()
    claim_set = set(corpus.claim_ids)
    evidence_ids = [i for i, _ in corpus.context.iter_items() if i not in claim_set]
    info: dict[str, Any] = {
        "settings": {
            **settings.model_dump(mode="json"),
            "theme_key": corpus.theme_key,
            "claim_key": corpus.claim_key,
            "exclude_ids": sorted(corpus.exclude_ids),
        },
        "embed_model": embed_model_name(embed_model),
        "dim": corpus.context.dim_,
        "vector_store": vector_store_kind(index),
        "faiss_metric": faiss_metric(index),
        "evidence_ids_sha256": ids_checksum(evidence_ids),
        "n_evidence": len(evidence_ids),
        "claim_ids": list(corpus.claim_ids),
        "clusterer_params": corpus.clusterer_params,
        "context": ctx_info,
    }
    arrays = {"claim_vectors": np.asarray(corpus.claim_vectors, dtype=np.float32), **arrays}
    if corpus.contrast is not None:
        c_info, c_arrays = corpus.contrast.get_state()
        info["claim_contrast_table"] = c_info
        arrays.update(c_arrays)
    if corpus.hubness:
        info["hubness_tables"] = []
        for k, table in sorted(corpus.hubness.items()):
            h_info, h_arrays = table.get_state()
            info["hubness_tables"].append({**h_info, "array": f"hubness_{k}"})
            arrays[f"hubness_{k}"] = h_arrays["hubness"]
    if corpus.lexical is not None:  # bm25s's own files (.npy + JSON, no pickle) in a sub-folder
        corpus.lexical.persist(folder / LEXICAL_SUBDIR)
        info["lexical"] = {"dir": LEXICAL_SUBDIR, "n": len(corpus.lexical)}
    save_state(folder, info, arrays)
    return folder


def settings_from_state(saved: dict[str, Any], ctx_info: dict[str, Any]) -> CaragSettings:
    """The settings of a saved state (this format, or the earlier one without clustering options).

    Raises:
        StateError: settings this version cannot read; re-fit and persist again.
    """
    options = {k: v for k, v in saved.items() if k not in _KEYS}
    for name in FIT_FIELDS:  # states written before CaragSettings kept these in the context only
        if name not in options:
            if name == "covariance_type":
                options[name] = (ctx_info.get("clusterer_params") or {}).get("covariance_type", "diag")
            elif name in ctx_info:
                options[name] = ctx_info[name]
    try:
        return CaragSettings.model_validate({**PAPER.model_dump(), **options})  # fields added since: their values then
    except (ValidationError, TypeError, ValueError) as exc:
        raise StateError(
            f"The saved settings cannot be read by this version ({exc}); re-fit with "
            "ContextAwareRetriever.from_index(...) and persist again."
        ) from None


def _check_evidence(info: dict[str, Any], index: "VectorStoreIndex", claim_lookup: dict[str, np.ndarray]) -> None:
    ctx_info = info["context"]
    evidence_ids = [str(i) for g in ctx_info["groups"] for i in g["ids"] if str(i) not in claim_lookup]
    if ctx_info.get("backend") != "qdrant" and ids_checksum(evidence_ids) != info.get("evidence_ids_sha256"):
        raise StateError("The state's node list is inconsistent (checksum mismatch); it was modified.")
    try:
        current = [i for i in index_node_ids(index) if i not in claim_lookup]
    except ValueError as exc:
        raise StateError(str(exc)) from None
    if ids_checksum(current) != info.get("evidence_ids_sha256"):
        raise StateError(
            f"The index holds {len(current)} evidence nodes that differ from the {info.get('n_evidence')} "
            "the state was fitted on; refit (ContextAwareRetriever.from_index) or load the matching index."
        )


def _vector_reader(index: "VectorStoreIndex", dim: int, claim_lookup: dict[str, np.ndarray]) -> Callable[[list[str]], np.ndarray]:
    def vectors(ids: list[str]) -> np.ndarray:
        out = np.empty((len(ids), dim), dtype=np.float32)
        ev = [(r, i) for r, i in enumerate(ids) if i not in claim_lookup]
        if ev:
            _, mat = get_node_embeddings(index, [i for _, i in ev])
            if mat.shape[1] != dim:
                raise StateError(f"The index's vectors have dimension {mat.shape[1]}; the state expects {dim}.")
            out[[r for r, _ in ev]] = mat
        for r, i in enumerate(ids):
            if i in claim_lookup:
                out[r] = claim_lookup[i]
        return out

    return vectors


def _resolve_index(
    folder: Path, info: dict[str, Any], index: "VectorStoreIndex | None", embed_model: "str | BaseEmbedding | None"
) -> tuple["VectorStoreIndex", "BaseEmbedding"]:
    from llama_index_carag.models.resolve import resolve_embed_model

    recorded_model = info["embed_model"]
    if index is None:
        from llama_index_carag.retrieval.indexing import load_persisted_index

        kind = info.get("vector_store")
        if kind not in PERSISTED_KINDS:
            raise StateError(
                f"The state was fitted on a {kind} index, which is not saved on disk; pass index=... to reload it."
            )
        model = resolve_embed_model(embed_model if embed_model is not None else recorded_model)
        index = load_persisted_index(folder.parent, model, kind)
    else:
        model = resolve_embed_model(embed_model) if embed_model is not None else index._embed_model  # noqa: SLF001
    if embed_model_name(model) != recorded_model:
        raise StateError(
            f"The state was fitted with embed model {recorded_model!r} but the index/query model is "
            f"{embed_model_name(model)!r}; reload with the same model."
        )
    return index, model


def load_retriever(
    persist_dir: Path, subdir: str, index: "VectorStoreIndex | None", embed_model: "str | BaseEmbedding | None"
) -> tuple["VectorStoreIndex", FittedCorpus, CaragSettings, "BaseEmbedding"]:
    """``(index, corpus, settings, embed model)`` of a state saved by :func:`save_retriever`."""
    folder = persist_dir / subdir
    info, arrays = load_state(folder)
    try:
        saved, ctx_info, dim = info["settings"], info["context"], int(info["dim"])
        info["embed_model"]
    except (KeyError, TypeError, ValueError):
        raise StateError(f"{folder} lacks settings; the state is corrupt.") from None
    settings = settings_from_state(saved, ctx_info)
    index, model = _resolve_index(folder, info, index, embed_model)
    claim_ids = [str(i) for i in info.get("claim_ids", [])]
    claim_vectors = arrays.get("claim_vectors", np.zeros((0, dim), np.float32))
    if claim_vectors.shape[0] != len(claim_ids):
        raise StateError("Saved claim vectors do not match the saved claim ids.")
    claim_lookup = {cid: claim_vectors[r] for r, cid in enumerate(claim_ids)}
    _check_evidence(info, index, claim_lookup)
    vectors = _vector_reader(index, dim, claim_lookup)
    try:
        context = restore_context(ctx_info, arrays, index, vectors)
    except (KeyError, TypeError) as exc:
        raise StateError(f"The saved clustering state is incomplete ({exc}).") from None
    params = info.get("clusterer_params")
    if params is None:  # earlier states: the context's parameters include covariance_type
        params = {k: v for k, v in (ctx_info.get("clusterer_params") or {}).items() if k != "covariance_type"}
    corpus = FittedCorpus(
        context, claim_ids, claim_vectors, frozenset(saved.get("exclude_ids", [])),
        saved.get("theme_key", "theme"), saved.get("claim_key", "claim_id"), dict(params),
    )
    if "claim_contrast_table" in info and corpus.claim_units is not None:
        try:
            corpus.contrast = ClaimContrast.from_state(info["claim_contrast_table"], arrays, corpus.claim_units)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"The saved claim-contrast table is unreadable ({exc}).") from None
    corpus.hubness = _load_hubness(info, arrays)
    if "lexical" in info:
        corpus.lexical = _load_lexical(folder / LEXICAL_SUBDIR, corpus)
    return index, corpus, settings, model


def _load_hubness(info: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[int, Hubness]:
    """The saved hubness tables by ``hub_k`` (states without them get them refitted on first use)."""
    tables: dict[int, Hubness] = {}
    for h_info in info.get("hubness_tables", []):
        try:
            table = Hubness.from_state(h_info, {"hubness": arrays[h_info["array"]]})
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"A saved hubness table is unreadable ({exc}).") from None
        tables[table.k] = table
    return tables


def _load_lexical(folder: Path, corpus: FittedCorpus) -> "LexicalIndex | None":
    """The saved BM25 index, or ``None`` (refitted from the docstore) when it does not match the evidence."""
    from llama_index_carag.ranking.bm25 import LexicalIndex
    from llama_index_carag.ranking.lexical import evidence_ids

    try:
        lexical = LexicalIndex.from_persist_dir(folder)
    except (OSError, ValueError, KeyError) as exc:
        raise StateError(f"The saved BM25 index in {folder} is unreadable ({exc}).") from None
    if set(lexical.ids_) != set(evidence_ids(corpus)):
        logger.warning("The saved BM25 index does not cover the saved evidence; it is rebuilt from the docstore.")
        return None
    return lexical
