"""The ``carag`` command: index, check, graph, map, chat, demo, eval, paper-table, serve.

User mistakes (bad paths, bad values, missing columns, a state that does not
match its index, …) print one line ``carag: error: …`` and exit with status 2;
``--debug`` (or ``CARAG_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


# ------------------------------------------------------------------ helpers
def _offline_defaults() -> None:
    # Model names resolve to packaged weights; a hub name must fail fast, not hang.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _quiet_libraries() -> None:
    # Our own bars (embedding, clustering) stay; the weight-loading bars of transformers go.
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


def _clusters(value: str) -> int | str:
    if value == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--clusters must be a positive integer or 'auto', not {value!r}") from None


def _unit_float(name: str, low: float, high: float) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            out = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, not {value!r}") from None
        if not low <= out <= high:
            raise argparse.ArgumentTypeError(f"{name} must be in [{low:g}, {high:g}], not {value}")
        return out

    return parse


def _positive_int(name: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            out = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {value!r}") from None
        if out < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, not {value}")
        return out

    return parse


def _load_corpus(path: str, args: argparse.Namespace) -> Any:
    from llama_index_carag.datasets import load_claim_evidence_csv, load_factver

    if getattr(args, "claim_col", None) or getattr(args, "evidence_col", None):
        return load_claim_evidence_csv(
            path,
            claim_col=args.claim_col or "claim",
            evidence_col=args.evidence_col or "evidence",
            claim_id_col=args.claim_id_col,
            evidence_id_col=args.evidence_id_col,
            label_col=args.label_col,
            theme_col=args.theme_col,
        )
    return load_factver(path)


def _load_retriever(args: argparse.Namespace) -> Any:
    from llama_index_carag.retriever import ContextAwareRetriever

    folder = Path(args.index)
    if not folder.is_dir():
        raise CLIError(f"no index at {folder} (build one with: carag index DATA.csv --out {folder})")
    retriever = ContextAwareRetriever.from_persist_dir(folder, embed_model=getattr(args, "embed_model", None))
    changes = _setting_args(args, alpha="alpha", delta="delta", similarity_top_k="k")
    return retriever.with_settings(**changes) if changes else retriever


def _setting_args(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """``{settings field: value}`` of the command-line arguments that were given (``field=arg name``)."""
    return {field: getattr(args, arg) for field, arg in names.items() if getattr(args, arg, None) is not None}


def _llm(args: argparse.Namespace) -> Any:
    from llama_index_carag.models import resolve_llm

    return resolve_llm(None if args.llm in (None, "default") else args.llm)


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
    print(f"{'#':>2} {'score':>6} {'clu':>3} {'sim(q)':>6} {'sim(T)':>6} {'in SOI':<9} {'id':<{id_width}} evidence")
    for row in rows:
        info = row["carag"]
        kind = _SOI_SHORT.get(info.get("soi_kind") or "", "-") if info.get("in_soi") else "-"
        text = textwrap.shorten(" ".join(row["text"].split()), width=max(30, width - 40 - id_width))
        print(
            f"{row['rank']:>2} {_fmt(row['score']):>6} {info.get('cluster')!s:>3} {_fmt(info.get('claim_similarity')):>6} "
            f"{_fmt(info.get('thematic_similarity')):>6} {kind:<9} {textwrap.shorten(row['id'], id_width, placeholder='…'):<{id_width}} {text}"
        )


# ----------------------------------------------------------------- commands
def cmd_index(args: argparse.Namespace) -> int:
    from llama_index_carag.indexing import build_faiss_index
    from llama_index_carag.models import resolve_embed_model
    from llama_index_carag.retriever import ContextAwareRetriever

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.force:
        raise CLIError(f"{out} is not empty; pass --force to overwrite it")
    corpus = _load_corpus(args.data, args)
    print(corpus.summary())
    for skipped in corpus.skipped[: args.show_skipped]:
        print(f"  skipped line {skipped.line}: {skipped.reason}" + (f" ({skipped.evidence_id})" if skipped.evidence_id else ""))
    if not corpus.evidence_nodes:
        raise CLIError("no evidence to index")
    t0 = time.perf_counter()
    model = resolve_embed_model(args.embed_model)
    index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=True)
    from llama_index_carag.settings import CaragSettings

    settings = CaragSettings.from_options(
        args.preset, mode=args.mode, random_state=args.seed,
        **_setting_args(args, alpha="alpha", delta="delta", similarity_top_k="k", n_clusters="clusters"),
    )
    retriever = ContextAwareRetriever.from_index(index, settings, claim_nodes=corpus.claim_nodes, show_progress=True)
    retriever.persist(out, persist_index=True)
    print(
        f"indexed {len(corpus.evidence_nodes)} evidence passages and {len(corpus.claim_nodes)} claims "
        f"({args.mode}, {retriever.context.n_items_} items in {len(retriever.context.groups)} clusters) "
        f"into {out} in {time.perf_counter() - t0:.1f} s"
    )
    return 0


def _check_result(retriever: Any, claim: str, llm: Any | None) -> dict[str, Any]:
    """One check as the versioned JSON of :class:`~llama_index_carag.checking.CheckResult` (shared with the HTTP API)."""
    from llama_index_carag.checking import check_claim
    from llama_index_carag.synthesizer import FactCheckSynthesizer

    synthesizer = None if llm is None else FactCheckSynthesizer(llm)
    return check_claim(retriever, claim, synthesizer).to_json_dict()


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
        _print_cited(verdict, result["evidence"])
    size = sum(len(soi[k]) for k in ("annotated_evidences", "related_claims", "thematic_cluster_evidences", "refined_cluster_evidences"))
    print(
        f"Retrieval: {s['mode']} alpha={s['alpha']} delta={s['delta']} k={s['k']}; "
        f"claim cluster {soi['cluster']}" + (f" (theme {soi['theme']})" if soi.get("theme") else "")
        + f"; SOI {size} of {soi['cluster_size']} cluster items"
        + (" -> empty, searched with the claim vector alone" if size == 0 else "")
    )
    _print_evidence(result["evidence"])


def cmd_check(args: argparse.Namespace) -> int:
    retriever = _load_retriever(args)
    llm = None if args.no_llm else _llm(args)
    result = _check_result(retriever, args.claim, llm)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_check(result)
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    from llama_index_carag._validation import check_query_text
    from llama_index_carag.visualize import write_cluster_png, write_soi_html, write_soi_png

    if not (args.html or args.png or args.cluster_png):
        raise CLIError("give at least one of --html, --png, --cluster-png")
    check_query_text(args.claim, "claim")
    retriever = _load_retriever(args)
    soi = retriever.build_soi(args.claim)
    written = []
    if args.html:
        written.append(write_soi_html(soi, args.html))
    if args.png:
        written.append(write_soi_png(soi, args.png))
    if args.cluster_png:
        members = retriever.context.members((soi.theme, soi.cluster))
        kinds = ["claim" if c else "evidence" for c in members.is_claim]
        texts = [members.texts[i] for i in range(len(members.ids))]
        written.append(
            write_cluster_png(
                list(members.ids), texts, members.unit, kinds, args.cluster_png,
                threshold=args.edge_threshold, highlight=set(soi.item_ids),
            )
        )
    print(f"SOI of {len(soi)} items (cluster {soi.cluster}); wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_map(args: argparse.Namespace) -> int:
    import numpy as np

    from llama_index_carag.evaluation.alignment import project_2d
    from llama_index_carag.evaluation.paper import load_explanations
    from llama_index_carag.stores import get_node_embeddings
    from llama_index_carag.visualize import save_figure, thematic_map, thematic_map_3d, thematic_panels

    retriever = _load_retriever(args)
    expl = load_explanations(args.explanations, args.methods.split(",") if args.methods else None)
    index = retriever.index
    ids, vectors = get_node_embeddings(index)
    nodes = index.docstore.get_nodes(ids)
    themes = [n.metadata.get(retriever.theme_key) for n in nodes]
    keep = [i for i, t in enumerate(themes) if t in set(expl.themes)]
    if not keep:
        raise CLIError(f"no evidence in the index has one of the explanation themes {sorted(set(expl.themes))}")
    corpus, corpus_themes = vectors[keep], [themes[i] for i in keep]
    model = retriever.embed_model
    embedded = {m: np.asarray(model.get_text_embedding_batch(t, show_progress=True)) for m, t in expl.texts.items()}
    corpus_xy, xy = project_2d(corpus, embedded, method=args.method, random_state=args.seed)
    points = {m: (xy[m], expl.themes) for m in embedded}
    title = f"Explanations over theme densities ({args.method.upper()}, seed {args.seed})"
    written = [save_figure(thematic_map(corpus_xy, corpus_themes, points, title=title), args.out)]
    if args.panels:
        written.append(save_figure(thematic_panels(corpus_xy, corpus_themes, points, title=title), args.panels))
    if args.map3d:
        corpus_xyz, xyz = project_2d(corpus, embedded, method="pca", n_components=3)
        fig = thematic_map_3d(corpus_xyz, corpus_themes, {m: (xyz[m], expl.themes) for m in embedded}, title="3-D PCA")
        written.append(save_figure(fig, args.map3d))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from llama_index_carag.chat import FactCheckChatBot

    retriever = _load_retriever(args)
    FactCheckChatBot(retriever, _llm(args)).repl()
    return 0


_FEVER_LABEL = {"T": "SUPPORTED", "F": "REFUTED", "N": "NOT_ENOUGH_INFO"}


def cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_carag.datasets import load_demo_corpus
    from llama_index_carag.indexing import build_faiss_index
    from llama_index_carag.models import resolve_embed_model
    from llama_index_carag.retriever import ContextAwareRetriever
    from llama_index_carag.visualize import write_soi_html, write_soi_png

    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_demo_corpus()
    print(f"Demo corpus: {corpus.summary()}")
    model = resolve_embed_model("minilm")
    index = build_faiss_index(corpus.evidence_nodes, model, id_map=True, show_progress=True)
    carag_u = ContextAwareRetriever.from_index(
        index, "paper", mode="unsupervised", claim_nodes=corpus.claim_nodes, n_clusters=3, delta=0.5, alpha=0.5,
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
            result = _check_result(carag_u.with_settings(alpha=alpha), claim.text, with_llm)
            print(f"\n--- {name}" + ("" if with_llm is not None or llm is None else " (retrieval only; --rag-verdicts adds its verdict)"))
            _print_check(result)
            if alpha == 0.5 and result["verdict"] is not None:
                agree += result["verdict"]["label"] == _FEVER_LABEL.get(str(claim.metadata.get("label")))
    if llm is not None:
        print(f"\nCARAG-u verdicts agreeing with the demo corpus's labels: {agree} of {len(claims)}")
    soi = carag_u.build_soi(claims[0].text)
    html = write_soi_html(soi, out / "soi_graph.html")
    png = write_soi_png(soi, out / "soi_graph.png")
    print(f"\nSOI graph of {claims[0].node_id}: {html} and {png}")
    print(f"Index saved in {out / 'index'}; try: carag check \"<claim>\" --index {out / 'index'}")
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_paper_table(args: argparse.Namespace) -> int:
    from llama_index_carag.datasets import load_factver
    from llama_index_carag.evaluation.paper import (
        PUBLISHED_CARAG_TABLE4,
        PUBLISHED_CARAG_U_TABLE1A,
        load_explanations,
        paper_table,
    )
    from llama_index_carag.models import resolve_embed_model

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    expl = load_explanations(args.explanations, methods)
    corpus = load_factver(args.data)
    model = resolve_embed_model(args.embed_model)
    projections = ["pca"] if args.no_tsne else ["pca", "tsne"]
    vectors = _cached_evidence_vectors(corpus, model, args.cache_dir, show_progress=not args.json)
    table = paper_table(
        expl, corpus, model, projections=projections, n_components=args.dims, seed=args.seed,
        corpus_vectors=vectors, show_progress=not args.json,
    )
    if args.json:
        print(json.dumps(table.to_dict(overall=False), indent=2))
        return 0
    published = PUBLISHED_CARAG_U_TABLE1A if ("CARAG_U" in expl.methods or args.dims == 3) else PUBLISHED_CARAG_TABLE4
    print(f"{len(expl.claims)} claims, methods {', '.join(expl.methods)}; corpus: {table.meta['n_corpus']} evidence "
          f"passages; {args.dims}-D projections; t-SNE seed {args.seed}")
    print(table.to_markdown(published))
    return 0


def _cached_evidence_vectors(corpus: Any, model: Any, cache_dir: str | None, *, show_progress: bool) -> Any:
    """Evidence embeddings, cached as ``.npz`` under ``cache_dir`` (keyed by model and node ids)."""
    if not cache_dir:
        return None
    import hashlib

    import numpy as np
    from llama_index.core.schema import MetadataMode

    from llama_index_carag.models import embed_model_name

    ids = [n.node_id for n in corpus.evidence_nodes]
    key = hashlib.sha256(("\x00".join([embed_model_name(model), *ids])).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = Path(cache_dir) / f"evidence-{key}.npz"
    if path.is_file():
        return np.load(path, allow_pickle=False)["vectors"]
    texts = [n.get_content(MetadataMode.EMBED) for n in corpus.evidence_nodes]
    vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, vectors=vectors)
    return vectors


def cmd_eval(args: argparse.Namespace) -> int:
    from llama_index_carag.cli_eval import run_eval_command

    if getattr(args, "verdicts", False):
        from llama_index_carag.evaluation.verdict_bench import run_verdict_command

        return run_verdict_command(args)
    return run_eval_command(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from llama_index_carag.serve.command import bind_socket, load_llm_factory, run_server, settings_from_args

    try:
        from llama_index_carag.serve.app import create_app
        from llama_index_carag.synthesizer import get_fact_check_synthesizer
    except ImportError as exc:
        raise CLIError(f"carag serve needs the serve extra: pip install 'llama-index-carag[serve]' ({exc})") from None
    settings = settings_from_args(args)
    if args.no_llm and (args.llm or args.llm_factory):
        raise CLIError("--no-llm cannot be combined with --llm or --llm-factory")
    if not Path(args.index).is_dir():
        raise CLIError(f"no index at {args.index} (build one with: carag index DATA.csv --out {args.index})")
    sock = bind_socket(args.host, args.port)  # before loading models: a taken port fails fast
    llm = None
    if args.llm_factory:
        llm = load_llm_factory(args.llm_factory)
    elif not args.no_llm:
        llm = _llm(args)
    retriever = _load_retriever(args)
    app = create_app(
        retriever,
        None if llm is None else get_fact_check_synthesizer(llm),
        stream_synthesizer=None if llm is None else get_fact_check_synthesizer(llm, streaming=True),
        llm=llm,
        settings=settings,
    )
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"carag serve: http://{shown}:{port}/ ({retriever.mode}, {retriever.context.n_items_} items, "
          f"{'no LLM' if llm is None else 'LLM ' + str(getattr(llm.metadata, 'model_name', type(llm).__name__))})",
          flush=True)
    run_server(app, sock, log_level="info" if args.verbose else "warning")
    return 0


# ------------------------------------------------------------------- parser
def _presets() -> dict[str, Any]:
    from llama_index_carag.settings import PRESETS

    return PRESETS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="carag",
        description="Context-aware, explainable evidence retrieval for fact checking (CARAG / CARAG-u).",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_retrieval_overrides(p: argparse.ArgumentParser) -> None:
        p.add_argument("--index", required=True, help="folder written by 'carag index'")
        p.add_argument("--alpha", type=_unit_float("--alpha", 0, 1), help="claim weight in [0, 1] (1 = plain RAG)")
        p.add_argument("--delta", type=_unit_float("--delta", -1, 1), help="SOI cosine threshold in [-1, 1]")
        p.add_argument("--k", type=_positive_int("--k"), help="evidence passages to retrieve")
        p.add_argument("--embed-model", help="override the recorded embed model (must be the same model)")

    def add_llm(p: argparse.ArgumentParser) -> None:
        p.add_argument("--llm", default=None, help="qwen1.5b (default, offline Qwen2.5-Coder-1.5B), smollm2 "
                       "(offline SmolLM2-135M: fast, not reliable) or a Hugging Face id/path")

    p = sub.add_parser("index", help="build and save an index + clustering from a claim/evidence CSV")
    p.add_argument("data", help="CSV in FactVer's layout (or any layout with --claim-col/--evidence-col)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--embed-model", default="minilm", help="minilm (default), mpnet, or a Hugging Face id/path")
    p.add_argument("--mode", default="unsupervised", choices=["unsupervised", "supervised"])
    p.add_argument("--preset", choices=sorted(_presets()), default="default",
                   help="default: the hybrid pool (dense + BM25) with claim contrast and the thematic term, chosen on "
                   "tuning data; paper: the papers' CARAG-u/CARAG exactly; tuned: the earlier dense-only variant")
    p.add_argument("--clusters", type=_clusters, default=None, help="number of clusters t (default 10), or 'auto' (BIC)")
    p.add_argument("--alpha", type=_unit_float("--alpha", 0, 1), default=None, help="the preset's (paper 0.5, default/tuned 0.8)")
    p.add_argument("--delta", type=_unit_float("--delta", -1, 1), default=None, help="default 0.75")
    p.add_argument("--k", type=_positive_int("--k"), default=None, help="default 6")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a non-empty folder")
    p.add_argument("--show-skipped", type=int, default=10, metavar="N", help="list the first N skipped rows")
    for col in ("claim-col", "evidence-col", "claim-id-col", "evidence-id-col", "label-col", "theme-col"):
        p.add_argument(f"--{col}", help="column name (generic CSV layout)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("check", help="retrieve evidence for a claim and give a verdict")
    p.add_argument("claim")
    add_retrieval_overrides(p)
    add_llm(p)
    p.add_argument("--no-llm", action="store_true", help="retrieval and SOI only, no verdict")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("graph", help="draw the SOI graph of a claim")
    p.add_argument("claim")
    add_retrieval_overrides(p)
    p.add_argument("--html", help="interactive, self-contained HTML (opens offline)")
    p.add_argument("--png", help="static PNG")
    p.add_argument("--cluster-png", help="PNG of the claim's whole cluster")
    p.add_argument("--edge-threshold", type=_unit_float("--edge-threshold", -1, 1), default=0.5)
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("map", help="thematic map of explanations over per-theme densities")
    p.add_argument("--index", required=True)
    p.add_argument("--explanations", required=True, help="CSV with Theme and one column per method (RAG, CARAG, ...)")
    p.add_argument("--out", required=True, help="PNG of all explanations")
    p.add_argument("--panels", help="PNG with one panel per theme")
    p.add_argument("--map3d", help="PNG of the 3-D PCA view with convex hulls")
    p.add_argument("--method", choices=["pca", "tsne"], default="pca")
    p.add_argument("--methods", help="comma-separated method columns (default: all present)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--embed-model", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_map)

    p = sub.add_parser("chat", help="interactive fact-check bot")
    add_retrieval_overrides(p)
    add_llm(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("demo", help="offline demo: index the demo corpus, compare RAG and CARAG-u, draw an SOI graph")
    p.add_argument("--out", default="carag_demo_output", help="output folder (default: ./carag_demo_output)")
    p.add_argument("--claims", type=_positive_int("--claims"), default=3)
    p.add_argument("--no-llm", action="store_true", help="skip the verdicts (retrieval only)")
    p.add_argument("--rag-verdicts", action="store_true", help="also give verdicts for the plain-RAG evidence")
    add_llm(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("paper-table", help="the papers' thematic-alignment table from their explanations")
    p.add_argument("--explanations", required=True)
    p.add_argument("--data", required=True, help="FactVer CSV")
    p.add_argument("--embed-model", default="mpnet")
    p.add_argument("--methods", help="comma-separated, e.g. RAG,CARAG (default: all present)")
    p.add_argument("--dims", type=int, choices=[2, 3], default=2, help="projection dimension (3 reproduces CARAG-u Table 1a)")
    p.add_argument("--seed", type=int, default=0, help="t-SNE seed")
    p.add_argument("--no-tsne", action="store_true", help="PCA only (fast)")
    p.add_argument("--json", action="store_true", help='print {theme: {method: {"pca": avg, "tsne": avg}}}')
    p.add_argument("--cache-dir", default=None, help="cache the evidence embeddings here (per model)")
    p.set_defaults(func=cmd_paper_table)

    p = sub.add_parser("eval", help="compare RAG, CARAG and CARAG-u with one encoder; sweeps; CSV + Markdown")
    from llama_index_carag.cli_eval import add_eval_arguments

    add_eval_arguments(p)
    from llama_index_carag.evaluation.verdict_bench import add_verdict_arguments

    add_verdict_arguments(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("serve", help="HTTP API and chat page over an index (FastAPI on uvicorn)")
    add_retrieval_overrides(p)
    add_llm(p)
    from llama_index_carag.serve.command import add_serve_arguments

    add_serve_arguments(p, _positive_int)
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``carag`` command; returns the exit status."""
    _offline_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    debug = args.debug or os.environ.get("CARAG_DEBUG") == "1"
    _quiet_libraries()
    if not args.verbose:
        # An unparseable answer is already shown as NOT_ENOUGH_INFO (parsed: false); no log line needed.
        logging.getLogger("llama_index_carag.verdict").setLevel(logging.ERROR)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("carag: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, TypeError, FileNotFoundError, IsADirectoryError, PermissionError, OSError) as exc:
        if debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"carag: error: {message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
