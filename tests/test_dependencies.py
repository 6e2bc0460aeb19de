"""The runtime dependencies in pyproject.toml are what the package needs: each one is imported by the package's
source, or named in :data:`INDIRECT` with what needs it. A dependency only benchmarks or research use belongs in
an extra (``bench``), not in every user's install."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

import pytest

from tests.test_structure import imported_names, modules

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

#: Runtime dependencies the package needs without importing them itself.
INDIRECT = {
    "accelerate": "transformers needs it to place Hugging Face weights (`device_map`, models/backend.py)",
    "gguf": "transformers needs it to read a .gguf (`gguf_file=`, models/files.py)",
}


def _runtime_dependencies() -> list[str]:
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    return [re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0] for spec in declared]


def _modules_of(distribution: str) -> set[str]:
    """The importable modules a distribution installs (packages by their dotted path, top-level modules)."""
    found = set()
    for file in metadata.files(distribution) or []:
        path = str(file)
        if ".dist-info" in path or not path.endswith((".py", ".so", ".pyd")):
            continue
        if path.endswith("/__init__.py"):
            found.add(path[: -len("/__init__.py")].replace("/", "."))
        elif "/" not in path:
            found.add(path.split(".")[0])
    return {m for m in found if not any(m.startswith(other + ".") for other in found)}


def _imported() -> set[str]:
    return {
        name
        for module, path in modules().items()
        for name, _ in imported_names(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")
    }


def test_every_runtime_dependency_is_imported_or_needed_by_one_that_is() -> None:
    imported = _imported()
    unused = []
    for distribution in _runtime_dependencies():
        provided = _modules_of(distribution)
        assert provided, f"{distribution} is not installed, or installs no module"
        used = any(name == m or name.startswith(m + ".") for name in imported for m in provided)
        if not used and distribution not in INDIRECT:
            unused.append(f"{distribution} ({', '.join(sorted(provided))})")
    assert not unused, "runtime dependencies the package never imports (move them to an extra):\n" + "\n".join(unused)


def test_indirect_dependencies_are_still_runtime_dependencies() -> None:
    """:data:`INDIRECT` names only what pyproject.toml still declares, so the list cannot go stale silently."""
    assert set(INDIRECT) <= set(_runtime_dependencies())
