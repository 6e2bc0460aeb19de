"""Lexical candidates: a BM25 index over the evidence, built and persisted beside the vector index.

BM25 is `bm25s <https://github.com/xhluca/bm25s>`_ with the tokenisation of LlamaIndex's own
``llama-index-retrievers-bm25`` integration (``BM25Retriever``): English stop words removed, the
Snowball English stemmer (PyStemmer), token pattern ``(?u)\\b\\w\\w+\\b``, text =
``node.get_content(MetadataMode.EMBED)`` (so label metadata excluded from embeddings is excluded
here too).  Unlike ``BM25Retriever.persist`` it does not save a second copy of every node: the
state is the sparse score matrix (``.npy``, no pickle) and the node ids: :meth:`LexicalIndex.get_state`
gives it as JSON plus arrays for the retriever's atomic state (:meth:`LexicalIndex.persist` writes a
folder of its own, the layout of states saved before).

One :meth:`LexicalIndex.query` call scores every passage once; the top ``n`` come from it and
so do the lexical scores of candidates found by the dense search, at no extra cost.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

logger = logging.getLogger(__name__)

__all__ = ["LexicalIndex", "LexicalHits", "TOKEN_PATTERN", "IDS_FILE", "import_bm25s"]

#: The token pattern of ``llama-index-retrievers-bm25``.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
#: The file of a :meth:`LexicalIndex.persist` folder that lists its node ids.
IDS_FILE = "carag_lexical_ids.json"
_FORMAT = 1


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
        all_scores: the BM25 score of every indexed passage, shape ``(N,)`` (row order of
            :attr:`LexicalIndex.ids_`); look candidates up with :meth:`LexicalIndex.lookup`.
    """

    ids: list[str]
    scores: np.ndarray
    all_scores: np.ndarray


class LexicalIndex:
    """BM25 over evidence passages (scikit-learn style: configure, :meth:`fit`, then query).

    Args:
        language: stemmer language for PyStemmer (``None``: no stemming).
        stopwords: stop-word list name for bm25s (``"en"``) or ``None``.
        k1, b: BM25 parameters (bm25s defaults 1.5, 0.75).

    Attributes (after :meth:`fit`):
        ids_: node ids in row order.
        bm25_: the ``bm25s.BM25`` model.
    """

    def __init__(
        self, *, language: str | None = "english", stopwords: str | None = "en", k1: float = 1.5, b: float = 0.75
    ) -> None:
        if not (isinstance(k1, (int, float)) and k1 > 0) or not (isinstance(b, (int, float)) and 0 <= b <= 1):
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1; got k1={k1!r}, b={b!r}.")
        self.language = language
        self.stopwords = stopwords
        self.k1 = float(k1)
        self.b = float(b)
        self._lock = threading.Lock()
        self._stemmer = None

    # ------------------------------------------------------------- building
    def _stem(self):  # the stemmer is not thread-safe to build lazily twice; cheap to keep
        if self.language is None:
            return None
        if self._stemmer is None:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.language)
        return self._stemmer

    def fit(self, nodes: Sequence[BaseNode], *, show_progress: bool = False) -> LexicalIndex:
        """Index the passages' text.

        Args:
            nodes: evidence nodes (their ``MetadataMode.EMBED`` content is indexed).

        Raises:
            ValueError: no nodes, or duplicated node ids.
        """
        from llama_index.core.schema import MetadataMode

        nodes = list(nodes)
        if not nodes:
            raise ValueError("LexicalIndex.fit needs at least one node.")
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("LexicalIndex.fit: duplicated node ids.")
        return self.fit_texts(
            ids, [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes], show_progress=show_progress
        )

    def fit_texts(self, ids: Sequence[str], texts: Sequence[str], *, show_progress: bool = False) -> LexicalIndex:
        """Index ``texts`` under ``ids`` (same length)."""
        bm25s = import_bm25s()

        if len(ids) != len(texts) or not ids:
            raise ValueError(f"LexicalIndex.fit_texts: {len(ids)} ids for {len(texts)} texts.")
        tokens = bm25s.tokenize(
            list(texts),
            stopwords=self.stopwords,
            stemmer=self._stem(),
            token_pattern=TOKEN_PATTERN,
            show_progress=show_progress,
        )
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(tokens, show_progress=show_progress)
        with self._lock:
            self.bm25_ = model
            self.ids_ = [str(i) for i in ids]
            self._row_of = {node_id: r for r, node_id in enumerate(self.ids_)}
        logger.debug("BM25 index: %d passages, %d terms.", len(ids), len(model.vocab_dict))
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "bm25_"):
            raise RuntimeError("LexicalIndex is not fitted; call fit(nodes) first.")

    def __len__(self) -> int:
        return len(getattr(self, "ids_", ()))

    # -------------------------------------------------------------- queries
    def tokenize(self, text: str) -> list[str]:
        """The query's tokens as the index sees them (stemmed; stop words kept, as BM25Retriever does)."""
        import bm25s

        out = bm25s.tokenize(
            [text],
            stopwords=None,
            stemmer=self._stem(),
            token_pattern=TOKEN_PATTERN,
            show_progress=False,
            return_ids=False,
        )
        return list(out[0]) if out else []

    def all_scores(self, query_str: str) -> np.ndarray:
        """BM25 score of every indexed passage for the query, shape ``(N,)`` float32 (zeros if no term matches)."""
        self._check_fitted()
        model = self.bm25_
        ids = model.get_tokens_ids(self.tokenize(query_str))
        if not ids:
            return np.zeros(len(self.ids_), dtype=np.float32)
        return np.asarray(model.get_scores_from_ids(ids), dtype=np.float32)

    def query(self, query_str: str, n: int) -> LexicalHits:
        """The top ``n`` passages (positive scores only) and every passage's score."""
        scores = self.all_scores(query_str)
        n = min(int(n), scores.shape[0])
        if n <= 0:
            return LexicalHits([], np.zeros(0, np.float32), scores)
        top = np.argpartition(-scores, n - 1)[:n] if n < scores.shape[0] else np.arange(scores.shape[0])
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[scores[top] > 0]
        return LexicalHits([self.ids_[r] for r in top], scores[top], scores)

    def lookup(self, hits: LexicalHits, node_ids: Sequence[str]) -> np.ndarray:
        """The BM25 scores of ``node_ids`` from ``hits``, shape ``(k,)`` (0 for ids not indexed)."""
        rows = self._row_of
        return np.array([hits.all_scores[rows[i]] if i in rows else 0.0 for i in node_ids], dtype=np.float32)

    # ------------------------------------------------------------ persistence
    def persist(self, folder: str | os.PathLike[str]) -> Path:
        """Save under ``folder`` (bm25s's own ``.npy``/JSON files, no pickle, plus the node ids)."""
        self._check_fitted()
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        self.bm25_.save(str(path), allow_pickle=False, show_progress=False)
        meta = {"format": _FORMAT, "ids": self.ids_, "language": self.language, "stopwords": self.stopwords}
        atomic_write_text(path / IDS_FILE, json.dumps(meta))
        return path

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(info, arrays)``: the node ids and settings as JSON, bm25s's own saved files as arrays
        (its ``.npy`` files as they are, its JSON files as UTF-8 bytes, ``uint8``)."""
        self._check_fitted()
        files: dict[str, dict[str, Any]] = {}
        arrays: dict[str, np.ndarray] = {}
        with tempfile.TemporaryDirectory(prefix="carag-bm25-") as tmp:
            self.bm25_.save(tmp, allow_pickle=False, show_progress=False)
            for path in sorted(Path(tmp).iterdir()):
                name = re.sub(r"\W", "_", path.name)
                npy = path.suffix == ".npy"
                arrays[name] = (
                    np.load(path, allow_pickle=False)
                    if npy
                    else np.frombuffer(path.read_bytes(), dtype=np.uint8).copy()
                )
                files[name] = {"file": path.name, "npy": npy}
        info = {
            "format": _FORMAT,
            "ids": self.ids_,
            "language": self.language,
            "stopwords": self.stopwords,
            "files": files,
        }
        return info, arrays

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> LexicalIndex:
        """The index :meth:`get_state` described (bm25s reloads its own files from a scratch folder).

        Raises:
            ValueError / KeyError: the info and arrays do not belong together.
        """
        with tempfile.TemporaryDirectory(prefix="carag-bm25-") as tmp:
            for name, meta in info["files"].items():
                file_name = str(meta["file"])
                if Path(file_name).name != file_name or file_name.startswith("."):
                    raise ValueError(f"Bad BM25 file name {file_name!r} in the saved state.")
                target = Path(tmp) / file_name
                if meta["npy"]:
                    np.save(target, arrays[name], allow_pickle=False)
                else:
                    target.write_bytes(np.asarray(arrays[name], dtype=np.uint8).tobytes())
            meta_file = {k: info[k] for k in ("format", "ids", "language", "stopwords") if k in info}
            (Path(tmp) / IDS_FILE).write_text(json.dumps(meta_file), encoding="utf-8")
            return cls.from_persist_dir(tmp)

    @classmethod
    def from_persist_dir(cls, folder: str | os.PathLike[str]) -> LexicalIndex:
        """Reload a :meth:`persist` folder.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the files do not belong together.
        """
        bm25s = import_bm25s()

        path = Path(folder)
        if not (path / IDS_FILE).is_file():
            raise FileNotFoundError(f"No lexical index in {path} ({IDS_FILE} is missing).")
        try:
            meta = json.loads((path / IDS_FILE).read_text(encoding="utf-8"))
            ids = [str(i) for i in meta["ids"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path / IDS_FILE} is corrupt ({exc}).") from None
        model = bm25s.BM25.load(str(path), load_corpus=False, allow_pickle=False)
        self = cls(
            language=meta.get("language", "english"), stopwords=meta.get("stopwords", "en"), k1=model.k1, b=model.b
        )
        if int(model.scores["num_docs"]) != len(ids):
            raise ValueError(
                f"The lexical index in {path} scores {model.scores['num_docs']} passages but lists {len(ids)} ids."
            )
        self.bm25_, self.ids_ = model, ids
        self._row_of = {node_id: r for r, node_id in enumerate(ids)}
        return self
