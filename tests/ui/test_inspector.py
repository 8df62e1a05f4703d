"""The inspector driven in headless Chromium, as its user would: log in with a key, answer
"why did the agent recall this?", "where did this memory come from?" and "why is my session's
L1 not done?", render a task diagram, retry a failure, requeue a dead letter, and see nothing of
another tenant."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN, ADMIN_KEY
from tests.ui.conftest import log_in, settled, shoot
from tests.ui.world import BOB_SECRET, GARDEN, World

pytestmark = pytest.mark.browser


def test_a_tenant_key_logs_in_and_lists_its_memories(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token)
    assert page.locator("#who").inner_text() == "tenant alice"
    listed = page.locator("main table").inner_text()
    assert "Biscuit" in listed and "Lena" in listed
    page.get_by_label("Type").select_option("persona")
    page.get_by_role("button", name="Show").click()
    settled(page)
    assert "Lena" in page.locator("main table").inner_text()
    assert "Biscuit" not in page.locator("main table").inner_text()  # that one is episodic
    shoot(page, "memories")


def test_a_wrong_key_is_refused_at_the_login(page: Any, base_url: str) -> None:
    log_in_fails = page.goto(f"{base_url}/ui")
    assert log_in_fails is not None and log_in_fails.ok
    page.get_by_label("API key").fill("sk-not-a-key")
    page.get_by_role("button", name="Log in").click()
    assert "unknown or revoked" in page.get_by_role("alert").inner_text()


def test_a_memory_shows_where_it_came_from_and_its_history(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token)
    page.get_by_role("link", name="Adopted a beagle called Biscuit last spring").click()
    settled(page)
    sources = page.locator("section", has=page.get_by_role("heading", name="Where it came from"))
    assert "I adopted a dog called Biscuit" in sources.inner_text()  # kept by the correction
    history = page.locator("section", has=page.get_by_role("heading", name="History"))
    events = history.locator("li.event")
    assert events.count() == 2
    first = events.nth(0).inner_text()
    assert "stored" in first and "dog called Biscuit" in first
    assert "corrected" in events.nth(1).inner_text()
    shoot(page, "memory")
    events.nth(0).get_by_role("link").click()  # the version it superseded: drawn from a turn
    settled(page)
    sources = page.locator("section", has=page.get_by_role("heading", name="Where it came from"))
    assert "I adopted a dog called Biscuit last spring" in sources.inner_text()
    sources.get_by_role("link", name="trip #1").click()
    settled(page)
    assert page.locator('li.turn[aria-current="true"]').inner_text().startswith("#1")
    shoot(page, "conversation")


def test_the_search_playground_shows_why_each_hit_was_recalled(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token, "search")
    page.get_by_label("Query", exact=True).fill("who visits on Sundays?")
    page.get_by_role("button", name="Recall").click()
    settled(page)
    first = page.locator("main table tbody tr").first
    assert "Lena" in first.inner_text()
    assert "L1:bm25 rank 1" in first.inner_text()  # and the retrievers' scores beside
    blocks = page.locator("section h2")
    assert "Per-turn block" in blocks.nth(0).inner_text()
    assert "characters" in blocks.nth(0).inner_text()
    assert "Lena" in page.locator("pre.block").first.inner_text()
    shoot(page, "search")


def test_a_session_says_why_its_l1_is_not_done_and_a_retry_covers_the_turn(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token, "session/garden")
    owed = page.locator("section.owed")
    assert "open quarantine failure of L1" in owed.inner_text()
    assert "quarantined" in page.locator("li.turn").first.inner_text()
    shoot(page, "session-owed")
    owed.get_by_role("link", name="Retry the open failures").click()
    settled(page)
    shoot(page, "failures")
    row = page.locator("tbody tr", has=page.get_by_text("quarantine", exact=True))
    row.get_by_role("button", name="Retry").click()
    page.get_by_role("status").filter(has_text="1 resolved").wait_for()
    settled(page)
    page.goto(f"{base_url}/ui#/session/garden")
    settled(page)
    turn = page.locator("li.turn").first
    assert "extracted" in turn.inner_text() and GARDEN[0] in turn.inner_text()
    assert "open quarantine" not in page.locator("section.owed").inner_text()


def test_a_task_diagram_is_rendered_with_its_nodes_linked_to_tool_calls(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token, "offload/build")
    diagram = page.locator("figure.diagram svg")
    diagram.wait_for()
    assert "Investigate and change code" in (diagram.text_content() or "")
    node = diagram.locator("g.node.linked")
    assert node.count() == 1
    node.click()
    assert page.locator("li.entry.highlight").count() == 3
    call = page.locator("li.entry").first
    call.get_by_role("button", name="Exact result").click()
    assert "disk quota exceeded" in call.locator(".result pre").inner_text()
    shoot(page, "offload")


def test_a_dead_letter_is_requeued(page: Any, base_url: str, world: World) -> None:
    log_in(page, base_url, world.alice.token, "pipeline")
    dead = page.locator("tbody tr", has=page.get_by_text("the endpoint refused every attempt"))
    shoot(page, "pipeline-tenant")
    dead.get_by_role("button", name="Requeue").click()
    page.get_by_role("status").filter(has_text="requeued").wait_for()
    settled(page)
    assert page.locator("tbody tr", has=page.get_by_text("the endpoint refused")).count() == 0
    queued = httpx.get(f"{base_url}/v1/pipeline", headers=world.alice.headers).json()
    assert queued["dead_letters"] == 0 and queued["queued"] >= 1


def test_the_admin_key_shows_the_pipeline_and_llm_cost(page: Any, base_url: str) -> None:
    log_in(page, base_url, ADMIN_KEY)
    assert page.locator("#who").inner_text() == "admin"
    llm = page.locator("table", has=page.get_by_text("LLM calls, tokens and outcomes"))
    assert llm.locator("tbody tr").count() >= 1
    kinds = page.locator("table", has=page.get_by_text("The scheduler of each kind of work"))
    assert {"L1", "L2", "L3", "offload-l1"} <= set(kinds.locator("tbody tr td:first-child")
                                                   .all_inner_texts())  # fmt: skip
    shoot(page, "pipeline-admin")
    page.get_by_role("link", name="Tenants").click()
    settled(page)
    assert "alice" in page.locator("main table").inner_text()


def test_scenes_and_the_profile_show_their_versions(
    page: Any, base_url: str, world: World
) -> None:
    log_in(page, base_url, world.alice.token, "scenes")
    scenes = page.locator("main table tbody tr")
    assert scenes.count() >= 1
    shoot(page, "scenes")
    page.get_by_role("link", name="Profile").click()
    settled(page)
    assert page.locator(".side-by-side .side").count() == 2
    shoot(page, "profile")


def test_one_tenant_sees_nothing_of_another(page: Any, base_url: str, world: World) -> None:
    """Bob's secret is in his memories and turns; alice's key finds it in no view, and the
    page asked for nothing that is not hers (every answer it got is alice's own)."""
    assert BOB_SECRET in httpx.get(f"{base_url}/v1/sessions/gym/turns",
                                   headers=world.bob.headers).text  # fmt: skip
    log_in(page, base_url, world.alice.token)
    for view in ("memories", "sessions", "failures", "pipeline", "scenes", "profile",
                 "session/gym", "offload/gym"):
        page.goto(f"{base_url}/ui#/{view}")
        settled(page)
        assert "pineapple" not in page.locator("main").inner_text(), view
    page.goto(f"{base_url}/ui#/search?q=locker%20code%20pineapple")
    settled(page)
    hits = page.locator("main table").inner_text()
    assert "pineapple" not in hits and "gym" not in hits  # only alice's own memories and turns
    assert httpx.get(f"{base_url}/v1/admin/tenants", headers=ADMIN).is_success


def test_a_memory_shows_what_was_built_from_it_and_erasing_it_reaches_them(
    page: Any, base_url: str, world: World
) -> None:
    """Lineage on the page: the scenes and profile versions built from a memory; erasing it for
    good (last in this module: it changes alice's world) leaves no view that still says it."""
    log_in(page, base_url, world.alice.token)
    page.get_by_role("link", name="Dolomites").first.click()
    settled(page)
    built = page.locator("section", has=page.get_by_role("heading", name="Built from it"))
    links = built.get_by_role("link")
    assert links.count() >= 1
    assert any(kind in built.inner_text() for kind in ("scene", "profile"))
    shoot(page, "memory-lineage")
    before = [httpx.get(f"{base_url}/v1/scenes/{found['id']}/history", headers=world.alice.headers)
              .text for found in httpx.get(f"{base_url}/v1/scenes", headers=world.alice.headers)
              .json()]  # fmt: skip
    assert any("Dolomites" in text for text in before)  # so that its absence below means it
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Erase for good").click()
    page.get_by_role("status").filter(has_text="erased: 1 memory").wait_for()
    settled(page)
    for view in ("memories", "scenes", "profile"):
        page.goto(f"{base_url}/ui#/{view}")
        settled(page)
        assert "Dolomites" not in page.locator("main").inner_text(), view
    scenes = httpx.get(f"{base_url}/v1/scenes", headers=world.alice.headers).json()
    for found in scenes:
        history = httpx.get(f"{base_url}/v1/scenes/{found['id']}/history",
                            headers=world.alice.headers).text  # fmt: skip
        assert "Dolomites" not in history
    profiles = httpx.get(f"{base_url}/v1/profile/history", headers=world.alice.headers).text
    assert "Dolomites" not in profiles
