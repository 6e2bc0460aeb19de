"""BM25 inside a Qdrant collection: a named sparse vector with Qdrant's IDF modifier.

The lexical leg of CARAG's hybrid pool, without the corpus's term counts in the process.  Each
evidence point gets a sparse vector ``carag_bm25`` (created on the collection with
``SparseVectorParams(modifier=IDF)`` when missing) whose values are BM25's term-frequency part,

``value(d, t) = tf / (tf + k1 * (1 - b + b * dl(d) / avgdl))``

and Qdrant multiplies each query term by ``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))`` (``N``: the
points that have the vector).  A query vector holds the query tokens' counts (a repeated token counts
twice, as in bm25s), so a query scores ``sum over query tokens of idf * value``: bm25s's "lucene" BM25,
the score of the in-process :class:`~llama_index_carag.ranking.bm25.index.BM25Index` (same tokenisation:
:meth:`~llama_index_carag.ranking.bm25.index.BM25Index.document_term_ids` for passages,
:meth:`~llama_index_carag.ranking.bm25.index.BM25Index.tokenize` for queries), up to float32 rounding.

What the process keeps: the vocabulary ``{term: sparse index}`` (exact, no hashing; new terms are
appended on insert), ``avgdl`` and the counts at fit time.  What it does not: any per-passage data.

* **fit** reads the passages' text from the payloads page by page, twice (``avgdl`` and the vocabulary
  first, then the vectors, upserted with ``update_vectors`` a page at a time);
* **insert** upserts the new passages' vectors in O(batch) with the ``avgdl`` *frozen* at fit time (the
  scores then differ from a rebuild's by a relative ``eps / (1 - eps)`` at most, with
  ``eps = |avgdl_frozen / avgdl_now - 1|``); a **delete** takes the points' vectors with them (a Qdrant
  server's IDF counts deleted points until the segment is optimised; local mode does not);
* **a query** costs one sparse query for the top ``n`` and, for the dense candidates outside it, one
  more filtered to their ids (:meth:`QdrantBM25.scores_of`), cached per query string.

Claims stored as points get no sparse vector: they are never returned and not counted in ``N``.
Nothing here imports ``qdrant_client`` until a Qdrant store is used.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.ranking.bm25.index import BM25_PARAMETERS, embed_text
from llama_index_carag.ranking.bm25.placement import BM25PlacementUnavailable
from llama_index_carag.ranking.bm25.tokens import Tokenizer
from llama_index_carag.stores.qdrant_clusters import QdrantCollection

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import TableCorpus

logger = logging.getLogger(__name__)

#: The sparse vector that holds BM25 in the collection.
BM25_VECTOR_NAME = "carag_bm25"
_FORMAT = 1
_CACHE_SIZE = 64
_UPSERT_BATCH = 256


def _models() -> Any:
    from qdrant_client import models

    return models


def _how_to_create(collection: str, vector_name: str) -> str:
    return (
        f"create the collection with the sparse vector, e.g. client.create_collection({collection!r}, "
        f"vectors_config=..., sparse_vectors_config={{{vector_name!r}: "
        "models.SparseVectorParams(modifier=models.Modifier.IDF)}), or add it to the existing one with "
        f"client.create_vector_name({collection!r}, {vector_name!r}, "
        "models.SparseVectorNameConfig(sparse=models.SparseVectorConfig(modifier=models.Modifier.IDF)))"
    )


def _sparse_config(collection: QdrantCollection, vector_name: str) -> Any | None:
    """The collection's config of the sparse vector ``vector_name``, or ``None`` when it has none."""
    info = collection.client.get_collection(collection.name)
    return (info.config.params.sparse_vectors or {}).get(vector_name)


def ensure_bm25_vector(collection: QdrantCollection, vector_name: str = BM25_VECTOR_NAME) -> None:
    """Give the collection the sparse vector ``vector_name`` (IDF modifier) when it lacks it.

    Raises:
        BM25PlacementUnavailable: the client or server cannot add it (says how to create the collection with it).
        ValueError: the vector exists without the IDF modifier.
    """
    models = _models()
    config = _sparse_config(collection, vector_name)
    if config is None:
        try:
            collection.client.create_vector_name(
                collection.name,
                vector_name,
                models.SparseVectorNameConfig(sparse=models.SparseVectorConfig(modifier=models.Modifier.IDF)),
            )
        except Exception as exc:  # an older server or client: no way to add a vector name
            raise BM25PlacementUnavailable(
                f"Cannot add the BM25 sparse vector {vector_name!r} to the Qdrant collection {collection.name!r} "
                f"({type(exc).__name__}: {exc}); {_how_to_create(collection.name, vector_name)}."
            ) from None
        logger.info("Added the sparse vector %r (IDF) to the Qdrant collection %r.", vector_name, collection.name)
    elif config.modifier != models.Modifier.IDF:
        raise ValueError(
            f"The Qdrant collection {collection.name!r} has a sparse vector {vector_name!r} without the IDF "
            f"modifier; BM25 needs it: {_how_to_create(collection.name, vector_name)}."
        )


@dataclass
class _QueryHits:
    """What one query string learned from the collection.

    Attributes:
        ids, scores: the raw top list (best first) of the largest sparse query made.
        limit: that query's limit; ``complete`` when it returned fewer (every matching point is listed).
        known: ``{id: score}`` of every point looked up (0 for those without a match).
    """

    ids: list[str]
    scores: list[float]
    limit: int
    known: dict[str, float] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.ids) < self.limit


class QdrantBM25(BaseEstimator):
    """BM25 kept in a Qdrant collection's sparse vector (a
    :class:`~llama_index_carag.ranking.bm25.placement.FittedBM25`; a scikit-learn estimator: configure,
    :meth:`fit`, then query; the parameters are validated by :meth:`fit` and :meth:`from_state`).

    Args:
        vector_store: the ``QdrantVectorStore`` (its client and collection are used).
        vector_name: the sparse vector's name.
        k1, b: BM25 parameters (those of :class:`~llama_index_carag.ranking.bm25.index.BM25Index`).
        language, stopwords: the tokenisation (as :class:`~llama_index_carag.ranking.bm25.index.BM25Index`).

    Attributes (after :meth:`fit`):
        vocab_: ``{term: sparse index}``.
        avgdl_: mean passage length (tokens, stop words removed) at fit time, frozen until the next fit.
        n_fit_: passages indexed by the fit.
    """

    placement = "qdrant"
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        **BM25_PARAMETERS,
        "vector_store": "no_validation",
        "vector_name": [str],
    }

    def __init__(
        self,
        vector_store: Any,
        *,
        vector_name: str = BM25_VECTOR_NAME,
        k1: float = 1.5,
        b: float = 0.75,
        language: str | None = "english",
        stopwords: str | None = "en",
    ) -> None:
        self.vector_store = vector_store
        self.vector_name = vector_name
        self.k1 = k1
        self.b = b
        self.language = language
        self.stopwords = stopwords
        self._lock = threading.Lock()
        self._hits: OrderedDict[str, _QueryHits] = OrderedDict()
        self._tokenizer: Tokenizer | None = None

    @property
    def collection(self) -> QdrantCollection:
        """The calls made on the store's collection."""
        return QdrantCollection(self.vector_store)

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer of the current ``language`` / ``stopwords`` (shared by threads)."""
        tokenizer = self._tokenizer
        if tokenizer is None or (tokenizer.language, tokenizer.stopwords) != (self.language, self.stopwords):
            tokenizer = self._tokenizer = Tokenizer(self.language, self.stopwords)
        return tokenizer

    # ------------------------------------------------------------- fitting

    def _pages(self, exclude: frozenset[str]) -> Iterable[tuple[list[str], list[str], list[str]]]:
        """``(ids, texts, excluded ids)`` of the collection, a page at a time."""
        for page in self.collection.scroll(with_vectors=False, payload=True):
            keep = [p for p in page if str(p.id) not in exclude]
            nodes = self.collection.vector_store.parse_to_query_result(keep).nodes if keep else []
            texts = [embed_text(n) for n in nodes]
            yield [str(p.id) for p in keep], texts, [str(p.id) for p in page if str(p.id) in exclude]

    def fit(self, exclude: Iterable[str] = (), *, show_progress: bool = False) -> QdrantBM25:
        """Index every point's text except ``exclude`` (claims stored as points, whose vectors are removed).

        Two passes over the payloads, a page at a time: the vocabulary and ``avgdl``, then the vectors.

        Raises:
            ValueError: the collection holds no passage, or cannot get the sparse vector.
        """
        from tqdm.auto import tqdm

        self._validate_params()
        exclude = frozenset(exclude)
        ensure_bm25_vector(self.collection, self.vector_name)
        vocab: dict[str, int] = {}
        n, total = 0, 0
        bar = tqdm(desc="BM25 in Qdrant (1/2: vocabulary)", unit="passage", disable=not show_progress)
        for _, texts, _ in self._pages(exclude):
            _, lengths = self.tokenizer.document_term_ids(texts, vocab)
            n, total = n + len(texts), total + int(lengths.sum())
            bar.update(len(texts))
        bar.close()
        if n == 0:
            raise ValueError(
                f"lexical_weight needs the evidence text, but the Qdrant collection {self.collection.name!r} "
                "holds no evidence point."
            )
        avgdl = total / n
        bar = tqdm(total=n, desc="BM25 in Qdrant (2/2: vectors)", unit="passage", disable=not show_progress)
        for ids, texts, excluded in self._pages(exclude):
            self._upsert(ids, texts, vocab, avgdl)
            if excluded:
                self._delete_vectors(excluded)
            bar.update(len(ids))
        bar.close()
        with self._lock:
            self.vocab_ = vocab
            self.avgdl_ = avgdl
            self.n_fit_ = n
            self._hits.clear()
        logger.info(
            "BM25 in Qdrant collection %r: %d passages, %d terms, avgdl %.2f.",
            self.collection.name,
            n,
            len(vocab),
            avgdl,
        )
        return self

    def _vectors(
        self, texts: Sequence[str], vocab: dict[str, int], avgdl: float
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each text's ``(sparse indices, BM25 tf values)``, indices ascending (new terms join ``vocab``)."""
        tokens, lengths = self.tokenizer.document_term_ids(texts, vocab)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        key = rows * max(len(vocab), 1) + tokens.astype(np.int64)
        uniq, tf = np.unique(key, return_counts=True)  # sorted by row, then term
        doc, term = uniq // max(len(vocab), 1), uniq % max(len(vocab), 1)
        tf64 = tf.astype(np.float64)
        k1, b = float(self.k1), float(self.b)
        norm = k1 * ((1 - b) + b * lengths[doc] / avgdl)  # BM25Index's arithmetic
        values = tf64 / (norm + tf64)
        bounds = np.searchsorted(doc, np.arange(len(texts) + 1))
        return [(term[a:e], values[a:e]) for a, e in zip(bounds[:-1], bounds[1:])]

    def _upsert(self, ids: Sequence[str], texts: Sequence[str], vocab: dict[str, int], avgdl: float) -> None:
        models = _models()
        for start in range(0, len(ids), _UPSERT_BATCH):
            chunk = self._vectors(texts[start : start + _UPSERT_BATCH], vocab, avgdl)
            points = [
                models.PointVectors(
                    id=node_id,
                    vector={self.vector_name: models.SparseVector(indices=idx.tolist(), values=val.tolist())},
                )
                for node_id, (idx, val) in zip(ids[start : start + _UPSERT_BATCH], chunk)
            ]
            self.collection.client.update_vectors(self.collection.name, points=points)

    def _delete_vectors(self, ids: Sequence[str]) -> None:
        models = _models()
        self.collection.client.delete_vectors(
            self.collection.name, vectors=[self.vector_name], points=models.PointIdsList(points=list(ids))
        )

    # -------------------------------------------------------------- editing
    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> None:
        """After an insert, delete or sync of ``changed``: the points still in the collection get their
        vectors from their current text (O(batch), ``avgdl`` frozen at fit time; new terms join the
        vocabulary), those the corpus excludes (claims) lose theirs, deleted points took theirs with them."""

        check_is_fitted(self)
        exclude = corpus.exclude_ids
        points = self.collection.retrieve(list(dict.fromkeys(changed)), with_vectors=False, payload=True)
        keep = [p for p in points if str(p.id) not in exclude]
        drop = [str(p.id) for p in points if str(p.id) in exclude]
        if keep:
            nodes = self.collection.vector_store.parse_to_query_result(keep).nodes
            texts = [embed_text(n) for n in nodes]
            vocab = dict(self.vocab_)  # copy-on-write: queries read the current one meanwhile
            self._upsert([str(p.id) for p in keep], texts, vocab, self.avgdl_)
            with self._lock:
                self.vocab_ = vocab
        if drop:
            self._delete_vectors(drop)
        with self._lock:
            self._hits.clear()
        logger.debug("BM25 in Qdrant: %d passages upserted, %d un-indexed.", len(keep), len(drop))

    # -------------------------------------------------------------- queries
    def query_vector(self, query_str: str) -> tuple[list[int], list[float]]:
        """The query as a sparse vector: ``(indices ascending, token counts)`` of its tokens in the vocabulary."""
        check_is_fitted(self)
        vocab = self.vocab_
        counts: dict[int, int] = {}
        for token in self.tokenizer.query_terms(query_str):
            column = vocab.get(token)
            if column is not None:
                counts[column] = counts.get(column, 0) + 1
        indices = sorted(counts)
        return indices, [float(counts[i]) for i in indices]

    def _search(self, vector: tuple[list[int], list[float]], limit: int, ids: Sequence[str] | None = None) -> list:
        models = _models()
        query_filter = None if ids is None else models.Filter(must=[models.HasIdCondition(has_id=list(ids))])
        return self.collection.client.query_points(
            self.collection.name,
            query=models.SparseVector(indices=vector[0], values=vector[1]),
            using=self.vector_name,
            query_filter=query_filter,
            limit=limit,
            with_payload=False,
            with_vectors=False,
        ).points

    def _entry(self, query_str: str) -> _QueryHits | None:
        with self._lock:
            entry = self._hits.get(query_str)
            if entry is not None:
                self._hits.move_to_end(query_str)
            return entry

    def _store(self, query_str: str, entry: _QueryHits) -> None:
        with self._lock:
            self._hits[query_str] = entry
            self._hits.move_to_end(query_str)
            while len(self._hits) > _CACHE_SIZE:
                self._hits.popitem(last=False)

    def _raw_top(self, query_str: str, limit: int) -> _QueryHits:
        """The query's top ``limit`` as the collection ranks them (one sparse query, unless cached)."""
        entry = self._entry(query_str)
        if entry is not None and (entry.limit >= limit or entry.complete):
            return entry
        vector = self.query_vector(query_str)
        if not vector[0] or limit <= 0:
            points: list = []
        else:
            points = self._search(vector, limit)
        ids = [str(p.id) for p in points if p.score > 0]
        scores = [float(p.score) for p in points if p.score > 0]
        known = dict(entry.known) if entry is not None else {}
        known.update(zip(ids, scores))
        # a query without a known term matches nothing: complete at once
        new = _QueryHits(ids, scores, limit if vector[0] else max(limit, 1), known)
        self._store(query_str, new)
        return new

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """The top ``n`` passages by BM25 (score > 0, none in ``exclude``), best first: one sparse query
        (a second, longer one only when excluded points filled the first)."""
        n = int(n)
        if n <= 0:
            return [], np.zeros(0, np.float32)
        limit = n
        while True:
            entry = self._raw_top(query_str, limit)
            keep = [k for k, i in enumerate(entry.ids) if i not in exclude][:n]
            if len(keep) >= n or entry.complete:
                break
            limit = entry.limit + n - len(keep)  # excluded points took places: ask for as many more
        return [entry.ids[k] for k in keep], np.asarray([entry.scores[k] for k in keep], dtype=np.float32)

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids``, shape ``(len(node_ids),)`` float32: from the query's cached top list,
        plus one sparse query filtered to the ids outside it (none when the list holds every match)."""
        entry = self._entry(query_str)
        if entry is None:
            entry = _QueryHits([], [], 0)
        missing = [i for i in dict.fromkeys(node_ids) if i not in entry.known]
        if missing and not entry.complete:
            vector = self.query_vector(query_str)
            found: dict[str, float] = {}
            if vector[0]:
                found = {str(p.id): float(p.score) for p in self._search(vector, len(missing), missing)}
            known = dict(entry.known)
            known.update({i: found.get(i, 0.0) for i in missing})
            entry = _QueryHits(entry.ids, entry.scores, entry.limit, known)
            self._store(query_str, entry)
        known = entry.known
        return np.asarray([known.get(i, 0.0) for i in node_ids], dtype=np.float32)

    def __len__(self) -> int:
        """The points that have the BM25 vector (one count request)."""
        models = _models()
        flt = models.Filter(must=[models.HasVectorCondition(has_vector=self.vector_name)])
        return int(self.collection.client.count(self.collection.name, count_filter=flt, exact=True).count)

    # ------------------------------------------------------------ persistence
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(info, {})``: the collection, vector name, vocabulary (terms in index order), ``avgdl``, ``k1``,
        ``b``, the tokenisation and the fit's passage count; no per-passage data (it is in the collection)."""
        check_is_fitted(self)
        vocab = self.vocab_
        terms = [""] * len(vocab)
        for term, column in vocab.items():
            terms[column] = term
        info = {
            "placement": self.placement,
            "format": _FORMAT,
            "collection": self.collection.name,
            "vector_name": self.vector_name,
            "vocab": terms,
            "avgdl": self.avgdl_,
            "n_fit": self.n_fit_,
            "k1": float(self.k1),
            "b": float(self.b),
            "language": self.language,
            "stopwords": self.stopwords,
        }
        return info, {}

    @classmethod
    def from_state(cls, info: dict[str, Any], vector_store: Any) -> QdrantBM25:
        """The index :meth:`get_state` described, on ``vector_store``'s collection.

        Raises:
            ValueError: another collection, a state of another format, or a collection without the sparse
                vector (says how to create it; then refit).
        """
        if info.get("placement") != cls.placement or int(info.get("format", 0)) != _FORMAT:
            raise ValueError("the saved BM25 index is not a Qdrant one of this version")
        if info.get("collection") != vector_store.collection_name:
            raise ValueError(
                f"the BM25 index was fitted on collection {info.get('collection')!r}, "
                f"not {vector_store.collection_name!r}"
            )
        self = cls(
            vector_store,
            vector_name=str(info["vector_name"]),
            k1=float(info["k1"]),
            b=float(info["b"]),
            language=info.get("language", "english"),
            stopwords=info.get("stopwords", "en"),
        )
        self._validate_params()
        if _sparse_config(self.collection, self.vector_name) is None:
            raise ValueError(
                f"the Qdrant collection {self.collection.name!r} has no BM25 sparse vector {self.vector_name!r} "
                f"(recreated or edited since the state was saved?); "
                f"{_how_to_create(self.collection.name, self.vector_name)}, then refit()"
            )
        terms = [str(t) for t in info["vocab"]]
        avgdl = float(info["avgdl"])
        if len(set(terms)) != len(terms) or not avgdl > 0:
            raise ValueError("the saved BM25 vocabulary or avgdl is invalid")
        self.vocab_ = {t: c for c, t in enumerate(terms)}
        self.avgdl_ = avgdl
        self.n_fit_ = int(info["n_fit"])
        return self


class QdrantBM25Placement:
    """Fits and restores :class:`QdrantBM25` on a ``QdrantVectorStore`` (a
    :class:`~llama_index_carag.ranking.bm25.placement.BM25Placement`).

    Args:
        vector_store: the store.
        show_progress: a progress bar while fitting.
    """

    name = "qdrant"

    def __init__(self, vector_store: Any, *, show_progress: bool = False) -> None:
        self.vector_store = vector_store
        self.show_progress = show_progress

    def fit(self, exclude: frozenset[str]) -> QdrantBM25:
        return QdrantBM25(self.vector_store).fit(exclude, show_progress=self.show_progress)

    def restore(self, info: dict[str, Any]) -> QdrantBM25:
        return QdrantBM25.from_state(info, self.vector_store)
