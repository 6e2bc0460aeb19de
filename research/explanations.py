"""The explanations a thematic map draws: read from a CSV, projected together with the corpus.

An explanations file (``python -m research.thematic_maps --explanations``; the papers' ``paper_explanations.csv`` has this
layout) holds one row per claim: its ``Theme`` and one column per method (``Annotated``, ``RAG``,
``CARAG``, ``CARAG_U`` or any other name) with that method's explanation.  :func:`load_explanations`
reads it; :func:`project_2d` fits one PCA or t-SNE on the explanations' and the corpus's embeddings
together, so that the maps (:mod:`research.thematic_maps`) and the alignment table (:mod:`research.alignment`)
draw and score both in the same plane.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llama_index_carag.core.vectors import as_matrix

__all__ = ["EXPLANATION_METHODS", "PROJECTIONS", "ExplanationSet", "load_explanations", "project_2d"]

#: Method columns recognised in an explanations file.
EXPLANATION_METHODS = ("Annotated", "RAG", "CARAG", "CARAG_U")

#: The projections :func:`project_2d` fits.
PROJECTIONS = ("pca", "tsne")


@dataclass
class ExplanationSet:
    """Explanations of several methods for the same claims.

    Attributes:
        claim_ids, claims, themes: one entry per claim (rows with an empty claim are dropped).
        texts: method → one explanation per claim.
    """

    claim_ids: list[str]
    claims: list[str]
    themes: list[str]
    texts: dict[str, list[str]]

    @property
    def methods(self) -> list[str]:
        return list(self.texts)


def load_explanations(path: str | os.PathLike[str], methods: Sequence[str] | None = None) -> ExplanationSet:
    """Read an explanations CSV (``Theme`` + one column per method, e.g. the papers' file).

    Args:
        path: the CSV.
        methods: columns to keep (default: every recognised method column present).

    Raises:
        FileNotFoundError / ValueError: missing file, no ``Theme`` column, an
            unknown method, or a kept row with an empty explanation.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"No such explanations file: {file}")
    try:
        with file.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            reader.fieldnames = header
            rows = list(reader)
    except UnicodeDecodeError:
        raise ValueError(f"{file} is not UTF-8 text.") from None
    if "Theme" not in header:
        raise ValueError(f"{file} lacks the column Theme (it has: {', '.join(header) or 'no header'}).")
    present = [m for m in EXPLANATION_METHODS if m in header] + [
        h
        for h in header
        if h not in EXPLANATION_METHODS and h not in ("Theme", "Claim_id", "Claim_id_old", "Claim_text")
    ]
    chosen = list(methods) if methods else [m for m in present if m in EXPLANATION_METHODS]
    missing = [m for m in chosen if m not in header]
    if missing:
        raise ValueError(f"{file} has no column(s) {', '.join(missing)} (methods present: {', '.join(present)}).")
    kept = [r for r in rows if (r.get("Theme") or "").strip()]
    for r in kept:
        for m in chosen:
            if not (r.get(m) or "").strip():
                raise ValueError(f"{file}: claim {r.get('Claim_id')!r} has an empty {m} explanation.")
    return ExplanationSet(
        claim_ids=[(r.get("Claim_id") or "").strip() for r in kept],
        claims=[(r.get("Claim_text") or "").strip() for r in kept],
        themes=[r["Theme"].strip() for r in kept],
        texts={m: [r[m].strip() for r in kept] for m in chosen},
    )


def project_2d(
    corpus: np.ndarray,
    explanations: Mapping[str, np.ndarray],
    *,
    method: str = "pca",
    random_state: int = 0,
    perplexity: float = 30.0,
    n_components: int = 2,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Fit one projection on explanations and corpus together.

    Args:
        corpus: corpus embeddings, shape ``(n, d)``.
        explanations: method name → explanation embeddings, shape ``(m_i, d)``.
        method: ``"pca"`` or ``"tsne"``.
        random_state: t-SNE seed (PCA is deterministic).
        perplexity: t-SNE perplexity (capped below the number of points).
        n_components: 2 (the tables) or 3 (the 3-D view).

    Returns:
        ``(corpus_xy (n, k), {method: (m_i, k)})``; the explanation blocks are
        stacked first, in ``explanations`` order, then the corpus, before fitting.
    """
    if method not in PROJECTIONS:
        raise ValueError(f"method must be 'pca' or 'tsne'; got {method!r}.")
    corpus_m = as_matrix(corpus, name="corpus embeddings")
    blocks = {name: as_matrix(v, name=f"{name} explanation embeddings") for name, v in explanations.items()}
    dims = {corpus_m.shape[1], *(b.shape[1] for b in blocks.values() if b.shape[0])}
    if len(dims) != 1:
        raise ValueError(f"Explanations and corpus have different dimensions {sorted(dims)}.")
    stacked = np.vstack([*blocks.values(), corpus_m]).astype(np.float64)
    if stacked.shape[0] <= n_components:
        raise ValueError("Too few points to project.")
    if method == "pca":
        from sklearn.decomposition import PCA

        points = PCA(n_components=n_components).fit_transform(stacked)
    else:
        from sklearn.manifold import TSNE

        perp = min(perplexity, max(1.0, (stacked.shape[0] - 1) / 3.0))
        points = TSNE(n_components=n_components, random_state=random_state, perplexity=perp, init="pca").fit_transform(
            stacked
        )
    out: dict[str, np.ndarray] = {}
    start = 0
    for name, block in blocks.items():
        out[name] = points[start : start + block.shape[0]]
        start += block.shape[0]
    return points[start:], out
