"""The fixtures of tests/conftest.py, for the research tests (offline, FactVer from ../shared)."""

from __future__ import annotations

from tests.conftest import factver_path, minilm, rng  # noqa: F401  (fixtures, found by name)
