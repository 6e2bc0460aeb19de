"""Loading a local Hugging Face causal LM for LlamaIndex: weights, int8, stop tokens, chat wrapper.

Small helpers behind :meth:`~llama_index_carag.models.backend_hf.HuggingFaceBackend.load`: float32 weights on CPU
(bfloat16 is far slower there), optional dynamic int8 decoder layers
(:func:`quantize_int8`), the end-of-turn token ids, greedy generation defaults, and the
chat template folded into a completion prompt.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["load_hf_model", "quantize_int8", "stopping_ids", "generation_kwargs", "chat_wrapper"]


def chat_wrapper(tokenizer: Any, system_prompt: str) -> str:
    """A ``query_wrapper_prompt`` that applies the tokenizer's chat template to a completion prompt."""
    marker = "QUERYSTRMARKER"
    messages = [{"role": "user", "content": marker}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = text.replace("{", "{{").replace("}", "}}")
    return text.replace(marker, "{query_str}")


def load_hf_model(path: str, device_map: str) -> tuple[Any, Any]:
    """Take a hub id or folder and a ``device_map``; return ``(tokenizer, model)``, the model in eval mode.

    Weights load in float32 on ``"cpu"`` and in their own dtype (``"auto"``) elsewhere.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.float32 if device_map == "cpu" else "auto"
    logger.info("Loading LLM %s", path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device_map, dtype=dtype)
    model.eval()
    return tokenizer, model


def stopping_ids(tokenizer: Any) -> list[int]:
    """Take a tokenizer; return its EOS id and known end-of-turn token ids, deduplicated, without ``None``."""
    return [tid for tid in {tokenizer.eos_token_id, *(_stop_token_ids(tokenizer))} if tid is not None]


def generation_kwargs(tokenizer: Any, generate_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Take a tokenizer and the caller's ``generate_kwargs``; return the kwargs for ``generate``.

    Greedy decoding with a mild repetition penalty unless overridden, and the
    EOS id as ``pad_token_id`` when the tokenizer has no pad token (unless given).
    """
    kwargs = {"do_sample": False, "repetition_penalty": 1.1}
    kwargs.update(generate_kwargs or {})
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        kwargs.setdefault("pad_token_id", tokenizer.eos_token_id)
    return kwargs


def _stop_token_ids(tokenizer: Any) -> list[int]:
    ids = []
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>", "</s>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
            ids.append(tid)
    return ids


def quantize_int8(model: Any) -> Any:
    """``model`` with the ``nn.Linear`` layers of its decoder blocks as dynamic int8 (per-channel weights).

    Embeddings and the output head stay in float32, so label log-likelihoods keep their
    resolution.  CPU only (PyTorch's dynamic quantization); takes ~20-40 s for the 1.5B model.
    """
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    spec = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"
    }
    with warnings.catch_warnings():  # torch.ao's eager quantization warns that it will move to torchao
        warnings.simplefilter("ignore")
        logger.info("Quantizing %d linear layers to int8", len(spec))
        return quantize_dynamic(model, spec, dtype=torch.qint8)
