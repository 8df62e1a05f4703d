// The pipeline: a tenant's share (queued tasks, turns L1 has not read, dead letters to
// requeue) and, with the admin key, the whole queue, workers, the scheduler, every tenant's
// dead letters (requeue, purge) and LLM calls, tokens and outcomes per stage.

import { api } from "../api.js";
import { badge, h, pre, say, table, when } from "../dom.js";
import { refresh } from "../nav.js";

function deadTable(dead, prefix, withTenant) {
  const act = (d, verb, method, path, question) => h("button", { type: "button",
    class: verb === "Purge" ? "danger" : null, onclick: async () => {
      if (question && !confirm(question)) return;
      await api(method, `${prefix}/${encodeURIComponent(d.id)}${path}`);
      say(`${verb.toLowerCase()}d ${d.id}`);
      await refresh();
    } }, verb);
  const columns = [
    ["Dead letter", (d) => h("code", {}, d.id)],
    ["Task", (d) => `${d.task.type}${d.task.session ? ` of ${d.task.session}` : ""}`],
    ["Error", (d) => d.error],
    ["Failed", (d) => when(d.failed_at)],
    ["", (d) => [act(d, "Requeue", "POST", "/requeue"), withTenant
      ? [" ", act(d, "Purge", "DELETE", "", "Purge this dead letter? Its task will not run again.")] : null]],
  ];
  if (withTenant) columns.splice(1, 0, ["Tenant", (d) => d.tenant]);
  return table(`${dead.length} dead letter(s), oldest first`, columns, dead);
}

const LABELS = { queued: "queued tasks", pending_turns: "turns L1 has not read",
  dead_letters: "dead letters" };

/** `/v1/pipeline`'s counts; what newer services add (per-session counts …) shown as it is. */
function counts(status) {
  return h("dl", { class: "facts" }, Object.entries(status).map(([name, value]) => [
    h("dt", {}, LABELS[name] || name.replace(/_/g, " ")),
    h("dd", {}, typeof value === "object" && value !== null
      ? pre(JSON.stringify(value, null, 2)) : String(value))]));
}

export async function tenant() {
  const [status, dead] = await Promise.all([api("GET", "/v1/pipeline"),
    api("GET", "/v1/dead-letters", null, { limit: 1000 })]);
  return [h("h1", {}, "Pipeline"), counts(status),
    h("h2", {}, "Dead letters"), deadTable(dead, "/v1/dead-letters", false)];
}

const SHOWN = new Set(["name", "state", "concurrency", "running", "stale_running", "llm_usage",
  "age_s", "updated_at"]);

function workers(list) {
  const calls = (w) => Object.values(w.llm_usage || {}).reduce((n, s) => n + (s.calls || 0), 0);
  return table(`${list.length} worker(s)`, [
    ["Worker", (w) => h("code", {}, w.name)],
    ["State", (w) => badge(w.state)],
    ["Concurrency", (w) => w.concurrency ?? "–"],
    ["Running", (w) => (w.running || []).length],
    ["LLM calls", calls],
    ["Last heard", (w) => `${Math.round(w.age_s ?? 0)} s ago`],
    ["Counters", (w) => pre(JSON.stringify(Object.fromEntries(
      Object.entries(w).filter(([name]) => !SHOWN.has(name))), null, 1))],
  ], list);
}

function llmTable(stages) {
  const rows = Object.entries(stages).map(([stage, s]) => ({ stage, ...s }));
  return table("LLM calls, tokens and outcomes per stage (this process, since it started)", [
    ["Stage", (r) => r.stage], ["Calls", (r) => r.calls],
    ["Prompt tokens", (r) => r.prompt_tokens], ["Completion tokens", (r) => r.completion_tokens],
    ["Outcomes", (r) => Object.entries(r.outcomes).filter(([, n]) => n)
      .map(([name, n]) => [badge(`${name} ${n}`, name), " "])],
  ], rows);
}

// The LLM counts each time this view was shown in this tab: calls per stage over time.
const samples = [];

function trend(stages) {
  samples.push({ at: Date.now() / 1000, calls: Object.fromEntries(
    Object.entries(stages).map(([stage, s]) => [stage, s.calls])) });
  if (samples.length > 60) samples.shift();
  if (samples.length < 2) return h("p", { class: "muted" }, "Reload this view to see calls over time.");
  const rows = samples.slice(1).map((sample, i) => ({ sample, before: samples[i] }));
  return table("Calls between each look at this view", [
    ["At", (r) => when(r.sample.at)],
    ...Object.keys(stages).map((stage) => [stage,
      (r) => (r.sample.calls[stage] || 0) - (r.before.calls[stage] || 0)]),
  ], rows.reverse());
}

/** The scheduler per kind of work: which process holds each kind's lease and what it last found
 * owed; then every counter, as published. */
export function schedulerView(snapshot) {
  const owners = snapshot.owners || {};
  const backlog = snapshot.backlog || {};
  const rows = Object.keys(owners).map((kind) => ({ kind, owner: owners[kind],
    backlog: kind in backlog ? backlog[kind] : null }));
  const shown = (value) => (value === null || value === undefined ? "–"
    : typeof value === "object" ? JSON.stringify(value) : String(value));
  return [
    table("The scheduler of each kind of work (one lease per kind)", [
      ["Kind", (r) => r.kind], ["Held by", (r) => r.owner], ["Owed when last looked", (r) => shown(r.backlog)],
    ], rows),
    h("details", {}, h("summary", {}, "Every counter"),
      pre(JSON.stringify(snapshot, null, 2), { class: "text block" })),
  ];
}

export async function admin() {
  const [status, llm, dead] = await Promise.all([api("GET", "/v1/admin/pipeline"),
    api("GET", "/v1/admin/llm"), api("GET", "/v1/admin/dead-letters", null, { limit: 1000 })]);
  const depth = Object.entries(status.depth).map(([name, n]) => [h("dt", {}, name), h("dd", {}, n)]);
  return [h("h1", {}, "Pipeline and cost"),
    h("h2", {}, "Queue"), h("dl", { class: "facts" }, depth),
    h("h2", {}, "Workers"), workers(status.workers || []),
    h("h2", {}, "Scheduler"), status.scheduler ? schedulerView(status.scheduler)
      : h("p", { class: "muted" }, "the backlog scheduler has not run a pass yet"),
    h("h2", {}, "LLM"), llm.mode === "offline"
      ? h("p", { class: "muted" }, "offline: no LLM endpoint is configured") : null,
    llmTable(llm.stages), trend(llm.stages),
    h("p", { class: "muted" }, "Prometheus keeps these over time: ",
      h("code", {}, "stratamem_llm_calls_total"), ", ", h("code", {}, "…_prompt_tokens_total"), ", ",
      h("code", {}, "…_completion_tokens_total"), ", ", h("code", {}, "…_outcomes_total"), " on /metrics."),
    h("h2", {}, "Dead letters"), deadTable(dead, "/v1/admin/dead-letters", true)];
}
