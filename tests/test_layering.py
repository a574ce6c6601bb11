"""The project's nevers (docs/architecture.md: The nevers), read from one table and checked with an AST walk over
every import in the non-test Python: module-level and lazy (function-level) imports, relative
imports, `importlib.import_module("...")`, and the code strings a module runs in a child
(`python -c CODE`). Two uses that are not imports are walked too: binding C symbols with ctypes,
and putting tests/ on sys.path.

The C in native/ has its own never: it includes the C standard library and its own headers, nothing
else (no llama.cpp, no Python). The same walk gives the import graph, which must have no circle. Not
checked: the arrows that are allowed (engine -> gguf_tools, server -> engine, ...): only the nevers.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from repo_files import repo_files

ROOT = Path(__file__).resolve().parent.parent

# Names a use can have besides a module's: see Uses below.
BINDS_C = "<a ctypes binding: CDLL, load_shared_library, argtypes/restype>"
TESTS_ON_PATH = "<tests/ on sys.path>"

OURS = ("engine", "server", "gguf_tools", "draft_training", "bench", "tests", "conftest", "installers")
WEB = ("server", "fastapi", "starlette", "pydantic", "pydantic_settings", "uvicorn", "sse_starlette", "httpx")


@dataclass(frozen=True)
class Allow:
    paths: tuple[str, ...]  # files or folders (relative to the repository) that may
    reason: str
    lazy_only: bool = False  # only inside a function: importing the module must not load it


@dataclass(frozen=True)
class Never:
    rule: str
    scope: tuple[str, ...]  # files or folders whose uses the rule reads ("" = all non-test Python)
    forbidden: tuple[str, ...]  # a module name means it and its submodules
    allow: tuple[Allow, ...] = ()


NEVERS = (
    Never("engine never imports the server or a web package: it knows nothing of HTTP (docs/architecture.md)",
          ("engine",), WEB),
    Never("engine/speculative never imports the server", ("engine/speculative",), ("server",)),
    Never("engine/grammar compiles a response format to a grammar: it never reaches the model store or "
          "the generation core (docs/architecture.md)", ("engine/grammar",),
          ("engine.models", "engine.speculative", "engine.worker", "engine.slot", "engine.prefix")),
    Never("engine/models stores and fetches models: it never reaches the structured-output compiler or the "
          "generation core (docs/architecture.md)", ("engine/models",),
          ("engine.grammar", "engine.speculative", "engine.worker", "engine.slot", "engine.prefix"), (
              Allow(("engine/models/store.py",), "pairing reads a draft's header with the DFlash drafter's own "
                    "check, the one that decides whether it loads (inside pair() only)", lazy_only=True),
          )),
    Never("engine/advisor says what this computer can run: it never reaches the structured-output compiler or "
          "the generation core (docs/architecture.md)", ("engine/advisor",),
          ("engine.grammar", "engine.speculative", "engine.worker", "engine.slot", "engine.prefix")),
    Never("engine never imports draft_training or torch: training is the optional [train] extra",
          ("engine",), ("draft_training", "torch")),
    Never("gguf_tools never imports the server or the engine: it is the format layer both stand on",
          ("gguf_tools",), ("server", "engine", *WEB)),
    Never("native/python (the flashdesk_native package) imports nothing of ours", ("native/python",), OURS),
    Never("bench never imports tests: what both use is in bench/harness.py and bench/datasets.py", ("bench",),
          ("tests", "conftest", TESTS_ON_PATH)),
    Never("only engine/llama/ imports llama_cpp (docs/architecture.md: the one layer that calls llama-cpp-python)",
          ("",), ("llama_cpp",), (
              Allow(("engine/llama",), "the llama.cpp layer itself"),
              Allow(("gguf_tools/quantize.py",), "quantizes through libllama; inside quantize() only, so that "
                    "`import gguf_tools` does not load libllama", lazy_only=True),
              Allow(("draft_training",), "reads the target's hidden states and logits through libllama while "
                    "it trains (the optional [train] extra, never loaded by the server)"),
              Allow(("server/desktop/doctor.py",), "the doctor reports llama-cpp-python's version",
                    lazy_only=True),
              Allow(("bench/profile.py", "bench/builds.py"), "a benchmark records which llama.cpp build it timed "
                    "(system_info, GPU offload, the library's path)"),
          )),
    Never("inside engine/, only engine/llama/ binds llama.cpp or ggml symbols with ctypes (docs/architecture.md)",
          ("engine",), (BINDS_C,), (
              Allow(("engine/llama",), "binds the llama.cpp and ggml symbols llama-cpp-python does not expose"),
              Allow(("engine/native.py",), "binds OUR library (flashdesk_native, built from native/), nothing else"),
          )),
)


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    name: str  # a dotted module name, or BINDS_C / TESTS_ON_PATH
    lazy: bool  # inside a function, or in a code string run in a child
    how: str = ""


def covers(prefixes: tuple[str, ...], path: str) -> bool:
    return any(p == "" or path == p or path.startswith(p + "/") for p in prefixes)


def names(module: str, forbidden: tuple[str, ...]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


_LOADERS = {"CDLL", "PyDLL", "WinDLL", "OleDLL", "LoadLibrary", "find_library", "load_shared_library"}
_LOADER_ATTRS = {f"ctypes.{k}" for k in ("cdll", "pydll", "windll", "oledll")}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _mentions_tests(node: ast.AST) -> bool:
    return any(isinstance(c, ast.Constant) and isinstance(c.value, str) and "tests" in c.value.split("/")
               for c in ast.walk(node))


class Uses(ast.NodeVisitor):
    """Every use in one module's tree; `package` resolves its relative imports."""

    def __init__(self, path: str, package: list[str], line0: int = 0, how: str = ""):
        self.path, self.package, self.line0, self.how = path, package, line0, how
        self.depth = 1 if how else 0  # a code string runs in a child: never at import time
        self.found: list[Use] = []

    def add(self, node: ast.AST, name: str) -> None:
        self.found.append(Use(self.path, self.line0 + node.lineno, name, self.depth > 0, self.how))

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.add(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.package[: len(self.package) - node.level + 1] if node.level else []
        module = ".".join(base + ([node.module] if node.module else []))
        if node.module:
            self.add(node, module)
        else:  # `from .. import native`: each name is a module
            for a in node.names:
                self.add(node, f"{module}.{a.name}")

    def visit_Call(self, node: ast.Call) -> None:
        func = _dotted(node.func)
        arg = node.args[0] if node.args else None
        if func in ("importlib.import_module", "import_module", "__import__") and isinstance(arg, ast.Constant):
            self.add(node, str(arg.value))
        if func.rsplit(".", 1)[-1] in _LOADERS:
            self.add(node, BINDS_C)
        if func in ("sys.path.insert", "sys.path.append", "sys.path.extend") and _mentions_tests(node):
            self.add(node, TESTS_ON_PATH)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """`ctypes.cdll.libllama`; not `ctypes.windll.kernel32` (the OS, not llama.cpp)."""
        if _dotted(node.value) in _LOADER_ATTRS and any(k in node.attr.lower() for k in ("llama", "ggml")):
            self.add(node, BINDS_C)
        self.generic_visit(node)

    def _assigned(self, node: ast.AST, targets: list[ast.AST], value: ast.AST | None) -> None:
        for t in targets:
            for leaf in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(leaf, ast.Attribute) and leaf.attr in ("argtypes", "restype"):
                    self.add(node, BINDS_C)
                if _dotted(leaf.value if isinstance(leaf, ast.Subscript) else leaf) == "sys.path" \
                        and value is not None and _mentions_tests(value):
                    self.add(node, TESTS_ON_PATH)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node, node.targets, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # docstrings: prose
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        """A string that parses as Python with an import in it is code a child runs (`python -c`)."""
        if isinstance(node.value, str) and "import " in node.value and "\n" in node.value:
            try:
                tree = ast.parse(node.value)
            except SyntaxError:
                return
            inner = Uses(self.path, self.package, self.line0 + node.lineno - 1, "in a code string")
            inner.visit(tree)
            self.found += inner.found


def uses_of(path: Path) -> list[Use]:
    rel = path.relative_to(ROOT).as_posix()
    parts = rel[:-3].split("/")
    visitor = Uses(rel, parts[:-1])
    visitor.visit(ast.parse(path.read_text("utf-8"), filename=rel))
    return visitor.found


@cache
def source_files() -> tuple[Path, ...]:
    """The non-test Python: tracked or new (not ignored), outside tests/."""
    return tuple(f for f in repo_files() if f.suffix == ".py" and f.relative_to(ROOT).parts[0] != "tests")


@cache
def all_uses() -> tuple[Use, ...]:
    return tuple(u for f in source_files() for u in uses_of(f))


def violations(never: Never, uses: tuple[Use, ...] | list[Use]) -> list[str]:
    bad = []
    for u in uses:
        if not covers(never.scope, u.path) or not names(u.name, never.forbidden):
            continue
        allowed = [a for a in never.allow if covers(a.paths, u.path)]
        if allowed and (u.lazy or not any(a.lazy_only for a in allowed)):
            continue
        why = " (allowed there only inside a function)" if allowed else ""
        how = f" {u.how}" if u.how else ""
        bad.append(f"{u.path}:{u.line}: uses {u.name}{how}{why}; never: {never.rule}")
    return bad


@pytest.mark.parametrize("never", NEVERS, ids=[n.rule.split(":")[0].split(" (")[0] for n in NEVERS])
def test_never(never: Never):
    assert source_files(), "no Python files found"
    bad = violations(never, all_uses())
    assert not bad, "\n".join(bad)


def test_every_exception_is_still_needed():
    """An exception no file uses any more is a hole in the rule: delete it from the table."""
    unused = [f"{n.rule}: {a.paths}" for n in NEVERS for a in n.allow
              if not any(covers(a.paths, u.path) and covers(n.scope, u.path) and names(u.name, n.forbidden)
                         for u in all_uses())]
    assert not unused, "\n".join(unused)


C_STANDARD = {"math.h", "stddef.h", "stdint.h", "string.h", "stdlib.h", "stdbool.h", "float.h", "limits.h"}


def test_the_native_c_includes_only_the_c_library_and_itself():
    c_files = sorted((ROOT / "native").rglob("*.[ch]"))
    ours = {f.name for f in c_files}
    bad = [f"{f.relative_to(ROOT)}:{i}: #include {m[1]}{m[2]}{m[3]}; never: native/ includes anything but the C "
           "standard library and its own headers"
           for f in c_files for i, line in enumerate(f.read_text("utf-8").splitlines(), 1)
           if (m := re.match(r'\s*#\s*include\s*([<"])([^>"]+)([>"])', line))
           and not (m[2] in C_STANDARD if m[1] == "<" else m[2] in ours)]
    assert c_files and not bad, "\n".join(bad)


PROBE = '''
import os
from fastapi import FastAPI
from ..server import app
import ctypes, sys

def later():
    import torch
    lib = ctypes.CDLL("libggml.so")
    lib.f.restype, lib.f.argtypes = None, []
    ctypes.windll.kernel32.GetConsoleWindow()

sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
sys.path.insert(0, "x/tests")
CHILD = """
import json
import llama_cpp
"""
"""A docstring that shows code:
    import server
"""
'''


def test_the_walk_sees_every_kind_of_use():
    probe = ROOT / "engine" / "speculative" / "probe_never_written.py"  # the path only: the tree is parsed
    visitor = Uses(probe.relative_to(ROOT).as_posix(), ["engine", "speculative"])
    visitor.visit(ast.parse(PROBE))
    seen = {(u.name, u.line, u.lazy) for u in visitor.found}
    assert {("os", 2, False), ("fastapi", 3, False), ("engine.server", 4, False), ("torch", 8, True),
            (BINDS_C, 9, True), (BINDS_C, 10, True), (TESTS_ON_PATH, 13, False), (TESTS_ON_PATH, 14, False),
            ("llama_cpp", 17, True)} <= seen
    assert "server" not in {u.name for u in visitor.found}  # the docstring is prose, not a use
    assert [u.line for u in visitor.found if u.name == BINDS_C] == [9, 10, 10]  # not the OS's kernel32 (11)
    web, llama = NEVERS[0], next(n for n in NEVERS if n.forbidden == ("llama_cpp",))
    assert [v.split(":")[1] for v in violations(web, visitor.found)] == ["3"]
    assert violations(llama, visitor.found)[0].startswith(
        "engine/speculative/probe_never_written.py:17: uses llama_cpp in a code string")
    quantize = [Use("gguf_tools/quantize.py", 1, "llama_cpp", lazy=False)]
    assert "only inside a function" in violations(llama, quantize)[0]


def test_serving_loads_the_hub_client_only_to_fetch():
    """The app bundle leaves huggingface_hub out (installers/flashdesk.spec): starting the server, its
    CLI or the desktop launcher must not import it; engine/models/pull.py loads it to fetch a Hub file."""
    code = ("import sys, engine, engine.worker, server.http.app, server.cli, server.desktop.launcher; "
            "server.cli.parser(); print('huggingface_hub' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_serving_never_imports_torch():
    """PyTorch is the optional [train] extra: the server, its CLI (which registers
    train-draft) and the engine must load without it."""
    code = ("import sys, engine, engine.worker, server.http.app, server.cli; server.cli.parser(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def module_of(path: str) -> str:
    """engine/speculative/loop.py -> engine.speculative.loop; a package's __init__.py -> the package."""
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(uses: tuple[Use, ...] | list[Use], modules: set[str]) -> dict[str, set[str]]:
    """Our module -> our modules it imports, at module level or inside a function (a lazy import
    closes a circle as surely, only later); not code a child runs. `from pkg import name` where the
    name is no module points at the package."""
    graph: dict[str, set[str]] = {}
    for u in uses:
        if u.how:
            continue
        parts = u.name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        src, dst = module_of(u.path), ".".join(parts)
        if dst and dst != src:
            graph.setdefault(src, set()).add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """No two of our modules import each other, directly or round a circle, lazily or not: a layer
    stands on the ones below it only (the review found three; each was cut where its back edge was)."""
    modules = {module_of(f.relative_to(ROOT).as_posix()) for f in source_files()}
    found = cycles(import_graph(all_uses(), modules))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_sees_a_lazy_circle_through_a_package():
    uses = [Use("a/__init__.py", 1, "a.b", lazy=False), Use("a/b.py", 1, "a.Layout", lazy=False),
            Use("c/x.py", 1, "c.y", lazy=False), Use("c/y.py", 9, "c.x", lazy=True),
            Use("d.py", 1, "c.x", lazy=False), Use("d.py", 2, "d", lazy=False, how="in a code string")]
    graph = import_graph(uses, {"a", "a.b", "c.x", "c.y", "d"})
    assert cycles(graph) == [["a", "a.b"], ["c.x", "c.y"]]
