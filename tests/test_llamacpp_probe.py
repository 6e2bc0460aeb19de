"""The llama.cpp probe: a crashing build is found in a child process, never used, and re-probed when it changes.

Also checks the test isolation plugin (``tests/isolation.py``): a test that dies of a signal fails with a
readable message instead of ending the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from llama_index_carag.models import llamacpp as probe


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARAG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_crashing_child_is_reported_by_its_signal(monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "build_fingerprint", lambda: "build-a")
    monkeypatch.setattr(probe, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    result = probe.probe_llamacpp(tmp_path / "model.gguf")
    assert not result.ok and result.returncode == -11
    assert "crashed on this CPU (SIGSEGV)" in result.detail


def test_a_failing_child_names_its_error(monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "build_fingerprint", lambda: "build-a")
    monkeypatch.setattr(probe, "_CHILD", "raise SystemExit('no such model')")
    result = probe.probe_llamacpp(tmp_path / "model.gguf")
    assert not result.ok and result.returncode == 1 and "no such model" in result.detail


def test_the_answer_is_cached_per_build_and_reprobed_when_the_build_changes(cache, monkeypatch):
    calls = []
    build = {"id": "build-a"}

    def fake_probe(model_path=None, timeout_s=0.0):
        calls.append(build["id"])
        return probe.ProbeResult(build["id"] == "build-b", build["id"], "x", 0, 0.1)

    monkeypatch.setattr(probe, "build_fingerprint", lambda: build["id"])
    monkeypatch.setattr(probe, "probe_llamacpp", fake_probe)
    assert not probe.llamacpp_usable().ok and not probe.llamacpp_usable().ok
    assert calls == ["build-a"]  # probed once, then read from the cache file
    assert (cache / probe.PROBE_FILE).is_file()
    build["id"] = "build-b"  # a rebuilt wheel
    assert probe.llamacpp_usable().ok and calls == ["build-a", "build-b"]
    assert probe.llamacpp_usable(force=True).ok and calls[-1] == "build-b" and len(calls) == 3


def test_a_crashing_build_is_not_available_and_qwen_falls_back(cache, monkeypatch):
    from llama_index_carag.models import llamacpp
    from llama_index_carag.models.backend import LLMRequest
    from llama_index_carag.models.resolve import select_backend

    monkeypatch.setattr(llamacpp, "llamacpp_installed", lambda: True)
    monkeypatch.setattr(probe, "build_fingerprint", lambda: "crashing-build")
    monkeypatch.setattr(
        probe,
        "probe_llamacpp",
        lambda *a, **k: probe.ProbeResult(False, "crashing-build", "crashed (SIGSEGV)", -11, 0.1),
    )
    assert not llamacpp.llamacpp_available()
    assert select_backend(LLMRequest("qwen1.5b")).name == "transformers"
    with pytest.raises(RuntimeError, match=r"crashed \(SIGSEGV\); rebuild it portably with: bash scripts/llamacpp.sh"):
        llamacpp.load_llamacpp("model.gguf", context_window=64, max_new_tokens=4)


def test_fingerprint_follows_the_installed_build():
    fingerprint = probe.build_fingerprint()
    if not llamacpp_installed_here():
        assert fingerprint is None
    else:
        assert fingerprint and fingerprint == probe.build_fingerprint()


def llamacpp_installed_here() -> bool:
    from llama_index_carag.models.llamacpp import llamacpp_installed

    return llamacpp_installed()


def test_a_native_crash_in_an_isolated_test_fails_that_test_only(tmp_path):
    """A child pytest run of a module whose isolated test segfaults: the run ends, reports the signal, counts the rest."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text('pytest_plugins = ["tests.isolation"]\n')
    (tests / "isolation.py").write_text((__import__("pathlib").Path(__file__).parent / "isolation.py").read_text())
    (tests / "test_crash.py").write_text(
        textwrap.dedent("""
        import os, signal
        import pytest
        pytestmark = pytest.mark.isolated

        def test_before():
            assert True

        def test_crash():
            os.kill(os.getpid(), signal.SIGSEGV)

        def test_after():
            assert True

        def test_fails():
            assert 1 == 2
    """)
    )
    (tests / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "Fatal Python error" not in out.split("last lines of the child")[0]
    assert "died of SIGSEGV" in out
    # only test_crash fails of the crash: test_after runs in a new child; test_fails fails on its own
    assert "2 failed, 3 passed" in out, out
    assert "FAILED tests/test_crash.py::test_crash" in out and "FAILED tests/test_crash.py::test_fails" in out
