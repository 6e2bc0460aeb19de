"""Verdicts whose label is decided before the LLM explains it: the verifier's, and ``"score"`` mode's.

**The verifier** (the synthesizer's default, any LLM): :func:`decided` runs a
:class:`~llama_index_carag.verdicts.decision.VerifierDecision` on the passages and gives an unexplained
:class:`~llama_index_carag.verdicts.types.Verdict` (label, the passages it rests on, the reason, every passage's
stance); :func:`explained` puts the LLM's text in it as its checked explanation (also when streaming: the
streamed text is the explanation).

**``"score"`` mode** (a local LLM, or a server returning log-probabilities): :class:`ScoredVerdicts` is what
:class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer` runs:

1. the decision (:class:`~llama_index_carag.verdicts.decision.LabelDecision`): ``decision="llm"``'s arg-max reads the
   whole-evidence label log-likelihoods; the verifier reads the passages itself (the LLM then scores no label:
   :meth:`~llama_index_carag.verdicts.label_scores.LabelScorer.explain_label`);
2. the explanation generated for that label — after the whole evidence for the arg-max (the prompt already
   evaluated for the scores), after the passages the verifier's label rests on (at most ``explain_passages``,
   with their own numbers; a passage longer than the verifier reads at once as the chunk its stance was read
   from, :meth:`~llama_index_carag.verifier.model.ClaimVerifier.readings`) — checked by :func:`~llama_index_carag.verdicts.explanation_checks.checked_verdict`;
   if it cites none of the passages the label rests on, they are cited at its end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.schema import NodeWithScore

from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
from llama_index_carag.verdicts.decision import Decision, LabelDecision, ScoredEvidence, VerdictSettings
from llama_index_carag.verdicts.excerpts import as_read, shown_excerpt
from llama_index_carag.verdicts.explanation_checks import checked_verdict, cited_numbers, temper_explanation
from llama_index_carag.verdicts.parsing import parse_verdict
from llama_index_carag.verdicts.types import PassageStance, Verdict, confidence_words

logger = logging.getLogger(__name__)

#: Keys of a passage's stance in its ``carag`` provenance (:func:`with_stances` writes them): the stance, its
#: probability, the probability of each label (``{"SUPPORTED": …, "REFUTED": …, "NOT_ENOUGH_INFO": …}``) and, for a
#: passage longer than one of the verifier's chunks, the excerpt its stance was read from.
STANCE_KEYS = ("stance", "stance_score", "stance_probabilities", "stance_excerpt")

MessagesFn = Callable[[str, Sequence[str], Sequence[str] | None, Sequence[int] | None], list]


def cite_passages(explanation: str, numbers: Sequence[int]) -> str:
    """``explanation`` citing ``numbers`` at its end if it cites none of them (pure).

    ``cite_passages("The study found X.", [2, 4])`` → ``"The study found X [2, 4]."``
    """
    if not numbers or set(cited_numbers(explanation)) & set(numbers):
        return explanation
    text = explanation.rstrip()
    tag = "[" + ", ".join(str(n) for n in numbers) + "]"
    if text[-1:] in (".", "!", "?"):
        return f"{text[:-1]} {tag}{text[-1]}"
    return f"{text} {tag}."


# --- the verifier's verdict: decided with no LLM, then explained -----------------------------------

_KEPT = ("decision", "decision_passages", "decision_reason", "passage_stances", "confidence")


def decided(decision: LabelDecision, claim: str, texts: Sequence[str], ids: Sequence[str]) -> Verdict:
    """The unexplained verdict of ``decision`` on the passages (``explanation`` empty, ``method="verifier"``)."""
    made = decision.decide(ScoredEvidence(claim, list(texts), list(ids)))
    verdict = Verdict(
        label=made.label,
        explanation="",
        raw="",
        method="verifier",
        decision=decision.name,
        decision_passages=list(made.passages),
        decision_reason=made.reason,
        passage_stances=list(made.stances),
        confidence=made.confidence,
    )
    return verdict.model_copy(update={"raw": f"Verdict: {verdict.label.value.replace('_', ' ')}\nExplanation: "})


def label_words(verdict: Verdict) -> str:
    """The label as the explanation prompt shows it (``NOT ENOUGH INFO``, ``REFUTED (likely, 74%)``)."""
    words = verdict.label.value.replace("_", " ")
    return f"{words} ({confidence_words(verdict.confidence)})" if verdict.confidence is not None else words


def explained(
    verdict: Verdict, text: str, ids: Sequence[str], *, max_sentences: int = 2, explain_passages: int = 3
) -> Verdict:
    """``verdict`` with the LLM's ``text`` as its explanation: the part after ``Explanation:`` if the model wrote
    one, checked (at most ``max_sentences``, citations only to shown passages, no sentence against the label),
    citing the passages the label rests on when it cites none of them, and tempered to the label's confidence
    (:func:`~llama_index_carag.verdicts.explanation_checks.temper_explanation`)."""
    body = parse_verdict(f"Verdict: {verdict.label.value}\n{text}" if "xplanation" in text else text).explanation
    rests_on = verdict.decision_passages[:explain_passages]
    checked = checked_verdict(
        verdict.label,
        cite_passages(body or text, rests_on),
        [str(i) for i in ids],
        raw=text,
        method="verifier",
        max_sentences=max_sentences,
    )
    kept: dict[str, Any] = {k: getattr(verdict, k) for k in _KEPT}
    kept["explanation"] = temper_explanation(checked.explanation, verdict.confidence)
    return checked.model_copy(update=kept)


# --- "score" mode ----------------------------------------------------------------------------------


@dataclass
class ScoredVerdicts:
    """Scored verdicts for one LLM (see the module docstring).

    Args:
        scorer: a :class:`~llama_index_carag.verdicts.label_scores.LabelScorer`.
        decision: the :class:`LabelDecision`.
        settings: the synthesizer's :class:`VerdictSettings`.
        messages: ``(claim, texts, ids, numbers) -> chat messages`` of the fact-check prompt.
    """

    scorer: Any
    decision: LabelDecision
    settings: VerdictSettings
    messages: MessagesFn

    def verdict(self, claim: str, texts: Sequence[str], ids: list[str]) -> Verdict:
        """Decide, explain and check (module docstring)."""
        evidence = ScoredEvidence(claim, list(texts), list(ids))
        made: list[Decision] = []

        def decide(scores: Any) -> Any:
            made.append(self.decision.decide(replace(evidence, joint=scores.logprobs)))
            return made[-1].label

        if "joint" in self.decision.needs:
            label, scores, explanation = self.scorer.verdict(self.messages(claim, texts, ids, None), decide=decide)
        else:
            made.append(self.decision.decide(evidence))
            shown = list(made[0].passages[: self.settings.explain_passages]) or list(
                range(1, min(len(texts), self.settings.explain_passages) + 1)
            )
            read = as_read(texts, made[0].stances)
            messages = self.messages(claim, [read[n - 1] for n in shown], [ids[n - 1] for n in shown], shown)
            scores, explanation = None, self.scorer.explain_label(messages, made[0].label)
        return self._checked(made[-1], explanation, ids, scores, list(made[-1].stances) or None)

    def _checked(
        self, decision: Decision, explanation: str, ids: list[str], scores: Any, stances: Sequence[PassageStance] | None
    ) -> Verdict:
        rests_on = list(decision.passages[: self.settings.explain_passages])
        method = "verifier" if self.decision.name == "verifier" else "scored"
        verdict = checked_verdict(
            decision.label,
            explanation,
            ids,
            raw="",
            method=method,
            label_scores=None if scores is None else scores.as_dict(),
            max_sentences=self.settings.max_sentences,
        )
        cited = cite_passages(verdict.explanation, rests_on) if stances is not None else verdict.explanation
        if cited != verdict.explanation:  # the tag goes before the final stop: no sentence is added
            verdict = checked_verdict(
                decision.label,
                cited,
                ids,
                raw="",
                method=method,
                label_scores=verdict.label_scores,
                max_sentences=self.settings.max_sentences,
            )
        return verdict.model_copy(
            update={
                "decision": self.decision.name,
                "decision_passages": list(decision.passages),
                "decision_reason": decision.reason,
                "passage_stances": None if stances is None else list(stances),
                "confidence": decision.confidence,
                "explanation": temper_explanation(verdict.explanation, decision.confidence),
            }
        )


def with_stances(nodes: Sequence[NodeWithScore], stances: Sequence[PassageStance] | None) -> list[NodeWithScore]:
    """Copies of ``nodes`` whose ``metadata["carag"]`` holds their passage's ``stance``, ``stance_score``,
    ``stance_probabilities`` and, for a long passage, ``stance_excerpt`` (:func:`shown_excerpt`) — replacing any
    they held (``stances``: the verdict's ``passage_stances``), for a query engine's user who reads a response's
    source nodes."""
    if not stances or len(stances) != len(nodes):
        return list(nodes)
    found = [
        {STANCE_KEYS[0]: st.stance.value, STANCE_KEYS[1]: st.score}
        | ({STANCE_KEYS[2]: dict(st.probabilities)} if st.probabilities else {})
        for st in stances
    ]
    out = []
    for n, st, extra in zip(nodes, stances, found):
        excerpt = shown_excerpt(n.node.get_content(), st.excerpt)
        metadata = dict(n.node.metadata)
        kept = {k: v for k, v in dict(metadata.get(CARAG_METADATA_KEY) or {}).items() if k not in STANCE_KEYS}
        metadata[CARAG_METADATA_KEY] = kept | extra | ({STANCE_KEYS[3]: excerpt} if excerpt else {})
        excluded = list(n.node.excluded_llm_metadata_keys)
        excluded += [CARAG_METADATA_KEY] if CARAG_METADATA_KEY not in excluded else []
        embed_excl = list(n.node.excluded_embed_metadata_keys)
        embed_excl += [CARAG_METADATA_KEY] if CARAG_METADATA_KEY not in embed_excl else []
        node = n.node.model_copy(
            update={
                "metadata": metadata,
                "excluded_llm_metadata_keys": excluded,
                "excluded_embed_metadata_keys": embed_excl,
            }
        )
        out.append(NodeWithScore(node=node, score=n.score))
    return out
