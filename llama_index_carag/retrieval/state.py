"""A retriever's fitted state (settings as ``CaragSettings`` JSON, context, claims, tables, calibration).

:func:`get_state` / :func:`from_state` turn a fitted corpus and its settings into ``(JSON-safe info, arrays)``
and back; :func:`persist` / :func:`from_persist_dir` write and read them as one atomic state
(:func:`~llama_index_carag.core.persistence.write_state`) under a persist dir; the edits made since are
journaled beside it (:mod:`~llama_index_carag.retrieval.journal`): :func:`persist_retriever` writes a journal
segment or a full persist, :func:`replay_into` replays the journal after a load.  The fitted tables
(:class:`~llama_index_carag.ranking.fitted_table.FittedTable`) are saved and loaded in one loop, each as
``{"key", "type", "info", "arrays"}`` under ``info["tables"]`` with its arrays beside the others; a table's
type is found again through the registry of re-ranking terms.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import ValidationError

from llama_index_carag.core.commit import replace_files, roll_forward
from llama_index_carag.core.persistence import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    StateError,
    ids_checksum,
    read_state,
    stale_state_files,
    write_state,
)
from llama_index_carag.core.writer_lock import switching
from llama_index_carag.models.resolve import embed_model_name
from llama_index_carag.ranking.assembly import table_type
from llama_index_carag.ranking.fitted_table import TableCorpus
from llama_index_carag.retrieval.calibration_result import Calibration
from llama_index_carag.retrieval.fitted_corpus import FittedCorpus
from llama_index_carag.retrieval.fitting import restore_context
from llama_index_carag.retrieval.journal import replay
from llama_index_carag.settings import CaragSettings
from llama_index_carag.stores.vector_stores import (
    PERSISTED_KINDS,
    adapter_for,
    get_node_embeddings,
    index_node_ids,
    load_persisted_index,
    store_size,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode

    from llama_index_carag.ranking.fitted_table import FittedTable

logger = logging.getLogger(__name__)

#: Keys kept beside the settings in the state's "settings" block (not options).
_KEYS = ("theme_key", "claim_key", "exclude_ids")


def get_state(
    corpus: FittedCorpus, settings: CaragSettings, embed_model: BaseEmbedding
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(JSON-safe info, {name: array})`` of a retriever: its settings, fitted corpus and tables."""
    index = corpus.index
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
    info["tables"], table_arrays = get_tables_state(corpus.tables)
    clash = set(arrays) & set(table_arrays)
    if clash:
        raise ValueError(f"Fitted-table arrays clash with the context's: {sorted(clash)}.")
    return info, {**arrays, **table_arrays}


def persist(
    folder: Path,
    corpus: FittedCorpus,
    settings: CaragSettings,
    embed_model: BaseEmbedding,
    *,
    index_folder: Path | None = None,
) -> str:
    """Write :func:`get_state` into ``folder`` as one atomic state (a full base: any journal is dropped); with
    ``index_folder`` (the folder loads read), its manifest is switched under that folder's
    :func:`~llama_index_carag.core.writer_lock.switching`.

    Returns:
        the SHA-256 of the new manifest (the token a journal names as its base).
    """
    switch = nullcontext if index_folder is None else partial(switching, index_folder)
    return write_state(folder, *get_state(corpus, settings, embed_model), switch=switch)


def get_tables_state(tables: dict[str, FittedTable]) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
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
    entries: list[dict[str, Any]], arrays: dict[str, np.ndarray], corpus: TableCorpus
) -> dict[str, FittedTable]:
    """The tables :func:`get_tables_state` saved.

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


def settings_from_state(saved: dict[str, Any]) -> CaragSettings:
    """The settings of a saved state.

    Raises:
        StateError: settings this version cannot read; re-fit and persist again.
    """
    try:
        return CaragSettings.model_validate({k: v for k, v in saved.items() if k not in _KEYS})
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


def from_state(
    info: dict[str, Any], arrays: dict[str, np.ndarray], index: VectorStoreIndex
) -> tuple[FittedCorpus, CaragSettings]:
    """``(corpus, settings)`` of a state :func:`get_state` gave, on ``index`` (its embed model checked by the caller).

    Raises:
        StateError: a state that is corrupt or does not match the index.
    """
    try:
        saved, ctx_info, dim = info["settings"], info["context"], int(info["dim"])
    except (KeyError, TypeError, ValueError):
        raise StateError("The state lacks settings; it is corrupt.") from None
    settings = settings_from_state(saved)
    claim_ids = [str(i) for i in info.get("claim_ids", [])]
    claim_vectors = arrays.get("claim_vectors", np.zeros((0, dim), np.float32))
    if claim_vectors.shape[0] != len(claim_ids):
        raise StateError("Saved claim vectors do not match the saved claim ids.")
    claim_lookup = {cid: claim_vectors[r] for r, cid in enumerate(claim_ids)}
    _check_evidence(info, index, claim_lookup)
    try:
        context = restore_context(ctx_info, arrays, index, _vector_reader(index, dim, claim_lookup))
        exclude, theme_key, claim_key = saved["exclude_ids"], saved["theme_key"], saved["claim_key"]
        params = dict(info["clusterer_params"])
    except (KeyError, TypeError) as exc:
        raise StateError(f"The saved clustering state is incomplete ({exc}).") from None
    corpus = FittedCorpus(index, context, claim_ids, claim_vectors, frozenset(exclude), theme_key, claim_key, params)
    corpus.tables = tables_from_state(info.get("tables", []), arrays, corpus)
    if "calibration" in info:
        try:
            corpus.calibration = Calibration.from_json(info["calibration"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"The saved calibration is unreadable ({exc}).") from None
    return corpus, settings


def from_persist_dir(
    folder: Path, index: VectorStoreIndex | None, embed_model: str | BaseEmbedding | None
) -> tuple[FittedCorpus, CaragSettings, BaseEmbedding, str]:
    """``(corpus, settings, embed model, manifest SHA-256)`` of the state :func:`persist` wrote into ``folder``
    (the index loaded from ``folder``'s parent when ``index`` is ``None``), as of its base: the caller replays
    its journal (:func:`~llama_index_carag.retrieval.journal.replay`).  A full persist a crash interrupted after
    its commit is finished first (:func:`~llama_index_carag.core.commit.roll_forward`)."""
    try:
        roll_forward(folder.parent)
    except ValueError as exc:
        raise StateError(str(exc)) from None
    info, arrays, token = read_state(folder)
    if not isinstance(info, dict) or "embed_model" not in info:
        raise StateError(f"{folder} lacks settings; the state is corrupt.")
    given = index is not None
    index, model = _resolve_index(folder, info, index, embed_model)
    try:
        corpus, settings = from_state(info, arrays, index)
    except StateError as exc:
        if given and (folder / JOURNAL_NAME).is_file():
            raise StateError(
                f"{exc} The folder holds edits journaled since its last full persist: pass the index as "
                "that persist saved it (or index=None), or persist with compact=True first."
            ) from None
        raise
    return corpus, settings, model, token


class Persistable(Protocol):
    """What :func:`persist_retriever` and :func:`replay_into` use of a ``ContextAwareRetriever``."""

    @property
    def index(self) -> VectorStoreIndex: ...

    @property
    def corpus(self) -> FittedCorpus: ...

    @property
    def settings(self) -> CaragSettings: ...

    @property
    def embed_model(self) -> BaseEmbedding: ...

    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None: ...

    def delete_nodes(self, node_ids: Sequence[str]) -> None: ...


def persist_retriever(retriever: Persistable, folder: Path, subdir: str, persist_index: bool, compact: bool) -> Path:
    """``ContextAwareRetriever.persist``: a journal segment when the edits since the base can be journaled
    (:meth:`~llama_index_carag.retrieval.journal.EditJournal.persist_edits`), else a full persist (the index
    with ``persist_index``, and the state), which becomes the journal's new base.

    Returns:
        the state folder.
    """
    state_folder = folder / subdir
    corpus, settings = retriever.corpus, retriever.settings
    journal = corpus.journal
    model_name = embed_model_name(retriever.embed_model)
    tables = list(corpus.tables)
    if persist_index and not compact and journal.persist_edits(folder, state_folder, settings, tables, model_name):
        return state_folder
    journal.invalidate()  # from here on the folder holds neither the old base nor the new one
    if not persist_index:
        persist(state_folder, corpus, settings, retriever.embed_model, index_folder=folder)  # one atomic manifest
        return state_folder
    tokens: list[str] = []

    def write(staging: Path) -> list[str]:
        """The index, its docstore record and the state, staged; returns the files they leave stale."""
        from llama_index_carag.stores.docstores import SPEC_NAME, write_spec

        retriever.index.storage_context.persist(persist_dir=str(staging))
        spec = write_spec(staging, retriever.index.docstore)  # DuckDB/Redis: where the nodes are, to reload them
        tokens.append(persist(staging / subdir, corpus, settings, retriever.embed_model))
        staged = {p.name for p in (staging / subdir).glob("*.npy")}
        stale = [f"{subdir}/{p.name}" for p in stale_state_files(state_folder, staged)]
        return stale + ([SPEC_NAME] if spec is None and (folder / SPEC_NAME).is_file() else [])

    # the index's files and the state are replaced as one: a crash leaves the old persist or the new one
    replace_files(folder, write, last=[f"{subdir}/{MANIFEST_NAME}"])
    journal.bind(folder, state_folder, tokens[0], retriever.index, settings, tables, model_name)
    return state_folder


def replay_into(retriever: Persistable, folder: Path, state_folder: Path, token: str, *, bind: bool) -> None:
    """Replay the state's journal on a retriever loaded from its base; with ``bind`` (the index is the folder's)
    later persists extend the same journal."""
    base_nodes = store_size(retriever.index)
    journaled, segments, saved_base = replay(state_folder, token, retriever.insert_nodes, retriever.delete_nodes)
    if bind:
        retriever.corpus.journal.bind(
            folder,
            state_folder,
            token,
            retriever.index,
            retriever.settings,
            list(retriever.corpus.tables),
            embed_model_name(retriever.embed_model),
            base_nodes=saved_base if saved_base is not None else base_nodes,
            journaled=journaled,
            segments=segments,
        )
