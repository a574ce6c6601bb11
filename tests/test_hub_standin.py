"""The real huggingface_hub client (2.4.0, unmodified) against tests/hub_standin.py.

What this proves: hf_hub_download (cache_dir and local_dir), list_repo_tree and model_info take
their real code paths against the stand-in and get the right bytes, ids and errors; and it pins the
client behaviours a downloader must know (resume only inside one call, in 10 MiB steps; no resume
across calls; killed downloads leave orphan .incomplete files; no Xet without X-Xet-* headers).
What it is not: a test of flashdesk's own downloader. Nothing here reaches the network or reads the
user's HF cache or token: HF_HOME and the library's paths point at a tmp dir, tokens are explicit.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # before huggingface_hub reads it at import

import httpx2  # noqa: E402  (huggingface_hub 2.4.0's own HTTP client)
import pytest  # noqa: E402
from huggingface_hub import HfApi, constants, file_download, hf_hub_download, snapshot_download  # noqa: E402
from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RemoteEntryNotFoundError,  # noqa: E402
                                    RepositoryNotFoundError, RevisionNotFoundError)
from tqdm.auto import tqdm  # noqa: E402

from hub_standin import HubStandIn  # noqa: E402

HERE = Path(__file__).resolve().parent
MiB = 1024 * 1024
CLIENT_CHUNK = constants.DOWNLOAD_CHUNK_SIZE  # 10 MiB: httpx2 hands the client the body in pieces this big


@pytest.fixture(autouse=True)
def hf_home(tmp_path, monkeypatch) -> Path:
    """A throwaway HF_HOME, for the environment and for the paths the library computed at import."""
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_XET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    return home


@pytest.fixture
def hub():
    with HubStandIn() as h:
        yield h


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha(path: str | Path) -> str:
    return sha(Path(path).read_bytes())


def weights(n: int, seed: int = 0) -> bytes:
    """n deterministic pseudo-random bytes (fast: a repeated 1 MiB block with the seed in front)."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    return (block * (n // MiB + 1))[:n]


def get(hub, repo, name, **kw) -> str:
    kw.setdefault("token", False)
    if "local_dir" not in kw:
        kw.setdefault("cache_dir", kw.pop("cache", None))
    return hf_hub_download(repo, name, endpoint=hub.url, **kw)


def test_ids_are_git_hashes_and_lfs_goes_through_a_302_to_another_origin(hub, tmp_path):
    commit = hub.add_repo("org/M", {"README.md": b"hello\n", "m.gguf": b"GGUF" + bytes(100)})
    info = HfApi(endpoint=hub.url).model_info("org/M", files_metadata=True, token=False)
    assert info.sha == commit and len(commit) == 40
    files = {s.rfilename: s for s in info.siblings}
    assert files["README.md"].blob_id == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of it
    assert files["README.md"].lfs is None and files["m.gguf"].lfs.sha256 == sha(b"GGUF" + bytes(100))
    assert files["m.gguf"].lfs.pointer_size == len(f"version https://git-lfs.github.com/spec/v1\noid sha256:"
                                                   f"{'0' * 64}\nsize 104\n")

    path = get(hub, "org/M", "m.gguf", cache_dir=tmp_path)
    assert Path(path).read_bytes() == b"GGUF" + bytes(100)
    assert Path(path).resolve().name == sha(b"GGUF" + bytes(100))  # blobs/<X-Linked-Etag>
    head, body = hub.requests[1:]  # after model_info's GET
    assert (head.method, head.status, body.method, body.status) == ("HEAD", 302, "GET", 200)
    assert body.path.startswith("/_lfs/")  # the client did not follow the 302 on its HEAD: another origin

    # a plain git file: a relative 307 to the resolve-cache, followed on the same origin; blob = git sha1
    readme = get(hub, "org/M", "README.md", cache_dir=tmp_path)
    assert Path(readme).resolve().name == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert [(r.method, r.status) for r in hub.requests[3:]] == [("HEAD", 307), ("HEAD", 200), ("GET", 200)]


def test_cache_dir_download_at_the_pinned_commit_and_at_main(hub, tmp_path):
    data = weights(3 * MiB)
    commit = hub.add_repo("org/Model-GGUF", {"model-Q4_K_M.gguf": data, "README.md": b"# model\n"})
    pinned = get(hub, "org/Model-GGUF", "model-Q4_K_M.gguf", revision=commit, cache_dir=tmp_path)
    assert file_sha(pinned) == sha(data) and f"/snapshots/{commit}/" in pinned
    n = len(hub.requests)
    # a pinned commit already in the cache: no request at all
    assert get(hub, "org/Model-GGUF", "model-Q4_K_M.gguf", revision=commit, cache_dir=tmp_path) == pinned
    assert len(hub.requests) == n
    # "main" makes one metadata HEAD, finds the same commit and blob, downloads nothing
    assert get(hub, "org/Model-GGUF", "model-Q4_K_M.gguf", cache_dir=tmp_path) == pinned
    assert [r.method for r in hub.requests[n:]] == ["HEAD"]
    assert (tmp_path / "models--org--Model-GGUF" / "refs" / "main").read_text() == commit


def test_default_cache_is_the_tmp_hf_home(hub, hf_home):
    hub.add_repo("org/M", {"a.gguf": b"x" * 10})
    assert get(hub, "org/M", "a.gguf").startswith(str(hf_home / "hub"))


def test_an_old_pinned_revision_still_serves_its_old_bytes(hub, tmp_path):
    old = hub.add_repo("org/M", {"m.gguf": weights(MiB, 1), "README.md": b"v1\n"})
    new = hub.add_repo("org/M", {"m.gguf": weights(MiB, 2), "README.md": None})
    assert old != new
    assert file_sha(get(hub, "org/M", "m.gguf", revision=old, cache_dir=tmp_path)) == sha(weights(MiB, 1))
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(weights(MiB, 2))
    assert Path(get(hub, "org/M", "README.md", revision=old, cache_dir=tmp_path)).read_bytes() == b"v1\n"
    with pytest.raises(RemoteEntryNotFoundError):  # deleted in the new commit
        get(hub, "org/M", "README.md", cache_dir=tmp_path)


def test_local_dir_download_writes_the_file_and_its_metadata(hub, tmp_path):
    data = weights(2 * MiB)
    commit = hub.add_repo("org/M", {"sub/m.gguf": data})
    out = tmp_path / "out"
    path = get(hub, "org/M", "sub/m.gguf", local_dir=out)
    assert Path(path) == out / "sub" / "m.gguf" and file_sha(path) == sha(data)
    meta = (out / ".cache" / "huggingface" / "download" / "sub" / "m.gguf.metadata").read_text().splitlines()
    assert meta[:2] == [commit, sha(data)]  # commit, etag (sha256 for LFS), then a timestamp
    n = len(hub.requests)
    assert get(hub, "org/M", "sub/m.gguf", local_dir=out) == path  # "main": a HEAD, the etag matches
    assert [r.method for r in hub.requests[n:]] == ["HEAD"]
    assert get(hub, "org/M", "sub/m.gguf", local_dir=out, revision=commit) == path  # pinned: nothing
    assert len(hub.requests) == n + 1


def test_list_repo_tree_and_model_info_give_sizes_and_lfs_sha256():
    with HubStandIn(tree_page_size=2) as hub:  # small pages: list_repo_tree must follow the Link header
        data = weights(MiB)
        hub.add_repo("org/M", {"a.gguf": data, "README.md": b"r\n", "q/b.gguf": b"b" * 7, "q/c/d.txt": b"d"})
        api = HfApi(endpoint=hub.url)
        top = {e.path: e for e in api.list_repo_tree("org/M", token=False)}
        assert set(top) == {"a.gguf", "README.md", "q"} and top["q"].tree_id
        assert top["a.gguf"].size == MiB and top["a.gguf"].lfs.sha256 == sha(data) and top["a.gguf"].lfs.size == MiB
        assert top["README.md"].lfs is None and top["README.md"].size == 2
        deep = {e.path for e in api.list_repo_tree("org/M", recursive=True, token=False)}
        assert deep == {"a.gguf", "README.md", "q", "q/b.gguf", "q/c", "q/c/d.txt"}
        assert {e.path for e in api.list_repo_tree("org/M", "q", token=False)} == {"q/b.gguf", "q/c"}
        assert sum(r.path.startswith("/api/models/org/M/tree/") for r in hub.requests) > 3  # pages
        with pytest.raises(RemoteEntryNotFoundError):
            list(api.list_repo_tree("org/M", "nope", token=False))
        info = api.model_info("org/M", files_metadata=True, token=False)
        sizes = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings}
        assert sizes["a.gguf"] == (MiB, sha(data)) and sizes["q/c/d.txt"] == (1, None)
        assert api.model_info("org/M", token=False).siblings[0].size is None  # sizes only with blobs=true
        assert api.model_info("org/M", revision=info.sha, token=False).sha == info.sha


def test_snapshot_download_with_allow_patterns(hub, tmp_path):
    commit = hub.add_repo("org/M", {"m-Q4_K_M.gguf": b"4" * 40, "m-Q8_0.gguf": b"8" * 80, "README.md": b"r\n"})
    folder = snapshot_download("org/M", allow_patterns=["*Q4_K_M*"], endpoint=hub.url, cache_dir=tmp_path,
                               token=False)
    assert folder.endswith(commit) and os.listdir(folder) == ["m-Q4_K_M.gguf"]
    # it resolves "main" with model_info, then lists the tree at that commit, then HEAD+GET per file
    assert [r.path for r in hub.requests[:2]] == ["/api/models/org/M/revision/main", f"/api/models/org/M/tree/{commit}"]
    out = Path(snapshot_download("org/M", local_dir=tmp_path / "all", endpoint=hub.url, token=False))
    assert sorted(p.name for p in out.iterdir()) == [".cache", "README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf"]


def test_a_drop_mid_file_is_resumed_with_range_inside_the_same_call(hub, tmp_path):
    data = weights(24 * MiB)
    hub.add_repo("org/M", {"m.gguf": data})
    hub.fault(drop_after=15 * MiB)
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(data)
    gets = [r for r in hub.requests if r.method == "GET"]
    # the client had written one whole 10 MiB piece when the connection broke: it resumes from there
    assert [(g.range, g.status) for g in gets] == [(None, 200), (f"bytes={CLIENT_CHUNK}-", 206)]


def test_a_drop_inside_the_first_10_mib_restarts_from_zero(hub, tmp_path):
    data = weights(12 * MiB)
    hub.add_repo("org/M", {"m.gguf": data})
    hub.fault(drop_after=3_000_000)
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(data)
    assert [r.range for r in hub.requests if r.method == "GET"] == [None, None]  # the partial piece was lost


def test_a_failed_call_keeps_no_partial_file_and_the_next_call_starts_over(hub, tmp_path):
    data = weights(24 * MiB)
    hub.add_repo("org/M", {"m.gguf": data})
    hub.fault(drop_after=15 * MiB)
    hub.fault(status=503, path="/_lfs/")  # the resume request then meets a dead upstream
    with pytest.raises(HfHubHTTPError) as err:
        get(hub, "org/M", "m.gguf", cache_dir=tmp_path)
    assert err.value.response.status_code == 503
    assert not list(tmp_path.rglob("*.incomplete"))  # 2.4.0 deletes its per-process temp file on failure
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(data)
    assert [r.range for r in hub.requests if r.method == "GET"] == [None, f"bytes={CLIENT_CHUNK}-", None]


def test_a_killed_client_leaves_an_orphan_incomplete_file_that_the_next_call_ignores(hub, tmp_path, hf_home):
    data = weights(12 * MiB)
    hub.add_repo("org/M", {"m.gguf": data})
    hub.throttle(bytes_per_s=2 * MiB)
    # HF_ENDPOINT, not endpoint=: the library reads it once, at import, so only a fresh process can take it
    code = "import sys; from huggingface_hub import hf_hub_download as d; d('org/M', 'm.gguf', cache_dir=sys.argv[1])"
    env = dict(os.environ, HF_HOME=str(hf_home), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_PROGRESS_BARS="1")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 20
        while not any(r.path.startswith("/_lfs/") for r in hub.requests) or not list(tmp_path.rglob("*.incomplete")):
            assert time.monotonic() < deadline and child.poll() is None, "the child never started its download"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    orphans = list(tmp_path.rglob("*.incomplete"))
    assert [o.parent.name for o in orphans] == ["blobs"] and orphans[0].name.startswith(sha(data) + ".")
    hub.throttle(None)
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(data)
    assert [r.range for r in hub.requests if r.method == "GET"] == [None, None]  # no resume across calls
    assert list(tmp_path.rglob("*.incomplete")) == orphans  # and nobody cleans the orphan up


def test_gated_repo_needs_the_right_token(hub, tmp_path):
    hub.add_repo("org/Gated", {"m.gguf": b"secret" * 10}, token="hf_right")
    with pytest.raises(GatedRepoError) as no_token:
        get(hub, "org/Gated", "m.gguf", cache_dir=tmp_path)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as wrong:
        get(hub, "org/Gated", "m.gguf", cache_dir=tmp_path, token="hf_wrong")
    assert wrong.value.response.status_code == 403 and "authorized list" in str(wrong.value)
    with pytest.raises(HfHubHTTPError) as bogus:  # not a token at all: a 401 that is no RepositoryNotFoundError
        get(hub, "org/Gated", "m.gguf", cache_dir=tmp_path, token="garbage")
    assert bogus.value.response.status_code == 401 and not isinstance(bogus.value, RepositoryNotFoundError)
    assert Path(get(hub, "org/Gated", "m.gguf", cache_dir=tmp_path, token="hf_right")).read_bytes() == b"secret" * 10
    info = HfApi(endpoint=hub.url).model_info("org/Gated", token=False)  # the metadata is public
    assert info.gated == "manual" and info.private is False


def test_unknown_repo_revision_and_file_raise_the_clients_errors(hub, tmp_path):
    commit = hub.add_repo("org/M", {"a.gguf": b"a"})
    hub.add_repo("org/Private", {"a.gguf": b"a"}, token="hf_owner", private=True)
    for repo, token, status in [("org/Nope", False, 401), ("org/Nope", "hf_someone", 404),
                                ("org/Private", False, 401), ("org/Private", "hf_someone", 404)]:
        with pytest.raises(RepositoryNotFoundError) as err:
            get(hub, repo, "a.gguf", cache_dir=tmp_path, token=token)
        assert type(err.value) is RepositoryNotFoundError and err.value.response.status_code == status
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url).model_info("org/Nope", token=False)
    with pytest.raises(RevisionNotFoundError):
        get(hub, "org/M", "a.gguf", cache_dir=tmp_path, revision="b" * 40)
    with pytest.raises(RevisionNotFoundError):
        HfApi(endpoint=hub.url).model_info("org/M", revision="v9", token=False)
    with pytest.raises(RemoteEntryNotFoundError):
        get(hub, "org/M", "missing.gguf", cache_dir=tmp_path)
    assert (tmp_path / "models--org--M" / ".no_exist" / commit / "missing.gguf").exists()  # from X-Repo-Commit


def test_a_503_surfaces_as_an_http_error_and_a_single_one_on_the_head_is_retried(hub, tmp_path):
    hub.add_repo("org/M", {"a.gguf": b"a" * 100})
    hub.fault(status=503, path="/api/")
    with pytest.raises(HfHubHTTPError) as err:  # model_info does not retry
        HfApi(endpoint=hub.url).model_info("org/M", token=False)
    assert err.value.response.status_code == 503
    hub.fault(status=503, path="/_lfs/")
    with pytest.raises(HfHubHTTPError) as err:  # the file GET retries only 408/429
        get(hub, "org/M", "a.gguf", cache_dir=tmp_path)
    assert err.value.response.status_code == 503
    hub.fault(status=503, path="/org/M/resolve/")
    n = len(hub.requests)
    assert Path(get(hub, "org/M", "a.gguf", cache_dir=tmp_path)).read_bytes() == b"a" * 100  # retried at once
    assert [(r.method, r.status) for r in hub.requests[n:]] == [("HEAD", 503), ("HEAD", 302), ("GET", 200)]


def test_hf_xet_installed_but_no_xet_headers_means_plain_http(hub, tmp_path, monkeypatch):
    assert file_download.is_xet_available()  # hf_xet is in the venv, not disabled: the client uses it when told to

    def no_xet(**kw):
        raise AssertionError("xet_get called")

    monkeypatch.setattr(file_download, "xet_get", no_xet)
    hub.add_repo("org/M", {"m.gguf": weights(MiB)})
    assert file_sha(get(hub, "org/M", "m.gguf", cache_dir=tmp_path)) == sha(weights(MiB))
    assert not any("xet" in r.path for r in hub.requests)


def test_tqdm_class_gets_the_progress_in_10_mib_steps(hub, tmp_path):
    seen: list[tuple[int | None, int]] = []

    class Recorder(tqdm):
        def update(self, n=1):
            seen.append((self.total, n))
            return super().update(n)

    hub.add_repo("org/M", {"m.gguf": weights(24 * MiB)})
    get(hub, "org/M", "m.gguf", cache_dir=tmp_path, tqdm_class=Recorder)
    assert seen == [(24 * MiB, CLIENT_CHUNK), (24 * MiB, CLIENT_CHUNK), (24 * MiB, 4 * MiB)]


def test_ranges_and_signed_cdn_urls(hub):
    hub.add_repo("org/M", {"m.gguf": bytes(range(256)) * 4})
    head = httpx2.head(f"{hub.url}/org/M/resolve/main/m.gguf")
    assert head.status_code == 302 and head.headers["X-Linked-Size"] == "1024"
    assert head.headers["X-Linked-Etag"] == f'"{sha(bytes(range(256)) * 4)}"'
    cdn = head.headers["Location"]
    part = httpx2.get(cdn, headers={"Range": "bytes=1020-"})
    assert (part.status_code, part.content, part.headers["Content-Range"]) == (206, bytes([252, 253, 254, 255]),
                                                                               "bytes 1020-1023/1024")
    assert httpx2.get(cdn, headers={"Range": "bytes=2-3"}).content == bytes([2, 3])
    assert httpx2.get(cdn, headers={"Range": "bytes=-2"}).content == bytes([254, 255])
    assert httpx2.get(cdn, headers={"Range": "bytes=1024-"}).status_code == 416
    assert httpx2.get(cdn.split("?")[0]).status_code == 403  # unsigned


def test_standalone_serves_a_folder(tmp_path):
    (tmp_path / "srv" / "org" / "Demo" / "sub").mkdir(parents=True)
    (tmp_path / "srv" / "org" / "Demo" / "sub" / "w.gguf").write_bytes(b"w" * 50)
    child = subprocess.Popen([sys.executable, str(HERE / "hub_standin.py"), str(tmp_path / "srv")],
                             stdout=subprocess.PIPE, text=True)
    try:
        lines = [child.stdout.readline(), child.stdout.readline()]
        assert lines[0].startswith("org/Demo @ ") and "1 files" in lines[0]
        url = lines[1].split("HF_ENDPOINT=")[1].split()[0]
        path = hf_hub_download("org/Demo", "sub/w.gguf", endpoint=url, cache_dir=tmp_path / "c", token=False)
        assert Path(path).read_bytes() == b"w" * 50
    finally:
        child.terminate()
        child.wait()
