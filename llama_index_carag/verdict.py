"""Turn an LLM's free-text fact-checking answer into a structured :class:`Verdict`.

The model is shown a claim and k numbered passages ``[1] … [k]`` and asked
whether the evidence SUPPORTS or REFUTES the claim or is NOT ENOUGH INFO, with
an explanation of at most two sentences.  Small chat models answer in many
shapes; :func:`parse_verdict` reads them in this order, the first that yields a
label wins:

1. **Clean-up** — chat-template leftovers (``<|im_start|>assistant``,
   ``<|im_end|>``, ``</s>``, ``[/INST]`` …), code fences, leading
   ``Assistant:`` / ``Answer:`` and echoed ``Claim:`` lines are removed.  When
   the prompt was echoed, only the last non-empty assistant turn is read.
2. **JSON** — the first JSON object with a label key (``verdict``, ``label``,
   ``answer`` …; case-insensitive, one level of nesting, single quotes and
   trailing commas tolerated).  Truncated JSON is read field by field.
3. **Explicit markers** — ``Verdict: REFUTED``, ``**Label** - supported``,
   ``the verdict is X``, ``Final answer: true`` and a bare label opening the
   answer (``SUPPORTED. …``, ``Yes, …``).  Markers win over prose; when two
   markers disagree the first wins and a warning is logged.
4. **Prose** — the first cue in the first sentence that has one (questions and
   ``whether …`` clauses are skipped); failing that, a sentence saying the
   evidence does not mention / address the claim means NOT_ENOUGH_INFO.

Negations (decision for the ambiguous cases, applied over the whole answer):
"not supported" / "does not support" → REFUTED if the answer also contains a
refuting cue (contradicts, false …), else NOT_ENOUGH_INFO if it says the
evidence does not mention / address / lacks / is insufficient / gives no
information, else REFUTED.  "not confirmed / not verified" → REFUTED with a
refuting cue, else NOT_ENOUGH_INFO.  "not false" / "not refuted" → SUPPORTED
unless the answer has those NOT_ENOUGH_INFO cues.

This module is the public face of verdict reading; the work is done in

* :mod:`llama_index_carag.verdict_types` — :class:`Verdict` and :class:`VerdictLabel`;
* :mod:`llama_index_carag.verdict_parsing` — :func:`parse_verdict` and :func:`sentence_stance`
  (they log under this module's name, ``"llama_index_carag.verdict"``);
* :mod:`llama_index_carag.verdict_cues` — label words, cue patterns and the rules for negations above;
* :mod:`llama_index_carag.verdict_citations` — citation numbers and ids;
* :mod:`llama_index_carag.sentences` — :func:`split_sentences` and :func:`trim_to_sentences`.
"""

from __future__ import annotations

from llama_index_carag.sentences import split_sentences, trim_to_sentences
from llama_index_carag.verdict_parsing import parse_verdict, sentence_stance
from llama_index_carag.verdict_types import Verdict, VerdictLabel

__all__ = ["Verdict", "VerdictLabel", "parse_verdict", "split_sentences", "trim_to_sentences", "sentence_stance"]
