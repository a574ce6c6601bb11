"""The settings have one source: `flashdesk serve`'s flags are made from the Settings fields
(server/flags.py), the engine's knobs default to EngineConfig's, and the speculation names
are engine/speculative/params.py's, in the settings, the request schema and the CLI alike.
No model, no server.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine import EngineConfig
from engine.speculative.params import MAX_BLOCK, MODES, SELECTORS
from server import flags
from server.runtime import speculation
from server.cli import parser
from server.http.schemas import Speculative
from server.settings import Settings

# Every flag `flashdesk serve` had before its flags were generated, and the field it sets.
OLD_FLAGS = {
    "--model": ("model", "shop"), "--host": ("host", "::1"), "--port": ("port", "9000"), "--ctx": ("ctx", "2048"),
    "--parallel": ("parallel", "2"), "--threads": ("threads", "3"), "--api-key": ("api_key", "k" * 12),
    "--allowed-host": ("allowed_hosts", "intranet.shop"), "--allowed-origin": ("allowed_origins", "http://a.b"),
    "--draft": ("draft", "none"), "--speculative": ("speculative", "lookup"), "--selector": ("selector", "dp"),
    "--block": ("spec_block", "4"),
}
SWITCHES = {"--verbose": "verbose", "--allow-inexact-speculation": "allow_inexact_speculation"}


def serve(*argv: str) -> Settings:
    return Settings(**flags.given(parser().parse_args(["serve", *argv]), Settings))


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in Settings.model_fields:
        monkeypatch.delenv(f"FLASHDESK_{name.upper()}", raising=False)


def test_every_old_flag_still_sets_its_field():
    for flag, (field, value) in OLD_FLAGS.items():
        s = serve(flag, value)
        got = getattr(s, field)
        got = got.get_secret_value() if field == "api_key" else got
        assert got == ([value] if field.startswith("allowed_") else type(got)(value)), flag
    for flag, field in SWITCHES.items():
        assert getattr(serve(flag), field) is True and getattr(serve(), field) is False, flag
    assert serve("--allowed-host", "a", "--allowed-host", "b").allowed_hosts == ["a", "b"]  # repeatable
    assert parser().parse_args(["--home", "/tmp/h", "serve"]).home == "/tmp/h"  # before the command


def test_flags_rank_above_the_environment(monkeypatch):
    monkeypatch.setenv("FLASHDESK_CTX", "2048")
    monkeypatch.setenv("FLASHDESK_VERBOSE", "true")
    assert serve().ctx == 2048 and serve("--ctx", "1024").ctx == 1024
    assert serve().verbose is True  # an absent switch leaves the environment's choice alone


def test_help_is_the_field_description_and_the_default_is_shown_once():
    serve_parser = parser()._subparsers._group_actions[0].choices["serve"]
    actions = {a.dest: a for a in serve_parser._actions}
    for name, field in Settings.model_fields.items():
        if name == "home":
            continue
        assert actions[name].help.startswith(field.description), name
        assert actions[name].default is None, name  # the default is Settings', never argparse's
    assert "default 8" in actions["spec_block"].help and f"2-{MAX_BLOCK}" in actions["spec_block"].help
    assert "env FLASHDESK_SPEC_BLOCK" in actions["spec_block"].help
    assert tuple(actions["selector"].choices) == SELECTORS and tuple(actions["speculative"].choices) == MODES


def test_engine_knobs_default_to_the_engine_config():
    s, e = Settings(), EngineConfig()
    assert (s.ctx, s.parallel, s.threads, s.spec_block, s.selector, s.speculative, s.verbose) == (
        e.n_ctx, e.n_parallel, e.n_threads, e.spec_block, e.selector, e.spec_mode, e.verbose)


def test_speculation_names_come_from_the_engine():
    with pytest.raises(ValidationError) as e:
        Settings(selector="greedy")
    assert all(repr(name) in str(e.value) for name in SELECTORS)  # the message lists what is allowed
    with pytest.raises(ValidationError):
        Settings(spec_block=MAX_BLOCK + 1)
    with pytest.raises(ValidationError) as e:
        Speculative(mode="fast")
    assert all(repr(name) in str(e.value) for name in MODES)
    assert Speculative().params() == Speculative(mode="auto").params()
    assert speculation.names() == {"modes": list(MODES), "selectors": list(SELECTORS), "max_block": MAX_BLOCK}


def test_bad_flag_values_are_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "--selector", "greedy"])
    assert "walk" in capsys.readouterr().err
