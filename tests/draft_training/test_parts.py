"""draft_training/parts.py: files cut into bounded parts with a sha256 manifest and joined back,
refusing altered or missing parts and splits over the part limit."""

from __future__ import annotations

import json
import os

import pytest

from draft_training import parts
from draft_training.parts import PartsError, join, manifest_path, split


@pytest.fixture
def blob(tmp_path):
    p = tmp_path / "draft.gguf"
    p.write_bytes(os.urandom(10_001))
    return p


def test_round_trip_with_parts_under_the_limit(blob, tmp_path):
    got = split(blob, tmp_path / "out", max_bytes=3000)
    assert [p.name for p in got] == [f"draft.gguf.part-{i}-of-4" for i in range(1, 5)]
    assert all(p.stat().st_size <= 3000 for p in got)
    assert sum(p.stat().st_size for p in got) == blob.stat().st_size
    dest = join(manifest_path(tmp_path / "out", "draft.gguf"), tmp_path / "back" / "draft.gguf")
    assert dest.read_bytes() == blob.read_bytes()


def test_a_small_file_is_one_part(blob, tmp_path):
    assert len(split(blob, tmp_path / "out")) == 1


def test_an_altered_part_is_refused(blob, tmp_path):
    got = split(blob, tmp_path / "out", max_bytes=4000)
    data = bytearray(got[1].read_bytes())
    data[7] ^= 1
    got[1].write_bytes(bytes(data))
    with pytest.raises(PartsError, match="does not match its sha256"):
        join(manifest_path(tmp_path / "out", "draft.gguf"), tmp_path / "j.gguf")
    assert not (tmp_path / "j.gguf").exists()


def test_a_wrong_whole_digest_is_refused(blob, tmp_path):
    split(blob, tmp_path / "out", max_bytes=4000)
    m = manifest_path(tmp_path / "out", "draft.gguf")
    man = json.loads(m.read_text())
    man["sha256"] = "0" * 64
    m.write_text(json.dumps(man))
    with pytest.raises(PartsError, match="joined draft.gguf does not match"):
        join(m, tmp_path / "j.gguf")
    assert not (tmp_path / "j.gguf").exists() and not list(tmp_path.glob("j.gguf.*"))


def test_missing_and_short_parts(blob, tmp_path):
    got = split(blob, tmp_path / "out", max_bytes=4000)
    m = manifest_path(tmp_path / "out", "draft.gguf")
    got[0].write_bytes(got[0].read_bytes()[:-1])
    with pytest.raises(PartsError, match="bytes, the manifest says"):
        join(m, tmp_path / "j.gguf")
    got[2].unlink()
    assert join(m, tmp_path / "j.gguf", missing_ok=True) is None
    with pytest.raises(PartsError, match="are missing"):
        join(m, tmp_path / "j.gguf")


def test_more_parts_than_allowed_is_refused(blob, tmp_path):
    with pytest.raises(PartsError, match="more than the 8 allowed"):
        split(blob, tmp_path / "out", max_bytes=1000)
    assert not (tmp_path / "out").exists()
    assert len(split(blob, tmp_path / "ok", max_bytes=1000, max_parts=11)) == 11


def test_cli(blob, tmp_path, capsys):
    assert parts.main(["split", str(blob), str(tmp_path / "o"), "--max-bytes", "4kB"]) == 0
    assert parts.main(["join", str(manifest_path(tmp_path / "o", blob.name)), str(tmp_path / "b")]) == 0
    assert (tmp_path / "b").read_bytes() == blob.read_bytes()
    assert parts.main(["split", str(blob), str(tmp_path / "x"), "--max-bytes", "100"]) == 2
    assert "allowed" in capsys.readouterr().err
