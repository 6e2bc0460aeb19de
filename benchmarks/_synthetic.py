"""Synthetic corpora for the scale benchmarks: random unit vectors around planted cluster centres."""

from __future__ import annotations

import numpy as np


def planted_vectors(n: int, dim: int = 384, n_centres: int = 50, spread: float = 1.0, seed: int = 0) -> np.ndarray:
    """``(n, dim)`` float32 unit vectors: centre + Gaussian noise, normalised.

    ``spread`` scales the noise relative to the centre (1.0 gives within-centre
    cosines around 0.5, so SOIs at delta=0.75 hold a few items, as on FactVer).
    Generated in chunks, so memory stays at one copy of the output.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_centres, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        stop = min(n, start + 100_000)
        which = rng.integers(0, n_centres, size=stop - start)
        block = centres[which] + spread * rng.normal(size=(stop - start, dim)).astype(np.float32) / np.sqrt(dim)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:stop] = block
    return out


def synthetic_index(vectors: np.ndarray):
    """A ``VectorStoreIndex`` over a FAISS ``IndexFlatIP`` holding ``vectors``, with tiny docstore nodes.

    Built directly (one ``faiss.add`` call, node ids ``n0`` …) instead of through
    ``VectorStoreIndex(nodes)``, which would hold every embedding as a Python list.
    """
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.faiss import FaissVectorStore

    n, dim = vectors.shape
    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    storage = StorageContext.from_defaults(vector_store=FaissVectorStore(faiss_index=flat))
    index = VectorStoreIndex(nodes=[], storage_context=storage, embed_model=MockEmbedding(embed_dim=dim))
    for i in range(n):
        index.index_struct.nodes_dict[str(i)] = f"n{i}"
    storage.index_store.add_index_struct(index.index_struct)
    batch = 50_000
    for start in range(0, n, batch):
        storage.docstore.add_documents(
            [TextNode(id_=f"n{i}", text=f"synthetic passage {i}") for i in range(start, min(n, start + batch))],
            allow_update=False,
        )
    return index
