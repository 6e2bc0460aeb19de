"""BM25 fit and query speed: the previous code path (bm25s tokenisation, per-query arithmetic) against the current one.

    nice -n 10 python benchmarks/bench_bm25.py --n 200000        # the figures of the issue
    python benchmarks/bench_bm25.py --n 20000 --queries 50        # a smoke run

Corpus and queries: bench_scale's generator (Zipf words over 50,000 with the English stop words at the top
ranks, passages of median 45 words, queries of 10-25 words).  Printed, old and new timed alternately in one
process (ratios are what to compare on a shared machine):

* tokenisation: ``document_term_ids`` over the corpus (chunks of 100,000), old = ``bm25s.tokenize`` as
  :class:`BM25Index` called it before;
* fit: ``BM25Index.fit_texts``, old = that tokenisation, a stable-argsort segment per chunk, then merged;
* query: ``BM25Index.query(q, 50)`` median / p95 ms, old = bm25s query tokenisation, every posting's
  score computed per query, argpartition over every row; new measured warm (each query run once before).

Every old/new pair is checked equal (arrays, vocabulary, hit ids and scores); a difference stops the run.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from itertools import chain

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np

from llama_index_carag.ranking.bm25 import FIT_CHUNK, TOKEN_PATTERN, BM25Index, import_bm25s
from llama_index_carag.ranking.bm25.segments import Segment, Segments, merge


# ------------------------------------------------------------ the old code
def old_document_term_ids(index: BM25Index, texts: Sequence[str], vocab: dict[str, int]):
    """BM25Index.document_term_ids before: bm25s.tokenize, then its local ids mapped to ``vocab``'s."""
    import Stemmer

    tokenized = import_bm25s().tokenize(
        list(texts),
        stopwords=index.stopwords,
        stemmer=Stemmer.Stemmer(index.language) if index.language else None,
        token_pattern=TOKEN_PATTERN,
        show_progress=False,
    )
    local_to_global = np.empty(len(tokenized.vocab), dtype=np.int32)
    for term, local in tokenized.vocab.items():
        local_to_global[local] = vocab.setdefault(term, len(vocab))
    lengths = np.fromiter(map(len, tokenized.ids), dtype=np.int32, count=len(tokenized.ids))
    flat = np.fromiter(chain.from_iterable(tokenized.ids), dtype=np.int32, count=int(lengths.sum()))
    return local_to_global[flat], lengths


def old_build_segment(offset: int, token_ids: np.ndarray, lengths: np.ndarray, n_terms: int) -> Segment:
    """build_segment before: a stable argsort by term."""
    cols = np.asarray(token_ids, dtype=np.int32)
    rows = np.repeat(np.arange(lengths.shape[0], dtype=np.int32), lengths)
    order = np.argsort(cols, kind="stable")
    cols, rows = cols[order], rows[order]
    new = np.ones(cols.shape[0], dtype=bool)
    new[1:] = (cols[1:] != cols[:-1]) | (rows[1:] != rows[:-1])
    starts = np.flatnonzero(new)
    tf = np.diff(np.append(starts, cols.shape[0]))
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols[starts], minlength=n_terms), out=indptr[1:])
    tf_dtype = np.uint16 if tf.size == 0 or tf.max() <= np.iinfo(np.uint16).max else np.uint32
    alive = np.ones(lengths.shape[0], dtype=bool)
    return Segment(offset, indptr, rows[starts].astype(np.int32), tf.astype(tf_dtype), lengths, alive)


def old_fit(index: BM25Index, texts: Sequence[str]) -> tuple[Segment, dict[str, int]]:
    """fit_texts before (its arrays): a segment per chunk, merged."""
    vocab: dict[str, int] = {}
    parts = Segments.empty()
    for start in range(0, len(texts), FIT_CHUNK):
        tokens, lengths = old_document_term_ids(index, texts[start : start + FIT_CHUNK], vocab)
        parts = parts.append(old_build_segment(parts.n_rows, tokens, lengths, len(vocab)))
    if len(parts.parts) == 1:
        return parts.parts[0], vocab
    return merge(parts, len(vocab))[0], vocab


def old_score(index: Segments, query_ids: Sequence[int], k1: float, b: float) -> np.ndarray:
    """bm25_segments.score before: every posting's contribution computed per query."""
    out = np.zeros(index.n_rows, dtype=np.float32)
    n = index.n_live
    if n == 0 or not len(query_ids):
        return out
    norms = index.norms(k1, b)
    for t in query_ids:
        postings = []
        df = 0
        for p, norm in zip(index.parts, norms):
            if t >= p.n_terms:
                continue
            a, e = int(p.indptr[t]), int(p.indptr[t + 1])
            if a == e:
                continue
            rows, tf = p.rows[a:e], p.tf[a:e]
            if p.n_dead:
                live = p.alive[rows]
                rows, tf = rows[live], tf[live]
            df += int(rows.shape[0])
            postings.append((p.offset, rows, tf, norm))
        if df == 0:
            continue
        idf = float(np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5))))
        for offset, rows, tf, norm in postings:
            tf64 = tf.astype(np.float64)
            contrib = (idf * (tf64 / (norm[rows] + tf64))).astype(np.float32)
            out[rows + offset if offset else rows] += contrib
    return out


def old_query(index: BM25Index, text: str, n: int) -> tuple[list[str], np.ndarray]:
    """BM25Index.query before: bm25s's query tokenisation, old_score, argpartition over every row."""
    import Stemmer

    out = import_bm25s().tokenize(
        [text],
        stopwords=None,
        stemmer=Stemmer.Stemmer(index.language) if index.language else None,
        token_pattern=TOKEN_PATTERN,
        show_progress=False,
        return_ids=False,
    )
    vocab = index.vocab_
    ids = [vocab[t] for t in (list(out[0]) if out else []) if t in vocab]
    scores = old_score(index.segments_, ids, index.k1, index.b)
    n = min(n, scores.shape[0])
    hit = np.argpartition(-scores, n - 1)[:n] if n < scores.shape[0] else np.arange(scores.shape[0])
    hit = hit[np.argsort(-scores[hit], kind="stable")]
    hit = hit[scores[hit] > 0]
    return [index._row_ids[r] for r in hit], scores[hit]


# ----------------------------------------------------------------- timing
def alternate(old: Callable[[], object], new: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per call of ``old`` and ``new``, run old new new old ... ``repeats`` times each."""
    times: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(repeats):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            t0 = time.perf_counter()
            (old if name == "old" else new)()
            times[name].append(time.perf_counter() - t0)
    return times["old"], times["new"]


def check_fit(texts: Sequence[str]) -> None:
    index = BM25Index().fit_texts([str(i) for i in range(len(texts))], texts)
    segment, vocab = old_fit(BM25Index(), texts)
    assert vocab == index.vocab_, "vocabularies differ"
    ours = index.segments_.parts[0]
    for name in ("indptr", "rows", "tf", "dl"):
        a, b = getattr(ours, name), getattr(segment, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), f"{name} differs"


def bench_fit(texts: Sequence[str], repeats: int) -> None:
    ids = [str(i) for i in range(len(texts))]
    index = BM25Index()

    def tokenise(fn: Callable) -> Callable[[], None]:
        def run() -> None:
            vocab: dict[str, int] = {}
            for start in range(0, len(texts), FIT_CHUNK):
                fn(texts[start : start + FIT_CHUNK], vocab)

        return run

    old, new = alternate(
        tokenise(lambda t, v: old_document_term_ids(index, t, v)), tokenise(index.document_term_ids), repeats
    )
    print(f"tokenisation  old {min(old):7.2f} s   new {min(new):7.2f} s   old/new {min(old) / min(new):5.2f}x")
    old, new = alternate(lambda: old_fit(BM25Index(), texts), lambda: BM25Index().fit_texts(ids, texts), repeats)
    print(f"fit_texts     old {min(old):7.2f} s   new {min(new):7.2f} s   old/new {min(old) / min(new):5.2f}x")


def bench_query(texts: Sequence[str], queries: Sequence[str], k: int, repeats: int) -> None:
    index = BM25Index().fit_texts([str(i) for i in range(len(texts))], texts)
    t0 = time.perf_counter()
    for q in queries:  # warm the contribution cache; and every hit list must be the old one
        hits = index.query(q, k)
        ids, scores = old_query(index, q, k)
        assert hits.ids == ids and np.array_equal(hits.scores, scores), f"query {q!r} differs"
    print(f"query check + warm-up pass: {time.perf_counter() - t0:.1f} s (every hit list identical)")
    old: list[float] = []
    new: list[float] = []
    for r in range(repeats):
        for i, q in enumerate(queries):
            o, n = alternate(lambda q=q: old_query(index, q, k), lambda q=q: index.query(q, k), 1 + (i + r) % 2)
            old += o[:1]
            new += n[:1]
    cache = index.segments_.contributions(index.k1, index.b)
    for name, t in (("old", old), ("new", new)):
        ms = np.asarray(t) * 1000
        print(f"query {name}     median {statistics.median(ms):6.2f} ms   p95 {np.percentile(ms, 95):6.2f} ms")
    ratio = statistics.median(old) / statistics.median(new)
    print(f"query old/new {ratio:5.2f}x (median); cache: {len(cache)} terms, {cache.nbytes / 2**20:.1f} MiB")


def main() -> None:
    from bench_scale import _texts

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="passages (default 200,000)")
    parser.add_argument("--queries", type=int, default=200, help="queries (default 200)")
    parser.add_argument("--k", type=int, default=50, help="hits per query (default 50)")
    parser.add_argument("--repeats", type=int, default=3, help="fits / query passes per variant (default 3)")
    parser.add_argument("--skip-fit", action="store_true", help="queries only")
    args = parser.parse_args()
    t0 = time.perf_counter()
    texts = _texts(np.random.default_rng(0), args.n, 45, 8, 300)
    queries = _texts(np.random.default_rng(1), args.queries, 15, 10, 25)
    print(f"{args.n:,} passages, {args.queries} queries (generated in {time.perf_counter() - t0:.1f} s)")
    if not args.skip_fit:
        check_fit(texts)
        print("fit check: arrays and vocabulary identical")
        bench_fit(texts, args.repeats)
    bench_query(texts, queries, args.k, args.repeats)


if __name__ == "__main__":
    main()
