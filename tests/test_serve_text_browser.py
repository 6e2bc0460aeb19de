"""The page's "Check a text" mode in a real browser: headless Chromium (DevTools protocol) against a live
``carag serve`` on 127.0.0.1 with a free port and a stub LLM whose verdict follows the claim's words
(``tests.serve_text_helpers:make_label_stub_llm``, ``--decision llm``): paste a text, see its claims highlighted by verdict
(plain sentences stay plain), open one, see its evidence — the same as ``POST /v1/check`` of that claim.

Waits are on DOM conditions, never on sleeps.  ``CARAG_SERVE_SCREENSHOTS=docs/screenshots`` keeps the
screenshots.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from tests.serve_helpers import CHROMIUM, CSP_RECORDER, Chromium, LiveServer, build_demo_index

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason="headless Chromium not installed (apt-get install chromium)",
    ),
]

HOSTILE = "The glass teapot <img src=x onerror=\"document.body.dataset.pwned='text'\"> orbited Mars 3 times in 2021."
# Paragraphs as a user pastes them: greetings, a question, an opinion (plain) and four claims, one per
# verdict of the stub and one carrying markup that must stay text.
TEXT = (
    "Good morning — and welcome to our weekly energy newsletter.\n\n"
    "Offshore wind farms drive fish away from the surrounding waters, according to a local group. "
    "Is that really true? The cost of solar panels fell by more than 80% between 2010 and 2020. "
    "I think that is wonderful news.\n\n"
    "Heat pumps cannot heat homes when outdoor temperatures fall below freezing. "
    f"{HOSTILE} Thanks for reading!"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    index = build_demo_index(tmp_path_factory.mktemp("serve-text") / "index")
    live = LiveServer(index, "--llm-factory", "tests.serve_text_helpers:make_label_stub_llm", "--decision", "llm")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chrome = Chromium(tmp_path_factory.mktemp("chromium-text") / "profile")
    chrome.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_RECORDER)
    yield chrome
    chrome.close()


def post(server: LiveServer, path: str, body: dict) -> bytes:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as r:
        return r.read()


def api_text_check(server: LiveServer, text: str) -> list[dict]:
    """The ``claim`` events of ``POST /v1/check-text``."""
    out = []
    for block in post(server, "/v1/check-text", {"text": text}).decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        if lines["event"] == "claim":
            out.append(json.loads(lines["data"]))
    return out


def keep_screenshot(chrome: Chromium, tmp_path: Path, name: str) -> Path:
    path = chrome.screenshot(tmp_path / name)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("CARAG_SERVE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    return path


def check_the_text(chrome: Chromium, server: LiveServer, text: str) -> None:
    chrome.events.clear()
    chrome.navigate(server.url + "/")
    chrome.wait_for("document.body.dataset.ready === '1'")
    chrome.evaluate("document.getElementById('tab-text').click()")
    chrome.evaluate("document.getElementById('text-input').focus()")
    chrome.call("Input.insertText", text=text)
    chrome.evaluate("document.getElementById('text-btn').click()")
    chrome.wait_for("['done', 'error'].includes(document.body.dataset.text)")


PAGE_TEXT = """(() => {
  const view = document.getElementById('text-view');
  const plain = [...view.childNodes].filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent);
  return {
    state: document.body.dataset.text,
    error: document.getElementById('text-error').textContent,
    marks: [...view.querySelectorAll('mark')].map(m => ({
      text: m.querySelector('.claim-text').textContent, label: m.dataset.label,
      tag: m.querySelector('.tag').textContent, aria: m.getAttribute('aria-label'), role: m.getAttribute('role'),
    })),
    shown: plain.join('') + [...view.querySelectorAll('.claim-text')].map(s => s.textContent).join(''),
    rebuilt: [...view.childNodes].map(n => n.nodeType === Node.TEXT_NODE ? n.textContent
             : n.querySelector('.claim-text').textContent).join(''),
    plain,
    summary: document.getElementById('text-summary').textContent,
    legend: document.getElementById('text-legend').textContent,
    injected: view.querySelectorAll('img, script').length,
    pwned: document.body.dataset.pwned || null,
    csp: window.__csp,
  };
})()"""


def test_paste_a_text_see_its_claims_by_verdict(server, browser, tmp_path):
    check_the_text(browser, server, TEXT)
    page = browser.evaluate(PAGE_TEXT)
    assert page["state"] == "done", page["error"]
    api = api_text_check(server, TEXT)
    assert [m["text"] for m in page["marks"]] == [c["text"] for c in api] and len(api) == 4
    assert [m["label"] for m in page["marks"]] == [c["check"]["verdict"]["label"] for c in api]
    assert [m["label"] for m in page["marks"]] == ["REFUTED", "SUPPORTED", "NOT_ENOUGH_INFO", "NOT_ENOUGH_INFO"]
    # not by colour alone: a tag and an accessible name say the verdict in words
    assert [m["tag"] for m in page["marks"]] == ["✗ refuted", "✓ supported", "? not enough info", "? not enough info"]
    assert page["marks"][0]["aria"].startswith("Claim 1, refuted.") and page["marks"][0]["role"] == "button"
    assert "✓ supported" in page["legend"] and "✗ refuted" in page["legend"] and "not enough info" in page["legend"]
    # the text is shown whole, in order, the claims exactly at their spans (after the emoji), the rest plain
    assert page["rebuilt"] == TEXT
    plain = "".join(page["plain"])
    for sentence in ("Is that really true?", "I think that is wonderful news.", "Thanks for reading!", "Good morning"):
        assert sentence in plain
    assert HOSTILE in [m["text"] for m in page["marks"]]  # the markup is text
    assert (page["injected"], page["pwned"], page["csp"]) == (0, None, [])
    assert "4 checked claims in 8 sentences" in page["summary"] and "1 supported · 1 refuted" in page["summary"]
    assert browser.console_errors() == []
    keep_screenshot(browser, tmp_path, "serve_text_checked.png")


def test_open_a_claim_see_its_evidence(server, browser, tmp_path):
    check_the_text(browser, server, TEXT)
    browser.evaluate("document.querySelector('#text-view mark[data-index=\"0\"]').click()")
    browser.wait_for("document.body.dataset.claim === '0'")
    detail = browser.evaluate("""(() => ({
      hidden: document.getElementById('claim-detail').hidden,
      title: document.getElementById('claim-title').textContent,
      quote: document.getElementById('claim-quote').textContent,
      label: document.getElementById('claim-verdict-label').textContent,
      explanation: document.getElementById('claim-explanation').textContent,
      rows: [...document.querySelectorAll('#claim-evidence tbody tr')].map(r => [r.dataset.id, r.classList.contains('cited')]),
      texts: [...document.querySelectorAll('#claim-evidence tbody td.text')].map(t => t.textContent),
      soi: document.getElementById('claim-soi-summary').textContent,
      why: document.getElementById('claim-why').textContent,
      open: [...document.querySelectorAll('#text-view mark.open')].map(m => m.dataset.index),
    }))()""")
    claim = "Offshore wind farms drive fish away from the surrounding waters, according to a local group."
    api = json.loads(post(server, "/v1/check", {"claim": claim}))
    assert not detail["hidden"] and detail["title"] == "Claim 1 of 4" and detail["quote"] == claim
    assert detail["label"] == api["verdict"]["label"] == "REFUTED"
    assert detail["explanation"] == api["verdict"]["explanation"]
    assert [rid for rid, _ in detail["rows"]] == [row["id"] for row in api["evidence"]] and len(detail["rows"]) == 6
    assert [rid for rid, cited in detail["rows"] if cited] == api["verdict"]["evidence_ids"]
    assert detail["texts"] == [row["text"] for row in api["evidence"]]
    assert "SOI" in detail["soi"] and "check-worthiness" in detail["why"] and detail["open"] == ["0"]
    keep_screenshot(browser, tmp_path, "serve_text_claim.png")
    # the keyboard opens a claim too
    browser.evaluate(
        "document.querySelector('#text-view mark[data-index=\"1\"]')"
        ".dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}))"
    )
    browser.wait_for("document.body.dataset.claim === '1'")
    assert browser.evaluate("document.getElementById('claim-verdict-label').textContent") == "SUPPORTED"
    assert browser.console_errors() == [] and browser.evaluate("window.__csp") == []


def test_a_text_over_the_claim_limit_shows_the_error(server, browser, tmp_path):
    many = " ".join(f"Offshore wind farm number {i} moved {i} fish in 2020." for i in range(60))
    check_the_text(browser, server, many)
    assert browser.evaluate("document.body.dataset.text") == "error"
    message = browser.evaluate("document.getElementById('text-error').textContent")
    assert message.startswith("too_many_claims: text: has 60 check-worthy claims; the limit is 50")


def test_spans_after_characters_outside_the_bmp(server, browser):
    """The server's offsets count code points, JavaScript's UTF-16 units: an emoji before a claim must not
    shift its highlight."""
    text = "\U0001f41f\U0001f30a Hi \U0001f44b! Offshore wind farms drive fish away from the North Sea coast. Bye \U0001f44b."
    check_the_text(browser, server, text)
    page = browser.evaluate(PAGE_TEXT)
    assert page["state"] == "done", page["error"]
    assert [m["text"] for m in page["marks"]] == ["Offshore wind farms drive fish away from the North Sea coast."]
    assert page["rebuilt"] == text and page["marks"][0]["label"] == "REFUTED"
