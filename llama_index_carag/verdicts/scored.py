"""Verdicts whose label is decided before the LLM explains it: the verifier's, and ``"score"`` mode's.

**The verifier** (the synthesizer's default, any LLM): :func:`decided` runs a
:class:`~llama_index_carag.verdicts.decision.VerifierDecision` on the passages and gives an unexplained
:class:`~llama_index_carag.verdicts.types.Verdict` (label, the passages it rests on, the reason, every passage's
stance); :func:`explained` puts the LLM's text in it as its checked explanation (also when streaming: the
streamed text is the explanation).

**``"score"`` mode** (``decision="llm"``): score what the decision needs, decide, explain, check.

:class:`ScoredVerdicts` is what :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer`
runs for a local LLM (or a server returning log-probabilities):

1. the scores its :class:`~llama_index_carag.verdicts.decision.LabelDecision` needs: per-passage
   stances (calibrated with the content-free prior of the model, cached per model), the
   whole-evidence label log-likelihoods, claim-passage cosines;
2. the decision: label and the passages it rests on;
3. the explanation generated for that label — after the whole evidence for the whole-evidence
   decisions (the prompt already evaluated for the scores), after the passages the label rests on
   (at most ``explain_passages``, with their own numbers) for the stance decision — checked by
   :func:`~llama_index_carag.verdicts.explanation_checks.checked_verdict`; if it cites none of the
   passages the label rests on, they are cited at its end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.schema import NodeWithScore

from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
from llama_index_carag.verdicts.decision import Decision, LabelDecision, ScoredEvidence, VerdictSettings
from llama_index_carag.verdicts.explanation_checks import checked_verdict, cited_numbers
from llama_index_carag.verdicts.labels.stance import (
    DEFAULT_PRIORS,
    SIDES,
    STANCE_ORDER,
    ContentFreePrior,
    PassageStance,
    score_passages,
)
from llama_index_carag.verdicts.parsing import parse_verdict
from llama_index_carag.verdicts.types import Verdict

logger = logging.getLogger(__name__)

__all__ = [
    "ScoredVerdicts",
    "cite_passages",
    "decided",
    "explained",
    "label_words",
    "with_stances",
    "provenance_cosines",
    "STANCE_KEYS",
    "CUES_KEY",
]

#: Keys of a passage's stance in its ``carag`` provenance (:func:`with_stances` writes them): the stance, its
#: probability, and the probability of each label (``{"SUPPORTED": …, "REFUTED": …, "NOT_ENOUGH_INFO": …}``).
STANCE_KEYS = ("stance", "stance_score", "stance_probabilities")
#: Key of a passage's refutation cues in its ``carag`` provenance (:func:`with_stances` writes it).
CUES_KEY = "cues"

#: Version of the stance prompt: part of the key of the cached content-free prior.
STANCE_PROMPT_VERSION = "stance-v1"

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


# --- "score" mode ----------------------------------------------------------------------------------


@dataclass
class ScoredVerdicts:
    """Scored verdicts for one LLM (see the module docstring).

    Args:
        scorer: a :class:`~llama_index_carag.verdicts.labels.label_scorer.LabelScorer`.
        decision: the :class:`LabelDecision`.
        settings: the synthesizer's :class:`VerdictSettings`.
        messages: ``(claim, texts, ids, numbers) -> chat messages`` of the fact-check prompt.
        embed_model: for claim-passage cosines (decisions that need them).
        model_key: the LLM's name (the content-free prior is cached under it).
        priors: the prior cache.
        domain_prior: a fitted ``DomainLabelPrior`` (its stance lean replaces the content-free prior).
    """

    scorer: Any
    decision: LabelDecision
    settings: VerdictSettings
    messages: MessagesFn
    embed_model: Any = None
    model_key: str = ""
    priors: ContentFreePrior = DEFAULT_PRIORS
    domain_prior: Any = None

    def prior(self) -> Any:
        """The stance prompt's label prior: the archive's (a fitted ``domain_prior`` with stances), else the
        model's content-free one (``None`` with ``calibration="none"``)."""
        if self.settings.calibration == "none":
            return None
        if self._domain_stance() is not None:
            return self._domain_stance()
        return self.priors.prior(self.scorer, f"{self.model_key}|{STANCE_PROMPT_VERSION}")

    def _domain_stance(self) -> Any:
        return getattr(self.domain_prior, "stance_", None)

    def stances(self, claim: str, texts: Sequence[str], ids: Sequence[str]) -> list[PassageStance]:
        """Each passage's calibrated stance towards ``claim`` (an archive prior: divided out over all labels)."""
        full = self.settings.calibration == "content-free-full" or self._domain_stance() is not None
        return score_passages(self.scorer, claim, texts, ids, self.prior(), STANCE_ORDER if full else SIDES)

    def evidence(
        self,
        claim: str,
        texts: Sequence[str],
        ids: Sequence[str],
        cosines: Sequence[float] | None = None,
        claim_embedding: Sequence[float] | None = None,
    ) -> ScoredEvidence:
        """The :class:`ScoredEvidence` the decision needs, except ``joint`` (scored with the explanation).

        ``cosines``: the claim-passage cosines when the retriever gave them (:func:`provenance_cosines`);
        else, if the decision needs them, they are computed with ``embed_model`` (the claim embedded once,
        or ``claim_embedding`` when given).
        """
        needs = self.decision.needs
        stances = self.stances(claim, texts, ids) if "stances" in needs else None
        embedding = None
        if "embedding" in needs:  # first, so that cosines computed below reuse it (the claim embedded once)
            if claim_embedding is None and self.embed_model is None:
                raise ValueError("This decision needs the claim's embedding: pass the retriever's embed_model.")
            if claim_embedding is None:
                claim_embedding = self.embed_model.get_query_embedding(claim)
            embedding = list(map(float, claim_embedding))
        if "cosines" not in needs:
            cosines = None
        elif cosines is None:
            from llama_index_carag.verdicts.labels.rules import evidence_cosines

            found = evidence_cosines(self.embed_model, claim, list(texts), claim_embedding=claim_embedding)
            cosines = list(map(float, found))
        return ScoredEvidence(
            claim,
            list(texts),
            list(ids),
            stances=stances,
            cosines=None if cosines is None else list(cosines),
            claim_embedding=embedding,
        )

    def verdict(
        self,
        claim: str,
        texts: Sequence[str],
        ids: list[str],
        cosines: Sequence[float] | None = None,
        claim_embedding: Sequence[float] | None = None,
    ) -> Verdict:
        """Score, decide, explain and check (module docstring); ``cosines``, ``claim_embedding``: see :meth:`evidence`."""
        evidence = self.evidence(claim, texts, ids, cosines, claim_embedding)
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
            messages = self.messages(claim, [texts[n - 1] for n in shown], [ids[n - 1] for n in shown], shown)
            label, scores, explanation = self.scorer.verdict(messages, decide=lambda _: made[0].label)
        stances = evidence.stances if evidence.stances is not None else (list(made[-1].stances) or None)
        return self._checked(made[-1], explanation, ids, scores, stances)

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
            label_scores=scores.as_dict() if "joint" in self.decision.needs else None,
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
                "passage_stances": None if stances is None else [s.as_dict() for s in stances],
                "passage_cues": None
                if not decision.cues
                else [{"number": i + 1, "id": ids[i], "cues": list(c)} for i, c in enumerate(decision.cues)],
            }
        )


def with_stances(
    nodes: Sequence[NodeWithScore], stances: Sequence[dict] | None, cues: Sequence[dict] | None = None
) -> list[NodeWithScore]:
    """Copies of ``nodes`` whose ``metadata["carag"]`` holds their passage's ``stance``, ``stance_score`` and
    ``stance_probabilities``
    (``stances``: the verdict's ``passage_stances``) or its refutation ``cues`` (the verdict's ``passage_cues``)."""
    if stances and len(stances) == len(nodes):
        found = [
            {STANCE_KEYS[0]: st["stance"], STANCE_KEYS[1]: st["score"]}
            | ({STANCE_KEYS[2]: dict(st["probabilities"])} if st.get("probabilities") else {})
            for st in stances
        ]
    elif cues and len(cues) == len(nodes):
        found = [{CUES_KEY: list(c["cues"])} for c in cues]
    else:
        return list(nodes)
    out = []
    for n, extra in zip(nodes, found):
        metadata = dict(n.node.metadata)
        metadata[CARAG_METADATA_KEY] = {**dict(metadata.get(CARAG_METADATA_KEY) or {}), **extra}
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


def provenance_cosines(nodes: Sequence[NodeWithScore]) -> list[float] | None:
    """Each node's claim cosine from its ``carag`` provenance (``claim_similarity``, computed by the
    retriever), or ``None`` unless every node has one."""
    cosines: list[float] = []
    for n in nodes:
        cosine = (n.node.metadata.get(CARAG_METADATA_KEY) or {}).get("claim_similarity")
        if cosine is None:
            return None
        cosines.append(float(cosine))
    return cosines
