"""``carag index``: build and save an index from a CSV (``carag demo`` is :mod:`~llama_index_carag.cli.demo`).

Without ``--calibrate`` the shipped verifier gets the domain check (:mod:`~llama_index_carag.verifier.domain`:
thresholds from the corpus's claims, no labels).  With ``--calibrate`` the index is fitted to its archive: the
retrieval weights (by the retriever), then the claim verifier on the corpus claims that carry a verdict label,
each with the passages the retriever gives it (:func:`~llama_index_carag.verifier.archive.fit_index_verifier`:
the domain check, a head or a fine-tune, kept only where it wins out of fold).  Either is saved in the index
folder, where ``carag check``, ``check-text``, ``serve`` and ``chat`` find it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from llama_index_carag.cli.common import CLIError, _load_corpus, _setting_args


def cmd_index(args: argparse.Namespace) -> int:
    from llama_index_carag.models.resolve import resolve_embed_model
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.force:
        raise CLIError(f"{out} is not empty; pass --force to overwrite it")
    corpus = _load_corpus(args.data, args)
    print(corpus.summary())
    for skipped in corpus.skipped[: args.show_skipped]:
        print(
            f"  skipped line {skipped.line}: {skipped.reason}"
            + (f" ({skipped.evidence_id})" if skipped.evidence_id else "")
        )
    if not corpus.evidence_nodes:
        raise CLIError("no evidence to index")
    t0 = time.perf_counter()
    quiet = bool(getattr(args, "quiet", False))  # -q: no progress bars either
    model = resolve_embed_model(args.embed_model)
    docstore = _open_docstore(getattr(args, "docstore", None), out, force=args.force)
    index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=not quiet, docstore=docstore)
    from llama_index_carag.settings import CaragSettings

    settings = CaragSettings.from_options(
        args.preset,
        mode=args.mode,
        random_state=args.seed,
        **_setting_args(
            args, alpha="alpha", delta="delta", soi_min_size="soi_min_size", similarity_top_k="k", n_clusters="clusters"
        ),
    )
    fitted_at = time.perf_counter()
    retriever = ContextAwareRetriever.from_index(
        index,
        settings,
        claim_nodes=corpus.claim_nodes,
        show_progress=not quiet,
        calibrate=getattr(args, "calibrate", False),
    )
    calibration = retriever.corpus.calibration
    if calibration is not None:
        fit_s = time.perf_counter() - fitted_at - calibration.seconds
        print(
            f"calibration: {calibration.reason}; weights {calibration.weights} (preset "
            f"{calibration.summary()['base_weights']}); {calibration.n_claims} linked claims, leave-one-out "
            f"nDCG@10 {calibration.base_ndcg:.4f} -> {calibration.ndcg:.4f}, out-of-fold gain "
            f"{calibration.cv_gain:+.4f}; {calibration.seconds:.1f} s (fit {fit_s:.1f} s)"
        )
    retriever.persist(out, persist_index=True)
    _fit_verifier(corpus, retriever, out, args)
    print(
        f"indexed {len(corpus.evidence_nodes)} evidence passages and {len(corpus.claim_nodes)} claims "
        f"({args.mode}, {retriever.context.n_items_} items in {len(retriever.context.groups)} clusters) "
        f"into {out} in {time.perf_counter() - t0:.1f} s"
    )
    return 0


def _fit_verifier(corpus: Any, retriever: Any, out: Path, args: argparse.Namespace) -> None:
    """The verdict half of the index (:func:`~llama_index_carag.verifier.archive.fit_index_verifier`: the archive
    fit with ``--calibrate``, else the domain check), one line on it; the suggested labels."""
    fit_verifier(corpus, retriever, out, calibrate=getattr(args, "calibrate", False))
    if getattr(args, "suggest_labels", None):
        suggest(corpus, retriever, out, args.suggest_labels)


def _open_docstore(spec: str | None, out: Path, *, force: bool) -> Any:
    """The docstore of ``--docstore`` (:func:`~llama_index_carag.stores.docstores.open_docstore`); one that holds
    nodes already is emptied with ``--force``, else refused."""
    from llama_index_carag.stores.docstores import clear_docstore, docstore_node_ids, open_docstore

    try:
        store = open_docstore(spec, out)
    except (ValueError, ImportError) as exc:
        raise CLIError(f"--docstore: {exc}") from None
    held = docstore_node_ids(store)
    if held:
        if not force:
            raise CLIError(f"--docstore {spec} holds {len(held)} nodes already; pass --force to replace them")
        clear_docstore(store)
    return store


def fit_verifier(corpus: Any, retriever: Any, out: Path, *, calibrate: bool = False) -> None:
    """Fit and save the index's verifier (:func:`~llama_index_carag.verifier.archive.fit_index_verifier`); one
    line on it."""
    from llama_index_carag.verifier.archive import fit_index_verifier
    from llama_index_carag.verifier.domain import MIN_CLAIMS

    record = fit_index_verifier(retriever, corpus.claim_nodes, out, calibrate=calibrate)
    if record is None:
        n = len(corpus.claim_nodes)
        print(f"verifier: shipped thresholds ({n} corpus claims; the domain check needs {MIN_CLAIMS})")
    elif record["kind"] == "archive":
        print(_verifier_line(record))
    else:
        lean = record["lean"]
        print(
            f"verifier: domain check on {record['claims']} corpus claims (no labels): the shipped threshold would "
            f"call {lean['SUPPORTED']:.0%} SUPPORTED, {lean['REFUTED']:.0%} REFUTED; thresholds now "
            f"{record['supported']:.2f} (SUPPORTED) / {record['refuted']:.2f} (REFUTED); {record['seconds']:.0f} s"
        )


#: Where ``--suggest-labels`` writes its list, in the index folder.
SUGGESTED_LABELS = "suggested_labels.csv"


def suggest(corpus: Any, retriever: Any, out: Path, n: int) -> None:
    """``--suggest-labels N``: the N unlabelled corpus claims to label first
    (:func:`~llama_index_carag.verifier.suggest.suggest_labels`), printed and written to ``out/suggested_labels.csv``
    with an empty ``label`` column."""
    import csv

    from llama_index.core.schema import QueryBundle

    from llama_index_carag.verifier.archive import labelled_claims
    from llama_index_carag.verifier.suggest import suggest_labels

    labelled = {node.node_id for node, _ in labelled_claims(corpus.claim_nodes)}
    todo = []
    for node in corpus.claim_nodes:
        if node.node_id not in labelled:
            soi, found = retriever.retrieve_with_soi(QueryBundle(node.get_content()))
            todo.append((node.node_id, node.get_content(), soi.cluster, [n.node.get_content() for n in found]))
    if not todo:
        print("suggest-labels: every corpus claim has a label already")
        return
    chosen = suggest_labels(todo, n)
    with open(out / SUGGESTED_LABELS, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["claim_id", "claim", "cluster", "entropy", "label"])
        writer.writerows([s.claim_id, s.claim, s.cluster, f"{s.entropy:.3f}", ""] for s in chosen)
    print(f"label these {len(chosen)} claims first (the verifier is torn on them; spread over the clusters):")
    for s in chosen:
        print(f"  {s.claim_id}  [cluster {s.cluster}, entropy {s.entropy:.2f}]  {s.claim}")
    print(f"written to {out / SUGGESTED_LABELS} (fill in the label column: T, F or N)")


#: How the line names the archive fit's candidates for people ("shipped" there is the out-of-the-box verifier).
_CANDIDATE_NAMES = {"shipped": "out of the box"}


def _verifier_line(record: dict[str, Any]) -> str:
    """One line on the archive verifier: what was kept, each candidate's macro-F1 on the archive (out of the box as
    deployed, the others out of fold), in how many bootstrap resamples each costlier one beat the one kept before
    it, the fine-tune's linked-evidence check, the cost."""

    def named(candidate: str) -> str:
        return _CANDIDATE_NAMES.get(candidate, candidate)

    found = record.get("candidates") or {}
    scores = ", ".join(
        f"{named(name)} {c['macro_f1']:.3f}" for name, c in found.items() if isinstance(c, dict) and "macro_f1" in c
    )
    why = record.get("why", f"macro-F1 on the archive {scores}" if scores else "")
    shares = ", ".join(
        f"{named(name)} over {named(c['against']['kept'])} in {c['against']['gain_share']:.0%}"
        for name, c in found.items()
        if isinstance(c, dict) and "against" in c
    )
    if shares:
        why += f"; ahead in bootstrap resamples of the claims: {shares} (a gain must hold in {record['bootstrap']['level']:.0%})"
    linked = (found.get("fine-tune") or {}).get("linked") or {}
    if linked.get("passed") is not None:
        verdict = "passed" if linked["passed"] else "failed"
        why += (
            f"; linked evidence S-vs-R AUC: fine-tune {linked['fine_tune_auc']:.3f} against shipped "
            f"{linked['shipped_auc']:.3f} ({verdict})"
        )
    return (
        f"verifier: {named(record['choice'])} kept ({record['claims']} labelled claims with evidence; {why}); "
        f"{record['seconds']:.0f} s"
    )
