"""The transformers backend: LlamaIndex's ``HuggingFaceLLM`` on a local causal LM (:class:`HuggingFaceBackend`).

Resolves offline aliases, hub ids and folders (everything no other backend claims; not ``.gguf`` files).
Loading: float32 weights on CPU (bfloat16 is far slower there), optional dynamic int8 decoder layers
(:func:`quantize_int8`), the end-of-turn token ids, greedy generation defaults, and the chat template
folded into a completion prompt.  Scoring: the prompt (the tokenizer's chat template) gets **one forward
pass**; the KV cache of that pass is reused to compute the log-likelihood of each option string (the sum
of its token log-probabilities) and then, cropped back to the prompt, to generate what follows a
continuation.  torch and transformers are imported inside the functions only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from llama_index_carag.models.backend import LLMBackend, LLMRequest, loaded_class, loading_message
from llama_index_carag.models.files import INT8_SUFFIX, LLM_ALIASES, offline_llm_path

logger = logging.getLogger(__name__)

K = TypeVar("K")


# ------------------------------------------------------------------ loading


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


# ------------------------------------------------------------------ the backend


class HuggingFaceBackend(LLMBackend):
    """A ``HuggingFaceLLM``: its model and tokenizer score strings and generate in process.

    Args:
        llm: a LlamaIndex ``HuggingFaceLLM``.
        max_new_tokens: budget of generated explanations (default: the LLM's, at most 96).
    """

    name = "transformers"
    logprobs = True

    def __init__(self, llm: Any, max_new_tokens: int | None = None) -> None:
        super().__init__(llm, max_new_tokens)
        self.model = llm._model  # HuggingFaceLLM keeps them private
        self.tokenizer = llm._tokenizer
        self.stop_ids = list(llm.stopping_ids or [])
        self.generate_kwargs = {
            k: v for k, v in dict(llm.generate_kwargs or {}).items() if k in ("repetition_penalty", "pad_token_id")
        }

    # ------------------------------------------------------------ resolving
    @classmethod
    def matches(cls, llm: Any) -> bool:
        found = loaded_class("llama_index.llms.huggingface", "HuggingFaceLLM")
        return found is not None and isinstance(llm, found)

    @classmethod
    def claims(cls, request: LLMRequest) -> bool:
        """Every name no backend before it claims (the last resort of ``backend="auto"``)."""
        return True

    @classmethod
    def check(cls, request: LLMRequest) -> None:
        if request.is_gguf:
            raise ValueError(
                f"{request.name!r} is a GGUF file: it runs with llama.cpp (backend='auto' or 'llama.cpp')."
            )

    @classmethod
    def describe_load(cls, request: LLMRequest) -> tuple[str, str] | None:
        """The loading line (every name reaches transformers last)."""
        return loading_message(request), ""

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        """The ``HuggingFaceLLM`` of an offline alias, hub id or folder."""
        cls.check(request)
        from llama_index.llms.huggingface import HuggingFaceLLM  # imports torch and transformers

        name, int8 = request.name, request.int8
        offline = offline_llm_path(name)
        path = str(offline) if offline is not None else name
        tokenizer, model = load_hf_model(path, request.device_map)
        if int8:
            model = quantize_int8(model)
        has_template = bool(getattr(tokenizer, "chat_template", None))
        model_name = LLM_ALIASES.get(name.lower(), path)
        return HuggingFaceLLM(
            model=model,
            tokenizer=tokenizer,
            model_name=f"{model_name}{INT8_SUFFIX}" if int8 else model_name,
            tokenizer_name=path,
            stopping_ids=stopping_ids(tokenizer),
            generate_kwargs=generation_kwargs(tokenizer, request.generate_kwargs),
            is_chat_model=has_template,
            query_wrapper_prompt=chat_wrapper(tokenizer, request.system_prompt) if has_template else "{query_str}",
            device_map=request.device_map,
            context_window=request.context_window,
            max_new_tokens=request.max_new_tokens,
        )

    # ------------------------------------------------------------ describing
    @property
    def model_name(self) -> str:
        return str(self.llm.model_name)

    def llm_budget(self) -> int:
        return int(self.llm.max_new_tokens)

    # ------------------------------------------------------------ scoring
    def render(self, messages: Sequence[Any], prefix: str) -> str:
        """``messages`` (LlamaIndex ``ChatMessage``s) through the tokenizer's chat template, then ``prefix``."""
        rows = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(r["content"] for r in rows) + "\n"
        return str(text) + prefix

    def token_ids(self, text: str) -> list[int]:
        """The tokenizer's ids of ``text`` (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def score_options(
        self, messages: Sequence[Any], options: Mapping[K, str], prefix: str
    ) -> tuple[dict[K, float], Any, list[int]]:
        """One forward pass over the prompt, each option scored on its cache; the cache returned holds the prompt."""
        import torch

        prompt_ids = self.token_ids(self.render(messages, prefix))
        if not prompt_ids:
            raise ValueError("The rendered prompt is empty.")
        device = getattr(self.model, "device", "cpu")
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
            cache, first = _returned_cache(out), torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            logprobs: dict[K, float] = {}
            for key, text in options.items():
                ids = self.token_ids(text)
                if not ids:
                    raise ValueError(f"Option {key!r} has no tokens.")
                total = float(first[ids[0]])
                if len(ids) > 1:
                    step = self.model(
                        input_ids=torch.tensor([ids[:-1]], device=device),
                        use_cache=True,
                        **{_cache_arg(self.model): cache},
                    )
                    rest = torch.log_softmax(step.logits[0].float(), dim=-1)
                    total += float(sum(rest[i, t] for i, t in enumerate(ids[1:])))
                    _crop(cache, len(prompt_ids))
                logprobs[key] = total
        return logprobs, cache, prompt_ids

    def generate(
        self, state: Any, prompt_ids: list[int], text: str, done: Callable[[str], bool], stop: Sequence[str]
    ) -> str:
        """Greedy generation after the prompt and ``text``, reusing the prompt's cache (``state``), until ``done``."""
        import torch
        from transformers import StoppingCriteriaList

        ids = torch.tensor([prompt_ids + self.token_ids(text)], device=getattr(self.model, "device", "cpu"))
        kwargs: dict[str, Any] = {"do_sample": False, **self.generate_kwargs}
        if self.stop_ids:
            kwargs["eos_token_id"] = list(self.stop_ids)
        if kwargs.get("pad_token_id") is None and self.tokenizer.pad_token_id is None:
            kwargs["pad_token_id"] = self.tokenizer.eos_token_id
        criteria = StoppingCriteriaList([_DoneStop(self.tokenizer, ids.shape[1], done)])
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                stopping_criteria=criteria,
                **{_cache_arg(self.model): state},
                **kwargs,
            )
        return str(self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def _cache_arg(model: Any) -> str:
    """The KV-cache keyword of ``model.forward``/``generate``: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    import inspect

    try:
        return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    except (TypeError, ValueError):  # pragma: no cover - unusual wrappers
        return "past_key_values"


def _returned_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _crop(cache: Any, length: int) -> None:
    """Cut ``cache`` back to its first ``length`` tokens (a negative count works on old and new transformers)."""
    extra = int(cache.get_seq_length()) - length
    if extra > 0:
        cache.crop(-extra)


class _DoneStop:
    """A transformers stopping criterion: ``done`` on the text generated after ``start``."""

    def __init__(self, tokenizer: Any, start: int, done: Callable[[str], bool]) -> None:
        self.tokenizer, self.start, self.done = tokenizer, start, done

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        text = self.tokenizer.decode(input_ids[0, self.start :], skip_special_tokens=True)
        return torch.full((input_ids.shape[0],), bool(self.done(text)), dtype=torch.bool, device=input_ids.device)
