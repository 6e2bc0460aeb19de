"""Kept import path: this module moved to :mod:`llama_index_carag.retrieval.postprocessor` (0.1 documented this one)."""

from llama_index_carag.retrieval.postprocessor import *  # noqa: F403
from llama_index_carag.retrieval.postprocessor import __all__  # noqa: F401
