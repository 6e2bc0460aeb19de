"""Tests for llama_index_carag.verdicts: reading free-text model answers into verdicts."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_carag.verdicts import (
    Verdict,
    VerdictLabel,
    answer_sentences,
    parse_verdict,
    trim_explanation,
)

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO

# (model output, label, parsed, cited ids without an evidence_ids list (None: not checked), text the explanation
# must contain (None: not checked))
OUTPUTS = [
    # plain label first
    pytest.param(
        "SUPPORTED. The evidence [1] states that the bridge opened in 1998, as the claim says.",
        S,
        True,
        ["1"],
        "bridge opened in 1998",
        id="plain-supported",
    ),
    pytest.param(
        "REFUTED - Passage 2 reports a population of 3.5 million, not 5 million.",
        R,
        True,
        ["2"],
        "3.5 million",
        id="plain-refuted-dash",
    ),
    pytest.param(
        "NOT ENOUGH INFO\nNone of the passages discuss the 2019 budget.",
        N,
        True,
        [],
        "2019 budget",
        id="plain-nei-newline",
    ),
    pytest.param("refuted. evidence #3 says the opposite.", R, True, ["3"], "Evidence #3", id="lowercase-label"),
    pytest.param(
        "**REFUTED**\n\nEvidence [2] shows the law was repealed in 2015.",
        R,
        True,
        ["2"],
        "repealed in 2015",
        id="bold-bare-label",
    ),
    # explicit markers
    pytest.param(
        "Verdict: REFUTED\nExplanation: Evidence 2 says the figure was 3.5%, not 10%.",
        R,
        True,
        ["2"],
        "3.5%",
        id="verdict-marker",
    ),
    pytest.param(
        "Label - Supported\nThe passages [1, 3] confirm the merger date.",
        S,
        True,
        ["1", "3"],
        "merger date",
        id="label-dash",
    ),
    pytest.param(
        "**Verdict:** not enough info\n\n**Explanation:** The passages do not mention the date.",
        N,
        True,
        [],
        "do not mention the date",
        id="bold-marker-nei",
    ),
    pytest.param("Answer: FALSE", R, True, [], None, id="answer-false"),
    pytest.param(
        "Let me check the passages first. Passage 1 is about taxes.\nFinal answer: true",
        S,
        True,
        ["1"],
        None,
        id="final-answer-true",
    ),
    pytest.param(
        "Verdict: NOT_ENOUGH_INFO. Explanation: The evidence is about a different year.",
        N,
        True,
        [],
        "different year",
        id="enum-name-marker",
    ),
    pytest.param(
        "Based on the passages, my verdict is REFUTED because [4] gives a different date.",
        R,
        True,
        ["4"],
        "different date",
        id="verdict-is",
    ),
    # JSON
    pytest.param(
        '{"verdict": "SUPPORTED", "explanation": "Evidence [1] gives the same figure.", "evidence": [1]}',
        S,
        True,
        ["1"],
        "same figure",
        id="json-clean",
    ),
    pytest.param(
        '```json\n{"label": "REFUTED", "reason": "Passage 3 contradicts it.", "evidence_ids": ["3"]}\n```',
        R,
        True,
        ["3"],
        "contradicts",
        id="json-fenced",
    ),
    pytest.param(
        'Sure! Here is my answer:\n{"Verdict": "not enough info", "Justification": "No passage covers it.",}'
        "\nHope this helps!",
        N,
        True,
        [],
        "No passage covers it",
        id="json-chatter-trailing-comma",
    ),
    pytest.param(
        "{'answer': 'true', 'explanation': 'Both [1] and [2] agree.'}",
        S,
        True,
        ["1", "2"],
        "agree",
        id="json-single-quotes",
    ),
    pytest.param(
        '{"verdict": "REFUTED", "explanation": "The evidence [2] says the opposite',
        R,
        True,
        ["2"],
        "says the opposite",
        id="json-truncated",
    ),
    pytest.param(
        '{"result": {"label": "T", "rationale": "Matches [1]."}}', S, True, ["1"], "Matches", id="json-nested"
    ),
    # chatty Llama-2 style
    pytest.param(
        "The claim is supported by the evidence provided. Evidence [1] clearly states that the company "
        "was founded in 1998. Evidence [2] also mentions the founders.",
        S,
        True,
        ["1", "2"],
        "supported by the evidence",
        id="llama-supported",
    ),
    pytest.param(
        "The claim is not supported by the evidence provided. The evidence does not mention the year 2019 at all.",
        N,
        True,
        [],
        "does not mention",
        id="not-supported-nei",
    ),
    pytest.param(
        "The claim is not supported by the evidence. In fact, passage 2 contradicts it directly.",
        R,
        True,
        ["2"],
        "contradicts",
        id="not-supported-contradicts",
    ),
    pytest.param(
        "The claim is not supported: the evidence shows the opposite happened.",
        R,
        True,
        [],
        None,
        id="not-supported-plain",
    ),
    pytest.param(
        "Based on the evidence provided, the claim is false. Evidence [3] shows the vote took place in March.",
        R,
        True,
        ["3"],
        "claim is false",
        id="llama-false",
    ),
    pytest.param("The claim is not false. Document 5 confirms the figure.", S, True, ["5"], None, id="not-false"),
    pytest.param("The claim cannot be verified from the passages given.", N, True, [], None, id="cannot-verify"),
    pytest.param("There is no evidence that the minister resigned.", N, True, [], None, id="no-evidence-that"),
    pytest.param("The evidence neither supports nor refutes the claim.", N, True, [], None, id="neither"),
    pytest.param(
        "To determine whether the claim is true, I read the passages. Evidence [1] reports 40 deaths. "
        "Therefore, the claim is false.",
        R,
        True,
        ["1"],
        None,
        id="whether-skipped",
    ),
    pytest.param(
        "Is the claim accurate? Looking at (E2), the claim is incorrect.", R, True, ["2"], None, id="question-skipped"
    ),
    pytest.param(
        "Yes, the claim is supported by document 5.", S, True, ["5"], "supported by document 5", id="yes-opening"
    ),
    # rambling (explanation trimmed to two sentences)
    pytest.param(
        "The claim is true. Evidence [1] says the tower is 330 m tall. Evidence [2] says it opened in "
        "1889. Dr. Smith e.g. agrees. The claim therefore holds.",
        S,
        True,
        ["1", "2"],
        None,
        id="rambling-five",
    ),
    # empty / garbage
    pytest.param("", N, False, [], "The model gave no usable answer.", id="empty"),
    pytest.param("   \n\t ", N, False, [], "The model gave no usable answer.", id="whitespace"),
    pytest.param("asdf qwerty", N, False, [], "asdf qwerty", id="garbage"),
    pytest.param("<|im_end|></s>", N, False, [], "The model gave no usable answer.", id="only-template-tokens"),
    # chat-template leftovers
    pytest.param(
        "<|im_start|>assistant\nREFUTED - the evidence (E2) shows otherwise.<|im_end|>",
        R,
        True,
        ["2"],
        "shows otherwise",
        id="chatml",
    ),
    pytest.param(
        "<s>[INST] Claim: vaccines cause autism. Is it supported? [/INST] The claim is refuted by passage 1.</s>",
        R,
        True,
        ["1"],
        "refuted by passage 1",
        id="llama2-inst-echo",
    ),
    pytest.param(
        "<|im_start|>user\nClaim: the moon is cheese.<|im_end|>\n<|im_start|>assistant\n"
        "Assistant: Not enough info. Nothing in [1] or [2] is about the moon.<|im_end|>\n"
        "<|im_start|>user\nthanks",
        N,
        True,
        ["1", "2"],
        "about the moon",
        id="chatml-echo",
    ),
    pytest.param(
        "The evidence provided does not support or refute the claim.", N, True, [], None, id="not-support-or-refute"
    ),
    pytest.param(
        "The claim is not supported. The evidence neither confirms nor refutes it.",
        N,
        True,
        [],
        None,
        id="not-supported-neither-nor",
    ),
    pytest.param(
        "I don't think the claim is true, since [2] dates it to 1990.", R, True, ["2"], None, id="dont-think-true"
    ),
    pytest.param("No, the evidence does not mention it.", N, True, [], "does not mention", id="no-then-nei"),
    pytest.param(
        "It is true that [1] mentions the bridge, but the claim is false.",
        R,
        True,
        ["1"],
        None,
        id="concessive-true-that",
    ),
    pytest.param(
        "### Verdict\nREFUTED\n### Explanation\nThe evidence [3] says otherwise.",
        R,
        True,
        ["3"],
        "The evidence [3] says otherwise.",
        id="markdown-headings",
    ),
    # multi-verdict
    pytest.param(
        "Verdict: SUPPORTED. The evidence says so. Actually, the verdict is REFUTED.",
        S,
        True,
        [],
        None,
        id="multi-verdict",
    ),
    # SmolLM2-135M-Instruct-like answers
    pytest.param("The evidence supports the claim.", S, True, [], "supports the claim", id="smol-1"),
    pytest.param(
        "I think the claim is true because the evidence says that the U.S. government spent approx. "
        "2.5 billion dollars.",
        S,
        True,
        [],
        "2.5 billion",
        id="smol-2",
    ),
    pytest.param(
        "Verdict: Supported\nExplanation: The evidence [1] says that the law was passed in 2010.",
        S,
        True,
        ["1"],
        "passed in 2010",
        id="smol-3",
    ),
    pytest.param(
        "The claim is not enough information to determine if it is true or false.", N, True, [], None, id="smol-4"
    ),
    pytest.param(
        "Claim: The Eiffel Tower is in Berlin.\nThe answer is REFUTED. The Eiffel Tower is in Paris.",
        R,
        True,
        [],
        "Paris",
        id="smol-5-echoed-claim",
    ),
]


@pytest.mark.parametrize(("text", "label", "parsed", "cited", "contains"), OUTPUTS)
def test_parse_real_looking_outputs(text, label, parsed, cited, contains):
    verdict = parse_verdict(text)
    assert isinstance(verdict, Verdict)
    assert verdict.label is label
    assert verdict.parsed is parsed
    assert verdict.raw == text
    assert verdict.explanation.strip()
    assert verdict.explanation == " ".join(verdict.explanation.split())
    assert 1 <= len(answer_sentences(verdict.explanation)) <= 2
    if cited is not None:
        assert verdict.evidence_ids == cited
    if contains is not None:
        assert contains.lower() in verdict.explanation.lower()


def test_marker_line_removed_from_explanation():
    verdict = parse_verdict("Verdict: REFUTED.\nExplanation: Passage [2] says 1998.")
    assert verdict.explanation == "Passage [2] says 1998."
    verdict = parse_verdict("SUPPORTED - passage 1 agrees.")
    assert verdict.explanation == "Passage 1 agrees."


def test_label_only_answer_falls_back_to_cue_sentence():
    verdict = parse_verdict("Verdict: REFUTED")
    assert verdict.label is R and verdict.explanation == "Verdict: REFUTED"
    verdict = parse_verdict('{"verdict": "supported"}')
    assert verdict.label is S and verdict.explanation == "The model answered SUPPORTED without an explanation."


def test_rambling_answer_is_trimmed_to_max_sentences():
    text = (
        "The claim is true. Evidence [1] says the tower is 330 m tall. Evidence [2] says it opened in 1889. "
        "Many tourists visit it. The claim therefore holds."
    )
    assert parse_verdict(text).explanation == "The claim is true. Evidence [1] says the tower is 330 m tall."
    assert parse_verdict(text, max_sentences=1).explanation == "The claim is true."
    assert len(answer_sentences(parse_verdict(text, max_sentences=4).explanation)) == 4


def test_unparseable_text_logs_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_carag.verdicts.parsing"):
        verdict = parse_verdict("asdf qwerty zxcv")
    assert verdict.parsed is False and verdict.label is N
    records = [
        r for r in caplog.records if r.name == "llama_index_carag.verdicts.parsing" and r.levelno == logging.WARNING
    ]
    assert records and "asdf qwerty" in records[0].getMessage()


def test_conflicting_markers_keep_the_first_and_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_carag.verdicts.parsing"):
        verdict = parse_verdict("Verdict: REFUTED\nOn reflection, final answer: supported")
    assert verdict.label is R and verdict.parsed
    assert any("conflicting" in r.getMessage() for r in caplog.records)


def test_parsed_answers_do_not_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_carag.verdicts.parsing"):
        parse_verdict("Verdict: SUPPORTED\nExplanation: [1] agrees.")
    assert not caplog.records


@pytest.mark.parametrize(
    ("text", "ids", "expected"),
    [
        pytest.param("REFUTED. See [2].", ["e1", "e2", "e3"], ["e2"], id="bracket"),
        pytest.param("SUPPORTED, see [1, 3] and [2].", ["e1", "e2", "e3"], ["e1", "e3", "e2"], id="bracket-list"),
        pytest.param("SUPPORTED [1][4]", ["a", "b", "c", "d"], ["a", "d"], id="adjacent-brackets"),
        pytest.param("REFUTED: Evidence 2 and evidence #3 disagree.", ["a", "b", "c"], ["b", "c"], id="words"),
        pytest.param("REFUTED: passage 4, document 1 and (E2).", ["a", "b", "c", "d"], ["d", "a", "b"], id="mixed"),
        pytest.param("REFUTED: [7] and [0] say so, [3] too.", ["a", "b", "c"], ["c"], id="out-of-range-ignored"),
        pytest.param("SUPPORTED: ev_12 says so, as does [1].", ["ev_07", "ev_12"], ["ev_12", "ev_07"], id="literal-id"),
        pytest.param("SUPPORTED: [1-3] agree.", ["a", "b", "c", "d"], ["a", "b", "c"], id="range"),
        pytest.param(
            '{"verdict": "REFUTED", "explanation": "x", "citations": ["ev_12", 1]}',
            ["ev_07", "ev_12"],
            ["ev_12", "ev_07"],
            id="json-field-ids",
        ),
        pytest.param("SUPPORTED: [2] and [2] again, then [1].", None, ["2", "1"], id="no-ids-unique-order"),
        pytest.param("SUPPORTED: Evidence 10 says so.", None, ["10"], id="no-ids-two-digits"),
    ],
)
def test_evidence_ids(text, ids, expected):
    assert parse_verdict(text, evidence_ids=ids).evidence_ids == expected


def test_citations_stay_in_explanation():
    assert "[2]" in parse_verdict("REFUTED. The vote was in March [2].").explanation


def test_invalid_arguments():
    with pytest.raises(TypeError, match="str or None"):
        parse_verdict(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_verdict("SUPPORTED", evidence_ids="abc")
    with pytest.raises(ValueError):
        parse_verdict("SUPPORTED", max_sentences=0)
    assert parse_verdict(None).parsed is False


def test_label_fever_round_trip():
    for label, letter in ((S, "T"), (R, "F"), (N, "N")):
        assert label.to_fever() == letter
        assert VerdictLabel.from_fever(letter) is label
        assert VerdictLabel.from_fever(letter.lower()) is label
        assert VerdictLabel.from_fever(label.value.lower()) is label
    assert VerdictLabel.from_fever("not enough info") is N
    assert parse_verdict("Verdict: true").to_fever() == "T"
    for bad in ("X", "", "maybe", None):
        with pytest.raises(ValueError):
            VerdictLabel.from_fever(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The rate was 3.5% in 2020. It rose.", ["The rate was 3.5% in 2020.", "It rose."]),
        (
            "Prices rose, e.g. in the U.S. and U.K. Then they fell.",
            ["Prices rose, e.g. in the U.S. and U.K. Then they fell."],
        ),
        (
            "Dr. Smith met Mr. Jones vs. Prof. Lee at 5 p.m. today. Done!",
            ["Dr. Smith met Mr. Jones vs. Prof. Lee at 5 p.m. today.", "Done!"],
        ),
        ("See No. 5 and i.e. the rest. It ends.", ["See No. 5 and i.e. the rest.", "It ends."]),
        # pysbd's decisions (the one splitter, extraction.sentences): "etc." and "approx." before a number end one
        ("See the rest etc. It ends.", ["See the rest etc.", "It ends."]),
        ("It is approx. 5 km long.", ["It is approx.", "5 km long."]),
        # a citation after the full stop stays with the sentence it closes
        ("The claim is false [2]. The vote was later. [3]", ["The claim is false [2].", "The vote was later. [3]"]),
        ("It is false. [2] The vote was later.", ["It is false. [2]", "The vote was later."]),
        ("[1] says X.\n[2] says Y.", ["[1] says X.", "[2] says Y."]),
        ('Really? Yes! "Quoted." It is the answer.', ["Really?", "Yes!", '"Quoted."', "It is the answer."]),
        ("First line\n\nSecond   paragraph", ["First line", "Second paragraph"]),
        ("", []),
    ],
)
def test_answer_sentences(text, expected):
    assert answer_sentences(text) == expected


def test_trim_explanation():
    assert trim_explanation("  A one.  B two.\nC three. ", 2) == "A one. B two."
    assert trim_explanation("A one.", 5) == "A one."
    assert trim_explanation("", 2) == ""
    with pytest.raises(ValueError):
        trim_explanation("A.", 0)


class _ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_TOKENS = [
    "Verdict:",
    "**",
    "{",
    "}",
    '"verdict"',
    ":",
    "'",
    '"',
    "```json",
    "[2]",
    "[1, 3]",
    "not",
    "supported",
    "refuted",
    "true",
    "NEI",
    "<|im_start|>assistant",
    "[/INST]",
    "\n",
    ". ",
    "Evidence 4",
    "(E2)",
    "e.g.",
    "3.5",
]
_FUZZ_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(exclude_categories=())),  # NULs, lone surrogates, private use …
    st.lists(st.one_of(st.sampled_from(_TOKENS), st.text(max_size=5)), max_size=30).map("".join),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_FUZZ_TEXT, use_ids=st.booleans())
def test_fuzz_never_raises(text, use_ids):
    collector = _ErrorCollector()
    module_logger = logging.getLogger("llama_index_carag.verdicts.parsing")
    module_logger.addHandler(collector)
    try:
        verdict = parse_verdict(text, evidence_ids=["a", "b", "c"] if use_ids else None)
    finally:
        module_logger.removeHandler(collector)
    assert not collector.records, "the parser's defensive fallback was needed"
    assert isinstance(verdict, Verdict)
    assert verdict.label in set(VerdictLabel)
    assert verdict.explanation.strip()
    assert verdict.raw == text
    assert len(verdict.evidence_ids) == len(set(verdict.evidence_ids))
    assert len(answer_sentences(verdict.explanation)) <= 2
