"""One child process killed with SIGKILL at a moment it chooses to say: the durability tests'
shared harness (a store must lose nothing it reported committed, leave nothing half-installed)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from conftest import ROOT


def kill_9_when(argv: list[str], ready, timeout: float, **popen) -> list[str]:
    """Run `argv` (cwd: the repository), read its stdout lines until `ready(lines)` holds, SIGKILL
    it there, and return every line it printed (those after the kill too). A child that ends
    first fails the test with what it wrote; one that hangs is killed after `timeout` s."""
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             encoding="utf-8", **popen)
    guard = threading.Timer(timeout, child.kill)  # a stuck child must not hang the suite
    guard.start()
    try:
        lines: list[str] = []
        while not (lines and ready(lines)) and (line := child.stdout.readline()):
            lines.append(line.rstrip("\n"))
        if not (lines and ready(lines)):
            child.wait(timeout=60)
            pytest.fail(f"the child ended first: {lines[-5:]}\n{child.stderr.read()[-3000:]}")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        lines += child.stdout.read().splitlines()  # printed before the kill
    finally:
        guard.cancel()
        child.kill()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return lines
