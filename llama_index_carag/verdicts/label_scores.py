"""Labels that always parse: the three label strings scored by log-likelihood, then the explanation.

One :class:`LabelScorer` serves every LLM backend that returns log-likelihoods
(:class:`~llama_index_carag.models.backend.LLMBackend`; transformers, llama.cpp, OpenAI-compatible servers
that echo prompt log-probabilities, and any backend registered later).  It renders the fact-check chat
prompt, opens the answer with ``Verdict:``, has the backend score each label string after it
(:data:`LABEL_STRINGS`: ``" SUPPORTED"``, ``" REFUTED"``, ``" NOT ENOUGH INFO"``, the sum of its token
log-probabilities, :class:`LabelScores`) and, once a decision has picked the label, generate the explanation
after ``Verdict: <label>\\nExplanation:`` on the same prompt state.  The label is therefore always one of the
three, whatever the model would have written.  The backends supply only what differs (scoring strings,
generating); the verdict path (:meth:`LabelScorer.verdict`) is this one.

:func:`scorer_for` finds the scorer of a LlamaIndex LLM through the backend registry
(:func:`~llama_index_carag.models.resolve.backend_for`, by class).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index_carag.models.backend import LLMBackend
from llama_index_carag.models.resolve import backend_for
from llama_index_carag.verdicts import VerdictLabel, answer_sentences

logger = logging.getLogger(__name__)

#: The text each label is scored as, after ``Verdict:``.
LABEL_STRINGS: dict[VerdictLabel, str] = {
    VerdictLabel.SUPPORTED: " SUPPORTED",
    VerdictLabel.REFUTED: " REFUTED",
    VerdictLabel.NOT_ENOUGH_INFO: " NOT ENOUGH INFO",
}
#: The assistant turn opens with this; the label strings follow it.
ANSWER_PREFIX = "Verdict:"


@dataclass(frozen=True)
class LabelScores:
    """Log-likelihoods of the three label strings after the prompt (natural log, summed over tokens)."""

    logprobs: Mapping[VerdictLabel, float]

    def as_dict(self) -> dict[str, float]:
        return {k.value: round(float(v), 4) for k, v in self.logprobs.items()}


def hold_prompt_opening(llm: Any) -> None:
    """Evaluate the default fact-check prompt's opening turn (its system message) on ``llm`` now, where its backend
    keeps it between prompts (llama.cpp, :meth:`~llama_index_carag.models.backend.LLMBackend.hold_opening`): the
    first explanation then starts after it.  Nothing for other LLMs."""
    from llama_index_carag.verdicts.prompts import FACT_CHECK_CHAT_PROMPT

    backend = backend_for(llm)
    if backend is None:
        return
    try:
        backend.hold_opening(FACT_CHECK_CHAT_PROMPT.format_messages(query_str="", context_str=""))
    except Exception as exc:  # a head start only: the first explanation evaluates the opening itself
        logger.warning("The prompt opening was not evaluated ahead (%s).", exc)


#: A full stop that may not end the sentence yet: after a digit ("35." of "35.2%"); the next token tells (a sentence
#: that does end there splits from the next one: "in 2001. The").  Not after a lone capital: "vitamin D. The" does
#: not split, so waiting there would run the sentence on.
_OPEN_STOP_RE = re.compile(r"\d\.$")
#: Where the sentence splitter can end a sentence: its full stops, question and exclamation marks, a line break.
_SENTENCE_ENDS = frozenset(".!?。．！？\n\r")
#: A citation being written after a full stop ("… in 2001. [1"): not a further sentence.
_CITATION_START_RE = re.compile(r"^\[[\d,\s–-]*\]?$")


def explanation_complete(text: str, max_sentences: int) -> bool:
    """Whether a generated explanation can stop: ``max_sentences`` sentences complete (or a further one begun), a
    blank line, or a new ``Verdict:``.

    ``explanation_complete("The data shows X [1]. It does not say Y.", 2)`` → ``True``; ``"… only 35."`` →
    ``False`` (``35.2 %`` may follow).
    """
    if "\n\n" in text.strip() or ANSWER_PREFIX in text:
        return True
    ends = text.rstrip(" \"')]*")[-1:] in (".", "!", "?") and not _OPEN_STOP_RE.search(text)
    if not ends and sum(char in _SENTENCE_ENDS for char in text) < max_sentences:
        return False  # too few places for a sentence to end: no further one can have begun (the splitter not asked)
    sentences = answer_sentences(text)
    if len(sentences) > max_sentences and not _CITATION_START_RE.match(sentences[-1]):  # a further one has begun
        return True
    return ends and len(sentences) >= max_sentences


def clean_explanation(text: str) -> str:
    """The explanation part of generated text: up to a blank line or a new ``Verdict:``, stripped."""
    return text.split("\n\n")[0].split(ANSWER_PREFIX)[0].strip()


def unfinished(sentence: str) -> bool:
    """Whether a generated sentence stops mid-way — no full stop, question or exclamation mark, ellipsis or
    closing citation at its end (closing quotes and brackets aside), as where the token budget ran out in it."""
    return not sentence.rstrip(" \"'”’)*").endswith((".", "!", "?", "…", "]"))


#: What follows the chosen label before the explanation is generated.
EXPLANATION_CUE = "\nExplanation:"
#: Generation stops at these strings (a blank line, or the model starting another verdict).
EXPLANATION_STOPS = ("\n\n", ANSWER_PREFIX)


def scorer_for(
    llm: Any, max_new_tokens: int | None = None, max_sentences: int = 2, explain: bool = True
) -> LabelScorer | None:
    """The label scorer of ``llm``: ``None`` where no registered backend runs it or its backend returns text only.

    Args:
        llm: a LlamaIndex LLM.
        max_new_tokens: budget of the explanation (default: the LLM's, at most 96).
        max_sentences: the explanation stops once this many sentences are complete.
        explain: generate the explanation (``False``: the labels are scored only, the explanation is ``""``).
    """
    backend = backend_for(llm, max_new_tokens)
    if backend is None or not backend.supports_logprobs():
        return None
    return LabelScorer(backend, max_sentences, explain)


@dataclass
class LabelScorer:
    """Score the labels with an LLM backend, then write the explanation of the chosen one.

    Args:
        backend: the :class:`~llama_index_carag.models.backend.LLMBackend` of the LLM (one that returns
            log-likelihoods).
        max_sentences: generation stops once this many sentences are complete (or at a blank line / a
            new ``Verdict:``); longer text is cut to them.
        with_explanation: generate the explanation after the label (``False``: :meth:`verdict` scores and
            decides only, and its explanation is ``""``).
    """

    backend: LLMBackend
    max_sentences: int = 2
    with_explanation: bool = True

    @property
    def llm(self) -> Any:
        """The LlamaIndex LLM scored."""
        return self.backend.llm

    @property
    def max_new_tokens(self) -> int:
        """The explanation's budget in tokens."""
        return self.backend.max_new_tokens

    def render(self, messages: Sequence[Any], prefix: str = ANSWER_PREFIX) -> str:
        """The prompt text: ``messages`` (LlamaIndex ``ChatMessage``s) through the model's chat template, then ``prefix``."""
        return self.backend.render(messages, prefix)

    # ----------------------------------------------------------- scoring
    def score(self, messages: Sequence[Any], labels: bool = True) -> tuple[LabelScores, Any, list[int]]:
        """``(scores, state, prompt_ids)``: the three labels scored after the rendered prompt and ``Verdict:``
        (``labels=False``: the prompt alone is evaluated, the scores are empty).

        ``state`` is what :meth:`explain` continues from (the backend's: a KV cache, the prompt text, ``None``).
        """
        options = LABEL_STRINGS if labels else {}
        logprobs, state, prompt_ids = self.backend.score_options(messages, options, ANSWER_PREFIX)
        return LabelScores(logprobs), state, prompt_ids

    # ----------------------------------------------------------- explaining
    def explain(self, label: VerdictLabel, state: Any, prompt_ids: list[int]) -> str:
        """The explanation generated after ``Verdict: <label>\\nExplanation:`` (``state`` from :meth:`score`): at most
        :attr:`max_sentences` sentences, without a last one left unfinished (:func:`unfinished`: the token budget
        cut it short) when a finished one comes before it."""
        text = self.backend.generate(
            state,
            prompt_ids,
            LABEL_STRINGS[label] + EXPLANATION_CUE,
            lambda generated: explanation_complete(generated, self.max_sentences),
            EXPLANATION_STOPS,
        )
        text = clean_explanation(text)
        sentences = answer_sentences(text)
        if len(sentences) > 1 and unfinished(sentences[-1]):  # cut short (the budget): the finished ones stand
            sentences = sentences[:-1]
            text = " ".join(sentences)
        return " ".join(sentences[: self.max_sentences]) if len(sentences) > self.max_sentences else text

    def verdict(
        self, messages: Sequence[Any], decide: Callable[[LabelScores], VerdictLabel]
    ) -> tuple[VerdictLabel, LabelScores, str]:
        """``(label, scores, explanation)`` for one prompt: the labels scored, ``decide(scores)`` picks one, then
        its explanation is generated on the same prompt state (the backend's session held throughout); the
        explanation is ``""`` when :attr:`with_explanation` is off (nothing generated)."""
        with self.backend.session():
            scores, state, prompt_ids = self.score(messages)
            label = decide(scores)
            return label, scores, self.explain(label, state, prompt_ids) if self.with_explanation else ""

    def explain_label(self, messages: Sequence[Any], label: VerdictLabel) -> str:
        """The explanation of a label decided elsewhere (the claim verifier's): the prompt evaluated, no label
        scored, the explanation generated after ``Verdict: <label>\\nExplanation:``; ``""`` when
        :attr:`with_explanation` is off (nothing is asked of the LLM)."""
        if not self.with_explanation:
            return ""
        with self.backend.session():
            _, state, prompt_ids = self.score(messages, labels=False)
            return self.explain(label, state, prompt_ids)
