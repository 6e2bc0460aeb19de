"""Which candidate sources and scorers a retriever's settings ask for (one place to add a new one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from llama_index_carag.ranking.lexical import LexicalRelevance, LexicalSource
from llama_index_carag.ranking.protocols import CandidateSource, Scorer
from llama_index_carag.ranking.sources import DenseSource

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_carag.retrieval.fitting import FittedCorpus
    from llama_index_carag.settings import CaragSettings

__all__ = ["default_sources", "lexical_source", "settings_scorers"]


def default_sources(
    index: "VectorStoreIndex", corpus: "FittedCorpus", settings: "CaragSettings", embed_model: "BaseEmbedding"
) -> list[CandidateSource]:
    """The dense vector-store search, plus BM25 when ``lexical_weight > 0`` (and the corpus has its index)."""
    from llama_index_carag.retrieval.updates import nodes_by_id

    sources: list[CandidateSource] = [DenseSource(index, embed_model, lambda: corpus.exclude_ids)]
    if settings.lexical_weight > 0 and corpus.lexical is not None:
        sources.append(LexicalSource(corpus.lexical, lambda ids: nodes_by_id(index, ids), lambda: corpus.exclude_ids))
    return sources


def lexical_source(sources: Sequence[CandidateSource]) -> LexicalSource | None:
    """The BM25 source among ``sources``, if any."""
    return next((src for src in sources if isinstance(src, LexicalSource)), None)


def settings_scorers(settings: "CaragSettings", corpus: "FittedCorpus", sources: Sequence[CandidateSource]) -> list[Scorer]:
    """The re-ranking terms beyond claim and thematic similarity that ``settings`` switch on."""
    out: list[Scorer] = []
    lexical = lexical_source(sources)
    if settings.lexical_weight > 0 and lexical is not None:
        out.append(LexicalRelevance(lexical))
    if settings.hub_penalty > 0:
        out.append(corpus.hubness[settings.hub_k])
    if settings.claim_contrast > 0 and corpus.contrast is not None:
        out.append(corpus.contrast.with_threshold(settings.contrast_threshold))
    return out
