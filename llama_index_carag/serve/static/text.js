// "Check a text" on the page of `carag serve`: the text is sent to POST /v1/check-text, its
// check-worthy claims are highlighted as the stream names them, each coloured and tagged by its
// verdict as it arrives; a click (or Enter) on a claim opens its check with the renderers of the
// "Check a claim" tab (app.js: renderEvidence, renderVerdict). Text goes in with textContent and
// text nodes only, never innerHTML. Loaded after app.js (both deferred), whose helpers it uses.
"use strict";

// Each verdict's symbol and words: the highlight is never told by its colour alone.
const TEXT_TAGS = {
  SUPPORTED: "✓ supported",
  REFUTED: "✗ refuted",
  NOT_ENOUGH_INFO: "? not enough info",
  none: "– no verdict",
  pending: "… checking",
  failed: "! not checked",
};
let textClaims = [];  // per claim index: {found, data (the `claim` event) or error (the `claim_error` event)}
let openedClaim = null;

function claimView() {
  return { label: $("claim-verdict-label"), explanation: $("claim-explanation"), table: $("claim-evidence"), soi: $("claim-soi-summary") };
}

// Offsets of the server (Python: code points) as offsets of a JS string (UTF-16 units): at[i].
function utf16Offsets(text) {
  const at = [0];
  let unit = 0;
  for (const ch of text) {
    unit += ch.length;
    at.push(unit);
  }
  return at;
}

function claimKind(entry) {
  if (entry.error) return "failed";
  if (!entry.data) return "pending";
  const verdict = entry.data.check.verdict;
  return verdict ? verdict.label : "none";
}

function markClaim(index) {
  const mark = document.querySelector(`#text-view mark[data-index="${index}"]`);
  if (!mark) return;
  const entry = textClaims[index];
  const kind = claimKind(entry);
  mark.className = "claim " + kind;
  mark.dataset.label = kind;
  mark.lastChild.textContent = TEXT_TAGS[kind];
  const why = entry.error ? `: ${entry.error.error.message}` : "";
  mark.setAttribute("aria-label", `Claim ${index + 1}, ${TEXT_TAGS[kind].slice(2)}${why}. Open its evidence.`);
  mark.title = TEXT_TAGS[kind].slice(2) + why;
}

function claimMark(found, text) {
  const mark = el("mark");
  mark.dataset.index = String(found.index);
  mark.tabIndex = 0;
  mark.setAttribute("role", "button");
  mark.append(el("span", text, "claim-text"), el("span", "", "tag"));
  mark.lastChild.setAttribute("aria-hidden", "true");
  mark.addEventListener("click", () => showClaim(found.index));
  mark.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      showClaim(found.index);
    }
  });
  return mark;
}

// The text as the server checked it, its claims as <mark>s, the other sentences as plain text.
function renderText(found) {
  const view = $("text-view");
  view.replaceChildren();
  const at = utf16Offsets(found.text);
  let pos = 0;
  textClaims = found.claims.map((c) => ({ found: c }));
  for (const c of found.claims) {
    const start = at[c.start], end = at[c.end];
    if (start === undefined || end === undefined || start < pos) continue;  // never: sentences do not overlap
    if (start > pos) view.append(document.createTextNode(found.text.slice(pos, start)));
    view.append(claimMark(c, found.text.slice(start, end)));
    markClaim(c.index);
    pos = end;
  }
  view.append(document.createTextNode(found.text.slice(pos)));
}

function openClaim(index) {
  const entry = textClaims[index];
  if (!entry) return;
  openedClaim = index;
  for (const m of document.querySelectorAll("#text-view mark.open")) m.classList.remove("open");
  document.querySelector(`#text-view mark[data-index="${index}"]`).classList.add("open");
  const box = $("claim-detail");
  box.hidden = false;
  $("claim-title").textContent = `Claim ${index + 1} of ${textClaims.length}`;
  $("claim-quote").textContent = entry.found.text;
  const cues = entry.data ? entry.data.cues.map((c) => c.name).join(", ") : "";
  $("claim-why").textContent = `check-worthiness ${entry.found.check_worthiness}` + (cues ? ` (cues: ${cues})` : "");
  $("claim-body").hidden = !entry.data;
  $("claim-note").textContent = entry.error ? errorText(entry.error, "") : entry.data ? "" : "still being checked…";
  if (entry.data) {
    renderEvidence(entry.data.check, claimView());
    renderVerdict(entry.data.check.verdict, claimView());
  }
  setState("claim", String(index));
}

// A claim opened by the user: its check, scrolled into view (a long text puts it below the fold).
function showClaim(index) {
  openClaim(index);
  $("claim-detail").scrollIntoView({ block: "nearest" });
}

function renderTextSummary(summary) {
  const l = summary.labels;
  const parts = [`${summary.claims} checked claim${summary.claims === 1 ? "" : "s"} in ${summary.sentences} sentences`];
  if (summary.claims) {
    parts.push(`${l.SUPPORTED} supported`, `${l.REFUTED} refuted`, `${l.NOT_ENOUGH_INFO} not enough info`);
  }
  if (summary.without_verdict) parts.push(`${summary.without_verdict} without a verdict (retrieval only)`);
  if (summary.failed) parts.push(`${summary.failed} not checked (error)`);
  $("text-summary").textContent = parts.join(" · ") + (summary.claims || summary.failed ? "" : " — no check-worthy claim found");
}

async function checkText(event) {
  event.preventDefault();
  const text = $("text-input").value;
  if (!text.trim()) return;
  $("text-error").hidden = true;
  $("text-btn").disabled = true;
  $("claim-detail").hidden = true;
  $("text-status").textContent = "finding the claims…";
  setState("text", "checking");
  setState("claim", "");
  openedClaim = null;
  try {
    const r = await postStream("/v1/check-text", { text });
    await readTextEvents(r);
    setState("text", "done");
  } catch (err) {
    const box = $("text-error");
    box.textContent = err.message;
    box.hidden = false;
    $("text-status").textContent = "";
    setState("text", "error");
  } finally {
    $("text-btn").disabled = false;
  }
}

async function readTextEvents(response) {
  let done = 0, finished = false;
  for await (const { event, data } of sse(response)) {
    if (event === "claims") {
      $("text-result").hidden = false;
      $("text-summary").textContent = "";
      renderText(data);
    } else if (event === "claim" || event === "claim_error") {
      textClaims[data.index][event === "claim" ? "data" : "error"] = data;
      markClaim(data.index);
      if (openedClaim === data.index) openClaim(data.index);
    } else if (event === "summary") {
      renderTextSummary(data);
      finished = true;
    } else if (event === "error") {
      throw new Error(errorText(data, "stream"));
    }
    if (event === "claim" || event === "claim_error") done += 1;
    $("text-status").textContent = finished ? "done" : `checking claim ${Math.min(done + 1, textClaims.length)} of ${textClaims.length}…`;
  }
  if (!finished) throw new Error("the stream ended early");
}

document.addEventListener("DOMContentLoaded", () => {
  $("text-form").addEventListener("submit", checkText);
});
