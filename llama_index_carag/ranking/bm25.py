"""Lexical candidates: a BM25 index over the evidence, built, updated and persisted beside the vector index.

BM25 is bm25s's "lucene" BM25 (`bm25s <https://github.com/xhluca/bm25s>`_, the scorer of LlamaIndex's
``llama-index-retrievers-bm25`` integration) with that integration's tokenisation: English stop words
removed, the Snowball English stemmer (PyStemmer), token pattern ``(?u)\\b\\w\\w+\\b``, text =
``node.get_content(MetadataMode.EMBED)`` (so label metadata excluded from embeddings is excluded
here too).  The tokenisation is bm25s's, reimplemented without per-token Python loops
(:mod:`llama_index_carag.ranking.bm25_tokens`, identical output); the index itself keeps raw term frequencies in segments
(:mod:`llama_index_carag.ranking.bm25_segments`) and scores at query time with the statistics of
the live passages, so

* :meth:`LexicalIndex.add` / :meth:`LexicalIndex.remove` cost O(batch) (a new segment, a tombstone),
  and the scores after them are exactly those of a rebuild on the passages as they are now;
* a query touches only its terms' postings.

The state is the term-frequency matrix (``.npy`` arrays, no pickle), the vocabulary and the node ids:
:meth:`LexicalIndex.get_state` gives it as JSON plus arrays for the retriever's atomic state (it
writes the segments merged into one); :meth:`LexicalIndex.persist` writes a folder of its own.
States written by versions that stored bm25s's precomputed scores (format 1) are not read here:
:class:`LegacyLexicalState` says so, and the lexical table refits from the stored text.

One :meth:`LexicalIndex.query` call scores every passage once; the top ``n`` come from it and
so do the lexical scores of candidates found by the dense search, at no extra cost.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write_text
from llama_index_carag.ranking.bm25_segments import (
    Postings,
    Segments,
    assemble_segment,
    block_postings,
    build_segment,
    merge,
    score,
)
from llama_index_carag.ranking.bm25_tokens import TOKEN_PATTERN, Tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

logger = logging.getLogger(__name__)

__all__ = ["LexicalIndex", "LexicalHits", "LegacyLexicalState", "TOKEN_PATTERN", "IDS_FILE", "import_bm25s"]

#: The file of a :meth:`LexicalIndex.persist` folder that lists its node ids.
IDS_FILE = "carag_lexical_ids.json"
_ARRAYS_FILE = "carag_lexical_tf.npz"
_FORMAT = 2
_ARRAY_NAMES = ("indptr", "rows", "tf", "dl")
_FIT_CHUNK = 100_000


class LegacyLexicalState(ValueError):
    """A BM25 index saved by an earlier version (bm25s's precomputed scores): refit it from the text."""


def import_bm25s():
    """bm25s, imported on first use; it sets its own logger to DEBUG, which would flood a root handler."""
    import bm25s

    bm25s_logger = logging.getLogger("bm25s")
    if bm25s_logger.level == logging.DEBUG:
        bm25s_logger.setLevel(logging.WARNING)
    return bm25s


@dataclass(frozen=True)
class LexicalHits:
    """The lexical side of one query.

    Attributes:
        ids: the top ``n`` passages by BM25 score (score > 0), best first.
        scores: their BM25 scores, shape ``(len(ids),)``.
        all_scores: the BM25 score of every row of the index, shape ``(rows,)`` (deleted rows 0);
            look candidates up with :meth:`LexicalIndex.lookup`.
        row_of: ``{node id: row}`` of the index the hits were scored on.
    """

    ids: list[str]
    scores: np.ndarray
    all_scores: np.ndarray
    row_of: dict[str, int] | None = field(default=None, repr=False, compare=False)


class LexicalIndex:
    """BM25 over evidence passages (scikit-learn style: configure, :meth:`fit`, then query; :meth:`add` and
    :meth:`remove` edit it in O(batch)).

    Args:
        language: stemmer language for PyStemmer (``None``: no stemming).
        stopwords: stop-word list name for bm25s (``"en"``) or ``None``.
        k1, b: BM25 parameters (bm25s defaults 1.5, 0.75).
        merge_fraction: the segments are merged into one (dead rows dropped, O(corpus)) when the
            rows added since the last merge or the deleted rows exceed this fraction of the rows.

    Attributes (after :meth:`fit`):
        ids_: the indexed (live) node ids in row order.
        segments_: the index (:class:`~llama_index_carag.ranking.bm25_segments.Segments`).
        vocab_: ``{term: column}``.
    """

    def __init__(
        self,
        *,
        language: str | None = "english",
        stopwords: str | None = "en",
        k1: float = 1.5,
        b: float = 0.75,
        merge_fraction: float = 0.25,
    ) -> None:
        if not (isinstance(k1, (int, float)) and k1 > 0) or not (isinstance(b, (int, float)) and 0 <= b <= 1):
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1; got k1={k1!r}, b={b!r}.")
        if not (isinstance(merge_fraction, (int, float)) and merge_fraction > 0):
            raise ValueError(f"merge_fraction must be > 0; got {merge_fraction!r}.")
        self.language = language
        self.stopwords = stopwords
        self.k1 = float(k1)
        self.b = float(b)
        self.merge_fraction = float(merge_fraction)
        self._lock = threading.Lock()
        self._tokenizer = Tokenizer(language, stopwords)

    # ------------------------------------------------------------- building
    def _tokens(self) -> Tokenizer:
        """The tokenizer of the current ``language`` / ``stopwords`` (shared by threads)."""
        tokenizer = self._tokenizer
        if (tokenizer.language, tokenizer.stopwords) != (self.language, self.stopwords):
            tokenizer = self._tokenizer = Tokenizer(self.language, self.stopwords)
        return tokenizer

    @staticmethod
    def _node_texts(nodes: Sequence[BaseNode]) -> tuple[list[str], list[str]]:
        from llama_index.core.schema import MetadataMode

        return [n.node_id for n in nodes], [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]

    def fit(self, nodes: Sequence[BaseNode], *, show_progress: bool = False) -> LexicalIndex:
        """Index the passages' text.

        Args:
            nodes: evidence nodes (their ``MetadataMode.EMBED`` content is indexed).

        Raises:
            ValueError: no nodes, or duplicated node ids.
        """
        nodes = list(nodes)
        if not nodes:
            raise ValueError("LexicalIndex.fit needs at least one node.")
        ids, texts = self._node_texts(nodes)
        if len(set(ids)) != len(ids):
            raise ValueError("LexicalIndex.fit: duplicated node ids.")
        return self.fit_texts(ids, texts, show_progress=show_progress)

    def fit_texts(self, ids: Sequence[str], texts: Sequence[str], *, show_progress: bool = False) -> LexicalIndex:
        """Index ``texts`` under ``ids`` (same length, ids unique)."""
        if len(ids) != len(texts) or not ids:
            raise ValueError(f"LexicalIndex.fit_texts: {len(ids)} ids for {len(texts)} texts.")
        chunks = ((ids[s : s + _FIT_CHUNK], texts[s : s + _FIT_CHUNK]) for s in range(0, len(texts), _FIT_CHUNK))
        return self.fit_chunks(chunks, total=len(texts), show_progress=show_progress)

    def fit_chunks(
        self,
        chunks: Iterable[tuple[Sequence[str], Sequence[str]]],
        *,
        total: int | None = None,
        show_progress: bool = False,
    ) -> LexicalIndex:
        """Index passages given as consecutive ``(ids, texts)`` chunks (read lazily: a corpus's text need never
        be in memory at once).  Each chunk is tokenised, reduced to its distinct (term, row) counts and
        dropped; one segment is assembled from them at the end (the arrays :meth:`fit_texts` builds).

        Args:
            total: the number of passages, for the progress bar.

        Raises:
            ValueError: no passages, a chunk with as many ids as texts missing, or duplicated ids.
        """
        from tqdm.auto import tqdm

        vocab: dict[str, int] = {}
        blocks: list[Postings] = []
        row_ids: list[str] = []
        with tqdm(total=total, desc="BM25 index", unit="passage", disable=not show_progress) as bar:
            for chunk_ids, chunk_texts in chunks:
                if len(chunk_ids) != len(chunk_texts):
                    raise ValueError(f"LexicalIndex.fit_chunks: {len(chunk_ids)} ids for {len(chunk_texts)} texts.")
                if not len(chunk_ids):
                    continue
                tokens, lengths = self.document_term_ids(chunk_texts, vocab)
                blocks.append(block_postings(tokens, lengths, first_row=len(row_ids)))
                row_ids += [str(i) for i in chunk_ids]
                bar.update(len(chunk_ids))
        if not row_ids:
            raise ValueError("LexicalIndex.fit needs at least one passage.")
        if len(set(row_ids)) != len(row_ids):
            raise ValueError("LexicalIndex.fit: duplicated node ids.")
        index = Segments.empty().append(assemble_segment(0, blocks, len(vocab)))
        del blocks
        with self._lock:
            self.vocab_ = vocab
            self.segments_ = index
            self._row_ids = row_ids
            self._row_of = {node_id: r for r, node_id in enumerate(row_ids)}
            self._merged_rows = index.n_rows
        logger.debug("BM25 index: %d passages, %d terms.", len(row_ids), len(vocab))
        return self

    def document_term_ids(self, texts: Sequence[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """How the index tokenises passages (stop words removed, stemmed): the term ids of every text one after
        the other, shape ``(sum of lengths,)`` int32, and the tokens per text, shape ``(len(texts),)`` int32.
        Terms not in ``vocab`` join it (``vocab[term] = len(vocab)``, new terms in bm25s's order); the same
        term strings, order and lengths as ``bm25s.tokenize`` (:mod:`~llama_index_carag.ranking.bm25_tokens`)."""
        return self._tokens().document_term_ids(texts, vocab)

    def _check_fitted(self) -> None:
        if not hasattr(self, "segments_"):
            raise RuntimeError("LexicalIndex is not fitted; call fit(nodes) first.")

    def __len__(self) -> int:
        return len(getattr(self, "_row_of", ()))

    def __contains__(self, node_id: object) -> bool:
        return node_id in getattr(self, "_row_of", {})

    @property
    def ids_(self) -> list[str]:
        """The indexed node ids in row order."""
        self._check_fitted()
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
        self._check_fitted()
        if len(ids) != len(texts):
            raise ValueError(f"LexicalIndex.add_texts: {len(ids)} ids for {len(texts)} texts.")
        if not ids:
            return 0
        row_ids = [str(i) for i in ids]
        if len(set(row_ids)) != len(row_ids):
            raise ValueError("LexicalIndex.add_texts: duplicated node ids in the batch.")
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
            self._maybe_merge_locked()
        return len(row_ids)

    def remove(self, node_ids: Sequence[str]) -> int:
        """Stop indexing ``node_ids`` (ids not indexed are ignored); O(batch). Returns the number removed."""
        self._check_fitted()
        with self._lock:
            removed = self._remove_locked([str(i) for i in node_ids])
            self._maybe_merge_locked()
        return removed

    def _remove_locked(self, node_ids: Sequence[str]) -> int:
        rows = [self._row_of.pop(i) for i in dict.fromkeys(node_ids) if i in self._row_of]
        if rows:
            self.segments_ = self.segments_.kill(rows)
        return len(rows)

    def _maybe_merge_locked(self) -> None:
        index = self.segments_
        added = index.n_rows - self._merged_rows
        dead = index.n_rows - index.n_live
        if max(added, dead) > self.merge_fraction * max(index.n_rows, 1):
            self._merge_locked()

    def merge(self) -> None:
        """Fold the segments into one and drop the deleted rows (O(corpus); scores unchanged)."""
        self._check_fitted()
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
        self._check_fitted()
        with self._lock:
            vocab, index, row_ids, row_of = self.vocab_, self.segments_, self._row_ids, self._row_of
        ids = [vocab[t] for t in self.tokenize(query_str) if t in vocab]
        return score(index, ids, self.k1, self.b), row_ids, row_of

    def all_scores(self, query_str: str) -> np.ndarray:
        """BM25 score of every row for the query, shape ``(rows,)`` float32 (zeros if no term matches).
        Rows are :attr:`ids_`'s order until the first :meth:`add` / :meth:`remove` after a merge."""
        return self._score(query_str)[0]

    def query(self, query_str: str, n: int) -> LexicalHits:
        """The top ``n`` passages (positive scores only) and every passage's score."""
        scores, row_ids, row_of = self._score(query_str)
        n = int(n)
        if n <= 0:
            return LexicalHits([], np.zeros(0, np.float32), scores, row_of)
        n = min(n, scores.shape[0])
        # argpartition over every row (not only the matching ones): which of several tied passages at
        # the n-th place is kept is then the one bm25s's own top-n keeps.
        hit = np.argpartition(-scores, n - 1)[:n] if n < scores.shape[0] else np.arange(scores.shape[0])
        hit = hit[np.argsort(-scores[hit], kind="stable")]
        hit = hit[scores[hit] > 0]
        return LexicalHits([row_ids[r] for r in hit], scores[hit], scores, row_of)

    def lookup(self, hits: LexicalHits, node_ids: Sequence[str]) -> np.ndarray:
        """The BM25 scores of ``node_ids`` from ``hits``, shape ``(k,)`` (0 for ids not indexed)."""
        rows = self._row_of if hits.row_of is None else hits.row_of
        size = hits.all_scores.shape[0]
        out = np.zeros(len(node_ids), dtype=np.float32)
        for k, node_id in enumerate(node_ids):
            r = rows.get(node_id)
            if r is not None and r < size:
                out[k] = hits.all_scores[r]
        return out

    # ------------------------------------------------------------ persistence
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(info, arrays)``: node ids, vocabulary and settings as JSON; the live passages' term
        frequencies as one CSC matrix (``indptr``, ``rows``, ``tf``) and their lengths ``dl``."""
        self._check_fitted()
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
            "k1": self.k1,
            "b": self.b,
        }
        arrays = {"indptr": segment.indptr, "rows": segment.rows, "tf": segment.tf, "dl": segment.dl}
        return info, arrays

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> LexicalIndex:
        """The index :meth:`get_state` described.

        Raises:
            LegacyLexicalState: a state of an earlier version (bm25s's files); refit from the text.
            ValueError / KeyError: the info and arrays do not belong together.
        """
        if int(info.get("format", 1)) < _FORMAT or "files" in info:
            raise LegacyLexicalState("the BM25 index was saved by an earlier version (bm25s scores, no term counts)")
        ids = [str(i) for i in info["ids"]]
        terms = [str(t) for t in info["vocab"]]
        indptr, rows, tf, dl = (np.asarray(arrays[name]) for name in _ARRAY_NAMES)
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
        from llama_index_carag.ranking.bm25_segments import Segment

        self = cls(
            language=info.get("language", "english"),
            stopwords=info.get("stopwords", "en"),
            k1=float(info.get("k1", 1.5)),
            b=float(info.get("b", 0.75)),
        )
        segment = Segment(
            0,
            indptr.astype(np.int64),
            rows.astype(np.int32),
            tf,
            dl.astype(np.int32),
            np.ones(n, dtype=bool),
        )
        self.vocab_ = {t: c for c, t in enumerate(terms)}
        self.segments_ = Segments.empty().append(segment)
        self._row_ids = ids
        self._row_of = {node_id: r for r, node_id in enumerate(ids)}
        self._merged_rows = n
        return self

    def persist(self, folder: str | os.PathLike[str]) -> Path:
        """Save under ``folder`` (:meth:`get_state` as a JSON file and an ``.npz`` of arrays, no pickle)."""
        info, arrays = self.get_state()
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f".{_ARRAYS_FILE}.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, allow_pickle=False, **arrays)
        os.replace(tmp, path / _ARRAYS_FILE)
        atomic_write_text(path / IDS_FILE, json.dumps(info))
        return path

    @classmethod
    def from_persist_dir(cls, folder: str | os.PathLike[str]) -> LexicalIndex:
        """Reload a :meth:`persist` folder.

        Raises:
            FileNotFoundError: nothing saved there.
            LegacyLexicalState: a folder of an earlier version (bm25s's files).
            ValueError: the files do not belong together.
        """
        path = Path(folder)
        if not (path / IDS_FILE).is_file():
            raise FileNotFoundError(f"No lexical index in {path} ({IDS_FILE} is missing).")
        try:
            info = json.loads((path / IDS_FILE).read_text(encoding="utf-8"))
            if int(info.get("format", 1)) < _FORMAT:
                raise LegacyLexicalState(f"{path} holds a BM25 index of an earlier version (bm25s files)")
            with np.load(path / _ARRAYS_FILE, allow_pickle=False) as saved:
                arrays = {name: saved[name] for name in _ARRAY_NAMES}
            return cls.from_state(info, arrays)
        except LegacyLexicalState:
            raise
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise ValueError(f"The lexical index in {path} is corrupt ({exc}).") from None
