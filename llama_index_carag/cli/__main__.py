"""``python -m llama_index_carag.cli`` runs the ``carag`` command."""

from llama_index_carag.cli.main import run

run()
