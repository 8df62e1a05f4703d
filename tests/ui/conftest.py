"""The inspector in a real browser: headless Chromium from the system's packages (Debian's
`chromium`), driven by Playwright, against the service on a real socket over the seeded world.

The browser tests carry the `browser` marker: where STRATAMEM_REQUIRE_SERVICES=1 (CI) a
missing Chromium fails them instead of skipping them."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stratamem.api import create_app
from stratamem.testing import ScriptedLLM, scripted_llm_fixture
from tests.api.conftest import alice, bob, client, services
from tests.api.live import live
from tests.ui.world import World, install_model, make_world, open_services

__all__ = ["alice", "bob", "client", "services"]  # the API's fixtures, for the route tests

#: Chromium as Debian ships it; STRATAMEM_CHROMIUM names another binary.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
VIEWPORT = {"width": 1366, "height": 800}  # a laptop screen

#: What Chromium logs for a 401: the login asks /v1/whoami, which refuses the admin key (and
#: a wrong key); any other failed load is a problem.
LOGIN_REFUSAL = "the server responded with a status of 401 (Unauthorized)"

module_llm = scripted_llm_fixture(name="module_llm", scope="module")

#: Records every Content-Security-Policy refusal the page meets, for `page_problems`.
WATCH_CSP = """
window.__problems = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.__problems.push(`CSP refused ${e.violatedDirective}: ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile}:${e.lineNumber}`));
"""


def chromium_path() -> str:
    found = os.environ.get("STRATAMEM_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.skip("no Chromium: apt-get install -y chromium (or set STRATAMEM_CHROMIUM)")
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_llm: ScriptedLLM) -> World:
    root = tmp_path_factory.mktemp("world")
    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, make_world(root, module_llm)).result()


@pytest.fixture(scope="module")
def base_url(world: World, module_llm: ScriptedLLM) -> Iterator[str]:
    """The service over the world's files, on a free port."""
    install_model(module_llm)
    services, _ = open_services(world.data_dir, world.llm_url)
    with live(create_app(services, close_on_shutdown=True)) as url:
        yield url


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_path()
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data-dir
    with playwright_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport=VIEWPORT,
        )  # fmt: skip
        context.add_init_script(WATCH_CSP)
        yield context
        context.close()


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    """A new tab (its own sessionStorage: logged out); it must end with no script error and
    no refusal of the Content-Security-Policy."""
    tab = browser_context.new_page()
    tab.set_default_timeout(15_000)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield tab
    problems = [e for e in errors if not e.endswith(LOGIN_REFUSAL)]
    problems += tab.evaluate("window.__problems || []")
    tab.close()
    assert problems == []


def log_in(page: Any, base_url: str, token: str, view: str = "") -> None:
    page.goto(f"{base_url}/ui{'#/' + view if view else ''}")
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.locator("#nav a").first.wait_for()
    settled(page)


def settled(page: Any) -> None:
    """Wait until the view of the current address has rendered (the app clears `aria-busy`
    and names the route it rendered in `data-shown`): right after a click, the previous view
    is still there, not busy, until the app's hashchange handler runs."""
    page.wait_for_function(
        "() => { const main = document.querySelector('main');"
        " return main.getAttribute('aria-busy') === 'false'"
        " && main.dataset.shown === location.hash; }"
    )


def shoot(page: Any, name: str) -> None:
    """A screenshot for docs/inspector.md, when STRATAMEM_UI_SHOTS names a directory."""
    where = os.environ.get("STRATAMEM_UI_SHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=False)
