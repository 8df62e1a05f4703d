// Building the page from data: every text goes in as a text node, never as markup, so nothing
// a memory, a turn or a model reply says can run in the page.

/** An element: `h("a", {href: "#/x", onclick: fn}, "text", child, [more])`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "for") el.htmlFor = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else el.append(document.createTextNode(String(child)));
  }
}

/** A time in seconds since the epoch as `2024-05-01 14:03:22Z` (UTC), or "–". */
export function when(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

/** A table: `columns` are [heading, (row) => cell content]. */
export function table(caption, columns, rows, rowAttrs = () => ({})) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.length
      ? rows.map((row) => h("tr", rowAttrs(row), columns.map(([, cell]) => h("td", {}, cell(row)))))
      : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "nothing here"))));
}

/** A labelled form field; `input` is the control (its id is set from `name`). */
export function field(label, input, hint) {
  input.id = input.id || `f-${input.name}`;
  return h("div", { class: "field" },
    h("label", { for: input.id }, label), input, hint ? h("small", { class: "muted" }, hint) : null);
}

/** A `<select>` over `options` ([value, label] or value). */
export function select(name, options, chosen) {
  return h("select", { name }, options.map((option) => {
    const [value, label] = Array.isArray(option) ? option : [option, option || "any"];
    return h("option", { value, selected: value === chosen }, label);
  }));
}

/** A small badge, e.g. a memory type or a turn's outcome. */
export function badge(text, kind = text) {
  return h("span", { class: `badge badge-${String(kind).replace(/[^\w-]/g, "_")}` }, text);
}

/** A link to a view of the inspector. */
export function link(href, ...children) {
  return h("a", { href }, ...children);
}

/** Text that may be long: shown in a block that keeps its lines. */
export function pre(text, attrs = {}) {
  return h("pre", { class: "text", ...attrs }, text ?? "");
}

/** Say something in the status line (read out by screen readers). */
export function say(message, kind = "info") {
  const status = document.getElementById("status");
  status.className = `status status-${kind}`;
  status.textContent = message;
}
