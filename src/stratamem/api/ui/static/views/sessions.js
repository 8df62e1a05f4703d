// Conversations: the sessions, where L1 stands in each and what it owes (and why), and a
// session's turns with each turn's L1 outcome.

import { api } from "../api.js";
import { badge, h, link, pre, say, table, when } from "../dom.js";
import { refresh } from "../nav.js";

export async function list() {
  const found = await api("GET", "/v1/sessions", null, { limit: 500 });
  return [h("h1", {}, "Conversations"),
    table(`${found.total} session(s)`, [
      ["Session", (s) => link(`#/session/${encodeURIComponent(s.session)}`, s.session)],
      ["Turns", (s) => s.last_seq],
      ["L1 cursor", (s) => s.cursor_seq],
      ["Waiting for L1", (s) => (s.pending_turns ? badge(String(s.pending_turns), "pending") : "0")],
      ["L1 runs", (s) => s.l1_runs],
      ["Last turn", (s) => when(s.last_turn_at)],
      ["Last L1", (s) => when(s.last_l1_at)],
      ["Offload", (s) => link(`#/offload/${encodeURIComponent(s.session)}`, "tool calls")],
    ], found.sessions)];
}

async function allTurns(session) {
  const turns = [];
  for (let after = 0; ;) {
    const page = await api("GET", `/v1/sessions/${encodeURIComponent(session)}/turns`, null,
      { after, limit: 1000 });
    turns.push(...page);
    if (page.length < 1000) return turns;
    after = page[page.length - 1].seq;
  }
}

/** Each turn's L1 outcome. Where the service keeps the turn ledger, the turn says it; until
 * then, what the records show: memories citing the turn, an open quarantine naming it, the
 * cursor not past it yet, or read by L1 with no memory citing it. */
export function outcomes(turns, memories, failures, cursor) {
  const cited = new Map();
  for (const m of memories) for (const id of m.source_turn_ids) {
    cited.set(id, [...(cited.get(id) || []), m]);
  }
  const quarantined = new Set(failures.filter((f) => f.kind === "quarantine" && f.status === "open")
    .flatMap((f) => f.turn_ids));
  return turns.map((turn) => {
    const ledger = turn.l1?.outcome;  // the turn ledger's word, where the service keeps it
    if (ledger) {
      return { turn, outcome: ledger.replace(/_/g, " "), memories: cited.get(turn.id) || [] };
    }
    if (cited.has(turn.id)) return { turn, outcome: "extracted", memories: cited.get(turn.id) };
    if (quarantined.has(turn.id)) return { turn, outcome: "quarantined", memories: [] };
    if (turn.seq > cursor) return { turn, outcome: "pending", memories: [] };
    return { turn, outcome: "read, no memory", memories: [] };
  });
}

function owed(status) {
  return h("section", { class: "owed", "aria-labelledby": "owed-title" },
    h("h2", { id: "owed-title" }, status.pending_turns ? "Why L1 is not done" : "Where L1 stands"),
    h("ul", {}, status.reasons.map((reason) => h("li", {}, reason))),
    status.dead_letters.length ? h("p", {}, link("#/pipeline", "Requeue the dead letters")) : null,
    status.open_failures.length
      ? h("p", {}, link(`#/failures?session=${encodeURIComponent(status.session)}&status=open`,
        "Retry the open failures")) : null);
}

function turnRow(row, seq) {
  const { turn, outcome, memories } = row;
  return h("li", { class: "turn", id: `turn-${turn.seq}`, "aria-current": turn.seq === seq ? "true" : null },
    h("div", { class: "turn-head" }, h("strong", {}, `#${turn.seq}`), " ", badge(turn.role), " ",
      turn.speaker || "", " ", h("span", { class: "muted" }, when(turn.timestamp)), " ",
      badge(outcome, outcome.replace(/\W+/g, "-"))),
    pre(turn.text),
    memories.length ? h("ul", { class: "gave" }, memories.map((m) => h("li", {}, "→ ",
      link(`#/memory/${encodeURIComponent(m.id)}`, m.content)))) : null);
}

export async function detail(q, session) {
  const enc = encodeURIComponent(session);
  const [status, turns, memories, failures] = await Promise.all([
    api("GET", `/v1/sessions/${enc}/status`),
    allTurns(session),
    api("GET", "/v1/memories", null, { session, limit: 1000 }),
    api("GET", "/v1/failures", null, { session, limit: 500 }),
  ]);
  const rows = outcomes(turns, memories, failures, status.cursor_seq);
  const seq = Number(q.get("seq")) || null;
  const flush = h("button", { type: "button", onclick: async () => {
    await api("POST", `/v1/sessions/${enc}/flush`);
    say("flush queued: L1 until caught up, then L2 and L3");
    await refresh();
  } }, "Flush this session");
  const content = [
    h("p", { class: "crumbs" }, link("#/sessions", "Conversations"), " / ", session),
    h("h1", {}, `Session ${session}`),
    h("p", {}, `${status.last_seq} turns, L1 cursor at ${status.cursor_seq}, `
      + `${status.l1_runs} L1 run(s), last ${when(status.last_l1_at)}. `, flush, " ",
      link(`#/offload/${enc}`, "Tool calls and tasks")),
    owed(status),
    h("h2", {}, "Turns"),
    h("ol", { class: "turns" }, rows.map((row) => turnRow(row, seq))),
  ];
  if (seq) requestAnimationFrame(() => document.getElementById(`turn-${seq}`)?.scrollIntoView());
  return content;
}
