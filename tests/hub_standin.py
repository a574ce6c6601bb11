"""A local stand-in for the Hugging Face Hub's download side, on loopback, for tests.

What it is: two standard-library HTTP servers on 127.0.0.1 that the real, unmodified `huggingface_hub`
client talks to through `endpoint=` / `HF_ENDPOINT`. The "hub" port answers `HEAD`/`GET
/{org}/{name}/resolve/{rev}/{path}`, `/api/models/{org}/{name}[/revision/{rev}]` and `.../tree/{rev}[/{path}]`
with the headers, codes and JSON the real Hub sends (as huggingface_hub 2.4.0's file_download.py, hf_api.py
and utils/_http.py read them); the "CDN" port serves LFS bytes as the Hub's signed CDN URLs do (Range, 206).
Ids are real git hashes (blob, tree, commit), LFS pointers included. Faults (a cut connection, a 5xx, a slow
link) can be injected; every request is logged.

What it is not: the Hub. No uploads, no Xet (no X-Xet-* headers, no xetHash: the client takes plain HTTP),
models only, no tags or refs/pr/N (only "main" and full commit ids), no gzip, no `expand=`. A Path given to
add_repo is read when served: don't change it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import io
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Stored with git-lfs on the Hub, as its default .gitattributes does; GGUF repos are LFS anyway.
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack",
                ".npz", ".npy", ".pkl", ".zip", ".gz", ".tar", ".model", ".tflite", ".ot")
LFS_MIN_SIZE = 10 * 1024 * 1024  # the Hub refuses plain git files above 10 MB
CHUNK = 64 * 1024
_EPOCH = 1_700_000_000  # commit dates: deterministic, one hour apart


class Request(NamedTuple):
    method: str
    path: str  # without the query
    range: str | None  # the Range header sent, verbatim
    status: int


@dataclass(frozen=True)
class _Blob:
    source: bytes | Path
    size: int
    sha256: str
    git_oid: str  # the blob sha1 git stores: of the content, or of the LFS pointer for an LFS file
    pointer: bytes | None  # the LFS pointer file; None for a plain git file

    def chunks(self, start: int, end: int, size: int = CHUNK) -> Iterator[bytes]:
        """Bytes [start, end) in pieces of at most `size`."""
        with io.BytesIO(self.source) if isinstance(self.source, bytes) else open(self.source, "rb") as f:
            f.seek(start)
            while start < end and (piece := f.read(min(size, end - start))):
                start += len(piece)
                yield piece


def _git_hash(kind: str, body: bytes) -> str:
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(body)) + body).hexdigest()


def _make_blob(name: str, source: bytes | str | os.PathLike) -> _Blob:
    src = bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) else Path(source)
    size = len(src) if isinstance(src, bytes) else src.stat().st_size
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    head = b""
    for piece in _Blob(src, size, "", "", None).chunks(0, size, 1 << 20):
        head = head or piece[:8000]
        sha256.update(piece)
        sha1.update(piece)
    # git-lfs's rule of thumb, as the Hub applies it: weights by suffix, anything big, anything binary
    lfs = name.lower().endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in head
    digest = sha256.hexdigest()
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {size}\n".encode()
    pointer = pointer if lfs else None
    return _Blob(src, size, digest, _git_hash("blob", pointer) if pointer else sha1.hexdigest(), pointer)


def _tree_oid(files: dict[str, _Blob], prefix: str = "") -> str:
    """The git tree id of the folder `prefix` ("" = the root, else ending in "/")."""
    entries: dict[str, tuple[bytes, str]] = {}
    for path, blob in files.items():
        if path.startswith(prefix):
            name, sub, _ = path[len(prefix):].partition("/")
            entries[name] = (b"40000", _tree_oid(files, f"{prefix}{name}/")) if sub else (b"100644", blob.git_oid)
    # git orders a folder as if its name ended in "/"
    order = sorted(entries, key=lambda n: n + "/" if entries[n][0] == b"40000" else n)
    return _git_hash("tree", b"".join(entries[n][0] + b" " + n.encode() + b"\0" + bytes.fromhex(entries[n][1])
                                      for n in order))


@dataclass
class _Repo:
    commits: list[tuple[str, dict[str, _Blob]]]  # oldest first; "main" is the last
    token: str | None = None  # gated (or private) behind this token
    private: bool = False

    def at(self, revision: str) -> tuple[str, dict[str, _Blob]] | None:
        return self.commits[-1] if revision == "main" else next((c for c in self.commits if c[0] == revision), None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client's idle keep-alive connection must not hold up close()

    def __init__(self, host: str, port: int, hub: HubStandIn, cdn: bool):
        self.hub, self.cdn = hub, cdn
        super().__init__((host, port), _Handler)


class _Reply(Exception):
    """Raised while routing, to answer at once: _Reply(status, X-Error-Code or None, X-Error-Message[, headers])."""


def point_hub_clients_at(url: str, monkeypatch, hf_home) -> None:
    """huggingface_hub (here and in children) talks to `url`, caches in `hf_home`, and sees none of
    the user's own Hugging Face setup (token, offline mode, telemetry)."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)


class HubStandIn:
    """`with HubStandIn() as hub:` -> hub.url (the endpoint), hub.add_repo, hub.fault, hub.throttle, hub.requests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, tree_page_size: int = 1000):
        self._lock = threading.Lock()
        self._repos: dict[str, _Repo] = {}
        self._lfs: dict[str, _Blob] = {}  # by sha256, for the CDN
        self._faults: list[list] = []  # [kind ("drop" or "status"), bytes or status, path prefix, times left]
        self._log: list[Request] = []
        self._rate, self._secret = None, os.urandom(16)  # throttle (bytes/s); the key CDN URLs are signed with
        self.tree_page_size = tree_page_size  # the real Hub pages tree listings at 1000 entries
        self._servers = [_Server(host, port, self, cdn=False), _Server(host, 0, self, cdn=True)]
        self.url = f"http://{host}:{self._servers[0].server_port}"
        # The CDN has its own port: huggingface_hub follows a same-origin redirect on its metadata HEAD
        # but stops at one to another origin, reads X-Linked-* from the 302 and drops Authorization for
        # the download. A second origin is what makes the client take the real Hub's code path.
        self.cdn_url = f"http://{host}:{self._servers[1].server_port}"

    def __enter__(self) -> HubStandIn:
        for s in self._servers:
            threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True, name="hub-standin").start()
        return self

    def __exit__(self, *exc) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()

    def add_repo(self, repo_id: str, files: dict[str, bytes | str | os.PathLike | None], *,
                 token: str | None = ..., private: bool = ...) -> str:  # type: ignore[assignment]
        """Create `repo_id` (or add a commit to it) and return the new commit id. `files` maps repo paths to
        bytes or a file path; on an existing repo they are added or replaced, None deletes one. `token`: the
        repo is gated, files need `Authorization: Bearer <token>`; with private=True, the whole repo does.
        Left out, both keep their value (a new repo: public)."""
        org, _, name = repo_id.partition("/")
        if not org or not name or "/" in name:
            raise ValueError(f"repo_id must be 'org/name', not {repo_id!r}")
        files = {p.strip("/"): src for p, src in files.items()}
        blobs = {p: _make_blob(p, src) for p, src in files.items() if src is not None}
        with self._lock:
            repo = self._repos.setdefault(repo_id, _Repo(commits=[]))
            old = repo.commits[-1][1] if repo.commits else {}
            tree = {p: b for p, b in {**old, **blobs}.items() if files.get(p, b"") is not None}
            index, parent = len(repo.commits), repo.commits[-1][0] if repo.commits else None
            stamp = f"hub-standin <standin@127.0.0.1> {_EPOCH + 3600 * index} +0000"
            body = f"tree {_tree_oid(tree)}\n" + (f"parent {parent}\n" if parent else "")
            body += f"author {stamp}\ncommitter {stamp}\n\n{repo_id}: commit {index}\n"
            commit = _git_hash("commit", body.encode())
            repo.commits.append((commit, tree))
            repo.token = repo.token if token is ... else token
            repo.private = repo.private if private is ... else bool(private)
            self._lfs.update({b.sha256: b for b in blobs.values() if b.pointer is not None})
        return commit

    def fault(self, *, drop_after: int | None = None, status: int | None = None, path="", times=1) -> None:
        """Queue a fault. drop_after=N: the next file download (a body GET) closes the connection after N
        body bytes. status=S: the next request whose path starts with `path` answers S (a dead upstream).
        Faults are taken in order: a later one waits until the ones before it have happened."""
        if (drop_after is None) == (status is None):
            raise ValueError("give one of drop_after= or status=")
        with self._lock:
            self._faults.append(["drop", drop_after, "", times] if status is None else ["status", status, path, times])

    def throttle(self, bytes_per_s: int | None) -> None:
        self._rate = bytes_per_s  # file bodies go out at about this rate from now on (None: full speed)

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._log)

    def _take_fault(self, kind: str, path: str) -> int | None:
        with self._lock:
            if not self._faults or self._faults[0][0] != kind or not path.startswith(self._faults[0][2]):
                return None
            fault = self._faults[0]
            fault[3] -= 1
            return (self._faults.pop(0) if fault[3] <= 0 else fault)[1]

    def _sign(self, sha256: str) -> str:
        return hmac.new(self._secret, sha256.encode(), "sha256").hexdigest()[:32]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx's pool expects; every reply has a Content-Length
    server_version = "hub-standin"
    timeout = 30  # an idle keep-alive connection's thread ends on its own
    server: _Server

    def log_message(self, format: str, *args) -> None:
        pass  # the hub keeps its own log (hub.requests); stderr noise would drown test output

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        hub = self.server.hub
        try:
            if (status := hub._take_fault("status", url.path)) is not None:
                raise _Reply(status, None, "Service Unavailable" if status == 503 else "Internal Error")
            self._route(url.path, parse_qs(url.query))
        except _Reply as r:
            status, code, message, *more = r.args
            headers = dict(*more, **({"X-Error-Code": code} if code else {}), **{"X-Error-Message": message})
            self._send(status, headers, json.dumps({"error": message}).encode(), "application/json")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-reply

    do_HEAD = do_GET

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"", ctype: str = "text/plain; charset=utf-8",
              blob: _Blob | None = None, span: tuple[int, int] = (0, 0)) -> None:
        hub = self.server.hub
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(span[1] - span[0] if blob else len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        # logged before the headers leave: a client that has its answer finds it in hub.requests
        with hub._lock:
            hub._log.append(Request(self.command, urlsplit(self.path).path, self.headers.get("Range"), status))
        self.end_headers()
        if self.command == "HEAD" or blob is None:
            return None if self.command == "HEAD" else self.wfile.write(body)
        drop, sent, rate = hub._take_fault("drop", ""), 0, hub._rate
        for piece in blob.chunks(*span, size=max(1024, rate // 20) if rate else CHUNK):
            if drop is not None and sent + len(piece) >= drop:
                self.wfile.write(piece[:drop - sent])
                self.close_connection = True
                return self.connection.shutdown(socket.SHUT_RDWR)  # mid-body: the client sees a short read
            self.wfile.write(piece)
            sent += len(piece)
            time.sleep(len(piece) / rate if rate else 0)

    def _send_file(self, blob: _Blob, headers: dict[str, str], ctype: str) -> None:
        """200 with the whole file, or 206 for `Range: bytes=N-[M]` / `bytes=-K`; 416 past the end."""
        start, end, status = 0, blob.size, 200
        if rng := self.headers.get("Range"):
            first, _, last = rng.strip().removeprefix("bytes=").partition("-")
            try:
                start, end = (blob.size - int(last), blob.size) if not first else \
                    (int(first), min(int(last) + 1, blob.size) if last else blob.size)
            except ValueError:
                start = end = -1
            if "," in rng or not 0 <= start < end:
                raise _Reply(416, None, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{blob.size}"})
            status = 206
            headers = dict(headers, **{"Content-Range": f"bytes {start}-{end - 1}/{blob.size}"})
        self._send(status, dict(headers, **{"Accept-Ranges": "bytes"}), ctype=ctype, blob=blob, span=(start, end))

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        parts = [unquote(p) for p in path.split("/")[1:]]
        if self.server.cdn:
            if len(parts) == 2 and parts[0] == "_lfs" and (blob := self.server.hub._lfs.get(parts[1])) and \
                    hmac.compare_digest(query.get("sig", [""])[0], self.server.hub._sign(parts[1])):
                name = query.get("filename", [parts[1]])[0]
                disposition = f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";"
                return self._send_file(blob, {"ETag": f'"{blob.sha256}"', "Content-Disposition": disposition},
                                       "application/octet-stream")
            raise _Reply(403, None, "Access Denied")  # an unsigned or unknown CDN URL, as S3/CloudFront answer
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(parts[2] + "/" + parts[3], parts[4:], path, query)
        if parts[:3] == ["api", "resolve-cache", "models"] and len(parts) >= 7:
            commit, _, blob = self._open(parts[3] + "/" + parts[4], parts[5], "/".join(parts[6:]))
            return self._send_file(blob, {"ETag": f'"{blob.git_oid}"', "X-Repo-Commit": commit}, "text/plain")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        raise _Reply(404, None, "Not Found")

    def _open(self, repo_id: str, revision: str, file: str | None = None) -> tuple[str, dict[str, _Blob], _Blob]:
        """(commit, files, the blob at `file`), or the error the Hub answers: no such repo (401 without a token,
        404 with one: private and missing look alike), a gate on a file (401 no token, 403 another token), no
        such revision, no such file (with X-Repo-Commit, which the client uses to cache the miss)."""
        hub = self.server.hub
        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        if token is not None and not token.startswith("hf_"):
            # not a token at all: the Hub refuses it on any repo, public ones too (no X-Error-Code)
            raise _Reply(401, None, "Invalid credentials in Authorization header")
        with hub._lock:
            repo = hub._repos.get(repo_id)
            found = repo.at(revision) if repo else None
        if repo is None or (repo.private and token != repo.token):
            raise _Reply(401, "RepoNotFound", "Invalid username or password.") if token is None else \
                _Reply(404, "RepoNotFound", "Repository not found")
        if file is not None and repo.token is not None and token != repo.token:
            if token is None:
                raise _Reply(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it "
                             "and be authenticated to access it. Please log in.")
            raise _Reply(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                         f"authorized list. Visit {hub.url}/{repo_id} to ask for access.")
        if found is None:
            raise _Reply(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if file is not None and file not in found[1]:
            raise _Reply(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": found[0]})
        return found[0], found[1], found[1].get(file)  # type: ignore[return-value]

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        commit, _, blob = self._open(repo_id, revision, path)
        hub = self.server.hub
        if blob.pointer is None:
            # A plain git file: the Hub now answers a relative 307 to its resolve-cache, on the same origin;
            # the client follows it and reads X-Repo-Commit and ETag (the blob sha1) from the 200 there.
            etag = f'"{blob.git_oid}"'
            target = f"/api/resolve-cache/models/{repo_id}/{commit}/{quote(path)}?etag={quote(etag)}"
            return self._send(307, {"Location": target, "X-Repo-Commit": commit, "ETag": etag},
                              f"Temporary Redirect. Redirecting to {target}".encode())
        # LFS: a 302 to a signed CDN URL on another origin; the client takes the file's identity from this
        # very response: X-Linked-Etag (sha256) and X-Linked-Size. The ETag is the pointer's blob id.
        target = f"{hub.cdn_url}/_lfs/{blob.sha256}?sig={hub._sign(blob.sha256)}&filename={quote(path.split('/')[-1])}"
        self._send(302, {"Location": target, "X-Repo-Commit": commit, "X-Linked-Etag": f'"{blob.sha256}"',
                         "X-Linked-Size": str(blob.size), "ETag": f'"{blob.git_oid}"', "Accept-Ranges": "bytes"},
                   f"Found. Redirecting to {target}".encode())

    def _api(self, repo_id: str, rest: list[str], path: str, query: dict[str, list[str]]) -> None:
        revision = rest[1] if len(rest) >= 2 and rest[0] in ("revision", "tree") else "main"
        if rest and (rest[0] not in ("revision", "tree") or len(rest) < 2 or (rest[0] == "revision" and len(rest) > 2)):
            raise _Reply(404, None, "Not Found")
        commit, tree, _ = self._open(repo_id, revision)  # metadata is public on gated repos
        if rest and rest[0] == "tree":
            return self._tree(commit, tree, "/".join(rest[2:]).strip("/"), path, query)
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = [{"rfilename": p, **({"blobId": b.git_oid, "size": b.size} if blobs else {}),
                     **({"lfs": {"sha256": b.sha256, "size": b.size, "pointerSize": len(b.pointer)}}
                        if blobs and b.pointer else {})} for p, b in sorted(tree.items())]
        repo = self.server.hub._repos[repo_id]
        index = [c[0] for c in repo.commits].index(commit)
        iso = [time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(_EPOCH + 3600 * i)) for i in (0, index)]
        info = {"_id": commit[:24], "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0],
                "sha": commit, "lastModified": iso[1], "createdAt": iso[0], "private": repo.private, "disabled": False,
                "gated": "manual" if repo.token is not None and not repo.private else False,
                "downloads": 0, "likes": 0, "tags": [],
                "library_name": "gguf" if any(p.endswith(".gguf") for p in tree) else None,
                "siblings": siblings, "usedStorage": sum(b.size for b in tree.values())}
        self._send(200, {}, json.dumps(info).encode(), "application/json")

    def _tree(self, commit: str, tree: dict[str, _Blob], prefix: str, path: str, query: dict[str, list[str]]) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        base = prefix + "/" if prefix else ""
        under = {p: p[len(base):] for p in sorted(tree) if p.startswith(base)}
        if prefix and not under:
            raise _Reply(404, "EntryNotFound", f"{prefix} does not exist on \"{commit}\"", {"X-Repo-Commit": commit})
        # a plain listing holds the folder's own files and sub-folders; a recursive one, everything below it
        folders = {base + "/".join(rel.split("/")[:depth]) for rel in under.values()
                   for depth in range(1, rel.count("/") + 1 if recursive else min(2, rel.count("/") + 1))}
        listing = [{"type": "directory", "oid": _tree_oid(tree, f + "/"), "size": 0, "path": f}
                   for f in sorted(folders)]
        for p, rel in under.items():
            if recursive or "/" not in rel:
                b = tree[p]
                lfs = {"lfs": {"oid": b.sha256, "size": b.size, "pointerSize": len(b.pointer)}} if b.pointer else {}
                listing.append({"type": "file", "oid": b.git_oid, "size": b.size, "path": p, **lfs})
        hub = self.server.hub
        start = int(query.get("cursor", ["0"])[0])
        page, headers = listing[start:start + hub.tree_page_size], {}
        if start + hub.tree_page_size < len(listing):  # GitHub-style Link paging, as the Hub does
            nxt = f"{hub.url}{path}?recursive={str(recursive).lower()}&cursor={start + len(page)}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._send(200, headers, json.dumps(page).encode(), "application/json")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve DIR/<org>/<repo>/... as a local Hugging Face Hub stand-in.")
    ap.add_argument("dir", type=Path, help="a folder of <org>/<repo>/ folders")
    ap.add_argument("--port", type=int, default=0, help="the hub's port (default: a free one)")
    ap.add_argument("--token", default=None, help="gate every repo behind this token (hf_...)")
    args = ap.parse_args(argv)
    with HubStandIn(port=args.port) as hub:
        for repo in sorted(p for p in args.dir.glob("*/*") if p.is_dir()):
            files = {f.relative_to(repo).as_posix(): f for f in sorted(repo.rglob("*"))
                     if f.is_file() and ".git" not in f.relative_to(repo).parts}
            commit = hub.add_repo(f"{repo.parent.name}/{repo.name}", files, token=args.token)
            print(f"{repo.parent.name}/{repo.name} @ {commit}: {len(files)} files", flush=True)
        print(f"serving: HF_ENDPOINT={hub.url} (LFS bytes from {hub.cdn_url}); Ctrl-C stops", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
