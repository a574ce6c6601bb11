"""The app's small window (server/desktop/window.py) on a real X server (Xvfb), and the launcher
around it: a second start for the same home opens the first one's page instead of loading
the model twice."""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import time
import weakref

import pytest

from conftest import ROOT, linked_home, start_app
from server.desktop.window import AppWindow, language, strings, unavailable
from server.desktop.launcher import INSTANCE_FILE, running_instance


@pytest.fixture
def on_display(display, monkeypatch):
    monkeypatch.setenv("DISPLAY", display)
    return display


def test_no_display_means_no_window(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if sys.platform.startswith("linux"):
        assert unavailable() == "no display"


@pytest.mark.parametrize("env, lang", [({"LANG": "zh_TW.UTF-8"}, "zh-TW"), ({"LC_ALL": "zh_Hant_HK"}, "zh-TW"),
                                       ({"LANG": "de_DE.UTF-8"}, "en"), ({"LANG": "zh_CN.UTF-8"}, "en")])
def test_the_window_speaks_the_computers_language(monkeypatch, env, lang):
    for k in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert language() == lang
    assert strings(lang)["quit"] == {"en": "Quit flashdesk", "zh-TW": "結束 flashdesk"}[lang]


@pytest.mark.parametrize("how", ["quit_button", "close_window"])
def test_quit_stops_the_server_and_closes_the_window(on_display, tmp_path, how):
    assert unavailable() is None
    win = AppWindow("http://127.0.0.1:8080/", "Running on the CPU with 2 threads.", tmp_path / "flashdesk.log", "en")
    assert win.root.title() == "flashdesk" and win.address.cget("text") == "http://127.0.0.1:8080/"
    running, stopped = [True], []

    def stop():  # the server's stop: it ends a moment later
        stopped.append(time.time())
        win.root.after(300, lambda: running.__setitem__(0, False))

    if how == "quit_button":
        win.root.after(100, win.quit_button.invoke)
    else:  # the window manager's close button
        win.root.after(100, lambda: win.root.tk.call(win.root.protocol("WM_DELETE_WINDOW")))
    seen = {}
    win.root.after(250, lambda: seen.update(heading=win.heading.cget("text"), quit=str(win.quit_button.state())))
    t0 = time.time()
    win.run(lambda: running[0], stop)
    assert len(stopped) == 1 and time.time() - t0 < 10
    assert seen == {"heading": "flashdesk is stopping…", "quit": "('disabled',)"}


def test_the_window_closes_when_the_server_stops_by_itself(on_display, tmp_path):
    win = AppWindow("http://127.0.0.1:8080/", "x", tmp_path / "f.log", "zh-TW")
    assert win.quit_button.cget("text") == "結束 flashdesk"
    running, stopped = [True], []
    win.root.after(200, lambda: running.__setitem__(0, False))  # Ctrl+C in the console, SIGTERM
    win.run(lambda: running[0], lambda: stopped.append(1))
    assert not stopped


def test_the_window_is_freed_on_its_own_thread(on_display, tmp_path):
    """Once closed and let go, the window and its Tcl interpreter are gone at once, on the thread
    that made them. Left to the cyclic garbage collector, they could be freed on the server's
    thread while it shuts down, and Tcl aborts the process (it did, in the test run of issue 16)."""
    gc.disable()
    try:
        win = AppWindow("http://127.0.0.1:8080/", "x", tmp_path / "f.log", "en")
        running = [True]
        win.root.after(100, lambda: running.__setitem__(0, False))
        win.run(lambda: running[0], lambda: None)
        root = weakref.ref(win.root)
        del win
        assert root() is None, "a reference cycle keeps the Tk window for the garbage collector"
    finally:
        gc.enable()


def test_the_app_keeps_a_window_and_a_second_start_opens_the_first(on_display, tmp_path, store):
    home = linked_home(tmp_path / "home", store)
    proc, url, lines = start_app([sys.executable, "-m", "server.cli", "--home", str(home), "app", "--no-browser",
                                  "--port", "0"], env={"DISPLAY": on_display})
    try:
        assert "quit from its window" in lines[-1]  # the window showed (else: "No window (...)")
        assert json.loads((home / INSTANCE_FILE).read_text())["url"] == url
        assert running_instance(home) == url
        assert running_instance(tmp_path / "elsewhere") is None

        second = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(home), "app", "--no-browser",
                                 "--no-window"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert f"flashdesk is already running at {url}; opening it." in second.stdout
        assert "Running on the CPU" not in second.stdout  # it loaded nothing

        proc.send_signal(signal.SIGTERM)  # the window closes with the server
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "flashdesk stopped." in out and "Traceback" not in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (home / INSTANCE_FILE).exists()


def test_a_stale_instance_file_is_ignored(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / INSTANCE_FILE).write_text(json.dumps({"url": "http://127.0.0.1:9/", "pid": 1}))  # nothing serves there
    assert running_instance(home) is None
    (home / INSTANCE_FILE).write_text("{not json")
    assert running_instance(home) is None
