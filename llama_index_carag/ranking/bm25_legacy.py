"""BM25 indexes saved by earlier versions (format 1: bm25s's precomputed scores), read and queried as they are.

Those states hold bm25s's score matrix, not term counts, so they cannot be edited in O(batch):
:class:`FrozenLexicalIndex` scores with the saved bm25s model (the results those versions gave),
refuses :meth:`~FrozenLexicalIndex.add` / :meth:`~FrozenLexicalIndex.remove`, and saves itself in
the same format; the lexical table refits it from the stored text on the first edit.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write_text
from llama_index_carag.ranking.bm25 import IDS_FILE, LegacyLexicalState, LexicalIndex, import_bm25s

__all__ = ["FrozenLexicalIndex"]

_FORMAT = 1


class FrozenLexicalIndex(LexicalIndex):
    """A format-1 BM25 index (a ``bm25s.BM25`` model and its node ids), read-only.

    Attributes:
        bm25_: the ``bm25s.BM25`` model.
    """

    bm25_: Any

    def _check_fitted(self) -> None:
        if not hasattr(self, "bm25_"):
            raise RuntimeError("FrozenLexicalIndex is loaded with from_state / from_persist_dir only.")

    @property
    def ids_(self) -> list[str]:
        return list(self._row_ids)

    def _score(self, query_str: str) -> tuple[np.ndarray, list[str], dict[str, int]]:
        self._check_fitted()
        model = self.bm25_
        ids = model.get_tokens_ids(self.tokenize(query_str))
        if not ids:
            return np.zeros(len(self._row_ids), dtype=np.float32), self._row_ids, self._row_of
        return np.asarray(model.get_scores_from_ids(ids), dtype=np.float32), self._row_ids, self._row_of

    def add_texts(self, ids: Sequence[str], texts: Sequence[str]) -> int:
        raise LegacyLexicalState("a BM25 index of an earlier version cannot be edited; refit it")

    def remove(self, node_ids: Sequence[str]) -> int:
        raise LegacyLexicalState("a BM25 index of an earlier version cannot be edited; refit it")

    def merge(self) -> None:
        raise LegacyLexicalState("a BM25 index of an earlier version cannot be merged; refit it")

    def persist(self, folder: str | os.PathLike[str]) -> Path:
        """Save under ``folder`` (bm25s's own ``.npy``/JSON files, no pickle, plus the node ids)."""
        self._check_fitted()
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        self.bm25_.save(str(path), allow_pickle=False, show_progress=False)
        meta = {"format": _FORMAT, "ids": self._row_ids, "language": self.language, "stopwords": self.stopwords}
        atomic_write_text(path / IDS_FILE, json.dumps(meta))
        return path

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(info, arrays)`` as format 1 wrote them: bm25s's ``.npy`` files as they are, its JSON files
        as UTF-8 bytes (``uint8``)."""
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
        info = {"format": _FORMAT, "ids": self._row_ids, "language": self.language, "stopwords": self.stopwords}
        return {**info, "files": files}, arrays

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> FrozenLexicalIndex:
        """The format-1 index :meth:`get_state` described (bm25s reloads its own files from a scratch folder).

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
    def from_persist_dir(cls, folder: str | os.PathLike[str]) -> FrozenLexicalIndex:
        """Reload a format-1 folder (bm25s's files and the node ids).

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
        self.bm25_, self._row_ids = model, ids
        self._row_of = {node_id: r for r, node_id in enumerate(ids)}
        return self
