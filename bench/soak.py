"""Soak benchmark: does a real server stay up, small and loss-free under hours of mixed use?

Starts `flashdesk serve` (a subprocess, SmolLM2, a fresh home) and for --minutes runs --clients
concurrent clients (bench/soak_clients.py: streamed chats, work-order parses, conversation writes,
clients that hang up mid-stream, bad requests). Meanwhile it samples the server's RSS. Then it
asks the server what it stored, restarts it on the same home and asks again.

Reports (JSON to --out, a summary on stdout): the RSS curve and its growth after warm-up (the
first --warmup fraction of the run; target < 5 %), p50/p99 latency and counts per kind and status,
the 5xx count (target 0), lost records (work-order audit records, conversations and messages
the clients were told were stored and the server no longer has; target 0), and the speculation
stats from /health and /metrics. Exit status 1 on a 5xx, a broken answer (an error event in a
stream, no finish_reason, a body without its fields, a conversation read back otherwise than
written), a lost record or a dead server; the RSS growth is reported, not judged (a short run
has no meaningful warm-up).

    .venv/bin/python -m bench soak [--minutes 30] [--clients 6] [--out bench/out/soak]

Latencies on a shared 2-core machine are noisy: they say nothing about speed, only that
requests keep finishing. Not a CI test: tests/bench/test_soak.py runs a tiny one for its checks.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a file, as tests/bench/test_soak.py does: the suite's `soak`
    sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the repository, not bench/
    from bench.suite import main

    sys.exit(main(["soak", *sys.argv[1:]]))

import collections  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402

from bench import lib  # noqa: E402
from bench.harness import ServerProcess, linked_home, test_home  # noqa: E402
from bench.lib import Record  # noqa: E402
from bench.soak_clients import EXPECT, Client  # noqa: E402
from engine.models.store import ModelStore  # noqa: E402

RSS_TARGET_PCT = 5.0
# Statuses of answers that were wrong, not refused: as bad as a 5xx (soak_clients.py says what each means).
BROKEN = ("stream_error", "no_finish", "bad_body", "read_mismatch")


def rss_reader(pid: int):
    """(source, read() -> bytes): psutil where the venv has it, else /proc (Linux)."""
    try:
        import psutil
        proc = psutil.Process(pid)
        return "psutil", lambda: proc.memory_info().rss
    except ImportError:
        def read() -> int:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
            raise RuntimeError("no VmRSS line")
        return "proc", read


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every: float, t0: float):
        super().__init__(name="soak-rss", daemon=True)
        self.source, self.read = rss_reader(pid)
        self.every, self.t0, self.curve, self.stop_event = every, t0, [], threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.curve.append([round(time.time() - self.t0, 1), round(self.read() / 2**20, 2)])  # [t s, MiB]
            except Exception:  # the process is gone: the report says so (server_alive)
                return
            self.stop_event.wait(self.every)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank: a value that was measured, never an interpolation between two."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def rss_report(curve: list, warm_t: float) -> dict:
    after = [mb for t, mb in curve if t >= warm_t] or [mb for _, mb in curve[-1:]]
    if not curve:
        return {"curve": []}
    start, warm, end = curve[0][1], after[0], curve[-1][1]
    pts = [(t, mb) for t, mb in curve if t >= warm_t]
    slope = None
    if len(pts) >= 2:  # least squares over the samples after warm-up, in MiB per hour
        mt, mm = sum(t for t, _ in pts) / len(pts), sum(m for _, m in pts) / len(pts)
        den = sum((t - mt) ** 2 for t, _ in pts)
        slope = round(sum((t - mt) * (m - mm) for t, m in pts) / den * 3600, 2) if den else None
    growth = round((end - warm) / warm * 100.0, 2)
    return {"start_mb": start, "warm_mb": warm, "end_mb": end, "max_mb": max(mb for _, mb in curve),
            "warmup_s": round(warm_t, 1), "growth_after_warmup_pct": growth, "slope_mb_per_hour": slope,
            "target_pct": RSS_TARGET_PCT, "within_target": growth < RSS_TARGET_PCT, "curve": curve}


def request_report(records: list[dict]) -> dict:
    kinds: dict[str, list] = collections.defaultdict(list)
    for r in records:
        kinds[r["kind"]].append(r)
    per_kind = {}
    for kind, rs in sorted(kinds.items()):
        ms = [r["ms"] for r in rs]
        per_kind[kind] = {"count": len(rs), "statuses": dict(collections.Counter(str(r["status"]) for r in rs)),
                          "p50_ms": percentile(ms, 0.50), "p99_ms": percentile(ms, 0.99)}
    unexpected = [r for r in records if r["status"] != EXPECT[r["kind"]]]
    return {"total": len(records), "per_kind": per_kind,
            "per_status": dict(collections.Counter(str(r["status"]) for r in records)),
            "errors_5xx": sum(isinstance(r["status"], int) and r["status"] >= 500 for r in records),
            "broken_answers": sum(r["status"] in BROKEN for r in records),
            "unexpected": len(unexpected), "unexpected_first": unexpected[:20],
            "log": sorted(records, key=lambda r: r["t"])}  # every request (t = when it ended): for a later look


def pages(http: httpx.Client, path: str, limit: int) -> list[dict]:
    out, offset = [], 0
    while True:
        body = http.get(path, params={"limit": limit, "offset": offset}).raise_for_status().json()
        out += body["data"]
        offset += limit
        if not body["data"] or not body.get("has_more", offset < body.get("total", 0)):
            return out


def stored(base: str, clients: list[Client]) -> dict:
    """Ask the server what it has, and compare with what the clients were told was stored."""
    with httpx.Client(base_url=base, timeout=120) as http:
        audit = {r["id"] for r in pages(http, "/v1/workorders", 1000)}
        convs = {c["id"] for c in pages(http, "/v1/conversations", 200)}
        acked_wo = [i for c in clients for i in c.acked.workorders]
        acked_conv = {cid: msgs for c in clients for cid, msgs in c.acked.conversations.items()}
        lost_msgs = 0
        for cid, msgs in acked_conv.items():
            r = http.get(f"/v1/conversations/{cid}")
            have = {m["id"] for m in r.json()["messages"]} if r.status_code == 200 else set()
            lost_msgs += sum(m["id"] not in have for m in msgs)
    return {"workorders": {"acked": len(acked_wo), "on_server": len(audit), "lost": len(set(acked_wo) - audit)},
            "conversations": {"acked": len(acked_conv), "on_server": len(convs), "lost": len(set(acked_conv) - convs)},
            "messages": {"acked": sum(len(m) for m in acked_conv.values()), "lost": lost_msgs}}


METRIC_LINE = re.compile(r'^(flashdesk_\w+)(?:\{(\w+)="([^"]*)"\})? (\S+)$')


def speculation(base: str) -> dict:
    health = httpx.get(f"{base}/health", timeout=30).json()
    totals: dict = collections.defaultdict(dict)
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        m = METRIC_LINE.match(line)
        if m:
            totals[m[1]][m[3] or ""] = float(m[4])
    per_mode = {}
    for mode, verifies in totals.get("flashdesk_spec_verifies_total", {}).items():
        drafted = totals["flashdesk_spec_drafted_tokens_total"].get(mode, 0)
        accepted = totals["flashdesk_spec_accepted_tokens_total"].get(mode, 0)
        per_mode[mode] = {"verifies": verifies, "drafted": drafted, "accepted": accepted,
                          "accept_rate": round(accepted / drafted, 3) if drafted else None,
                          "tau": round((accepted + verifies) / verifies, 3) if verifies else None}
    return {"health": health.get("speculation"), "engine": health.get("engine"), "per_mode": per_mode,
            "metrics": dict(totals)}


def soak(a, store: ModelStore, home: Path) -> dict:
    srv = ServerProcess(home)
    try:
        srv.wait_ready(timeout=600)
        t0 = time.time()
        sampler = RssSampler(srv.proc.pid, a.sample_every, t0)
        sampler.start()
        records: list[dict] = []
        deadline = t0 + a.minutes * 60
        clients = [Client(n, srv.base, deadline, t0, a.max_tokens, records, a.seed) for n in range(a.clients)]
        for c in clients:
            c.start()
        tick = t0
        while any(c.is_alive() for c in clients):  # a progress line a minute, for whoever tails the log
            time.sleep(1)
            if time.time() < tick + 60:
                continue
            tick = time.time()
            seen = collections.Counter(str(r["status"]) for r in list(records))
            rss = sampler.curve[-1][1] if sampler.curve else None
            print(f"t={time.time() - t0:.0f}s requests={sum(seen.values())} {dict(seen)} rss={rss} MiB", flush=True)
        for c in clients:
            c.join()
        duration = time.time() - t0
        sampler.stop_event.set()
        sampler.join()
        alive = srv.proc.poll() is None
        report = {"config": vars(a), "duration_s": round(duration, 1), "server_alive": alive,
                  "note": "latencies from a shared 2-core CPU (other jobs ran beside it): noisy, not a speed figure",
                  "rss": {"source": sampler.source, **rss_report(sampler.curve, a.warmup * duration)},
                  "requests": request_report(records)}
        if alive:
            report["records"] = {"before_restart": stored(srv.base, clients)}
            report["speculation"] = speculation(srv.base)
    finally:
        srv.stop()
    if report["server_alive"]:  # what a kill-free restart finds on disk: nothing acknowledged may be gone
        again = ServerProcess(home)
        try:
            again.wait_ready(timeout=600, measured=False)
            report["records"]["after_restart"] = stored(again.base, clients)
        except (RuntimeError, TimeoutError, httpx.HTTPError) as e:  # said, not hidden: the count before stands
            report["restart_error"] = str(e)[-2000:]
        finally:
            again.stop()
    return report


def lost(report: dict) -> int:
    passes = (report.get("records") or {}).values()
    return max((sum(p[k]["lost"] for k in ("workorders", "conversations", "messages")) for p in passes), default=0)


def summary(r: dict) -> str:
    rss, req = r["rss"], r["requests"]
    lines = [f"soak: {r['duration_s'] / 60:.1f} min, {r['config']['clients']} clients, "
             f"{req['total']} requests, server alive: {r['server_alive']}"]
    if "start_mb" in rss:
        lines.append(f"RSS ({rss['source']}): start {rss['start_mb']:.1f} MiB, after warm-up ({rss['warmup_s']:.0f} s) "
                     f"{rss['warm_mb']:.1f}, end {rss['end_mb']:.1f}, max {rss['max_mb']:.1f}; growth after warm-up "
                     f"{rss['growth_after_warmup_pct']:+.2f} % (target < {RSS_TARGET_PCT:.0f} %), "
                     f"slope {rss['slope_mb_per_hour']} MiB/h")
    lines.append(f"{'kind':<14}{'count':>7}{'p50 ms':>10}{'p99 ms':>10}  statuses")
    for kind, k in req["per_kind"].items():
        fmt = lambda v: f"{v:>10.0f}" if v is not None else f"{'-':>10}"  # noqa: E731
        lines.append(f"{kind:<14}{k['count']:>7}{fmt(k['p50_ms'])}{fmt(k['p99_ms'])}  {k['statuses']}")
    lines.append(f"per status: {req['per_status']}; 5xx: {req['errors_5xx']}; broken answers: {req['broken_answers']}; "
                 f"unexpected statuses: {req['unexpected']}")
    for when, p in (r.get("records") or {}).items():
        lines.append(f"records {when}: " + "; ".join(f"{k} acked {v['acked']} lost {v['lost']}" for k, v in p.items()))
    for mode, s in ((r.get("speculation") or {}).get("per_mode") or {}).items():
        lines.append(f"speculation {mode}: {s['verifies']:.0f} verifies, {s['drafted']:.0f} drafted, "
                     f"{s['accepted']:.0f} accepted (rate {s['accept_rate']}, tau {s['tau']})")
    if r.get("restart_error"):
        lines.append(f"the restart for the second count failed: {r['restart_error'][-300:]}")
    lines.append(f"lost records: {lost(r)}; {r['note']}")
    return "\n".join(lines)


def add_arguments(ap) -> None:
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=6, help="concurrent clients (4-8 for a real soak)")
    ap.add_argument("--max-tokens", type=int, default=32, help="a chat's answer cap; parses get 4x")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the run before the RSS baseline")
    ap.add_argument("--seed", type=int, default=0)


def run(a) -> Record:
    path = lib.test_model("smollm2").path
    store = ModelStore(test_home())
    with tempfile.TemporaryDirectory(prefix="flashdesk-soak-") as tmp:
        home = linked_home(Path(tmp) / "home", store)
        try:
            report = soak(a, store, home)
        finally:  # the servers' logs outlive the temporary home: a 500's traceback is in there
            logs = sorted(home.glob("server-*.log"), key=lambda f: f.stat().st_mtime)
            log = lib.out_base(a.out).with_name(lib.out_base(a.out).name + ".server.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(
                "".join(f"== {f.name}\n{f.read_text('utf-8', errors='replace')}" for f in logs), "utf-8")
    report["lost_records"] = lost(report)
    ok = (report["server_alive"] and report["lost_records"] == 0 and report["requests"]["errors_5xx"] == 0
          and report["requests"]["broken_answers"] == 0)
    print(summary(report))
    print("OK" if ok else "FAILED")
    return Record("soak", {"minutes": a.minutes, "clients": a.clients, "max_tokens": a.max_tokens,
                           "sample_every": a.sample_every, "warmup": a.warmup, "seed": a.seed, "threads": 2},
                  medians={f"p50_ms {k}": v["p50_ms"] for k, v in report["requests"]["per_kind"].items()},
                  figures=report, ok=bool(ok), model={"path": path})
