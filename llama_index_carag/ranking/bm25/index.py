"""The in-process BM25 index over the evidence: fitted, edited in O(batch), queried, saved in the retriever's state.

BM25 is bm25s's "lucene" BM25 (`bm25s <https://github.com/xhluca/bm25s>`_, the scorer of LlamaIndex's
``llama-index-retrievers-bm25`` integration) with that integration's tokenisation: English stop words
removed, the Snowball English stemmer (PyStemmer), token pattern ``(?u)\\b\\w\\w+\\b``, text =
``node.get_content(MetadataMode.EMBED)`` (so label metadata excluded from embeddings is excluded
here too).  The tokenisation is bm25s's, reimplemented without per-token Python loops
(:mod:`~llama_index_carag.ranking.bm25.tokens`, identical output); the index itself keeps raw term frequencies in
segments (:mod:`~llama_index_carag.ranking.bm25.segments`) and scores at query time with the statistics of
the live passages, so

* :meth:`BM25Index.add` / :meth:`BM25Index.remove` cost O(batch) (a new segment, a tombstone),
  and the scores after them are exactly those of a rebuild on the passages as they are now;
* a query touches only its terms' postings.

The state is the term-frequency matrix (arrays, no pickle), the vocabulary and the node ids:
:meth:`BM25Index.get_state` gives it as JSON plus arrays for the retriever's atomic state (it writes the
segments merged into one).

One :meth:`BM25Index.query` call scores every passage once (a :class:`BM25QueryScores`); the top ``n`` come
from it and so do the BM25 scores of candidates found by the dense search, at no extra cost.  The index keeps
the last few queries' scores (:meth:`BM25Index.top`, :meth:`BM25Index.scores_of`: the
:class:`~llama_index_carag.ranking.bm25.placement.FittedBM25` the BM25 source and term read), so the source,
the term and the provenance of one query share one scoring pass; an edit forgets them.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.core.heap import release_free_memory
from llama_index_carag.ranking.bm25.segments import (
    Postings,
    Segment,
    Segments,
    assemble_segment,
    block_postings,
    build_segment,
    merge,
    score,
)
from llama_index_carag.ranking.bm25.tokens import Runs, RunTerms, Tokenizer, expand_runs, run_keys

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_carag.ranking.fitted_table import TableCorpus

logger = logging.getLogger(__name__)

#: Passages tokenised at a time by :meth:`BM25Index.fit_texts` (at most; a corpus of fewer than twice as many is cut
#: in two, down to 10,000 a chunk, so that the fit's pipeline has two chunks to overlap).
FIT_CHUNK = 100_000
_FORMAT = 2
_ARRAY_NAMES = ("indptr", "rows", "tf", "dl")
_QUERIES_KEPT = 64


#: The constraints of the BM25 parameters and the tokenisation (scikit-learn's declarative validation), shared by
#: every estimator that scores BM25 (in process or in the vector store).
BM25_PARAMETERS: dict[str, list[Any]] = {
    "language": [str, None],
    "stopwords": [str, None],
    "k1": [Interval(Real, 0, None, closed="neither")],
    "b": [Interval(Real, 0, 1, closed="both")],
}


@dataclass(frozen=True)
class BM25QueryScores:
    """The BM25 scores of one query over the whole index.

    Attributes:
        ids: the top ``n`` passages by BM25 score (score > 0), best first.
        scores: their BM25 scores, shape ``(len(ids),)``.
        all_scores: the BM25 score of every row of the index, shape ``(rows,)`` (deleted rows 0);
            look candidates up with :meth:`BM25Index.lookup`.
        row_of: ``{node id: row}`` of the index the query was scored on.
    """

    ids: list[str]
    scores: np.ndarray
    all_scores: np.ndarray
    row_of: dict[str, int] | None = field(default=None, repr=False, compare=False)


class BM25Index(BaseEstimator):
    """BM25 over evidence passages, in process (a scikit-learn estimator: configure, :meth:`fit`, then query;
    :meth:`add` and :meth:`remove` edit it in O(batch)).  The parameters are validated by :meth:`fit` and
    :meth:`from_state`.

    Args:
        language: stemmer language for PyStemmer (``None``: no stemming).
        stopwords: stop-word list name for bm25s (``"en"``) or ``None``.
        k1, b: BM25 parameters (bm25s defaults 1.5, 0.75).
        merge_fraction: the segments are merged into one (dead rows dropped, O(corpus)) when the
            rows added since the last merge or the deleted rows exceed this fraction of the rows.

    Attributes (after :meth:`fit`):
        ids_: the indexed (live) node ids in row order.
        segments_: the index (:class:`~llama_index_carag.ranking.bm25.segments.Segments`).
        vocab_: ``{term: column}``.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **BM25_PARAMETERS,
        "merge_fraction": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        *,
        language: str | None = "english",
        stopwords: str | None = "en",
        k1: float = 1.5,
        b: float = 0.75,
        merge_fraction: float = 0.25,
    ) -> None:
        self.language = language
        self.stopwords = stopwords
        self.k1 = k1
        self.b = b
        self.merge_fraction = merge_fraction
        self._lock = threading.Lock()
        self._tokenizer = Tokenizer(language, stopwords)
        self._queries: OrderedDict[str, tuple[int, BM25QueryScores]] = OrderedDict()

    # ------------------------------------------------------------- building
    def _tokens(self) -> Tokenizer:
        """The tokenizer of the current ``language`` / ``stopwords`` (shared by threads)."""
        tokenizer = self._tokenizer
        if (tokenizer.language, tokenizer.stopwords) != (self.language, self.stopwords):
            tokenizer = self._tokenizer = Tokenizer(self.language, self.stopwords)
        return tokenizer

    @staticmethod
    def _node_texts(nodes: Sequence[BaseNode]) -> tuple[list[str], list[str]]:
        return [n.node_id for n in nodes], [embed_text(n) for n in nodes]

    def fit(self, nodes: Sequence[BaseNode], *, show_progress: bool = False) -> BM25Index:
        """Index the passages' text.

        Args:
            nodes: evidence nodes (their ``MetadataMode.EMBED`` content is indexed).

        Raises:
            ValueError: no nodes, or duplicated node ids.
        """
        nodes = list(nodes)
        if not nodes:
            raise ValueError("BM25Index.fit needs at least one node.")
        ids, texts = self._node_texts(nodes)
        if len(set(ids)) != len(ids):
            raise ValueError("BM25Index.fit: duplicated node ids.")
        return self.fit_texts(ids, texts, show_progress=show_progress)

    def fit_texts(self, ids: Sequence[str], texts: Sequence[str], *, show_progress: bool = False) -> BM25Index:
        """Index ``texts`` under ``ids`` (same length, ids unique)."""
        if len(ids) != len(texts) or not ids:
            raise ValueError(f"BM25Index.fit_texts: {len(ids)} ids for {len(texts)} texts.")
        size = min(FIT_CHUNK, max(10_000, -(-len(texts) // 2)))  # two chunks at least: the pipeline overlaps them
        chunks = ((ids[s : s + size], texts[s : s + size]) for s in range(0, len(texts), size))
        return self.fit_chunks(chunks, total=len(texts), show_progress=show_progress)

    def fit_chunks(
        self,
        chunks: Iterable[tuple[Sequence[str], Sequence[str]]],
        *,
        total: int | None = None,
        show_progress: bool = False,
    ) -> BM25Index:
        """Index passages given as consecutive ``(ids, texts)`` chunks (read lazily: a corpus's text need never
        be in memory at once).  Each chunk is tokenised, reduced to its distinct (term, row) counts and
        dropped; one segment is assembled from them at the end (the arrays :meth:`fit_texts` builds).  The
        chunks go through a pipeline on two threads (runs, term ids in chunk order, counts): the result does
        not depend on the threads.

        Args:
            total: the number of passages, for the progress bar.

        Raises:
            ValueError: no passages, a chunk with as many ids as texts missing, or duplicated ids.
        """
        from tqdm.auto import tqdm

        self._validate_params()
        tokenizer = self._tokens()
        vocab: dict[str, int] = {}
        row_ids: list[str] = []
        counted: list[Future[Postings]] = []
        # a pipeline on two threads (numpy, mostly without the GIL): a chunk is split into runs, its runs get
        # term ids here in chunk order (the vocabulary's order), and its (term, row) counts are made; at most
        # two chunks' runs wait at a time.  About 40 % less time on two cores (1M passages: 24 -> 15 s, ~150 MB more
        # at the peak); the result does not depend on it.
        with (
            tqdm(total=total, desc="BM25 index", unit="passage", disable=not show_progress) as bar,
            ThreadPoolExecutor(2, thread_name_prefix="bm25-fit") as pool,
        ):
            waiting: deque[tuple[Sequence[str], Future[Runs]]] = deque()

            def number(chunk_ids: Sequence[str], runs: Future[Runs]) -> None:
                done = runs.result()
                terms = tokenizer.number_runs(done, vocab)
                counted.append(pool.submit(_postings, done, terms, len(row_ids)))
                row_ids.extend(str(i) for i in chunk_ids)
                bar.update(len(chunk_ids))

            for chunk_ids, chunk_texts in chunks:
                if len(chunk_ids) != len(chunk_texts):
                    raise ValueError(f"BM25Index.fit_chunks: {len(chunk_ids)} ids for {len(chunk_texts)} texts.")
                if not len(chunk_ids):
                    continue
                waiting.append((chunk_ids, pool.submit(run_keys, chunk_texts)))
                if len(waiting) > 1:
                    number(*waiting.popleft())
            while waiting:
                number(*waiting.popleft())
            blocks = [c.result() for c in counted]
        release_free_memory()  # the pipeline's freed chunks: the segment is assembled next, on top of them
        if not row_ids:
            raise ValueError("BM25Index.fit needs at least one passage.")
        if len(set(row_ids)) != len(row_ids):
            raise ValueError("BM25Index.fit: duplicated node ids.")
        index = Segments.empty().append(assemble_segment(0, blocks, len(vocab)))
        blocks.clear()  # the postings are in the segment now
        with self._lock:
            self.vocab_ = vocab
            self.segments_ = index
            self._row_ids = row_ids
            self._row_of = {node_id: r for r, node_id in enumerate(row_ids)}
            self._merged_rows = index.n_rows
            self._queries = OrderedDict()
        logger.debug("BM25 index: %d passages, %d terms.", len(row_ids), len(vocab))
        return self

    def document_term_ids(self, texts: Sequence[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """How the index tokenises passages (stop words removed, stemmed): the term ids of every text one after
        the other, shape ``(sum of lengths,)`` int32, and the tokens per text, shape ``(len(texts),)`` int32.
        Terms not in ``vocab`` join it (``vocab[term] = len(vocab)``, new terms in bm25s's order); the same
        term strings, order and lengths as ``bm25s.tokenize`` (:mod:`~llama_index_carag.ranking.bm25.tokens`)."""
        return self._tokens().document_term_ids(texts, vocab)

    def __len__(self) -> int:
        return len(getattr(self, "_row_of", ()))

    def __contains__(self, node_id: object) -> bool:
        return node_id in getattr(self, "_row_of", {})

    @property
    def ids_(self) -> list[str]:
        """The indexed node ids in row order."""
        check_is_fitted(self)
        row_of = self._row_of
        return [i for r, i in enumerate(self._row_ids) if row_of.get(i) == r]

    # -------------------------------------------------------------- editing
    def add(self, nodes: Sequence[BaseNode]) -> int:
        """Index ``nodes`` (an id already indexed is replaced); O(batch). Returns the number added.

        Raises:
            ValueError: duplicated node ids in the batch.
        """
        ids, texts = self._node_texts(list(nodes))
        return self.add_texts(ids, texts)

    def add_texts(self, ids: Sequence[str], texts: Sequence[str]) -> int:
        """Index ``texts`` under ``ids`` (ids already indexed are replaced); O(batch)."""
        check_is_fitted(self)
        if len(ids) != len(texts):
            raise ValueError(f"BM25Index.add_texts: {len(ids)} ids for {len(texts)} texts.")
        if not ids:
            return 0
        row_ids = [str(i) for i in ids]
        if len(set(row_ids)) != len(row_ids):
            raise ValueError("BM25Index.add_texts: duplicated node ids in the batch.")
        with self._lock:
            self._remove_locked(row_ids)
            vocab = self.vocab_  # new terms get new columns, which the current segments do not have
            tokens, lengths = self.document_term_ids(texts, vocab)
            index = self.segments_
            index = index.append(build_segment(index.n_rows, tokens, lengths, len(vocab)))
            for r, node_id in enumerate(row_ids, start=self.segments_.n_rows):
                self._row_of[node_id] = r
            self._row_ids.extend(row_ids)
            self.segments_ = index
            self._queries = OrderedDict()
            self._maybe_merge_locked()
        return len(row_ids)

    def remove(self, node_ids: Sequence[str]) -> int:
        """Stop indexing ``node_ids`` (ids not indexed are ignored); O(batch). Returns the number removed."""
        check_is_fitted(self)
        with self._lock:
            removed = self._remove_locked([str(i) for i in node_ids])
            self._maybe_merge_locked()
        return removed

    def _remove_locked(self, node_ids: Sequence[str]) -> int:
        rows = [self._row_of.pop(i) for i in dict.fromkeys(node_ids) if i in self._row_of]
        if rows:
            self.segments_ = self.segments_.kill(rows)
            self._queries = OrderedDict()
        return len(rows)

    def _maybe_merge_locked(self) -> None:
        index = self.segments_
        added = index.n_rows - self._merged_rows
        dead = index.n_rows - index.n_live
        if max(added, dead) > self.merge_fraction * max(index.n_rows, 1):
            self._merge_locked()

    def merge(self) -> None:
        """Fold the segments into one and drop the deleted rows (O(corpus); scores unchanged)."""
        check_is_fitted(self)
        with self._lock:
            self._merge_locked()

    def _merge_locked(self) -> None:
        segment, old_rows = merge(self.segments_, len(self.vocab_))
        row_ids = [self._row_ids[r] for r in old_rows.tolist()]
        self._row_ids = row_ids
        self._row_of = {node_id: r for r, node_id in enumerate(row_ids)}  # a new dict: old hits keep theirs
        self.segments_ = Segments.empty().append(segment)
        self._merged_rows = segment.n_rows
        logger.debug("BM25 segments merged: %d passages.", segment.n_rows)

    # -------------------------------------------------------------- queries
    def tokenize(self, text: str) -> list[str]:
        """The query's tokens as the index sees them (stemmed; stop words kept, as BM25Retriever does)."""
        return self._tokens().query_terms(text)

    def _score(self, query_str: str) -> tuple[np.ndarray, list[str], dict[str, int]]:
        check_is_fitted(self)
        with self._lock:
            vocab, index, row_ids, row_of = self.vocab_, self.segments_, self._row_ids, self._row_of
        ids = [vocab[t] for t in self.tokenize(query_str) if t in vocab]
        return score(index, ids, float(self.k1), float(self.b)), row_ids, row_of

    def all_scores(self, query_str: str) -> np.ndarray:
        """BM25 score of every row for the query, shape ``(rows,)`` float32 (zeros if no term matches).
        Rows are :attr:`ids_`'s order until the first :meth:`add` / :meth:`remove` after a merge."""
        return self._score(query_str)[0]

    def query(self, query_str: str, n: int) -> BM25QueryScores:
        """The top ``n`` passages (positive scores only) and every passage's score."""
        scores, row_ids, row_of = self._score(query_str)
        n = int(n)
        if n <= 0:
            return BM25QueryScores([], np.zeros(0, np.float32), scores, row_of)
        n = min(n, scores.shape[0])
        # argpartition over every row (not only the matching ones): which of several tied passages at
        # the n-th place is kept is then the one bm25s's own top-n keeps.
        hit = np.argpartition(-scores, n - 1)[:n] if n < scores.shape[0] else np.arange(scores.shape[0])
        hit = hit[np.argsort(-scores[hit], kind="stable")]
        hit = hit[scores[hit] > 0]
        return BM25QueryScores([row_ids[r] for r in hit], scores[hit], scores, row_of)

    def lookup(self, hits: BM25QueryScores, node_ids: Sequence[str]) -> np.ndarray:
        """The BM25 scores of ``node_ids`` from ``hits``, shape ``(k,)`` (0 for ids not indexed)."""
        rows = self._row_of if hits.row_of is None else hits.row_of
        size = hits.all_scores.shape[0]
        out = np.zeros(len(node_ids), dtype=np.float32)
        for k, node_id in enumerate(node_ids):
            r = rows.get(node_id)
            if r is not None and r < size:
                out[k] = hits.all_scores[r]
        return out

    # ---------------------------------------- the source's and the term's reads
    def _kept_query(self, query_str: str, n: int) -> BM25QueryScores:
        """The query's scores with at least its top ``n`` (the list may be longer: slice it), from the last few
        queries' when there (one scoring pass per query; an edit forgets them)."""
        with self._lock:
            kept = self._queries  # an edit replaces the dict: what is stored below into this one is then dropped
            entry = kept.get(query_str)
            if entry is not None and entry[0] >= n:
                kept.move_to_end(query_str)
                return entry[1]
        hits = self.query(query_str, n)
        with self._lock:
            kept[query_str] = (n, hits)
            kept.move_to_end(query_str)
            while len(kept) > _QUERIES_KEPT:
                kept.popitem(last=False)
        return hits

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """``(ids, scores)``: the query's top ``n`` passages (score > 0, none in ``exclude``), best first."""
        hits = self._kept_query(query_str, n + len(exclude))
        if not exclude:
            return hits.ids[:n], hits.scores[:n]
        keep = [k for k, i in enumerate(hits.ids) if i not in exclude][:n]
        return [hits.ids[k] for k in keep], hits.scores[keep]

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids``, shape ``(len(node_ids),)`` float32 (0 where not indexed), from the
        query's kept scoring pass when there is one."""
        return self.lookup(self._kept_query(query_str, 0), node_ids)

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> None:
        """After an insert, delete or sync of ``changed``: they leave the index, and those the corpus still
        holds as evidence (not excluded) come back with their current text; O(batch)."""
        changed = list(dict.fromkeys(changed))
        self.remove(changed)
        excluded = corpus.exclude_ids
        keep = [i for i in changed if i not in excluded]
        self.add([n for n in corpus.nodes(keep) if n is not None] if keep else [])

    # ------------------------------------------------------------ persistence
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(info, arrays)``: node ids, vocabulary and settings as JSON; the live passages' term
        frequencies as one CSC matrix (``indptr``, ``rows``, ``tf``) and their lengths ``dl``."""
        check_is_fitted(self)
        with self._lock:
            index, row_ids, vocab = self.segments_, self._row_ids, self.vocab_
        segment, old_rows = merge(index, len(vocab))  # a copy: the live index is left as it is
        terms = [""] * len(vocab)
        for term, column in vocab.items():
            terms[column] = term
        info = {
            "format": _FORMAT,
            "ids": [row_ids[r] for r in old_rows.tolist()],
            "vocab": terms,
            "language": self.language,
            "stopwords": self.stopwords,
            "k1": float(self.k1),
            "b": float(self.b),
        }
        arrays = {"indptr": segment.indptr, "rows": segment.rows, "tf": segment.tf, "dl": segment.dl}
        return info, arrays

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> BM25Index:
        """The index :meth:`get_state` described.

        Raises:
            ValueError / KeyError: the info and arrays do not belong together (or another format).
        """
        if int(info.get("format", 0)) != _FORMAT:
            raise ValueError(f"the saved BM25 index has format {info.get('format')!r}, not {_FORMAT}")
        ids = [str(i) for i in info["ids"]]
        terms = [str(t) for t in info["vocab"]]
        indptr, rows, tf, dl = (np.asarray(arrays[name]) for name in _ARRAY_NAMES)
        _check_arrays(indptr, rows, tf, dl, ids, terms)
        self = cls(
            language=info.get("language", "english"),
            stopwords=info.get("stopwords", "en"),
            k1=float(info.get("k1", 1.5)),
            b=float(info.get("b", 0.75)),
        )
        self._validate_params()
        n = len(ids)
        segment = Segment(0, indptr.astype(np.int64), rows.astype(np.int32), tf, dl.astype(np.int32), np.ones(n, bool))
        self.vocab_ = {t: c for c, t in enumerate(terms)}
        self.segments_ = Segments.empty().append(segment)
        self._row_ids = ids
        self._row_of = {node_id: r for r, node_id in enumerate(ids)}
        self._merged_rows = n
        return self


def _check_arrays(
    indptr: np.ndarray, rows: np.ndarray, tf: np.ndarray, dl: np.ndarray, ids: list[str], terms: list[str]
) -> None:
    """Raise ``ValueError`` unless the saved CSC arrays fit the ids (rows) and the vocabulary (columns)."""
    n_terms, n = len(terms), len(ids)
    if (
        indptr.shape != (n_terms + 1,)
        or indptr[0] != 0
        or np.any(np.diff(indptr) < 0)
        or indptr[-1] != rows.shape[0]
        or rows.shape != tf.shape
        or dl.shape != (n,)
        or (rows.size and (rows.min() < 0 or rows.max() >= n))
        or not np.issubdtype(tf.dtype, np.unsignedinteger)
        or len(set(ids)) != n
        or len(set(terms)) != n_terms
    ):
        raise ValueError("the saved BM25 arrays do not match its ids and vocabulary")


def _postings(runs: Runs, terms: RunTerms, first_row: int) -> Postings:
    """The (term, row) counts of one chunk of passages from its runs and their term ids."""
    tokens, lengths = expand_runs(runs, terms)
    return block_postings(tokens, lengths, first_row=first_row)


def embed_text(node: BaseNode) -> str:
    """What BM25 indexes of a node: ``node.get_content(MetadataMode.EMBED)`` (a ``TextNode`` without metadata:
    its text, read directly)."""
    embed_mode, text_node = _schema()
    if not node.metadata and type(node).get_content is text_node.get_content:
        return node.text  # type: ignore[attr-defined]
    return node.get_content(metadata_mode=embed_mode)


@functools.cache
def _schema() -> tuple[Any, Any]:
    """``(MetadataMode.EMBED, TextNode)``, imported once (:func:`embed_text` runs once per passage)."""
    from llama_index.core.schema import MetadataMode, TextNode

    return MetadataMode.EMBED, TextNode
