"""Loading a GGUF model with llama.cpp as a LlamaIndex LLM (``llama-index-llms-llama-cpp``).

Small helpers behind :meth:`~llama_index_carag.models.backend_llamacpp.LlamaCppBackend.load`: the integration's
``LlamaCPP`` with greedy decoding, every CPU core for both prompt evaluation and
generation (llama.cpp defaults to half of them), and the model's own chat template
from the GGUF metadata (:class:`GGUFChatPrompt`), so chat messages reach the model
exactly as it was trained to read them.

``llama-cpp-python`` is an optional dependency (it compiles from source where no
wheel exists; ``scripts/llamacpp.sh`` builds it portably): :func:`llamacpp_installed` tells
whether it is importable, :func:`llamacpp_available` whether it is installed *and* generates on
this CPU (probed once per build in a subprocess, :mod:`.llamacpp_probe`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["llamacpp_installed", "llamacpp_available", "load_llamacpp", "GGUFChatPrompt", "llamacpp_generate_kwargs"]


def llamacpp_installed() -> bool:
    """Whether ``llama-cpp-python`` and LlamaIndex's llama.cpp integration are installed (nothing is imported)."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llama_index.llms.llama_cpp"))


def llamacpp_available() -> bool:
    """Whether llama.cpp is installed and its build generates on this CPU.

    The first call for a build runs one short generation in a subprocess (a few seconds) and caches the
    answer next to the model cache; a build that crashes (e.g. native AMX kernels) answers ``False``
    with a warning, so the offline Qwen falls back to transformers instead of taking this process down.
    """
    if not llamacpp_installed():
        return False
    from llama_index_carag.models.llamacpp_probe import llamacpp_usable

    return llamacpp_usable().ok


class GGUFChatPrompt:
    """A model's chat template (Jinja, from its GGUF metadata) as LlamaIndex prompt callables.

    Args:
        template: the ``tokenizer.chat_template`` text.
        bos_token: the model's begin-of-sequence token text ("" if none).
        eos_token: its end-of-sequence token text.
        system_prompt: system message put before a completion prompt ("" for none).
    """

    def __init__(self, template: str, bos_token: str, eos_token: str, system_prompt: str = "") -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)
        self.system_prompt = system_prompt

    def messages(self, messages: Sequence[Any]) -> str:
        """``messages_to_prompt``: LlamaIndex ``ChatMessage``s → the prompt text, ending with the assistant's turn."""
        rows = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        return self._formatter(messages=rows).prompt  # type: ignore[arg-type]  # llama_cpp's TypedDict messages

    def completion(self, prompt: str) -> str:
        """``completion_to_prompt``: a plain prompt as the user's turn (after the system prompt, if any)."""
        rows = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            rows.insert(0, {"role": "system", "content": self.system_prompt})
        return self._formatter(messages=rows).prompt  # type: ignore[arg-type]  # llama_cpp's TypedDict messages

    @classmethod
    def from_model(cls, model: Any, system_prompt: str = "") -> GGUFChatPrompt | None:
        """The chat template of a loaded ``llama_cpp.Llama``; ``None`` if its GGUF has none."""
        template = (getattr(model, "metadata", None) or {}).get("tokenizer.chat_template")
        if not template:
            return None

        def text(token: int) -> str:
            return model.detokenize([token], special=True).decode("utf-8", errors="ignore") if token >= 0 else ""

        return cls(template, text(model.token_bos()), text(model.token_eos()), system_prompt)


#: transformers-style generation options and their llama.cpp names (``None``: dropped, it is the default).
_HF_TO_LLAMACPP = {
    "repetition_penalty": "repeat_penalty",
    "do_sample": None,
    "max_new_tokens": "max_tokens",
    "top_k": "top_k",
    "top_p": "top_p",
    "temperature": "temperature",
}
_LLAMACPP_KEYS = {
    "repeat_penalty",
    "max_tokens",
    "top_k",
    "top_p",
    "min_p",
    "temperature",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "typical_p",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
}


def llamacpp_generate_kwargs(generate_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Generation options for llama.cpp (pure): greedy, repetition penalty 1.1, transformers names translated.

    ``{"repetition_penalty": 1.2, "do_sample": False}`` → ``{"repeat_penalty": 1.2}``.

    Raises:
        ValueError: an option llama.cpp's completion call does not take (it would fail on the first call).
    """
    out: dict[str, Any] = {"repeat_penalty": 1.1}
    for key, value in (generate_kwargs or {}).items():
        if key in _HF_TO_LLAMACPP:
            target = _HF_TO_LLAMACPP[key]
            if target is not None:
                out[target] = value
        elif key in _LLAMACPP_KEYS:
            out[key] = value
        else:
            raise ValueError(f"generate_kwargs: llama.cpp has no option {key!r}; it takes {sorted(_LLAMACPP_KEYS)}.")
    return out


def load_llamacpp(
    path: str,
    *,
    context_window: int,
    max_new_tokens: int,
    system_prompt: str = "",
    generate_kwargs: dict[str, Any] | None = None,
    n_threads: int | None = None,
) -> Any:
    """Take a ``.gguf`` file and options; return LlamaIndex's ``LlamaCPP`` LLM on it.

    Decoding is greedy (``temperature=0``) with a mild repetition penalty (1.1) unless
    ``generate_kwargs`` says otherwise.  ``n_threads`` defaults to every CPU core, for
    prompt evaluation too.

    Raises:
        ImportError: ``llama-cpp-python`` or ``llama-index-llms-llama-cpp`` is not installed.
        FileNotFoundError: ``path`` does not exist.
    """
    if not llamacpp_installed():
        raise ImportError(
            "GGUF models run with llama.cpp: bash scripts/llamacpp.sh (a portable build of llama-cpp-python, "
            "about 7 min on 2 cores once) or pip install llama-cpp-python llama-index-llms-llama-cpp."
        )
    from llama_index_carag.models.llamacpp_probe import llamacpp_usable

    probe = llamacpp_usable()
    if not probe.ok:
        raise RuntimeError(f"{probe.detail}; rebuild it portably with: bash scripts/llamacpp.sh")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No GGUF file at {path!r}.")
    from llama_index.llms.llama_cpp import LlamaCPP

    threads = int(n_threads or os.cpu_count() or 1)
    kwargs = llamacpp_generate_kwargs(generate_kwargs)
    logger.info("Loading %s with llama.cpp (%d threads)", path, threads)
    llm = LlamaCPP(
        model_path=path,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        context_window=context_window,
        generate_kwargs=kwargs,
        model_kwargs={"n_threads": threads, "n_threads_batch": threads, "verbose": False},
        verbose=False,
    )  # the system prompt goes into the chat template below, not into LlamaCPP (it would appear twice)
    chat = GGUFChatPrompt.from_model(llm._model, system_prompt)  # LlamaCPP's Llama is private
    if chat is not None:
        llm.messages_to_prompt = chat.messages
        llm.completion_to_prompt = chat.completion
    return llm
