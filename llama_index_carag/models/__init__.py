"""Where models come from: the offline packaged encoders and LLMs, Hugging Face ids and paths, GGUF files.

:mod:`.resolve` turns a name into a LlamaIndex embedding model or LLM (``resolve_embed_model``,
``resolve_llm``, ``default_llm``); :mod:`.files` finds the packaged weights and caches what is joined or
converted; :mod:`.huggingface` and :mod:`.llamacpp` load an LLM with transformers or llama.cpp, and
:mod:`.llamacpp_probe` checks once per build, in a subprocess, that llama.cpp generates on this CPU.
"""

from llama_index_carag.models.resolve import *  # noqa: F403 - the public names of this layer
from llama_index_carag.models.resolve import __all__  # noqa: F401
