"""bench/soak.py, tiny: two clients for 18 seconds against a real `flashdesk serve` with SmolLM2.

Checks what the soak is for (correctness, never speed: no timing thresholds): the report has
its parts, no request got a 5xx or a broken stream, and every work-order record, conversation
and message the clients were told was stored is still there, before and after a restart.

References: bench/soak.py (the report's fields), issue 23 part 3.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.harness import ROOT


@pytest.mark.timeout(1200)  # two server starts, a verify-cost measurement, parses: 5.5 min on a shared 2-core CPU
def test_soak_smoke(store, tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "0.3", "--clients", "2",
                          "--sample-every", "1", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1150)
    assert out.is_file(), run.stdout + run.stderr
    r = json.loads(out.read_text("utf-8"))
    log = run.stdout[-3000:] + run.stderr[-3000:]

    assert r["server_alive"], log
    req = r["requests"]
    assert req["total"] > 0 and sum(k["count"] for k in req["per_kind"].values()) == req["total"]
    assert sum(req["per_status"].values()) == req["total"]
    for k in req["per_kind"].values():
        assert set(k) == {"count", "statuses", "p50_ms", "p99_ms"} and k["p50_ms"] <= k["p99_ms"]
    assert req["errors_5xx"] == 0 and req["broken_answers"] == 0, req["unexpected_first"]

    rss = r["rss"]
    assert rss["source"] in ("psutil", "proc") and len(rss["curve"]) >= 2
    assert rss["start_mb"] > 0 and "growth_after_warmup_pct" in rss  # measured, not judged: too short a run

    assert set(r["records"]) == {"before_restart", "after_restart"}
    for when in r["records"].values():
        assert set(when) == {"workorders", "conversations", "messages"}
        for kind in when.values():
            assert kind["lost"] == 0, r["records"]
    first = r["records"]["before_restart"]  # every client's first request writes a conversation (soak_clients.py)
    assert first["conversations"]["acked"] >= 1 and first["messages"]["acked"] >= 2
    assert r["lost_records"] == 0

    spec = r["speculation"]
    assert spec["health"] and "enabled" in spec["health"] and "flashdesk_requests_total" in spec["metrics"]
    assert r["ok"] and run.returncode == 0, log
