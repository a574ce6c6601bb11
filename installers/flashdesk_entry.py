"""The bundled program's entry point: `flashdesk` with no arguments is `flashdesk app`.

A frozen program has no `python -m`: flashdesk runs some llama.cpp loads in a child
process (`sys.executable -m engine.probe FILE`, so a crash on a hostile file costs
nothing), and in the bundle `sys.executable` is this program. Those calls land here and
are dispatched to the module's main.
"""

import runpy
import sys


def main() -> int:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "-m":  # a child process the app started: `-m module args...`
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    from server.cli import main as cli

    head = args[:2] if args[:1] == ["--home"] else []  # the one option that comes before a command
    rest = args[len(head):]
    if not rest or rest[0].startswith("-") and rest[0] not in ("-h", "--help", "--version"):
        rest = ["app", *rest]  # a double-click, or `flashdesk --port 9000`
    return cli(head + rest)


if __name__ == "__main__":
    sys.exit(main())
