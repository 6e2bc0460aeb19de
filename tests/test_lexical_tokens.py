"""The vectorised BM25 tokenisation gives exactly bm25s.tokenize's terms, order, lengths and vocabulary columns."""

from __future__ import annotations

from itertools import chain
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llama_index_carag.ranking.bm25 import TOKEN_PATTERN, BM25Index, import_bm25s
from llama_index_carag.ranking.bm25 import tokens as bm25_tokens

_STOP = ["the", "of", "and", "a", "is", "in", "it", "s", "t", "don", "THE", "Of"]
_WORDS = ["running", "Runs", "ran", "cats", "Cat", "naïve", "café", "CAFÉ", "straße", "STRASSE", "İstanbul", "ΟΔΟΣ"]
_WORDS += ["οδός", "Σίσυφος", "x", "x1", "_", "__init__", "a_b", "12", "1", "½", "²3", "①②", "中文字", "ǅemal"]
_WORDS += ["ﬁnance", "e\u0301te", "w1", "w22", "İİ", "ẞig", "Ǆ", "ı", "K", "Å"]
_WORDS += ["internationalization", "Internationalisation", "abcdefgh", "abcdefghi", "runner_up_x", "12345678901"]
_SEPARATORS = [" ", "  ", "\n", "\t", ",", ". ", "—", "-", "'", "’", "\u00a0", "\u2028", "\x1c", "!?", "\x00", "|"]
_CHARS = "aZé_1²½\u0301\u0307İßΣςσ中—-'’ \n\t.,\x00\u00a0\u2028ﬁǅ"


def _texts():
    word_text = st.lists(st.sampled_from(_STOP + _WORDS) | st.sampled_from(_SEPARATORS), max_size=30).map("".join)
    char_text = st.text(alphabet=st.sampled_from(list(_CHARS)) | st.characters(), max_size=40)
    return st.lists(word_text | char_text, max_size=12)


def reference_term_ids(texts, vocab, *, language="english", stopwords="en"):
    """The previous BM25Index.document_term_ids: bm25s.tokenize, then its local ids mapped to ``vocab``'s."""
    import Stemmer

    tokenized = import_bm25s().tokenize(
        list(texts),
        stopwords=stopwords,
        stemmer=Stemmer.Stemmer(language) if language else None,
        token_pattern=TOKEN_PATTERN,
        show_progress=False,
    )
    local_to_global = np.empty(len(tokenized.vocab), dtype=np.int32)
    for term, local in tokenized.vocab.items():
        local_to_global[local] = vocab.setdefault(term, len(vocab))
    lengths = np.fromiter(map(len, tokenized.ids), dtype=np.int32, count=len(tokenized.ids))
    flat = np.fromiter(chain.from_iterable(tokenized.ids), dtype=np.int32, count=int(lengths.sum()))
    return local_to_global[flat], lengths


def reference_query(text, language="english"):
    import Stemmer

    out = import_bm25s().tokenize(
        [text],
        stopwords=None,
        stemmer=Stemmer.Stemmer(language) if language else None,
        token_pattern=TOKEN_PATTERN,
        show_progress=False,
        return_ids=False,
    )
    return list(out[0]) if out else []


def assert_same_tokenisation(index: BM25Index, batches: list[list[str]]) -> None:
    """Batch after batch into one vocabulary (as fit_texts / add_texts do): identical arrays and vocabulary."""
    ours: dict[str, int] = {"pre-existing": 0, "run": 1}
    theirs = dict(ours)
    for texts in batches:
        ids, lengths = index.document_term_ids(texts, ours)
        ref_ids, ref_lengths = reference_term_ids(texts, theirs, language=index.language, stopwords=index.stopwords)
        assert ids.dtype == np.int32 and lengths.dtype == np.int32
        assert lengths.shape == (len(texts),)
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(ids, ref_ids)
        assert list(ours.items()) == list(theirs.items())  # same terms, same columns, same order


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(_texts(), min_size=1, max_size=3))
@example(batches=[["İstanbul ÉCOLE straße ΟΔΟΣ naïve—café 12 a_b x", "", "the and of", "Ünïcödé ½ ², ① foo__bar"]])
@example(batches=[["the of and", "a", "", "  ", "!!!"], ["cat cats cat", "Cat CATS running runs"]])
@example(batches=[["lone \ud800surrogate\udcff here", "ΣΑΣ σας ΑΣ.Σ"]])
def test_passages_tokenise_as_bm25s_does(batches):
    assert_same_tokenisation(BM25Index(), batches)
    with mock.patch.object(bm25_tokens, "_BATCH", 2):  # several batches merged into one call's runs
        assert_same_tokenisation(BM25Index(), batches)


@pytest.mark.parametrize(("language", "stopwords"), [(None, "en"), ("english", None), (None, None), ("french", "fr")])
@settings(max_examples=60, deadline=None)
@given(batches=st.lists(_texts(), min_size=1, max_size=2))
def test_other_settings_tokenise_as_bm25s_does(language, stopwords, batches):
    assert_same_tokenisation(BM25Index(language=language, stopwords=stopwords), batches)


@settings(max_examples=300, deadline=None)
@given(text=_texts().map(" ".join))
@example(text="The cats of İstanbul are RUNNING — naïvely, ß ½")
@example(text="")
def test_queries_tokenise_as_bm25s_does(text):
    assert BM25Index().tokenize(text) == reference_query(text)
    assert BM25Index(language=None).tokenize(text) == reference_query(text, language=None)


def test_long_batches_and_threads_agree():
    """Several split batches in one call, and the same calls from threads (one stemmer per thread)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(0)
    words = np.array(_STOP + _WORDS + [f"w{i}" for i in range(3000)])
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 40)))) for _ in range(20_000)]
    index = BM25Index()
    ref_vocab: dict[str, int] = {}
    ref = reference_term_ids(texts, ref_vocab)

    def run(_):
        vocab: dict[str, int] = {}
        ids, lengths = index.document_term_ids(texts, vocab)
        return ids, lengths, vocab, [index.tokenize(t) for t in texts[:200]]

    with ThreadPoolExecutor(4) as pool, mock.patch.object(bm25_tokens, "_BATCH", 3_000):
        results = list(pool.map(run, range(4)))
    queries = [reference_query(t) for t in texts[:200]]
    for ids, lengths, vocab, query_terms in results:
        np.testing.assert_array_equal(ids, ref[0])
        np.testing.assert_array_equal(lengths, ref[1])
        assert list(vocab.items()) == list(ref_vocab.items())
        assert query_terms == queries


@settings(max_examples=300, deadline=None)
@given(
    runs=st.lists(
        st.text(alphabet="09azAZ_xy", min_size=1, max_size=7).map(str.encode)
        | st.sampled_from([b"abcdefgh", "é".encode(), "naïve".encode(), b"a", b"_", b"zzzzzzz", b"0000000"]),
        max_size=60,
    )
)
def test_runs_are_grouped_by_their_bytes(runs):
    """Both ways of grouping short runs (6-bit codes sorted with their positions, or an argsort of the bytes)."""
    keys = np.array([np.frombuffer(r.ljust(8, b"\0"), dtype="<u8")[0] for r in runs], dtype=np.uint64)
    first_of, first, distinct = bm25_tokens._group_short(keys)
    seen: dict[bytes, int] = {}
    assert first_of.tolist() == [seen.setdefault(r, i) for i, r in enumerate(runs)]
    assert sorted(zip(first.tolist(), distinct)) == sorted((i, r) for r, i in seen.items())
