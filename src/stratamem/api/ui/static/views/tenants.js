// Tenants and their keys (admin key).

import { api } from "../api.js";
import { field, h, pre, say, table, when } from "../dom.js";
import { refresh } from "../nav.js";

function createForm() {
  const form = h("form", { class: "filters", "aria-label": "Create a tenant" },
    field("Name", h("input", { name: "name", required: true, pattern: "[A-Za-z0-9_.:-]+", size: 16 })),
    field("Label", h("input", { name: "label", size: 20 })),
    h("button", { type: "submit" }, "Create tenant"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    await api("POST", "/v1/admin/tenants", { name: data.get("name"), label: data.get("label") || null });
    say(`created tenant ${data.get("name")}`);
    await refresh();
  });
  return form;
}

async function keys(tenant, into) {
  const found = await api("GET", `/v1/admin/tenants/${encodeURIComponent(tenant)}/keys`);
  const issue = h("button", { type: "button", onclick: async () => {
    const issued = await api("POST", `/v1/admin/tenants/${encodeURIComponent(tenant)}/keys`, {});
    into.append(h("p", { role: "alert" }, "New key (shown this once): "), pre(issued.token));
  } }, "Issue a key");
  into.replaceChildren(table(`keys of ${tenant}`, [
    ["Key", (k) => h("code", {}, k.key_id)], ["Label", (k) => k.label || "–"],
    ["Created", (k) => when(k.created_at)], ["Revoked", (k) => when(k.revoked_at)],
  ], found), issue);
}

export async function list() {
  const found = await api("GET", "/v1/admin/tenants");
  return [h("h1", {}, "Tenants"), createForm(),
    table(`${found.length} tenant(s)`, [
      ["Tenant", (t) => t.name], ["Label", (t) => t.label || "–"],
      ["Created", (t) => when(t.created_at)],
      ["", (t) => {
        const into = h("div", {});
        return [h("button", { type: "button", onclick: () => keys(t.name, into) }, "Keys"), into];
      }],
    ], found)];
}
