"""bench/ as one suite (issue 54, item 6), without a model: every benchmark `python -m bench` lists
is a module with its flags beside the shared ones, the one record writes and reads back, the
A B A B runner alternates and takes medians, and every `python -m bench <name>` the README and
docs/ give names a benchmark with flags it has."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench import lib, suite
from bench.datasets import dev_prompts, prompts, spread
from bench.lib import Record

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("--model", "--threads", "--prompts", "--rounds", "--out")
# bench/ modules that are no benchmark: the suite itself, what the benchmarks share, their parts
NOT_BENCHMARKS = {"__init__", "__main__", "suite", "lib", "harness", "datasets", "rollback_cost", "soak_clients"}
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "draft_training").glob("*.md"))]


def help_of(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        suite.parser(name, suite.load(name)).parse_args(["--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_every_module_of_bench_is_a_listed_benchmark_or_a_declared_part():
    modules = {p.stem for p in (ROOT / "bench").glob("*.py")}
    assert modules - NOT_BENCHMARKS == set(suite.BENCHMARKS)
    assert set(suite.BENCHMARKS.values()) <= set(suite.KINDS)


def test_the_listing_names_every_benchmark_with_a_line_of_its_own():
    text = suite.listing()
    for name in suite.BENCHMARKS:
        line = next(x for x in text.splitlines() if x.split()[:1] == [name])
        assert len(line.split()) > 3, line  # the name and its docstring's first line


@pytest.mark.parametrize("name", sorted(suite.BENCHMARKS))
def test_each_benchmark_declares_its_flags_beside_the_shared_ones(name):
    module = suite.load(name)
    assert callable(module.add_arguments) and callable(module.run)
    text = help_of(name)
    for flag in SHARED:
        assert flag in text
    # the shared flags are the suite's: a benchmark adding one of its own would clash in argparse
    assert len((ROOT / "bench" / f"{name}.py").read_text("utf-8").splitlines()) < 400


def test_the_shared_flags_mean_one_thing_everywhere(tmp_path):
    a = suite.parser("spec", suite.load("spec")).parse_args(["--prompts", "6", "--out", str(tmp_path / "x.json")])
    assert a.prompts == 6 and a.threads == suite.THREADS and lib.out_json(a.out) == tmp_path / "x.json"
    b = suite.parser("serve", suite.load("serve")).parse_args([])
    assert b.threads == suite.THREADS and b.out == str(ROOT / "bench" / "out" / "serve")


def test_prompts_n_takes_n_dev_prompts_round_robin_over_the_categories():
    rows = dev_prompts()
    cats = list(dict.fromkeys(p["category"] for p in rows))
    got = prompts(len(cats) + 1)
    assert [p["category"] for p in got[:len(cats)]] == cats and got[-1]["category"] == cats[0]
    assert spread(rows, 1000) and len(spread(rows, 1000)) == len(rows)


def record() -> Record:
    return Record("spec", {"block": 8, "modes": ["plain", "auto"]},
                  samples=[{"mode": "plain", "tok_s": 20.0}, {"mode": "auto", "tok_s": 30.0}],
                  medians={"plain": 20.0, "auto": 30.0}, ratios={"auto": 1.5}, figures={"table": [1, 2]},
                  markdown="| a table |", commit="abc1234", device={"cpu": "X", "cores": 2},
                  build={"llama_cpp_python": "0.3.36"}, model={"name": "m.gguf", "bytes": 10})


def test_the_record_round_trips_through_json_with_its_figures_at_the_top():
    r = record()
    data = json.loads(json.dumps(r.to_json()))
    assert data["table"] == [1, 2] and data["commit"] == "abc1234" and data["ratios"] == {"auto": 1.5}
    back = Record.from_json(data)
    assert back.to_json() == r.to_json() and back.figures == {"table": [1, 2]}
    with pytest.raises(AssertionError, match="record field"):
        Record("x", {}, figures={"commit": "no"}).to_json()


def test_the_record_renders_markdown_with_what_was_timed_on(tmp_path):
    text = record().to_markdown()
    for want in ("# spec", "abc1234", "llama_cpp_python 0.3.36", "cpu X", "m.gguf", "block 8", "| auto | 1.5 |",
                 "| a table |"):
        assert want in text, want
    paths = record().write(tmp_path / "run.json")
    assert [p.name for p in paths] == ["run.json", "run.md"]
    assert json.loads(paths[0].read_text("utf-8"))["bench"] == "spec"


def test_stamp_fills_in_the_commit_device_and_model(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    r = Record("x", {}, model={"path": str(gguf)}).stamp()
    assert r.model["name"] == "m.gguf" and r.model["bytes"] == 104 and "path" not in r.model
    assert r.device["cores"] and r.build["llama_cpp_python"]


def test_the_runner_alternates_the_sides_and_rotates_who_goes_first():
    calls = []
    times = {"A": iter([1.0, 3.0, 2.0]), "B": iter([2.0, 6.0, 5.0])}

    def side(name):
        return lambda: calls.append(name) or next(times[name])

    samples = lib.alternate({"A": side("A"), "B": side("B")}, 3)
    assert calls == ["A", "B", "B", "A", "A", "B"]
    assert samples == {"A": [1.0, 3.0, 2.0], "B": [2.0, 6.0, 5.0]}
    assert lib.medians(samples) == {"A": 2.0, "B": 5.0}
    assert lib.paired_ratios(samples, "A") == {"B": 2.0}  # 2/1, 6/3, 5/2: the median of the rounds' ratios
    assert lib.rotation(["a", "b", "c"], 4) == ["b", "c", "a"]


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) of every `python -m bench ...` in the README and docs/, inline or in a block."""
    found = []
    for path in DOCS:
        text = path.read_text("utf-8")
        spans = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        spans = [line for s in spans for line in s.splitlines()]
        spans += re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for span in spans:
            span = " ".join(span.split())
            if "python -m bench" in span:
                found.append((path.name, span[span.index("python -m bench"):]))
    return found


def test_every_bench_command_in_the_docs_names_a_benchmark_and_its_flags():
    commands = doc_commands()
    assert len(commands) > 10
    for where, cmd in commands:
        words = shlex.split(cmd)[3:]
        assert words and words[0] in suite.BENCHMARKS, f"{where}: {cmd}"
        known = suite.parser(words[0], suite.load(words[0]))._option_string_actions
        for flag in (w.split("=")[0] for w in words[1:] if w.startswith("--")):
            assert flag in known, f"{where}: {cmd}: {flag}"


def test_no_doc_runs_a_bench_script_as_a_file():
    for path in DOCS:
        assert not re.search(r"python3? bench/\w+\.py", path.read_text("utf-8")), path


def test_python_m_bench_lists_the_benchmarks():
    r = subprocess.run([sys.executable, "-m", "bench", "list"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and all(name in r.stdout for name in suite.BENCHMARKS)
    r = subprocess.run([sys.executable, "-m", "bench", "no_such"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "python -m bench list" in r.stderr
