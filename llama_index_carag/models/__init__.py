"""Where models come from: the offline packaged encoders and LLMs, Hugging Face ids and paths, GGUF files, servers.

Import each name from its module (this package re-exports none):

* :mod:`.resolve` turns a name into a LlamaIndex embedding model or LLM (``resolve_embed_model``,
  ``resolve_llm``, ``default_llm``, ``llm_name``) and holds the one registry of backends (``LLM_BACKENDS``,
  ``register_backend``, ``backend_for``);
* :mod:`.files` says what an offline LLM name means, finds the packaged weights and caches what is joined or
  converted;
* :mod:`.backend` is the contract of a way to run an LLM, :class:`~.backend.LLMBackend` (how to resolve,
  recognise, name and load it, what it supports, how it scores strings);
* one module per built-in backend, holding its resolving, loading, probing and scoring:
  :mod:`.huggingface` (transformers), :mod:`.llamacpp` (llama.cpp, with the per-build check, in a
  subprocess, that it generates on this CPU: ``python -m llama_index_carag.models.llamacpp``) and
  :mod:`.openai_compatible` (OpenAI-compatible servers).
"""
