// `make ui`: copy the Mermaid renderer out of node_modules into the package, with the licence
// of every package in its dependency tree and a manifest of what was copied (sha256), which
// tests/api/ui/test_assets.py checks the committed files against.
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const modules = join(here, "node_modules");
const vendor = join(here, "..", "src", "stratamem", "api", "ui", "static", "vendor");
const copies = { "mermaid.min.js": join(modules, "mermaid", "dist", "mermaid.min.js") };
const LICENCE_FILES = /^(licen[cs]e|copying|notice)(\.(md|txt|markdown))?$/i;

function packageJson(dir) {
  return JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
}

// Every package the lockfile installed for mermaid, in name order, once each.
function installed() {
  const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
  return Object.keys(lock.packages)
    .filter((path) => path.startsWith("node_modules/") && !lock.packages[path].dev)
    .sort();
}

function licenceText(dir) {
  const names = readdirSync(dir).filter((name) => LICENCE_FILES.test(name)).sort();
  return names.map((name) => readFileSync(join(dir, name), "utf8").trim()).join("\n\n");
}

function licences() {
  const parts = [
    "Third-party software in this directory (mermaid.min.js bundles mermaid and its",
    "dependencies). Written by ui/build.mjs from ui/package-lock.json; do not edit.",
  ];
  for (const path of installed()) {
    const dir = join(here, path);
    if (!existsSync(join(dir, "package.json"))) continue;
    const meta = packageJson(dir);
    const text = licenceText(dir) || `(no licence file; package.json says: ${meta.license})`;
    const licence = meta.license ?? "no licence field; its licence file follows";
    parts.push(`\n${"=".repeat(78)}\n${meta.name} ${meta.version} — ${licence}\n\n${text}`);
  }
  return parts.join("\n") + "\n";
}

function sha256(file) {
  return createHash("sha256").update(readFileSync(file)).digest("hex");
}

const manifest = {};
for (const [name, source] of Object.entries(copies)) {
  copyFileSync(source, join(vendor, name));
  manifest[name] = sha256(join(vendor, name));
}
writeFileSync(join(vendor, "LICENSES.txt"), licences());
manifest["LICENSES.txt"] = sha256(join(vendor, "LICENSES.txt"));
manifest.mermaid = packageJson(join(modules, "mermaid")).version;
writeFileSync(join(vendor, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`wrote ${Object.keys(copies).join(", ")}, LICENSES.txt and manifest.json to ${vendor}`);
