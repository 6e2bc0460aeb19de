"""Claims with their evidence for a verdict benchmark, two labelled domains, written as one JSON file.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python benchmarks/verdict_evidence.py \\
        --out verdict_evidence.json --cache-dir .cache/eval [--k 6] [--domains factver scifact]

Writes ``{"factver": {"report": [...], "archive": [...]}, "scifact": {...}}``; each item is
``{"claim_id", "claim", "gold", "annotated", "retrieved"}`` (``gold``: SUPPORTED, REFUTED or NOT_ENOUGH_INFO;
``annotated`` and ``retrieved``: passage texts, at most ``--k`` each).

* **report** — FactVer: every claim of the report half of ``split_claims(..., seed=0)`` with at least one
  annotated passage (:class:`research.verdict_bench._Bench`); SciFact: all test claims of
  ``verdicts.jsonl`` (file order; :func:`scifact_report`).
  ``annotated``: the claim's linked evidence (FactVer: corpus order; SciFact: the cited abstracts, title and
  text, in ``evidence_ids`` order), the first ``k``; ``retrieved``: the package default retriever's top ``k``
  (MiniLM), new-claims protocol: its corpus claims are FactVer's tuning half / SciFact's train claims.
* **archive** — FactVer: the tuning half; SciFact: the train claims with a cited abstract in the corpus
  (:mod:`research.archive_evidence`).  ``retrieved``: as a new claim would be, five folds,
  the claim's fold left out of the retriever's corpus claims.  SciFact archive ids keep the package's
  ``claim:<id>`` form.

One encoder throughout: while the script runs, the package's ``resolve_embed_model("minilm")`` returns one
MiniLM whose embeddings are memoised (LlamaIndex's ``embeddings_cache``).  ``--cache-dir`` keeps the package's
own caches (corpus embeddings, the archive's retrieved passages) and that memo (``minilm_embeddings_memo.npz``:
the claims and annotated passages the package re-embeds on every call), so a second run embeds nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import FACTVER

logger = logging.getLogger("verdict_evidence")

SCIFACT = FACTVER.parents[1] / "scifact"
DOMAINS = ("factver", "scifact")
MEMO = "minilm_embeddings_memo.npz"


@contextmanager
def one_encoder(cache_dir: str | None) -> Iterator[None]:
    """Inside: every ``resolve_embed_model("minilm")`` returns one MiniLM whose text and query embeddings are
    memoised (read from and, when new ones were added, written back to ``cache_dir/MEMO``)."""
    import numpy as np
    from llama_index.core.storage.kvstore import SimpleKVStore

    from llama_index_carag.models import resolve

    original = resolve.resolve_embed_model
    model = original("minilm")
    store, path = SimpleKVStore(), Path(cache_dir) / MEMO if cache_dir else None
    known = 0
    if path is not None and path.is_file():
        data = np.load(path, allow_pickle=False)
        for text, vector in zip(json.loads(data["texts"].tobytes()), data["vectors"].tolist()):
            store.put(text, {"0": vector}, collection="embeddings")
        known = len(data["vectors"])
        logger.info("embedding memo: %d texts from %s", known, path)
    model.embeddings_cache = store

    def shared(name: Any = "minilm", **kwargs: Any) -> Any:
        return model if name in (None, "minilm") and not kwargs else original(name, **kwargs)

    resolve.resolve_embed_model = shared
    try:
        yield
    finally:
        resolve.resolve_embed_model = original
        model.embeddings_cache = None
        memo = store.get_all(collection="embeddings")
        if path is not None and len(memo) > known:
            texts = list(memo)
            vectors = np.asarray([next(iter(memo[t].values())) for t in texts], np.float32)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp.npz")
            np.savez(tmp, texts=np.frombuffer(json.dumps(texts).encode("utf-8"), np.uint8), vectors=vectors)
            tmp.replace(path)
            logger.info("embedding memo: %d texts (%d new) written to %s", len(texts), len(texts) - known, path)


def _label(fever: str) -> str:
    from llama_index_carag.verdicts import VerdictLabel

    return VerdictLabel.from_fever(fever).value


def _item(claim_id: str, claim: str, gold: str, annotated: Sequence[str], retrieved: Sequence[str]) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "claim": claim,
        "gold": _label(gold),
        "annotated": list(annotated),
        "retrieved": list(retrieved),
    }


def _archive(domain: Any) -> list[dict[str, Any]]:
    """The items of a :class:`research.archive_evidence.DomainEvidence`'s archive claims."""
    return [
        _item(c.claim_id, c.claim, c.gold, c.signals["annotated"].texts, c.signals["retrieved"].texts)
        for c in domain.archive
    ]


def factver(csv_path: Path, k: int, cache_dir: str | None) -> dict[str, list[dict[str, Any]]]:
    """FactVer's report half (claims with annotated evidence) and its archive (the tuning half)."""
    from research.archive_evidence import factver_evidence
    from research.verdict_bench import _Bench

    logger.info("factver: report half")
    bench = _Bench(csv_path, k=k, cache_dir=cache_dir, seed=0)
    bench.fit_retriever([])  # corpus claims: the whole tuning half (no report claim is one)
    report, skipped = [], []
    for c in bench.report:
        annotated = [n.node.get_content() for n in bench.evidence(c, "annotated")]
        if not annotated:
            skipped.append(c.node_id)
            continue
        retrieved = [n.node.get_content() for n in bench.evidence(c, "retrieved")]
        report.append(_item(c.node_id, c.get_content(), c.metadata["label"], annotated, retrieved))
    logger.info("factver: %d report claims (of %d in the report half)", len(report), len(bench.report))
    if skipped:
        logger.warning("factver: %d report claims without annotated evidence left out: %s", len(skipped), skipped)
    del bench
    logger.info("factver: archive (tuning half, retrieved in folds)")
    archive = _archive(factver_evidence(csv_path, k=k, cache_dir=cache_dir))
    return {"report": report, "archive": archive}


def scifact_report(folder: Path, k: int, cache_dir: str | None) -> list[dict[str, Any]]:
    """SciFact's test claims in file order: ``annotated`` the cited abstracts in the corpus (title and text, the
    first ``k``), ``retrieved`` the package default retriever's top ``k`` over the corpus, its corpus claims the
    train split (new-claims protocol, as ``python -m research.retrieval_bench --beir``); the corpus embeddings cached in ``cache_dir``."""
    import io

    import numpy as np
    from llama_index.core.schema import MetadataMode, QueryBundle

    from llama_index_carag.core.atomic import atomic_write_bytes
    from llama_index_carag.models.resolve import resolve_embed_model
    from research.beir import load_beir
    from research.new_claims import beir_task, carag_retrievers, prepare_task

    docs = {d.node_id: d.get_content() for d in load_beir(folder).documents}
    with (folder / "verdicts.jsonl").open(encoding="utf-8") as fh:
        rows = [row for row in map(json.loads, filter(str.strip, fh)) if row["split"] == "test"]
    task, model = beir_task(folder), resolve_embed_model("minilm")
    cached = Path(cache_dir) / f"scifact_minilm_{len(task.evidence)}.npy" if cache_dir else None
    if cached is not None and cached.is_file():
        vectors = np.load(cached)
    else:
        texts = [n.get_content(MetadataMode.EMBED) for n in task.evidence]
        vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=True), np.float32)
        if cached is not None:
            buf = io.BytesIO()
            np.save(buf, vectors)
            atomic_write_bytes(cached, buf.getvalue())
    prepared = prepare_task(task, model, evidence_vectors=vectors, show_progress=True)
    retriever = carag_retrievers(prepared, {"default": "default"}, k=k)["default"]()
    report = []
    for row in rows:
        cited = [docs[str(i)] for i in row["evidence_ids"] if str(i) in docs][:k]
        hits = retriever.retrieve(QueryBundle(row["claim"]))
        gold = {"SUPPORTED": "T", "REFUTED": "F", "NOT_ENOUGH_INFO": "N"}[row["label"]]
        report.append(_item(str(row["claim_id"]), row["claim"], gold, cited, [h.node.get_content() for h in hits]))
    return report


def scifact(folder: Path, k: int, cache_dir: str | None) -> dict[str, list[dict[str, Any]]]:
    """SciFact's test claims (report) and train claims with evidence (archive)."""
    from research.archive_evidence import scifact_evidence

    logger.info("scifact: report (test claims)")
    report = scifact_report(folder, k, cache_dir)
    logger.info("scifact: %d report claims", len(report))
    logger.info("scifact: archive (train claims, retrieved in folds)")
    archive = _archive(scifact_evidence(folder, k=k, cache_dir=cache_dir))
    return {"report": report, "archive": archive}


def _summary(name: str, splits: dict[str, list[dict[str, Any]]], k: int) -> None:
    for split, items in splits.items():
        labels = Counter(i["gold"] for i in items)
        no_ann = sum(not i["annotated"] for i in items)
        short = sum(len(i["retrieved"]) < k for i in items)
        ann = Counter(len(i["annotated"]) for i in items)
        logger.info(
            "%s %s: %d claims %s; without annotated evidence %d; annotated passages per claim %s; "
            "fewer than k retrieved %d",
            name,
            split,
            len(items),
            dict(sorted(labels.items())),
            no_ann,
            dict(sorted(ann.items())),
            short,
        )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--cache-dir", default=None, help="embeddings and the archive's retrieved passages")
    p.add_argument("--k", type=int, default=6, help="passages per claim and evidence source")
    p.add_argument("--domains", nargs="+", choices=DOMAINS, default=list(DOMAINS))
    p.add_argument("--factver", type=Path, default=FACTVER, help="FactVer's CSV")
    p.add_argument("--scifact", type=Path, default=SCIFACT, help="SciFact's BEIR folder (with verdicts.jsonl)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.k < 1:
        p.error("--k must be >= 1")

    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    with one_encoder(args.cache_dir):
        for name in dict.fromkeys(args.domains):
            t1 = time.perf_counter()
            if name == "factver":
                out[name] = factver(args.factver, args.k, args.cache_dir)
            else:
                out[name] = scifact(args.scifact, args.k, args.cache_dir)
            logger.info("%s done in %.0f s", name, time.perf_counter() - t1)
            _summary(name, out[name], args.k)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
    tmp.replace(path)
    logger.info("wrote %s (%.1f MB) in %.0f s", path, path.stat().st_size / 1e6, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
