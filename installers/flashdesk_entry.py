"""The bundled program's entry point: the `flashdesk` command (with no arguments, `flashdesk app`).

A frozen program has no `python -m`: flashdesk runs some llama.cpp loads in a child
process (`sys.executable -m engine.models.load_check FILE`, so a crash on a hostile file costs
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

    return cli(args)  # no arguments: `flashdesk app`, as for the pip-installed command


if __name__ == "__main__":
    sys.exit(main())
