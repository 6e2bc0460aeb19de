"""``carag index`` and ``carag demo``: build and save an index (from a CSV, or the packaged demo corpus and its tour)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from llama_index_carag.cli.check import _checker, _print_check
from llama_index_carag.cli.common import CLIError, _llm, _load_corpus, _setting_args


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
    model = resolve_embed_model(args.embed_model)
    index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=True)
    from llama_index_carag.settings import CaragSettings

    settings = CaragSettings.from_options(
        args.preset,
        mode=args.mode,
        random_state=args.seed,
        **_setting_args(args, alpha="alpha", delta="delta", similarity_top_k="k", n_clusters="clusters"),
    )
    fitted_at = time.perf_counter()
    retriever = ContextAwareRetriever.from_index(
        index,
        settings,
        claim_nodes=corpus.claim_nodes,
        show_progress=True,
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
    if getattr(args, "calibrate", False):
        from llama_index_carag.cli.index_verdicts import calibrate_verdicts

        calibrate_verdicts(args, corpus, retriever, out)
    print(
        f"indexed {len(corpus.evidence_nodes)} evidence passages and {len(corpus.claim_nodes)} claims "
        f"({args.mode}, {retriever.context.n_items_} items in {len(retriever.context.groups)} clusters) "
        f"into {out} in {time.perf_counter() - t0:.1f} s"
    )
    return 0


_FEVER_LABEL = {"T": "SUPPORTED", "F": "REFUTED", "N": "NOT_ENOUGH_INFO"}


def cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_carag.datasets import load_demo_corpus
    from llama_index_carag.models.resolve import resolve_embed_model
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.visualize import write_soi_html, write_soi_png

    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_demo_corpus()
    print(f"Demo corpus: {corpus.summary()}")
    model = resolve_embed_model("minilm")
    index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=True)
    carag_u = ContextAwareRetriever.from_index(
        index,
        "paper",
        mode="unsupervised",
        claim_nodes=corpus.claim_nodes,
        n_clusters=3,
        delta=0.5,
        alpha=0.5,
        show_progress=True,
    )
    carag_u.persist(out / "index", persist_index=True)
    llm = None if args.no_llm else _llm(args)
    claims = [corpus.claim_nodes[i] for i in (1, 8, 15)][: args.claims]
    agree = 0
    for claim in claims:
        print("\n" + "=" * 110)
        print(f"CLAIM {claim.node_id} (label {claim.metadata.get('label')}): {claim.text}")
        for name, alpha in (("RAG (alpha=1)", 1.0), ("CARAG-u (alpha=0.5)", 0.5)):
            with_llm = llm if (alpha == 0.5 or args.rag_verdicts) else None  # one verdict per claim by default
            result = _checker(carag_u.with_settings(alpha=alpha), with_llm).check(claim.text).to_json_dict()
            print(
                f"\n--- {name}"
                + ("" if with_llm is not None or llm is None else " (retrieval only; --rag-verdicts adds its verdict)")
            )
            _print_check(result)
            if alpha == 0.5 and result["verdict"] is not None:
                agree += result["verdict"]["label"] == _FEVER_LABEL.get(str(claim.metadata.get("label")))
    if llm is not None:
        print(f"\nCARAG-u verdicts agreeing with the demo corpus's labels: {agree} of {len(claims)}")
    soi = carag_u.build_soi(claims[0].text)
    html = write_soi_html(soi, out / "soi_graph.html")
    png = write_soi_png(soi, out / "soi_graph.png")
    print(f"\nSOI graph of {claims[0].node_id}: {html} and {png}")
    print(f'Index saved in {out / "index"}; try: carag check "<claim>" --index {out / "index"}')
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return 0
