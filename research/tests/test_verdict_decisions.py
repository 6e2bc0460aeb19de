"""The two-domain verdict benchmark's decisions, replayed on a small synthetic cache of LLM outputs."""

from __future__ import annotations

import math

import pytest

from llama_index_carag.verdicts import VerdictLabel
from research.verdict_decisions import fit_margin, markdown, prior_of, summarize

MODEL = "fake-llm"


def _lp(s, r, n):
    z = math.log(math.exp(s) + math.exp(r) + math.exp(n))
    return {"SUPPORTED": s - z, "REFUTED": r - z, "NOT_ENOUGH_INFO": n - z}


def _claim(domain, cid, gold, passages, passage_gold=None, joint=(0.0, 0.0, 0.0)):
    return {
        "kind": "claim",
        "model": MODEL,
        "domain": domain,
        "evidence": "annotated",
        "claim_id": cid,
        "claim": "c",
        "gold": gold,
        "passage_ids": [f"{cid}-{i}" for i in range(len(passages))],
        "passage_gold": passage_gold,
        "joint": _lp(*joint),
        "passages": [_lp(*p) for p in passages],
        "claim_only": _lp(0.0, 0.0, 0.0),
        "cosines": [0.5] * len(passages),
        "seconds_joint": 2.0,
        "seconds_passages": 3.0,
    }


def _cache():
    prior = {
        "kind": "prior",
        "model": MODEL,
        "inputs": [{"claim": "N/A", "passage": "N/A", "logprobs": _lp(1.0, 0.0, 3.0)}],
    }  # leans to SUPPORTED
    rows = [prior]
    for d in ("factver", "scifact"):
        rows += [
            _claim(d, f"{d}-t", "T", [(3.0, 0.0, 0.0), (0.0, 0.0, 2.0)], ["T", "N"], joint=(2.0, 0.0, 0.0)),
            _claim(d, f"{d}-f", "F", [(1.2, 1.0, 0.0)], ["F"], joint=(2.0, 0.0, 0.0)),  # raw S, calibrated R
            _claim(d, f"{d}-n", "N", [(0.0, 0.0, 3.0)], ["N"], joint=(2.0, 0.0, 0.0)),
        ]
    return rows


def test_the_decisions_are_replayed_on_the_same_outputs():
    rows = {(r["domain"], r["decision"]): r for r in summarize(_cache(), MODEL)}
    assert rows[("factver", "argmax")]["accuracy"] == pytest.approx(1 / 3, abs=1e-3)  # joint always says SUPPORTED
    assert rows[("factver", "argmax")]["share_T"] == 1.0
    stance = rows[("scifact", "stance")]
    assert stance["accuracy"] == 1.0 and stance["macro_F1"] == 1.0 and stance["recall_N"] == 1.0
    assert stance["stance_accuracy"] == 1.0 and stance["passages_with_gold"] == 4
    assert rows[("scifact", "stance-raw")]["recall_F"] == 0.0  # without calibration the lean wins
    assert stance["s_per_claim"] == 3.0 and rows[("scifact", "argmax")]["s_per_claim"] == 2.0
    assert "rule" not in {d for _, d in rows}  # no rule measured for this LLM
    assert rows[("factver", "stance-margin")]["fitted_margin"] == 0.0  # fitted on the other domain
    assert markdown(list(rows.values())).count("\n") == len(rows) + 2


def test_prior_and_margin():
    prior = prior_of(_cache(), MODEL)
    assert sum(prior.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no content-free prior"):
        prior_of(_cache(), "another")
    assert fit_margin([r for r in _cache() if r["kind"] == "claim"], prior) == 0.0


def _archive(domain, lean):
    """Unlabelled archive claims whose whole-evidence scores all lean to ``lean`` (0 S, 1 R, 2 N)."""
    joint = [0.0, 0.0, 0.0]
    joint[lean] = 2.0
    rows = []
    for i, gold in enumerate("TFNTFN"):
        row = _claim(domain, f"{domain}-a{i}", gold, [(0.5, 0.0, 0.0)], joint=tuple(joint))
        row["split"] = "archive"
        rows.append(row)
    return rows


def test_the_archive_prior_removes_a_domains_lean_without_reading_its_labels():
    from research.verdict_decisions import choose_default, domain_prior

    cache = _cache()
    for r in cache[1:]:  # every report claim's joint leans to SUPPORTED by the same 2 nats, plus a hint
        hint = {"T": 0.0, "F": 0.5, "N": 0.5}[r["gold"]]
        i = {"T": 0, "F": 1, "N": 2}[r["gold"]]
        scores = [2.0, 0.0, 0.0]
        scores[i] += hint
        r["joint"] = _lp(*scores)
    cache += _archive("factver", 0) + _archive("scifact", 0)
    prior = domain_prior([r for r in cache if r.get("split") == "archive" and r["domain"] == "factver"])
    assert prior.joint[VerdictLabel.SUPPORTED] > 0.7 and prior.claims == 6
    relabelled = [dict(r, gold="T") for r in cache]  # the archive's labels are never read by the prior
    assert domain_prior([r for r in relabelled if r.get("split") == "archive" and r["domain"] == "factver"]) == prior
    rows = {(r["domain"], r["decision"]): r for r in summarize(cache, MODEL)}
    assert rows[("factver", "argmax")]["accuracy"] == pytest.approx(1 / 3, abs=1e-3)
    assert rows[("factver", "argmax-archive")]["accuracy"] == 1.0  # the lean divided out, the hint decides
    assert rows[("factver", "argmax-archive")]["claims"] == 3  # archive rows are not reported
    assert ("factver", "lodo-logistic") in rows and ("scifact", "argmax-batch") in rows
    assert choose_default(list(rows.values())) in ("argmax-archive", "stance-archive")


def test_without_archive_rows_there_is_no_archive_decision():
    rows = {(r["domain"], r["decision"]) for r in summarize(_cache(), MODEL)}
    assert ("factver", "argmax-archive") not in rows and ("factver", "lodo-logistic") not in rows


def test_the_bench_collects_through_the_cache_api_then_summarises_the_cache(tmp_path, monkeypatch):
    """``run_two_domain_bench`` calls :func:`verdict_cache.collect_domains` (no argv, no /tmp path), then reads
    what it wrote."""
    import json

    from research import verdict_decisions

    cache = tmp_path / "cache.jsonl"
    calls = []

    def collect_domains(out, llm, **options):
        calls.append((out, llm, options))
        rows = _cache()
        cache.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return cache

    monkeypatch.setattr(verdict_decisions, "collect_domains", collect_domains)
    result = verdict_decisions.run_two_domain_bench(
        "fv.csv", "sci", str(cache), llm="some-llm", per_label=3, retrieved=True, cache_dir=str(tmp_path)
    )
    assert calls == [
        (
            str(cache),
            "some-llm",
            {"factver": "fv.csv", "scifact": "sci", "per_label": 3, "retrieved": True, "cache_dir": str(tmp_path)},
        )
    ]
    assert result["model"] == MODEL and result["summary"]
    calls.clear()
    verdict_decisions.run_two_domain_bench("fv.csv", "sci", str(cache), collect_first=False)
    assert calls == []


def test_the_cache_command_line_calls_collect_domains(monkeypatch):
    from research import verdict_cache

    calls = []
    monkeypatch.setattr(verdict_cache, "collect_domains", lambda out, llm, **options: calls.append((out, llm, options)))
    verdict_cache._main(["out.jsonl", "--domains", "scifact", "--sources", "retrieved", "--llm", "smollm2"])
    ((out, llm, options),) = calls
    assert (out, llm) == ("out.jsonl", "smollm2")
    assert options["factver"] is None and options["scifact"] == "../shared/data/scifact"
    assert options["sources"] == ["retrieved"] and options["split"] == "report" and options["joints"] == {}
