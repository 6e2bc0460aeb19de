"""The BM25 index's tokenisation, vectorised: the output of ``bm25s.tokenize`` without its per-token Python loops.

What it reproduces, exactly (same term strings, same order, same tokens per text, same new vocabulary
columns), is the call :class:`~llama_index_carag.ranking.bm25.LexicalIndex` made before::

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

How, for passages: each text is lower-cased, encoded to UTF-8 and ASCII non-word bytes are turned into
spaces (``bytes.translate``), so ``bytes.split()`` gives runs that hold whole tokens (C loops).  Each
run is looked up once in a dict of the call's distinct runs (``map(dict.setdefault, ...)``); only the
distinct runs are then resolved in Python: an ASCII run is one token if it has two characters or more,
a run with non-ASCII bytes is decoded and split with the regex itself (a non-ASCII character may be a
word character or not).  Stop words are dropped and the distinct words stemmed once
(``Stemmer.stemWords``); numpy expands the runs back to term ids and counts them per text.

The stemmer is one per thread (PyStemmer's stemmers are not thread-safe); nothing else outlives a call,
so the memory of a call is that of its distinct runs plus a few integers per token.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Sequence
from itertools import chain, count
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["TOKEN_PATTERN", "Tokenizer"]

#: The token pattern of ``llama-index-retrievers-bm25`` (and bm25s's default).
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_FINDALL = re.compile(TOKEN_PATTERN).findall
#: ``bytes.translate`` table: ASCII bytes that are not word characters -> space; everything else kept.
_ASCII_NON_WORD_TO_SPACE = bytes(c if c >= 0x80 or chr(c).isalnum() or c == 0x5F else 0x20 for c in range(256))
_SPLIT_BATCH = 8_192  # texts split at a time (bounds the run objects alive at once)


def stop_words(stopwords: str | Sequence[str] | None) -> frozenset[str]:
    """bm25s's stop words for ``stopwords`` (a list name such as ``"en"``, a list, or ``None`` for none)."""
    from llama_index_carag.ranking.bm25 import import_bm25s

    bm25s = import_bm25s()
    return frozenset(bm25s.tokenization.Tokenizer(stopwords=stopwords or None).stopwords)


def split_runs(texts: Sequence[str]) -> Iterable[list[list[bytes]]]:
    """Batches of texts, per text its lower-cased UTF-8 bytes split at ASCII non-word characters (runs
    holding whole tokens)."""
    table = _ASCII_NON_WORD_TO_SPACE
    for start in range(0, len(texts), _SPLIT_BATCH):
        yield [
            t.lower().encode("utf-8", "surrogatepass").translate(table).split()
            for t in texts[start : start + _SPLIT_BATCH]
        ]


def run_words(run: bytes) -> list[str]:
    """The tokens (``re.findall(TOKEN_PATTERN)``) of one run of :func:`split_runs`."""
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
        it (``vocab[term] = len(vocab)``, in bm25s's order)."""
        first: dict[bytes, int] = {}
        positions, run_count = _run_positions(texts, first)
        key_ids, key_start, key_n = self._resolve_runs(first, vocab)
        dense = np.empty(positions.shape[0], dtype=np.int32)
        dense[np.fromiter(first.values(), dtype=np.int64, count=len(first))] = np.arange(len(first), dtype=np.int32)
        run_key = dense[positions]  # the distinct run of every run, shape (runs,)
        return _expand(run_key, run_count, key_ids, key_start, key_n)

    def _resolve_runs(
        self, first: dict[bytes, int], vocab: dict[str, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per distinct run (insertion order) its term ids: all of them one run after the other (int32),
        where each run's start, and how many (int64, shape ``(len(first),)``)."""
        stop = self._stop_words()
        words_of = [[w for w in run_words(run) if w not in stop] for run in first]
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


def _run_positions(texts: Sequence[str], first: dict[bytes, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per run of :func:`split_runs` (all texts, in order) the position of its first occurrence, shape ``(runs,)``
    int64, and the runs per text, shape ``(len(texts),)`` int64; fills ``first`` (distinct run -> that position;
    insertion order = first occurrence)."""
    position = count()
    setdefault = first.setdefault
    parts: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    for runs in split_runs(texts):
        n = np.fromiter(map(len, runs), dtype=np.int64, count=len(runs))
        counts.append(n)
        parts.append(np.fromiter(map(setdefault, chain.from_iterable(runs), position), np.int64, int(n.sum())))
    empty = np.zeros(0, dtype=np.int64)
    return np.concatenate(parts or [empty]), np.concatenate(counts or [empty])


def _expand(
    run_key: np.ndarray, run_count: np.ndarray, key_ids: np.ndarray, key_start: np.ndarray, key_n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Term ids of every run one after the other (int32) and the terms per text (int32).

    Args:
        run_key: shape ``(runs,)``, each run's distinct run.
        run_count: shape ``(texts,)``, runs per text.
        key_ids, key_start, key_n: :meth:`Tokenizer._resolve_runs`.
    """
    n = key_n[run_key]  # terms of each run (0: stop word / one character, >1: a run of several tokens)
    ends = np.cumsum(n)
    run_end = np.cumsum(run_count)
    term_end = np.concatenate(([0], ends))[run_end]
    lengths = np.diff(term_end, prepend=0).astype(np.int32)
    total = int(ends[-1]) if ends.size else 0
    where = np.repeat(key_start[run_key] - (ends - n), n) + np.arange(total, dtype=np.int64)
    return key_ids[where], lengths
