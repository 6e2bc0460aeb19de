"""A whole text checked (``check_text``, ``carag check-text``): spans, summary, schema, reports, the CLI."""

from __future__ import annotations

import csv
import html
import json
import re
from pathlib import Path

import pytest

from llama_index_carag import DEFAULT
from llama_index_carag.datasets import demo_corpus_path
from llama_index_carag.verdicts.bulk import (
    LABELS,
    TEXT_CHECK_SCHEMA_VERSION,
    TextCheckResult,
    check_claims,
    check_text,
    find_claims,
    iter_text_checks,
    text_check_result_json_schema,
)
from llama_index_carag.verdicts.check import CheckFailed, CheckResult, EvidenceRow
from llama_index_carag.verdicts.types import Verdict
from llama_index_carag.visualize.text_report import html_report, markdown_report, write_text_report
from tests.helpers import run_cli

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "schemas" / "text-check-result.json"

TEXT = (
    "Hello everyone, thanks for reading! Offshore wind farms reduced cod catches by 30% in 2019 according to "
    "<Fisheries> & Co. What do you think? I love the sea. Germany built 1,500 turbines in the North Sea "
    "since 2010.\nThe EU banned single-use plastics in 2021 <script>alert(1)</script>."
)


class KeywordChecker:
    """A stand-in ClaimChecker: REFUTED when the claim names Germany, SUPPORTED when it has a %, else NEI."""

    def __init__(self, with_verdict: bool = True, fail_on: str | None = None) -> None:
        self.with_verdict, self.fail_on = with_verdict, fail_on
        self.claims: list[str] = []

    def check(self, claim: str) -> CheckResult:
        self.claims.append(claim)
        if self.fail_on is not None and self.fail_on in claim:
            raise CheckFailed("llm_error", "the language model failed (RuntimeError)")
        label = "REFUTED" if "Germany" in claim else "SUPPORTED" if "%" in claim else "NOT_ENOUGH_INFO"
        verdict = Verdict(label=label, explanation=f"Because <b>{label}</b> & [1].", raw=label, evidence_ids=["e<1>"])
        evidence = [
            EvidenceRow(
                rank=r, id=f"e<{r}>", score=1.0 / r, text=f"passage {r} <i>x</i>", stance="SUPPORTED", stance_score=0.9
            )
            for r in (1, 2)
        ]
        soi = {"refined_cluster_evidences": [{"id": "e<1>"}], "cluster_size": 7}
        return CheckResult(
            claim=claim,
            verdict=verdict if self.with_verdict else None,
            settings=DEFAULT,
            soi=soi,
            evidence=evidence,
        )


@pytest.fixture(scope="module")
def checked() -> TextCheckResult:
    return check_text(KeywordChecker(), TEXT)  # type: ignore[arg-type]


def test_spans_map_back_to_the_text(checked):
    assert [c.text for c in checked.claims] == [
        "Offshore wind farms reduced cod catches by 30% in 2019 according to <Fisheries> & Co.",
        "Germany built 1,500 turbines in the North Sea since 2010.",
        "The EU banned single-use plastics in 2021 <script>alert(1)</script>.",
    ]
    for claim in checked.claims:
        assert TEXT[claim.start : claim.end] == claim.text == claim.check.claim
        assert claim.check_worthiness > 0 and {cue.name for cue in claim.cues}
    assert checked.text == TEXT


def test_summary_counts(checked):
    s = checked.summary
    assert s.sentences == 6 and s.claims == 3 and s.without_verdict == 0
    assert s.labels == {"SUPPORTED": 1, "REFUTED": 1, "NOT_ENOUGH_INFO": 1}
    unchecked = check_text(KeywordChecker(with_verdict=False), TEXT)  # type: ignore[arg-type]
    assert unchecked.summary.labels == dict.fromkeys(LABELS, 0) and unchecked.summary.without_verdict == 3


def test_the_generator_checks_one_claim_at_a_time():
    checker = KeywordChecker()
    found = find_claims(TEXT)
    steps = iter_text_checks(checker, found)  # type: ignore[arg-type]
    assert checker.claims == []  # nothing checked before it is asked for
    first = next(steps)
    assert checker.claims == [first.text] and first.label == "SUPPORTED"
    assert [c.label for c in steps] == ["REFUTED", "NOT_ENOUGH_INFO"]


def test_a_failed_claim_is_reported_in_place_and_the_text_goes_on(tmp_path):
    """The sync text check reports a failing claim as the batch and the server do: ``{"claim", "error"}``."""
    result = check_text(KeywordChecker(fail_on="Germany"), TEXT)  # type: ignore[arg-type]
    assert [c.label for c in result.claims] == ["SUPPORTED", "NOT_ENOUGH_INFO"]
    (failed,) = result.failed
    assert TEXT[failed.start : failed.end] == failed.claim and failed.claim.startswith("Germany built")
    assert failed.error.code == "llm_error" and result.summary.failed == 1 and result.summary.claims == 2
    batch = list(check_claims(KeywordChecker(fail_on="Germany"), [failed.claim, 7]))  # type: ignore[arg-type]
    shape = {k: v for k, v in failed.model_dump(mode="json").items() if k not in ("start", "end")}
    assert {k: v for k, v in batch[0].items() if k not in ("line", "id")} == shape
    assert batch[1]["claim"] == 7 and batch[1]["error"]["code"] == "invalid_claim"
    assert "[NOT_CHECKED]" in markdown_report(result) and "1 not checked" in markdown_report(result)
    assert '<details class="claim not_checked">' in html_report(result)


def test_a_broken_retriever_is_not_called_an_invalid_claim():
    """Only the claim's own rejection is ``invalid_claim``; a ``ValueError`` from the retriever or the LLM is not
    one claim's fault and stops the loop; a claim of NULs is rejected before any check."""

    class Broken(KeywordChecker):
        def check(self, claim: str) -> CheckResult:
            raise ValueError("the FAISS index has another dimension")

    with pytest.raises(ValueError, match="another dimension"):
        check_text(Broken(), TEXT)  # type: ignore[arg-type]
    checker = KeywordChecker()
    (nul,) = list(check_claims(checker, ["\x00\x00"]))  # type: ignore[arg-type]
    assert nul["error"]["code"] == "invalid_claim" and checker.claims == []


def test_a_text_without_claims():
    result = check_text(KeywordChecker(), "Hi! How are you? I think so.")  # type: ignore[arg-type]
    assert result.claims == [] and result.summary.claims == 0 and result.summary.sentences == 3
    assert check_text(KeywordChecker(), "").summary.sentences == 0  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        check_text(KeywordChecker(), None)  # type: ignore[arg-type]


def _required_keys_hold(data: dict, schema: dict, node: dict | None = None) -> None:
    """Every object in ``data`` has the keys its schema requires (jsonschema is not installed)."""
    node = schema if node is None else node
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    for option in node.get("anyOf", ()):
        if option.get("type") == "null" and data is None:
            return
    if isinstance(data, dict) and "properties" in node:
        assert set(node.get("required", ())) <= set(data), (node.get("title"), set(data))
        for key, value in data.items():
            if key in node["properties"]:
                _required_keys_hold(value, schema, node["properties"][key])
    elif isinstance(data, list) and "items" in node:
        for item in data:
            _required_keys_hold(item, schema, node["items"])
    elif "anyOf" in node and data is not None:
        refs = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(refs) == 1:
            _required_keys_hold(data, schema, refs[0])


def test_published_schema_is_up_to_date():
    """``docs/schemas/text-check-result.json`` is the model's schema; rewritten (and failing) when stale."""
    schema = text_check_result_json_schema()
    text = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    stale = not SCHEMA_PATH.is_file() or SCHEMA_PATH.read_text(encoding="utf-8") != text
    if stale:
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_PATH.write_text(text, encoding="utf-8")
    assert not stale, f"{SCHEMA_PATH} was out of date and has been rewritten; commit it"


def test_json_validates_against_the_published_schema(checked):
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    data = checked.to_json_dict()
    assert data["schema_version"] == TEXT_CHECK_SCHEMA_VERSION
    _required_keys_hold(data, schema)
    assert {"start", "end", "text", "check_worthiness", "cues", "check"} <= set(
        schema["$defs"]["TextClaim"]["required"]
    )
    assert TextCheckResult.model_validate(data) == checked
    with pytest.raises(AssertionError):  # the check can fail: a claim without its span
        del data["claims"][0]["start"]
        _required_keys_hold(data, schema)


def test_html_report_is_escaped_with_one_highlight_per_claim(checked):
    page = html_report(checked)
    assert page.count('<details class="claim ') == len(checked.claims) == 3
    for label in ("supported", "refuted", "not_enough_info"):
        assert page.count(f'<details class="claim {label}">') == 1
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<Fisheries>" not in page and "&lt;Fisheries&gt; &amp; Co." in page
    assert "<b>REFUTED</b>" in page and "&lt;b&gt;REFUTED&lt;/b&gt;" in page  # ours bold, the model's escaped
    assert "<code>e&lt;1&gt;</code> — SUPPORTED 0.90: passage 1 &lt;i&gt;" in page and "SOI: 1 items" in page
    # the text, without the claims' panels and tags and unescaped, is the whole text in order
    body = page.split('<div class="text">', 1)[1].rsplit("</div></body>", 1)[0]
    body = re.sub(r'<div class="why">.*?</div>|<span class="tag">.*?</span>', "", body)
    assert html.unescape(re.sub(r"<[^>]+>", "", body)) == TEXT
    assert "http" not in page.lower() and "<link" not in page  # self-contained


def test_html_report_marks_the_excerpt_a_long_passages_stance_was_read_from(checked):
    claim = checked.claims[0]
    row = claim.check.evidence[0].model_copy(
        update={"text": "First <b>one</b>.  Then\n<i>two</i>.", "stance_excerpt": "Then <i>two</i>."}
    )
    rows = [row, *claim.check.evidence[1:]]
    changed = checked.model_copy(
        update={
            "claims": [
                claim.model_copy(update={"check": claim.check.model_copy(update={"evidence": rows})}),
                *checked.claims[1:],
            ]
        }
    )
    page = html_report(changed)
    assert "First &lt;b&gt;one&lt;/b&gt;. <mark>Then &lt;i&gt;two&lt;/i&gt;.</mark>" in page


def test_markdown_report_tags_and_footnotes(checked, tmp_path):
    text = markdown_report(checked)
    assert text.count("`[SUPPORTED]`[^1]") == 1 and "`[REFUTED]`[^2]" in text and "[^3]: **NOT_ENOUGH_INFO**" in text
    assert "since 2010.** `[REFUTED]`[^2]\\\n**The EU banned" in text  # the text's line break stays one
    trailing = markdown_report(check_text(KeywordChecker(), TEXT + "\n"))  # type: ignore[arg-type]
    assert "</script\\>.** `[NOT_ENOUGH_INFO]`[^3]\n\n[^1]:" in trailing  # no break left dangling at the end
    assert "\\<Fisheries\\>" in text and "Evidence: e\\<1\\>." in text
    assert text.startswith("# Fact check\n\n3 claims in 6 sentences: 1 SUPPORTED, 1 REFUTED, 1 NOT_ENOUGH_INFO")
    assert write_text_report(checked, tmp_path / "r.md").read_text(encoding="utf-8") == text
    with pytest.raises(ValueError, match=r"\.md or \.html"):
        write_text_report(checked, tmp_path / "r.pdf")


# ------------------------------------------------------------------- the CLI, on the demo corpus
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check_text") / "index"
    proc = run_cli("index", str(demo_corpus_path()), "--out", str(out), "--clusters", "3", "--delta", "0.5")
    assert proc.returncode == 0, proc.stderr
    return out


def test_check_text_schema_without_an_index():
    proc = run_cli("check-text", "--schema")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == text_check_result_json_schema()


def test_check_text_cli_without_llm(index_dir, tmp_path):
    source = tmp_path / "post.txt"
    source.write_text(TEXT, encoding="utf-8")
    report = tmp_path / "post.html"
    proc = run_cli("check-text", str(source), "--index", str(index_dir), "--no-llm", "--json", "--k", "3")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    _required_keys_hold(data, text_check_result_json_schema())
    assert data["summary"] == {
        "sentences": 6,
        "claims": 3,
        "failed": 0,
        "labels": dict.fromkeys(LABELS, 0),
        "without_verdict": 3,
    }
    for claim in data["claims"]:
        assert TEXT[claim["start"] : claim["end"]] == claim["text"] and len(claim["check"]["evidence"]) == 3
    assert "checking claims" in proc.stderr and "3/3" in proc.stderr  # the progress bar
    proc = run_cli("check-text", "-", "--index", str(index_dir), "--no-llm", "--report", str(report), stdin=TEXT)
    assert proc.returncode == 0, proc.stderr
    assert "[1] chars 36-121  -  Offshore wind farms" in proc.stdout and "evidence: Evidence_Claims_" in proc.stdout
    assert "Summary: 3 claims checked in 6 sentences" in proc.stdout and "without a verdict 3" in proc.stdout
    assert report.read_text(encoding="utf-8").count('<details class="claim no_verdict">') == 3


def test_check_text_cli_with_a_stand_in_llm(index_dir, tmp_path, monkeypatch):
    from llama_index_carag.models import resolve as models
    from tests.helpers import StubLLM

    monkeypatch.setattr(models, "resolve_llm", lambda *a, **k: StubLLM())
    report = tmp_path / "post.md"
    proc = run_cli(
        "check-text", "-", "--index", str(index_dir), "--llm", "smollm2", "--report", str(report), stdin=TEXT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("explanation: ") == 3 and "Summary: 3 claims checked in 6 sentences" in proc.stdout
    text = report.read_text(encoding="utf-8")
    tags = re.findall(r"`\[(SUPPORTED|REFUTED|NOT_ENOUGH_INFO)\]`\[\^", text)
    assert (
        len(tags) == 3 and sum(text.count(f"]: **{label}**") for label in set(tags)) == 3
    )  # a tag and a footnote each


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("check-text", "--index", "x"), "needs a FILE"),
        (("check-text", "missing.txt"), "needs --index"),
        (("check-text", "missing.txt", "--index", "x"), "no file at missing.txt"),
        (("check-text", "-", "--index", "x", "--report", "r.pdf"), ".md or .html"),
    ],
)
def test_check_text_user_errors(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def _article(words: int = 1000) -> str:
    """An article of at least ``words`` words: demo-corpus passages between non-check-worthy filler."""
    filler = ["What does this mean for us?", "Thanks for reading this far!", "I think we should care more."]
    with open(demo_corpus_path(), newline="", encoding="utf-8") as handle:
        passages = list(dict.fromkeys(row["Evidence_text"] for row in csv.DictReader(handle)))
    parts: list[str] = []
    for n, passage in enumerate(passages):
        parts += [passage, filler[n % len(filler)]]
        if len(" ".join(parts).split()) >= words:
            break
    return " ".join(parts)


def test_a_thousand_word_article_finishes_with_a_report(index_dir, tmp_path):
    article = _article()
    assert len(article.split()) >= 1000
    source, report = tmp_path / "article.txt", tmp_path / "article.html"
    source.write_text(article, encoding="utf-8")
    proc = run_cli("check-text", str(source), "--index", str(index_dir), "--no-llm", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    found = find_claims(article)
    assert len(found.claims) >= 20
    assert f"Summary: {len(found.claims)} claims checked in {found.sentences} sentences" in proc.stdout
    assert f"{len(found.claims)}/{len(found.claims)}" in proc.stderr
    assert report.read_text(encoding="utf-8").count('<details class="claim ') == len(found.claims)


def test_check_text_cli_exits_1_when_a_claim_was_not_checked(index_dir, monkeypatch):
    from llama_index_carag.verdicts.check import ClaimChecker

    real = ClaimChecker.check

    def check(self, claim):
        if "Germany" in claim:
            raise CheckFailed("llm_error", "the language model failed (RuntimeError)")
        return real(self, claim)

    monkeypatch.setattr(ClaimChecker, "check", check)
    proc = run_cli("check-text", "-", "--index", str(index_dir), "--no-llm", stdin=TEXT)
    assert proc.returncode == 1, proc.stderr
    assert "NOT CHECKED  Germany built" in proc.stdout and "; 1 failed" in proc.stdout


def test_a_prompt_too_long_for_the_llm_is_that_claims_failure():
    """The LLM's context window is the claim's problem (its passages), not the backend's: ``prompt_too_long``."""
    from types import SimpleNamespace

    from llama_index.core.schema import QueryBundle

    from llama_index_carag.models.backend import PromptTooLong
    from llama_index_carag.verdicts.check import ClaimChecker

    class Overflowing:
        def synthesize(self, bundle, nodes):
            raise PromptTooLong("The fact-check prompt has 9000 tokens; it does not fit.")

    checker = ClaimChecker(None, Overflowing())  # type: ignore[arg-type]
    retrieved = SimpleNamespace(bundle=QueryBundle("a claim"), nodes=[])
    with pytest.raises(CheckFailed) as failed:
        checker.verdict(retrieved)  # type: ignore[arg-type]
    assert failed.value.code == "prompt_too_long" and "9000 tokens" in failed.value.message
