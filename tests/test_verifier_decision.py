"""The verifier as the synthesizer's default decision, and its adaptation to an archive."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.synthesizer import VERDICT_KEY, FactCheckSynthesizer, get_fact_check_synthesizer
from llama_index_carag.verifier.archive import (
    CANDIDATES,
    LEVEL,
    MARGIN,
    MIN_HEAD,
    MIN_LINKED,
    RESAMPLES,
    ArchiveClaim,
    archive_claims,
    fit_archive_verifier,
    gain_share,
    labelled_claims,
    separation,
)
from llama_index_carag.verifier.config import VerifierConfig
from llama_index_carag.verifier.model import VERIFIER_DIR, ClaimVerifier, index_verifier, shipped_verifier
from tests.helpers import StubLLM

CLAIM = "The Eiffel Tower is in Berlin."
PASSAGES = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France.",
    "The city council approved a new budget for road repairs on Tuesday.",
]


def _nodes() -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"e{i}"), score=1.0 - i / 10) for i, t in enumerate(PASSAGES)]


def test_the_verifier_decides_by_default_and_the_llm_explains():
    llm = StubLLM(prompts=[])
    synth = FactCheckSynthesizer(llm)
    assert synth.settings.decision == "verifier" and synth.decision.name == "verifier"
    response = synth.synthesize(CLAIM, _nodes())
    verdict = response.metadata[VERDICT_KEY]
    assert verdict.label is VerdictLabel.REFUTED  # the stub LLM says SUPPORTED: the verifier decides
    assert verdict.method == "verifier" and verdict.decision == "verifier" and verdict.decision_passages[0] == 1
    assert len(llm.prompts) == 1 and "Verdict: REFUTED" in llm.prompts[0]  # the LLM was told the label
    assert verdict.explanation and "[1]" in verdict.explanation
    stances = verdict.passage_stances
    assert [s.number for s in stances] == [1, 2] and stances[0].stance == "REFUTED"
    provenance = response.source_nodes[0].node.metadata[CARAG_METADATA_KEY]
    probs = provenance["stance_probabilities"]
    assert set(probs) == {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"} and abs(sum(probs.values()) - 1) < 1e-3
    assert provenance["stance"] == "REFUTED"


MASKS = "Wearing masks reduces the spread of COVID-19."
FILLER = " ".join(f"The committee met on day {i} to discuss the budget of the city library." for i in range(8))
LONG = f"{FILLER} A large trial found that wearing masks reduces the spread of COVID-19."


@pytest.mark.parametrize(("streaming", "use_async"), [(False, False), (False, True), (True, False), (True, True)])
def test_a_text_llm_explains_a_long_passage_from_the_excerpt_its_stance_was_read_from(streaming, use_async):
    """The explanation prompt of an LLM that returns text (and of a stream) shows a long passage as its stance's
    excerpt, which the verdict, the source nodes' provenance and the check's rows carry; a short one whole."""
    from llama_index_carag.verdicts.check import EvidenceRow

    llm = StubLLM(prompts=[])
    short = "The Eiffel Tower is in Paris."
    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"e{i}"), score=1.0) for i, t in enumerate([LONG, short])]
    synthesizer = FactCheckSynthesizer(llm, streaming=streaming)

    async def asynthesized():
        response = await synthesizer.asynthesize(MASKS, nodes)
        if streaming:
            "".join([t async for t in response.async_response_gen()])
        return response

    response = asyncio.run(asynthesized()) if use_async else synthesizer.synthesize(MASKS, nodes)
    if streaming and not use_async:
        "".join(response.response_gen)
    verdict = response.metadata[VERDICT_KEY]
    long_stance, short_stance = verdict.passage_stances
    assert short_stance.excerpt is None and long_stance.excerpt and "masks" in long_stance.excerpt
    assert len(long_stance.excerpt.split()) < len(LONG.split())
    (prompt,) = llm.prompts
    assert long_stance.excerpt in prompt and short in prompt and "day 0 " not in prompt  # not the whole passage
    provenance = [n.node.metadata[CARAG_METADATA_KEY] for n in response.source_nodes]
    assert provenance[0]["stance_excerpt"] == long_stance.excerpt and "stance_excerpt" not in provenance[1]
    rows = [EvidenceRow.from_node(i + 1, n, st) for i, (n, st) in enumerate(zip(nodes, verdict.passage_stances))]
    assert rows[0].stance_excerpt == long_stance.excerpt and rows[1].stance_excerpt is None


def test_no_explanation_never_calls_the_llm():
    llm = StubLLM(prompts=[])
    verdict = FactCheckSynthesizer(llm, explain=False).verdict(CLAIM, _nodes())
    assert verdict.label is VerdictLabel.REFUTED and verdict.explanation == "" and llm.prompts == []


def test_async_verdict_matches_sync():
    synth = FactCheckSynthesizer(StubLLM(prompts=[]))
    sync, asynced = synth.verdict(CLAIM, _nodes()), asyncio.run(synth.averdict(CLAIM, _nodes()))
    assert asynced.label == sync.label and asynced.passage_stances == sync.passage_stances


def test_decision_llm_keeps_the_llms_own_label():
    synth = FactCheckSynthesizer(StubLLM(prompts=[]), decision="llm")
    assert synth.verdict(CLAIM, _nodes()).label is VerdictLabel.SUPPORTED


def test_an_unknown_decision_is_a_clear_error():
    with pytest.raises(ValueError, match="decision must be one of"):
        FactCheckSynthesizer(StubLLM(prompts=[]), decision="oracle")
    with pytest.raises(ValueError, match="decision must be one of"):
        FactCheckSynthesizer(StubLLM(prompts=[]), decision="stance")  # the retired LLM decisions are gone
    for retired in ({"calibration": "none"}, {"label_bias": {"N": 1.0}}, {"embed_model": None}):
        with pytest.raises(TypeError, match="Unknown FactCheckSynthesizer options"):
            FactCheckSynthesizer(StubLLM(prompts=[]), **retired)


def test_serve_builds_both_synthesizers_with_the_decision_asked_for(tmp_path):
    from llama_index_carag.serve.llm_worker import serve_synthesizers
    from llama_index_carag.verdicts.decision import ArgMaxDecision, VerifierDecision

    from .tiny_llm import tiny_hf_llm

    llm = tiny_hf_llm(tmp_path)
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    synthesizer, streaming = serve_synthesizers(llm, str(index_dir))  # no archive verifier: the shipped one
    assert isinstance(synthesizer.decision, VerifierDecision) and isinstance(streaming.decision, VerifierDecision)
    assert synthesizer.decision.verifier is streaming.decision.verifier
    served, streaming = serve_synthesizers(llm, str(index_dir), decision="llm")  # carag serve --decision llm
    assert isinstance(served.decision, ArgMaxDecision) and isinstance(streaming.decision, ArgMaxDecision)
    assert served.label_mode == "score"


# ------------------------------------------------------------------ archives
def test_labelled_claims_read_t_f_n_and_full_names_and_skip_the_rest() -> None:
    nodes = [TextNode(id_=str(i), text="c", metadata={"label": v}) for i, v in enumerate(["T", "REFUTED", "", "maybe"])]
    nodes.append(TextNode(id_="x", text="c"))
    assert [(n.node_id, label) for n, label in labelled_claims(nodes)] == [
        ("0", VerdictLabel.SUPPORTED),
        ("1", VerdictLabel.REFUTED),
    ]


def _claims(n: int, *, linked: bool = False) -> list[ArchiveClaim]:
    base = [
        ("Paris is the capital of France.", "Paris is the capital and largest city of France.", "SUPPORTED"),
        ("Paris is the capital of Spain.", "Paris is the capital and largest city of France.", "REFUTED"),
        ("Paris has a famous bakery.", "The Seine flows through northern France.", "NOT_ENOUGH_INFO"),
    ]
    out = []
    for i in range(n):
        claim, passage, label = base[i % 3]
        out.append(ArchiveClaim(f"c{i}", claim, label, (passage,), (passage,) if linked else ()))
    return out


def test_a_small_archive_keeps_the_shipped_verifier(tmp_path):
    record = fit_archive_verifier(_claims(MIN_HEAD - 1), tmp_path / VERIFIER_DIR)
    assert record["choice"] == "shipped" and "fewer than" in record["why"]
    assert index_verifier(tmp_path) is None


def test_an_archive_fit_compares_out_of_fold_and_saves_what_wins(tmp_path):
    record = fit_archive_verifier(_claims(30), tmp_path / VERIFIER_DIR)
    found = record["candidates"]
    assert tuple(found) == CANDIDATES
    assert all("macro_f1" in found[name] for name in found)
    assert found["fine-tune"]["linked"]["passed"] is None  # no linked evidence: the check is skipped
    assert record["labels"] == {"SUPPORTED": 10, "REFUTED": 10, "NOT_ENOUGH_INFO": 10}
    kept = "shipped"  # each costlier candidate was compared with the one kept before it, and won only by the rule
    for name in CANDIDATES[1:]:
        against = found[name]["against"]
        assert against["kept"] == kept and 0.0 <= against["gain_share"] <= 1.0
        if against["gain"] >= MARGIN and against["gain_share"] >= LEVEL:
            kept = name
    assert record["choice"] == kept and record["bootstrap"] == {"resamples": RESAMPLES, "level": LEVEL}
    saved = index_verifier(tmp_path)
    assert isinstance(saved, ClaimVerifier) and saved.confidence is not None
    assert (saved.head is not None) == (record["choice"] == "head")
    assert saved.rule == ("mean" if record["choice"] == "fine-tune" else "strongest")
    config = VerifierConfig.read(tmp_path / VERIFIER_DIR)
    assert config.record["archive"]["choice"] == record["choice"]
    assert (config.weights == "shipped") == (record["choice"] != "fine-tune")
    verdict = saved.label(CLAIM, PASSAGES)
    assert 0.0 <= verdict.confidence <= 1.0
    synthesizer = get_fact_check_synthesizer(StubLLM(), index=tmp_path)  # the one door to the index's verdict half
    assert synthesizer.decision.verifier is saved
    with pytest.raises(ValueError, match="not both"):
        get_fact_check_synthesizer(StubLLM(), index=tmp_path, verifier=saved)


def test_separation_is_the_s_vs_r_auc_of_linked_passages_and_needs_enough_of_each():
    rows = [np.array([0.8, 0.1, 0.1])] * MIN_LINKED + [np.array([0.2, 0.7, 0.1])] * MIN_LINKED
    labels = ["SUPPORTED"] * MIN_LINKED + ["REFUTED"] * MIN_LINKED
    assert separation(rows, labels) == 1.0
    assert separation(rows, labels[::-1]) == 0.0
    assert separation(rows + [np.array([0.0, 0.0, 1.0])], labels + ["NOT_ENOUGH_INFO"]) == 1.0  # NEI not read
    assert separation(rows[1:], labels[1:]) is None  # one SUPPORTED passage short


def test_a_fine_tune_that_reads_linked_evidence_worse_than_the_shipped_verifier_is_not_kept(tmp_path, monkeypatch):
    """The fine-tune wins out of fold on retrieved passages, but its folds read the linked passages backwards."""
    import llama_index_carag.verifier.archive as archive
    from llama_index_carag.verifier.model import decide_label

    claims = _claims(30, linked=True)
    one_hot = {k: np.eye(3)[j] for j, k in enumerate(("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"))}
    backwards = {"SUPPORTED": "REFUTED", "REFUTED": "SUPPORTED", "NOT_ENOUGH_INFO": "NOT_ENOUGH_INFO"}

    def perfect_but_backwards(base, claims, reading, config):
        decided = [decide_label(one_hot[c.label][None, :], 0.5, rule="mean") for c in claims]
        return decided, [one_hot[backwards[c.label]][None, :] for c in claims]

    monkeypatch.setattr(archive, "_fine_tuned_out_of_fold", perfect_but_backwards)
    record = fit_archive_verifier(claims, tmp_path / VERIFIER_DIR)
    tuned = record["candidates"]["fine-tune"]
    assert tuned["macro_f1"] == 1.0
    assert tuned["linked"]["passed"] is False and tuned["linked"]["fine_tune_auc"] == 0.0
    assert tuned["linked"]["shipped_auc"] > 0.5 and tuned["linked"]["passages"] == 30
    assert record["choice"] != "fine-tune"


def test_gain_share_is_the_share_of_resamples_where_the_challenger_scores_higher():
    gold = ["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"] * 30
    assert gain_share(gold, gold, ["NOT_ENOUGH_INFO"] * 90) == 1.0  # better on every resample
    assert gain_share(gold, gold, gold) == 0.0  # a tie is no gain
    two_wrong = ["REFUTED", "REFUTED", *gold[2:]]
    assert 0.5 < gain_share(gold, gold, two_wrong) < 0.95  # two claims of 90: most resamples, not all
    assert gain_share(gold, gold, two_wrong, seed=1) != gain_share(gold, gold, two_wrong, seed=2)
    with pytest.raises(ValueError, match="differ in length"):
        gain_share(gold, gold[:-1], gold)


def test_a_gain_that_a_few_claims_make_does_not_replace_the_out_of_the_box_verifier(tmp_path, monkeypatch):
    """The head's out-of-fold labels are the out-of-the-box verifier's with some claims made right: a gain of two
    claims of 90 is over MARGIN but not ahead in 95 % of the resamples, and the out-of-the-box verifier is saved as
    it is (the pool's confidence map); a gain of sixty claims wins."""
    import llama_index_carag.verifier.archive as archive

    rotated = {"SUPPORTED": "REFUTED", "REFUTED": "NOT_ENOUGH_INFO", "NOT_ENOUGH_INFO": "SUPPORTED"}
    claims = [replace(c, label=rotated[c.label]) for c in _claims(90)]  # the shipped verifier reads them wrong
    out_of_box = archive.domain_verifier(shipped_verifier(), [np.array([[0.1, 0.2, 0.7]])] * 30)

    def head_fixing(n):
        def head(base, probs, gold):
            decided = [out_of_box.decide(p) for p in probs]
            wrong = [i for i, d in enumerate(decided) if d.label != gold[i]][:n]
            for i in wrong:
                decided[i] = replace(decided[i], label=gold[i], score=0.99)
            return decided

        return head

    monkeypatch.setattr(archive, "MIN_FINE_TUNE", 10**6)  # no fine-tune: the head against the shipped verifier
    monkeypatch.setattr(archive, "_abstained", lambda decided, gold: [d.label for d in decided])  # labels as read
    for fixed, kept in ((2, "shipped"), (60, "head")):
        monkeypatch.setattr(archive, "_head_out_of_fold", head_fixing(fixed))
        record = fit_archive_verifier(claims, tmp_path / f"v{fixed}", out_of_box=out_of_box)
        against = record["candidates"]["head"]["against"]
        assert against["kept"] == "shipped" and against["gain"] >= MARGIN and record["choice"] == kept, against
        saved = ClaimVerifier(tmp_path / f"v{fixed}")
        if kept == "shipped":
            assert 0.5 < against["gain_share"] < LEVEL
            assert saved.threshold == out_of_box.threshold and saved.head is None
            assert saved.confidence.to_dict() == shipped_verifier().confidence.to_dict()  # the pool's map
            assert saved.record["archive"]["choice"] == "shipped" and "domain_check" in saved.record
        else:
            assert against["gain_share"] >= LEVEL and saved.head is not None


def test_an_index_without_a_verifier_gets_the_shipped_one(tmp_path):
    assert get_fact_check_synthesizer(StubLLM(), index=tmp_path).decision.verifier is shipped_verifier()


def test_archive_claims_take_labelled_claims_with_the_passages_the_retriever_gives_them():
    claims = [
        TextNode(text="claim a", id_="a", metadata={"label": "T"}),
        TextNode(text="claim b", id_="b", metadata={"label": ""}),
        TextNode(text="claim c", id_="c", metadata={"label": "F"}),
    ]
    retrieved = {"claim a": ["passage two", "passage one"], "claim b": ["passage one"], "claim c": []}
    found = archive_claims(claims, retrieved.__getitem__)
    assert found == [ArchiveClaim("a", "claim a", "SUPPORTED", ("passage two", "passage one"))]


def test_linked_passages_are_the_texts_of_each_claims_linked_evidence(demo_index, demo_corpus):
    from llama_index_carag import ContextAwareRetriever
    from llama_index_carag.datasets import LINKS_KEY
    from llama_index_carag.verifier.archive import linked_passages

    retriever = ContextAwareRetriever.from_index(demo_index, "paper", claim_nodes=demo_corpus.claim_nodes)
    found = linked_passages(retriever, demo_corpus.claim_nodes)
    text = {n.node_id: n.get_content() for n in demo_corpus.evidence_nodes}
    for claim in demo_corpus.claim_nodes:
        assert set(found[claim.node_id]) == {text[i] for i in claim.metadata[LINKS_KEY]}
    assert linked_passages(object(), demo_corpus.claim_nodes) == {}  # a retriever without an index
