"""Shared fixtures.  Everything runs offline: a hub name must fail fast."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["tests.isolation"]  # tests marked `isolated` run in a child pytest (native crashes)

SHARED = Path(os.environ.get("CARAG_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
FACTVER_CSV = SHARED / "data" / "factver" / "factver_master.csv"
PAPER_EXPLANATIONS_CSV = SHARED / "data" / "factver" / "paper_explanations.csv"


@pytest.fixture(scope="session")
def factver_path() -> Path:
    if not FACTVER_CSV.is_file():
        message = f"FactVer not found at {FACTVER_CSV} (../shared beside the repo, or set CARAG_SHARED)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI has ../shared: never skip silently there
        pytest.skip(message)
    return FACTVER_CSV


@pytest.fixture(scope="session")
def minilm():
    """The packaged MiniLM encoder (offline)."""
    from llama_index_carag.models.resolve import resolve_embed_model

    return resolve_embed_model("minilm")


@pytest.fixture(scope="session")
def demo_corpus():
    from llama_index_carag.datasets import load_demo_corpus

    return load_demo_corpus()


@pytest.fixture(scope="session")
def demo_index(demo_corpus, minilm):
    from llama_index_carag.retrieval.indexing import build_faiss_index

    return build_faiss_index(demo_corpus.evidence_nodes, minilm)


@pytest.fixture(scope="session")
def factver_corpus(factver_path):
    from llama_index_carag.datasets import load_factver

    return load_factver(factver_path)


@pytest.fixture(scope="session")
def factver_index(factver_corpus, minilm):
    """FactVer evidence embedded once per session with MiniLM in a FAISS IndexFlatIP."""
    from llama_index_carag.retrieval.indexing import build_faiss_index

    return build_faiss_index(factver_corpus.evidence_nodes, minilm)


@pytest.fixture(scope="session")
def factver_claims(factver_corpus, minilm):
    """FactVer claim nodes with their MiniLM embeddings set (embedded once)."""
    from llama_index.core.schema import MetadataMode

    nodes = [n.model_copy() for n in factver_corpus.claim_nodes]
    vectors = minilm.get_text_embedding_batch([n.get_content(MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    return nodes


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def fresh_opening_cache(monkeypatch, tmp_path_factory):
    """In this process, a test's llama.cpp prompt openings are evaluated, never loaded from what the user's cache
    or an earlier test saved (:mod:`llama_index_carag.models.opening_cache`)."""
    from llama_index_carag.models import opening_cache

    folder = tmp_path_factory.mktemp("openings")
    monkeypatch.setattr(opening_cache, "openings_dir", lambda: folder)
