"""The ``carag`` command, run in-process (``cli.main``) on the demo corpus, offline.

Commands run in this process (no subprocess, no long timeout); one test runs the
installed entry point itself, with ``--help`` only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_carag import DEFAULT, CaragSettings
from llama_index_carag.core.soi import SOI_LIST_KEYS
from llama_index_carag.datasets import demo_corpus_path
from llama_index_carag.verdicts.check import CHECK_SCHEMA_VERSION
from tests.helpers import run_cli

CARAG = shutil.which("carag", path=str(Path(sys.executable).parent)) or shutil.which("carag")
EVIDENCE_KEYS = {
    "rank",
    "id",
    "score",
    "text",
    "carag",
    "stance",
    "stance_score",
    "stance_probabilities",
    "stance_excerpt",
}
CLAIM = "Offshore wind farms drive fish away."


carag = run_cli


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "index"
    proc = carag("index", str(demo_corpus_path()), "--out", str(out), "--clusters", "3", "--delta", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "126 rows read: 126 evidence passages indexed, 21 claims, 0 rows skipped" in proc.stdout
    return out


def test_index_writes_index_and_state(index_dir):
    assert (index_dir / "docstore.json").stat().st_size > 0
    assert (index_dir / "carag" / "carag_manifest.json").is_file()
    again = carag("index", str(demo_corpus_path()), "--out", str(index_dir))
    assert again.returncode == 2 and "not empty" in again.stderr and "Traceback" not in again.stderr


def test_index_calibrate_reads_the_csv_links_and_persists(tmp_path):
    out = tmp_path / "calibrated"
    proc = carag("-q", "index", str(demo_corpus_path()), "--out", str(out), "--clusters", "3", "--calibrate")
    assert proc.returncode == 0, proc.stderr
    assert "%|" not in proc.stderr and "Generating embeddings" not in proc.stderr  # -q: no progress bars
    # the demo's 21 claims are linked through their evidence rows: too few to move off the preset
    assert "calibration: too few linked claims (21 < 50)" in proc.stdout
    # ... and the claim verifier is compared on their labels (the verdict half of --calibrate; no LLM is loaded)
    assert "verifier: " in proc.stdout and "21 labelled claims with evidence" in proc.stdout
    assert "macro-F1 on the archive out of the box 0." in proc.stdout  # the candidates named for people
    assert "ahead in bootstrap resamples of the claims: head over out of the box in " in proc.stdout
    assert not list(out.glob("verdict_*.json"))  # no LLM decision or label lean is fitted
    from llama_index_carag import ContextAwareRetriever

    retriever = ContextAwareRetriever.from_persist_dir(out)
    calibration = retriever.corpus.calibration
    assert calibration is not None and calibration.n_claims == 21 and calibration.settings == retriever.settings
    info = retriever.retrieve(CLAIM)[0].node.metadata["carag"]["calibration"]
    assert info["reason"].startswith("too few linked claims") and info["weights"] == calibration.weights


def test_check_json_schema_without_llm(index_dir):
    proc = carag("check", CLAIM, "--index", str(index_dir), "--no-llm", "--json", "--k", "4", "--alpha", "0.7")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"schema_version", "claim", "verdict", "settings", "soi", "evidence"}
    assert data["schema_version"] == CHECK_SCHEMA_VERSION == 3
    assert data["verdict"] is None and data["claim"] == CLAIM
    settings = CaragSettings.model_validate(data["settings"])  # every option, not a lossy subset
    assert settings == DEFAULT.replace(n_clusters=3, delta=0.5, alpha=0.7, similarity_top_k=4)
    assert json.loads(settings.model_dump_json()) == data["settings"]
    assert {
        "claim_id",
        "claim",
        "annotated_evidences",
        "related_claims",
        "refined_cluster_evidences",
        "thematic_cluster_evidences",
        "similarities",
    } <= set(data["soi"])
    assert len(data["evidence"]) == 4
    for row in data["evidence"]:
        assert set(row) == EVIDENCE_KEYS
        assert {"cluster", "claim_similarity", "thematic_similarity", "in_soi", "soi_size", "fallback"} <= set(
            row["carag"]
        )


def test_check_table_output(index_dir):
    proc = carag("check", CLAIM, "--index", str(index_dir), "--no-llm")
    assert proc.returncode == 0, proc.stderr
    assert "Retrieval: unsupervised alpha=0.8 delta=0.5 k=6" in proc.stdout  # the default preset
    assert "sim(q)" in proc.stdout and proc.stdout.count("Evidence_Claims_") == 6


def _stage_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("carag: ")]


def test_the_table_shows_a_long_passage_as_the_excerpt_its_stance_was_read_from(capsys, monkeypatch):
    from llama_index_carag.cli.check import _print_evidence

    monkeypatch.setenv("COLUMNS", "200")
    passage = "The ministry met on Monday. The minister denies it. The weather was fine."
    row = {"rank": 1, "id": "E1", "score": 0.5, "text": passage, "carag": {}, "stance": "REFUTED"}
    _print_evidence([row | {"stance_excerpt": "The minister denies it."}, row | {"rank": 2, "stance_excerpt": None}])
    first, second = capsys.readouterr().out.splitlines()[1:]
    assert first.endswith("… The minister denies it. …") and "Monday" not in first
    assert second.endswith(passage)


def test_check_says_its_stages_on_stderr_and_keeps_stdout_clean(index_dir):
    proc = carag("check", CLAIM, "--index", str(index_dir), "--no-llm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert _stage_lines(proc.stderr) == [
        "carag: loading the encoder (sentence-transformers/all-MiniLM-L6-v2) …",
        f"carag: loading the index {index_dir} …",
        "carag: retrieving …",
    ]
    data = json.loads(proc.stdout)  # standard output is the JSON alone
    for quiet in (["--quiet"], ["-q"]):
        silent = carag("check", CLAIM, "--index", str(index_dir), "--no-llm", "--json", *quiet)
        assert silent.returncode == 0 and not _stage_lines(silent.stderr) and json.loads(silent.stdout) == data
    before = carag("-q", "check", CLAIM, "--index", str(index_dir), "--no-llm")  # also before the command
    assert before.returncode == 0 and not _stage_lines(before.stderr) and "sim(q)" in before.stdout


def test_check_with_an_llm_says_loading_it_and_writing_the_verdict(index_dir, monkeypatch, tmp_path):
    from llama_index_carag.models import resolve as models
    from tests.helpers import StubLLM

    monkeypatch.setattr(models, "resolve_llm", lambda *a, **k: StubLLM())
    proc = carag("check", CLAIM, "--index", str(index_dir), "--llm", "smollm2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert _stage_lines(proc.stderr)[2:] == [
        "carag: loading the LLM smollm2 …",
        "carag: retrieving …",
        "carag: writing the verdict …",
    ]
    assert json.loads(proc.stdout)["verdict"]["label"] in {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
    claims = tmp_path / "claims.txt"
    claims.write_text(f"{CLAIM}\nSolar panels got cheaper.\n", encoding="utf-8")
    batch = carag("check", "--claims", str(claims), "--out", str(tmp_path / "r.jsonl"), "--index", str(index_dir))
    assert batch.returncode == 0, batch.stderr
    loading = [line for line in _stage_lines(batch.stderr) if "LLM" in line]
    assert len(loading) == 1 and loading[0].startswith("carag: loading the LLM qwen1.5b (the default) …")
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 and all("empty_reason" in r["soi"] for r in records)  # the --json schema


def test_check_says_why_the_soi_is_empty(index_dir):
    """δ 0.75 alone (``--soi-min-size 0``, the papers' rule) keeps nothing for this claim with MiniLM: the output
    says why; the default's minimum size keeps the cluster's nearest items instead."""
    claim = "Offshore wind farms drive fish away from the area."
    alone = ("--delta", "0.75", "--soi-min-size", "0")
    proc = carag("check", claim, "--index", str(index_dir), "--no-llm", "--json", *alone)
    assert proc.returncode == 0, proc.stderr
    soi = json.loads(proc.stdout)["soi"]
    assert not any(soi[key] for key in SOI_LIST_KEYS)
    reason = soi["empty_reason"]
    assert reason["delta"] == 0.75 and reason["cluster_size"] == soi["cluster_size"] > 0
    assert reason["closest_id"].startswith("Evidence_Claims_") and reason["closest_similarity"] <= 0.75
    retrieved = json.loads(proc.stdout)["evidence"]
    same_cluster = [e["carag"]["claim_similarity"] for e in retrieved if e["carag"]["cluster"] == soi["cluster"]]
    assert reason["closest_similarity"] >= max(same_cluster) - 1e-6  # nothing retrieved from it is closer
    closest = f"(the closest: {reason['closest_similarity']:.2f})"
    assert reason["text"].startswith(f"SOI empty: no item of the claim's cluster {soi['cluster']} ")
    assert closest in reason["text"] and "the query is the claim alone" in reason["text"]
    table = carag("check", claim, "--index", str(index_dir), "--no-llm", *alone, "-q")
    assert reason["text"] in " ".join(table.stdout.split())  # the table says it too
    widened = carag("check", claim, "--index", str(index_dir), "--no-llm", "--delta", "0.75", "-q")
    assert "(fewer than 3 above delta: the 3 most similar kept, down to cosine" in " ".join(widened.stdout.split())
    full = carag("check", claim, "--index", str(index_dir), "--no-llm", "--json", "-q")
    assert json.loads(full.stdout)["soi"]["empty_reason"] is None  # δ 0.5: the SOI holds items


def test_check_text_says_its_stages_and_an_empty_soi(index_dir, tmp_path):
    text = tmp_path / "article.txt"
    text.write_text(f"{CLAIM} What do you think? Solar panels cost 80 percent less than in 2010.", encoding="utf-8")
    proc = carag(
        "check-text", str(text), "--index", str(index_dir), "--no-llm", "--delta", "0.99", "--soi-min-size", "0"
    )
    assert proc.returncode == 0, proc.stderr
    assert _stage_lines(proc.stderr)[:3] == [
        "carag: finding the check-worthy claims …",
        "carag: 2 check-worthy claims in 3 sentences",
        "carag: loading the encoder (sentence-transformers/all-MiniLM-L6-v2) …",
    ]
    assert proc.stdout.count("(SOI empty: nothing of its cluster above δ=0.99)") == 2
    as_json = carag(
        "check-text",
        str(text),
        "--index",
        str(index_dir),
        "--no-llm",
        "--delta",
        "0.99",
        "--soi-min-size",
        "0",
        "--json",
        "-q",
    )
    assert as_json.returncode == 0, as_json.stderr
    reasons = [claim["check"]["soi"]["empty_reason"] for claim in json.loads(as_json.stdout)["claims"]]
    assert len(reasons) == 2 and all(r["text"].startswith("SOI empty") and r["closest_id"] for r in reasons)
    quiet = carag("check-text", str(text), "--index", str(index_dir), "--no-llm", "-q")
    assert quiet.returncode == 0 and "carag:" not in quiet.stderr and "checking claims" not in quiet.stderr


@pytest.mark.slow
def test_check_with_offline_llm(index_dir):
    proc = carag("check", CLAIM, "--index", str(index_dir), "--json", "--llm", "smollm2")
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)["verdict"]
    assert verdict["label"] in {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"} and verdict["explanation"].strip()


def test_the_retired_llm_label_calibrations_are_no_commands(tmp_path):
    """``carag calibrate-verdicts`` and ``carag index --llm/--no-llm/--lean-claims`` went with the LLM's label lean."""
    gone = carag("calibrate-verdicts", str(demo_corpus_path()), "--index", str(tmp_path))
    assert gone.returncode == 2 and "invalid choice" in gone.stderr
    for option in (["--no-llm"], ["--lean-claims", "3"], ["--llm", "smollm2"]):
        proc = carag("index", str(demo_corpus_path()), "--out", str(tmp_path / "x"), "--calibrate", *option)
        assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_graph_files(index_dir, tmp_path):
    html, png, cluster = tmp_path / "soi.html", tmp_path / "soi.png", tmp_path / "cluster.png"
    proc = carag(
        "graph", CLAIM, "--index", str(index_dir), "--html", str(html), "--png", str(png), "--cluster-png", str(cluster)
    )
    assert proc.returncode == 0, proc.stderr
    assert html.stat().st_size > 100_000 and "plotly" in html.read_text(encoding="utf-8")[:200_000].lower()
    assert png_size(png)[0] >= 900 and png_size(cluster) == (1200, 900)  # the SOI PNG is sized from its content
    assert "retrieved #1" in html.read_text(encoding="utf-8")  # the retrieved passages are drawn, ranked
    empty = carag(
        "graph", CLAIM, "--index", str(index_dir), "--delta", "0.99", "--soi-min-size", "0", "--html", str(html), "-q"
    )
    assert empty.returncode == 0, empty.stderr
    reason = empty.stdout.splitlines()[-1]
    assert reason.startswith("SOI empty: no item of the claim's cluster") and "(the closest: " in reason
    page = html.read_text(encoding="utf-8")
    assert "SOI empty: no item of the claim&#39;s cluster" in page and "retrieved #6" in page
    none = carag("graph", CLAIM, "--index", str(index_dir))
    assert none.returncode == 2 and "--html" in none.stderr


def test_chat_repl(index_dir, monkeypatch):
    """The REPL end to end with a deterministic stand-in LLM (the offline model: test_check_with_offline_llm)."""
    from llama_index_carag.models import resolve as models
    from tests.helpers import StubLLM

    monkeypatch.setattr(models, "resolve_llm", lambda *a, **k: StubLLM())
    proc = carag("chat", "--index", str(index_dir), "--llm", "smollm2", stdin=f"{CLAIM}\nquit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Verdict:" in proc.stdout and "[1] Evidence_Claims_" in proc.stdout


def test_demo_without_llm(tmp_path):
    proc = carag("demo", "--out", str(tmp_path / "demo"), "--no-llm")
    assert proc.returncode == 0, proc.stderr
    assert "--- RAG (alpha=1)" in proc.stdout and "--- CARAG-u (alpha=0.5)" in proc.stdout
    claims = [line for line in proc.stdout.splitlines() if line.startswith("CLAIM ")]
    labels = [line.split("(label ")[1].split(")")[0] for line in claims]
    assert labels == ["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"]  # one of each, not three of one
    assert "verdicts against" not in proc.stdout  # no LLM, no verdict report
    found = re.search(r"The verifier on all (\d+) labelled demo claims: (\d+) of (\d+) right", proc.stdout)
    assert found and found[1] == found[3] == "21" and 0 <= int(found[2]) <= 21  # the verifier needs no LLM
    assert (tmp_path / "demo" / "soi_graph.html").stat().st_size > 0
    assert png_size(tmp_path / "demo" / "soi_graph.png")[0] >= 900  # sized from its content


def test_demo_reports_its_verdicts_per_label(tmp_path, monkeypatch):
    """With a stand-in LLM that always says SUPPORTED, the per-label report shows the lean (1 of 3, not 3 of 3)."""
    import re

    from llama_index_carag.models import resolve as models
    from tests.helpers import StubLLM

    monkeypatch.setattr(models, "resolve_llm", lambda *a, **k: StubLLM())
    proc = carag("demo", "--out", str(tmp_path / "demo"), "--llm", "smollm2")
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout.split("verdicts against the demo corpus's labels", 1)[1]
    rows = re.findall(r"^  (SUPPORTED|REFUTED|NOT_ENOUGH_INFO) +(\d) of 1 right +\((\S+): (\w+)\)$", report, re.M)
    assert [r[0] for r in rows] == ["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"]
    said = {r[3] for r in rows}
    assert [int(r[1]) for r in rows] == [int(r[0] == r[3]) for r in rows] and said <= {
        "SUPPORTED",
        "REFUTED",
        "NOT_ENOUGH_INFO",
    }
    assert _stage_lines(proc.stderr).count("carag: writing the verdict …") == 3  # one verdict per claim
    page = (tmp_path / "demo" / "soi_graph.html").read_text(encoding="utf-8")
    assert "retrieved #1" in page  # the graph is drawn with the check's evidence


def test_research_is_not_in_carag():
    """The benchmarks and the papers' figures are research code (``python -m research.…``), not commands."""
    for gone in (["eval", "--protocol"], ["map", "--help"], ["paper-table", "--help"]):
        assert carag(*gone).returncode == 2, gone


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "   ", "--index", "{index}", "--no-llm"], "claim is empty"),
        (["check", CLAIM, "--index", "{missing}", "--no-llm"], "no index at"),
        (["graph", "", "--index", "{index}", "--png", "x.png"], "claim is empty"),
        (["index", "{missing}.csv", "--out", "{missing}"], "No such CSV file"),
        (["index", "{badcsv}", "--out", "{missing}"], "lacks column(s)"),
    ],
)
def test_user_errors_are_one_line(index_dir, tmp_path, args, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("claim,text\na,b\n", encoding="utf-8")
    fill = {"index": str(index_dir), "missing": str(tmp_path / "missing"), "badcsv": str(bad)}
    proc = carag(*[a.format(**fill) for a in args])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert lines[-1].startswith("carag: error:") and message in lines[-1]
    assert len(lines) == 1, proc.stderr


@pytest.mark.parametrize("value", ["3", "-0.5", "abc"])
def test_bad_option_values(index_dir, value):
    proc = carag("check", CLAIM, "--index", str(index_dir), "--alpha", value, "--no-llm")
    assert proc.returncode == 2 and "--alpha" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["index", "check", "graph", "chat", "demo", None])
def test_help(command):
    proc = carag(*([command] if command else []), "--help")
    assert proc.returncode == 0 and "usage: carag" in proc.stdout


@pytest.mark.skipif(CARAG is None, reason="the carag entry point is not installed")
def test_installed_entry_point_runs():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([CARAG, "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "usage: carag" in proc.stdout


def test_stage_lines_wait_while_a_model_load_silences_the_streams(capsys):
    """llama-cpp-python points the process's stderr at /dev/null while a model loads (on the CLI's loader thread):
    a stage line written meanwhile waits for the load instead of being lost."""
    import threading

    from llama_index_carag.cli.common import write_stderr
    from llama_index_carag.models.llamacpp import SILENCED_STREAMS

    written = threading.Event()
    writer = threading.Thread(target=lambda: (write_stderr("carag: a stage …\n"), written.set()))
    with SILENCED_STREAMS:
        writer.start()
        assert not written.wait(0.3)  # held back while the streams are silenced
    writer.join(10)
    assert written.is_set() and capsys.readouterr().err == "carag: a stage …\n"


def _console_script(body: str, command: str = "check") -> subprocess.CompletedProcess:
    """The console script's door (``cli.main.run``) in a child whose command (``command``) runs ``body`` (a
    function's body returning the status), standard output a buffered pipe (``PYTHONUNBUFFERED`` unset); the
    interpreter's teardown writes ``TEARDOWN`` on standard error."""
    code = (
        "import atexit, importlib, os, sys, threading, time\n"
        "cli = importlib.import_module('llama_index_carag.cli.main')\n"
        "atexit.register(lambda: os.write(2, b'TEARDOWN'))\n"
        "def command():\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + f"cli._main = lambda argv: (command(), {command!r})\n"
        "cli.run()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_a_reading_command_ends_the_process_at_once_with_its_status_and_all_its_output():
    """After ``check`` the process ends without the interpreter's teardown, yet what it wrote is flushed out."""
    proc = _console_script("for _ in range(1000):\n    sys.stdout.write('x' * 10)\nsys.stderr.write('note')\nreturn 3")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "x" * 10_000 and proc.stderr == "note"


@pytest.mark.parametrize(
    ("body", "command", "out"),
    [
        (
            "threading.Thread(target=lambda: (time.sleep(0.3), print('late', flush=True))).start()\nreturn 0",
            "check",
            "late\n",
        ),
        ("print('written')\nreturn 0", "index", "written\n"),
    ],
    ids=["a-thread-at-work", "a-writing-command"],
)
def test_the_process_ends_as_usual_with_a_thread_at_work_or_after_a_writing_command(body, command, out):
    """A non-daemon thread still running finishes its work; a command that writes stores (DuckDB's close at the
    interpreter's end) is not cut short."""
    proc = _console_script(body, command)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == out and proc.stderr == "TEARDOWN"
