"""`flashdesk app`: what a double-click starts. Serve on this machine, open the browser, log to a file.

For people who never open a terminal: it picks the port itself (8080 when free, else any
free one, bound before anything else so nothing can take it in between), says in the log
and on the console which hardware llama.cpp will use and why (never a silent CPU
fallback), fetches the default model on the very first run if it is not there yet, opens
the chat page as soon as the server accepts connections (the page shows "loading" until
the model is ready), keeps a small window (server/desktop/window.py) with the address, the
hardware and Quit, and stops cleanly from there, on Ctrl+C, SIGTERM or when the console
closes. A second start for the same home opens the running one's page instead.

Not the installer (installers/, issue 8) and not `flashdesk serve`, which is for people who
choose their own address, port and key.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
import webbrowser
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from engine.models.catalog import CATALOG, DEFAULT_MODEL
from engine.errors import ModelNotFound
from engine.models.store import ModelStore
from engine.models.pull import pull

from ..settings import Settings

log = logging.getLogger("flashdesk.app")

PREFERRED_PORT = 8080
LOG_BYTES, LOG_FILES = 5 << 20, 3  # <home>/logs/flashdesk.log, rotated: at most 20 MB of logs
INSTANCE_FILE = "app.json"  # where the running app of a home says its address


def log_to_file(home: Path) -> Path:
    """Everything flashdesk logs at INFO and above goes to <home>/logs/flashdesk.log too."""
    path = home / "logs" / "flashdesk.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=LOG_FILES, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in root.handlers:  # the console keeps its level (warnings); the file gets INFO too
        if h.level == logging.NOTSET:
            h.setLevel(root.level or logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return path


def bind_loopback(port: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1: `port` if given, else 8080 when free, else any free port."""
    for p in ([port] if port is not None else [PREFERRED_PORT, 0]):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            s.close()
            if port is not None:
                raise
            continue
        s.listen(128)
        return s
    raise OSError("no free port on 127.0.0.1")


def say(text: str) -> None:
    """To the console (a person may be watching) and to the log file (whoever helps them later)."""
    print(text, flush=True)
    log.info("%s", text)


def bundled_model(name: str) -> Path | None:
    """The catalog model's GGUF inside an installed bundle (installers/flashdesk.spec puts it
    in models/), or None when running from source or from a bundle built without it."""
    base = getattr(sys, "_MEIPASS", None)
    path = Path(base) / "models" / CATALOG[name].filename if base and name in CATALOG else None
    return path if path is not None and path.is_file() else None


def ensure_model(store: ModelStore, name: str) -> None:
    try:
        store.resolve(name)
    except ModelNotFound:
        if name != DEFAULT_MODEL:
            raise
        shipped = bundled_model(name)
        if shipped is not None:
            say(f"First run: installing the default model ({DEFAULT_MODEL}) from this package.")
            store.install_bundled(name, shipped)
        else:
            say(f"First run: fetching the default model ({DEFAULT_MODEL}); this happens once.")
            pull(store, DEFAULT_MODEL)


def open_when_listening(server, url: str) -> None:
    """Open the browser once uvicorn accepts connections (it shows the loading page meanwhile)."""
    def wait_then_open():
        deadline = time.time() + 60
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        if server.started and not webbrowser.open(url):
            say(f"Open {url} in your browser.")

    threading.Thread(target=wait_then_open, name="flashdesk-browser", daemon=True).start()


def running_instance(home: Path) -> str | None:
    """The address of a flashdesk app already serving this home (a second double-click), or None.
    <home>/app.json names it; a stale file (after a crash) names a port where no flashdesk of
    this home answers, and is ignored."""
    try:
        url = json.loads((home / INSTANCE_FILE).read_text("utf-8"))["url"]
        if not url.startswith("http://127.0.0.1:"):  # only ever a loopback address this app wrote
            return None
        with urllib.request.urlopen(f"{url}v1/system", timeout=2) as r:  # an error status raises (OSError)
            return url if Path(json.loads(r.read()).get("home", "")) == home else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def run(home: str | None = None, port: int | None = None, model: str | None = None,
        open_browser: bool = True, window: bool = True) -> int:
    import uvicorn

    from engine.advisor.hardware import report

    from ..http import shutdown
    from ..http.app import create_app
    from . import window as app_window  # `window` is this function's flag

    given: dict[str, Any] = {k: v for k, v in {"home": home, "model": model}.items() if v is not None}
    settings = Settings(**given)  # the rest from the environment and Settings' defaults
    store = ModelStore(settings.home)
    log_path = log_to_file(store.home)
    other = running_instance(store.home)
    if other is not None:  # one flashdesk per home: show the one that runs
        say(f"flashdesk is already running at {other}; opening it.")
        if open_browser:
            webbrowser.open(other)
        return 0
    hw = report(settings.threads)
    say(f"flashdesk {_version()}: {hw['summary']}")
    build = hw["llama_build"]
    log.info("hardware: backend=%s reason=%s devices=%s llama.cpp build=%s (%s) from %s", hw["backend"], hw["reason"],
             [d["description"] or d["name"] for d in hw["devices"]], build["name"], build["reason"], build["folder"])
    ensure_model(store, settings.model)
    sock = bind_loopback(port)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    settings = settings.model_copy(update={"port": sock.getsockname()[1]})
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    no_window = "turned off" if not window else app_window.unavailable()
    say(f"flashdesk is running at {url}  (logs: {log_path}; "
        f"{'quit from its window' if no_window is None else 'press Ctrl+C or close this window'} to stop)")
    if no_window is not None:
        log.info("no window (%s): the console stops flashdesk", no_window)
    if open_browser:
        open_when_listening(server, url)

    def stop(*_) -> None:  # ends open answers after their step under way, closes the model and the databases
        if not server.should_exit:
            shutdown.begin(app)
        server.force_exit = server.should_exit  # a second Ctrl+C: do not wait for open connections
        server.should_exit = True

    # The server runs in a thread, where uvicorn installs no signal handlers (it would re-raise
    # the signal into its event loop after shutting down, tearing the loop down noisily); this
    # thread turns Ctrl+C and SIGTERM into a graceful stop and waits for it.
    # SIGINT too, explicitly: a program started in the background (a desktop launcher, a CI
    # job) inherits SIGINT as ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    worker = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="flashdesk-server")
    worker.start()
    _stop_on_console_close(stop, worker)
    instance = store.home / INSTANCE_FILE
    instance.write_text(json.dumps({"url": url, "pid": os.getpid()}), "utf-8")
    try:
        if no_window is None:
            try:
                win = app_window.AppWindow(url, hw["summary"], log_path)
            except Exception as e:  # tkinter.TclError: a display that does not answer, a broken Tk
                say(f"No window ({e}): press Ctrl+C here to stop flashdesk.")
            else:
                app_window.hide_own_console()
                win.run(worker.is_alive, stop)
                if worker.is_alive():  # the window went away some other way: it was the way to quit
                    stop()
        while worker.is_alive():
            worker.join(0.5)
    finally:
        instance.unlink(missing_ok=True)
    say("flashdesk stopped.")
    return 0


def _stop_on_console_close(stop, worker: threading.Thread) -> None:
    """Windows: closing the console window (or logging off) stops flashdesk cleanly. Windows ends
    the process as soon as a console handler returns, so this one waits for the server (Windows
    allows about 5 s). Python's own signal handling cannot: it returns at once."""
    if sys.platform != "win32":
        return
    import ctypes
    from ctypes import wintypes

    @ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)
    def on_event(event: int) -> bool:
        if event in (2, 5, 6):  # CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT
            stop()
            worker.join(4.5)
            return True
        return False  # Ctrl+C and Ctrl+Break: Python's handlers (SIGINT above)

    _stop_on_console_close.handler = on_event  # a ctypes callback must outlive this call
    ctypes.windll.kernel32.SetConsoleCtrlHandler(on_event, True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flashdesk")
    except PackageNotFoundError:
        return "(development)"


if __name__ == "__main__":  # the PyInstaller entry point runs this module
    sys.exit(run())
