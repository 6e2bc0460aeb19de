"""A full persist replaces the index's files and the state as one: a crash at any point leaves the old persist
or the new one, never a mix (:mod:`llama_index_carag.core.commit`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core import commit
from llama_index_carag.core.commit import RECORD, STAGING_PREFIX, is_bookkeeping, replace_files, roll_forward
from llama_index_carag.core.writer_lock import SWITCH_INTENT_NAME, hold_folder
from tests.helpers import planted_corpus
from tests.test_persist_journal import _assert_same, _fitted, _new_nodes


@pytest.fixture
def corpus(rng):
    return planted_corpus(rng, evidence_per_claim=8)


class Crash(Exception):
    """A process killed here: nothing after it runs (no clean-up either)."""


def _crash_after(monkeypatch, k: int) -> None:
    """The commit's move raises once ``k`` files have moved."""
    real, done = commit._move, []

    def move(src, dst):
        if len(done) == k:
            raise Crash(f"killed after {k} moves")
        done.append(dst)
        real(src, dst)

    monkeypatch.setattr(commit, "_move", move)


def _files(folder: Path) -> dict[str, str]:
    """The folder's content (its switch-intent lock file left out)."""
    files = (p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != SWITCH_INTENT_NAME)
    return {p.relative_to(folder).as_posix(): p.read_text() for p in files}


def _stagings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(f"{STAGING_PREFIX}*"))


def _write(files: dict[str, str], deletes: list[str] = ()):
    def write(staging: Path) -> list[str]:
        for name, text in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text)
        return list(deletes)

    return write


def test_files_move_in_with_the_named_ones_last_and_stale_ones_go(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "old.npy").write_text("old array")
    moved: list[str] = []
    real = commit._move
    monkeypatch.setattr(commit, "_move", lambda s, d: (moved.append(Path(d).name), real(s, d)))
    new = {"a.json": "new a", "state/manifest.json": "names new.npy", "state/new.npy": "new array", "z.json": "z"}
    replace_files(tmp_path, _write(new, ["state/old.npy"]), last=["state/manifest.json"])
    assert _files(tmp_path) == new
    assert moved[-1] == "manifest.json" and sorted(moved) == sorted(Path(n).name for n in new)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_crash_mid_commit_is_rolled_forward(tmp_path, monkeypatch, k):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "b.json").write_text("old b")
    (tmp_path / "stale.npy").write_text("old")
    new = {"a.json": "new a", "b.json": "new b", "c.json": "new c"}
    _crash_after(monkeypatch, k)
    with pytest.raises(Crash):
        replace_files(tmp_path, _write(new, ["stale.npy"]))
    assert (tmp_path / RECORD).is_file()  # committed: the new version is the one a reader gets
    monkeypatch.undo()
    assert roll_forward(tmp_path)
    assert _files(tmp_path) == new and not _stagings(tmp_path)
    assert not roll_forward(tmp_path)  # done once


def test_a_failure_before_the_commit_leaves_the_folder_as_it_was(tmp_path):
    (tmp_path / "a.json").write_text("old a")

    def write(staging: Path) -> list[str]:
        (staging / "a.json").write_text("new a")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_files(tmp_path, write)
    assert _files(tmp_path) == {"a.json": "old a"}


def test_a_staging_folder_without_a_commit_is_left_to_the_next_writer(tmp_path):
    dead = tmp_path / f"{STAGING_PREFIX}dead"
    dead.mkdir()
    (dead / "a.json").write_text("a write that never committed")
    assert not roll_forward(tmp_path) and dead.exists()  # a load leaves it
    replace_files(tmp_path, _write({"b.json": "b"}))
    assert _files(tmp_path) == {"b.json": "b"} and not _stagings(tmp_path)


def test_a_living_writers_staging_folder_is_never_taken_for_a_dead_ones(tmp_path):
    """Another writer's write in progress (its staging folder held) survives this writer's clean-up and a load
    finishing a dead writer's commit; only the folder the record names is moved in and removed."""
    living = tmp_path / f"{STAGING_PREFIX}living"
    living.mkdir()
    (living / "x.json").write_text("being written")
    dead = tmp_path / f"{STAGING_PREFIX}dead"
    dead.mkdir()
    (dead / "a.json").write_text("committed a")
    (tmp_path / RECORD).write_text(json.dumps({"staging": dead.name, "moves": ["a.json"], "deletes": []}))
    with hold_folder(living):  # a living writer holds its own (another descriptor: another holder to flock)
        assert roll_forward(tmp_path)  # a load finishes the dead writer's commit
        assert _files(tmp_path) == {"a.json": "committed a", f"{living.name}/x.json": "being written"}
        replace_files(tmp_path, _write({"b.json": "b"}))
        assert _stagings(tmp_path) == [living.name]
    replace_files(tmp_path, _write({"c.json": "c"}))  # its writer died: dropped now
    assert _stagings(tmp_path) == [] and _files(tmp_path) == {"a.json": "committed a", "b.json": "b", "c.json": "c"}


def test_a_failure_mid_switch_keeps_the_staged_files_for_the_roll_forward(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("old a")
    _crash_after(monkeypatch, 1)  # an error raised (not a kill): the process goes on
    with pytest.raises(Crash):
        replace_files(tmp_path, _write({"a.json": "new a", "b.json": "new b"}))
    monkeypatch.undo()
    assert len(_stagings(tmp_path)) == 1 and roll_forward(tmp_path)
    assert _files(tmp_path) == {"a.json": "new a", "b.json": "new b"}


def test_a_record_naming_files_outside_the_folder_is_refused(tmp_path):
    (tmp_path / "outside.txt").write_text("keep me")
    folder = tmp_path / "index"
    folder.mkdir()
    staging = f"{STAGING_PREFIX}x"
    (folder / RECORD).write_text(json.dumps({"staging": staging, "moves": [], "deletes": ["../outside.txt"]}))
    with pytest.raises(ValueError, match="not a file inside"):
        roll_forward(folder)
    assert (tmp_path / "outside.txt").read_text() == "keep me"
    (folder / RECORD).write_text(json.dumps({"staging": "..", "moves": [], "deletes": []}))
    with pytest.raises(ValueError, match="not a staging folder"):
        roll_forward(folder)
    (folder / RECORD).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        roll_forward(folder)


def test_a_crash_during_a_full_persist_reloads_the_old_or_the_new_persist(corpus, rng, tmp_path, monkeypatch):
    """Kill the full persist of an edited retriever after each of its moves, and once before its commit: the
    folder reloads as the persist before it (killed before the commit) or as the edited retriever (after)."""
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path / "old", persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 5))
    r.delete_nodes([evidence[3].node_id])
    r.persist(tmp_path / "new", persist_index=True)
    old = ContextAwareRetriever.from_persist_dir(tmp_path / "old", embed_model=emb)
    new = tmp_path / "new"
    n_files = len([p for p in new.rglob("*") if p.is_file() and not is_bookkeeping(p.relative_to(new).as_posix())])
    for k in range(n_files):
        folder = tmp_path / f"crash{k}"
        old.persist(folder, persist_index=True)
        _crash_after(monkeypatch, k)
        with pytest.raises(Crash):
            r.persist(folder, persist_index=True, compact=True)
        monkeypatch.undo()
        _assert_same(ContextAwareRetriever.from_persist_dir(folder, embed_model=emb), r, claims)

    def killed(*args, **kwargs):
        raise Crash("before the commit record")

    folder = tmp_path / "killed_before_commit"
    old.persist(folder, persist_index=True)
    monkeypatch.setattr(commit, "atomic_write_text", killed)
    with pytest.raises(Crash):
        r.persist(folder, persist_index=True, compact=True)
    monkeypatch.undo()
    assert not (folder / RECORD).exists()  # never committed
    _assert_same(ContextAwareRetriever.from_persist_dir(folder, embed_model=emb), old, claims)


def test_a_waiting_switch_holds_new_loads_back(tmp_path):
    """Loads that keep overlapping cannot starve a switch: once it waits, a new load waits behind it."""
    import subprocess
    import sys
    import threading
    import time

    from llama_index_carag.core.writer_lock import switching

    code = (
        "import sys, time\nfrom llama_index_carag.core.writer_lock import reading\n"
        "with reading(sys.argv[1]):\n    print(time.time(), flush=True)\n    time.sleep(float(sys.argv[2]))\n"
    )
    (tmp_path / SWITCH_INTENT_NAME).touch()  # a folder switched before
    first = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "1.5"], stdout=subprocess.PIPE, text=True)
    first.stdout.readline()  # the first load reads the folder now
    switched: list[float] = []

    def switch() -> None:
        with switching(tmp_path):
            switched.append(time.time())

    writer = threading.Thread(target=switch)
    writer.start()
    time.sleep(0.3)  # the switch waits for the first load
    second = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), "0"], capture_output=True, text=True, timeout=60
    )
    writer.join(60)
    first.wait(60)
    assert second.returncode == 0, second.stderr
    assert switched and float(second.stdout.split()[0]) >= switched[0]  # the second load came after the switch


def test_where_flock_cannot_tell_no_staging_folder_is_dropped(tmp_path, monkeypatch):
    """A file system without ``flock`` (some NFS mounts): a staging folder might be a living writer's, so it is
    kept; the write itself still commits."""
    from llama_index_carag.core import writer_lock

    other = tmp_path / f"{STAGING_PREFIX}other"
    other.mkdir()
    real = writer_lock.fcntl.flock

    def flock(fd, op):
        if op & writer_lock.fcntl.LOCK_EX and os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(
            STAGING_PREFIX
        ):
            raise OSError(9, "Bad file descriptor")
        return real(fd, op)

    monkeypatch.setattr(writer_lock.fcntl, "flock", flock)
    replace_files(tmp_path, _write({"a.json": "a"}))
    assert _stagings(tmp_path) == [other.name] and _files(tmp_path) == {"a.json": "a"}


def test_staged_files_gone_before_the_commit_commit_nothing(tmp_path, monkeypatch):
    """Staged files that went before the switch (another process deleted the staging folder) are never replaced
    by the commit's deletions: nothing is committed."""
    import shutil

    (tmp_path / "a.json").write_text("old a")
    real = commit._sync_tree

    def sync_then_lose(staging: Path) -> None:
        real(staging)
        shutil.rmtree(staging)

    monkeypatch.setattr(commit, "_sync_tree", sync_then_lose)
    with pytest.raises(RuntimeError, match="nothing was committed"):
        replace_files(tmp_path, _write({"b.json": "new b"}, ["a.json"]))
    assert _files(tmp_path) == {"a.json": "old a"} and not (tmp_path / RECORD).exists()


def test_a_switch_inside_a_load_of_the_same_thread_fails_at_once(tmp_path):
    import time

    from llama_index_carag.core.writer_lock import IndexBusyError, reading, switching

    started = time.monotonic()
    with reading(tmp_path), pytest.raises(IndexBusyError, match="This thread is reading"), switching(tmp_path):
        pass
    assert time.monotonic() - started < 5


def test_a_switch_waits_for_another_threads_load(tmp_path):
    import threading

    from llama_index_carag.core.writer_lock import reading, switching

    inside, release, switched = threading.Event(), threading.Event(), []

    def load() -> None:
        with reading(tmp_path):
            inside.set()
            release.wait(30)

    loader = threading.Thread(target=load)
    loader.start()
    assert inside.wait(30)
    threading.Timer(0.3, release.set).start()
    with switching(tmp_path):  # waits for the other thread's load, then switches
        switched.append(release.is_set())
    loader.join(30)
    assert switched == [True]
