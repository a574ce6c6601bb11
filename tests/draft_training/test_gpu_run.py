"""The GPU path on this CPU, at toy sizes: draft_training/gpu_run.py's whole run (capture with
two worker processes, merge, a few seconds of training, export, parts) ending in a draft the
engine accepts, its time plan and config plumbing, and scripts/gpu_pack.py's trimming and call
plan (no CUDA build here: GPU.md says what only the device can check)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from draft_training import gpu_machine, gpu_run  # noqa: E402
from draft_training.capture import CaptureConfig  # noqa: E402
from draft_training.shards import Shards  # noqa: E402
from draft_training.parts import MAX_BYTES, join, manifest_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_pack  # noqa: E402


@pytest.mark.timeout(150)
def test_tiny_cpu_run_brings_back_a_draft_the_engine_accepts(model_path, tmp_path):
    from engine.llama.model import Model
    from engine.speculative.drafters.dflash import inspect_draft

    out, work = tmp_path / "out", tmp_path / "work"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(ROOT / "draft_training" / "gpu_run.py"), "run", "--cpu", "--tiny",
                        "--target", model_path, "--out", str(out), "--work", str(work), "--minutes", "0.6",
                        "--workers", "1"], cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert time.monotonic() - t0 < 120
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] and list(report["phases"]) == ["capture", "train", "export"]
    cap = report["phases"]["capture"]
    assert cap["n_answer_tokens"] > 0 and cap["config"]["n_seq"] == 3 and cap["config"]["max_new"] == 20
    shards = Shards(work / "data")  # the worker's shards moved into the one folder training reads
    assert shards.manifest["n_tokens"] == sum(s["n_tokens"] for s in shards.manifest["shards"]) == cap["n_tokens"]
    assert len({k.split(".")[0] for k in shards.manifest["done"]}) == 6
    assert report["phases"]["train"]["steps"] >= 1
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and "report.json" in files
    assert all((out / f).stat().st_size <= MAX_BYTES for f in files)
    draft = join(manifest_path(out, "draft.gguf"), tmp_path / "draft.gguf")
    assert draft.stat().st_size == report["phases"]["export"]["bytes"]
    m = Model(model_path)
    try:
        info = inspect_draft(str(draft), m)
    finally:
        m.close()
    assert info.top_k > 0 and info.block_size == 8


def test_workers_captures_merge_into_one_folder(tmp_path):
    ws = [tmp_path / "w0", tmp_path / "w1", tmp_path / "w2"]  # the last one finished nothing
    for i, w in enumerate(ws[:2]):
        w.mkdir()
        shards = []
        for j in range(i + 1):
            for suffix in (".feats.npy", ".index.npz", ".topk-ids.npy"):
                (w / f"shard-{j:05d}{suffix}").write_text(f"{i}{j}{suffix}")
            shards.append({"name": f"shard-{j:05d}", "n_tokens": 10, "topk": 32})
        (w / "manifest.json").write_text(json.dumps({"format": 2, "target": "t.gguf", "shards": shards,
                                                     "done": [f"k{i}"], "n_tokens": 10 * (i + 1),
                                                     "n_answer_tokens": 4 * (i + 1), "bytes": 100, "seconds": 5.0 + i,
                                                     "topk": 32}))
    man = gpu_run.merge_captures(ws, tmp_path / "data")
    assert [s["name"] for s in man["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
    assert (man["n_tokens"], man["n_answer_tokens"], man["bytes"], man["seconds"]) == (30, 12, 200, 6.0)
    assert man["done"] == ["k0", "k1"] and man["topk"] == 32
    assert (tmp_path / "data" / "shard-00002.topk-ids.npy").read_text() == "11.topk-ids.npy"
    assert json.loads((tmp_path / "data" / "manifest.json").read_text()) == man
    with pytest.raises(RuntimeError, match="before the capture deadline"):
        gpu_run.merge_captures([ws[2]], tmp_path / "none")


def test_the_plan_gives_a_finished_phase_s_slack_to_the_rest(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: now[0])
    p = gpu_run.Plan(9.0, ["build", "capture", "train", "export"])
    assert p.start("build") == pytest.approx(180)
    now[0] = 60.0  # the build was done after one minute: capture gets its share of 8 minutes
    assert p.start("capture") == pytest.approx(480 * 3 / 6)
    now[0] = 540.0  # past the end: export still runs, with no time of its own
    p.start("train")
    assert p.start("export") == 0.0


def test_config_fields_are_passed_only_where_they_exist():
    kw = gpu_run._fields(CaptureConfig, target_layers=(2,), n_seq=256, no_such_field=1)
    assert kw == {"target_layers": (2,), "n_seq": 256}
    assert gpu_run._overrides(["n_seq=256", "passes=null", "device=cuda", "lr=3e-4"]) == {
        "n_seq": 256, "passes": None, "device": "cuda", "lr": 3e-4}


def test_the_build_script_is_the_patched_cuda_build():
    s = gpu_machine.llama_build_script(Path("/x/src"))
    assert "-DGGML_CUDA=on" in s and "-DGGML_BATCH_INVARIANT=ON" in s and "-DGGML_LLAMAFILE=OFF" in s
    assert "-mno-amx-tile" in s and "cmake --install" in s


def test_trimming_drops_what_a_cuda_build_never_reads(tmp_path):
    L = tmp_path / "vendor" / "llama.cpp"
    for d in ("docs", "models", "tools/server", "tools/mtmd/models", "ggml/src/ggml-metal", "ggml/src/ggml-cuda",
              "ggml/src/ggml-cpu", "src/models", "common", "vendor/miniaudio", "tests"):
        (L / d).mkdir(parents=True)
        (L / d / "f.c").write_text("x" * 10)
    (L / "ggml/src/ggml-alloc.c").write_text("y")
    (L / "tools/CMakeLists.txt").write_text("z")
    (tmp_path / "examples").mkdir()
    gone = {p.relative_to(tmp_path).as_posix() for p in gpu_pack.dropped(tmp_path)}
    assert gone == {"examples", "vendor/llama.cpp/docs", "vendor/llama.cpp/models", "vendor/llama.cpp/tests",
                    "vendor/llama.cpp/tools/server", "vendor/llama.cpp/ggml/src/ggml-metal"}
    assert gpu_pack.trim(tmp_path) == 50  # five folders of one 10-byte file, one empty
    assert (L / "src/models/f.c").exists() and (L / "tools/mtmd/models/f.c").exists()
    assert (L / "ggml/src/ggml-alloc.c").exists() and (L / "ggml/src/ggml-cuda/f.c").exists()


def test_the_call_plan_fits_the_carry_limit():
    room = 27 << 20
    sizes = gpu_pack.model_parts(98_362_432, room, room - (6 << 20))
    assert len(sizes) == 4 and sum(sizes) == 98_362_432 and sizes[0] <= room - (6 << 20)
    names = [f"m.gguf.part-{i}-of-4" for i in range(1, 5)]
    plan = gpu_pack.calls(names, "m.gguf.parts.json", [".gpu/sdist.tar.gz", ".gpu/whl"])
    steps = [c["command"].split("gpu_run.py ")[1].split()[0] for c in plan]
    assert steps == ["prepare", "stash", "stash", "run"]
    assert all(len(c["command"]) <= 2000 and len(c["carry"]) <= 8 for c in plan)
    assert sorted(sum((c["carry"] for c in plan), [])) == sorted(
        [".gpu/sdist.tar.gz", ".gpu/whl", ".gpu/model/m.gguf.parts.json"] + [f".gpu/model/{n}" for n in names])
    with pytest.raises(SystemExit, match="calls"):
        gpu_pack.model_parts(10 * room, room, room)


def test_pack_dry_run_lists_the_carry(capsys):
    from llama_source import pinned_version, sdist

    if not sdist(pinned_version()).exists() or not gpu_pack.DEFAULT_TARGET.exists():
        pytest.skip("the pinned sdist or the SmolLM2 GGUF is not cached here")
    assert gpu_pack.main(["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "drop vendor/llama.cpp/models" in text and "call 4:" in text
    for line in text.splitlines():
        if line.startswith("call "):
            assert int(line.split()[2]) < gpu_pack.CARRY_LIMIT
