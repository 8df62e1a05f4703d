// The search playground: a query answered as recall answers it before a model call, with each
// hit's rank and score from every retriever (BM25, vectors, feedback words) and their fusion,
// and the per-turn and stable blocks exactly as recall returns them, with their sizes.

import { api } from "../api.js";
import { badge, field, h, link, pre, table } from "../dom.js";
import { go } from "../nav.js";

function form(q) {
  const f = h("form", { class: "filters", role: "search", "aria-label": "Recall a query" },
    field("Query", h("input", { name: "q", type: "search", required: true, size: 40,
      value: q.get("q") || "" })),
    field("Session", h("input", { name: "session", size: 12, value: q.get("session") || "" })),
    field("k", h("input", { name: "k", type: "number", min: 1, max: 100, value: q.get("k") || "" }),
      "hits (default: recall's)"),
    field("Budget (chars)", h("input", { name: "budget", type: "number", min: 0, max: 100000,
      value: q.get("budget") || "" })),
    h("div", { class: "field check" },
      h("input", { id: "f-turns", name: "turns", type: "checkbox",
        checked: q.get("turns") !== "0" }),
      h("label", { for: "f-turns" }, "include turns (L0)")),
    h("button", { type: "submit" }, "Recall"));
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(f);
    go("search", { q: data.get("q"), session: data.get("session"), k: data.get("k"),
      budget: data.get("budget"), turns: data.get("turns") ? "" : "0" });
  });
  return f;
}

function retrievers(hit, fusion) {
  return h("ul", { class: "retrievers" }, Object.entries(hit.retrievers).map(([name, r]) => {
    const weight = fusion.weights[name.split(":")[1]] ?? 1;
    const share = weight / (fusion.rrf_k + r.rank);
    return h("li", {}, h("code", {}, name), ` rank ${r.rank}, score ${r.score.toFixed(4)} `,
      h("span", { class: "muted" }, `→ ${weight} / (${fusion.rrf_k} + ${r.rank}) = ${share.toFixed(4)}`));
  }));
}

function hitLink(hit) {
  if (hit.layer === "L1") return link(`#/memory/${encodeURIComponent(hit.id)}`, hit.text);
  return link(`#/session/${encodeURIComponent(hit.session)}`, hit.text);
}

function block(title, text, id) {
  return h("section", { "aria-labelledby": id },
    h("h2", { id }, title, " ", h("span", { class: "muted" }, `${text.length} characters`)),
    text ? pre(text, { class: "text block" }) : h("p", { class: "muted" }, "empty"));
}

export async function playground(q) {
  const parts = [h("h1", {}, "Search playground"), form(q)];
  if (!q.get("q")) {
    parts.push(h("p", { class: "muted" }, "Ask what the agent would ask: the answer is what "
      + "recall puts before the next model call, and why each hit is there."));
    return parts;
  }
  const body = { query: q.get("q"), session: q.get("session") || null,
    k: q.get("k") ? Number(q.get("k")) : null,
    budget_chars: q.get("budget") ? Number(q.get("budget")) : null,
    include_turns: q.get("turns") !== "0" };
  const found = await api("POST", "/v1/recall/explain", body);
  const fusion = found.fusion;
  parts.push(
    h("p", { class: "muted" }, `Reciprocal rank fusion: each retriever adds weight / (${fusion.rrf_k}`
      + " + rank); hits are ordered by the sum."),
    table(`${found.hits.length} hits, as recall ranked them`, [
      ["#", (hit) => hit.rank],
      ["Hit", (hit) => hitLink(hit)],
      ["Layer", (hit) => badge(hit.layer)],
      ["Fused", (hit) => hit.score.toFixed(4)],
      ["Retrievers", (hit) => retrievers(hit, fusion)],
    ], found.hits.map((hit, i) => ({ ...hit, rank: i + 1 }))),
    block("Per-turn block", found.context, "context-title"),
    block("Stable block", found.stable, "stable-title"));
  return parts;
}
