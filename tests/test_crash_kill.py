"""A real process killed (SIGKILL) at every write of a persist: the folder reloads as the index before the persist
or after it, never an error, and no edit an earlier persist acknowledged is lost.

The writes are counted with an audit hook (:func:`sys.addaudithook`: every ``open`` for writing, ``os.replace`` /
``os.rename``, ``os.remove``, ``os.rmdir``, ``os.mkdir``, ``shutil.rmtree``) in a forked child that runs the
persist; a first child counts them, then one child per write point is killed just before that write.  The parent
reloads the folder each time and compares every claim's top-k with the two acceptable ones.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from llama_index_carag import ContextAwareRetriever
from tests.helpers import planted_corpus
from tests.test_persist_journal import _fitted, _new_nodes, _top_k

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

#: At least this many kill points per persist kind (all of them when a persist has fewer writes).
MIN_POINTS = 20
_WRITE_EVENTS = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.truncate"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _is_write(event: str, args: tuple) -> bool:
    if event in _WRITE_EVENTS:
        return True
    if event != "open":
        return False
    mode, flags = args[1], args[2]
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _in_child(action: Callable[[], None], kill_at: int | None) -> tuple[str, int]:
    """Run ``action`` in a forked child that counts its writes and SIGKILLs itself just before write ``kill_at``;
    ``("killed", n)`` or ``("done", writes)``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_fd)
        count = [0]

        def hook(event: str, args: tuple) -> None:
            if _is_write(event, args):
                count[0] += 1
                if kill_at is not None and count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

        try:
            sys.addaudithook(hook)
            action()
            os.write(write_fd, str(count[0]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_fd) as pipe:
        reported = pipe.read()
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return "killed", kill_at or 0
    assert reported, "the child failed before it finished"
    return "done", int(reported)


def _points(writes: int) -> list[int]:
    """Every write point when there are few; else ``MIN_POINTS`` or more spread evenly, the first and last kept."""
    if writes <= 2 * MIN_POINTS:
        return list(range(1, writes + 1))
    step = writes / (2 * MIN_POINTS)
    return sorted({1, writes, *(max(1, round(i * step)) for i in range(1, 2 * MIN_POINTS))})


@pytest.fixture
def corpus(rng):
    return planted_corpus(rng, evidence_per_claim=8)


def _base(corpus, rng, folder: Path) -> ContextAwareRetriever:
    """An index persisted in full, then edited and persisted again as a journal segment (acknowledged edits)."""
    evidence, _, _ = corpus
    r = _fitted(corpus)
    r.persist(folder, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 4, prefix="acked"))
    r.delete_nodes([evidence[5].node_id])
    r.persist(folder, persist_index=True)
    return r


@pytest.mark.parametrize("kind", ["full", "journal"])
def test_a_persist_killed_at_any_write_reloads_old_or_new(corpus, rng, tmp_path, kind):
    evidence, claims, emb = corpus
    base = tmp_path / "base"
    _base(corpus, rng, base)
    edits = _new_nodes(rng, evidence, 3, prefix="late")

    def loaded(folder: Path) -> ContextAwareRetriever:
        return ContextAwareRetriever.from_persist_dir(folder, embed_model=emb)

    def prepared(name: str) -> tuple[Path, ContextAwareRetriever]:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        r = loaded(folder)
        r.insert_nodes(edits)
        r.delete_nodes([evidence[9].node_id])
        return folder, r

    old = _top_k(loaded(base), claims)
    folder, r = prepared("dry")
    new = _top_k(r, claims)
    assert new != old
    status, writes = _in_child(partial(r.persist, folder, persist_index=True, compact=kind == "full"), None)
    assert status == "done" and _top_k(loaded(folder), claims) == new
    points = _points(writes)
    assert len(points) >= min(writes, MIN_POINTS)
    outcomes = {"old": 0, "new": 0}
    for n in points:
        folder, r = prepared(f"kill{n}")
        status, _ = _in_child(partial(r.persist, folder, persist_index=True, compact=kind == "full"), n)
        assert status == "killed"
        found = _top_k(loaded(folder), claims)  # never an error
        assert found in (old, new), f"killed before write {n} of {writes}: neither the old nor the new index"
        outcomes["old" if found == old else "new"] += 1
        shutil.rmtree(folder)
    assert outcomes["old"] > 0  # the early kills
    print(f"{kind}: {writes} writes, {len(points)} kill points, outcomes {outcomes}")


def _files(folder: Path) -> dict[str, bytes]:
    """The folder's files as a reader sees them (a staging folder no commit names is a write that never happened,
    dropped by the next writer)."""
    from llama_index_carag.core.commit import is_bookkeeping

    def seen(p: Path) -> bool:  # not staged, not a lock, not a killed atomic write's temporary file
        return p.is_file() and not is_bookkeeping(p.relative_to(folder).as_posix()) and not p.name.endswith(".tmp")

    files = (p for p in folder.rglob("*") if seen(p))
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


@pytest.mark.parametrize("direction", ["to fine-tune", "to thresholds"])
def test_a_verifier_folder_killed_at_any_write_is_the_old_one_or_the_new_one(tmp_path, direction):
    """The index's verifier folder (the domain check's thresholds, an archive fine-tune with its weights), written
    by :func:`write_verifier_folder` and killed before each of its writes."""
    from llama_index_carag.core.writer_lock import SWITCH_INTENT_NAME
    from llama_index_carag.verifier.config import VerifierConfig
    from llama_index_carag.verifier.model import ClaimVerifier, write_verifier_folder

    shipped = VerifierConfig.read(ClaimVerifier().path)
    weights = tmp_path / "weights"
    weights.mkdir()
    for name, size in (("model.safetensors", 4096), ("tokenizer.json", 512), ("config.json", 64)):
        (weights / name).write_bytes(os.urandom(size))
    thresholds = shipped.model_copy(update={"threshold": 0.71, "refuted_threshold": 0.65, "weights": "shipped"})
    tuned = shipped.model_copy(update={"rule": "mean"}).with_record(archive={"choice": "fine-tune"})
    steps = [(thresholds, None), (tuned, weights)]
    if direction == "to thresholds":
        steps.reverse()
    (old_config, old_weights), (new_config, new_weights) = steps

    def prepared(name: str) -> Path:
        folder = tmp_path / name / "verifier"
        write_verifier_folder(folder, old_config, old_weights)
        return folder

    reference = {}
    for key, (config, source) in (("old", steps[0]), ("new", steps[1])):
        folder = tmp_path / f"ref_{key}" / "verifier"
        write_verifier_folder(folder, config, source)
        reference[key] = _files(folder)
    folder = prepared("dry")
    status, writes = _in_child(partial(write_verifier_folder, folder, new_config, new_weights), None)
    assert status == "done" and _files(folder) == reference["new"]
    outcomes = {"old": 0, "new": 0}
    for n in _points(writes):
        folder = prepared(f"kill{n}")
        status, _ = _in_child(partial(write_verifier_folder, folder, new_config, new_weights), n)
        assert status == "killed"
        loaded = ClaimVerifier(folder)  # a reader finishes a committed write first
        found = _files(folder)
        assert found in (reference["old"], reference["new"]), f"killed before write {n} of {writes}"
        key = "old" if found == reference["old"] else "new"
        assert loaded.to_config() == VerifierConfig.model_validate_json(reference[key]["verifier.json"])
        outcomes[key] += 1
        write_verifier_folder(folder, new_config, new_weights)  # the next writer leaves no debris
        left = sorted(p.name for p in folder.iterdir() if p.name != SWITCH_INTENT_NAME)  # the lock file stays
        assert left == sorted(reference["new"])
    assert outcomes["old"] and writes >= 5


#: ``carag index`` under an audit hook that SIGKILLs it before write ``KILL_AT`` into ``KILL_IN`` (0: count them).
_KILLABLE_CLI = """
import os, signal, sys
sys.path.insert(0, os.environ["KILL_TESTS"])
from tests.test_crash_kill import _is_write
limit, inside, count = int(os.environ["KILL_AT"]), os.path.realpath(os.environ["KILL_IN"]), [0]

def _paths(event, args):
    picked = args[:2] if event == "os.rename" else args[:1]
    return [os.path.realpath(os.fsdecode(p)) for p in picked if isinstance(p, (str, bytes, os.PathLike))]

def hook(event, args):
    if _is_write(event, args) and any(p.startswith(inside) for p in _paths(event, args)):
        count[0] += 1
        if count[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
from llama_index_carag.cli.main import main
code = main(sys.argv[1:])
os.write(2, f"\\nWRITES {count[0]}\\n".encode())
sys.exit(code)
"""


@pytest.mark.slow
def test_carag_index_over_an_existing_index_killed_at_its_writes(tmp_path):
    """``carag index --out DIR --force`` over an index: killed before a spread of its writes into DIR, the folder
    loads as the old index or the new one, and its verifier folder is the old one or the new one."""
    import subprocess

    from llama_index_carag.datasets import demo_corpus_path, load_demo_corpus
    from llama_index_carag.verifier.model import VERIFIER_DIR

    root = Path(__file__).resolve().parents[1]
    claims = [c.text for c in load_demo_corpus().claim_nodes]

    def index(out: Path, settings: str, kill_at: int) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "KILL_AT": str(kill_at),
            "KILL_IN": str(out),
            "KILL_TESTS": str(root),
        }
        args = [
            "index",
            str(demo_corpus_path()),
            "--out",
            str(out),
            "--force",
            *settings.split(),
        ]
        return subprocess.run(
            [sys.executable, "-c", _KILLABLE_CLI, *args], capture_output=True, text=True, timeout=600, env=env
        )

    def seen(out: Path) -> tuple[list, bytes]:
        r = ContextAwareRetriever.from_persist_dir(out)
        top = [[h.node.node_id for h in r.retrieve(c)] for c in claims]
        config = json.loads(_files(out / VERIFIER_DIR).get("verifier.json", b"null"))
        if config is not None:
            config["record"]["domain_check"].pop("seconds")  # the one value that differs from run to run
        return top, config

    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_settings, new_settings = "--clusters 3 --delta 0.5", "--clusters 2 --delta 0.3 --alpha 0.9 --k 4"
    assert index(old_dir, old_settings, 0).returncode == 0
    built = index(new_dir, new_settings, 0)
    assert built.returncode == 0, built.stderr[-2000:]
    old, new = seen(old_dir), seen(new_dir)
    assert old[0] != new[0]
    shutil.copytree(old_dir, tmp_path / "count")
    counted = index(tmp_path / "count", new_settings, 0)
    writes = int(counted.stderr.rsplit("WRITES", 1)[1].split()[0])
    points = sorted({1, writes, *(round(i * writes / 8) for i in range(1, 8))})
    for n in points:
        out = tmp_path / f"kill{n}"
        shutil.copytree(old_dir, out)
        proc = index(out, new_settings, n)
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        top, verifier = seen(out)
        assert top in (old[0], new[0]), f"killed before write {n} of {writes}"
        assert verifier in (old[1], new[1]), f"killed before write {n} of {writes}: the verifier folder is a mix"
