// Moving between views: the fragment of the URL names the view and its query
// (`#/failures?stage=L1`), so every view can be bookmarked, reloaded and gone back to.

let render = async () => {};

/** app.js hands in how to show the current view. */
export function onRoute(fn) {
  render = fn;
}

/** The view's path, `memory/ID` of `#/memory/ID?x=1`. */
export function path() {
  return location.hash.replace(/^#\/?/, "").split("?")[0];
}

/** The query of the fragment, as URLSearchParams. */
export function params() {
  return new URLSearchParams(location.hash.split("?")[1] || "");
}

/** Go to a view with a query built from `values` (empty ones left out). */
export function go(view, values = {}) {
  const kept = Object.entries(values).filter(([, v]) => v !== "" && v !== null && v !== undefined);
  const query = new URLSearchParams(kept).toString();
  const target = `#/${view}${query ? `?${query}` : ""}`;
  if (location.hash === target) return render();
  location.hash = target;
  return null;
}

/** Show the current view again (after an action changed what it shows). */
export function refresh() {
  return render();
}
