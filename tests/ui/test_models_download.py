"""Downloads on the Models page, for real: a `flashdesk serve` whose Hugging Face endpoint is the
local stand-in Hub (tests/hub_standin.py, the real huggingface_hub client), with user catalog
entries for tiny models on it (tests/hub_models.py). The card's words (licences, sizes, draft,
source, "your own entry"); Download -> progress -> done -> the installed model with its draft
paired; Cancel on a slow link -> "Cancelled", nothing installed; a wrong pin -> the server's
reason and Try again.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from hub_models import catalog_entry, hub_file, write_draft, write_target
from hub_standin import HubStandIn
from playwright.sync_api import expect

from conftest import linked_home, serving
from tests.ui.browser import Page
from tests.ui.test_models_page import WATCH_JOBS, card

TINY_SIZE = 8390624  # bytes of write_target's float16 file
REPO, DRAFT_REPO, BIG = "tiny-org/Tiny-GGUF", "tiny-org/Tiny-DFlash2-GGUF", "tiny-org/Tiny-F32-GGUF"


@pytest.fixture(scope="module")
def hub_server(tmp_path_factory, model_path, store):
    """The stand-in Hub, and a server with its own home whose catalog/ points at it: "tiny" (target and
    DFlash 2 draft, two licences), "tiny-big" (12.6 MB, for a cancel) and "tiny-bad" (a wrong sha256)."""
    d = tmp_path_factory.mktemp("hub-ui")
    target = write_target(d / "Tiny-Q8_0.gguf", model_path)
    big = write_target(d / "Tiny-F32.gguf", model_path, embd_dtype=np.float32)
    draft = write_draft(d / "Tiny-DFlash2-Q4_K_M.gguf", target, "dflash2")
    with HubStandIn() as hub:
        rev = hub.add_repo(REPO, {"Tiny-Q8_0.gguf": target})
        drev = hub.add_repo(DRAFT_REPO, {"Tiny-DFlash2-Q4_K_M.gguf": draft})
        brev = hub.add_repo(BIG, {"Tiny-F32.gguf": big})
        home = linked_home(d / "home", store)
        catalog_entry(home, "tiny", hub_file(REPO, rev, target), hub_file(DRAFT_REPO, drev, draft, license="MIT"))
        catalog_entry(home, "tiny-big", hub_file(BIG, brev, big))
        catalog_entry(home, "tiny-bad", hub_file(REPO, rev, target) | {"sha256": "0" * 64})
        # This test's own endpoint and Hugging Face home, and no token: nothing of the user's setup.
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(d / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "", "HF_HUB_OFFLINE": ""}
        with serving(home, "--parallel", "1", env=env) as srv:
            srv.hub, srv.sizes = hub, {"tiny": target.stat().st_size + draft.stat().st_size}
            assert target.stat().st_size == TINY_SIZE  # the size the bad pin's message names
            yield srv


@pytest.fixture
def hub_tab(browser, hub_server):
    hub_server.hub.throttle(None)
    t = Page(browser, hub_server.base, "en-US")
    yield t
    hub_server.hub.throttle(None)
    t.close()
    assert not t.blocked, f"the page tried to reach beyond this machine: {t.blocked}"
    bugs = [e for e in t.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"


def catalog_card(page, name: str):
    return page.locator(f'.catalog-card[data-model="{name}"]')


def format_bytes(n: int) -> str:
    """ui/dom.js formatBytes, for sizes the test computes: decimal units, one decimal below 100."""
    units, i = ["B", "kB", "MB", "GB", "TB"], 0
    while n >= 1000 and i < len(units) - 1:
        n, i = n / 1000, i + 1
    return f"{round(n) if n >= 100 or i == 0 else f'{n:.1f}'} {units[i]}"


def installed(srv) -> list[str]:
    return [m["name"] for m in httpx.get(f"{srv.base}/v1/store/models", timeout=10).json()["data"]]


def test_download_shows_progress_and_pairs_the_draft(hub_tab, hub_server):
    page = hub_tab.open("#/models")
    tiny = catalog_card(page, "tiny")
    expect(tiny.locator("h3")).to_have_text("Tiny tiny")
    expect(tiny.locator(".catalog-own")).to_have_text("Your own entry")
    expect(tiny.locator(".catalog-summary")).to_have_text("a tiny test model")
    expect(tiny.locator(".catalog-from")).to_have_text(
        "from tiny-org/Tiny-GGUF · the draft from tiny-org/Tiny-DFlash2-GGUF")
    facts = tiny.locator(".facts")
    expect(facts).to_contain_text(f"Download size{format_bytes(hub_server.sizes['tiny'])}")
    expect(facts).to_contain_text("Memory needed")
    expect(facts).to_contain_text("Speed-upwith its DFlash 2 draft")
    expect(facts).to_contain_text("Model licenseApache-2.0")
    expect(facts).to_contain_text("Draft licenseMIT")
    expect(tiny.locator(".catalog-fit")).to_have_text("Runs on this computer's processor")
    expect(catalog_card(page, "tiny-bad").locator(".facts")).to_contain_text(
        "no draft: speeds up by copying from the conversation")
    hub_tab.shot("models-download-card")

    hub_server.hub.throttle(6_000_000)  # ~2 s for the files: long enough for the page to show the bar
    page.evaluate(WATCH_JOBS)
    tiny.get_by_role("button", name="Download", exact=True).click()
    job = tiny.locator('.job[data-job="pull:tiny"]')
    expect(job).to_have_attribute("data-status", "done", timeout=60_000)
    expect(job).to_contain_text("Done: “tiny” is ready to use.")
    seen = page.evaluate("window.__seen")
    assert seen["progress"] and "Downloading the model…" in seen["phases"], seen
    expect(tiny.locator(".badge", has_text="Installed")).to_be_visible()
    model = card(page, "tiny")
    expect(model.locator(".facts")).to_contain_text("Speed-up draftPaired DFlash 2 · downloaded with the model")
    assert "tiny" in installed(hub_server)


def test_cancel_stops_a_download_and_installs_nothing(hub_tab, hub_server):
    page = hub_tab.open("#/models")
    big = catalog_card(page, "tiny-big")
    # 12.6 MB at 2 MB/s: progress (and so the cancel) comes every piece of engine/models/hub.py's CHUNK (1 MiB).
    hub_server.hub.throttle(2_000_000)
    big.get_by_role("button", name="Download", exact=True).click()
    job = big.locator('.job[data-job="pull:tiny-big"]')
    expect(job.locator(".job-phase")).to_have_text("Downloading the model…")
    job.get_by_role("button", name="Cancel").click()
    expect(job.get_by_role("button", name="Stopping…")).to_be_disabled()
    expect(job).to_have_attribute("data-status", "cancelled", timeout=30_000)
    expect(job).to_contain_text("Cancelled. Nothing was installed.")
    expect(job.get_by_role("button", name="Download again")).to_be_visible()
    hub_tab.shot("models-download-cancelled")
    assert "tiny-big" not in installed(hub_server)
    expect(card(page, "tiny-big")).to_have_count(0)


def test_a_wrong_pin_shows_the_servers_reason(hub_tab, hub_server):
    page = hub_tab.open("#/models")
    bad = catalog_card(page, "tiny-bad")
    bad.get_by_role("button", name="Download", exact=True).click()
    job = bad.locator('.job[data-job="pull:tiny-bad"]')
    expect(job).to_have_attribute("data-status", "error", timeout=60_000)
    alert = job.get_by_role("alert")
    expect(alert).to_contain_text(f"but the catalog pins size {TINY_SIZE} and sha256 {'0' * 64}")
    expect(alert).to_contain_text("nothing was downloaded")
    expect(alert).to_contain_text("HINT:")
    expect(job.get_by_role("button", name="Try again")).to_be_visible()
    hub_tab.shot("models-download-error")
    assert "tiny-bad" not in installed(hub_server)
