"""The local demo page: bidi against batch in the browser, played as it streams (docs/web.md).

Static files only (``index.html``, ``app.js``, ``style.css`` next to this module): the page calls the app's own
POST /invocations, so it needs no API of its own. Only the named files are served, never the package directory
(which holds this module and its bytecode).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

HERE = Path(__file__).resolve().parent
PATH = "/"  # where the page is served (also at /web/)

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

# Everything the page loads comes from this app: a stray external reference fails loudly instead of leaking.
HEADERS = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "media-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
}


def _file(name: str) -> Response:
    return FileResponse(HERE / name, media_type=ASSETS[name], headers=HEADERS)


async def _page(request: Request) -> Response:
    return _file("index.html")


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return PlainTextResponse("not found", status_code=404)
    return _file(name)


def web_routes() -> list[BaseRoute]:
    """GET / and /web/ (the page) and /web/<asset>."""
    return [
        Route("/", _page, methods=["GET"]),
        Route("/web/", _page, methods=["GET"]),
        Route("/web/{name}", _asset, methods=["GET"]),
    ]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (what the server binds) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
