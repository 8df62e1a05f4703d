"""The README's REST table lists every route the service answers, and no route it does not.

The table abbreviates: `GET …/keys` after `POST /v1/admin/tenants/{tenant}/keys` is the same path
with its last segment replaced, and a path without a method takes the previous one's. Path
parameters are compared by position only (`{id}` in the README is `{memory_id}` in the code);
query parameters by name (`?after=&limit=`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stratamem.api import create_app
from tests.api.conftest import open_services

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
#: What the README names in its prose rather than in the table (MCP is not in the OpenAPI).
IN_PROSE = ("`/openapi.json`", "`POST /mcp`", "`GET /mcp` and `DELETE /mcp`")
_SPAN = re.compile(r"`(?:(GET|POST|PATCH|DELETE) )?((?:/|…/)[^`\s?\[]*)\[?\??([^`\]]*)")


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def _resolve(given: str, previous: str) -> str:
    """`…/keys` after `/v1/admin/tenants/{tenant}/keys`: the previous path, its end replaced."""
    if not given.startswith("…/"):
        return given
    tail = given[2:].split("/")
    return "/".join(previous.split("/")[: -len(tail)] + tail)


def _table_routes() -> dict[str, set[str]]:
    """Each route of the table, with the query parameters its row names."""
    start = README.index("### The REST API")
    header = README.index("\n| route", start) + 1
    table = README[header : README.index("\n\n", header)]
    routes: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        method, path = "", ""
        for given_method, given_path, query in _SPAN.findall(row.split(" | ")[0]):
            method = given_method or method
            path = _resolve(given_path, path)
            routes[f"{method} {_shape(path)}"] = set(re.findall(r"(\w+)=", query))
    return routes


def _query_names(operation: dict[str, Any]) -> set[str]:
    return {p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"}


async def test_the_rest_table_lists_every_route_and_no_other(tmp_path: Path) -> None:
    services = open_services(tmp_path)
    try:
        paths = create_app(services).openapi()["paths"]
    finally:
        await services.aclose()
    served = {
        f"{method.upper()} {_shape(path)}": _query_names(op)
        for path, ops in paths.items()
        for method, op in ops.items()
    }
    table = _table_routes()
    assert (sorted(served.keys() - table), sorted(table.keys() - served)) == ([], [])
    assert {r: q for r, q in table.items() if q != served[r]} == {}
    assert [name for name in IN_PROSE if name not in README] == []
