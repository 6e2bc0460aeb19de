"""Reading an LLM's fact-checking answer into a structured :class:`Verdict`: the public names.

How answers are read (clean-up, JSON, explicit markers, prose, negations) is described in
:mod:`llama_index_carag.verdicts.parsing` and :mod:`llama_index_carag.verdicts.label_lexicon`.

This module is the public face of verdict reading; the work is done in

* :mod:`llama_index_carag.verdicts.types` — :class:`Verdict` and :class:`VerdictLabel`;
* :mod:`llama_index_carag.verdicts.parsing` — :func:`parse_verdict` and :func:`sentence_stance`
  (they log under ``"llama_index_carag.verdicts.parsing"``);
* :mod:`llama_index_carag.verdicts.label_lexicon` — label words, cue patterns and the rules for negations;
* :mod:`llama_index_carag.verdicts.answer_text` — :func:`answer_sentences` and :func:`trim_explanation` (on the
  package's one sentence splitter, :func:`llama_index_carag.extraction.sentences.split_sentences`), citations.
"""

from __future__ import annotations

from llama_index_carag.verdicts.answer_text import answer_sentences, trim_explanation
from llama_index_carag.verdicts.parsing import parse_verdict, sentence_stance
from llama_index_carag.verdicts.types import Verdict, VerdictLabel

__all__ = [
    "Verdict",
    "VerdictLabel",
    "answer_sentences",
    "parse_verdict",
    "sentence_stance",
    "trim_explanation",
]
