"""The ``carag`` command: one module per sub-command group, the parser in :mod:`.main`."""

from llama_index_carag.cli.main import main

__all__ = ["main"]
