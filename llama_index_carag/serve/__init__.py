"""``carag serve``: an HTTP API and a chat page over a ``ContextAwareRetriever`` (FastAPI on uvicorn).

Install the ``serve`` extra (``pip install llama-index-carag[serve]``).  Importing this
package imports nothing heavy; :func:`create_app` loads FastAPI.
"""

from __future__ import annotations

from typing import Any

from llama_index_carag.serve.settings import ServeSettings

__all__ = ["create_app", "ServeSettings"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from llama_index_carag.serve.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
