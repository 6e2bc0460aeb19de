"""Research probe (issue 28): the hidden state at the verdict position from the forward pass that scores the labels.

Loads the packaged Qwen GGUF once with llama-cpp-python, ``embedding=True`` and
``pooling_type=LLAMA_POOLING_TYPE_NONE``, and on one short prompt ending in ``Verdict:`` compares three ways
of evaluating the prompt before the three label strings are scored (as
:class:`~llama_index_carag.models.llamacpp.LlamaCppBackend` scores them):

* ``plain`` — embeddings switched off (``llama_set_embeddings(ctx, False)``): what the package does today;
* ``all-outputs`` — embeddings on for the whole prompt: llama.cpp then marks *every* prompt token as an
  output ("embeddings required but some input tokens were not marked as outputs -> overriding"), so it
  computes the LM head for every token;
* ``last-token`` — embeddings off for all tokens but the last, then on for a one-token batch: one output,
  from which both the next-token logits (``llama_get_logits_ith(ctx, -1)``) and the hidden state
  (``llama_get_embeddings_ith(ctx, -1)``, ``n_embd`` floats, the final-norm output the LM head reads) are read.

Prints the label scores of each way, whether a hidden state came back, and the seconds of each.
Not wired into the package.

    nice -n 19 python benchmarks/probe_verdict_hidden_state.py --threads 1
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace
from typing import Any

import numpy as np


def _scorer(model: Any) -> Any:
    from llama_index_carag.models.llamacpp import GGUFChatPrompt, LlamaCppBackend

    chat = GGUFChatPrompt.from_model(model)
    if chat is None:
        raise SystemExit("The GGUF has no chat template.")
    llm = SimpleNamespace(_model=model, messages_to_prompt=chat.messages, generate_kwargs={}, max_new_tokens=72)
    return LlamaCppBackend(llm, max_new_tokens=72)


def _hidden(model: Any) -> np.ndarray | None:
    import llama_cpp

    ptr = llama_cpp.llama_get_embeddings_ith(model.ctx, -1)
    return None if not ptr else np.ctypeslib.as_array(ptr, shape=(model.n_embd(),)).copy()


def _run(scorer: Any, ids: list[int], mode: str) -> tuple[dict[str, float], np.ndarray | None, float]:
    """Evaluate ``ids`` the ``mode`` way, read the hidden state (if any), score the labels; seconds of it all."""
    import llama_cpp

    from llama_index_carag.verdicts.label_scores import LABEL_STRINGS

    model = scorer.model
    t0 = time.perf_counter()
    model.n_tokens = 0
    llama_cpp.llama_set_embeddings(model.ctx, mode == "all-outputs")
    if mode == "last-token":
        model.eval(ids[:-1])
        llama_cpp.llama_set_embeddings(model.ctx, True)
        model.eval(ids[-1:])
    else:
        model.eval(ids)
    vector = _hidden(model) if mode != "plain" else None
    llama_cpp.llama_set_embeddings(model.ctx, False)  # the label tokens: logits only
    logprobs = scorer._options_here(ids, LABEL_STRINGS)
    return {k.value: round(v, 4) for k, v in logprobs.items()}, vector, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import llama_cpp
    from llama_index.core.llms import ChatMessage

    from llama_index_carag.models.files import qwen_gguf_path

    t0 = time.perf_counter()
    model = llama_cpp.Llama(
        model_path=str(qwen_gguf_path()),
        n_ctx=512,
        n_threads=args.threads,
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
        verbose=False,
    )
    print(f"load: {time.perf_counter() - t0:.1f} s; n_embd {model.n_embd()}, n_vocab {model.n_vocab()}")
    scorer = _scorer(model)
    claim = "The EU Emissions Trading System was launched in 2005."
    passage = "The EU ETS, the first big carbon market, started in 2005."
    text = f"Claim: {claim}\nPassage: {passage}\nDoes the passage support or refute the claim?"
    ids = scorer._ids(scorer.render([ChatMessage(role="user", content=text)]), first=True)
    print(f"prompt: {len(ids)} tokens")
    for mode in ("plain", "all-outputs", "last-token", "plain"):
        logprobs, vector, seconds = _run(scorer, ids, mode)
        hidden = (
            "no hidden state"
            if vector is None
            else f"hidden {vector.shape[0]} floats, norm {np.linalg.norm(vector):.1f}"
        )
        print(f"{mode:12s} {seconds:6.2f} s  {logprobs}  {hidden}")


if __name__ == "__main__":
    main()
