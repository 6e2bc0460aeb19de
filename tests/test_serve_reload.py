"""``carag serve`` loads its index again when another process persisted it (:mod:`llama_index_carag.serve.reload`).

The writer is a real second process (``tests/test_shared_state.py``'s ``_Peer``); the server runs in this process
(FastAPI through httpx's ASGI transport: no socket).  A request is held in flight by an Event its query waits on,
never by sleeping; waits for the reload are bounded loops over ``GET /v1/info``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("fastapi")

from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.serve import ServeSettings, create_app
from llama_index_carag.serve.command import add_serve_arguments, settings_from_args
from tests.helpers import TableEmbedding
from tests.test_shared_state import DIM, TIMEOUT_S, _build, _Peer

#: The text of the peer's passage "new" 1: a claim with the same text embeds to the passage's own vector.
HELD = "new passage 1 about topic 1"
FOUND = "new passage 0 about topic 0"


class GatedEmbedding(TableEmbedding):
    """Embeds as the peer does; a query of :data:`HELD` waits for ``gate`` (``entered`` released first)."""

    def __init__(self) -> None:
        super().__init__({"probe": [1.0] + [0.0] * (DIM - 1)})
        self._gate, self._entered = threading.Event(), threading.Semaphore(0)

    def _get_query_embedding(self, query: str) -> list[float]:
        if query == HELD:
            self._entered.release()
            self._gate.wait(TIMEOUT_S)
        return super()._get_query_embedding(query)


@pytest.fixture
def peer() -> Any:
    """The writer: another process with its own retriever."""
    p = _Peer()
    yield p
    p.close()


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=TIMEOUT_S)


async def _index_state(c: httpx.AsyncClient, done: Any) -> dict[str, Any]:
    """``GET /v1/info``'s ``index`` once ``done(it)`` (each call may start the reload's look); bounded."""
    for _ in range(TIMEOUT_S * 20):
        state: dict[str, Any] = (await c.get("/v1/info")).json()["index"]
        if done(state):
            return state
        await anyio.sleep(0.05)
    raise AssertionError(f"the server's index never got there: {state}")


def _evidence(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [row["id"] for row in response.json()["evidence"]]


def test_a_persist_elsewhere_is_served_after_the_reload_and_a_request_in_flight_finishes(
    tmp_path: Path, peer: _Peer
) -> None:
    _build(tmp_path)
    embed = GatedEmbedding()
    served = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=embed)
    app = create_app(served, settings=ServeSettings(reload_interval_s=0.01))
    peer.ok("load", str(tmp_path))

    async def scenario() -> None:
        async with _client(app) as c:
            first = await _index_state(c, lambda s: True)
            assert first["reloads"] == 0 and first["folder"] == str(tmp_path.resolve()) and first["behind"] is None
            assert FOUND not in _evidence(await c.post("/v1/check", json={"claim": FOUND}))
            held: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def in_flight() -> None:
                    held.append(await c.post("/v1/check", json={"claim": HELD}))

                tg.start_soon(in_flight)
                await anyio.to_thread.run_sync(embed._entered.acquire)  # retrieving, on the copy loaded at start
                peer.ok("insert", ["new", 2])
                peer.ok("persist", str(tmp_path))  # the writer, another process
                state = await _index_state(c, lambda s: s["reloads"] == 1)
                assert state["behind"] is None and state["last_error"] is None and not state["reloading"]
                assert state["loaded_at"] >= first["loaded_at"]
                assert "new0" in _evidence(await c.post("/v1/check", json={"claim": FOUND}))  # the new copy
                embed._gate.set()
            assert "new1" not in _evidence(held[0])  # finished, whole, on the copy it started with
            assert "new1" in _evidence(await c.post("/v1/check", json={"claim": HELD}))

    try:
        anyio.run(scenario)
    finally:
        embed._gate.set()


def test_a_failed_reload_keeps_the_old_copy_and_one_reload_runs_at_a_time(
    tmp_path: Path, peer: _Peer, caplog: pytest.LogCaptureFixture
) -> None:
    _build(tmp_path)
    served = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=GatedEmbedding())
    release, calls = threading.Event(), []

    def broken(current: Any) -> Any:
        calls.append(current)
        release.wait(TIMEOUT_S)
        raise OSError("the disk went away")

    app = create_app(served, settings=ServeSettings(reload_interval_s=0.01), reload_index=broken)
    peer.ok("load", str(tmp_path))
    peer.ok("insert", ["new", 2])
    peer.ok("persist", str(tmp_path))

    async def scenario() -> None:
        async with _client(app) as c:
            await _index_state(c, lambda s: s["reloading"] and calls)
            for _ in range(5):  # requests while the reload runs: served by the old copy, no second reload
                assert "new0" not in _evidence(await c.post("/v1/check", json={"claim": FOUND}))
            assert len(calls) == 1
            release.set()
            state = await _index_state(c, lambda s: s["last_error"] is not None)
            assert state["reloads"] == 0 and "the disk went away" in state["last_error"]
            assert "persisted by another writer" in state["behind"]
            assert "new0" not in _evidence(await c.post("/v1/check", json={"claim": FOUND}))  # still served

    with caplog.at_level(logging.WARNING, logger="llama_index_carag.serve.reload"):
        anyio.run(scenario)
    assert any("Could not reload the index (OSError: the disk went away)" in r.getMessage() for r in caplog.records)


def test_reload_interval_setting_and_flag() -> None:
    assert ServeSettings().reload_interval_s == 5.0 and ServeSettings(reload_interval_s=None).reload_interval_s is None
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="reload_interval_s"):
            ServeSettings(reload_interval_s=bad)
    import argparse

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser, lambda flag: int)
    assert settings_from_args(parser.parse_args(["--reload-interval", "0.5"])).reload_interval_s == 0.5
    assert settings_from_args(parser.parse_args(["--reload-interval", "0"])).reload_interval_s is None


def test_the_default_reload_keeps_what_the_served_retriever_carries_or_is_off(tmp_path: Path) -> None:
    """``reloaded()`` keeps the settings, extra scorers, callbacks and verbosity; a retriever whose folder lacks
    its index, or that searches custom sources, is served without reload (and says why) rather than failing
    to reload forever."""
    from llama_index.core.callbacks import CallbackManager

    from tests.test_settings import ConstantBoost
    from tests.test_shared_state import _embed, _node

    _build(tmp_path)
    loaded = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=_embed())
    callbacks = CallbackManager([])
    served = ContextAwareRetriever(
        loaded.index,
        loaded.corpus,
        loaded.settings.replace(similarity_top_k=3),
        scorers=[ConstantBoost("e7")],
        callback_manager=callbacks,
        verbose=True,
    )
    assert served.reload_blocker() is None
    fresh = served.reloaded()
    assert fresh is not served and fresh.settings == served.settings
    assert fresh.callback_manager is callbacks and fresh._verbose
    assert [n.node.node_id for n in fresh.retrieve("e 3")][0] == "e7"  # the boost came along
    app = create_app(served, settings=ServeSettings(reload_interval_s=0.01))
    assert app.state.engine.reloader.status()["reload_interval_s"] == 0.01

    custom = ContextAwareRetriever(loaded.index, loaded.corpus, loaded.settings, sources=[])
    assert "custom candidate sources" in (custom.reload_blocker() or "")
    unsaved = ContextAwareRetriever.from_index(
        build_faiss_index([_node(i) for i in range(30)], _embed(), id_map=True), n_clusters=2, random_state=0
    )
    assert "neither loaded" in (unsaved.reload_blocker() or "")
    unsaved.persist(tmp_path / "state_only")  # the CARAG state without the index
    assert "without the index" in (unsaved.reload_blocker() or "")
    for retriever in (custom, unsaved):
        status = create_app(retriever, settings=ServeSettings(reload_interval_s=0.01)).state.engine.reloader.status()
        assert status["reload_interval_s"] is None
        with pytest.raises(ValueError, match="cannot be reloaded"):
            retriever.reloaded()


def test_an_idle_chat_session_holds_no_copy_of_the_index(tmp_path: Path, peer: _Peer) -> None:
    """A session keeps its conversation, not a bot on the index it started with: after a reload the old copy is
    freed though the session lives on, and its next turn (a follow-up, condensed with its memory) runs on the
    new copy."""
    import gc
    import weakref

    from llama_index.core.llms import MockLLM

    from tests.test_shared_state import _embed

    _build(tmp_path)
    served = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=_embed())
    old = weakref.ref(served)
    app = create_app(served, llm=MockLLM(max_tokens=8), settings=ServeSettings(reload_interval_s=0.01))
    del served
    peer.ok("load", str(tmp_path))

    async def scenario() -> None:
        async with _client(app) as c:
            sid = (await c.post("/v1/sessions")).json()["session_id"]
            first = await c.post(f"/v1/sessions/{sid}/messages", json={"message": FOUND})
            assert first.status_code == 200, first.text
            peer.ok("insert", ["new", 1])
            peer.ok("persist", str(tmp_path))
            await _index_state(c, lambda s: s["reloads"] == 1)
            for _ in range(3):
                gc.collect()
            assert old() is None  # the session idles on; the copy it chatted on is gone
            second = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "And since?"})
            assert second.status_code == 200, second.text  # on the new copy: the only one left
            assert [m for m, _ in app.state.sessions.get(sid).history] == [FOUND, "And since?"]

    anyio.run(scenario)
