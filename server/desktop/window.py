"""The small window a double-clicked flashdesk keeps open while it serves: that it runs and
where, what it runs on, a button to open the page again, and Quit (closing the window
quits too). Without it a person who closed the browser tab has no sign that flashdesk
still holds the model in memory, and on macOS, where an app has no console, no way to stop it.

Tk, because it comes with Python on Windows and macOS (PyInstaller bundles it) and needs
nothing else. Where there is no display (a server, a CI job) or no Tk, the launcher stays
in its console and says why. The words follow the computer's language: the UI's own
strings (ui/i18n/<lang>.json, section "app_window").
"""

from __future__ import annotations

import json
import locale
import os
import sys
import webbrowser
from pathlib import Path
from typing import Callable

from ..http.ui_files import UI_DIR

POLL_MS = 200  # how often Tk hands control back to Python: signals, and whether the server still runs


def unavailable() -> str | None:
    """Why no window can be shown here, or None when one can."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display"
    try:
        import tkinter  # noqa: F401
    except ImportError as e:
        return f"no Tk ({e})"
    return None


def language() -> str:
    """zh-TW where the computer speaks Traditional Chinese, else English (the UI's two languages)."""
    names = [os.environ.get(k, "") for k in ("LC_ALL", "LC_MESSAGES", "LANG")]
    if sys.platform == "win32":
        import ctypes

        names.append(locale.windows_locale.get(ctypes.windll.kernel32.GetUserDefaultUILanguage(), ""))
    elif sys.platform == "darwin":  # an app started from the Finder has no LANG: ask the system
        import subprocess

        try:
            names.append(subprocess.run(["defaults", "read", "-g", "AppleLocale"], capture_output=True,
                                        text=True, timeout=5).stdout.strip())  # e.g. zh-Hant_TW, zh_TW
        except (OSError, subprocess.SubprocessError):
            pass
    names.append(locale.getlocale()[0] or "")
    name = next((n for n in names if n), "").replace("-", "_").lower()
    return "zh-TW" if name.startswith(("zh_tw", "zh_hk", "zh_mo", "zh_hant", "chinese (traditional)")) else "en"


def strings(lang: str) -> dict[str, str]:
    words = json.loads((UI_DIR / "i18n" / "en.json").read_text("utf-8"))["app_window"]
    if lang != "en":
        words |= json.loads((UI_DIR / "i18n" / f"{lang}.json").read_text("utf-8")).get("app_window", {})
    return words


class AppWindow:
    """Built on the main thread (Tk, and macOS, insist), then `run` until Quit or the server ends."""

    def __init__(self, url: str, summary: str, log_path: Path, lang: str | None = None):
        import tkinter as tk
        from tkinter import font, ttk

        self.url, self.quit_requested = url, False
        self.words = w = strings(lang or language())
        self.root = root = tk.Tk(className="flashdesk")
        root.title(w["title"])
        root.resizable(False, False)
        frame = ttk.Frame(root, padding=18)
        frame.grid(sticky="nsew")
        bold = font.nametofont("TkDefaultFont").copy()
        bold.configure(weight="bold", size=bold.cget("size") + 3)
        self.heading = ttk.Label(frame, text=w["running"], font=bold)
        self.heading.grid(row=0, column=0, columnspan=2, sticky="w")
        self.address = ttk.Label(frame, text=url, foreground="#1a56db")
        self.address.grid(row=1, column=0, columnspan=2, sticky="w", pady=(2, 10))
        ttk.Label(frame, text=summary, wraplength=380, justify="left").grid(row=2, column=0, columnspan=2, sticky="w")
        ttk.Label(frame, text=w["keep_open"], wraplength=380, justify="left", foreground="#555").grid(
            row=3, column=0, columnspan=2, sticky="w", pady=(10, 2))
        ttk.Label(frame, text=w["logs"].format(path=log_path), wraplength=380, justify="left", foreground="#555").grid(
            row=4, column=0, columnspan=2, sticky="w", pady=(0, 14))
        self.open_button = ttk.Button(frame, text=w["open"], command=self.open_page)
        self.open_button.grid(row=5, column=0, sticky="w")
        self.quit_button = ttk.Button(frame, text=w["quit"], command=self.quit)
        self.quit_button.grid(row=5, column=1, sticky="e")
        self.open_button.focus_set()
        root.protocol("WM_DELETE_WINDOW", self.quit)  # the window's close button
        if sys.platform == "darwin":  # the app menu's and the Dock's Quit, and a click on the Dock icon
            root.createcommand("tk::mac::Quit", self.quit)
            root.createcommand("tk::mac::ReopenApplication", self.open_page)

    def open_page(self) -> None:
        webbrowser.open(self.url)

    def quit(self) -> None:
        self.quit_requested = True

    def run(self, server_running: Callable[[], bool], stop: Callable[[], None]) -> None:
        """Until Quit (then `stop()` and wait for the server) or until the server ends by itself
        (Ctrl+C in the console, SIGTERM). Polls so Python's signal handlers get to run.

        Leaves no reference cycle behind (a method polls, not a closure that names itself): the
        window and its Tcl interpreter are freed when the caller lets go of them, on this thread.
        Left to the cyclic garbage collector, they could be freed on the server's thread while it
        shuts down, and Tcl aborts the whole process ("async handler deleted by the wrong thread")."""
        self._running: Callable[[], bool] | None = server_running  # None again once run() returns
        self._stop: Callable[[], None] | None = stop
        self._stopping = False
        self.root.after(POLL_MS, self._poll)
        try:
            self.root.mainloop()
        finally:
            self._running = self._stop = None

    def _poll(self) -> None:
        assert self._running is not None and self._stop is not None  # polled only while run() runs
        if self.quit_requested and not self._stopping:
            self._stopping = True
            self.heading.configure(text=self.words["stopping"])
            self.open_button.state(["disabled"])
            self.quit_button.state(["disabled"])
            self._stop()
        if not self._running():
            self.root.destroy()
            return
        self.root.after(POLL_MS, self._poll)


def hide_own_console() -> None:
    """Windows: once the window shows, hide the console window PyInstaller opened for a
    double-clicked flashdesk (console=True, so `flashdesk doctor` can print). Left alone when
    another program shares it (started from a Command Prompt)."""
    if sys.platform != "win32":
        return
    import ctypes

    k32 = ctypes.windll.kernel32
    pids = (ctypes.c_uint32 * 4)()
    if k32.GetConsoleProcessList(pids, 4) == 1:  # only this program: a console of its own
        ctypes.windll.user32.ShowWindow(k32.GetConsoleWindow(), 0)  # SW_HIDE
