"""Batch checking: ``check_claims`` (the generator) and ``carag check --claims FILE --out results.jsonl``
(formats, bad lines, resume, a truncated last record, a kill -9 mid-batch), and ``--no-explanation``'s
``VerdictSettings.explain`` (labels scored, nothing generated)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_index_carag.cli.check import ResultsFile, read_claims
from llama_index_carag.datasets import demo_corpus_path
from llama_index_carag.verdicts.bulk import BatchClaim, check_claims, is_error
from llama_index_carag.verdicts.check import ClaimChecker
from llama_index_carag.verdicts.synthesizer import VERDICT_KEY, get_fact_check_synthesizer
from tests.helpers import run_cli
from tests.test_llm_backend import CLAIM as SCRIPTED_CLAIM
from tests.test_llm_backend import ScriptedBackend, _nodes, registry  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = [
    "Offshore wind farms drive fish away.",
    "Electric cars emit more CO2 than petrol cars over their lifetime.",
    "Recycling plastic saves energy.",
    "Solar panels do not work in cold climates.",
    "Offshore wind farms drive fish away.",  # the same text on another line: checked again
    "Heat pumps work below freezing.",
]
RESULT_KEYS = {"line", "id", "schema_version", "claim", "verdict", "settings", "soi", "evidence"}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("batch") / "index"
    proc = run_cli("index", str(demo_corpus_path()), "--out", str(out), "--clusters", "3", "--delta", "0.5")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def checker(index_dir) -> ClaimChecker:
    from llama_index_carag import ContextAwareRetriever

    return ClaimChecker(ContextAwareRetriever.from_persist_dir(index_dir))


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _batch(index_dir: Path, claims: str, out: Path, *extra: str, stdin: str | None = None):
    return run_cli(
        "check", "--claims", claims, "--out", str(out), "--index", str(index_dir), "--no-llm", *extra, stdin=stdin
    )


# ------------------------------------------------------------------- the generator
def test_check_claims_yields_in_order_and_bad_claims_as_errors(checker):
    items = [CLAIMS[0], "", 42, "   ", CLAIMS[2], CLAIMS[0]]
    records = list(check_claims(checker, items))
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [is_error(r) for r in records] == [False, True, True, True, False, False]
    assert records[1]["error"]["message"].startswith("ValueError") and records[2]["error"]["message"].startswith(
        "TypeError"
    )
    assert {records[i]["error"]["code"] for i in (1, 2, 3)} == {"invalid_claim"}  # the one error shape
    assert records[2]["claim"] == 42  # as sent (JSON holds it)
    good = records[0]
    assert set(good) == RESULT_KEYS and good["claim"] == CLAIMS[0] and good["verdict"] is None
    assert {k: v for k, v in good.items() if k not in ("line", "id")} == checker.check(CLAIMS[0]).to_json_dict()
    assert records[5]["evidence"] == good["evidence"]  # the same claim, the same result


def test_check_claims_keeps_the_input_line_and_id(checker):
    items = [BatchClaim(7, CLAIMS[1], "c-7"), BatchClaim(3, CLAIMS[3])]
    lines = [(r["line"], r["id"], r["claim"]) for r in check_claims(checker, items)]
    assert lines == [(7, "c-7", CLAIMS[1]), (3, None, CLAIMS[3])]


def test_check_claims_is_lazy(checker):
    seen: list[str] = []

    def claims():
        for c in CLAIMS[:3]:
            seen.append(c)
            yield c

    first = next(check_claims(checker, claims()))
    assert first["claim"] == CLAIMS[0] and seen == CLAIMS[:1]  # one claim read, one checked, one yielded


# ------------------------------------------------------------------- the files
def test_read_claims_formats(tmp_path):
    (tmp_path / "c.txt").write_text("first claim\n\nsecond claim\r\n", encoding="utf-8")
    claims, problems = read_claims(str(tmp_path / "c.txt"))
    assert claims == [BatchClaim(1, "first claim"), BatchClaim(3, "second claim")] and problems == []
    (tmp_path / "c.csv").write_text('id,Claim_text,label\n1,"a, quoted claim",T\n2,,F\n', encoding="utf-8")
    claims, _ = read_claims(str(tmp_path / "c.csv"))
    assert claims == [BatchClaim(1, "a, quoted claim"), BatchClaim(2, "")]
    assert read_claims(str(tmp_path / "c.csv"), "label")[0] == [BatchClaim(1, "T"), BatchClaim(2, "F")]
    rows = ['{"claim": "one", "id": "x1"}', "{not json", '{"text": "no claim field"}', '{"claim": 5}']
    (tmp_path / "c.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    claims, problems = read_claims(str(tmp_path / "c.jsonl"))
    assert claims == [BatchClaim(1, "one", "x1"), BatchClaim(4, 5)]
    assert [n for n, _ in problems] == [2, 3] and "not JSON" in problems[0][1]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [("c.csv", "a,b\n1,2\n", "no claim column one of claim"), ("c.tsv", "x\n", "not a .txt, .csv or .jsonl")],
)
def test_read_claims_user_errors(tmp_path, name, text, message):
    from llama_index_carag.cli.common import CLIError

    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(CLIError, match=message):
        read_claims(str(tmp_path / name))


def test_results_file_drops_a_truncated_last_record(tmp_path):
    out = tmp_path / "r.jsonl"
    full = {"line": 1, "claim": "a"}
    out.write_bytes(json.dumps(full).encode() + b"\n" + b'{"line": 2, "claim": "b", "evid')
    results = ResultsFile(out)
    assert results.records == [full] and results.dropped > 0
    assert results.done(BatchClaim(1, "a")) and not results.done(BatchClaim(2, "b"))
    assert not results.done(BatchClaim(1, "a changed claim"))  # line AND text must match
    with results:
        results.append({"line": 2, "claim": "b"})
    assert _records(out) == [full, {"line": 2, "claim": "b"}]


# ------------------------------------------------------------------- the command
def test_batch_command_formats_and_bad_lines(index_dir, tmp_path):
    src = tmp_path / "claims.jsonl"
    rows = [{"claim": CLAIMS[0], "id": "a"}, {"claim": ""}, "{broken", {"claim": CLAIMS[1], "id": "b"}]
    src.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    proc = _batch(index_dir, str(src), out, "--k", "3")
    assert proc.returncode == 1, proc.stderr  # lines not checked: the results are incomplete
    records = _records(out)
    assert [(r["line"], r["id"], r["claim"]) for r in records] == [(1, "a", CLAIMS[0]), (4, "b", CLAIMS[1])]
    assert all(set(r) == RESULT_KEYS and len(r["evidence"]) == 3 for r in records)
    assert "line 2: skipped (ValueError" in proc.stderr and "line 3: skipped (not JSON" in proc.stderr
    assert "2 checked into" in proc.stderr and "2 lines skipped" in proc.stderr
    # the same claims as a .txt on stdin and as a .csv give the same results
    out_txt = tmp_path / "stdin.jsonl"
    proc = _batch(index_dir, "-", out_txt, "--k", "3", stdin=f"{CLAIMS[0]}\n{CLAIMS[1]}\n")
    assert proc.returncode == 0, proc.stderr
    assert [r["evidence"] for r in _records(out_txt)] == [r["evidence"] for r in records]
    csv_file = tmp_path / "claims.csv"
    csv_file.write_text(f'claim,x\n"{CLAIMS[0]}",1\n', encoding="utf-8")
    proc = _batch(index_dir, str(csv_file), tmp_path / "csv.jsonl", "--k", "3")
    assert proc.returncode == 0 and _records(tmp_path / "csv.jsonl")[0]["evidence"] == records[0]["evidence"]


def test_batch_command_resumes(index_dir, tmp_path):
    src = tmp_path / "claims.txt"
    src.write_text("\n".join(CLAIMS[:3]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _batch(index_dir, str(src), out).returncode == 0
    first = out.read_bytes()
    src.write_text("\n".join(CLAIMS) + "\n", encoding="utf-8")  # three more claims
    with out.open("ab") as fh:  # and a record cut off by a kill
        fh.write(b'{"line": 4, "claim": "Solar panels')
    proc = _batch(index_dir, str(src), out)
    assert proc.returncode == 0, proc.stderr
    assert "6 claims read, 3 already in" in proc.stderr and "3 checked into" in proc.stderr
    assert out.read_bytes().startswith(first)  # nothing before was rewritten
    assert [(r["line"], r["claim"]) for r in _records(out)] == list(enumerate(CLAIMS, start=1))
    again = _batch(index_dir, str(src), out)
    assert "6 already in" in again.stderr and [r["line"] for r in _records(out)] == [1, 2, 3, 4, 5, 6]


def test_check_needs_one_claim_or_claims(index_dir, tmp_path):
    for args in ((), ("a claim", "--claims", "x.txt", "--out", "o.jsonl")):
        proc = run_cli("check", *args, "--index", str(index_dir), "--no-llm")
        assert proc.returncode == 2 and "give either one CLAIM or --claims FILE" in proc.stderr
    proc = run_cli("check", "--claims", "x.txt", "--index", str(index_dir))
    assert proc.returncode == 2 and "--claims needs --out" in proc.stderr


_SLOW_MAIN = """
import sys, time
from llama_index_carag.verdicts.check import ClaimChecker
check = ClaimChecker.check
ClaimChecker.check = lambda self, claim: (time.sleep(0.4), check(self, claim))[1]  # a slow model, for the test
from llama_index_carag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _spawn(index_dir: Path, src: Path, out: Path) -> subprocess.Popen:
    args = ["check", "--claims", str(src), "--out", str(out), "--index", str(index_dir), "--no-llm", "--k", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW_MAIN, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_kill_9_mid_batch_then_rerun_loses_nothing(index_dir, tmp_path):
    claims = [f"{c} (case {i})" for i in range(3) for c in CLAIMS[:-1]] + [CLAIMS[-1]]  # 16 distinct claims
    src = tmp_path / "claims.txt"
    src.write_text("\n".join(claims) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    proc = _spawn(index_dir, src, out)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = out.read_bytes() if out.exists() else b""
    kept = before[: before.rfind(b"\n") + 1]  # every complete record written before the kill
    n_kept = kept.count(b"\n")
    assert 1 <= n_kept < len(claims), "the kill did not land mid-batch"
    rerun = _batch(index_dir, str(src), out, "--k", "2")  # in this process: no second model load to wait for
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(claims)} claims read, {n_kept} already in" in rerun.stderr
    assert out.read_bytes().startswith(kept)  # nothing written before the kill was lost or rewritten
    records = _records(out)
    assert [(r["line"], r["claim"]) for r in records] == list(enumerate(claims, start=1))  # each exactly once


# ------------------------------------------------------------------- --no-explanation
def test_explain_false_scores_the_labels_and_generates_nothing(registry):  # noqa: F811 (the fixture)
    full = get_fact_check_synthesizer("scripted:REFUTED", decision="llm")
    triage = get_fact_check_synthesizer("scripted:REFUTED", decision="llm", explain=False)
    nodes = _nodes("The Eiffel Tower is in Paris.")
    explained = full.synthesize(SCRIPTED_CLAIM, nodes).metadata[VERDICT_KEY]
    assert [kind for kind, _ in ScriptedBackend.calls] == ["score", "generate"]
    ScriptedBackend.calls.clear()
    verdict = triage.synthesize(SCRIPTED_CLAIM, nodes).metadata[VERDICT_KEY]
    assert [kind for kind, _ in ScriptedBackend.calls] == ["score"]  # the scoring pass alone
    assert verdict.label == explained.label and verdict.label_scores == explained.label_scores
    assert verdict.explanation == "" and verdict.cited_passages == [] and not verdict.explanation_repaired
    assert explained.explanation
