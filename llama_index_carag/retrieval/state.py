"""Saving and loading a retriever's fitted state (settings as ``CaragSettings`` JSON, context, claims, tables).

Everything goes into one atomic state (:func:`~llama_index_carag.core.persistence.persist_state`):
the fitted tables (:class:`~llama_index_carag.ranking.tables.FittedTable`) are saved and loaded in
one loop, each as ``{"key", "type", "info", "arrays"}`` under ``info["tables"]`` with its arrays
beside the others.  States written before (claim-contrast and hubness under their own keys, BM25
in a side folder) are read by :mod:`llama_index_carag.retrieval.state_legacy`.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from llama_index_carag.backends.vector_stores import (
    PERSISTED_KINDS,
    adapter_for,
    get_node_embeddings,
    index_node_ids,
    load_persisted_index,
)
from llama_index_carag.core.persistence import StateError, ids_checksum, persist_state, state_from_persist_dir
from llama_index_carag.models.resolve import embed_model_name
from llama_index_carag.ranking.assembly import table_type
from llama_index_carag.retrieval.fitting import FittedCorpus, restore_context
from llama_index_carag.retrieval.state_legacy import LEGACY_LEXICAL_SUBDIR, is_legacy_lexical_dir, legacy_tables
from llama_index_carag.retrieval.tables import CorpusView
from llama_index_carag.settings import FIT_FIELDS, PAPER, CaragSettings

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_carag.ranking.tables import FittedTable

logger = logging.getLogger(__name__)

__all__ = ["save_retriever", "load_retriever", "settings_from_state", "tables_state", "tables_from_state"]

#: Keys kept beside the settings in the state's "settings" block (not options).
_KEYS = ("theme_key", "claim_key", "exclude_ids")


def save_retriever(
    folder: Path, index: VectorStoreIndex, corpus: FittedCorpus, settings: CaragSettings, embed_model: BaseEmbedding
) -> Path:
    """Write the state of a retriever into ``folder`` (one atomic state, tables included); returns the folder."""
    ctx_info, arrays = corpus.context.get_state()
    evidence_ids = corpus.evidence_ids()
    adapter = adapter_for(index)
    info: dict[str, Any] = {
        "settings": {
            **settings.model_dump(mode="json"),
            "theme_key": corpus.theme_key,
            "claim_key": corpus.claim_key,
            "exclude_ids": sorted(corpus.exclude_ids),
        },
        "embed_model": embed_model_name(embed_model),
        "dim": corpus.context.dim_,
        "vector_store": adapter.kind,
        "faiss_metric": adapter.metric(),
        "evidence_ids_sha256": ids_checksum(evidence_ids),
        "n_evidence": len(evidence_ids),
        "claim_ids": list(corpus.claim_ids),
        "clusterer_params": corpus.clusterer_params,
        "context": ctx_info,
    }
    if corpus.calibration is not None:
        info["calibration"] = corpus.calibration.to_json()
    arrays = {"claim_vectors": np.asarray(corpus.claim_vectors, dtype=np.float32), **arrays}
    info["tables"], table_arrays = tables_state(corpus.tables)
    clash = set(arrays) & set(table_arrays)
    if clash:
        raise ValueError(f"Fitted-table arrays clash with the context's: {sorted(clash)}.")
    persist_state(folder, info, {**arrays, **table_arrays})
    legacy = folder / LEGACY_LEXICAL_SUBDIR
    if is_legacy_lexical_dir(legacy):  # an earlier version's BM25 side folder: the manifest no longer names it
        shutil.rmtree(legacy, ignore_errors=True)
    return folder


def tables_state(tables: dict[str, FittedTable]) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """``(entries, arrays)`` of the fitted tables: one ``{"key", "type", "info", "arrays"}`` entry per
    table, whose ``arrays`` maps the table's own array names to their names in the state."""
    entries: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for key, table in sorted(tables.items()):
        t_info, t_arrays = table.get_state()
        names = {local: f"table_{key}_{local}" for local in t_arrays}
        entries.append({"key": key, "type": table.name, "info": t_info, "arrays": names})
        arrays.update({names[local]: array for local, array in t_arrays.items()})
    return entries, arrays


def tables_from_state(
    entries: list[dict[str, Any]], arrays: dict[str, np.ndarray], corpus: CorpusView
) -> dict[str, FittedTable]:
    """The tables :func:`tables_state` saved.

    Raises:
        StateError: an unknown table type, a missing array, or a table its class cannot read.
    """
    tables: dict[str, FittedTable] = {}
    for entry in entries:
        try:
            key, cls = str(entry["key"]), table_type(str(entry["type"]))
            own = {local: arrays[name] for local, name in entry["arrays"].items()}
            tables[key] = cls.from_state(entry["info"], own, corpus)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"The saved fitted table {entry.get('key')!r} is unreadable ({exc}).") from None
    return tables


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


def _check_evidence(info: dict[str, Any], index: VectorStoreIndex, claim_lookup: dict[str, np.ndarray]) -> None:
    ctx_info = info["context"]
    evidence_ids = [str(i) for g in ctx_info["groups"] for i in g["ids"] if str(i) not in claim_lookup]
    in_memory = ctx_info.get("backend") is None  # a store that keeps the clusters lists no evidence in the state
    if in_memory and ids_checksum(evidence_ids) != info.get("evidence_ids_sha256"):
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


def _vector_reader(
    index: VectorStoreIndex, dim: int, claim_lookup: dict[str, np.ndarray]
) -> Callable[[list[str]], np.ndarray]:
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
    folder: Path, info: dict[str, Any], index: VectorStoreIndex | None, embed_model: str | BaseEmbedding | None
) -> tuple[VectorStoreIndex, BaseEmbedding]:
    from llama_index_carag.models.resolve import resolve_embed_model

    recorded_model = info["embed_model"]
    if index is None:
        kind = info.get("vector_store")
        if kind not in PERSISTED_KINDS:
            raise StateError(
                f"The state was fitted on a {kind} index, which is not saved on disk; pass index=... to reload it."
            )
        model = resolve_embed_model(embed_model if embed_model is not None else recorded_model)
        index = load_persisted_index(folder.parent, model, str(kind))
    else:
        model = resolve_embed_model(embed_model) if embed_model is not None else index._embed_model
    if embed_model_name(model) != recorded_model:
        raise StateError(
            f"The state was fitted with embed model {recorded_model!r} but the index/query model is "
            f"{embed_model_name(model)!r}; reload with the same model."
        )
    return index, model


def load_retriever(
    persist_dir: Path, subdir: str, index: VectorStoreIndex | None, embed_model: str | BaseEmbedding | None
) -> tuple[VectorStoreIndex, FittedCorpus, CaragSettings, BaseEmbedding]:
    """``(index, corpus, settings, embed model)`` of a state saved by :func:`save_retriever`."""
    folder = persist_dir / subdir
    info, arrays = state_from_persist_dir(folder)
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
        context,
        claim_ids,
        claim_vectors,
        frozenset(saved.get("exclude_ids", [])),
        saved.get("theme_key", "theme"),
        saved.get("claim_key", "claim_id"),
        dict(params),
    )
    view = CorpusView(index, corpus)
    if "tables" in info:
        corpus.tables = tables_from_state(info["tables"], arrays, view)
    else:  # a state written before the fitted-table protocol
        corpus.tables = legacy_tables(info, arrays, folder, view)
    if "calibration" in info:
        from llama_index_carag.retrieval.calibration import Calibration

        try:
            corpus.calibration = Calibration.from_json(info["calibration"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"The saved calibration is unreadable ({exc}).") from None
    return index, corpus, settings, model
