"""``carag check`` and ``carag chat``: one check of a claim against an index, and how it is printed."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from llama_index_carag.cli.common import _llm, _load_retriever
from llama_index_carag.verdicts.labels.domain_prior import index_prior


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


_SOI_SHORT = {
    "annotated_evidences": "annotated",
    "related_claims": "related",
    "thematic_cluster_evidences": "thematic",
    "refined_cluster_evidences": "refined",
}


def _print_evidence(rows: list[dict[str, Any]]) -> None:
    import shutil

    width = max(100, shutil.get_terminal_size((120, 24)).columns)
    id_width = min(40, max([len(r["id"]) for r in rows] + [2]))
    print(
        f"{'#':>2} {'score':>6} {'clu':>3} {'sim(q)':>6} {'sim(T)':>6} {'in SOI':<9} {'stance':<13} "
        f"{'id':<{id_width}} evidence"
    )
    for row in rows:
        info = row["carag"]
        kind = _SOI_SHORT.get(info.get("soi_kind") or "", "-") if info.get("in_soi") else "-"
        text = textwrap.shorten(" ".join(row["text"].split()), width=max(30, width - 52 - id_width))
        print(
            f"{row['rank']:>2} {_fmt(row['score']):>6} {info.get('cluster')!s:>3} {_fmt(info.get('claim_similarity')):>6} "
            f"{_fmt(info.get('thematic_similarity')):>6} {kind:<9} {_stance(row):<13} "
            f"{textwrap.shorten(row['id'], id_width, placeholder='…'):<{id_width}} {text}"
        )


#: How a passage's stance is shown in the table.
_STANCE_SHORT = {"SUPPORTED": "supports", "REFUTED": "refutes", "NOT_ENOUGH_INFO": "neither"}


def _stance(row: dict[str, Any]) -> str:
    """``"supports 0.91"`` / ``"refutes 0.64"`` / ``"neither 0.55"``, or ``"-"`` when not scored."""
    stance = row.get("stance")
    if not stance:
        return "-"
    score = row.get("stance_score")
    return _STANCE_SHORT.get(stance, stance.lower()) + ("" if score is None else f" {score:.2f}")


def _checker(retriever: Any, llm: Any | None, domain_prior: Any = None) -> Any:
    """The :class:`~llama_index_carag.verdicts.checker.ClaimChecker` of ``carag check`` and ``carag chat``.

    ``domain_prior``: the index's fitted ``DomainLabelPrior`` for ``llm`` (``carag calibrate-verdicts``), or ``None``.
    """
    from llama_index_carag.verdicts.checker import ClaimChecker
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    synthesizer = (
        None if llm is None else FactCheckSynthesizer(llm, embed_model=retriever.embed_model, domain_prior=domain_prior)
    )
    return ClaimChecker(retriever, synthesizer)


def _print_cited(verdict: dict[str, Any], evidence: list[dict[str, Any]]) -> None:
    """The passages the explanation cites, with their text, under the verdict."""
    numbers = verdict.get("cited_passages") or [
        row["rank"] for row in evidence if row["id"] in set(verdict.get("evidence_ids") or [])
    ]
    rows = {row["rank"]: row for row in evidence}
    for n in numbers:
        if n in rows:
            text = textwrap.shorten(" ".join(rows[n]["text"].split()), width=150)
            print(f"  cited [{n}] {rows[n]['id']}: {text}")
    if verdict.get("invalid_citations"):
        print(f"  (removed citations to passages that were not shown: {verdict['invalid_citations']})")


def _print_check(result: dict[str, Any]) -> None:
    verdict, soi, s = result["verdict"], result["soi"], result["settings"]
    print(f"Claim: {result['claim']}")
    if verdict is not None:
        note = "" if verdict["parsed"] else "  (no label found in the model's answer)"
        print(f"Verdict: {verdict['label']}{note}")
        print(f"Explanation: {verdict['explanation']}")
        if verdict.get("decision"):
            print(
                f"Decided by: {verdict['decision']}"
                + (f" ({verdict['decision_reason']})" if verdict.get("decision_reason") else "")
            )
        _print_cited(verdict, result["evidence"])
    size = sum(
        len(soi[k])
        for k in ("annotated_evidences", "related_claims", "thematic_cluster_evidences", "refined_cluster_evidences")
    )
    print(
        f"Retrieval: {s['mode']} alpha={s['alpha']} delta={s['delta']} k={s['similarity_top_k']}; "
        f"claim cluster {soi['cluster']}"
        + (f" (theme {soi['theme']})" if soi.get("theme") else "")
        + f"; SOI {size} of {soi['cluster_size']} cluster items"
        + (" -> empty, searched with the claim vector alone" if size == 0 else "")
    )
    _print_evidence(result["evidence"])


def cmd_check(args: argparse.Namespace) -> int:
    retriever = _load_retriever(args)
    llm = None if args.no_llm else _llm(args)
    prior = None if llm is None else index_prior(args.index, llm)
    result = _checker(retriever, llm, prior).check(args.claim).to_json_dict()
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_check(result)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from llama_index_carag.verdicts.chat import FactCheckChatBot

    retriever = _load_retriever(args)
    llm = _llm(args)
    FactCheckChatBot(_checker(retriever, llm, index_prior(args.index, llm)), llm).repl()
    return 0
