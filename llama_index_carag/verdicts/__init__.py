"""Reading an LLM's fact-checking answer into a structured :class:`Verdict`: the public names.

How answers are read (clean-up, JSON, explicit markers, prose, negations, citations) is described in
:mod:`llama_index_carag.verdicts.parsing` (:func:`parse_verdict`, :func:`sentence_stance`,
:func:`answer_sentences`, :func:`trim_explanation`; it logs under ``"llama_index_carag.verdicts.parsing"``);
:class:`Verdict` and :class:`VerdictLabel` are in :mod:`llama_index_carag.verdicts.types`.
"""

from __future__ import annotations

from llama_index_carag.verdicts.parsing import answer_sentences, parse_verdict, sentence_stance, trim_explanation
from llama_index_carag.verdicts.types import Verdict, VerdictLabel

__all__ = [
    "Verdict",
    "VerdictLabel",
    "answer_sentences",
    "parse_verdict",
    "sentence_stance",
    "trim_explanation",
]
