"""Behaviour regression: FactVer top-6 (ids, order, scores) for the papers' and the tuned settings.

The test pins *our* code, not the machine: the index and the claims are built from
MiniLM vectors stored in ``tests/data/factver_minilm_vectors.npz`` (see
:mod:`tests.factver_vectors`; nothing is re-embedded, the FactVer text is read from
``../shared/data/factver``), on FAISS and on Qdrant local mode, and the top-6 of 40
claims must match ``tests/data/factver_top6_golden.json``:

- the same passages in the same order with scores within :data:`TOL`, except that two
  passages whose expected scores differ by at most :data:`TOL` may swap, and a passage
  may leave or enter the top-6 only if its score is within :data:`TOL` of the 6th
  (a tie at the cut);
- the same provenance (cluster, SOI size, …) for every passage in both lists, except a passage's SOI membership
  (``in_soi``, ``soi_kind``) when its similarity to the claim is within :data:`TOL` of the SOI's cut (δ, or the
  lowest similarity kept): FactVer holds duplicate passages, and which of two equal cosines a store's sort puts
  first at the cut depends on the CPU's sort kernel (NumPy's ``argsort`` in Qdrant's local mode picks its
  AVX-512 or AVX2 path at run time). :func:`test_factver_top6_ties_any_order` runs Qdrant with the ties in
  another order to prove the comparison is indifferent to it.

Re-record (only when a change of behaviour is intended and explained)::

    .venv/bin/python -m tests.test_regression --record          # golden top-6 from the stored vectors
    .venv/bin/python -m tests.test_regression --record-vectors  # re-embed FactVer (new encoder or text)
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).parent / "data" / "factver_top6_golden.json"
N_CLAIMS = 40
#: Score tolerance: well above float32 rounding differences between CPUs (~1e-7), far
#: below any change of a setting (alpha 0.5 -> 0.5001 moves scores by ~1e-5 or more).
TOL = 1e-5
#: Provenance fields compared besides ids and scores.
FIELDS = ("cluster", "query_cluster", "soi_size", "fallback", "reranked", "in_soi", "soi_kind")
#: Fields of SOI membership: compared only for passages away from the SOI's cut (see the module's docstring).
MEMBERSHIP = ("in_soi", "soi_kind")
FLOAT_FIELDS = ("claim_similarity", "thematic_similarity")


def configs() -> dict[str, dict[str, Any]]:
    from llama_index_carag.settings import DEFAULT, TUNED

    return {  # on top of the "paper" preset (see top6)
        "paper-CARAG-u": {"mode": "unsupervised"},
        "paper-CARAG": {"mode": "supervised"},
        "tuned-CARAG-u": {**TUNED.model_dump(), "mode": "unsupervised"},
        # the package default: hybrid pool (dense + BM25), claim contrast; BM25 in process on FAISS, and in
        # the collection's sparse vector on Qdrant (recorded when Qdrant's BM25 still ran in process)
        "default": DEFAULT.model_dump(),
    }


def stored_nodes(corpus: Any) -> tuple[list[Any], list[Any]]:
    """``(evidence, claims)`` of FactVer with the stored vectors; evidence with UUID ids (Qdrant's rule)."""
    from llama_index_carag.datasets import uuid_node_id
    from tests.factver_vectors import load_vectors, with_embeddings

    evidence, claims = load_vectors(corpus)
    return (
        with_embeddings(corpus.evidence_nodes, evidence, id_fn=uuid_node_id),
        with_embeddings(corpus.claim_nodes, claims),
    )


def build_index(backend: str, nodes: list[Any]) -> Any:
    """A FAISS ``IndexFlatIP`` or an in-memory Qdrant index of ``nodes`` (embeddings set, none computed)."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from tests.factver_vectors import RefuseEmbedding

    if backend == "faiss":
        from tests.helpers import faiss_index

        return faiss_index(nodes, RefuseEmbedding())
    import qdrant_client
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    store = QdrantVectorStore(client=qdrant_client.QdrantClient(location=":memory:"), collection_name="regression")
    context = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex([n.model_copy() for n in nodes], storage_context=context, embed_model=RefuseEmbedding())


def claim_slice(claims: list[Any]) -> list[Any]:
    step = max(1, len(claims) // N_CLAIMS)
    return claims[::step][:N_CLAIMS]


def top6(index: Any, claims: list[Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    from llama_index.core.schema import QueryBundle

    from llama_index_carag import ContextAwareRetriever

    retriever = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, **config)
    out = []
    for claim in claim_slice(claims):
        soi, got = retriever.retrieve_with_soi(QueryBundle(claim.text, embedding=claim.embedding))
        out.append(
            {
                "claim": claim.node_id,
                "soi_cuts": sorted({float(soi.delta), *([float(soi.threshold)] if soi.threshold is not None else [])}),
                "ids": [n.node.node_id for n in got],
                "scores": [float(n.score) for n in got],
                "carag": [{k: n.node.metadata["carag"][k] for k in FIELDS + FLOAT_FIELDS} for n in got],
            }
        )
    return out


def _close(a: float | None, b: float | None, tol: float) -> bool:
    return a is None and b is None or (a is not None and b is not None and abs(a - b) <= tol)


def _cut_problems(got: dict[str, float], expected: dict[str, float], tol: float) -> list[str]:
    """Passages that left or entered the top-k without a tie (within ``tol``) at the k-th score."""
    cuts = (min(expected.values(), default=0.0), min(got.values(), default=0.0))
    problems = []
    for kind, ids, scores in (
        ("left", expected.keys() - got.keys(), expected),
        ("entered", got.keys() - expected.keys(), got),
    ):
        for pid in sorted(ids):
            if any(abs(scores[pid] - cut) > tol for cut in cuts):
                problems.append(
                    f"{pid} {kind} the top-k with score {scores[pid]:.7f} (k-th: {cuts[0]:.7f} -> {cuts[1]:.7f})"
                )
    return problems


def top_differences(got: dict[str, Any], expected: dict[str, Any], tol: float = TOL) -> list[str]:
    """Differences between two top-k results of one claim that are not ties within ``tol`` (empty: equal)."""
    if len(got["ids"]) != len(expected["ids"]):
        return [f"{len(got['ids'])} passages instead of {len(expected['ids'])}"]
    g, e = dict(zip(got["ids"], got["scores"])), dict(zip(expected["ids"], expected["scores"]))
    problems = _cut_problems(g, e, tol)
    common = [pid for pid in expected["ids"] if pid in g]
    problems += [f"{pid}: score {g[pid]:.7f} instead of {e[pid]:.7f}" for pid in common if abs(g[pid] - e[pid]) > tol]
    rank = {pid: r for r, pid in enumerate(got["ids"])}
    problems += [
        f"{a} and {b} swapped (scores {e[a]:.7f}, {e[b]:.7f})"
        for a, b in combinations(common, 2)
        if rank[a] > rank[b] and abs(e[a] - e[b]) > tol
    ]
    g_meta, e_meta = dict(zip(got["ids"], got["carag"])), dict(zip(expected["ids"], expected["carag"]))
    cuts = got.get("soi_cuts", [])
    for pid in common:
        similarity = g_meta[pid]["claim_similarity"]
        at_cut = similarity is not None and any(abs(similarity - cut) <= tol for cut in cuts)
        wrong = [k for k in FIELDS if g_meta[pid][k] != e_meta[pid][k] and not (at_cut and k in MEMBERSHIP)]
        wrong += [k for k in FLOAT_FIELDS if not _close(g_meta[pid][k], e_meta[pid][k], tol)]
        problems += [f"{pid}: {k} {g_meta[pid][k]!r} instead of {e_meta[pid][k]!r}" for k in wrong]
    return problems


def result_differences(
    got: list[dict[str, Any]], expected: list[dict[str, Any]], where: str, tol: float = TOL
) -> list[str]:
    """All differences (see :func:`top_differences`) between two runs over the same claims, prefixed by ``where``."""
    if [g["claim"] for g in got] != [e["claim"] for e in expected]:
        return [f"{where}: other claims than the golden file's"]
    return [f"{where}/{e['claim']}: {p}" for g, e in zip(got, expected) for p in top_differences(g, e, tol)]


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def stored(factver_corpus) -> tuple[list[Any], list[Any]]:
    return stored_nodes(factver_corpus)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["faiss", "qdrant"])
def test_factver_top6_unchanged(golden, stored, backend):
    if backend == "qdrant":
        pytest.importorskip("qdrant_client")
        pytest.importorskip("llama_index.vector_stores.qdrant")
    evidence, claims = stored
    index = build_index(backend, evidence)
    problems = []
    for name, config in configs().items():
        problems += result_differences(top6(index, claims, config), golden[backend][name], f"{backend}/{name}")
    assert not problems, f"{len(problems)} difference(s):\n" + "\n".join(problems[:30])


class _TiesReversed:
    """NumPy with ``argsort`` putting equal values in the other order (as another CPU's sort kernel may)."""

    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)

    @staticmethod
    def argsort(a: Any, *args: Any, **kwargs: Any) -> Any:
        import numpy

        values = numpy.asarray(a)
        return len(values) - 1 - numpy.argsort(values[::-1], kind="stable")


@pytest.mark.integration
def test_factver_top6_ties_any_order(golden, stored, monkeypatch):
    """Qdrant's local sort with equal cosines in the other order (duplicate passages at the SOI's cut swap):
    the golden still holds, and the swap really happened (the strict comparison sees it)."""
    local = pytest.importorskip("qdrant_client.local.local_collection")
    pytest.importorskip("llama_index.vector_stores.qdrant")
    monkeypatch.setattr(local, "np", _TiesReversed())
    evidence, claims = stored
    got = top6(build_index("qdrant", evidence), claims, configs()["default"])
    assert result_differences(got, golden["qdrant"]["default"], "qdrant/default") == []
    strict = [{**g, "soi_cuts": []} for g in got]
    assert any("in_soi" in p for p in result_differences(strict, golden["qdrant"]["default"], "qdrant/default"))


def test_top_differences_tolerates_ties_only():
    """The comparison itself: ties within TOL pass, anything else is reported."""
    meta = {k: 1 for k in FIELDS} | {k: 0.5 for k in FLOAT_FIELDS}
    expected = {"ids": ["a", "b", "c"], "scores": [0.9, 0.8, 0.7], "carag": [meta] * 3}

    def run(ids: list[str], scores: list[float], carag: list[dict] | None = None) -> list[str]:
        return top_differences({"ids": ids, "scores": scores, "carag": carag or [meta] * 3}, expected)

    assert run(["a", "b", "c"], [0.9 + 3e-6, 0.8, 0.7]) == []
    assert run(["a", "c", "b"], [0.9, 0.8, 0.8 - 1e-6]) != []  # swap of scores 0.1 apart
    assert run(["a", "b", "d"], [0.9, 0.8, 0.7 + 2e-6]) == []  # tie at the cut
    assert run(["a", "b", "d"], [0.9, 0.8, 0.71]) != []  # a real newcomer
    assert run(["a", "b", "c"], [0.9, 0.8, 0.7 + 2e-5]) != []
    assert run(["a", "b", "c"], [0.9, 0.8, 0.7], [meta, meta, meta | {"cluster": 2}]) != []
    outside = meta | {"in_soi": False, "soi_kind": None, "claim_similarity": 0.5}
    at_cut = {**expected, "carag": [meta, meta, outside]}
    swapped = {**expected, "carag": [meta, meta, meta | {"claim_similarity": 0.5}]}
    assert top_differences({**swapped, "soi_cuts": [0.5 + 3e-6]}, at_cut) == []  # membership at the cut
    assert top_differences({**swapped, "soi_cuts": [0.52]}, at_cut) != []  # away from it
    assert top_differences(swapped, at_cut) != []
    close = {"ids": ["a", "b"], "scores": [0.8, 0.8 - 1e-6], "carag": [meta] * 2}
    assert top_differences({**close, "ids": ["b", "a"], "scores": [0.8, 0.8 - 1e-6]}, close) == []


def _record() -> None:  # pragma: no cover - run by hand
    from llama_index_carag.datasets import load_factver
    from tests.conftest import FACTVER_CSV

    evidence, claims = stored_nodes(load_factver(FACTVER_CSV))
    out: dict[str, Any] = {
        "n_claims": N_CLAIMS,
        "embed_model": "minilm",
        "vectors": "tests/data/factver_minilm_vectors.npz",
    }
    for backend in ("faiss", "qdrant"):
        index = build_index(backend, evidence)
        out[backend] = {name: top6(index, claims, config) for name, config in configs().items()}
    GOLDEN.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


def _record_vectors() -> None:  # pragma: no cover - run by hand
    from llama_index_carag.datasets import load_factver
    from llama_index_carag.models.resolve import resolve_embed_model
    from tests.conftest import FACTVER_CSV
    from tests.factver_vectors import record_vectors

    path = record_vectors(load_factver(FACTVER_CSV), resolve_embed_model("minilm"))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); now re-record the golden file with --record")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if "--record-vectors" in sys.argv:
        _record_vectors()
    elif "--record" in sys.argv:
        _record()
