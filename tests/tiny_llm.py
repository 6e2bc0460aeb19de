"""A tiny local transformers LLM for tests: a 2-layer random Llama with SmolLM2's tokenizer and chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_hf_llm(folder: Path) -> Any:
    """Save the tiny model to ``folder`` and load it through ``resolve_llm`` (a ``HuggingFaceLLM``)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llama_index_carag.models.files import smollm2_path
    from llama_index_carag.models.resolve import resolve_llm

    tok = AutoTokenizer.from_pretrained(str(smollm2_path()))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return resolve_llm(str(folder), max_new_tokens=12)
