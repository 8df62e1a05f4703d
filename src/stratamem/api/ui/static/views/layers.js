// Scenes (L2) by heat, each with its versions, and the profile (L3) with two versions side by
// side as a diff.

import { api } from "../api.js";
import { lineDiff } from "../diff.js";
import { badge, field, h, link, pre, select, table, when } from "../dom.js";
import { go } from "../nav.js";

export async function scenes() {
  const found = await api("GET", "/v1/scenes");
  return [h("h1", {}, "Scenes"),
    table(`${found.length} scene(s), hottest first`, [
      ["Scene", (s) => link(`#/scene/${encodeURIComponent(s.id)}`, s.title)],
      ["Summary", (s) => s.summary],
      ["Heat", (s) => s.heat.toFixed(3)],
      ["Version", (s) => s.version],
      ["Memories", (s) => s.memory_ids.length],
      ["Updated", (s) => when(s.updated_at)],
    ], found)];
}

/** Two texts as a diff: removed lines marked `−`, added ones `+` (and coloured). */
export function diffView(before, after, caption) {
  const rows = lineDiff(before, after).map((line) => h("div", { class: `diff-${line.op}` },
    h("span", { class: "diff-mark", "aria-hidden": "true" },
      { same: " ", del: "−", add: "+" }[line.op]),
    h("span", { class: "visually-hidden" }, { same: "", del: "removed: ", add: "added: " }[line.op]),
    line.text));
  return h("figure", { class: "diff" }, h("figcaption", {}, caption), h("div", { class: "text" }, rows));
}

export async function scene(q, sceneId) {
  const versions = await api("GET", `/v1/scenes/${encodeURIComponent(sceneId)}/history`);
  const last = versions[versions.length - 1];
  const items = versions.slice().reverse().map((version, index, newestFirst) => {
    const previous = newestFirst[index + 1];
    return h("li", { class: "version" },
      h("h2", {}, `Version ${version.version}`, " ", badge(version.mode),
        version.deleted ? badge("deleted") : null, " ", h("span", { class: "muted" }, when(version.updated_at))),
      h("p", {}, version.summary),
      previous ? diffView(previous.body, version.body, `changes from version ${previous.version}`)
        : pre(version.body),
      h("p", { class: "muted" }, `from ${version.memory_ids.length} memories: `,
        version.memory_ids.map((id) => [link(`#/memory/${encodeURIComponent(id)}`, h("code", {}, id)), " "])));
  });
  return [h("p", { class: "crumbs" }, link("#/scenes", "Scenes"), " / ", last.title),
    h("h1", {}, last.title), h("ol", { class: "versions" }, items)];
}

export async function profile(q) {
  const versions = await api("GET", "/v1/profile/history");
  if (!versions.length) {
    return [h("h1", {}, "Profile"), h("p", { class: "muted" },
      "No profile yet: L3 writes one after the scenes change (or on a flush).")];
  }
  const numbers = versions.map((v) => String(v.version));
  const right = q.get("b") || numbers[numbers.length - 1];
  const left = q.get("a") || numbers[Math.max(0, numbers.indexOf(right) - 1)];
  const pick = (n) => versions.find((v) => String(v.version) === n) || versions[versions.length - 1];
  const [a, b] = [pick(left), pick(right)];
  const form = h("form", { class: "filters", "aria-label": "Compare profile versions" },
    field("Before", select("a", numbers, String(a.version))),
    field("After", select("b", numbers, String(b.version))),
    h("button", { type: "submit" }, "Compare"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    go("profile", { a: data.get("a"), b: data.get("b") });
  });
  const side = (version) => h("div", { class: "side" },
    h("h2", {}, `Version ${version.version}`, " ", badge(version.mode), " ",
      h("span", { class: "muted" }, when(version.updated_at))), pre(version.body));
  return [h("h1", {}, "Profile"), form,
    h("div", { class: "side-by-side" }, side(a), side(b)),
    diffView(a.body, b.body, `from version ${a.version} to version ${b.version}`)];
}
