// The inspector: a login, a menu, and one view at a time, chosen by the URL's fragment
// (`#/memories`, `#/memory/ID` …). Views are modules of ./views; each returns its content.

import { ApiError, api, key } from "./api.js";
import { h, say } from "./dom.js";
import { onRoute, params, path } from "./nav.js";
import * as failures from "./views/failures.js";
import * as layers from "./views/layers.js";
import * as memories from "./views/memories.js";
import * as offload from "./views/offload.js";
import * as pipeline from "./views/pipeline.js";
import * as search from "./views/search.js";
import * as sessions from "./views/sessions.js";
import * as tenants from "./views/tenants.js";

// [path pattern, view, who may open it, menu label (none: not in the menu)]
const ROUTES = [
  [/^memories$/, memories.list, "tenant", "Memories"],
  [/^memory\/([^/]+)$/, memories.detail, "tenant"],
  [/^search$/, search.playground, "tenant", "Search playground"],
  [/^sessions$/, sessions.list, "tenant", "Conversations"],
  [/^session\/([^/]+)$/, sessions.detail, "tenant"],
  [/^scenes$/, layers.scenes, "tenant", "Scenes"],
  [/^scene\/([^/]+)$/, layers.scene, "tenant"],
  [/^profile$/, layers.profile, "tenant", "Profile"],
  [/^offload$/, offload.list, "tenant", "Context offload"],
  [/^offload\/([^/]+)$/, offload.session, "tenant"],
  [/^failures$/, failures.list, "tenant", "Failures"],
  [/^pipeline$/, pipeline.tenant, "tenant", "Pipeline"],
  [/^admin\/pipeline$/, pipeline.admin, "admin", "Pipeline and cost"],
  [/^admin\/tenants$/, tenants.list, "admin", "Tenants"],
];
const HOME = { tenant: "memories", admin: "admin/pipeline" };
const view = document.getElementById("view");

let who = null; // {role: "tenant", tenant} or {role: "admin"}

/** Who the key belongs to: a tenant (`/v1/whoami`), or the admin (`/v1/admin/tenants`). */
async function identify() {
  try {
    return { role: "tenant", ...(await api("GET", "/v1/whoami")) };
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 401) throw error;
  }
  await api("GET", "/v1/admin/tenants");
  return { role: "admin" };
}

function loginForm(message) {
  const input = h("input", { id: "login-key", name: "key", type: "password", autocomplete: "off",
    required: true, spellcheck: "false", size: 48 });
  const form = h("form", { class: "login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Log in"),
    h("p", {}, "Paste a tenant's API key (", h("code", {}, "make run"), " writes one to ",
      h("code", {}, "stratamem-data/demo.key"), ") or the admin key. It is kept in this tab only."),
    h("label", { for: "login-key" }, "API key"), input,
    message ? h("p", { class: "error", role: "alert" }, message) : null,
    h("button", { type: "submit" }, "Log in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    key.set(input.value.trim());
    start();
  });
  return form;
}

function showLogin(message) {
  who = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  view.replaceChildren(loginForm(message));
  delete view.dataset.shown;
  view.setAttribute("aria-busy", "false");
  document.getElementById("login-key").focus();
}

async function start() {
  if (!key.get()) {
    showLogin();
    return;
  }
  view.setAttribute("aria-busy", "true");
  try {
    who = await identify();
  } catch (error) {
    key.clear();
    showLogin(error.status === 401 || error.status === 403
      ? "That key is unknown or revoked." : `${error.type || "error"}: ${error.message}`);
    return;
  }
  document.getElementById("who").textContent = who.role === "admin"
    ? "admin" : `tenant ${who.tenant}`;
  document.getElementById("logout").hidden = false;
  renderNav();
  if (!found()) location.hash = `#/${HOME[who.role]}`;  // hashchange shows it
  else await route();
  view.focus();
}

function renderNav() {
  const nav = document.getElementById("nav");
  const items = ROUTES.filter(([, , role, label]) => label && role === who.role);
  nav.replaceChildren(h("ul", {}, items.map(([pattern, , , label]) => {
    const href = `#/${pattern.source.replace(/^\^|\$$/g, "").replace(/\\\//g, "/")}`;
    return h("li", {}, h("a", { href, dataset: { nav: href } }, label));
  })));
  nav.hidden = false;
}

function found() {
  return ROUTES.find(([pattern, , role]) => role === who.role && pattern.test(path()));
}

function markCurrent() {
  for (const a of document.querySelectorAll("#nav a")) {
    if (location.hash.startsWith(a.dataset.nav)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function route() {
  if (!who) return;
  const match = found();
  if (!match) {
    location.hash = `#/${HOME[who.role]}`;
    return;
  }
  const [pattern, render] = match;
  const args = path().match(pattern).slice(1).map(decodeURIComponent);
  markCurrent();
  view.setAttribute("aria-busy", "true");
  try {
    const shown = [await render(params(), ...args)].flat(Infinity).filter((n) => n);
    view.replaceChildren(...shown);
    document.title = `${view.querySelector("h1")?.textContent || "view"} · stratamem inspector`;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      key.clear();
      showLogin("The key stopped working (revoked?): log in again.");
      return;
    }
    view.replaceChildren(h("h1", {}, "Could not show this view"),
      h("p", { class: "error", role: "alert" }, `${error.type || "error"}: ${error.message}`));
  } finally {
    view.dataset.shown = location.hash; // which route this render was for (tests wait on it)
    view.setAttribute("aria-busy", "false");
  }
}

document.getElementById("logout").addEventListener("click", () => {
  key.clear();
  say("logged out");
  showLogin();
});
onRoute(route);
window.addEventListener("hashchange", route);
start();
