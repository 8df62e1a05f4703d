// Context offload: a session's offloaded tool calls (summary, score, the exact result on
// demand), its tasks, and each task's Mermaid diagram, its nodes linked to their tool calls.

import { api } from "../api.js";
import { badge, field, h, link, pre, say, when } from "../dom.js";
import { nodes, render } from "../mermaid.js";
import { go } from "../nav.js";

export async function list() {
  const found = await api("GET", "/v1/sessions", null, { limit: 500 });
  const form = h("form", { class: "filters", "aria-label": "Open a session's offload" },
    field("Session", h("input", { name: "session", required: true, size: 20 })),
    h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go(`offload/${encodeURIComponent(new FormData(form).get("session"))}`);
  });
  return [h("h1", {}, "Context offload"), form,
    h("ul", {}, found.sessions.map((s) => h("li", {},
      link(`#/offload/${encodeURIComponent(s.session)}`, s.session))))];
}

async function readBack(entry, into) {
  const found = await api("GET", `/v1/offload/refs/${encodeURIComponent(entry.ref_id)}`);
  into.replaceChildren(pre(found.text ?? found.result ?? JSON.stringify(found, null, 2),
    { class: "text block", tabindex: 0, "aria-label": `result of ${entry.call_id}` }));
}

function entryRow(entry) {
  const result = h("div", { class: "result" });
  const show = h("button", { type: "button", "aria-controls": `result-${entry.call_id}`,
    onclick: () => readBack(entry, result).catch((e) => say(e.message, "error")) },
  "Exact result");
  result.id = `result-${entry.call_id}`;
  return h("li", { class: "entry", id: `call-${entry.call_id}`, dataset: { node: entry.node_id || "" } },
    h("div", { class: "turn-head" }, h("code", {}, entry.call_id), " ", badge(entry.tool, "tool"),
      " score ", h("strong", {}, entry.score ?? "–"), "/10 ", badge(entry.mode), " ",
      h("span", { class: "muted" }, `${entry.result_chars} chars, ${when(entry.timestamp)}`),
      entry.node_id ? [" node ", h("code", {}, entry.node_id)] : null),
    h("p", {}, entry.summary ?? h("span", { class: "muted" }, "not summarised yet")),
    entry.ref_id ? show : null, result);
}

function linkNodes(svg, entries) {
  for (const { element, id } of nodes(svg)) {
    const calls = entries.filter((e) => e.node_id === id);
    if (!calls.length) continue;
    element.classList.add("linked");
    element.setAttribute("tabindex", "0");
    element.setAttribute("role", "link");
    element.setAttribute("aria-label", `node ${id}: ${calls.length} tool call(s)`);
    const open = () => {
      const target = document.getElementById(`call-${calls[0].call_id}`);
      for (const e of calls) document.getElementById(`call-${e.call_id}`)?.classList.add("highlight");
      target?.scrollIntoView({ block: "center" });
      target?.focus?.();
    };
    element.addEventListener("click", open);
    element.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
  }
}

async function taskSection(task, entries) {
  const mine = entries.filter((e) => e.task_id === task.task_id);
  let diagram;
  if (task.mermaid) {
    try {
      diagram = await render(task.mermaid, `task diagram of ${task.label || task.task_id}`);
      linkNodes(diagram, mine);
    } catch (error) {
      diagram = h("div", {}, h("p", { class: "error" }, `The diagram does not parse: ${error.message}`),
        pre(task.mermaid));
    }
  }
  return h("section", { class: "task", "aria-label": `task ${task.label || task.task_id}` },
    h("h2", {}, task.label || task.task_id, " ", badge(task.status), task.long_task ? badge("long") : null,
      " ", h("span", { class: "muted" }, `version ${task.version}, ${when(task.updated_at)}`)),
    diagram ? h("figure", { class: "diagram" }, diagram,
      h("details", {}, h("summary", {}, "Mermaid source"), pre(task.mermaid)))
      : h("p", { class: "muted" }, "no diagram yet"),
    h("h3", {}, `${mine.length} tool call(s)`), h("ol", { class: "entries" }, mine.map(entryRow)));
}

export async function session(q, name) {
  const enc = encodeURIComponent(name);
  const [entries, diagrams] = await Promise.all([
    api("GET", `/v1/offload/sessions/${enc}/entries`),
    api("GET", `/v1/offload/sessions/${enc}/diagrams`)]);
  const tasks = diagrams.diagrams;
  const loose = entries.filter((e) => !tasks.some((t) => t.task_id === e.task_id));
  const sections = [];
  for (const task of tasks) sections.push(await taskSection(task, entries));
  return [
    h("p", { class: "crumbs" }, link("#/offload", "Context offload"), " / ",
      link(`#/session/${enc}`, name)),
    h("h1", {}, `Offload of ${name}`),
    diagrams.note ? h("p", { class: "muted" }, diagrams.note) : null,
    h("p", {}, `${entries.length} tool call(s), ${tasks.length} task(s).`),
    ...sections,
    loose.length ? h("section", { "aria-label": "calls outside any task" },
      h("h2", {}, "Not in a task yet"), h("ol", { class: "entries" }, loose.map(entryRow))) : null,
  ];
}

