"""Claims from a text: exact spans, each cue, the declared rule, the scorer protocol, bad input.

The claim-extraction benchmark is tested in research/tests/test_claim_extraction.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_carag.extraction import (
    CUES,
    RULE_THRESHOLD,
    Assessment,
    CheckWorthinessScorer,
    CueScorer,
    split_sentences,
)
from llama_index_carag.extraction.claims import ExtractedClaim, extract_claims


def _fired(sentence: str) -> set[str]:
    return {hit.name for hit in CueScorer().assess(sentence).cues}


# --- spans -------------------------------------------------------------------------------------------


def test_sentence_spans_are_exact_with_abbreviations_decimals_quotes_unicode_and_whitespace():
    text = (
        "  Dr. Smith said the U.S. emitted 5.2 billion tonnes in 2022.   Café owners in Zürich paid €3.5 million."
        '\nHe said "the EU ETS covers 36% of emissions." Really?\n\nI think so!  '
    )
    spans = split_sentences(text)
    assert [s.text for s in spans] == [
        "Dr. Smith said the U.S. emitted 5.2 billion tonnes in 2022.",
        "Café owners in Zürich paid €3.5 million.",
        'He said "the EU ETS covers 36% of emissions."',
        "Really?",
        "I think so!",
    ]
    for span in spans:
        assert text[span.start : span.end] == span.text
    claims = extract_claims(text)
    assert [c.text for c in claims] == [s.text for s in spans[:3]]
    assert all(text[c.start : c.end] == c.text for c in claims)


def test_a_line_break_ends_a_sentence():
    text = "Electric Cars Catch Fire In Florida\nThe EU cut emissions by 5% in 2023."
    assert [s.text for s in split_sentences(text)] == [
        "Electric Cars Catch Fire In Florida",
        "The EU cut emissions by 5% in 2023.",
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "Dr. Ng measured 3.5 mm.",
                "Is it?",
                "Zoë visited the U.S. in 2019!",
                '"Prices rose 40,000%," he said.',
                "hello",
                "東京は大きい。",
                "I think so.",
                "The EU cut emissions by half",
            ]
        ),
        max_size=8,
    ),
    st.lists(st.sampled_from([" ", "  ", "\n", "\n\n", "\t", " \n "]), min_size=9, max_size=9),
)
def test_every_claim_span_is_exact(sentences: list[str], separators: list[str]):
    text = separators[0] + "".join(s + sep for s, sep in zip(sentences, separators[1:]))
    spans = split_sentences(text)
    for span in spans:
        assert text[span.start : span.end] == span.text == span.text.strip() != ""
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
    covered = {i for span in spans for i in range(span.start, span.end)}
    assert all(c.isspace() or i in covered for i, c in enumerate(text))  # no text lost
    for claim in extract_claims(text):
        assert text[claim.start : claim.end] == claim.text


def test_text_the_splitter_skips_is_kept_as_a_sentence(monkeypatch, caplog):
    class Dropping:
        def segment(self, text: str) -> list[str]:
            return ["First one. ", "Third one."]  # drops the middle sentence

    monkeypatch.setattr("llama_index_carag.extraction.sentences._segmenter", Dropping)
    text = "First one. Second one.  Third one. Tail"
    assert [s.text for s in split_sentences(text)] == ["First one.", "Second one.", "Third one.", "Tail"]
    assert "skipped" in caplog.text


# --- cues --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "cue"),
    [
        ("Electric vehicles in salt water turn into bombs.", "substantive"),
        ("Over 40,000 people will attend.", "number"),
        ("Turnout fell by half.", "number"),
        ("The scheme started in March.", "date"),
        ("The plant closed in 2019.", "date"),
        ("The minister visited Glasgow.", "named_entity"),
        ("COVID spread fast.", "named_entity"),
        ("Petrol cars are cheaper than electric ones.", "comparison"),
        ("The heatwave killed farm animals.", "measurement_verb"),
        ("It is what it is.", "vague"),
        ("Did the council approve the budget?", "question"),
        ("In my opinion, the rollout was slow.", "opinion"),
        ("The new guidance is a complete mess.", "evaluative"),
        ("Good morning and welcome to the programme.", "greeting"),
        ("The factory might close next spring.", "hedge"),
    ],
)
def test_each_cue_fires_on_its_example(sentence: str, cue: str):
    assert cue in _fired(sentence)


def test_cues_do_not_fire_without_their_signal():
    plain = _fired("the farmers planted wheat along the river")
    assert plain == {"substantive"}
    assert "named_entity" not in _fired("Farmers planted wheat.")  # sentence start is not a name
    assert "named_entity" not in _fired("Yesterday I planted wheat.")  # nor is "I"
    assert "hedge" not in _fired("The tax started in May 2021.")  # the month, not the verb
    assert "date" in _fired("The tax started in May 2021.")
    assert "question" in _fired('He asked "why?"')


def test_cue_hits_name_the_words_that_fired():
    hits = {h.name: h for h in CueScorer().assess("The EU cut emissions by 55% by 2030.").cues}
    assert hits["number"].matched == ("55%", "2030", "%")
    assert hits["named_entity"].matched == ("EU",)
    assert hits["number"].describe() == "number +1 (55%, 2030, %)"


# --- the declared rule -------------------------------------------------------------------------------


def test_the_declared_rule_is_the_sum_of_the_weights_against_one_threshold():
    assert RULE_THRESHOLD == 1.0
    weights = {c.name: c.weight for c in CUES}
    assert weights == {
        "substantive": 1.0,
        "number": 1.0,
        "date": 1.0,
        "named_entity": 1.0,
        "comparison": 1.0,
        "measurement_verb": 1.0,
        "vague": -1.0,
        "question": -5.0,
        "opinion": -3.0,
        "evaluative": -2.0,
        "greeting": -3.0,
        "hedge": -2.0,
    }
    for sentence in ["Maybe prices will fall.", "The EU cut emissions by 55% by 2030.", "Hi all!"]:
        assessment = CueScorer().assess(sentence)
        assert assessment.score == sum(weights[h.name] for h in assessment.cues)


@pytest.mark.parametrize(
    ("sentence", "worthy"),
    [
        ("New Zealand has a carbon trading system.", True),
        ("India has an ETS.", True),  # two content words and a name
        ("Reinfection of Covid more likely to cause lung issues.", True),  # a hedge outweighed
        ("What do you make of the new emissions targets?", False),
        ("I think electric cars are overrated.", False),
        ("Thanks so much for joining us today.", False),
        ("Maybe the new battery plant will bring some jobs.", False),
        ("Things are different now.", False),
    ],
)
def test_rule_decisions(sentence: str, worthy: bool):
    assert (CueScorer().assess(sentence).score >= RULE_THRESHOLD) is worthy
    assert bool(extract_claims(sentence)) is worthy


def test_threshold_and_cues_are_parameters():
    sentence = "New Zealand has a carbon trading system."
    assert extract_claims(sentence, scorer=CueScorer(threshold=10.0)) == []
    only_questions = CueScorer(cues=[c for c in CUES if c.name == "question"], threshold=0.0)
    assert [c.text for c in extract_claims("Is it? It is.", scorer=only_questions)] == ["It is."]
    with pytest.raises(TypeError):
        CueScorer(threshold="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CueScorer(cues=[])
    with pytest.raises(ValueError, match="unique"):
        CueScorer(cues=[CUES[0], CUES[0]])


# --- the scorer protocol and the claim -------------------------------------------------------------


class _LengthScorer:
    """A stand-in for an LLM scorer: P(yes) grows with length; no cues."""

    threshold = 0.5

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def score(self, sentences: Sequence[str]) -> list[Assessment]:
        self.calls.append(list(sentences))
        return [Assessment(min(1.0, len(s) / 40)) for s in sentences]


def test_any_scorer_with_threshold_and_score_plugs_in():
    scorer = _LengthScorer()
    assert isinstance(scorer, CheckWorthinessScorer)
    text = "Short one. This sentence is clearly longer than twenty characters."
    claims = extract_claims(text, scorer=scorer)
    assert scorer.calls == [["Short one.", "This sentence is clearly longer than twenty characters."]]
    assert [c.text for c in claims] == ["This sentence is clearly longer than twenty characters."]
    assert claims[0].cues == () and claims[0].explanation == "" and claims[0].score == 1.0


def test_a_scorer_must_answer_every_sentence():
    class Short(_LengthScorer):
        def score(self, sentences: Sequence[str]) -> list[Assessment]:
            return super().score(sentences)[:-1]

    with pytest.raises(ValueError, match="1 assessments for 2 sentences"):
        extract_claims("One sentence here. Another one.", scorer=Short())
    with pytest.raises(TypeError, match="scorer"):
        extract_claims("One.", scorer=object())  # type: ignore[arg-type]


def test_claim_carries_score_cues_and_a_readable_explanation():
    (claim,) = extract_claims("Hello!  The EU cut emissions by 55% by 2030.")
    assert isinstance(claim, ExtractedClaim)
    assert (claim.start, claim.end) == (8, 44)
    assert claim.score == 5.0
    assert "number +1 (55%, 2030, %)" in claim.explanation
    data = claim.to_dict()
    assert data["text"] == claim.text and data["score"] == 5.0
    assert {"name": "date", "weight": 1.0, "matched": ["2030"]} in data["cues"]


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["a list"]])
def test_non_text_is_a_type_error(bad: object):
    with pytest.raises(TypeError, match="text must be a str"):
        extract_claims(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("empty", ["", "   ", "\n\n\t"])
def test_empty_text_has_no_claims(empty: str):
    assert extract_claims(empty) == []
    assert split_sentences(empty) == []
