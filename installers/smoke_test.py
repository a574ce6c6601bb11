"""Smoke-test a built flashdesk program: start it headless on loopback in an empty home,
wait for /health, one chat completion through the `openai` client, then a clean stop.

    python installers/smoke_test.py dist/flashdesk/flashdesk

The same steps on every OS (the CI matrix runs it after each build). Exit status 0 when
all passed; the program's own output is printed on failure.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def main(program: str) -> int:
    with tempfile.TemporaryDirectory(prefix="flashdesk-smoke-") as home:
        proc = subprocess.Popen([program, "--home", home, "--no-browser", "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
            import openai

            client = openai.OpenAI(base_url=f"{url}v1", api_key="unused", max_retries=0, timeout=120)
            answer = client.chat.completions.create(model="smollm2", max_tokens=8, temperature=0,
                                                    messages=[{"role": "user", "content": "Say hello."}])
            assert answer.choices[0].message.content, "an empty answer"
            proc.send_signal(signal.SIGINT if sys.platform != "win32" else signal.CTRL_C_EVENT)
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
    sys.exit(main(sys.argv[1]))
