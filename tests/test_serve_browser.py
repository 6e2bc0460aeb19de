"""The chat page in a real browser: headless Chromium (over the DevTools protocol) against a live
``carag serve`` on 127.0.0.1 with a free port, a stub LLM (``--llm-factory``) and an index whose
evidence carries hostile markup.  A control page that renders the same server output unsafely
proves the hostile-content detector catches an injection.

Waits are on DOM conditions (a MutationObserver in the page), never on sleeps.  Set
``CARAG_SERVE_SCREENSHOTS=docs/images`` to keep the screenshots.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from llama_index_carag.verdicts.types import confidence_words
from tests.serve_helpers import (
    CHROMIUM,
    CSP_RECORDER,
    DEFAULT_ANSWER,
    HOSTILE_PASSAGES,
    PROBE,
    Chromium,
    LiveServer,
    build_demo_index,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason="headless Chromium not installed (apt-get install chromium)",
    ),
]
CLAIM = "Offshore wind farms drive fish away."
HOSTILE_CLAIM = f"{PROBE} a glass teapot <img src=x onerror=\"document.body.dataset.pwned='claim'\"> orbits"

# The detector, shared by the real page and the control page.
DETECT = """(() => {
  const sel = '#evidence img, #evidence script, #evidence b, #explanation *, #answer *, #soi-summary *, '
            + '#chat-log img, #chat-log script, #chat-log b, #graph img, #graph script, #pwn';
  return {
    pwned: document.body.dataset.pwned || null,
    injected: document.querySelectorAll(sel).length,
    literal: (document.getElementById('evidence') || document.body).textContent.includes('<img src=x onerror='),
  };
})()"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    index = build_demo_index(tmp_path_factory.mktemp("serve") / "index", hostile=True)
    live = LiveServer(index, "--llm-factory", "tests.serve_helpers:make_stub_llm")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chrome = Chromium(tmp_path_factory.mktemp("chromium") / "profile")
    chrome.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_RECORDER)
    yield chrome
    chrome.close()


def keep_screenshot(chrome: Chromium, tmp_path: Path, name: str) -> Path:
    path = chrome.screenshot(tmp_path / name)
    target = os.environ.get("CARAG_SERVE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def type_into(chrome: Chromium, element_id: str, text: str) -> None:
    chrome.evaluate(f"document.getElementById({json.dumps(element_id)}).focus()")
    chrome.call("Input.insertText", text=text)


def open_page(chrome: Chromium, server: LiveServer) -> None:
    chrome.events.clear()
    chrome.navigate(server.url + "/")
    chrome.wait_for("document.body.dataset.ready === '1'")


def check_claim(chrome: Chromium, claim: str) -> None:
    type_into(chrome, "claim", claim)
    chrome.evaluate("document.getElementById('check-btn').click()")
    chrome.wait_for(
        "['done', 'error'].includes(document.body.dataset.state) && "
        "['done', 'error'].includes(document.body.dataset.graph)"
    )


def send_chat(chrome: Chromium, message: str) -> None:
    type_into(chrome, "chat-input", message)
    chrome.evaluate("document.getElementById('chat-send').click()")
    chrome.wait_for("['done', 'error'].includes(document.body.dataset.chat)")


def test_check_a_claim_in_the_browser(server, browser, tmp_path):
    open_page(browser, server)
    assert "serve-stub" in browser.evaluate("document.getElementById('info').textContent")
    check_claim(browser, CLAIM)
    page = browser.evaluate("""(() => ({
      state: document.body.dataset.state, graph: document.body.dataset.graph,
      label: document.getElementById('verdict-label').textContent,
      explanation: document.getElementById('explanation').textContent,
      answer: document.getElementById('answer').textContent,
      rows: [...document.querySelectorAll('#evidence tbody tr')].map(r => [r.dataset.id, r.classList.contains('cited')]),
      points: document.querySelectorAll('#graph .scatterlayer .point').length,
      summary: document.getElementById('soi-summary').textContent,
      csp: window.__csp,
    }))()""")
    assert (page["state"], page["graph"]) == ("done", "done"), browser.evaluate(
        "document.getElementById('error').textContent"
    )
    api = _api_check(server, CLAIM)
    verdict = api["verdict"]
    assert verdict["label"] == "REFUTED" and page["label"] == f"REFUTED ({confidence_words(verdict['confidence'])})"
    assert page["explanation"] == api["verdict"]["explanation"]
    assert page["answer"] == DEFAULT_ANSWER  # every streamed token arrived, in order
    assert [rid for rid, _ in page["rows"]] == [row["id"] for row in api["evidence"]]
    assert [rid for rid, cited in page["rows"] if cited] == api["verdict"]["evidence_ids"]
    assert page["points"] > 1 and "SOI" in page["summary"]
    assert page["csp"] == [] and browser.console_errors() == []  # plotly.js runs under the CSP, no CDN
    keep_screenshot(browser, tmp_path, "serve_check.png")


def test_the_soi_summary_says_when_it_was_widened_and_why_it_is_empty(server, browser):
    claim = "The violin has four strings."  # nothing of the demo corpus is near it
    open_page(browser, server)
    check_claim(browser, claim)
    summary = browser.evaluate("document.getElementById('soi-summary').textContent")
    soi = _api_check(server, claim)["soi"]
    assert soi["empty_reason"] is None and soi["min_size"] == 3 and soi["threshold"] <= soi["delta"]
    assert "SOI 3 of " in summary and f"the 3 most similar, down to cosine {soi['threshold']:.2f}" in summary
    index = Path(server.proc.args[server.proc.args.index("--index") + 1])
    alone = LiveServer(index, "--no-llm", "--soi-min-size", "0")  # the papers' rule: delta alone
    try:
        open_page(browser, alone)
        check_claim(browser, claim)
        summary = browser.evaluate("document.getElementById('soi-summary').textContent")
        reason = _api_check(alone, claim)["soi"]["empty_reason"]
    finally:
        alone.stop()
    assert reason is not None and "δ=0.50" in reason["text"] and "(the closest: " in reason["text"]
    assert summary.endswith(" · " + reason["text"]) and "SOI 0 of " in summary


def _api_check(server: LiveServer, claim: str) -> dict:
    request = urllib.request.Request(
        server.url + "/v1/check",
        data=json.dumps({"claim": claim}).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(request, timeout=120).read())


def test_conversation_in_the_browser(server, browser, tmp_path):
    open_page(browser, server)
    browser.evaluate("document.getElementById('tab-chat').click()")
    send_chat(browser, CLAIM)
    send_chat(browser, "Which passage says so?")
    chat = browser.evaluate("""(() => ({
      state: document.body.dataset.chat,
      messages: [...document.querySelectorAll('#chat-log .msg')].map(m => m.className + '|' + m.firstChild.textContent),
      status: document.getElementById('chat-status').textContent,
    }))()""")
    assert chat["state"] == "done" and chat["status"] == "turn 2"
    assert [m.split("|")[0] for m in chat["messages"]] == ["msg user", "msg bot", "msg user", "msg bot"]
    assert re.match(
        r"msg bot\|REFUTED \(\d+%\): (?:(?:Likely|More likely than not): )?Passage \[1\] (?:appears to contradict|contradicts)",
        chat["messages"][1],
    )
    keep_screenshot(browser, tmp_path, "serve_chat.png")
    browser.evaluate("document.getElementById('chat-reset').click()")
    browser.wait_for("document.body.dataset.chat === 'idle' && !document.querySelector('#chat-log .msg')")


def test_hostile_content_is_shown_as_text(server, browser, tmp_path):
    open_page(browser, server)
    check_claim(browser, HOSTILE_CLAIM)
    assert browser.evaluate("document.body.dataset.state") == "done"
    texts = browser.evaluate("[...document.querySelectorAll('#evidence tbody td.text')].map(t => t.textContent)")

    shown = [t for t in texts if PROBE in t]
    assert shown and set(shown) <= set(HOSTILE_PASSAGES.values())  # the passages, character for character
    marked = browser.evaluate("[...document.querySelectorAll('#evidence mark.excerpt')].map(m => m.textContent)")
    api = _api_check(server, HOSTILE_CLAIM)
    excerpts = [row["stance_excerpt"] for row in api["evidence"] if row["stance_excerpt"]]
    assert marked and marked == excerpts  # the long passage's excerpt, marked in its text as text
    assert "<img src=x onerror=" in browser.evaluate("document.getElementById('answer').textContent")
    browser.evaluate("document.getElementById('tab-chat').click()")
    send_chat(browser, HOSTILE_CLAIM)
    found = browser.evaluate(DETECT)
    assert found == {"pwned": None, "injected": 0, "literal": True}, found
    assert browser.evaluate("window.__csp") == []
    keep_screenshot(browser, tmp_path, "serve_hostile.png")


def test_control_page_proves_the_detector(server, browser, tmp_path):
    """The same server output rendered with innerHTML: the detector must flag it."""
    api = _api_check(server, HOSTILE_CLAIM)
    assert any(PROBE in row["text"] for row in api["evidence"])
    payload = json.dumps(api).replace("<", "\\u003c")  # safe inside the control page's own script
    control = tmp_path / "control.html"
    control.write_text(
        "<!doctype html><html><body><table id=evidence><tbody></tbody></table><p id=explanation></p><script>"
        f"const r = {payload};"
        "document.querySelector('#evidence tbody').innerHTML = r.evidence.map(e => '<tr><td>' + e.text + '</td></tr>').join('');"
        "document.getElementById('explanation').innerHTML = r.verdict.raw;"
        "</script></body></html>",
        encoding="utf-8",
    )
    browser.navigate(control.as_uri())
    browser.wait_for("document.body.dataset.pwned")  # an injected onerror handler ran
    found = browser.evaluate(DETECT)
    assert found["pwned"] in {"evidence", "answer", "claim"} and found["injected"] > 0, found


def test_retrieval_only_server_in_the_browser(server, browser, tmp_path):
    index = Path(server.proc.args[server.proc.args.index("--index") + 1])
    live = LiveServer(index, "--no-llm")
    try:
        open_page(browser, live)
        check_claim(browser, CLAIM)
        page = browser.evaluate("""(() => ({
          state: document.body.dataset.state, graph: document.body.dataset.graph,
          label: document.getElementById('verdict-label').textContent,
          rows: document.querySelectorAll('#evidence tbody tr').length,
          cited: document.querySelectorAll('#evidence tbody tr.cited').length,
          chat: document.getElementById('tab-chat').disabled,
          info: document.getElementById('info').textContent,
        }))()""")
        assert page == {
            "state": "done",
            "graph": "done",
            "label": "no verdict (retrieval only)",
            "rows": 6,
            "cited": 0,
            "chat": True,
            "info": page["info"],
        }
        assert "no LLM" in page["info"] and browser.console_errors() == []
    finally:
        live.stop()
