"""The opening cache: the llama.cpp state a prompt's opening turn leaves, kept on disk between processes.

Under the verifier the LLM only explains, and every explanation prompt starts with the same opening turn (the
system message — the task and the answer's format — and the next turn's header: 132 tokens of the offline
Qwen), evaluated as a batch of its own (:meth:`~llama_index_carag.models.llamacpp.LlamaCppBackend.hold_opening`).
That costs about 2.7 s on two cores, in every ``carag check`` process, while the encoder loads beside it.  What
the evaluation leaves is the model's KV cache for those tokens: :func:`save_opening` copies it to a file
(``llama_state_seq_get_data``, 3.8 MB for the Qwen) and :func:`load_opening` puts it back
(``llama_state_seq_set_data``, a few milliseconds) byte for byte, so what follows is what the evaluation would have
given.

A file is named by a hash of everything those bytes depend on: the llama.cpp build and this CPU (``build``, the
backend's :func:`~llama_index_carag.models.llamacpp.build_fingerprint`), the GGUF file (path, size, modification time,
a hash of its first and last MiB),
the context's and the model's scalar parameters (context size, batch sizes, threads, KV types, …) and the
opening's tokens.  A file that does not load (truncated, another llama.cpp's format) is evaluated again and
replaced; a cache folder that cannot be written only costs the evaluation.  Files live in
``<cache_dir>/openings`` (:func:`~llama_index_carag.models.files.cache_dir`), one per model, prompt and setting,
the :data:`MAX_FILES` last written kept (and no temporary file of a write cut short left for long).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: The folder of the opening files inside the cache folder.
OPENINGS_DIR = "openings"
#: How many opening files the folder keeps (the oldest written go first).
MAX_FILES = 32
#: Seconds after which a temporary file of a write cut short (a process that ended meanwhile) is deleted.
_STALE_TMP_S = 600
#: Bytes of the GGUF file's start and of its end hashed into the key.
_SAMPLE = 1 << 20
#: The sequence every prompt of this package is evaluated in.
_SEQ = 0
_SCALARS = (ctypes.c_int, ctypes.c_uint, ctypes.c_float, ctypes.c_bool, ctypes.c_int32, ctypes.c_uint32)
#: The llama.cpp calls the cache needs (a build without them caches nothing).
_CALLS = ("llama_state_seq_get_size", "llama_state_seq_get_data", "llama_state_seq_set_data", "llama_memory_seq_rm")


def openings_dir() -> Path:
    """``<cache_dir>/openings`` (not created here)."""
    from llama_index_carag.models.files import cache_dir

    return cache_dir() / OPENINGS_DIR


def opening_path(model: Any, head: Sequence[int], build: str) -> Path | None:
    """The file of ``head``'s state on ``model`` (a ``llama_cpp.Llama``) under the llama.cpp ``build``; ``None``
    where the build has no sequence-state calls or the key cannot be made (then nothing is cached)."""
    import llama_cpp

    if not all(hasattr(llama_cpp, call) for call in _CALLS):
        return None
    try:
        stat = os.stat(model.model_path)
        parts = [
            build,
            os.path.abspath(model.model_path),
            f"{stat.st_size}:{stat.st_mtime_ns}:{_sampled(model.model_path, stat.st_size)}",
            _scalars(model.context_params),
            _scalars(model.model_params),
            ",".join(str(int(t)) for t in head),
        ]
        folder = openings_dir()
    except (AttributeError, OSError) as exc:
        logger.debug("No opening cache for this model (%s).", exc)
        return None
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return folder / f"{key}.bin"


def _sampled(path: str, size: int) -> str:
    """A hash of the first and the last :data:`_SAMPLE` bytes of the file at ``path`` (of ``size`` bytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(_SAMPLE))
        f.seek(max(0, size - _SAMPLE))
        digest.update(f.read(_SAMPLE))
    return digest.hexdigest()[:16]


def _scalars(params: Any) -> str:
    """``name=value`` of a ctypes parameter struct's scalar fields (pointers and callbacks left out)."""
    return ";".join(f"{name}={getattr(params, name)}" for name, kind in params._fields_ if kind in _SCALARS)


def load_opening(model: Any, head: Sequence[int], path: Path) -> bool:
    """Put the state of ``head`` cached at ``path`` (:func:`opening_path`) into ``model``'s sequence as its only
    content (``n_tokens`` then ``len(head)``); ``False`` (the model holding nothing) where no file loads."""
    import llama_cpp

    try:
        data = path.read_bytes()
    except OSError:
        return False
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    model.n_tokens = 0
    _clear(model)
    if not data or llama_cpp.llama_state_seq_set_data(model.ctx, buffer, len(data), _SEQ) != len(data):
        logger.info("The cached prompt opening %s did not load; evaluating it again.", path.name)
        _clear(model)
        return False
    model.input_ids[: len(head)] = list(head)
    model.n_tokens = len(head)
    return True


def _clear(model: Any) -> None:
    """Empty ``model``'s sequence."""
    import llama_cpp

    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(model.ctx), _SEQ, 0, -1)


def save_opening(model: Any, path: Path) -> None:
    """Write the state of ``model``'s sequence (an opening just evaluated) to ``path`` (:func:`opening_path`); a
    folder that cannot be written is logged, not raised."""
    import llama_cpp

    from llama_index_carag.core.atomic import atomic_write_bytes

    size = int(llama_cpp.llama_state_seq_get_size(model.ctx, _SEQ))
    buffer = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(model.ctx, buffer, size, _SEQ))
    if not 0 < written <= size:
        return
    try:
        atomic_write_bytes(path, bytes(buffer)[:written])  # the folder made where missing
        _prune(path.parent)
    except OSError as exc:
        logger.debug("The prompt opening was not cached (%s).", exc)


def _prune(folder: Path) -> None:
    """Delete all but the :data:`MAX_FILES` opening files of ``folder`` written last, and the temporary files
    of writes cut short (older than :data:`_STALE_TMP_S`)."""
    files = sorted(folder.glob("*.bin"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
    for old in files[MAX_FILES:]:
        old.unlink(missing_ok=True)
    for tmp in folder.glob(".*.tmp"):
        if time.time() - tmp.stat().st_mtime > _STALE_TMP_S:
            tmp.unlink(missing_ok=True)
