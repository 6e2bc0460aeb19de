"""A terminal fact-check bot: type a claim, get a verdict, an explanation and the cited evidence.

    python examples/chat_bot.py                          # demo corpus, offline SmolLM2 (not reliable)
    python examples/chat_bot.py --llm meta-llama/Llama-2-7b-chat-hf --data factver_master.csv

Each message is checked like ``carag check`` (a ContextAwareRetriever, CARAG-u, and the fact-check
synthesizer); follow-ups are condensed with the conversation into a standalone claim first.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index_carag import ContextAwareRetriever, FactCheckChatBot, load_factver, resolve_llm
from llama_index_carag.datasets import demo_corpus_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(demo_corpus_path()))
    parser.add_argument(
        "--llm", default=None, help="qwen1.5b (default, offline), smollm2, a .gguf file or a Hugging Face id/path"
    )
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--delta", type=float, default=0.5)
    args = parser.parse_args()

    corpus = load_factver(args.data)
    retriever = ContextAwareRetriever.from_defaults(
        corpus.evidence_nodes, claim_nodes=corpus.claim_nodes, n_clusters=args.clusters, delta=args.delta
    )
    FactCheckChatBot.from_retriever(retriever, resolve_llm(args.llm)).repl()


if __name__ == "__main__":
    main()
