"""Test tiers: each test is marked by what it uses, and `--fast` runs only the pure-logic ones.

A test's marks follow from the fixtures it uses (pytest resolves the whole closure, so a module
fixture that starts a server on the model's home counts as both): `model` loads the real model
or pulls it, `server` starts `flashdesk serve` or an app, `browser` drives chromium, `install`
builds or installs the product (the bundle, a clean install, the patched llama.cpp sources).
A module that starts a server inline, in a test's body, says so with `pytestmark`.

    scripts/test.sh --fast        the rest: grammar, parsers, stores, formats (a few minutes)
    scripts/test.sh -m browser    one tier; markers combine as pytest's -m expressions do

The full suite stays what CI runs. A plugin of conftest.py.
"""

from __future__ import annotations

TIERS = {
    "model": {"store", "real_wheel", "model_path", "engine", "dflash_engine", "target_model"},
    "server": {"server", "start_server", "srv", "ui_server"},
    "browser": {"tab", "browser", "display"},
    "install": {"patched"},
}
INSTALL_DIRS = ("tests/installers/",)


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true", help="only tests with none of the marks " + ", ".join(TIERS))


def pytest_configure(config):
    for name, fixtures in TIERS.items():
        config.addinivalue_line("markers", f"{name}: uses {', '.join(sorted(fixtures))} (tests/tiers.py)")


def pytest_collection_modifyitems(config, items):
    fast = []
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for name, fixtures in TIERS.items():
            if used & fixtures or (name == "server" and any(f.endswith("_server") for f in used)):
                item.add_marker(name)
        if item.nodeid.startswith(INSTALL_DIRS):
            item.add_marker("install")
        if not any(item.get_closest_marker(name) for name in TIERS):
            fast.append(item)
    if config.getoption("--fast"):
        config.hook.pytest_deselected(items=[i for i in items if i not in fast])
        items[:] = fast

