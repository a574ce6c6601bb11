"""The browser UI: the static files in `ui/`, served at `/` with headers that keep them safe.

The UI is plain files (no build step) that call the public API like any other client.
Every response carries a Content-Security-Policy that allows this server only: no
script, style, image or connection may come from or go to anywhere else, so neither a
model's answer rendered in the page nor a mistake in the UI can send data out of the
building. Files are revalidated on each load (`no-cache`), so an upgrade shows at once.
"""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

# Installed (the wheel, the app bundle), ui/ ships inside the server package; a checkout keeps it beside it.
_SERVER = Path(__file__).resolve().parents[1]
UI_DIR = next((d for d in (_SERVER / "ui", _SERVER.parent / "ui") if (d / "index.html").is_file()), _SERVER / "ui")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


class UIFiles(StaticFiles):
    """StaticFiles with the headers above on every answer (404s included)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def ui_app(directory: Path = UI_DIR) -> UIFiles | None:
    """The mountable UI, or None when this installation has no ui/ folder (API only)."""
    return UIFiles(directory=directory, html=True) if (directory / "index.html").is_file() else None
