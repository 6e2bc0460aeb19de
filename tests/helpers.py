"""Test doubles: a lookup-table embed model, a deterministic LLM, synthetic corpora."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import TextNode


class TableEmbedding(BaseEmbedding):
    """Embeds known texts to given vectors; unknown texts to a fixed pseudo-random unit vector."""

    _table: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, table: dict[str, Sequence[float]], **kwargs: Any) -> None:
        super().__init__(model_name="table-embedding", **kwargs)
        self._table = {k: [float(x) for x in v] for k, v in table.items()}

    @classmethod
    def class_name(cls) -> str:
        return "TableEmbedding"

    def add(self, text: str, vector: Sequence[float]) -> None:
        self._table[text] = [float(x) for x in vector]

    def _lookup(self, text: str) -> list[float]:
        if text in self._table:
            return list(self._table[text])
        import zlib

        dim = len(next(iter(self._table.values())))
        v = np.random.default_rng(zlib.crc32(text.encode("utf-8", "surrogatepass"))).normal(size=dim)
        return (v / np.linalg.norm(v)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._lookup(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._lookup(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class StubLLM(CustomLLM):
    """Deterministic LLM: always answers with ``answer`` (streams it word by word)."""

    answer: str = "Verdict: SUPPORTED. The evidence [1] states it directly. It is consistent with [2]."
    prompts: list = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="stub", context_window=32000, num_output=256)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self.prompts.append(prompt)

        def gen() -> CompletionResponseGen:
            text = ""
            for word in self.answer.split(" "):
                delta = word if not text else " " + word
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()


def unit(v: Sequence[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a)


def planted_corpus(
    rng: np.random.Generator,
    *,
    n_themes: int = 3,
    claims_per_theme: int = 4,
    evidence_per_claim: int = 5,
    dim: int = 16,
    spread: float = 0.35,
) -> tuple[list[TextNode], list[TextNode], TableEmbedding]:
    """Claims and evidence around ``n_themes`` random directions, with an embed model that knows them."""
    centres = [unit(rng.normal(size=dim)) for _ in range(n_themes)]
    evidence: list[TextNode] = []
    claims: list[TextNode] = []
    table: dict[str, np.ndarray] = {}
    for t, centre in enumerate(centres):
        theme = f"T{t}"
        for c in range(claims_per_theme):
            claim_id = f"c{t}_{c}"
            claim_vec = unit(centre + spread * rng.normal(size=dim) / np.sqrt(dim) * 3)
            text = f"claim {claim_id}"
            table[text] = claim_vec
            meta = {"theme": theme, "claim_id": claim_id}
            claims.append(
                TextNode(
                    id_=claim_id,
                    text=text,
                    metadata=dict(meta),
                    embedding=claim_vec.tolist(),
                    excluded_embed_metadata_keys=list(meta),
                    excluded_llm_metadata_keys=list(meta),
                )
            )
            for e in range(evidence_per_claim):
                eid = f"e{t}_{c}_{e}"
                vec = unit(claim_vec + spread * rng.normal(size=dim) / np.sqrt(dim) * 3)
                etext = f"evidence {eid}"
                table[etext] = vec
                emeta = {"theme": theme, "claim_id": claim_id, "evidence_id": eid}
                evidence.append(
                    TextNode(
                        id_=eid,
                        text=etext,
                        metadata=dict(emeta),
                        embedding=vec.tolist(),
                        excluded_embed_metadata_keys=list(emeta),
                        excluded_llm_metadata_keys=list(emeta),
                    )
                )
    return evidence, claims, TableEmbedding({k: v.tolist() for k, v in table.items()})


def faiss_index(nodes: Sequence[TextNode], embed_model: BaseEmbedding, *, id_map: bool = False):
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

    dim = len(nodes[0].embedding)
    flat = faiss.IndexFlatIP(dim)
    store = (
        SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(flat)) if id_map else FaissVectorStore(faiss_index=flat)
    )
    return VectorStoreIndex(
        [n.model_copy() for n in nodes],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )


def simple_index(nodes: Sequence[TextNode], embed_model: BaseEmbedding):
    from llama_index.core import VectorStoreIndex

    return VectorStoreIndex([n.model_copy() for n in nodes], embed_model=embed_model)


@dataclass
class CLIRun:
    """Exit status and captured output of one in-process ``carag`` command."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, stdin: str | None = None) -> CLIRun:
    """``carag ARGS`` in this process (``cli.main``): no subprocess, no timeout to outlast."""
    import contextlib
    import io
    import sys

    from llama_index_carag.cli import main  # the function (cli/__init__ re-exports it over the module name)

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: --help, bad option values
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = old_stdin
    return CLIRun(int(code or 0), out.getvalue(), err.getvalue())
