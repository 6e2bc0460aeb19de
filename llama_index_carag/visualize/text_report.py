"""A checked text as a report: the text with each claim highlighted by its verdict (Markdown or HTML).

* :func:`markdown_report` — each claim in bold with a label tag and a footnote: explanation and evidence.
* :func:`html_report` — one self-contained page (no script, no external file); each claim is a
  ``<details class="claim ...">`` coloured by its verdict (green SUPPORTED, red REFUTED, grey
  NOT_ENOUGH_INFO, dashed without a verdict) that opens its explanation, evidence with stances and SOI size;
  a claim whose check failed is tagged ``NOT_CHECKED`` with its error.
* :func:`write_text_report` — either one, chosen by the file's suffix.

Security: the text, claims, explanations, ids and passages come from the open web; every one of them
is passed through :func:`html.escape` (HTML) or has its Markdown characters escaped before this module
adds its own tags.
"""

from __future__ import annotations

import html
import logging
import re
from pathlib import Path
from typing import Any

from llama_index_carag.core.atomic import atomic_write_text
from llama_index_carag.verdicts.bulk import FailedTextClaim, TextCheckResult, TextClaim, TextOutcome
from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)

#: Report formats by file suffix.
REPORT_SUFFIXES = (".md", ".html", ".htm")

#: The tag of a claim checked without a verdict.
NO_VERDICT = "NO_VERDICT"

#: The tag of a claim whose check failed.
NOT_CHECKED = "NOT_CHECKED"

#: Evidence ids a claim's summary names.
TOP_EVIDENCE = 3

_SOI_KEYS = ("annotated_evidences", "related_claims", "thematic_cluster_evidences", "refined_cluster_evidences")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|])")
_LINE_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


def soi_size(claim: TextClaim) -> int:
    """How many items the claim's Subset of Interest holds."""
    return sum(len(claim.check.soi.get(key) or ()) for key in _SOI_KEYS)


def top_evidence_ids(claim: TextClaim, n: int = TOP_EVIDENCE) -> list[str]:
    """The passages the verdict cites, else the best retrieved ones (at most ``n``)."""
    verdict = claim.check.verdict
    cited = list(verdict.evidence_ids) if verdict is not None else []
    return (cited or [row.id for row in claim.check.evidence])[:n]


def _tag(claim: TextOutcome) -> str:
    if isinstance(claim, FailedTextClaim):
        return NOT_CHECKED
    return claim.label or NO_VERDICT


def _explanation(claim: TextOutcome) -> str:
    if isinstance(claim, FailedTextClaim):
        return f"the check failed ({claim.error.code}): {claim.error.message}"
    verdict = claim.check.verdict
    return "no verdict (checked without an LLM)" if verdict is None else verdict.explanation


def _md(text: str) -> str:
    """``text`` with Markdown's special characters escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _pieces(result: TextCheckResult) -> list[tuple[str, TextOutcome | None]]:
    """The text cut at the claims' spans: ``(piece, claim or None)`` in order, concatenating to the text."""
    pieces: list[tuple[str, TextOutcome | None]] = []
    cursor = 0
    outcomes: list[TextOutcome] = [*result.claims, *result.failed]
    for claim in sorted(outcomes, key=lambda c: c.start):
        if claim.start < cursor:  # overlapping spans: keep the text whole, tag the claim once
            continue
        pieces.append((result.text[cursor : claim.start], None))
        pieces.append((result.text[claim.start : claim.end], claim))
        cursor = claim.end
    pieces.append((result.text[cursor:], None))
    return [(text, claim) for text, claim in pieces if text or claim is not None]


def _summary_line(result: TextCheckResult) -> str:
    s = result.summary
    labels = ", ".join(f"{s.labels.get(label, 0)} {label}" for label in LABELS)
    extra = f", {s.without_verdict} without a verdict" if s.without_verdict else ""
    extra += f", {s.failed} not checked (the check failed)" if s.failed else ""
    return f"{s.claims} claims in {s.sentences} sentences: {labels}{extra}"


def markdown_report(result: TextCheckResult, *, title: str = "Fact check") -> str:
    """The text in Markdown, each claim bold with its label tag and a footnote (explanation, evidence)."""
    body: list[str] = []
    notes: list[str] = []
    for piece, claim in _pieces(result):
        if claim is None:
            body.append(_md(piece))
            continue
        n = len(notes) + 1
        body.append(f"**{_md(piece)}** `[{_tag(claim)}]`[^{n}]")
        note = f"[^{n}]: **{_tag(claim)}** — {_md(_explanation(claim))}"
        if isinstance(claim, TextClaim):
            evidence = ", ".join(_md(i) for i in top_evidence_ids(claim)) or "none"
            note += f" Evidence: {evidence}. SOI: {soi_size(claim)} items."
        notes.append(note)
    head = f"# {_md(title)}\n\n{_summary_line(result)}\n\n"
    text = _LINE_BREAK.sub("\\\\\n", "".join(body).rstrip())  # a line break of the text stays one
    return head + text + "\n\n" + "\n\n".join(notes) + ("\n" if notes else "")


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; line-height: 1.6; color: #222; }
.text { white-space: pre-wrap; }
details.claim { display: inline; border-radius: 3px; padding: 0 2px; }
details.claim > summary { display: inline; cursor: pointer; list-style: none; }
details.claim > summary::-webkit-details-marker { display: none; }
details.claim > .why { display: block; white-space: normal; margin: .4rem 0 .8rem; padding: .5rem .8rem;
  background: #fafafa; border-left: 4px solid #999; font-size: .92em; }
.supported { background: #d6f5d6; } .supported > .why { border-color: #2e8b2e; }
.refuted { background: #f9d4d4; } .refuted > .why { border-color: #c0392b; }
.not_enough_info { background: #e4e4e4; } .not_enough_info > .why { border-color: #777; }
.no_verdict, .not_checked { border-bottom: 2px dashed #999; }
.tag { font-size: .75em; font-weight: 600; margin-left: .3em; }
""".strip()


def _marked(text: str, excerpt: str | None) -> str:
    """A passage as HTML, escaped, the excerpt its stance was read from (whitespace collapsed, as an evidence row
    gives it) in ``<mark>``; the passage as it stands when it has none."""
    plain = " ".join(text.split())
    at = plain.find(excerpt) if excerpt else -1
    if not excerpt or at < 0:
        return html.escape(text)
    marked = f"<mark>{html.escape(excerpt)}</mark>"
    return html.escape(plain[:at]) + marked + html.escape(plain[at + len(excerpt) :])


def _html_details(claim: TextOutcome, piece: str) -> str:
    """One claim: the highlighted span that opens its explanation, evidence and SOI size."""
    tag = _tag(claim)
    if isinstance(claim, FailedTextClaim):
        return (
            f'<details class="claim {tag.lower()}"><summary>{html.escape(piece)}<span class="tag">[{tag}]</span>'
            f'</summary><div class="why"><p><b>{tag}</b>: {html.escape(_explanation(claim))}</p></div></details>'
        )
    rows = "".join(
        f"<li><code>{html.escape(row.id)}</code>"
        + (f" — {html.escape(row.stance)}" if row.stance else "")
        + ("" if row.stance_score is None else f" {row.stance_score:.2f}")
        + f": {_marked(row.text, row.stance_excerpt)}</li>"
        for row in claim.check.evidence
    )
    cited = ", ".join(html.escape(i) for i in top_evidence_ids(claim))
    return (
        f'<details class="claim {tag.lower()}"><summary>{html.escape(piece)}'
        f'<span class="tag">[{tag}]</span></summary><div class="why">'
        f"<p><b>{tag}</b>: {html.escape(_explanation(claim))}</p>"
        f"<p>Top evidence: {cited or 'none'}. SOI: {soi_size(claim)} items "
        f"(of {html.escape(str(claim.check.soi.get('cluster_size', '?')))} in the claim's cluster).</p>"
        f"<ol>{rows}</ol></div></details>"
    )


def html_report(result: TextCheckResult, *, title: str = "Fact check") -> str:
    """One self-contained HTML page: the text with each claim highlighted by its verdict."""
    body = "".join(
        html.escape(piece) if claim is None else _html_details(claim, piece) for piece, claim in _pieces(result)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(_summary_line(result))}</p>"
        f'<div class="text">{body}</div></body></html>\n'
    )


def write_text_report(result: TextCheckResult, path: str | Path, **kwargs: Any) -> Path:
    """Write the Markdown (``.md``) or HTML (``.html``/``.htm``) report of ``result`` to ``path``.

    Raises:
        ValueError: the suffix is neither.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise ValueError(f"report {path}: the file must end in .md or .html; got {suffix or 'no suffix'!r}.")
    text = markdown_report(result, **kwargs) if suffix == ".md" else html_report(result, **kwargs)
    atomic_write_text(path, text)
    logger.info("report written to %s", path)
    return path
