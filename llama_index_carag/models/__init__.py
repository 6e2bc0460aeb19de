"""Where models come from: the offline packaged encoders and LLMs, Hugging Face ids and paths, GGUF files, servers.

:mod:`.resolve` turns a name into a LlamaIndex embedding model or LLM (``resolve_embed_model``,
``resolve_llm``, ``default_llm``); :mod:`.files` finds the packaged weights and caches what is joined or
converted; :mod:`.llm_names` says what an LLM name means.  Each way to run an LLM is one
:class:`~.backend.LLMBackend` (how to resolve, recognise and name it, and how it scores strings):
:mod:`.backend_hf` (transformers), :mod:`.backend_llamacpp` (llama.cpp), :mod:`.backend_openai`
(OpenAI-compatible servers), registered in :mod:`.llm_backends`.  :mod:`.huggingface`, :mod:`.llamacpp`
and :mod:`.openai_compatible` load an LLM, and :mod:`.llamacpp_probe` checks once per build, in a
subprocess, that llama.cpp generates on this CPU.
"""

from llama_index_carag.models.backend import LLMBackend, LLMRequest
from llama_index_carag.models.llm_backends import backend_for, register_backend
from llama_index_carag.models.resolve import (
    DEFAULT_LLM,
    EMBED_MODEL_ALIASES,
    LLM_ALIASES,
    LLM_BACKENDS,
    cache_dir,
    default_llm,
    embed_model_name,
    llm_name,
    minilm_path,
    mpnet_path,
    offline_llm_path,
    qwen_gguf_path,
    qwen_path,
    resolve_embed_model,
    resolve_embed_model_path,
    resolve_llm,
    smollm2_path,
)

__all__ = [
    "EMBED_MODEL_ALIASES",
    "cache_dir",
    "minilm_path",
    "mpnet_path",
    "resolve_embed_model_path",
    "resolve_embed_model",
    "embed_model_name",
    "smollm2_path",
    "qwen_path",
    "qwen_gguf_path",
    "offline_llm_path",
    "llm_name",
    "LLM_BACKENDS",
    "LLM_ALIASES",
    "DEFAULT_LLM",
    "resolve_llm",
    "default_llm",
    "LLMBackend",
    "LLMRequest",
    "register_backend",
    "backend_for",
]
