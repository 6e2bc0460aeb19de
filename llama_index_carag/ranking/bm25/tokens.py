"""The BM25 index's tokenisation, vectorised: the output of ``bm25s.tokenize`` without its per-token Python loops.

What it reproduces, exactly (same term strings, same order, same tokens per text, same new vocabulary
columns), is the call :class:`~llama_index_carag.ranking.bm25.BM25Index` made before::

    bm25s.tokenize(texts, lower=True, token_pattern=r"(?u)\\b\\w\\w+\\b", stopwords=stopwords,
                   stemmer=Stemmer.Stemmer(language))       # bm25s 0.2-0.3

whose steps are, per text:

1. ``text.lower()`` on the whole text (so context-dependent mappings such as the final sigma or
   ``"İ"`` -> ``"i̇"`` are Python's own);
2. the tokens are ``re.findall(r"(?u)\\b\\w\\w+\\b")`` of it: the maximal runs of at least two word
   characters (``str.isalnum()`` or ``"_"``), in text order;
3. passage tokens that are stop words (bm25s's list for ``stopwords``, compared with the lower-cased
   surface token) are dropped *before* stemming; queries keep them (``stopwords=None``);
4. the remaining tokens are stemmed (PyStemmer's Snowball stemmer of ``language``; none if ``None``);
5. a call's new terms join the vocabulary in the order bm25s's ids had: the iteration order of
   ``set(stems of the distinct tokens in order of first occurrence)`` (first occurrence order without
   a stemmer).

How, for passages: the texts are lower-cased and UTF-8 encoded one by one, joined by spaces, and their
ASCII non-word bytes made spaces (``bytes.translate``): the runs of non-space bytes hold whole tokens.
numpy finds the runs and numbers the distinct ones: a run of at most 8 bytes is its bytes as a uint64
(runs hold no zero byte, so the key is exact), grouped by an argsort; longer runs go through a dict.  Only
the distinct runs are then handled in Python: an ASCII run is one token if it has two characters or more,
a run with non-ASCII bytes is decoded and split with the regex itself (a non-ASCII character may be a word
character or not).  Stop words are dropped and the distinct words stemmed once (``Stemmer.stemWords``);
numpy expands the runs back to term ids and counts them per text (no Python object per token of <= 8 bytes).

The stemmer is one per thread (PyStemmer's stemmers are not thread-safe); nothing else outlives a call.
A call holds about 90 bytes per token of a batch of 25,000 texts at a time (~90 MB for passages of
45 words), plus its distinct runs and its output.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: The token pattern of ``llama-index-retrievers-bm25`` (and bm25s's default).
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_FINDALL = re.compile(TOKEN_PATTERN).findall
#: ``bytes.translate`` table: ASCII bytes that are not word characters -> space; everything else kept.
_ASCII_NON_WORD_TO_SPACE = bytes(c if c >= 0x80 or chr(c).isalnum() or c == 0x5F else 0x20 for c in range(256))
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_PAD = b" " * 8
_HIGH_BITS = np.uint64(0x8080808080808080)
#: 6-bit codes of the ASCII word bytes (0-9, A-Z, _, a-z: 1..63); 0 for no byte (and for the others).
_CODE6 = bytes(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz".find(bytes([c])) + 1 for c in range(256)
)
_BATCH = 25_000  # texts keyed at a time (bounds the memory: ~90 bytes per token of a batch)


def import_bm25s() -> Any:
    """bm25s, imported on first use; it sets its own logger to DEBUG, which would flood a root handler."""
    import bm25s

    bm25s_logger = logging.getLogger("bm25s")
    if bm25s_logger.level == logging.DEBUG:
        bm25s_logger.setLevel(logging.WARNING)
    return bm25s


def stop_words(stopwords: str | Sequence[str] | None) -> frozenset[str]:
    """bm25s's stop words for ``stopwords`` (a list name such as ``"en"``, a list, or ``None`` for none)."""
    bm25s = import_bm25s()
    return frozenset(bm25s.tokenization.Tokenizer(stopwords=stopwords).stopwords)


def _buffer(texts: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """The texts lower-cased, UTF-8 encoded, ASCII non-word bytes made spaces, joined by a space and padded
    with 8 spaces; and where each text starts in it, shape ``(len(texts) + 1,)`` int64 (the last: the end)."""
    encoded = [t.lower().encode("utf-8", "surrogatepass") for t in texts]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + 1, out=starts[1:])
    return b" ".join(encoded).translate(_ASCII_NON_WORD_TO_SPACE) + _PAD, starts


def _runs(buffer: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where the runs of non-space bytes of ``buffer`` start and end (exclusive), shape ``(runs,)`` int64 each."""
    word = (np.frombuffer(buffer, dtype=np.uint8) != 0x20).view(np.int8)
    step = np.diff(word)
    starts = np.flatnonzero(step == 1) + 1
    if word.shape[0] and word[0]:
        starts = np.concatenate(([0], starts))
    return starts, np.flatnonzero(step == -1) + 1


def _short_keys(buffer: bytes, starts: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each run of at most 8 bytes as a uint64 (its bytes, little-endian, zero-padded: runs hold no zero byte,
    so equal keys are equal runs), shape ``(runs,)``; longer runs get their first 8 bytes (not a key)."""
    words = np.ndarray(shape=(len(buffer) - 7,), dtype="<u8", buffer=buffer, strides=(1,))
    return words[starts] & _MASKS[np.minimum(length, 8)]


def _group_short(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """Distinct ``keys`` (:func:`_short_keys`): per key the index of its first occurrence (int64), the distinct
    keys' first occurrences and their runs' bytes (in one same order)."""
    coded = _packed(keys)
    if coded is not None:  # one sort of values (key, position): several times faster than an argsort
        packed, bits = coded
        packed.sort()
        order = (packed & np.uint64((1 << bits) - 1)).astype(np.int64)
        ranked = packed >> np.uint64(bits)
    else:
        order = np.argsort(keys)
        ranked = keys[order]
    new = np.ones(ranked.shape[0], dtype=bool)
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    group_start = np.flatnonzero(new)
    first = np.minimum.reduceat(order, group_start) if group_start.size else np.zeros(0, dtype=np.int64)
    first_of = np.empty(keys.shape[0], dtype=np.int64)
    first_of[order] = np.repeat(first, np.diff(np.append(group_start, keys.shape[0])))
    return first_of, first, keys[first].astype("<u8").view("S8").tolist()


def _packed(keys: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``keys`` re-coded in 6 bits a byte (ASCII word bytes only, at most 7 of them: 42 bits) above their
    position; ``None`` where a key does not fit (non-ASCII or 8 bytes) or the positions need over 22 bits."""
    bits = max(1, int(keys.shape[0] - 1).bit_length())
    if bits > 22 or not keys.size or np.any(keys & _HIGH_BITS):
        return None
    code = np.frombuffer(keys.astype("<u8").tobytes().translate(_CODE6), dtype="<u8")  # 0: no byte, 1..63: word
    if np.any(code >> np.uint64(56)):  # an eighth byte
        return None
    code = (code & np.uint64(0x003F003F003F003F)) | ((code & np.uint64(0x3F003F003F003F00)) >> np.uint64(2))
    code = (code & np.uint64(0x00000FFF00000FFF)) | ((code & np.uint64(0x0FFF00000FFF0000)) >> np.uint64(4))
    code = (code & np.uint64(0x0000000000FFFFFF)) | ((code & np.uint64(0x00FFFFFF00000000)) >> np.uint64(8))
    return (code << np.uint64(bits)) | np.arange(keys.shape[0], dtype=np.uint64), bits


def batch_runs(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """The runs of ``texts`` (lower-cased UTF-8 split at ASCII non-word bytes: runs hold whole tokens).

    Returns:
        run_key: shape ``(runs,)`` int64, each run's distinct run (index into ``distinct``), in text order.
        run_count: shape ``(len(texts),)`` int64, runs per text.
        distinct: the distinct runs' bytes in order of first occurrence.
    """
    buffer, text_start = _buffer(texts)
    starts, ends = _runs(buffer)
    length = ends - starts
    run_count = np.diff(np.searchsorted(starts, text_start))
    long_runs = np.flatnonzero(length > 8)
    short_runs = np.flatnonzero(length <= 8) if long_runs.size else None
    keys = _short_keys(
        buffer,
        starts if short_runs is None else starts[short_runs],
        length if short_runs is None else length[short_runs],
    )
    first_of, first, distinct = _group_short(keys)
    if short_runs is not None:  # runs over 8 bytes: one bytes object each, numbered by a dict
        seen: dict[bytes, int] = {}
        long_first = [
            seen.setdefault(buffer[a:e], r)
            for a, e, r in zip(starts[long_runs].tolist(), ends[long_runs].tolist(), long_runs.tolist())
        ]
        first_all = np.empty(starts.shape[0], dtype=np.int64)
        first_all[short_runs] = short_runs[first_of]
        first_all[long_runs] = long_first
        first_of = first_all
        first = np.concatenate((short_runs[first], np.fromiter(seen.values(), dtype=np.int64, count=len(seen))))
        distinct += list(seen)
    by_first = np.argsort(first)
    dense = np.empty(starts.shape[0], dtype=np.int64)
    dense[first[by_first]] = np.arange(by_first.shape[0])
    return dense[first_of], run_count, [distinct[i] for i in by_first.tolist()]


#: What :func:`run_keys` returns: each run's distinct run, the runs per text, the distinct runs' bytes.
Runs = tuple[np.ndarray, np.ndarray, list[bytes]]


def run_keys(texts: Sequence[str]) -> Runs:
    """:func:`batch_runs` of all ``texts``, batch by batch (bounded memory)."""
    if len(texts) <= _BATCH:
        return batch_runs(texts)
    number: dict[bytes, int] = {}
    keys: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    for start in range(0, len(texts), _BATCH):
        run_key, run_count, distinct = batch_runs(texts[start : start + _BATCH])
        to_global = np.fromiter(
            (number.setdefault(r, len(number)) for r in distinct), dtype=np.int64, count=len(distinct)
        )
        keys.append(to_global[run_key])
        counts.append(run_count)
    return np.concatenate(keys), np.concatenate(counts), list(number)


def run_words(run: bytes) -> list[str]:
    """The tokens (``re.findall(TOKEN_PATTERN)``) of one run of :func:`batch_runs`."""
    if run.isascii():
        return [run.decode("ascii")] if len(run) > 1 else []
    return _FINDALL(run.decode("utf-8", "surrogatepass"))


class Tokenizer:
    """bm25s's tokenisation of passages and queries (see the module docstring); safe to share between threads.

    Args:
        language: PyStemmer language (``None``: no stemming).
        stopwords: stop words removed from passages: a bm25s list name (``"en"``), a list, or ``None``.
    """

    def __init__(self, language: str | None = "english", stopwords: str | Sequence[str] | None = "en") -> None:
        self.language = language
        self.stopwords = stopwords
        self._stop: frozenset[str] | None = None
        self._local = threading.local()

    def _stop_words(self) -> frozenset[str]:
        if self._stop is None:
            self._stop = stop_words(self.stopwords)
        return self._stop

    def _stemmer(self) -> Any:
        """This thread's stemmer (``None`` without a language); PyStemmer's own cache is off (no gain here)."""
        if self.language is None:
            return None
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            import Stemmer

            stemmer = self._local.stemmer = Stemmer.Stemmer(self.language, 0)
        return stemmer

    def stem(self, words: list[str]) -> list[str]:
        """``words`` stemmed (as they are without a language)."""
        stemmer = self._stemmer()
        return words if stemmer is None or not words else list(stemmer.stemWords(words))

    # -------------------------------------------------------------- queries
    def query_terms(self, text: str) -> list[str]:
        """The query's terms, in order: every token stemmed, stop words kept (as ``BM25Retriever`` does)."""
        return self.stem(_FINDALL(text.lower()))

    # ------------------------------------------------------------- passages
    def document_term_ids(self, texts: Sequence[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The passages' term ids one text after the other, shape ``(sum of lengths,)`` int32, and the
        terms per text, shape ``(len(texts),)`` int32 (stop words removed).  Terms not in ``vocab`` join
        it (``vocab[term] = len(vocab)``, in bm25s's order).

        Three steps, which a fit over chunks runs in a pipeline: :func:`run_keys` (no vocabulary),
        :meth:`number_runs` (reads and grows ``vocab``: in chunk order) and :func:`expand_runs`."""
        runs = run_keys(texts)
        return expand_runs(runs, self.number_runs(runs, vocab))

    def number_runs(self, runs: Runs, vocab: dict[str, int]) -> RunTerms:
        """The term ids of each distinct run of ``runs`` (new terms join ``vocab``)."""
        stop = self._stop_words()
        words_of = [[w for w in run_words(run) if w not in stop] for run in runs[2]]
        surface = list(dict.fromkeys(chain.from_iterable(words_of)))  # distinct words, first occurrence order
        stems = self.stem(surface)
        new_terms: Iterable[str] = set(stems) if self.language is not None else stems
        for term in new_terms:  # bm25s numbered a call's terms in this order
            vocab.setdefault(term, len(vocab))
        term_of = {w: vocab[s] for w, s in zip(surface, stems)}
        key_n = np.fromiter(map(len, words_of), dtype=np.int64, count=len(words_of))
        key_ids = np.fromiter(map(term_of.__getitem__, chain.from_iterable(words_of)), dtype=np.int32)
        key_start = np.zeros(len(words_of), dtype=np.int64)
        np.cumsum(key_n[:-1], out=key_start[1:])
        return key_ids, key_start, key_n


#: What :meth:`Tokenizer.number_runs` returns, per distinct run (insertion order): the term ids of all of them one
#: run after the other (int32), where each run's start and how many (int64, shape ``(distinct runs,)``).
RunTerms = tuple[np.ndarray, np.ndarray, np.ndarray]


def expand_runs(runs: Runs, terms: RunTerms) -> tuple[np.ndarray, np.ndarray]:
    """The texts' term ids one after the other (int32) and the terms per text (int32), from their runs and the
    runs' term ids (no vocabulary: any thread)."""
    return _expand(runs[0], runs[1], *terms)


def _expand(
    run_key: np.ndarray, run_count: np.ndarray, key_ids: np.ndarray, key_start: np.ndarray, key_n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Term ids of every run one after the other (int32) and the terms per text (int32).

    Args:
        run_key: shape ``(runs,)``, each run's distinct run.
        run_count: shape ``(texts,)``, runs per text.
        key_ids, key_start, key_n: :meth:`Tokenizer.number_runs`.
    """
    n = key_n[run_key]  # terms of each run (0: stop word / one character, >1: a run of several tokens)
    ends = np.cumsum(n)
    run_end = np.cumsum(run_count)
    term_end = np.concatenate(([0], ends))[run_end]
    lengths = np.diff(term_end, prepend=0).astype(np.int32)
    total = int(ends[-1]) if ends.size else 0
    where = np.repeat(key_start[run_key] - (ends - n), n) + np.arange(total, dtype=np.int64)
    return key_ids[where], lengths
