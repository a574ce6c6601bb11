"""Request guards, as one ASGI middleware: Host, Origin, body size, API key.

- Host: the Host header must name this server (loopback names, the bound address,
  or --allowed-hosts). A web page that rebinds its own DNS name to 127.0.0.1 sends
  its own name as Host and is refused (DNS-rebinding protection).
- Origin: browsers send Origin on cross-site requests; only this server's own origin
  (or --allowed-origin) may call the API. Clients that are not browsers send none.
- Body size: larger than --max-body-bytes gets 413, whether or not Content-Length is set.
- Body text: a body holding a lone UTF-16 surrogate ("\\ud800" without its pair, or its
  bytes) gets 400. Python's JSON parser accepts one, but it is no character: the
  tokenizer and SQLite cannot encode it and would fail with a 500 deep inside.
- API key: when set, `Authorization: Bearer KEY` is required (401) on the API and
  /metrics. /health and the browser UI's static files stay open: they hold no data,
  and the UI asks for the key before it calls the API.
A pure ASGI middleware rather than a Starlette BaseHTTPMiddleware so that streaming
responses and disconnect notifications pass through untouched.
"""

from __future__ import annotations

import hmac
import json
import re
import socket
from urllib.parse import urlsplit

from .errors import APIError
from ..settings import LOOPBACK_NAMES, Settings

KEYED_PREFIXES = ("/v1/", "/metrics")  # everything else (/health, the UI's files, /docs) holds no data
# A JSON escape, taken whole: in the JSON text \\ud800 (an escaped backslash, then "ud800") is none.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.S)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _hostname(host_header: str) -> str:
    if "@" in host_header:  # userinfo is no part of a Host header (RFC 9110 7.2); urlsplit would drop it
        return ""
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
            names |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}  # the address: a str
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
        if has_lone_surrogate(body):
            raise APIError(400, "the request body holds a lone UTF-16 surrogate (\\ud800-\\udfff without its "
                                "pair), which is not a character. HINT: send the text as UTF-8, or escape a "
                                "character above U+FFFF as its two-surrogate pair", code="invalid_request")

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay


def has_lone_surrogate(body: bytes) -> bool:
    """Whether `body`, read as json.loads reads bytes (UTF-8/16/32, surrogates let through), holds a
    surrogate that is not half of an escaped pair. Linear: one pass over the escapes, none of the
    work when the body has no surrogate at all (the usual case)."""
    try:
        text = body.decode(json.detect_encoding(body), "surrogatepass")
    except (UnicodeDecodeError, LookupError):
        return False  # not text at all: the JSON parser refuses it with its own 400
    if _SURROGATE.search(text):  # raw ones: CESU-8 or lone UTF-16 bytes (a real pair decodes to one character)
        return True
    if "\\u" not in text:
        return False
    high_end = -1  # where an escaped high surrogate ended, waiting for its low half right there
    for m in _ESCAPE.finditer(text):
        unit = int(m.group(1), 16) if m.group(1) else None
        is_low = unit is not None and 0xDC00 <= unit <= 0xDFFF
        if high_end >= 0 and not (is_low and m.start() == high_end):
            return True  # a high half with no low half after it
        if high_end < 0 and is_low:
            return True  # a low half with no high half before it
        high_end = m.end() if unit is not None and 0xD800 <= unit <= 0xDBFF else -1
    return high_end >= 0
