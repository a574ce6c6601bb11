"""The catalog's chat-template variables reach the prompt: catalog entry -> the installed model's
manifest -> server/runtime/served.py load_engine -> EngineConfig.chat_template_vars -> Engine.render_chat;
and a work-order parse closes a thinking template's block on any model, imported ones too.

The model is tests/hub_models.py's tiny llama target carrying Qwen3's real template (read from the
pinned sdist, tests/llama_templates.py), installed under the built-in qwen3-8b entry's name with
that entry's own options, the way `pull` installs it (ModelStore.install with entry.options());
only the download is left out. Not a test of how the template renders: test_chat_template_families.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_models import write_target
from llama_templates import family_templates

from engine.models.catalog import CATALOG
from engine.models.store import ModelStore, no_progress
from server.runtime.served import load_engine
from server.settings import Settings

HI = [{"role": "user", "content": "Hi"}]
PROMPT = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"  # Qwen3's generation prompt, thinking left on


@pytest.fixture(scope="module")
def qwen3_target(tmp_path_factory, model_path) -> Path:
    folder = tmp_path_factory.mktemp("qwen3-template")
    return write_target(folder / CATALOG["qwen3-8b"].filename, model_path, chat_template=family_templates()["qwen3"])


def install(home: Path, name: str, target: Path, options: dict) -> Path:
    def copy(dst: Path) -> None:
        dst.write_bytes(target.read_bytes())

    m = ModelStore(home).install(name, copy, target.name, f"catalog:{name}", progress=no_progress, options=options)
    return Path(m.path).parent


def served_prompt(home: Path, name: str) -> str:
    _, eng = load_engine(Settings(home=str(home), model=name, ctx=256, parallel=1, threads=2))
    try:
        prompt = eng.render_chat(HI)
        assert eng.chat(HI, max_tokens=2).usage.prompt_tokens > 0  # and the engine runs on it
        return prompt
    finally:
        eng.close()


def test_the_catalogs_thinking_switch_reaches_the_prompt(tmp_path, qwen3_target):
    entry = CATALOG["qwen3-8b"]
    assert entry.options()["chat_template"] == {"enable_thinking": False}  # what the catalog says today
    folder = install(tmp_path / "home", entry.name, qwen3_target, entry.options())
    assert ModelStore.manifest(folder)["options"]["chat_template"] == {"enable_thinking": False}
    assert served_prompt(tmp_path / "home", entry.name) == PROMPT + "<think>\n\n</think>\n\n"


def test_a_model_without_catalog_options_renders_the_templates_default(tmp_path, qwen3_target):
    install(tmp_path / "home", "my-qwen3", qwen3_target, {})  # e.g. imported: no catalog entry, no options
    assert served_prompt(tmp_path / "home", "my-qwen3") == PROMPT


@pytest.mark.parametrize("name", ["qwen3.5-2b", "qwen3.5-4b"])
def test_qwen35_entries_answer_without_thinking(tmp_path, model_path, name):
    """Qwen3.5's template opens a reasoning block unless told not to (unlike Qwen3's, which leaves it to
    the model): the catalog's entries pass enable_thinking false, so chats and work-order parses get the
    closed, empty block."""
    entry = CATALOG[name]
    target = write_target(tmp_path / entry.filename, model_path, chat_template=family_templates()["qwen3.5"])
    install(tmp_path / "home", entry.name, target, entry.options())
    assert served_prompt(tmp_path / "home", entry.name) == PROMPT + "<think>\n\n</think>\n\n"
    install(tmp_path / "home", "my-qwen3.5", target, {})  # imported by hand: the template's own default
    assert served_prompt(tmp_path / "home", "my-qwen3.5") == PROMPT + "<think>\n"


def test_a_work_order_parse_closes_the_thinking_block_of_an_imported_qwen35(tmp_path, model_path):
    """A model imported by hand has no catalog options; its chats keep the template's default, but a
    work-order parse asks for the JSON without reasoning (server/workorders/extract.py)."""
    import datetime as dt

    from server.workorders.extract import request_for
    from server.workorders.templates import TemplateStore

    target = write_target(tmp_path / "Qwen3.5-4B-Q4_K_M.gguf", model_path, chat_template=family_templates()["qwen3.5"])
    install(tmp_path / "home", "my-qwen3.5", target, {})
    _, eng = load_engine(Settings(home=str(tmp_path / "home"), model="my-qwen3.5", ctx=2048, parallel=1, threads=2))
    try:
        assert eng.render_chat(HI).endswith("<think>\n")  # a chat: the template's own default
        req = request_for(eng, TemplateStore(None).get("work_order"), "500 flyers A5 by Friday", dt.date(2026, 1, 12))
        # (the special tokens detokenize to nothing: "<|im_start|>assistant" reads "assistant")
        assert eng.model.detokenize(req.prompt).endswith("\nassistant\n<think>\n\n</think>\n\n")
    finally:
        eng.close()
