"""The front door of the ``carag`` command, as a new user meets it: stage lines on stderr, the reason of an empty
SOI, the demo's one claim per label, and the ``--llm`` forms in ``--help``.  Unit tests here; the commands run
end to end in tests/test_cli.py."""

from __future__ import annotations

import io
import json
import sys
from types import SimpleNamespace

import pytest

from llama_index_carag.cli.common import Stages
from llama_index_carag.cli.demo import demo_claims, label_report
from llama_index_carag.core.soi import SOIItem, SubsetOfInterest
from llama_index_carag.retrieval.soi_reason import EmptySOIReason
from llama_index_carag.verdicts.types import LABELS


# ------------------------------------------------------------------ stages
def test_stage_lines_go_to_stderr_one_per_stage(monkeypatch, capsys):
    stages = Stages(tty=False)
    with stages.stage("loading the encoder (minilm)"):
        print("stdout is untouched")
    with stages.stage("loading the LLM smollm2", note="(first run)", ticking=True):
        pass
    out, err = capsys.readouterr()
    assert out == "stdout is untouched\n"
    assert err.splitlines() == ["carag: loading the encoder (minilm) …", "carag: loading the LLM smollm2 … (first run)"]


def test_quiet_stages_write_nothing(capsys):
    stages = Stages(quiet=True, tty=True)
    with stages.stage("retrieving", ticking=True):
        pass
    stages.say("3 claims")
    assert capsys.readouterr() == ("", "")


def test_a_terminal_gets_the_stage_time_and_a_ticking_counter(monkeypatch):
    import llama_index_carag.cli.common as stages_module

    monkeypatch.setattr(stages_module, "_TICK_S", 0.01)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    stages = Stages(tty=True)
    with stages.stage("writing the verdict", ticking=True):
        import time

        time.sleep(0.1)
    text = err.getvalue()
    assert text.startswith("carag: writing the verdict …")
    assert text.count("\r\x1b[K") >= 2  # redrawn while it ran, and once at the end
    final = text.rsplit("\r\x1b[K", 1)[1]
    assert final.startswith("carag: writing the verdict … ") and final.endswith(" s\n")
    assert float(final.split("… ")[1].split(" s")[0]) >= 0.1


def test_a_failing_stage_still_ends_its_line(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(RuntimeError), Stages(tty=True).stage("loading the index idx"):
        raise RuntimeError("bad index")
    assert err.getvalue().endswith(" s\n")


# ------------------------------------------------------------------ the LLM's stage line
def test_the_load_description_names_the_model_and_hides_server_credentials(monkeypatch):
    from llama_index_carag.models import llamacpp
    from llama_index_carag.models.resolve import load_description

    monkeypatch.setattr(llamacpp, "probe_pending", lambda: False)
    assert load_description(None) == ("loading the LLM qwen1.5b (the default)", "")
    assert load_description("smollm2") == ("loading the LLM smollm2", "")
    message, note = load_description("openai-compatible:http://user:secret@127.0.0.1:8080/v1?model=m#x")
    assert message == "connecting to the LLM server http://127.0.0.1:8080/v1" and note == ""
    monkeypatch.setattr(llamacpp, "probe_pending", lambda: True)
    assert load_description("qwen1.5b")[1] == llamacpp.PROBE_NOTE == "(first run: checking llama.cpp on this CPU)"
    assert load_description("smollm2") == ("loading the LLM smollm2", "")  # transformers: no probe


def test_the_probe_note_reads_the_cached_probe(monkeypatch, tmp_path):
    from llama_index_carag.models import files, llamacpp
    from llama_index_carag.models.resolve import load_description

    def probes(spec):
        return load_description(spec)[1] == llamacpp.PROBE_NOTE

    monkeypatch.setattr(llamacpp, "llamacpp_installed", lambda: True)
    monkeypatch.setattr(llamacpp, "build_fingerprint", lambda: "abc123")
    monkeypatch.setattr(files, "cache_dir", lambda: tmp_path)
    assert probes(None) and probes("qwen1.5b") and probes("/models/x.GGUF")  # no cache yet
    assert not probes("smollm2") and not probes("qwen1.5b-hf") and not probes("qwen1.5b-int8")
    (tmp_path / llamacpp.PROBE_FILE).write_text(json.dumps({"fingerprint": "abc123", "ok": True}))
    assert not probes(None)  # this build was probed on this CPU
    (tmp_path / llamacpp.PROBE_FILE).write_text(json.dumps({"fingerprint": "other", "ok": True}))
    assert probes(None)  # another build: probed again
    monkeypatch.setattr(llamacpp, "llamacpp_installed", lambda: False)
    assert not probes(None)  # transformers then: no probe


# ------------------------------------------------------------------ the empty SOI
def _empty_soi(**kw) -> SubsetOfInterest:
    return SubsetOfInterest(claim_id=None, claim="c", **{"delta": 0.75, "cluster": 5, "cluster_size": 24, **kw})


def test_empty_soi_reason_says_threshold_size_and_closest():
    reason = EmptySOIReason.of(_empty_soi(), ("e1", 0.6213), dense_only=True)
    assert reason is not None and reason.closest_id == "e1"
    assert reason.text() == (
        "SOI empty: no item of the claim's cluster 5 (24 items) has a cosine to the claim above δ=0.75 "
        "(the closest: 0.62); the query is the claim alone (plain dense search for this claim)"
    )
    assert reason.to_dict() == {
        "text": reason.text(),
        "delta": 0.75,
        "cluster_size": 24,
        "closest_id": "e1",
        "closest_similarity": 0.6213,
    }
    re_ranked = EmptySOIReason.of(_empty_soi().to_dict())  # the JSON form reads the same; no closest looked up
    assert re_ranked is not None and "(the closest" not in re_ranked.text()
    assert re_ranked.text().endswith("the query is the claim alone (ranked without the thematic term T)")
    lonely = EmptySOIReason.of(_empty_soi(cluster_size=0, cluster=None))
    assert lonely is not None and lonely.text().startswith("SOI empty: the claim's cluster holds no item")
    one = EmptySOIReason.of(_empty_soi(cluster_size=1))
    assert one is not None and "(1 item)" in one.text()


def test_an_soi_with_items_has_no_empty_reason():
    soi = _empty_soi(refined_cluster_evidences=[SOIItem("e1", "t", 0.8)])
    assert EmptySOIReason.of(soi) is None and EmptySOIReason.of(soi.to_dict()) is None


def test_closest_item_is_the_nearest_candidate_of_the_claims_cluster(demo_corpus, demo_index, monkeypatch):
    import numpy as np

    from llama_index_carag import ContextAwareRetriever
    from llama_index_carag.retrieval.soi_reason import closest_item
    from llama_index_carag.verdicts.check import ClaimChecker

    retriever = ContextAwareRetriever.from_index(
        demo_index, "default", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.99, soi_min_size=0
    )
    claim = "Offshore wind farms drive fish away from the area."
    soi = retriever.build_soi(claim)
    assert soi.is_empty
    members = retriever.context.members((soi.theme, soi.cluster))
    q = np.asarray(retriever.embed_model.get_query_embedding(claim), dtype=np.float64)
    sims = members.unit @ (q / np.linalg.norm(q))
    evidence = [i for i, is_claim in enumerate(members.is_claim) if not is_claim]  # CARAG-u: evidence only
    best = max(evidence, key=lambda i: sims[i])
    found = closest_item(retriever, claim)
    assert found is not None and found[0] == members.ids[best] and found[1] == pytest.approx(sims[best], abs=1e-5)
    from llama_index.core.base.embeddings.base import BaseEmbedding

    embedded = []
    embed = BaseEmbedding.get_query_embedding
    monkeypatch.setattr(BaseEmbedding, "get_query_embedding", lambda *a, **k: embedded.append(1) or embed(*a, **k))
    checker = ClaimChecker(retriever)  # every check result carries the reason, found with the claim's vector
    result = checker.result(checker.retrieve(claim)).to_json_dict()
    assert len(embedded) == 1  # the reason's closest item is looked up with the claim's vector, not a new one
    assert result["soi"]["empty_reason"]["closest_id"] == found[0]
    assert "δ=0.99" in result["soi"]["empty_reason"]["text"]
    full = ClaimChecker(retriever.with_settings(delta=0.2)).check(claim).to_json_dict()
    assert full["soi"]["empty_reason"] is None


def test_a_failed_closest_item_lookup_does_not_fail_the_check(demo_corpus, demo_index, monkeypatch):
    import dataclasses

    from llama_index_carag import ContextAwareRetriever
    from llama_index_carag.verdicts import check as check_module

    retriever = ContextAwareRetriever.from_index(
        demo_index, "default", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.99, soi_min_size=0
    )
    claim = "Offshore wind farms drive fish away from the area."

    def broken(*args, **kwargs):
        raise RuntimeError("store unreachable")

    monkeypatch.setattr(check_module, "empty_reason", broken)
    checker = check_module.ClaimChecker(retriever)
    retrieved = checker.retrieve(claim)  # the reason only explains: the check goes on without the closest item
    reason = checker.result(retrieved).to_json_dict()["soi"]["empty_reason"]
    assert reason["text"].startswith("SOI empty") and reason["closest_id"] is None
    bare = dataclasses.replace(retrieved, empty_reason=None)  # a Retrieved built without a reason still says why
    assert checker.result(bare).to_json_dict()["soi"]["empty_reason"] == reason


# ------------------------------------------------------------------ the demo's claims
def _claim(node_id: str, label: str | None, theme: str) -> SimpleNamespace:
    return SimpleNamespace(node_id=node_id, metadata={"label": label, "theme": theme})


def test_demo_takes_one_claim_of_each_label_from_different_themes(demo_corpus):
    chosen = demo_claims(demo_corpus.claim_nodes, 3)
    labels = [{"T": "SUPPORTED", "F": "REFUTED", "N": "NOT_ENOUGH_INFO"}[c.metadata["label"]] for c in chosen]
    assert labels == list(LABELS)
    assert len({c.metadata["theme"] for c in chosen}) == 3
    assert [c.node_id for c in chosen] == ["Claims_Oceans_Demo_1", "Claims_Energy_Demo_2", "Claims_Nutrition_Demo_6"]


def test_demo_claims_take_turns_and_skip_an_exhausted_label():
    claims = [_claim("t1", "T", "a"), _claim("t2", "T", "b"), _claim("f1", "F", "a"), _claim("x", None, "a")]
    assert [c.node_id for c in demo_claims(claims, 2)] == ["t1", "f1"]
    assert [c.node_id for c in demo_claims(claims, 5)] == ["t1", "f1", "t2"]  # no N claim; unlabelled never
    assert [c.node_id for c in demo_claims(claims, 1)] == ["t1"]


def test_label_report_counts_per_label():
    lines = label_report(
        [("c1", "SUPPORTED", "SUPPORTED"), ("c2", "REFUTED", "SUPPORTED"), ("c3", "NOT_ENOUGH_INFO", None)]
    )
    assert lines == [
        "  SUPPORTED        1 of 1 right  (c1: SUPPORTED)",
        "  REFUTED          0 of 1 right  (c2: SUPPORTED)",
        "  NOT_ENOUGH_INFO  0 of 1 right  (c3: no verdict)",
    ]


# ------------------------------------------------------------------ --llm in --help
def _help(*command: str) -> str:
    from tests.helpers import run_cli

    proc = run_cli(*command, "--help")
    assert proc.returncode == 0
    return " ".join(proc.stdout.split())


@pytest.mark.parametrize("command", ["check", "check-text", "chat", "demo", "serve"])
def test_help_lists_every_llm_form(command):
    from llama_index_carag.models.files import LLM_ALIASES, alias_variant
    from llama_index_carag.models.openai_compatible import PREFIX

    text = _help(command)
    short = [name for name in LLM_ALIASES if "/" not in name and "instruct" not in name]
    assert set(short) == {"qwen1.5b", "qwen", "smollm2"}
    for name in short:
        assert f"'{name}'" in text or f" {name} " in text or f"{name} (" in text, name
    for form in ("qwen1.5b-hf", "qwen1.5b-int8", "smollm2-hf", "smollm2-int8"):
        assert alias_variant(form) is not None and form in text, form  # each suffix the names accept
    assert "FILE.gguf" in text and "Hugging Face id or local folder" in text
    assert f"{PREFIX}URL" in text and f"{PREFIX}http://127.0.0.1:8080/v1#MODEL" in text
