"""Check-worthiness cues: the registry (one :class:`Cue` object per cue), what each one finds, and the words it reads.

A cue reads one sentence's words (:class:`SentenceWords`: its tokens and their lower-case forms) and returns the
words that made it fire (an empty tuple: it did not fire).  Positive cues mark checkable content
(quantities, dates, names, comparisons, verbs of cause and measurement, enough content words);
negative cues mark what a fact-checker does not check (questions, first-person opinions, judgement words,
greetings and thanks, hedges, vague statements).  A new cue is one :class:`Cue` in :data:`CUES`.

The word lists the cues look for are here too (lower case; a phrase is space-separated words).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: function words: never content
STOPWORDS = _words(
    """a about above after again against all also am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
    each either else ever every few for from further had hadn't has hasn't have haven't having he he'd he's her
    here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
    just let's me might mine must my myself no nor not now of off on once only or other ought our ours ourselves
    out over own same shall she she'd she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those through to too under until
    up upon us very was wasn't we we'd we'll we're we've were weren't what what's when when's where where's whether
    which while who who's whom whose why why's will with won't would wouldn't yet you you'd you'll you're you've
    your yours yourself yourselves one ones"""
)

#: words with no checkable content of their own ("things are different now")
VAGUE_WORDS = _words(
    """thing things stuff something anything everything nothing someone anyone everyone everybody nobody somebody
    lot lots kind sort way ways really actually basically literally totally pretty quite rather somewhat much many
    more most less good bad ok okay fine whatever happen happens happened happening get gets got go goes going gone
    went come comes came make makes made know knows knew say says take takes tell seem seems seemed feel feels
    like just well still even sure going gonna yeah yes right big little great"""
)

NUMBER_WORDS = _words(
    """two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty sixty seventy
    eighty ninety hundred hundreds thousand thousands million millions billion billions trillion dozen dozens
    half twice double triple quarter third percent per cent"""
)

MONTHS = _words("January February March April May June July August September October November December")
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
TIME_WORDS = _words("decade decades century centuries annually yearly quarterly")

#: comparatives and superlatives of measurable things
COMPARISON_WORDS = _words(
    """than more less fewer most least better worse best worst higher highest lower lowest larger largest bigger
    biggest smaller smallest greater greatest faster fastest slower slowest cheaper cheapest costlier stronger
    strongest weaker weakest longer longest shorter shortest older oldest younger youngest richer richest poorer
    poorest hotter hottest warmer warmest colder coldest safer safest deadlier deadliest record"""
)

#: verbs of cause, change and measurement (inflected forms listed)
MEASUREMENT_VERBS = _words(
    """cause causes caused causing lead leads led result results resulted increase increases increased increasing
    decrease decreases decreased reduce reduces reduced reducing rise rises rose risen rising fall falls fell fallen
    grow grows grew grown decline declines declined double doubled doubles triple tripled halve halved cut
    cuts kill kills killed prevent prevents prevented protect protects protected cost costs invest invests invested
    spend spends spent earn earns earned export exports exported import imports imported produce produces produced
    emit emits emitted launch launches launched sign signs signed establish established found founded announce
    announced ban bans banned approve approved require requires required report reported record recorded measure
    measured exceed exceeds exceeded reach reached surpass surpassed account accounts accounted cover covers covered
    join joined elect elected win wins won lose loses lost die dies died infect infected vaccinate vaccinated
    sell sells sold buy buys bought build builds built hold held ratified pledged recall recalled"""
)

#: first-person (or first-person plural) opinion markers
OPINION_PHRASES = frozenset(
    {
        "i think",
        "i believe",
        "i feel",
        "i guess",
        "i suppose",
        "i love",
        "i hate",
        "i like",
        "i'd say",
        "i reckon",
        "we think",
        "we believe",
        "we feel",
        "we reckon",
        "in my opinion",
        "in my view",
        "my view",
        "my opinion",
        "to me",
        "for me",
        "personally",
        "honestly",
        "frankly",
        "if you ask me",
        "imo",
        "imho",
        "i'm convinced",
        "as far as i'm concerned",
        "my take",
    }
)

#: judgements rather than facts ("a complete mess", "absolutely brilliant")
EVALUATIVE_WORDS = _words(
    """awful terrible horrible dreadful amazing awesome wonderful fantastic brilliant excellent superb lovely
    gorgeous stupid silly idiotic dumb ridiculous absurd pathetic outrageous disgraceful disgrace shameful
    disgusting insane crazy nonsense mess disaster exhausting boring annoying overrated underrated unbelievable
    scandalous embarrassing laughable delightful"""
)

GREETING_PHRASES = frozenset(
    {
        "hello",
        "hi",
        "hey",
        "hiya",
        "greetings",
        "good morning",
        "good afternoon",
        "good evening",
        "good night",
        "goodnight",
        "welcome",
        "thanks",
        "thank you",
        "many thanks",
        "cheers",
        "goodbye",
        "bye",
        "farewell",
        "see you",
        "talk soon",
        "take care",
        "have a great",
        "have a nice",
        "have a good",
        "stay tuned",
        "stay safe",
        "dear",
        "we appreciate",
    }
)

#: uncertainty markers
HEDGE_PHRASES = frozenset(
    {
        "maybe",
        "perhaps",
        "possibly",
        "probably",
        "likely",
        "might",
        "may",
        "could",
        "apparently",
        "supposedly",
        "seemingly",
        "seems",
        "seem",
        "not sure",
        "kind of",
        "sort of",
        "who knows",
        "chances are",
        "it's unclear",
        "it is unclear",
    }
)

#: a sentence with at least this many content words is substantive
MIN_CONTENT_WORDS = 3
#: a sentence with at most this many content words is vague (in between: neither)
MAX_VAGUE_WORDS = 1

_YEAR = re.compile(r"^(1[5-9]\d\d|20\d\d)s?$")
_FIRST_PERSON = frozenset({"I", "I'm", "I'd", "I've", "I'll", "I’m", "I’d", "I’ve", "I’ll"})
_MONTH_LEAD = frozenset({"in", "of", "since", "until", "by", "from", "early", "late", "mid", "last", "next"})
#: a dotted abbreviation ("U.S."), a number ("3.5", "40,000", "36%") or a word with inner hyphens/apostrophes ("COVID-19", "EU's")
_TOKEN = re.compile(r"(?:[^\W\d_]\.){2,}|\d+(?:[.,]\d+)*%?|[^\W_]+(?:['’\-][^\W_]+)*")
_LEADING = re.compile(r"^[\s\"'“‘(\[«—–-]*")


@dataclass(frozen=True)
class SentenceWords:
    """A sentence's text, its tokens in order (original case) and their lower-case forms."""

    text: str
    tokens: tuple[str, ...] = field(init=False)
    lower: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        leading = _LEADING.match(self.text)
        body = self.text[leading.end() :] if leading else self.text
        tokens = tuple(_TOKEN.findall(body))
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "lower", tuple(t.lower() for t in tokens))

    def has_phrase(self, phrase: str) -> bool:
        """Whether the lower-case words of ``phrase`` occur consecutively in the sentence."""
        words = tuple(phrase.split())
        n = len(words)
        return any(self.lower[i : i + n] == words for i in range(len(self.lower) - n + 1))

    def phrases(self, phrases: frozenset[str]) -> tuple[str, ...]:
        """The members of ``phrases`` (lower-case, space-separated words) found in the sentence."""
        return tuple(sorted(p for p in phrases if self.has_phrase(p)))

    @property
    def ending(self) -> str:
        """The sentence's last non-space character after closing quotes and brackets ('' if none)."""
        stripped = self.text.rstrip().rstrip("\"'”’)]»")
        return stripped[-1:] if stripped else ""


@dataclass(frozen=True)
class CueHit:
    """A cue that fired on a sentence: its name, its weight and the words that made it fire."""

    name: str
    weight: float
    matched: tuple[str, ...]

    def describe(self) -> str:
        """``"number +1 (2020, 36%)"``: what a fact-checker reads."""
        words = f" ({', '.join(self.matched)})" if self.matched else ""
        return f"{self.name} {self.weight:+g}{words}"


@dataclass(frozen=True)
class Cue:
    """One check-worthiness cue: ``find`` returns the words that fire it; ``weight`` is added to the score."""

    name: str
    weight: float
    description: str
    find: Callable[[SentenceWords], tuple[str, ...]]

    def hit(self, words: SentenceWords) -> CueHit | None:
        """The :class:`CueHit` on this sentence, or ``None`` when the cue does not fire."""
        matched = self.find(words)
        return CueHit(self.name, self.weight, matched) if matched else None


def _is_month(words: SentenceWords, i: int) -> bool:
    token = words.tokens[i]
    if token not in MONTHS:
        return False
    if token != "May":
        return True
    after = words.tokens[i + 1] if i + 1 < len(words.tokens) else ""
    before = words.lower[i - 1] if i > 0 else ""
    return after[:1].isdigit() or before in _MONTH_LEAD  # "May 2020", "in May"; else the verb


#: single words that are never content: function words, vague words, one-word hedges
_NOT_CONTENT = STOPWORDS | VAGUE_WORDS | {p for p in HEDGE_PHRASES if " " not in p}


def content_words(words: SentenceWords) -> tuple[str, ...]:
    """Words with content of their own: containing a letter; not function words, vague words or hedges."""
    return tuple(
        t for t, low in zip(words.tokens, words.lower) if any(c.isalpha() for c in t) and low not in _NOT_CONTENT
    )


def _substantive(words: SentenceWords) -> tuple[str, ...]:
    found = content_words(words)
    return found if len(found) >= MIN_CONTENT_WORDS else ()


def _vague(words: SentenceWords) -> tuple[str, ...]:
    found = content_words(words)
    return () if len(found) > MAX_VAGUE_WORDS else (f"{len(found)} content words",)


def _number(words: SentenceWords) -> tuple[str, ...]:
    found = [t for t, low in zip(words.tokens, words.lower) if any(c.isdigit() for c in t) or low in NUMBER_WORDS]
    found += [c for c in "$€£¥%" if c in words.text]
    return tuple(found)


def _date(words: SentenceWords) -> tuple[str, ...]:
    return tuple(
        t
        for i, (t, low) in enumerate(zip(words.tokens, words.lower))
        if _YEAR.match(t) or _is_month(words, i) or t in WEEKDAYS or low in TIME_WORDS
    )


def _named_entity(words: SentenceWords) -> tuple[str, ...]:
    found = []
    for i, token in enumerate(words.tokens):
        acronym = len(token) > 1 and token.replace("-", "").isupper()  # EU, ETS, COVID-19
        capitalised = i > 0 and token[:1].isupper() and token not in _FIRST_PERSON
        if (acronym or capitalised) and not _is_month(words, i) and token not in WEEKDAYS:
            found.append(token)
    return tuple(found)


def _in_lexicon(vocabulary: frozenset[str]) -> Callable[[SentenceWords], tuple[str, ...]]:
    def find(words: SentenceWords) -> tuple[str, ...]:
        return tuple(t for t, low in zip(words.tokens, words.lower) if low in vocabulary)

    return find


def _question(words: SentenceWords) -> tuple[str, ...]:
    return ("?",) if words.ending == "?" else ()


def _hedge(words: SentenceWords) -> tuple[str, ...]:
    found = words.phrases(HEDGE_PHRASES)
    months = {words.tokens[i] for i in range(len(words.tokens)) if _is_month(words, i)}
    return tuple(p for p in found if not (p == "may" and "May" in months and words.lower.count("may") == 1))


def _phrases(vocabulary: frozenset[str]) -> Callable[[SentenceWords], tuple[str, ...]]:
    return lambda words: words.phrases(vocabulary)


#: the registry: every cue the rule-based scorer reads, positive then negative
CUES: tuple[Cue, ...] = (
    Cue("substantive", 1.0, f"at least {MIN_CONTENT_WORDS} content words", _substantive),
    Cue("number", 1.0, "a number, quantity word, currency or percent sign", _number),
    Cue("date", 1.0, "a year, month, weekday or period (decade, century)", _date),
    Cue("named_entity", 1.0, "a capitalised word not at sentence start, or an acronym", _named_entity),
    Cue("comparison", 1.0, "a comparative or superlative", _in_lexicon(COMPARISON_WORDS)),
    Cue("measurement_verb", 1.0, "a verb of cause, change or measurement", _in_lexicon(MEASUREMENT_VERBS)),
    Cue("vague", -1.0, f"at most {MAX_VAGUE_WORDS} content word", _vague),
    Cue("question", -5.0, "ends with a question mark", _question),
    Cue("opinion", -3.0, "a first-person opinion marker (I think, in my opinion)", _phrases(OPINION_PHRASES)),
    Cue("evaluative", -2.0, "a judgement word (brilliant, a mess, ridiculous)", _in_lexicon(EVALUATIVE_WORDS)),
    Cue("greeting", -3.0, "a greeting, thanks or farewell", _phrases(GREETING_PHRASES)),
    Cue("hedge", -2.0, "an uncertainty marker (maybe, might, probably)", _hedge),
)
