"""Run the tests marked ``isolated`` in a child pytest process, so a native crash cannot end the run.

A real LLM (llama.cpp above all) can die of a signal inside native code: in the pytest process that
would end the whole run with ``Fatal Python error: Segmentation fault``. Tests marked
``@pytest.mark.isolated`` (or a module with ``pytestmark = pytest.mark.isolated``) are run instead by one
child ``pytest`` per module; the child sends each test's reports back as JSON lines, and the parent
reports them as its own. If the child dies, the test that was running fails with a readable message
naming the signal, and the module's tests after it fail as not run.

Registered from ``conftest.py`` (``pytest_plugins``). ``CARAG_ISOLATED=0`` runs them in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

_CHILD_ENV = "CARAG_ISOLATED_CHILD"
_REPORTS_ENV = "CARAG_ISOLATED_REPORTS"
_TIMEOUT_S = 1800
_results: dict[str, list[dict[str, Any]]] = {}
_crashes: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "isolated: run in a child pytest process (a native crash fails only the test)")


def _in_child() -> bool:
    return bool(os.environ.get(_CHILD_ENV))


def _isolated(item: pytest.Item) -> bool:
    return item.get_closest_marker("isolated") is not None and os.environ.get("CARAG_ISOLATED", "1") != "0"


# ------------------------------------------------------------------ child side
@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(_REPORTS_ENV)
    if not _in_child() or not path:
        return
    data = _CONFIG.hook.pytest_report_to_serializable(config=_CONFIG, report=report) if _CONFIG else None
    if data is not None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(data) + "\n")
            fh.flush()


_CONFIG: pytest.Config | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _CONFIG
    _CONFIG = session.config


# ----------------------------------------------------------------- parent side
def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _run_child(items: list[pytest.Item]) -> tuple[int | None, str]:
    """Run ``items`` in one child pytest; keep their reports; the child's exit status and output."""
    with tempfile.TemporaryDirectory() as tmp:
        reports = Path(tmp) / "reports.jsonl"
        env = {**os.environ, _CHILD_ENV: "1", _REPORTS_ENV: str(reports)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[item.nodeid for item in items]]
        try:
            proc = subprocess.run(
                cmd, cwd=items[0].config.rootpath, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S
            )
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = None, f"the child pytest took over {_TIMEOUT_S} s: {exc}"
        lines = reports.read_text(encoding="utf-8").splitlines() if reports.exists() else []
    for line in lines:
        data = json.loads(line)
        _results.setdefault(data["nodeid"], []).append(data)
    return code, output


def _run_module(items: list[pytest.Item]) -> None:
    """Run one module's isolated tests in a child pytest; after a crash, the rest in a new child."""
    while items:
        code, output = _run_child(items)
        unfinished = [i for i in items if not any(r["when"] == "teardown" for r in _results.get(i.nodeid, []))]
        if not unfinished:
            return
        culprit = unfinished[0]  # tests run in order: the first without a teardown was running
        if code is not None and code < 0:
            why = f"the test process died of {_signal_name(code)} (a native crash, e.g. in llama.cpp)"
        else:
            why = output if code is None else f"the child pytest exited {code} before this test ended"
        tail = "\n".join(output.strip().splitlines()[-25:])
        _crashes[culprit.nodeid] = f"{why}\n--- last lines of the child's output ---\n{tail}"
        items = [i for i in unfinished[1:] if i.nodeid not in _results]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if _in_child() or not _isolated(item):
        return None
    # The item runs elsewhere: finish the previous items' fixtures up to what ``nextitem`` shares, as
    # pytest's own protocol would (else the next in-process item finds them still set up).
    item.session._setupstate.teardown_exact(nextitem)
    if item.nodeid not in _results and item.nodeid not in _crashes:
        module = [
            i
            for i in item.session.items
            if _isolated(i) and i.module is item.module and i.nodeid not in _results and i.nodeid not in _crashes
        ]
        _run_module(module or [item])
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for data in _results.pop(item.nodeid, []):
        report = item.config.hook.pytest_report_from_serializable(config=item.config, data=data)
        ihook.pytest_runtest_logreport(report=report)
    if item.nodeid in _crashes:
        message = _crashes.pop(item.nodeid)
        report = pytest.TestReport(item.nodeid, item.location, {}, "failed", message, "call")
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
