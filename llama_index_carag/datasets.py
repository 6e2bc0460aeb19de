"""Loaders that turn claim/evidence tables into LlamaIndex ``TextNode``s.

:func:`load_factver` reads the FactVer CSV (or, online, the Hugging Face dataset
``manjuvallayil/factver_master``) and the package's demo corpus (same columns);
:func:`load_claim_evidence_csv` reads any CSV with one row per (claim, evidence) pair,
given its column names; a row with evidence and no claim is a library passage, and a row that links a
claim to a passage already read (same id and text) adds the link (``evidence_ids`` of the claim node; a
library passage takes the first claim that cites it as its ``claim_id``).
Both return a :class:`ClaimEvidenceCorpus`: evidence nodes (to index), claim nodes
(the context CARAG clusters with them) and the skipped rows with their reasons.  A CSV is read with clear errors:
its header and numbered rows (:func:`read_csv_records`), and the columns a loader needs (:func:`require_columns`).
Node ids are derived from the data: re-indexing a file gives the same ids.

The labels (``theme``, ``claim_id``, ``evidence_id``, ``label``, ``kind``) are
stored in node metadata **and excluded from both the embedding text and the
LLM text**: LlamaIndex embeds metadata with the text by default, which would
let an "unsupervised" method and every metric quietly see the answer.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from llama_index.core.schema import TextNode

from llama_index_carag.core.validation import sanitize_text

logger = logging.getLogger(__name__)

THEME_KEY = "theme"
CLAIM_KEY = "claim_id"
EVIDENCE_KEY = "evidence_id"
LABEL_KEY = "label"
KIND_KEY = "kind"
#: A claim node's linked evidence node ids (every passage a row links it to, shared passages included).
LINKS_KEY = "evidence_ids"
#: Metadata keys that carry annotations; never embedded, never shown to the LLM.
LABEL_METADATA_KEYS = [THEME_KEY, CLAIM_KEY, EVIDENCE_KEY, LABEL_KEY, KIND_KEY, LINKS_KEY]

#: FactVer's column names (v1.3 CSV), also used by the demo corpus.
FACTVER_COLUMNS = {
    "claim_id": "Claim_topic_id",
    "claim": "Claim_text",
    "evidence_id": "Evidence_topic_id",
    "evidence": "Evidence_text",
    "label": "Label",
}

_FACTVER_ID = re.compile(r"^Claims_(?P<theme>.+?)_(?P<team>[A-Za-z]_?\d[\d.]*|Demo)_(?P<n>\d+)$")
_HF_DATASET_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def factver_theme(claim_id: str) -> str:
    """Theme encoded in a FactVer claim id.

    ``Claims_<Theme>_<Team>_<n>``, where the theme may contain underscores:
    ``Claims_Electric_Vehicles_C_2.1_335`` → ``Electric_Vehicles``,
    ``Claims_Covid_B2.0_105`` → ``Covid``.  Ids of another shape fall back to
    their second ``_``-separated token.

    Raises:
        ValueError: the id has no theme part.
    """
    match = _FACTVER_ID.match(claim_id.strip())
    if match:
        return match.group("theme")
    parts = claim_id.strip().split("_")
    if len(parts) >= 2 and parts[1]:
        return parts[1]
    raise ValueError(f"Cannot read a theme from claim id {claim_id!r} (expected 'Claims_<Theme>_<Team>_<n>').")


@dataclass(frozen=True)
class SkippedRow:
    """A data row that was not indexed, and why (``line`` is the 1-based line of the CSV record)."""

    line: int
    reason: str
    evidence_id: str | None = None


@dataclass
class ClaimEvidenceCorpus:
    """Claims and evidence as LlamaIndex nodes, plus what was skipped.

    Attributes:
        evidence_nodes: one ``TextNode`` per indexed evidence row (id = evidence id).
        claim_nodes: one ``TextNode`` per claim (id = claim id); label = the
            majority of its rows' labels (ties: the first seen).
        skipped: rows not indexed, each with its reason.
        n_rows: data rows read.
        source: where the data came from.
    """

    evidence_nodes: list[TextNode]
    claim_nodes: list[TextNode]
    skipped: list[SkippedRow] = field(default_factory=list)
    n_rows: int = 0
    source: str = ""

    @property
    def themes(self) -> list[str]:
        """Sorted distinct themes of the claims (empty when the data has none)."""
        return sorted({str(n.metadata[THEME_KEY]) for n in self.claim_nodes if THEME_KEY in n.metadata})

    def claim(self, claim_id: str) -> TextNode:
        """The claim node with this id (``KeyError`` if absent)."""
        for node in self.claim_nodes:
            if node.node_id == claim_id:
                return node
        raise KeyError(claim_id)

    def summary(self) -> str:
        """One line: rows read, evidence indexed, claims, skipped rows by reason."""
        reasons = Counter(s.reason for s in self.skipped)
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) or "none"
        return (
            f"{self.n_rows} rows read: {len(self.evidence_nodes)} evidence passages indexed, "
            f"{len(self.claim_nodes)} claims, {len(self.skipped)} rows skipped ({skipped})"
        )


def _make_node(node_id: str, text: str, metadata: dict[str, Any]) -> TextNode:
    keys = list(metadata)
    return TextNode(
        id_=node_id,
        text=text,
        metadata=metadata,
        excluded_embed_metadata_keys=keys,
        excluded_llm_metadata_keys=keys,
    )


def _clean(value: Any) -> str:
    if value is None:
        return ""
    return " ".join(sanitize_text(str(value)).split())


def uuid_node_id(raw_id: str) -> str:
    """A stable UUID for a data id (``uuid5``), for stores that only accept UUID ids (Qdrant)."""
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, "llama-index-carag:" + raw_id))


def _stable_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{prefix}-{digest}"


@dataclass(frozen=True)
class _Columns:
    """Which columns of a record hold what (``None``: the data has no such column)."""

    claim: str
    evidence: str
    claim_id: str | None
    evidence_id: str | None
    label: str | None
    theme: str | None
    theme_from_claim_id: Callable[[str], str] | None


@dataclass(frozen=True)
class _RowFields:
    """One record's cleaned cells; ``claim_id`` falls back to a hash of a non-empty claim text."""

    claim_text: str
    evidence_text: str
    claim_id: str
    evidence_id: str
    label: str


def _cell(row: Mapping[str, Any], col: str | None) -> str:
    """Take a record and a column name (or ``None``); return the cleaned cell, ``""`` without a column."""
    return _clean(row.get(col)) if col else ""


def _read_row(row: Mapping[str, Any], cols: _Columns) -> _RowFields:
    """Take a record and its column layout; return its cleaned fields (pure)."""
    claim_text = _clean(row.get(cols.claim))
    claim_id = _cell(row, cols.claim_id) if claim_text else ""  # a library row names no claim
    if not claim_id and claim_text:
        claim_id = _stable_id("claim", claim_text)
    return _RowFields(
        claim_text=claim_text,
        evidence_text=_clean(row.get(cols.evidence)),
        claim_id=claim_id,
        evidence_id=_cell(row, cols.evidence_id),
        label=_cell(row, cols.label),
    )


def _row_theme(row: Mapping[str, Any], claim_id: str, cols: _Columns) -> str:
    """Take a record, its claim id and the column layout; return its theme.

    The theme column wins; otherwise the theme is derived from the claim id
    (``""`` when there is no deriver or it raises ``ValueError``).
    """
    theme = _cell(row, cols.theme)
    if not theme and cols.theme_from_claim_id is not None:
        try:
            theme = cols.theme_from_claim_id(claim_id)
        except ValueError:
            theme = ""
    return theme


def _evidence_metadata(claim_id: str, evidence_id: str, theme: str, label: str) -> dict[str, Any]:
    """Take an evidence row's ids, theme and label; return its node metadata (empty claim id/theme/label left out:
    a library passage has no claim)."""
    metadata: dict[str, Any] = {KIND_KEY: "evidence", EVIDENCE_KEY: evidence_id}
    if claim_id:
        metadata[CLAIM_KEY] = claim_id
    if theme:
        metadata[THEME_KEY] = theme
    if label:
        metadata[LABEL_KEY] = label
    return metadata


def _majority_label(labels: list[str]) -> str:
    """Take a non-empty list of labels; return the most frequent (ties: the first seen) (pure)."""
    counts = Counter(labels)
    best = max(counts.values())
    return next(lab for lab in labels if counts[lab] == best)


def _adopt(node: TextNode, claim_id: str, theme: str, label: str) -> None:
    """A library passage (no ``claim_id``) linked by a claim row takes that claim as its own (what supervised
    CARAG reads as annotated evidence); a passage that has a claim keeps it.  New keys stay out of the texts."""
    if CLAIM_KEY in node.metadata:
        return
    for key, value in _evidence_metadata(claim_id, "", theme, label).items():
        if value and key not in node.metadata:
            node.metadata[key] = value
            node.excluded_embed_metadata_keys.append(key)
            node.excluded_llm_metadata_keys.append(key)


def _claim_node(claim_id: str, info: Mapping[str, Any]) -> TextNode:
    """Take a claim id and its collected ``text``/``theme``/``labels``; return the claim node."""
    metadata: dict[str, Any] = {KIND_KEY: "claim", CLAIM_KEY: claim_id}
    if info["theme"]:
        metadata[THEME_KEY] = info["theme"]
    if info["labels"]:
        metadata[LABEL_KEY] = _majority_label(info["labels"])
    if info["links"]:
        metadata[LINKS_KEY] = list(info["links"])
    return _make_node(claim_id, info["text"], metadata)


def _check_disjoint_ids(evidence_nodes: list[TextNode], claim_nodes: list[TextNode]) -> None:
    """Take the evidence and claim nodes; raise ``ValueError`` if a claim id is also an evidence node id."""
    evidence_ids = {n.node_id for n in evidence_nodes}
    clash = [n.node_id for n in claim_nodes if n.node_id in evidence_ids]
    if clash:
        raise ValueError(f"Claim ids and evidence ids overlap (e.g. {clash[0]!r}); ids must be unique across both.")


class _CorpusBuilder:
    """Accumulates records, in order, into evidence nodes, claims and skipped rows."""

    def __init__(self, cols: _Columns, uuid_ids: bool) -> None:
        self.cols = cols
        self.uuid_ids = uuid_ids
        self.evidence_nodes: list[TextNode] = []
        self.skipped: list[SkippedRow] = []
        self.seen_evidence: dict[str, str] = {}
        self.evidence_at: dict[str, TextNode] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.n_rows = 0

    def add(self, line: int, row: Mapping[str, Any]) -> None:
        """Take a record and its 1-based line; index its evidence or record why it was skipped."""
        self.n_rows += 1
        fields = _read_row(row, self.cols)
        if not fields.claim_text:  # a passage of the evidence library, checked for no claim
            if fields.evidence_text:
                self._add_evidence(line, fields, _cell(row, self.cols.theme))
            else:
                self.skipped.append(SkippedRow(line, "empty row", fields.evidence_id or None))
            return
        theme = _row_theme(row, fields.claim_id, self.cols)
        info = self.claims.setdefault(
            fields.claim_id, {"text": fields.claim_text, "theme": theme, "labels": [], "links": [], "first_line": line}
        )
        if info["text"] != fields.claim_text:
            self.skipped.append(
                SkippedRow(line, "claim id reused for a different claim text", fields.evidence_id or None)
            )
            return
        if fields.label:
            info["labels"].append(fields.label)
        if not fields.evidence_text:
            self.skipped.append(SkippedRow(line, "empty evidence text, its claim kept", fields.evidence_id or None))
            return
        self._add_evidence(line, fields, theme)

    def _add_evidence(self, line: int, fields: _RowFields, theme: str) -> None:
        """Take a row with an evidence text; add its evidence node unless its id was seen, and link its claim
        (a passage seen before, same id and text, is linked to this row's claim too: not a duplicate)."""
        evidence_id = fields.evidence_id or _stable_id("evidence", fields.claim_id, fields.evidence_text)
        node_id = uuid_node_id(evidence_id) if self.uuid_ids else evidence_id
        links = self.claims[fields.claim_id]["links"] if fields.claim_text else None
        if evidence_id in self.seen_evidence:
            same = self.seen_evidence[evidence_id] == fields.evidence_text
            if same and links is not None and node_id not in links:
                links.append(node_id)
                _adopt(self.evidence_at[evidence_id], fields.claim_id, theme, fields.label)
                return
            reason = "duplicate row" if same else "evidence id reused for a different text"
            self.skipped.append(SkippedRow(line, reason, evidence_id))
            return
        self.seen_evidence[evidence_id] = fields.evidence_text
        metadata = _evidence_metadata(fields.claim_id, evidence_id, theme, fields.label)
        self.evidence_at[evidence_id] = _make_node(node_id, fields.evidence_text, metadata)
        self.evidence_nodes.append(self.evidence_at[evidence_id])
        if links is not None:
            links.append(node_id)

    def claim_nodes(self) -> list[TextNode]:
        """Return one node per claim seen, in first-seen order."""
        return [_claim_node(claim_id, info) for claim_id, info in self.claims.items()]


def _build_corpus(
    records: Iterable[tuple[int, Mapping[str, Any]]],
    *,
    claim_col: str,
    evidence_col: str,
    claim_id_col: str | None,
    evidence_id_col: str | None,
    label_col: str | None,
    theme_col: str | None,
    theme_from_claim_id: Callable[[str], str] | None,
    source: str,
    uuid_ids: bool = False,
) -> ClaimEvidenceCorpus:
    """Take ``(line, record)`` pairs and their column names; return the corpus (logged at INFO).

    Raises:
        ValueError: claim ids and evidence node ids overlap.
    """
    cols = _Columns(claim_col, evidence_col, claim_id_col, evidence_id_col, label_col, theme_col, theme_from_claim_id)
    builder = _CorpusBuilder(cols, uuid_ids)
    for line, row in records:
        builder.add(line, row)
    claim_nodes = builder.claim_nodes()
    _check_disjoint_ids(builder.evidence_nodes, claim_nodes)
    corpus = ClaimEvidenceCorpus(builder.evidence_nodes, claim_nodes, builder.skipped, builder.n_rows, source)
    logger.info("%s: %s", source, corpus.summary())
    return corpus


def read_csv_records(path: Path, encoding: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header (names stripped) and ``(line, row)`` of every data row of the CSV file ``path``, NULs removed.

    Raises:
        ValueError: a directory, undecodable bytes or a malformed CSV, with where and what to do.
    """
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not a CSV file.") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} is not valid {encoding} text (byte {exc.start}: {raw[exc.start : exc.start + 4]!r}); "
            "re-save it as UTF-8 or pass encoding=..."
        ) from None
    text = text.replace("\x00", "")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fieldnames = [f.strip() for f in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise ValueError(f"{path} is not a readable CSV file ({exc}).") from None
    reader.fieldnames = fieldnames
    records: list[tuple[int, dict[str, str]]] = []
    try:
        for row in reader:
            records.append((reader.line_num, row))
    except csv.Error as exc:
        raise ValueError(f"{path}: malformed CSV near line {reader.line_num} ({exc}).") from None
    return fieldnames, records


def require_columns(fieldnames: list[str], needed: dict[str, str | None], source: str) -> None:
    """Raise ``ValueError`` naming the columns of ``needed`` (option -> column, ``None``: not asked) ``source`` lacks."""
    missing = [col for col in needed.values() if col and col not in fieldnames]
    if missing:
        have = ", ".join(fieldnames) if fieldnames else "no header"
        raise ValueError(f"{source} lacks column(s) {', '.join(missing)} (it has: {have}).")


def load_claim_evidence_csv(
    path: str | os.PathLike[str],
    *,
    claim_col: str = "claim",
    evidence_col: str = "evidence",
    claim_id_col: str | None = None,
    evidence_id_col: str | None = None,
    label_col: str | None = None,
    theme_col: str | None = None,
    theme_from_claim_id: Callable[[str], str] | None = None,
    encoding: str = "utf-8-sig",
    uuid_ids: bool = False,
) -> ClaimEvidenceCorpus:
    """Read a CSV with one row per (claim, evidence) pair.

    Args:
        path: the CSV file.
        claim_col, evidence_col: columns holding the claim text and evidence text.
        claim_id_col, evidence_id_col: id columns; when absent, ids are a hash of
            the text, so they stay stable across re-indexing of the same file.
        label_col: verdict label column (e.g. T/F/N), optional.
        theme_col: theme column, optional (needed for supervised CARAG).
        theme_from_claim_id: derive the theme from the claim id when there is no theme column.
        encoding: text encoding of the file.
        uuid_ids: give evidence nodes a stable UUID id (``uuid5`` of the evidence
            id, which stays in metadata ``evidence_id``), as Qdrant requires.

    Returns:
        the corpus; rows with an empty evidence text, duplicated rows and ids
        reused for different texts are listed in ``skipped`` with their reason.  Each claim
        node lists its linked evidence in ``metadata["evidence_ids"]`` (a passage may be linked
        to several claims; the passage's own ``claim_id`` is the first).

    Raises:
        FileNotFoundError: no such file.
        ValueError: missing columns, undecodable bytes or malformed CSV.
    """
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"No such CSV file: {file}")
    fieldnames, records = read_csv_records(file, encoding)
    needed: dict[str, Any] = {
        "claim_col": claim_col,
        "evidence_col": evidence_col,
        "claim_id_col": claim_id_col,
        "evidence_id_col": evidence_id_col,
        "label_col": label_col,
        "theme_col": theme_col,
    }
    require_columns(fieldnames, needed, str(file))
    return _build_corpus(
        records, **needed, theme_from_claim_id=theme_from_claim_id, source=str(file), uuid_ids=uuid_ids
    )


def _load_hf_rows(dataset_id: str) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"{dataset_id!r} is not a file; loading it as a Hugging Face dataset needs "
            "`pip install datasets` and network access."
        ) from None
    try:
        table = datasets.load_dataset(dataset_id, split="train")
    except Exception as exc:  # network errors, missing dataset: one clear message
        raise ValueError(f"Could not load the Hugging Face dataset {dataset_id!r}: {exc}") from None
    rows = [(i + 2, dict(r)) for i, r in enumerate(table)]
    return list(table.column_names), rows


def load_factver(path_or_dataset_id: str | os.PathLike[str], *, uuid_ids: bool = False) -> ClaimEvidenceCorpus:
    """Load FactVer (v1.3 CSV layout) or any file in its layout, such as the demo corpus.

    Args:
        path_or_dataset_id: a CSV path (e.g. ``../shared/data/factver/factver_master.csv``)
            or, when online, the Hugging Face dataset id ``manjuvallayil/factver_master``.

    Returns:
        a :class:`ClaimEvidenceCorpus` whose nodes carry metadata ``theme``
        (from ``Claim_topic_id``: ``Climate``, ``Covid``, ``Electric_Vehicles``),
        ``claim_id``, ``evidence_id``, ``label`` and ``kind``, all excluded from
        embedding and LLM text.  Rows with empty evidence are skipped and counted.
        ``uuid_ids=True`` gives evidence nodes UUID ids (for Qdrant).
    """
    source = os.fspath(path_or_dataset_id)
    cols = FACTVER_COLUMNS
    layout: dict[str, Any] = {
        "claim_col": cols["claim"],
        "evidence_col": cols["evidence"],
        "claim_id_col": cols["claim_id"],
        "evidence_id_col": cols["evidence_id"],
        "label_col": cols["label"],
        "theme_from_claim_id": factver_theme,
    }
    if Path(source).exists() or not _HF_DATASET_ID.match(source):
        return load_claim_evidence_csv(source, **layout, uuid_ids=uuid_ids)
    fieldnames, records = _load_hf_rows(source)
    require_columns(fieldnames, dict(cols), source)
    return _build_corpus(records, **layout, theme_col=None, source=source, uuid_ids=uuid_ids)


def demo_corpus_path() -> Path:
    """Path of the demo corpus shipped in the package (FactVer's column layout)."""
    return Path(str(resources.files("llama_index_carag").joinpath("data/demo_corpus.csv")))


def load_demo_corpus() -> ClaimEvidenceCorpus:
    """The package's own small demo corpus (3 themes), loaded like FactVer."""
    return load_factver(demo_corpus_path())
