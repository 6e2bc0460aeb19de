"""Every script in ``examples/`` runs, offline, on the demo corpus (the small SmolLM2 where an LLM is needed), so
a broken use case fails the build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Each example with the arguments and standard input that make it quick, and what its output must show.
RUNS = {
    "quickstart.py": ([], None, ["CLAIM", "SOI"]),
    "query_engines.py": (
        ["--llm", "smollm2"],
        None,
        ["RetrieverQueryEngine + ContextAwareRetriever", "as_query_engine() + ThematicContextPostprocessor"],
    ),
    "chat_bot.py": (
        ["--llm", "smollm2"],
        "Rising sea temperatures are a main cause of coral bleaching.\nreset\nquit\n",
        ["Fact-check bot", "Verdict: ", "Evidence:", "(conversation cleared)"],
    ),
}


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs(name: str) -> None:
    args, stdin, shown = RUNS[name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin or "",
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for text in shown:
        assert text in proc.stdout, (text, proc.stdout[-2000:])


def _python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    blocks, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_readme_snippets_run():
    blocks = _python_blocks(EXAMPLES.parent / "README.md")
    assert blocks, "the README shows Python usage"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for code in blocks:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=EXAMPLES.parent
        )
        assert proc.returncode == 0, (code, proc.stderr[-3000:])
        assert proc.stdout.strip(), code
