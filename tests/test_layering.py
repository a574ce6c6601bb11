"""The engine knows nothing of HTTP: no module under engine/ imports a web or server package."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"fastapi", "starlette", "uvicorn", "pydantic", "pydantic_settings", "sse_starlette", "server", "httpx"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_engine_has_no_web_imports():
    files = sorted((ROOT / "engine").rglob("*.py"))
    assert files, "engine/ has no Python files"
    bad = {str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN) for f in files}
    assert not {f: m for f, m in bad.items() if m}


def test_the_lint_catches_a_web_import(tmp_path):
    probe = tmp_path / "x.py"
    probe.write_text("import os\nfrom fastapi import FastAPI\n")
    assert imported_roots(probe) & FORBIDDEN == {"fastapi"}


def test_serving_never_imports_torch():
    """PyTorch is the optional [train] extra: the server, its CLI (which registers
    train-draft) and the engine must load without it."""
    import subprocess
    import sys

    code = "import sys, engine, engine.worker, server.app, server.cli; server.cli.parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
