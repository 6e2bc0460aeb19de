"""Reading an LLM's fact-checking answer into a structured :class:`Verdict`: the public names.

How answers are read (clean-up, JSON, explicit markers, prose, negations) is described in
:mod:`llama_index_carag.verdict_parsing` and :mod:`llama_index_carag.verdict_cues`.

This module is the public face of verdict reading; the work is done in

* :mod:`llama_index_carag.verdict_types` — :class:`Verdict` and :class:`VerdictLabel`;
* :mod:`llama_index_carag.verdict_parsing` — :func:`parse_verdict` and :func:`sentence_stance`
  (they log under this module's name, ``"llama_index_carag.verdict"``);
* :mod:`llama_index_carag.verdict_cues` — label words, cue patterns and the rules for negations;
* :mod:`llama_index_carag.verdict_citations` — citation numbers and ids;
* :mod:`llama_index_carag.sentences` — :func:`split_sentences` and :func:`trim_to_sentences`.
"""

from __future__ import annotations

from llama_index_carag.sentences import split_sentences, trim_to_sentences
from llama_index_carag.verdict_parsing import parse_verdict, sentence_stance
from llama_index_carag.verdict_types import Verdict, VerdictLabel

__all__ = ["Verdict", "VerdictLabel", "parse_verdict", "split_sentences", "trim_to_sentences", "sentence_stance"]
