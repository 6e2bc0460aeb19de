"""``carag paper-table``: the papers' thematic-alignment table from their published explanations."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def cmd_paper_table(args: argparse.Namespace) -> int:
    from llama_index_carag.datasets import load_factver
    from llama_index_carag.evaluation.paper import (
        PUBLISHED_CARAG_TABLE4,
        PUBLISHED_CARAG_U_TABLE1A,
        load_explanations,
        paper_table,
    )
    from llama_index_carag.models.resolve import resolve_embed_model

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    expl = load_explanations(args.explanations, methods)
    corpus = load_factver(args.data)
    model = resolve_embed_model(args.embed_model)
    projections = ["pca"] if args.no_tsne else ["pca", "tsne"]
    vectors = _cached_evidence_vectors(corpus, model, args.cache_dir, show_progress=not args.json)
    table = paper_table(
        expl,
        corpus,
        model,
        projections=projections,
        n_components=args.dims,
        seed=args.seed,
        corpus_vectors=vectors,
        show_progress=not args.json,
    )
    if args.json:
        print(json.dumps(table.to_dict(overall=False), indent=2))
        return 0
    published = PUBLISHED_CARAG_U_TABLE1A if ("CARAG_U" in expl.methods or args.dims == 3) else PUBLISHED_CARAG_TABLE4
    print(
        f"{len(expl.claims)} claims, methods {', '.join(expl.methods)}; corpus: {table.meta['n_corpus']} evidence "
        f"passages; {args.dims}-D projections; t-SNE seed {args.seed}"
    )
    print(table.to_markdown(published))
    return 0


def _cached_evidence_vectors(corpus: Any, model: Any, cache_dir: str | None, *, show_progress: bool) -> Any:
    """Evidence embeddings, cached as ``.npz`` under ``cache_dir`` (keyed by model and node ids)."""
    if not cache_dir:
        return None
    import hashlib

    import numpy as np
    from llama_index.core.schema import MetadataMode

    from llama_index_carag.models.resolve import embed_model_name

    ids = [n.node_id for n in corpus.evidence_nodes]
    key = hashlib.sha256(("\x00".join([embed_model_name(model), *ids])).encode("utf-8", "surrogatepass")).hexdigest()[
        :16
    ]
    path = Path(cache_dir) / f"evidence-{key}.npz"
    if path.is_file():
        return np.load(path, allow_pickle=False)["vectors"]
    texts = [n.get_content(MetadataMode.EMBED) for n in corpus.evidence_nodes]
    vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, vectors=vectors)
    return vectors
