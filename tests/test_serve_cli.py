"""``carag serve`` user mistakes: one line ``carag: error: …``, exit status 2, before any model loads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

CARAG = Path(sys.executable).parent / "carag"
pytestmark = pytest.mark.skipif(not CARAG.exists(), reason="the carag entry point is not installed")


def serve(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CARAG), "serve", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.fixture()
def fake_index(tmp_path: Path) -> Path:
    (tmp_path / "index").mkdir()
    return tmp_path / "index"


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("carag: error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    assert "carag serve: http" not in proc.stdout  # it never started listening


def test_missing_index(tmp_path):
    assert_usage_error(serve("--index", str(tmp_path / "nope"), "--no-llm", "--port", "0"), "no index at")


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("no_colon", "MODULE:CALLABLE"),
        ("no_such_module_xyz:make", "No module named"),
        ("os:no_such_attr", "no_such_attr"),
        ("os:sep", "not a callable"),
    ],
)
@pytest.mark.parametrize("where", [[], ["--llm-in-process"]], ids=["worker", "in-process"])
def test_bad_llm_factory(fake_index, spec, needle, where):
    assert_usage_error(serve("--index", str(fake_index), "--llm-factory", spec, "--port", "0", *where), needle)


def test_factory_result_that_is_no_llm_in_process(fake_index):
    """In process, the LLM loads before the index."""
    proc = serve("--index", str(fake_index), "--llm-factory", "os:getcwd", "--llm-in-process", "--port", "0")
    assert_usage_error(proc, "not a LlamaIndex LLM")


@pytest.mark.integration
def test_factory_result_that_is_no_llm_in_a_worker(tmp_path):
    """In a worker process, after the index loaded: still one line, and no server."""
    from tests.serve_helpers import build_demo_index

    index = build_demo_index(tmp_path / "index")
    proc = serve("--index", str(index), "--llm-factory", "os:getcwd", "--port", "0")
    assert_usage_error(proc, "the LLM could not be loaded", "not a LlamaIndex LLM")


def test_port_in_use(fake_index):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert_usage_error(
            serve("--index", str(fake_index), "--no-llm", "--port", str(port)), "cannot listen", str(port)
        )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--timeout", "0"], "request_timeout_s"),
        (["--timeout", "nan"], "request_timeout_s"),
        (["--port", "70000"], "--port"),
        (["--no-llm", "--llm", "smollm2"], "--no-llm"),
    ],
)
def test_bad_values(fake_index, args, needle):
    base = ["--index", str(fake_index)] + ([] if "--no-llm" in args else ["--no-llm"])
    assert_usage_error(serve(*base, *args), needle)


def test_bad_worker_count_is_an_argparse_error(fake_index):
    proc = serve("--index", str(fake_index), "--no-llm", "--max-pending", "0")
    assert proc.returncode == 2 and "--max-pending must be >= 1" in proc.stderr
