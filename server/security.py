"""Request guards, as one ASGI middleware: Host, Origin, body size, API key.

- Host: the Host header must name this server (loopback names, the bound address,
  or --allowed-hosts). A web page that rebinds its own DNS name to 127.0.0.1 sends
  its own name as Host and is refused (DNS-rebinding protection).
- Origin: browsers send Origin on cross-site requests; only this server's own origin
  (or --allowed-origin) may call the API. Clients that are not browsers send none.
- Body size: larger than --max-body-bytes gets 413, whether or not Content-Length is set.
- API key: when set, `Authorization: Bearer KEY` is required (401) on the API and
  /metrics. /health and the browser UI's static files stay open: they hold no data,
  and the UI asks for the key before it calls the API.
A pure ASGI middleware rather than a Starlette BaseHTTPMiddleware so that streaming
responses and disconnect notifications pass through untouched.
"""

from __future__ import annotations

import hmac
import socket
from urllib.parse import urlsplit

from .errors import APIError
from .settings import LOOPBACK_NAMES, Settings

KEYED_PREFIXES = ("/v1/", "/metrics")  # everything else (/health, the UI's files, /docs) holds no data


def _hostname(host_header: str) -> str:
    return (urlsplit("//" + host_header).hostname or "").lower()


def allowed_host_names(settings: Settings) -> set[str] | None:
    """Names the Host header may carry; None means any (explicit `*`)."""
    if "*" in settings.allowed_hosts:
        return None
    names = set(LOOPBACK_NAMES) | {h.lower() for h in settings.allowed_hosts}
    if settings.host in ("0.0.0.0", "::", ""):
        # Bound to every interface: this machine's own names and addresses are its names.
        name = socket.gethostname()
        names |= {name.lower(), socket.getfqdn().lower()}
        try:
            names |= {info[4][0] for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    else:
        names.add(settings.host.strip("[]").lower())
    return names


class GuardMiddleware:
    def __init__(self, app, settings: Settings):
        self.app = app
        self.settings = settings
        self.hosts = allowed_host_names(settings)
        self.origins = {o.rstrip("/").lower() for o in settings.allowed_origins}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            self._check_host(headers)
            self._check_origin(headers)
            self._check_key(scope, headers)
            receive = await self._limit_body(scope, receive, headers)
        except APIError as e:
            return await e.response()(scope, receive, send)
        return await self.app(scope, receive, send)

    def _check_host(self, headers: dict) -> None:
        if self.hosts is None:
            return
        name = _hostname(headers.get("host", ""))
        if name not in self.hosts:
            raise APIError(400, f"Host {headers.get('host', '')!r} is not a name of this server. "
                                "HINT: start it with --allowed-host NAME to accept that name.",
                           code="invalid_host")

    def _check_origin(self, headers: dict) -> None:
        origin = headers.get("origin")
        if origin is None:
            return
        origin = origin.rstrip("/").lower()
        same = urlsplit(origin).netloc == headers.get("host", "").lower() and origin != "null"
        if not (same or origin in self.origins):
            raise APIError(403, f"requests from the web page at {origin} are not allowed. "
                                "HINT: add it with --allowed-origin URL if you trust it.",
                           code="origin_not_allowed")

    def _check_key(self, scope, headers: dict) -> None:
        key = self.settings.key
        path = scope.get("path", "")
        keyed = path.startswith(KEYED_PREFIXES) or path in ("/v1", "/metrics")
        if not key or not keyed or scope.get("method") == "OPTIONS":
            return
        auth = headers.get("authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not given:
            raise APIError(401, "an API key is required: send `Authorization: Bearer KEY`",
                           code="missing_api_key")
        if not hmac.compare_digest(given.encode(), key.encode()):
            raise APIError(401, "the API key is not valid", code="invalid_api_key")

    async def _limit_body(self, scope, receive, headers: dict):
        """Read the body up front (bounded), then replay it; later receives pass through."""
        limit = self.settings.max_body_bytes
        too_big = APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise too_big
        if scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            return receive
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return receive  # client went away; let the app see the disconnect
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                raise too_big
            if not msg.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay
