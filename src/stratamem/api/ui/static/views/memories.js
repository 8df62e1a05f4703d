// Memories: the current L1 memories (or those valid at a date), filtered and searched; one
// memory with where it came from (its source turns), its versions as a timeline, its lineage,
// and the correct and forget actions.

import { api, serves } from "../api.js";
import { badge, field, h, link, pre, say, select, table, when } from "../dom.js";
import { go, refresh } from "../nav.js";

const TYPES = ["", "persona", "episodic", "instruction"];

/** A `datetime-local` value read as UTC, in seconds; "" stays "". */
export function utcSeconds(value) {
  return value ? Date.parse(`${value}Z`) / 1000 : "";
}

/** Seconds as a `datetime-local` value (UTC). */
export function utcInput(seconds) {
  return seconds ? new Date(seconds * 1000).toISOString().slice(0, 16) : "";
}

function filters(q) {
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter memories" },
    field("Search", h("input", { name: "q", type: "search", value: q.get("q") || "" })),
    field("Type", select("type", TYPES, q.get("type") || "")),
    field("Session", h("input", { name: "session", value: q.get("session") || "", size: 14 })),
    field("As of (UTC)", h("input", { name: "as_of", type: "datetime-local",
      value: utcInput(Number(q.get("as_of")) || 0) }), "what was believed then"),
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    go("memories", { q: data.get("q"), type: data.get("type"), session: data.get("session"),
      as_of: utcSeconds(data.get("as_of")) });
  });
  return form;
}

async function find(q) {
  const asOf = q.get("as_of") ? Number(q.get("as_of")) : null;
  const types = q.get("type") ? [q.get("type")] : null;
  const sessions = q.get("session") ? [q.get("session")] : null;
  if (q.get("q")) {
    const body = { query: q.get("q"), k: 50, types, sessions, as_of: asOf };
    const found = await api("POST", "/v1/search/memories", body);
    return found.hits.map((hit) => ({ id: hit.id, content: hit.text, type: hit.type,
      session: hit.session, score: hit.score }));
  }
  return api("GET", "/v1/memories", null, { type: types, session: sessions, as_of: asOf,
    limit: 200 });
}

export async function list(q) {
  const rows = await find(q);
  const asOf = q.get("as_of");
  const suffix = asOf ? `?as_of=${asOf}` : "";
  const columns = [
    ["Memory", (m) => link(`#/memory/${encodeURIComponent(m.id)}${suffix}`, m.content)],
    ["Type", (m) => badge(m.type || "–")],
    ["Session", (m) => (m.session ? link(`#/session/${encodeURIComponent(m.session)}`, m.session) : "–")],
  ];
  if (q.get("q")) columns.push(["Score", (m) => m.score.toFixed(4)]);
  else {
    columns.push(["Priority", (m) => m.priority], ["Mode", (m) => m.mode],
      ["Valid from", (m) => when(m.valid_from)]);
  }
  const heading = asOf ? `Memories as of ${when(Number(asOf))}` : "Memories";
  return [h("h1", {}, heading), filters(q),
    table(`${rows.length} memor${rows.length === 1 ? "y" : "ies"}`, columns, rows)];
}

function stateOf(memory) {
  if (memory.superseded_by) return "superseded";
  return memory.valid_to ? "forgotten" : "current";
}

function facts(memory) {
  const row = (name, value) => [h("dt", {}, name), h("dd", {}, value)];
  return h("dl", { class: "facts" },
    row("id", h("code", {}, memory.id)),
    row("type", badge(memory.type)), row("priority", memory.priority), row("mode", memory.mode),
    row("state", badge(stateOf(memory))),
    row("session", memory.session
      ? link(`#/session/${encodeURIComponent(memory.session)}`, memory.session) : "–"),
    row("activity", memory.activity_start
      ? `${when(memory.activity_start)} – ${when(memory.activity_end)}` : "–"),
    row("valid", `${when(memory.valid_from)} – ${memory.valid_to ? when(memory.valid_to) : "now"}`),
    row("superseded by", memory.superseded_by
      ? link(`#/memory/${encodeURIComponent(memory.superseded_by)}`, memory.superseded_by) : "–"));
}

function sources(found, memory) {
  const items = found.turns.map((turn) => h("li", { class: "turn" },
    h("div", { class: "turn-head" },
      link(`#/session/${encodeURIComponent(turn.session)}?seq=${turn.seq}`,
        `${turn.session} #${turn.seq}`),
      " ", badge(turn.role), turn.speaker ? ` ${turn.speaker}` : "", " ",
      h("span", { class: "muted" }, when(turn.timestamp))),
    pre(turn.text)));
  const none = memory.mode === "manual"
    ? "Stated directly (POST /v1/memories, or a correction): it cites no turn."
    : "It cites no turn.";
  return h("section", { "aria-labelledby": "sources-title" },
    h("h2", { id: "sources-title" }, "Where it came from"),
    items.length ? h("ol", { class: "turns" }, items) : h("p", { class: "muted" }, none),
    found.missing.length
      ? h("p", { class: "muted" }, `${found.missing.length} source turn(s) no longer stored `
        + "(their session was forgotten): ", found.missing.join(", ")) : null);
}

/** Versions in the order they followed each other: by how many supersessions lie between a
 * version and the newest (its times may tie), then by time. */
function inOrder(versions) {
  const byId = new Map(versions.map((v) => [v.id, v]));
  const later = (v) => {
    let n = 0;
    for (let next = byId.get(v.superseded_by); next && n < versions.length; n += 1) {
      next = byId.get(next.superseded_by);
    }
    return v.superseded_by ? n + 1 : 0;
  };
  return versions.map((v) => [later(v), v]).sort((a, b) => b[0] - a[0] || a[1].valid_from - b[1].valid_from)
    .map(([, v]) => v);
}

/** Each version as an event: stored, updated, merged, corrected, then forgotten. */
export function events(versions) {
  const out = [];
  for (const version of inOrder(versions)) {
    const consumed = versions.filter((v) => v.superseded_by === version.id).length;
    let what = "stored";
    if (consumed > 1) what = "merged";
    else if (consumed === 1) what = version.mode === "manual" ? "corrected" : "updated";
    out.push({ what, at: version.valid_from, version });
    if (version.valid_to && !version.superseded_by) {
      out.push({ what: "forgotten", at: version.valid_to, version });
    }
  }
  return out;
}

function history(versions, currentId) {
  return h("section", { "aria-labelledby": "history-title" },
    h("h2", { id: "history-title" }, "History"),
    h("ol", { class: "timeline" }, events(versions).map((event) => h("li", {
      class: `event event-${event.what}`, "aria-current": event.version.id === currentId ? "true" : null },
    h("div", {}, badge(event.what), " ", h("time", {}, when(event.at)), " ",
      h("span", { class: "muted" }, event.version.mode), " ",
      event.version.id === currentId ? h("strong", {}, "this version")
        : link(`#/memory/${encodeURIComponent(event.version.id)}`, h("code", {}, event.version.id))),
    event.what === "forgotten" ? null : pre(event.version.content)))));
}

async function lineage(memoryId) {
  const lineageRoute = await serves("GET", "/v1/memories/{}/lineage");
  const found = lineageRoute
    ? await api("GET", `/v1/memories/${encodeURIComponent(memoryId)}/lineage`) : null;
  const body = found === null
    ? h("p", { class: "muted" }, "This service does not record lineage yet (the scenes and "
      + "profile versions built from a memory).")
    : lineageList(found);
  return h("section", { "aria-labelledby": "lineage-title" },
    h("h2", { id: "lineage-title" }, "Built from it"), body);
}

/** A record of a lineage answer (`{kind, id, version}`) as a link to its view. */
function recordLink(ref) {
  const version = ref.version ? ` version ${ref.version}` : "";
  if (ref.kind === "scene") {
    return link(`#/scene/${encodeURIComponent(ref.id)}`, ["scene ", h("code", {}, ref.id), version]);
  }
  if (ref.kind === "profile") return link(`#/profile?b=${ref.version ?? ""}`, `profile${version}`);
  if (ref.kind === "memory") return link(`#/memory/${encodeURIComponent(ref.id)}`, h("code", {}, ref.id));
  return [ref.kind, " ", h("code", {}, ref.id)];
}

function lineageList(found) {
  const derived = found.derived || [];
  if (!derived.length) {
    return h("p", { class: "muted" }, "No scene or profile version was built from it yet.");
  }
  return h("ul", {}, derived.map((ref) => h("li", {}, recordLink(ref))));
}

async function actions(memory) {
  if (stateOf(memory) !== "current") return null;
  const erases = await serves("POST", "/v1/memories/{}/erase");
  const content = h("textarea", { name: "content", rows: 3, cols: 60 }, memory.content);
  const form = h("form", { class: "actions", "aria-label": "Correct or forget this memory" },
    h("h2", {}, "Correct or forget"),
    field("Corrected text", content),
    field("Type", select("type", TYPES.slice(1), memory.type)),
    field("Priority", h("input", { name: "priority", type: "number", min: 0, max: 10,
      value: memory.priority })),
    h("div", { class: "buttons" },
      h("button", { type: "submit" }, "Correct"),
      h("button", { type: "button", class: "danger", onclick: () => forget(memory) }, "Forget"),
      erases ? h("button", { type: "button", class: "danger", onclick: () => erase(memory) },
        "Erase for good") : null));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const patch = { content: data.get("content"), type: data.get("type"),
      priority: Number(data.get("priority")) };
    if (!confirm("Correct this memory? A new version supersedes it.")) return;
    const updated = await api("PATCH", `/v1/memories/${encodeURIComponent(memory.id)}`, patch);
    say("corrected: a new version supersedes it");
    go(`memory/${encodeURIComponent(updated.id)}`);
  });
  return form;
}

async function forget(memory) {
  if (!confirm("Forget this memory? It leaves search and recall at once (its history keeps it; "
    + "Erase for good removes the history too).")) return;
  await api("DELETE", `/v1/memories/${encodeURIComponent(memory.id)}`);
  say("forgotten");
  await refresh();
}

/** Erase: every version, and what was built only from it; scenes and the profile built on it
 * are written again without it and their earlier versions purged (docs/forgetting.md). */
async function erase(memory) {
  if (!confirm("Erase this memory for good? Every version goes, with what was built only from "
    + "it; the scenes and profile built on it are written again without it.")) return;
  const done = await api("POST", `/v1/memories/${encodeURIComponent(memory.id)}/erase`);
  const n = done.erased;
  say(`erased: ${n.memories} memor${n.memories === 1 ? "y" : "ies"}, `
    + `${n.purged_versions} scene/profile version(s) purged, ${n.rebuilt} rebuilt`);
  go("memories");
}

export async function detail(q, memoryId) {
  const path = `/v1/memories/${encodeURIComponent(memoryId)}`;
  const [memory, versions, found] = await Promise.all([
    api("GET", path), api("GET", `${path}/history`), api("GET", `${path}/sources`)]);
  return [
    h("p", { class: "crumbs" }, link("#/memories", "Memories"), " / ", h("code", {}, memory.id)),
    h("h1", { class: "memory-title" }, memory.content),
    facts(memory),
    sources(found, memory),
    history(versions, memory.id),
    await lineage(memory.id),
    await actions(memory),
  ];
}
