"""The stage line of loading an LLM: which model, and whether this load first checks llama.cpp on this CPU.

The offline Qwen and ``.gguf`` files run by llama.cpp; the first load after a (re)build of llama-cpp-python
on a CPU runs a short generation in a subprocess (:mod:`llama_index_carag.models.llamacpp_probe`, cached per
build and CPU), which can take a while: the line says so.  Nothing here loads a model.
"""

from __future__ import annotations

import json
import logging

logger = logging.getLogger(__name__)

__all__ = ["llm_stage", "probe_pending", "PROBE_NOTE"]

#: The note of a stage that will run the llama.cpp probe.
PROBE_NOTE = "(first run: checking llama.cpp on this CPU)"


def _runs_on_llamacpp(spec: str | None) -> bool:
    """Whether ``resolve_llm(spec)`` may load llama.cpp (a ``.gguf`` file, or the offline Qwen without a suffix)."""
    from llama_index_carag.models.llm_names import alias_variant, is_offline_qwen, load_name

    name = load_name(spec)
    return name.lower().endswith(".gguf") or (is_offline_qwen(name) and alias_variant(spec) is None)


def probe_pending(spec: str | None) -> bool:
    """Whether loading ``spec`` will first probe llama.cpp (installed, and no cached answer for this build and CPU)."""
    if not _runs_on_llamacpp(spec):
        return False
    from llama_index_carag.models.llamacpp import llamacpp_installed

    if not llamacpp_installed():
        return False
    from llama_index_carag.models.files import cache_dir
    from llama_index_carag.models.llamacpp_probe import PROBE_FILE, build_fingerprint

    fingerprint = build_fingerprint()
    try:
        saved = json.loads((cache_dir() / PROBE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(saved, dict) or saved.get("fingerprint") != fingerprint


def _server(url: str) -> str:
    """``scheme://host[:port]/path`` of a server URL (no user name or password, no query)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # resolve_llm reports the bad URL itself
        return "(bad URL)"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def llm_stage(spec: str | None) -> tuple[str, str]:
    """``(message, note)`` of the stage that loads ``spec`` (``--llm``; ``None``: the default)."""
    from llama_index_carag.models.llm_names import load_name
    from llama_index_carag.models.openai_compatible import PREFIX, is_openai_compatible

    if spec is not None and is_openai_compatible(spec):
        return f"connecting to the LLM server {_server(spec.strip()[len(PREFIX) :])}", ""
    name = load_name(spec) + (" (the default)" if spec is None else "")
    return f"loading the LLM {name}", PROBE_NOTE if probe_pending(spec) else ""
