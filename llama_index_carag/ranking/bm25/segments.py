"""BM25 over segments of raw term frequencies, scored with the statistics of every live passage.

A segment is a block of passages as a CSC matrix of raw term frequencies (one column per term of
the index's vocabulary, rows = the block's passages) plus each passage's length and a tombstone
mask.  The index is a tuple of segments (:class:`Segments`): an insert appends a segment built
from the batch alone, a delete marks rows dead; :func:`merge` folds every segment into one and
drops the dead rows (O(corpus), done rarely).

The score is bm25s's "lucene" BM25, computed at query time from the query's postings only:

``score(d, q) = sum over query tokens t of idf(t) * tf / (tf + k1 * (1 - b + b * dl(d) / avgdl))``

with ``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))`` and ``N``, ``avgdl``, ``df`` taken over
the live passages of all segments: the numbers of a full rebuild on the live passages.  The
arithmetic is bm25s's own (float64 per posting, rounded to float32, summed in float32 in the
order of the query tokens), so the scores are bit-for-bit those of ``bm25s.BM25`` on the same
tokens.

A term's contribution to every row (``idf * tf / (tf + norm)`` rounded to float32, with the rows it
applies to) depends only on the snapshot's statistics, so a snapshot caches it for its terms with long
postings (:class:`ContributionCache`, least recently used first out past a byte budget): a query then
costs one float32 scatter-add per posting.  An edit makes a new snapshot, hence an empty cache.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

#: Bytes of cached contributions a snapshot keeps at most (per ``(k1, b)``): 4 bytes per cached posting (8 for
#: a segment with deleted rows); at 1M passages every posting of the index takes about 140 MB.
CONTRIBUTION_CACHE_BYTES = 128 << 20
#: Terms with fewer postings are scored without caching (cheap; keeps the cache to the terms that cost).
CONTRIBUTION_CACHE_MIN_POSTINGS = 1024

#: Terms in at least this fraction of the rows get a dense contribution (every row, 0 where absent): adding
#: 0 leaves a score's bits as they are, and a dense add is several times faster than a scatter-add.
DENSE_FRACTION = 0.125

#: A term's contribution: per segment, the global rows it scores (ascending) and its float32 addend there;
#: or one ``(slice(None), addend of every row)``.
Contribution = tuple[tuple[np.ndarray | slice, np.ndarray], ...]


@dataclass(frozen=True)
class Segment:
    """A block of passages (immutable: a delete makes a new one with another ``alive`` mask).

    Attributes:
        offset: global row of the block's first passage.
        indptr: shape ``(n_terms + 1,)`` int64, column pointers (``n_terms`` = vocabulary size when built).
        rows: shape ``(nnz,)`` int32, block-local rows, ascending within a column.
        tf: shape ``(nnz,)`` unsigned ints, raw term frequencies.
        dl: shape ``(n_rows,)`` int32, passage lengths in tokens (stop words removed).
        alive: shape ``(n_rows,)`` bool, False for deleted passages.
        n_dead: number of False entries of ``alive``.
    """

    offset: int
    indptr: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    dl: np.ndarray
    alive: np.ndarray
    n_dead: int = 0

    @property
    def n_rows(self) -> int:
        return int(self.dl.shape[0])

    @property
    def n_terms(self) -> int:
        return int(self.indptr.shape[0]) - 1

    def kill(self, local_rows: np.ndarray) -> Segment:
        """This segment with ``local_rows`` marked dead."""
        alive = self.alive.copy()
        alive[local_rows] = False
        return replace(self, alive=alive, n_dead=self.n_rows - int(np.count_nonzero(alive)))


@dataclass(frozen=True)
class Segments:
    """The whole index (immutable; queries read one snapshot while an edit builds the next).

    Attributes:
        parts: the segments, in row order (``parts[i].offset`` ascending, no gaps).
        n_live: number of live passages.
        sum_dl: total length of the live passages.
    """

    parts: tuple[Segment, ...]
    n_live: int
    sum_dl: int

    @property
    def n_rows(self) -> int:
        last = self.parts[-1] if self.parts else None
        return 0 if last is None else last.offset + last.n_rows

    def norms(self, k1: float, b: float) -> tuple[np.ndarray, ...]:
        """Per segment, every row's ``k1 * (1 - b + b * dl / avgdl)`` (float64, bm25s's arithmetic), computed
        once per snapshot (an edit makes a new snapshot, so the first query after it pays O(rows))."""
        cache: dict[tuple[float, float], tuple[np.ndarray, ...]] = self.__dict__.setdefault("_norms", {})
        key = (k1, b)
        if key not in cache:
            avgdl = self.sum_dl / self.n_live
            cache[key] = tuple(k1 * ((1 - b) + b * p.dl / avgdl) for p in self.parts)
        return cache[key]

    def contributions(self, k1: float, b: float) -> ContributionCache:
        """This snapshot's cache of term contributions for ``(k1, b)`` (made on first use)."""
        caches: dict[tuple[float, float], ContributionCache] = self.__dict__.setdefault("_contributions", {})
        key = (k1, b)
        cache = caches.get(key)
        if cache is None:
            cache = caches.setdefault(key, ContributionCache(CONTRIBUTION_CACHE_BYTES))
        return cache

    @classmethod
    def empty(cls) -> Segments:
        return cls((), 0, 0)

    def append(self, segment: Segment) -> Segments:
        return Segments(self.parts + (segment,), self.n_live + segment.n_rows, self.sum_dl + int(segment.dl.sum()))

    def kill(self, rows: Sequence[int]) -> Segments:
        """The index with global ``rows`` (live ones) marked dead."""
        rows_arr = np.unique(np.asarray(rows, dtype=np.int64))
        if rows_arr.size == 0:
            return self
        offsets = np.array([p.offset for p in self.parts], dtype=np.int64)
        which = np.searchsorted(offsets, rows_arr, side="right") - 1
        parts = list(self.parts)
        n_live, sum_dl = self.n_live, self.sum_dl
        for s in np.unique(which):
            seg = parts[s]
            local = rows_arr[which == s] - seg.offset
            local = local[seg.alive[local]]
            n_live -= int(local.size)
            sum_dl -= int(seg.dl[local].sum())
            parts[s] = seg.kill(local)
        return Segments(tuple(parts), n_live, sum_dl)


@dataclass(frozen=True)
class Postings:
    """The distinct ``(term, row)`` pairs of a block of passages with their counts, sorted by term, then row.

    Attributes:
        terms: shape ``(k,)`` int32, ascending.
        rows: shape ``(k,)`` int32, block-local rows plus the block's first row; ascending within a term.
        tf: shape ``(k,)`` uint32, how often the term occurs in the row.
        lengths: shape ``(n,)`` int32, tokens per passage of the block.
    """

    terms: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    lengths: np.ndarray


def block_postings(token_ids: np.ndarray, lengths: np.ndarray, first_row: int = 0) -> Postings:
    """The postings of a block of passages (one tokenised batch).

    Args:
        token_ids: shape ``(sum(lengths),)`` int, every passage's term ids one after the other.
        lengths: shape ``(n,)`` int, tokens per passage.
        first_row: the row number of the block's first passage.
    """
    lengths = np.asarray(lengths, dtype=np.int32)
    # (term, row) packed into one uint64 and sorted: grouped by term, rows ascending within a term (the
    # order of a stable argsort by term, several times faster than one)
    key = np.asarray(token_ids, dtype=np.int32).astype(np.uint64) << np.uint64(32)
    key |= np.repeat(np.arange(first_row, first_row + lengths.shape[0], dtype=np.uint64), lengths)
    key.sort()
    new = np.ones(key.shape[0], dtype=bool)
    np.not_equal(key[1:], key[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    tf = np.diff(np.append(starts, key.shape[0])).astype(np.uint32)  # held until assembly: 4 bytes, not 8
    key = key[starts]
    return Postings(
        (key >> np.uint64(32)).astype(np.int32), (key & np.uint64(0xFFFFFFFF)).astype(np.int32), tf, lengths
    )


def assemble_segment(offset: int, blocks: Sequence[Postings], n_terms: int) -> Segment:
    """One segment from consecutive blocks' postings (block ``i + 1``'s rows follow block ``i``'s).

    Each block's entries are scattered to their term's column in block order, so rows stay ascending
    within a term: the arrays equal those of :func:`build_segment` on all the blocks' tokens at once,
    while only the blocks' compact postings and the result are held (not a sort key per token of the
    whole corpus).
    """
    counts = np.zeros(n_terms, dtype=np.int64)
    for block in blocks:
        counts += np.bincount(block.terms, minlength=n_terms)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    largest = max((int(b.tf.max()) for b in blocks if b.tf.size), default=0)
    tf_dtype = np.uint16 if largest <= np.iinfo(np.uint16).max else np.uint32
    rows = np.empty(int(indptr[-1]), dtype=np.int32)
    tf = np.empty(int(indptr[-1]), dtype=tf_dtype)
    fill = indptr[:-1].copy()  # next free position of each term's column
    for block in blocks:
        c = np.bincount(block.terms, minlength=n_terms)
        group_start = np.cumsum(c) - c  # where each term's entries start within the (term-sorted) block
        pos = fill[block.terms] + (np.arange(block.terms.shape[0]) - group_start[block.terms])
        rows[pos] = block.rows
        tf[pos] = block.tf
        fill += c
    lengths = np.concatenate([b.lengths for b in blocks]).astype(np.int32) if blocks else np.zeros(0, dtype=np.int32)
    return Segment(
        offset=int(offset),
        indptr=indptr,
        rows=rows,
        tf=tf,
        dl=lengths,
        alive=np.ones(lengths.shape[0], dtype=bool),
    )


def build_segment(offset: int, token_ids: np.ndarray, lengths: np.ndarray, n_terms: int) -> Segment:
    """A segment from its passages' tokens.

    Args:
        offset: global row of the first passage.
        token_ids: shape ``(sum(lengths),)`` int, every passage's term ids one after the other.
        lengths: shape ``(n,)`` int, tokens per passage.
        n_terms: vocabulary size (every id is below it).
    """
    return assemble_segment(offset, [block_postings(token_ids, lengths)], n_terms)


def merge(index: Segments, n_terms: int) -> tuple[Segment, np.ndarray]:
    """One segment holding the live passages of ``index`` (in row order), and the old global row of
    each new row, shape ``(n_live,)`` int64."""
    n_out = sum(int(np.count_nonzero(p.alive)) for p in index.parts)
    new_row = np.full(index.n_rows, -1, dtype=np.int64)
    old_rows = np.concatenate([p.offset + np.flatnonzero(p.alive) for p in index.parts] or [np.zeros(0, np.int64)])
    new_row[old_rows] = np.arange(n_out)
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (term of each entry, new row, tf)
    counts = np.zeros(n_terms, dtype=np.int64)
    for p in index.parts:
        term = np.repeat(np.arange(p.n_terms, dtype=np.int32), np.diff(p.indptr))
        keep = p.alive[p.rows]
        term, rows, tf = term[keep], new_row[p.offset + p.rows[keep]], p.tf[keep]
        counts[: p.n_terms] += np.bincount(term, minlength=p.n_terms)
        kept.append((term, rows, tf))
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    out_rows = np.empty(nnz, dtype=np.int32)
    tf_dtype = np.result_type(np.uint16, *[p.tf.dtype for p in index.parts])
    out_tf = np.empty(nnz, dtype=tf_dtype)
    filled = indptr[:-1].copy()  # next free slot of each term
    for term, rows, tf in kept:  # segments in row order, so rows stay ascending within a term
        if term.size == 0:
            continue
        c = np.bincount(term, minlength=n_terms)
        first = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(c, out=first[1:])
        within = np.arange(term.size, dtype=np.int64) - first[term]
        dest = filled[term] + within
        out_rows[dest] = rows
        out_tf[dest] = tf
        filled += c
    dl = np.concatenate([p.dl[p.alive] for p in index.parts] or [np.zeros(0, np.int32)]).astype(np.int32)
    segment = Segment(0, indptr, out_rows, out_tf, dl, np.ones(n_out, dtype=bool))
    return segment, old_rows


class ContributionCache:
    """Term -> :data:`Contribution`, least recently used first out once ``budget`` bytes are held; thread-safe.

    Attributes:
        budget: the bytes it may hold.
        nbytes: the bytes it holds (arrays it allocated; views of a segment's own arrays count 0).
    """

    def __init__(self, budget: int) -> None:
        self.budget = int(budget)
        self.nbytes = 0
        self._items: OrderedDict[int, tuple[Contribution, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, term: int) -> Contribution | None:
        with self._lock:
            item = self._items.get(term)
            if item is None:
                return None
            self._items.move_to_end(term)
            return item[0]

    def put(self, term: int, value: Contribution, nbytes: int) -> None:
        if nbytes > self.budget:
            return
        with self._lock:
            if term in self._items:
                return
            self._items[term] = (value, nbytes)
            self.nbytes += nbytes
            while self.nbytes > self.budget:
                _, (_, freed) = self._items.popitem(last=False)
                self.nbytes -= freed


def term_contribution(index: Segments, term: int, k1: float, b: float) -> tuple[Contribution, int, int]:
    """A term's contribution to every live row (bm25s's arithmetic, see the module docstring), how many
    postings it has (its live document frequency) and the bytes of the arrays made for it."""
    postings = []
    df = 0
    for p, norm in zip(index.parts, index.norms(k1, b)):
        if term >= p.n_terms:
            continue
        a, e = int(p.indptr[term]), int(p.indptr[term + 1])
        if a == e:
            continue
        rows, tf = p.rows[a:e], p.tf[a:e]
        if p.n_dead:
            live = p.alive[rows]
            rows, tf = rows[live], tf[live]
        df += int(rows.shape[0])
        postings.append((p.offset, p.n_dead, rows, tf, norm))
    if df == 0:
        return (), 0, 0
    idf = float(np.float32(math.log(1 + (index.n_live - df + 0.5) / (df + 0.5))))  # bm25s keeps idf as float32
    out: list[tuple[np.ndarray | slice, np.ndarray]] = []
    nbytes = 0
    dense = np.zeros(index.n_rows, dtype=np.float32) if df >= DENSE_FRACTION * index.n_rows else None
    for offset, n_dead, rows, tf, norm in postings:
        tf64 = tf.astype(np.float64)
        contrib = (idf * (tf64 / (norm[rows] + tf64))).astype(np.float32)
        if dense is not None:
            dense[offset : offset + norm.shape[0]][rows] = contrib
            continue
        if offset:
            rows = rows + offset
        nbytes += contrib.nbytes + (rows.nbytes if offset or n_dead else 0)  # else a view of the segment's rows
        out.append((rows, contrib))
    if dense is not None:
        return ((slice(None), dense),), df, dense.nbytes
    return tuple(out), df, nbytes


def _cached_contribution(index: Segments, cache: ContributionCache, term: int, k1: float, b: float) -> Contribution:
    """:func:`term_contribution`, from ``cache`` when there; a term with many postings is put there."""
    found = cache.get(term)
    if found is not None:
        return found
    value, df, nbytes = term_contribution(index, term, k1, b)
    if df >= CONTRIBUTION_CACHE_MIN_POSTINGS:
        cache.put(term, value, nbytes)
    return value


def score(index: Segments, query_ids: Sequence[int], k1: float, b: float) -> np.ndarray:
    """BM25 of every row for the query's term ids (duplicates count, as in bm25s), shape ``(n_rows,)``
    float32; dead rows score 0.  Touches only the query terms' postings (cached per snapshot for long ones)."""
    out = np.zeros(index.n_rows, dtype=np.float32)
    if index.n_live == 0 or not len(query_ids):
        return out
    cache = index.contributions(k1, b)
    untouched = True  # out is still all zeros: the first addend is stored as it is (0 + x == x)
    for t in query_ids:
        contribution = _cached_contribution(index, cache, int(t), k1, b)
        for rows, contrib in contribution:  # segments: disjoint rows (or every row, once)
            if untouched:
                out[rows] = contrib
            else:
                out[rows] += contrib
        untouched = untouched and not contribution
    return out
