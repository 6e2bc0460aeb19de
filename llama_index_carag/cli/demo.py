"""``carag demo``: the packaged demo corpus indexed, RAG and CARAG-u compared on one claim of each label, the
verdicts reported per label, and the SOI graph of the first claim drawn with its evidence and stances.

One claim of each label (SUPPORTED, REFUTED, NOT_ENOUGH_INFO), not three of one: an LLM that leans to one
label gets one of three by its lean alone, so the per-label report shows what the verdicts are worth.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index_carag.cli.check import _index_checker, _print_check, check_one
from llama_index_carag.cli.common import _llm, _stages
from llama_index_carag.cli.index import fit_verifier
from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)

#: The labels, in the order the demo takes its claims.


def _label(node: Any) -> str | None:
    """A claim node's label as a full name (``"T"`` → ``"SUPPORTED"``), or ``None`` when it has none."""
    from llama_index_carag.verdicts.types import VerdictLabel

    raw = node.metadata.get("label")
    try:
        return None if raw is None else VerdictLabel.from_fever(str(raw)).value
    except ValueError:
        return None


def demo_claims(claims: Sequence[Any], n: int) -> list[Any]:
    """``n`` claims taking turns by label (:data:`LABELS`), each from a theme not shown yet while one is left.

    Within a label, claims keep the corpus order; a label with no claim left is skipped.
    """
    pools = {label: [c for c in claims if _label(c) == label] for label in LABELS}
    chosen: list[Any] = []
    while len(chosen) < n and any(pools.values()):
        for label in LABELS:
            pool = pools[label]
            if not pool or len(chosen) >= n:
                continue
            seen = {c.metadata.get("theme") for c in chosen}
            pick = next((c for c in pool if c.metadata.get("theme") not in seen), pool[0])
            pool.remove(pick)
            chosen.append(pick)
    return chosen


def label_report(checked: Iterable[tuple[str, str | None, str | None]]) -> list[str]:
    """Lines of the per-label agreement: ``checked`` holds ``(claim id, corpus label, verdict label)``."""
    rows: dict[str, list[tuple[str, str | None]]] = {}
    for claim_id, gold, said in checked:
        rows.setdefault(gold or "unlabelled", []).append((claim_id, said))
    lines = []
    for gold in [*LABELS, *sorted(set(rows) - set(LABELS))]:
        if gold not in rows:
            continue
        right = sum(said == gold for _, said in rows[gold])
        said = ", ".join(f"{claim_id}: {label or 'no verdict'}" for claim_id, label in rows[gold])
        lines.append(f"  {gold:<16} {right} of {len(rows[gold])} right  ({said})")
    return lines


def _fit_demo(out: Path, stages: Any) -> tuple[Any, Any]:
    """The demo corpus and its CARAG-u retriever (the papers' preset, 3 clusters, δ 0.5), saved in ``out/index``."""
    from llama_index_carag.datasets import load_demo_corpus
    from llama_index_carag.models.resolve import resolve_embed_model
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    corpus = load_demo_corpus()
    print(f"Demo corpus: {corpus.summary()}")
    with stages.stage("loading the encoder (minilm)"):
        model = resolve_embed_model("minilm")
    with stages.stage("indexing the demo corpus"):
        index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=not stages.quiet)
        carag_u = ContextAwareRetriever.from_index(
            index,
            "paper",
            mode="unsupervised",
            claim_nodes=corpus.claim_nodes,
            n_clusters=3,
            delta=0.5,
            alpha=0.5,
            show_progress=not stages.quiet,
        )
    carag_u.persist(out / "index", persist_index=True)
    with stages.stage("the domain check of the verifier"):
        fit_verifier(corpus, carag_u, out / "index")
    return corpus, carag_u


def _compare(carag_u: Any, claim: Any, llm: Any, args: argparse.Namespace, stages: Any) -> dict[str, Any]:
    """RAG and CARAG-u on one claim, printed; CARAG-u's result (with its verdict when there is an LLM)."""
    print("\n" + "=" * 110)
    print(f"CLAIM {claim.node_id} (label {_label(claim) or '-'}): {claim.text}")
    result: dict[str, Any] = {}
    for name, alpha in (("RAG (alpha=1)", 1.0), ("CARAG-u (alpha=0.5)", 0.5)):
        with_llm = llm if (alpha == 0.5 or args.rag_verdicts) else None  # one verdict per claim by default
        checker = _index_checker(str(Path(args.out) / "index"), carag_u.with_settings(alpha=alpha), with_llm)
        result = check_one(checker, claim.text, stages, say_retrieving=False)
        skipped = with_llm is None and llm is not None
        print(f"\n--- {name}" + (" (retrieval only; --rag-verdicts adds its verdict)" if skipped else ""))
        _print_check(result)
    return result


def _draw(out: Path, claim: Any, result: dict[str, Any]) -> tuple[Path, Path]:
    """The SOI graph of ``claim``'s CARAG-u check, with its evidence (ranks, stances) and empty-SOI reason."""
    from llama_index_carag.core.soi import SubsetOfInterest
    from llama_index_carag.visualize import write_soi_html, write_soi_png

    soi = SubsetOfInterest.from_dict(result["soi"])
    reason = (result["soi"].get("empty_reason") or {}).get("text")
    evidence = result["evidence"]
    html = write_soi_html(soi, out / "soi_graph.html", evidence=evidence, empty_reason=reason)
    png = write_soi_png(soi, out / "soi_graph.png", evidence=evidence, empty_reason=reason)
    return html, png


def _verifier_accuracy(retriever: Any, claims: Sequence[Any], index_dir: Path, stages: Any) -> str:
    """The index's verifier on every labelled demo claim (CARAG-u's evidence, no explanation): accuracy, the
    per-label report, and the mean confidence of its right and its wrong labels."""
    from llama_index_carag.verifier.model import index_verifier, shipped_verifier

    labelled = [c for c in claims if _label(c) is not None]
    verifier = index_verifier(index_dir) or shipped_verifier()
    with stages.stage(f"the verifier on all {len(labelled)} labelled demo claims"):
        evidence = [[n.node.get_content() for n in retriever.retrieve(c.text)] for c in labelled]
        found = [verifier.label(c.text, texts) for c, texts in zip(labelled, evidence)]
    said = [f.label for f in found]
    right = sum(s == _label(c) for c, s in zip(labelled, said))
    lines = [
        f"The verifier on all {len(labelled)} labelled demo claims: {right} of {len(labelled)} right "
        f"(accuracy {right / max(len(labelled), 1):.2f})"
    ]
    for kind, keep in (("right", True), ("wrong", False)):
        sure = [f.confidence or 0.0 for f, c in zip(found, labelled) if (f.label == _label(c)) == keep]
        if sure:
            lines.append(f"  mean confidence of its {len(sure)} {kind} labels: {sum(sure) / len(sure):.0%}")
    counts = {k: sum(_label(c) == k for c in labelled) for k in LABELS}
    lines += [
        f"  {k:<16} {sum(s == k and _label(c) == k for c, s in zip(labelled, said))} of {counts[k]} right"
        for k in LABELS
        if counts[k]
    ]
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = _stages(args)
    corpus, carag_u = _fit_demo(out, stages)
    llm = None if args.no_llm else _llm(args, stages)
    claims = demo_claims(corpus.claim_nodes, args.claims)
    results = [_compare(carag_u, claim, llm, args, stages) for claim in claims]
    if llm is not None:
        checked = [(c.node_id, _label(c), (r["verdict"] or {}).get("label")) for c, r in zip(claims, results)]
        print("\nCARAG-u verdicts against the demo corpus's labels, per label (a model that always gives the")
        print("same label gets the claims of that label right and no other):")
        print("\n".join(label_report(checked)))
    print(
        "\n" + _verifier_accuracy(carag_u, corpus.claim_nodes, out / "index", stages)
    )  # no LLM needed: also with --no-llm
    html, png = _draw(out, claims[0], results[0])
    print(f"\nSOI graph of {claims[0].node_id}: {html} and {png}")
    print(f'Index saved in {out / "index"}; try: carag check "<claim>" --index {out / "index"}')
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return 0
