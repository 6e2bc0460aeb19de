"""CheckResult (``carag check --json``, ``POST /v1/check``) carries the full CaragSettings: a result can be reproduced."""

from __future__ import annotations

import json

import pytest

from llama_index_carag import PAPER, CaragSettings, CheckResult, ContextAwareRetriever
from llama_index_carag.settings import TUNED
from llama_index_carag.verdicts.check import CHECK_SCHEMA_VERSION, check_claim, check_result_json_schema

CLAIM = "Offshore wind farms drive fish away."
pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "settings",
    [
        TUNED.replace(n_clusters=4, delta=0.5, random_state=3, soi_top_m=5),
        PAPER.replace(mode="supervised", n_clusters=2),
    ],
    ids=["tuned-variant", "paper-supervised"],
)
def test_a_results_settings_rebuild_the_retriever_and_its_evidence(demo_index, demo_corpus, settings):
    retriever = ContextAwareRetriever.from_index(demo_index, settings, claim_nodes=demo_corpus.claim_nodes)
    text = json.dumps(check_claim(retriever, CLAIM).to_json_dict())  # what a client stores

    data = json.loads(text)
    assert data["schema_version"] == CHECK_SCHEMA_VERSION
    rebuilt = CaragSettings.model_validate(data["settings"])
    assert rebuilt == retriever.settings == settings
    assert CheckResult.model_validate_json(text).settings == settings

    # nothing but the stored settings (clustering options included): a fresh fit gives the same evidence
    again = ContextAwareRetriever.from_index(demo_index, rebuilt, claim_nodes=demo_corpus.claim_nodes)
    redo = check_claim(again, CLAIM).to_json_dict()
    assert [(r["id"], r["score"]) for r in redo["evidence"]] == [(r["id"], r["score"]) for r in data["evidence"]]


def test_schema_names_every_settings_field():
    schema = check_result_json_schema()
    ref = schema["properties"]["settings"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["$defs"][ref]["properties"]) == set(CaragSettings.model_fields)
    assert schema["properties"]["schema_version"]["default"] == CHECK_SCHEMA_VERSION == 3


# ------------------------------------------------------------- the one check path
def _default(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(demo_index, claim_nodes=demo_corpus.claim_nodes)


def test_a_check_embeds_the_claim_once_and_computes_one_soi(demo_index, demo_corpus, monkeypatch):
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_carag.core.context import ThematicContext
    from llama_index_carag.verdicts.check import ClaimChecker

    retriever = _default(demo_index, demo_corpus)
    expected_soi, expected_nodes = retriever.build_soi(CLAIM).to_dict(), retriever.retrieve(CLAIM)
    calls = {"embed": 0, "soi": 0, "texts": 0}
    embed, soi = BaseEmbedding.get_query_embedding, ThematicContext.query_soi

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(BaseEmbedding, "get_query_embedding", counted("embed", embed))
    monkeypatch.setattr(BaseEmbedding, "get_text_embedding_batch", counted("texts", lambda *a, **k: []))
    monkeypatch.setattr(ThematicContext, "query_soi", counted("soi", soi))
    result = ClaimChecker(retriever).check(CLAIM)
    assert calls == {"embed": 1, "soi": 1, "texts": 0}
    assert result.soi == {**expected_soi, "empty_reason": None}  # build_soi's SOI (with items: no reason)
    assert [(r.id, r.score, r.carag) for r in result.evidence] == [
        (n.node.node_id, n.score, n.node.metadata["carag"]) for n in expected_nodes
    ]


def test_the_verdict_is_the_payload_and_stances_come_from_the_evidence_nodes(demo_index, demo_corpus):
    from llama_index.core.base.response.schema import Response

    from llama_index_carag import Verdict, VerdictLabel
    from llama_index_carag.verdicts.check import ClaimChecker
    from llama_index_carag.verdicts.scored import with_stances
    from llama_index_carag.verdicts.types import PassageStance

    class StanceSynthesizer:  # stands for the verifier's decision: stances on the source nodes
        def synthesize(self, query, nodes):
            stances = [
                PassageStance(number=i, id=n.node.node_id, stance="REFUTED", score=0.5 + i / 100)
                for i, n in enumerate(nodes, start=1)
            ]
            verdict = Verdict(label=VerdictLabel.REFUTED, explanation="No [1].", raw="x", passage_stances=stances)
            self.query = query
            return Response("No [1].", source_nodes=with_stances(nodes, stances), metadata={"verdict": verdict})

    synth = StanceSynthesizer()
    checker = ClaimChecker(_default(demo_index, demo_corpus), synth)
    result = checker.check(CLAIM)
    assert synth.query.query_str == CLAIM and synth.query.embedding is not None  # the claim goes with its vector
    assert isinstance(result.verdict, Verdict) and result.verdict.label is VerdictLabel.REFUTED
    assert [(r.stance, r.stance_score) for r in result.evidence[:2]] == [("REFUTED", 0.51), ("REFUTED", 0.52)]
    assert not any("stance" in r.carag for r in result.evidence)  # the stance is the row's, not the provenance's
    plain = checker.result(checker.retrieve(CLAIM))
    assert plain.verdict is None and [r.id for r in plain.evidence] == [r.id for r in result.evidence]
    data = result.to_json_dict()
    assert data["verdict"]["label"] == "REFUTED" and CheckResult.model_validate(data) == result


def test_a_streamed_verdict_gives_the_evidence_rows_their_stances(demo_index, demo_corpus):
    """A streamed response's source nodes are set before its verdict (``FactCheckSynthesizer(streaming=True)``,
    the server's ``RemoteSynthesizer``): the rows take the stances from ``verdict.passage_stances``, so the
    ``done`` event of ``/v1/check/stream`` equals ``POST /v1/check`` (found by ``benchmarks/bench_soak.py``)."""
    from llama_index.core.base.response.schema import Response, StreamingResponse

    from llama_index_carag import Verdict, VerdictLabel
    from llama_index_carag.verdicts.check import ClaimChecker
    from llama_index_carag.verdicts.scored import with_stances
    from llama_index_carag.verdicts.types import PassageStance

    def verdict_on(nodes):
        stances = [
            PassageStance(number=i, id=n.node.node_id, stance="REFUTED", score=0.5 + i / 100)
            for i, n in enumerate(nodes, start=1)
        ]
        return Verdict(label=VerdictLabel.REFUTED, explanation="No [1].", raw="x", passage_stances=stances)

    class Synth:
        def synthesize(self, query, nodes):
            verdict = verdict_on(nodes)
            return Response(
                "No [1].", source_nodes=with_stances(nodes, verdict.passage_stances), metadata={"verdict": verdict}
            )

    class StreamSynth:
        def synthesize(self, query, nodes):
            response = StreamingResponse(iter(()), source_nodes=list(nodes), metadata={})

            def gen():
                yield "No [1]."
                response.metadata = {"verdict": verdict_on(nodes)}

            response.response_gen = gen()
            return response

    checker = ClaimChecker(_default(demo_index, demo_corpus), Synth(), StreamSynth())
    retrieved = checker.retrieve(CLAIM)
    streamed = checker.stream(retrieved)
    assert "".join(streamed.response_gen) == "No [1]."
    result = checker.result(retrieved, streamed)
    assert [(r.stance, r.stance_score) for r in result.evidence[:2]] == [("REFUTED", 0.51), ("REFUTED", 0.52)]
    assert result == checker.check(CLAIM)


def test_the_chat_bot_checks_each_message_and_condenses_follow_ups(demo_index, demo_corpus):
    from llama_index_carag import FactCheckChatBot
    from llama_index_carag.verdicts.check import ClaimChecker
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    from .helpers import StubLLM

    retriever = _default(demo_index, demo_corpus)
    condense = StubLLM(answer="Offshore wind farms attract fish.", prompts=[])
    bot = FactCheckChatBot(ClaimChecker(retriever, FactCheckSynthesizer(StubLLM(prompts=[]), decision="llm")), condense)
    first = bot.ask(CLAIM)
    assert first.claim == CLAIM and not condense.prompts  # a first message is checked as it is
    assert first.verdict.label.value == "SUPPORTED" and first.text == StubLLM().answer
    assert [n.node.node_id for n in first.sources] == [r.id for r in check_claim(retriever, CLAIM).evidence]
    follow = bot.ask("And the opposite?")
    assert follow.claim == "Offshore wind farms attract fish." and CLAIM in condense.prompts[-1]
    bot.reset()
    assert bot.ask("Wind farms exist.").claim == "Wind farms exist."
    with pytest.raises(ValueError, match="synthesizer"):
        FactCheckChatBot(ClaimChecker(retriever))
