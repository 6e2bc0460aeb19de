"""Stored MiniLM embeddings of FactVer (evidence and claims), so tests pin the code, not the CPU.

Encoders give slightly different floats on different CPUs (kernels, AMX/AVX-512 paths),
which moves near-ties and, sometimes, cluster assignments.  The behaviour-regression
test therefore reads the vectors from ``tests/data/factver_minilm_vectors.npz`` instead
of re-embedding.  The FactVer *text* is still read from ``../shared/data/factver`` at
test time; the file holds only ids, vectors and a digest of the embedded text (so a
changed CSV or a change in what is embedded fails loudly instead of silently pairing
vectors with other text).

Re-record (only when FactVer, the embedded text or the encoder change)::

    .venv/bin/python -m tests.test_regression --record-vectors
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

VECTORS = Path(__file__).parent / "data" / "factver_minilm_vectors.npz"
#: Stored precision: float32, the encoder's own output (float16 would move scores by ~1e-4).
DTYPE = np.float32


def embedded_texts(nodes: Sequence[Any]) -> list[str]:
    """The text each node is embedded from (``MetadataMode.EMBED``)."""
    from llama_index.core.schema import MetadataMode

    return [n.get_content(MetadataMode.EMBED) for n in nodes]


def text_digest(nodes: Sequence[Any]) -> str:
    """SHA-256 over the ids and embedded texts of ``nodes``, in order."""
    h = hashlib.sha256()
    for node, text in zip(nodes, embedded_texts(nodes)):
        for part in (node.node_id, text):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\x1f")
    return h.hexdigest()


def embed_factver(corpus: Any, embed_model: Any) -> tuple[np.ndarray, np.ndarray]:
    """FactVer's evidence (embedded as the index embeds it) and claims: ``(n_evidence, d)``, ``(n_claims, d)``."""
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.stores.vector_stores import get_node_embeddings

    ids = [n.node_id for n in corpus.evidence_nodes]
    _, evidence = get_node_embeddings(build_faiss_index(corpus.evidence_nodes, embed_model, show_progress=True), ids)
    claims = embed_model.get_text_embedding_batch(embedded_texts(corpus.claim_nodes), show_progress=True)
    return np.asarray(evidence, dtype=DTYPE), np.asarray(claims, dtype=DTYPE)


def save_vectors(corpus: Any, evidence: np.ndarray, claims: np.ndarray, path: Path = VECTORS) -> Path:
    """Store ``evidence`` ``(n_evidence, d)`` and ``claims`` ``(n_claims, d)`` of ``corpus`` at ``path``.

    Writes a compressed ``.npz``: the distinct vectors ``rows`` ``(n_distinct, d)`` (float32, bit
    for bit as given) and per kind (``evidence``, ``claims``) the ids, the row of each node in
    ``rows`` and the text digest.
    """
    evidence_ids = [n.node_id for n in corpus.evidence_nodes]
    if evidence.shape[0] != len(evidence_ids) or claims.shape[0] != len(corpus.claim_nodes):
        raise ValueError(
            f"{len(evidence)} evidence / {len(claims)} claim vectors for {len(evidence_ids)} / {len(corpus.claim_nodes)} nodes."
        )
    both = np.vstack([np.asarray(evidence, dtype=DTYPE), np.asarray(claims, dtype=DTYPE)])
    rows, inverse = np.unique(both, axis=0, return_inverse=True)  # FactVer repeats passages: store each once
    inverse = inverse.reshape(-1).astype(np.int32)
    np.savez_compressed(
        path,
        rows=rows,
        evidence_ids=np.array(evidence_ids),
        evidence_rows=inverse[: len(evidence_ids)],
        evidence_digest=np.array(text_digest(corpus.evidence_nodes)),
        claims_ids=np.array([n.node_id for n in corpus.claim_nodes]),
        claims_rows=inverse[len(evidence_ids) :],
        claims_digest=np.array(text_digest(corpus.claim_nodes)),
    )
    logger.info("wrote %s (%d bytes)", path, path.stat().st_size)
    return path


def record_vectors(corpus: Any, embed_model: Any, path: Path = VECTORS) -> Path:
    """Embed FactVer with ``embed_model`` (:func:`embed_factver`) and store the vectors (:func:`save_vectors`)."""
    return save_vectors(corpus, *embed_factver(corpus, embed_model), path)


def _checked(data: Any, kind: str, nodes: Sequence[Any], path: Path) -> np.ndarray:
    """The stored ``(len(nodes), d)`` matrix of ``kind`` after checking ids and text digest."""
    ids = [str(x) for x in data[f"{kind}_ids"]]
    if ids != [n.node_id for n in nodes]:
        raise ValueError(
            f"{path}: the stored {kind} ids ({len(ids)}) are not FactVer's ({len(nodes)}); "
            "re-record with `python -m tests.test_regression --record-vectors`."
        )
    if str(data[f"{kind}_digest"]) != text_digest(nodes):
        raise ValueError(
            f"{path}: the FactVer {kind} text changed since the vectors were stored; "
            "re-record with `python -m tests.test_regression --record-vectors`."
        )
    return np.asarray(data["rows"], dtype=np.float32)[data[f"{kind}_rows"]]


def load_vectors(corpus: Any, path: Path = VECTORS) -> tuple[np.ndarray, np.ndarray]:
    """The stored ``(evidence, claims)`` matrices, rows in ``corpus``'s node order.

    Raises:
        FileNotFoundError: no stored vectors.
        ValueError: they were stored for other ids or other text.
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"No stored vectors at {path}; record them with `python -m tests.test_regression --record-vectors`."
        )
    with np.load(path, allow_pickle=False) as data:
        evidence = _checked(data, "evidence", corpus.evidence_nodes, path)
        claims = _checked(data, "claims", corpus.claim_nodes, path)
    return evidence, claims


def with_embeddings(nodes: Sequence[Any], matrix: np.ndarray, *, id_fn: Any = None) -> list[Any]:
    """Copies of ``nodes`` with ``matrix``'s rows (shape ``(len(nodes), d)``) as embeddings, ids mapped by ``id_fn``."""
    if len(nodes) != len(matrix):
        raise ValueError(f"{len(nodes)} nodes but {len(matrix)} vectors.")
    return [
        n.model_copy(update={"embedding": v.tolist(), **({"id_": id_fn(n.node_id)} if id_fn else {})})
        for n, v in zip(nodes, matrix)
    ]


class RefuseEmbedding(BaseEmbedding):
    """An embed model that refuses to embed: everything must come from the stored vectors."""

    @classmethod
    def class_name(cls) -> str:
        return "RefuseEmbedding"

    def _refuse(self, text: str) -> list[float]:
        raise RuntimeError(f"Nothing may be embedded here (the stored vectors are used); asked to embed {text[:60]!r}.")

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._refuse(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._refuse(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._refuse(query)
