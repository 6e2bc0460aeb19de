"""The one atomic writer and the one text key of ``core/``, used by every layer above."""

from __future__ import annotations

import pytest

from llama_index_carag.core.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from llama_index_carag.core.validation import normalize_text


def test_atomic_write_replaces_whole_files_and_keeps_their_mode(tmp_path):
    target = tmp_path / "sub" / "out.json"
    assert atomic_write_text(target, "first") == target.resolve()  # the folder is created
    assert target.read_text() == "first" and target.stat().st_mode & 0o777 == 0o644
    target.chmod(0o600)
    atomic_write_bytes(target, b"second")
    assert target.read_bytes() == b"second" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")

    def write_then_refuse(tmp):
        tmp.write_bytes(b"half")
        raise ValueError("not the expected file")

    with pytest.raises(ValueError, match="not the expected"):
        atomic_write(target, write_then_refuse)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_normalize_text_ignores_case_and_spacing():
    assert normalize_text("  Offshore\tWIND\n farms ") == "offshore wind farms"
    assert normalize_text("Straße") == normalize_text("STRASSE")  # casefold, not lower
    assert normalize_text(12) == "12"
