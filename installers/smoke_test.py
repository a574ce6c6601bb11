"""Smoke-test a built flashdesk program: start it headless on loopback in an empty home,
wait for /health, check that it is whole (the page, the built-in work-order templates, the
default model's shipped DFlash draft paired), one chat completion through the `openai`
client, then a clean stop.

    python installers/smoke_test.py dist/flashdesk/flashdesk
    python installers/smoke_test.py venv/bin/flashdesk --home DIR --no-window   # a pip-installed one

The same steps on every OS (the CI matrix runs it after each build). `--home` uses a home
that already holds the model (a pip install has none to install offline); other arguments go
to the program. Exit status 0 when all passed; the program's own output is printed on failure.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


# A console Ctrl+C cannot be aimed at one process on Windows: CTRL_C_EVENT with a process id
# (what send_signal(CTRL_C_EVENT) does) is not delivered to a child started without
# CREATE_NEW_PROCESS_GROUP (that id names no process group), and a child started with that flag
# has Ctrl+C disabled. So the program gets its own console, and a short-lived helper attaches to
# that console and sends Ctrl+C to everything in it (the program; the helper ignores it), the
# same event a person pressing Ctrl+C in the program's window sends.
_CTRL_C_HELPER = """
import ctypes, sys
k = ctypes.WinDLL("kernel32", use_last_error=True)
k.FreeConsole()
if not k.AttachConsole(int(sys.argv[1])):
    sys.exit(f"AttachConsole failed: {ctypes.get_last_error()}")
k.SetConsoleCtrlHandler(None, True)
sys.exit(0 if k.GenerateConsoleCtrlEvent(0, 0) else f"GenerateConsoleCtrlEvent failed: {ctypes.get_last_error()}")
"""


def _hidden():
    si = subprocess.STARTUPINFO()
    si.dwFlags |= subprocess.STARTF_USESHOWWINDOW
    si.wShowWindow = 0  # SW_HIDE
    return si


def ctrl_c(proc: subprocess.Popen) -> None:
    if sys.platform != "win32":
        proc.send_signal(signal.SIGINT)
        return
    subprocess.run([sys.executable, "-c", _CTRL_C_HELPER, str(proc.pid)], check=True, timeout=30,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def main(program: str, home: str | None = None, app_args: list[str] = ()) -> int:
    with tempfile.TemporaryDirectory(prefix="flashdesk-smoke-") as empty:
        home = home or empty
        # Windows: its own (hidden) console, so that a Ctrl+C can reach it alone (see ctrl_c).
        extra = ({"creationflags": subprocess.CREATE_NEW_CONSOLE, "startupinfo": _hidden()}
                 if sys.platform == "win32" else {})
        proc = subprocess.Popen([program, "--home", home, "--no-browser", "--port", "0", *app_args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **extra)
        lines: list[str] = []
        try:
            url = None
            deadline = time.time() + 300  # the first run installs the bundled model
            while url is None and time.time() < deadline:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("the program exited before serving")
                lines.append(line)
                m = re.search(r"running at (http://127\.0\.0\.1:\d+/)", line)
                url = m.group(1) if m else None
            while True:
                try:
                    with urllib.request.urlopen(f"{url}health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError("/health never said ready")
                time.sleep(0.5)
            with urllib.request.urlopen(url, timeout=5) as r:
                assert b"<title>flashdesk</title>" in r.read(), "the page is not served"
            templates = {t["name"] for t in get_json(f"{url}v1/workorders/templates")["data"]}
            assert {"work_order", "quote_request", "complaint"} <= templates, f"built-in templates: {templates}"
            health = get_json(f"{url}health")
            assert "dflash" in health["speculation"]["drafters"], f"no DFlash draft paired: {health}"
            import openai

            client = openai.OpenAI(base_url=f"{url}v1", api_key="unused", max_retries=0, timeout=120)
            answer = client.chat.completions.create(model="smollm2", max_tokens=8, temperature=0,
                                                    messages=[{"role": "user", "content": "Say hello."}])
            assert answer.choices[0].message.content, "an empty answer"
            ctrl_c(proc)
            rest, _ = proc.communicate(timeout=60)
            lines.append(rest)
            assert proc.returncode == 0, f"exit status {proc.returncode}"
            assert "Traceback" not in "".join(lines), "a traceback on the way out"
        except BaseException as e:
            if proc.poll() is None:
                proc.kill()
                lines.append(proc.communicate()[0] or "")
            print("".join(lines), file=sys.stderr)
            print(f"SMOKE TEST FAILED: {e}", file=sys.stderr)
            return 1
    print(f"smoke test passed: {program} served, answered {answer.choices[0].message.content!r} and stopped")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Smoke-test a built flashdesk program.")
    ap.add_argument("program")
    ap.add_argument("--home", help="a home that already holds the model (default: a new, empty one)")
    args, app_args = ap.parse_known_args()
    sys.exit(main(args.program, args.home, app_args))
