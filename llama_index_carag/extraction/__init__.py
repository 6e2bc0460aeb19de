"""Claims from a text: sentences with exact spans, check-worthiness cues, the decision, :func:`extract_claims`.

* :mod:`~llama_index_carag.extraction.sentences` — sentence spans (pysbd).
* :mod:`~llama_index_carag.extraction.cues` — the cue registry, the sentence's words it reads and the word lists.
* :mod:`~llama_index_carag.extraction.claims` — :class:`ExtractedClaim`, :func:`extract_claims`, the scorer
  protocol and the declared cue rule.
"""

from llama_index_carag.extraction.claims import (
    RULE_THRESHOLD,
    Assessment,
    CheckWorthinessScorer,
    CueScorer,
    ExtractedClaim,
    extract_claims,
)
from llama_index_carag.extraction.cues import CUES
from llama_index_carag.extraction.sentences import split_sentences

__all__ = [
    "CUES",
    "RULE_THRESHOLD",
    "Assessment",
    "CheckWorthinessScorer",
    "ExtractedClaim",
    "CueScorer",
    "extract_claims",
    "split_sentences",
]
