"""What /ui serves: files of the package only, under the inspector's security headers, the same
bytes whatever key is sent (nothing there reads the store), and vendored files that are what
`make ui` built (ui/build.mjs's manifest) with their licences."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import httpx

from stratamem.api.ui import CSP, FRAME, FRAME_CSP, STATIC
from tests.api.conftest import Caller

ROOT = Path(__file__).resolve().parents[2]


async def test_the_page_and_its_assets_carry_the_policy(client: httpx.AsyncClient) -> None:
    for path in ("/ui", "/ui/", "/ui/static/app.js", "/ui/static/inspector.css",
                 "/ui/static/vendor/mermaid.min.js", "/ui/static/nothing.js"):
        answer = await client.get(path)
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
    assert (await client.get("/ui/static/nothing.js")).status_code == 404
    frame = await client.get(FRAME)
    assert frame.headers["content-security-policy"] == FRAME_CSP
    assert "frame-ancestors 'self'" in FRAME_CSP and "script-src 'self';" in FRAME_CSP
    assert "'unsafe-inline'" not in CSP and "unsafe-eval" not in CSP + FRAME_CSP


async def test_nothing_under_ui_depends_on_the_key(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    """The page is the same file for anyone: tenant data only comes from /v1 with a key."""
    for path in ("/ui", "/ui/static/views/memories.js"):
        anonymous, keyed = await client.get(path), await client.get(path, headers=alice.headers)
        assert anonymous.status_code == keyed.status_code == 200
        assert anonymous.content == keyed.content
    assert (await client.get("/ui/static/../../api/__init__.py")).status_code == 404
    assert (await client.get("/ui/static/%2e%2e/__init__.py")).status_code == 404


def test_the_page_has_no_inline_script_or_style_and_loads_nothing_from_elsewhere() -> None:
    for page in STATIC.glob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), page
        assert "<style" not in html and " style=" not in html, page
        assert not re.search(r"(src|href)=\"(https?:)?//", html), page
    for module in STATIC.rglob("*.js"):
        if module.parent.name != "vendor":
            text = module.read_text(encoding="utf-8")
            assert "innerHTML" not in text and "eval(" not in text, module
            assert not re.search(r"https?://", text), module


def test_the_vendored_files_are_what_make_ui_built_with_their_licences() -> None:
    vendor = STATIC / "vendor"
    manifest = json.loads((vendor / "manifest.json").read_text())
    lock = json.loads((ROOT / "ui" / "package-lock.json").read_text())
    assert manifest["mermaid"] == lock["packages"]["node_modules/mermaid"]["version"]
    for name in ("mermaid.min.js", "LICENSES.txt"):
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == manifest[name], name
    licences = (vendor / "LICENSES.txt").read_text(encoding="utf-8")
    installed = [p for p, meta in lock["packages"].items() if p and not meta.get("dev")]
    for path in installed:
        name = path.rsplit("node_modules/", 1)[1]
        assert f"\n{name} {lock['packages'][path]['version']} — " in licences, name


def test_the_package_data_ships_every_file_of_the_page() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["stratamem"]
    package = ROOT / "src" / "stratamem"
    for file in STATIC.rglob("*"):
        if file.is_file():
            relative = file.relative_to(package).as_posix()
            assert any(fnmatch(relative, glob) and relative.count("/") == glob.count("/")
                       for glob in globs), relative
