"""Word lists the check-worthiness cues look for (lower case; a phrase is space-separated words)."""

from __future__ import annotations

__all__ = [
    "STOPWORDS",
    "VAGUE_WORDS",
    "NUMBER_WORDS",
    "MONTHS",
    "WEEKDAYS",
    "TIME_WORDS",
    "COMPARISON_WORDS",
    "MEASUREMENT_VERBS",
    "OPINION_PHRASES",
    "EVALUATIVE_WORDS",
    "GREETING_PHRASES",
    "HEDGE_PHRASES",
]


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
