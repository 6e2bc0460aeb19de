// The chat page of `carag serve`. Every piece of text from the server or the user is
// written with textContent (never innerHTML), so evidence or claims cannot inject markup.
"use strict";

const $ = (id) => document.getElementById(id);
const limits = { max_claim_chars: 2000, max_message_chars: 2000, max_text_chars: 20000 };
let sessionId = null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmt(x) {
  return typeof x === "number" && isFinite(x) ? x.toFixed(3) : "-";
}

function setState(key, value) {
  document.body.dataset[key] = value;
}

function errorText(payload, status) {
  const e = payload && payload.error;
  return e ? `${e.code}: ${e.message}` : `HTTP ${status}`;
}

async function post(url, body) {
  return fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

async function postJSON(url, body) {
  const r = await post(url, body);
  let payload = null;
  try { payload = await r.json(); } catch (_) { payload = null; }
  if (!r.ok) throw new Error(errorText(payload, r.status));
  return payload;
}

// A streamed POST: the response, or an Error with the server's error text when it refused the request.
async function postStream(url, body) {
  const r = await post(url, body);
  if (!r.ok) {
    let payload = null;
    try { payload = await r.json(); } catch (_) { payload = null; }
    throw new Error(errorText(payload, r.status));
  }
  return r;
}

// Server-Sent Events over fetch (EventSource cannot POST): yields {event, data}.
async function* sse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = false;
}

// The elements that show one check: the "Check a claim" tab's (the default), or the text tab's opened claim.
function checkView() {
  return { label: $("verdict-label"), explanation: $("explanation"), table: $("evidence"), soi: $("soi-summary") };
}

// " (likely, 74%)": the verdict's calibrated confidence in words, as the CLI prints it ("" without one).
function confidenceText(confidence) {
  if (confidence === null || confidence === undefined) return "";
  const words = confidence >= 0.9 ? "very likely" : confidence >= 0.7 ? "likely" : confidence >= 0.5 ? "more likely than not" : "unsure";
  return ` (${words}, ${Math.round(confidence * 100)}%)`;
}

function renderVerdict(verdict, view = checkView()) {
  const label = view.label;
  label.textContent = verdict ? verdict.label + confidenceText(verdict.confidence) : "no verdict (retrieval only)";
  label.className = "badge " + (verdict ? verdict.label : "");
  label.title = verdict && verdict.decision_reason ? verdict.decision_reason : "";
  view.explanation.textContent = verdict ? verdict.explanation + (verdict.parsed ? "" : " (no label found in the model's answer)") : "";
  const cited = new Set(verdict ? verdict.evidence_ids : []);
  const stances = new Map(((verdict && verdict.passage_stances) || []).map((s) => [String(s.number), s]));
  for (const row of view.table.tBodies[0].rows) {
    renderStance(row.cells[6], stances.get(row.dataset.rank));
    renderPassage(row.cells[8], row.dataset.text, (stances.get(row.dataset.rank) || {}).excerpt);
    const isCited = cited.has(row.dataset.id);
    row.classList.toggle("cited", isCited);
    row.cells[0].textContent = (isCited ? "★ " : "") + row.dataset.rank;
  }
}

// A passage's own stance towards the claim (the verifier's): a word, its probability and a colour, and the
// three probabilities when they are known ("S .91 R .03 N .06").
const STANCE_WORDS = { SUPPORTED: "supports", REFUTED: "refutes", NOT_ENOUGH_INFO: "neither" };
function renderStance(cell, stance) {
  if (!cell) return;
  if (stance) {
    const probs = stance.probabilities;
    const all = probs ? ` (S ${fmt(probs.SUPPORTED)} R ${fmt(probs.REFUTED)} N ${fmt(probs.NOT_ENOUGH_INFO)})` : "";
    cell.textContent = `${STANCE_WORDS[stance.stance] || stance.stance} ${fmt(stance.score)}${all}`;
    cell.className = "stance " + stance.stance;
    return;
  }
  cell.textContent = "-";
  cell.className = "stance";
}

// A passage's text as stored, the excerpt its stance was read from (a long passage's decisive chunk, its
// whitespace collapsed) marked in it: less a leading metadata header read with the first chunk, as the server's
// shown_excerpt does (at most half of its words dropped).
function renderPassage(cell, text, excerpt) {
  if (!cell) return;
  const raw = String(text ?? "");
  const words = String(excerpt ?? "").split(/\s+/).filter(Boolean).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  let found = null;
  for (let skip = 0; words.length && skip <= Math.floor(words.length / 2) && !found; skip++) {
    found = new RegExp(words.slice(skip).join("\\s+")).exec(raw);
  }
  if (!found || found[0] === raw.trim()) {
    cell.textContent = raw;
    return;
  }
  const mark = el("mark", found[0], "excerpt");
  mark.title = "the passage's stance was read from this part";
  cell.replaceChildren(raw.slice(0, found.index), mark, raw.slice(found.index + found[0].length));
}

function renderEvidence(result, view = checkView()) {
  const body = view.table.tBodies[0];
  body.replaceChildren();
  for (const row of result.evidence) {
    const tr = document.createElement("tr");
    tr.dataset.id = row.id;
    tr.dataset.rank = String(row.rank);
    const c = row.carag || {};
    const kind = c.in_soi ? String(c.soi_kind || "yes").replace(/_.*/, "") : "-";
    for (const v of [row.rank, fmt(row.score), c.cluster ?? "-", fmt(c.claim_similarity), fmt(c.thematic_similarity), kind]) {
      tr.append(el("td", v));
    }
    const stance = el("td", "-", "stance");
    const scored = row.stance ? { stance: row.stance, score: row.stance_score, probabilities: row.stance_probabilities } : null;
    renderStance(stance, scored);
    tr.append(stance);
    tr.append(el("td", row.id));
    tr.dataset.text = row.text;
    const text = el("td", null, "text");
    renderPassage(text, row.text, row.stance_excerpt);
    text.dir = "auto";
    tr.append(text);
    body.append(tr);
  }
  const soi = result.soi || {};
  const size = ["annotated_evidences", "related_claims", "thematic_cluster_evidences", "refined_cluster_evidences"]
    .reduce((n, k) => n + ((soi[k] || []).length), 0);
  const s = result.settings;
  view.soi.textContent =
    `${s.mode} · alpha ${s.alpha} · delta ${s.delta} · k ${s.similarity_top_k} · claim cluster ${soi.cluster ?? "-"}` +
    (soi.theme ? ` (theme ${soi.theme})` : "") + ` · SOI ${size} of ${soi.cluster_size ?? "?"} cluster items` +
    (size > 0 && soi.threshold != null && soi.threshold <= soi.delta
      ? ` (fewer than ${soi.min_size} above delta: the ${soi.min_size} most similar, down to cosine ${soi.threshold.toFixed(2)})`
      : "") +
    (size === 0 ? ` · ${soi.empty_reason ? soi.empty_reason.text : "SOI empty: the query is the claim alone"}` : "");
}

async function drawGraph(claim) {
  setState("graph", "pending");
  const div = $("graph");
  div.replaceChildren();
  try {
    const out = await postJSON("/v1/graph", { claim });
    if (typeof Plotly === "undefined") throw new Error("plotly.js did not load");
    await Plotly.newPlot(div, out.figure.data, out.figure.layout, { displaylogo: false, responsive: true });
    setState("graph", "done");
  } catch (err) {
    div.append(el("p", `graph unavailable: ${err.message}`, "error"));
    setState("graph", "error");
  }
}

async function check(event) {
  event.preventDefault();
  const claim = $("claim").value;
  if (!claim.trim()) return;
  $("error").hidden = true;
  $("check-btn").disabled = true;
  $("status").textContent = "retrieving evidence…";
  $("answer").textContent = "";
  setState("state", "checking");
  const graph = drawGraph(claim);
  try {
    const r = await postStream("/v1/check/stream", { claim });
    let finished = false;
    for await (const { event, data } of sse(r)) {
      if (event === "evidence") {
        $("result").hidden = false;
        renderEvidence(data);
        renderVerdict(null);
        $("verdict-label").textContent = "…";
        $("status").textContent = "the model is answering…";
      } else if (event === "token") {
        $("answer").textContent += data.text;
      } else if (event === "verdict") {
        renderVerdict(data);
      } else if (event === "done") {
        renderVerdict(data.verdict);
        finished = true;
      } else if (event === "error") {
        throw new Error(errorText(data, "stream"));
      }
    }
    if (!finished) throw new Error("the stream ended early");
    $("status").textContent = "done";
    setState("state", "done");
  } catch (err) {
    showError(err.message);
    $("status").textContent = "";
    setState("state", "error");
  } finally {
    $("check-btn").disabled = false;
    await graph;
  }
}

function chatMessage(cls, text) {
  const div = el("div", text, "msg " + cls);
  div.dir = "auto";
  $("chat-log").append(div);
  return div;
}

async function sendChat(event) {
  event.preventDefault();
  const message = $("chat-input").value;
  if (!message.trim()) return;
  $("chat-send").disabled = true;
  setState("chat", "sending");
  $("chat-status").textContent = "thinking…";
  chatMessage("user", message);
  try {
    if (!sessionId) sessionId = (await postJSON("/v1/sessions", {})).session_id;
    const turn = await postJSON(`/v1/sessions/${encodeURIComponent(sessionId)}/messages`, { message });
    const sure = turn.verdict.confidence == null ? "" : ` (${Math.round(turn.verdict.confidence * 100)}%)`;
    const div = chatMessage("bot", `${turn.verdict.label}${sure}: ${turn.verdict.explanation}`);
    const list = el("ol");
    const cited = new Set(turn.verdict.evidence_ids);
    for (const row of turn.evidence) {
      const item = el("li", (cited.has(row.id) ? "★ " : "") + `${row.id}: ${row.text}`);
      item.dir = "auto";
      list.append(item);
    }
    div.append(list);
    $("chat-input").value = "";
    $("chat-status").textContent = `turn ${turn.turn}`;
    setState("chat", "done");
  } catch (err) {
    chatMessage("bot error", err.message);
    $("chat-status").textContent = "";
    setState("chat", "error");
  } finally {
    $("chat-send").disabled = false;
  }
}

async function resetChat() {
  if (sessionId) {
    try { await fetch(`/v1/sessions/${encodeURIComponent(sessionId)}`, { method: "DELETE" }); } catch (_) { /* gone */ }
  }
  sessionId = null;
  $("chat-log").replaceChildren();
  $("chat-status").textContent = "new conversation";
  setState("chat", "idle");
}

function showTab(name) {
  for (const t of ["check", "text", "chat"]) {
    $(`${t}-panel`).hidden = t !== name;
    $(`tab-${t}`).classList.toggle("active", t === name);
  }
}

async function loadInfo() {
  try {
    const r = await fetch("/v1/info");
    const info = await r.json();
    Object.assign(limits, info.limits);
    $("claim").maxLength = limits.max_claim_chars;
    $("chat-input").maxLength = limits.max_message_chars;
    $("text-input").maxLength = limits.max_text_chars;
    $("info").textContent = `${info.mode} · ${info.n_items} items · k ${info.k} · ` + (info.llm ? `LLM ${info.llm}` : "no LLM (retrieval only)");
    if (!info.llm) $("tab-chat").disabled = true;
  } catch (_) {
    $("info").textContent = "server info unavailable";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("check-form").addEventListener("submit", check);
  $("chat-form").addEventListener("submit", sendChat);
  $("chat-reset").addEventListener("click", resetChat);
  $("tab-check").addEventListener("click", () => showTab("check"));
  $("tab-text").addEventListener("click", () => showTab("text"));
  $("tab-chat").addEventListener("click", () => showTab("chat"));
  loadInfo().then(() => setState("ready", "1"));
});
