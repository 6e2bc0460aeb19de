"""What an LLM name means: the offline aliases, their suffixes, the name to load, the name results are filed under.

``"qwen1.5b"`` (and ``"qwen"``) is Qwen2.5-Coder-1.5B-Instruct, ``"smollm2"`` SmolLM2-135M-Instruct; the
suffixes ``-int8`` (transformers with int8 decoder layers) and ``-hf`` (transformers, float32) choose how
the offline models run.  :func:`llm_name` is the other direction: a loaded LLM → the name its measured
rules and results are filed under (each backend says it, :meth:`~.backend.LLMBackend.model_name`).
All pure except the path look-ups; nothing is loaded here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from llama_index_carag.models.files import QWEN_GGUF_FILE, QWEN_NAME, SMOLLM2_NAME, qwen_path, smollm2_path

logger = logging.getLogger(__name__)

__all__ = [
    "LLM_ALIASES",
    "DEFAULT_LLM",
    "INT8_SUFFIX",
    "LLAMACPP_SUFFIX",
    "offline_llm_path",
    "alias_variant",
    "load_name",
    "wants_int8",
    "is_offline_qwen",
    "gguf_model_name",
    "generic_llm_name",
]

#: Short names accepted by ``resolve_llm`` (lower case) -> offline model.
LLM_ALIASES = {
    "qwen1.5b": QWEN_NAME,
    "qwen": QWEN_NAME,
    QWEN_NAME.lower(): QWEN_NAME,
    "smollm2": SMOLLM2_NAME,
    SMOLLM2_NAME.lower(): SMOLLM2_NAME,
}
#: What ``resolve_llm(None)`` / ``default_llm()`` load.
DEFAULT_LLM = "qwen1.5b"
#: Appended to ``model_name`` of an int8-quantized LLM (its scores differ from the float model's).
INT8_SUFFIX = " (int8)"
#: Appended to the name of the offline Qwen run by llama.cpp from its Q4_K_M GGUF.
LLAMACPP_SUFFIX = " (Q4_K_M, llama.cpp)"
#: Alias suffixes: ``-int8`` (transformers with int8 decoder layers), ``-hf`` (transformers, float32).
_VARIANTS = ("-int8", "-hf")
_SUFFIXED = {f"{a}{v}": (a, v) for a in ("qwen1.5b", "qwen", "smollm2") for v in _VARIANTS}


def offline_llm_path(name: str) -> Path | None:
    """The converted folder of an offline alias (``"qwen1.5b"``, ``"smollm2"`` …), or ``None`` for other names."""
    model = LLM_ALIASES.get(name.strip().lower())
    if model == QWEN_NAME:
        return qwen_path()
    if model == SMOLLM2_NAME:
        return smollm2_path()
    return None


def is_offline_qwen(name: str) -> bool:
    """Whether ``name`` (a name to load, :func:`load_name`) is the offline Qwen (pure)."""
    return LLM_ALIASES.get(name.strip().lower()) == QWEN_NAME


def alias_variant(llm: str | None) -> str | None:
    """The alias suffix of ``llm`` (``"-int8"``, ``"-hf"``) or ``None`` (pure)."""
    hit = _SUFFIXED.get(llm.strip().lower()) if llm else None
    return hit[1] if hit else None


def load_name(llm: str | None) -> str:
    """Take ``resolve_llm``'s ``llm`` (``None`` or a non-blank string); return the name to load (pure).

    ``None`` and ``"default"`` (any case) give :data:`DEFAULT_LLM`; suffixed aliases (``-int8``, ``-hf``)
    give their model; other names are stripped.
    """
    if llm is None or llm.strip().lower() == "default":
        return DEFAULT_LLM
    name = llm.strip()
    variant = alias_variant(name)
    return name[: -len(variant)] if variant else name


def wants_int8(llm: str | None, quantize: str, device_map: str) -> bool:
    """Whether ``resolve_llm`` quantizes (pure): ``"auto"`` means an ``-int8`` alias; CPU only."""
    if quantize not in ("auto", "int8", "none"):
        raise ValueError(f"quantize must be 'auto', 'int8' or 'none'; got {quantize!r}.")
    wanted = quantize == "int8" or (quantize == "auto" and alias_variant(llm) == "-int8")
    if wanted and device_map != "cpu":
        raise ValueError("quantize='int8' is PyTorch's CPU dynamic quantization; load with device_map='cpu'.")
    return wanted


def gguf_model_name(path: str) -> str:
    """The name of a GGUF model run by llama.cpp (pure): the offline Qwen by name, another by its file name."""
    file = Path(path).name
    return QWEN_NAME + LLAMACPP_SUFFIX if file == QWEN_GGUF_FILE else file


def generic_llm_name(llm: Any) -> str:
    """An LLM's ``model_name``, else its ``metadata.model_name``, else its class name (pure)."""
    name = getattr(llm, "model_name", None)
    if not name:
        try:
            name = llm.metadata.model_name
        except Exception:  # a stub LLM without metadata
            name = None
    return str(name or type(llm).__name__)
