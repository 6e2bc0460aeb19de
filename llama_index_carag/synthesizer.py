"""Kept import path: this module moved to :mod:`llama_index_carag.verdicts.synthesizer` (0.1 documented this one)."""

from llama_index_carag.verdicts.synthesizer import *  # noqa: F403
from llama_index_carag.verdicts.synthesizer import __all__  # noqa: F401
