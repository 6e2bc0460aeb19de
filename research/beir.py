"""Read a retrieval benchmark in BEIR's layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/*.tsv``).

BEIR (Thakur et al., 2021) is the common format of public retrieval benchmarks; SciFact,
FEVER, Climate-FEVER and others are published in it.  :func:`load_beir` returns the
documents as LlamaIndex ``TextNode``s (text = ``title + " " + text``, as BEIR and MTEB
index them) and the queries with their graded relevance judgements.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core.schema import TextNode

from llama_index_carag.core.validation import sanitize_text

logger = logging.getLogger(__name__)

__all__ = ["BeirDataset", "load_beir"]


@dataclass
class BeirDataset:
    """Documents, queries and relevance judgements of a BEIR folder.

    Attributes:
        documents: one ``TextNode`` per document (``id_`` = the corpus ``_id``).
        queries: query id → query text (every query of ``queries.jsonl``).
        qrels: split name (``"train"``, ``"dev"``, ``"test"``) → query id → {document id: grade > 0}.
        source: the folder read.
    """

    documents: list[TextNode]
    queries: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    source: str = ""

    def split(self, name: str) -> dict[str, dict[str, int]]:
        """The judgements of one split (``KeyError`` with the available names if absent)."""
        if name not in self.qrels:
            raise KeyError(f"{self.source} has no qrels/{name}.tsv; it has {sorted(self.qrels) or 'none'}.")
        return self.qrels[name]


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not a JSON object ({exc.msg}).") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise ValueError(f"{path}:{line_no}: each line must be a JSON object with an '_id'.")
            rows.append(row)
    return rows


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for line_no, line in enumerate(fh, 1):
            parts = line.rstrip("\r\n").split("\t")
            if line_no == 1 and parts and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
                continue  # header
            if len(parts) < 3:
                if line.strip():
                    raise ValueError(f"{path}:{line_no}: expected 'query-id<TAB>corpus-id<TAB>score'.")
                continue
            try:
                grade = int(float(parts[2]))
            except ValueError:
                raise ValueError(f"{path}:{line_no}: score {parts[2]!r} is not a number.") from None
            if grade > 0:
                out.setdefault(parts[0].strip(), {})[parts[1].strip()] = grade
    return out


def load_beir(folder: str | os.PathLike[str]) -> BeirDataset:
    """Load a BEIR-format folder.

    Args:
        folder: holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

    Raises:
        FileNotFoundError: a required file is missing.
        ValueError: a malformed line (with its file and line number).
    """
    root = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (root / name).is_file():
            raise FileNotFoundError(f"{root} is not a BEIR folder: {name} is missing.")
    documents = []
    for row in _read_jsonl(root / "corpus.jsonl"):
        title = sanitize_text(str(row.get("title") or "")).strip()
        body = sanitize_text(str(row.get("text") or "")).strip()
        text = f"{title} {body}".strip()
        if not text:
            logger.warning("BEIR document %r is empty; skipped.", row["_id"])
            continue
        documents.append(TextNode(id_=str(row["_id"]), text=text, metadata={}))
    queries = {
        str(r["_id"]): sanitize_text(str(r.get("text") or "")).strip() for r in _read_jsonl(root / "queries.jsonl")
    }
    qrels = (
        {p.stem: _read_qrels(p) for p in sorted((root / "qrels").glob("*.tsv"))} if (root / "qrels").is_dir() else {}
    )
    logger.info("BEIR %s: %d documents, %d queries, qrels %s", root, len(documents), len(queries), sorted(qrels))
    return BeirDataset(documents=documents, queries=queries, qrels=qrels, source=str(root))
