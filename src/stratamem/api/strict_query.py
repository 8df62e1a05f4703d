"""Unknown query parameters are refused (422), so a misspelt option is never silently ignored."""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from stratamem.errors import InvalidInput


async def reject_unknown_query(request: Request) -> None:
    """Async, and nothing to do without a query string: every request of the app passes here,
    and a sync dependency would cost each one a trip to a worker thread."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        accepted = ", ".join(sorted(known)) or "none"
        raise InvalidInput(f"unknown query parameters: {', '.join(unknown)} (accepted: {accepted})")


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
