"""The strings files: both languages have the same keys and placeholders, and every key the
code asks for by name exists (no browser needed)."""

from __future__ import annotations

import json
import re

from conftest import ROOT

UI = ROOT / "ui"


def flatten(node: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def strings(lang: str) -> dict[str, str]:
    return flatten(json.loads((UI / "i18n" / f"{lang}.json").read_text("utf-8")))


def test_both_languages_have_the_same_keys_and_placeholders():
    en, zh = strings("en"), strings("zh-TW")
    assert sorted(set(en) ^ set(zh)) == []
    for key in en:
        assert set(re.findall(r"\{(\w+)\}", en[key])) == set(re.findall(r"\{(\w+)\}", zh[key])), key
        assert zh[key].strip(), key


def test_every_key_the_code_names_exists():
    en = strings("en")
    used = set()
    for js in UI.rglob("*.js"):
        used |= {m for m in re.findall(r"""\bt\(\s*["']([\w.-]+)["']""", js.read_text("utf-8"))}
    for html in UI.glob("*.html"):
        text = html.read_text("utf-8")
        used |= set(re.findall(r'data-i18n="([\w.-]+)"', text))
        pairs = re.findall(r'data-i18n-attr="([^"]+)"', text)
        used |= {k for pair in pairs for k in re.findall(r":\s*([\w.-]+)", pair)}
    assert used, "found no t(...) calls: the scan is broken"
    assert sorted(k for k in used if k not in en) == []


def test_every_work_order_finding_has_words_in_both_languages():
    from server.workorders.review import CODES

    for lang in ("en", "zh-TW"):
        flags = {k.removeprefix("workorders.flag.") for k in strings(lang) if k.startswith("workorders.flag.")}
        assert sorted(CODES - flags) == [], lang


def test_every_speculation_mode_has_words_in_both_languages():
    """The chat settings take the modes from /health (engine/speculative/params.py), not from a
    list of their own; each needs its label (chat.spec_<mode>), or the picker shows the bare name."""
    from engine.speculative.params import MODES

    for lang in ("en", "zh-TW"):
        assert sorted(m for m in MODES if f"chat.spec_{m}" not in strings(lang)) == [], lang


def test_every_feature_a_backend_lacks_has_words_in_both_languages():
    """A parse through a backend lists what it could not do under `unavailable` (server/workorders/
    extract.py); the page names each (workorders.unavailable.<feature>), or it shows the bare name."""
    source = (ROOT / "server" / "workorders" / "extract.py").read_text("utf-8")
    features = set(re.findall(r"""unavailable\[["'](\w+)["']\]""", source))
    assert {"close_within_max_tokens", "field_confidence"} <= features, "the scan is broken"
    for lang in ("en", "zh-TW"):
        assert sorted(f for f in features if f"workorders.unavailable.{f}" not in strings(lang)) == [], lang
