"""The verifier's verdict: decided first, with no LLM, then explained by the LLM.

:func:`decided` runs a :class:`~llama_index_carag.verdicts.decision.VerifierDecision` on the passages and gives
an unexplained :class:`~llama_index_carag.verdicts.types.Verdict` (label, the passages it rests on, the reason,
every passage's stance); :func:`explained` puts the LLM's text in it as its checked explanation.  The synthesizer
uses both in every label mode and when streaming (the streamed text is the explanation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index_carag.verdicts.decision import LabelDecision, ScoredEvidence
from llama_index_carag.verdicts.explanation_checks import checked_verdict
from llama_index_carag.verdicts.parsing import parse_verdict
from llama_index_carag.verdicts.scored import cite_passages
from llama_index_carag.verdicts.types import Verdict

__all__ = ["decided", "explained", "label_words"]

_KEPT = ("decision", "decision_passages", "decision_reason", "passage_stances")


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
        passage_stances=[st.as_dict() for st in made.stances],
    )
    return verdict.model_copy(update={"raw": f"Verdict: {label_words(verdict)}\nExplanation: "})


def label_words(verdict: Verdict) -> str:
    """The label as the explanation prompt shows it (``NOT ENOUGH INFO``)."""
    return verdict.label.value.replace("_", " ")


def explained(
    verdict: Verdict, text: str, ids: Sequence[str], *, max_sentences: int = 2, explain_passages: int = 3
) -> Verdict:
    """``verdict`` with the LLM's ``text`` as its explanation: the part after ``Explanation:`` if the model wrote
    one, checked (at most ``max_sentences``, citations only to shown passages, no sentence against the label) and
    citing the passages the label rests on when it cites none of them."""
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
    return checked.model_copy(update=kept)
