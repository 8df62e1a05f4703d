// Every call the page makes goes to the service's /v1 routes with the key the user gave: the
// same authentication, limits and tenant scope as any other client.

const STORAGE = "stratamem.inspector.key";

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export const key = {
  get: () => sessionStorage.getItem(STORAGE),
  set: (value) => sessionStorage.setItem(STORAGE, value),
  clear: () => sessionStorage.removeItem(STORAGE),
};

/** Call a route: `api("GET", "/v1/memories", null, {type: "persona"})` → the parsed answer. */
export async function api(method, path, body = null, query = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query)) {
    for (const one of [].concat(value)) {
      if (one !== null && one !== undefined && one !== "") url.searchParams.append(name, one);
    }
  }
  const headers = { Authorization: `Bearer ${key.get() || ""}` };
  if (body !== null) headers["Content-Type"] = "application/json";
  const answer = await fetch(url, {
    method, headers, body: body === null ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store",
  });
  const data = answer.status === 204 ? null : await answer.json().catch(() => null);
  if (!answer.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(answer.status, error.type || "http_error",
      error.message || `${method} ${url.pathname} answered ${answer.status}`);
  }
  return data;
}

let served = null;

/** Whether the service answers `method` at the route `template` (`/v1/memories/{}/lineage`),
 * by its OpenAPI document: the page asks for what newer services add only where it exists. */
export async function serves(method, template) {
  served ??= fetch("/openapi.json", { credentials: "omit" }).then((r) => r.json()).then((doc) =>
    new Set(Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((op) => `${op.toUpperCase()} ${path.replace(/\{[^}]*\}/g, "{}")}`))));
  return (await served).has(`${method} ${template.replace(/\{[^}]*\}/g, "{}")}`);
}
