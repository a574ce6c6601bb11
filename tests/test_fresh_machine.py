"""The suite passes on a fresh machine (issue 16): it reads nothing beside the repository, and
none of the caller's own flashdesk settings (tests/conftest.py drops every FLASHDESK_* but the
harness's FLASHDESK_TEST_* before anything loads)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT

# A path into a folder next to the checkout: what a fresh clone does not have.
BESIDE = re.compile(r"""\.\./shared|["']shared["']\s*/|/\s*["']shared["']|shared/eval""")


def test_nothing_reads_beside_the_repository():
    files = [p for d in ("tests", "bench", "scripts", ".ci") for p in (ROOT / d).rglob("*")
             if p.is_file() and p.suffix in ("", ".py", ".sh") and p != ROOT / "tests" / "test_fresh_machine.py"]
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files
            for i, line in enumerate(p.read_text("utf-8", errors="replace").splitlines(), 1) if BESIDE.search(line)]
    assert not hits, "\n".join(hits)


def test_the_callers_flashdesk_settings_change_nothing(tmp_path):
    """A user who set FLASHDESK_HOME (and friends) in their shell runs the suite: these tests, which
    look at homes, settings and the llama.cpp build choice, pass as they do without them."""
    theirs = tmp_path / "the-users-home"
    env = {**os.environ, "FLASHDESK_HOME": str(theirs), "FLASHDESK_MODEL": "their-own-model",
           "FLASHDESK_CTX": "8192", "FLASHDESK_SPECULATIVE": "off", "FLASHDESK_API_KEY": "their-secret",
           "FLASHDESK_LLAMA_BUILD": "cuda", "FLASHDESK_PORT": "9"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/server/test_app_and_doctor.py::test_doctor_reports_and_bundles_without_private_content",
                        "tests/server/test_app_and_doctor.py::test_doctor_command_prints_plain_words",
                        "tests/engine/models/test_store.py", "tests/engine/test_llama_build.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert not theirs.exists()  # nothing was written to the user's own home
