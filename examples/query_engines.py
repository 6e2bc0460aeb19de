"""Three ways to plug CARAG into LlamaIndex query engines (offline).

    python examples/query_engines.py                 # the offline Qwen 1.5B explains
    python examples/query_engines.py --llm smollm2   # the small offline SmolLM2: faster, weaker explanations

1. RetrieverQueryEngine with ContextAwareRetriever + the fact-check synthesizer;
2. the default query engine with its retriever swapped for ours;
3. index.as_query_engine() keeping its own retriever, CARAG as a node postprocessor.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_carag import (
    CARAG_METADATA_KEY,
    ContextAwareRetriever,
    ThematicContextPostprocessor,
    get_fact_check_synthesizer,
    load_demo_corpus,
)
from llama_index_carag.models.resolve import resolve_llm


def show(title: str, response) -> None:
    verdict = (response.metadata or {}).get("verdict")
    label = verdict.label.value if verdict is not None else "(default synthesizer: free text)"
    print(f"\n== {title}\nVerdict: {label}\nAnswer: {response.response}")
    for i, n in enumerate(response.source_nodes, start=1):
        print(f"  [{i}] {n.node.node_id} in_soi={n.node.metadata[CARAG_METADATA_KEY]['in_soi']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default=None, help="qwen1.5b (default), smollm2, a .gguf file or a Hugging Face id")
    args = parser.parse_args()
    corpus = load_demo_corpus()
    retriever = ContextAwareRetriever.from_defaults(
        corpus.evidence_nodes, claim_nodes=corpus.claim_nodes, n_clusters=3, delta=0.5
    )
    llm = resolve_llm(args.llm)  # offline by default: shows the pipeline; pass a stronger LLM for real use
    claim = corpus.claim_nodes[0].text
    synthesizer = get_fact_check_synthesizer(llm)  # the claim verifier decides, the LLM explains

    # 1. one line: our retriever + our synthesizer
    # from_args resolves Settings.llm even when a synthesizer is given: pass llm= (or set Settings.llm)
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=llm, response_synthesizer=synthesizer)
    show("RetrieverQueryEngine + ContextAwareRetriever", engine.query(claim))

    # 2. index.as_query_engine(llm=llm) is RetrieverQueryEngine.from_args(index.as_retriever(), llm=llm):
    #    swap in our retriever and keep LlamaIndex's default synthesizer
    index = retriever.index
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=llm)
    show("default engine, our retriever swapped in", engine.query(claim))

    # 3. keep the default retriever, add CARAG as a postprocessor
    engine = index.as_query_engine(
        llm=llm,
        similarity_top_k=20,
        response_synthesizer=synthesizer,
        node_postprocessors=[ThematicContextPostprocessor.from_retriever(retriever, top_n=6)],
    )
    show("as_query_engine() + ThematicContextPostprocessor", engine.query(claim))


if __name__ == "__main__":
    main()
