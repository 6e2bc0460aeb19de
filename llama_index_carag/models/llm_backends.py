"""The registry of LLM backends: which :class:`~.backend.LLMBackend` resolves a name and which runs an LLM.

:data:`LLM_BACKENDS` is the one ordered list: ``resolve_llm`` loads a name with the first backend that
:meth:`~.backend.LLMBackend.claims` it (or the one named by ``backend=``), and :func:`backend_for` finds
the backend of a LlamaIndex LLM by class (:meth:`~.backend.LLMBackend.matches`), for its model name and
its label scorer; :func:`load_description` asks the backends what loading a name will do (the command
line's stage line) before it starts.  A new backend is one :class:`~.backend.LLMBackend` subclass and one
:func:`register_backend` call.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_carag.models.backend import LLMBackend, LLMRequest, loading_message
from llama_index_carag.models.huggingface import HuggingFaceBackend
from llama_index_carag.models.llamacpp import LlamaCppBackend
from llama_index_carag.models.openai_compatible import OpenAICompatibleBackend

logger = logging.getLogger(__name__)

__all__ = ["LLM_BACKENDS", "register_backend", "backend_class", "select_backend", "backend_for", "load_description"]

#: The backends, in the order ``backend="auto"`` asks them (transformers last: it takes every other name).
LLM_BACKENDS: list[type[LLMBackend]] = [OpenAICompatibleBackend, LlamaCppBackend, HuggingFaceBackend]


def register_backend(backend: type[LLMBackend]) -> type[LLMBackend]:
    """Add ``backend`` before the built-in ones (so it can claim names first); usable as a class decorator.

    Raises:
        ValueError: a backend with this name is registered already.
    """
    if not (isinstance(backend, type) and issubclass(backend, LLMBackend)) or not backend.name:
        raise TypeError(f"register_backend takes a named LLMBackend subclass; got {backend!r}.")
    if any(b.name == backend.name for b in LLM_BACKENDS):
        raise ValueError(f"An LLM backend named {backend.name!r} is registered already.")
    LLM_BACKENDS.insert(0, backend)
    return backend


def backend_class(name: str) -> type[LLMBackend]:
    """The registered backend called ``name``.

    Raises:
        ValueError: no backend has that name.
    """
    for backend in LLM_BACKENDS:
        if backend.name == name:
            return backend
    names = ("auto", *(b.name for b in LLM_BACKENDS))
    raise ValueError(f"backend must be one of {names}; got {name!r}.")


def select_backend(request: LLMRequest, backend: str = "auto") -> type[LLMBackend]:
    """The backend that loads ``request``: the one named ``backend``, or for ``"auto"`` the first that claims it.

    Raises:
        ValueError: an unknown backend, or one that cannot run the request (its :meth:`~.LLMBackend.check`).
    """
    chosen = backend_class(backend) if backend != "auto" else None
    if chosen is None:
        chosen = next((b for b in LLM_BACKENDS if b.claims(request)), None)
    if chosen is None:  # only where the catch-all was taken out of the registry
        raise ValueError(f"No LLM backend runs {request.spec!r}; registered: {[b.name for b in LLM_BACKENDS]}.")
    chosen.check(request)
    return chosen


def backend_for(llm: Any, max_new_tokens: int | None = None) -> LLMBackend | None:
    """The backend running the LlamaIndex ``llm`` (the first whose ``matches`` accepts it), else ``None``."""
    for backend in LLM_BACKENDS:
        if backend.matches(llm):
            return backend(llm, max_new_tokens)
    return None


def load_description(spec: str | None) -> tuple[str, str]:
    """``(message, note)`` of loading ``spec`` (``resolve_llm``'s name; ``None``: the default), before it starts.

    The first backend whose :meth:`~.LLMBackend.describe_load` answers says it, in the registry's order (the
    server for ``"openai-compatible:URL"``; llama.cpp for a ``.gguf`` file or the offline Qwen, with a note
    where it first probes this CPU; transformers for the rest).  Nothing is loaded, called or probed.
    """
    request = LLMRequest(spec)
    for backend in LLM_BACKENDS:
        described = backend.describe_load(request)
        if described is not None:
            return described
    return loading_message(request), ""
