// Failures of the LLM stages: the records with their raw replies and reasons, filtered by
// stage, kind and status, and retried one at a time or many at once.

import { ApiError, api, serves } from "../api.js";
import { badge, field, h, link, pre, say, select, table, when } from "../dom.js";
import { go, refresh } from "../nav.js";

const KINDS = ["", "quarantine", "stage", "batch", "item", "fallback"];
const STATUSES = ["", "open", "resolved", "noted"];

function filters(q) {
  const form = h("form", { class: "filters", "aria-label": "Filter failures" },
    field("Stage", h("input", { name: "stage", size: 10, value: q.get("stage") || "" }), "L1, L2 …"),
    field("Kind", select("kind", KINDS, q.get("kind") || "")),
    field("Status", select("status", STATUSES, q.get("status") || "")),
    field("Session", h("input", { name: "session", size: 12, value: q.get("session") || "" })),
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go("failures", Object.fromEntries(new FormData(form)));
  });
  return form;
}

async function retryOne(id) {
  const answer = await api("POST", `/v1/failures/${encodeURIComponent(id)}/retry`);
  return answer.failure.status;
}

/** Retry `ids`, one after the other. */
async function retry(ids) {
  const outcome = { resolved: 0, open: 0, errors: [] };
  for (const id of ids) {
    try {
      const status = await retryOne(id);
      outcome[status === "resolved" ? "resolved" : "open"] += 1;
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      outcome.errors.push(`${id}: ${error.message}`);
    }
  }
  return outcome;
}

async function retryAndSay(ids) {
  const outcome = await retry(ids);
  const { errors } = outcome;
  say(`retried ${ids.length}: ${outcome.resolved} resolved, ${outcome.open} still open`
    + (errors.length ? `; ${errors.join("; ")}` : ""), errors.length ? "error" : "info");
  await refresh();
}

/** Where the service retries many at once (`POST /v1/failures/retry`): every open record
 * matching the view's session, stage and kind, oldest first. */
function retryAllButton(q) {
  const kind = ["quarantine", "stage"].includes(q.get("kind")) ? q.get("kind") : null;
  const body = { session: q.get("session") || null, stage: q.get("stage") || null, kind };
  return h("button", { type: "button", onclick: async () => {
    const done = await api("POST", "/v1/failures/retry", body);
    say(`retried ${done.tried}: ${done.resolved} resolved, ${done.open} still open, ${done.left} left`
      + (done.stopped ? `; stopped: ${done.stopped}` : ""), done.stopped ? "error" : "info");
    await refresh();
  } }, "Retry all open matching");
}

function details(f) {
  return h("details", {}, h("summary", {}, f.error),
    f.turn_ids.length ? h("p", {}, "turns: ", f.turn_ids.map((id) => [h("code", {}, id), " "])) : null,
    Object.keys(f.detail).length ? pre(JSON.stringify(f.detail, null, 2)) : null,
    f.raws.length ? f.raws.map((raw, i) => [h("h3", {}, `raw reply ${i + 1}`), pre(raw, { class: "text block" })])
      : h("p", { class: "muted" }, "no raw reply kept (no reply arrived)"));
}

export async function list(q) {
  const query = { stage: q.get("stage"), kind: q.get("kind"), status: q.get("status"),
    session: q.get("session"), limit: 200 };
  const found = await api("GET", "/v1/failures", null, query);
  const retryable = (f) => f.status === "open" && ["quarantine", "stage"].includes(f.kind);
  const checks = new Map();
  const check = (f) => {
    if (!retryable(f)) return "";
    const box = h("input", { type: "checkbox", id: `pick-${f.id}`, "aria-label": `select ${f.id}` });
    checks.set(f.id, box);
    return box;
  };
  const rows = table(`${found.length} failure record(s), newest first`, [
    ["", check],
    ["When", (f) => when(f.failed_at)],
    ["Stage", (f) => f.stage],
    ["Kind", (f) => badge(f.kind)],
    ["Status", (f) => badge(f.status)],
    ["Session", (f) => (f.session ? link(`#/session/${encodeURIComponent(f.session)}`, f.session) : "–")],
    ["Tries", (f) => f.attempts],
    ["Reason and raw replies", details],
    ["", (f) => (retryable(f) ? h("button", { type: "button", class: "retry",
      onclick: () => retryAndSay([f.id]) }, "Retry") : "")],
  ], found, (f) => ({ id: `failure-${f.id}` }));
  const bulk = h("button", { type: "button", onclick: () => {
    const ids = [...checks].filter(([, box]) => box.checked).map(([id]) => id);
    if (!ids.length) say("select the failures to retry first", "error");
    else retryAndSay(ids);
  } }, "Retry selected");
  const all = await serves("POST", "/v1/failures/retry") ? retryAllButton(q) : null;
  return [h("h1", {}, "Failures"), filters(q), h("div", { class: "buttons" }, bulk, all), rows];
}
