"""The web inspector at `/ui`: static files shipped in the package, nothing else.

The page holds the caller's key and calls the `/v1` routes with it, so every answer it shows
passed the same authentication and tenant scope as the API's; nothing under `/ui` reads the
store. Every asset (the page's modules, its stylesheet, the Mermaid renderer) is a file of this
package, served under a Content-Security-Policy that allows scripts, styles and connections to
this origin only.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(str(files(__package__) / "static"))
PREFIX = "/ui"

#: Scripts, styles, images, frames and connections from this origin only; no inline script or
#: style, no eval, no form posting, no `<base>` rewriting, not framed by another page.
POLICY = {
    "default-src": "'none'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "frame-src": "'self'",
    "base-uri": "'none'",
    "form-action": "'none'",
    "frame-ancestors": "'none'",
}
#: The frame Mermaid lays its diagrams out in (`mermaid-frame.html`, inside the page only):
#: Mermaid writes style elements and attributes as it measures, so that frame allows inline
#: styles; its scripts are still this origin's files only. The page itself takes the SVG
#: without them (their rules go through the CSS object model, which its policy allows).
FRAME = f"{PREFIX}/static/mermaid-frame.html"
FRAME_POLICY = {**POLICY, "style-src": "'self' 'unsafe-inline'", "frame-src": "'none'",
                "connect-src": "'none'", "frame-ancestors": "'self'"}  # fmt: skip


def csp(policy: dict[str, str]) -> str:
    return "; ".join(f"{name} {value}" for name, value in policy.items())


CSP, FRAME_CSP = csp(POLICY), csp(FRAME_POLICY)
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidated (ETag), so an upgrade shows at once
}

router = APIRouter(include_in_schema=False)


@router.get(PREFIX)
@router.get(f"{PREFIX}/")
def page() -> Response:
    """The inspector's one page; its views are addressed by the URL's fragment (`#/memories`)."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


class SecurityHeaders:
    """`HEADERS` and the policy on every answer under `prefix` (the page, its assets, their
    404s); Mermaid's frame gets its own policy."""

    def __init__(self, app: ASGIApp, prefix: str = PREFIX) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != self.prefix and not path.startswith(f"{self.prefix}/"):
            await self.app(scope, receive, send)
            return

        framed = path == FRAME
        extra = {**HEADERS, "Content-Security-Policy": FRAME_CSP if framed else CSP,
                 "X-Frame-Options": "SAMEORIGIN" if framed else "DENY"}  # fmt: skip

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = [(k, v) for k, v in message.get("headers", []) if k != b"cache-control"]
                raw += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install(app: FastAPI) -> None:
    """Serve the page at `/ui` and its assets at `/ui/static/…`, all with `HEADERS`."""
    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="ui-static")
    app.add_middleware(SecurityHeaders)
