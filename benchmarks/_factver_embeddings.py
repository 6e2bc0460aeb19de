"""FactVer claim/evidence embeddings, computed once per encoder and cached under .cache/ (git-ignored)."""

from __future__ import annotations

import time

import numpy as np
from _common import FACTVER, REPO
from llama_index.core.schema import MetadataMode

from llama_index_carag import load_factver
from llama_index_carag.models.resolve import resolve_embed_model


def factver_embeddings(model_name: str = "minilm"):
    """Returns ``(corpus, evidence_matrix, claim_matrix, embed_model)`` with node embeddings set."""
    corpus = load_factver(FACTVER)
    model = resolve_embed_model(model_name)
    cache = REPO / ".cache" / f"factver_{model_name}.npz"
    ids = [n.node_id for n in corpus.evidence_nodes] + [n.node_id for n in corpus.claim_nodes]
    E = C = None
    if cache.is_file():
        data = np.load(cache, allow_pickle=False)
        if list(data["ids"]) == ids:
            E, C = data["E"], data["C"]
    if E is None:
        t0 = time.perf_counter()
        E = np.asarray(
            model.get_text_embedding_batch(
                [n.get_content(MetadataMode.EMBED) for n in corpus.evidence_nodes], show_progress=True
            ),
            np.float32,
        )
        C = np.asarray(
            model.get_text_embedding_batch(
                [n.get_content(MetadataMode.EMBED) for n in corpus.claim_nodes], show_progress=True
            ),
            np.float32,
        )
        print(f"embedded FactVer with {model_name} in {time.perf_counter() - t0:.0f} s")
        cache.parent.mkdir(exist_ok=True)
        np.savez(cache, E=E, C=C, ids=np.array(ids))
    for node, v in zip(corpus.evidence_nodes, E):
        node.embedding = v.tolist()
    for node, v in zip(corpus.claim_nodes, C):
        node.embedding = v.tolist()
    return corpus, E, C, model
